//! One dispatch's reply slots: where the actor hooks of one dispatch answer, and the one waker
//! that learns when the last of them did.
//!
//! A oneshot channel per hook call would cost an allocation per call and wake the dispatcher
//! at every answer. A [`Latch`] is one allocation per dispatch: a slot per actor hook call, a
//! count of the slots still waited on, and the dispatcher's waker, woken when that count
//! reaches zero (answers that come earlier are collected when the dispatcher next runs). Each
//! answer carries the time it was given, so a hook's latency is its own, not the time the
//! dispatcher happened to look.
//!
//! A slot is waited on until the hook answers, its [`ReplySlot`](crate::ReplySlot) is dropped
//! unanswered, or the dispatcher closes it (the hook timed out, the turn was cancelled, the
//! dispatch ended); closing wakes whoever waits in [`ReplySlot::closed`](crate::ReplySlot).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_util::task::AtomicWaker;
use parking_lot::Mutex;
use smallvec::SmallVec;
use tokio::time::Instant;

/// One finished slot in [`Latch::counts`].
const FINISHED: u64 = 1 << 32;
/// The waited-on count in [`Latch::counts`].
const WAITING: u64 = FINISHED - 1;

/// Where one hook call's answer stands.
enum Slot<T> {
    /// Waited on; the hook side's waker, if it waits for the slot to close.
    Waiting(Option<Waker>),
    /// Answered at this time.
    Answered(T, Instant),
    /// Its reply slot was dropped unanswered, at this time.
    Dropped(Instant),
    /// The dispatcher stopped waiting (timeout, cancelled turn, end of the dispatch).
    Closed,
    /// The dispatcher took the answer.
    Taken,
}

/// The reply slots of one dispatch.
pub(crate) struct Latch<T> {
    slots: SmallVec<[Mutex<Slot<T>>; 4]>,
    /// Slots still waited on (low 32 bits), and slots the hook side finished, answered or
    /// dropped (high 32 bits): one atomic, so an answer costs one read-modify-write. The
    /// dispatcher looks at the slots only when the finished count moved.
    counts: AtomicU64,
    /// The dispatcher, woken when no slot is waited on any more.
    waker: AtomicWaker,
    /// Bit `k` set: slot `k` (of the first 64) was closed. Lets the hook side see it without
    /// taking the slot's lock before a call.
    closed: AtomicU64,
}

/// What the dispatcher finds in a slot.
pub(crate) enum Taken<T> {
    /// Still waited on.
    Waiting,
    /// The answer (`None`: the reply slot was dropped unanswered) and when it came.
    Done(Option<T>, Instant),
}

impl<T> Latch<T> {
    /// A latch of `n` slots, all waited on (`n` is a count of hook calls: it fits the 32 bits
    /// it is counted in many times over).
    pub fn new(n: usize) -> Arc<Latch<T>> {
        debug_assert!((n as u64) < FINISHED, "a latch counts its slots in 32 bits");
        Arc::new(Latch {
            slots: (0..n).map(|_| Mutex::new(Slot::Waiting(None))).collect(),
            counts: AtomicU64::new(n as u64),
            waker: AtomicWaker::new(),
            closed: AtomicU64::new(0),
        })
    }

    /// A latch of `n` slots for the next dispatch: `spare` itself, reset, when nobody else
    /// holds it any more (one allocation less per dispatch), else a new one.
    pub fn renew(spare: Option<Arc<Latch<T>>>, n: usize) -> Arc<Latch<T>> {
        let Some(mut latch) = spare else {
            return Latch::new(n);
        };
        let Some(this) = Arc::get_mut(&mut latch) else {
            return Latch::new(n);
        };
        // Slots kept are reset in place; only a different count grows or shrinks the list.
        this.slots.truncate(n);
        for slot in this.slots.iter_mut() {
            *slot.get_mut() = Slot::Waiting(None);
        }
        let kept = this.slots.len();
        this.slots
            .extend((kept..n).map(|_| Mutex::new(Slot::Waiting(None))));
        *this.counts.get_mut() = n as u64;
        *this.closed.get_mut() = 0;
        // The last dispatch's task is not woken by this one's answers.
        drop(this.waker.take());
        latch
    }

    /// How many slots are still waited on.
    fn waiting(&self) -> u64 {
        self.counts.load(Ordering::Acquire) & WAITING
    }

    /// How many slots the hook side finished so far.
    pub fn finished(&self) -> usize {
        (self.counts.load(Ordering::Acquire) >> 32) as usize
    }

    /// Registers the dispatcher's waker; call before looking at the slots.
    pub fn register(&self, waker: &Waker) {
        self.waker.register(waker);
    }

    /// Takes slot `k`'s answer if it has one.
    pub fn take(&self, k: usize) -> Taken<T> {
        let mut slot = self.slots[k].lock();
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Answered(answer, at) => Taken::Done(Some(answer), at),
            Slot::Dropped(at) => Taken::Done(None, at),
            other => {
                *slot = other;
                Taken::Waiting
            }
        }
    }

    /// Stops waiting on slot `k`: its hook's [`ReplySlot::closed`](crate::ReplySlot) resolves.
    pub fn close(&self, k: usize) {
        let waker = {
            let mut slot = self.slots[k].lock();
            match &mut *slot {
                Slot::Waiting(waker) => {
                    let waker = waker.take();
                    *slot = Slot::Closed;
                    if k < 64 {
                        self.closed.fetch_or(1 << k, Ordering::Release);
                    }
                    self.counts.fetch_sub(1, Ordering::AcqRel);
                    waker
                }
                _ => None,
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Stops waiting on every slot.
    pub fn close_all(&self) {
        if self.waiting() > 0 {
            for k in 0..self.slots.len() {
                self.close(k);
            }
        }
    }

    /// The hook side finishes slot `k`: with its answer, or `None` when its reply slot is
    /// dropped unanswered. False if the dispatcher no longer waits on it.
    pub fn finish(&self, k: usize, answer: Option<T>) -> bool {
        let at = Instant::now();
        {
            let mut slot = self.slots[k].lock();
            if !matches!(*slot, Slot::Waiting(_)) {
                return false;
            }
            *slot = match answer {
                Some(answer) => Slot::Answered(answer, at),
                None => Slot::Dropped(at),
            };
        }
        // One more finished, one fewer waited on.
        let before = self.counts.fetch_add(FINISHED - 1, Ordering::AcqRel);
        if before & WAITING == 1 {
            self.waker.wake();
        }
        true
    }

    /// Whether the dispatcher stopped waiting on slot `k`.
    pub fn is_closed(&self, k: usize) -> bool {
        if k < 64 {
            return self.closed.load(Ordering::Acquire) & (1 << k) != 0;
        }
        matches!(*self.slots[k].lock(), Slot::Closed)
    }

    /// Ready once the dispatcher stopped waiting on slot `k` (or it was finished).
    pub fn poll_closed(&self, k: usize, cx: &mut Context<'_>) -> Poll<()> {
        let mut slot = self.slots[k].lock();
        match &mut *slot {
            Slot::Waiting(waker) => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Option<String> {
        Some(text.into())
    }

    #[test]
    fn answers_are_taken_once_and_the_last_one_counts_down_to_zero() {
        let latch = Latch::<String>::new(3);
        assert!(matches!(latch.take(0), Taken::Waiting));
        assert!(latch.finish(1, answer("b")));
        assert!(!latch.finish(1, answer("again")), "a slot is finished once");
        assert!(latch.finish(0, None));
        assert_eq!(latch.finished(), 2);
        assert_eq!(latch.waiting(), 1);
        match latch.take(1) {
            Taken::Done(Some(e), _) => assert_eq!(e, "b"),
            _ => panic!("slot 1 answered"),
        }
        assert!(matches!(latch.take(1), Taken::Waiting), "taken already");
        assert!(matches!(latch.take(0), Taken::Done(None, _)));
        latch.close(2);
        assert_eq!(latch.waiting(), 0);
        assert!(
            !latch.finish(2, answer("late")),
            "a closed slot takes no answer"
        );
        assert!(latch.is_closed(2));
        assert!(
            !latch.is_closed(0) && !latch.is_closed(1),
            "answered, not closed"
        );
    }

    #[test]
    fn closed_slots_are_seen_past_the_first_64_and_forgotten_on_renewal() {
        let latch = Latch::<String>::new(70);
        for k in [0, 63, 64, 69] {
            assert!(!latch.is_closed(k));
            latch.close(k);
            assert!(latch.is_closed(k), "slot {k} closed");
        }
        assert!(!latch.is_closed(1) && !latch.is_closed(65));
        let renewed = Latch::renew(Some(latch), 70);
        assert!(
            (0..70).all(|k| !renewed.is_closed(k)),
            "a renewed latch has no closed slot"
        );
    }

    #[test]
    fn closing_wakes_the_hook_side_and_the_last_answer_wakes_the_dispatcher() {
        use std::sync::atomic::AtomicBool;
        use std::task::Wake;
        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let hook = Arc::new(Flag(AtomicBool::new(false)));
        let dispatcher = Arc::new(Flag(AtomicBool::new(false)));
        let latch = Latch::<String>::new(2);
        latch.register(&Waker::from(dispatcher.clone()));
        let hook_waker = Waker::from(hook.clone());
        let mut cx = Context::from_waker(&hook_waker);
        assert!(latch.poll_closed(0, &mut cx).is_pending());
        latch.close(0);
        assert!(hook.0.load(Ordering::SeqCst), "closing woke the hook side");
        assert!(latch.poll_closed(0, &mut cx).is_ready());
        assert!(!dispatcher.0.load(Ordering::SeqCst));
        latch.finish(1, answer("x"));
        assert!(dispatcher.0.load(Ordering::SeqCst), "the last slot woke it");
    }
}
