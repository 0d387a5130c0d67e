//! Sessions: the [`BusSession`] handle, and how a session's [`Dispatcher`] is driven.
//!
//! A session's dispatcher is its own (ACT-3: each session has its own dispatcher over the
//! shared snapshot) and runs on the session's task: the task that holds the handle and
//! dispatches (the agent loop, or the embedder's own task). Its dispatches are serialized by
//! the session's FIFO lock, so they are numbered and delivered in order (ORD-1) however many
//! clones of the handle dispatch at once. Running it where it is awaited spares every event a
//! hop to another task and back, and inline hooks are then polled on the caller's task itself.
//!
//! A dispatch, once started, runs to its end: if the caller stops waiting for it (its future is
//! dropped, e.g. under a timeout), the rest of it moves to a task of its own on the runtime, so
//! every hook and observer still sees the event, in order, and the next dispatch waits for it.
//! Dropping the last handle ends the session with `SessionEnd` (reason `other`) on such a task
//! (ACT-5). A panic in the dispatcher fails the session: later calls get
//! [`Error::ActorFailed`] naming it, as for an actor that stopped.

use std::future::Future;
use std::ops::Deref;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use futures_util::FutureExt;
use tokio::sync::Mutex;

use crate::model::error::{ActorFailure, ActorKind, Error};
use crate::model::event::Event;
use crate::model::hook::Hook;
use crate::model::outcome::Outcome;
use crate::model::scratchpad::Scratchpad;
use crate::runtime::core::RuntimeCore;
use crate::runtime::dispatch::{self, Dispatcher};
use crate::runtime::event_log::{EventStream, HistoryStats, HookRunStream};
use crate::runtime::mailbox::Mailbox;
pub use crate::runtime::session_state::BusSessionConfig;
use crate::runtime::session_state::{Closer, SessionShared};
use crate::runtime::subscription::Subscription;
use crate::sys::panics::{contained, panic_message};

/// A session's dispatcher behind its FIFO lock: whoever holds the lock dispatches.
pub(crate) type SessionLock = Mutex<Dispatcher>;

/// What one turn of the session's lock does.
pub(crate) enum SessionOp {
    /// Dispatch one event.
    Dispatch { event: Event, turn: u32, step: u32 },
    /// End the session with `SessionEnd`.
    Close {
        reason: String,
        turn: u32,
        step: u32,
    },
    /// Panics in the dispatcher (tests of its supervision).
    #[cfg(test)]
    Panic,
}

/// One operation on a session's dispatcher, with its panics caught: a panic fails the session
/// (later calls get [`Error::ActorFailed`], the session is forgotten without `SessionEnd`) and
/// is reported, as for an actor that stopped.
///
/// `C` is how it reaches the runtime core: borrowed while its caller awaits it (every session
/// cloning the one core's `Arc` at every event would move that count's cache line from core to
/// core), owned once it moves to a task of its own.
struct Guarded<C> {
    work: Pin<Box<dyn Future<Output = Box<Outcome>> + Send>>,
    shared: Arc<SessionShared>,
    core: C,
}

impl<C: Deref<Target = RuntimeCore>> Guarded<C> {
    fn fail(&self, message: String) {
        let failure = ActorFailure {
            kind: ActorKind::Session,
            name: self.shared.id.clone(),
            message,
            serving: false,
        };
        let _ = self.shared.failure.set(failure.clone());
        self.shared.closing.store(true, Ordering::Release);
        self.core.forget_session(&self.shared);
        if let Some(log) = self.shared.log.get() {
            log.close();
        }
        self.core.supervisor.report(failure);
    }

    /// The same work, reaching the core through `core`.
    fn with_core<D>(self, core: D) -> Guarded<D> {
        Guarded {
            work: self.work,
            shared: self.shared,
            core,
        }
    }
}

impl<C: Deref<Target = RuntimeCore> + Unpin> Future for Guarded<C> {
    /// `None` when the dispatcher panicked.
    type Output = Option<Box<Outcome>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let work = &mut self.work;
        match std::panic::catch_unwind(AssertUnwindSafe(|| contained(|| work.as_mut().poll(cx)))) {
            Ok(poll) => poll.map(Some),
            Err(panic) => {
                self.fail(panic_message(panic.as_ref()));
                Poll::Ready(None)
            }
        }
    }
}

/// Takes the session's lock and runs `op` to its end; `Err(())` when the session is already
/// closed or failed, `Ok(None)` when the dispatcher panicked.
pub(crate) async fn run_op(
    lock: Arc<SessionLock>,
    core: &Arc<RuntimeCore>,
    op: SessionOp,
) -> Result<Option<Box<Outcome>>, ()> {
    let dispatcher = lock.lock_owned().await;
    if dispatcher.is_closed() {
        return Err(());
    }
    let shared = dispatcher.shared.clone();
    let work: Pin<Box<dyn Future<Output = Box<Outcome>> + Send>> = match op {
        SessionOp::Dispatch { event, turn, step } => dispatch::start(dispatcher, event, turn, step),
        SessionOp::Close { reason, turn, step } => {
            let mut dispatcher = dispatcher;
            Box::pin(async move { dispatcher.close(&reason, turn, step).await })
        }
        #[cfg(test)]
        SessionOp::Panic => Box::pin(async move {
            let _held = dispatcher;
            panic!("session dispatcher fault injected")
        }),
    };
    let work = Guarded {
        work,
        shared,
        core: &**core,
    };
    // A caller outside every task (`block_on`, a thread of its own) would wake each hook's
    // actor from outside the runtime's workers; one hop to a task costs less than that.
    if tokio::task::try_id().is_none() {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let work = work.with_core(core.clone());
            core.spawn_task_on(&runtime, async move {
                let _ = tx.send(work.await);
            });
            return Ok(rx.await.ok().flatten());
        }
    }
    Ok(ToTheEnd {
        work: Some(work),
        core,
    }
    .await)
}

/// Work that finishes even when its caller stops waiting: dropped before it is done, it moves
/// to a task of its own on the runtime (tracked, so shutdown waits for it or kills it).
struct ToTheEnd<'a> {
    work: Option<Guarded<&'a RuntimeCore>>,
    core: &'a Arc<RuntimeCore>,
}

impl Future for ToTheEnd<'_> {
    type Output = Option<Box<Outcome>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(Pin::new(work).poll(cx));
        self.work = None;
        Poll::Ready(out)
    }
}

impl Drop for ToTheEnd<'_> {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            let work = work.with_core(self.core.clone());
            self.core.spawn_task(async move {
                work.await;
            });
        }
    }
}

/// Ends the session with `SessionEnd` (this reason) at turn and step 0; true if it was open
/// and its dispatcher did not panic.
async fn close_with(lock: Arc<SessionLock>, core: Arc<RuntimeCore>, reason: String) -> bool {
    let close = SessionOp::Close {
        reason,
        turn: 0,
        step: 0,
    };
    matches!(run_op(lock, &core, close).await, Ok(Some(_)))
}

/// How shutdown reaches the session's dispatcher without keeping it (or the runtime) alive.
fn closer(lock: Weak<SessionLock>, core: Weak<RuntimeCore>) -> Closer {
    Box::new(move |reason: &str| {
        let (lock, core) = (lock.upgrade()?, core.upgrade()?);
        Some(Box::pin(close_with(lock, core, reason.to_owned())))
    })
}

/// What the last handle of a session owns: dropping it ends the session (ACT-5).
struct LastHandle {
    lock: Arc<SessionLock>,
    core: Arc<RuntimeCore>,
}

impl Drop for LastHandle {
    fn drop(&mut self) {
        let close = close_with(self.lock.clone(), self.core.clone(), "other".to_owned());
        let spawned = self.core.spawn_task(async move {
            close.await;
        });
        if !spawned {
            // No runtime to run `SessionEnd` on: the session is forgotten without it.
            if let Ok(dispatcher) = self.lock.try_lock() {
                if !dispatcher.is_closed() {
                    self.core.forget_session(&dispatcher.shared);
                }
            }
        }
    }
}

/// A cloneable handle to an open session. Events dispatched through it are numbered and
/// delivered in order; [`close`](BusSession::close) ends the session with `SessionEnd`.
#[derive(Clone)]
pub struct BusSession {
    pub(crate) shared: Arc<SessionShared>,
    pub(crate) core: Arc<RuntimeCore>,
    handle: Arc<LastHandle>,
}

impl BusSession {
    /// A handle to the session `dispatcher` serves.
    pub(crate) fn new(dispatcher: Dispatcher, core: Arc<RuntimeCore>) -> Self {
        let shared = dispatcher.shared.clone();
        let lock = Arc::new(Mutex::new(dispatcher));
        let _ = shared
            .closer
            .set(closer(Arc::downgrade(&lock), Arc::downgrade(&core)));
        BusSession {
            shared,
            handle: Arc::new(LastHandle {
                lock,
                core: core.clone(),
            }),
            core,
        }
    }

    /// Runs `op` on the session's dispatcher, in turn with the other calls on this session.
    /// (Plain functions returning the future, down to `run_op`: each `async fn` layer would
    /// copy the one inside it.)
    fn run(&self, op: SessionOp) -> impl Future<Output = Result<Outcome, Error>> + Send + '_ {
        run_op(self.handle.lock.clone(), &self.core, op).map(move |done| match done {
            Ok(Some(outcome)) => Ok(*outcome),
            Ok(None) | Err(()) => Err(self.closed()),
        })
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The session's scratchpad (dropped at `SessionEnd`).
    pub fn scratchpad(&self) -> &Arc<Scratchpad> {
        &self.shared.scratchpad
    }

    /// Dispatches an event (turn and step 0) and returns the folded outcome.
    pub fn dispatch(
        &self,
        event: Event,
    ) -> impl Future<Output = Result<Outcome, Error>> + Send + '_ {
        self.dispatch_at(event, 0, 0)
    }

    /// Dispatches an event at a turn and step.
    pub fn dispatch_at(
        &self,
        event: Event,
        turn: u32,
        step: u32,
    ) -> impl Future<Output = Result<Outcome, Error>> + Send + '_ {
        self.run(SessionOp::Dispatch { event, turn, step })
    }

    /// Ends the session: `SessionEnd` with `reason`, after every earlier event reached every
    /// observer (ORD-4). Session hooks and the scratchpad are gone when this returns.
    pub async fn close(&self, reason: &str) -> Result<Outcome, Error> {
        self.close_at(reason, 0, 0).await
    }

    /// Ends the session like [`close`](BusSession::close), with `SessionEnd` at this turn and step.
    pub async fn close_at(&self, reason: &str, turn: u32, step: u32) -> Result<Outcome, Error> {
        self.run(SessionOp::Close {
            reason: reason.to_owned(),
            turn,
            step,
        })
        .await
    }

    /// A live stream of this session's envelopes, in sequence order, ending after `SessionEnd`.
    /// It starts with the kept history ([`BusSessionConfig::history`]), then follows live; a reader
    /// that does not keep up never slows the session: past [`BusSessionConfig::stream_buffer`] it
    /// skips what it missed, counted by [`EventStream::lagged`].
    pub fn events(&self) -> EventStream {
        self.shared.events()
    }

    /// What the kept history holds and has dropped to stay within its caps.
    pub fn history_stats(&self) -> HistoryStats {
        self.shared.history_stats()
    }

    /// A live stream of what the hooks did with each event ([`HookRuns`](crate::HookRuns):
    /// every matched hook's decision, status and latency), recorded as each dispatch finishes;
    /// kept and bounded like [`events`](BusSession::events), and ending with the session.
    pub fn hook_runs(&self) -> HookRunStream {
        self.shared.hook_runs()
    }

    /// Cancels the current turn: hook calls in flight see their cancellation token fire.
    pub fn cancel_turn(&self) {
        self.shared.cancel_turn();
    }

    /// Registers a hook for this session only; it is removed when the session ends. A session
    /// that is closing or closed refuses it.
    pub async fn register(&self, hook: impl Hook) -> Result<(), Error> {
        self.check_open()?;
        self.core
            .register_scoped(Arc::new(hook), Some(self.shared.id.clone()))
            .await
    }

    /// Removes a session hook.
    pub async fn unregister(&self, name: &str) -> Result<(), Error> {
        self.core
            .unregister_scoped(Some(self.shared.id.clone()), name)
            .await
    }

    /// Subscribes a user task to this session's events (see [`Bus::subscribe`](crate::Bus::subscribe)). A session
    /// that is closing or closed refuses it, so a subscription never outlives its session or
    /// sees a later session of the same id.
    pub async fn subscribe(&self, subscription: Subscription) -> Result<Mailbox, Error> {
        self.check_open()?;
        self.core
            .subscribe_scoped(subscription, Some(self.shared.id.clone()))
            .await
    }

    /// Makes the session's dispatcher panic (tests of its supervision).
    #[cfg(test)]
    pub(crate) async fn inject_panic(&self) {
        let _ = self.run(SessionOp::Panic).await;
    }

    /// Why a call got no answer: the session's dispatcher failed, or the session is closed.
    fn closed(&self) -> Error {
        match self.shared.failure.get() {
            Some(failure) => Error::ActorFailed(Box::new(failure.clone())),
            None => Error::SessionClosed(self.shared.id.clone()),
        }
    }

    fn check_open(&self) -> Result<(), Error> {
        if self
            .shared
            .closing
            .load(std::sync::atomic::Ordering::Acquire)
        {
            Err(self.closed())
        } else {
            Ok(())
        }
    }
}

impl std::fmt::Debug for BusSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusSession")
            .field("id", &self.shared.id)
            .finish()
    }
}
