use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;

use crate::model::action::{
    GateAction, HookResult, PermissionAction, PostToolUseAction, PreToolUseAction,
};
use crate::model::event::*;
use crate::model::hook::{Hook, HookCx, HookOptions};

/// Where [`LoggingHook`] writes.
#[derive(Clone, Default)]
pub enum LogSink {
    /// `tracing` at info level (the default).
    #[default]
    Tracing,
    /// Plain lines on stdout, in the style `[Hook] PreToolUse: read_file (id=...)`.
    Stdout,
    /// A function of the line (for tests and custom sinks).
    Custom(Arc<dyn Fn(&str) + Send + Sync>),
}

/// Logs every event it sees, one line each. Stateless; runs inline on the dispatcher's task.
#[derive(Clone, Default)]
pub struct LoggingHook {
    sink: LogSink,
}

impl LoggingHook {
    /// Logs through `tracing`.
    pub fn new() -> Self {
        Self::default()
    }
    /// Logs to `sink`.
    pub fn with_sink(sink: LogSink) -> Self {
        Self { sink }
    }

    /// The line logged for an event.
    pub fn line(env: &Envelope) -> String {
        match &env.event {
            Event::PreToolUse(e) => {
                format!("[Hook] PreToolUse: {} (id={})", e.tool_name, e.tool_use_id)
            }
            Event::PostToolUse(e) => {
                format!("[Hook] PostToolUse: {} (id={})", e.tool_name, e.tool_use_id)
            }
            Event::PostToolUseFailure(e) => format!(
                "[Hook] PostToolUseFailure: {} (id={}): {}",
                e.tool_name, e.tool_use_id, e.error
            ),
            Event::PermissionRequest(e) => format!(
                "[Hook] PermissionRequest: {} (id={})",
                e.tool_name, e.tool_use_id
            ),
            Event::PermissionDenied(e) => format!(
                "[Hook] PermissionDenied: {} (id={}) by {}: {}",
                e.tool_name, e.tool_use_id, e.source, e.reason
            ),
            Event::UserPromptSubmit(e) => format!("[Hook] UserPromptSubmit: {}", e.prompt),
            Event::StepComplete(e) => {
                format!("[Hook] StepComplete: step {}/{}", e.step, e.max_steps)
            }
            Event::SessionStart(_)
            | Event::PreCompact(_)
            | Event::PostCompact(_)
            | Event::SessionEnd(_) => {
                format!("[Hook] {}: {}", env.kind(), env.event.query().unwrap_or(""))
            }
            Event::SubagentStart(e) => {
                format!("[Hook] SubagentStart: {} ({})", e.agent_type, e.agent_id)
            }
            Event::SubagentStop(e) => {
                format!("[Hook] SubagentStop: {} ({})", e.agent_type, e.agent_id)
            }
            Event::Notification(e) => format!("[Hook] Notification: {}", e.message),
            Event::Interrupt(e) => format!("[Hook] Interrupt: {}", e.reason),
            Event::StopFailure(e) => format!("[Hook] StopFailure: {}", e.error),
            Event::Stop(_) => "[Hook] Stop".to_owned(),
        }
    }

    fn log(&self, cx: &HookCx) {
        let line = Self::line(cx.envelope());
        match &self.sink {
            LogSink::Tracing => {
                tracing::info!(session = cx.session_id(), seq = cx.envelope().seq, "{line}")
            }
            // A closed stdout (`| head`) must not fail the hook.
            LogSink::Stdout => {
                let _ = writeln!(std::io::stdout().lock(), "{line}");
            }
            LogSink::Custom(f) => f(&line),
        }
    }
}

macro_rules! log_and_continue {
    ($self:ident, $cx:ident) => {{
        $self.log($cx);
        Ok(Default::default())
    }};
}

#[async_trait]
impl Hook for LoggingHook {
    fn name(&self) -> &str {
        "logging"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().inline().priority(i32::MIN)
    }
    async fn session_start(&self, cx: &HookCx, _: &SessionStart) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
    async fn user_prompt_submit(
        &self,
        cx: &HookCx,
        _: &UserPromptSubmit,
    ) -> HookResult<GateAction> {
        log_and_continue!(self, cx)
    }
    async fn pre_tool_use(&self, cx: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        log_and_continue!(self, cx)
    }
    async fn permission_request(
        &self,
        cx: &HookCx,
        _: &PermissionRequest,
    ) -> HookResult<PermissionAction> {
        log_and_continue!(self, cx)
    }
    async fn permission_denied(&self, cx: &HookCx, _: &PermissionDenied) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
    async fn post_tool_use(&self, cx: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        log_and_continue!(self, cx)
    }
    async fn post_tool_use_failure(
        &self,
        cx: &HookCx,
        _: &PostToolUseFailure,
    ) -> HookResult<PostToolUseAction> {
        log_and_continue!(self, cx)
    }
    async fn step_complete(&self, cx: &HookCx, _: &StepComplete) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
    async fn stop(&self, cx: &HookCx, _: &Stop) -> HookResult<GateAction> {
        log_and_continue!(self, cx)
    }
    async fn stop_failure(&self, cx: &HookCx, _: &StopFailure) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
    async fn subagent_start(&self, cx: &HookCx, _: &SubagentStart) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
    async fn subagent_stop(&self, cx: &HookCx, _: &SubagentStop) -> HookResult<GateAction> {
        log_and_continue!(self, cx)
    }
    async fn pre_compact(&self, cx: &HookCx, _: &PreCompact) -> HookResult<GateAction> {
        log_and_continue!(self, cx)
    }
    async fn post_compact(&self, cx: &HookCx, _: &PostCompact) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
    async fn notification(&self, cx: &HookCx, _: &Notification) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
    async fn interrupt(&self, cx: &HookCx, _: &Interrupt) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
    async fn session_end(&self, cx: &HookCx, _: &SessionEnd) -> HookResult<()> {
        log_and_continue!(self, cx)
    }
}
