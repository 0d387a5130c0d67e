//! Remote hooks, the event stream and fleet approvals against a real, private `nats-server`
//! (skipped with the reason when it is not installed; a failure under
//! `HOOKBUS_REQUIRE_EXTERNAL=1`).
#![cfg(all(feature = "nats", feature = "bench"))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::nats::NatsServer;
use hookbus::nats::{
    follow_events, serve_hook, EventPublisher, EventStreamConfig, FollowOptions, RemoteHook,
    RemoteHookSpec,
};
use hookbus::*;
use parking_lot::Mutex;
use serde_json::json;

fn bash(cmd: &str, id: &str) -> Event {
    common::bash(cmd, id)
}

/// A policy: blocks `rm`, rewrites `curl` to `curl --proto =https`, adds context otherwise.
#[derive(Clone, Default)]
struct Policy {
    name: &'static str,
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl Hook for Policy {
    fn name(&self) -> &str {
        self.name
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PreToolUse])
    }
    async fn pre_tool_use(&self, _cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let command = ev.tool_input["command"].as_str().unwrap_or_default();
        if command.starts_with("rm") {
            return Ok(PreToolUseAction::block(format!("{} refuses rm", self.name)).into());
        }
        if let Some(rest) = command.strip_prefix("curl ") {
            let input = json!({ "command": format!("curl --proto =https {rest}") });
            return Ok(HookOutput::new(PreToolUseAction::mutate(input))
                .context(format!("{} rewrote curl", self.name)));
        }
        Ok(HookOutput::new(PreToolUseAction::allow()).context(format!("{} saw it", self.name)))
    }
}

/// What a fold decided, without timings.
fn folded(o: &Outcome) -> serde_json::Value {
    json!({
        "decision": o.decision,
        "reasons": o.reasons,
        "updated_input": o.updated_input,
        "contexts": o.contexts,
        "warnings": o.warnings.iter().map(|w| &w.hook).collect::<Vec<_>>(),
        "stop": o.stop,
    })
}

fn pre_only(timeout: Duration) -> HookOptions {
    HookOptions::new()
        .events([EventKind::PreToolUse])
        .timeout(timeout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_hooks_fold_exactly_as_the_same_hooks_in_process() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let first = Policy {
        name: "first",
        ..Default::default()
    };
    let second = Policy {
        name: "second",
        ..Default::default()
    };
    // Two workers for each hook: a queue group shares the calls.
    let mut workers = Vec::new();
    for hook in [&first, &second, &first, &second] {
        workers.push(serve_hook(nats.client().await, hook.clone()).await.unwrap());
    }
    let remote = Bus::new();
    let client = nats.client().await;
    let timeout = Duration::from_secs(5);
    remote
        .register(RemoteHook::new(client.clone(), "first", pre_only(timeout)))
        .await
        .unwrap();
    remote
        .register(RemoteHook::new(client.clone(), "second", pre_only(timeout)))
        .await
        .unwrap();
    let local = Bus::new();
    local
        .register(Policy {
            name: "first",
            ..Default::default()
        })
        .await
        .unwrap();
    local
        .register(Policy {
            name: "second",
            ..Default::default()
        })
        .await
        .unwrap();
    let r = remote.open_session(BusSessionConfig::new()).await.unwrap();
    let l = local.open_session(BusSessionConfig::new()).await.unwrap();
    for (i, command) in ["ls -la", "rm -rf /", "curl example.com", "echo ok"]
        .iter()
        .cycle()
        .take(40)
        .enumerate()
    {
        let id = format!("t{i}");
        let remote_outcome = r.dispatch(bash(command, &id)).await.unwrap();
        let local_outcome = l.dispatch(bash(command, &id)).await.unwrap();
        assert_eq!(
            folded(&remote_outcome),
            folded(&local_outcome),
            "{command}: the remote fold differs"
        );
        assert!(remote_outcome
            .runs
            .iter()
            .all(|run| run.status == RunStatus::Answered));
    }
    assert_eq!(
        first.calls.load(Ordering::SeqCst),
        40,
        "each call reached one worker"
    );
    assert_eq!(second.calls.load(Ordering::SeqCst), 40);
    let served: Vec<u64> = workers.iter().map(|w| w.served()).collect();
    assert!(
        served.iter().all(|&n| n > 0),
        "both workers of each queue group served calls: {served:?}"
    );
}

/// A hook that waits until cancelled, and records that it started and saw the cancellation.
#[derive(Clone, Default)]
struct Hangs {
    started: Arc<AtomicUsize>,
    cancelled: Arc<AtomicUsize>,
    one_at_a_time: bool,
}

#[async_trait]
impl Hook for Hangs {
    fn name(&self) -> &str {
        "hangs"
    }
    fn options(&self) -> HookOptions {
        let options = HookOptions::new();
        if self.one_at_a_time {
            options.max_concurrency(1)
        } else {
            options
        }
    }
    async fn pre_tool_use(&self, cx: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        self.started.fetch_add(1, Ordering::SeqCst);
        cx.cancellation().cancelled().await;
        self.cancelled.fetch_add(1, Ordering::SeqCst);
        Ok(PreToolUseAction::allow().into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_remote_call_follows_its_failure_policy_and_is_cancelled_on_the_worker() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let hangs = Hangs::default();
    let _worker = serve_hook(nats.client().await, hangs.clone())
        .await
        .unwrap();
    let client = nats.client().await;
    for (policy, blocked) in [("open", false), ("closed", true)] {
        let bus = Bus::new();
        let spec: RemoteHookSpec =
            format!("hangs,events=PreToolUse,timeout=300ms,failure={policy}")
                .parse()
                .unwrap();
        bus.register(RemoteHook::new(client.clone(), spec.name, spec.options))
            .await
            .unwrap();
        let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
        let outcome = s.dispatch(bash("ls", "1")).await.unwrap();
        assert_eq!(outcome.is_blocked(), blocked, "failure={policy}");
        assert_eq!(outcome.runs[0].status, RunStatus::TimedOut);
    }
    // The cancellation message reached the worker, which cancelled both calls.
    for _ in 0..200 {
        if hangs.cancelled.load(Ordering::SeqCst) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(hangs.cancelled.load(Ordering::SeqCst), 2);
}

/// A hook that panics.
struct Panics;

#[async_trait]
impl Hook for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        panic!("a worker's hook panicked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_worker_and_a_panicking_worker_are_failures_under_the_policy() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let _worker = serve_hook(nats.client().await, Panics).await.unwrap();
    let client = nats.client().await;
    let bus = Bus::new();
    bus.register(RemoteHook::new(
        client.clone(),
        "nobody-serves-this",
        pre_only(Duration::from_secs(5)).fail_closed(),
    ))
    .await
    .unwrap();
    bus.register(RemoteHook::new(
        client.clone(),
        "panics",
        pre_only(Duration::from_secs(5)),
    ))
    .await
    .unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let started = std::time::Instant::now();
    let outcome = s.dispatch(bash("ls", "1")).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "no responders fails at once, not at the timeout"
    );
    assert!(outcome.is_blocked(), "fail-closed without a worker");
    let text = format!("{:?}", outcome.runs);
    assert!(text.contains("no worker serves hook"), "{text}");
    assert!(text.contains("a worker's hook panicked"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_a_durable_observer_in_order_and_a_restart_resumes_without_a_gap() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let client = nats.client().await;
    let stream = EventStreamConfig::default();
    let publisher = EventPublisher::new(&client, "node-a", &stream)
        .await
        .unwrap();
    let counters = publisher.counters();
    let bus = Bus::new();
    bus.observe(publisher).await.unwrap();
    // A session id that is not a subject token travels escaped, and arrives intact.
    let ids = ["plain", "with.dots and >"];
    for id in ids {
        let s = bus
            .open_session(BusSessionConfig::new().id(id))
            .await
            .unwrap();
        for i in 0..20 {
            s.dispatch(bash("ls", &i.to_string())).await.unwrap();
        }
        s.close("other").await.unwrap();
    }
    bus.shutdown(Duration::from_secs(5)).await;
    for _ in 0..500 {
        if counters.published() == 42 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        counters.published(),
        42,
        "20 PreToolUse and SessionEnd, twice (failed: {})",
        counters.failed()
    );

    // An observer reads 10 events and stops (as if killed), then a new one of the same name
    // resumes.
    let seen: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let options = FollowOptions::new("audit-trail");
    let first_run = {
        let seen = seen.clone();
        let client = nats.client().await;
        let stream = stream.clone();
        let options = options.clone();
        tokio::spawn(async move {
            follow_events(&client, &stream, &options, |f| {
                seen.lock()
                    .push((f.envelope.session_id.clone(), f.envelope.seq));
                std::future::ready(Ok(()))
            })
            .await
        })
    };
    while seen.lock().len() < 10 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first_run.abort();
    let _ = first_run.await;
    let first_life = seen.lock().len();
    let second = {
        let seen = seen.clone();
        let client = nats.client().await;
        tokio::spawn(async move {
            follow_events(&client, &stream, &options, |f| {
                seen.lock()
                    .push((f.envelope.session_id.clone(), f.envelope.seq));
                std::future::ready(Ok(()))
            })
            .await
        })
    };
    for _ in 0..500 {
        if seen.lock().iter().filter(|(_, seq)| *seq == 21).count() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    second.abort();
    let seen = seen.lock().clone();
    // It resumed after what it had acknowledged (what was in hand, or acknowledged but not yet
    // sent when the first life ended, comes again), not from the start.
    assert!(
        seen.len() < first_life + 42,
        "{} deliveries for 42 events, {first_life} in the first life",
        seen.len()
    );
    for id in ids {
        // At least once: a repeat is allowed, a gap or a reordering is not.
        let mut seqs: Vec<u64> = seen
            .iter()
            .filter(|(s, _)| s == id)
            .map(|(_, q)| *q)
            .collect();
        seqs.dedup();
        assert_eq!(seqs, (1..=21).collect::<Vec<_>>(), "{id}: {seqs:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_it_waits_for_a_busy_worker_never_runs() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    // One call at a time: the second waits for the first, which hangs until cancelled.
    let hangs = Hangs {
        one_at_a_time: true,
        ..Default::default()
    };
    let _worker = serve_hook(nats.client().await, hangs.clone())
        .await
        .unwrap();
    // The first call gives up after 1 s, the second (queued behind it) after 300 ms.
    let mut sessions = Vec::new();
    for timeout in ["1000ms", "300ms"] {
        let bus = Bus::new();
        let spec: RemoteHookSpec = format!("hangs,events=PreToolUse,timeout={timeout}")
            .parse()
            .unwrap();
        bus.register(RemoteHook::new(
            nats.client().await,
            spec.name,
            spec.options,
        ))
        .await
        .unwrap();
        sessions.push(bus.open_session(BusSessionConfig::new()).await.unwrap());
    }
    let first = sessions[0].dispatch(bash("ls", "1"));
    let second = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        sessions[1].dispatch(bash("ls", "2")).await
    };
    let (a, b) = tokio::join!(first, second);
    assert_eq!(a.unwrap().runs[0].status, RunStatus::TimedOut);
    assert_eq!(b.unwrap().runs[0].status, RunStatus::TimedOut);
    // The running call saw its cancellation; the waiting one was refused, never started.
    for _ in 0..200 {
        if hangs.cancelled.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(hangs.cancelled.load(Ordering::SeqCst), 1);
    assert_eq!(
        hangs.started.load(Ordering::SeqCst),
        1,
        "the cancelled call ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_whose_handler_fails_is_not_acknowledged_and_comes_first_on_resume() {
    let Some(nats) = NatsServer::start() else {
        return;
    };
    let client = nats.client().await;
    let stream = EventStreamConfig::default();
    let bus = Bus::new();
    bus.observe(
        EventPublisher::new(&client, "node-a", &stream)
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let s = bus
        .open_session(BusSessionConfig::new().id("s"))
        .await
        .unwrap();
    for i in 0..10 {
        s.dispatch(bash("ls", &i.to_string())).await.unwrap();
    }
    bus.shutdown(Duration::from_secs(5)).await;
    let options = FollowOptions::new("fails-at-5");
    let handled: Arc<Mutex<Vec<u64>>> = Arc::default();
    let result = {
        let handled = handled.clone();
        follow_events(&client, &stream, &options, move |f| {
            let seq = f.envelope.seq;
            let outcome = if seq == 5 {
                Err("the disk is full".into())
            } else {
                handled.lock().push(seq);
                Ok(())
            };
            std::future::ready(outcome)
        })
        .await
    };
    let err = result.unwrap_err().to_string();
    assert!(err.contains("the disk is full"), "{err}");
    assert_eq!(*handled.lock(), [1, 2, 3, 4]);
    let resumed: Arc<Mutex<Vec<u64>>> = Arc::default();
    let follower = {
        let resumed = resumed.clone();
        let client = nats.client().await;
        tokio::spawn(async move {
            follow_events(&client, &stream, &options, move |f| {
                resumed.lock().push(f.envelope.seq);
                std::future::ready(Ok(()))
            })
            .await
        })
    };
    for _ in 0..500 {
        if resumed.lock().len() >= 7 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    follower.abort();
    // (11 is the SessionEnd of the bus's shutdown.)
    assert_eq!(*resumed.lock(), [5, 6, 7, 8, 9, 10, 11]);
}
