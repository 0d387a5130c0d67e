//! Acceptance tests of the core runtime: fold determinism, ordering, SessionEnd, isolation,
//! `after` chains, observers, registration during dispatch (SPEC sections 1–5).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use hookbus::*;
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

/// ORD-2: for 100 random seeds, hooks with random delays give the identical folded result, and
/// mutations resolve in registration order (the last registered mutation is the final input).
#[tokio::test(start_paused = true)]
async fn fold_is_deterministic_whatever_the_completion_order() {
    let mut expected: Option<Outcome> = None;
    for seed in 0..100u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let bus = Bus::new();
        let delay = |rng: &mut fastrand::Rng| Duration::from_millis(rng.u64(0..50));
        bus.register(
            ScriptHook::new("mut-a", |_| {
                PreToolUseAction::mutate(json!({"command": "a"}))
            })
            .delay(delay(&mut rng)),
        )
        .await
        .unwrap();
        bus.register(
            ScriptHook::new("ask", |_| PreToolUseAction::ask("ask reason")).delay(delay(&mut rng)),
        )
        .await
        .unwrap();
        bus.register(
            ScriptHook::new("block-1", |_| PreToolUseAction::block("first block"))
                .delay(delay(&mut rng)),
        )
        .await
        .unwrap();
        bus.register(
            ScriptHook::new("mut-b", |_| {
                PreToolUseAction::mutate(json!({"command": "b"}))
            })
            .delay(delay(&mut rng)),
        )
        .await
        .unwrap();
        bus.register(
            ScriptHook::new("block-2", |_| {
                let mut a = PreToolUseAction::block("second block");
                a.updated_input = None;
                a
            })
            .delay(delay(&mut rng)),
        )
        .await
        .unwrap();
        bus.register(
            ScriptHook::new("allow", |_| PreToolUseAction::allow()).delay(delay(&mut rng)),
        )
        .await
        .unwrap();
        let s = bus
            .open_session(BusSessionConfig::new().id("s"))
            .await
            .unwrap();
        let mut out = s.dispatch(bash("ls", "t1")).await.unwrap();
        for r in &mut out.runs {
            r.elapsed = Duration::ZERO;
        }
        assert_eq!(out.decision, Decision::Block);
        assert_eq!(out.updated_input, Some(json!({"command": "b"})));
        let reasons: Vec<_> = out
            .reasons
            .iter()
            .map(|r| (r.hook.as_str(), r.value.as_str()))
            .collect();
        assert_eq!(
            reasons,
            vec![("block-1", "first block"), ("block-2", "second block")]
        );
        match &expected {
            None => expected = Some(out),
            Some(e) => assert_eq!(&out, e, "seed {seed} folded differently"),
        }
        bus.shutdown(Duration::from_secs(5)).await;
    }
}

/// ORD-1: 200 sessions × 100 events, concurrently; every observer sees each session's sequence
/// numbers strictly increasing with none missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_order_holds_under_concurrency() {
    let bus = Bus::new();
    let mut recorders = Vec::new();
    for name in ["obs-a", "obs-b"] {
        let mut r = Recorder::new(name);
        r.options = ObserverOptions::new().mailbox(100_000);
        bus.observe(r.clone()).await.unwrap();
        recorders.push(r);
    }
    bus.register(ScriptHook::new("gate", |_| PreToolUseAction::proceed()))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for s in 0..200 {
        let bus = bus.clone();
        tasks.push(tokio::spawn(async move {
            let session = bus
                .open_session(BusSessionConfig::new().id(format!("s{s}")))
                .await
                .unwrap();
            for i in 0..100 {
                let ev = if i % 2 == 0 {
                    bash("ls", &format!("t{i}"))
                } else {
                    notification("n")
                };
                let out = session.dispatch(ev).await.unwrap();
                assert_eq!(out.seq, i + 1);
            }
            session.close("other").await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let report = bus.shutdown(Duration::from_secs(30)).await;
    assert_eq!(report.observer_events_dropped, 0);
    for r in recorders {
        let mut per_session: std::collections::HashMap<String, Vec<u64>> = Default::default();
        for (sid, seq, _) in r.events() {
            per_session.entry(sid).or_default().push(seq);
        }
        assert_eq!(per_session.len(), 200);
        for (sid, seqs) in per_session {
            let expected: Vec<u64> = (1..=101).collect();
            assert_eq!(
                seqs, expected,
                "{} saw session {sid} out of order or with gaps",
                r.name
            );
        }
    }
}

/// A hook that records which events it saw and when each SessionEnd call started and finished.
#[derive(Clone)]
struct EndHook {
    name: String,
    log: Arc<Mutex<Vec<String>>>,
    work: Duration,
}

#[async_trait]
impl Hook for EndHook {
    fn name(&self) -> &str {
        &self.name
    }
    async fn notification(&self, _: &HookCx, _: &Notification) -> HookResult<()> {
        self.log.lock().push(format!("{}:Notification", self.name));
        Ok(Default::default())
    }
    async fn session_end(&self, cx: &HookCx, _: &SessionEnd) -> HookResult<()> {
        self.log.lock().push(format!("{}:start", self.name));
        // The scratchpad is still there during SessionEnd.
        assert_eq!(cx.scratchpad().get::<u32>("k"), Some(7));
        tokio::time::sleep(self.work).await;
        self.log.lock().push(format!("{}:end", self.name));
        Ok(Default::default())
    }
}

/// ORD-4: SessionEnd is the last event for hooks and observers; its hooks run one at a time in
/// registration order; session hooks and the scratchpad are gone afterwards; the grace period
/// bounds it.
#[tokio::test(start_paused = true)]
async fn session_end_is_last_sequential_and_bounded() {
    let bus = Bus::builder()
        .session_end_grace(Duration::from_secs(10))
        .build();
    let log = Arc::new(Mutex::new(Vec::new()));
    for name in ["first", "second", "third"] {
        bus.register(EndHook {
            name: name.into(),
            log: log.clone(),
            work: Duration::from_secs(4),
        })
        .await
        .unwrap();
    }
    let mut slow = Recorder::new("slow-observer");
    slow.delay = Duration::from_millis(100);
    bus.observe(slow.clone()).await.unwrap();

    let s = bus
        .open_session(BusSessionConfig::new().id("s"))
        .await
        .unwrap();
    s.scratchpad().insert("k", 7u32);
    let session_hook = ScriptHook::new("session-only", |_| PreToolUseAction::block("session hook"));
    s.register(session_hook.clone()).await.unwrap();
    for _ in 0..5 {
        s.dispatch(notification("hi")).await.unwrap();
    }
    let started = Instant::now();
    let out = s.close("other").await.unwrap();
    let took = started.elapsed();

    // One at a time, in registration order; the third does not fit in the 10 s grace.
    let log = log.lock().clone();
    let end_part: Vec<&str> = log
        .iter()
        .map(String::as_str)
        .filter(|l| !l.ends_with("Notification"))
        .collect();
    assert_eq!(
        end_part,
        vec![
            "first:start",
            "first:end",
            "second:start",
            "second:end",
            "third:start"
        ]
    );
    assert!(
        log.iter().rposition(|l| l.ends_with("Notification"))
            < log.iter().position(|l| l == "first:start")
    );
    assert!(
        took <= Duration::from_millis(10_600),
        "SessionEnd took {took:?}"
    );
    assert_eq!(out.runs[2].status, RunStatus::TimedOut);

    // The observer saw every earlier event before SessionEnd, and SessionEnd last.
    let seen = slow.events();
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert_eq!(seen.last().unwrap().2, EventKind::SessionEnd);

    // Session hooks and the scratchpad are gone.
    assert!(s.scratchpad().is_empty());
    assert!(matches!(
        s.dispatch(bash("ls", "x")).await,
        Err(Error::SessionClosed(_))
    ));
    assert!(bus.sessions().is_empty());
    bus.shutdown(Duration::from_secs(5)).await;
}

/// A hook that panics on every other PreToolUse.
struct Flaky {
    n: AtomicUsize,
}

#[async_trait]
impl Hook for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        if self.n.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
            panic!("flaky hook exploded");
        }
        Ok(PreToolUseAction::allow().into())
    }
}

/// FL-1, FL-3: a hook whose future panics when it is dropped, after it answered, still has its
/// answer folded; its actor is restarted and serves the next event.
#[tokio::test]
async fn a_hook_future_that_panics_on_drop_still_answers() {
    struct Answered(Option<PreToolUseAction>);
    impl std::future::Future for Answered {
        type Output = HookResult<PreToolUseAction>;
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Self::Output> {
            let action = self.0.take().unwrap_or_else(PreToolUseAction::allow);
            std::task::Poll::Ready(Ok(action.into()))
        }
    }
    impl Drop for Answered {
        fn drop(&mut self) {
            panic!("dropped after answering");
        }
    }
    struct Guarding;
    #[async_trait]
    impl Hook for Guarding {
        fn name(&self) -> &str {
            "guarding"
        }
        fn pre_tool_use<'a, 'b, 'c, 'f>(
            &'a self,
            _: &'b HookCx,
            _: &'c PreToolUse,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = HookResult<PreToolUseAction>> + Send + 'f>,
        >
        where
            'a: 'f,
            'b: 'f,
            'c: 'f,
            Self: 'f,
        {
            Box::pin(Answered(Some(PreToolUseAction::block("guarded"))))
        }
    }
    let bus = Bus::new();
    bus.register(Guarding).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    for i in 0..3 {
        let out = s.dispatch(bash("ls", &format!("d{i}"))).await.unwrap();
        assert_eq!(out.decision, Decision::Block, "event {i}: {out:?}");
        assert_eq!(out.runs[0].status, RunStatus::Answered);
    }
}

/// FL-1, FL-3: a panicking hook keeps serving; the panic is a warning in the result.
#[tokio::test]
async fn panics_are_isolated_and_reported() {
    let bus = Bus::new();
    bus.register(Flaky {
        n: AtomicUsize::new(0),
    })
    .await
    .unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    for i in 0..6 {
        let out = s.dispatch(bash("ls", &format!("t{i}"))).await.unwrap();
        if i % 2 == 0 {
            assert_eq!(out.decision, Decision::Allow);
            assert!(out.warnings.is_empty());
        } else {
            assert_eq!(out.decision, Decision::Continue, "fail-open");
            assert!(
                matches!(out.runs[0].status, RunStatus::Panicked(ref p) if p.contains("exploded"))
            );
            assert!(
                out.warnings[0].value.contains("panicked"),
                "{:?}",
                out.warnings
            );
        }
    }
    assert_eq!(bus.metrics().hook_panics, 3);
}

/// A hook that never answers, recording whether its cancellation token fired.
#[derive(Clone)]
struct Hangs {
    name: String,
    policy: FailurePolicy,
    cancelled: Arc<AtomicUsize>,
}

#[async_trait]
impl Hook for Hangs {
    fn name(&self) -> &str {
        &self.name
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .timeout(Duration::from_secs(2))
            .failure(self.policy)
    }
    async fn pre_tool_use(&self, cx: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        let token = cx.cancellation().clone();
        let flag = self.cancelled.clone();
        // Watch the token from a separate task, since this future is dropped on timeout.
        tokio::spawn(async move {
            token.cancelled().await;
            flag.fetch_add(1, Ordering::SeqCst);
        });
        std::future::pending::<()>().await;
        unreachable!()
    }
}

/// FL-1, FL-3: a hook that never answers times out: Open → Continue + warning, Closed → Block;
/// its cancellation token fired.
#[tokio::test(start_paused = true)]
async fn timeouts_follow_the_failure_policy_and_cancel_the_hook() {
    for (policy, decision) in [
        (FailurePolicy::Open, Decision::Continue),
        (FailurePolicy::Closed, Decision::Block),
    ] {
        let bus = Bus::new();
        let hook = Hangs {
            name: "hangs".into(),
            policy,
            cancelled: Arc::default(),
        };
        bus.register(hook.clone()).await.unwrap();
        let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
        let started = Instant::now();
        let out = s.dispatch(bash("ls", "t")).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(out.decision, decision, "{policy:?}");
        assert_eq!(out.runs[0].status, RunStatus::TimedOut);
        assert!(out.warnings[0].value.contains("timed out"));
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(hook.cancelled.load(Ordering::SeqCst), 1, "token fired");
        // Fail-closed on an event after the fact is only a warning.
        let out = s.dispatch(post("Bash", json!("x"), "t")).await.unwrap();
        assert!(out.runs.is_empty() || out.decision != Decision::Block);
        bus.shutdown(Duration::from_secs(1)).await;
    }
}

/// HOOK_TIMEOUT_SECS changes the default; a hook's own timeout wins.
#[tokio::test(start_paused = true)]
async fn hook_timeout_env_sets_the_default() {
    std::env::set_var("HOOK_TIMEOUT_SECS", "3");
    let bus = Bus::new();
    std::env::remove_var("HOOK_TIMEOUT_SECS");
    bus.register(
        ScriptHook::new("slow", |_| PreToolUseAction::allow()).delay(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let started = Instant::now();
    let out = s.dispatch(bash("ls", "t")).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert_eq!(out.runs[0].status, RunStatus::TimedOut);
}

/// A custom actor whose reply slot is dropped: a failure under its policy, never a hang.
#[tokio::test(start_paused = true)]
async fn dropped_reply_slot_is_a_failure_not_a_hang() {
    let bus = Bus::new();
    let mut mailbox = bus
        .subscribe(Subscription::gate(
            "dropper",
            HookOptions::new()
                .events([EventKind::PreToolUse])
                .fail_closed(),
        ))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Some(delivery) = mailbox.recv().await {
            drop(delivery); // never answers
        }
    });
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let started = Instant::now();
    let out = s.dispatch(bash("ls", "t")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "no hang");
    assert_eq!(out.runs[0].status, RunStatus::ReplyDropped);
    assert_eq!(out.decision, Decision::Block, "fail-closed");
    assert_eq!(bus.metrics().hook_reply_dropped, 1);
}

/// A user task subscribed as a gate answers PreToolUse through its reply slots.
#[tokio::test]
async fn custom_actor_answers_through_its_mailbox() {
    use tokio_stream::StreamExt;
    let bus = Bus::new();
    let mut mailbox = bus
        .subscribe(Subscription::gate(
            "guard",
            HookOptions::new().events([EventKind::PreToolUse]),
        ))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Some(delivery) = mailbox.next().await {
            let blocked = delivery
                .envelope()
                .event
                .tool()
                .is_some_and(|(_, i)| i["command"] == "rm");
            let reply = if blocked {
                Reply::block("no rm")
            } else {
                Reply::proceed().with_context("checked")
            };
            delivery.reply(reply);
        }
    });
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let out = s.dispatch(bash("rm", "1")).await.unwrap();
    assert_eq!(out.decision, Decision::Block);
    assert_eq!(out.reason_text(), "no rm");
    let out = s.dispatch(bash("ls", "2")).await.unwrap();
    assert_eq!(out.decision, Decision::Continue);
    assert_eq!(
        out.contexts[0].to_string(),
        "[Hook: guard | PreToolUse] checked"
    );
    // HK-2: an action that does not fit the event is ignored with a warning.
    let mut mb = bus
        .subscribe(Subscription::gate(
            "wrong",
            HookOptions::new().events([EventKind::Notification]),
        ))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Some(d) = mb.recv().await {
            d.reply(Reply::action(PostToolUseAction::replace(json!("x"))));
        }
    });
    let out = s.dispatch(notification("n")).await.unwrap();
    assert!(out
        .warnings
        .iter()
        .any(|w| w.hook == "wrong" && w.value.contains("does not fit")));
    assert_eq!(bus.metrics().ignored_actions, 1);
}

/// ORD-2, ORD-3: B after A sees A's mutation; A blocks → B is not called; cycles and unknown
/// names are rejected; sequential mode chains every hook.
#[tokio::test]
async fn after_chains_see_mutations_and_stop_on_block() {
    let bus = Bus::new();
    let a = ScriptHook::new("A", |ev| {
        if ev.tool_input["command"] == "danger" {
            PreToolUseAction::block("A says no")
        } else {
            PreToolUseAction::mutate(json!({"command": "rewritten-by-A"}))
        }
    });
    let b = ScriptHook::new("B", |ev| {
        PreToolUseAction::mutate(
            json!({"command": format!("{}+B", ev.tool_input["command"].as_str().unwrap())}),
        )
    })
    .options(|o| o.after("A"));
    // Registered B first: `after` still orders it after A.
    bus.register(a.clone()).await.unwrap();
    bus.register(b.clone()).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let out = s.dispatch(bash("ls", "1")).await.unwrap();
    assert_eq!(b.seen.lock()[0], json!({"command": "rewritten-by-A"}));
    assert_eq!(
        out.updated_input,
        Some(json!({"command": "rewritten-by-A+B"}))
    );

    let out = s.dispatch(bash("danger", "2")).await.unwrap();
    assert_eq!(out.decision, Decision::Block);
    assert_eq!(b.calls(), 1, "B is not called after A blocked");
    assert_eq!(out.runs[1].status, RunStatus::SkippedDependencyBlocked);

    // Unknown name and cycle.
    let err = bus
        .register(
            ScriptHook::new("C", |_| PreToolUseAction::proceed()).options(|o| o.after("nope")),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownDependency { ref missing, .. } if missing == "nope"));
    let bus2 = Bus::new();
    bus2.register(ScriptHook::new("X", |_| PreToolUseAction::proceed()).options(|o| o.after("Y")))
        .await
        .unwrap_err();
    // Build a cycle through session scope: global Y after session X is impossible, so use
    // registration order: X (after nothing), Y after X, then re-register X after Y under a new name.
    bus2.register(ScriptHook::new("P", |_| PreToolUseAction::proceed()))
        .await
        .unwrap();
    bus2.register(ScriptHook::new("Q", |_| PreToolUseAction::proceed()).options(|o| o.after("P")))
        .await
        .unwrap();
    let s2 = bus2.open_session(BusSessionConfig::new()).await.unwrap();
    s2.register(ScriptHook::new("R", |_| PreToolUseAction::proceed()).options(|o| o.after("Q")))
        .await
        .unwrap();
    // A session-scope P' shadows nothing but depends on R, closing R -> Q -> P? No: P has no deps.
    // A real cycle: two session hooks after each other.
    s2.register(ScriptHook::new("S1", |_| PreToolUseAction::proceed()).options(|o| o.after("S2")))
        .await
        .unwrap_err();
    let err = s2
        .register(ScriptHook::new("P", |_| PreToolUseAction::proceed()).options(|o| o.after("R")))
        .await
        .unwrap_err();
    match err {
        Error::DependencyCycle(names) => {
            assert!(
                names.contains(&"P".to_string()) && names.contains(&"R".to_string()),
                "{names:?}"
            );
        }
        other => panic!("expected a cycle, got {other}"),
    }
}

/// Sequential mode behaves like a chain: each hook sees the previous mutation; a block ends it.
#[tokio::test]
async fn sequential_mode_is_a_chain() {
    let bus = Bus::builder().sequential(EventKind::PreToolUse).build();
    let hooks: Vec<ScriptHook> = (0..3)
        .map(|i| {
            ScriptHook::new(&format!("h{i}"), move |ev| {
                let cmd = ev.tool_input["command"].as_str().unwrap().to_owned();
                if cmd.ends_with("stop") {
                    PreToolUseAction::block("stop")
                } else {
                    PreToolUseAction::mutate(json!({ "command": format!("{cmd}{i}") }))
                }
            })
        })
        .collect();
    for h in &hooks {
        bus.register(h.clone()).await.unwrap();
    }
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let out = s.dispatch(bash("x", "1")).await.unwrap();
    assert_eq!(out.updated_input, Some(json!({"command": "x012"})));
    assert_eq!(hooks[2].seen.lock()[0], json!({"command": "x01"}));
    let out = s.dispatch(bash("stop", "2")).await.unwrap();
    assert_eq!(out.decision, Decision::Block);
    assert_eq!(hooks[1].calls(), 1, "h1 not called after h0 blocked");
    assert_eq!(hooks[2].calls(), 1);
}

/// In parallel mode every matching hook runs, even when another blocks (ORD-3).
#[tokio::test]
async fn parallel_mode_runs_every_hook() {
    let bus = Bus::new();
    let blocker = ScriptHook::new("blocker", |_| PreToolUseAction::block("no"));
    let logger = ScriptHook::new("logger", |_| PreToolUseAction::proceed());
    bus.register(blocker.clone()).await.unwrap();
    bus.register(logger.clone()).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let out = s.dispatch(bash("x", "1")).await.unwrap();
    assert_eq!(out.decision, Decision::Block);
    assert_eq!(logger.calls(), 1);
}

/// Tool filters are evaluated before any message: a non-matching hook is never called.
#[tokio::test]
async fn filters_decide_who_is_called() {
    let bus = Bus::new();
    let env_guard = ScriptHook::new("env-guard", |_| PreToolUseAction::block(".env is private"))
        .options(|o| {
            o.filter(
                ToolFilter::names("file_*")
                    .unwrap()
                    .arg("path:.env")
                    .unwrap(),
            )
        });
    let push_guard = ScriptHook::new("push-guard", |_| PreToolUseAction::ask("pushing?"))
        .options(|o| o.filter(ToolFilter::rule("Bash(git push *)").unwrap()));
    bus.register(env_guard.clone()).await.unwrap();
    bus.register(push_guard.clone()).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let out = s
        .dispatch(pre("file_read", json!({"path": "a/.env"}), "1"))
        .await
        .unwrap();
    assert_eq!(out.decision, Decision::Block);
    let out = s
        .dispatch(pre("file_read", json!({"path": "a/main.rs"}), "2"))
        .await
        .unwrap();
    assert_eq!(out.decision, Decision::Continue);
    let out = s.dispatch(bash("git push origin", "3")).await.unwrap();
    assert_eq!(out.decision, Decision::Ask);
    s.dispatch(bash("git status", "4")).await.unwrap();
    assert_eq!(env_guard.calls(), 1);
    assert_eq!(push_guard.calls(), 1);
    assert!(matches!(
        ToolFilter::regex("(").unwrap_err(),
        Error::InvalidRegex { .. }
    ));
}

/// A hook that stays blocked until released, to hold a dispatch open.
struct Gate {
    release: Arc<tokio::sync::Notify>,
    entered: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Hook for Gate {
    fn name(&self) -> &str {
        "held"
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        self.entered.notify_one();
        self.release.notified().await;
        Ok(Default::default())
    }
}

/// HK-5: an event already being dispatched keeps the set it started with; registration and
/// removal take effect for events dispatched after the call returns.
#[tokio::test]
async fn registration_during_dispatch_keeps_the_started_set() {
    let bus = Bus::new();
    let release = Arc::new(tokio::sync::Notify::new());
    let entered = Arc::new(tokio::sync::Notify::new());
    bus.register(Gate {
        release: release.clone(),
        entered: entered.clone(),
    })
    .await
    .unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let s2 = s.clone();
    let inflight = tokio::spawn(async move { s2.dispatch(bash("x", "1")).await.unwrap() });
    entered.notified().await;
    let late = ScriptHook::new("late", |_| PreToolUseAction::block("late"));
    bus.register(late.clone()).await.unwrap();
    release.notify_one();
    let first = inflight.await.unwrap();
    assert_eq!(first.decision, Decision::Continue);
    assert_eq!(late.calls(), 0);
    assert_eq!(first.runs.len(), 1);
    let release2 = release.clone();
    let s3 = s.clone();
    let second = tokio::spawn(async move { s3.dispatch(bash("x", "2")).await.unwrap() });
    entered.notified().await;
    release2.notify_one();
    let second = second.await.unwrap();
    assert_eq!(second.decision, Decision::Block);
    bus.unregister("late").await.unwrap();
    let s4 = s.clone();
    let third = tokio::spawn(async move { s4.dispatch(bash("x", "3")).await.unwrap() });
    entered.notified().await;
    release.notify_one();
    assert_eq!(third.await.unwrap().decision, Decision::Continue);
    assert!(matches!(
        bus.unregister("late").await,
        Err(Error::NoSuchHook(_))
    ));
}

/// FL-1: every run of an outcome names the hook that made it, in fold order, also after the
/// registry changed between two dispatches of the same session (a hook placed in front by its
/// priority, one removed, a session hook added).
#[tokio::test]
async fn runs_name_their_hooks_after_the_registry_changes() {
    let bus = Bus::new();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let names = |o: &Outcome| {
        o.runs
            .iter()
            .map(|r| r.hook.to_string())
            .collect::<Vec<_>>()
    };
    for name in ["a", "b"] {
        bus.register(ScriptHook::new(name, |_| PreToolUseAction::allow()))
            .await
            .unwrap();
    }
    let first = s.dispatch(bash("x", "1")).await.unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    let front =
        ScriptHook::new("front", |_| PreToolUseAction::block("front")).options(|o| o.priority(-5));
    bus.register(front).await.unwrap();
    let second = s.dispatch(bash("x", "2")).await.unwrap();
    assert_eq!(names(&second), ["front", "a", "b"]);
    assert_eq!(second.decided_by(), Some("front"));
    bus.unregister("a").await.unwrap();
    s.register(ScriptHook::new("own", |_| PreToolUseAction::allow()))
        .await
        .unwrap();
    let third = s.dispatch(bash("x", "3")).await.unwrap();
    assert_eq!(names(&third), ["front", "b", "own"]);
    // The first outcome still names what it ran.
    assert_eq!(names(&first), ["a", "b"]);
}

/// HK-4, FL-2, FL-6: a stuck observer with mailbox 4 given 10 events never delays the session
/// beyond the enqueue limit; the drops are counted and reported; a healthy observer loses
/// nothing.
#[tokio::test(start_paused = true)]
async fn stuck_observer_never_stalls_the_session() {
    struct Stuck;
    #[async_trait]
    impl Observer for Stuck {
        fn name(&self) -> &str {
            "stuck"
        }
        fn options(&self) -> ObserverOptions {
            ObserverOptions::new()
                .mailbox(4)
                .timeout(Duration::from_secs(3600))
        }
        async fn on_event(&self, _: &Arc<Envelope>) {
            std::future::pending::<()>().await;
        }
    }
    let bus = Bus::new();
    bus.observe(Stuck).await.unwrap();
    let healthy = Recorder::new("healthy");
    bus.observe(healthy.clone()).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let started = Instant::now();
    for _ in 0..10 {
        s.dispatch(notification("n")).await.unwrap();
    }
    let took = started.elapsed();
    assert!(took <= DEFAULT_ENQUEUE_WAIT, "session delayed {took:?}");
    // 1 taken by the stuck observer + 4 queued; the other 5 dropped.
    assert_eq!(bus.metrics().observer_dropped, 5);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(healthy.events().len(), 10);
    let started = Instant::now();
    let report = bus.shutdown(Duration::from_secs(1)).await;
    assert!(
        started.elapsed() <= Duration::from_millis(1_100),
        "shutdown kept its deadline"
    );
    // The 5 above, plus the shutdown's SessionEnd for the congested observer.
    assert_eq!(report.observer_events_dropped, 6, "{report:?}");
    assert_eq!(report.sessions_closed, 1);
    assert!(report.killed, "the stuck observer had to be killed");
    assert_eq!(healthy.events().last().unwrap().2, EventKind::SessionEnd);
}

/// Shutdown with 10,000 queued events for a slow observer delivers all 10,000, closes open
/// sessions with SessionEnd `shutdown`, and leaves no task running.
#[tokio::test(start_paused = true)]
async fn shutdown_drains_observers_and_closes_sessions() {
    let bus = Bus::new();
    let mut slow = Recorder::new("slow");
    slow.options = ObserverOptions::new().mailbox(20_000);
    slow.delay = Duration::from_millis(1);
    bus.observe(slow.clone()).await.unwrap();
    let ends = Arc::new(Mutex::new(Vec::new()));
    struct EndReason(Arc<Mutex<Vec<String>>>);
    #[async_trait]
    impl Hook for EndReason {
        fn name(&self) -> &str {
            "end-reason"
        }
        async fn session_end(&self, _: &HookCx, ev: &SessionEnd) -> HookResult<()> {
            self.0.lock().push(ev.reason.clone());
            Ok(Default::default())
        }
    }
    bus.register(EndReason(ends.clone())).await.unwrap();
    let s = bus
        .open_session(BusSessionConfig::new().id("open"))
        .await
        .unwrap();
    for _ in 0..9_999 {
        s.dispatch(notification("n")).await.unwrap();
    }
    let report = bus.shutdown(Duration::from_secs(60)).await;
    assert_eq!(report.sessions_closed, 1);
    assert!(!report.killed);
    assert_eq!(
        slow.events().len(),
        10_000,
        "9,999 notifications + SessionEnd"
    );
    assert_eq!(report.observer_events_delivered, 10_000);
    assert_eq!(*ends.lock(), vec!["shutdown".to_string()]);
    assert!(matches!(
        bus.open_session(BusSessionConfig::new()).await,
        Err(Error::ShuttingDown)
    ));
}

/// FL-4: after N consecutive failures the hook is skipped for the cool-down.
#[tokio::test(start_paused = true)]
async fn circuit_breaker_skips_a_failing_hook_for_the_cool_down() {
    struct Broken(Arc<AtomicUsize>);
    #[async_trait]
    impl Hook for Broken {
        fn name(&self) -> &str {
            "broken"
        }
        fn options(&self) -> HookOptions {
            HookOptions::new().circuit_breaker(2, Duration::from_secs(10))
        }
        async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(HookError::new("backend down"))
        }
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let bus = Bus::new();
    bus.register(Broken(calls.clone())).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    for i in 0..4 {
        let out = s.dispatch(bash("x", &i.to_string())).await.unwrap();
        if i >= 2 {
            assert_eq!(out.runs[0].status, RunStatus::SkippedCircuitOpen);
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    tokio::time::sleep(Duration::from_secs(11)).await;
    s.dispatch(bash("x", "later")).await.unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "called again after the cool-down"
    );
}

/// Contexts are tagged with their source and de-duplicated within a dispatch; metadata,
/// system messages and the first stop request are kept.
#[tokio::test]
async fn contexts_are_tagged_and_deduplicated() {
    struct Ctx(&'static str);
    #[async_trait]
    impl Hook for Ctx {
        fn name(&self) -> &str {
            self.0
        }
        async fn notification(&self, _: &HookCx, _: &Notification) -> HookResult<()> {
            Ok(HookOutput::new(())
                .context("same text")
                .context(format!("from {}", self.0))
                .metadata("who", json!(self.0))
                .system_message(format!("msg {}", self.0))
                .stop(format!("stop {}", self.0)))
        }
    }
    let bus = Bus::new();
    bus.register(Ctx("one")).await.unwrap();
    bus.register(Ctx("two")).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let out = s.dispatch(notification("n")).await.unwrap();
    let texts: Vec<String> = out.contexts.iter().map(ToString::to_string).collect();
    assert_eq!(
        texts,
        vec![
            "[Hook: one | Notification] same text",
            "[Hook: one | Notification] from one",
            "[Hook: two | Notification] from two",
        ]
    );
    assert_eq!(out.metadata.len(), 2);
    assert_eq!(out.system_messages.len(), 2);
    assert_eq!(out.stop.as_ref().unwrap().value, "stop one");
}

/// The scratchpad is shared by a session's hooks (HK-7) and separate per session.
#[tokio::test]
async fn scratchpad_correlates_pre_and_post() {
    struct Correlate;
    #[async_trait]
    impl Hook for Correlate {
        fn name(&self) -> &str {
            "correlate"
        }
        async fn pre_tool_use(&self, cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
            cx.scratchpad()
                .insert(ev.tool_use_id.clone(), ev.tool_name.clone());
            Ok(Default::default())
        }
        async fn post_tool_use(
            &self,
            cx: &HookCx,
            ev: &PostToolUse,
        ) -> HookResult<PostToolUseAction> {
            let tool: Option<String> = cx.scratchpad().remove(&ev.tool_use_id);
            Ok(HookOutput::new(PostToolUseAction::keep()).context(format!("paired {tool:?}")))
        }
    }
    let bus = Bus::new();
    bus.register(Correlate).await.unwrap();
    let a = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let b = bus.open_session(BusSessionConfig::new()).await.unwrap();
    a.dispatch(bash("x", "id1")).await.unwrap();
    let out_b = b.dispatch(post("Bash", json!("o"), "id1")).await.unwrap();
    assert_eq!(out_b.contexts[0].text, "paired None");
    let out_a = a.dispatch(post("Bash", json!("o"), "id1")).await.unwrap();
    assert_eq!(out_a.contexts[0].text, "paired Some(\"Bash\")");
}

/// Post folding: the last replacement in fold order wins, feedback is all kept.
#[tokio::test(start_paused = true)]
async fn post_replacement_last_in_fold_order_wins() {
    struct Replace(&'static str, u64);
    #[async_trait]
    impl Hook for Replace {
        fn name(&self) -> &str {
            self.0
        }
        async fn post_tool_use(
            &self,
            _: &HookCx,
            _: &PostToolUse,
        ) -> HookResult<PostToolUseAction> {
            tokio::time::sleep(Duration::from_millis(self.1)).await;
            Ok(PostToolUseAction {
                replace_output: Some(json!(self.0)),
                block_reason: Some(format!("fb {}", self.0)),
            }
            .into())
        }
    }
    let bus = Bus::new();
    bus.register(Replace("first", 50)).await.unwrap();
    bus.register(Replace("second", 1)).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let out = s.dispatch(post("Bash", json!("orig"), "1")).await.unwrap();
    assert_eq!(out.updated_output, Some(json!("second")));
    assert_eq!(out.feedback.len(), 2);
    assert_eq!(out.feedback[0].value, "fb first");
}

/// Dropping every handle of a session closes it (ACT-5) with SessionEnd `other`.
#[tokio::test]
async fn dropping_the_last_handle_closes_the_session() {
    let bus = Bus::new();
    let rec = Recorder::new("rec");
    bus.observe(rec.clone()).await.unwrap();
    let s = bus
        .open_session(BusSessionConfig::new().id("dropme"))
        .await
        .unwrap();
    s.dispatch(notification("n")).await.unwrap();
    drop(s);
    for _ in 0..100 {
        if bus.sessions().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(bus.sessions().is_empty());
    bus.shutdown(Duration::from_secs(5)).await;
    assert_eq!(rec.events().last().unwrap().2, EventKind::SessionEnd);
}

/// Public handles are `Send + Sync` (checked at compile time).
#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Bus>();
    assert_send_sync::<BusSession>();
    assert_send_sync::<Mailbox>();
    assert_send_sync::<ReplySlot>();
    assert_send_sync::<Outcome>();
    assert_send_sync::<Scratchpad>();
    assert_send_sync::<HookCx>();
}

/// A PreToolUse hook that takes `delay`, notes whether its token fired, and records the tool
/// use ids it saw, in order.
#[derive(Clone)]
struct Slow {
    name: &'static str,
    delay: Duration,
    inline: bool,
    seen: Arc<Mutex<Vec<String>>>,
    cancelled: Arc<AtomicUsize>,
    tasks: Arc<Mutex<Vec<Option<tokio::task::Id>>>>,
}

impl Slow {
    fn new(name: &'static str, delay: Duration, inline: bool) -> Self {
        Self {
            name,
            delay,
            inline,
            seen: Arc::default(),
            cancelled: Arc::default(),
            tasks: Arc::default(),
        }
    }
}

#[async_trait]
impl Hook for Slow {
    fn name(&self) -> &str {
        self.name
    }
    fn options(&self) -> HookOptions {
        let o = HookOptions::new()
            .events([EventKind::PreToolUse])
            .timeout(Duration::from_secs(10));
        if self.inline {
            o.inline()
        } else {
            o
        }
    }
    async fn pre_tool_use(&self, cx: &HookCx, e: &PreToolUse) -> HookResult<PreToolUseAction> {
        self.tasks.lock().push(tokio::task::try_id());
        tokio::select! {
            _ = cx.cancellation().cancelled() => {
                self.cancelled.fetch_add(1, Ordering::SeqCst);
            }
            _ = tokio::time::sleep(self.delay) => {}
        }
        self.seen.lock().push(e.tool_use_id.clone());
        Ok(PreToolUseAction::proceed().into())
    }
}

/// ORD-1 and "nothing lost": a caller that stops waiting for a dispatch (its future dropped
/// under a timeout) does not cut the dispatch short. Its hooks run to the end uncancelled,
/// observers get the event, and the session's next dispatch waits for it.
#[tokio::test(start_paused = true)]
async fn a_dispatch_the_caller_gives_up_on_still_runs_to_its_end() {
    let bus = Bus::new();
    let rec = Recorder::new("rec");
    bus.observe(rec.clone()).await.unwrap();
    let actor = Slow::new("actor", Duration::from_millis(300), false);
    let inline = Slow::new("inline", Duration::from_millis(200), true);
    bus.register(actor.clone()).await.unwrap();
    bus.register(inline.clone()).await.unwrap();
    let s = bus
        .open_session(BusSessionConfig::new().id("impatient"))
        .await
        .unwrap();
    let gave_up =
        tokio::time::timeout(Duration::from_millis(50), s.dispatch(bash("ls", "t1"))).await;
    assert!(gave_up.is_err(), "the caller stopped waiting");
    let started = Instant::now();
    let second = s.dispatch(bash("ls", "t2")).await.unwrap();
    assert_eq!(second.seq, 2);
    assert!(
        started.elapsed()
            >= Duration::from_millis(250) + Duration::from_millis(300) - Duration::from_millis(50),
        "the second dispatch waited for the first: {:?}",
        started.elapsed()
    );
    for hook in [&actor, &inline] {
        assert_eq!(*hook.seen.lock(), ["t1", "t2"], "{}", hook.name);
        assert_eq!(hook.cancelled.load(Ordering::SeqCst), 0, "{}", hook.name);
    }
    s.close("done").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
    let kinds: Vec<_> = rec.events().into_iter().map(|e| (e.1, e.2)).collect();
    assert_eq!(
        kinds,
        [
            (1, EventKind::PreToolUse),
            (2, EventKind::PreToolUse),
            (3, EventKind::SessionEnd)
        ]
    );
}

/// A session's dispatcher runs on the task that dispatches (ACT-3, its own dispatcher): an
/// inline hook is polled on the caller's own task, and an actor hook on its actor's.
#[tokio::test]
async fn inline_hooks_run_on_the_dispatching_task_and_actor_hooks_on_their_own() {
    let bus = Bus::new();
    let actor = Slow::new("actor", Duration::ZERO, false);
    let inline = Slow::new("inline", Duration::ZERO, true);
    bus.register(actor.clone()).await.unwrap();
    bus.register(inline.clone()).await.unwrap();
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let caller = tokio::spawn(async move {
        s.dispatch(bash("ls", "t1")).await.unwrap();
        tokio::task::id()
    })
    .await
    .unwrap();
    assert_eq!(*inline.tasks.lock(), [Some(caller)]);
    let actor_task = actor.tasks.lock()[0];
    assert!(actor_task.is_some_and(|t| t != caller), "{actor_task:?}");
    bus.shutdown(Duration::from_secs(5)).await;
}

/// A caller outside every task (`block_on` on a thread of its own) has its dispatch run on a
/// task of the runtime: the hooks are then woken from the runtime's workers, not from outside.
#[test]
fn a_caller_outside_every_task_has_its_dispatch_run_on_a_task() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let inline = Slow::new("inline", Duration::ZERO, true);
    let (bus, s) = rt.block_on(async {
        let bus = Bus::new();
        bus.register(inline.clone()).await.unwrap();
        let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
        (bus, s)
    });
    assert!(tokio::task::try_id().is_none());
    let out = rt.block_on(s.dispatch(bash("ls", "t1"))).unwrap();
    assert_eq!(out.seq, 1);
    let ran_on = inline.tasks.lock()[0];
    assert!(ran_on.is_some(), "the inline hook ran inside a task");
    rt.block_on(bus.shutdown(Duration::from_secs(5)));
}

/// Hooks found by the tool's name and hooks asked one by one come out in one fold order
/// (registration order), whichever list each is in; a hook for another tool is not run.
#[tokio::test]
async fn tool_indexed_and_filtered_hooks_keep_registration_order() {
    let bus = Bus::new();
    let named = |n: &str| ToolFilter::names(n).unwrap();
    let specs: [(&'static str, Option<ToolFilter>); 7] = [
        ("bash-1", Some(named("Bash"))),
        ("any-1", None),
        ("any-2", None),
        ("bash-or-read", Some(named("Bash|Read"))),
        ("read-only", Some(named("Read"))),
        ("any-3", None),
        ("bash-2", Some(named("Bash"))),
    ];
    for (name, filter) in specs {
        let hook = ScriptHook::new(name, |_| PreToolUseAction::allow());
        let hook = match filter {
            Some(f) => hook.options(|o| o.filter(f)),
            None => hook,
        };
        bus.register(hook).await.unwrap();
    }
    let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
    let out = s.dispatch(bash("ls", "1")).await.unwrap();
    let ran: Vec<&str> = out.runs.iter().map(|r| r.hook.as_ref()).collect();
    assert_eq!(
        ran,
        [
            "bash-1",
            "any-1",
            "any-2",
            "bash-or-read",
            "any-3",
            "bash-2"
        ]
    );
}

/// An observer is usually the last to hold an event; it hands the envelope back to its
/// session, which frees it at its next dispatch (on its own task, where it was made) or when
/// it ends, rather than on the observer's worker.
#[tokio::test]
async fn an_observer_hands_the_last_hold_on_an_envelope_back_to_its_session() {
    struct Keep {
        seen: Mutex<Vec<std::sync::Weak<Envelope>>>,
        done: tokio::sync::Notify,
    }
    #[async_trait]
    impl Observer for Keep {
        fn name(&self) -> &str {
            "keep"
        }
        async fn on_event(&self, envelope: &Arc<Envelope>) {
            self.seen.lock().push(Arc::downgrade(envelope));
            self.done.notify_one();
        }
    }
    let keep = Arc::new(Keep {
        seen: Mutex::new(Vec::new()),
        done: tokio::sync::Notify::new(),
    });
    let bus = Bus::new();
    bus.observe_arc(keep.clone()).await.unwrap();
    let session = bus.open_session(BusSessionConfig::new()).await.unwrap();
    session.dispatch(bash("ls", "1")).await.unwrap();
    keep.done.notified().await;
    // The observer finished with the first event in the poll that told us so.
    let first = keep.seen.lock()[0].clone();
    assert!(
        first.upgrade().is_some(),
        "handed back to the session, not freed by the observer"
    );
    session.dispatch(bash("ls", "2")).await.unwrap();
    assert!(
        first.upgrade().is_none(),
        "freed by the session's next dispatch"
    );
    keep.done.notified().await;
    let second = keep.seen.lock()[1].clone();
    assert!(second.upgrade().is_some());
    drop(session);
    bus.shutdown(Duration::from_secs(5)).await;
    assert!(second.upgrade().is_none(), "freed when the session ended");
}
