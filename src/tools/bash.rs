//! `bash`: a shell command in the workspace, in its own process group, killed whole on timeout
//! or cancellation.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{str_arg, Workspace};
use crate::process::{GroupGuard, Output};
use crate::tool::{Tool, ToolCx, ToolError};

/// Default time a command may run.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);

/// Bytes of stdout (and of stderr) kept; the rest is read and counted, not stored.
pub const OUTPUT_CAP: usize = 64 * 1024;

/// Paths outside the workspace a command may name: the null and standard devices.
const ALLOWED_OUTSIDE: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/urandom",
];

/// `bash {command, timeout_ms?}`: runs `sh -c command` with the workspace as cwd.
///
/// * The command runs in a new process group; on timeout, cancellation, or when the call is
///   abandoned, the whole group gets `SIGKILL`, and so do background processes it left behind
///   when it exits.
/// * Paths it names are checked against the workspace: an argument that is an absolute path
///   (other than a command's own executable and the `/dev` standard devices), starts with `~`,
///   climbs out with `..`, or goes through a symlink that points outside is refused before
///   anything runs. This guards against an agent's
///   mistakes; it is not a sandbox.
/// * A non-zero exit status is a tool error carrying the status, stdout and stderr.
#[derive(Debug, Clone)]
pub struct Bash {
    timeout: Duration,
}

impl Default for Bash {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_BASH_TIMEOUT,
        }
    }
}

impl Bash {
    /// A `bash` tool whose commands may run this long (unless a call asks for less).
    pub fn with_timeout(timeout: Duration) -> Self {
        Self { timeout }
    }
}

#[async_trait]
impl Tool for Bash {
    fn name(&self) -> &str {
        "bash"
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": { "type": "string" },
                "timeout_ms": { "type": "integer", "minimum": 1 }
            },
            "required": ["command"]
        })
    }
    fn timeout(&self) -> Duration {
        // The tool enforces its own (per-call) timeout and kills the group; the pipeline's
        // deadline is a backstop a little later.
        self.timeout + Duration::from_secs(5)
    }
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let command = str_arg(&input, "command")?;
        let limit = input
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .map_or(self.timeout, |t| t.min(self.timeout));
        let ws = Workspace::of(&cx)?;
        check_paths(command, &ws)?;
        run(command, ws.root(), limit, &cx).await
    }
}

async fn run(command: &str, cwd: &Path, limit: Duration, cx: &ToolCx) -> Result<Value, ToolError> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::new(format!("cannot start sh: {e}")))?;
    let guard = GroupGuard::new(child.id());
    let output = Output::read(&mut child, OUTPUT_CAP);
    let status = tokio::select! {
        status = child.wait() => status.map_err(|e| ToolError::new(format!("waiting for sh: {e}"))),
        _ = cx.cancel.cancelled() => Err(ToolError::new("interrupted: the command was cancelled and its process group killed")),
        _ = tokio::time::sleep(limit) => Err(ToolError::new(format!(
            "timed out after {} ms; the command's process group was killed", limit.as_millis()
        ))),
    };
    // Kill the group now (also background leftovers), so the pipes close and the reads end.
    guard.kill();
    let status = status?;
    let (stdout, stderr) = output.collect().await;
    let (stdout, stderr) = (stdout.text_with_note(), stderr.text_with_note());
    let code = status.code();
    if status.success() {
        Ok(json!({ "stdout": stdout, "stderr": stderr, "exit_code": 0 }))
    } else {
        let code = code.map_or_else(
            || "killed by a signal".to_owned(),
            |c| format!("exit code {c}"),
        );
        Err(ToolError::new(format!(
            "{code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        )))
    }
}

/// Refuses a command whose arguments name paths outside the workspace.
fn check_paths(command: &str, ws: &Workspace) -> Result<(), ToolError> {
    for (word, in_command_position) in words(command) {
        let candidates = std::iter::once(word.as_str()).chain(word.split_once('=').map(|(_, v)| v));
        for path in candidates {
            if path.starts_with('~') {
                return Err(refused(path, ws));
            }
            let absolute = path.starts_with('/');
            if absolute && (in_command_position || ALLOWED_OUTSIDE.contains(&path)) {
                continue;
            }
            let climbs = Path::new(path)
                .components()
                .any(|c| c == std::path::Component::ParentDir);
            // A relative path is checked when it could lead somewhere: it climbs, has a
            // directory part (`link/file`), or names something that exists (`link`).
            let names_entry = !in_command_position
                && (path.contains('/') || ws.root().join(path).symlink_metadata().is_ok());
            if (absolute || climbs || names_entry) && ws.resolve(path).is_err() {
                return Err(refused(path, ws));
            }
        }
    }
    Ok(())
}

fn refused(path: &str, ws: &Workspace) -> ToolError {
    ToolError::new(format!(
        "path `{path}` is outside the workspace {} and was refused",
        ws.root().display()
    ))
}

/// Splits a command into words, quotes removed, marking each word that is a command's first.
#[derive(Default)]
struct Words {
    out: Vec<(String, bool)>,
    word: String,
    command_position: bool,
}

impl Words {
    /// Ends the current word; `then_command` when an operator makes the next word a command.
    fn flush(&mut self, then_command: bool) {
        if !self.word.is_empty() {
            // `VAR=value cmd`: an assignment keeps the command position for the next word.
            let assignment =
                self.command_position && self.word.contains('=') && !self.word.starts_with('=');
            let word = std::mem::take(&mut self.word);
            self.out.push((word, self.command_position && !assignment));
            self.command_position = assignment;
        }
        if then_command {
            self.command_position = true;
        }
    }
}

fn words(command: &str) -> Vec<(String, bool)> {
    let mut w = Words {
        command_position: true,
        ..Words::default()
    };
    let mut quote: Option<char> = None;
    for ch in command.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => w.word.push(c),
            (None, '\'' | '"') => quote = Some(ch),
            (None, ';' | '|' | '&' | '(' | ')' | '`') => w.flush(true),
            (None, c) if c.is_whitespace() || c == '<' || c == '>' => w.flush(false),
            (None, c) => w.word.push(c),
        }
    }
    w.flush(false);
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_mark_command_positions() {
        let w = words("cat a.txt | /usr/bin/wc -l > /dev/null; X=1 /bin/true 'q w'");
        let firsts: Vec<_> = w
            .iter()
            .filter(|(_, c)| *c)
            .map(|(w, _)| w.as_str())
            .collect();
        assert_eq!(firsts, ["cat", "/usr/bin/wc", "/bin/true"]);
        assert!(w.iter().any(|(w, _)| w == "q w"));
    }

    #[test]
    fn outside_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        assert!(check_paths("cat /etc/passwd", &ws).is_err());
        assert!(check_paths("cat ../x", &ws).is_err());
        assert!(check_paths("cat ~/.ssh/id_rsa", &ws).is_err());
        assert!(check_paths("cp a --target=/tmp", &ws).is_err());
        assert!(check_paths("python3 main.py > /dev/null", &ws).is_ok());
        assert!(check_paths("/usr/bin/env python3 sub/../main.py", &ws).is_ok());
    }
}
