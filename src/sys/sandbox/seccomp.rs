//! The seccomp filters that keep a command off the network, compiled in the parent.
//!
//! * `socket(2)` with a domain other than `AF_UNIX` fails with `EACCES`: no IP, netlink, raw or
//!   packet socket can be made, so no connection either way and no UDP.
//! * `io_uring_setup(2)` fails with `EPERM`: io_uring could create sockets without `socket(2)`.
//! * On x86_64, every x32 system call (number with bit 30 set, same audit arch) fails with
//!   `EPERM`: its `socket` has another number that the first rule would not see.
//!
//! A system call of another architecture (i386 on x86_64, arm32 on aarch64) kills the process:
//! seccompiler checks the architecture first.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::SandboxError;

/// The architecture the filters are compiled for, as the crate was built.
#[cfg(target_arch = "x86_64")]
const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
#[cfg(target_arch = "aarch64")]
const ARCH: Option<TargetArch> = Some(TargetArch::aarch64);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCH: Option<TargetArch> = None;

/// The filters to install, in order.
pub(crate) fn network_filters() -> Result<Vec<BpfProgram>, SandboxError> {
    let arch = ARCH.ok_or(SandboxError::NetworkFilterUnsupported {
        arch: std::env::consts::ARCH,
    })?;
    let not_unix = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )
    .map_err(seccomp_error)?])
    .map_err(seccomp_error)?;
    let sockets = compile([(libc::SYS_socket, vec![not_unix])], libc::EACCES, arch)?;
    let io_uring = compile([(libc::SYS_io_uring_setup, Vec::new())], libc::EPERM, arch)?;
    let filters = vec![deny_x32(sockets)?, io_uring];
    if filters.iter().any(|f| f.len() > usize::from(u16::MAX)) {
        return Err(SandboxError::Seccomp("a filter is too long".to_owned()));
    }
    Ok(filters)
}

/// One filter: the listed calls (under their rules; no rule: always) fail with `errno`.
fn compile<const N: usize>(
    rules: [(i64, Vec<SeccompRule>); N],
    errno: i32,
    arch: TargetArch,
) -> Result<BpfProgram, SandboxError> {
    let errno = u32::try_from(errno).map_err(|e| SandboxError::Seccomp(e.to_string()))?;
    let filter = SeccompFilter::new(
        BTreeMap::from(rules),
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        arch,
    )
    .map_err(seccomp_error)?;
    BpfProgram::try_from(filter).map_err(seccomp_error)
}

fn seccomp_error(e: seccompiler::BackendError) -> SandboxError {
    SandboxError::Seccomp(e.to_string())
}

/// Index of the instruction that loads the system call number: after seccompiler's three-step
/// architecture check.
const LOAD_NR_AT: usize = 3;

/// On x86_64, inserts after the number load: `if nr >= 0x4000_0000 return ERRNO(EPERM)`.
fn deny_x32(mut program: BpfProgram) -> Result<BpfProgram, SandboxError> {
    if !cfg!(target_arch = "x86_64") {
        return Ok(program);
    }
    // BPF opcodes (linux/bpf_common.h) as `sock_filter` codes.
    const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const BPF_JMP_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let loads_nr = program
        .get(LOAD_NR_AT)
        .is_some_and(|i| i.code == BPF_LD_W_ABS && i.k == 0);
    if !loads_nr {
        return Err(SandboxError::Seccomp(
            "unexpected filter layout: cannot add the x32 guard".to_owned(),
        ));
    }
    let errno = u32::try_from(libc::EPERM).unwrap_or(1);
    let guard = [
        sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | errno,
        },
    ];
    program.splice(LOAD_NR_AT + 1..LOAD_NR_AT + 1, guard);
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_arch() {
        let filters = network_filters().unwrap();
        assert_eq!(filters.len(), 2);
        assert!(filters.iter().all(|f| !f.is_empty()));
        if cfg!(target_arch = "x86_64") {
            // The x32 guard sits right after the load of the system call number.
            assert_eq!(filters[0][LOAD_NR_AT + 1].k, 0x4000_0000);
            assert_eq!(
                filters[0][LOAD_NR_AT + 2].k,
                libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
            );
        }
    }
}
