//! Hostile hooks and inputs (issue 14): detached grandchildren holding a child's pipes, huge
//! numbers as durations from every source, replies and files larger than their caps, and the
//! TimingHook's memory over a million calls.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use hookbus::bounds::MAX_TIMEOUT;
use hookbus::builtins::{TimingHook, ToolTiming};
use hookbus::claude::{ClaudeSettings, CompatOptions, HandlerOutcome, HandlerRun, REPORT_KEY};
use hookbus::tools::Bash;
use hookbus::*;
use serde_json::{json, Value};

// ---- helpers ----

/// Pids of live processes whose command line contains `marker` (zombies have none).
fn alive(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Waits up to a second for the processes matching `marker` to be gone (a killed process is
/// gone once the kernel tore it down; init reaps it later).
fn gone(marker: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        if alive(marker).is_empty() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A unique `sleep` duration, so that a test finds its own grandchild by command line.
fn marker(base: u32) -> String {
    format!(
        "{base}.{}{:04}",
        std::process::id() % 1000,
        fastrand::u32(0..10_000)
    )
}

fn settings(doc: Value) -> ClaudeSettings {
    ClaudeSettings::parse(
        &[("s.json".into(), doc.to_string())],
        CompatOptions::default(),
    )
    .expect("valid settings")
}

fn pre_handler(handler: Value) -> Value {
    json!({ "hooks": { "PreToolUse": [{ "matcher": "*", "hooks": [handler] }] } })
}

async fn dispatch_pre(s: &ClaudeSettings) -> (Outcome, Duration) {
    let bus = Bus::new();
    s.register(&bus).await.unwrap();
    let session = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let started = Instant::now();
    let outcome = session
        .dispatch(Event::PreToolUse(PreToolUse {
            tool_name: "Bash".into(),
            tool_input: json!({ "command": "ls" }),
            tool_use_id: "t1".into(),
        }))
        .await
        .unwrap();
    let took = started.elapsed();
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
    (outcome, took)
}

fn runs(o: &Outcome) -> Vec<HandlerRun> {
    o.metadata
        .iter()
        .filter(|m| m.value.0 == REPORT_KEY)
        .map(|m| serde_json::from_value(m.value.1.clone()).unwrap())
        .collect()
}

// ---- 1. one child-process runner ----

/// The issue's hook: a grandchild that leaves the process group and holds stdout and stderr,
/// then exit 2. The deny comes at once (well within `timeout + 1 s`), with or without
/// `onFailure: "block"`, and the grandchild is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_grandchild_does_not_hold_back_a_command_hooks_deny() {
    for on_failure in [Some("block"), None] {
        let m = marker(15);
        let mut handler = json!({
            "type": "command",
            "command": format!("setsid sleep {m} & sleep 0.3; echo NO >&2; exit 2"),
            "timeout": 2
        });
        if let Some(f) = on_failure {
            handler["onFailure"] = json!(f);
        }
        let (outcome, took) = dispatch_pre(&settings(pre_handler(handler))).await;
        assert!(
            took < Duration::from_secs(3),
            "{on_failure:?}: took {took:?}"
        );
        assert_eq!(outcome.decision, Decision::Block, "{on_failure:?}");
        assert_eq!(outcome.reason_text(), "NO");
        let run = &runs(&outcome)[0];
        assert_eq!(run.report.outcome, HandlerOutcome::BlockingError);
        assert_eq!(run.report.exit_code, Some(2));
        assert!(gone(&m), "{on_failure:?}: the grandchild survived");
    }
}

/// At the deadline the whole tree goes, a descendant that left the group and closed its
/// pipes included, and `onFailure: "block"` denies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_hook_past_its_deadline_is_killed_with_everything_it_started() {
    let (held, detached) = (marker(16), marker(17));
    let handler = json!({
        "type": "command",
        "command": format!(
            "setsid sleep {held} & setsid sleep {detached} >/dev/null 2>&1 </dev/null & sleep 30"
        ),
        "timeout": 1,
        "onFailure": "block"
    });
    let (outcome, took) = dispatch_pre(&settings(pre_handler(handler))).await;
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(outcome.decision, Decision::Block);
    assert_eq!(runs(&outcome)[0].report.outcome, HandlerOutcome::Timeout);
    assert!(gone(&held), "the grandchild holding the pipes survived");
    assert!(gone(&detached), "the detached descendant survived");
}

fn bash_cx(dir: &Path) -> ToolCx {
    ToolCx {
        cancel: CancellationToken::new(),
        cwd: dir.to_path_buf(),
        session_id: "s".into(),
        tool_use_id: "t".into(),
    }
}

/// The sandboxed tool where the kernel has Landlock, else the explicit opt-out (what is tested
/// here is the process handling).
fn bash_tool() -> Bash {
    if hookbus::sandbox::landlock_abi().is_some() {
        Bash::default()
    } else {
        Bash::default().with_sandbox(SandboxPolicy::Unconfined)
    }
}

/// The same trick against the `bash` tool: its answer comes when the command exits, and at
/// its timeout when it does not, with the grandchild gone either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_grandchild_does_not_hold_back_the_bash_tool() {
    let dir = tempfile::tempdir().unwrap();
    let bash = bash_tool();
    let m = marker(18);
    let started = Instant::now();
    let err = bash
        .execute(
            json!({
                "command": format!("setsid sleep {m} & sleep 0.3; echo NO >&2; exit 2"),
                "timeout_ms": 2000
            }),
            bash_cx(dir.path()),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        err.0.starts_with("exit code 2") && err.0.contains("NO"),
        "{err}"
    );
    assert!(gone(&m), "the grandchild survived");

    let m = marker(19);
    let started = Instant::now();
    let err = bash
        .execute(
            json!({
                "command": format!("echo started; setsid sleep {m} & sleep 30"),
                "timeout_ms": 1000
            }),
            bash_cx(dir.path()),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(err.0.contains("timed out after 1000 ms"), "{err}");
    assert!(err.0.contains("stdout so far:\nstarted"), "{err}");
    assert!(gone(&m), "the grandchild survived the timeout");
}

/// A call abandoned half-way (its future dropped) leaves nothing behind either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_bash_call_kills_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker(20);
    let cx = bash_cx(dir.path());
    let command = format!("setsid sleep {m} & sleep 30");
    let call =
        tokio::spawn(async move { bash_tool().execute(json!({ "command": command }), cx).await });
    let until = Instant::now() + Duration::from_secs(5);
    while alive(&m).is_empty() {
        assert!(Instant::now() < until, "the grandchild never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    assert!(gone(&m), "the grandchild survived its abandoned call");
}

// ---- 2. overflow-safe durations: one test per source ----

fn hookbus_cli() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_hookbus"))
}

/// A minimal replay: one tool call, one hook that allows it.
fn replay_files(dir: &Path) -> (String, String) {
    let settings = dir.join("settings.json");
    std::fs::write(
        &settings,
        pre_handler(json!({ "type": "command", "command": "exit 0" })).to_string(),
    )
    .unwrap();
    let transcript = dir.join("t.jsonl");
    std::fs::write(
        &transcript,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"tu1","name":"Bash","input":{"command":"ls"}}]}}"#,
    )
    .unwrap();
    (
        settings.display().to_string(),
        transcript.display().to_string(),
    )
}

/// A command-line flag: past the maximum it is refused with the range, exit 2; at the maximum
/// it runs.
#[test]
fn a_huge_default_timeout_flag_is_refused_with_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let (settings, transcript) = replay_files(dir.path());
    let run = |timeout: &str| {
        hookbus_cli()
            .args([
                "replay",
                "--settings",
                &settings,
                "--transcript",
                &transcript,
            ])
            .args(["--default-timeout", timeout])
            .output()
            .unwrap()
    };
    let out = run("18446744073709551615");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not in 1..=86400"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let out = run("86400");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("decision: none"));
}

/// The environment: a huge `HOOK_TIMEOUT_SECS` is clamped with a warning and the demo runs to
/// its end with status 0; no worker panics.
#[test]
fn a_huge_hook_timeout_secs_is_clamped_and_the_demo_runs() {
    for (value, says) in [
        ("9223372036854775807", "using 86400 s"),
        ("1e400", "ignored, the default 30 s applies"),
    ] {
        let out = hookbus_cli()
            .arg("demo")
            .env("HOOK_TIMEOUT_SECS", value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{value}: {stderr}");
        assert!(stderr.contains(says), "{value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{value}: {stderr}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("[Turn 1] completed"));
    }
}

/// A settings file: a huge `timeout` is clamped to the maximum with a warning naming the key,
/// and the handler runs.
#[tokio::test]
async fn a_huge_settings_timeout_is_clamped_with_a_warning() {
    let s = settings(pre_handler(json!({
        "type": "command", "command": "exit 0", "timeout": 1e300
    })));
    assert_eq!(s.handlers[0].timeout, MAX_TIMEOUT);
    let warning = s.warnings[0].to_string();
    assert!(
        warning.contains("hooks.PreToolUse[0].hooks[0].timeout")
            && warning.contains("maximum of 86400 s"),
        "{warning}"
    );
    // The default from CompatOptions is clamped the same way.
    let s = ClaudeSettings::parse(
        &[(
            "s.json".into(),
            pre_handler(json!({ "type": "command", "command": "exit 0" })).to_string(),
        )],
        CompatOptions {
            default_timeout: Duration::MAX,
            ..CompatOptions::default()
        },
    )
    .unwrap();
    assert_eq!(s.handlers[0].timeout, MAX_TIMEOUT);
    let (outcome, _) = dispatch_pre(&s).await;
    assert_eq!(runs(&outcome)[0].report.outcome, HandlerOutcome::Success);
}

/// JSON from the model: `timeout_ms` beyond any clock is the tool's own timeout, and the call
/// runs.
#[tokio::test]
async fn a_huge_timeout_ms_from_the_model_runs_under_the_tools_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let out = bash_tool()
        .execute(
            json!({ "command": "echo hi", "timeout_ms": u64::MAX }),
            bash_cx(dir.path()),
        )
        .await
        .unwrap();
    assert_eq!(out["stdout"], "hi\n");
}

/// A hook that fails once, so its circuit breaker opens.
struct FailsOnce;

#[async_trait]
impl Hook for FailsOnce {
    fn name(&self) -> &str {
        "fails-once"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PreToolUse])
            .timeout(Duration::MAX)
            .circuit_breaker(1, Duration::MAX)
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        Err(HookError::new("down"))
    }
}

/// An observer that would wait forever.
struct Patient;

#[async_trait]
impl Observer for Patient {
    fn name(&self) -> &str {
        "patient"
    }
    fn options(&self) -> ObserverOptions {
        ObserverOptions {
            timeout: Duration::MAX,
            enqueue_wait: Duration::MAX,
            ..ObserverOptions::default()
        }
    }
    async fn on_event(&self, _: &std::sync::Arc<Envelope>) {}
}

/// The Rust API: `Duration::MAX` as default timeout, hook timeout, circuit-breaker cool-down,
/// observer timeout, grace period, approval timeout and shutdown deadline: no panic, clamped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_max_through_the_rust_api_is_clamped() {
    let bus = Bus::builder()
        .default_timeout(Duration::MAX)
        .session_end_grace(Duration::MAX)
        .build();
    bus.register(FailsOnce).await.unwrap();
    bus.observe(Patient).await.unwrap();
    let session = bus.open_session(BusSessionConfig::new()).await.unwrap();
    for id in ["1", "2"] {
        let outcome = session
            .dispatch(Event::PreToolUse(PreToolUse {
                tool_name: "Bash".into(),
                tool_input: json!({}),
                tool_use_id: id.into(),
            }))
            .await
            .unwrap();
        assert_eq!(outcome.decision, Decision::Continue);
    }
    assert_eq!(bus.metrics().hook_skipped, 1);
    session.close("other").await.unwrap();
    bus.shutdown(Duration::MAX).await;
    assert_eq!(
        Bash::with_timeout(Duration::MAX).timeout(),
        MAX_TIMEOUT + Duration::from_secs(5)
    );
    let agent = Agent::builder()
        .approval_timeout(Duration::MAX)
        .build()
        .await
        .unwrap();
    agent.shutdown(Duration::MAX).await;
}

// ---- 3. caps on what is read from outside ----

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    common::rss_bytes()
}

/// Serves one request with a chunked 200 reply of `size` bytes (a JSON string that never
/// ends within the cap), until the client goes away.
async fn huge_reply_server(size: usize) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("\r\n\r\n") {
            let n = sock.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
        if sock.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let chunk = vec![b'x'; 1 << 20];
        let mut sent = 0;
        let mut first = true;
        while sent < size {
            let body: &[u8] = if first { b"{\"a\":\"" } else { &chunk };
            first = false;
            let frame = [format!("{:x}\r\n", body.len()).as_bytes(), body, b"\r\n"].concat();
            if sock.write_all(&frame).await.is_err() {
                return; // the client stopped reading: the cap worked
            }
            sent += body.len();
        }
        let _ = sock.write_all(b"0\r\n\r\n").await;
    });
    addr
}

/// An HTTP hook answering 100 MB: read up to the cap (1 MiB), a non-blocking error with a
/// warning (a block with `onFailure: "block"`), and the process does not grow by the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_hooks_huge_reply_is_capped() {
    for block in [false, true] {
        let addr = huge_reply_server(100 << 20).await;
        let mut handler =
            json!({ "type": "http", "url": format!("http://{addr}/"), "timeout": 30 });
        if block {
            handler["onFailure"] = json!("block");
        }
        let before = rss();
        let (outcome, took) = dispatch_pre(&settings(pre_handler(handler))).await;
        let grown = rss().saturating_sub(before);
        assert!(grown < 40 << 20, "RSS grew by {grown} bytes");
        assert!(took < Duration::from_secs(10), "took {took:?}");
        let run = &runs(&outcome)[0];
        assert_eq!(run.report.outcome, HandlerOutcome::NonBlockingError);
        let says = format!("answered more than {} bytes", 1 << 20);
        if block {
            assert_eq!(outcome.decision, Decision::Block);
            assert!(
                outcome.reason_text().contains(&says),
                "{}",
                outcome.reason_text()
            );
        } else {
            assert_eq!(outcome.decision, Decision::Continue);
            assert!(
                outcome.warnings.iter().any(|w| w.value.contains(&says)),
                "{:?}",
                outcome.warnings
            );
        }
    }
}

/// A settings file past its cap and a transcript line past its cap: errors naming the file
/// (and line) and the limit.
#[test]
fn oversized_settings_and_transcript_lines_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("settings.json");
    let pad = " ".repeat((hookbus::bounds::MAX_SETTINGS_BYTES + 1) as usize);
    std::fs::write(&big, format!("{{}}{pad}")).unwrap();
    let err = ClaudeSettings::load(&[&big], CompatOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("settings.json") && err.contains("the limit for a settings file"),
        "{err}"
    );

    let transcript = dir.path().join("t.jsonl");
    let long = format!(
        "{{\"type\":\"user\",\"message\":{{\"content\":\"{}\"}}}}",
        "x".repeat(hookbus::bounds::MAX_TRANSCRIPT_LINE_BYTES)
    );
    std::fs::write(&transcript, format!("{{\"type\":\"user\"}}\n{long}\n")).unwrap();
    let err = hookbus::claude::replay::Transcript::load(&transcript)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("t.jsonl:2:") && err.contains("the limit for a line"),
        "{err}"
    );
}

// ---- 4. bounded built-ins ----

/// TimingHook's size is flat over a million calls: histograms, not a list. Through the bus
/// first (real pairing), then a million recorded calls with fresh ids and tool names.
#[tokio::test]
async fn timing_hook_memory_is_flat_over_a_million_calls() {
    let timing = TimingHook::new();
    let bus = Bus::new();
    bus.register(timing.clone()).await.unwrap();
    let session = bus
        .open_session(BusSessionConfig::new().id("s"))
        .await
        .unwrap();
    for i in 0..300u32 {
        let tool = format!("tool-{:03}", i % 100);
        let id = format!("id-{i:08}");
        session
            .dispatch(Event::PreToolUse(PreToolUse {
                tool_name: tool.clone(),
                tool_input: json!({}),
                tool_use_id: id.clone(),
            }))
            .await
            .unwrap();
        session
            .dispatch(Event::PostToolUse(PostToolUse {
                tool_name: tool,
                tool_input: json!({}),
                original_input: None,
                tool_response: json!("ok"),
                original_response: None,
                tool_use_id: id,
                is_error: false,
                duration_ms: 1,
            }))
            .await
            .unwrap();
    }
    assert_eq!(timing.open_timers(), 0);
    let warm = timing.memory_bytes();
    assert!(warm < 4 << 20, "{warm} bytes");
    let call = |i: u32| ToolTiming {
        session_id: "s".into(),
        tool_use_id: format!("id-{i:08}"),
        tool_name: format!("tool-{:03}", i % 1000),
        elapsed: Duration::from_micros(u64::from(i % 5000) + 1),
        failed: i.is_multiple_of(7),
    };
    for i in 0..1_000 {
        timing.record(call(i));
    }
    let after_thousand = timing.memory_bytes();
    // Only the text of the kept recent calls may differ from the calls made through the bus.
    assert!(
        after_thousand < warm + 100 * 64,
        "{warm} → {after_thousand}"
    );
    for i in 1_000..1_000_000 {
        timing.record(call(i));
    }
    assert_eq!(
        timing.memory_bytes(),
        after_thousand,
        "memory grew with the calls"
    );
    let stats = timing.stats();
    assert_eq!(stats.all.count, 1_000_300);
    assert_eq!(stats.tools.len(), 65, "64 tools and the shared rest");
    assert_eq!(timing.recent().len(), 100);

    // Calls that never finish: at most the open-timer limit is kept, the rest counted.
    session.close("other").await.unwrap();
    let timing = TimingHook::new().max_open_timers(50);
    let bus = Bus::new();
    bus.register(timing.clone()).await.unwrap();
    let other = bus.open_session(BusSessionConfig::new()).await.unwrap();
    for i in 0..200 {
        other
            .dispatch(Event::PreToolUse(PreToolUse {
                tool_name: "bash".into(),
                tool_input: json!({}),
                tool_use_id: format!("{i}"),
            }))
            .await
            .unwrap();
    }
    assert_eq!(timing.open_timers(), 50);
    assert_eq!(timing.stats().untimed, 150);
    other.close("other").await.unwrap();
    assert_eq!(timing.open_timers(), 0);
}
