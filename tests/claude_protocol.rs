//! Claude Code's hook protocol, beyond exit codes and JSON output: the exact input each event's
//! handler receives, the async protocol (background handlers), and `prompt` handlers answered
//! by a model provider. Fixture hook scripts are written into a temporary directory here.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hookbus::claude::{
    ClaudeSettings, CompatOptions, HandlerOutcome, HandlerRun, ASYNC_HOOK_NAME, EXTENSIONS_KEY,
    REPORT_KEY,
};
use hookbus::*;
use parking_lot::Mutex;
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

fn runs(o: &Outcome) -> Vec<HandlerRun> {
    o.metadata
        .iter()
        .filter(|m| m.value.0 == REPORT_KEY)
        .map(|m| serde_json::from_value(m.value.1.clone()).unwrap())
        .collect()
}

fn contexts(o: &Outcome) -> Vec<String> {
    o.contexts.iter().map(|c| c.text.clone()).collect()
}

/// Everything of an outcome that could reach the model or the user, as text.
fn visible_text(o: &Outcome) -> String {
    let mut all: Vec<String> = contexts(o);
    all.extend(o.system_messages.iter().map(|m| m.value.clone()));
    all.extend(o.warnings.iter().map(|m| m.value.clone()));
    all.extend(o.reasons.iter().map(|m| m.value.clone()));
    all.extend(o.feedback.iter().map(|m| m.value.clone()));
    all.join("\n")
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

fn post(tool: &str, id: &str) -> Event {
    Event::PostToolUse(PostToolUse {
        tool_name: tool.into(),
        tool_input: json!({ "file_path": "a.rs" }),
        original_input: None,
        tool_response: json!({ "ok": true }),
        original_response: None,
        tool_use_id: id.into(),
        is_error: false,
        duration_ms: 3,
    })
}

fn pre(tool: &str, input: Value, id: &str) -> Event {
    Event::PreToolUse(PreToolUse {
        tool_name: tool.into(),
        tool_input: input,
        tool_use_id: id.into(),
    })
}

/// Waits (generously: processes cannot use a paused clock) until `path` exists.
async fn wait_for_file(path: &Path) {
    for _ in 0..1000 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

/// Dispatches harmless PreToolUse events until one carries contexts (the session's next event
/// after a background job ended gets them); at most 200 tries.
async fn next_delivery(session: &BusSession) -> Outcome {
    for i in 0..200 {
        let o = session
            .dispatch(pre("Read", json!({ "file_path": "x" }), &format!("r{i}")))
            .await
            .unwrap();
        if !o.contexts.is_empty() {
            return o;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("nothing was delivered");
}

// ---- item 5: the async protocol ----

/// A hook that announces itself async and ends at once is still a background hook: its
/// output comes with a later event, whether the call saw the announcement or the end first.
#[tokio::test]
async fn an_async_hook_that_ends_at_once_is_still_delivered_later() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let quick = script(
        d,
        "quick.sh",
        r#"cat > /dev/null
echo '{"async": true}'
echo '{"systemMessage": "quick note"}'"#,
    );
    let s = settings(json!({ "hooks": { "PostToolUse": [
        { "matcher": "Edit", "hooks": [{ "type": "command", "command": quick }] }
    ] } }));
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "async-quick", d).await;
    let o = session.dispatch(post("Edit", "t1")).await.unwrap();
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::Async);
    assert!(
        !visible_text(&o).contains("quick note"),
        "{}",
        visible_text(&o)
    );
    let later = next_delivery(&session).await;
    assert_eq!(contexts(&later), ["quick note"]);
}

#[tokio::test]
async fn an_async_first_line_backgrounds_the_hook_and_keeps_its_json_out_of_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Announces itself as async, then waits for the test's go-ahead before its real output:
    // the hook call can only have returned before the script finished.
    let late = script(
        d,
        "late.sh",
        &format!(
            r#"cat > /dev/null
echo '{{"async": true, "asyncTimeout": 30000}}'
while [ ! -e {d}/go ]; do sleep 0.02; done
echo '{{"hookSpecificOutput": {{"hookEventName": "PostToolUse", "additionalContext": "lint: 2 warnings"}}, "systemMessage": "linted a.rs", "decision": "block", "reason": "ignored"}}'
touch {d}/done"#,
            d = d.display()
        ),
    );
    // Without the async protocol the call would wait for the script: 5 s, then a timeout.
    let s = settings(json!({ "hooks": { "PostToolUse": [
        { "matcher": "Edit", "hooks": [{ "type": "command", "command": late, "timeout": 5 }] }
    ] } }));
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "async-1", d).await;

    let o = session.dispatch(post("Edit", "t1")).await.unwrap();
    assert!(
        !d.join("done").exists(),
        "the call returned before the script finished"
    );
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::Async);
    assert_eq!(
        o.decision,
        Decision::Continue,
        "no decision from a background hook"
    );
    assert!(o.contexts.is_empty(), "{:?}", o.contexts);
    assert!(!visible_text(&o).contains("async"), "{}", visible_text(&o));

    std::fs::write(d.join("go"), "").unwrap();
    wait_for_file(&d.join("done")).await;
    let later = next_delivery(&session).await;
    assert_eq!(contexts(&later), ["lint: 2 warnings", "linted a.rs"]);
    assert!(later
        .contexts
        .iter()
        .all(|c| c.hook.starts_with(ASYNC_HOOK_NAME)));
    assert!(
        !visible_text(&later).contains('{'),
        "no raw JSON: {}",
        visible_text(&later)
    );
    assert_eq!(
        later.decision,
        Decision::Continue,
        "decision fields have no effect"
    );
    // Delivered once.
    let after = session
        .dispatch(pre("Read", json!({}), "r-last"))
        .await
        .unwrap();
    assert!(after.contexts.is_empty());
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn async_and_async_rewake_in_settings_run_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gate = format!("while [ ! -e {}/go ]; do sleep 0.02; done", d.display());
    let quiet = script(
        d,
        "quiet.sh",
        &format!(
            r#"cat > /dev/null
{gate}
echo '{{"hookSpecificOutput": {{"hookEventName": "PostToolUse", "additionalContext": "formatted"}}}}'
touch {d}/quiet.done"#,
            d = d.display()
        ),
    );
    let rewake = script(
        d,
        "rewake.sh",
        &format!(
            r#"cat > /dev/null
{gate}
echo 'tests failed: 3' >&2
touch {d}/rewake.done
exit 2"#,
            d = d.display()
        ),
    );
    let s = settings(json!({ "hooks": { "PostToolUse": [{ "hooks": [
        { "type": "command", "command": quiet, "async": true, "timeout": 5 },
        { "type": "command", "command": rewake, "asyncRewake": true, "timeout": 5 }
    ] }] } }));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "async-2", d).await;

    let o = session.dispatch(post("Write", "t1")).await.unwrap();
    let outcomes: Vec<HandlerOutcome> = runs(&o).iter().map(|r| r.report.outcome).collect();
    assert_eq!(outcomes, [HandlerOutcome::Async, HandlerOutcome::Async]);
    assert_eq!(
        o.decision,
        Decision::Continue,
        "exit 2 of a rewake hook blocks nothing"
    );
    assert!(!d.join("quiet.done").exists() && !d.join("rewake.done").exists());

    std::fs::write(d.join("go"), "").unwrap();
    wait_for_file(&d.join("quiet.done")).await;
    wait_for_file(&d.join("rewake.done")).await;
    let mut delivered = BTreeSet::new();
    while delivered.len() < 2 {
        delivered.extend(contexts(&next_delivery(&session).await));
    }
    assert_eq!(
        delivered,
        BTreeSet::from(["formatted".to_owned(), "tests failed: 3".to_owned()])
    );
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn two_settings_register_on_one_bus_each_with_its_delivery_hook() {
    let user = settings(
        json!({ "hooks": { "Stop": [{ "hooks": [{ "type": "command", "command": "true" }] }] } }),
    );
    let project = settings(
        json!({ "hooks": { "Stop": [{ "hooks": [{ "type": "command", "command": "exit 0" }] }] } }),
    );
    let bus = Bus::new();
    user.register(&bus).await.unwrap();
    project.register(&bus).await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_background_hook_is_killed_when_its_session_ends() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let forever = script(
        d,
        "forever.sh",
        &format!(
            r#"cat > /dev/null
echo '{{"async": true, "asyncTimeout": 120000}}'
echo $$ > {d}/pid.tmp && mv {d}/pid.tmp {d}/pid
while true; do sleep 0.05; done"#,
            d = d.display()
        ),
    );
    // Its deadline is two minutes away once it is in the background: only the session's end
    // kills it within the test's bounds.
    let s = settings(json!({ "hooks": { "PostToolUse": [{ "hooks": [
        { "type": "command", "command": forever, "timeout": 5 }
    ] }] } }));
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "async-3", d).await;
    let o = session.dispatch(post("Edit", "t1")).await.unwrap();
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::Async);
    wait_for_file(&d.join("pid")).await;
    let pid: u32 = std::fs::read_to_string(d.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    assert!(proc_dir.exists(), "it runs on after the call");

    session.close("other").await.unwrap();
    let alive = |p: &Path| {
        std::fs::read_to_string(p.join("stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    };
    for _ in 0..500 {
        if !alive(&proc_dir) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!alive(&proc_dir), "killed at the session's end");
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn async_output_reaches_the_model_on_the_next_turn_of_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let hooks = tempfile::tempdir().unwrap();
    let h = hooks.path();
    // It waits for the test's go-ahead: a turn that waited for it would time out.
    let note = script(
        h,
        "note.sh",
        &format!(
            r#"cat > /dev/null
while [ ! -e {h}/go ]; do sleep 0.02; done
echo '{{"hookSpecificOutput": {{"hookEventName": "PostToolUse", "additionalContext": "index rebuilt"}}}}'
touch {h}/done"#,
            h = h.display()
        ),
    );
    let s = settings(
        json!({ "hooks": { "PostToolUse": [{ "matcher": "list_dir", "hooks": [
        { "type": "command", "command": note, "async": true, "timeout": 5 }
    ] }] } }),
    );
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("Looking.").call("list_dir", json!({})))
                .turn(ScriptTurn::text("Done."))
                .turn(ScriptTurn::text("Again.")),
        )
        .approver(PolicyApprover::allow())
        .claude_settings(&s)
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(&ws).id("agent-async"))
        .await
        .unwrap();
    let first = session.run_turn("look").await.unwrap();
    assert_eq!(first.reason, TerminalReason::Completed);
    assert!(
        !h.join("done").exists(),
        "the turn did not wait for the hook"
    );
    std::fs::write(h.join("go"), "").unwrap();
    wait_for_file(&h.join("done")).await;
    // Give the job's task the moment between the script's exit and its delivery.
    let mut reminder = None;
    for _ in 0..100 {
        session.run_turn("again").await.unwrap();
        let messages = session.messages().await.unwrap();
        reminder = messages
            .iter()
            .find(|m| {
                m.content.contains("<system-reminder>") && m.content.contains("index rebuilt")
            })
            .map(|m| m.content.clone());
        if reminder.is_some() {
            break;
        }
    }
    let reminder = reminder.expect("the background hook's context reached the model");
    assert!(!reminder.contains("hookSpecificOutput"), "{reminder}");
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
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

// ---- item 9: prompt handlers ----

/// A provider that records the requests it gets and answers from a script.
struct Recording {
    inner: ScriptedProvider,
    seen: Mutex<Vec<Vec<Message>>>,
}

#[async_trait]
impl Provider for Recording {
    async fn complete(
        &self,
        request: ModelRequest<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        self.seen.lock().push(request.messages.to_vec());
        self.inner.complete(request, cancel).await
    }
}

fn answers(texts: &[&str]) -> ScriptedProvider {
    texts
        .iter()
        .fold(ScriptedProvider::new(), |p, t| p.turn(ScriptTurn::text(*t)))
}

fn prompt_hook(event: &str, extra: Value) -> Value {
    let mut handler =
        json!({ "type": "prompt", "prompt": "Refuse destructive commands. Input: $ARGUMENTS" });
    if let (Some(h), Some(e)) = (handler.as_object_mut(), extra.as_object()) {
        h.extend(e.clone());
    }
    json!({ "hooks": { event: [{ "hooks": [handler] }] } })
}

#[tokio::test]
async fn a_prompt_hook_blocks_through_a_scripted_provider() {
    let dir = tempfile::tempdir().unwrap();
    let provider = Arc::new(Recording {
        inner: answers(&[
            r#"{"ok": false, "reason": "rm -rf is destructive"}"#,
            r#"{"ok": true}"#,
        ]),
        seen: Mutex::new(Vec::new()),
    });
    let s = settings(prompt_hook("PreToolUse", json!({}))).with_provider(provider.clone());
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "prompt-1", dir.path()).await;

    let o = session
        .dispatch(pre("Bash", json!({ "command": "rm -rf /" }), "t1"))
        .await
        .unwrap();
    assert!(o.is_blocked());
    assert_eq!(o.reason_text(), "rm -rf is destructive");
    assert_eq!(
        o.stop.as_ref().map(|s| s.value.as_str()),
        Some("rm -rf is destructive"),
        "without continueOnBlock the turn ends"
    );
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::BlockingError);
    // The model saw the prompt with $ARGUMENTS replaced by the hook input.
    let seen = provider.seen.lock().clone();
    let asked = &seen[0].last().unwrap().content;
    let (head, input) = asked.split_once("Input: ").unwrap();
    assert_eq!(head, "Refuse destructive commands. ");
    let input: Value = serde_json::from_str(input).unwrap();
    assert_eq!(input["tool_input"]["command"], "rm -rf /");
    assert_eq!(input["hook_event_name"], "PreToolUse");

    let o = session
        .dispatch(pre("Bash", json!({ "command": "ls" }), "t2"))
        .await
        .unwrap();
    assert_eq!(o.decision, Decision::Continue);
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn prompt_answers_on_stop_and_bad_answers_fail_open() {
    let dir = tempfile::tempdir().unwrap();
    let provider = answers(&[
        r#"{"ok": false, "reason": "run the tests first"}"#,
        r#"{"ok": false, "reason": "cannot", "impossible": true}"#,
        "I think it is fine.",
        r#"```json
{"ok": "yes"}
```"#,
    ]);
    let s = settings(prompt_hook("Stop", json!({}))).with_provider(Arc::new(provider));
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "prompt-2", dir.path()).await;
    let stop = || {
        Event::Stop(Stop {
            stop_hook_active: false,
            last_assistant_message: Some("done".into()),
        })
    };

    let o = session.dispatch(stop()).await.unwrap();
    assert!(o.is_blocked(), "the reason becomes the next instruction");
    assert_eq!(o.reason_text(), "run the tests first");
    let o = session.dispatch(stop()).await.unwrap();
    assert_eq!(
        o.decision,
        Decision::Continue,
        "impossible: the agent may stop"
    );
    for _ in 0..2 {
        let o = session.dispatch(stop()).await.unwrap();
        assert_eq!(o.decision, Decision::Continue, "fail open");
        assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::NonBlockingError);
        assert_eq!(o.warnings.len(), 1, "{:?}", o.warnings);
    }
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn a_prompt_hook_past_its_timeout_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    let slow = ScriptedProvider::new().turn(
        ScriptTurn::text(r#"{"ok": false, "reason": "too late"}"#).delay(Duration::from_secs(60)),
    );
    let s =
        settings(prompt_hook("PreToolUse", json!({ "timeout": 2 }))).with_provider(Arc::new(slow));
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "prompt-3", dir.path()).await;
    let started = tokio::time::Instant::now();
    let o = session
        .dispatch(pre("Bash", json!({ "command": "rm x" }), "t1"))
        .await
        .unwrap();
    assert_eq!(o.decision, Decision::Continue);
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::Timeout);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(60),
        "{waited:?}"
    );
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn without_a_provider_a_prompt_hook_fails_open_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(prompt_hook("PreToolUse", json!({})));
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "prompt-4", dir.path()).await;
    let o = session
        .dispatch(pre("Bash", json!({ "command": "rm x" }), "t1"))
        .await
        .unwrap();
    assert_eq!(o.decision, Decision::Continue);
    assert!(
        o.warnings[0].value.contains("no model provider"),
        "{:?}",
        o.warnings
    );
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn in_an_agent_a_prompt_hook_asks_the_sessions_provider() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    // One script serves the session: its first answer asks for a call, the second is the
    // prompt hook's verdict on that call.
    let provider = ScriptedProvider::new()
        .turn(ScriptTurn::text("Listing.").call("list_dir", json!({})))
        .turn(ScriptTurn::text(
            r#"{"ok": false, "reason": "no listing today"}"#,
        ))
        .turn(ScriptTurn::text("Done."));
    let s = settings(
        json!({ "hooks": { "PreToolUse": [{ "matcher": "list_dir", "hooks": [
        { "type": "prompt", "prompt": "May it list? $ARGUMENTS", "continueOnBlock": true }
    ] }] } }),
    );
    let agent = Agent::builder()
        .provider(provider)
        .approver(PolicyApprover::allow())
        .claude_settings(&s)
        .build()
        .await
        .unwrap();
    let session = agent.open_session(SessionOptions::new(&ws)).await.unwrap();
    let result = session.run_turn("list").await.unwrap();
    assert_eq!(result.calls.len(), 1);
    assert_eq!(result.calls[0].status, CallStatus::Blocked);
    assert!(!result.calls[0].executed);
    assert!(
        result.calls[0].content.contains("no listing today"),
        "{}",
        result.calls[0].content
    );
    assert_eq!(
        result.reason,
        TerminalReason::Completed,
        "continueOnBlock: the turn goes on"
    );
    assert_eq!(result.text, "Done.");
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
}

#[test]
fn agent_and_mcp_tool_handlers_keep_a_warning_and_prompt_handlers_load() {
    let s = settings(json!({ "hooks": {
        "PreToolUse": [{ "hooks": [
            { "type": "agent", "prompt": "verify" },
            { "type": "mcp_tool", "server": "s", "tool": "t" },
            { "type": "prompt", "prompt": "ok?", "model": "haiku" }
        ] }],
        "SessionStart": [{ "hooks": [{ "type": "prompt", "prompt": "hello" }] }]
    } }));
    assert_eq!(s.handlers.len(), 1);
    assert_eq!(s.handlers[0].timeout, Duration::from_secs(30));
    let at = |path: &str| {
        s.warnings
            .iter()
            .find(|w| w.path == path)
            .map(|w| w.message.clone())
    };
    assert!(at("hooks.PreToolUse[0].hooks[0].type")
        .unwrap()
        .contains("`agent` is not supported"));
    assert!(at("hooks.PreToolUse[0].hooks[1].type")
        .unwrap()
        .contains("`mcp_tool` is not supported"));
    assert!(at("hooks.PreToolUse[0].hooks[2].model").is_some());
    assert!(at("hooks.SessionStart[0].hooks[0].type")
        .unwrap()
        .contains("SessionStart"));
}

#[test]
fn replay_asks_the_provider_given_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |name: &str, text: &str| {
        std::fs::write(d.join(name), text).unwrap();
        d.join(name).display().to_string()
    };
    let settings = write(
        "settings.json",
        &prompt_hook("PreToolUse", json!({})).to_string(),
    );
    let transcript = write(
        "t.jsonl",
        r#"{"type":"assistant","sessionId":"s","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"rm -rf /"}}]}}
"#,
    );
    let script = write(
        "answers.json",
        &json!({ "turns": [{ "text": "{\"ok\": false, \"reason\": \"not on my watch\"}" }] })
            .to_string(),
    );
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookbus"))
            .args([
                "replay",
                "--settings",
                &settings,
                "--transcript",
                &transcript,
                "--format",
                "json",
            ])
            .args(extra)
            .current_dir(d)
            .output()
            .unwrap()
    };
    let out = run(&["--provider", &format!("scripted:{script}")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(line["decision"], "deny");
    assert_eq!(line["reason"], "not on my watch");
    assert_eq!(line["handlers"][0]["outcome"], "blocking_error");

    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--provider"), "{stderr}");
    let line: Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(line["decision"], "none", "fails open");

    let out = run(&["--provider", "openai:gpt"]);
    assert!(!out.status.success());
}

// ---- stdin and stdout of a command hook, past the pipe's buffer ----

/// An input larger than a pipe holds (64 KiB on Linux) is written as the hook reads it, all of
/// it; a hook that never reads its input still ends at once; an output larger than the first
/// read is kept whole.
#[tokio::test]
async fn large_inputs_and_outputs_cross_the_pipes_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let save = script(d, "save.sh", &format!("cat > {}/in.json", d.display()));
    // Prints about 200 KiB of context as Claude Code's JSON output.
    let loud = script(
        d,
        "loud.sh",
        r#"cat > /dev/null
printf '{"hookSpecificOutput":{"hookEventName":"PreToolUse","additionalContext":"'
i=0; while [ $i -lt 3200 ]; do printf 'abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01'; i=$((i+1)); done
printf '"}}'"#,
    );
    let s = settings(json!({ "hooks": { "PreToolUse": [
        { "matcher": "Save", "hooks": [{ "type": "command", "command": save }] },
        { "matcher": "Ignore", "hooks": [{ "type": "command", "command": "true" }] },
        { "matcher": "Loud", "hooks": [{ "type": "command", "command": loud }] },
    ] } }));
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = open(&bus, "pipes", d).await;
    let big = "x".repeat(1 << 20);

    let o = session
        .dispatch(pre("Save", json!({ "content": big }), "t1"))
        .await
        .unwrap();
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::Success, "{o:?}");
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("in.json")).unwrap()).unwrap();
    assert_eq!(
        input["tool_input"]["content"].as_str().map(str::len),
        Some(1 << 20)
    );

    let started = std::time::Instant::now();
    let o = session
        .dispatch(pre("Ignore", json!({ "content": big }), "t2"))
        .await
        .unwrap();
    assert_eq!(runs(&o)[0].report.outcome, HandlerOutcome::Success, "{o:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "an unread input held the hook for {:?}",
        started.elapsed()
    );

    let o = session
        .dispatch(pre("Loud", json!({}), "t3"))
        .await
        .unwrap();
    let report = &runs(&o)[0].report;
    assert_eq!(report.outcome, HandlerOutcome::Success, "{o:?}");
    let json = report.json.as_ref().expect("the output parsed as JSON");
    let context = json["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert_eq!(context.len(), 3200 * 64);
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}
