//! The actor runtime: the [`Bus`] façade over the runtime core, the registry actor that
//! publishes immutable snapshots, each session and its dispatcher (parallel join,
//! sequential chain, session close, fold), the hook and observer actors, user mailboxes, the
//! event log and the metrics.
//!
//! This layer knows events, hooks and outcomes (`model`), and nothing of permissions, tools,
//! models or Claude Code: those are built on top of it.

pub(crate) mod actor;
pub(crate) mod bus;
pub(crate) mod channel;
pub(crate) mod core;
pub(crate) mod dispatch;
pub(crate) mod event_log;
pub(crate) mod execution;
pub(crate) mod hook_actor;
pub(crate) mod kill;
pub(crate) mod latch;
pub(crate) mod mailbox;
pub(crate) mod metrics;
pub(crate) mod observer;
pub(crate) mod registry;
pub(crate) mod session;
pub(crate) mod session_state;
pub(crate) mod snapshot;
pub(crate) mod stripe;
pub(crate) mod subscription;

pub use bus::{
    Bus, BusBuilder, ShutdownReport, DEFAULT_HOOK_MAILBOX, DEFAULT_HOOK_TIMEOUT,
    DEFAULT_SESSION_END_GRACE,
};
pub use event_log::{EventStream, HistoryStats, HookRunStream, HookRuns, DEFAULT_STREAM_BUFFER};
pub use mailbox::{Delivery, Mailbox, ReplySlot};
pub use metrics::{ActorPanics, LatencyStats, MetricsReport, MetricsSnapshot};
pub use observer::{Observer, ObserverOptions, DEFAULT_ENQUEUE_WAIT, DEFAULT_OBSERVER_MAILBOX};
pub use session::{BusSession, BusSessionConfig};
pub use subscription::Subscription;
