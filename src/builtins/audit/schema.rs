//! The audit schema, the same on every backend: its tables and columns by version, telling an
//! audit log from any other database, and migrating one to [`VERSION`].
//!
//! Each backend keeps its own migrations (SQLite and PostgreSQL spell types and table rebuilds
//! differently), one per version, so that version `n` means the same tables and columns on
//! both. Both record the versions applied in `schema_migrations` (from version 3); SQLite also
//! keeps the version in `PRAGMA user_version`, which files from before version 3 have alone.

use super::store::{AuditStore, Param, StoreError, Value};

/// Marks a database as a hookbus audit log.
pub(crate) const FORMAT: &str = "hookbus-audit";

/// The schema version this build writes.
pub(crate) const VERSION: i64 = 3;

/// Columns of a table, each with the version it appeared in.
pub(crate) type Columns = &'static [(&'static str, i64)];

/// The tables of an audit log, from the version given; each must be a table (a view or
/// anything else of the same name could make a query run forever), with these columns from the
/// version given.
pub(crate) const TABLES: &[(&str, i64, Columns)] = &[
    ("hookbus_audit", 1, &[("key", 1), ("value", 1)]),
    (
        "sessions",
        1,
        &[
            ("id", 1),
            ("parent_id", 1),
            ("cwd", 1),
            ("started_ms", 1),
            ("ended_ms", 1),
            ("end_reason", 1),
            ("instance", 3),
        ],
    ),
    (
        "tool_calls",
        1,
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
            ("instance", 3),
        ],
    ),
    (
        "permission_decisions",
        1,
        &[("id", 1), ("call_id", 2), ("instance", 3)],
    ),
    ("hook_failures", 1, &[("id", 1), ("instance", 3)]),
    ("schema_migrations", 3, &[("version", 3), ("applied_ms", 3)]),
    (
        "instances",
        3,
        &[
            ("id", 3),
            ("pid", 3),
            ("host", 3),
            ("mode", 3),
            ("started_ms", 3),
            ("ended_ms", 3),
        ],
    ),
];

/// Why a database is not an audit log this build can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SchemaError {
    #[error("not a hookbus audit log")]
    NotAnAuditLog,
    /// The backend's description of a database that holds something else.
    #[error("{0}")]
    OtherDatabase(&'static str),
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
    #[error("not a valid hookbus audit log: schema version {version} has no table `{table}`")]
    MissingTable { table: String, version: i64 },
    #[error("not a valid hookbus audit log: schema version {0}")]
    BadVersion(i64),
    #[error("migration to version {version}: {message}")]
    Migration { version: i64, message: String },
}

/// Checks that every audit object present is a table; returns how many are present.
fn check_types(store: &mut dyn AuditStore) -> Result<usize, StoreError> {
    let mut present = 0;
    for (name, _, _) in TABLES {
        match store.object_type(name)? {
            Some(kind) if kind == "table" => present += 1,
            Some(kind) => {
                return Err(SchemaError::NotATable {
                    name: (*name).to_owned(),
                    kind,
                }
                .into())
            }
            None => {}
        }
    }
    Ok(present)
}

/// Whether the (checked) `hookbus_audit` table says this is an audit log.
fn marked(store: &mut dyn AuditStore) -> Result<bool, StoreError> {
    let rows = store.query("SELECT value FROM hookbus_audit WHERE key = 'format'", &[])?;
    Ok(rows
        .first()
        .and_then(|r| r.first())
        .is_some_and(|v| *v == Value::Text(FORMAT.to_owned())))
}

/// Checks that every table of `version` is there with its columns.
fn check_tables(store: &mut dyn AuditStore, version: i64) -> Result<(), StoreError> {
    for (table, since, columns) in TABLES {
        if *since > version {
            continue;
        }
        if store.object_type(table)?.is_none() {
            return Err(SchemaError::MissingTable {
                table: (*table).to_owned(),
                version,
            }
            .into());
        }
        let have = store.columns(table)?;
        for (column, since) in *columns {
            if *since <= version && !have.iter().any(|h| h.eq_ignore_ascii_case(column)) {
                return Err(SchemaError::MissingColumn {
                    table: (*table).to_owned(),
                    column: (*column).to_owned(),
                    version,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// Checks an audit log that has a version: tables, marker, version known, columns. Types are
/// checked first, so nothing is queried through a view or anything else of an audit name.
fn check_existing(store: &mut dyn AuditStore, version: i64) -> Result<(), StoreError> {
    if store.object_type("hookbus_audit")?.is_none() || !marked(store)? {
        return Err(SchemaError::NotAnAuditLog.into());
    }
    if version > VERSION {
        return Err(SchemaError::Newer(version).into());
    }
    if version < 1 {
        return Err(SchemaError::BadVersion(version).into());
    }
    check_tables(store, version)
}

/// Brings a database opened for writing to [`VERSION`], in one transaction serialized with
/// any other process doing the same ([`AuditStore::begin_migration`]): creates the schema in a
/// database without one, applies the missing migrations, refuses anything else. Opening an
/// up-to-date log changes nothing.
pub(crate) fn migrate(store: &mut dyn AuditStore, now_ms: u64) -> Result<(), StoreError> {
    store.begin_migration()?;
    match migrate_locked(store, now_ms) {
        Ok(()) => store.batch("COMMIT"),
        Err(e) => {
            let _ = store.batch("ROLLBACK");
            Err(e)
        }
    }
}

fn migrate_locked(store: &mut dyn AuditStore, now_ms: u64) -> Result<(), StoreError> {
    let present = check_types(store)?;
    let version = store.version()?;
    if version == 0 {
        if present > 0 || store.occupied()? {
            return Err(SchemaError::OtherDatabase(store.other_database()).into());
        }
    } else {
        check_existing(store, version).map_err(|e| match e {
            StoreError::Schema(SchemaError::NotAnAuditLog) => {
                SchemaError::OtherDatabase(store.other_database()).into()
            }
            other => other,
        })?;
    }
    if version == VERSION {
        return Ok(());
    }
    let migrations = store.migrations();
    for (i, sql) in migrations.iter().enumerate().skip(version as usize) {
        store.batch(sql).map_err(|e| SchemaError::Migration {
            version: i as i64 + 1,
            message: e.to_string(),
        })?;
    }
    // Versions applied before they were recorded have no time.
    for v in 1..=VERSION {
        let applied = if v > version {
            Param::from(now_ms)
        } else {
            Param::Int(None)
        };
        store.execute(
            "INSERT INTO schema_migrations (version, applied_ms) VALUES ($1, $2)
             ON CONFLICT (version) DO NOTHING",
            &[Param::from(v), applied],
        )?;
    }
    store.set_version(VERSION)
}

/// Checks that a database opened for reading is an audit log this build can read, before any
/// query touches its tables: every audit object present is a table, the version is known, the
/// marker is there, the tables and columns of that version exist. Returns the version.
pub(crate) fn check(store: &mut dyn AuditStore) -> Result<i64, StoreError> {
    if check_types(store)? == 0 {
        return Err(SchemaError::NotAnAuditLog.into());
    }
    let version = store.version()?;
    check_existing(store, version)?;
    Ok(version)
}
