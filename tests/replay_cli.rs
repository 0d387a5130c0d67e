//! `hookbus replay`: a transcript through a hooks configuration, from the command line.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/hooks/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn replay(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .arg("replay")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run hookbus replay");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn sample_settings() -> Value {
    json!({ "hooks": {
        "PreToolUse": [
            { "matcher": "Bash", "hooks": [
                { "type": "command", "command": format!("python3 {}", fixture("deny_rm.py")) },
                { "type": "command", "command": fixture("env.sh"), "if": "Bash(git *)" }
            ] },
            { "matcher": "Edit.*", "hooks": [ { "type": "command", "command": fixture("exit2.sh") } ] }
        ],
        "PostToolUse": [ { "matcher": "Bash", "hooks": [ { "type": "command", "command": fixture("post_block.sh") } ] } ],
        "Stop": [ { "hooks": [ { "type": "command", "command": fixture("stop.sh") } ] } ],
        "Bogus": []
    }})
}

const SAMPLE: &str = r#"{"type":"user","sessionId":"sess-1","message":{"role":"user","content":"clean up"}}
{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"rm -rf /"}}]}}
{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{"command":"git status"}}]}}

{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"x"},{"type":"tool_result","tool_use_id":"t2","content":"clean"}]},"toolUseResult":{"stdout":"clean"}}
{"type":"system","content":"skipped"}
{"type":"assistant","message":{"id":"m2","content":[{"type":"tool_use","id":"t3","name":"NotebookEdit","input":{"file_path":"a.ipynb"}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t3","content":"boom","is_error":true}]}}
{"type":"assistant","message":{"id":"m3","content":[{"type":"text","text":"done"}]}}
"#;

#[test]
fn json_lines_follow_the_replay_rules() {
    let dir = tempfile::tempdir().unwrap();
    let settings = write(dir.path(), "settings.json", &sample_settings().to_string());
    let transcript = write(dir.path(), "t.jsonl", SAMPLE);
    let (code, out, err) = replay(
        dir.path(),
        &[
            "--settings",
            &settings,
            "--transcript",
            &transcript,
            "--format",
            "json",
            "--all-events",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("hooks.Bogus"),
        "the warning goes to stderr: {err}"
    );
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events: Vec<(&str, Option<&str>)> = lines
        .iter()
        .map(|l| (l["event"].as_str().unwrap(), l["tool_use_id"].as_str()))
        .collect();
    assert_eq!(
        events,
        [
            ("SessionStart", None),
            ("UserPromptSubmit", None),
            ("PreToolUse", Some("t1")),
            ("PreToolUse", Some("t2")),
            // t1 was denied: no Post line.
            ("PostToolUse", Some("t2")),
            ("PreToolUse", Some("t3")),
            ("Stop", None),
            ("SessionEnd", None),
        ]
    );
    let keys: Vec<&str> = lines[2]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = vec![
        "event",
        "tool_use_id",
        "tool_name",
        "handlers",
        "decision",
        "reason",
        "final_input",
        "updated_output",
        "additional_context",
        "system_messages",
        "continue",
        "stop_reason",
    ];
    expected.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, expected);

    let t1 = &lines[2];
    assert_eq!(t1["decision"], "deny");
    assert_eq!(t1["reason"], "rm -rf is not allowed");
    assert_eq!(t1["final_input"], Value::Null);
    assert_eq!(t1["handlers"][0]["outcome"], "success");
    assert_eq!(t1["handlers"][0]["exit_code"], 0);
    assert_eq!(t1["handlers"][0]["source"], settings);
    assert_eq!(t1["handlers"][0]["matcher"], "Bash");
    assert_eq!(
        t1["handlers"][0]["json"]["hookSpecificOutput"]["permissionDecision"],
        "deny"
    );
    assert_eq!(t1["handlers"][1]["outcome"], "skipped_by_if");
    assert_eq!(t1["handlers"][1]["exit_code"], Value::Null);

    let t2 = &lines[3];
    assert_eq!(t2["decision"], "allow");
    assert_eq!(t2["final_input"], json!({ "command": "git status" }));
    let cwd = dir.path().canonicalize().unwrap().display().to_string();
    assert_eq!(
        t2["additional_context"],
        json!([format!("dir={cwd} code=1 pwd={cwd}")])
    );

    let post = &lines[4];
    assert_eq!(post["decision"], "block");
    assert_eq!(post["reason"], "lint failed: 2 errors");
    assert_eq!(post["updated_output"], "[redacted]");

    let t3 = &lines[5];
    assert_eq!(
        t3["decision"], "deny",
        "Edit.* matches NotebookEdit; exit 2 denies"
    );
    assert_eq!(t3["reason"], "blocked by exit2.sh");
    assert_eq!(t3["handlers"][0]["outcome"], "blocking_error");

    let stop = &lines[6];
    assert_eq!(stop["continue"], false);
    assert_eq!(stop["stop_reason"], "enough for today");
    assert_eq!(stop["system_messages"], json!(["stopping"]));
    assert_eq!(lines[0]["handlers"], json!([]));
}

#[test]
fn the_payload_carries_the_transcript_session_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("stdin.json");
    let settings = write(
        dir.path(),
        "s.json",
        &json!({ "hooks": { "PostToolUseFailure": [ { "hooks": [
            { "type": "command", "command": format!("{} {}", fixture("echo_stdin.sh"), seen.display()) }
        ] } ] } })
        .to_string(),
    );
    let transcript = write(dir.path(), "t.jsonl", SAMPLE);
    let (code, _, err) = replay(
        dir.path(),
        &[
            "--settings",
            &settings,
            "--transcript",
            "t.jsonl",
            "--cwd",
            "/tmp",
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let payload: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(payload["session_id"], "sess-1");
    assert_eq!(payload["hook_event_name"], "PostToolUseFailure");
    // The transcript as it stood at the event (a copy with its file name in the replay's
    // private directory), cut after the line of t3's result.
    let cut = std::path::PathBuf::from(payload["transcript_path"].as_str().unwrap());
    assert_eq!(cut.file_name().unwrap(), "t.jsonl");
    assert_ne!(cut.display().to_string(), transcript);
    assert!(!cut.exists(), "removed after the replay");
    assert_eq!(payload["cwd"], "/tmp");
    assert_eq!(payload["permission_mode"], "default");
    assert_eq!(payload["error"], "boom");
    assert_eq!(payload["tool_name"], "NotebookEdit");
}

#[test]
fn text_format_shows_handlers_outcomes_and_the_fold() {
    let dir = tempfile::tempdir().unwrap();
    let settings = write(dir.path(), "settings.json", &sample_settings().to_string());
    let transcript = write(dir.path(), "t.jsonl", SAMPLE);
    let (code, out, _) = replay(
        dir.path(),
        &["--settings", &settings, "--transcript", &transcript],
    );
    assert_eq!(code, 0);
    assert!(out.starts_with("PreToolUse Bash (t1)\n"), "{out}");
    assert!(out.contains("— success (exit 0,"), "{out}");
    assert!(
        out.contains("decision: deny — rm -rf is not allowed"),
        "{out}"
    );
    assert!(
        out.contains("final input: {\"command\":\"git status\"}"),
        "{out}"
    );
    assert!(out.contains("— skipped_by_if (no exit code"), "{out}");
}

#[test]
fn a_malformed_line_is_an_error_naming_it_and_nothing_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    let settings = write(dir.path(), "s.json", &sample_settings().to_string());
    for (bad, line) in [
        ("[1, 2]", 3),
        ("{not json", 3),
        (
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash","input":{}}]}}"#,
            3,
        ),
    ] {
        let text = format!("{}\n\n{bad}\n", SAMPLE.lines().next().unwrap());
        let transcript = write(dir.path(), "bad.jsonl", &text);
        let (code, out, err) = replay(
            dir.path(),
            &["--settings", &settings, "--transcript", &transcript],
        );
        assert_eq!(code, 1, "{bad}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(&format!("{transcript}:{line}:")), "{err}");
    }
}

#[test]
fn settings_that_are_not_json_are_an_error_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let settings = write(dir.path(), "s.json", "{\n  \"hooks\": [,]\n}");
    let transcript = write(dir.path(), "t.jsonl", SAMPLE);
    let (code, out, err) = replay(
        dir.path(),
        &["--settings", &settings, "--transcript", &transcript],
    );
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains(&format!("{settings}:2:13")), "{err}");
}

#[test]
fn a_thousand_calls_with_three_hooks_each_replay_to_valid_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let settings = write(
        dir.path(),
        "s.json",
        &json!({ "hooks": { "PreToolUse": [ { "matcher": "Bash", "hooks": [
            { "type": "command", "command": fixture("no_stdin.sh") },
            { "type": "command", "command": format!("{} allow 0", fixture("decide.sh")) },
            { "type": "command", "command": fixture("context.sh") }
        ] } ] } })
        .to_string(),
    );
    let path = dir.path().join("big.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 0..1000 {
        writeln!(
            f,
            r#"{{"type":"assistant","message":{{"id":"m{i}","content":[{{"type":"tool_use","id":"t{i}","name":"Bash","input":{{"command":"echo {i}"}}}}]}}}}"#
        )
        .unwrap();
        writeln!(
            f,
            r#"{{"type":"user","message":{{"content":[{{"type":"tool_result","tool_use_id":"t{i}","content":"{i}"}}]}}}}"#
        )
        .unwrap();
    }
    drop(f);
    let (code, out, err) = replay(
        dir.path(),
        &[
            "--settings",
            &settings,
            "--transcript",
            path.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2000);
    for pair in lines.chunks(2) {
        assert_eq!(pair[0]["event"], "PreToolUse");
        assert_eq!(pair[0]["decision"], "allow");
        assert_eq!(pair[0]["handlers"].as_array().unwrap().len(), 3);
        assert_eq!(pair[1]["event"], "PostToolUse");
        assert_eq!(pair[1]["tool_use_id"], pair[0]["tool_use_id"]);
    }
}
