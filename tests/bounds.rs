//! Bounded memory: a session's kept history stays within its byte cap, and a reader that falls
//! behind skips (and counts) what it missed instead of growing a queue.

use std::time::Duration;

use hookbus::*;
use tokio_stream::StreamExt;

fn note(i: usize) -> Event {
    Event::Notification(Notification {
        message: format!("event {i} {}", "x".repeat(100)),
        title: None,
        notification_type: "idle_prompt".into(),
    })
}

#[tokio::test]
async fn a_long_session_keeps_its_history_within_the_byte_cap() {
    let bus = Bus::new();
    let cap = 64 * 1024;
    let session = bus
        .open_session(
            BusSessionConfig::new()
                .id("long")
                .history(1_000_000)
                .history_bytes(cap),
        )
        .await
        .unwrap();
    let n = 100_000;
    for i in 0..n {
        session.dispatch(note(i)).await.unwrap();
    }
    let stats = session.history_stats();
    assert!(stats.bytes <= cap, "{stats:?}");
    assert!(stats.kept > 100 && stats.kept < n, "{stats:?}");
    assert_eq!(stats.kept as u64 + stats.dropped, n as u64, "{stats:?}");
    // A late reader gets exactly the kept tail, in order, ending at the last event.
    let mut late = session.events();
    session.close("done").await.unwrap();
    let mut seqs = Vec::new();
    while let Some(env) = late.next().await {
        seqs.push(env.seq);
    }
    assert_eq!(
        seqs.len(),
        stats.kept + 1,
        "the kept history, then SessionEnd"
    );
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
    assert_eq!(*seqs.last().unwrap(), n as u64 + 1);
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_reader_that_falls_behind_skips_and_counts_what_it_missed() {
    let bus = Bus::new();
    let session = bus
        .open_session(BusSessionConfig::new().id("slow").stream_buffer(16))
        .await
        .unwrap();
    let mut slow = session.events();
    for i in 0..100 {
        session.dispatch(note(i)).await.unwrap();
    }
    session.close("done").await.unwrap();
    let mut seqs = Vec::new();
    while let Some(env) = slow.next().await {
        seqs.push(env.seq);
    }
    assert_eq!(
        slow.lagged() + seqs.len() as u64,
        101,
        "{} + {seqs:?}",
        slow.lagged()
    );
    assert!(seqs.len() <= 16, "{seqs:?}");
    assert_eq!(
        *seqs.last().unwrap(),
        101,
        "it still sees the newest, SessionEnd last"
    );
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn what_the_hooks_did_with_each_event_is_streamed_and_kept_like_the_events() {
    #[derive(Clone)]
    struct Gate;
    #[async_trait]
    impl Hook for Gate {
        fn name(&self) -> &str {
            "gate"
        }
        fn options(&self) -> HookOptions {
            HookOptions::new().events([EventKind::PreToolUse])
        }
        async fn pre_tool_use(&self, _: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
            Ok(if ev.tool_name == "rm" {
                PreToolUseAction::block("no")
            } else {
                PreToolUseAction::proceed()
            }
            .into())
        }
    }
    let bus = Bus::new();
    bus.register(Gate).await.unwrap();
    let session = bus
        .open_session(BusSessionConfig::new().id("runs").history(3))
        .await
        .unwrap();
    let pre = |tool: &str| {
        Event::PreToolUse(PreToolUse {
            tool_name: tool.into(),
            tool_input: serde_json::json!({}),
            tool_use_id: tool.into(),
        })
    };
    let mut live = session.hook_runs();
    session.dispatch(note(0)).await.unwrap(); // no hook matches: no record
    session.dispatch(pre("ls")).await.unwrap();
    session.dispatch(pre("rm")).await.unwrap();
    let first = live.next().await.unwrap();
    assert_eq!((first.seq, first.kind), (2, EventKind::PreToolUse));
    assert_eq!(first.runs[0].hook.as_ref(), "gate");
    assert_eq!(first.runs[0].decision, Decision::Continue);
    let second = live.next().await.unwrap();
    assert_eq!(second.seq, 3);
    assert_eq!(second.decision, Decision::Block);
    assert_eq!(second.runs[0].decision, Decision::Block);
    // A late reader gets the records of the kept envelopes only (history 3: seqs 3..=5).
    for i in 0..2 {
        session.dispatch(note(i)).await.unwrap();
    }
    let mut late = session.hook_runs();
    session.close("done").await.unwrap();
    let mut seqs = Vec::new();
    while let Some(r) = late.next().await {
        seqs.push(r.seq);
    }
    assert_eq!(seqs, [3]);
    bus.shutdown(Duration::from_secs(5)).await;
}
