//! The writer actor: one thread that owns the store's connection and commits records in
//! batches; and how each record is written, in SQL every backend runs alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::store::{int, required, AuditStore, Param, StoreError};

/// Most records committed in one transaction.
const BATCH: usize = 512;

/// One thing to write.
#[derive(Debug)]
pub(crate) enum Record {
    SessionStart(SessionStart),
    SessionEnd(SessionEnd),
    /// A tool call was requested (PreToolUse): a new row, the next attempt of its
    /// (session, turn, tool_use_id).
    Request(Request),
    /// A call is about to run with `input` (durable mode): must be committed before it runs.
    Intent(Intent),
    Denied(Denied),
    Outcome(Outcome),
    HookFailure(HookFailure),
}

/// A session started.
#[derive(Debug)]
pub(crate) struct SessionStart {
    pub session_id: String,
    pub parent_id: Option<String>,
    pub cwd: String,
    pub at_ms: u64,
}

/// A session ended.
#[derive(Debug)]
pub(crate) struct SessionEnd {
    pub session_id: String,
    pub reason: String,
    pub at_ms: u64,
}

/// A tool call was requested.
#[derive(Debug)]
pub(crate) struct Request {
    pub session_id: String,
    pub turn: u32,
    pub tool_use_id: String,
    pub tool_name: String,
    pub input: String,
    pub at_ms: u64,
}

/// A call is about to run with `input`.
#[derive(Debug)]
pub(crate) struct Intent {
    pub session_id: String,
    pub turn: u32,
    pub tool_use_id: String,
    pub tool_name: String,
    pub requested: String,
    pub input: String,
    pub at_ms: u64,
}

/// A call was denied or blocked.
#[derive(Debug)]
pub(crate) struct Denied {
    pub session_id: String,
    pub turn: u32,
    pub tool_use_id: String,
    pub tool_name: String,
    pub input: String,
    pub decision: &'static str,
    pub source: String,
    pub decided_by: Option<String>,
    pub reason: String,
    pub at_ms: u64,
}

/// A call ran (successfully or not).
#[derive(Debug)]
pub(crate) struct Outcome {
    pub session_id: String,
    pub turn: u32,
    pub tool_use_id: String,
    pub tool_name: String,
    pub requested: String,
    pub final_input: String,
    pub is_error: bool,
    pub preview: String,
    pub duration_ms: u64,
    pub at_ms: u64,
}

/// A hook failed.
#[derive(Debug)]
pub(crate) struct HookFailure {
    pub session_id: String,
    pub hook: String,
    pub event: String,
    pub status: String,
    pub at_ms: u64,
}

/// What the writer serves.
pub(crate) enum WriterMsg {
    /// Write; `ack` hears back once the record's transaction committed.
    Write {
        record: Box<Record>,
        ack: Option<oneshot::Sender<Result<(), String>>>,
    },
    /// Commit what is pending and stop.
    Close(oneshot::Sender<()>),
}

/// Which call: a row is one attempt of it, in one instance.
struct Call<'a> {
    instance: i64,
    session_id: &'a str,
    turn: u32,
    tool_use_id: &'a str,
}

/// A new row for `call`: its next attempt.
fn new_call(
    store: &mut dyn AuditStore,
    call: &Call<'_>,
    tool_name: &str,
    request_input: &str,
    at_ms: u64,
) -> Result<i64, StoreError> {
    let rows = store.query(
        "INSERT INTO tool_calls (instance, session_id, turn, tool_use_id, attempt, tool_name,
                                 request_input, requested_ms)
         VALUES ($1, $2, $3, $4,
                 (SELECT COALESCE(MAX(attempt), 0) + 1 FROM tool_calls
                  WHERE instance = $1 AND session_id = $2 AND turn = $3 AND tool_use_id = $4),
                 $5, $6, $7)
         RETURNING id",
        &[
            call.instance.into(),
            call.session_id.into(),
            call.turn.into(),
            call.tool_use_id.into(),
            tool_name.into(),
            request_input.into(),
            at_ms.into(),
        ],
    )?;
    let row = rows
        .first()
        .ok_or_else(|| StoreError::Sql("an insert returned no id".into()))?;
    required(int(row, 0), 0, "the new row's id")
}

/// The row a later record of `call` belongs to: among its attempts without an outcome (and,
/// for an intent, without an intent), the first whose requested or final input is one of
/// `inputs`, else the oldest.
fn open_call(
    store: &mut dyn AuditStore,
    call: &Call<'_>,
    inputs: [&String; 2],
    for_intent: bool,
) -> Result<Option<i64>, StoreError> {
    const OPEN: &str = "SELECT id FROM tool_calls
         WHERE instance = $1 AND session_id = $2 AND turn = $3 AND tool_use_id = $4
               AND outcome IS NULL
         ORDER BY (request_input IS NOT DISTINCT FROM $5 OR final_input IS NOT DISTINCT FROM $5
                   OR request_input IS NOT DISTINCT FROM $6
                   OR final_input IS NOT DISTINCT FROM $6) DESC, attempt
         LIMIT 1";
    const OPEN_FOR_INTENT: &str = "SELECT id FROM tool_calls
         WHERE instance = $1 AND session_id = $2 AND turn = $3 AND tool_use_id = $4
               AND outcome IS NULL AND intent_ms IS NULL
         ORDER BY (request_input IS NOT DISTINCT FROM $5 OR final_input IS NOT DISTINCT FROM $5
                   OR request_input IS NOT DISTINCT FROM $6
                   OR final_input IS NOT DISTINCT FROM $6) DESC, attempt
         LIMIT 1";
    let rows = store.query(
        if for_intent { OPEN_FOR_INTENT } else { OPEN },
        &[
            call.instance.into(),
            call.session_id.into(),
            call.turn.into(),
            call.tool_use_id.into(),
            inputs[0].into(),
            inputs[1].into(),
        ],
    )?;
    match rows.first() {
        Some(row) => Ok(Some(required(int(row, 0), 0, "a call's id")?)),
        None => Ok(None),
    }
}

/// Writes one record of `instance`, by its kind.
fn write(store: &mut dyn AuditStore, instance: i64, record: &Record) -> Result<(), StoreError> {
    match record {
        Record::SessionStart(r) => write_session_start(store, instance, r),
        Record::SessionEnd(r) => write_session_end(store, instance, r),
        Record::Request(r) => write_request(store, instance, r),
        Record::Intent(r) => write_intent(store, instance, r),
        Record::Denied(r) => write_denied(store, instance, r),
        Record::Outcome(r) => write_outcome(store, instance, r),
        Record::HookFailure(r) => write_hook_failure(store, instance, r),
    }
}

/// Inserts the session, or marks an already known one started (keeping its first start).
fn write_session_start(
    store: &mut dyn AuditStore,
    instance: i64,
    r: &SessionStart,
) -> Result<(), StoreError> {
    store.execute(
        "INSERT INTO sessions (instance, id, parent_id, cwd, started_ms) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (instance, id)
         DO UPDATE SET started_ms = COALESCE(sessions.started_ms, excluded.started_ms)",
        &[
            instance.into(),
            (&r.session_id).into(),
            r.parent_id.as_ref().into(),
            (&r.cwd).into(),
            r.at_ms.into(),
        ],
    )?;
    Ok(())
}

/// Sets the session's end time and reason (inserting it if unknown).
fn write_session_end(
    store: &mut dyn AuditStore,
    instance: i64,
    r: &SessionEnd,
) -> Result<(), StoreError> {
    store.execute(
        "INSERT INTO sessions (instance, id, ended_ms, end_reason) VALUES ($1, $2, $3, $4)
         ON CONFLICT (instance, id)
         DO UPDATE SET ended_ms = excluded.ended_ms, end_reason = excluded.end_reason",
        &[
            instance.into(),
            (&r.session_id).into(),
            r.at_ms.into(),
            (&r.reason).into(),
        ],
    )?;
    Ok(())
}

/// Inserts the call's next attempt.
fn write_request(store: &mut dyn AuditStore, instance: i64, r: &Request) -> Result<(), StoreError> {
    let call = Call {
        instance,
        session_id: &r.session_id,
        turn: r.turn,
        tool_use_id: &r.tool_use_id,
    };
    new_call(store, &call, &r.tool_name, &r.input, r.at_ms)?;
    Ok(())
}

/// Sets the intent time and the input about to run on the call's open row (or a new one).
fn write_intent(store: &mut dyn AuditStore, instance: i64, r: &Intent) -> Result<(), StoreError> {
    let call = Call {
        instance,
        session_id: &r.session_id,
        turn: r.turn,
        tool_use_id: &r.tool_use_id,
    };
    let id = match open_call(store, &call, [&r.requested, &r.input], true)? {
        Some(id) => id,
        None => new_call(store, &call, &r.tool_name, &r.requested, r.at_ms)?,
    };
    store.execute(
        "UPDATE tool_calls SET intent_ms = $2, final_input = $3 WHERE id = $1",
        &[id.into(), r.at_ms.into(), (&r.input).into()],
    )?;
    Ok(())
}

/// Closes the call's open row (or a new one) as not run, and logs the deny decision.
fn write_denied(store: &mut dyn AuditStore, instance: i64, r: &Denied) -> Result<(), StoreError> {
    let call = Call {
        instance,
        session_id: &r.session_id,
        turn: r.turn,
        tool_use_id: &r.tool_use_id,
    };
    let id = match open_call(store, &call, [&r.input, &r.input], false)? {
        Some(id) => id,
        None => new_call(store, &call, &r.tool_name, &r.input, r.at_ms)?,
    };
    store.execute(
        "UPDATE tool_calls SET decision = $2, source = $3, decided_by = $4, reason = $5,
             final_input = $6, outcome = 'not_run', finished_ms = $7
         WHERE id = $1",
        &[
            id.into(),
            r.decision.into(),
            (&r.source).into(),
            r.decided_by.as_ref().into(),
            (&r.reason).into(),
            (&r.input).into(),
            r.at_ms.into(),
        ],
    )?;
    store.execute(
        "INSERT INTO permission_decisions (instance, session_id, tool_use_id, tool_name, decision,
                                           source, decided_by, reason, at_ms, call_id)
         VALUES ($1, $2, $3, $4, 'deny', $5, $6, $7, $8, $9)",
        &[
            instance.into(),
            (&r.session_id).into(),
            (&r.tool_use_id).into(),
            (&r.tool_name).into(),
            (&r.source).into(),
            r.decided_by.as_ref().into(),
            (&r.reason).into(),
            r.at_ms.into(),
            id.into(),
        ],
    )?;
    Ok(())
}

/// Sets the outcome on the call's open row (or a new one), and logs the allow decision.
fn write_outcome(store: &mut dyn AuditStore, instance: i64, r: &Outcome) -> Result<(), StoreError> {
    let call = Call {
        instance,
        session_id: &r.session_id,
        turn: r.turn,
        tool_use_id: &r.tool_use_id,
    };
    let id = match open_call(store, &call, [&r.requested, &r.final_input], false)? {
        Some(id) => id,
        None => new_call(store, &call, &r.tool_name, &r.requested, r.at_ms)?,
    };
    store.execute(
        "UPDATE tool_calls SET final_input = $2, decision = COALESCE(decision, 'allow'),
             outcome = $3, is_error = $4, output_preview = $5, finished_ms = $6,
             duration_ms = $7
         WHERE id = $1",
        &[
            id.into(),
            (&r.final_input).into(),
            (if r.is_error { "error" } else { "ok" }).into(),
            i64::from(r.is_error).into(),
            (&r.preview).into(),
            r.at_ms.into(),
            r.duration_ms.into(),
        ],
    )?;
    store.execute(
        "INSERT INTO permission_decisions (instance, session_id, tool_use_id, tool_name, decision,
                                           source, at_ms, call_id)
         VALUES ($1, $2, $3, $4, 'allow', NULL, $5, $6)",
        &[
            instance.into(),
            (&r.session_id).into(),
            (&r.tool_use_id).into(),
            (&r.tool_name).into(),
            r.at_ms.into(),
            id.into(),
        ],
    )?;
    Ok(())
}

/// Inserts the hook failure.
fn write_hook_failure(
    store: &mut dyn AuditStore,
    instance: i64,
    r: &HookFailure,
) -> Result<(), StoreError> {
    store.execute(
        "INSERT INTO hook_failures (instance, session_id, hook, event, status, at_ms)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            instance.into(),
            (&r.session_id).into(),
            (&r.hook).into(),
            (&r.event).into(),
            (&r.status).into(),
            r.at_ms.into(),
        ],
    )?;
    Ok(())
}

/// Registers a new writer of the store and returns its instance id, which keys everything it
/// writes.
pub(crate) fn register_instance(
    store: &mut dyn AuditStore,
    mode: &str,
    at_ms: u64,
) -> Result<i64, StoreError> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned());
    let rows = store.query(
        "INSERT INTO instances (pid, host, mode, started_ms) VALUES ($1, $2, $3, $4) RETURNING id",
        &[
            std::process::id().into(),
            Param::Text(host),
            mode.into(),
            at_ms.into(),
        ],
    )?;
    let row = rows
        .first()
        .ok_or_else(|| StoreError::Sql("registering the writer returned no id".into()))?;
    required(int(row, 0), 0, "the instance id")
}

/// Writes `batch` in one transaction and commits it (durably, in durable mode: the store was
/// opened so); nothing of it is kept when any record fails.
pub(crate) fn write_batch(
    store: &mut dyn AuditStore,
    instance: i64,
    batch: &[&Record],
) -> Result<(), StoreError> {
    store.ensure_connected()?;
    store.begin_write()?;
    let result = batch
        .iter()
        .try_for_each(|record| write(store, instance, record))
        .and_then(|()| store.batch("COMMIT"));
    if result.is_err() {
        let _ = store.batch("ROLLBACK");
    }
    result
}

/// The writer loop: takes what is queued (up to [`BATCH`]), writes it in one transaction,
/// commits, then acknowledges. Runs on its own thread; ends on `Close` or when every sender is
/// gone, after committing what it holds, and marks its instance ended.
pub(crate) fn run(
    mut store: Box<dyn AuditStore>,
    instance: i64,
    rx: mpsc::Receiver<WriterMsg>,
    written: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) {
    let mut closing: Option<oneshot::Sender<()>> = None;
    while closing.is_none() {
        let Ok(first) = rx.recv() else { break };
        let mut batch = Vec::new();
        let mut push = |msg: WriterMsg, batch: &mut Vec<_>| match msg {
            WriterMsg::Write { record, ack } => batch.push((record, ack)),
            WriterMsg::Close(done) => closing = Some(done),
        };
        push(first, &mut batch);
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(msg) => push(msg, &mut batch),
                Err(_) => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let records: Vec<&Record> = batch.iter().map(|(r, _)| &**r).collect();
        let result = write_batch(&mut *store, instance, &records);
        match &result {
            Ok(()) => {
                written.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                failed.fetch_add(batch.len() as u64, Ordering::Relaxed);
                tracing::error!(error = %e, records = batch.len(), "audit log write failed");
            }
        }
        for (_, ack) in batch {
            if let Some(ack) = ack {
                let _ = ack.send(result.as_ref().map(|_| ()).map_err(ToString::to_string));
            }
        }
    }
    let _ = store.execute(
        "UPDATE instances SET ended_ms = $1 WHERE id = $2",
        &[crate::model::event::now_ms().into(), instance.into()],
    );
    drop(store);
    if let Some(done) = closing {
        let _ = done.send(());
    }
}
