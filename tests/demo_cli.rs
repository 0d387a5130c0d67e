//! `hookbus demo` runs non-interactively and prints the trace, the result and the summary.

mod common;

use std::process::{Command, Stdio};

fn demo(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .arg("demo")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run hookbus demo");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn workspace_of(out: &str) -> std::path::PathBuf {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("workspace: "))
        .expect("the workspace line");
    std::path::PathBuf::from(line)
}

#[test]
fn demo_prints_the_trace_the_answer_and_the_summary() {
    let (code, out, err) = demo(&[]);
    assert_eq!(code, 0, "{out}\n{err}");
    for line in [
        "[Hook] PreToolUse: read_file (id=toolu_01)",
        "[Hook] Tool 'read_file' executed in",
        "[Permission] bash wants to run {\"command\":\"python3 main.py\"}",
        "[Permission] Allow? (y/n/always) y",
        "[Tool] bash → 42",
        "[Hook] Stop",
        "[Turn 1] completed",
        "== summary ==",
        "events dispatched:",
        "warning: [Hook: lint-after-write | PostToolUse] warning: hook `lint-after-write` failed",
        "decision: bash toolu_02: Completed",
        "audit: outcome toolu_02 ok",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
    // The trace is in lifecycle order.
    let at = |s: &str| out.find(s).unwrap_or_else(|| panic!("missing {s}"));
    assert!(at("[Hook] SessionStart") < at("[Hook] UserPromptSubmit"));
    assert!(at("[Hook] PreToolUse: bash") < at("[Permission]"));
    assert!(at("[Permission]") < at("[Tool] bash → 42"));
    assert!(at("[Hook] Stop") < at("[Hook] SessionEnd"));
    // The failing Post hook did not re-run the write: one request, one outcome.
    assert_eq!(out.matches("audit: request toolu_03").count(), 1);
    let summary = std::fs::read_to_string(workspace_of(&out).join("SUMMARY.md")).unwrap();
    assert_eq!(summary, "main.py prints 42\n");
}

#[test]
fn demo_denied_by_the_user_does_not_run_the_command() {
    let (code, out, _) = demo(&["--approve", "no"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("(y/n/always) n"));
    assert!(out.contains("denied toolu_02 (user)"), "{out}");
    assert!(!out.contains("[Hook] PostToolUse: bash"), "{out}");
    assert!(!out.contains("[Tool] bash → 42"), "{out}");
}

#[test]
fn maintenance_window_blocks_the_run_with_its_reason() {
    let (code, out, _) = demo(&["--maintenance"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("[Gate] run blocked: maintenance window: tool runs are paused"),
        "{out}"
    );
    assert!(!out.contains("[Hook] PreToolUse"), "{out}");
    assert!(
        !out.contains("[Model]"),
        "the model was never called:\n{out}"
    );
}

#[test]
fn a_users_script_runs_instead() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("run.json");
    std::fs::write(
        &script,
        r#"{
  "prompts": ["list, then count"],
  "files": { "data/a.txt": "alpha\n", "data/b.txt": "beta\n" },
  "turns": [
    { "text": "Listing.", "tool_calls": [ { "name": "list_dir", "input": { "path": "data" } } ] },
    { "text": "Counting.", "tool_calls": [ { "id": "wc", "name": "bash", "input": { "command": "cat data/*.txt | wc -l" } } ] },
    { "text": "Two files, two lines." }
  ]
}"#,
    )
    .unwrap();
    let (code, out, err) = demo(&["--script", script.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("[User] list, then count"), "{out}");
    assert!(out.contains("[Tool] list_dir → a.txt ⏎ b.txt"), "{out}");
    assert!(out.contains("[Tool] bash → 2"), "{out}");
    assert!(out.contains("[Model] Two files, two lines."), "{out}");
}

#[test]
fn a_bad_script_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bad.json");
    std::fs::write(&script, "{\n  \"turns\": [ { \"text\": 1 } ]\n}").unwrap();
    let (code, out, err) = demo(&["--script", script.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    let expected = format!("hookbus: {}:2:", script.display());
    assert!(err.starts_with(&expected), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// `hookbus demo --provider anthropic` against a local server speaking the Messages API (through
/// `ANTHROPIC_BASE_URL`): the same hooks, permission prompt and audit, and the same result.
#[cfg(feature = "service")]
#[test]
fn demo_runs_against_an_anthropic_compatible_server() {
    use common::model_server::{anthropic_answer, serve, Reply};
    use serde_json::json;

    let rt = tokio::runtime::Runtime::new().unwrap();
    let answers = [
        (
            "Reading main.py.",
            ("toolu_a", "read_file", json!({"path": "main.py"})),
        ),
        (
            "Running it.",
            ("toolu_b", "bash", json!({"command": "python3 main.py"})),
        ),
        (
            "Writing the summary.",
            (
                "toolu_c",
                "write_file",
                json!({"path": "SUMMARY.md", "content": "main.py prints 42\n"}),
            ),
        ),
    ];
    let mut replies: Vec<Reply> = answers
        .into_iter()
        .map(|(text, call)| Reply::Sse(anthropic_answer(text, &[call], (100, 10))))
        .collect();
    replies.push(Reply::Sse(anthropic_answer(
        "main.py prints 42.",
        &[],
        (120, 8),
    )));
    let (addr, script) = rt.block_on(serve(replies));
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args(["demo", "--provider", "anthropic", "--model", "claude-test"])
        .env("ANTHROPIC_API_KEY", "sk-test")
        .env("ANTHROPIC_BASE_URL", format!("http://{addr}"))
        .stdin(Stdio::null())
        .output()
        .expect("run hookbus demo");
    let (code, out, err) = (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    for line in [
        "[Model] Reading main.py.",
        "[Permission] bash wants to run {\"command\":\"python3 main.py\"}",
        "[Tool] bash → 42",
        "[Turn 1] completed",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
    let summary = std::fs::read_to_string(workspace_of(&out).join("SUMMARY.md")).unwrap();
    assert_eq!(summary, "main.py prints 42\n");
    let requests = script.requests.lock().clone();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[0].1["model"], "claude-test");
    assert!(requests[0].1["system"]
        .as_str()
        .unwrap_or("")
        .contains("coding agent"));
}

#[test]
fn demo_with_a_real_provider_and_no_key_says_what_to_set_and_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args(["demo", "--provider", "anthropic"])
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::null())
        .output()
        .expect("run hookbus demo");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
}
