//! Running one handler: a command (CC-3) or an HTTP endpoint, with its deadline enforced here,
//! parent-side.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::settings::{expand_project_dir, HandlerKind};
use crate::process::{Captured, GroupGuard, Output};

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
}

/// Runs a handler and reports how it ended and how long it took.
pub(crate) async fn run(kind: &HandlerKind, cx: RunCx<'_>) -> (Raw, Duration) {
    let started = Instant::now();
    let raw = match kind {
        HandlerKind::Command { command, args } => command_run(command, args.as_deref(), &cx).await,
        HandlerKind::Http {
            url,
            headers,
            allowed_env_vars,
        } => http_run(url, headers, allowed_env_vars, &cx).await,
    };
    (raw, started.elapsed())
}

async fn command_run(command: &str, args: Option<&[String]>, cx: &RunCx<'_>) -> Raw {
    let dir = Some(cx.project_dir);
    let mut cmd = match args {
        // Exec form: no shell; the project dir is substituted as plain text.
        Some(args) => {
            let mut c = tokio::process::Command::new(expand_project_dir(command, dir));
            c.args(args.iter().map(|a| expand_project_dir(a, dir)));
            c
        }
        // Shell form: the shell expands `$CLAUDE_PROJECT_DIR` from the environment.
        None => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(command);
            c
        }
    };
    cmd.current_dir(cx.cwd)
        .env("CLAUDE_PROJECT_DIR", cx.project_dir)
        .env("CLAUDECODE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => return Raw::SpawnError(format!("cannot start `{command}`: {e}")),
    };
    let guard = GroupGuard::new(child.id());
    // Writing stdin, reading stdout and stderr all run beside the wait: a child that never reads
    // its input, or prints without end, cannot stall the deadline. EPIPE (the child exited
    // without reading) is not an error.
    if let Some(mut stdin) = child.stdin.take() {
        let input = cx.input.to_vec();
        tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let output = Output::read(&mut child, cx.cap);
    let status = tokio::select! {
        status = child.wait() => Some(status),
        _ = tokio::time::sleep(cx.timeout) => None,
        _ = cx.cancel.cancelled() => {
            guard.kill();
            return Raw::Cancelled;
        }
    };
    // The group goes now: on timeout, and also background leftovers of a finished hook, so the
    // pipes close and the reads end.
    guard.kill();
    let Some(status) = status else {
        return Raw::Timeout;
    };
    let code = match status {
        Ok(s) => s.code(),
        Err(e) => return Raw::SpawnError(format!("waiting for `{command}`: {e}")),
    };
    let (stdout, stderr) = output.collect().await;
    Raw::Exited {
        code,
        stdout,
        stderr,
    }
}

/// Expands `$VAR` / `${VAR}` in a header value for allowed names; others become empty.
fn expand_header(value: &str, allowed: &[String]) -> String {
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
            std::env::var(name).unwrap_or_default()
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
        request = request.header(name, expand_header(value, allowed));
    }
    let call = async {
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body))
    };
    let answer = tokio::select! {
        answer = call => answer,
        _ = tokio::time::sleep(cx.timeout) => return Raw::Timeout,
        _ = cx.cancel.cancelled() => return Raw::Cancelled,
    };
    match answer {
        Err(e) => Raw::HttpError(format!("POST {url} failed: {e}")),
        Ok((status, _)) if !status.is_success() => {
            Raw::HttpError(format!("POST {url} answered {status}"))
        }
        Ok((_, body))
            if !body.iter().all(u8::is_ascii_whitespace)
                && !serde_json::from_slice::<serde_json::Value>(&body)
                    .is_ok_and(|v| v.is_object()) =>
        {
            Raw::HttpError(format!(
                "POST {url} answered a body that is not a JSON object"
            ))
        }
        Ok((_, body)) => {
            let kept = body.len().min(cx.cap);
            Raw::Exited {
                code: Some(0),
                stdout: Captured {
                    bytes: body[..kept].to_vec(),
                    total: body.len(),
                },
                stderr: Captured::default(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_expand_allowed_variables_only() {
        std::env::set_var("HOOKBUS_TEST_TOKEN", "s3cret");
        let allowed = vec!["HOOKBUS_TEST_TOKEN".to_owned()];
        assert_eq!(
            expand_header("Bearer $HOOKBUS_TEST_TOKEN", &allowed),
            "Bearer s3cret"
        );
        assert_eq!(
            expand_header("Bearer ${HOOKBUS_TEST_TOKEN}", &allowed),
            "Bearer s3cret"
        );
        assert_eq!(expand_header("x $HOME y", &allowed), "x  y");
    }
}
