//! The one child-process runner of command hooks and the `bash` tool.
//!
//! * The child runs in its own process group, with stdin, stdout and stderr piped; stdin is
//!   written and both outputs read (capped) beside the wait, so a child that never reads its
//!   input or prints without end cannot stall anything.
//! * One deadline, taken before the spawn, covers the run: at the deadline (or on
//!   cancellation) the child's descendants found through `/proc`, then its process group, get
//!   `SIGKILL`, and the pipes are closed.
//! * The direct child's exit status is the answer as soon as it exits. Its group is killed at
//!   once (background leftovers), the pipes get a short drain ([`DRAIN`]) for what was written
//!   before the exit; if they are still open then, a process outside the group holds them (it
//!   left with `setsid`): those holders are found through `/proc` and killed, and after at most
//!   [`REAP_ROUNDS`] such rounds our ends are closed whatever remains. The answer never comes
//!   later than about [`DRAIN`] + [`REAP_ROUNDS`] × [`REAP_DRAIN`] after the exit.
//! * Dropping a run before it ended kills the group and whatever escaped it in the same way.
//! * [`Running::finish_watching`] also hands the first line of stdout, as soon as it is
//!   complete, to a [`FirstLine`] callback, which may move the deadline (Claude Code's
//!   `{"async": true, "asyncTimeout": ms}` first line).
//!
//! A descendant that left the group, closed or redirected every pipe it inherited, and lost its
//! ancestry (its parent exited) before the answer is not found: it keeps running. That is how a
//! daemon detaches on purpose (`setsid cmd >/dev/null 2>&1 &`).

use std::future::Future;
use std::io::{self, PipeWriter};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::task::Context;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::reap::{self, kill_escaped, Scope, Trace};
use super::Captured;

/// How long the pipes may stay open after the direct child exited before the processes holding
/// them are looked for.
pub(crate) const DRAIN: Duration = Duration::from_millis(150);
/// How long the pipes get after each round of killing the processes that hold them.
pub(crate) const REAP_DRAIN: Duration = Duration::from_millis(50);
/// Rounds of looking for and killing pipe holders before our ends are closed anyway.
pub(crate) const REAP_ROUNDS: usize = 3;
/// Room made for a stream's first read; the kept bytes then grow as a vector does, by
/// doubling. Past the cap, reads go to a scratch buffer of [`READ_MAX`] bytes.
const READ_FIRST: usize = 256;
/// See [`READ_FIRST`].
const READ_MAX: usize = 64 * 1024;

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The direct child exited (or was killed by a signal from elsewhere).
    Exited {
        /// Its status.
        status: ExitStatus,
        /// What it wrote on stdout (capped).
        stdout: Captured,
        /// What it wrote on stderr (capped).
        stderr: Captured,
    },
    /// The deadline passed; everything found was killed.
    TimedOut {
        /// What it wrote on stdout before.
        stdout: Captured,
        /// What it wrote on stderr before.
        stderr: Captured,
    },
    /// The token fired; everything found was killed.
    Cancelled,
    /// Waiting for the child failed.
    WaitFailed(io::Error),
}

/// A spawned child, not yet waited for. Dropping it kills the group and what escaped it.
#[derive(Debug)]
pub(crate) struct Running {
    child: Child,
    /// Our end of the child's stdin, when input will be given.
    input: Option<PipeWriter>,
    guard: Guard,
}

/// Spawns `command` in its own process group with piped stdio (stdin piped only when `input`
/// will be given). The caller configures program, arguments, cwd, environment and any
/// `pre_exec`.
///
/// The stdin pipe is made here rather than by the runtime: a pipe is writable from the start,
/// and registering it with the runtime's reactor would wake a worker parked on it for nothing.
/// [`write_input`] writes what the pipe takes at once without the reactor (an event's input
/// usually fits its buffer), and registers it only for a rest.
pub(crate) fn spawn(command: &mut Command, with_input: bool) -> io::Result<Running> {
    let (stdin, input) = if with_input {
        let (reader, writer) = std::io::pipe()?;
        (Stdio::from(reader), Some(writer))
    } else {
        (Stdio::null(), None)
    };
    command
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // The child's start time is bounded from below by the clock now: reading it from the
    // child's `/proc` entry would wait until its `exec` is through.
    let since = reap::boot_ticks();
    let spawned = command.spawn();
    // The child has its copy of the read end; the command would keep ours open.
    command.stdin(Stdio::null());
    let child = spawned?;
    let pid = child.id().and_then(|id| i32::try_from(id).ok());
    let trace = pid.map(|pid| {
        let mut fds = Vec::new();
        if let Some(s) = &input {
            fds.push(s.as_fd());
        }
        if let Some(s) = &child.stdout {
            fds.push(s.as_fd());
        }
        if let Some(s) = &child.stderr {
            fds.push(s.as_fd());
        }
        Trace::of(pid, since, &fds)
    });
    Ok(Running {
        child,
        input,
        guard: Guard {
            trace,
            settled: false,
        },
    })
}

/// Kills the group; on drop before the run settled, whatever escaped it and then the group.
#[derive(Debug)]
struct Guard {
    trace: Option<Trace>,
    settled: bool,
}

impl Guard {
    fn kill_group(&self) {
        if let Some(t) = &self.trace {
            // ESRCH (already gone) is the common, harmless case.
            let _ = killpg(Pid::from_raw(t.pid), Signal::SIGKILL);
        }
    }

    /// Kills descendants and pipe holders (see [`kill_escaped`]); returns how many.
    fn kill_escaped(&self, scope: Scope) -> usize {
        self.trace.as_ref().map_or(0, |t| kill_escaped(t, scope))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // A settled run's group was killed when the run ended (`kill_and_drain`); killing it
        // again could only reach a new group that took the same id since.
        if !self.settled {
            self.kill_escaped(Scope::TreeAndPipes);
            self.kill_group();
        }
    }
}

/// Called once with the first line of a run's stdout (without its newline) as soon as it is
/// complete, or with what was read when stdout ends or fills the cap first; a returned instant
/// replaces the run's deadline.
pub(crate) type FirstLine = Box<dyn FnOnce(&[u8]) -> Option<Instant> + Send>;

/// Hands the first line of stdout to its [`FirstLine`] callback, once.
struct LineWatch<'a> {
    callback: Option<FirstLine>,
    /// How far stdout was searched for a newline.
    scanned: usize,
    deadline: &'a watch::Sender<Instant>,
}

impl LineWatch<'_> {
    /// Looks at what stdout holds so far (`ended`: all of it).
    fn seen(&mut self, out: &Captured, cap: usize, ended: bool) {
        if self.callback.is_none() {
            return;
        }
        let fresh = &out.bytes[self.scanned.min(out.bytes.len())..];
        let line = match fresh.iter().position(|b| *b == b'\n') {
            Some(at) => &out.bytes[..self.scanned + at],
            None if ended || out.bytes.len() >= cap => &out.bytes[..],
            None => {
                self.scanned = out.bytes.len();
                return;
            }
        };
        if let Some(moved) = self.callback.take().and_then(|callback| callback(line)) {
            self.deadline.send_replace(moved);
        }
    }
}

/// Reads a stream into `out` until its end, keeping `cap` bytes and counting the rest, and shows
/// each step to `watch`. What was read stays in `out` if the read is dropped half-way.
async fn read_into(
    stream: Option<impl AsyncRead + Unpin>,
    out: &mut Captured,
    cap: usize,
    mut watch: Option<&mut LineWatch<'_>>,
) {
    let Some(mut stream) = stream else {
        return;
    };
    // Read straight into the kept bytes while the cap leaves room (neither buffer is zeroed
    // first; the kept bytes start small, as most runs print a line or nothing, and double),
    // and past it into a scratch buffer of a fixed size, counted and dropped.
    let mut scratch = Vec::new();
    loop {
        let buf = if out.bytes.len() < cap {
            if out.bytes.len() == out.bytes.capacity() {
                out.bytes.reserve(READ_FIRST);
            }
            &mut out.bytes
        } else {
            scratch.clear();
            scratch.reserve(READ_MAX);
            &mut scratch
        };
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => out.total += n,
        }
        out.bytes.truncate(cap);
        if let Some(w) = watch.as_deref_mut() {
            w.seen(out, cap, false);
        }
    }
    if let Some(w) = watch {
        w.seen(out, cap, true);
    }
}

/// Writes `input` and closes the pipe; EPIPE (the child exited without reading) is no error.
/// What the pipe takes at once is written without the runtime's reactor; only a rest that does
/// not fit its buffer registers it and is written as the child reads.
async fn write_input(pipe: Option<PipeWriter>, input: &[u8]) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let written = match write_now(&mut pipe, input) {
        Ok(n) if n < input.len() => n,
        // All of it, or the child is gone: dropping our end closes the pipe.
        _ => return,
    };
    let stdin = std::process::ChildStdin::from(OwnedFd::from(pipe));
    match tokio::process::ChildStdin::from_std(stdin) {
        Ok(mut stdin) => {
            let _ = stdin.write_all(&input[written..]).await;
            let _ = stdin.shutdown().await;
        }
        Err(e) => tracing::warn!(
            written,
            of = input.len(),
            error = %e,
            "a child's input could not be written past the pipe's buffer; it gets end-of-file there"
        ),
    }
}

/// Writes what the pipe takes without blocking; how much that was.
fn write_now(pipe: &mut PipeWriter, input: &[u8]) -> io::Result<usize> {
    use std::io::Write;
    let fd = pipe.as_fd();
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    let mut written = 0;
    while written < input.len() {
        match pipe.write(&input[written..]) {
            Ok(0) => break,
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// Polls `fut` once; true when it finished.
fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    fut.poll(&mut cx).is_ready()
}

/// [`kill_escaped`] off the async workers (inline when the runtime cannot take blocking work).
async fn kill_escaped_blocking(trace: Option<Trace>, scope: Scope) -> usize {
    let Some(trace) = trace else {
        return 0;
    };
    let copy = trace.clone();
    match tokio::task::spawn_blocking(move || kill_escaped(&copy, scope)).await {
        Ok(n) => n,
        Err(_) => kill_escaped(&trace, scope),
    }
}

/// Drives `io` until it ends or `until`; a last poll takes what is already buffered.
async fn drain<F: Future + ?Sized>(mut io: Pin<&mut F>, until: Instant) -> bool {
    if tokio::time::timeout_at(until, io.as_mut()).await.is_ok() {
        return true;
    }
    poll_once(io)
}

impl Running {
    /// Writes `input` to the child's stdin, reads its output (`cap` bytes of each stream), and
    /// waits for it until `deadline` or `cancel`, as the module documentation describes.
    pub async fn finish(
        self,
        input: &[u8],
        cap: usize,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Ended {
        self.finish_watching(input, cap, deadline, cancel, None)
            .await
    }

    /// [`finish`](Self::finish), handing the first line of stdout to `first_line` as soon as it
    /// is complete; the deadline it may return replaces `deadline`.
    pub async fn finish_watching(
        mut self,
        input: &[u8],
        cap: usize,
        deadline: Instant,
        cancel: &CancellationToken,
        first_line: Option<FirstLine>,
    ) -> Ended {
        let mut stdout = Captured::default();
        let mut stderr = Captured::default();
        let (out_pipe, err_pipe, in_pipe) = (
            self.child.stdout.take(),
            self.child.stderr.take(),
            self.input.take(),
        );
        let (deadline_tx, mut deadline_rx) = watch::channel(deadline);
        let mut line_watch = first_line.map(|callback| LineWatch {
            callback: Some(callback),
            scanned: 0,
            deadline: &deadline_tx,
        });
        let phase = {
            let io = async {
                tokio::join!(
                    read_into(out_pipe, &mut stdout, cap, line_watch.as_mut()),
                    read_into(err_pipe, &mut stderr, cap, None),
                    write_input(in_pipe, input),
                );
            };
            tokio::pin!(io);
            let (phase, io_done) =
                wait_for_end(&mut self.child, io.as_mut(), &mut deadline_rx, cancel).await;
            let io_done = kill_and_drain(&self.guard, &phase, io.as_mut(), io_done).await;
            reap_pipe_holders(&self.guard, io.as_mut(), io_done).await;
            phase
            // `io` drops here: our ends of the pipes close.
        };
        self.guard.settled = true;
        phase.ended(stdout, stderr)
    }
}

/// Drives `io` beside the wait until the child exits, the deadline (its latest value) passes or
/// `cancel` fires; returns which, and whether `io` ended.
async fn wait_for_end<F: Future + ?Sized>(
    child: &mut Child,
    mut io: Pin<&mut F>,
    deadline: &mut watch::Receiver<Instant>,
    cancel: &CancellationToken,
) -> (Phase, bool) {
    let mut io_done = false;
    let phase = loop {
        let until = *deadline.borrow_and_update();
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break Phase::Cancelled,
            status = child.wait() => break Phase::Exited(status),
            _ = tokio::time::sleep_until(until) => break Phase::Deadline,
            _ = &mut io, if !io_done => io_done = true,
            // A new deadline: wait again with it.
            Ok(()) = deadline.changed() => {}
        }
    };
    (phase, io_done)
}

/// Kills what `phase` leaves behind (the group; a live child's whole tree first) and gives the
/// pipes a short drain; returns whether `io` ended.
async fn kill_and_drain<F: Future + ?Sized>(
    guard: &Guard,
    phase: &Phase,
    io: Pin<&mut F>,
    io_done: bool,
) -> bool {
    match phase {
        Phase::Exited(_) => {
            // The answer stands; leftovers in the group go now, and the pipes get a
            // short drain for what was written before the exit.
            guard.kill_group();
            io_done || drain(io, Instant::now() + DRAIN).await
        }
        Phase::Deadline | Phase::Cancelled => {
            // The child is alive: its whole tree, then its group.
            kill_escaped_blocking(guard.trace.clone(), Scope::TreeAndPipes).await;
            guard.kill_group();
            io_done || drain(io, Instant::now() + REAP_DRAIN).await
        }
    }
}

/// While `io` has not ended, kills the processes outside the group that hold a pipe, for at
/// most [`REAP_ROUNDS`] rounds; warns if the pipes are still held after them.
async fn reap_pipe_holders<F: Future + ?Sized>(
    guard: &Guard,
    mut io: Pin<&mut F>,
    mut io_done: bool,
) {
    // Still open: something outside the group holds a pipe.
    let mut rounds = 0;
    while !io_done && rounds < REAP_ROUNDS {
        rounds += 1;
        let killed = kill_escaped_blocking(guard.trace.clone(), Scope::Pipes).await;
        tracing::debug!(
            killed,
            round = rounds,
            "killed processes holding a child's pipes"
        );
        io_done = drain(io.as_mut(), Instant::now() + REAP_DRAIN).await;
    }
    if !io_done {
        tracing::warn!(
            pid = guard.trace.as_ref().map(|t| t.pid),
            "a child's pipes are still held open by a process that could not be found \
             or killed; closing them"
        );
    }
}

enum Phase {
    Exited(io::Result<ExitStatus>),
    Deadline,
    Cancelled,
}

impl Phase {
    /// How the run ended, given how the wait ended and what was read.
    fn ended(self, stdout: Captured, stderr: Captured) -> Ended {
        match self {
            Phase::Exited(Ok(status)) => Ended::Exited {
                status,
                stdout,
                stderr,
            },
            Phase::Exited(Err(e)) => Ended::WaitFailed(e),
            Phase::Deadline => Ended::TimedOut { stdout, stderr },
            Phase::Cancelled => Ended::Cancelled,
        }
    }
}
