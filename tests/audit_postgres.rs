//! The audit log on PostgreSQL, against a private server started for each test
//! (tests/common/postgres.rs; skipped, with the reason, where PostgreSQL is not installed):
//! the same records and the same answers as SQLite for the same session, in both modes and
//! through `hookbus audit`; the durable intent committed before the tool runs; fail-closed
//! while the server is down; migrations that are idempotent and safe when many processes open
//! a store at once; many writers, threads or processes, in one store without their sessions
//! meeting; and `kill -9` of a durable writer mid-run, read back by `hookbus audit in-doubt`.

#![cfg(feature = "postgres")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::audit_hooks::{NoRm, PreRewrite};
use common::postgres::PgServer;
use hookbus::builtins::{AuditBackend, AuditDb, AuditLog, AuditMode, CallRecord, SessionRecord};
use hookbus::*;
use serde_json::{json, Value};

const WHY: &str = "the PostgreSQL audit store";

fn server() -> Option<PgServer> {
    PgServer::start_or_skip(WHY)
}

/// A session with every kind of record: a call that runs, one a hook blocks, one a rule
/// denies, one that fails, and two calls sharing an id side by side.
fn scenario() -> ScriptedProvider {
    ScriptedProvider::new()
        .turn(ScriptTurn::text("read").call_with_id("r1", "read_file", json!({ "path": "a.txt" })))
        .turn(ScriptTurn::text("rm").call_with_id(
            "b1",
            "bash",
            json!({ "command": "rm -rf build" }),
        ))
        .turn(ScriptTurn::text("write").call_with_id(
            "w1",
            "write_file",
            json!({ "path": "b.txt", "content": "x" }),
        ))
        .turn(ScriptTurn::text("missing").call_with_id(
            "m1",
            "read_file",
            json!({ "path": "missing.txt" }),
        ))
        .turn(
            ScriptTurn::text("both")
                .call_with_id("dup", "read_file", json!({ "path": "a.txt" }))
                .call_with_id("dup", "read_file", json!({ "path": "c.txt" })),
        )
        .turn(ScriptTurn::text("done"))
}

/// Runs [`scenario`] as session `s` in `ws` with `log` installed, then closes everything.
async fn run_scenario(log: &AuditLog, ws: &Path) -> TurnResult {
    let agent = Agent::builder()
        .provider(scenario())
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
    let session = agent
        .open_session(SessionOptions::new(ws).id("s"))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    let report = log.close().await;
    assert!(report.written > 0 && report.failed == 0, "{report:?}");
    result
}

/// A time, as only whether it is there: two runs never share their clocks.
fn seen(ms: Option<i64>) -> Option<i64> {
    ms.map(|_| 0)
}

fn timeless_calls(calls: Vec<CallRecord>) -> Vec<CallRecord> {
    calls
        .into_iter()
        .map(|c| CallRecord {
            requested_ms: seen(c.requested_ms),
            intent_ms: seen(c.intent_ms),
            finished_ms: seen(c.finished_ms),
            duration_ms: seen(c.duration_ms),
            ..c
        })
        .collect()
}

fn timeless_sessions(sessions: Vec<SessionRecord>) -> Vec<SessionRecord> {
    sessions
        .into_iter()
        .map(|s| SessionRecord {
            started_ms: seen(s.started_ms),
            ended_ms: seen(s.ended_ms),
            ..s
        })
        .collect()
}

/// JSON with every time (`*_ms`) reduced to whether it is there.
fn timeless_json(mut value: Value) -> Value {
    match &mut value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key.ends_with("_ms") {
                    if !v.is_null() {
                        *v = json!(0);
                    }
                } else {
                    *v = timeless_json(v.take());
                }
            }
        }
        Value::Array(items) => {
            for v in items.iter_mut() {
                *v = timeless_json(v.take());
            }
        }
        _ => {}
    }
    value
}

/// `hookbus audit --db TARGET ARGS…`: (success, stdout, stderr).
fn audit_cli(target: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args(["audit", "--db", target])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Everything a reader can ask, from both stores, compared (times reduced to their presence);
/// then every `hookbus audit` subcommand, text and JSON.
async fn assert_same_answers(sqlite: &str, pg_url: &str, mode: AuditMode) {
    let lite = AuditDb::connect(sqlite).await.unwrap();
    let pg = AuditDb::connect(pg_url).await.unwrap();
    assert_eq!(pg.schema_version(), lite.schema_version());
    let sessions = timeless_sessions(lite.sessions().unwrap());
    assert_eq!(sessions.len(), 1, "{mode:?}: {sessions:?}");
    assert_eq!(
        timeless_sessions(pg.sessions().unwrap()),
        sessions,
        "{mode:?}"
    );
    let calls = timeless_calls(lite.calls(None).unwrap());
    assert_eq!(calls.len(), 6, "{mode:?}: {calls:#?}");
    assert_eq!(timeless_calls(pg.calls(None).unwrap()), calls, "{mode:?}");
    assert_eq!(
        timeless_calls(pg.calls(Some("s")).unwrap()),
        timeless_calls(lite.calls(Some("s")).unwrap())
    );
    assert!(pg.calls(Some("other")).unwrap().is_empty());
    assert_eq!(pg.in_doubt().unwrap(), lite.in_doubt().unwrap());
    for id in ["1", "3", "dup", "m1", "nope"] {
        assert_eq!(
            timeless_calls(pg.call(id).unwrap().into_iter().collect()),
            timeless_calls(lite.call(id).unwrap().into_iter().collect()),
            "{mode:?} show {id}"
        );
    }
    assert!(pg.integrity_ok().unwrap() && lite.integrity_ok().unwrap());
    let queries: [&[&str]; 6] = [
        &["sessions"],
        &["calls"],
        &["calls", "--session", "s"],
        &["in-doubt"],
        &["show", "2"],
        &["show", "dup"],
    ];
    for args in queries {
        let (ok, text, err) = audit_cli(sqlite, args);
        assert!(ok, "{args:?}: {err}");
        let (pg_ok, pg_text, pg_err) = audit_cli(pg_url, args);
        assert!(pg_ok, "{args:?}: {pg_err}");
        if args[0] == "show" {
            let parse = |t: &str| timeless_json(serde_json::from_str::<Value>(t).unwrap());
            assert_eq!(parse(&pg_text), parse(&text), "{mode:?} {args:?}");
        } else {
            assert_eq!(pg_text, text, "{mode:?} {args:?}");
        }
        let json_args: Vec<&str> = args.iter().copied().chain(["--format", "json"]).collect();
        let (_, json_text, _) = audit_cli(sqlite, &json_args);
        let (_, pg_json_text, _) = audit_cli(pg_url, &json_args);
        let parse = |t: &str| timeless_json(serde_json::from_str::<Value>(t).unwrap());
        assert_eq!(
            parse(&pg_json_text),
            parse(&json_text),
            "{mode:?} {json_args:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reads_the_same_from_postgres_as_from_sqlite_in_both_modes() {
    let Some(pg) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "A").unwrap();
    std::fs::write(ws.join("c.txt"), "C").unwrap();
    for (name, mode) in [
        ("best_effort", AuditMode::BestEffort),
        ("durable", AuditMode::Durable),
    ] {
        let sqlite = dir.path().join(format!("{name}.sqlite"));
        let sqlite = sqlite.to_str().unwrap();
        let url = pg.create_database(name);
        let mut results = Vec::new();
        for target in [sqlite, url.as_str()] {
            let log = AuditLog::connect(target, mode).await.unwrap();
            assert_eq!(log.backend(), AuditBackend::of(target));
            assert_eq!(log.instance(), 1, "the first writer of a new store");
            results.push(run_scenario(&log, &ws).await);
        }
        assert_eq!(AuditBackend::of(&url), AuditBackend::Postgres);
        let status: Vec<Vec<bool>> = results
            .iter()
            .map(|r| r.calls.iter().map(|c| c.executed).collect())
            .collect();
        assert_eq!(status[0], status[1]);
        assert_same_answers(sqlite, &url, mode).await;
        // The records themselves, as the SQLite tests check them.
        let pg_db = AuditDb::connect(&url).await.unwrap();
        let calls = pg_db.calls(Some("s")).unwrap();
        let by_id = |id: &str| calls.iter().find(|c| c.tool_use_id == id).unwrap();
        assert_eq!(by_id("r1").outcome.as_deref(), Some("ok"));
        assert_eq!(by_id("r1").output_preview.as_deref(), Some("A"));
        assert_eq!(
            (
                by_id("b1").decision.as_deref(),
                by_id("b1").decided_by.as_deref()
            ),
            (Some("blocked"), Some("no-rm"))
        );
        assert_eq!(by_id("w1").source.as_deref(), Some("rule"));
        assert_eq!(by_id("m1").outcome.as_deref(), Some("error"));
        let dups: Vec<_> = calls.iter().filter(|c| c.tool_use_id == "dup").collect();
        assert_eq!((dups[0].attempt, dups[1].attempt), (1, 2));
        assert_eq!(
            (
                dups[0].output_preview.as_deref(),
                dups[1].output_preview.as_deref()
            ),
            (Some("A"), Some("C"))
        );
        assert!(calls
            .iter()
            .filter(|c| c.outcome.as_deref() != Some("not_run"))
            .all(|c| c.intent_ms.is_some() == (mode == AuditMode::Durable)));
    }
}

/// A tool that reads its own row of the PostgreSQL log while it runs (its intent is durable
/// by then), from inside the async runtime.
struct Probe {
    url: String,
}

#[async_trait]
impl Tool for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    async fn execute(&self, _: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let audit = AuditDb::connect(&self.url)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
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
            "in_doubt": mine.in_doubt,
            "outcome": mine.outcome,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_intent_is_committed_on_postgres_before_the_tool_runs() {
    let Some(pg) = server() else { return };
    let url = pg.create_database("intent");
    let log = AuditLog::connect(&url, AuditMode::Durable).await.unwrap();
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("probe").call_with_id(
                    "p1",
                    "probe",
                    json!({ "asked": true }),
                ))
                .turn(ScriptTurn::text("done")),
        )
        .tool(Probe { url: url.clone() })
        .hook(PreRewrite)
        .build()
        .await
        .unwrap();
    log.install(agent.bus()).await.unwrap();
    let ws = tempfile::tempdir().unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("s"))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    log.close().await;
    let call = &result.calls[0];
    assert!(call.executed, "{call:?}");
    let seen: Value = serde_json::from_str(&call.content).unwrap();
    assert_eq!(
        seen["intent"], true,
        "committed before the tool ran: {seen}"
    );
    assert_eq!(seen["in_doubt"], true, "{seen}");
    assert_eq!(seen["outcome"], Value::Null);
    let parse = |v: &Value| serde_json::from_str::<Value>(v.as_str().unwrap()).unwrap();
    assert_eq!(
        parse(&seen["final_input"]),
        json!({ "asked": true, "step": "pre" })
    );
    assert_eq!(parse(&seen["request_input"]), json!({ "asked": true }));
    // And its outcome before the Post event completed.
    let row = AuditDb::connect(&url)
        .await
        .unwrap()
        .call("p1")
        .unwrap()
        .unwrap();
    assert_eq!(row.outcome.as_deref(), Some("ok"));
    assert!(!row.in_doubt);
}

/// Counts its runs.
struct Counting {
    ran: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    async fn execute(&self, _: Value, _: ToolCx) -> Result<Value, ToolError> {
        self.ran.fetch_add(1, Ordering::SeqCst);
        Ok(json!("counted"))
    }
}

fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_clear_error_that_never_shows_the_password() {
    let Some(pg) = server() else { return };
    let password = pg.password().to_owned();
    let nobody = format!(
        "postgres://hookbus:{password}@127.0.0.1:{}/postgres",
        unused_port()
    );
    let err = AuditLog::connect(&nobody, AuditMode::Durable)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot connect") && err.contains("hookbus:***@127.0.0.1"),
        "{err}"
    );
    assert!(!err.contains(&password), "{err}");
    let err = AuditDb::connect(&nobody).await.unwrap_err().to_string();
    assert!(
        err.contains("cannot connect") && !err.contains(&password),
        "{err}"
    );
    // A wrong password: the server's reason, in one line, without the password tried.
    let wrong = format!(
        "postgresql://hookbus:not-{password}@127.0.0.1:{}/postgres",
        pg.port()
    );
    let (ok, _, stderr) = audit_cli(&wrong, &["sessions"]);
    assert!(!ok);
    assert!(
        stderr.contains("password authentication failed") && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(!stderr.contains(&password), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_log_fails_closed_while_postgres_is_down_and_writes_again_once_it_is_back() {
    let Some(mut pg) = server() else { return };
    let url = pg.create_database("closed");
    let log = AuditLog::connect(&url, AuditMode::Durable).await.unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("one").call_with_id("c1", "counting", json!({})))
                .turn(ScriptTurn::text("stopped"))
                .turn(ScriptTurn::text("two").call_with_id("c2", "counting", json!({})))
                .turn(ScriptTurn::text("done")),
        )
        .clear_tools()
        .tool(Counting { ran: ran.clone() })
        .build()
        .await
        .unwrap();
    log.install(agent.bus()).await.unwrap();
    let ws = tempfile::tempdir().unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("s"))
        .await
        .unwrap();
    pg.stop();
    let result = session.run_turn("first").await.unwrap();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "no call runs without its intent"
    );
    assert!(!result.calls[0].executed, "{:?}", result.calls[0]);
    pg.restart();
    let result = session.run_turn("second").await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(result.calls[0].executed, "{:?}", result.calls[0]);
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    let report = log.close().await;
    assert!(report.failed > 0 && report.written > 0, "{report:?}");
    let db = AuditDb::connect(&url).await.unwrap();
    let c2 = db.call("c2").unwrap().expect("the call after the restart");
    assert!(
        c2.intent_ms.is_some() && c2.outcome.as_deref() == Some("ok"),
        "{c2:?}"
    );
    assert!(db.in_doubt().unwrap().is_empty());
    assert!(db
        .calls(None)
        .unwrap()
        .iter()
        .all(|c| c.outcome.as_deref() != Some("ok") || c.intent_ms.is_some()));
}

/// The tables of a SQLite store and their columns, in order.
fn sqlite_schema(path: &Path) -> BTreeMap<String, Vec<String>> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .unwrap();
    let tables: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    tables
        .into_iter()
        .map(|t| {
            let mut stmt = conn
                .prepare(&format!("PRAGMA table_info(\"{t}\")"))
                .unwrap();
            let columns = stmt
                .query_map([], |r| r.get::<_, String>(1))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (t, columns)
        })
        .collect()
}

/// The tables of a PostgreSQL store and their columns, in order.
fn postgres_schema(pg: &PgServer, db: &str) -> BTreeMap<String, Vec<String>> {
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in pg.sql(
        db,
        "SELECT table_name, column_name FROM information_schema.columns
         WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
    ) {
        let (table, column) = (row[0].clone().unwrap(), row[1].clone().unwrap());
        tables.entry(table).or_default().push(column);
    }
    tables
}

/// Opens `target` from `n` writers at once; returns their instances.
async fn open_at_once(target: &str, n: usize) -> BTreeSet<i64> {
    let opening: Vec<_> = (0..n)
        .map(|_| {
            let target = target.to_owned();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let log = AuditLog::connect(&target, AuditMode::BestEffort).await?;
                    let instance = log.instance();
                    log.close().await;
                    Ok::<_, Error>(instance)
                })
            })
        })
        .collect();
    opening
        .into_iter()
        .map(|t| {
            t.join()
                .unwrap()
                .unwrap_or_else(|e| panic!("{target}: {e}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent_and_safe_when_many_open_a_new_store_at_once() {
    let Some(pg) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let name = format!("m{round}");
        let url = pg.create_database(&name);
        let file = dir.path().join(format!("{name}.sqlite"));
        for target in [url.as_str(), file.to_str().unwrap()] {
            let instances = open_at_once(target, 4).await;
            assert_eq!(instances, (1..=4).collect(), "{target}");
            // Opening again migrates nothing.
            let again = AuditLog::connect(target, AuditMode::Durable).await.unwrap();
            assert_eq!(again.instance(), 5);
            again.close().await;
            assert_eq!(AuditDb::connect(target).await.unwrap().schema_version(), 3);
        }
        let versions = pg.sql(
            &name,
            "SELECT version FROM schema_migrations ORDER BY version",
        );
        assert_eq!(
            versions,
            [["1"], ["2"], ["3"]].map(|r| vec![Some(r[0].to_owned())])
        );
        // The same tables and columns, in the same order, on both.
        let lite = sqlite_schema(&file);
        assert_eq!(lite.len(), 7, "{lite:?}");
        assert_eq!(postgres_schema(&pg, &name), lite);
    }
    // Processes: four durable writers open a new database at once.
    let url = pg.create_database("processes");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_hookbus"))
                .args(["durable-child", "--db", &url, "--workspace"])
                .arg(&ws)
                .args(["--calls", "1", "--sleep-ms", "0"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let db = AuditDb::connect(&url).await.unwrap();
    let sessions = db.sessions().unwrap();
    assert_eq!(
        sessions.iter().map(|s| s.instance).collect::<BTreeSet<_>>(),
        (1..=4).collect()
    );
    assert!(sessions.iter().all(|s| s.id == "durable" && s.calls == 1));
}

/// Runs session `s` of `calls` reads with ids `c0…` into `log`.
async fn run_reads(log: AuditLog, calls: usize, ws: std::path::PathBuf) {
    let mut provider = ScriptedProvider::new();
    for i in 0..calls {
        provider = provider.turn(ScriptTurn::text("read").call_with_id(
            format!("c{i}"),
            "read_file",
            json!({ "path": "a.txt" }),
        ));
    }
    let agent = Agent::builder()
        .provider(provider.turn(ScriptTurn::text("done")))
        .build()
        .await
        .unwrap();
    log.install(agent.bus()).await.unwrap();
    let session = agent
        .open_session(SessionOptions::new(&ws).id("s"))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Completed);
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    let report = log.close().await;
    assert_eq!(report.failed, 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_logs_write_one_store_at_once_and_their_sessions_never_meet() {
    let Some(pg) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "A").unwrap();
    let url = pg.create_database("two");
    let file = dir.path().join("two.sqlite");
    for target in [url.as_str(), file.to_str().unwrap()] {
        let a = AuditLog::connect(target, AuditMode::Durable).await.unwrap();
        let b = AuditLog::connect(target, AuditMode::BestEffort)
            .await
            .unwrap();
        let (ia, ib) = (a.instance(), b.instance());
        assert_ne!(ia, ib);
        // Both sessions are called `s` and make the same calls, at the same time.
        let runs = [
            tokio::spawn(run_reads(a, 8, ws.clone())),
            tokio::spawn(run_reads(b, 8, ws.clone())),
        ];
        for run in runs {
            run.await.unwrap();
        }
        let db = AuditDb::connect(target).await.unwrap();
        let sessions = db.sessions().unwrap();
        assert_eq!(sessions.len(), 2, "{target}: {sessions:?}");
        assert!(sessions.iter().all(|s| s.id == "s" && s.calls == 8));
        let calls = db.calls(Some("s")).unwrap();
        for (instance, durable) in [(ia, true), (ib, false)] {
            let mine: Vec<_> = calls.iter().filter(|c| c.instance == instance).collect();
            assert_eq!(mine.len(), 8, "{target} instance {instance}");
            assert!(mine.iter().all(|c| c.attempt == 1
                && c.outcome.as_deref() == Some("ok")
                && c.intent_ms.is_some() == durable));
        }
    }
}

/// Starts `hookbus durable-child` writing to `db`.
fn durable_child(db: &str, ws: &Path, calls: u32, sleep_ms: u64) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_hookbus"))
        .args(["durable-child", "--db", db, "--workspace"])
        .arg(ws)
        .args([
            "--calls",
            &calls.to_string(),
            "--sleep-ms",
            &sleep_ms.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// What a durable child said: its instance, and the calls it started.
#[derive(Debug, Default)]
struct Said {
    instance: Option<i64>,
    running: Vec<String>,
}

impl Said {
    fn hear(&mut self, line: &str) {
        if let Some(id) = line.strip_prefix("running ") {
            self.running.push(id.to_owned());
        } else if let Some(n) = line.strip_prefix("instance ") {
            self.instance = n.parse().ok();
        }
    }
}

/// Runs a durable child until it started `min_running` calls and `extra` more time passed,
/// then SIGKILLs it.
fn run_and_kill(db: &str, ws: &Path, min_running: usize, sleep_ms: u64, extra: Duration) -> Said {
    let mut child = durable_child(db, ws, 12, sleep_ms);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut said = Said::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while said.running.len() < min_running && std::time::Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => said.hear(&line),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    std::thread::sleep(extra);
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    while let Ok(line) = rx.try_recv() {
        said.hear(&line);
    }
    said
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_durable_writer_leaves_exactly_the_interrupted_call_in_doubt() {
    let Some(pg) = server() else { return };
    let url = pg.create_database("killed");
    let ws = tempfile::tempdir().unwrap();
    // Killed while the fourth tool sleeps.
    let said = run_and_kill(&url, ws.path(), 4, 400, Duration::from_millis(100));
    assert_eq!(said.running.len(), 4, "{said:?}");
    let db = AuditDb::connect(&url).await.unwrap();
    let calls = db.calls(None).unwrap();
    for id in &said.running {
        let c = calls
            .iter()
            .find(|c| &c.tool_use_id == id)
            .unwrap_or_else(|| panic!("{id} lost"));
        assert!(c.intent_ms.is_some(), "{id} ran without a durable intent");
    }
    let last = said.running.last().unwrap();
    for id in &said.running[..3] {
        let c = calls.iter().find(|c| &c.tool_use_id == id).unwrap();
        assert_eq!(c.outcome.as_deref(), Some("ok"), "{id}");
    }
    // Another process reads it: exactly the interrupted call is in doubt.
    let (ok, text, err) = audit_cli(&url, &["in-doubt"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains(last.as_str()) && lines[0].contains("IN DOUBT"),
        "{text}"
    );
    let (ok, json_text, err) = audit_cli(&url, &["in-doubt", "--format", "json"]);
    assert!(ok, "{err}");
    let doubt: Vec<CallRecord> = serde_json::from_str(&json_text).unwrap();
    assert_eq!(
        doubt
            .iter()
            .map(|c| c.tool_use_id.as_str())
            .collect::<Vec<_>>(),
        [last.as_str()]
    );
    assert_eq!(Some(doubt[0].instance), said.instance);
    // Its session never ended.
    let (ok, text, _) = audit_cli(&url, &["sessions"]);
    assert!(
        ok && text.contains("durable") && text.contains("(open or crashed)"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_at_random_points_never_lose_a_committed_intent_on_postgres() {
    let Some(pg) = server() else { return };
    // One store, one instance per run: each run is read back by its instance.
    let url = pg.create_database("random");
    let ws = tempfile::tempdir().unwrap();
    for run in 0..8 {
        let said = run_and_kill(
            &url,
            ws.path(),
            fastrand::usize(0..5),
            40,
            Duration::from_millis(fastrand::u64(0..60)),
        );
        let Some(instance) = said.instance else {
            assert!(said.running.is_empty(), "run {run}: {said:?}");
            continue;
        };
        let db = AuditDb::connect(&url).await.unwrap();
        let calls: Vec<_> = db
            .calls(None)
            .unwrap()
            .into_iter()
            .filter(|c| c.instance == instance)
            .collect();
        for id in &said.running {
            assert!(
                calls
                    .iter()
                    .any(|c| &c.tool_use_id == id && c.intent_ms.is_some()),
                "run {run}: the intent of {id} was lost"
            );
        }
        // Calls run one at a time: at most the interrupted one is in doubt, and every call
        // that started before it has its outcome.
        assert!(
            calls.iter().filter(|c| c.in_doubt).count() <= 1,
            "run {run}"
        );
        for id in said.running.iter().rev().skip(1) {
            let c = calls.iter().find(|c| &c.tool_use_id == id).unwrap();
            assert!(c.outcome.is_some(), "run {run}: {id} lost its outcome");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_durable_processes_write_one_database_at_once() {
    let Some(pg) = server() else { return };
    let url = pg.create_database("fleet");
    let ws = tempfile::tempdir().unwrap();
    let children = [
        durable_child(&url, ws.path(), 10, 10),
        durable_child(&url, ws.path(), 10, 10),
    ];
    let mut instances = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let mut said = Said::default();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .for_each(|l| said.hear(l));
        assert_eq!(said.running.len(), 10, "{said:?}");
        instances.insert(said.instance.unwrap());
    }
    assert_eq!(instances.len(), 2);
    let db = AuditDb::connect(&url).await.unwrap();
    let sessions = db.sessions().unwrap();
    assert_eq!(
        sessions.iter().map(|s| s.instance).collect::<BTreeSet<_>>(),
        instances
    );
    assert!(sessions
        .iter()
        .all(|s| s.id == "durable" && s.calls == 10 && s.end_reason.is_some()));
    let calls = db.calls(Some("durable")).unwrap();
    assert_eq!(calls.len(), 20);
    assert!(calls
        .iter()
        .all(|c| c.attempt == 1 && c.intent_ms.is_some() && c.outcome.as_deref() == Some("ok")));
    assert!(db.in_doubt().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_is_not_an_audit_log_is_a_clear_error() {
    let Some(pg) = server() else { return };
    // Empty: nothing to read.
    let url = pg.create_database("empty");
    let err = AuditDb::connect(&url).await.unwrap_err().to_string();
    assert!(err.contains("not a hookbus audit log"), "{err}");
    // Another application's `sessions`: neither read nor written over.
    let url = pg.create_database("other");
    pg.sql("other", "CREATE TABLE sessions (token TEXT)");
    let err = AuditLog::connect(&url, AuditMode::BestEffort)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a hookbus audit log"), "{err}");
    assert!(!err.contains(pg.password()), "{err}");
    let (ok, _, stderr) = audit_cli(&url, &["sessions"]);
    assert!(!ok && stderr.lines().count() == 1, "{stderr}");
    assert!(stderr.contains("not a hookbus audit log"), "{stderr}");
    // A log whose `sessions` became a view is refused before any query.
    let url = pg.create_database("crafted");
    AuditLog::connect(&url, AuditMode::BestEffort)
        .await
        .unwrap()
        .close()
        .await;
    pg.sql(
        "crafted",
        "ALTER TABLE sessions RENAME TO sessions_table;
         CREATE VIEW sessions AS SELECT * FROM sessions_table",
    );
    let err = AuditDb::connect(&url).await.unwrap_err().to_string();
    assert!(err.contains("`sessions` is a view, not a table"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_held_past_its_limit_on_postgres_is_stopped() {
    let Some(pg) = server() else { return };
    let url = pg.create_database("slow");
    AuditLog::connect(&url, AuditMode::BestEffort)
        .await
        .unwrap()
        .close()
        .await;
    let mut db = AuditDb::connect(&url).await.unwrap();
    db.set_query_limit(Duration::from_millis(300));
    // Another session holds the table locked until it is told to let go.
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let holder_url = url.clone();
    let holder = tokio::spawn(async move {
        let (mut client, connection) = tokio_postgres::connect(&holder_url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let tx = client.transaction().await.unwrap();
        tx.batch_execute("LOCK TABLE tool_calls IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        locked_tx.send(()).unwrap();
        let _ = release_rx.await;
        tx.rollback().await.unwrap();
    });
    locked_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let started = std::time::Instant::now();
    let err = db.calls(None).unwrap_err().to_string();
    assert!(
        err.contains("ran longer than 300 ms and was stopped"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    release_tx.send(()).unwrap();
    holder.await.unwrap();
    // The limit stops only queries past it.
    assert!(db.calls(None).unwrap().is_empty());
}
