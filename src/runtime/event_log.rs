//! A session's live event stream: every envelope the session dispatches, in sequence order, for
//! a UI or a service's Server-Sent Events.
//!
//! The dispatcher appends each envelope as it creates it (before any hook or observer sees it),
//! under a short lock with no `.await`, so a stream can neither miss an event unknowingly nor see
//! one twice, and a slow reader never slows the session. Everything is bounded:
//!
//! * readers share one ring of the last `buffer` envelopes (a broadcast channel); a reader that
//!   falls further behind skips what it missed, and its stream counts it
//!   ([`EventStream::lagged`]) — memory never grows with a slow reader;
//! * a session may keep its last `history` envelopes, within `history_bytes` (their JSON size),
//!   so that a reader that subscribes late still starts at the beginning; older envelopes are
//!   dropped and counted ([`HistoryStats`]).
//!
//! Beside the envelopes, the log keeps what the hooks did with each event once its dispatch
//! finished ([`HookRuns`]: every hook's decision, status and latency), for UIs that draw a
//! waterfall per event. Its readers ([`HookRunStream`]) are bounded the same way; its kept
//! records never outlive the envelopes they belong to.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;

use crate::model::event::{Envelope, EventKind};
use crate::model::outcome::{Decision, HookRun};

/// Envelopes a session's readers may fall behind by before they skip (the default of
/// [`BusSessionConfig::stream_buffer`](crate::BusSessionConfig::stream_buffer)).
pub const DEFAULT_STREAM_BUFFER: usize = 1024;

/// How much a session's log keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogBounds {
    /// Envelopes kept for late readers (0: none).
    pub history: usize,
    /// Bytes of JSON the kept envelopes may take (0: no byte cap).
    pub history_bytes: usize,
    /// Envelopes a reader may fall behind by (0: [`DEFAULT_STREAM_BUFFER`]).
    pub buffer: usize,
}

impl LogBounds {
    /// The slots of a reader's live buffer.
    fn buffer(&self) -> usize {
        match self.buffer {
            0 => DEFAULT_STREAM_BUFFER,
            n => n,
        }
    }
}

/// What a session's kept history holds and has dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryStats {
    /// Envelopes kept for late readers.
    pub kept: usize,
    /// Their size as JSON, in bytes.
    pub bytes: usize,
    /// Envelopes dropped from the history to stay within its caps.
    pub dropped: u64,
}

/// What the hooks did with one event: recorded when its dispatch finished, for every event that
/// at least one hook matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookRuns {
    /// The session.
    pub session_id: String,
    /// The event's sequence number (its envelope's `seq`).
    pub seq: u64,
    /// The event's kind.
    pub kind: EventKind,
    /// The folded decision.
    pub decision: Decision,
    /// Every matched hook, in fold order.
    pub runs: Vec<HookRun>,
}

/// A live broadcast, made when its first reader subscribes: a broadcast channel allocates its
/// whole buffer up front, which a session nobody reads should not pay for.
#[derive(Debug)]
enum Live<T> {
    NotYet,
    Open(broadcast::Sender<Arc<T>>),
    Closed,
}

impl<T> Live<T> {
    /// A receiver, opening the channel with `buffer` slots if nobody subscribed yet; `None`
    /// once closed.
    fn subscribe(&mut self, buffer: usize) -> Option<broadcast::Receiver<Arc<T>>> {
        match self {
            Live::Open(tx) => Some(tx.subscribe()),
            Live::Closed => None,
            Live::NotYet => {
                let (tx, rx) = broadcast::channel(buffer);
                *self = Live::Open(tx);
                Some(rx)
            }
        }
    }
}

type RunsLive = Live<HookRuns>;

/// The envelopes of one session, fanned out to its readers.
#[derive(Debug)]
pub(crate) struct EventLog {
    inner: Mutex<LogInner>,
}

#[derive(Debug)]
struct LogInner {
    bounds: LogBounds,
    history: VecDeque<(Arc<Envelope>, usize)>,
    stats: HistoryStats,
    /// Closed once the session ended: readers then end after what they hold.
    live: Live<Envelope>,
    /// Hook-run records kept for late readers: at most `history` of them, none older than the
    /// oldest kept envelope.
    runs_history: VecDeque<Arc<HookRuns>>,
    runs_live: RunsLive,
}

impl Default for EventLog {
    fn default() -> Self {
        Self::new(LogBounds::default())
    }
}

impl EventLog {
    /// A log with these bounds.
    pub fn new(bounds: LogBounds) -> Self {
        Self {
            inner: Mutex::new(LogInner {
                bounds,
                history: VecDeque::new(),
                stats: HistoryStats::default(),
                live: Live::NotYet,
                runs_history: VecDeque::new(),
                runs_live: RunsLive::NotYet,
            }),
        }
    }

    /// Appends an envelope and hands it to every reader.
    pub fn push(&self, env: &Arc<Envelope>) {
        let mut inner = self.inner.lock();
        match &inner.live {
            Live::Closed => return,
            Live::NotYet => {}
            // A send to no receiver keeps nothing.
            Live::Open(live) => {
                let _ = live.send(env.clone());
            }
        }
        if inner.bounds.history == 0 {
            return;
        }
        let size = if inner.bounds.history_bytes > 0 {
            json_size(env)
        } else {
            0
        };
        inner.history.push_back((env.clone(), size));
        inner.stats.bytes += size;
        let LogInner {
            bounds,
            history,
            stats,
            ..
        } = &mut *inner;
        while history.len() > bounds.history
            || (bounds.history_bytes > 0 && stats.bytes > bounds.history_bytes)
        {
            let Some((_, size)) = history.pop_front() else {
                break;
            };
            stats.bytes -= size;
            stats.dropped += 1;
        }
        stats.kept = history.len();
        inner.prune_runs();
    }

    /// Whether a hook-run record would be kept or read by anyone (the dispatcher skips building
    /// one otherwise).
    pub fn wants_runs(&self) -> bool {
        let inner = self.inner.lock();
        inner.bounds.history > 0 || matches!(inner.runs_live, RunsLive::Open(_))
    }

    /// Records what the hooks did with one event.
    pub fn push_runs(&self, runs: HookRuns) {
        let runs = Arc::new(runs);
        let mut inner = self.inner.lock();
        if matches!(inner.live, Live::Closed) {
            return;
        }
        if let RunsLive::Open(tx) = &inner.runs_live {
            let _ = tx.send(runs.clone());
        }
        if inner.bounds.history > 0 {
            inner.runs_history.push_back(runs);
            inner.prune_runs();
        }
    }

    /// Ends every stream after the envelopes already in it.
    pub fn close(&self) {
        let mut inner = self.inner.lock();
        inner.live = Live::Closed;
        inner.runs_live = RunsLive::Closed;
    }

    /// What the history holds and has dropped.
    pub fn stats(&self) -> HistoryStats {
        self.inner.lock().stats
    }

    /// A stream of the kept hook-run records, then every later one, ending when the session
    /// ends.
    pub fn subscribe_runs(&self) -> HookRunStream {
        let mut inner = self.inner.lock();
        let history: Vec<Arc<HookRuns>> = inner.runs_history.iter().cloned().collect();
        let buffer = inner.bounds.buffer();
        let live = inner.runs_live.subscribe(buffer);
        HookRunStream {
            inner: Replay::new(history, live),
        }
    }

    /// A stream of the kept history, then every later envelope, ending when the session ends.
    pub fn subscribe(&self) -> EventStream {
        let mut inner = self.inner.lock();
        // Under the lock: no envelope can be pushed between the history and the live stream.
        let history: Vec<Arc<Envelope>> = inner.history.iter().map(|(e, _)| e.clone()).collect();
        let buffer = inner.bounds.buffer();
        let live = inner.live.subscribe(buffer);
        EventStream {
            inner: Replay::new(history, live),
        }
    }
}

impl LogInner {
    /// Keeps the hook-run records within the history's count and no older than its oldest
    /// envelope.
    fn prune_runs(&mut self) {
        let oldest = self.history.front().map_or(u64::MAX, |(e, _)| e.seq);
        while self
            .runs_history
            .front()
            .is_some_and(|r| r.seq < oldest || self.runs_history.len() > self.bounds.history)
        {
            self.runs_history.pop_front();
        }
    }
}

/// The size of an envelope as JSON, counted without building the text.
fn json_size(env: &Envelope) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing an envelope cannot fail: it holds JSON values and plain fields.
    let _ = serde_json::to_writer(&mut count, env);
    count.0
}

/// What a reader of a session's log gets: the kept history, then the live broadcast, counting
/// what it skipped when it fell too far behind. Shared by [`EventStream`] and [`HookRunStream`].
#[derive(Debug)]
struct Replay<T> {
    history: std::vec::IntoIter<Arc<T>>,
    live: Option<BroadcastStream<Arc<T>>>,
    lagged: u64,
}

impl<T: Send + Sync + 'static> Replay<T> {
    fn new(history: Vec<Arc<T>>, live: Option<broadcast::Receiver<Arc<T>>>) -> Self {
        Self {
            history: history.into_iter(),
            live: live.map(BroadcastStream::new),
            lagged: 0,
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Arc<T>>> {
        if let Some(item) = self.history.next() {
            return Poll::Ready(Some(item));
        }
        loop {
            let Some(live) = self.live.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(live).poll_next(cx) {
                Poll::Ready(Some(Ok(item))) => return Poll::Ready(Some(item)),
                Poll::Ready(Some(Err(BroadcastStreamRecvError::Lagged(n)))) => {
                    self.lagged += n;
                }
                Poll::Ready(None) => {
                    self.live = None;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A live [`Stream`] of one session's envelopes, in sequence order; it ends after `SessionEnd`.
///
/// A reader that falls more than the session's stream buffer behind skips the envelopes it
/// missed; [`lagged`](EventStream::lagged) counts them, so a UI can say so.
///
/// Got from [`BusSession::events`](crate::BusSession::events) or
/// [`AgentSession::events`](crate::AgentSession::events).
#[derive(Debug)]
pub struct EventStream {
    inner: Replay<Envelope>,
}

impl EventStream {
    /// How many envelopes this reader skipped because it fell too far behind.
    pub fn lagged(&self) -> u64 {
        self.inner.lagged
    }
}

impl Stream for EventStream {
    type Item = Arc<Envelope>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next(cx)
    }
}

/// A live [`Stream`] of one session's [`HookRuns`] records, in the order their dispatches
/// finished; it ends when the session ends. Bounded like [`EventStream`]: a reader that falls
/// behind skips, counted by [`lagged`](HookRunStream::lagged).
///
/// Got from [`BusSession::hook_runs`](crate::BusSession::hook_runs) or
/// [`AgentSession::hook_runs`](crate::AgentSession::hook_runs).
#[derive(Debug)]
pub struct HookRunStream {
    inner: Replay<HookRuns>,
}

impl HookRunStream {
    /// How many records this reader skipped because it fell too far behind.
    pub fn lagged(&self) -> u64 {
        self.inner.lagged
    }
}

impl Stream for HookRunStream {
    type Item = Arc<HookRuns>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next(cx)
    }
}
