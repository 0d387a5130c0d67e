//! The `task` tool (LOOP-5): runs a subagent as a child session of the caller's session.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{
    next_agent_id, open, AgentInner, AgentSession, Lineage, LoopShared, SessionOptions,
    TerminalReason, TurnResult,
};
use crate::agent::pipeline::{reminders_of, system_reminder};
use crate::agent::tool::{Tool, ToolCx, ToolError};
use crate::model::error::Error;
use crate::model::event::{Event, SubagentStart, SubagentStop};
use crate::model::outcome::Outcome;
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
        let sub = Subagent {
            agent,
            parent,
            agent_id,
            agent_type,
            depth,
        };
        let started = sub.start(&prompt).await?;
        let child = sub.open_child().await?;
        let first = match system_reminder(&reminders_of(&started)) {
            Some(context) => format!("{context}\n{prompt}"),
            None => prompt,
        };
        let result = sub.run(&child, first, &cx.cancel).await;
        let _ = child.close().await;
        tool_result(result?)
    }
}

/// One subagent of a parent session: who it is, and where its events are fired.
struct Subagent {
    agent: Arc<AgentInner>,
    parent: Arc<LoopShared>,
    agent_id: String,
    agent_type: String,
    depth: u32,
}

impl Subagent {
    /// The parent's current turn and step, for the events fired in the parent.
    fn at(&self) -> (u32, u32) {
        (
            self.parent.turn.load(Ordering::Relaxed),
            self.parent.step.load(Ordering::Relaxed),
        )
    }

    /// `SubagentStart` in the parent, before the child starts; its contexts reach the child.
    async fn start(&self, prompt: &str) -> Result<Outcome, ToolError> {
        let (turn, step) = self.at();
        self.parent
            .session
            .dispatch_at(
                Event::SubagentStart(SubagentStart {
                    agent_id: self.agent_id.clone(),
                    agent_type: self.agent_type.clone(),
                    prompt: Some(prompt.to_owned()),
                }),
                turn,
                step,
            )
            .await
            .map_err(ToolError::new)
    }

    /// Opens the child session: the parent's workspace, mode, sandbox and provider, and the
    /// parent as its parent.
    async fn open_child(&self) -> Result<AgentSession, ToolError> {
        let parent = &self.parent;
        let mut options = SessionOptions::new(&parent.workspace);
        options.permission_mode = parent.mode;
        options.sandbox = parent.sandbox;
        options.provider = Some(parent.provider.clone());
        open(
            &self.agent,
            options,
            Lineage {
                parent: Some(parent.id.clone()),
                agent_id: Some(self.agent_id.clone()),
                agent_type: Some(self.agent_type.clone()),
                depth: self.depth,
            },
        )
        .await
        .map_err(ToolError::new)
    }

    /// Runs the child's turns from `first`: a `SubagentStop` block on a completed turn makes
    /// it go on with the reason as its prompt, up to the Stop continuation cap.
    async fn run(
        &self,
        child: &AgentSession,
        first: String,
        cancel: &CancellationToken,
    ) -> Result<TurnResult, ToolError> {
        let mut next = first;
        let mut blocks = 0;
        loop {
            let result = child_turn(child, next, cancel)
                .await
                .map_err(ToolError::new)?;
            let stop = self.stop(&result, blocks > 0).await?;
            if stop.is_blocked()
                && result.reason == TerminalReason::Completed
                && blocks < self.agent.limits.stop_continuations
                && !cancel.is_cancelled()
            {
                blocks += 1;
                next = stop.reason_text();
            } else {
                return Ok(result);
            }
        }
    }

    /// `SubagentStop` in the parent when one of the child's turns ended.
    async fn stop(&self, result: &TurnResult, active: bool) -> Result<Outcome, ToolError> {
        let (turn, step) = self.at();
        self.parent
            .session
            .dispatch_at(
                Event::SubagentStop(SubagentStop {
                    agent_id: self.agent_id.clone(),
                    agent_type: self.agent_type.clone(),
                    stop_hook_active: active,
                    last_assistant_message: Some(result.text.clone()),
                    is_error: result.reason == TerminalReason::Error,
                }),
                turn,
                step,
            )
            .await
            .map_err(ToolError::new)
    }
}

/// One turn of the child; cancelling the parent's call cancels the child, whose turn then
/// ends on its own.
async fn child_turn(
    child: &AgentSession,
    prompt: String,
    cancel: &CancellationToken,
) -> Result<TurnResult, Error> {
    let run = child.run_turn(prompt);
    tokio::pin!(run);
    tokio::select! {
        r = &mut run => r,
        _ = cancel.cancelled() => {
            child.cancel();
            run.await
        }
    }
}

/// The tool result of the child's last turn: its text, or an error saying how it ended.
fn tool_result(result: TurnResult) -> Result<Value, ToolError> {
    match result.reason {
        TerminalReason::Completed | TerminalReason::MaxSteps => Ok(Value::String(result.text)),
        TerminalReason::Cancelled => Err(ToolError::new("interrupted: the subagent was cancelled")),
        reason => Err(ToolError::new(format!(
            "the subagent ended ({reason}): {}",
            result.detail.unwrap_or_default()
        ))),
    }
}
