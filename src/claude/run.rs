//! Running one handler: a command (CC-3) or an HTTP endpoint, with its deadline enforced here,
//! parent-side.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::settings::HandlerKind;
use super::vars::{Dirs, PLUGIN_ROOT};
use crate::model::bounds::deadline_after;
use crate::sys::process::run::Ended;
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
    /// The settings' `env`: set for a command, read by header expansion.
    pub env: &'a BTreeMap<String, String>,
    /// A plugin's handler: the plugin's directory (`CLAUDE_PLUGIN_ROOT`).
    pub plugin_root: Option<&'a Path>,
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
    // One deadline for spawn, run and output collection.
    let deadline = deadline_after(Instant::now(), cx.timeout);
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
    let running = match process::run::spawn(&mut cmd, true) {
        Ok(running) => running,
        Err(e) => return Raw::SpawnError(format!("cannot start `{command}`: {e}")),
    };
    // The child's exit status is the answer as soon as it exits; see `process::run` for what
    // happens to what it leaves behind.
    match running.finish(cx.input, cx.cap, deadline, cx.cancel).await {
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
