//! A session's configuration ([`BusSessionConfig`]) and the state its handles, its dispatcher
//! and the registry share ([`SessionShared`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use futures_util::task::AtomicWaker;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::model::error::ActorFailure;
use crate::model::event::SessionFields;
use crate::model::hook::Returns;
use crate::model::scratchpad::Scratchpad;
use crate::runtime::event_log::{EventLog, EventStream, HistoryStats, HookRunStream, LogBounds};
use crate::runtime::snapshot::SnapshotRef;

/// How to open a session.
#[derive(Debug, Clone, Default)]
pub struct BusSessionConfig {
    /// The id; generated when `None`.
    pub id: Option<String>,
    /// The parent session's id, for subagents.
    pub parent: Option<String>,
    /// `cwd`, `transcript_path`, `permission_mode`, `agent_id`, `agent_type`.
    pub fields: SessionFields,
    /// How many envelopes [`BusSession::events`](crate::BusSession::events) replays to a reader that subscribes late
    /// (default 0: readers see events from the moment they subscribe).
    pub history: usize,
    /// The most bytes (as JSON) the kept history may take; older envelopes are dropped and
    /// counted (default 0: no byte cap).
    pub history_bytes: usize,
    /// How many envelopes a reader of [`BusSession::events`](crate::BusSession::events) may fall behind by before it skips
    /// (and counts) what it missed (default 0: [`DEFAULT_STREAM_BUFFER`](crate::DEFAULT_STREAM_BUFFER)).
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
    /// Keep the last `n` envelopes for readers of [`BusSession::events`](crate::BusSession::events) that subscribe late.
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

/// Closes a session with `SessionEnd` (this reason); resolves to whether it was open.
pub(crate) type Closer =
    Box<dyn Fn(&str) -> Option<futures_util::future::BoxFuture<'static, bool>> + Send + Sync>;

/// State a session shares between its handles, its dispatcher and the registry.
pub(crate) struct SessionShared {
    pub id: String,
    pub parent: Option<String>,
    /// Fixed at open; every envelope shares them.
    pub fields: Arc<SessionFields>,
    pub scratchpad: Arc<Scratchpad>,
    /// Envelopes observers handed back, freed at the session's next dispatch.
    pub returns: Arc<Returns>,
    /// Global + session hooks merged, while the session has hooks of its own.
    pub hooks: ArcSwapOption<SnapshotRef>,
    /// The current turn's cancellation token; hook calls get children of it.
    turn: Mutex<Arc<CancellationToken>>,
    /// Bumped by every `cancel_turn`, before the token fires: a cheap "was the turn cancelled
    /// since" check for the dispatcher.
    turn_epoch: AtomicU64,
    /// The dispatch waiting on hooks now, woken by `cancel_turn` (one at a time: the session's
    /// lock serializes its dispatches).
    pub turn_waker: AtomicWaker,
    /// How shutdown closes the session: through its dispatcher, held weakly (ACT-5: only the
    /// handles keep it alive). `None` from it when the session is gone already.
    pub closer: OnceLock<Closer>,
    /// The live event stream; created at open when history is kept, else on first subscription.
    pub log: OnceLock<EventLog>,
    log_bounds: LogBounds,
    /// Set when the session starts closing: it takes no more hooks or subscriptions (HK-5).
    pub closing: std::sync::atomic::AtomicBool,
    /// Set when the session's dispatcher (or agent loop) panicked and stopped.
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
            returns: Arc::new(Returns::default()),
            hooks: ArcSwapOption::empty(),
            turn: Mutex::new(Arc::new(CancellationToken::new())),
            turn_epoch: AtomicU64::new(0),
            turn_waker: AtomicWaker::new(),
            closer: OnceLock::new(),
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
        let turn = self.turn.lock();
        (turn.clone(), self.turn_epoch.load(Ordering::Acquire))
    }

    /// The current turn's epoch (bumped by every `cancel_turn`), without the lock.
    pub fn turn_epoch(&self) -> u64 {
        self.turn_epoch.load(Ordering::Acquire)
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
        self.turn_waker.wake();
    }
}
