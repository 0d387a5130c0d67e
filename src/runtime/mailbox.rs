//! Deliveries, reply slots and mailboxes: how an event reaches a hook actor, an observer, or a
//! user's own task subscribed with [`Bus::subscribe`](crate::Bus::subscribe).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;

use crate::model::action::Reply;
use crate::model::event::Envelope;
use crate::model::hook::HookCx;

/// Why a hook produced no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// It returned an error.
    Error(String),
    /// It panicked.
    Panic(String),
}

/// A hook's answer as it travels back: boxed (a reply is large and moves several times on its
/// way to the fold), and `None` for a reply that changes nothing.
pub(crate) type Answer = Result<crate::model::hook::ErasedReply, Failure>;

/// The slot a gate's answer goes into. Dropping it unanswered counts as a failure of the
/// subscriber (its failure policy applies), never as a hang.
#[derive(Debug)]
pub struct ReplySlot {
    tx: oneshot::Sender<Answer>,
}

impl ReplySlot {
    pub(crate) fn new() -> (ReplySlot, oneshot::Receiver<Answer>) {
        let (tx, rx) = oneshot::channel();
        (ReplySlot { tx }, rx)
    }

    /// Answers the event. Returns false if nobody waits any more (the call timed out).
    pub fn send(self, reply: impl Into<Reply>) -> bool {
        self.tx.send(Ok(Some(Box::new(reply.into())))).is_ok()
    }

    /// Answers with a failure; the subscriber's failure policy applies.
    pub fn fail(self, message: impl Into<String>) -> bool {
        self.tx.send(Err(Failure::Error(message.into()))).is_ok()
    }

    /// Whether the dispatcher stopped waiting (timeout or cancellation).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves when the dispatcher stops waiting for this answer.
    pub async fn closed(&mut self) {
        self.tx.closed().await;
    }

    pub(crate) fn answer(self, answer: Answer) -> bool {
        self.tx.send(answer).is_ok()
    }
}

/// One event delivered to a hook actor, an observer or a mailbox.
#[derive(Debug)]
pub struct Delivery {
    pub(crate) cx: HookCx,
    pub(crate) reply: Option<ReplySlot>,
    /// The dispatch's span: the hook's own `tracing` events nest under it.
    pub(crate) span: tracing::Span,
}

impl Delivery {
    /// The `dispatch` span of the event (session, event, sequence number): instrument the work
    /// done for this delivery with it, and its logs nest under the dispatch that caused them.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The event.
    pub fn envelope(&self) -> &Arc<Envelope> {
        self.cx.envelope()
    }

    /// The hook context: scratchpad and cancellation token.
    pub fn cx(&self) -> &HookCx {
        &self.cx
    }

    /// Whether an answer is expected (gate subscriptions); observers get none.
    pub fn expects_reply(&self) -> bool {
        self.reply.is_some()
    }

    /// Takes the reply slot, to answer later or from another task.
    pub fn take_reply(&mut self) -> Option<ReplySlot> {
        self.reply.take()
    }

    /// Answers the event (a no-op for observer deliveries). Returns false if nobody waits.
    pub fn reply(mut self, reply: impl Into<Reply>) -> bool {
        self.reply.take().is_some_and(|slot| slot.send(reply))
    }
}

/// What an observer's mailbox carries: events, and flush markers that the runtime uses to know
/// every earlier event was taken (SessionEnd waits for them, ORD-4).
#[derive(Debug)]
pub(crate) enum ObserverMsg {
    Event(Delivery),
    Flush(oneshot::Sender<()>),
}

enum Inbox {
    Hook(mpsc::Receiver<Delivery>),
    Observer(mpsc::Receiver<ObserverMsg>),
}

/// A subscriber's mailbox: a [`Stream`] of [`Delivery`]s. Gate subscriptions answer through
/// each delivery's reply slot; observer subscriptions get deliveries without one. Dropping the
/// mailbox unsubscribes in effect: later deliveries fail (gates) or are counted as dropped.
pub struct Mailbox {
    inbox: Inbox,
}

impl Mailbox {
    pub(crate) fn hook(rx: mpsc::Receiver<Delivery>) -> Self {
        Self {
            inbox: Inbox::Hook(rx),
        }
    }

    pub(crate) fn observer(rx: mpsc::Receiver<ObserverMsg>) -> Self {
        Self {
            inbox: Inbox::Observer(rx),
        }
    }

    /// The next delivery, or `None` once the subscription ended.
    pub async fn recv(&mut self) -> Option<Delivery> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        match &mut self.inbox {
            Inbox::Hook(rx) => rx.poll_recv(cx),
            Inbox::Observer(rx) => loop {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(ObserverMsg::Flush(ack))) => {
                        let _ = ack.send(());
                    }
                    Poll::Ready(Some(ObserverMsg::Event(d))) => return Poll::Ready(Some(d)),
                    Poll::Ready(None) => return Poll::Ready(None),
                    Poll::Pending => return Poll::Pending,
                }
            },
        }
    }
}

impl Stream for Mailbox {
    type Item = Delivery;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.get_mut().poll_recv(cx)
    }
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mailbox")
    }
}
