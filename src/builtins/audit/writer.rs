//! The writer actor: one thread that owns the connection and commits records in batches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

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

/// Which call: a row is one attempt of it.
struct Call<'a> {
    session_id: &'a str,
    turn: u32,
    tool_use_id: &'a str,
}

/// A new row for `call`: its next attempt.
fn new_call(
    conn: &Connection,
    call: &Call<'_>,
    tool_name: &str,
    request_input: &str,
    at_ms: u64,
) -> rusqlite::Result<i64> {
    conn.execute(
        "INSERT INTO tool_calls (session_id, turn, tool_use_id, attempt, tool_name, request_input, requested_ms)
         VALUES (?1, ?2, ?3,
                 (SELECT COALESCE(MAX(attempt), 0) + 1 FROM tool_calls
                  WHERE session_id = ?1 AND turn = ?2 AND tool_use_id = ?3),
                 ?4, ?5, ?6)",
        params![call.session_id, call.turn, call.tool_use_id, tool_name, request_input, at_ms as i64],
    )?;
    Ok(conn.last_insert_rowid())
}

/// The row a later record of `call` belongs to: among its attempts without an outcome (and,
/// for an intent, without an intent), the first whose requested or final input is one of
/// `inputs`, else the oldest.
fn open_call(
    conn: &Connection,
    call: &Call<'_>,
    inputs: [&String; 2],
    for_intent: bool,
) -> rusqlite::Result<Option<i64>> {
    let sql = format!(
        "SELECT id FROM tool_calls
         WHERE session_id = ?1 AND turn = ?2 AND tool_use_id = ?3 AND outcome IS NULL {}
         ORDER BY (request_input IS ?4 OR final_input IS ?4
                   OR request_input IS ?5 OR final_input IS ?5) DESC, attempt
         LIMIT 1",
        if for_intent {
            "AND intent_ms IS NULL"
        } else {
            ""
        }
    );
    conn.query_row(
        &sql,
        params![
            call.session_id,
            call.turn,
            call.tool_use_id,
            inputs[0],
            inputs[1]
        ],
        |r| r.get(0),
    )
    .optional()
}

/// Writes one record, by its kind.
fn write(conn: &Connection, record: &Record) -> rusqlite::Result<()> {
    match record {
        Record::SessionStart(r) => write_session_start(conn, r),
        Record::SessionEnd(r) => write_session_end(conn, r),
        Record::Request(r) => write_request(conn, r),
        Record::Intent(r) => write_intent(conn, r),
        Record::Denied(r) => write_denied(conn, r),
        Record::Outcome(r) => write_outcome(conn, r),
        Record::HookFailure(r) => write_hook_failure(conn, r),
    }
}

/// Inserts the session, or marks an already known one started (keeping its first start).
fn write_session_start(conn: &Connection, r: &SessionStart) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO sessions (id, parent_id, cwd, started_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (id) DO UPDATE SET started_ms = COALESCE(started_ms, excluded.started_ms)",
        params![r.session_id, r.parent_id, r.cwd, r.at_ms as i64],
    )?;
    Ok(())
}

/// Sets the session's end time and reason (inserting it if unknown).
fn write_session_end(conn: &Connection, r: &SessionEnd) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO sessions (id, ended_ms, end_reason) VALUES (?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET ended_ms = excluded.ended_ms, end_reason = excluded.end_reason",
        params![r.session_id, r.at_ms as i64, r.reason],
    )?;
    Ok(())
}

/// Inserts the call's next attempt.
fn write_request(conn: &Connection, r: &Request) -> rusqlite::Result<()> {
    let call = Call {
        session_id: &r.session_id,
        turn: r.turn,
        tool_use_id: &r.tool_use_id,
    };
    new_call(conn, &call, &r.tool_name, &r.input, r.at_ms)?;
    Ok(())
}

/// Sets the intent time and the input about to run on the call's open row (or a new one).
fn write_intent(conn: &Connection, r: &Intent) -> rusqlite::Result<()> {
    let call = Call {
        session_id: &r.session_id,
        turn: r.turn,
        tool_use_id: &r.tool_use_id,
    };
    let id = match open_call(conn, &call, [&r.requested, &r.input], true)? {
        Some(id) => id,
        None => new_call(conn, &call, &r.tool_name, &r.requested, r.at_ms)?,
    };
    conn.execute(
        "UPDATE tool_calls SET intent_ms = ?2, final_input = ?3 WHERE id = ?1",
        params![id, r.at_ms as i64, r.input],
    )?;
    Ok(())
}

/// Closes the call's open row (or a new one) as not run, and logs the deny decision.
fn write_denied(conn: &Connection, r: &Denied) -> rusqlite::Result<()> {
    let call = Call {
        session_id: &r.session_id,
        turn: r.turn,
        tool_use_id: &r.tool_use_id,
    };
    let id = match open_call(conn, &call, [&r.input, &r.input], false)? {
        Some(id) => id,
        None => new_call(conn, &call, &r.tool_name, &r.input, r.at_ms)?,
    };
    conn.execute(
        "UPDATE tool_calls SET decision = ?2, source = ?3, decided_by = ?4, reason = ?5,
             final_input = ?6, outcome = 'not_run', finished_ms = ?7
         WHERE id = ?1",
        params![
            id,
            r.decision,
            r.source,
            r.decided_by,
            r.reason,
            r.input,
            r.at_ms as i64
        ],
    )?;
    conn.execute(
        "INSERT INTO permission_decisions (session_id, tool_use_id, tool_name, decision, source, decided_by, reason, at_ms, call_id)
         VALUES (?1, ?2, ?3, 'deny', ?4, ?5, ?6, ?7, ?8)",
        params![r.session_id, r.tool_use_id, r.tool_name, r.source, r.decided_by, r.reason, r.at_ms as i64, id],
    )?;
    Ok(())
}

/// Sets the outcome on the call's open row (or a new one), and logs the allow decision.
fn write_outcome(conn: &Connection, r: &Outcome) -> rusqlite::Result<()> {
    let call = Call {
        session_id: &r.session_id,
        turn: r.turn,
        tool_use_id: &r.tool_use_id,
    };
    let id = match open_call(conn, &call, [&r.requested, &r.final_input], false)? {
        Some(id) => id,
        None => new_call(conn, &call, &r.tool_name, &r.requested, r.at_ms)?,
    };
    conn.execute(
        "UPDATE tool_calls SET final_input = ?2, decision = COALESCE(decision, 'allow'),
             outcome = ?3, is_error = ?4, output_preview = ?5, finished_ms = ?6,
             duration_ms = ?7
         WHERE id = ?1",
        params![
            id,
            r.final_input,
            if r.is_error { "error" } else { "ok" },
            r.is_error as i64,
            r.preview,
            r.at_ms as i64,
            r.duration_ms as i64
        ],
    )?;
    conn.execute(
        "INSERT INTO permission_decisions (session_id, tool_use_id, tool_name, decision, source, at_ms, call_id)
         VALUES (?1, ?2, ?3, 'allow', NULL, ?4, ?5)",
        params![r.session_id, r.tool_use_id, r.tool_name, r.at_ms as i64, id],
    )?;
    Ok(())
}

/// Inserts the hook failure.
fn write_hook_failure(conn: &Connection, r: &HookFailure) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO hook_failures (session_id, hook, event, status, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![r.session_id, r.hook, r.event, r.status, r.at_ms as i64],
    )?;
    Ok(())
}

/// The writer loop: takes what is queued (up to [`BATCH`]), writes it in one transaction,
/// commits, then acknowledges. Runs on its own thread; ends on `Close` or when every sender is
/// gone, after committing what it holds.
pub(crate) fn run(
    mut conn: Connection,
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
        let result = (|| -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            for (record, _) in &batch {
                write(&tx, record)?;
            }
            tx.commit()
        })();
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
    drop(conn);
    if let Some(done) = closing {
        let _ = done.send(());
    }
}
