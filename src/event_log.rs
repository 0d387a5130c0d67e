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

use crate::event::Envelope;

/// Envelopes a session's readers may fall behind by before they skip (the default of
/// [`SessionConfig::stream_buffer`](crate::SessionConfig::stream_buffer)).
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
    /// `None` once the session ended: readers then end after what they hold.
    live: Option<broadcast::Sender<Arc<Envelope>>>,
}

impl Default for EventLog {
    fn default() -> Self {
        Self::new(LogBounds::default())
    }
}

impl EventLog {
    /// A log with these bounds.
    pub fn new(bounds: LogBounds) -> Self {
        let buffer = if bounds.buffer == 0 {
            DEFAULT_STREAM_BUFFER
        } else {
            bounds.buffer
        };
        let (live, _) = broadcast::channel(buffer);
        Self {
            inner: Mutex::new(LogInner {
                bounds,
                history: VecDeque::new(),
                stats: HistoryStats::default(),
                live: Some(live),
            }),
        }
    }

    /// Appends an envelope and hands it to every reader.
    pub fn push(&self, env: &Arc<Envelope>) {
        let mut inner = self.inner.lock();
        let Some(live) = &inner.live else { return };
        // No reader: nothing is held (a send to no receiver keeps nothing).
        let _ = live.send(env.clone());
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
    }

    /// Ends every stream after the envelopes already in it.
    pub fn close(&self) {
        self.inner.lock().live = None;
    }

    /// What the history holds and has dropped.
    pub fn stats(&self) -> HistoryStats {
        self.inner.lock().stats
    }

    /// A stream of the kept history, then every later envelope, ending when the session ends.
    pub fn subscribe(&self) -> EventStream {
        let inner = self.inner.lock();
        // Under the lock: no envelope can be pushed between the history and the live stream.
        let history: Vec<Arc<Envelope>> = inner.history.iter().map(|(e, _)| e.clone()).collect();
        let live = inner
            .live
            .as_ref()
            .map(|tx| BroadcastStream::new(tx.subscribe()));
        EventStream {
            history: history.into_iter(),
            live,
            lagged: 0,
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

/// A live [`Stream`] of one session's envelopes, in sequence order; it ends after `SessionEnd`.
///
/// A reader that falls more than the session's stream buffer behind skips the envelopes it
/// missed; [`lagged`](EventStream::lagged) counts them, so a UI can say so.
///
/// Got from [`Session::events`](crate::Session::events) or
/// [`AgentSession::events`](crate::AgentSession::events).
#[derive(Debug)]
pub struct EventStream {
    history: std::vec::IntoIter<Arc<Envelope>>,
    live: Option<BroadcastStream<Arc<Envelope>>>,
    lagged: u64,
}

impl EventStream {
    /// How many envelopes this reader skipped because it fell too far behind.
    pub fn lagged(&self) -> u64 {
        self.lagged
    }
}

impl Stream for EventStream {
    type Item = Arc<Envelope>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(env) = self.history.next() {
            return Poll::Ready(Some(env));
        }
        loop {
            let Some(live) = self.live.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(live).poll_next(cx) {
                Poll::Ready(Some(Ok(env))) => return Poll::Ready(Some(env)),
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
