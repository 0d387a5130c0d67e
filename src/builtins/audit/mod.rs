//! [`AuditLog`]: an audit log of sessions, tool calls (request, final input, decision and who
//! decided, outcome, output preview, timings), permission decisions with their source, hook
//! failures, and session ends — in a SQLite file (WAL), or with the `postgres` feature in a
//! PostgreSQL database, with the same schema and the same answers to [`AuditDb`]'s queries.
//!
//! One writer thread owns the connection and commits records in batches. In
//! [`AuditMode::BestEffort`] (default) the log is an observer and records are written
//! asynchronously; none is lost on a clean shutdown ([`AuditLog::close`] drains them). In
//! [`AuditMode::Durable`] (seed 004) the intent of each tool call is committed durably
//! (SQLite `synchronous=FULL`, PostgreSQL `synchronous_commit=on`) right *before* the tool
//! runs, with the input that will run (after every hook, permission and `PermissionRequest`
//! rewrite) beside the one requested, failing closed: no durable intent, no call; its outcome
//! is committed before the call's Post event completes. After a crash, calls with an intent
//! and no outcome are reported as in doubt ([`AuditDb::in_doubt`]) — never re-run.
//!
//! Each open log is an *instance* of its store, numbered by the store ([`AuditLog::instance`]),
//! so many logs — threads or processes — can write one store at once: sessions are keyed by
//! (instance, id), and each call is a row of its own, keyed by (instance, session, turn,
//! `tool_use_id`, attempt): calls that share an id (within a turn: attempts 1, 2, …) never
//! merge, nor do two processes' sessions that share an id. A SQLite log it creates is mode 0600.
//!
//! The backends live in `sqlite.rs` and `postgres.rs` behind one trait (`store.rs`); the
//! schema and its migrations (`schema.rs`), the writes (`writer.rs`) and the queries
//! (`read.rs`) are written once for both.

#[cfg(feature = "postgres")]
mod postgres;
mod read;
mod schema;
mod sqlite;
mod store;
mod writer;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

pub use read::{AuditDb, CallRecord, SessionRecord, DEFAULT_QUERY_LIMIT};
use store::{AuditStore, Target};
use writer::{Record, WriterMsg};

use crate::model::action::{HookResult, PostToolUseAction, PreToolUseAction};
use crate::model::error::Error;
use crate::model::error::HookError;
use crate::model::event::*;
use crate::model::hook::{Hook, HookCx, HookOptions};
use crate::runtime::bus::Bus;
use crate::runtime::execution::{ExecutionGate, ExecutionIntent};
use crate::runtime::observer::{Observer, ObserverOptions};

/// Characters of a tool's output kept in the log.
const PREVIEW: usize = 200;

/// How the log writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditMode {
    /// An observer; records are written asynchronously (SQLite `synchronous=NORMAL`,
    /// PostgreSQL `synchronous_commit=off`).
    #[default]
    BestEffort,
    /// Intents are committed durably (SQLite `synchronous=FULL`, PostgreSQL
    /// `synchronous_commit=on`) before each tool runs; fail-closed.
    Durable,
}

/// What [`AuditLog::close`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    /// Records committed.
    pub written: u64,
    /// Records whose transaction failed.
    pub failed: u64,
}

/// Where an audit log is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditBackend {
    /// A SQLite file.
    Sqlite,
    /// A PostgreSQL database (feature `postgres`).
    Postgres,
}

impl AuditBackend {
    /// The backend a target string names: a `postgres://` or `postgresql://` URL is
    /// PostgreSQL, anything else a SQLite path.
    pub fn of(target: &str) -> Self {
        match Target::parse(target) {
            Target::Sqlite(_) => Self::Sqlite,
            Target::Postgres(_) => Self::Postgres,
        }
    }
}

struct Inner {
    /// The file, or the URL without its password.
    target: String,
    backend: AuditBackend,
    mode: AuditMode,
    instance: i64,
    tx: Mutex<Option<mpsc::Sender<WriterMsg>>>,
    written: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

/// The audit log: open it, [`install`](AuditLog::install) it on a bus, [`close`](AuditLog::close)
/// it after the bus shut down. Clones share the log.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("target", &self.inner.target)
            .field("mode", &self.inner.mode)
            .field("instance", &self.inner.instance)
            .finish()
    }
}

fn now_ms() -> u64 {
    crate::model::event::now_ms()
}

/// The crate's error for the store `target` (a path, or a URL without its password).
fn audit_error(target: &str, message: impl std::fmt::Display) -> Error {
    Error::Audit {
        path: target.to_owned(),
        message: message.to_string(),
    }
}

/// How errors show the SQLite file `path`; a PostgreSQL URL given as a path is an error
/// pointing to `connect` (and shown without its password).
fn sqlite_target(path: &Path) -> Result<String, Error> {
    match path.to_str().map(Target::parse) {
        Some(Target::Postgres(url)) => Err(audit_error(
            &store::redact_url(&url),
            store::StoreError::UrlAsPath,
        )),
        _ => Ok(path.display().to_string()),
    }
}

impl AuditLog {
    /// Opens (creating it and its schema on first use, migrating older versions) the SQLite
    /// log at `path` and starts its writer.
    ///
    /// A log it creates is mode 0600 (so are its `-wal` and `-shm` files, which SQLite creates
    /// with the database's mode); an existing file keeps its mode. Many logs, in this process
    /// or others, may open one file at once: migrations and write batches take SQLite's write
    /// lock and wait for each other (up to 5 s).
    pub fn open(path: impl AsRef<Path>, mode: AuditMode) -> Result<Self, Error> {
        let path = path.as_ref();
        let shown = sqlite_target(path)?;
        let store =
            sqlite::SqliteStore::open_write(path, mode).map_err(|e| audit_error(&shown, e))?;
        Self::start(Box::new(store), shown, AuditBackend::Sqlite, mode)
    }

    /// Opens the log `target` names and starts its writer: a `postgres://` or `postgresql://`
    /// URL is a PostgreSQL database (feature `postgres`; without it, an error saying so),
    /// anything else the path of a SQLite file ([`open`](Self::open)).
    ///
    /// On PostgreSQL the schema is created or migrated under an advisory lock, so processes
    /// opening one database at once wait for each other; durable mode commits with
    /// `synchronous_commit=on`, best-effort mode with `off`. A write that finds the
    /// connection lost reconnects first. Errors show the URL without its password. The
    /// connection is plain (no TLS).
    pub async fn connect(target: &str, mode: AuditMode) -> Result<Self, Error> {
        match Target::parse(target) {
            Target::Sqlite(path) => Self::open(path, mode),
            Target::Postgres(url) => Self::connect_postgres(url, mode).await,
        }
    }

    #[cfg(feature = "postgres")]
    async fn connect_postgres(url: String, mode: AuditMode) -> Result<Self, Error> {
        let shown = store::redact_url(&url);
        let opened = shown.clone();
        let opening = tokio::task::spawn_blocking(move || {
            let store = postgres::PgStore::connect(&url, postgres::Role::Write(mode))
                .map_err(|e| audit_error(&opened, e))?;
            Self::start(Box::new(store), opened, AuditBackend::Postgres, mode)
        });
        opening
            .await
            .map_err(|e| audit_error(&shown, format!("opening stopped: {e}")))?
    }

    #[cfg(not(feature = "postgres"))]
    async fn connect_postgres(url: String, _: AuditMode) -> Result<Self, Error> {
        Err(audit_error(
            &store::redact_url(&url),
            store::StoreError::NoPostgres,
        ))
    }

    /// Migrates the store just opened, registers this log as an instance of it, and starts
    /// the writer thread.
    fn start(
        mut store: Box<dyn AuditStore>,
        target: String,
        backend: AuditBackend,
        mode: AuditMode,
    ) -> Result<Self, Error> {
        let instance = schema::migrate(&mut *store, now_ms())
            .and_then(|()| {
                let mode_name = match mode {
                    AuditMode::Durable => "durable",
                    AuditMode::BestEffort => "best_effort",
                };
                let instance = writer::register_instance(&mut *store, mode_name, now_ms())?;
                store.hold_instance(instance)?;
                Ok(instance)
            })
            .map_err(|e| audit_error(&target, e))?;
        let (tx, rx) = mpsc::channel();
        let written = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (w, f) = (written.clone(), failed.clone());
        std::thread::Builder::new()
            .name("hookbus-audit".into())
            .spawn(move || writer::run(store, instance, rx, w, f))
            .map_err(|e| audit_error(&target, format!("cannot start the writer: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                target,
                backend,
                mode,
                instance,
                tx: Mutex::new(Some(tx)),
                written,
                failed,
            }),
        })
    }

    /// The database file (for PostgreSQL, the URL without its password, as a path).
    pub fn path(&self) -> &Path {
        Path::new(&self.inner.target)
    }

    /// What was opened: the file, or the URL without its password.
    pub fn target(&self) -> &str {
        &self.inner.target
    }

    /// Where the log is kept.
    pub fn backend(&self) -> AuditBackend {
        self.inner.backend
    }

    /// This log's instance number in its store: given by the store when the log opened, never
    /// the same for two logs of one store; it keys the sessions and calls this log writes.
    pub fn instance(&self) -> i64 {
        self.inner.instance
    }

    /// The mode.
    pub fn mode(&self) -> AuditMode {
        self.inner.mode
    }

    /// Records committed so far.
    pub fn written(&self) -> u64 {
        self.inner.written.load(Ordering::Relaxed)
    }

    fn send(&self, record: Record, ack: Option<oneshot::Sender<Result<(), String>>>) -> bool {
        match &*self.inner.tx.lock() {
            Some(tx) => tx
                .send(WriterMsg::Write {
                    record: Box::new(record),
                    ack,
                })
                .is_ok(),
            None => false,
        }
    }

    /// Registers the log on `bus`: the recording observer, a hook-failure listener, and in
    /// durable mode the intent gate.
    pub async fn install(&self, bus: &Bus) -> Result<(), Error> {
        bus.observe(AuditObserver { log: self.clone() }).await?;
        let log = self.clone();
        bus.on_hook_failure(Box::new(move |f| {
            log.send(
                Record::HookFailure(writer::HookFailure {
                    session_id: f.session_id.clone(),
                    hook: f.hook.clone(),
                    event: f.event.as_str().to_owned(),
                    status: f.status.clone(),
                    at_ms: now_ms(),
                }),
                None,
            );
        }));
        if self.inner.mode == AuditMode::Durable {
            bus.register(IntentGate { log: self.clone() }).await?;
            bus.add_execution_gate(Arc::new(IntentGate { log: self.clone() }));
        }
        Ok(())
    }

    /// Commits what is queued and stops the writer; call after the bus shut down (so observers
    /// delivered everything). Later records are not written.
    pub async fn close(&self) -> AuditReport {
        let tx = self.inner.tx.lock().take();
        if let Some(tx) = tx {
            let (done, wait) = oneshot::channel();
            if tx.send(WriterMsg::Close(done)).is_ok() {
                let _ = wait.await;
            }
        }
        AuditReport {
            written: self.inner.written.load(Ordering::Relaxed),
            failed: self.inner.failed.load(Ordering::Relaxed),
        }
    }
}

fn preview(value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => match o.get("stdout").and_then(|v| v.as_str()) {
            Some(stdout) => stdout.to_owned(),
            None => value.to_string(),
        },
        other => other.to_string(),
    };
    text.chars().take(PREVIEW).collect()
}

/// Records every event that belongs in the log.
struct AuditObserver {
    log: AuditLog,
}

#[async_trait]
impl Observer for AuditObserver {
    fn name(&self) -> &str {
        "audit-log"
    }
    fn options(&self) -> ObserverOptions {
        ObserverOptions {
            events: vec![
                EventKind::SessionStart,
                EventKind::PreToolUse,
                EventKind::PermissionDenied,
                EventKind::PostToolUse,
                EventKind::PostToolUseFailure,
                EventKind::SessionEnd,
            ],
            mailbox: 4096,
            ..ObserverOptions::default()
        }
    }
    async fn on_event(&self, env: &Arc<Envelope>) {
        // In durable mode the gate writes tool-call records itself, committed in order.
        let durable = self.log.inner.mode == AuditMode::Durable;
        if durable && env.kind().is_tool_event() {
            return;
        }
        if let Some(record) = record_of(env) {
            self.log.send(record, None);
        }
    }
}

/// The record an event leaves in the log, if any.
fn record_of(env: &Envelope) -> Option<Record> {
    let at_ms = now_ms();
    let session_id = env.session_id.clone();
    Some(match &env.event {
        Event::SessionStart(_) => Record::SessionStart(writer::SessionStart {
            session_id,
            parent_id: env.parent_session_id.clone(),
            cwd: env.fields.cwd.clone(),
            at_ms,
        }),
        Event::PreToolUse(e) => Record::Request(writer::Request {
            session_id,
            turn: env.turn,
            tool_use_id: e.tool_use_id.clone(),
            tool_name: e.tool_name.clone(),
            input: e.tool_input.to_string(),
            at_ms,
        }),
        Event::PermissionDenied(e) => Record::Denied(writer::Denied {
            session_id,
            turn: env.turn,
            tool_use_id: e.tool_use_id.clone(),
            tool_name: e.tool_name.clone(),
            input: e.tool_input.to_string(),
            decision: if e.source == DenialSource::Hook {
                "blocked"
            } else {
                "denied"
            },
            source: e.source.to_string(),
            decided_by: e.decided_by.clone(),
            reason: e.reason.clone(),
            at_ms,
        }),
        Event::PostToolUse(e) => Record::Outcome(writer::Outcome {
            session_id,
            turn: env.turn,
            tool_use_id: e.tool_use_id.clone(),
            tool_name: e.tool_name.clone(),
            requested: e
                .original_input
                .as_ref()
                .unwrap_or(&e.tool_input)
                .to_string(),
            final_input: e.tool_input.to_string(),
            is_error: false,
            preview: preview(&e.tool_response),
            duration_ms: e.duration_ms,
            at_ms,
        }),
        Event::PostToolUseFailure(e) => Record::Outcome(writer::Outcome {
            session_id,
            turn: env.turn,
            tool_use_id: e.tool_use_id.clone(),
            tool_name: e.tool_name.clone(),
            requested: e
                .original_input
                .as_ref()
                .unwrap_or(&e.tool_input)
                .to_string(),
            final_input: e.tool_input.to_string(),
            is_error: true,
            preview: e.error.chars().take(PREVIEW).collect(),
            duration_ms: e.duration_ms,
            at_ms,
        }),
        Event::SessionEnd(e) => Record::SessionEnd(writer::SessionEnd {
            session_id,
            reason: e.reason.clone(),
            at_ms,
        }),
        _ => return None,
    })
}

/// Durable mode's gate. At `PreToolUse` it queues the request (a new attempt of the call);
/// right before the tool runs (an execution gate, after every hook, permission and
/// `PermissionRequest` rewrite) it commits the intent with the input that will run, failing
/// closed: no durable intent, no call; the outcome or denial is committed before the call's
/// Post event completes, so the log follows the calls in order.
struct IntentGate {
    log: AuditLog,
}

impl IntentGate {
    async fn commit(&self, record: Record) -> Result<(), String> {
        let (ack, wait) = oneshot::channel();
        if !self.log.send(record, Some(ack)) {
            return Err("the audit log is closed".into());
        }
        wait.await
            .map_err(|_| "the audit writer stopped".to_owned())?
    }

    async fn commit_event(&self, env: &Envelope) -> Result<(), String> {
        match record_of(env) {
            Some(record) => self.commit(record).await,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl ExecutionGate for IntentGate {
    async fn before_execution(&self, intent: &ExecutionIntent<'_>) -> Result<(), String> {
        self.commit(Record::Intent(writer::Intent {
            session_id: intent.session_id.to_owned(),
            turn: intent.turn,
            tool_use_id: intent.tool_use_id.to_owned(),
            tool_name: intent.tool_name.to_owned(),
            requested: intent.requested.to_string(),
            input: intent.input.to_string(),
            at_ms: now_ms(),
        }))
        .await
        .map_err(|e| format!("the audit intent of this call could not be made durable: {e}"))
    }
}

#[async_trait]
impl Hook for IntentGate {
    fn name(&self) -> &str {
        "audit-intent"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([
                EventKind::PreToolUse,
                EventKind::PermissionDenied,
                EventKind::PostToolUse,
                EventKind::PostToolUseFailure,
            ])
            .fail_closed()
            .timeout(Duration::from_secs(10))
    }
    async fn pre_tool_use(&self, cx: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        // Queued in order before the intent; what must be durable is the intent.
        let queued = record_of(cx.envelope()).is_none_or(|r| self.log.send(r, None));
        Ok(if queued {
            PreToolUseAction::proceed().into()
        } else {
            PreToolUseAction::block("the audit log is closed; no call runs without its intent")
                .into()
        })
    }
    async fn permission_denied(&self, cx: &HookCx, _: &PermissionDenied) -> HookResult<()> {
        self.commit_event(cx.envelope())
            .await
            .map_err(HookError::new)?;
        Ok(().into())
    }
    async fn post_tool_use(&self, cx: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        self.commit_event(cx.envelope())
            .await
            .map_err(HookError::new)?;
        Ok(PostToolUseAction::keep().into())
    }
    async fn post_tool_use_failure(
        &self,
        cx: &HookCx,
        _: &PostToolUseFailure,
    ) -> HookResult<PostToolUseAction> {
        self.commit_event(cx.envelope())
            .await
            .map_err(HookError::new)?;
        Ok(PostToolUseAction::keep().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_postgres_url_given_to_open_points_to_connect() {
        let url = "postgres://audit:s3cret@127.0.0.1:1/audit";
        let err = AuditLog::open(url, AuditMode::Durable)
            .unwrap_err()
            .to_string();
        assert!(err.contains("connect") && !err.contains("s3cret"), "{err}");
        let err = AuditDb::open(url).unwrap_err().to_string();
        assert!(err.contains("connect") && !err.contains("s3cret"), "{err}");
        assert!(!Path::new("postgres:").exists(), "no file was made");
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn a_postgres_url_without_the_feature_is_an_error_naming_the_feature() {
        let url = "postgresql://audit:s3cret@127.0.0.1:1/audit";
        let err = AuditLog::connect(url, AuditMode::Durable)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("feature `postgres`"), "{err}");
        assert!(
            err.contains("postgresql://audit:***@127.0.0.1:1/audit"),
            "{err}"
        );
        assert!(!err.contains("s3cret"), "{err}");
        let err = AuditDb::connect(url).await.unwrap_err().to_string();
        assert!(
            err.contains("feature `postgres`") && !err.contains("s3cret"),
            "{err}"
        );
    }
}
