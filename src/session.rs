//! Sessions: the [`Session`] handle and the session actor that owns the session's
//! [`Dispatcher`](crate::dispatch::Dispatcher).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::bus::Bus;
use crate::dispatch::Dispatcher;
use crate::error::Error;
use crate::event::{Event, SessionFields};
use crate::event_log::{EventLog, EventStream, HistoryStats, HookRunStream, LogBounds};
use crate::hook::Hook;
use crate::mailbox::Mailbox;
use crate::outcome::Outcome;
use crate::registry::Snapshot;
use crate::scratchpad::Scratchpad;
use crate::Subscription;

/// How to open a session.
#[derive(Debug, Clone, Default)]
pub struct SessionConfig {
    /// The id; generated when `None`.
    pub id: Option<String>,
    /// The parent session's id, for subagents.
    pub parent: Option<String>,
    /// `cwd`, `transcript_path`, `permission_mode`, `agent_id`, `agent_type`.
    pub fields: SessionFields,
    /// How many envelopes [`Session::events`] replays to a reader that subscribes late
    /// (default 0: readers see events from the moment they subscribe).
    pub history: usize,
    /// The most bytes (as JSON) the kept history may take; older envelopes are dropped and
    /// counted (default 0: no byte cap).
    pub history_bytes: usize,
    /// How many envelopes a reader of [`Session::events`] may fall behind by before it skips
    /// (and counts) what it missed (default 0: [`DEFAULT_STREAM_BUFFER`](crate::DEFAULT_STREAM_BUFFER)).
    pub stream_buffer: usize,
}

impl SessionConfig {
    /// A session with a generated id.
    pub fn new() -> Self {
        Self::default()
    }
    /// Use this id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
    /// Set the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.fields.cwd = cwd.into();
        self
    }
    /// Set the permission mode shown to hooks.
    pub fn permission_mode(mut self, mode: impl Into<String>) -> Self {
        self.fields.permission_mode = Some(mode.into());
        self
    }
    /// Make this a child of `parent` (a subagent).
    pub fn parent(mut self, parent: impl Into<String>) -> Self {
        self.parent = Some(parent.into());
        self
    }
    /// Keep the last `n` envelopes for readers of [`Session::events`] that subscribe late.
    pub fn history(mut self, n: usize) -> Self {
        self.history = n;
        self
    }
    /// Keep at most `bytes` of history (as JSON).
    pub fn history_bytes(mut self, bytes: usize) -> Self {
        self.history_bytes = bytes;
        self
    }
    /// Let readers fall at most `n` envelopes behind.
    pub fn stream_buffer(mut self, n: usize) -> Self {
        self.stream_buffer = n;
        self
    }
}

/// State a session shares between its actor, its handles and the registry.
pub(crate) struct SessionShared {
    pub id: String,
    pub parent: Option<String>,
    pub fields: RwLock<SessionFields>,
    pub scratchpad: Arc<Scratchpad>,
    /// Global + session hooks merged, while the session has hooks of its own.
    pub hooks: ArcSwapOption<Snapshot>,
    /// The current turn's cancellation token; hook calls get children of it.
    turn: Mutex<Arc<CancellationToken>>,
    /// Bumped by every `cancel_turn`, before the token fires: a cheap "was the turn cancelled
    /// since" check for the dispatcher.
    turn_epoch: AtomicU64,
    /// The session actor's mailbox, weakly, for shutdown (ACT-5: no self-reference keeps it alive).
    pub mailbox: Mutex<Option<mpsc::WeakSender<SessionMsg>>>,
    /// The live event stream; created at open when history is kept, else on first subscription.
    pub log: OnceLock<EventLog>,
    log_bounds: LogBounds,
    /// Set when the session starts closing: it takes no more hooks or subscriptions (HK-5).
    pub closing: std::sync::atomic::AtomicBool,
}

impl SessionShared {
    pub fn new(id: String, config: &SessionConfig) -> Self {
        let bounds = LogBounds {
            history: config.history,
            history_bytes: config.history_bytes,
            buffer: config.stream_buffer,
        };
        Self {
            id,
            parent: config.parent.clone(),
            fields: RwLock::new(config.fields.clone()),
            scratchpad: Arc::new(Scratchpad::new()),
            hooks: ArcSwapOption::empty(),
            turn: Mutex::new(Arc::new(CancellationToken::new())),
            turn_epoch: AtomicU64::new(0),
            mailbox: Mutex::new(None),
            log: match config.history {
                0 => OnceLock::new(),
                _ => OnceLock::from(EventLog::new(bounds)),
            },
            log_bounds: bounds,
            closing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A stream of this session's envelopes (see [`EventLog`]).
    pub fn events(&self) -> EventStream {
        self.log
            .get_or_init(|| EventLog::new(self.log_bounds))
            .subscribe()
    }

    /// What the kept history holds and has dropped.
    pub fn history_stats(&self) -> HistoryStats {
        self.log.get().map(EventLog::stats).unwrap_or_default()
    }

    /// A stream of this session's hook-run records (see [`EventLog`]).
    pub fn hook_runs(&self) -> HookRunStream {
        self.log
            .get_or_init(|| EventLog::new(self.log_bounds))
            .subscribe_runs()
    }

    /// The current turn's token and epoch.
    pub fn turn(&self) -> (Arc<CancellationToken>, u64) {
        let token = self.turn.lock().clone();
        (token, self.turn_epoch.load(Ordering::Acquire))
    }

    /// Whether `cancel_turn` was called since `epoch`.
    pub fn turn_cancelled_since(&self, epoch: u64) -> bool {
        self.turn_epoch.load(Ordering::Acquire) != epoch
    }

    /// Cancels the current turn's token (hooks in flight see it) and arms a fresh one.
    pub fn cancel_turn(&self) {
        let old = {
            let mut turn = self.turn.lock();
            self.turn_epoch.fetch_add(1, Ordering::AcqRel);
            std::mem::take(&mut *turn)
        };
        old.cancel();
    }
}

/// What a session actor serves.
pub(crate) enum SessionMsg {
    Dispatch {
        // Boxed: the mailbox's slots are sized by the largest message, and an idle session
        // should cost little (issue: idle_session_bytes).
        event: Box<Event>,
        turn: u32,
        step: u32,
        reply: oneshot::Sender<Box<Outcome>>,
    },
    Close {
        reason: String,
        turn: u32,
        step: u32,
        reply: oneshot::Sender<Box<Outcome>>,
    },
}

/// The session actor: dispatches its session's events one at a time, in order. Closing ends
/// it; so does dropping every handle (with `SessionEnd` reason `other`), or the kill switch
/// (read before every poll, see `Bus::spawn_actor`).
pub(crate) async fn run_session_actor(
    mut dispatcher: Dispatcher,
    mut rx: mpsc::Receiver<SessionMsg>,
) {
    loop {
        let msg = rx.recv().await;
        // Boxed per message: an idle session then holds only its mailbox and dispatcher, not
        // the room a dispatch in progress needs (issue: idle_session_bytes).
        if Box::pin(serve(&mut dispatcher, msg)).await {
            return;
        }
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
    }
}

/// A cloneable handle to an open session. Events dispatched through it are numbered and
/// delivered in order; [`close`](Session::close) ends the session with `SessionEnd`.
#[derive(Clone)]
pub struct Session {
    pub(crate) shared: Arc<SessionShared>,
    pub(crate) tx: mpsc::Sender<SessionMsg>,
    pub(crate) bus: Bus,
}

impl Session {
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

    /// Ends the session like [`close`](Session::close), with `SessionEnd` at this turn and step.
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
    /// It starts with the kept history ([`SessionConfig::history`]), then follows live; a reader
    /// that does not keep up never slows the session: past [`SessionConfig::stream_buffer`] it
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
    /// kept and bounded like [`events`](Session::events), and ending with the session.
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
        self.bus
            .register_scoped(Arc::new(hook), Some(self.shared.id.clone()))
            .await
    }

    /// Removes a session hook.
    pub async fn unregister(&self, name: &str) -> Result<(), Error> {
        self.bus
            .unregister_scoped(Some(self.shared.id.clone()), name)
            .await
    }

    /// Subscribes a user task to this session's events (see [`Bus::subscribe`]). A session
    /// that is closing or closed refuses it, so a subscription never outlives its session or
    /// sees a later session of the same id.
    pub async fn subscribe(&self, subscription: Subscription) -> Result<Mailbox, Error> {
        self.check_open()?;
        self.bus
            .subscribe_scoped(subscription, Some(self.shared.id.clone()))
            .await
    }

    fn closed(&self) -> Error {
        Error::SessionClosed(self.shared.id.clone())
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

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.shared.id)
            .finish()
    }
}
