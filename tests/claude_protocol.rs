//! Claude Code's hook protocol, beyond exit codes and JSON output: the exact input each event's
//! handler receives. Fixture hook scripts are written into a temporary directory here.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use hookbus::claude::{ClaudeSettings, CompatOptions, EXTENSIONS_KEY};
use hookbus::*;
use serde_json::{json, Value};

// ---- helpers ----

fn settings(doc: Value) -> ClaudeSettings {
    settings_with(doc, CompatOptions::default())
}

fn settings_with(doc: Value, options: CompatOptions) -> ClaudeSettings {
    ClaudeSettings::parse(&[("s.json".to_owned(), doc.to_string())], options)
        .expect("valid settings")
}

/// Writes an executable `sh` script into `dir`.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

async fn open(bus: &Bus, id: &str, cwd: &Path) -> BusSession {
    bus.open_session(
        BusSessionConfig::new()
            .id(id)
            .cwd(cwd.display().to_string())
            .permission_mode("default"),
    )
    .await
    .unwrap()
}

fn pre(tool: &str, input: Value, id: &str) -> Event {
    Event::PreToolUse(PreToolUse {
        tool_name: tool.into(),
        tool_input: input,
        tool_use_id: id.into(),
    })
}

// ---- item 8: the exact hook input ----

/// Claude Code's input fields per event (hooks reference, section 1): the common ones, then the
/// event's own. `permission_mode` is sent where Claude Code sends it (not with SessionStart,
/// Notification or SessionEnd). StepComplete and Interrupt are hookbus's own events.
fn documented_keys(event: EventKind) -> BTreeSet<&'static str> {
    let mut keys = BTreeSet::from(["session_id", "transcript_path", "cwd", "hook_event_name"]);
    if !matches!(
        event,
        EventKind::SessionStart | EventKind::Notification | EventKind::SessionEnd
    ) {
        keys.insert("permission_mode");
    }
    let own: &[&str] = match event {
        EventKind::SessionStart => &["source", "model"],
        EventKind::UserPromptSubmit => &["prompt"],
        EventKind::PreToolUse => &["tool_name", "tool_input", "tool_use_id"],
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
    };
    keys.extend(own);
    keys
}

/// One event of each kind, every optional field set (so that each documented key shows).
fn every_event() -> Vec<Event> {
    let tool = || ("Bash".to_owned(), json!({ "command": "ls" }));
    vec![
        Event::SessionStart(SessionStart {
            source: SessionSource::Startup,
            model: Some("m".into()),
        }),
        Event::UserPromptSubmit(UserPromptSubmit {
            prompt: "hi".into(),
        }),
        pre("Bash", tool().1, "t1"),
        Event::PermissionRequest(PermissionRequest {
            tool_name: tool().0,
            tool_input: tool().1,
            tool_use_id: "t1".into(),
            reason: Some("ask rule".into()),
        }),
        Event::PermissionDenied(PermissionDenied {
            tool_name: tool().0,
            tool_input: tool().1,
            tool_use_id: "t1".into(),
            reason: "no".into(),
            source: DenialSource::Rule,
            decided_by: Some("Bash(rm *)".into()),
        }),
        Event::PostToolUse(PostToolUse {
            tool_name: tool().0,
            tool_input: tool().1,
            original_input: Some(json!({})),
            tool_response: json!("out"),
            original_response: Some(json!("x")),
            tool_use_id: "t1".into(),
            is_error: false,
            duration_ms: 1,
        }),
        Event::PostToolUseFailure(PostToolUseFailure {
            tool_name: tool().0,
            tool_input: tool().1,
            original_input: Some(json!({})),
            tool_use_id: "t1".into(),
            error: "Exit code 1".into(),
            is_error: true,
            is_interrupt: false,
            kind: FailureKind::Error,
            duration_ms: 1,
        }),
        Event::StepComplete(StepComplete {
            step: 1,
            max_steps: 50,
            message_count: 3,
            estimated_tokens: 10,
            token_limit: 100,
        }),
        Event::Stop(Stop {
            stop_hook_active: false,
            last_assistant_message: Some("done".into()),
        }),
        Event::StopFailure(StopFailure {
            error: "rate_limit".into(),
            error_details: Some("slow down".into()),
        }),
        Event::SubagentStart(SubagentStart {
            agent_id: "a1".into(),
            agent_type: "general".into(),
            prompt: Some("task".into()),
        }),
        Event::SubagentStop(SubagentStop {
            agent_id: "a1".into(),
            agent_type: "general".into(),
            stop_hook_active: false,
            last_assistant_message: Some("ok".into()),
            is_error: false,
        }),
        Event::PreCompact(PreCompact {
            trigger: CompactTrigger::Manual,
            custom_instructions: Some("short".into()),
            message_count: 9,
            estimated_tokens: 99,
        }),
        Event::PostCompact(PostCompact {
            trigger: CompactTrigger::Manual,
            compact_summary: "sum".into(),
            message_count: 2,
        }),
        Event::Notification(Notification {
            message: "hey".into(),
            title: Some("t".into()),
            notification_type: "idle_prompt".into(),
        }),
        Event::Interrupt(Interrupt {
            reason: "cancelled".into(),
        }),
    ]
}

/// Settings with one handler per event that saves its input to `<dir>/<Event>.json`.
fn recorder(dir: &Path) -> Value {
    let save = script(
        dir,
        "save.sh",
        &format!("cat > {}/\"$1\".json", dir.display()),
    );
    let hooks: serde_json::Map<String, Value> = EventKind::ALL
        .iter()
        .map(|k| {
            let handler = json!({ "type": "command", "command": format!("{save} {k}") });
            (k.to_string(), json!([{ "hooks": [handler] }]))
        })
        .collect();
    json!({ "hooks": hooks })
}

/// Fires every event (SessionEnd by closing) and reads what each handler received.
async fn inputs(s: &ClaudeSettings, dir: &Path) -> Vec<(EventKind, Value)> {
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "exact", dir).await;
    for event in every_event() {
        session.dispatch(event).await.unwrap();
    }
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
    EventKind::ALL
        .iter()
        .map(|k| {
            let text = std::fs::read_to_string(dir.join(format!("{k}.json")))
                .unwrap_or_else(|e| panic!("{k}: no input saved: {e}"));
            (*k, serde_json::from_str(&text).unwrap())
        })
        .collect()
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[tokio::test]
async fn each_events_input_has_exactly_claude_codes_fields() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(recorder(dir.path()));
    let seen = inputs(&s, dir.path()).await;
    assert_eq!(seen.len(), 17);
    for (event, input) in &seen {
        assert_eq!(keys(input), documented_keys(*event), "{event}: {input}");
        assert_eq!(input["hook_event_name"], event.as_str());
    }
    let by = |k: EventKind| &seen.iter().find(|(e, _)| *e == k).unwrap().1;
    assert_eq!(by(EventKind::SubagentStop)["agent_transcript_path"], "");
    assert_eq!(by(EventKind::PostToolUseFailure)["error"], "Exit code 1");
    assert_eq!(by(EventKind::PreCompact)["custom_instructions"], "short");
}

#[tokio::test]
async fn a_subagents_input_adds_agent_id_and_type() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let save = script(d, "save.sh", &format!("cat > {}/in.json", d.display()));
    let s = settings(
        json!({ "hooks": { "PreToolUse": [{ "hooks": [{ "type": "command", "command": save }] }] } }),
    );
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let mut config = BusSessionConfig::new()
        .id("parent/agent-1")
        .cwd(d.display().to_string())
        .parent("parent");
    config.fields.agent_id = Some("parent/agent-1".into());
    config.fields.agent_type = Some("general".into());
    let session = bus.open_session(config).await.unwrap();
    session
        .dispatch(pre("Bash", json!({ "command": "ls" }), "t1"))
        .await
        .unwrap();
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("in.json")).unwrap()).unwrap();
    let mut expected = documented_keys(EventKind::PreToolUse);
    expected.remove("permission_mode");
    expected.extend(["agent_id", "agent_type"]);
    assert_eq!(keys(&input), expected, "{input}");
    assert_eq!(input["agent_type"], "general");
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn hookbus_extensions_are_opt_in_under_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let options = CompatOptions {
        hookbus_extensions: true,
        ..CompatOptions::default()
    };
    let s = settings_with(recorder(dir.path()), options);
    for (event, input) in inputs(&s, dir.path()).await {
        let mut expected = documented_keys(event);
        expected.insert(EXTENSIONS_KEY);
        assert_eq!(keys(&input), expected, "{event}: {input}");
        let ext = &input[EXTENSIONS_KEY];
        for key in ["seq", "turn", "step", "timestamp_ms"] {
            // StepComplete's own `step` is the envelope's step, already at the top level.
            let found = ext.get(key).or(input.get(key).filter(|_| key == "step"));
            assert!(found.is_some(), "{event}: no {key} in {ext}");
        }
    }
}
