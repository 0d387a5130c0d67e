//! What a backend of the audit log provides ([`AuditStore`]), the values that cross it, which
//! backend a target string names ([`Target`]), and the errors of a store ([`StoreError`]).
//!
//! The audit operations — migrating, writing a batch of records, the reader's queries — are
//! written once, as SQL both backends run ([`crate::builtins::audit`]'s `schema`, `writer` and
//! `read` modules); a backend answers only what differs: how to reach the database, its
//! catalog, where the schema version is kept, how migrations are serialized between processes,
//! how durable a commit is, and how a query is stopped past its time limit.

use std::path::PathBuf;
use std::time::Duration;

use super::schema::SchemaError;

/// A statement parameter, typed so that PostgreSQL receives a NULL of the column's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Param {
    /// An integer (`INTEGER` in SQLite, `BIGINT` in PostgreSQL), or NULL.
    Int(Option<i64>),
    /// A text, or NULL.
    Text(Option<String>),
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Self::Int(Some(v))
    }
}

impl From<u64> for Param {
    fn from(v: u64) -> Self {
        Self::Int(Some(i64::try_from(v).unwrap_or(i64::MAX)))
    }
}

impl From<u32> for Param {
    fn from(v: u32) -> Self {
        Self::Int(Some(i64::from(v)))
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Self::Text(Some(v.to_owned()))
    }
}

impl From<&String> for Param {
    fn from(v: &String) -> Self {
        Self::Text(Some(v.clone()))
    }
}

impl From<Option<&String>> for Param {
    fn from(v: Option<&String>) -> Self {
        Self::Text(v.cloned())
    }
}

/// One value of a result row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// NULL.
    Null,
    /// An integer.
    Int(i64),
    /// A text.
    Text(String),
    /// Anything else (a real or a blob in SQLite, another type in PostgreSQL), by its name.
    Other(String),
}

/// A result row.
pub(crate) type Row = Vec<Value>;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StoreError {
    /// The database is not an audit log this build can use.
    #[error("{0}")]
    Schema(#[from] SchemaError),
    /// A statement failed.
    #[error("{0}")]
    Sql(String),
    /// A query was stopped by its time limit.
    #[error("a query ran longer than {0} ms and was stopped; the log may be damaged or crafted")]
    Stopped(u128),
    /// The database could not be reached.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    #[error("cannot connect: {0}")]
    Connect(String),
    /// A result row is not what the query selects.
    #[error("column {column} of the result is {found}, not {expected}")]
    Column {
        /// The column's position.
        column: usize,
        /// What it holds.
        found: String,
        /// What it must hold.
        expected: &'static str,
    },
    /// A PostgreSQL URL was given where a SQLite path is taken.
    #[error("this is a PostgreSQL URL, not a SQLite file: open it with `connect`")]
    UrlAsPath,
    /// A PostgreSQL URL was given to a build without the `postgres` feature.
    #[cfg_attr(feature = "postgres", allow(dead_code))]
    #[error(
        "this is a PostgreSQL URL, and this hookbus was built without PostgreSQL support \
         (cargo feature `postgres`)"
    )]
    NoPostgres,
}

/// A backend of the audit log: one connection to one database. The writer thread owns one
/// (opened for writing: the schema migrated, durable commits in durable mode); an
/// [`AuditDb`](super::AuditDb) owns another (read-only, each query time-limited).
///
/// SQL given to it uses `$1`, `$2`, … for parameters, and `IS NOT DISTINCT FROM`, `NULLS
/// FIRST`, `RETURNING` and `ON CONFLICT … DO UPDATE`, which both backends run alike.
pub(crate) trait AuditStore: Send {
    /// Runs statements that take no parameters and return no rows (DDL, `COMMIT`).
    fn batch(&mut self, sql: &str) -> Result<(), StoreError>;
    /// Runs one statement; returns the rows it changed.
    fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, StoreError>;
    /// Runs one query; returns its rows.
    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError>;

    /// Starts the transaction of a write batch, holding the write lock for all of it (SQLite:
    /// `BEGIN IMMEDIATE`, so two writers of one file wait for each other instead of failing).
    fn begin_write(&mut self) -> Result<(), StoreError>;
    /// Starts the migration transaction, serialized with every other process migrating the
    /// same database (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: an advisory lock held until the
    /// transaction ends).
    fn begin_migration(&mut self) -> Result<(), StoreError>;
    /// Before a write batch: reconnects a connection that was lost (PostgreSQL), so a server
    /// restart costs the batches written while it was down, not every later one.
    fn ensure_connected(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The kind (`table`, `view`, `index`, …) of the schema object `name` resolves to, if any.
    fn object_type(&mut self, name: &str) -> Result<Option<String>, StoreError>;
    /// The columns of `table`.
    fn columns(&mut self, table: &str) -> Result<Vec<String>, StoreError>;
    /// Whether, with no audit schema yet, the database holds something that forbids creating
    /// one (SQLite: anything at all; PostgreSQL: an object named like an audit table).
    fn occupied(&mut self) -> Result<bool, StoreError>;
    /// What to say about a database that is not an audit log.
    fn other_database(&self) -> &'static str;
    /// The schema version written (0: none yet). Only called once every audit table present
    /// was checked to be a table.
    fn version(&mut self) -> Result<i64, StoreError>;
    /// Records `version` where [`version`](Self::version) reads it, inside the migration.
    fn set_version(&mut self, version: i64) -> Result<(), StoreError>;
    /// The migrations of this backend: version `n` is reached by applying the first `n`.
    fn migrations(&self) -> &'static [&'static str];

    /// The collation that orders texts by their bytes, as SQLite does by default.
    fn byte_order(&self) -> &'static str;
    /// Stops each query from now on after `limit`; an error past it is
    /// [`StoreError::Stopped`].
    fn limit_queries(&mut self, limit: Duration) -> Result<(), StoreError>;
    /// Whether the stored data is intact (SQLite: `PRAGMA integrity_check`; PostgreSQL, which
    /// keeps its own consistency: every audit table can be read through).
    fn integrity_ok(&mut self) -> Result<bool, StoreError>;
    /// Marks `instance` as alive for as long as this store is open (PostgreSQL: a session
    /// advisory lock, taken again on reconnecting, released by the server when the process
    /// dies). SQLite, one machine's file, keeps no such mark.
    fn hold_instance(&mut self, _instance: i64) -> Result<(), StoreError> {
        Ok(())
    }
    /// A condition on `tool_calls` that is true when the call's instance is not alive (see
    /// [`hold_instance`](Self::hold_instance)); `None` when the backend cannot tell.
    fn instance_gone(&self) -> Option<&'static str> {
        None
    }
}

/// Which backend a target string names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL URL.
    Postgres(String),
}

impl Target {
    /// A `postgres://` or `postgresql://` URL names PostgreSQL; anything else is a SQLite path.
    pub(crate) fn parse(target: &str) -> Self {
        let lower = target.get(..13).unwrap_or(target).to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Self::Postgres(target.to_owned())
        } else {
            Self::Sqlite(PathBuf::from(target))
        }
    }
}

/// `url` with the password of its user part and any `password=` parameter replaced by `***`.
/// The user part ends at the last `@`, so a password holding `/`, `?` or `@` is hidden whole.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (user, tail) = match rest.rsplit_once('@') {
        Some((user, tail)) => (Some(user), tail),
        None => (None, rest),
    };
    let user = match user {
        Some(user) => match user.split_once(':') {
            Some((name, _)) if !name.contains(['/', '?']) => format!("{name}:***@"),
            None if !user.contains(['/', '?', '=']) => format!("{user}@"),
            _ => "***@".to_owned(),
        },
        None => String::new(),
    };
    let shown = format!("{scheme}://{user}{tail}");
    // A `password=` parameter, wherever it stands.
    let mut out = String::with_capacity(shown.len());
    let mut rest = shown.as_str();
    while let Some(at) = rest.to_ascii_lowercase().find("password=") {
        let value = at + "password=".len();
        out.push_str(&rest[..value]);
        out.push_str("***");
        rest = &rest[value..];
        rest = &rest[rest.find('&').unwrap_or(rest.len())..];
    }
    out.push_str(rest);
    out
}

/// An integer column of `row`, or NULL.
pub(crate) fn int(row: &Row, column: usize) -> Result<Option<i64>, StoreError> {
    match row.get(column) {
        Some(Value::Int(v)) => Ok(Some(*v)),
        Some(Value::Null) => Ok(None),
        other => Err(StoreError::Column {
            column,
            found: describe(other),
            expected: "an integer",
        }),
    }
}

/// A text column of `row`, or NULL.
pub(crate) fn text(row: &Row, column: usize) -> Result<Option<String>, StoreError> {
    match row.get(column) {
        Some(Value::Text(v)) => Ok(Some(v.clone())),
        Some(Value::Null) => Ok(None),
        other => Err(StoreError::Column {
            column,
            found: describe(other),
            expected: "a text",
        }),
    }
}

/// A column that must not be NULL.
pub(crate) fn required<T>(
    value: Result<Option<T>, StoreError>,
    column: usize,
    expected: &'static str,
) -> Result<T, StoreError> {
    value?.ok_or(StoreError::Column {
        column,
        found: "NULL".into(),
        expected,
    })
}

fn describe(value: Option<&Value>) -> String {
    match value {
        None => "missing".into(),
        Some(Value::Null) => "NULL".into(),
        Some(Value::Int(_)) => "an integer".into(),
        Some(Value::Text(_)) => "a text".into(),
        Some(Value::Other(kind)) => format!("a {kind}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_url_selects_postgres_and_anything_else_is_a_path() {
        for url in [
            "postgres://u@h/db",
            "postgresql://h/db",
            "POSTGRES://h",
            "PostgreSQL://u:p@h:5432/db?sslmode=disable",
        ] {
            assert_eq!(Target::parse(url), Target::Postgres(url.into()), "{url}");
        }
        for path in [
            "audit.sqlite",
            "/tmp/postgres://x",
            "postgres:/x",
            "pg.db",
            "",
        ] {
            assert_eq!(Target::parse(path), Target::Sqlite(path.into()), "{path}");
        }
    }

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            redact_url("postgres://alice:s3cr%40t@db.local:5432/audit?sslmode=disable"),
            "postgres://alice:***@db.local:5432/audit?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgresql://h/audit?user=bob&password=hunter2&connect_timeout=3"),
            "postgresql://h/audit?user=bob&password=***&connect_timeout=3"
        );
        assert_eq!(redact_url("postgres://bob@h"), "postgres://bob@h");
        assert_eq!(redact_url("postgres://h:1/d"), "postgres://h:1/d");
        // A password holding `@`, `/` or `?` is hidden whole.
        assert_eq!(redact_url("postgres://u:a@b@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact_url("postgres://u:a/b?c@h/db"),
            "postgres://u:***@h/db"
        );
        // So is a `password=` after an `@` in the parameters.
        assert!(!redact_url("postgres://h/db?user=a@b&password=x").contains("=x"));
    }
}
