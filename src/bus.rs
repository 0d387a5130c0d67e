//! The runtime handle ([`Bus`]): registration, subscriptions, sessions and shutdown.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::actor::run_hook_actor;
use crate::bounds::{clamp_timeout, deadline_after, parse_timeout_secs};
use crate::dispatch::Dispatcher;
use crate::error::Error;
use crate::event::EventKind;
use crate::execution::{ExecutionGate, ExecutionIntent};
use crate::hook::{Hook, HookOptions};
use crate::kill::KillSwitch;
use crate::mailbox::Mailbox;
use crate::metrics::{MetricsReport, MetricsSnapshot, RuntimeMetrics};
use crate::observer::{run_observer_actor, Observer, ObserverEntry, ObserverOptions};
use crate::registry::{HookEntry, Registry, RegistryMsg, Snapshot, Target};
use crate::session::{run_session_actor, Session, SessionConfig, SessionMsg, SessionShared};

/// Default hook timeout (SPEC FL-2), unless `HOOK_TIMEOUT_SECS` says otherwise.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);
/// Default SessionEnd grace period (ORD-4).
pub const DEFAULT_SESSION_END_GRACE: Duration = Duration::from_secs(30);
/// Default mailbox capacity of a hook actor.
pub const DEFAULT_HOOK_MAILBOX: usize = 1024;

/// Runtime-wide settings.
#[derive(Debug, Clone)]
pub(crate) struct BusConfig {
    pub default_timeout: Duration,
    pub session_end_grace: Duration,
    pub sequential: [bool; EventKind::COUNT],
    pub hook_mailbox: usize,
}

/// Builds a [`Bus`].
#[derive(Debug, Clone, Default)]
pub struct BusBuilder {
    default_timeout: Option<Duration>,
    session_end_grace: Option<Duration>,
    sequential: Vec<EventKind>,
    hook_mailbox: Option<usize>,
}

impl BusBuilder {
    /// The timeout of hooks that do not set their own. Without it: `HOOK_TIMEOUT_SECS` if set
    /// to a positive number of seconds, else 30 s. At most
    /// [`MAX_TIMEOUT`](crate::bounds::MAX_TIMEOUT) (24 h; longer is clamped).
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
    /// Mailbox capacity of each hook actor (default 1024).
    pub fn hook_mailbox(mut self, capacity: usize) -> Self {
        self.hook_mailbox = Some(capacity.max(1));
        self
    }

    /// Starts the runtime (spawns the registry actor). Must be called within a tokio runtime.
    pub fn build(self) -> Bus {
        let env_timeout = env_timeout();
        let mut sequential = [false; EventKind::COUNT];
        for kind in self.sequential {
            sequential[kind.index()] = true;
        }
        let config = BusConfig {
            default_timeout: self
                .default_timeout
                .or(env_timeout)
                .unwrap_or(DEFAULT_HOOK_TIMEOUT),
            session_end_grace: self.session_end_grace.unwrap_or(DEFAULT_SESSION_END_GRACE),
            sequential,
            hook_mailbox: self.hook_mailbox.unwrap_or(DEFAULT_HOOK_MAILBOX),
        };
        let published = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
        let sessions = Arc::new(DashMap::new());
        let (registry_tx, registry_rx) = mpsc::channel(64);
        let tracker = TaskTracker::new();
        let kill = KillSwitch::default();
        let registry = Registry::new(published.clone(), sessions.clone());
        let mut registry_kill = kill.watch();
        tracker.spawn(async move {
            registry_kill.guard(registry.run(registry_rx)).await;
        });
        Bus {
            inner: Arc::new(BusInner {
                failure_listeners: parking_lot::RwLock::default(),
                execution_gates: parking_lot::RwLock::default(),
                config,
                published,
                registry_tx,
                sessions,
                metrics: Arc::new(RuntimeMetrics::default()),
                tracker,
                kill,
                shutting_down: AtomicBool::new(false),
                next_seq: AtomicU64::new(1),
                next_session: AtomicU64::new(1),
            }),
        }
    }
}

/// `HOOK_TIMEOUT_SECS`, when set: a positive number of seconds; longer than
/// [`MAX_TIMEOUT`](crate::bounds::MAX_TIMEOUT) is clamped to it, anything else is ignored;
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

/// A hook call that failed, as failure listeners see it (the audit log is one).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "audit"), allow(dead_code))]
pub(crate) struct HookFailure {
    pub session_id: String,
    pub hook: String,
    pub event: EventKind,
    pub status: String,
}

pub(crate) type FailureListener = Box<dyn Fn(&HookFailure) + Send + Sync>;

pub(crate) struct BusInner {
    /// Told of every failed hook call (the audit log records them).
    pub failure_listeners: parking_lot::RwLock<Vec<FailureListener>>,
    /// Awaited right before each tool runs (the durable audit log's intent).
    pub execution_gates: parking_lot::RwLock<Vec<Arc<dyn ExecutionGate>>>,
    pub config: BusConfig,
    pub published: Arc<ArcSwap<Snapshot>>,
    registry_tx: mpsc::Sender<RegistryMsg>,
    pub sessions: Arc<DashMap<String, Arc<SessionShared>>>,
    pub metrics: Arc<RuntimeMetrics>,
    pub tracker: TaskTracker,
    pub kill: KillSwitch,
    shutting_down: AtomicBool,
    next_seq: AtomicU64,
    next_session: AtomicU64,
}

impl BusInner {
    async fn registry<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> RegistryMsg,
    ) -> Result<T, Error> {
        let (tx, rx) = oneshot::channel();
        self.registry_tx
            .send(make(tx))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        rx.await.map_err(|_| Error::ShuttingDown)
    }

    /// Forgets a closed session: its hooks, session observers and scratchpad.
    pub async fn drop_session(&self, shared: &SessionShared) {
        let _ = self
            .registry(|tx| RegistryMsg::DropSession(shared.id.clone(), tx))
            .await;
        shared.hooks.store(None);
        shared.scratchpad.clear();
        self.sessions.remove(&shared.id);
        self.metrics.sessions_closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// What to subscribe a user task as: a gate (it answers through reply slots, like a [`Hook`]) or
/// an observer (fire-and-forget).
#[derive(Debug, Clone)]
pub enum Subscription {
    /// A hook answered by the user's task.
    Gate {
        /// Unique name in its scope.
        name: String,
        /// Events, filter, timeout, failure policy, `after`.
        options: HookOptions,
    },
    /// An observer fed by the runtime.
    Observer {
        /// Unique name among observers.
        name: String,
        /// Events, filter, mailbox size, enqueue limit.
        options: ObserverOptions,
    },
}

impl Subscription {
    /// A gate subscription.
    pub fn gate(name: impl Into<String>, options: HookOptions) -> Self {
        Subscription::Gate {
            name: name.into(),
            options,
        }
    }
    /// An observer subscription.
    pub fn observer(name: impl Into<String>, options: ObserverOptions) -> Self {
        Subscription::Observer {
            name: name.into(),
            options,
        }
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
    pub(crate) inner: Arc<BusInner>,
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
        self.register_scoped(Arc::new(hook), None).await
    }

    /// Registers a shared hook for every session.
    pub async fn register_arc(&self, hook: Arc<dyn Hook>) -> Result<(), Error> {
        self.register_scoped(hook, None).await
    }

    /// Removes a global hook. Events already being dispatched keep it.
    pub async fn unregister(&self, name: &str) -> Result<(), Error> {
        self.unregister_scoped(None, name).await
    }

    /// Adds an observer (fire-and-forget, bounded mailbox).
    pub async fn observe(&self, observer: impl Observer) -> Result<(), Error> {
        self.observe_arc(Arc::new(observer)).await
    }

    /// Adds a shared observer.
    pub async fn observe_arc(&self, observer: Arc<dyn Observer>) -> Result<(), Error> {
        self.check_running()?;
        let options = observer.options();
        let (tx, rx) = mpsc::channel(options.mailbox);
        let entry = Arc::new(ObserverEntry::new(
            observer.name().to_owned(),
            options.clone(),
            None,
            tx,
        ));
        self.spawn_actor(run_observer_actor(
            observer,
            rx,
            clamp_timeout(options.timeout),
            self.inner.metrics.clone(),
        ));
        self.inner
            .registry(|r| RegistryMsg::AddObserver(entry, r))
            .await?
    }

    /// Removes an observer; it finishes the events already in its mailbox.
    pub async fn remove_observer(&self, name: &str) -> Result<(), Error> {
        self.inner
            .registry(|r| RegistryMsg::RemoveObserver(name.to_owned(), r))
            .await?
    }

    /// Subscribes a task of your own: returns its [`Mailbox`], a stream of deliveries.
    ///
    /// A gate subscription is folded like any hook: answer each delivery through its reply slot
    /// within the timeout; a slot dropped unanswered is a failure under the failure policy.
    pub async fn subscribe(&self, subscription: Subscription) -> Result<Mailbox, Error> {
        self.subscribe_scoped(subscription, None).await
    }

    /// Opens a session; its events are dispatched by its own actor.
    pub async fn open_session(&self, config: SessionConfig) -> Result<Session, Error> {
        let dispatcher = self.open_dispatcher(config)?;
        let shared = dispatcher.shared.clone();
        let (tx, rx) = mpsc::channel(64);
        *shared.mailbox.lock() = Some(tx.downgrade());
        self.spawn_actor(run_session_actor(dispatcher, rx));
        Ok(Session {
            shared,
            tx,
            bus: self.clone(),
        })
    }

    /// Spawns an actor that shutdown waits for, and stops at the shutdown deadline: the kill
    /// switch is read before every poll of the actor (ACT-4), so it also interrupts a message
    /// in progress.
    pub(crate) fn spawn_actor(
        &self,
        actor: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let mut kill = self.inner.kill.watch();
        self.inner.tracker.spawn(async move {
            kill.guard(actor).await;
        });
    }

    /// A dispatcher for a new session, to be driven by the caller's own task (the agent loop).
    pub(crate) fn open_dispatcher(&self, config: SessionConfig) -> Result<Dispatcher, Error> {
        self.check_running()?;
        let id = config.id.clone().unwrap_or_else(|| {
            format!(
                "session-{}",
                self.inner.next_session.fetch_add(1, Ordering::Relaxed)
            )
        });
        let shared = Arc::new(SessionShared::new(id.clone(), &config));
        match self.inner.sessions.entry(id.clone()) {
            dashmap::Entry::Occupied(_) => return Err(Error::SessionExists(id)),
            dashmap::Entry::Vacant(v) => {
                v.insert(shared.clone());
            }
        }
        self.inner
            .metrics
            .sessions_opened
            .fetch_add(1, Ordering::Relaxed);
        Ok(Dispatcher::new(shared, self.inner.clone()))
    }

    /// Ids of the open sessions.
    pub fn sessions(&self) -> Vec<String> {
        self.inner
            .sessions
            .iter()
            .map(|s| s.key().clone())
            .collect()
    }

    /// Every figure the runtime keeps: its counters, events by name, and (once detailed
    /// metrics are on, see [`MetricsHook`](crate::builtins::MetricsHook)) per-hook and per-tool
    /// latency percentiles.
    pub fn metrics_report(&self) -> MetricsReport {
        self.inner.metrics.report()
    }

    /// Calls `listener` for every failed hook call from now on.
    #[cfg_attr(not(feature = "audit"), allow(dead_code))]
    pub(crate) fn on_hook_failure(&self, listener: FailureListener) {
        self.inner.failure_listeners.write().push(listener);
    }

    /// Adds a gate awaited right before every tool runs.
    #[cfg_attr(not(feature = "audit"), allow(dead_code))]
    pub(crate) fn add_execution_gate(&self, gate: Arc<dyn ExecutionGate>) {
        self.inner.execution_gates.write().push(gate);
    }

    /// Passes a call about to run through every execution gate, in the order they were added;
    /// the first error stops it.
    pub(crate) async fn before_execution(
        &self,
        intent: &ExecutionIntent<'_>,
    ) -> Result<(), String> {
        let gates = self.inner.execution_gates.read().clone();
        for gate in gates {
            gate.before_execution(intent).await?;
        }
        Ok(())
    }

    /// Turns on per-hook and per-tool latency recording.
    pub fn enable_detailed_metrics(&self) {
        self.inner
            .metrics
            .detail
            .enabled
            .store(true, Ordering::Relaxed);
    }

    /// The runtime's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// Shuts down: refuses new sessions, closes every open session with `SessionEnd` (reason
    /// `shutdown`), lets observers drain their mailboxes, and returns a report. Whatever is still
    /// running at `deadline` is killed; when this returns, no task of the runtime is left.
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let until = deadline_after(tokio::time::Instant::now(), deadline);
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        let open: Vec<Arc<SessionShared>> = self
            .inner
            .sessions
            .iter()
            .map(|s| s.value().clone())
            .collect();
        let closes = open.iter().filter_map(|s| {
            let tx = s.mailbox.lock().as_ref().and_then(|w| w.upgrade())?;
            Some(async move {
                let (reply, rx) = oneshot::channel();
                let msg = SessionMsg::Close {
                    reason: "shutdown".to_owned(),
                    reply,
                    turn: 0,
                    step: 0,
                };
                tx.send(msg).await.is_ok() && rx.await.is_ok()
            })
        });
        let closed = tokio::time::timeout_at(until, futures_util::future::join_all(closes))
            .await
            .map(|r| r.into_iter().filter(|ok| *ok).count())
            .unwrap_or(0);
        let _ = tokio::time::timeout_at(until, self.inner.registry(RegistryMsg::Clear)).await;
        self.inner.tracker.close();
        let mut killed = false;
        if tokio::time::timeout_at(until, self.inner.tracker.wait())
            .await
            .is_err()
        {
            killed = true;
            self.inner.kill.fire();
            self.inner.tracker.wait().await;
        }
        let metrics = self.inner.metrics.snapshot();
        let hook_failures = self.inner.metrics.failures_by_hook();
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

    pub(crate) async fn register_scoped(
        &self,
        hook: Arc<dyn Hook>,
        session: Option<String>,
    ) -> Result<(), Error> {
        self.check_running()?;
        let options = hook.options();
        let target = if options.inline {
            Target::Inline(hook.clone())
        } else {
            let (tx, rx) = mpsc::channel(self.inner.config.hook_mailbox);
            self.spawn_actor(run_hook_actor(hook.clone(), rx, options.max_concurrency));
            Target::Actor(tx)
        };
        self.add_entry(hook.name().to_owned(), options, target, session)
            .await
    }

    async fn add_entry(
        &self,
        name: String,
        options: HookOptions,
        target: Target,
        session: Option<String>,
    ) -> Result<(), Error> {
        let timeout = clamp_timeout(options.timeout.unwrap_or(self.inner.config.default_timeout));
        let seq = self.inner.next_seq.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(HookEntry::new(name, seq, options, timeout, target, session));
        self.inner
            .registry(|r| RegistryMsg::AddHook(entry, r))
            .await?
    }

    pub(crate) async fn unregister_scoped(
        &self,
        session: Option<String>,
        name: &str,
    ) -> Result<(), Error> {
        self.inner
            .registry(|r| RegistryMsg::RemoveHook(session, name.to_owned(), r))
            .await?
    }

    pub(crate) async fn subscribe_scoped(
        &self,
        subscription: Subscription,
        session: Option<String>,
    ) -> Result<Mailbox, Error> {
        self.check_running()?;
        match subscription {
            Subscription::Gate { name, options } => {
                let (tx, rx) = mpsc::channel(self.inner.config.hook_mailbox);
                self.add_entry(name, options, Target::Actor(tx), session)
                    .await?;
                Ok(Mailbox::hook(rx))
            }
            Subscription::Observer { name, options } => {
                let (tx, rx) = mpsc::channel(options.mailbox);
                let mut entry = ObserverEntry::new(name, options, session, tx);
                entry.user_task = true;
                let entry = Arc::new(entry);
                self.inner
                    .registry(|r| RegistryMsg::AddObserver(entry, r))
                    .await??;
                Ok(Mailbox::observer(rx))
            }
        }
    }

    fn check_running(&self) -> Result<(), Error> {
        if self.inner.shutting_down.load(Ordering::SeqCst) {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
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
            .field("sessions", &self.inner.sessions.len())
            .finish()
    }
}
