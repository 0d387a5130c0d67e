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
use crate::runtime::channel;
use crate::runtime::latch::Latch;

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
pub struct ReplySlot {
    /// The dispatch's slots, and which one is this call's.
    latch: Arc<Latch<Answer>>,
    index: usize,
    /// Answered (or failed) already: dropping it then says nothing more.
    done: bool,
}

impl ReplySlot {
    /// Slot `index` of a dispatch's latch.
    pub(crate) fn new(latch: &Arc<Latch<Answer>>, index: usize) -> ReplySlot {
        ReplySlot {
            latch: latch.clone(),
            index,
            done: false,
        }
    }

    /// Answers the event. Returns false if nobody waits any more (the call timed out).
    pub fn send(self, reply: impl Into<Reply>) -> bool {
        self.answer(Ok(Some(Box::new(reply.into()))))
    }

    /// Answers with a failure; the subscriber's failure policy applies.
    pub fn fail(self, message: impl Into<String>) -> bool {
        self.answer(Err(Failure::Error(message.into())))
    }

    /// Whether the dispatcher stopped waiting (timeout or cancellation).
    pub fn is_closed(&self) -> bool {
        self.latch.is_closed(self.index)
    }

    /// Resolves when the dispatcher stops waiting for this answer.
    pub async fn closed(&mut self) {
        std::future::poll_fn(|cx| self.poll_closed(cx)).await;
    }

    /// Ready once the dispatcher stopped waiting for this answer.
    pub(crate) fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.latch.poll_closed(self.index, cx)
    }

    pub(crate) fn answer(mut self, answer: Answer) -> bool {
        self.done = true;
        self.latch.finish(self.index, Some(answer))
    }
}

impl Drop for ReplySlot {
    /// Unanswered: the dispatcher learns at once that no answer will come.
    fn drop(&mut self) {
        if !self.done {
            self.latch.finish(self.index, None);
        }
    }
}

impl std::fmt::Debug for ReplySlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplySlot")
            .field("index", &self.index)
            .field("closed", &self.is_closed())
            .finish()
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
    /// Whether its dispatch stopped waiting for the answer: nobody would take it any more.
    pub(crate) fn is_settled(&self) -> bool {
        self.reply.as_ref().is_some_and(ReplySlot::is_closed)
    }

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
    Hook(channel::Receiver<Delivery>),
    Observer(mpsc::Receiver<ObserverMsg>),
}

/// A subscriber's mailbox: a [`Stream`] of [`Delivery`]s. Gate subscriptions answer through
/// each delivery's reply slot; observer subscriptions get deliveries without one. Dropping the
/// mailbox unsubscribes in effect: later deliveries fail (gates) or are counted as dropped.
pub struct Mailbox {
    inbox: Inbox,
}

impl Mailbox {
    pub(crate) fn hook(rx: channel::Receiver<Delivery>) -> Self {
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
