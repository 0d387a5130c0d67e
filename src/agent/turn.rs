//! What a turn returns (LOOP-7).

use serde::{Deserialize, Serialize};

use crate::agent::pipeline::CallResult;
use crate::agent::provider::Message;

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalReason {
    /// The model stopped (and Stop gates let it, or the continuation cap was reached).
    Completed,
    /// The turn used `max_steps` model calls.
    MaxSteps,
    /// [`AgentSession::cancel`](crate::AgentSession::cancel) ended it.
    Cancelled,
    /// A hook blocked the prompt or asked to stop.
    Blocked,
    /// The provider failed, or the session could not dispatch.
    Error,
}

impl TerminalReason {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::MaxSteps => "max_steps",
            Self::Cancelled => "cancelled",
            Self::Blocked => "blocked",
            Self::Error => "error",
        }
    }
}

impl std::fmt::Display for TerminalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Counters of one turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnMetrics {
    /// Steps (model calls that returned).
    pub steps: u32,
    /// Tool calls asked for.
    pub tool_calls: u32,
    /// Tool calls that ran.
    pub executed: u32,
    /// Tool calls whose result was an error (failed, blocked, denied, unknown tool).
    pub tool_errors: u32,
    /// Calls blocked or deferred by a PreToolUse hook.
    pub blocked_calls: u32,
    /// Calls denied by permission.
    pub denied_calls: u32,
    /// Extra steps made because a Stop gate blocked.
    pub stop_continuations: u32,
    /// Compactions done.
    pub compactions: u32,
    /// Compactions a PreCompact gate blocked.
    pub compactions_blocked: u32,
    /// Prompt tokens reported by the provider.
    pub input_tokens: u64,
    /// Completion tokens reported by the provider.
    pub output_tokens: u64,
    /// Wall time of the turn.
    pub duration_ms: u64,
}

/// The result of [`AgentSession::run_turn`](crate::AgentSession::run_turn).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnResult {
    /// The session.
    pub session_id: String,
    /// The turn's index in its session (from 1).
    pub turn: u32,
    /// Why it ended.
    pub reason: TerminalReason,
    /// The model's last text.
    pub text: String,
    /// The block, stop or error message, when the reason has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The messages this turn added to the conversation, in order.
    pub messages: Vec<Message>,
    /// Every tool call of the turn, in call order.
    pub calls: Vec<CallResult>,
    /// Its counters.
    pub metrics: TurnMetrics,
}
