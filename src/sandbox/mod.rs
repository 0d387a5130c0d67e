//! The `bash` tool's kernel sandbox (SEC-8).

use std::future::Future;

use serde::{Deserialize, Serialize};

/// How the `bash` tool confines the commands it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxPolicy {
    /// Writes only inside the workspace and a private temp dir, reads everywhere except paths
    /// that `Read(...)` deny rules name, no network. Refuses to run where the kernel cannot
    /// enforce it.
    #[default]
    Workspace,
    /// As [`SandboxPolicy::Workspace`], with network access.
    WorkspaceWithNetwork,
    /// No sandbox: commands run with the host's privileges. An explicit opt-out.
    Unconfined,
}

/// What the pipeline tells a tool about the call it runs: the session's sandbox policy and the
/// paths its deny rules keep from being read.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallEnv {
    /// The session's policy, when it set one (else the tool's own applies).
    pub policy: Option<SandboxPolicy>,
    /// Absolute globs (`*` within a name, `**` across directories) of paths no command may read.
    pub deny_read: Vec<String>,
}

tokio::task_local! {
    static CALL_ENV: CallEnv;
}

/// Runs `fut` (a tool's execution) with `env` visible to [`call_env`].
pub(crate) async fn with_call_env<F: Future>(env: CallEnv, fut: F) -> F::Output {
    CALL_ENV.scope(env, fut).await
}

/// The environment of the call being executed, if the pipeline set one.
#[allow(dead_code)]
pub(crate) fn call_env() -> Option<CallEnv> {
    CALL_ENV.try_with(Clone::clone).ok()
}
