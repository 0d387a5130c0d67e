//! Built-in hooks.
//!
//! * [`LoggingHook`]: stateless, logs every event (seed 000).
//! * [`TimingHook`]: pairs `PreToolUse` and `PostToolUse` by tool-use id, under concurrent calls
//!   (seed 000), into latency histograms of bounded size.
//! * [`MetricsHook`]: counts and latency percentiles per event, hook and tool, shared with the
//!   runtime's own figures.
//! * [`ContextDeduplicator`]: drops repeated contexts within one `<system-reminder>`.
//! * [`AuditLog`]: a durable audit log of sessions, tool calls, permission decisions and hook
//!   failures, in SQLite or (feature `postgres`) PostgreSQL; [`AuditDb`] reads it.

#[cfg(feature = "audit")]
mod audit;

mod logging;
mod metrics;
mod timing;

#[cfg(feature = "audit")]
pub use audit::{
    AuditBackend, AuditDb, AuditLog, AuditMode, AuditReport, CallRecord, SessionRecord,
    DEFAULT_QUERY_LIMIT,
};

/// The audit log under the name seed 002 gives it.
#[cfg(feature = "audit")]
pub type AuditLogHook = AuditLog;
pub use crate::agent::dedup::ContextDeduplicator;
pub use logging::{LogSink, LoggingHook};
pub use metrics::MetricsHook;
pub use timing::{
    TimingHook, TimingStats, ToolTiming, DEFAULT_MAX_OPEN_TIMERS, DEFAULT_MAX_TOOLS,
    DEFAULT_RECENT, OTHER_TOOLS,
};
