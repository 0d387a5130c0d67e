//! The runtime handle ([`Bus`]): registration, subscriptions, sessions and shutdown.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc};
use tokio_util::task::TaskTracker;

use crate::model::bounds::{clamp_timeout, deadline_after, parse_timeout_secs};
use crate::model::error::ActorFailure;
use crate::model::error::Error;
use crate::model::event::EventKind;
use crate::model::hook::Hook;
use crate::runtime::actor::Supervisor;
use crate::runtime::core::{FailureListener, RuntimeConfig, RuntimeCore};
use crate::runtime::dispatch::Dispatcher;
use crate::runtime::execution::ExecutionGate;
use crate::runtime::kill::KillSwitch;
use crate::runtime::mailbox::Mailbox;
use crate::runtime::metrics::{MetricsReport, MetricsSnapshot, RuntimeMetrics};
use crate::runtime::observer::{Observer, ObserverActor, ObserverEntry};
use crate::runtime::registry::{Registry, RegistryMsg};
use crate::runtime::session::{BusSession, BusSessionConfig};
use crate::runtime::session_state::SessionShared;
use crate::runtime::snapshot::{Published, Snapshot};
use crate::runtime::subscription::Subscription;

/// Default hook timeout (SPEC FL-2), unless `HOOK_TIMEOUT_SECS` says otherwise.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// Default SessionEnd grace period (ORD-4).
pub const DEFAULT_SESSION_END_GRACE: Duration = Duration::from_secs(30);
/// Default mailbox capacity of a hook actor (and of a subscribed gate's mailbox).
///
/// A session dispatches one event at a time, so a hook's mailbox holds at most one awaited
/// delivery per session that dispatches to it, and each of those sessions waits for the answer:
/// the bound is a backstop, not a throttle. It is large so that a busy bus with many sessions
/// behind one actor does not send its deliveries down the slower wait-for-room path; deliveries
/// whose dispatch stopped waiting are dropped from a long queue (1,024 or more), so few of
/// them hold on to their events.
pub const DEFAULT_HOOK_MAILBOX: usize = 65_536;

/// Builds a [`Bus`].
#[derive(Debug, Clone, Default)]
pub struct BusBuilder {
    default_timeout: Option<Duration>,
    session_end_grace: Option<Duration>,
    sequential: Vec<EventKind>,
    hook_mailbox: Option<usize>,
    hook_shards: Option<usize>,
}

impl BusBuilder {
    /// The timeout of hooks that do not set their own. Without it: `HOOK_TIMEOUT_SECS` if set
    /// to a positive number of seconds, else 30 s. At most
    /// [`MAX_TIMEOUT`](crate::model::bounds::MAX_TIMEOUT) (24 h; longer is clamped).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = Some(clamp_timeout(timeout));
        self
    }
    /// The overall budget of a session's `SessionEnd` hooks (default 30 s, at most 24 h).
    pub fn session_end_grace(mut self, grace: Duration) -> Self {
        self.session_end_grace = Some(clamp_timeout(grace));
        self
    }
    /// Runs the hooks of `kind` one after another in fold order, each seeing the previous one's
    /// mutation, a Block ending the chain (ORD-2, ORD-3).
    pub fn sequential(mut self, kind: EventKind) -> Self {
        self.sequential.push(kind);
        self
    }
    /// Mailbox capacity of each hook actor and subscribed gate (default
    /// [`DEFAULT_HOOK_MAILBOX`]); past it, a dispatch waits for room within the hook's
    /// deadline.
    pub fn hook_mailbox(mut self, capacity: usize) -> Self {
        self.hook_mailbox = Some(capacity.max(1));
        self
    }

    /// Actors per global hook without a `max_concurrency` (default: four per worker of the
    /// runtime, at most 32; one on a current-thread runtime). Each serves the sessions whose id
    /// hashes to it, so each session's calls reach one actor, in order.
    pub fn hook_shards(mut self, shards: usize) -> Self {
        self.hook_shards = Some(shards.clamp(1, 64));
        self
    }

    /// Starts the runtime (spawns the registry actor). Must be called within a tokio runtime.
    pub fn build(self) -> Bus {
        let env_timeout = env_timeout();
        let mut sequential = [false; EventKind::COUNT];
        for kind in self.sequential {
            sequential[kind.index()] = true;
        }
        let config = RuntimeConfig {
            default_timeout: self
                .default_timeout
                .or(env_timeout)
                .unwrap_or(DEFAULT_HOOK_TIMEOUT),
            session_end_grace: self.session_end_grace.unwrap_or(DEFAULT_SESSION_END_GRACE),
            sequential,
            hook_mailbox: self.hook_mailbox.unwrap_or(DEFAULT_HOOK_MAILBOX),
            hook_shards: self.hook_shards.unwrap_or_else(default_hook_shards),
        };
        let published = Arc::new(Published::new(Snapshot::default()));
        let sessions = Arc::new(DashMap::new());
        let (registry_tx, registry_rx) = mpsc::channel(64);
        let tracker = TaskTracker::new();
        let kill = KillSwitch::default();
        let metrics = Arc::new(RuntimeMetrics::default());
        let supervisor = Supervisor::new(metrics.clone());
        let registry = Registry::new(published.clone(), sessions.clone(), registry_rx);
        crate::runtime::actor::spawn(&tracker, &supervisor, kill.watch(), registry);
        Bus {
            core: Arc::new(RuntimeCore {
                failure_listeners: parking_lot::RwLock::default(),
                execution_gates: parking_lot::RwLock::default(),
                config,
                published,
                registry_tx,
                sessions,
                metrics,
                tracker,
                kill,
                supervisor,
                shutting_down: AtomicBool::new(false),
                next_seq: AtomicU64::new(1),
                next_session: AtomicU64::new(1),
            }),
        }
    }
}

/// Four hook actors per worker of the current runtime, at most 32: with fewer sessions behind
/// each actor, more of a busy bus's calls run side by side and each mailbox is shorter (8
/// actors per hook on two workers made about 3% more pairs per second with 8 sessions and 7%
/// with 64 than 2 did).
fn default_hook_shards() -> usize {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            (rt.metrics().num_workers() * 4).clamp(1, 32)
        }
        _ => 1,
    }
}

/// `HOOK_TIMEOUT_SECS`, when set: a positive number of seconds; longer than
/// [`MAX_TIMEOUT`](crate::model::bounds::MAX_TIMEOUT) is clamped to it, anything else is ignored;
/// both with a warning.
fn env_timeout() -> Option<Duration> {
    let value = std::env::var("HOOK_TIMEOUT_SECS").ok()?;
    match parse_timeout_secs(&value) {
        Ok(timeout) => Some(timeout),
        Err(e) => match e.clamped() {
            Some(max) => {
                tracing::warn!("HOOK_TIMEOUT_SECS: {e}; using {} s", max.as_secs());
                Some(max)
            }
            None => {
                tracing::warn!(
                    "HOOK_TIMEOUT_SECS: {e}; ignored, the default {} s applies",
                    DEFAULT_HOOK_TIMEOUT.as_secs()
                );
                None
            }
        },
    }
}

/// What [`Bus::shutdown`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownReport {
    /// Sessions it closed (with `SessionEnd` reason `shutdown`).
    pub sessions_closed: usize,
    /// Events dispatched over the runtime's life.
    pub events_dispatched: u64,
    /// Events observers finished handling over the runtime's life.
    pub observer_events_delivered: u64,
    /// Events dropped for observers over the runtime's life.
    pub observer_events_dropped: u64,
    /// Failures (errors, panics, timeouts, dropped replies) per hook name.
    pub hook_failures: BTreeMap<String, u64>,
    /// Whether tasks had to be killed because the deadline passed.
    pub killed: bool,
    /// The runtime's counters at the end.
    pub metrics: MetricsSnapshot,
}

/// The runtime: a cloneable handle. Register hooks and observers, subscribe your own tasks, open
/// sessions, and shut it down.
#[derive(Clone)]
pub struct Bus {
    pub(crate) core: Arc<RuntimeCore>,
}

impl Bus {
    /// A builder.
    pub fn builder() -> BusBuilder {
        BusBuilder::default()
    }

    /// A runtime with default settings.
    pub fn new() -> Bus {
        BusBuilder::default().build()
    }

    /// Registers a hook for every session. It takes effect for events dispatched after this
    /// returns. Errors: duplicate name, unknown `after` name, dependency cycle.
    pub async fn register(&self, hook: impl Hook) -> Result<(), Error> {
        self.core.register_scoped(Arc::new(hook), None).await
    }

    /// Registers a shared hook for every session.
    pub async fn register_arc(&self, hook: Arc<dyn Hook>) -> Result<(), Error> {
        self.core.register_scoped(hook, None).await
    }

    /// Removes a global hook. Events already being dispatched keep it.
    pub async fn unregister(&self, name: &str) -> Result<(), Error> {
        self.core.unregister_scoped(None, name).await
    }

    /// Adds an observer (fire-and-forget, bounded mailbox).
    pub async fn observe(&self, observer: impl Observer) -> Result<(), Error> {
        self.observe_arc(Arc::new(observer)).await
    }

    /// Adds a shared observer.
    pub async fn observe_arc(&self, observer: Arc<dyn Observer>) -> Result<(), Error> {
        self.core.check_running()?;
        let options = observer.options();
        let (tx, rx) = mpsc::channel(options.mailbox);
        let entry = Arc::new(ObserverEntry::new(
            observer.name().to_owned(),
            options.clone(),
            None,
            tx,
        ));
        self.core.spawn(ObserverActor::new(
            observer,
            rx,
            clamp_timeout(options.timeout),
            self.core.metrics.clone(),
            self.core.supervisor.clone(),
        ));
        self.core
            .registry(|r| RegistryMsg::AddObserver(entry, r))
            .await?
    }

    /// Removes an observer; it finishes the events already in its mailbox.
    pub async fn remove_observer(&self, name: &str) -> Result<(), Error> {
        self.core
            .registry(|r| RegistryMsg::RemoveObserver(name.to_owned(), r))
            .await?
    }

    /// Subscribes a task of your own: returns its [`Mailbox`], a stream of deliveries.
    ///
    /// A gate subscription is folded like any hook: answer each delivery through its reply slot
    /// within the timeout; a slot dropped unanswered is a failure under the failure policy.
    /// Once 1,024 or more deliveries wait in a gate's mailbox, the ones whose dispatch stopped
    /// waiting (timed out, cancelled) are dropped before the task sees them.
    pub async fn subscribe(&self, subscription: Subscription) -> Result<Mailbox, Error> {
        self.core.subscribe_scoped(subscription, None).await
    }

    /// Opens a session. It has a dispatcher of its own, which runs on the task that
    /// dispatches (see [`BusSession`]).
    pub async fn open_session(&self, config: BusSessionConfig) -> Result<BusSession, Error> {
        let dispatcher = self.open_dispatcher(config)?;
        Ok(BusSession::new(dispatcher, self.core.clone()))
    }

    /// A dispatcher for a new session.
    fn open_dispatcher(&self, config: BusSessionConfig) -> Result<Dispatcher, Error> {
        self.core.check_running()?;
        let id = config.id.clone().unwrap_or_else(|| {
            format!(
                "session-{}",
                self.core.next_session.fetch_add(1, Ordering::Relaxed)
            )
        });
        let shared = Arc::new(SessionShared::new(id.clone(), &config));
        match self.core.sessions.entry(id.clone()) {
            dashmap::Entry::Occupied(_) => return Err(Error::SessionExists(id)),
            dashmap::Entry::Vacant(v) => {
                v.insert(shared.clone());
            }
        }
        self.core
            .metrics
            .sessions_opened
            .fetch_add(1, Ordering::Relaxed);
        Ok(Dispatcher::new(shared, self.core.clone()))
    }

    /// Ids of the open sessions.
    pub fn sessions(&self) -> Vec<String> {
        self.core.sessions.iter().map(|s| s.key().clone()).collect()
    }

    /// Every figure the runtime keeps: its counters, events by name, and (once detailed
    /// metrics are on, see [`MetricsHook`](crate::builtins::MetricsHook)) per-hook and per-tool
    /// latency percentiles.
    pub fn metrics_report(&self) -> MetricsReport {
        self.core.metrics.report()
    }

    /// Calls `listener` for every failed hook call from now on.
    #[cfg_attr(not(feature = "audit"), allow(dead_code))]
    pub(crate) fn on_hook_failure(&self, listener: FailureListener) {
        self.core.failure_listeners.write().push(listener);
    }

    /// Adds a gate awaited right before every tool runs.
    #[cfg_attr(not(feature = "audit"), allow(dead_code))]
    pub(crate) fn add_execution_gate(&self, gate: Arc<dyn ExecutionGate>) {
        self.core.execution_gates.write().push(gate);
    }

    /// Turns on per-hook and per-tool latency recording.
    pub fn enable_detailed_metrics(&self) {
        self.core
            .metrics
            .detail
            .enabled
            .store(true, Ordering::Relaxed);
    }

    /// Every panic the supervisor reports from now on: in an actor of this runtime (its
    /// registry, a session, a hook or observer actor, an agent loop) or in a caller's call one
    /// of them served. Each is also logged and counted
    /// ([`MetricsSnapshot::actor_panics`]). A reader that falls behind by more than 256
    /// reports skips the oldest (see [`broadcast`]).
    pub fn actor_failures(&self) -> broadcast::Receiver<ActorFailure> {
        self.core.supervisor.subscribe()
    }

    /// The runtime's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.core.metrics.snapshot()
    }

    /// Shuts down: refuses new sessions, closes every open session with `SessionEnd` (reason
    /// `shutdown`), lets observers drain their mailboxes, and returns a report. Whatever is still
    /// running at `deadline` is killed; when this returns, no task of the runtime is left.
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let until = deadline_after(tokio::time::Instant::now(), deadline);
        self.core.shutting_down.store(true, Ordering::SeqCst);
        let open: Vec<Arc<SessionShared>> = self
            .core
            .sessions
            .iter()
            .map(|s| s.value().clone())
            .collect();
        let closes = open
            .iter()
            .filter_map(|s| s.closer.get().and_then(|close| close("shutdown")));
        let closed = tokio::time::timeout_at(until, futures_util::future::join_all(closes))
            .await
            .map(|r| r.into_iter().filter(|ok| *ok).count())
            .unwrap_or(0);
        let _ = tokio::time::timeout_at(until, self.core.registry(RegistryMsg::Clear)).await;
        self.core.tracker.close();
        let mut killed = false;
        if tokio::time::timeout_at(until, self.core.tracker.wait())
            .await
            .is_err()
        {
            killed = true;
            self.core.kill.fire();
            self.core.tracker.wait().await;
        }
        let metrics = self.core.metrics.snapshot();
        let hook_failures = self.core.metrics.failures_by_hook();
        ShutdownReport {
            sessions_closed: closed,
            events_dispatched: metrics.events_dispatched,
            observer_events_delivered: metrics.observer_delivered,
            observer_events_dropped: metrics.observer_dropped,
            hook_failures,
            killed,
            metrics,
        }
    }
}

impl Default for Bus {
    fn default() -> Self {
        Bus::new()
    }
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("sessions", &self.core.sessions.len())
            .finish()
    }
}
