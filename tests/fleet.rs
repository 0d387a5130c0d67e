//! A fleet on one machine: `hookbus serve` instances, `hookbus worker` processes serving the
//! hooks of a Claude Code settings file, and a `hookbus observe` process, all on a private
//! `nats-server` (skipped with the reason when it is not installed; a failure under
//! `HOOKBUS_REQUIRE_EXTERNAL=1`).
#![cfg(all(feature = "nats", feature = "cli", feature = "bench"))]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http::{Svc, OTHER, TOKEN};
use common::nats::NatsServer;
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// A `hookbus` process whose stdout lines are collected; killed when dropped.
struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    fn spawn(args: &[&str]) -> Proc {
        Self::spawn_with_token(args, TOKEN)
    }

    fn spawn_with_token(args: &[&str], token: &str) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hookbus"))
            .args(args)
            .env("HOOKBUS_TOKEN", token)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start hookbus");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let stdout = child.stdout.take().expect("its stdout");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().push(line);
            }
        });
        Proc { child, lines }
    }

    /// Waits for a line starting with `prefix` and answers it.
    fn wait_line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(line) = self.lines.lock().iter().find(|l| l.starts_with(prefix)) {
                return line.clone();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no line starting with {prefix:?}: {:?}", self.lines.lock());
    }

    /// `kill -9`.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A `hookbus serve` instance and a client of it.
fn instance(nats: &NatsServer, name: &str, dir: &Path, extra: &[&str]) -> (Proc, Svc) {
    let token_file = dir.join("tokens");
    let settings = dir.join("perms.json");
    let mut args = vec![
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--nats",
        &nats.url,
        "--instance",
        name,
        "--remote-settings",
        dir.join("policy.json").to_str().unwrap(),
        "--settings",
        settings.to_str().unwrap(),
        "--token-file",
        token_file.to_str().unwrap(),
        "--max-sessions",
        "256",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proc = Proc::spawn(&args);
    let line = proc.wait_line("hookbus service listening on http://");
    let addr = line.rsplit('/').next().unwrap().parse().unwrap();
    proc.wait_line("fleet instance");
    (proc, Svc::remote(addr))
}

/// The fleet's files: a policy hook script (denies commands with `forbidden`, adds context to
/// the rest, after `delay` seconds), its settings, permission rules, and a token file.
fn fleet_files(delay: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("policy.sh");
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
input=$(cat)
sleep {delay}
case "$input" in
  *forbidden*) echo '{{"hookSpecificOutput":{{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"the policy forbids it"}}}}';;
  *) echo '{{"hookSpecificOutput":{{"hookEventName":"PreToolUse","additionalContext":"policy checked"}}}}';;
esac
"#
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let policy = json!({"hooks": {"PreToolUse": [{"matcher": "bash", "hooks": [
        {"type": "command", "command": script, "timeout": 2}
    ]}]}});
    std::fs::write(dir.path().join("policy.json"), policy.to_string()).unwrap();
    let perms = json!({"permissions": {"allow": ["Bash(echo:*)", "Bash(sleep:*)"]}});
    std::fs::write(dir.path().join("perms.json"), perms.to_string()).unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("other {OTHER}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    dir
}

fn worker(nats: &NatsServer, dir: &Path) -> Proc {
    let policy = dir.join("policy.json");
    let proc = Proc::spawn(&[
        "worker",
        "--nats",
        &nats.url,
        "--settings",
        policy.to_str().unwrap(),
    ]);
    proc.wait_line("worker ready");
    proc
}

fn observer(nats: &NatsServer) -> Proc {
    Proc::spawn(&["observe", "--nats", &nats.url, "--durable", "fleet-test"])
}

fn command_of(i: usize) -> String {
    if i.is_multiple_of(5) {
        format!("echo forbidden {i}")
    } else {
        format!("echo hi {i}")
    }
}

/// Opens session `id`, runs one turn with one bash call, closes it; answers the turn's calls.
async fn one_session(svc: &Svc, id: &str, command: &str) -> Value {
    let script = json!({"turns": [
        {"text": "run", "tool_calls": [{"name": "bash", "input": {"command": command}}]},
        {"text": "done"}
    ]});
    svc.open(id, script, None).await;
    let turn = svc.turn(id, "go").await.unwrap();
    let (status, _) = svc.delete(&format!("/sessions/{id}")).await;
    assert_eq!(status, 200);
    turn["calls"].clone()
}

/// Each session's envelopes as the observer printed them, by session: (seq, kind).
fn observed(lines: &[String]) -> BTreeMap<String, Vec<(u64, String)>> {
    let mut by_session: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for line in lines {
        let v: Value = serde_json::from_str(line).unwrap();
        let env = &v["envelope"];
        by_session
            .entry(env["session_id"].as_str().unwrap().to_owned())
            .or_default()
            .push((
                env["seq"].as_u64().unwrap(),
                env["hook_event_name"].as_str().unwrap().to_owned(),
            ));
    }
    by_session
}

/// Waits until the observer printed `sessions` SessionEnds, then checks each session: every
/// envelope from 1 to its SessionEnd, in order (a repeat after a restart is allowed).
fn check_observed(observer: &Arc<Mutex<Vec<String>>>, sessions: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ends = observer
            .lock()
            .iter()
            .filter(|l| l.contains("\"SessionEnd\""))
            .count();
        if ends >= sessions {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{ends} of {sessions} sessions ended at the observer"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let by_session = observed(&observer.lock());
    assert_eq!(by_session.len(), sessions);
    for (id, events) in by_session {
        // At least once: after a restart, what the first life printed but had not yet
        // acknowledged comes again. Keep each envelope's first delivery; what is left must be
        // every envelope, in order.
        let mut last = 0;
        let events: Vec<(u64, String)> = events
            .into_iter()
            .filter(|(seq, _)| {
                let first = *seq > last;
                last = last.max(*seq);
                first
            })
            .collect();
        let seqs: Vec<u64> = events.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "{id}: {events:?}"
        );
        assert_eq!(events[0].1, "SessionStart", "{id}");
        assert_eq!(events.last().unwrap().1, "SessionEnd", "{id}");
    }
}

fn reminders(calls: &Value) -> String {
    calls[0]["reminders"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_on_two_instances_are_decided_by_remote_workers_and_observed_in_order()
{
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let files = fleet_files("0");
    let dir = files.path();
    let _workers = [worker(&nats, dir), worker(&nats, dir)];
    let watcher = observer(&nats);
    let (_a, a) = instance(&nats, "a", dir, &[]);
    let (_b, b) = instance(&nats, "b", dir, &[]);
    // The same settings in process, for the reference fold.
    let reference = Proc::spawn(&[
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--settings",
        dir.join("policy.json").to_str().unwrap(),
        "--settings",
        dir.join("perms.json").to_str().unwrap(),
    ]);
    let line = reference.wait_line("hookbus service listening on http://");
    let local = Svc::remote(line.rsplit('/').next().unwrap().parse().unwrap());

    const SESSIONS: usize = 1000;
    let svcs = [&a, &b];
    let local = &local;
    let results: Vec<(usize, Value, Value)> = futures_util::stream::iter(0..SESSIONS)
        .map(|i| {
            let svc = svcs[i % 2];
            async move {
                let command = command_of(i);
                let remote = one_session(svc, &format!("s{i}"), &command).await;
                let in_process = one_session(local, &format!("ref{i}"), &command).await;
                (i, remote, in_process)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for (i, calls, expected) in &results {
        let forbidden = i.is_multiple_of(5);
        let status = calls[0]["status"]["status"].as_str().unwrap();
        if forbidden {
            assert_eq!(status, "blocked", "s{i}: {calls}");
            assert!(calls[0]["content"]
                .to_string()
                .contains("the policy forbids it"));
        } else {
            assert_eq!(status, "completed", "s{i}: {calls}");
            assert!(reminders(calls).contains("policy checked"), "s{i}: {calls}");
        }
        assert_eq!(
            calls, expected,
            "s{i}: the remote fold differs from the in-process one"
        );
    }
    check_observed(&watcher.lines, SESSIONS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_and_the_observer_mid_run_hangs_no_session_and_loses_no_event() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    // Each hook call takes 1 s (its timeout is 2 s). The doomed worker serves alone at first,
    // so at the kill it holds the calls of the last second.
    let files = fleet_files("1");
    let dir = files.path();
    let mut doomed = worker(&nats, dir);
    let mut watcher = observer(&nats);
    let (_a, a) = instance(&nats, "a", dir, &[]);
    const SESSIONS: usize = 96;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let run = {
        let done = done.clone();
        async move {
            futures_util::stream::iter(0..SESSIONS)
                .map(|i| {
                    let (a, done) = (&a, done.clone());
                    async move {
                        let started = Instant::now();
                        let calls = one_session(a, &format!("k{i}"), &format!("echo hi {i}")).await;
                        done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        (i, started.elapsed(), calls)
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
        }
    };
    let run = tokio::spawn(run);
    while done.load(std::sync::atomic::Ordering::SeqCst) < 16 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The second worker joins; the first dies with its calls in flight (a call made before
    // the second is ready finds no worker: it fails open at once).
    let survivor = Proc::spawn(&[
        "worker",
        "--nats",
        &nats.url,
        "--settings",
        dir.join("policy.json").to_str().unwrap(),
    ]);
    doomed.kill9();
    watcher.kill9();
    survivor.wait_line("worker ready");
    let before_restart = watcher.lines.lock().clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let restarted = observer(&nats);
    let results = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("no session hangs")
        .unwrap();
    assert_eq!(results.len(), SESSIONS);
    let unchecked: Vec<usize> = results
        .iter()
        .filter(|(_, _, calls)| !reminders(calls).contains("policy checked"))
        .map(|(i, _, _)| *i)
        .collect();
    for (i, took, calls) in &results {
        // Fail-open: a call lost with the worker times out (2 s) and the tool still runs.
        assert_eq!(calls[0]["status"]["status"], "completed", "k{i}: {calls}");
        assert!(*took < Duration::from_secs(10), "k{i} took {took:?}");
    }
    assert!(
        !unchecked.is_empty(),
        "the calls in flight on the killed worker timed out and failed open"
    );
    // The last sessions started long after the survivor was ready: it served them all.
    for (i, _, calls) in results.iter().filter(|(i, _, _)| *i >= SESSIONS - 16) {
        assert!(reminders(calls).contains("policy checked"), "k{i}: {calls}");
    }
    // The observer's two lives together saw every event.
    let all = Arc::new(Mutex::new(before_restart));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ends = restarted
            .lines
            .lock()
            .iter()
            .chain(all.lock().iter())
            .filter(|l| l.contains("\"SessionEnd\""))
            .count();
        if ends >= SESSIONS || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    all.lock().extend(restarted.lines.lock().iter().cloned());
    check_observed(&all, SESSIONS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_raised_on_one_instance_is_answered_through_another() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let files = fleet_files("0");
    let dir = files.path();
    let _worker = worker(&nats, dir);
    let (_a, a) = instance(&nats, "a", dir, &[]);
    let (_b, b) = instance(&nats, "b", dir, &[]);
    // `touch` has no allow rule: it asks.
    let script = json!({"turns": [
        {"text": "run", "tool_calls": [{"name": "bash", "input": {"command": "touch made-on-a"}}]},
        {"text": "done"}
    ]});
    a.open("asks", script, None).await;
    let turn = a.turn("asks", "go");
    let approval = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(x) = b
                .approvals()
                .await
                .into_iter()
                .find(|x| x["instance"] == "a")
            {
                break x;
            }
            assert!(
                Instant::now() < deadline,
                "instance b never listed a's approval"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_eq!(approval["session_id"], "asks");
    let id = approval["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("a:"), "{id}");
    // Another identity sees nothing and cannot answer it, on either instance.
    let other_b = b.as_token(OTHER);
    assert!(other_b.approvals().await.is_empty());
    let (status, _) = other_b
        .post(&format!("/approvals/{id}"), json!({"decision": "allow"}))
        .await;
    assert_eq!(status, 404);
    // Its owner answers on b (the id as the list gave it, quotes and all); the tool runs on a.
    let (status, body) = b.answer(&approval, json!({"decision": "allow"})).await;
    assert_eq!(status, 200, "{body}");
    let result = tokio::time::timeout(Duration::from_secs(20), turn)
        .await
        .expect("the turn on a ends")
        .unwrap();
    assert_eq!(
        result["calls"][0]["status"]["status"], "completed",
        "{result}"
    );
    assert_eq!(result["calls"][0]["executed"], true);
    // It is gone from b's list once answered.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.approvals().await.iter().any(|x| x["id"] == id.as_str()) {
        assert!(
            Instant::now() < deadline,
            "the answered approval stays listed on b"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An unknown instance's approval is 404.
    let (status, _) = b
        .post("/approvals/zz:1", json!({"decision": "allow"}))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_of_the_same_name_with_another_token_is_another_identity_in_the_fleet() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let files = fleet_files("0");
    let dir = files.path();
    let (_a, a) = instance(&nats, "a", dir, &[]);
    // c's primary identity is also `operator`, with its own token.
    let other_token = "a-different-operator-token-0123456789";
    let c_proc = Proc::spawn_with_token(
        &[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--nats",
            &nats.url,
            "--instance",
            "c",
        ],
        other_token,
    );
    let line = c_proc.wait_line("hookbus service listening on http://");
    c_proc.wait_line("fleet instance");
    let c = Svc::remote(line.rsplit('/').next().unwrap().parse().unwrap()).as_token(other_token);
    let script = json!({"turns": [
        {"text": "run", "tool_calls": [{"name": "bash", "input": {"command": "touch x"}}]},
        {"text": "done"}
    ]});
    a.open("asks", script, None).await;
    let _turn = a.turn("asks", "go");
    let id = a.wait_for_approval().await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // c heard of it (its announcement had time to arrive), and neither lists nor answers it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(c.approvals().await.is_empty());
    let (status, _) = c
        .post(&format!("/approvals/{id}"), json!({"decision": "allow"}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(a.approvals().await.len(), 1, "still pending on a");
}

#[test]
fn a_second_live_instance_of_the_same_name_is_refused() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let files = fleet_files("0");
    let (_first, _) = instance(&nats, "twin", files.path(), &[]);
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--nats",
            &nats.url,
            "--instance",
            "twin",
        ])
        .env("HOOKBUS_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"twin\" is in use"), "{err}");
}

#[test]
fn serve_refuses_a_bad_remote_hook_and_one_without_nats_naming_what_is_wrong() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
            .args(args)
            .env("HOOKBUS_TOKEN", TOKEN)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(&["serve", "--remote-hook", "policy,colour=blue"]);
    assert!(!ok);
    assert!(
        err.contains("policy,colour=blue") && err.contains("unknown key"),
        "{err}"
    );
    let (ok, err) = run(&["serve", "--remote-hook", "policy,events=NoSuchEvent"]);
    assert!(!ok);
    assert!(err.contains("NoSuchEvent"), "{err}");
    let (ok, err) = run(&["serve", "--remote-hook", "policy,timeout=0s"]);
    assert!(!ok);
    assert!(err.contains("timeout"), "{err}");
    let (ok, err) = run(&["serve", "--addr", "127.0.0.1:0", "--remote-hook", "policy"]);
    assert!(!ok);
    assert!(err.contains("need --nats"), "{err}");
    let (ok, err) = run(&[
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--nats",
        "nats://127.0.0.1:1",
        "--instance",
        "a.b",
    ]);
    assert!(!ok);
    assert!(err.contains("instance name \"a.b\""), "{err}");
}

/// The command of an audit record's final input (stored as JSON text).
fn audited_command(call: &Value) -> String {
    call["final_input"]
        .as_str()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|input| input["command"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `hookbus audit --db URL ARGS… --format json`, run as its own process.
fn audit_json(url: &str, args: &[&str]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args(["audit", "--db", url, "--format", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_leaves_its_committed_intents_in_postgres_and_its_interrupted_calls_in_doubt(
) {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let Some(pg) = common::postgres::PgServer::start_or_skip("the fleet's audit store") else {
        return;
    };
    let url = pg.create_database("fleet");
    let files = fleet_files("0");
    let dir = files.path();
    let _worker = worker(&nats, dir);
    let audit = ["--audit-db", url.as_str(), "--audit-durable"];
    let (mut doomed, a) = instance(&nats, "a", dir, &audit);
    let (_b, b) = instance(&nats, "b", dir, &audit);
    // On b, a session that finishes; on a, three whose second call is still running at the kill.
    let calls = one_session(&b, "on-b", "echo done on b").await;
    assert_eq!(calls[0]["status"]["status"], "completed", "{calls}");
    let mut turns = Vec::new();
    for i in 0..3 {
        let id = format!("on-a-{i}");
        let script = json!({"turns": [
            {"text": "run", "tool_calls": [
                {"name": "bash", "input": {"command": format!("echo first {i}")}},
                {"name": "bash", "input": {"command": "sleep 60"}}
            ]},
            {"text": "done"}
        ]});
        a.open(&id, script, None).await;
        turns.push(a.turn(&id, "go"));
    }
    // And b runs a call of its own through the kill: running, not in doubt.
    let script = json!({"turns": [
        {"text": "run", "tool_calls": [{"name": "bash", "input": {"command": "sleep 61"}}]},
        {"text": "done"}
    ]});
    b.open("busy-on-b", script, None).await;
    let _busy = b.turn("busy-on-b", "go");
    // The intents of the four sleeps are committed (the tools run only after that).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open = audit_json(&url, &["calls"])
            .into_iter()
            .filter(|c| audited_command(c).starts_with("sleep 6") && c["outcome"].is_null())
            .count();
        if open == 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} of 3 sleeps had a durable intent"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    doomed.kill9();
    drop(turns);
    // From the other side: every call is in the store, and exactly a's sleeps are in doubt
    // (b's, still running on a live instance, is not).
    let calls = audit_json(&url, &["calls"]);
    let commands: Vec<String> = calls.iter().map(audited_command).collect();
    for expected in [
        "echo done on b",
        "echo first 0",
        "echo first 1",
        "echo first 2",
    ] {
        let call = calls
            .iter()
            .find(|c| audited_command(c) == expected)
            .unwrap_or_else(|| panic!("{expected} is not in the store: {commands:?}"));
        assert_eq!(call["outcome"], "ok", "{call}");
    }
    let doubt = audit_json(&url, &["in-doubt"]);
    assert_eq!(doubt.len(), 3, "{doubt:?}");
    for call in &doubt {
        assert_eq!(audited_command(call), "sleep 60", "{call}");
        assert!(
            call["session_id"].as_str().unwrap().starts_with("on-a-"),
            "{call}"
        );
    }
    // b still serves, and writes the same store.
    let calls = one_session(&b, "after-kill", "echo still here").await;
    assert_eq!(calls[0]["status"]["status"], "completed", "{calls}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !audit_json(&url, &["calls", "--session", "after-kill"])
        .iter()
        .any(|c| c["outcome"] == "ok")
    {
        assert!(
            Instant::now() < deadline,
            "b's call after the kill never reached the store"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
