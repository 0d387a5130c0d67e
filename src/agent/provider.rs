//! The model behind the agent loop: the [`Provider`] trait and the messages it reads and writes.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::tool::ToolCall;
use crate::model::scratchpad::Scratchpad;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The user, or the runtime speaking for the user (reminders, Stop reasons).
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// The tool calls an assistant message asks for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// For a tool result: whether the model sees an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_use_id: None,
            is_error: false,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message with its tool calls.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls,
            ..Self::new(Role::Assistant, content)
        }
    }

    /// A tool result.
    pub fn tool_result(
        tool_use_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        Self {
            tool_use_id: Some(tool_use_id.into()),
            is_error,
            ..Self::new(Role::Tool, content)
        }
    }

    /// A rough token count: four characters a token, the tool calls' JSON included.
    pub fn estimated_tokens(&self) -> u64 {
        let calls: usize = self
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.input.to_string().len())
            .sum();
        ((self.content.len() + calls) as u64).div_ceil(4)
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model uses.
    pub name: String,
    /// JSON schema of the input.
    pub input_schema: Value,
}

/// What the loop sends the model.
#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    /// The session asking.
    pub session_id: &'a str,
    /// Inside a subagent: its type (`None` for the main agent).
    pub agent_type: Option<&'a str>,
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools the model may call.
    pub tools: &'a [ToolSpec],
}

/// Tokens one model call used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// What the model answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// Its text.
    #[serde(default)]
    pub text: String,
    /// The tools it wants called, in order; none means it is done.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Tokens used.
    #[serde(default)]
    pub usage: Usage,
}

/// Why a model call failed. [`kind`](ProviderError::kind) is the `StopFailure` matcher value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// Too many requests.
    #[error("rate limited: {0}")]
    RateLimit(String),
    /// The provider is overloaded.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// Credentials were refused.
    #[error("authentication failed: {0}")]
    Authentication(String),
    /// The request was malformed or too large.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The provider failed.
    #[error("server error: {0}")]
    Server(String),
    /// The call was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl ProviderError {
    /// The error kind as Claude Code's `StopFailure` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RateLimit(_) => "rate_limit",
            Self::Overloaded(_) => "overloaded",
            Self::Authentication(_) => "authentication_failed",
            Self::InvalidRequest(_) => "invalid_request",
            Self::Server(_) => "server_error",
            Self::Cancelled | Self::Other(_) => "unknown",
        }
    }

    /// An error from a kind name (as in a script file) and a message.
    pub fn from_kind(kind: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        match kind {
            "rate_limit" => Self::RateLimit(message),
            "overloaded" => Self::Overloaded(message),
            "authentication_failed" => Self::Authentication(message),
            "invalid_request" => Self::InvalidRequest(message),
            "server_error" => Self::Server(message),
            _ => Self::Other(message),
        }
    }
}

/// The model provider of an agent session, as its session's [`Scratchpad`] holds it (under
/// [`SessionProvider::KEY`]), so that hooks can ask the session's own model (Claude Code
/// `prompt` handlers do). The agent puts it there when it opens the session.
///
/// [`Scratchpad`]: crate::Scratchpad
#[derive(Clone)]
pub struct SessionProvider(pub Arc<dyn Provider>);

impl SessionProvider {
    /// The scratchpad key.
    pub const KEY: &'static str = "hookbus.session_provider";

    /// The session's provider, when its scratchpad holds one.
    pub fn of(scratchpad: &Scratchpad) -> Option<Arc<dyn Provider>> {
        scratchpad.get::<SessionProvider>(Self::KEY).map(|p| p.0)
    }
}

impl std::fmt::Debug for SessionProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SessionProvider")
            .field(&self.0.model())
            .finish()
    }
}

/// What compaction asks a model that [summarizes](Provider::summarizes), as the last user
/// message after the messages being compacted (no tools offered); the custom instructions of a
/// manual compaction follow it. The answer replaces those messages.
pub const COMPACTION_PROMPT: &str = "Summarize the conversation so far so that you can continue \
the work from the summary alone: the user's goals and constraints, what was done (files read \
and changed, commands run and their results), what was decided and why, and what is left to \
do. Be specific (paths, names, numbers) and brief. Answer with the summary only.";

/// A model: messages and tool specs in; text, tool calls and token usage out.
///
/// One provider serves every session of an [`Agent`](crate::Agent) (and may be overridden per
/// session); `request.session_id` tells calls apart.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The model's name (reported in `SessionStart.model`).
    fn model(&self) -> &str {
        "unknown"
    }

    /// Whether compaction asks this model for the summary (with [`COMPACTION_PROMPT`] after
    /// the messages being compacted). `false` (the default): the loop summarises offline, one
    /// excerpt line per message, as for the scripted provider.
    fn summarizes(&self) -> bool {
        false
    }

    /// One model call. Should return [`ProviderError::Cancelled`] soon after `cancel` fires
    /// (the loop stops waiting at that moment anyway).
    async fn complete(
        &self,
        request: ModelRequest<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError>;
}
