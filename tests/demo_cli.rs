//! `hookbus demo` runs non-interactively and prints the trace, the result and the summary.

use std::process::{Command, Stdio};

fn demo(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .arg("demo")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run hookbus demo");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn demo_prints_the_trace_the_answer_and_the_summary() {
    let (code, out) = demo(&[]);
    assert_eq!(code, 0, "{out}");
    for line in [
        "[Hook] PreToolUse: read_file (id=toolu_01)",
        "[Hook] Tool 'read_file' executed in",
        "[Permission] Allow bash {\"command\":\"python3 main.py\"}? (y/n/always) y",
        "main.py prints 42",
        "== summary ==",
        "warning: [Hook: lint-after-write | PostToolUse] warning: hook `lint-after-write` failed",
        "bash toolu_02: Completed",
        "audit: outcome toolu_02 ok",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
}

#[test]
fn demo_denied_by_the_user_does_not_run_the_command() {
    let (code, out) = demo(&["--approve", "no"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("(y/n/always) n"));
    assert!(out.contains("denied toolu_02 (user)"), "{out}");
    assert!(!out.contains("[Hook] PostToolUse: bash"), "{out}");
}

#[test]
fn maintenance_window_blocks_the_run_with_its_reason() {
    let (code, out) = demo(&["--maintenance"]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("maintenance window: tool runs are paused"),
        "{out}"
    );
    assert!(!out.contains("[Hook] PreToolUse"), "{out}");
}
