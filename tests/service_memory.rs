//! A subscriber that does not read its event stream costs bounded memory: it falls behind,
//! skips, and is told so with a `lagged` frame. In a test binary of its own, so that the
//! process's resident size is this test's alone.

mod common;

use std::time::Duration;

use common::http::*;
use serde_json::{json, Value};

/// The process's resident set, in bytes.
fn rss() -> u64 {
    common::rss_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_event_reader_gets_lagged_and_memory_stays_bounded() {
    const TURNS: usize = 250;
    const PROMPT: usize = 800 * 1024;
    let svc = start_with(
        |c| {
            c.limits.event_stream_buffer = 16;
            c.limits.event_history_bytes = 1 << 20;
        },
        |a| a,
    )
    .await;
    let turns: Vec<Value> = (0..TURNS + 5).map(|_| json!({ "text": "ok" })).collect();
    svc.open("flood", json!({ "turns": turns }), None).await;
    // A subscriber that never reads: its connection fills, then the service must not queue.
    let slow = svc
        .client
        .get(svc.url("/sessions/flood/events"))
        .header("authorization", svc.auth())
        .send()
        .await
        .unwrap();
    assert_eq!(slow.status().as_u16(), 200);
    let prompt = "p".repeat(PROMPT);
    let turn = |svc: &Svc| {
        let request = svc
            .client
            .post(svc.url("/sessions/flood/turns"))
            .header("authorization", svc.auth())
            .json(&json!({ "prompt": prompt }));
        async move {
            let r = request.send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["reason"], "completed", "{v}");
        }
    };
    // Warm up (allocator pools, buffers) before the baseline.
    for _ in 0..5 {
        turn(&svc).await;
    }
    let before = rss();
    for _ in 0..TURNS {
        turn(&svc).await;
    }
    let after = rss();
    let flowed = (TURNS * PROMPT) as u64;
    let grown = after.saturating_sub(before);
    eprintln!(
        "{} MB of events flowed past a reader that did not read; RSS grew {} MB",
        flowed >> 20,
        grown >> 20
    );
    assert!(
        grown < 100 << 20,
        "RSS grew {} MB while {} MB flowed",
        grown >> 20,
        flowed >> 20
    );
    // Reading now, the subscriber is told it skipped, then gets the rest to the end.
    let reader = tokio::spawn(read_frames(slow));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(svc.delete("/sessions/flood").await.0, 200);
    let frames = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the stream ended")
        .unwrap();
    let lagged: Vec<&Frame> = frames.iter().filter(|f| f.name == "lagged").collect();
    assert!(!lagged.is_empty(), "a lagged frame");
    let skipped: u64 = lagged
        .iter()
        .map(|f| f.data["skipped"].as_u64().unwrap())
        .sum();
    assert!(skipped > 100, "skipped {skipped}");
    assert_eq!(
        lagged.last().unwrap().data["total"].as_u64().unwrap(),
        skipped
    );
    let events = envelopes(&frames);
    assert_eq!(events.last().unwrap()["hook_event_name"], "SessionEnd");
    assert_eq!(frames.last().unwrap().name, "closed");
}
