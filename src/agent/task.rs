//! The `task` tool (LOOP-5): runs a subagent as a child session of the caller's session.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{next_agent_id, open, AgentInner, Lineage, SessionOptions, TerminalReason};
use crate::agent::pipeline::{reminders_of, system_reminder};
use crate::agent::tool::{Tool, ToolCx, ToolError};
use crate::model::event::{Event, SubagentStart, SubagentStop};
use crate::permission::service::ToolKind;

/// `task {prompt, subagent_type?, description?}`: starts a subagent — a child session with its
/// own id (also its `agent_id`) and the caller as parent — runs one turn of it with `prompt`,
/// and returns its last text as the tool result.
///
/// `SubagentStart` fires in the parent before the child starts (its contexts reach the child);
/// `SubagentStop` fires in the parent when the child's turn ends, and a block there makes the
/// child continue with the reason as its next prompt (up to the Stop continuation cap). The
/// child's own events carry `agent_id` and `agent_type`. Cancelling the parent's call cancels
/// the child.
pub struct TaskTool {
    agent: Weak<AgentInner>,
}

impl TaskTool {
    pub(crate) fn new(agent: Weak<AgentInner>) -> Self {
        Self { agent }
    }
}

impl std::fmt::Debug for TaskTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskTool")
    }
}

#[async_trait]
impl Tool for TaskTool {
    fn name(&self) -> &str {
        "task"
    }
    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "prompt": { "type": "string" },
                "subagent_type": { "type": "string" },
                "description": { "type": "string" }
            },
            "required": ["prompt"]
        })
    }
    /// Subagents only read from the parent's point of view (their own tools are checked one by
    /// one), and several may run side by side.
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(3600)
    }
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let agent = self
            .agent
            .upgrade()
            .ok_or_else(|| ToolError::new("the agent has shut down"))?;
        let prompt = crate::agent::tools::str_arg(&input, "prompt")?.to_owned();
        let agent_type = input
            .get("subagent_type")
            .and_then(Value::as_str)
            .unwrap_or("general-purpose")
            .to_owned();
        let parent = agent
            .sessions
            .get(&cx.session_id)
            .map(|s| s.shared.clone())
            .ok_or_else(|| ToolError::new(format!("no open session `{}`", cx.session_id)))?;
        let depth = parent.lineage.depth + 1;
        if depth > agent.limits.subagent_depth {
            return Err(ToolError::new("subagents may not start subagents here"));
        }
        let agent_id = next_agent_id(&agent, &parent.id);
        let at = || {
            (
                parent.turn.load(Ordering::Relaxed),
                parent.step.load(Ordering::Relaxed),
            )
        };
        let (turn, step) = at();
        let started = parent
            .session
            .dispatch_at(
                Event::SubagentStart(SubagentStart {
                    agent_id: agent_id.clone(),
                    agent_type: agent_type.clone(),
                    prompt: Some(prompt.clone()),
                }),
                turn,
                step,
            )
            .await
            .map_err(ToolError::new)?;
        let mut options = SessionOptions::new(&parent.workspace);
        options.permission_mode = parent.mode;
        options.sandbox = parent.sandbox;
        options.provider = Some(parent.provider.clone());
        let child = open(
            &agent,
            options,
            Lineage {
                parent: Some(parent.id.clone()),
                agent_id: Some(agent_id.clone()),
                agent_type: Some(agent_type.clone()),
                depth,
            },
        )
        .await
        .map_err(ToolError::new)?;
        let mut next = match system_reminder(&reminders_of(&started)) {
            Some(context) => format!("{context}\n{prompt}"),
            None => prompt,
        };
        let mut blocks = 0;
        let result = loop {
            let run = child.run_turn(next);
            tokio::pin!(run);
            let result = tokio::select! {
                r = &mut run => r,
                _ = cx.cancel.cancelled() => {
                    child.cancel();
                    run.await
                }
            };
            let result = match result {
                Ok(r) => r,
                Err(e) => break Err(ToolError::new(e)),
            };
            let (turn, step) = at();
            let stop = parent
                .session
                .dispatch_at(
                    Event::SubagentStop(SubagentStop {
                        agent_id: agent_id.clone(),
                        agent_type: agent_type.clone(),
                        stop_hook_active: blocks > 0,
                        last_assistant_message: Some(result.text.clone()),
                        is_error: result.reason == TerminalReason::Error,
                    }),
                    turn,
                    step,
                )
                .await
                .map_err(ToolError::new);
            match stop {
                Ok(stop)
                    if stop.is_blocked()
                        && result.reason == TerminalReason::Completed
                        && blocks < agent.limits.stop_continuations
                        && !cx.cancel.is_cancelled() =>
                {
                    blocks += 1;
                    next = stop.reason_text();
                }
                Ok(_) => break Ok(result),
                Err(e) => break Err(e),
            }
        };
        let _ = child.close().await;
        let result = result?;
        match result.reason {
            TerminalReason::Completed | TerminalReason::MaxSteps => Ok(Value::String(result.text)),
            TerminalReason::Cancelled => {
                Err(ToolError::new("interrupted: the subagent was cancelled"))
            }
            reason => Err(ToolError::new(format!(
                "the subagent ended ({reason}): {}",
                result.detail.unwrap_or_default()
            ))),
        }
    }
}
