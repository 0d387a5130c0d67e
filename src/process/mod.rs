//! Child processes that must never outlive their call: a process-group kill guard and capped,
//! concurrent reading of a child's output. Used by the `bash` tool and Claude Code command hooks.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;
use tokio::task::JoinHandle;

/// Kills a process group with `SIGKILL` when dropped, so whatever way a call ends (done, timed
/// out, cancelled, or its future dropped), nothing of the group survives it.
#[derive(Debug)]
pub(crate) struct GroupGuard(Option<Pid>);

impl GroupGuard {
    /// Guards the group led by `pid` (a child spawned with `process_group(0)`).
    pub fn new(pid: Option<u32>) -> Self {
        Self(pid.and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw))
    }

    /// Kills the group now.
    pub fn kill(self) {
        drop(self);
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // ESRCH (already gone) is the common, harmless case.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// What was read from a stream: the first `cap` bytes, and how many there were in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Captured {
    pub bytes: Vec<u8>,
    pub total: usize,
}

impl Captured {
    /// The kept bytes as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// The kept bytes as text, with a note when some were cut.
    pub fn text_with_note(&self) -> String {
        let mut text = self.text();
        if self.total > self.bytes.len() {
            text.push_str(&format!("\n[cut: {} bytes in all]", self.total));
        }
        text
    }
}

/// Reads a stream to its end, keeping the first `cap` bytes and counting the rest, so a child that
/// prints without end neither blocks on a full pipe nor fills memory.
pub(crate) async fn read_capped(mut stream: impl AsyncRead + Unpin, cap: usize) -> Captured {
    let mut out = Captured::default();
    let mut buf = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        out.total += n;
        let room = cap.saturating_sub(out.bytes.len());
        out.bytes.extend_from_slice(&buf[..n.min(room)]);
    }
    out
}

/// A child's stdout and stderr, read beside its wait so that a full pipe never blocks it.
#[derive(Debug)]
pub(crate) struct Output {
    stdout: Option<JoinHandle<Captured>>,
    stderr: Option<JoinHandle<Captured>>,
}

impl Output {
    /// Starts reading the child's piped stdout and stderr, keeping `cap` bytes of each.
    pub fn read(child: &mut Child, cap: usize) -> Self {
        Self {
            stdout: child
                .stdout
                .take()
                .map(|s| tokio::spawn(read_capped(s, cap))),
            stderr: child
                .stderr
                .take()
                .map(|s| tokio::spawn(read_capped(s, cap))),
        }
    }

    /// Both streams, once they ended (kill the process group first, or a leftover holding a
    /// pipe open keeps them going).
    pub async fn collect(self) -> (Captured, Captured) {
        async fn one(task: Option<JoinHandle<Captured>>) -> Captured {
            match task {
                Some(t) => t.await.unwrap_or_default(),
                None => Captured::default(),
            }
        }
        (one(self.stdout).await, one(self.stderr).await)
    }
}
