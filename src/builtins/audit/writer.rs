//! The writer actor: one thread that owns the connection and commits records in batches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use rusqlite::{params, Connection};
use tokio::sync::oneshot;

/// Most records committed in one transaction.
const BATCH: usize = 512;

/// One thing to write.
#[derive(Debug)]
pub(crate) enum Record {
    SessionStart {
        session_id: String,
        parent_id: Option<String>,
        cwd: String,
        at_ms: u64,
    },
    SessionEnd {
        session_id: String,
        reason: String,
        at_ms: u64,
    },
    /// A tool call was requested (PreToolUse); with `intent`, it must be durable before the tool
    /// runs.
    Request {
        session_id: String,
        tool_use_id: String,
        tool_name: String,
        input: String,
        at_ms: u64,
        intent: bool,
    },
    Denied {
        session_id: String,
        tool_use_id: String,
        tool_name: String,
        input: String,
        decision: &'static str,
        source: String,
        decided_by: Option<String>,
        reason: String,
        at_ms: u64,
    },
    Outcome {
        session_id: String,
        tool_use_id: String,
        tool_name: String,
        final_input: String,
        is_error: bool,
        preview: String,
        duration_ms: u64,
        at_ms: u64,
    },
    HookFailure {
        session_id: String,
        hook: String,
        event: String,
        status: String,
        at_ms: u64,
    },
}

/// What the writer serves.
pub(crate) enum WriterMsg {
    /// Write; `ack` hears back once the record's transaction committed.
    Write {
        record: Record,
        ack: Option<oneshot::Sender<Result<(), String>>>,
    },
    /// Commit what is pending and stop.
    Close(oneshot::Sender<()>),
}

fn write(conn: &Connection, record: &Record) -> rusqlite::Result<()> {
    match record {
        Record::SessionStart {
            session_id,
            parent_id,
            cwd,
            at_ms,
        } => {
            conn.execute(
                "INSERT INTO sessions (id, parent_id, cwd, started_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET started_ms = COALESCE(started_ms, excluded.started_ms)",
                params![session_id, parent_id, cwd, *at_ms as i64],
            )?;
        }
        Record::SessionEnd {
            session_id,
            reason,
            at_ms,
        } => {
            conn.execute(
                "INSERT INTO sessions (id, ended_ms, end_reason) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET ended_ms = excluded.ended_ms, end_reason = excluded.end_reason",
                params![session_id, *at_ms as i64, reason],
            )?;
        }
        Record::Request {
            session_id,
            tool_use_id,
            tool_name,
            input,
            at_ms,
            intent,
        } => {
            let intent_ms = intent.then_some(*at_ms as i64);
            conn.execute(
                "INSERT INTO tool_calls (session_id, tool_use_id, tool_name, request_input, requested_ms, intent_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (session_id, tool_use_id) DO UPDATE SET
                     intent_ms = COALESCE(tool_calls.intent_ms, excluded.intent_ms)",
                params![session_id, tool_use_id, tool_name, input, *at_ms as i64, intent_ms],
            )?;
        }
        Record::Denied {
            session_id,
            tool_use_id,
            tool_name,
            input,
            decision,
            source,
            decided_by,
            reason,
            at_ms,
        } => {
            conn.execute(
                "INSERT INTO tool_calls (session_id, tool_use_id, tool_name, request_input, requested_ms,
                                         decision, source, decided_by, reason, outcome, finished_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'not_run', ?5)
                 ON CONFLICT (session_id, tool_use_id) DO UPDATE SET
                     decision = excluded.decision, source = excluded.source,
                     decided_by = excluded.decided_by, reason = excluded.reason,
                     final_input = excluded.request_input,
                     outcome = 'not_run', finished_ms = excluded.finished_ms",
                params![session_id, tool_use_id, tool_name, input, *at_ms as i64, decision, source, decided_by, reason],
            )?;
            conn.execute(
                "INSERT INTO permission_decisions (session_id, tool_use_id, tool_name, decision, source, decided_by, reason, at_ms)
                 VALUES (?1, ?2, ?3, 'deny', ?4, ?5, ?6, ?7)",
                params![session_id, tool_use_id, tool_name, source, decided_by, reason, *at_ms as i64],
            )?;
        }
        Record::Outcome {
            session_id,
            tool_use_id,
            tool_name,
            final_input,
            is_error,
            preview,
            duration_ms,
            at_ms,
        } => {
            conn.execute(
                "INSERT INTO tool_calls (session_id, tool_use_id, tool_name, final_input, decision, outcome,
                                         is_error, output_preview, finished_ms, duration_ms)
                 VALUES (?1, ?2, ?3, ?4, 'allow', ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (session_id, tool_use_id) DO UPDATE SET
                     final_input = excluded.final_input,
                     decision = COALESCE(tool_calls.decision, 'allow'),
                     outcome = excluded.outcome, is_error = excluded.is_error,
                     output_preview = excluded.output_preview,
                     finished_ms = excluded.finished_ms, duration_ms = excluded.duration_ms",
                params![
                    session_id,
                    tool_use_id,
                    tool_name,
                    final_input,
                    if *is_error { "error" } else { "ok" },
                    *is_error as i64,
                    preview,
                    *at_ms as i64,
                    *duration_ms as i64
                ],
            )?;
            conn.execute(
                "INSERT INTO permission_decisions (session_id, tool_use_id, tool_name, decision, source, at_ms)
                 VALUES (?1, ?2, ?3, 'allow', NULL, ?4)",
                params![session_id, tool_use_id, tool_name, *at_ms as i64],
            )?;
        }
        Record::HookFailure {
            session_id,
            hook,
            event,
            status,
            at_ms,
        } => {
            conn.execute(
                "INSERT INTO hook_failures (session_id, hook, event, status, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![session_id, hook, event, status, *at_ms as i64],
            )?;
        }
    }
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
