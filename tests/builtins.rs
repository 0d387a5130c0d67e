//! The seed-000 built-ins, and a shared hook's concurrency limit (ORD-5).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use hookbus::builtins::{LogSink, LoggingHook, TimingHook};
use hookbus::*;
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

fn post_for(id: &str) -> Event {
    post("Bash", json!("ok"), id)
}

/// TimingHook pairs Pre and Post by session and tool-use id, whatever the interleaving, and
/// closes timers of denied calls and ended sessions.
#[tokio::test(start_paused = true)]
async fn timing_hook_pairs_interleaved_calls() {
    let bus = Bus::new();
    let timing = TimingHook::new();
    bus.register(timing.clone()).await.unwrap();
    let a = bus
        .open_session(BusSessionConfig::new().id("a"))
        .await
        .unwrap();
    let b = bus
        .open_session(BusSessionConfig::new().id("b"))
        .await
        .unwrap();
    a.dispatch(bash("x", "1")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    a.dispatch(bash("y", "2")).await.unwrap();
    b.dispatch(bash("z", "1")).await.unwrap(); // same id, other session
    assert_eq!(timing.open_timers(), 3);
    tokio::time::sleep(Duration::from_millis(30)).await;
    a.dispatch(post_for("2")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    a.dispatch(post_for("1")).await.unwrap();
    let t = timing.recent();
    assert_eq!(t.len(), 2);
    assert_eq!(
        (t[0].tool_use_id.as_str(), t[0].elapsed),
        ("2", Duration::from_millis(30))
    );
    assert_eq!(
        (t[1].tool_use_id.as_str(), t[1].elapsed),
        ("1", Duration::from_millis(45))
    );
    assert_eq!(timing.open_timers(), 1, "b's call is still open");
    b.close("other").await.unwrap();
    assert_eq!(timing.open_timers(), 0, "SessionEnd drops leftovers");
}

#[tokio::test]
async fn logging_hook_logs_every_event_in_the_seed_000_style() {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let bus = Bus::new();
    bus.register(LoggingHook::with_sink(LogSink::Custom(Arc::new(
        move |l: &str| sink.lock().push(l.to_owned()),
    ))))
    .await
    .unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    s.dispatch(pre("read_file", json!({"path": "a"}), "toolu_1"))
        .await
        .unwrap();
    s.dispatch(notification("hello")).await.unwrap();
    s.close("other").await.unwrap();
    assert_eq!(
        *lines.lock(),
        vec![
            "[Hook] PreToolUse: read_file (id=toolu_1)",
            "[Hook] Notification: hello",
            "[Hook] SessionEnd: other",
        ]
    );
}

/// ORD-5: sessions wait for each other only on a shared hook whose concurrency limit is reached.
#[tokio::test(start_paused = true)]
async fn max_concurrency_serializes_a_shared_hook_across_sessions() {
    for (limit, expected) in [
        (None, Duration::from_secs(1)),
        (Some(1), Duration::from_secs(2)),
    ] {
        let bus = Bus::new();
        let hook = ScriptHook::new("slow", |_| PreToolUseAction::proceed())
            .delay(Duration::from_secs(1))
            .options(|o| match limit {
                Some(n) => o.max_concurrency(n),
                None => o,
            });
        bus.register(hook).await.unwrap();
        let a = bus.open_session(BusSessionConfig::new()).await.unwrap();
        let b = bus.open_session(BusSessionConfig::new()).await.unwrap();
        let started = Instant::now();
        let (ra, rb) = tokio::join!(a.dispatch(bash("x", "1")), b.dispatch(bash("x", "1")));
        ra.unwrap();
        rb.unwrap();
        assert_eq!(started.elapsed(), expected, "limit {limit:?}");
    }
}
