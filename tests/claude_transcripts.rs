//! What Claude Code hooks see of the transcript: `transcript_path` as the transcript stood at
//! each event, `stop_hook_active` after a Stop continuation, and prompts given as a list of
//! content blocks. Each test writes a small hook script that records its stdin (and the length
//! of the transcript it was handed) into a log.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hookbus::claude::{ClaudeSettings, CompatOptions};
use hookbus::*;
use serde_json::{json, Value};

/// One run of the recording hook: the lines of the file at `transcript_path`, the mode of the
/// directory holding it, and the hook's stdin.
#[derive(Debug)]
struct Seen {
    lines: usize,
    dir_mode: String,
    input: Value,
}

/// A hook script in `dir` that appends, per run, `<lines of transcript_path>\t<mode of its
/// directory>\t<stdin>` to `dir/seen.log`.
fn recorder(dir: &Path) -> String {
    let script = dir.join("record.sh");
    let log = dir.join("seen.log");
    let text = format!(
        r#"#!/bin/sh
input=$(cat)
path=$(printf '%s' "$input" | sed -n 's/.*"transcript_path":"\([^"]*\)".*/\1/p')
lines=$(wc -l < "$path" | tr -d ' ')
mode=$(stat -c %a "$(dirname "$path")")
printf '%s\t%s\t%s\n' "$lines" "$mode" "$input" >> '{}'
"#,
        log.display()
    );
    std::fs::write(&script, text).unwrap();
    make_executable(&script);
    script.display().to_string()
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The recorded runs, in order.
fn seen(dir: &Path) -> Vec<Seen> {
    let log = std::fs::read_to_string(dir.join("seen.log")).unwrap_or_default();
    log.lines()
        .map(|l| {
            let mut parts = l.splitn(3, '\t');
            let lines = parts.next().unwrap().parse().unwrap_or(usize::MAX);
            let dir_mode = parts.next().unwrap().to_owned();
            let input = serde_json::from_str(parts.next().unwrap()).unwrap();
            Seen {
                lines,
                dir_mode,
                input,
            }
        })
        .collect()
}

/// Settings that run `command` on each of `events`.
fn settings_for(events: &[&str], command: &str) -> Value {
    let mut hooks = serde_json::Map::new();
    for event in events {
        hooks.insert(
            (*event).to_owned(),
            json!([{ "hooks": [{ "type": "command", "command": command }] }]),
        );
    }
    json!({ "hooks": hooks })
}

/// Runs `hookbus replay --all-events` on `transcript` with `settings`; its JSON lines.
fn replay(dir: &Path, settings: &Value, transcript: &str) -> Vec<Value> {
    let settings_file = dir.join("settings.json");
    std::fs::write(&settings_file, settings.to_string()).unwrap();
    let transcript_file = dir.join("session.jsonl");
    std::fs::write(&transcript_file, transcript).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .arg("replay")
        .arg("--settings")
        .arg(&settings_file)
        .arg("--transcript")
        .arg(&transcript_file)
        .args(["--all-events", "--format", "json"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run hookbus replay");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "replay failed: {stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A session whose first answer a Stop hook blocked (Claude Code records the block as an
/// attachment and a `Stop hook feedback` user line); the model ran the tests and answered
/// again; then a second prompt.
const CONTINUED: &str = r#"{"type":"user","sessionId":"s-17","message":{"role":"user","content":"fix the bug"}}
{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"All done."}]}}
{"type":"attachment","attachment":{"type":"hook_blocking_error","hookName":"Stop","hookEvent":"Stop","blockingError":{"blockingError":"run the tests first","command":"gate.sh"}}}
{"type":"user","isMeta":true,"message":{"role":"user","content":"Stop hook feedback:\n[gate.sh]: run the tests first"}}
{"type":"system","subtype":"stop_hook_summary","hookCount":1,"hookErrors":["run the tests first"],"preventedContinuation":false}
{"type":"assistant","message":{"id":"m2","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cargo test"}}]}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"test result: ok"}]}}
{"type":"assistant","message":{"id":"m3","role":"assistant","content":[{"type":"text","text":"Tests pass; done."}]}}
{"type":"system","subtype":"stop_hook_summary","hookCount":1,"hookErrors":[],"preventedContinuation":false}
{"type":"user","message":{"role":"user","content":"thanks"}}
{"type":"assistant","message":{"id":"m4","role":"assistant","content":[{"type":"text","text":"You're welcome."}]}}
"#;

/// The recorded runs of one event.
fn runs_of<'a>(seen: &'a [Seen], event: &str) -> Vec<&'a Seen> {
    seen.iter()
        .filter(|s| s.input["hook_event_name"] == event)
        .collect()
}

#[test]
fn each_event_sees_the_transcript_as_it_stood_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let hook = recorder(dir.path());
    let events = ["SessionStart", "UserPromptSubmit", "PreToolUse", "Stop"];
    replay(dir.path(), &settings_for(&events, &hook), CONTINUED);
    let seen = seen(dir.path());

    let stops = runs_of(&seen, "Stop");
    assert_eq!(stops.len(), 3, "{seen:?}");
    // The first Stop came from line 2, the second from line 8, the third from line 11.
    let lines: Vec<usize> = stops.iter().map(|s| s.lines).collect();
    assert_eq!(lines, [2, 8, 11]);
    assert_eq!(stops[0].input["last_assistant_message"], "All done.");
    assert_eq!(
        stops[1].input["last_assistant_message"],
        "Tests pass; done."
    );

    // The other events too: SessionStart before any line, each prompt and call at its line.
    assert_eq!(runs_of(&seen, "SessionStart")[0].lines, 0);
    let prompts: Vec<usize> = runs_of(&seen, "UserPromptSubmit")
        .iter()
        .map(|s| s.lines)
        .collect();
    assert_eq!(prompts, [1, 10], "the Stop feedback line is not a prompt");
    assert_eq!(runs_of(&seen, "PreToolUse")[0].lines, 6);

    // One path for the whole session, as in Claude Code: a copy with the transcript's file
    // name in a private directory, gone after the replay.
    let path = PathBuf::from(seen[0].input["transcript_path"].as_str().unwrap());
    assert_eq!(path.file_name().unwrap(), "session.jsonl");
    assert_ne!(path, dir.path().join("session.jsonl"));
    assert!(!path.exists(), "{} outlived the replay", path.display());
    for s in &seen {
        assert_eq!(s.input["transcript_path"], seen[0].input["transcript_path"]);
        assert_eq!(s.dir_mode, "700");
    }
}

#[test]
fn stop_hook_active_is_true_on_the_stop_after_a_continuation() {
    let dir = tempfile::tempdir().unwrap();
    let hook = recorder(dir.path());
    let lines = replay(dir.path(), &settings_for(&["Stop"], &hook), CONTINUED);
    let stop_lines = lines.iter().filter(|l| l["event"] == "Stop").count();
    assert_eq!(stop_lines, 3);
    let active: Vec<Value> = runs_of(&seen(dir.path()), "Stop")
        .iter()
        .map(|s| s.input["stop_hook_active"].clone())
        .collect();
    // First answer: not continuing. After the block: continuing. A new prompt starts afresh.
    assert_eq!(active, [json!(false), json!(true), json!(false)]);
}

#[tokio::test]
async fn stop_hook_active_is_true_on_the_agent_loops_continuation_stop() {
    let dir = tempfile::tempdir().unwrap();
    let hook = recorder(dir.path());
    // Blocks the first Stop (exit 2), lets the second one through.
    let gate = dir.path().join("gate.sh");
    std::fs::write(
        &gate,
        format!(
            "#!/bin/sh\ncat > /dev/null\nif [ ! -e '{0}/blocked' ]; then touch '{0}/blocked'; echo 'run the tests first' >&2; exit 2; fi\n",
            dir.path().display()
        ),
    )
    .unwrap();
    make_executable(&gate);
    let doc = json!({ "hooks": { "Stop": [{ "hooks": [
        { "type": "command", "command": gate.display().to_string() },
        { "type": "command", "command": hook }
    ] }] } });
    let settings = ClaudeSettings::parse(
        &[("settings.json".to_owned(), doc.to_string())],
        CompatOptions::default(),
    )
    .unwrap();
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("All done."))
                .turn(ScriptTurn::text("Tests pass; done.")),
        )
        .claude_settings(&settings)
        .build()
        .await
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("fix the bug").await.unwrap();
    assert_eq!(result.metrics.stop_continuations, 1);
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;

    let log = std::fs::read_to_string(dir.path().join("seen.log")).unwrap();
    // Agent sessions keep no transcript file: the recorder's line count is empty there, so
    // read the inputs only.
    let active: Vec<Value> = log
        .lines()
        .filter_map(|l| l.splitn(3, '\t').nth(2))
        .map(|input| serde_json::from_str::<Value>(input).unwrap())
        .map(|input| input["stop_hook_active"].clone())
        .collect();
    assert_eq!(active, [json!(false), json!(true)]);
}

#[test]
fn a_prompt_of_text_and_an_image_fires_user_prompt_submit_with_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let hook = recorder(dir.path());
    let transcript = r#"{"type":"user","sessionId":"s-7","message":{"role":"user","content":[{"type":"text","text":"What is in this picture?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"text","text":"Answer in one word."}]}}
{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"A cat."}]}}
{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]}}
{"type":"user","message":{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}}
"#;
    let lines = replay(
        dir.path(),
        &settings_for(&["UserPromptSubmit"], &hook),
        transcript,
    );
    let fired = lines
        .iter()
        .filter(|l| l["event"] == "UserPromptSubmit")
        .count();
    // The text and image prompt and the image alone; not the interruption note.
    assert_eq!(fired, 2);
    let seen = seen(dir.path());
    let prompts: Vec<&Value> = seen.iter().map(|s| &s.input["prompt"]).collect();
    // Text blocks joined by newlines; an image alone is a prompt without text.
    assert_eq!(
        prompts,
        [
            &json!("What is in this picture?\nAnswer in one word."),
            &json!("")
        ]
    );
    assert_eq!(seen[0].lines, 1);
}
