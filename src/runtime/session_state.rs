//! A session's configuration ([`BusSessionConfig`]) and the state its handle, its actor, its
//! dispatcher and the registry share ([`SessionShared`]), with the messages its actor serves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::model::error::ActorFailure;
use crate::model::event::{Event, SessionFields};
use crate::model::outcome::Outcome;
use crate::model::scratchpad::Scratchpad;
use crate::runtime::event_log::{EventLog, EventStream, HistoryStats, HookRunStream, LogBounds};
use crate::runtime::snapshot::Snapshot;

/// How to open a session.
#[derive(Debug, Clone, Default)]
pub struct BusSessionConfig {
    /// The id; generated when `None`.
    pub id: Option<String>,
    /// The parent session's id, for subagents.
    pub parent: Option<String>,
    /// `cwd`, `transcript_path`, `permission_mode`, `agent_id`, `agent_type`.
    pub fields: SessionFields,
    /// How many envelopes [`BusSession::events`] replays to a reader that subscribes late
    /// (default 0: readers see events from the moment they subscribe).
    ///
    /// [`BusSession::events`]: crate::BusSession::events
    pub history: usize,
    /// The most bytes (as JSON) the kept history may take; older envelopes are dropped and
    /// counted (default 0: no byte cap).
    pub history_bytes: usize,
    /// How many envelopes a reader of [`BusSession::events`] may fall behind by before it skips
    /// (and counts) what it missed (default 0: [`DEFAULT_STREAM_BUFFER`](crate::DEFAULT_STREAM_BUFFER)).
    ///
    /// [`BusSession::events`]: crate::BusSession::events
    pub stream_buffer: usize,
}

impl BusSessionConfig {
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
    /// Keep the last `n` envelopes for readers of [`BusSession::events`] that subscribe late.
    ///
    /// [`BusSession::events`]: crate::BusSession::events
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
    /// Fixed at open; every envelope shares them.
    pub fields: Arc<SessionFields>,
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
    /// Set when the session's actor (or agent loop) panicked and stopped.
    pub failure: OnceLock<ActorFailure>,
}

impl SessionShared {
    pub fn new(id: String, config: &BusSessionConfig) -> Self {
        let bounds = LogBounds {
            history: config.history,
            history_bytes: config.history_bytes,
            buffer: config.stream_buffer,
        };
        Self {
            id,
            parent: config.parent.clone(),
            fields: Arc::new(config.fields.clone()),
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
            failure: OnceLock::new(),
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
    /// Panics in the actor (tests of its supervision).
    #[cfg(test)]
    Panic,
}
