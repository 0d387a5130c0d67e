//! Execution gates: what must happen right before a tool runs, seeing the input that will run
//! (after `PreToolUse` rewrites, permission and `PermissionRequest` rewrites). The durable audit
//! log commits its intent record here; a gate that fails stops the call (fail-closed).

use async_trait::async_trait;
use serde_json::Value;

/// A call about to run.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "audit"), allow(dead_code))]
pub(crate) struct ExecutionIntent<'a> {
    pub session_id: &'a str,
    pub turn: u32,
    pub tool_use_id: &'a str,
    pub tool_name: &'a str,
    /// The input the model asked for.
    pub requested: &'a Value,
    /// The input that will run.
    pub input: &'a Value,
}

/// Told of each call right before its tool runs; an error keeps the tool from running.
#[async_trait]
pub(crate) trait ExecutionGate: Send + Sync {
    async fn before_execution(&self, intent: &ExecutionIntent<'_>) -> Result<(), String>;
}
