//! The SQLite audit log: every call once with its decision and outcome, across parallel
//! sessions; who blocked and why; the permission source of a denial; durable intents that
//! survive SIGKILL and are reported in doubt.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::audit_hooks::{NoRm, PreRewrite};
use hookbus::builtins::{AuditDb, AuditLog, AuditMode};
use hookbus::AgentBuilder;
use hookbus::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_parallel_sessions_each_call_once_with_decision_and_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.sqlite");
    let log = AuditLog::open(&db, AuditMode::BestEffort).unwrap();
    let script = || {
        ScriptedProvider::new()
            .turn(ScriptTurn::text("read").call("read_file", json!({ "path": "a.txt" })))
            .turn(ScriptTurn::text("rm").call("bash", json!({ "command": "rm -rf build" })))
            .turn(
                ScriptTurn::text("write")
                    .call("write_file", json!({ "path": "b.txt", "content": "x" })),
            )
            .turn(ScriptTurn::text("done"))
    };
    let agent = Agent::builder()
        .hook(NoRm)
        .permissions(PermissionConfig {
            global: RuleSet::new().deny("write_file").unwrap(),
            ..Default::default()
        })
        .approver(PolicyApprover::allow())
        .build()
        .await
        .unwrap();
    log.install(agent.bus()).await.unwrap();
    let mut runs = Vec::new();
    for i in 0..3 {
        let ws = dir.path().join(format!("ws{i}"));
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "hello").unwrap();
        let session = agent
            .open_session(
                SessionOptions::new(&ws)
                    .id(format!("s{i}"))
                    .provider(script()),
            )
            .await
            .unwrap();
        runs.push(tokio::spawn(async move {
            let r = session.run_turn("go").await.unwrap();
            session.close().await.unwrap();
            r
        }));
    }
    for r in runs {
        assert_eq!(r.await.unwrap().reason, TerminalReason::Completed);
    }
    agent.shutdown(Duration::from_secs(5)).await;
    let report = log.close().await;
    assert!(report.written > 0 && report.failed == 0, "{report:?}");

    let audit = AuditDb::open(&db).unwrap();
    assert!(audit.integrity_ok().unwrap());
    let sessions = audit.sessions().unwrap();
    assert_eq!(sessions.len(), 3);
    assert!(sessions
        .iter()
        .all(|s| s.end_reason.as_deref() == Some("other") && s.calls == 3));
    let calls = audit.calls(None).unwrap();
    assert_eq!(calls.len(), 9, "every call exactly once");
    for i in 0..3 {
        let session = format!("s{i}");
        let mine: Vec<_> = calls.iter().filter(|c| c.session_id == session).collect();
        let read = mine.iter().find(|c| c.tool_name == "read_file").unwrap();
        assert_eq!(read.decision.as_deref(), Some("allow"));
        assert_eq!(read.outcome.as_deref(), Some("ok"));
        assert_eq!(read.output_preview.as_deref(), Some("hello"));
        let rm = mine.iter().find(|c| c.tool_name == "bash").unwrap();
        assert_eq!(rm.decision.as_deref(), Some("blocked"));
        assert_eq!(rm.source.as_deref(), Some("hook"));
        assert_eq!(rm.decided_by.as_deref(), Some("no-rm"));
        assert_eq!(rm.reason.as_deref(), Some("rm is not allowed"));
        assert_eq!(rm.outcome.as_deref(), Some("not_run"));
        let write = mine.iter().find(|c| c.tool_name == "write_file").unwrap();
        assert_eq!(write.decision.as_deref(), Some("denied"));
        assert_eq!(write.source.as_deref(), Some("rule"));
        assert_eq!(write.outcome.as_deref(), Some("not_run"));
        assert!(mine.iter().all(|c| !c.in_doubt));
    }
    assert!(audit.in_doubt().unwrap().is_empty());
}

#[test]
fn a_database_that_is_not_an_audit_log_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.sqlite");
    let conn = rusqlite::Connection::open(&other).unwrap();
    conn.execute_batch("CREATE TABLE t (x INTEGER);").unwrap();
    drop(conn);
    let err = AuditDb::open(&other).unwrap_err().to_string();
    assert!(err.contains("not a hookbus audit log"), "{err}");
    let err = AuditLog::open(&other, AuditMode::BestEffort)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a hookbus audit log"), "{err}");
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "just text, long enough to not be a database header at all",
    )
    .unwrap();
    let err = AuditDb::open(&text).unwrap_err().to_string();
    assert!(
        err.contains("notes.txt") && err.contains("not a database"),
        "{err}"
    );
    // The CLI says the same, in one line, with a non-zero exit.
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args(["audit", "--db", other.to_str().unwrap(), "sessions"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a hookbus audit log") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// Runs the durable child until it printed `min_running` "running" lines and `extra` more time
/// passed, then SIGKILLs it; returns the calls it started.
fn run_and_kill(
    db: &std::path::Path,
    ws: &std::path::Path,
    min_running: usize,
    extra: Duration,
) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args([
            "durable-child",
            "--db",
            db.to_str().unwrap(),
            "--workspace",
            ws.to_str().unwrap(),
        ])
        .args(["--calls", "12", "--sleep-ms", "40"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut running = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while running.len() < min_running && std::time::Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                if let Some(id) = line.strip_prefix("running ") {
                    running.push(id.to_owned());
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    std::thread::sleep(extra);
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    // Lines printed before the kill.
    while let Ok(line) = rx.try_recv() {
        if let Some(id) = line.strip_prefix("running ") {
            running.push(id.to_owned());
        }
    }
    running
}

#[test]
fn a_killed_durable_session_keeps_its_records_and_reports_the_call_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.sqlite");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    // Killed while the fourth tool sleeps.
    let running = run_and_kill(&db, &ws, 4, Duration::from_millis(10));
    assert!(running.len() >= 4);
    let audit = AuditDb::open(&db).unwrap();
    assert!(audit.integrity_ok().unwrap());
    let calls = audit.calls(None).unwrap();
    for id in &running {
        let c = calls
            .iter()
            .find(|c| &c.tool_use_id == id)
            .unwrap_or_else(|| panic!("{id} lost"));
        assert!(c.intent_ms.is_some(), "{id} ran without a durable intent");
    }
    let last = running.last().unwrap();
    let doubt = audit.in_doubt().unwrap();
    assert!(
        doubt.iter().any(|c| &c.tool_use_id == last),
        "{last} not in doubt: {doubt:?}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args(["audit", "--db", db.to_str().unwrap(), "in-doubt"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(last.as_str()));
}

#[test]
fn kills_at_random_points_never_lose_a_committed_record_or_corrupt_the_database() {
    let dir = tempfile::tempdir().unwrap();
    for run in 0..20 {
        let db = dir.path().join(format!("audit-{run}.sqlite"));
        let ws = dir.path().join(format!("ws-{run}"));
        std::fs::create_dir(&ws).unwrap();
        let running = run_and_kill(
            &db,
            &ws,
            fastrand::usize(0..6),
            Duration::from_millis(fastrand::u64(0..60)),
        );
        if !db.exists() {
            assert!(running.is_empty());
            continue;
        }
        // A kill before the schema was written leaves nothing to check but the file itself.
        let Ok(audit) = AuditDb::open(&db) else {
            assert!(
                running.is_empty(),
                "run {run}: the log is unreadable after calls ran"
            );
            continue;
        };
        assert!(audit.integrity_ok().unwrap(), "run {run}: corrupt");
        let calls = audit.calls(None).unwrap();
        for id in &running {
            assert!(
                calls
                    .iter()
                    .any(|c| &c.tool_use_id == id && c.intent_ms.is_some()),
                "run {run}: the intent of {id} was lost"
            );
        }
        // Calls run one at a time: at most the one interrupted is in doubt, and every call that
        // started before it has its outcome.
        let doubt = audit.in_doubt().unwrap();
        assert!(doubt.len() <= 1, "run {run}: {doubt:?}");
        for id in running.iter().rev().skip(1) {
            let c = calls.iter().find(|c| &c.tool_use_id == id).unwrap();
            assert!(
                c.outcome.is_some(),
                "run {run}: {id} finished but its outcome was lost"
            );
        }
    }
}

/// Runs one session of `provider` with `log` installed (and `hooks`, `tools`, `permissions`),
/// then shuts everything down and closes the log.
async fn run_session(
    log: &AuditLog,
    provider: ScriptedProvider,
    build: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> TurnResult {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "A").unwrap();
    std::fs::write(ws.path().join("b.txt"), "B").unwrap();
    let agent = build(Agent::builder().provider(provider))
        .build()
        .await
        .unwrap();
    log.install(agent.bus()).await.unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("s"))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    let report = log.close().await;
    assert_eq!(report.failed, 0, "{report:?}");
    result
}

/// Two calls with the same `tool_use_id` in one turn, one after the other and side by side, are
/// rows of their own (attempts 1, 2) with their own inputs and outcomes, in both modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_sharing_a_tool_use_id_are_rows_of_their_own() {
    for mode in [AuditMode::BestEffort, AuditMode::Durable] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("audit.sqlite");
        let log = AuditLog::open(&db, mode).unwrap();
        let provider = ScriptedProvider::new()
            .turn(ScriptTurn::text("a").call_with_id(
                "dup",
                "read_file",
                json!({ "path": "a.txt" }),
            ))
            .turn(ScriptTurn::text("b").call_with_id(
                "dup",
                "read_file",
                json!({ "path": "b.txt" }),
            ))
            .turn(
                ScriptTurn::text("both")
                    .call_with_id("par", "read_file", json!({ "path": "b.txt" }))
                    .call_with_id("par", "read_file", json!({ "path": "a.txt" })),
            )
            .turn(ScriptTurn::text("done"));
        let result = run_session(&log, provider, |b| b).await;
        assert_eq!(result.reason, TerminalReason::Completed, "{mode:?}");
        let audit = AuditDb::open(&db).unwrap();
        let calls = audit.calls(Some("s")).unwrap();
        assert_eq!(calls.len(), 4, "{mode:?}: {calls:#?}");
        for (id, first, second) in [("dup", "a.txt", "b.txt"), ("par", "b.txt", "a.txt")] {
            let mine: Vec<_> = calls.iter().filter(|c| c.tool_use_id == id).collect();
            assert_eq!(mine.len(), 2, "{mode:?} {id}");
            assert_eq!((mine[0].attempt, mine[1].attempt), (1, 2), "{mode:?} {id}");
            assert!(mine
                .iter()
                .all(|c| c.turn == 1 && c.outcome.as_deref() == Some("ok")));
            for (c, file) in mine.iter().zip([first, second]) {
                assert!(
                    c.request_input.as_deref().unwrap().contains(file),
                    "{mode:?} {id}: {c:?}"
                );
                // Each outcome went to the row of its own input.
                let expected = if file == "a.txt" { "A" } else { "B" };
                assert_eq!(
                    c.output_preview.as_deref(),
                    Some(expected),
                    "{mode:?} {c:?}"
                );
                assert_eq!(c.intent_ms.is_some(), mode == AuditMode::Durable);
            }
        }
    }
}

/// A tool that reads its own row of the audit log while it runs (its intent is durable by then).
struct Probe {
    db: std::path::PathBuf,
}

#[async_trait]
impl Tool for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    async fn execute(
        &self,
        _: serde_json::Value,
        cx: ToolCx,
    ) -> Result<serde_json::Value, ToolError> {
        let audit = AuditDb::open(&self.db).map_err(|e| ToolError::new(e.to_string()))?;
        let calls = audit
            .calls(Some(&cx.session_id))
            .map_err(|e| ToolError::new(e.to_string()))?;
        let mine = calls
            .into_iter()
            .find(|c| c.tool_use_id == cx.tool_use_id)
            .ok_or_else(|| ToolError::new("no row for this call"))?;
        Ok(json!({
            "request_input": mine.request_input,
            "final_input": mine.final_input,
            "intent": mine.intent_ms.is_some(),
            "outcome": mine.outcome,
        }))
    }
}

/// Answers the probe's permission prompt with a rewritten input.
struct AskRewrite;

#[async_trait]
impl Hook for AskRewrite {
    fn name(&self) -> &str {
        "ask-rewrite"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PermissionRequest])
    }
    async fn permission_request(
        &self,
        _: &HookCx,
        ev: &PermissionRequest,
    ) -> HookResult<PermissionAction> {
        let mut input = ev.tool_input.clone();
        input["step"] = json!("permission");
        Ok(PermissionAction::allow_with_input(input, "rewritten at the prompt").into())
    }
}

/// The durable intent stores the input that runs, after a PreToolUse rewrite and a
/// PermissionRequest rewrite, beside the one the model asked for; it is committed before the
/// tool runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_intent_stores_the_rewritten_input_that_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.sqlite");
    let log = AuditLog::open(&db, AuditMode::Durable).unwrap();
    let provider = ScriptedProvider::new()
        .turn(ScriptTurn::text("probe").call_with_id("p1", "probe", json!({ "asked": true })))
        .turn(ScriptTurn::text("done"));
    let probe_db = db.clone();
    let result = run_session(&log, provider, move |b| {
        b.tool(Probe { db: probe_db })
            .hook(PreRewrite)
            .hook(AskRewrite)
            .permissions(PermissionConfig {
                global: RuleSet::new().ask("probe").unwrap(),
                ..Default::default()
            })
    })
    .await;
    let call = &result.calls[0];
    assert!(call.executed, "{call:?}");
    let seen: serde_json::Value = serde_json::from_str(&call.content).unwrap();
    let ran = json!({ "asked": true, "step": "permission" });
    assert_eq!(
        seen["intent"], true,
        "the intent was committed before the tool ran"
    );
    assert_eq!(seen["outcome"], serde_json::Value::Null);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(seen["final_input"].as_str().unwrap()).unwrap(),
        ran
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(seen["request_input"].as_str().unwrap()).unwrap(),
        json!({ "asked": true })
    );
    let row = AuditDb::open(&db).unwrap().call("p1").unwrap().unwrap();
    assert_eq!(row.outcome.as_deref(), Some("ok"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(row.final_input.as_deref().unwrap()).unwrap(),
        ran
    );
}

/// A log, its WAL and its shared-memory file are created 0600.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_log_and_its_wal_are_private() {
    use std::os::unix::fs::PermissionsExt;
    for mode in [AuditMode::BestEffort, AuditMode::Durable] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("audit.sqlite");
        let log = AuditLog::open(&db, mode).unwrap();
        let provider = ScriptedProvider::new()
            .turn(ScriptTurn::text("a").call("read_file", json!({ "path": "a.txt" })))
            .turn(ScriptTurn::text("done"));
        // Check while the log is open: the WAL and shm files exist then.
        let files = ["audit.sqlite", "audit.sqlite-wal", "audit.sqlite-shm"];
        let agent = Agent::builder().provider(provider).build().await.unwrap();
        log.install(agent.bus()).await.unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), "A").unwrap();
        let session = agent
            .open_session(SessionOptions::new(ws.path()).id("s"))
            .await
            .unwrap();
        session.run_turn("go").await.unwrap();
        session.close().await.unwrap();
        agent.shutdown(Duration::from_secs(5)).await;
        for name in files {
            let meta = std::fs::metadata(dir.path().join(name))
                .unwrap_or_else(|e| panic!("{mode:?} {name}: {e}"));
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{mode:?} {name}");
        }
        log.close().await;
    }
}

/// A crafted log whose `sessions` is a recursive view: a clear error within a second, from the
/// library and from `hookbus audit`; and a query past its time limit is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crafted_log_gives_a_clear_error_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.sqlite");
    let log = AuditLog::open(&db, AuditMode::BestEffort).unwrap();
    log.close().await;
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "DROP TABLE sessions;
         CREATE VIEW sessions AS
             WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)
             SELECT n AS id, NULL AS parent_id, NULL AS cwd, n AS started_ms, NULL AS ended_ms,
                    NULL AS end_reason
             FROM r;",
    )
    .unwrap();
    drop(conn);
    let started = std::time::Instant::now();
    let err = AuditDb::open(&db).unwrap_err().to_string();
    assert!(err.contains("`sessions` is a view, not a table"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args(["audit", "--db", db.to_str().unwrap(), "sessions"])
        .output()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is a view, not a table") && stderr.lines().count() == 1,
        "{stderr}"
    );

    // A sound log with a query that takes longer than its limit: stopped, said so.
    let db = dir.path().join("big.sqlite");
    let log = AuditLog::open(&db, AuditMode::BestEffort).unwrap();
    log.close().await;
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 20000)
         INSERT INTO hook_failures (session_id, hook, event, status) SELECT n, 'h', 'e', 's' FROM r;",
    )
    .unwrap();
    drop(conn);
    let mut audit = AuditDb::open(&db).unwrap();
    assert!(audit.integrity_ok().unwrap());
    audit.set_query_limit(Duration::ZERO);
    let err = audit.integrity_ok().unwrap_err().to_string();
    assert!(
        err.contains("ran longer than 0 ms and was stopped"),
        "{err}"
    );
}
