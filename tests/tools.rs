//! The built-in tools: workspace confinement, bash's sandbox, timeouts and process groups;
//! scripts.

use std::time::Duration;

use hookbus::tools::{Bash, ListDir, ReadFile, WriteFile};
use hookbus::*;
use serde_json::{json, Value};

struct Fixture {
    /// Holds the workspace and, next to it, a directory that must stay untouched.
    _root: tempfile::TempDir,
    ws: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    std::fs::write(ws.join("main.py"), "print(6 * 7)\n").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("secret-link")).unwrap();
    Fixture {
        _root: root,
        ws,
        outside,
    }
}

fn cx(f: &Fixture) -> ToolCx {
    ToolCx {
        cancel: CancellationToken::new(),
        cwd: f.ws.clone(),
        session_id: "s".into(),
        tool_use_id: "t".into(),
    }
}

/// A `bash` tool under its default sandbox where the kernel offers Landlock, else unconfined
/// (for the tests of process groups and output, which are not about the sandbox).
fn bash() -> Bash {
    match hookbus::sandbox::landlock_abi() {
        Some(_) => Bash::default(),
        None => Bash::default().with_sandbox(hookbus::sandbox::SandboxPolicy::Unconfined),
    }
}

async fn run(tool: &dyn Tool, f: &Fixture, input: Value) -> Result<Value, ToolError> {
    tool.execute(input, cx(f)).await
}

#[tokio::test]
async fn reads_inside_the_workspace_work() {
    let f = fixture();
    let text = run(&ReadFile, &f, json!({ "path": "main.py" }))
        .await
        .unwrap();
    assert_eq!(text, json!("print(6 * 7)\n"));
    let text = run(&ReadFile, &f, json!({ "path": "./sub/../main.py" }))
        .await
        .unwrap();
    assert_eq!(text, json!("print(6 * 7)\n"));
    let listing = run(&ListDir, &f, json!({})).await.unwrap();
    assert_eq!(listing, json!("escape@\nmain.py\nsecret-link@"));
}

#[tokio::test]
async fn escapes_are_refused_for_reads() {
    let f = fixture();
    let abs = f.outside.join("secret.txt").display().to_string();
    for path in [
        "../outside/secret.txt",
        "/etc/passwd",
        abs.as_str(),
        "escape/secret.txt",
        "secret-link",
    ] {
        let err = run(&ReadFile, &f, json!({ "path": path }))
            .await
            .unwrap_err();
        assert!(
            err.0.contains("outside the workspace") && err.0.contains(path),
            "{path}: {err}"
        );
    }
    for path in ["..", "escape", "/"] {
        let err = run(&ListDir, &f, json!({ "path": path }))
            .await
            .unwrap_err();
        assert!(err.0.contains("outside the workspace"), "{path}: {err}");
    }
}

#[tokio::test]
async fn escapes_are_refused_for_writes_and_nothing_outside_changes() {
    let f = fixture();
    for path in [
        "../outside/new.txt",
        "escape/new.txt",
        "secret-link",
        "/tmp/hookbus-should-not-exist.txt",
    ] {
        let err = run(&WriteFile, &f, json!({ "path": path, "content": "pwned" }))
            .await
            .unwrap_err();
        assert!(err.0.contains("outside the workspace"), "{path}: {err}");
    }
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
    assert!(!f.outside.join("new.txt").exists());
    assert!(!std::path::Path::new("/tmp/hookbus-should-not-exist.txt").exists());
    // Inside is fine, directories included.
    run(
        &WriteFile,
        &f,
        json!({ "path": "notes/summary.md", "content": "42" }),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(f.ws.join("notes/summary.md")).unwrap(),
        "42"
    );
}

#[tokio::test]
async fn a_dangling_symlink_out_is_refused() {
    let f = fixture();
    std::os::unix::fs::symlink(f.outside.join("later.txt"), f.ws.join("later")).unwrap();
    let err = run(&WriteFile, &f, json!({ "path": "later", "content": "x" }))
        .await
        .unwrap_err();
    assert!(err.0.contains("outside the workspace"), "{err}");
    assert!(!f.outside.join("later.txt").exists());
}

#[tokio::test]
async fn bash_runs_in_the_workspace_and_its_sandbox_keeps_writes_inside() {
    if hookbus::sandbox::landlock_abi().is_none() {
        assert!(
            std::env::var("HOOKBUS_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
            "HOOKBUS_REQUIRE_EXTERNAL=1 but the kernel does not offer Landlock"
        );
        eprintln!("skipped: the kernel does not offer Landlock");
        return;
    }
    let f = fixture();
    let out = run(
        &Bash::default(),
        &f,
        json!({ "command": "cat main.py; pwd" }),
    )
    .await
    .unwrap();
    let stdout = out["stdout"].as_str().unwrap();
    assert!(stdout.contains("print(6 * 7)"));
    assert!(stdout.contains(&f.ws.canonicalize().unwrap().display().to_string()));
    // The sandbox, not the command's text, decides: however a write outside is spelled, the
    // kernel refuses it.
    for cmd in [
        "echo pwned > ../outside/secret.txt",
        "echo pwned > escape/secret.txt",
        "echo pwned > secret-link",
        "cp main.py escape/",
        "cd .. && touch outside/new.txt",
        "f=$(printf '%s' ../outs)ide; echo pwned > $f/new.txt",
    ] {
        let err = run(&Bash::default(), &f, json!({ "command": cmd }))
            .await
            .unwrap_err();
        assert!(err.0.contains("[sandbox: writes only in"), "{cmd}: {err}");
    }
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
    assert_eq!(std::fs::read_dir(&f.outside).unwrap().count(), 1);
    let err = run(&Bash::default(), &f, json!({ "command": "exit 3" }))
        .await
        .unwrap_err();
    assert!(err.0.starts_with("exit code 3"), "{err}");
}

#[tokio::test]
async fn bash_times_out_and_kills_its_process_group() {
    let f = fixture();
    let started = std::time::Instant::now();
    let err = run(
        &bash(),
        &f,
        json!({ "command": "trap '' TERM; sleep 30 & echo $! > bg.pid; sleep 30", "timeout_ms": 300 }),
    )
    .await
    .unwrap_err();
    assert!(err.0.contains("timed out after 300 ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid: i32 = std::fs::read_to_string(f.ws.join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if gone {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{pid} survived");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn bash_output_is_capped() {
    let f = fixture();
    let out = run(
        &bash(),
        &f,
        json!({ "command": "head -c 1000000 /dev/zero | tr '\\0' a" }),
    )
    .await
    .unwrap();
    let stdout = out["stdout"].as_str().unwrap();
    assert!(stdout.len() < 70_000);
    assert!(stdout.ends_with("[cut: 1000000 bytes in all]"));
}

#[test]
fn scripts_parse_and_bad_ones_name_the_place() {
    let script = Script::parse(
        r#"{ "prompts": ["go"], "turns": [ { "text": "hi", "tool_calls": [ { "name": "bash", "input": { "command": "ls" } } ] } ] }"#,
        "s.json",
    )
    .unwrap();
    assert_eq!(script.turns[0].tool_calls[0].name, "bash");
    assert_eq!(script.prompts, ["go"]);
    let err = Script::parse("{\n  \"turns\": [ { \"text\": 1 } ]\n}", "bad.json").unwrap_err();
    let Error::InvalidJson { origin, line, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(origin, "bad.json");
    assert_eq!(*line, 2);
    assert!(err.to_string().starts_with("bad.json:2:"), "{err}");
    let err = Script::parse(r#"{ "turnz": [] }"#, "typo.json").unwrap_err();
    assert!(err.to_string().contains("turnz"), "{err}");
    let err = Script::load("/no/such/script.json").unwrap_err();
    assert!(matches!(err, Error::Io { .. }));
}

#[tokio::test]
async fn a_scripted_provider_gives_each_session_its_own_cursor() {
    let p = ScriptedProvider::new()
        .turn(ScriptTurn::text("one").call("read_file", json!({ "path": "a" })))
        .turn(ScriptTurn::text("two"));
    let cancel = CancellationToken::new();
    let ask = |s: &'static str| ModelRequest {
        session_id: s,
        agent_type: None,
        messages: &[],
        tools: &[],
    };
    let a1 = p.complete(ask("a"), &cancel).await.unwrap();
    let b1 = p.complete(ask("b"), &cancel).await.unwrap();
    let a2 = p.complete(ask("a"), &cancel).await.unwrap();
    let a3 = p.complete(ask("a"), &cancel).await.unwrap();
    assert_eq!((a1.text.as_str(), b1.text.as_str()), ("one", "one"));
    assert_eq!(a1.tool_calls[0].id, "toolu_01");
    assert_eq!(a2.text, "two");
    assert_eq!(
        a3,
        ModelResponse::default(),
        "past the end: the model stops"
    );
}
