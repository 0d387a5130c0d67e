//! One shape for every actor of the runtime: the registry, each hook and observer, the
//! permission service and each agent loop. (A session's dispatcher runs on the session's own
//! task, see [`session`](crate::runtime::session); its panics are reported here alike.)
//!
//! An actor is a value that owns its state and its mailbox and serves it in [`Actor::run`].
//! Its constructor is a `pair()` that returns the handle and the actor without spawning it (as
//! tower's `Buffer::pair` does), so a test can drive an actor by hand; the runtime spawns it
//! with [`spawn`] on its task tracker, so shutdown waits for it.
//!
//! What the shape gives every actor alike:
//!
//! * **Control before work.** The kill switch is read before every poll of the actor (ACT-4),
//!   so `stop` interrupts even a message in progress; dropping every handle closes the mailbox,
//!   and the actor drains what is queued, then ends (ACT-5).
//! * **Supervision.** A panic that escapes [`Actor::run`] is caught and reported to the
//!   [`Supervisor`], which logs it (a `tracing` error event), counts it
//!   ([`MetricsSnapshot::actor_panics`](crate::MetricsSnapshot::actor_panics)) and sends it
//!   to every [`Bus::actor_failures`](crate::Bus::actor_failures) receiver. The actor then
//!   says what happens ([`OnPanic`]): hook, observer, registry and permission actors are
//!   restarted with their state kept (what was in flight is failed, by its policy); an agent
//!   loop stops and fails its session with
//!   [`Error::ActorFailed`](crate::Error::ActorFailed) naming the actor.
//!
//! Panics inside a caller's code (a hook, an observer, the approver, a tool, the model) are
//! caught around that one call, closer to it, and reported to the same supervisor: the actor
//! serving the call never sees them.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::sync::broadcast;

use crate::model::error::{ActorFailure, ActorKind};
use crate::runtime::kill::KillWatch;
use crate::runtime::metrics::RuntimeMetrics;
use crate::sys::panics::panic_message;
use crate::sys::panics::Contained;

/// What the supervisor does after an actor panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnPanic {
    /// Run the actor again, its state kept.
    Restart,
    /// Stop it; [`Actor::failed`] fails whatever depends on it.
    Stop,
}

/// An actor: state and mailbox in one value, served by [`run`](Actor::run).
pub(crate) trait Actor: Send + 'static {
    /// Which kind it is.
    const KIND: ActorKind;
    /// What to do after a panic.
    const ON_PANIC: OnPanic;

    /// Its name in reports.
    fn name(&self) -> String;

    /// Serves the mailbox until it is closed and drained. After a panic it is called again
    /// (with [`OnPanic::Restart`]) on the same state.
    fn run(&mut self) -> impl Future<Output = ()> + Send + '_;

    /// Told of its own panic before it restarts or stops.
    fn failed(&mut self, _failure: &ActorFailure) {}
}

/// Where panics are reported: logged, counted and broadcast.
#[derive(Clone, Debug)]
pub(crate) struct Supervisor {
    metrics: Arc<RuntimeMetrics>,
    reports: broadcast::Sender<ActorFailure>,
}

/// How many reports a slow reader of [`Supervisor::subscribe`] may fall behind by.
const REPORT_BUFFER: usize = 256;

impl Supervisor {
    pub fn new(metrics: Arc<RuntimeMetrics>) -> Self {
        Self {
            metrics,
            reports: broadcast::channel(REPORT_BUFFER).0,
        }
    }

    /// A supervisor of its own, for an actor spawned outside a runtime.
    pub fn detached() -> Self {
        Self::new(Arc::default())
    }

    /// Logs, counts and broadcasts one failure.
    pub fn report(&self, failure: ActorFailure) {
        tracing::error!(
            actor = failure.kind.as_str(),
            name = %failure.name,
            panic = %failure.message,
            serving = failure.serving,
            "actor panicked"
        );
        self.metrics.actor_panics[failure.kind.index()].fetch_add(1, Ordering::Relaxed);
        let _ = self.reports.send(failure);
    }

    /// Reports a panic inside one call an actor served (a hook's, an observer's, ...).
    pub fn report_call(&self, kind: ActorKind, name: &str, message: &str) {
        self.report(ActorFailure {
            kind,
            name: name.to_owned(),
            message: message.to_owned(),
            serving: true,
        });
    }

    /// Every failure reported from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ActorFailure> {
        self.reports.subscribe()
    }
}

/// Runs `actor` until it finishes, stops after a panic, or the kill switch fires.
pub(crate) async fn supervise<A: Actor>(mut actor: A, supervisor: Supervisor, mut kill: KillWatch) {
    loop {
        let served = kill
            .guard(AssertUnwindSafe(Contained::new(actor.run())).catch_unwind())
            .await;
        let panic = match served {
            None | Some(Ok(())) => return,
            Some(Err(panic)) => panic,
        };
        let failure = ActorFailure {
            kind: A::KIND,
            name: actor.name(),
            message: panic_message(panic.as_ref()),
            serving: A::ON_PANIC == OnPanic::Restart,
        };
        actor.failed(&failure);
        supervisor.report(failure);
        if A::ON_PANIC == OnPanic::Stop {
            return;
        }
    }
}

/// Spawns `actor` on `tracker` under `supervisor`, stopped by `kill`.
pub(crate) fn spawn<A: Actor>(
    tracker: &tokio_util::task::TaskTracker,
    supervisor: &Supervisor,
    kill: KillWatch,
    actor: A,
) {
    tracker.spawn(supervise(actor, supervisor.clone(), kill));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::kill::KillSwitch;
    use tokio::sync::mpsc;

    /// Panics on a message of 0, echoes the others.
    struct Echo {
        rx: mpsc::Receiver<(u32, tokio::sync::oneshot::Sender<u32>)>,
        failures: u32,
    }

    impl Actor for Echo {
        const KIND: ActorKind = ActorKind::Hook;
        const ON_PANIC: OnPanic = OnPanic::Restart;
        fn name(&self) -> String {
            "echo".into()
        }
        async fn run(&mut self) {
            while let Some((n, reply)) = self.rx.recv().await {
                assert!(n != 0, "zero");
                let _ = reply.send(n);
            }
        }
        fn failed(&mut self, _: &ActorFailure) {
            self.failures += 1;
        }
    }

    async fn ask(
        tx: &mpsc::Sender<(u32, tokio::sync::oneshot::Sender<u32>)>,
        n: u32,
    ) -> Option<u32> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        tx.send((n, reply)).await.ok()?;
        rx.await.ok()
    }

    #[tokio::test]
    async fn a_restarted_actor_keeps_its_mailbox_and_the_panic_is_reported_once() {
        let supervisor = Supervisor::detached();
        let mut reports = supervisor.subscribe();
        let (tx, rx) = mpsc::channel(8);
        let tracker = tokio_util::task::TaskTracker::new();
        spawn(
            &tracker,
            &supervisor,
            KillSwitch::default().watch(),
            Echo { rx, failures: 0 },
        );
        assert_eq!(ask(&tx, 1).await, Some(1));
        assert_eq!(ask(&tx, 0).await, None, "the panicking message fails");
        assert_eq!(ask(&tx, 2).await, Some(2), "the actor serves on");
        let report = reports.recv().await.expect("reported");
        assert_eq!(report.kind, ActorKind::Hook);
        assert_eq!(report.message, "zero");
        assert!(report.serving);
        assert_eq!(
            supervisor.metrics.actor_panics[ActorKind::Hook.index()].load(Ordering::Relaxed),
            1
        );
        drop(tx);
        tracker.close();
        tracker.wait().await;
    }
}
