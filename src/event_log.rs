//! A session's live event stream: every envelope the session dispatches, in sequence order, for
//! a UI or a service's Server-Sent Events.
//!
//! The dispatcher appends each envelope as it creates it (before any hook or observer sees it),
//! under a short lock with no `.await`, so a stream can neither miss an event nor see one twice,
//! and a slow reader never slows the session: each reader has its own unbounded queue. A session
//! may keep its last `history` envelopes so that a reader that subscribes late still starts at
//! the beginning.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::event::Envelope;

/// The envelopes of one session, fanned out to its readers.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    inner: Mutex<LogInner>,
}

#[derive(Debug, Default)]
struct LogInner {
    history: VecDeque<Arc<Envelope>>,
    capacity: usize,
    readers: Vec<mpsc::UnboundedSender<Arc<Envelope>>>,
    closed: bool,
}

impl EventLog {
    /// A log that keeps the last `capacity` envelopes for late readers.
    pub fn with_history(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(LogInner {
                capacity,
                ..LogInner::default()
            }),
        }
    }

    /// Appends an envelope and hands it to every reader.
    pub fn push(&self, env: &Arc<Envelope>) {
        let mut inner = self.inner.lock();
        if inner.closed {
            return;
        }
        if inner.capacity > 0 {
            if inner.history.len() == inner.capacity {
                inner.history.pop_front();
            }
            inner.history.push_back(env.clone());
        }
        inner.readers.retain(|r| r.send(env.clone()).is_ok());
    }

    /// Ends every stream after the envelopes already in it.
    pub fn close(&self) {
        let mut inner = self.inner.lock();
        inner.closed = true;
        inner.readers.clear();
    }

    /// A stream of the kept history, then every later envelope, ending when the session ends.
    pub fn subscribe(&self) -> EventStream {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.inner.lock();
        for env in &inner.history {
            // The receiver is alive: it is still in this function.
            let _ = tx.send(env.clone());
        }
        if !inner.closed {
            inner.readers.push(tx);
        }
        EventStream {
            inner: UnboundedReceiverStream::new(rx),
        }
    }
}

/// A live [`Stream`] of one session's envelopes, in sequence order; it ends after `SessionEnd`.
///
/// Got from [`Session::events`](crate::Session::events) or
/// [`AgentSession::events`](crate::AgentSession::events).
#[derive(Debug)]
pub struct EventStream {
    inner: UnboundedReceiverStream<Arc<Envelope>>,
}

impl Stream for EventStream {
    type Item = Arc<Envelope>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx)
    }
}
