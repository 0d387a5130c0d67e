//! The runtime's kill switch: the control path every actor serves before its messages (ACT-4).
//!
//! Checking it must cost next to nothing, since actors check it before every message: the switch
//! is an atomic flag, set before the cancellation token fires. An actor joins the token's wait
//! list once (to be woken while idle), then reads the flag on each turn of its loop.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Fires once; every actor of the runtime stops at its next turn.
#[derive(Debug, Clone, Default)]
pub(crate) struct KillSwitch {
    token: CancellationToken,
    fired: Arc<AtomicBool>,
}

impl KillSwitch {
    /// Fires the switch.
    pub fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        self.token.cancel();
    }

    /// A watch for one actor.
    pub fn watch(&self) -> KillWatch {
        KillWatch {
            fired: self.fired.clone(),
            wait: Box::pin(self.token.clone().cancelled_owned()),
            armed: false,
        }
    }
}

/// One actor's view of the [`KillSwitch`].
pub(crate) struct KillWatch {
    fired: Arc<AtomicBool>,
    wait: Pin<Box<WaitForCancellationFutureOwned>>,
    armed: bool,
}

impl KillWatch {
    /// Ready once the switch fired; registers the task to be woken the first time it is Pending.
    pub fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        if !self.armed {
            self.armed = true;
            if self.wait.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }

    /// Runs `fut` unless the switch fires first (checked before every poll of `fut`).
    pub async fn guard<F: Future>(&mut self, fut: F) -> Option<F::Output> {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            if self.poll_fired(cx).is_ready() {
                return Poll::Ready(None);
            }
            fut.as_mut().poll(cx).map(Some)
        })
        .await
    }
}
