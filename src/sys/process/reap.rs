//! Finding and killing what a child left behind outside its process group, through `/proc`.
//!
//! A process that left the group (`setsid`, `setpgid`) is out of reach of `killpg`. Two traces of
//! it remain that `/proc` shows:
//!
//! * **ancestry**, while its parent chain up to our child is alive (the child still runs: at a
//!   timeout or a cancellation);
//! * **our pipes**: a process that inherited the child's stdout, stderr or stdin still holds the
//!   pipe, which is what keeps a reader from ever seeing end-of-file.
//!
//! Only processes that started no earlier than the clock read just before our child was
//! spawned are looked at (`starttime` in `/proc/<pid>/stat`), and never this process. A fork of
//! this process that has not executed yet (another spawn in flight, which holds copies of every
//! pipe until its `exec` closes them) is skipped. Kills go through a pidfd opened before the
//! process is checked again, so a pid reused in between is never signalled.

// Unsafe code here: pidfd_open and the kill after it: system calls with no safe wrapper in our
// dependencies. Each block says why it is sound.
#![allow(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

/// What identifies a child and its pipes, taken at spawn.
#[derive(Debug, Clone)]
pub(crate) struct Trace {
    /// The direct child.
    pub pid: i32,
    /// No later than its start time (clock ticks since boot, read just before the spawn),
    /// `None` when the clock could not tell.
    pub start: Option<u64>,
    /// The inodes of the pipes it got as stdin, stdout and stderr.
    pub pipes: Vec<u64>,
}

impl Trace {
    /// The trace of a just-spawned child with these pipe ends (ours); `start` is
    /// [`boot_ticks`] read before the spawn.
    pub fn of(pid: i32, start: Option<u64>, pipes: &[BorrowedFd<'_>]) -> Self {
        let pipes = pipes.iter().filter_map(|fd| pipe_inode(*fd)).collect();
        Self { pid, start, pipes }
    }
}

/// Now, in the unit of `starttime` in `/proc/<pid>/stat`: clock ticks since boot. Read before a
/// spawn, it is a lower bound of the child's start time, known without reading the child's
/// `/proc` entry, which would wait until the child's `exec` is through.
pub(crate) fn boot_ticks() -> Option<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } != 0 {
        return None;
    }
    // SAFETY: sysconf takes a name and returns its value or -1.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz)
        .ok()
        .filter(|&hz| hz > 0 && hz <= 1_000_000_000)?;
    let nanos = u128::from(u64::try_from(now.tv_sec).ok()?) * 1_000_000_000
        + u128::from(u64::try_from(now.tv_nsec).ok()?);
    // The kernel rounds down to whole ticks; one tick less keeps this a lower bound whatever
    // the rounding of a tick rate that does not divide a second.
    let ticks = u64::try_from(nanos * u128::from(hz) / 1_000_000_000).ok()?;
    Some(ticks.saturating_sub(1))
}

/// The fields of `/proc/<pid>/stat` used here.
#[derive(Debug, Clone, Copy)]
struct Stat {
    ppid: i32,
    start: u64,
}

/// `/proc/<pid>/stat`, read into a buffer on the stack.
///
/// The line is a few hundred bytes and usually comes in one `read`; reading it as a file of
/// unknown size would cost a `statx` and a growing series of reads.
fn stat(pid: i32) -> Option<Stat> {
    use std::io::Read;
    let mut file = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut buf = [0u8; 1024];
    let mut len = 0;
    // The line ends with a newline; a short read before it is read on from where it stopped.
    while len < buf.len() && !buf[..len].ends_with(b"\n") {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_stat(std::str::from_utf8(&buf[..len]).ok()?)
}

/// The fields of a `/proc/<pid>/stat` line: the name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): ppid is field 4, starttime field 22.
    let mut fields = rest.split_whitespace();
    let ppid = fields.nth(1)?.parse().ok()?;
    let start = fields.nth(17)?.parse().ok()?;
    Some(Stat { ppid, start })
}

fn pipe_inode(fd: BorrowedFd<'_>) -> Option<u64> {
    nix::sys::stat::fstat(fd)
        .ok()
        .filter(|s| s.st_mode & libc::S_IFMT == libc::S_IFIFO)
        .map(|s| s.st_ino)
}

/// Whether `pid` holds one of `inodes` open.
fn holds_pipe(pid: i32, inodes: &[u64]) -> bool {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten().any(|entry| {
        fs::read_link(entry.path()).is_ok_and(|target| {
            let target = target.to_string_lossy();
            target
                .strip_prefix("pipe:[")
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    })
}

/// A fork of this process that has not executed its program yet.
fn unexecuted_fork(pid: i32, me: i32, exe: &Option<PathBuf>, parent: i32) -> bool {
    parent == me
        && exe.is_some()
        && fs::read_link(format!("/proc/{pid}/exe")).ok().as_ref() == exe.as_ref()
}

/// Which escaped processes to look for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Descendants of the (living) child, and holders of its pipes.
    TreeAndPipes,
    /// Holders of its pipes only (the child exited; its orphans lost their ancestry).
    Pipes,
}

/// Kills, with `SIGKILL`, the processes started since the child that descend from it (with
/// [`Scope::TreeAndPipes`]) or hold one of its pipes. Returns how many were signalled.
/// Blocking (it reads `/proc`), but bounded by the processes started since the child.
pub(crate) fn kill_escaped(trace: &Trace, scope: Scope) -> usize {
    let Some(since) = trace.start else {
        return 0;
    };
    let me = std::process::id() as i32;
    let exe = fs::read_link("/proc/self/exe").ok();
    let Ok(proc_dir) = fs::read_dir("/proc") else {
        return 0;
    };
    let mut young: HashMap<i32, Stat> = HashMap::new();
    for entry in proc_dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Some(s) = stat(pid).filter(|s| s.start >= since) {
            young.insert(pid, s);
        }
    }
    let mut doomed: HashSet<i32> = HashSet::new();
    if scope == Scope::TreeAndPipes {
        // Descendants: follow parent links among the young processes up to the child.
        for &pid in young.keys() {
            let mut at = pid;
            for _ in 0..young.len() + 1 {
                if at == trace.pid {
                    doomed.insert(pid);
                    break;
                }
                match young.get(&at) {
                    Some(s) => at = s.ppid,
                    None => break,
                }
            }
        }
    }
    if !trace.pipes.is_empty() {
        for (&pid, s) in &young {
            if !doomed.contains(&pid)
                && !unexecuted_fork(pid, me, &exe, s.ppid)
                && holds_pipe(pid, &trace.pipes)
            {
                doomed.insert(pid);
            }
        }
    }
    doomed
        .into_iter()
        .filter(|&pid| young.get(&pid).is_some_and(|s| kill_checked(pid, s.start)))
        .count()
}

/// `SIGKILL` to `pid` if it is still the process that started at `start`: a pidfd pins the
/// process before the check, so a recycled pid is never hit. Without pidfds (before Linux 5.3),
/// a plain `kill` after the check.
fn kill_checked(pid: i32, start: u64) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        let same = stat(pid).is_some_and(|s| s.start == start);
        // SAFETY: plain kill with integer arguments.
        return same && unsafe { libc::kill(pid, libc::SIGKILL) } == 0;
    }
    // SAFETY: the syscall returned a fresh fd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    if stat(pid).is_none_or(|s| s.start != start) {
        return false;
    }
    // SAFETY: pidfd_send_signal with a valid pidfd, a signal number, no siginfo, no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let line = "4242 (a) b (c) S 17 4242 4242 0 -1 4194560 101 0 0 0 0 0 0 0 20 0 1 0 \
                    987654 2314240 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!((s.ppid, s.start), (17, 987654));
        let me = stat(std::process::id() as i32).unwrap();
        // SAFETY: getppid cannot fail.
        assert_eq!(me.ppid, unsafe { libc::getppid() });
        assert!(me.start > 0);
    }

    /// The clock read before a spawn is a lower bound of the child's `starttime`, in the same
    /// unit: a spawn's trace never leaves its own child out.
    #[test]
    fn boot_ticks_before_a_spawn_bound_the_childs_start_time() {
        let before = boot_ticks().expect("CLOCK_BOOTTIME");
        let mut child = std::process::Command::new("sleep")
            .arg("1")
            .spawn()
            .unwrap();
        let start = stat(child.id() as i32).unwrap().start;
        let after = boot_ticks().unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(before <= start, "{before} > {start}");
        // `boot_ticks` is one tick early on purpose.
        assert!(start <= after + 1, "{start} > {after} + 1");
        let me = stat(std::process::id() as i32).unwrap().start;
        assert!(me <= before);
    }
}
