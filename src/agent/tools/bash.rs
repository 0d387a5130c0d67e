//! `bash`: a shell command in the workspace, under the kernel sandbox ([`crate::sys::sandbox`]), in
//! its own process group, killed whole on timeout or cancellation.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{str_arg, Workspace};
use crate::agent::tool::{Tool, ToolCx, ToolError};
use crate::model::bounds::{clamp_timeout, deadline_after};
use crate::sys::process::{self, run::Ended};
use crate::sys::sandbox::{self, KernelSupport, Prepared, Sandbox, SandboxPolicy};

/// Default time a command may run.
pub const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);

/// Bytes of stdout (and of stderr) kept; the rest is read and counted, not stored.
pub const OUTPUT_CAP: usize = 64 * 1024;

/// `bash {command, timeout_ms?}`: runs `sh -c command` with the workspace as cwd.
///
/// * The command runs under the kernel sandbox ([`crate::sys::sandbox`]): by default
///   ([`SandboxPolicy::Workspace`]) it writes only in the workspace and a private temp dir
///   (its `TMPDIR`), reads everything but the paths the `Read` deny globs name, and has no
///   network. Where the kernel lacks Landlock, the tool refuses to run unless the policy is
///   [`SandboxPolicy::Unconfined`].
/// * The policy is the tool's own ([`with_sandbox`](Self::with_sandbox)) unless the session
///   sets one for the call; the deny globs are the tool's ([`deny_read`](Self::deny_read))
///   together with the session's.
/// * The command runs in a new process group; on timeout, cancellation, or when the call is
///   abandoned, the whole group gets `SIGKILL`, and so do background processes it left behind
///   when it exits. Processes that left the group (`setsid`) are found through `/proc` while
///   they descend from the command or hold its output pipes, and killed too; the call answers
///   at most a fraction of a second after the command exits or its timeout passes (see
///   `process::run` in ARCHITECTURE.md for what escapes).
/// * A non-zero exit status is a tool error carrying the status, stdout and stderr, and, when
///   sandboxed, a line naming the sandbox (so that a "Permission denied" reads as what it is).
#[derive(Debug, Clone)]
pub struct Bash {
    timeout: Duration,
    sandbox: Sandbox,
}

impl Default for Bash {
    fn default() -> Self {
        Self::with_timeout(DEFAULT_BASH_TIMEOUT)
    }
}

impl Bash {
    /// A `bash` tool whose commands may run this long (unless a call asks for less), under
    /// the default sandbox policy.
    ///
    /// At most [`MAX_TIMEOUT`](crate::model::bounds::MAX_TIMEOUT) (24 hours); a longer one is clamped.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            timeout: clamp_timeout(timeout),
            sandbox: Sandbox::default(),
        }
    }

    /// The tool's own sandbox policy (a session's policy, when it sets one, wins).
    pub fn with_sandbox(mut self, policy: SandboxPolicy) -> Self {
        self.sandbox.policy = policy;
        self
    }

    /// Adds an absolute glob (`*` within a name, `**` across directories) of paths no command
    /// may read, beside those of the session's `Read` deny rules.
    pub fn deny_read(mut self, glob: impl Into<String>) -> Self {
        self.sandbox.deny_read.push(glob.into());
        self
    }

    /// Which kernel to assume: [`KernelSupport::Unavailable`] simulates a kernel without
    /// Landlock (every confined policy is then refused).
    pub fn kernel_support(mut self, kernel: KernelSupport) -> Self {
        self.sandbox.kernel = kernel;
        self
    }

    /// The sandbox a command run now would get: the tool's own, with the policy and deny globs
    /// of the session's call when this runs within one. [`Sandbox::describe`] says it in a line.
    pub fn sandbox(&self) -> Sandbox {
        effective(&self.sandbox, sandbox::call_env())
    }
}

/// The tool's sandbox with a call's environment over it.
fn effective(own: &Sandbox, env: Option<sandbox::CallEnv>) -> Sandbox {
    let mut sandbox = own.clone();
    if let Some(env) = env {
        if let Some(policy) = env.policy {
            sandbox.policy = policy;
        }
        for glob in env.deny_read {
            if !sandbox.deny_read.contains(&glob) {
                sandbox.deny_read.push(glob);
            }
        }
    }
    sandbox
}

#[async_trait]
impl Tool for Bash {
    fn sandboxed(&self) -> bool {
        true
    }
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
        // `timeout_ms` is at most the tool's own timeout, whatever number the model sends.
        let limit = input
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .map_or(self.timeout, |t| t.min(self.timeout));
        // One deadline for preparing the sandbox, spawning, running and collecting the output.
        let deadline = deadline_after(Instant::now(), limit);
        let timed_out = || {
            ToolError::new(format!(
                "timed out after {} ms while preparing the sandbox",
                limit.as_millis()
            ))
        };
        let ws = Workspace::of(&cx)?;
        let sandbox = self.sandbox();
        let root = ws.root().to_path_buf();
        let preparing = tokio::task::spawn_blocking(move || sandbox.prepare(&root));
        let mut prepared = tokio::time::timeout_at(deadline, preparing)
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| ToolError::new(format!("preparing the sandbox: {e}")))?
            .map_err(ToolError::new)?;
        let result = run(command, ws.root(), deadline, limit, &cx, &mut prepared).await;
        // The group is dead: remove the private temp dir, off the runtime's workers.
        drop(tokio::task::spawn_blocking(move || drop(prepared)));
        result
    }
}

async fn run(
    command: &str,
    cwd: &Path,
    deadline: Instant,
    limit: Duration,
    cx: &ToolCx,
    prepared: &mut Prepared,
) -> Result<Value, ToolError> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(command).current_dir(cwd);
    prepared.configure(&mut cmd);
    let running = process::run::spawn(&mut cmd, false).map_err(|e| {
        if prepared.is_confined() {
            ToolError::new(format!(
                "cannot start sh in the sandbox: {e} (applying the confinement or executing \
                 sh failed; a Read deny rule covering sh or its libraries ends here too)\n{}",
                prepared.note().unwrap_or_default()
            ))
        } else {
            ToolError::new(format!("cannot start sh: {e}"))
        }
    })?;
    prepared.spawned();
    let (status, stdout, stderr) = match running.finish(&[], OUTPUT_CAP, deadline, &cx.cancel).await
    {
        Ended::Exited {
            status,
            stdout,
            stderr,
        } => (status, stdout, stderr),
        Ended::Cancelled => {
            return Err(ToolError::new(
                "interrupted: the command was cancelled and its process group killed",
            ))
        }
        Ended::TimedOut { stdout, stderr } => {
            let mut message = format!(
                "timed out after {} ms; the command's process group was killed",
                limit.as_millis()
            );
            for (name, out) in [("stdout", stdout), ("stderr", stderr)] {
                if out.total > 0 {
                    message.push_str(&format!("\n{name} so far:\n{}", out.text_with_note()));
                }
            }
            return Err(ToolError::new(message));
        }
        Ended::WaitFailed(e) => return Err(ToolError::new(format!("waiting for sh: {e}"))),
    };
    let (stdout, stderr) = (stdout.text_with_note(), stderr.text_with_note());
    let code = status.code();
    if status.success() {
        Ok(json!({ "stdout": stdout, "stderr": stderr, "exit_code": 0 }))
    } else {
        let code = code.map_or_else(
            || "killed by a signal".to_owned(),
            |c| format!("exit code {c}"),
        );
        let note = prepared
            .note()
            .map_or_else(String::new, |n| format!("\n{n}"));
        Err(ToolError::new(format!(
            "{code}\nstdout:\n{stdout}\nstderr:\n{stderr}{note}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::sandbox::{with_call_env, CallEnv};
    use tokio_util::sync::CancellationToken;

    fn cx(dir: &Path) -> ToolCx {
        ToolCx {
            cancel: CancellationToken::new(),
            cwd: dir.to_path_buf(),
            session_id: "s".into(),
            tool_use_id: "t".into(),
        }
    }

    #[test]
    fn a_session_policy_overrides_the_tools_and_deny_globs_add_up() {
        let own = Bash::default()
            .with_sandbox(SandboxPolicy::WorkspaceWithNetwork)
            .deny_read("/a/*.key")
            .sandbox;
        assert_eq!(effective(&own, None), own);
        let env = CallEnv {
            policy: Some(SandboxPolicy::Workspace),
            deny_read: vec!["/b/**/.env".into(), "/a/*.key".into()],
        };
        let merged = effective(&own, Some(env));
        assert_eq!(merged.policy, SandboxPolicy::Workspace);
        assert_eq!(merged.deny_read, ["/a/*.key", "/b/**/.env"]);
        let no_policy = CallEnv {
            policy: None,
            deny_read: Vec::new(),
        };
        assert_eq!(
            effective(&own, Some(no_policy)).policy,
            SandboxPolicy::WorkspaceWithNetwork
        );
    }

    #[tokio::test]
    async fn the_call_env_decides_what_a_call_runs_under() {
        let dir = tempfile::tempdir().unwrap();
        // The tool opts out, the session does not: on a kernel without Landlock the call is
        // refused.
        let bash = Bash::default()
            .kernel_support(KernelSupport::Unavailable)
            .with_sandbox(SandboxPolicy::Unconfined);
        let input = json!({ "command": "echo ran" });
        let env = CallEnv {
            policy: Some(SandboxPolicy::Workspace),
            deny_read: Vec::new(),
        };
        let err = with_call_env(env, bash.execute(input.clone(), cx(dir.path())))
            .await
            .unwrap_err();
        assert!(err.0.contains("Landlock"), "{err}");
        // The session opts out of a confined tool: it runs.
        let bash = bash.with_sandbox(SandboxPolicy::Workspace);
        let env = CallEnv {
            policy: Some(SandboxPolicy::Unconfined),
            deny_read: Vec::new(),
        };
        let out = with_call_env(env.clone(), bash.execute(input, cx(dir.path())))
            .await
            .unwrap();
        assert_eq!(out["stdout"], "ran\n");
        let seen = with_call_env(env, async { bash.sandbox() }).await;
        assert_eq!(seen.policy, SandboxPolicy::Unconfined);
        assert_eq!(bash.sandbox().policy, SandboxPolicy::Workspace);
    }
}
