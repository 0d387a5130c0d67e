//! Sessions: the [`BusSession`] handle and the session actor that owns the session's
//! [`Dispatcher`](crate::runtime::dispatch::Dispatcher).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::model::error::{ActorFailure, ActorKind, Error};
use crate::model::event::Event;
use crate::model::hook::Hook;
use crate::model::outcome::Outcome;
use crate::model::scratchpad::Scratchpad;
use crate::runtime::actor::{Actor, OnPanic};
use crate::runtime::core::RuntimeCore;
use crate::runtime::dispatch::Dispatcher;
use crate::runtime::event_log::{EventStream, HistoryStats, HookRunStream};
use crate::runtime::mailbox::Mailbox;
pub use crate::runtime::session_state::BusSessionConfig;
use crate::runtime::session_state::{SessionMsg, SessionShared};
use crate::runtime::subscription::Subscription;

/// How many messages a session's mailbox holds.
const SESSION_MAILBOX: usize = 64;

/// The session actor: dispatches its session's events one at a time, in order. Closing ends
/// it; so does dropping every handle (with `SessionEnd` reason `other`), or the kill switch.
/// A panic stops it and fails the session: its callers get [`Error::ActorFailed`].
pub(crate) struct SessionActor {
    dispatcher: Dispatcher,
    rx: mpsc::Receiver<SessionMsg>,
}

impl SessionActor {
    /// The session's mailbox and its actor, not yet spawned.
    pub fn pair(dispatcher: Dispatcher) -> (mpsc::Sender<SessionMsg>, SessionActor) {
        let (tx, rx) = mpsc::channel(SESSION_MAILBOX);
        (tx, SessionActor { dispatcher, rx })
    }
}

impl Actor for SessionActor {
    const KIND: ActorKind = ActorKind::Session;
    const ON_PANIC: OnPanic = OnPanic::Stop;

    fn name(&self) -> String {
        self.dispatcher.shared.id.clone()
    }

    async fn run(&mut self) {
        loop {
            let msg = self.rx.recv().await;
            // Boxed per message: an idle session then holds only its mailbox and dispatcher,
            // not the room a dispatch in progress needs (issue: idle_session_bytes).
            if Box::pin(serve(&mut self.dispatcher, msg)).await {
                return;
            }
        }
    }

    fn failed(&mut self, failure: &ActorFailure) {
        self.dispatcher.fail(failure);
        self.rx.close();
    }
}

/// Serves one message; true when the session is over.
async fn serve(dispatcher: &mut Dispatcher, msg: Option<SessionMsg>) -> bool {
    match msg {
        Some(SessionMsg::Dispatch {
            event,
            turn,
            step,
            reply,
        }) => {
            let outcome = dispatcher.dispatch(*event, turn, step).await;
            let _ = reply.send(outcome);
            dispatcher.is_closed()
        }
        Some(SessionMsg::Close {
            reason,
            turn,
            step,
            reply,
        }) => {
            // Boxed: the rare path should not grow the hot dispatch future.
            let outcome = Box::pin(dispatcher.close(&reason, turn, step)).await;
            let _ = reply.send(outcome);
            true
        }
        None => {
            Box::pin(dispatcher.close("other", 0, 0)).await;
            true
        }
        #[cfg(test)]
        Some(SessionMsg::Panic) => panic!("session actor fault injected"),
    }
}

/// A cloneable handle to an open session. Events dispatched through it are numbered and
/// delivered in order; [`close`](BusSession::close) ends the session with `SessionEnd`.
#[derive(Clone)]
pub struct BusSession {
    pub(crate) shared: Arc<SessionShared>,
    pub(crate) tx: mpsc::Sender<SessionMsg>,
    pub(crate) core: Arc<RuntimeCore>,
}

impl BusSession {
    /// The session's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The session's scratchpad (dropped at `SessionEnd`).
    pub fn scratchpad(&self) -> &Arc<Scratchpad> {
        &self.shared.scratchpad
    }

    /// Dispatches an event (turn and step 0) and returns the folded outcome.
    pub async fn dispatch(&self, event: Event) -> Result<Outcome, Error> {
        self.dispatch_at(event, 0, 0).await
    }

    /// Dispatches an event at a turn and step.
    pub async fn dispatch_at(&self, event: Event, turn: u32, step: u32) -> Result<Outcome, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(SessionMsg::Dispatch {
                event: Box::new(event),
                turn,
                step,
                reply,
            })
            .await
            .map_err(|_| self.closed())?;
        rx.await.map(|outcome| *outcome).map_err(|_| self.closed())
    }

    /// Ends the session: `SessionEnd` with `reason`, after every earlier event reached every
    /// observer (ORD-4). Session hooks and the scratchpad are gone when this returns.
    pub async fn close(&self, reason: &str) -> Result<Outcome, Error> {
        self.close_at(reason, 0, 0).await
    }

    /// Ends the session like [`close`](BusSession::close), with `SessionEnd` at this turn and step.
    pub async fn close_at(&self, reason: &str, turn: u32, step: u32) -> Result<Outcome, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(SessionMsg::Close {
                reason: reason.to_owned(),
                turn,
                step,
                reply,
            })
            .await
            .map_err(|_| self.closed())?;
        rx.await.map(|outcome| *outcome).map_err(|_| self.closed())
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

    /// Subscribes a user task to this session's events (see [`Bus::subscribe`]). A session
    /// that is closing or closed refuses it, so a subscription never outlives its session or
    /// sees a later session of the same id.
    ///
    /// [`Bus::subscribe`]: crate::Bus::subscribe
    pub async fn subscribe(&self, subscription: Subscription) -> Result<Mailbox, Error> {
        self.check_open()?;
        self.core
            .subscribe_scoped(subscription, Some(self.shared.id.clone()))
            .await
    }

    /// Makes the session's actor panic (tests of its supervision).
    #[cfg(test)]
    pub(crate) async fn inject_panic(&self) {
        let _ = self.tx.send(SessionMsg::Panic).await;
    }

    /// Why a message got no answer: the session's actor failed, or the session is closed.
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
