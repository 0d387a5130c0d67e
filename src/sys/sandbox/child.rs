//! The child's side: what runs between `fork` and `exec`.
//!
//! Only async-signal-safe system calls on memory the parent prepared: no allocation, no lock
//! (another thread of the parent may have held one at `fork`). `io::Error::last_os_error` only
//! reads `errno`.

// Unsafe code here: the confinement between fork and exec: raw, async-signal-safe system calls
// only. Each block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use seccompiler::BpfProgram;

/// Applies the confinement to the calling (child) process: no new privileges, the seccomp
/// filters, then the Landlock ruleset. Without a ruleset it fails (closed).
pub(super) fn confine(ruleset: Option<&OwnedFd>, filters: &[BpfProgram]) -> io::Result<()> {
    let Some(ruleset) = ruleset else {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    };
    // SAFETY: plain prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for filter in filters {
        let program = libc::sock_fprog {
            // The parent checked every filter fits (seccompiler caps them at 4096).
            len: filter.len() as libc::c_ushort,
            // seccompiler's `sock_filter` is `repr(C)` with the kernel's layout.
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `program` points at a live filter; the kernel copies it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &program as *const libc::sock_fprog,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: the ruleset fd is open (the parent keeps it until the spawn returned).
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
