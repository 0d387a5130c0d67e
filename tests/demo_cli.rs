//! `hookbus demo` runs non-interactively and prints the trace, the result and the summary.

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
