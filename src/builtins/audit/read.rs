//! Reading an audit log: sessions, calls, calls in doubt, one call — the same queries on
//! every backend.

use std::path::Path;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::sqlite::SqliteStore;
use super::store::{int, required, text, AuditStore, Param, Row, StoreError, Target};
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
    /// The log that wrote it ([`AuditLog::instance`](super::AuditLog::instance)): sessions of
    /// two writers of one store may share an id, never an instance (0 for sessions written
    /// before schema version 3).
    pub instance: i64,
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
    /// The log that wrote it (0 for calls written before schema version 3).
    pub instance: i64,
}

/// The columns of a call, in the order [`call`] reads them; logs before schema version 2 have
/// no turn or attempt, before version 3 no instance.
fn call_columns(version: i64) -> &'static str {
    match version {
        3.. => {
            "id, session_id, tool_use_id, tool_name, request_input, final_input, requested_ms,
             intent_ms, decision, decided_by, source, reason, outcome, output_preview,
             finished_ms, duration_ms, turn, attempt, instance"
        }
        2 => {
            "id, session_id, tool_use_id, tool_name, request_input, final_input, requested_ms,
             intent_ms, decision, decided_by, source, reason, outcome, output_preview,
             finished_ms, duration_ms, turn, attempt, 0"
        }
        _ => {
            "id, session_id, tool_use_id, tool_name, request_input, final_input, requested_ms,
             intent_ms, decision, decided_by, source, reason, outcome, output_preview,
             finished_ms, duration_ms, 0, 1, 0"
        }
    }
}

fn call(row: &Row) -> Result<CallRecord, StoreError> {
    let intent_ms = int(row, 7)?;
    let outcome = text(row, 12)?;
    Ok(CallRecord {
        id: required(int(row, 0), 0, "an integer")?,
        session_id: required(text(row, 1), 1, "a text")?,
        turn: required(int(row, 16), 16, "an integer")?,
        tool_use_id: required(text(row, 2), 2, "a text")?,
        attempt: required(int(row, 17), 17, "an integer")?,
        tool_name: required(text(row, 3), 3, "a text")?,
        request_input: text(row, 4)?,
        final_input: text(row, 5)?,
        requested_ms: int(row, 6)?,
        intent_ms,
        decision: text(row, 8)?,
        decided_by: text(row, 9)?,
        source: text(row, 10)?,
        reason: text(row, 11)?,
        in_doubt: intent_ms.is_some() && outcome.is_none(),
        outcome,
        output_preview: text(row, 13)?,
        finished_ms: int(row, 14)?,
        duration_ms: int(row, 15)?,
        instance: required(int(row, 18), 18, "an integer")?,
    })
}

fn session(row: &Row) -> Result<SessionRecord, StoreError> {
    Ok(SessionRecord {
        id: required(text(row, 0), 0, "a text")?,
        parent_id: text(row, 1)?,
        cwd: text(row, 2)?,
        started_ms: int(row, 3)?,
        ended_ms: int(row, 4)?,
        end_reason: text(row, 5)?,
        calls: required(int(row, 6), 6, "an integer")?,
        instance: required(int(row, 7), 7, "an integer")?,
    })
}

/// How long one query of [`AuditDb`] may run by default before it is stopped.
pub const DEFAULT_QUERY_LIMIT: Duration = Duration::from_secs(5);

/// An audit log opened for reading, on SQLite ([`open`](Self::open)) or, with the `postgres`
/// feature, PostgreSQL ([`connect`](Self::connect) with a `postgres://` URL). Both answer
/// every query alike: the same rows in the same order.
///
/// Before any query touches its tables, the store is checked from its schema alone: each audit
/// table is a table (not a view or anything else that could run without end), the schema
/// version is one this build knows, the tables and columns are there. Every query, the checks
/// included, is stopped after [`DEFAULT_QUERY_LIMIT`] (see
/// [`set_query_limit`](Self::set_query_limit)) — by an SQLite progress handler, or by
/// PostgreSQL's `statement_timeout` — so a crafted or damaged store gives an error, never a
/// hang. A PostgreSQL reader's session is read-only (`default_transaction_read_only`).
pub struct AuditDb {
    store: Mutex<Box<dyn AuditStore>>,
    /// The file, or the URL without its password.
    target: String,
    version: i64,
    limit: Duration,
}

impl std::fmt::Debug for AuditDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditDb")
            .field("target", &self.target)
            .field("version", &self.version)
            .field("limit", &self.limit)
            .finish()
    }
}

impl AuditDb {
    /// Opens the SQLite log at `path` read-only; a file that is not an audit log is an error
    /// saying so.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::open_with_limit(path, DEFAULT_QUERY_LIMIT)
    }

    /// Opens the SQLite log at `path` read-only with `limit` for each query (the checks on
    /// opening included).
    pub fn open_with_limit(path: impl AsRef<Path>, limit: Duration) -> Result<Self, Error> {
        let path = path.as_ref();
        let shown = super::sqlite_target(path)?;
        let store = SqliteStore::open_read(path).map_err(|e| audit_error(&shown, e))?;
        Self::checked(Box::new(store), shown, limit)
    }

    /// Opens the log `target` names for reading: a `postgres://` or `postgresql://` URL is a
    /// PostgreSQL database (feature `postgres`; without it, an error saying so), anything else
    /// the path of a SQLite file. Errors show the URL without its password.
    pub async fn connect(target: &str) -> Result<Self, Error> {
        Self::connect_with_limit(target, DEFAULT_QUERY_LIMIT).await
    }

    /// [`connect`](Self::connect) with `limit` for each query (the checks on opening included).
    pub async fn connect_with_limit(target: &str, limit: Duration) -> Result<Self, Error> {
        match Target::parse(target) {
            Target::Sqlite(path) => Self::open_with_limit(path, limit),
            Target::Postgres(url) => Self::connect_postgres(url, limit).await,
        }
    }

    #[cfg(feature = "postgres")]
    async fn connect_postgres(url: String, limit: Duration) -> Result<Self, Error> {
        let shown = super::store::redact_url(&url);
        let opened = shown.clone();
        let opening = tokio::task::spawn_blocking(move || {
            let store = super::postgres::PgStore::connect(&url, super::postgres::Role::Read)
                .map_err(|e| audit_error(&opened, e))?;
            Self::checked(Box::new(store), opened, limit)
        });
        opening
            .await
            .map_err(|e| audit_error(&shown, format!("opening stopped: {e}")))?
    }

    #[cfg(not(feature = "postgres"))]
    async fn connect_postgres(url: String, _: Duration) -> Result<Self, Error> {
        Err(audit_error(
            &super::store::redact_url(&url),
            StoreError::NoPostgres,
        ))
    }

    /// Checks the schema of a store just opened (within `limit`).
    fn checked(
        mut store: Box<dyn AuditStore>,
        target: String,
        limit: Duration,
    ) -> Result<Self, Error> {
        let version = store
            .limit_queries(limit)
            .and_then(|()| schema::check(&mut *store))
            .map_err(|e| audit_error(&target, e))?;
        Ok(Self {
            store: Mutex::new(store),
            target,
            version,
            limit,
        })
    }

    /// What was opened: the file, or the URL without its password.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// How long each later query may run (default [`DEFAULT_QUERY_LIMIT`]).
    pub fn set_query_limit(&mut self, limit: Duration) {
        self.limit = limit;
    }

    /// The schema version of the store.
    pub fn schema_version(&self) -> i64 {
        self.version
    }

    /// Runs `query` on the store, its time limit armed.
    fn run<T>(
        &self,
        query: impl FnOnce(&mut dyn AuditStore) -> Result<T, StoreError>,
    ) -> Result<T, Error> {
        let mut store = self.store.lock();
        store
            .limit_queries(self.limit)
            .and_then(|()| query(&mut **store))
            .map_err(|e| audit_error(&self.target, e))
    }

    /// Every session, oldest first (then by id, then by instance).
    pub fn sessions(&self) -> Result<Vec<SessionRecord>, Error> {
        let v3 = self.version >= 3;
        self.run(|store| {
            let sql = format!(
                "SELECT s.id, s.parent_id, s.cwd, s.started_ms, s.ended_ms, s.end_reason,
                        (SELECT count(*) FROM tool_calls c
                         WHERE c.session_id = s.id {same_instance}),
                        {instance}
                 FROM sessions s ORDER BY s.started_ms NULLS FIRST, s.id {bytes}, 8",
                same_instance = if v3 {
                    "AND c.instance = s.instance"
                } else {
                    ""
                },
                instance = if v3 { "s.instance" } else { "0" },
                bytes = store.byte_order(),
            );
            store.query(&sql, &[])?.iter().map(session).collect()
        })
    }

    fn calls_where(&self, filter: &str, args: &[Param]) -> Result<Vec<CallRecord>, Error> {
        let sql = format!(
            "SELECT {} FROM tool_calls {filter} ORDER BY id",
            call_columns(self.version)
        );
        self.run(|store| store.query(&sql, args)?.iter().map(call).collect())
    }

    /// Tool calls, of one session (of every instance) or all.
    pub fn calls(&self, session: Option<&str>) -> Result<Vec<CallRecord>, Error> {
        match session {
            Some(s) => self.calls_where("WHERE session_id = $1", &[s.into()]),
            None => self.calls_where("", &[]),
        }
    }

    /// Calls with a committed intent and no outcome whose writer is gone: on PostgreSQL, calls
    /// of a live writer (one still holding its instance's lock) are running, not in doubt; a
    /// SQLite file cannot tell, and lists every call with an intent and no outcome.
    pub fn in_doubt(&self) -> Result<Vec<CallRecord>, Error> {
        let gone = self.store.lock().instance_gone();
        let filter = match gone {
            Some(gone) => format!("WHERE intent_ms IS NOT NULL AND outcome IS NULL AND {gone}"),
            None => "WHERE intent_ms IS NOT NULL AND outcome IS NULL".to_owned(),
        };
        self.calls_where(&filter, &[])
    }

    /// One call, by its number or its `tool_use_id` (the first call with that id).
    pub fn call(&self, id: &str) -> Result<Option<CallRecord>, Error> {
        let sql = format!(
            "SELECT {} FROM tool_calls WHERE CAST(id AS TEXT) = $1 OR tool_use_id = $1
             ORDER BY id LIMIT 1",
            call_columns(self.version)
        );
        self.run(|store| {
            store
                .query(&sql, &[id.into()])?
                .first()
                .map(call)
                .transpose()
        })
    }

    /// Whether the store finds its data intact: SQLite's `PRAGMA integrity_check`; on
    /// PostgreSQL, which keeps its own consistency, that every audit table reads through.
    pub fn integrity_ok(&self) -> Result<bool, Error> {
        self.run(|store| store.integrity_ok())
    }
}
