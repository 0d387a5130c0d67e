//! The runtime core: configuration, metrics, the published snapshot, the registry's mailbox,
//! the open sessions, the task tracker, the kill switch and the supervisor — what the
//! dispatchers, the sessions and the registry share. [`Bus`](crate::Bus) is a thin façade
//! over it; nothing in the core knows the façade.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::model::bounds::clamp_timeout;
use crate::model::error::Error;
use crate::model::event::EventKind;
use crate::model::hook::{Hook, HookOptions};
use crate::runtime::actor::{self, Actor, Supervisor};
use crate::runtime::channel;
use crate::runtime::execution::{ExecutionGate, ExecutionIntent};
use crate::runtime::hook_actor::HookActor;
use crate::runtime::kill::KillSwitch;
use crate::runtime::mailbox::{Delivery, Mailbox};
use crate::runtime::metrics::RuntimeMetrics;
use crate::runtime::observer::ObserverEntry;
use crate::runtime::registry::RegistryMsg;
use crate::runtime::session_state::SessionShared;
use crate::runtime::snapshot::{HookEntry, Published, Target};
use crate::runtime::subscription::Subscription;

/// Runtime-wide settings.
#[derive(Debug, Clone)]
pub(crate) struct RuntimeConfig {
    pub default_timeout: Duration,
    pub session_end_grace: Duration,
    pub sequential: [bool; EventKind::COUNT],
    pub hook_mailbox: usize,
    /// Actors per global hook (see [`Target::Sharded`]).
    pub hook_shards: usize,
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

/// What the runtime's parts share: the [`Bus`](crate::Bus) façade, each session's
/// dispatcher and handle, and the registry reach each other only through it.
pub(crate) struct RuntimeCore {
    /// Told of every failed hook call (the audit log records them).
    pub failure_listeners: parking_lot::RwLock<Vec<FailureListener>>,
    /// Awaited right before each tool runs (the durable audit log's intent).
    pub execution_gates: parking_lot::RwLock<Vec<Arc<dyn ExecutionGate>>>,
    pub config: RuntimeConfig,
    pub published: Arc<Published>,
    pub registry_tx: mpsc::Sender<RegistryMsg>,
    pub sessions: Arc<DashMap<String, Arc<SessionShared>>>,
    pub metrics: Arc<RuntimeMetrics>,
    pub tracker: TaskTracker,
    pub kill: KillSwitch,
    pub supervisor: Supervisor,
    pub shutting_down: AtomicBool,
    pub next_seq: AtomicU64,
    pub next_session: AtomicU64,
}

impl RuntimeCore {
    pub async fn registry<T>(
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

    /// Passes a call about to run through every execution gate, in the order they were added;
    /// the first error stops it.
    pub(crate) async fn before_execution(
        &self,
        intent: &ExecutionIntent<'_>,
    ) -> Result<(), String> {
        let gates = self.execution_gates.read().clone();
        for gate in gates {
            gate.before_execution(intent).await?;
        }
        Ok(())
    }

    /// Makes the registry actor panic (tests of its supervision).
    #[cfg(test)]
    pub async fn inject_registry_panic(&self) {
        let _ = self.registry_tx.send(RegistryMsg::Panic).await;
    }

    /// Forgets a failed session at once (from a synchronous context): the registry drops its
    /// hooks and observers when it gets to the message.
    pub fn forget_session(&self, shared: &SessionShared) {
        let (tx, _) = oneshot::channel();
        let _ = self
            .registry_tx
            .try_send(RegistryMsg::DropSession(shared.id.clone(), tx));
        shared.hooks.store(None);
        shared.scratchpad.clear();
        if self.sessions.remove(&shared.id).is_some() {
            self.metrics.sessions_closed.fetch_add(1, Ordering::Relaxed);
        }
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

    /// Spawns `work` on the runtime of the current context, tracked (shutdown waits for it)
    /// and stopped by the kill switch; false when there is no runtime to spawn it on.
    pub fn spawn_task(&self, work: impl std::future::Future<Output = ()> + Send + 'static) -> bool {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        self.spawn_task_on(&runtime, work);
        true
    }

    /// Spawns `work` on `runtime`, tracked and stopped by the kill switch.
    pub fn spawn_task_on(
        &self,
        runtime: &tokio::runtime::Handle,
        work: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let mut kill = self.kill.watch();
        self.tracker.spawn_on(
            async move {
                kill.guard(work).await;
            },
            runtime,
        );
    }

    /// Spawns `actor` on the runtime's tracker under its supervisor; shutdown waits for it,
    /// and the kill switch stops it at the deadline (read before every poll, ACT-4).
    pub fn spawn<A: Actor>(&self, actor: A) {
        actor::spawn(&self.tracker, &self.supervisor, self.kill.watch(), actor);
    }

    pub(crate) async fn register_scoped(
        &self,
        hook: Arc<dyn Hook>,
        session: Option<String>,
    ) -> Result<(), Error> {
        self.check_running()?;
        let options = hook.options();
        // A global hook without a concurrency limit gets `hook_shards` actors (four per
        // worker by default); a session's own hook, or one whose limit must hold across
        // calls, gets one.
        let shards = match (&session, options.max_concurrency) {
            (None, None) => self.config.hook_shards.max(1),
            _ => 1,
        };
        let target = if options.inline {
            Target::Inline(hook.clone())
        } else {
            let mut mailboxes = Vec::with_capacity(shards);
            for _ in 0..shards {
                let (tx, actor) = HookActor::pair(
                    hook.clone(),
                    self.config.hook_mailbox,
                    options.max_concurrency,
                );
                self.spawn(actor);
                mailboxes.push(tx);
            }
            match mailboxes.len() {
                1 => Target::Actor(mailboxes.remove(0)),
                _ => Target::Sharded(mailboxes.into_boxed_slice()),
            }
        };
        self.add_entry(hook.name().to_owned(), options, target, session)
            .await
    }

    pub async fn add_entry(
        &self,
        name: String,
        options: HookOptions,
        target: Target,
        session: Option<String>,
    ) -> Result<(), Error> {
        let timeout = clamp_timeout(options.timeout.unwrap_or(self.config.default_timeout));
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(HookEntry::new(name, seq, options, timeout, target, session));
        self.registry(|r| RegistryMsg::AddHook(entry, r)).await?
    }

    pub(crate) async fn unregister_scoped(
        &self,
        session: Option<String>,
        name: &str,
    ) -> Result<(), Error> {
        self.registry(|r| RegistryMsg::RemoveHook(session, name.to_owned(), r))
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
                let (tx, rx) =
                    channel::channel_settling(self.config.hook_mailbox, Delivery::is_settled);
                self.add_entry(name, options, Target::Actor(tx), session)
                    .await?;
                Ok(Mailbox::hook(rx))
            }
            Subscription::Observer { name, options } => {
                let (tx, rx) = mpsc::channel(options.mailbox);
                let mut entry = ObserverEntry::new(name, options, session, tx);
                entry.user_task = true;
                let entry = Arc::new(entry);
                self.registry(|r| RegistryMsg::AddObserver(entry, r))
                    .await??;
                Ok(Mailbox::observer(rx))
            }
        }
    }

    pub fn check_running(&self) -> Result<(), Error> {
        if self.shutting_down.load(Ordering::SeqCst) {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
        }
    }
}
