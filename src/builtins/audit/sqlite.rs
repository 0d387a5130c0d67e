//! The SQLite backend: one file in WAL mode, `synchronous=FULL` in durable mode (`NORMAL`
//! otherwise), write batches under `BEGIN IMMEDIATE` so writers of one file wait for each other
//! (busy timeout 5 s), readers opened read-only with an SQLite progress handler that stops a
//! query past its time limit. The schema version is `PRAGMA user_version`.

use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::store::{AuditStore, Param, Row, StoreError, Value};
use super::AuditMode;

/// Migrations in order; version `n` is reached by applying the first `n`.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE hookbus_audit (key TEXT PRIMARY KEY, value TEXT NOT NULL);
     INSERT INTO hookbus_audit (key, value) VALUES ('format', 'hookbus-audit');
     CREATE TABLE sessions (
         id TEXT PRIMARY KEY,
         parent_id TEXT,
         cwd TEXT,
         started_ms INTEGER,
         ended_ms INTEGER,
         end_reason TEXT
     );
     CREATE TABLE tool_calls (
         id INTEGER PRIMARY KEY,
         session_id TEXT NOT NULL,
         tool_use_id TEXT NOT NULL,
         tool_name TEXT NOT NULL,
         request_input TEXT,
         final_input TEXT,
         requested_ms INTEGER,
         intent_ms INTEGER,
         decision TEXT,
         decided_by TEXT,
         source TEXT,
         reason TEXT,
         outcome TEXT,
         is_error INTEGER,
         output_preview TEXT,
         finished_ms INTEGER,
         duration_ms INTEGER,
         UNIQUE (session_id, tool_use_id)
     );
     CREATE TABLE permission_decisions (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         session_id TEXT NOT NULL,
         tool_use_id TEXT NOT NULL,
         tool_name TEXT NOT NULL,
         decision TEXT NOT NULL,
         source TEXT,
         decided_by TEXT,
         reason TEXT,
         at_ms INTEGER
     );
     CREATE TABLE hook_failures (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         session_id TEXT NOT NULL,
         hook TEXT NOT NULL,
         event TEXT NOT NULL,
         status TEXT NOT NULL,
         at_ms INTEGER
     );
     CREATE INDEX tool_calls_session ON tool_calls (session_id);",
    // 2: a row per call keyed by (session, turn, tool_use_id, attempt), so calls sharing an id
    //    never merge; permission decisions name their call's row.
    "CREATE TABLE tool_calls_v2 (
         id INTEGER PRIMARY KEY,
         session_id TEXT NOT NULL,
         turn INTEGER NOT NULL DEFAULT 0,
         tool_use_id TEXT NOT NULL,
         attempt INTEGER NOT NULL DEFAULT 1,
         tool_name TEXT NOT NULL,
         request_input TEXT,
         final_input TEXT,
         requested_ms INTEGER,
         intent_ms INTEGER,
         decision TEXT,
         decided_by TEXT,
         source TEXT,
         reason TEXT,
         outcome TEXT,
         is_error INTEGER,
         output_preview TEXT,
         finished_ms INTEGER,
         duration_ms INTEGER,
         UNIQUE (session_id, turn, tool_use_id, attempt)
     );
     INSERT INTO tool_calls_v2 (id, session_id, turn, tool_use_id, attempt, tool_name,
                                request_input, final_input, requested_ms, intent_ms, decision,
                                decided_by, source, reason, outcome, is_error, output_preview,
                                finished_ms, duration_ms)
         SELECT id, session_id, 0, tool_use_id, 1, tool_name, request_input, final_input,
                requested_ms, intent_ms, decision, decided_by, source, reason, outcome, is_error,
                output_preview, finished_ms, duration_ms
         FROM tool_calls;
     DROP TABLE tool_calls;
     ALTER TABLE tool_calls_v2 RENAME TO tool_calls;
     CREATE INDEX tool_calls_session ON tool_calls (session_id);
     ALTER TABLE permission_decisions ADD COLUMN call_id INTEGER;",
    // 3: many writers in one store. Each open log is an instance (a row of `instances`, its id
    //    from the database); sessions and calls are keyed by their instance too, so two
    //    processes' `session-1` never meet. Rows written before are instance 0. Applied
    //    versions are listed in `schema_migrations`.
    "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_ms INTEGER);
     CREATE TABLE instances (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         pid INTEGER,
         host TEXT,
         mode TEXT NOT NULL,
         started_ms INTEGER,
         ended_ms INTEGER
     );
     CREATE TABLE sessions_v3 (
         id TEXT NOT NULL,
         parent_id TEXT,
         cwd TEXT,
         started_ms INTEGER,
         ended_ms INTEGER,
         end_reason TEXT,
         instance INTEGER NOT NULL DEFAULT 0,
         PRIMARY KEY (instance, id)
     );
     INSERT INTO sessions_v3 (id, parent_id, cwd, started_ms, ended_ms, end_reason, instance)
         SELECT id, parent_id, cwd, started_ms, ended_ms, end_reason, 0 FROM sessions;
     DROP TABLE sessions;
     ALTER TABLE sessions_v3 RENAME TO sessions;
     CREATE TABLE tool_calls_v3 (
         id INTEGER PRIMARY KEY,
         session_id TEXT NOT NULL,
         turn INTEGER NOT NULL DEFAULT 0,
         tool_use_id TEXT NOT NULL,
         attempt INTEGER NOT NULL DEFAULT 1,
         tool_name TEXT NOT NULL,
         request_input TEXT,
         final_input TEXT,
         requested_ms INTEGER,
         intent_ms INTEGER,
         decision TEXT,
         decided_by TEXT,
         source TEXT,
         reason TEXT,
         outcome TEXT,
         is_error INTEGER,
         output_preview TEXT,
         finished_ms INTEGER,
         duration_ms INTEGER,
         instance INTEGER NOT NULL DEFAULT 0,
         UNIQUE (instance, session_id, turn, tool_use_id, attempt)
     );
     INSERT INTO tool_calls_v3 (id, session_id, turn, tool_use_id, attempt, tool_name,
                                request_input, final_input, requested_ms, intent_ms, decision,
                                decided_by, source, reason, outcome, is_error, output_preview,
                                finished_ms, duration_ms, instance)
         SELECT id, session_id, turn, tool_use_id, attempt, tool_name, request_input,
                final_input, requested_ms, intent_ms, decision, decided_by, source, reason,
                outcome, is_error, output_preview, finished_ms, duration_ms, 0
         FROM tool_calls;
     DROP TABLE tool_calls;
     ALTER TABLE tool_calls_v3 RENAME TO tool_calls;
     CREATE INDEX tool_calls_session ON tool_calls (session_id);
     ALTER TABLE permission_decisions ADD COLUMN instance INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE hook_failures ADD COLUMN instance INTEGER NOT NULL DEFAULT 0;",
];

/// One connection to an audit log file.
pub(crate) struct SqliteStore {
    conn: Connection,
    /// The time limit of reader queries, in ms, once armed.
    limit_ms: u128,
    /// Set by the progress handler when it stopped a query.
    fired: Arc<AtomicBool>,
}

impl SqliteStore {
    /// Opens (creating it 0600 if missing) the log at `path` for writing: WAL, and the
    /// `synchronous` level of `mode`. The schema is not touched yet.
    pub(crate) fn open_write(path: &Path, mode: AuditMode) -> Result<Self, StoreError> {
        let sql = |e: rusqlite::Error| StoreError::Sql(e.to_string());
        create_private(path).map_err(|e| StoreError::Sql(e.to_string()))?;
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        use_wal(&conn)?;
        let sync = match mode {
            AuditMode::Durable => "FULL",
            AuditMode::BestEffort => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync).map_err(sql)?;
        Ok(Self::new(conn))
    }

    /// Opens the existing log at `path` read-only.
    pub(crate) fn open_read(path: &Path) -> Result<Self, StoreError> {
        if !path.exists() {
            return Err(StoreError::Sql("no such file".into()));
        }
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| StoreError::Sql(e.to_string()))?;
        Ok(Self::new(conn))
    }

    fn new(conn: Connection) -> Self {
        Self {
            conn,
            limit_ms: 0,
            fired: Arc::default(),
        }
    }

    fn error(&self, e: rusqlite::Error) -> StoreError {
        if self.fired.load(Ordering::Relaxed) {
            StoreError::Stopped(self.limit_ms)
        } else {
            StoreError::Sql(e.to_string())
        }
    }
}

/// How long a writer waits for another's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Puts the file in WAL mode. Switching a new file's journal needs it to itself, and SQLite
/// answers "locked" without waiting while another opener holds it, so this retries until the
/// busy timeout.
fn use_wal(conn: &Connection) -> Result<(), StoreError> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => return Ok(()),
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(StoreError::Sql(format!("cannot use it as a database: {e}"))),
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

/// `sql` with PostgreSQL's `$n` parameters written as SQLite's `?n`.
fn placeholders(sql: &str) -> Cow<'_, str> {
    if !sql.contains('$') {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

impl rusqlite::ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Param::Int(Some(v)) => ToSqlOutput::from(*v),
            Param::Text(Some(v)) => ToSqlOutput::from(v.as_str()),
            Param::Int(None) | Param::Text(None) => ToSqlOutput::from(rusqlite::types::Null),
        })
    }
}

fn value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Real(_) => Value::Other("real".into()),
        ValueRef::Blob(_) => Value::Other("blob".into()),
    }
}

impl AuditStore for SqliteStore {
    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.conn.execute_batch(sql).map_err(|e| self.error(e))
    }

    fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&placeholders(sql))
            .map_err(|e| self.error(e))?;
        let n = stmt
            .execute(rusqlite::params_from_iter(params))
            .map_err(|e| self.error(e))?;
        Ok(n as u64)
    }

    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&placeholders(sql))
            .map_err(|e| self.error(e))?;
        let columns = stmt.column_count();
        let rows = stmt
            .query_map(rusqlite::params_from_iter(params), |r| {
                (0..columns)
                    .map(|i| r.get_ref(i).map(value))
                    .collect::<rusqlite::Result<Row>>()
            })
            .map_err(|e| self.error(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.error(e))
    }

    fn begin_write(&mut self) -> Result<(), StoreError> {
        self.batch("BEGIN IMMEDIATE")
    }

    fn begin_migration(&mut self) -> Result<(), StoreError> {
        self.batch("BEGIN IMMEDIATE")
    }

    fn object_type(&mut self, name: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row(
                "SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE LIMIT 1",
                [name],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.error(e))
    }

    fn columns(&mut self, table: &str) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("PRAGMA table_info(\"{table}\")"))
            .map_err(|e| self.error(e))?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(1))
            .map_err(|e| self.error(e))?;
        names.collect::<Result<_, _>>().map_err(|e| self.error(e))
    }

    fn occupied(&mut self) -> Result<bool, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| self.error(e))?;
        Ok(n > 0)
    }

    fn other_database(&self) -> &'static str {
        "the file is an SQLite database but not a hookbus audit log"
    }

    fn version(&mut self) -> Result<i64, StoreError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.error(e))
    }

    fn set_version(&mut self, version: i64) -> Result<(), StoreError> {
        self.conn
            .pragma_update(None, "user_version", version)
            .map_err(|e| self.error(e))
    }

    fn migrations(&self) -> &'static [&'static str] {
        MIGRATIONS
    }

    fn byte_order(&self) -> &'static str {
        "COLLATE BINARY"
    }

    fn limit_queries(&mut self, limit: Duration) -> Result<(), StoreError> {
        let deadline = Instant::now()
            .checked_add(limit)
            .unwrap_or_else(|| Instant::now() + crate::model::bounds::MAX_TIMEOUT);
        self.limit_ms = limit.as_millis();
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
            .map_err(|e| StoreError::Sql(e.to_string()))
    }

    fn integrity_ok(&mut self) -> Result<bool, StoreError> {
        let r: String = self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| self.error(e))?;
        Ok(r == "ok")
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema::{self, SchemaError, VERSION};
    use super::*;

    /// A version-1 log, as the first release wrote it, with one call.
    fn v1() -> SqliteStore {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch(
            "INSERT INTO tool_calls (session_id, tool_use_id, tool_name, request_input, outcome)
             VALUES ('s', 't1', 'bash', '{}', 'ok');
             INSERT INTO sessions (id, started_ms) VALUES ('s', 1);
             PRAGMA user_version = 1;",
        )
        .unwrap();
        SqliteStore::new(conn)
    }

    #[test]
    fn version_1_is_read_as_it_is_and_migrates_to_rows_per_attempt_and_instance() {
        let mut store = v1();
        assert_eq!(schema::check(&mut store), Ok(1));
        schema::migrate(&mut store, 7).unwrap();
        assert_eq!(schema::check(&mut store), Ok(VERSION));
        let rows = store
            .query(
                "SELECT turn, attempt, outcome, instance FROM tool_calls WHERE tool_use_id = 't1'",
                &[],
            )
            .unwrap();
        assert_eq!(
            rows,
            vec![vec![
                Value::Int(0),
                Value::Int(1),
                Value::Text("ok".into()),
                Value::Int(0)
            ]]
        );
        // The same id again in the same turn is another attempt, not a conflict; the same
        // call of another instance is another row.
        for (attempt, instance) in [(2, 0), (1, 1)] {
            store
                .execute(
                    "INSERT INTO tool_calls (session_id, turn, tool_use_id, attempt, tool_name, instance)
                     VALUES ('s', 0, 't1', $1, 'bash', $2)",
                    &[Param::from(attempt as i64), Param::from(instance as i64)],
                )
                .unwrap();
        }
        // Versions applied before they were recorded have no time; version 2 and 3 were
        // applied now.
        let rows = store
            .query(
                "SELECT version, applied_ms FROM schema_migrations ORDER BY version",
                &[],
            )
            .unwrap();
        assert_eq!(
            rows,
            vec![
                vec![Value::Int(1), Value::Null],
                vec![Value::Int(2), Value::Int(7)],
                vec![Value::Int(3), Value::Int(7)]
            ]
        );
        // Migrating again changes nothing.
        schema::migrate(&mut store, 9).unwrap();
        assert_eq!(schema::check(&mut store), Ok(VERSION));
    }

    #[test]
    fn an_audit_name_that_is_not_a_table_is_refused_before_any_query() {
        let mut store = v1();
        store
            .batch(
                "DROP TABLE sessions;
                 CREATE VIEW sessions AS
                     WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)
                     SELECT n AS id FROM r;",
            )
            .unwrap();
        let err = schema::check(&mut store).unwrap_err();
        assert_eq!(
            err,
            StoreError::Schema(SchemaError::NotATable {
                name: "sessions".into(),
                kind: "view".into()
            })
        );
        assert!(err.to_string().contains("`sessions` is a view"), "{err}");
        assert!(matches!(
            schema::migrate(&mut store, 0),
            Err(StoreError::Schema(SchemaError::NotATable { .. }))
        ));
        // A missing column is named.
        let mut store = v1();
        store
            .batch("ALTER TABLE tool_calls DROP COLUMN outcome;")
            .unwrap();
        assert!(matches!(
            schema::check(&mut store),
            Err(StoreError::Schema(SchemaError::MissingColumn { ref column, .. })) if column == "outcome"
        ));
    }

    #[test]
    fn parameters_are_numbered_as_in_postgres() {
        assert_eq!(
            placeholders("SELECT $1, $12 WHERE a = $1 AND b = '$'"),
            "SELECT ?1, ?12 WHERE a = ?1 AND b = '$'"
        );
        assert!(matches!(placeholders("SELECT 1"), Cow::Borrowed(_)));
    }
}
