//! [`AuditLog`]: a SQLite audit log (WAL) of sessions, tool calls (request, final input,
//! decision and who decided, outcome, output preview, timings), permission decisions with their
//! source, hook failures, and session ends.
//!
//! One writer thread owns the connection and commits records in batches. In
//! [`AuditMode::BestEffort`] (default) the log is an observer and records are written
//! asynchronously; none is lost on a clean shutdown ([`AuditLog::close`] drains them). In
//! [`AuditMode::Durable`] (seed 004) the intent of each tool call is committed with
//! `synchronous=FULL` right *before* the tool runs, with the input that will run (after every
//! hook, permission and `PermissionRequest` rewrite) beside the one requested, failing closed:
//! no durable intent, no call; its outcome is committed before the call's Post event
//! completes. After a crash, calls with an intent and no outcome are reported as in doubt
//! ([`AuditDb::in_doubt`]) — never re-run.
//!
//! Each call is a row of its own, keyed by (session, turn, `tool_use_id`, attempt): calls that
//! share an id (within a turn: attempts 1, 2, …) never merge. A log it creates is mode 0600.

mod read;
mod schema;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

pub use read::{AuditDb, CallRecord, SessionRecord, DEFAULT_QUERY_LIMIT};
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
    /// An observer; records are written asynchronously (`synchronous=NORMAL`).
    #[default]
    BestEffort,
    /// Intents are committed (`synchronous=FULL`) before each tool runs; fail-closed.
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

struct Inner {
    path: PathBuf,
    mode: AuditMode,
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
            .field("path", &self.inner.path)
            .field("mode", &self.inner.mode)
            .finish()
    }
}

fn now_ms() -> u64 {
    crate::model::event::now_ms()
}

fn audit_error(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Audit {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

impl AuditLog {
    /// Opens (creating it and its schema on first use, migrating older versions) the log at
    /// `path` and starts its writer.
    ///
    /// A log it creates is mode 0600 (so are its `-wal` and `-shm` files, which SQLite creates
    /// with the database's mode); an existing file keeps its mode.
    pub fn open(path: impl AsRef<Path>, mode: AuditMode) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        create_private(&path).map_err(|e| audit_error(&path, e))?;
        let mut conn = Connection::open(&path).map_err(|e| audit_error(&path, e))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| audit_error(&path, e))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| audit_error(&path, format!("cannot use it as a database: {e}")))?;
        let sync = match mode {
            AuditMode::Durable => "FULL",
            AuditMode::BestEffort => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync)
            .map_err(|e| audit_error(&path, e))?;
        schema::migrate(&mut conn).map_err(|e| audit_error(&path, e))?;
        let (tx, rx) = mpsc::channel();
        let written = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (w, f) = (written.clone(), failed.clone());
        std::thread::Builder::new()
            .name("hookbus-audit".into())
            .spawn(move || writer::run(conn, rx, w, f))
            .map_err(|e| audit_error(&path, format!("cannot start the writer: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                mode,
                tx: Mutex::new(Some(tx)),
                written,
                failed,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
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

/// Creates `path` empty with mode 0600 unless it exists.
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
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
