//! Opening sessions scales linearly: a session's own observers live in its own snapshot, so
//! adding one touches no other session. Thousands of busy sessions put their deliveries in one
//! hook's mailbox without waiting for room.

mod common;

use std::time::{Duration, Instant};

use hookbus::*;
use serde_json::json;

/// Time per session to open `n` sessions, each with a session-scoped observer subscription.
async fn per_session(n: usize) -> Duration {
    let bus = Bus::new();
    let mut sessions = Vec::with_capacity(n);
    let mut mailboxes = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let session = bus
            .open_session(BusSessionConfig::new().id(format!("s{i}")))
            .await
            .unwrap();
        mailboxes.push(
            session
                .subscribe(Subscription::observer(
                    format!("watch-{i}"),
                    ObserverOptions::default(),
                ))
                .await
                .unwrap(),
        );
        sessions.push(session);
    }
    let elapsed = started.elapsed() / n as u32;
    drop(mailboxes);
    bus.shutdown(Duration::from_secs(30)).await;
    elapsed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_sessions_with_their_own_observers_is_linear() {
    // Warm up allocators and the runtime, then compare the cost per session at two sizes: a
    // quadratic registry makes the larger run ~10x dearer per session.
    // The best of a few runs at each size, so that a burst of load on the machine does not
    // decide the ratio.
    per_session(200).await;
    let mut small = Duration::MAX;
    let mut large = Duration::MAX;
    for _ in 0..2 {
        small = small.min(per_session(1_000).await);
        large = large.min(per_session(10_000).await);
    }
    small = small.min(per_session(1_000).await);
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    assert!(
        ratio < 3.0,
        "per session: {small:?} at 1,000, {large:?} at 10,000 (ratio {ratio:.2})"
    );
}

/// A session dispatches one event at a time and waits for its answers, so a gate's mailbox
/// takes a delivery from every busy session at once: each of the dispatches below puts its
/// delivery in the mailbox when it is first polled, and none waits for room (which would need
/// its dispatch polled again before the delivery got in).
#[tokio::test]
async fn a_gate_mailbox_takes_a_delivery_from_every_busy_session_at_once() {
    // On a task, as an agent session is (a dispatch from outside every task is moved to one),
    // and outside tokio's cooperative budget, which would make the 129th poll wait.
    tokio::spawn(tokio::task::unconstrained(every_busy_session_at_once()))
        .await
        .unwrap();
}

async fn every_busy_session_at_once() {
    use futures_util::FutureExt;
    use std::future::Future;
    use std::task::Context;

    const SESSIONS: usize = 3_000;
    let bus = Bus::new();
    let mut mailbox = bus
        .subscribe(Subscription::gate("gate", HookOptions::default()))
        .await
        .unwrap();
    let mut sessions = Vec::with_capacity(SESSIONS);
    for i in 0..SESSIONS {
        sessions.push(
            bus.open_session(BusSessionConfig::new().id(format!("s{i}")))
                .await
                .unwrap(),
        );
    }
    let mut dispatches: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| Box::pin(s.dispatch(common::pre("Bash", json!({}), &format!("t{i}")))))
        .collect();
    {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for dispatch in &mut dispatches {
            assert!(
                dispatch.as_mut().poll(&mut cx).is_pending(),
                "waits for the gate"
            );
        }
    }
    // Nothing else ran since: a delivery is in the mailbox now or not at all.
    let mut queued = Vec::new();
    while let Some(Some(delivery)) = mailbox.recv().now_or_never() {
        queued.push(delivery);
    }
    assert_eq!(
        queued.len(),
        SESSIONS,
        "one delivery per session, none waiting"
    );
    for delivery in queued {
        delivery.reply(Reply::block("no"));
    }
    for dispatch in dispatches {
        let outcome = dispatch.await.unwrap();
        assert!(outcome.is_blocked());
    }
    drop(mailbox);
    bus.shutdown(Duration::from_secs(30)).await;
}
