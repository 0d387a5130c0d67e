//! Running one handler: a command (CC-3) or an HTTP endpoint, with its deadline enforced here,
//! parent-side. A command may go to the background (`async` in settings, or a first stdout
//! line `{"async": true}`): it then runs on as a [`Job`], bounded by its deadline.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::vars::{Dirs, PLUGIN_ROOT};
use crate::model::bounds::{deadline_after, MAX_TIMEOUT};
use crate::sys::process::run::{Ended, FirstLine};
use crate::sys::process::{self, Captured};

/// How a handler run ended, before its output is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Raw {
    /// The process exited (or an HTTP endpoint answered 2xx: code 0, the body as stdout).
    Exited {
        code: Option<i32>,
        stdout: Captured,
        stderr: Captured,
    },
    /// The deadline passed; the process group was killed.
    Timeout,
    /// The run was cancelled (the turn was); the process group was killed.
    Cancelled,
    /// The program could not start.
    SpawnError(String),
    /// An HTTP handler failed (connection, non-2xx status); a non-blocking error.
    HttpError(String),
}

/// Where and how a handler runs.
pub(crate) struct RunCx<'a> {
    pub input: &'a [u8],
    pub cwd: &'a Path,
    pub project_dir: &'a Path,
    pub timeout: Duration,
    pub cap: usize,
    pub cancel: &'a CancellationToken,
    pub mode: Mode,
    /// The settings' `env`: set for a command, read by header expansion.
    pub env: &'a BTreeMap<String, String>,
    /// A plugin's handler: the plugin's directory (`CLAUDE_PLUGIN_ROOT`).
    pub plugin_root: Option<&'a Path>,
}

/// Whether a command run may go to the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The event waits for it to the end.
    Wait,
    /// The event waits, unless its first stdout line is `{"async": true}`.
    Detachable,
    /// It goes to the background at once (`async` in settings).
    Background,
}

/// How a command run left the hook call.
pub(crate) enum Ran {
    /// It ended (or was killed) while the call waited.
    Done(Raw),
    /// It runs on in the background.
    Detached(Job),
}

/// A command run in the background: its task, and the token that kills it.
pub(crate) struct Job {
    /// The run; it ends at its deadline at the latest.
    pub handle: JoinHandle<Raw>,
    /// Fires to kill the run (its process group and what escaped it).
    pub cancel: CancellationToken,
    /// It went to the background by printing `{"async": true}` first (that line is not part
    /// of its output).
    pub first_line: bool,
}

/// Runs an HTTP handler and reports how it ended and how long it took.
pub(crate) async fn http(
    url: &str,
    headers: &[(String, String)],
    allowed_env_vars: &[String],
    cx: RunCx<'_>,
) -> (Raw, Duration) {
    let started = Instant::now();
    let raw = http_run(url, headers, allowed_env_vars, &cx).await;
    (raw, started.elapsed())
}

/// Runs a command handler: to its end, or until it goes to the background (see [`Mode`]);
/// reports how long the call waited.
pub(crate) async fn command(
    command: &str,
    args: Option<&[String]>,
    cx: RunCx<'_>,
) -> (Ran, Duration) {
    let started = Instant::now();
    // One deadline for spawn, run and output collection.
    let deadline = deadline_after(started, cx.timeout);
    let mut cmd = command_of(command, args, &cx);
    let running = match process::run::spawn(&mut cmd, true) {
        Ok(running) => running,
        Err(e) => {
            let raw = Raw::SpawnError(format!("cannot start `{command}`: {e}"));
            return (Ran::Done(raw), started.elapsed());
        }
    };
    // The child's exit status is the answer as soon as it exits; see `process::run` for what
    // happens to what it leaves behind.
    let ran = match cx.mode {
        Mode::Wait => {
            let ended = running.finish(cx.input, cx.cap, deadline, cx.cancel).await;
            Ran::Done(raw_of(ended, command))
        }
        Mode::Background => Ran::Detached(spawn_job(running, &cx, deadline, None, command)),
        Mode::Detachable => detachable(running, &cx, deadline, command).await,
    };
    (ran, started.elapsed())
}

/// The process of a command handler: exec form or `sh -c`, in the cwd, with Claude Code's
/// variables.
fn command_of(command: &str, args: Option<&[String]>, cx: &RunCx<'_>) -> tokio::process::Command {
    let dirs = Dirs {
        project_dir: Some(cx.project_dir),
        plugin_root: cx.plugin_root,
    };
    let mut cmd = match args {
        // Exec form: no shell; the directories are substituted as plain text.
        Some(args) => {
            let mut c = tokio::process::Command::new(dirs.exec(command));
            c.args(args.iter().map(|a| dirs.exec(a)));
            c
        }
        // Shell form: `${CLAUDE_PLUGIN_ROOT}` substituted, the rest expanded by the shell
        // from the environment.
        None => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(dirs.shell(command));
            c
        }
    };
    // The settings' `env` first: the variables hookbus sets win over it.
    cmd.current_dir(cx.cwd)
        .envs(cx.env)
        .env("CLAUDE_PROJECT_DIR", cx.project_dir)
        .env("CLAUDECODE", "1");
    if let Some(root) = cx.plugin_root {
        cmd.env(PLUGIN_ROOT, root);
    }
    cmd
}

/// How a run ended, in a handler's terms.
fn raw_of(ended: Ended, command: &str) -> Raw {
    match ended {
        Ended::Exited {
            status,
            stdout,
            stderr,
        } => Raw::Exited {
            code: status.code(),
            stdout,
            stderr,
        },
        Ended::TimedOut { .. } => Raw::Timeout,
        Ended::Cancelled => Raw::Cancelled,
        Ended::WaitFailed(e) => Raw::SpawnError(format!("waiting for `{command}`: {e}")),
    }
}

/// Finishes `running` on a task of its own, killed by the job's token; `first_line` watches its
/// stdout.
fn spawn_job(
    running: process::run::Running,
    cx: &RunCx<'_>,
    deadline: Instant,
    first_line: Option<FirstLine>,
    command: &str,
) -> Job {
    let cancel = CancellationToken::new();
    let run = finishing(running, cx, deadline, first_line, command, cancel.clone());
    Job {
        handle: tokio::spawn(run),
        cancel,
        first_line: false,
    }
}

/// The rest of a run, owning all it needs (so it can go to a task of its own), killed by
/// `token`.
fn finishing(
    running: process::run::Running,
    cx: &RunCx<'_>,
    deadline: Instant,
    first_line: Option<FirstLine>,
    command: &str,
    token: CancellationToken,
) -> impl Future<Output = Raw> + Send + 'static {
    let (input, cap, command) = (cx.input.to_vec(), cx.cap, command.to_owned());
    async move {
        let ended = running
            .finish_watching(&input, cap, deadline, &token, first_line)
            .await;
        raw_of(ended, &command)
    }
}

/// `Some(asyncTimeout)` when `line` is Claude Code's async announcement `{"async": true}`
/// (with `asyncTimeout` in milliseconds, at most [`MAX_TIMEOUT`]).
pub(crate) fn async_line(line: &[u8]) -> Option<Option<Duration>> {
    let value: serde_json::Value = serde_json::from_slice(line.trim_ascii()).ok()?;
    if value.get("async").and_then(serde_json::Value::as_bool) != Some(true) {
        return None;
    }
    let timeout = value
        .get("asyncTimeout")
        .and_then(serde_json::Value::as_f64)
        .filter(|ms| ms.is_finite() && *ms > 0.0)
        .map(|ms| Duration::from_secs_f64((ms / 1000.0).min(MAX_TIMEOUT.as_secs_f64())));
    Some(timeout)
}

/// Waits for a run whose first stdout line may send it to the background: then it is
/// detached, with `asyncTimeout` (from that moment) as its new deadline when given. The run is
/// killed if this wait is dropped or the call's token fires first.
async fn detachable(
    running: process::run::Running,
    cx: &RunCx<'_>,
    deadline: Instant,
    command: &str,
) -> Ran {
    enum Step {
        Cancelled,
        Line(bool),
        Done(Raw),
    }
    // The callback runs inside `run`'s poll, on this task, so a flag read after each poll of
    // `run` tells what the first line said. A channel would wake this very task while it runs,
    // which the runtime treats as a yield: it would wake another worker for nothing.
    let line = Arc::new(AtomicU8::new(LINE_UNSEEN));
    let watch = first_line_flag(&line);
    // Run here, on the hook's own task, until it goes to the background: most runs never do,
    // and a task of their own would cost them two more wake-ups. Dropping this wait drops the
    // run, which kills it.
    let cancel = CancellationToken::new();
    let mut run = Box::pin(finishing(
        running,
        cx,
        deadline,
        Some(watch),
        command,
        cancel.clone(),
    ));
    let mut cancelled = std::pin::pin!(cx.cancel.cancelled());
    let mut seen = false;
    loop {
        let step = std::future::poll_fn(|task| {
            if cancelled.as_mut().poll(task).is_ready() {
                return Poll::Ready(Step::Cancelled);
            }
            if let Poll::Ready(done) = run.as_mut().poll(task) {
                return Poll::Ready(Step::Done(done));
            }
            match line.load(Ordering::Relaxed) {
                LINE_UNSEEN => Poll::Pending,
                _ if seen => Poll::Pending,
                said => Poll::Ready(Step::Line(said == LINE_ASYNC)),
            }
        })
        .await;
        match step {
            Step::Line(false) => seen = true,
            Step::Line(true) => {
                return Ran::Detached(Job {
                    handle: tokio::spawn(run),
                    cancel,
                    first_line: true,
                });
            }
            Step::Cancelled => {
                cancel.cancel();
                run.await;
                return Ran::Done(Raw::Cancelled);
            }
            // It said it goes to the background, then ended in the same poll: still a
            // background run, finished already.
            Step::Done(done) if !seen && line.load(Ordering::Relaxed) == LINE_ASYNC => {
                return Ran::Detached(Job {
                    handle: tokio::spawn(std::future::ready(done)),
                    cancel,
                    first_line: true,
                });
            }
            Step::Done(done) => return Ran::Done(done),
        }
    }
}

/// The first-line callback of a detachable run: it stores what the line said in `line`, and
/// gives the run its new deadline when the line announces `asyncTimeout`.
fn first_line_flag(line: &Arc<AtomicU8>) -> FirstLine {
    let said = line.clone();
    Box::new(move |first| {
        let announced = async_line(first);
        let seen = if announced.is_some() {
            LINE_ASYNC
        } else {
            LINE_SYNC
        };
        said.store(seen, Ordering::Relaxed);
        announced
            .flatten()
            .map(|t| deadline_after(Instant::now(), t))
    })
}

/// What a detachable run's first stdout line said: nothing yet, a plain line, or Claude
/// Code's async announcement.
const LINE_UNSEEN: u8 = 0;
/// See [`LINE_UNSEEN`].
const LINE_SYNC: u8 = 1;
/// See [`LINE_UNSEEN`].
const LINE_ASYNC: u8 = 2;

/// A job task's result; a task that panicked or was aborted is a spawn error.
pub(crate) fn joined(done: Result<Raw, tokio::task::JoinError>, command: &str) -> Raw {
    done.unwrap_or_else(|e| Raw::SpawnError(format!("the run of `{command}` failed: {e}")))
}

/// Expands `$VAR` / `${VAR}` in a header value for allowed names, from the settings' `env` or
/// else the process environment; other names become empty.
fn expand_header(value: &str, allowed: &[String], env: &BTreeMap<String, String>) -> String {
    static VAR: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
            .expect("a valid pattern")
    });
    VAR.replace_all(value, |caps: &regex::Captures<'_>| {
        let name = caps
            .get(1)
            .or_else(|| caps.get(2))
            .map_or("", |m| m.as_str());
        if allowed.iter().any(|a| a == name) {
            env.get(name)
                .cloned()
                .unwrap_or_else(|| std::env::var(name).unwrap_or_default())
        } else {
            String::new()
        }
    })
    .into_owned()
}

async fn http_run(
    url: &str,
    headers: &[(String, String)],
    allowed: &[String],
    cx: &RunCx<'_>,
) -> Raw {
    let client = reqwest::Client::new();
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(cx.input.to_vec());
    for (name, value) in headers {
        request = request.header(name, expand_header(value, allowed, cx.env));
    }
    let cap = cx.cap;
    let call = async {
        let mut response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        if !status.is_success() {
            return Ok((status, Body::Kept(Vec::new())));
        }
        // The reply is read in chunks up to the cap (SEC-4): a larger one is not read further.
        if response.content_length().is_some_and(|n| n > cap as u64) {
            return Ok((status, Body::TooLarge));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            if body.len() + chunk.len() > cap {
                return Ok((status, Body::TooLarge));
            }
            body.extend_from_slice(&chunk);
        }
        Ok::<_, String>((status, Body::Kept(body)))
    };
    let deadline = deadline_after(Instant::now(), cx.timeout);
    let answer = tokio::select! {
        answer = call => answer,
        _ = tokio::time::sleep_until(deadline) => return Raw::Timeout,
        _ = cx.cancel.cancelled() => return Raw::Cancelled,
    };
    match answer {
        Err(e) => Raw::HttpError(format!("POST {url} failed: {e}")),
        Ok((status, _)) if !status.is_success() => {
            Raw::HttpError(format!("POST {url} answered {status}"))
        }
        Ok((_, Body::TooLarge)) => {
            tracing::warn!(
                url,
                cap,
                "an HTTP hook's reply is larger than the cap; not used"
            );
            Raw::HttpError(format!(
                "POST {url} answered more than {cap} bytes; the reply was cut there and is not \
                 used"
            ))
        }
        Ok((_, Body::Kept(body)))
            if !body.iter().all(u8::is_ascii_whitespace)
                && !serde_json::from_slice::<serde_json::Value>(&body)
                    .is_ok_and(|v| v.is_object()) =>
        {
            Raw::HttpError(format!(
                "POST {url} answered a body that is not a JSON object"
            ))
        }
        Ok((_, Body::Kept(body))) => Raw::Exited {
            code: Some(0),
            stdout: Captured {
                total: body.len(),
                bytes: body,
            },
            stderr: Captured::default(),
        },
    }
}

/// An HTTP hook's reply body.
enum Body {
    /// All of it (within the cap).
    Kept(Vec<u8>),
    /// More than the cap; the rest was not read.
    TooLarge,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_expand_allowed_variables_only() {
        std::env::set_var("HOOKBUS_TEST_TOKEN", "s3cret");
        let allowed = vec!["HOOKBUS_TEST_TOKEN".to_owned(), "FROM_SETTINGS".to_owned()];
        let env = BTreeMap::from([("FROM_SETTINGS".to_owned(), "yes".to_owned())]);
        assert_eq!(
            expand_header("Bearer $HOOKBUS_TEST_TOKEN", &allowed, &env),
            "Bearer s3cret"
        );
        assert_eq!(
            expand_header("Bearer ${HOOKBUS_TEST_TOKEN}", &allowed, &env),
            "Bearer s3cret"
        );
        assert_eq!(expand_header("x $HOME y", &allowed, &env), "x  y");
        assert_eq!(expand_header("$FROM_SETTINGS", &allowed, &env), "yes");
        assert_eq!(expand_header("$FROM_SETTINGS", &allowed[..1], &env), "");
    }
}
