//! The [`Tool`] trait: what the agent loop calls once permission and hooks said yes.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::permission::service::ToolKind;

/// A tool call as the model asked for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id (`tool_use_id`).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub input: Value,
}

impl ToolCall {
    /// A call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            input,
        }
    }
}

/// What a tool gets besides its input.
#[derive(Debug, Clone)]
pub struct ToolCx {
    /// Fires when the turn is cancelled or the tool's timeout passed.
    pub cancel: CancellationToken,
    /// The session's workspace.
    pub cwd: PathBuf,
    /// The session.
    pub session_id: String,
    /// The call's id.
    pub tool_use_id: String,
}

/// A tool's failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    /// A tool error with this message.
    pub fn new(message: impl std::fmt::Display) -> Self {
        Self(message.to_string())
    }
}

/// A tool the agent can call.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The name the model uses.
    fn name(&self) -> &str;
    /// JSON schema of the input.
    fn schema(&self) -> Value {
        json!({ "type": "object" })
    }
    /// Read-only, edit, or other (modes and parallelism depend on it).
    fn kind(&self) -> ToolKind {
        ToolKind::Other
    }
    /// Whether calls may run in parallel with other concurrency-safe calls.
    fn concurrency_safe(&self) -> bool {
        self.kind() == ToolKind::ReadOnly
    }
    /// Whether the tool runs what it is given under the session's sandbox (the `bash` tool):
    /// the pipeline then hands it the session's sandbox policy and the paths its `Read` deny
    /// rules name. Other tools skip that lookup.
    fn sandboxed(&self) -> bool {
        false
    }
    /// Input fields, beyond the standard `file_path`, `path` and `notebook_path`, that hold a
    /// path. Path rules check every path field (SEC-6), and the pipeline hands the tool each
    /// declared field resolved to the absolute path that was checked, so that the tool opens
    /// exactly that path (standard fields are rewritten only when declared here too).
    fn path_arguments(&self) -> &[&str] {
        &[]
    }
    /// How long one call may run.
    fn timeout(&self) -> Duration {
        Duration::from_secs(120)
    }
    /// Runs the call. Long work should stop when `cx.cancel` fires.
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError>;
}
