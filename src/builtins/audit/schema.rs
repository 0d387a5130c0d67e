//! The audit database: schema, versions and migrations, and telling an audit log from any other
//! file.

use rusqlite::{Connection, OptionalExtension};

/// Marks a database as a hookbus audit log.
pub(crate) const FORMAT: &str = "hookbus-audit";

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
];

/// The schema version this build writes.
pub(crate) const VERSION: i64 = MIGRATIONS.len() as i64;

/// The tables of an audit log; each must be a table (a view or anything else of the same name
/// could make a query run forever), with these columns from the version given.
const TABLES: &[(&str, &[(&str, i64)])] = &[
    ("hookbus_audit", &[("key", 1), ("value", 1)]),
    (
        "sessions",
        &[
            ("id", 1),
            ("parent_id", 1),
            ("cwd", 1),
            ("started_ms", 1),
            ("ended_ms", 1),
            ("end_reason", 1),
        ],
    ),
    (
        "tool_calls",
        &[
            ("id", 1),
            ("session_id", 1),
            ("turn", 2),
            ("tool_use_id", 1),
            ("attempt", 2),
            ("tool_name", 1),
            ("request_input", 1),
            ("final_input", 1),
            ("requested_ms", 1),
            ("intent_ms", 1),
            ("decision", 1),
            ("decided_by", 1),
            ("source", 1),
            ("reason", 1),
            ("outcome", 1),
            ("is_error", 1),
            ("output_preview", 1),
            ("finished_ms", 1),
            ("duration_ms", 1),
        ],
    ),
    ("permission_decisions", &[("id", 1), ("call_id", 2)]),
    ("hook_failures", &[("id", 1)]),
];

/// Why a file is not an audit log this build can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SchemaError {
    #[error("not a hookbus audit log")]
    NotAnAuditLog,
    #[error("the file is an SQLite database but not a hookbus audit log")]
    OtherDatabase,
    #[error("schema version {0} was written by a newer hookbus (this one knows {VERSION})")]
    Newer(i64),
    #[error("not a valid hookbus audit log: `{name}` is a {kind}, not a table")]
    NotATable { name: String, kind: String },
    #[error("not a valid hookbus audit log: table `{table}` has no column `{column}` (schema version {version})")]
    MissingColumn {
        table: String,
        column: String,
        version: i64,
    },
    #[error("not a valid hookbus audit log: schema version {0}")]
    BadVersion(i64),
    #[error("{0}")]
    Sqlite(String),
}

impl From<rusqlite::Error> for SchemaError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e.to_string())
    }
}

/// The type (`table`, `view`, `index`, `trigger`) of the schema object named `name` (names are
/// case-insensitive in SQLite), if any.
fn object_type(conn: &Connection, name: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE LIMIT 1",
        [name],
        |r| r.get(0),
    )
    .optional()
}

/// Checks, from `sqlite_master` alone, that each audit object present is a table; `all`
/// requires every one to be there.
fn check_types(conn: &Connection, all: bool) -> Result<bool, SchemaError> {
    let mut present = 0;
    for (name, _) in TABLES {
        match object_type(conn, name)? {
            Some(kind) if kind == "table" => present += 1,
            Some(kind) => {
                return Err(SchemaError::NotATable {
                    name: (*name).to_owned(),
                    kind,
                })
            }
            None if all => return Err(SchemaError::NotAnAuditLog),
            None => {}
        }
    }
    Ok(present > 0)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Whether the (checked) `hookbus_audit` table says this is an audit log.
fn marked(conn: &Connection) -> rusqlite::Result<bool> {
    let format: Option<String> = conn
        .query_row(
            "SELECT value FROM hookbus_audit WHERE key = 'format'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(format.as_deref() == Some(FORMAT))
}

/// Checks that every table has the columns of `version`.
fn check_columns(conn: &Connection, version: i64) -> Result<(), SchemaError> {
    for (table, columns) in TABLES {
        let mut stmt = conn.prepare(&format!("PRAGMA table_info(\"{table}\")"))?;
        let have: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(1))?
            .collect::<Result<_, _>>()?;
        for (column, since) in *columns {
            if *since <= version && !have.iter().any(|h| h.eq_ignore_ascii_case(column)) {
                return Err(SchemaError::MissingColumn {
                    table: (*table).to_owned(),
                    column: (*column).to_owned(),
                    version,
                });
            }
        }
    }
    Ok(())
}

/// Brings a database opened for writing to [`VERSION`]: creates the schema in an empty one,
/// applies the missing migrations in one transaction; refuses anything else.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), SchemaError> {
    let version = user_version(conn)?;
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
    if version == 0 && tables > 0 {
        return Err(SchemaError::OtherDatabase);
    }
    if version > 0 {
        // Types first: nothing is queried through a view or anything else of an audit name.
        check_types(conn, true).map_err(|e| match e {
            SchemaError::NotAnAuditLog => SchemaError::OtherDatabase,
            other => other,
        })?;
        if !marked(conn)? {
            return Err(SchemaError::OtherDatabase);
        }
        if version > VERSION {
            return Err(SchemaError::Newer(version));
        }
        check_columns(conn, version)?;
    }
    let tx = conn.transaction()?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql)
            .map_err(|e| SchemaError::Sqlite(format!("migration to version {}: {e}", i + 1)))?;
    }
    tx.pragma_update(None, "user_version", VERSION)?;
    tx.commit()?;
    Ok(())
}

/// Checks that a database opened for reading is an audit log this build can read, before any
/// query touches its tables: every audit object is a table, the version is known, the marker
/// is there, the columns of that version exist. Returns the version.
pub(crate) fn check(conn: &Connection) -> Result<i64, SchemaError> {
    if !check_types(conn, false)? {
        return Err(SchemaError::NotAnAuditLog);
    }
    check_types(conn, true)?;
    let version = user_version(conn)?;
    if version > VERSION {
        return Err(SchemaError::Newer(version));
    }
    if version < 1 {
        return Err(SchemaError::BadVersion(version));
    }
    if !marked(conn)? {
        return Err(SchemaError::NotAnAuditLog);
    }
    check_columns(conn, version)?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-1 log, as the first release wrote it, with one call.
    fn v1() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch(
            "INSERT INTO tool_calls (session_id, tool_use_id, tool_name, request_input, outcome)
             VALUES ('s', 't1', 'bash', '{}', 'ok');
             PRAGMA user_version = 1;",
        )
        .unwrap();
        conn
    }

    #[test]
    fn version_1_is_read_as_it_is_and_migrates_to_rows_per_attempt() {
        let mut conn = v1();
        assert_eq!(check(&conn), Ok(1));
        migrate(&mut conn).unwrap();
        assert_eq!(check(&conn), Ok(VERSION));
        let (turn, attempt, outcome): (i64, i64, String) = conn
            .query_row(
                "SELECT turn, attempt, outcome FROM tool_calls WHERE tool_use_id = 't1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((turn, attempt, outcome.as_str()), (0, 1, "ok"));
        // The same id again in the same turn is another attempt, not a conflict.
        conn.execute(
            "INSERT INTO tool_calls (session_id, turn, tool_use_id, attempt, tool_name)
             VALUES ('s', 0, 't1', 2, 'bash')",
            [],
        )
        .unwrap();
    }

    #[test]
    fn an_audit_name_that_is_not_a_table_is_refused_before_any_query() {
        let mut conn = v1();
        conn.execute_batch(
            "DROP TABLE sessions;
             CREATE VIEW sessions AS
                 WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)
                 SELECT n AS id FROM r;",
        )
        .unwrap();
        let err = check(&conn).unwrap_err();
        assert_eq!(
            err,
            SchemaError::NotATable {
                name: "sessions".into(),
                kind: "view".into()
            }
        );
        assert!(err.to_string().contains("`sessions` is a view"), "{err}");
        assert!(matches!(
            migrate(&mut conn),
            Err(SchemaError::NotATable { .. })
        ));
        // A missing column is named.
        let conn = v1();
        conn.execute_batch("ALTER TABLE tool_calls DROP COLUMN outcome;")
            .unwrap();
        assert!(
            matches!(check(&conn), Err(SchemaError::MissingColumn { ref column, .. }) if column == "outcome")
        );
    }
}
