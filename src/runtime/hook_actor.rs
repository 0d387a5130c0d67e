//! The hook actor: one task per registered [`Hook`] that owns the hook and serves deliveries
//! from its mailbox, concurrently up to the hook's `max_concurrency`, with panics caught per call.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::CatchUnwind;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};

use crate::model::error::ActorKind;
use crate::model::hook::{call_hook, CallHook, Hook, HookCx, CANCEL_GRACE};
use crate::runtime::actor::{Actor, OnPanic};
use crate::runtime::channel;
use crate::runtime::mailbox::{Answer, Delivery, Failure};
use crate::sys::panics::{contained, panic_message, Contained};
use tracing::Instrument;

/// One hook call with its panics caught. `Unpin` and allocation-free beyond the hook's own
/// future, so the dispatcher can poll an inline hook in place.
pub(crate) struct Serving<'a> {
    call: CatchUnwind<AssertUnwindSafe<Contained<CallHook<'a>>>>,
}

impl Future for Serving<'_> {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        Pin::new(&mut self.call)
            .poll(cx)
            .map(|result| match result {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(e)) => Err(Failure::Error(e.to_string())),
                Err(panic) => Err(Failure::Panic(panic_message(panic.as_ref()))),
            })
    }
}

/// Starts the call of `hook` for the event in `cx`; a panic while starting it is a failure.
pub(crate) fn serving<'a>(hook: &'a dyn Hook, cx: &'a HookCx) -> Result<Serving<'a>, Failure> {
    std::panic::catch_unwind(AssertUnwindSafe(|| contained(|| call_hook(hook, cx))))
        .map(|call| Serving {
            call: AssertUnwindSafe(Contained::new(call)).catch_unwind(),
        })
        .map_err(|panic| Failure::Panic(panic_message(panic.as_ref())))
}

/// Runs `hook` for the event in `cx`, turning a panic into a [`Failure`].
pub(crate) async fn serve(hook: &dyn Hook, cx: &HookCx) -> Answer {
    match serving(hook, cx) {
        Ok(call) => call.await,
        Err(failure) => Err(failure),
    }
}

/// One delivery: skipped if nobody waits any more; stopped when the dispatcher stops waiting
/// (the hook timed out, or the turn was cancelled), which it learns from the reply slot.
///
/// One `async fn` with the call polled in place (no nested ones): its size is paid on every
/// call, in the actor's own future or in the box of a call served beside it.
async fn serve_delivery(hook: &dyn Hook, delivery: Delivery) {
    let Delivery { cx, reply, span } = delivery;
    let Some(slot) = reply else {
        // Hook actors always get a reply slot; a delivery without one is served all the same.
        let _ = serve(hook, &cx).instrument(span).await;
        return;
    };
    if slot.is_closed() {
        return;
    }
    // The call's own token: firing it when the dispatcher stops waiting stops this call
    // alone, not the other hooks of the dispatch.
    let cx = cx.with_own_token();
    let mut call = match span.in_scope(|| serving(hook, &cx)) {
        Ok(call) => call,
        Err(failure) => {
            slot.answer(Err(failure));
            return;
        }
    };
    // The call first: most answer at once, before the slot is even looked at.
    let answer = std::future::poll_fn(|task| {
        let _entered = span.enter();
        if let Poll::Ready(answer) = Pin::new(&mut call).poll(task) {
            return Poll::Ready(Some(answer));
        }
        slot.poll_closed(task).map(|()| None)
    })
    .await;
    match answer {
        Some(answer) => {
            // The call and this context go before the answer: the dispatcher, woken by it,
            // then holds the last reference to the dispatch's scope and envelope and frees
            // them on its own worker, where they were allocated. A panic while the call is
            // dropped still comes after the answer, as when the call outlived it.
            let dropped = std::panic::catch_unwind(AssertUnwindSafe(move || drop(call)));
            drop(cx);
            slot.answer(answer);
            if let Err(panic) = dropped {
                std::panic::resume_unwind(panic);
            }
        }
        None => {
            // The token fires first; the call gets a short grace to see it. Boxed: the rare
            // path's timer should not grow every call's future.
            cx.cancel_own();
            let _ = Box::pin(tokio::time::timeout(CANCEL_GRACE, call.instrument(span))).await;
        }
    }
}

/// A hook's actor: owns the hook and serves deliveries from its mailbox, concurrently up to the
/// hook's `max_concurrency`. Ends when every sender is gone and the in-flight calls have
/// finished (ACT-5). A delivery is polled as it arrives. One call at a time is served in place,
/// inside the actor's own future; a delivery that comes while that place is taken gets a box of
/// its own in the in-flight set. A quick hook thus costs one turn of the loop and no allocation
/// beyond its own future.
///
/// Panics inside a call are caught around the call (the dispatcher reports them); a panic of
/// the loop itself restarts it with the same hook and mailbox, and the calls that were in flight
/// fail by their hook's policy (their reply slots are dropped).
pub(crate) struct HookActor {
    hook: Arc<dyn Hook>,
    rx: channel::Receiver<Delivery>,
    limit: usize,
}

impl HookActor {
    /// The mailbox and the actor, not yet spawned.
    pub fn pair(
        hook: Arc<dyn Hook>,
        capacity: usize,
        max_concurrency: Option<usize>,
    ) -> (channel::Sender<Delivery>, HookActor) {
        let (tx, rx) = channel::channel_settling(capacity, Delivery::is_settled);
        let actor = HookActor {
            hook,
            rx,
            limit: max_concurrency.unwrap_or(usize::MAX).max(1),
        };
        (tx, actor)
    }
}

impl Actor for HookActor {
    const KIND: ActorKind = ActorKind::Hook;
    const ON_PANIC: OnPanic = OnPanic::Restart;

    fn name(&self) -> String {
        self.hook.name().to_owned()
    }

    async fn run(&mut self) {
        let HookActor { hook, rx, limit } = self;
        let limit = *limit;
        let mut inflight = FuturesUnordered::new();
        let mut open = true;
        // Calls borrow the hook from here: the actor outlives every call it holds.
        let hook: &dyn Hook = hook.as_ref();
        // One call is served in place, in this future, with no allocation: a delivery goes
        // here when it is free, and to a box of its own in `inflight` when it is not.
        let mut here = std::pin::pin!(no_call(|d| serve_delivery(hook, d)));
        std::future::poll_fn(|cx| loop {
            if let Some(call) = here.as_mut().as_pin_mut() {
                if call.poll(cx).is_ready() {
                    here.set(None);
                }
            }
            // Polled only when it holds calls: polling registers the task's waker each time.
            while !inflight.is_empty() {
                if let Poll::Ready(Some(())) = inflight.poll_next_unpin(cx) {
                    continue;
                }
                break;
            }
            let running = inflight.len() + usize::from(here.is_some());
            if open && running < limit {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(delivery)) if here.is_none() => {
                        here.set(Some(serve_delivery(hook, delivery)));
                        continue;
                    }
                    Poll::Ready(Some(delivery)) => {
                        let mut call = Box::pin(serve_delivery(hook, delivery));
                        if call.as_mut().poll(cx).is_pending() {
                            inflight.push(call);
                        }
                        continue;
                    }
                    Poll::Ready(None) => {
                        open = false;
                        continue;
                    }
                    Poll::Pending => {}
                }
            }
            if !open && inflight.is_empty() && here.is_none() {
                return Poll::Ready(());
            }
            return Poll::Pending;
        })
        .await
    }
}

/// No call yet, typed as the calls `serve` makes (an `async fn`'s future cannot be named).
fn no_call<F>(_serve: impl Fn(Delivery) -> F) -> Option<F> {
    None
}
