//! The lifecycle events, their payloads and the envelope every event travels in.
//!
//! Payloads serialize with Claude Code's snake_case field names and the event's wire name under
//! `hook_event_name`; `serde_json::to_value(&envelope)` is Claude Code's fields plus hookbus's
//! extras (`seq`, `turn`, `step`, `timestamp_ms`, and payload fields such as
//! `PostToolUseFailure.kind`). The input a Claude Code handler receives, exactly Claude Code's
//! fields for its event, is built from it by the `claude` layer.

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::error::Error;

/// The 17 lifecycle events, by their wire names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventKind {
    /// A session opens (`source`: startup, resume, clear, compact).
    SessionStart,
    /// A turn starts with the user's prompt, before the model sees it.
    UserPromptSubmit,
    /// The model asked for a tool call; before permission and execution.
    PreToolUse,
    /// The permission service would ask the user.
    PermissionRequest,
    /// A call was denied (by a rule, the mode, a hook, the user, a timeout or an error).
    PermissionDenied,
    /// The tool ran and succeeded.
    PostToolUse,
    /// The tool ran and failed.
    PostToolUseFailure,
    /// One model call and its tool calls are done.
    StepComplete,
    /// The model returned no tool call and the turn would end.
    Stop,
    /// The turn ended because the model provider failed.
    StopFailure,
    /// A child session (subagent) starts.
    SubagentStart,
    /// A child session (subagent) finishes.
    SubagentStop,
    /// Before the history is compacted.
    PreCompact,
    /// After the history was compacted.
    PostCompact,
    /// The runtime tells the user something.
    Notification,
    /// A running turn is cancelled.
    Interrupt,
    /// The session closes; always the last event of a session.
    SessionEnd,
}

impl EventKind {
    /// Every event, in declaration order.
    pub const ALL: [EventKind; 17] = [
        EventKind::SessionStart,
        EventKind::UserPromptSubmit,
        EventKind::PreToolUse,
        EventKind::PermissionRequest,
        EventKind::PermissionDenied,
        EventKind::PostToolUse,
        EventKind::PostToolUseFailure,
        EventKind::StepComplete,
        EventKind::Stop,
        EventKind::StopFailure,
        EventKind::SubagentStart,
        EventKind::SubagentStop,
        EventKind::PreCompact,
        EventKind::PostCompact,
        EventKind::Notification,
        EventKind::Interrupt,
        EventKind::SessionEnd,
    ];

    /// Number of event kinds.
    pub const COUNT: usize = 17;

    /// Dense index of this kind (`0..COUNT`), for per-event tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The wire name (`"PreToolUse"`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SessionStart => "SessionStart",
            EventKind::UserPromptSubmit => "UserPromptSubmit",
            EventKind::PreToolUse => "PreToolUse",
            EventKind::PermissionRequest => "PermissionRequest",
            EventKind::PermissionDenied => "PermissionDenied",
            EventKind::PostToolUse => "PostToolUse",
            EventKind::PostToolUseFailure => "PostToolUseFailure",
            EventKind::StepComplete => "StepComplete",
            EventKind::Stop => "Stop",
            EventKind::StopFailure => "StopFailure",
            EventKind::SubagentStart => "SubagentStart",
            EventKind::SubagentStop => "SubagentStop",
            EventKind::PreCompact => "PreCompact",
            EventKind::PostCompact => "PostCompact",
            EventKind::Notification => "Notification",
            EventKind::Interrupt => "Interrupt",
            EventKind::SessionEnd => "SessionEnd",
        }
    }

    /// Events about one tool call; tool filters apply to these only.
    pub fn is_tool_event(self) -> bool {
        matches!(
            self,
            EventKind::PreToolUse
                | EventKind::PermissionRequest
                | EventKind::PermissionDenied
                | EventKind::PostToolUse
                | EventKind::PostToolUseFailure
        )
    }

    /// Whether a hook on this event can stop what is about to happen (a Block counts).
    pub fn can_block(self) -> bool {
        matches!(
            self,
            EventKind::UserPromptSubmit
                | EventKind::PreToolUse
                | EventKind::PermissionRequest
                | EventKind::PostToolUse
                | EventKind::PostToolUseFailure
                | EventKind::Stop
                | EventKind::SubagentStop
                | EventKind::PreCompact
        )
    }

    /// Whether a fail-closed hook that fails on this event counts as a Block (FL-1): only on
    /// gates that can still prevent something.
    pub fn fails_closed(self) -> bool {
        matches!(
            self,
            EventKind::PreToolUse
                | EventKind::UserPromptSubmit
                | EventKind::PermissionRequest
                | EventKind::PreCompact
        )
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| Error::UnknownEvent(s.to_owned()))
    }
}

/// How a session started (`SessionStart.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionSource {
    /// A new session.
    Startup,
    /// A resumed session.
    Resume,
    /// The history was cleared.
    Clear,
    /// The history was compacted.
    Compact,
}

/// What started a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactTrigger {
    /// Asked for by the user.
    Manual,
    /// The token estimate passed the limit.
    Auto,
}

/// Who or what denied a tool call (`PermissionDenied.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialSource {
    /// A deny rule matched.
    Rule,
    /// The permission mode forbids the call.
    Mode,
    /// A hook blocked or denied it.
    Hook,
    /// The user (approver) said no.
    User,
    /// The approver did not answer in time.
    Timeout,
    /// The permission service failed (fail-closed).
    Error,
    /// Nobody could be asked: the runtime has no approver.
    NoApprover,
    /// The question was withdrawn: the turn was cancelled, or the client that would answer left.
    Cancelled,
}

impl fmt::Display for DenialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DenialSource::Rule => "rule",
            DenialSource::Mode => "mode",
            DenialSource::Hook => "hook",
            DenialSource::User => "user",
            DenialSource::Timeout => "timeout",
            DenialSource::Error => "error",
            DenialSource::NoApprover => "no_approver",
            DenialSource::Cancelled => "cancelled",
        })
    }
}

/// Why a tool run counts as failed (`PostToolUseFailure.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The tool returned an error.
    Error,
    /// The tool panicked.
    Panic,
    /// The tool exceeded its timeout.
    Timeout,
    /// The call was cancelled while running.
    Interrupted,
}

/// `SessionStart`: a session opens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionStart {
    /// Why the session (re)started.
    pub source: SessionSource,
    /// The model's name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `UserPromptSubmit`: a turn starts with the user's prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserPromptSubmit {
    /// The prompt text.
    pub prompt: String,
}

/// `PreToolUse`: the model asked for a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreToolUse {
    /// Tool name.
    pub tool_name: String,
    /// Arguments as the model produced them (or as an earlier hook in an `after` chain mutated them).
    pub tool_input: Value,
    /// The call's id.
    pub tool_use_id: String,
}

/// `PermissionRequest`: the permission service would ask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionRequest {
    /// Tool name.
    pub tool_name: String,
    /// The input that would run (after PreToolUse mutations).
    pub tool_input: Value,
    /// The call's id.
    pub tool_use_id: String,
    /// What the rules said and why (the `explain` line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `PermissionDenied`: a call was denied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionDenied {
    /// Tool name.
    pub tool_name: String,
    /// The input that was denied.
    pub tool_input: Value,
    /// The call's id.
    pub tool_use_id: String,
    /// Why.
    pub reason: String,
    /// Who denied it.
    pub source: DenialSource,
    /// The rule, hook or approver that decided, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
}

/// `PostToolUse`: the tool ran and succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostToolUse {
    /// Tool name.
    pub tool_name: String,
    /// The input that ran (final input).
    pub tool_input: Value,
    /// The input as the model produced it, before PreToolUse mutations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_input: Option<Value>,
    /// The tool's output (or an earlier hook's replacement, in an `after` chain).
    pub tool_response: Value,
    /// The tool's own output when a hook earlier in a chain replaced it (provenance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_response: Option<Value>,
    /// The call's id.
    pub tool_use_id: String,
    /// Always false here; failures go to `PostToolUseFailure`.
    #[serde(default)]
    pub is_error: bool,
    /// How long the tool ran.
    #[serde(default)]
    pub duration_ms: u64,
}

/// `PostToolUseFailure`: the tool ran and failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostToolUseFailure {
    /// Tool name.
    pub tool_name: String,
    /// The input that ran (final input).
    pub tool_input: Value,
    /// The input as the model produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_input: Option<Value>,
    /// The call's id.
    pub tool_use_id: String,
    /// The error text (or an earlier hook's replacement, in an `after` chain).
    pub error: String,
    /// Always true.
    #[serde(default = "yes")]
    pub is_error: bool,
    /// Whether the failure is a cancellation.
    #[serde(default)]
    pub is_interrupt: bool,
    /// What went wrong.
    pub kind: FailureKind,
    /// How long the tool ran.
    #[serde(default)]
    pub duration_ms: u64,
}

fn yes() -> bool {
    true
}

/// `StepComplete`: one model call and its tool calls are done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepComplete {
    /// The step that finished (1-based within the turn). It is the envelope's own `step`:
    /// JSON holds it once, as the envelope's (a second `step` key would make the envelope
    /// unreadable), and reading an envelope takes it from there.
    #[serde(skip_serializing, default)]
    pub step: u32,
    /// The turn's step limit.
    pub max_steps: u32,
    /// Messages in the history now.
    pub message_count: usize,
    /// Estimated tokens of the history.
    pub estimated_tokens: u64,
    /// The token limit that triggers compaction.
    pub token_limit: u64,
}

/// `Stop`: the model returned no tool call and the turn would end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stop {
    /// True when the turn is already continuing because of a Stop block.
    pub stop_hook_active: bool,
    /// The model's last text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_assistant_message: Option<String>,
}

/// `StopFailure`: the turn ended because the model provider failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopFailure {
    /// Error kind (`rate_limit`, `overloaded`, `server_error`, `unknown`, ...).
    pub error: String,
    /// The provider's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_details: Option<String>,
}

/// `SubagentStart`: a child session starts (fired in the parent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentStart {
    /// The child session's id.
    pub agent_id: String,
    /// The subagent's type.
    pub agent_type: String,
    /// The task given to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

/// `SubagentStop`: a child session finishes (fired in the parent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentStop {
    /// The child session's id.
    pub agent_id: String,
    /// The subagent's type.
    pub agent_type: String,
    /// True when the subagent is already continuing because of a block.
    pub stop_hook_active: bool,
    /// The subagent's last text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_assistant_message: Option<String>,
    /// Whether the subagent ended in error.
    #[serde(default)]
    pub is_error: bool,
}

/// `PreCompact`: before the history is compacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreCompact {
    /// What started it.
    pub trigger: CompactTrigger,
    /// Instructions for a manual compaction.
    #[serde(default)]
    pub custom_instructions: Option<String>,
    /// Messages before compaction.
    #[serde(default)]
    pub message_count: usize,
    /// Estimated tokens before compaction.
    #[serde(default)]
    pub estimated_tokens: u64,
}

/// `PostCompact`: after the history was compacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostCompact {
    /// What started it.
    pub trigger: CompactTrigger,
    /// The summary that replaced the history.
    #[serde(default)]
    pub compact_summary: String,
    /// Messages after compaction.
    #[serde(default)]
    pub message_count: usize,
}

/// `Notification`: the runtime tells the user something.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// The text.
    pub message: String,
    /// An optional title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `permission_prompt`, `idle_prompt`, ...
    pub notification_type: String,
}

/// `Interrupt`: a running turn is cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// Why (`cancelled`, `shutdown`, ...).
    pub reason: String,
}

/// `SessionEnd`: the session closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEnd {
    /// Why (`clear`, `logout`, `prompt_input_exit`, `shutdown`, `other`, ...).
    pub reason: String,
}

/// One lifecycle event with its payload. Serialized internally tagged by `hook_event_name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hook_event_name")]
#[allow(missing_docs)]
pub enum Event {
    SessionStart(SessionStart),
    UserPromptSubmit(UserPromptSubmit),
    PreToolUse(PreToolUse),
    PermissionRequest(PermissionRequest),
    PermissionDenied(PermissionDenied),
    PostToolUse(PostToolUse),
    PostToolUseFailure(PostToolUseFailure),
    StepComplete(StepComplete),
    Stop(Stop),
    StopFailure(StopFailure),
    SubagentStart(SubagentStart),
    SubagentStop(SubagentStop),
    PreCompact(PreCompact),
    PostCompact(PostCompact),
    Notification(Notification),
    Interrupt(Interrupt),
    SessionEnd(SessionEnd),
}

impl Event {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            Event::SessionStart(_) => EventKind::SessionStart,
            Event::UserPromptSubmit(_) => EventKind::UserPromptSubmit,
            Event::PreToolUse(_) => EventKind::PreToolUse,
            Event::PermissionRequest(_) => EventKind::PermissionRequest,
            Event::PermissionDenied(_) => EventKind::PermissionDenied,
            Event::PostToolUse(_) => EventKind::PostToolUse,
            Event::PostToolUseFailure(_) => EventKind::PostToolUseFailure,
            Event::StepComplete(_) => EventKind::StepComplete,
            Event::Stop(_) => EventKind::Stop,
            Event::StopFailure(_) => EventKind::StopFailure,
            Event::SubagentStart(_) => EventKind::SubagentStart,
            Event::SubagentStop(_) => EventKind::SubagentStop,
            Event::PreCompact(_) => EventKind::PreCompact,
            Event::PostCompact(_) => EventKind::PostCompact,
            Event::Notification(_) => EventKind::Notification,
            Event::Interrupt(_) => EventKind::Interrupt,
            Event::SessionEnd(_) => EventKind::SessionEnd,
        }
    }

    /// The tool name and input of a tool event.
    pub fn tool(&self) -> Option<(&str, &Value)> {
        match self {
            Event::PreToolUse(e) => Some((&e.tool_name, &e.tool_input)),
            Event::PermissionRequest(e) => Some((&e.tool_name, &e.tool_input)),
            Event::PermissionDenied(e) => Some((&e.tool_name, &e.tool_input)),
            Event::PostToolUse(e) => Some((&e.tool_name, &e.tool_input)),
            Event::PostToolUseFailure(e) => Some((&e.tool_name, &e.tool_input)),
            _ => None,
        }
    }

    /// The tool call id of a tool event.
    pub fn tool_use_id(&self) -> Option<&str> {
        match self {
            Event::PreToolUse(e) => Some(&e.tool_use_id),
            Event::PermissionRequest(e) => Some(&e.tool_use_id),
            Event::PermissionDenied(e) => Some(&e.tool_use_id),
            Event::PostToolUse(e) => Some(&e.tool_use_id),
            Event::PostToolUseFailure(e) => Some(&e.tool_use_id),
            _ => None,
        }
    }

    /// The field a Claude Code matcher is tested against (`tool_name`, `source`, `trigger`,
    /// `notification_type`, `agent_type`, `error`, `reason`); `None` for events without one.
    pub fn query(&self) -> Option<&str> {
        match self {
            Event::SessionStart(e) => Some(match e.source {
                SessionSource::Startup => "startup",
                SessionSource::Resume => "resume",
                SessionSource::Clear => "clear",
                SessionSource::Compact => "compact",
            }),
            Event::PreCompact(PreCompact { trigger, .. })
            | Event::PostCompact(PostCompact { trigger, .. }) => Some(match trigger {
                CompactTrigger::Manual => "manual",
                CompactTrigger::Auto => "auto",
            }),
            Event::Notification(e) => Some(&e.notification_type),
            Event::SubagentStart(e) => Some(&e.agent_type),
            Event::SubagentStop(e) => Some(&e.agent_type),
            Event::StopFailure(e) => Some(&e.error),
            Event::SessionEnd(e) => Some(&e.reason),
            other => other.tool().map(|(name, _)| name),
        }
    }
}

/// Fields every event of a session shares, with Claude Code's names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionFields {
    /// Path of the session transcript (may be empty when there is none).
    #[serde(default)]
    pub transcript_path: String,
    /// The session's working directory.
    #[serde(default)]
    pub cwd: String,
    /// The permission mode (`default`, `plan`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// Set inside a subagent: its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Set inside a subagent: its type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
}

/// An event with its place in the session (EVT-1). Hooks and observers get it as `Arc<Envelope>`,
/// shared and immutable (EVT-2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "EnvelopeJson")]
pub struct Envelope {
    /// The session's id.
    pub session_id: String,
    /// The parent session's id, for subagents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// Per-session sequence number, starting at 1, without gaps.
    pub seq: u64,
    /// Turn index within the session (0 before the first turn).
    #[serde(default)]
    pub turn: u32,
    /// Step index within the turn (0 outside a step).
    #[serde(default)]
    pub step: u32,
    /// Milliseconds since the Unix epoch when the event was dispatched.
    #[serde(default)]
    pub timestamp_ms: u64,
    /// Session-wide fields (`cwd`, `transcript_path`, ...), shared by every envelope of the
    /// session.
    #[serde(flatten)]
    pub fields: Arc<SessionFields>,
    /// The event and its payload, flattened next to the fields above.
    #[serde(flatten)]
    pub event: Event,
}

/// An envelope as read from JSON, before its `StepComplete` takes the envelope's `step`.
#[derive(Deserialize)]
struct EnvelopeJson {
    session_id: String,
    #[serde(default)]
    parent_session_id: Option<String>,
    seq: u64,
    #[serde(default)]
    turn: u32,
    #[serde(default)]
    step: u32,
    #[serde(default)]
    timestamp_ms: u64,
    #[serde(flatten)]
    fields: Arc<SessionFields>,
    #[serde(flatten)]
    event: Event,
}

impl From<EnvelopeJson> for Envelope {
    fn from(json: EnvelopeJson) -> Self {
        let mut event = json.event;
        if let Event::StepComplete(e) = &mut event {
            e.step = json.step;
        }
        Envelope {
            session_id: json.session_id,
            parent_session_id: json.parent_session_id,
            seq: json.seq,
            turn: json.turn,
            step: json.step,
            timestamp_ms: json.timestamp_ms,
            fields: json.fields,
            event,
        }
    }
}

#[cfg(test)]
mod json_tests {
    use super::*;

    #[test]
    fn every_envelope_reads_back_from_its_json_with_step_complete_keeping_its_step() {
        let envelope = Envelope {
            session_id: "s".into(),
            parent_session_id: None,
            seq: 7,
            turn: 1,
            step: 3,
            timestamp_ms: 5,
            fields: Arc::default(),
            event: Event::StepComplete(StepComplete {
                step: 3,
                max_steps: 10,
                message_count: 4,
                estimated_tokens: 100,
                token_limit: 1000,
            }),
        };
        let text = serde_json::to_string(&envelope).unwrap();
        assert_eq!(text.matches("\"step\"").count(), 1, "{text}");
        let back: Envelope = serde_json::from_str(&text).unwrap();
        assert_eq!(back, envelope);
    }
}

impl Envelope {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        self.event.kind()
    }

    /// The envelope as a JSON object: Claude Code's field names plus hookbus's extras (what the
    /// event stream, the HTTP service and the audit log carry; a Claude Code handler gets only
    /// Claude Code's fields, see the `claude` layer).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_round_trip_through_their_wire_names() {
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>().unwrap(), kind);
        }
        let err = "PreToolUsee".parse::<EventKind>().unwrap_err();
        assert!(err.to_string().contains("PreToolUsee"));
    }

    #[test]
    fn envelope_serializes_with_claude_code_field_names() {
        let env = Envelope {
            session_id: "s1".into(),
            parent_session_id: None,
            seq: 3,
            turn: 1,
            step: 2,
            timestamp_ms: 5,
            fields: Arc::new(SessionFields {
                cwd: "/w".into(),
                permission_mode: Some("default".into()),
                ..Default::default()
            }),
            event: Event::PreToolUse(PreToolUse {
                tool_name: "Bash".into(),
                tool_input: json!({"command": "ls"}),
                tool_use_id: "t1".into(),
            }),
        };
        let v = env.to_json();
        assert_eq!(v["hook_event_name"], "PreToolUse");
        assert_eq!(v["session_id"], "s1");
        assert_eq!(v["cwd"], "/w");
        assert_eq!(v["permission_mode"], "default");
        assert_eq!(v["tool_name"], "Bash");
        assert_eq!(v["tool_input"]["command"], "ls");
        assert_eq!(v["tool_use_id"], "t1");
        let back: Envelope = serde_json::from_value(v).unwrap();
        assert_eq!(back, env);
    }
}
