//! The JSON a command, http or prompt handler receives: exactly Claude Code's fields for the
//! event, built from the envelope in this layer (the envelope's own serialization, which the
//! event stream, the HTTP service and the audit log use, keeps hookbus's extras).
//!
//! What the envelope carries beyond Claude Code's fields (`seq`, `turn`, `step`,
//! `timestamp_ms`, `parent_session_id`, and payload fields such as `PostToolUseFailure.kind`)
//! is left out, or with [`CompatOptions::hookbus_extensions`](super::CompatOptions) kept under
//! one [`EXTENSIONS_KEY`] object.

use serde_json::{Map, Value};

use crate::model::event::{Envelope, EventKind};

/// The key under which [`CompatOptions::hookbus_extensions`](super::CompatOptions) puts what
/// the envelope carries beyond Claude Code's fields.
pub const EXTENSIONS_KEY: &str = "hookbus";

/// Fields every event's input has.
const COMMON: &[&str] = &["session_id", "transcript_path", "cwd", "hook_event_name"];

/// Fields of the common base that are present only in some sessions: inside a subagent
/// (`agent_id`, `agent_type`), or when the session has a permission mode (`permission_mode`,
/// not on the events whose input Claude Code sends without it).
const SUBAGENT: &[&str] = &["agent_id", "agent_type"];

/// The event-specific fields of each event, from Claude Code's hooks reference. `StepComplete`
/// and `Interrupt` are hookbus's own events: their payload as documented on their types.
pub(crate) fn event_fields(kind: EventKind) -> &'static [&'static str] {
    match kind {
        EventKind::SessionStart => &["source", "model"],
        EventKind::UserPromptSubmit => &["prompt"],
        EventKind::PreToolUse => &["tool_name", "tool_input", "tool_use_id"],
        // Claude Code's PermissionRequest has no `tool_use_id`.
        EventKind::PermissionRequest => &["tool_name", "tool_input"],
        EventKind::PermissionDenied => &["tool_name", "tool_input", "tool_use_id", "reason"],
        EventKind::PostToolUse => &[
            "tool_name",
            "tool_input",
            "tool_response",
            "tool_use_id",
            "duration_ms",
        ],
        EventKind::PostToolUseFailure => &[
            "tool_name",
            "tool_input",
            "tool_use_id",
            "error",
            "is_interrupt",
            "duration_ms",
        ],
        EventKind::StepComplete => &[
            "step",
            "max_steps",
            "message_count",
            "estimated_tokens",
            "token_limit",
        ],
        EventKind::Stop => &["stop_hook_active", "last_assistant_message"],
        EventKind::StopFailure => &["error", "error_details"],
        EventKind::SubagentStart => &["agent_id", "agent_type"],
        EventKind::SubagentStop => &[
            "stop_hook_active",
            "agent_id",
            "agent_type",
            "agent_transcript_path",
            "last_assistant_message",
        ],
        EventKind::PreCompact => &["trigger", "custom_instructions"],
        EventKind::PostCompact => &["trigger", "compact_summary"],
        EventKind::Notification => &["message", "title", "notification_type"],
        EventKind::Interrupt => &["reason"],
        EventKind::SessionEnd => &["reason"],
    }
}

/// Whether Claude Code sends `permission_mode` with this event (its SessionStart,
/// Notification and SessionEnd inputs go without).
fn sends_permission_mode(kind: EventKind) -> bool {
    !matches!(
        kind,
        EventKind::SessionStart | EventKind::Notification | EventKind::SessionEnd
    )
}

/// The input a handler receives for `env`: Claude Code's fields for the event; with
/// `extensions`, the rest of the envelope under [`EXTENSIONS_KEY`].
pub(crate) fn hook_input(env: &Envelope, extensions: bool) -> Value {
    let Value::Object(mut all) = env.to_json() else {
        return Value::Null;
    };
    let kind = env.kind();
    let mut input = Map::new();
    let mode: &[&str] = if sends_permission_mode(kind) {
        &["permission_mode"]
    } else {
        &[]
    };
    let keys = COMMON
        .iter()
        .chain(SUBAGENT)
        .chain(mode)
        .chain(event_fields(kind));
    for key in keys {
        if let Some(value) = all.remove(*key) {
            input.insert((*key).to_owned(), value);
        }
    }
    if kind == EventKind::SubagentStop {
        // Required by Claude Code; a subagent of hookbus keeps no transcript file (the same
        // empty path as its `transcript_path`).
        input
            .entry("agent_transcript_path")
            .or_insert_with(|| Value::String(String::new()));
    }
    if extensions && !all.is_empty() {
        input.insert(EXTENSIONS_KEY.to_owned(), Value::Object(all));
    }
    Value::Object(input)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::model::event::*;

    fn envelope(event: Event) -> Envelope {
        Envelope {
            session_id: "s".into(),
            parent_session_id: Some("p".into()),
            seq: 4,
            turn: 2,
            step: 1,
            timestamp_ms: 9,
            fields: Arc::new(SessionFields {
                cwd: "/w".into(),
                permission_mode: Some("plan".into()),
                ..SessionFields::default()
            }),
            event,
        }
    }

    #[test]
    fn extras_are_left_out_or_kept_under_one_key() {
        let env = envelope(Event::PermissionRequest(PermissionRequest {
            tool_name: "Bash".into(),
            tool_input: json!({ "command": "ls" }),
            tool_use_id: "t1".into(),
            reason: Some("ask rule".into()),
        }));
        let plain = hook_input(&env, false);
        let keys: Vec<&String> = plain.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "cwd",
                "hook_event_name",
                "permission_mode",
                "session_id",
                "tool_input",
                "tool_name",
                "transcript_path"
            ]
        );
        let extended = hook_input(&env, true);
        assert_eq!(
            extended[EXTENSIONS_KEY],
            json!({
                "seq": 4, "turn": 2, "step": 1, "timestamp_ms": 9,
                "parent_session_id": "p", "tool_use_id": "t1", "reason": "ask rule"
            })
        );
        assert_eq!(extended["tool_name"], "Bash");
    }
}
