//! Opening sessions scales linearly: a session's own observers live in its own snapshot, so
//! adding one touches no other session.

use std::time::{Duration, Instant};

use hookbus::*;

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
