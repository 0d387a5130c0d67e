//! The bounded channel a hook's deliveries travel in: many senders (the sessions' dispatchers),
//! one receiver (the hook's actor, or a gate subscriber's [`Mailbox`](crate::Mailbox)).
//!
//! It does what `tokio::sync::mpsc`'s bounded channel does for this use, at about a third of
//! its cost per message: a delivery is one short lock around a `VecDeque` and one wake-up, and
//! taking it is one short lock, with no semaphore to release (an empty queue is seen without
//! the lock). Only a value that finds the queue empty wakes the receiver: one that finds values
//! before it is taken in the same run, since the receiver waits again only on an empty queue.
//!
//! Senders wait for room only when the queue is full, which is rare. They wait on a [`Notify`]
//! that the receiver pokes, one waiter per value taken, only when someone waits; while anyone
//! waits, room goes to the waiters first, so a sender that had to wait is not overtaken for
//! ever by ones that did not. The receiver takes part in tokio's cooperative budget as tokio's
//! own channels do, so a busy mailbox cannot starve the other tasks of its worker.
//!
//! A value may stop being wanted while it waits (a delivery whose dispatch stopped waiting for
//! it). A channel made with a `settled` test drops such values when its queue grows long (or
//! is full), before it takes a new value, so that few of them hold memory (a delivery holds
//! its event): about [`PRUNE_FLOOR`] of them, or as many as the values still wanted.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Why [`Sender::try_send`] gave the value back.
#[derive(Debug)]
pub(crate) enum TrySendError<T> {
    /// The queue holds `capacity` values already.
    Full(T),
    /// The receiver is gone.
    Closed(T),
}

/// The queue length at which settled values are first looked for.
pub(crate) const PRUNE_FLOOR: usize = 1024;

struct Queue<T> {
    items: VecDeque<T>,
    /// The receiver was dropped: nothing is taken any more.
    closed: bool,
    /// The length at which a send drops the settled values first: twice what the last look
    /// kept (at least [`PRUNE_FLOOR`]), so each look is paid for by as many sends.
    prune_at: usize,
}

impl<T> Queue<T> {
    /// Takes the values nobody waits for out of the queue (to be dropped outside the lock).
    fn prune(&mut self, settled: fn(&T) -> bool) -> Vec<T> {
        let (gone, kept): (Vec<T>, Vec<T>) = self.items.drain(..).partition(settled);
        self.items = kept.into();
        self.prune_at = (2 * self.items.len()).max(PRUNE_FLOOR);
        gone
    }
}

struct Chan<T> {
    queue: Mutex<Queue<T>>,
    capacity: usize,
    /// Whether a queued value is no longer wanted (see [`channel_settling`]).
    settled: Option<fn(&T) -> bool>,
    /// How many values are queued, read without the lock: an empty queue is seen so.
    len: AtomicUsize,
    /// The receiver's task, woken by a value or by the last sender leaving.
    receiver: AtomicWaker,
    senders: AtomicUsize,
    /// Senders waiting for room, and how many there are (the receiver pokes them only then).
    room: Notify,
    waiting: AtomicUsize,
}

/// A bounded channel with room for `capacity` values (at least one).
#[cfg(test)]
pub(crate) fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    make(capacity, None)
}

/// A bounded channel with room for `capacity` values, whose queue, once it is long, drops
/// the values `settled` says nobody waits for any more before it takes a new one.
pub(crate) fn channel_settling<T>(
    capacity: usize,
    settled: fn(&T) -> bool,
) -> (Sender<T>, Receiver<T>) {
    make(capacity, Some(settled))
}

fn make<T>(capacity: usize, settled: Option<fn(&T) -> bool>) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan {
        queue: Mutex::new(Queue {
            items: VecDeque::new(),
            closed: false,
            prune_at: PRUNE_FLOOR,
        }),
        capacity: capacity.max(1),
        settled,
        len: AtomicUsize::new(0),
        receiver: AtomicWaker::new(),
        senders: AtomicUsize::new(1),
        room: Notify::new(),
        waiting: AtomicUsize::new(0),
    });
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// The sending half; cloning it adds a sender.
pub(crate) struct Sender<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Queues `value` if there is room and the receiver is still there. Room goes to the
    /// senders already waiting for it first: while one waits, this finds the queue full.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        self.push(value, true)
    }

    fn push(&self, value: T, behind_waiters: bool) -> Result<(), TrySendError<T>> {
        // Declared before the lock's guard, so dropped after it: a value's own `Drop` may do
        // anything.
        let mut settled = Vec::new();
        let wake = {
            let mut queue = self.chan.queue.lock();
            if queue.closed {
                return Err(TrySendError::Closed(value));
            }
            if behind_waiters && self.chan.waiting.load(Ordering::SeqCst) > 0 {
                return Err(TrySendError::Full(value));
            }
            // Settled values go only before a value that is queued (or refused for a queue
            // still full): the queue is never left emptier than the receiver last saw it
            // without a value to take.
            if let Some(is_settled) = self.chan.settled {
                if queue.items.len() >= queue.prune_at.min(self.chan.capacity) {
                    settled = queue.prune(is_settled);
                    self.chan.len.fetch_sub(settled.len(), Ordering::Relaxed);
                }
            }
            if queue.items.len() >= self.chan.capacity {
                Err(value)
            } else {
                queue.items.push_back(value);
                self.chan.len.fetch_add(1, Ordering::Release);
                // Woken only by a value that finds the queue empty: the receiver, woken by
                // the value before this one, takes this one too before it waits again.
                Ok(queue.items.len() == 1)
            }
        };
        if !settled.is_empty() {
            // Room made by dropping settled values goes to senders that wait for it.
            let waiting = self.chan.waiting.load(Ordering::SeqCst);
            for _ in 0..settled.len().min(waiting) {
                self.chan.room.notify_one();
            }
        }
        match wake {
            Err(value) => Err(TrySendError::Full(value)),
            Ok(wake) => {
                if wake {
                    self.chan.receiver.wake();
                }
                Ok(())
            }
        }
    }

    /// Queues `value`, waiting for room; gives it back if the receiver is gone.
    pub async fn send(&self, mut value: T) -> Result<(), T> {
        let chan = &self.chan;
        chan.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&chan.waiting);
        loop {
            // Registered before the queue is looked at: room made after the look wakes us.
            let notified = chan.room.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            match self.push(value, false) {
                Ok(()) => return Ok(()),
                Err(TrySendError::Closed(v)) => return Err(v),
                Err(TrySendError::Full(v)) => value = v,
            }
            notified.await;
        }
    }
}

/// Counts a sender out of the waiters however its `send` ends (done, or dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.chan.senders.fetch_add(1, Ordering::Relaxed);
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    /// The last sender gone: the receiver ends once it took what is queued.
    fn drop(&mut self) {
        if self.chan.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.chan.receiver.wake();
        }
    }
}

/// The receiving half. Dropping it closes the channel and drops what is queued.
pub(crate) struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Receiver<T> {
    /// The next value; `None` once every sender is gone and the queue is empty.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let chan = &self.chan;
        loop {
            if chan.len.load(Ordering::Acquire) == 0 {
                // Registered before the second look: a value queued after it wakes this task.
                chan.receiver.register(cx.waker());
                if chan.len.load(Ordering::Acquire) == 0 {
                    if chan.senders.load(Ordering::Acquire) == 0 {
                        // A value queued by the last sender before it left is still taken
                        // first.
                        return Poll::Ready(self.take());
                    }
                    return Poll::Pending;
                }
            }
            let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
            if let Some(value) = self.take() {
                coop.made_progress();
                return Poll::Ready(Some(value));
            }
            // Nothing after all: the queue is empty, not ended (a send drops settled values
            // only with its own value queued in the same hold of the lock, so this is not
            // expected). Look again, from the start.
        }
    }

    fn take(&self) -> Option<T> {
        let value = {
            let mut queue = self.chan.queue.lock();
            let value = queue.items.pop_front();
            if value.is_some() {
                self.chan.len.fetch_sub(1, Ordering::Relaxed);
            }
            if queue.items.is_empty()
                && (queue.prune_at != PRUNE_FLOOR || queue.items.capacity() > 4 * PRUNE_FLOOR)
            {
                // Drained: the next look at settled values comes at the floor again, and a
                // buffer grown by a burst goes back to the floor's size.
                queue.prune_at = PRUNE_FLOOR;
                queue.items.shrink_to(PRUNE_FLOOR);
            }
            value
        };
        if value.is_some() && self.chan.waiting.load(Ordering::SeqCst) > 0 {
            // One slot freed, one waiter told (a waiter that stopped waiting passes it on).
            self.chan.room.notify_one();
        }
        value
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // Dropped outside the lock: a value's own `Drop` may do anything.
        let queued = {
            let mut queue = self.chan.queue.lock();
            queue.closed = true;
            std::mem::take(&mut queue.items)
        };
        self.chan.room.notify_waiters();
        // The actor's task is done with: its waker is not kept alive by the senders.
        drop(self.chan.receiver.take());
        drop(queued);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    impl<T> Receiver<T> {
        async fn recv(&mut self) -> Option<T> {
            std::future::poll_fn(|cx| self.poll_recv(cx)).await
        }
    }

    #[tokio::test]
    async fn values_arrive_in_order_and_the_end_follows_the_last_sender() {
        let (tx, mut rx) = channel(4);
        let tx2 = tx.clone();
        tx.try_send(1).unwrap();
        tx2.try_send(2).unwrap();
        drop(tx);
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(rx.recv().await, Some(2));
        let end = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        assert!(!end.is_finished(), "a sender is left: no end yet");
        drop(tx2);
        assert_eq!(end.await.unwrap(), None);
    }

    #[test]
    fn the_first_value_wakes_a_waiting_receiver_and_the_ones_behind_it_are_taken_too() {
        use std::sync::atomic::AtomicUsize;
        use std::task::{Wake, Waker};
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let (tx, mut rx) = channel(8);
        for round in 1..=2 {
            assert!(
                rx.poll_recv(&mut cx).is_pending(),
                "empty: the receiver waits"
            );
            for v in 0..3 {
                tx.try_send(v).unwrap();
            }
            assert_eq!(
                count.0.load(Ordering::SeqCst),
                round,
                "woken once per round"
            );
            for v in 0..3 {
                assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(v)));
            }
        }
        assert!(rx.poll_recv(&mut cx).is_pending());
        drop(tx);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            3,
            "the last sender leaving wakes it"
        );
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(None));
    }

    #[tokio::test]
    async fn a_full_queue_refuses_then_takes_a_waiting_send_once_there_is_room() {
        let (tx, mut rx) = channel(1);
        tx.try_send(1).unwrap();
        assert!(matches!(tx.try_send(2), Err(TrySendError::Full(2))));
        let tx2 = tx.clone();
        let waiting = tokio::spawn(async move { tx2.send(2).await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room: the send waits");
        assert_eq!(rx.recv().await, Some(1));
        waiting.await.unwrap().unwrap();
        assert_eq!(rx.recv().await, Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_receiver_fails_senders_and_drops_what_was_queued() {
        let (tx, rx) = channel(1);
        let queued = Arc::new(());
        tx.try_send(queued.clone()).unwrap();
        let tx2 = tx.clone();
        let waiting = tokio::spawn(async move { tx2.send(Arc::new(())).await.is_err() });
        tokio::time::sleep(Duration::from_millis(1)).await;
        drop(rx);
        assert!(waiting.await.unwrap(), "a waiting send is refused");
        assert_eq!(
            Arc::strong_count(&queued),
            1,
            "the queued value was dropped"
        );
        assert!(matches!(tx.try_send(queued), Err(TrySendError::Closed(_))));
    }

    /// Many senders on several workers, a queue of two: every value arrives exactly once, each
    /// sender's in its order, and the channel ends when the last sender is gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn many_senders_on_many_workers_lose_nothing_through_a_small_queue() {
        const SENDERS: u64 = 8;
        const EACH: u64 = 2_000;
        let (tx, mut rx) = channel(2);
        let senders: Vec<_> = (0..SENDERS)
            .map(|s| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    for i in 0..EACH {
                        let value = s * EACH + i;
                        // Half of them try first and wait only when the queue is full.
                        match tx.try_send(value) {
                            Ok(()) => {}
                            Err(TrySendError::Full(v)) => tx.send(v).await.unwrap(),
                            Err(TrySendError::Closed(_)) => panic!("the receiver is there"),
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let mut next = vec![0u64; SENDERS as usize];
        let mut count = 0;
        while let Some(v) = rx.recv().await {
            let (s, i) = ((v / EACH) as usize, v % EACH);
            assert_eq!(i, next[s], "sender {s}'s values in order");
            next[s] += 1;
            count += 1;
        }
        assert_eq!(count, SENDERS * EACH);
        for s in senders {
            s.await.unwrap();
        }
    }

    /// Room freed while a sender waits goes to that sender: one that only tries is refused
    /// until it got in.
    #[tokio::test]
    async fn a_waiting_sender_is_not_overtaken_by_one_that_tries() {
        let (tx, mut rx) = channel(1);
        tx.try_send(0).unwrap();
        let tx2 = tx.clone();
        let waiting = tokio::spawn(async move { tx2.send(1).await });
        tokio::task::yield_now().await;
        assert_eq!(rx.recv().await, Some(0));
        assert!(
            matches!(tx.try_send(2), Err(TrySendError::Full(2))),
            "the freed room is the waiting sender's"
        );
        waiting.await.unwrap().unwrap();
        assert_eq!(rx.recv().await, Some(1));
        tx.try_send(2).unwrap();
        assert_eq!(rx.recv().await, Some(2));
    }

    #[tokio::test]
    async fn several_waiting_senders_all_get_in_as_room_is_made() {
        let (tx, mut rx) = channel(1);
        tx.try_send(0).unwrap();
        let senders: Vec<_> = (1..=3)
            .map(|i| {
                let tx = tx.clone();
                tokio::spawn(async move { tx.send(i).await })
            })
            .collect();
        drop(tx);
        let mut got = Vec::new();
        while let Some(v) = rx.recv().await {
            got.push(v);
        }
        for s in senders {
            s.await.unwrap().unwrap();
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2, 3]);
    }

    /// Values nobody waits for are dropped once the queue is long, the others keep their order
    /// and count, and the next look comes only when the queue doubled what it kept.
    #[test]
    fn settled_values_are_dropped_when_the_queue_grows_long() {
        let (tx, mut rx) = channel_settling(10 * PRUNE_FLOOR, |v: &i64| *v < 0);
        // Every other value is settled (negative).
        for i in 0..PRUNE_FLOOR as i64 {
            tx.try_send(if i % 2 == 0 { i } else { -i }).unwrap();
        }
        assert_eq!(tx.chan.len.load(Ordering::SeqCst), PRUNE_FLOOR);
        // This send finds the queue at the floor: the settled half goes first.
        tx.try_send(-1).unwrap();
        let kept = PRUNE_FLOOR / 2;
        assert_eq!(tx.chan.len.load(Ordering::SeqCst), kept + 1);
        assert_eq!(tx.chan.queue.lock().prune_at, PRUNE_FLOOR);
        // Up to the floor again, all wanted: the look keeps them all and moves the mark.
        for i in 0..(PRUNE_FLOOR - kept - 1) as i64 {
            tx.try_send(1_000_000 + i).unwrap();
        }
        tx.try_send(2_000_000).unwrap();
        assert_eq!(
            tx.chan.queue.lock().prune_at,
            2 * (PRUNE_FLOOR - 1),
            "the settled -1 was dropped, the rest kept; the next look at twice that"
        );
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut got = Vec::new();
        while let Poll::Ready(Some(v)) = rx.poll_recv(&mut cx) {
            got.push(v);
        }
        let mut want: Vec<i64> = (0..PRUNE_FLOOR as i64).filter(|i| i % 2 == 0).collect();
        want.extend((0..(PRUNE_FLOOR - kept - 1) as i64).map(|i| 1_000_000 + i));
        want.push(2_000_000);
        assert_eq!(got, want, "the wanted values, each once, in order");
        assert_eq!(
            tx.chan.queue.lock().prune_at,
            PRUNE_FLOOR,
            "a drained queue looks again at the floor"
        );
    }

    /// A dropped value may send on the very channel it was dropped from: it is dropped after
    /// the queue's lock is let go.
    #[test]
    fn settled_values_are_dropped_outside_the_lock() {
        struct Echo(Option<Sender<Echo>>);
        impl Drop for Echo {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.try_send(Echo(None));
                }
            }
        }
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (tx, _rx) = channel_settling(4 * PRUNE_FLOOR, |e: &Echo| e.0.is_some());
            for _ in 0..PRUNE_FLOOR {
                assert!(tx.try_send(Echo(Some(tx.clone()))).is_ok());
            }
            assert!(tx.try_send(Echo(None)).is_ok());
            let _ = done_tx.send(tx.chan.len.load(Ordering::SeqCst));
        });
        let len = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the prune did not deadlock on its own lock");
        assert_eq!(
            len,
            1 + PRUNE_FLOOR,
            "the new value and one echo per dropped value"
        );
    }

    /// A queue smaller than the floor is looked at when full.
    #[test]
    fn a_full_small_queue_drops_its_settled_values_for_a_new_one() {
        let (tx, mut rx) = channel_settling(2, |v: &i64| *v < 0);
        tx.try_send(-1).unwrap();
        tx.try_send(-2).unwrap();
        tx.try_send(3).unwrap();
        tx.try_send(4).unwrap();
        assert!(
            matches!(tx.try_send(5), Err(TrySendError::Full(5))),
            "3 and 4 are wanted"
        );
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(3)));
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(4)));
        assert!(
            rx.poll_recv(&mut cx).is_pending(),
            "the settled ones are gone"
        );
    }

    /// Room made by dropping settled values goes to a sender that waits for it, without the
    /// receiver taking anything.
    #[tokio::test]
    async fn room_made_by_dropping_settled_values_goes_to_a_waiting_sender() {
        use std::sync::atomic::AtomicBool;
        type Flag = Arc<AtomicBool>;
        let (tx, _rx) = channel_settling(2, |v: &Flag| v.load(Ordering::SeqCst));
        let (a, b) = (Flag::default(), Flag::default());
        tx.try_send(a.clone()).unwrap();
        tx.try_send(b.clone()).unwrap();
        let tx2 = tx.clone();
        let waiting = tokio::spawn(async move { tx2.send(Flag::default()).await.is_ok() });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room: the send waits");
        a.store(true, Ordering::SeqCst);
        b.store(true, Ordering::SeqCst);
        // This send makes room for itself and for the one that waits.
        assert!(tx.send(Flag::default()).await.is_ok());
        let sent = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiting sender was told of the room")
            .unwrap();
        assert!(sent);
        assert_eq!(tx.chan.len.load(Ordering::SeqCst), 2);
    }
}
