//! Reading an audit log: sessions, calls, calls in doubt, one call.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension, Row};
use serde::{Deserialize, Serialize};

use super::{audit_error, schema};
use crate::model::error::Error;

/// One session of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session's id.
    pub id: String,
    /// The parent session (subagents).
    pub parent_id: Option<String>,
    /// Its working directory.
    pub cwd: Option<String>,
    /// When it started (ms since the epoch).
    pub started_ms: Option<i64>,
    /// When it ended.
    pub ended_ms: Option<i64>,
    /// Why it ended (`SessionEnd.reason`).
    pub end_reason: Option<String>,
    /// Its tool calls.
    pub calls: i64,
}

/// One tool call of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The call's number in the log (what `hookbus audit show` takes).
    pub id: i64,
    /// The session.
    pub session_id: String,
    /// The turn it was made in (0 in logs written before schema version 2).
    pub turn: i64,
    /// The call's `tool_use_id`.
    pub tool_use_id: String,
    /// Which call of that id within the turn, from 1: calls sharing an id never merge.
    pub attempt: i64,
    /// The tool.
    pub tool_name: String,
    /// The input the model asked for.
    pub request_input: Option<String>,
    /// The input that ran (or would have): after hooks and `PermissionRequest` rewrites. In
    /// durable mode it is committed with the intent, before the tool runs.
    pub final_input: Option<String>,
    /// When it was requested.
    pub requested_ms: Option<i64>,
    /// When its intent was committed (durable mode).
    pub intent_ms: Option<i64>,
    /// `allow`, `denied` (permission) or `blocked` (a hook).
    pub decision: Option<String>,
    /// Who decided a denial (the hook's name, or the rule).
    pub decided_by: Option<String>,
    /// The denial's source (`rule`, `mode`, `hook`, `user`, `timeout`, `error`).
    pub source: Option<String>,
    /// The denial's reason.
    pub reason: Option<String>,
    /// `ok`, `error`, `not_run`, or none yet.
    pub outcome: Option<String>,
    /// The start of the tool's output (or error).
    pub output_preview: Option<String>,
    /// When it finished.
    pub finished_ms: Option<i64>,
    /// How long the tool ran.
    pub duration_ms: Option<i64>,
    /// An intent without an outcome: it may or may not have run; never re-run it blindly.
    pub in_doubt: bool,
}

/// The columns of a call, in the order [`call`] reads them; logs before schema version 2 have
/// no turn or attempt.
fn call_columns(version: i64) -> &'static str {
    if version >= 2 {
        "id, session_id, tool_use_id, tool_name, request_input, final_input, requested_ms,
         intent_ms, decision, decided_by, source, reason, outcome, output_preview, finished_ms,
         duration_ms, turn, attempt"
    } else {
        "id, session_id, tool_use_id, tool_name, request_input, final_input, requested_ms,
         intent_ms, decision, decided_by, source, reason, outcome, output_preview, finished_ms,
         duration_ms, 0, 1"
    }
}

fn call(row: &Row<'_>) -> rusqlite::Result<CallRecord> {
    let intent_ms: Option<i64> = row.get(7)?;
    let outcome: Option<String> = row.get(12)?;
    Ok(CallRecord {
        id: row.get(0)?,
        session_id: row.get(1)?,
        turn: row.get(16)?,
        tool_use_id: row.get(2)?,
        attempt: row.get(17)?,
        tool_name: row.get(3)?,
        request_input: row.get(4)?,
        final_input: row.get(5)?,
        requested_ms: row.get(6)?,
        intent_ms,
        decision: row.get(8)?,
        decided_by: row.get(9)?,
        source: row.get(10)?,
        reason: row.get(11)?,
        in_doubt: intent_ms.is_some() && outcome.is_none(),
        outcome,
        output_preview: row.get(13)?,
        finished_ms: row.get(14)?,
        duration_ms: row.get(15)?,
    })
}

/// How long one query of [`AuditDb`] may run by default before it is stopped.
pub const DEFAULT_QUERY_LIMIT: Duration = Duration::from_secs(5);

/// An audit log opened for reading.
///
/// Before any query touches its tables, the file is checked from its schema alone: each audit
/// table is a table (not a view or anything else that could run without end), the schema
/// version is one this build knows, the columns are there. Every query, the checks included,
/// is stopped after [`DEFAULT_QUERY_LIMIT`] (see [`set_query_limit`](Self::set_query_limit))
/// by an SQLite progress handler, so a crafted or damaged file gives an error, never a hang.
#[derive(Debug)]
pub struct AuditDb {
    conn: Connection,
    path: PathBuf,
    version: i64,
    limit: Duration,
    /// Set by the progress handler when it stopped a query.
    fired: Arc<AtomicBool>,
}

impl AuditDb {
    /// Opens `path` read-only; a file that is not an audit log is an error saying so.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::open_with_limit(path, DEFAULT_QUERY_LIMIT)
    }

    /// Opens `path` read-only with `limit` for each query (the checks on opening included).
    pub fn open_with_limit(path: impl AsRef<Path>, limit: Duration) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(audit_error(&path, "no such file"));
        }
        let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| audit_error(&path, e))?;
        let mut db = Self {
            conn,
            path,
            version: 0,
            limit,
            fired: Arc::default(),
        };
        db.start_query()?;
        db.version = schema::check(&db.conn).map_err(|e| match e {
            schema::SchemaError::Sqlite(_) if db.interrupted() => db.too_slow(),
            e => audit_error(&db.path, e),
        })?;
        Ok(db)
    }

    /// How long each later query may run (default [`DEFAULT_QUERY_LIMIT`]).
    pub fn set_query_limit(&mut self, limit: Duration) {
        self.limit = limit;
    }

    /// The schema version of the file.
    pub fn schema_version(&self) -> i64 {
        self.version
    }

    /// Arms the progress handler for a query that starts now.
    fn start_query(&self) -> Result<(), Error> {
        let deadline = Instant::now()
            .checked_add(self.limit)
            .unwrap_or_else(|| Instant::now() + crate::model::bounds::MAX_TIMEOUT);
        let fired = self.fired.clone();
        fired.store(false, Ordering::Relaxed);
        self.conn
            .progress_handler(
                1000,
                Some(move || {
                    let over = Instant::now() >= deadline;
                    if over {
                        fired.store(true, Ordering::Relaxed);
                    }
                    over
                }),
            )
            .map_err(|e| self.err_plain(e))
    }

    fn interrupted(&self) -> bool {
        self.fired.load(Ordering::Relaxed)
    }

    fn too_slow(&self) -> Error {
        audit_error(
            &self.path,
            format!(
                "a query ran longer than {} ms and was stopped; the file may be damaged or \
                 crafted",
                self.limit.as_millis()
            ),
        )
    }

    fn err_plain(&self, e: rusqlite::Error) -> Error {
        audit_error(&self.path, e)
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        if self.interrupted() {
            self.too_slow()
        } else {
            self.err_plain(e)
        }
    }

    /// Every session, oldest first.
    pub fn sessions(&self) -> Result<Vec<SessionRecord>, Error> {
        self.start_query()?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT s.id, s.parent_id, s.cwd, s.started_ms, s.ended_ms, s.end_reason,
                        (SELECT count(*) FROM tool_calls c WHERE c.session_id = s.id)
                 FROM sessions s ORDER BY s.started_ms, s.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(SessionRecord {
                    id: r.get(0)?,
                    parent_id: r.get(1)?,
                    cwd: r.get(2)?,
                    started_ms: r.get(3)?,
                    ended_ms: r.get(4)?,
                    end_reason: r.get(5)?,
                    calls: r.get(6)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    fn calls_where(
        &self,
        filter: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<CallRecord>, Error> {
        self.start_query()?;
        let sql = format!(
            "SELECT {} FROM tool_calls {filter} ORDER BY id",
            call_columns(self.version)
        );
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt.query_map(args, call).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Tool calls, of one session or all.
    pub fn calls(&self, session: Option<&str>) -> Result<Vec<CallRecord>, Error> {
        match session {
            Some(s) => self.calls_where("WHERE session_id = ?1", &[&s]),
            None => self.calls_where("", &[]),
        }
    }

    /// Calls with a committed intent and no outcome.
    pub fn in_doubt(&self) -> Result<Vec<CallRecord>, Error> {
        self.calls_where("WHERE intent_ms IS NOT NULL AND outcome IS NULL", &[])
    }

    /// One call, by its number or its `tool_use_id`.
    pub fn call(&self, id: &str) -> Result<Option<CallRecord>, Error> {
        self.start_query()?;
        let sql = format!(
            "SELECT {} FROM tool_calls WHERE CAST(id AS TEXT) = ?1 OR tool_use_id = ?1 ORDER BY id LIMIT 1",
            call_columns(self.version)
        );
        self.conn
            .query_row(&sql, [id], call)
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Whether SQLite finds the file intact (`PRAGMA integrity_check`).
    pub fn integrity_ok(&self) -> Result<bool, Error> {
        self.start_query()?;
        let r: String = self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        Ok(r == "ok")
    }
}
