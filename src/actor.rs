//! The hook actor: one task per registered [`Hook`] that owns the hook and serves deliveries
//! from its mailbox, concurrently up to the hook's `max_concurrency`, with panics caught per call.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::hook::{call_hook, Hook, HookCx};
use crate::mailbox::{Answer, Delivery, Failure};

/// Runs `hook` for the event in `cx`, turning a panic into a [`Failure`].
pub(crate) async fn serve(hook: &dyn Hook, cx: &HookCx) -> Answer {
    match AssertUnwindSafe(call_hook(hook, cx)).catch_unwind().await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err(Failure::Error(e.to_string())),
        Err(panic) => Err(Failure::Panic(panic_message(panic.as_ref()))),
    }
}

pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}

/// One delivery: skipped if nobody waits any more; dropped when the dispatcher stops waiting
/// (the hook timed out, or the turn was cancelled), which it learns from the reply slot.
async fn serve_delivery(hook: Arc<dyn Hook>, delivery: Delivery) {
    let Delivery { cx, reply } = delivery;
    match reply {
        Some(mut slot) => {
            if slot.is_closed() {
                return;
            }
            tokio::select! {
                biased;
                _ = slot.closed() => {}
                answer = serve(hook.as_ref(), &cx) => {
                    slot.answer(answer);
                }
            }
        }
        None => {
            let _ = serve(hook.as_ref(), &cx).await;
        }
    }
}

/// The actor loop. Ends when `kill` fires, or when every sender is gone and the in-flight calls
/// have finished (ACT-5).
pub(crate) async fn run_hook_actor(
    hook: Arc<dyn Hook>,
    mut rx: mpsc::Receiver<Delivery>,
    max_concurrency: Option<usize>,
    kill: CancellationToken,
) {
    let limit = max_concurrency.unwrap_or(usize::MAX);
    let mut inflight = FuturesUnordered::new();
    let mut open = true;
    // Registered once: a fresh `cancelled()` per message would take the token's lock each time.
    let killed = kill.cancelled();
    tokio::pin!(killed);
    while open || !inflight.is_empty() {
        tokio::select! {
            biased;
            _ = &mut killed => return,
            Some(()) = inflight.next(), if !inflight.is_empty() => {}
            msg = rx.recv(), if open && inflight.len() < limit => match msg {
                Some(delivery) => inflight.push(serve_delivery(hook.clone(), delivery)),
                None => open = false,
            },
        }
    }
}
