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
];

/// The schema version this build writes.
pub(crate) const VERSION: i64 = MIGRATIONS.len() as i64;

fn is_audit_log(conn: &Connection) -> rusqlite::Result<bool> {
    let has_table: bool = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'hookbus_audit'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)?;
    if !has_table {
        return Ok(false);
    }
    let format: Option<String> = conn
        .query_row(
            "SELECT value FROM hookbus_audit WHERE key = 'format'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(format.as_deref() == Some(FORMAT))
}

/// Brings a database opened for writing to [`VERSION`]: creates the schema in an empty one,
/// applies the missing migrations in one transaction; refuses anything else.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), String> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if version == 0 && tables > 0 {
        return Err("the file is an SQLite database but not a hookbus audit log".into());
    }
    if version > 0 && !is_audit_log(conn).map_err(|e| e.to_string())? {
        return Err("the file is an SQLite database but not a hookbus audit log".into());
    }
    if version > VERSION {
        return Err(format!(
            "schema version {version} was written by a newer hookbus (this one knows {VERSION})"
        ));
    }
    let tx = conn.transaction().map_err(|e| e.to_string())?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql)
            .map_err(|e| format!("migration to version {}: {e}", i + 1))?;
    }
    tx.pragma_update(None, "user_version", VERSION)
        .map_err(|e| e.to_string())?;
    tx.commit().map_err(|e| e.to_string())
}

/// Checks that a database opened for reading is an audit log this build can read.
pub(crate) fn check(conn: &Connection) -> Result<(), String> {
    let ok = is_audit_log(conn).map_err(|e| e.to_string())?;
    if !ok {
        return Err("not a hookbus audit log".into());
    }
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if version > VERSION {
        return Err(format!(
            "schema version {version} was written by a newer hookbus (this one knows {VERSION})"
        ));
    }
    Ok(())
}
