//! Cancellation and failure semantics of the tool-call pipeline (LOOP-6, LOOP-7, FL-5): a
//! cancelled turn asks nobody, a call that never started is not executed, a panicking approver
//! denies one call and leaves the session usable, and "no approver" is its own denial source.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hookbus::*;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_stream::StreamExt;

/// Records every event kind of every session.
#[derive(Clone, Default)]
struct Tape(Arc<Mutex<Vec<EventKind>>>);

#[async_trait]
impl Observer for Tape {
    fn name(&self) -> &str {
        "tape"
    }
    async fn on_event(&self, env: &Arc<Envelope>) {
        self.0.lock().push(env.kind());
    }
}

impl Tape {
    fn has(&self, kind: EventKind) -> bool {
        self.0.lock().contains(&kind)
    }
}

/// A PreToolUse hook that waits for its token (or a minute), and says when it started.
#[derive(Clone, Default)]
struct Patient {
    started: Arc<tokio::sync::Notify>,
    saw_token: Arc<AtomicUsize>,
}

#[async_trait]
impl Hook for Patient {
    fn name(&self) -> &str {
        "patient"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PreToolUse])
            .timeout(Duration::from_secs(120))
    }
    async fn pre_tool_use(&self, cx: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        self.started.notify_one();
        tokio::select! {
            _ = cx.cancellation().cancelled() => {
                self.saw_token.fetch_add(1, Ordering::SeqCst);
            }
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        Ok(PreToolUseAction::proceed().into())
    }
}

/// Counts the questions it is asked, then answers.
#[derive(Clone)]
struct Counting(Arc<AtomicUsize>, Approval);

#[async_trait]
impl Approver for Counting {
    async fn approve(&self, _: ApprovalRequest) -> Approval {
        self.0.fetch_add(1, Ordering::SeqCst);
        self.1.clone()
    }
}

/// A tool that counts its runs.
#[derive(Clone, Default)]
struct Counted(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Counted {
    fn name(&self) -> &str {
        "act"
    }
    async fn execute(&self, _: Value, _: ToolCx) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(json!("done"))
    }
}

fn two_calls() -> ScriptedProvider {
    ScriptedProvider::new()
        .turn(
            ScriptTurn::text("acting")
                .call_with_id("a1", "act", json!({}))
                .call_with_id("a2", "act", json!({})),
        )
        .turn(ScriptTurn::text("never"))
}

#[tokio::test(start_paused = true)]
async fn cancel_during_a_pre_hook_asks_nobody_and_ends_the_turn_at_once() {
    let ws = tempfile::tempdir().unwrap();
    let patient = Patient::default();
    let tape = Tape::default();
    let asked = Arc::new(AtomicUsize::new(0));
    let tool = Counted::default();
    let agent = Agent::builder()
        .provider(two_calls())
        .clear_tools()
        .tool(tool.clone())
        // `act` is not read-only: the default mode would ask the approver.
        .approver(Counting(asked.clone(), Approval::AllowOnce))
        .approval_timeout(Duration::from_secs(300))
        .hook(patient.clone())
        .observer(tape.clone())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("c"))
        .await
        .unwrap();
    let running = tokio::spawn({
        let session = session.clone();
        async move { session.run_turn("go").await }
    });
    patient.started.notified().await;
    let t0 = Instant::now();
    session.cancel();
    let result = running.await.unwrap().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(result.reason, TerminalReason::Cancelled);
    assert_eq!(
        patient.saw_token.load(Ordering::SeqCst),
        1,
        "the hook saw its token"
    );
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "the approver was not asked"
    );
    assert_eq!(tool.0.load(Ordering::SeqCst), 0, "no tool ran");
    for call in &result.calls {
        assert_eq!(call.status, CallStatus::Cancelled, "{call:?}");
        assert!(!call.executed);
    }
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    assert!(!tape.has(EventKind::PermissionRequest));
    assert!(!tape.has(EventKind::Notification));
    assert!(!tape.has(EventKind::PostToolUseFailure));
    assert!(!tape.has(EventKind::PostToolUse));
    assert!(tape.has(EventKind::Interrupt));
}

/// An approver that cancels the turn and then takes its time.
struct CancelsTheTurn(Arc<Mutex<Option<AgentSession>>>);

#[async_trait]
impl Approver for CancelsTheTurn {
    async fn approve(&self, _: ApprovalRequest) -> Approval {
        if let Some(s) = self.0.lock().as_ref() {
            s.cancel();
        }
        tokio::time::sleep(Duration::from_secs(200)).await;
        Approval::AllowOnce
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_while_the_approver_is_asked_ends_the_wait_and_runs_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let tape = Tape::default();
    let tool = Counted::default();
    let slot = Arc::new(Mutex::new(None));
    let agent = Agent::builder()
        .provider(two_calls())
        .clear_tools()
        .tool(tool.clone())
        .approver(CancelsTheTurn(slot.clone()))
        .approval_timeout(Duration::from_secs(300))
        .observer(tape.clone())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("c"))
        .await
        .unwrap();
    *slot.lock() = Some(session.clone());
    let t0 = Instant::now();
    let result = session.run_turn("go").await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(result.reason, TerminalReason::Cancelled);
    assert_eq!(tool.0.load(Ordering::SeqCst), 0);
    assert!(!result.calls[0].executed);
    assert_eq!(
        result.calls[0].status,
        CallStatus::Denied {
            source: DenialSource::Cancelled
        }
    );
    slot.lock().take();
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    assert!(!tape.has(EventKind::PostToolUseFailure));
}

/// An approver that panics on its first question, then allows.
#[derive(Clone, Default)]
struct PanicsOnce(Arc<AtomicUsize>);

#[async_trait]
impl Approver for PanicsOnce {
    async fn approve(&self, _: ApprovalRequest) -> Approval {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("approver bug");
        }
        Approval::AllowOnce
    }
}

#[tokio::test]
async fn a_panicking_approver_denies_that_call_and_the_session_goes_on() {
    let ws = tempfile::tempdir().unwrap();
    let tool = Counted::default();
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("one").call_with_id("a1", "act", json!({})))
                .turn(ScriptTurn::text("first turn done"))
                .turn(ScriptTurn::text("two").call_with_id("a2", "act", json!({})))
                .turn(ScriptTurn::text("second turn done")),
        )
        .clear_tools()
        .tool(tool.clone())
        .approver(PanicsOnce::default())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("p"))
        .await
        .unwrap();
    let first = session.run_turn("go").await.unwrap();
    assert_eq!(
        first.calls[0].status,
        CallStatus::Denied {
            source: DenialSource::Error
        }
    );
    assert!(
        first.calls[0].content.contains("approver bug"),
        "{}",
        first.calls[0].content
    );
    let second = session.run_turn("again").await.unwrap();
    assert_eq!(second.calls[0].status, CallStatus::Completed);
    assert_eq!(tool.0.load(Ordering::SeqCst), 1);
    assert_eq!(agent.sessions(), vec!["p".to_owned()]);
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn without_an_approver_an_ask_is_denied_with_its_own_source_and_no_prompt() {
    let ws = tempfile::tempdir().unwrap();
    let tape = Tape::default();
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("one").call_with_id("a1", "act", json!({})))
                .turn(ScriptTurn::text("done")),
        )
        .clear_tools()
        .tool(Counted::default())
        .observer(tape.clone())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("n"))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    assert_eq!(
        result.calls[0].status,
        CallStatus::Denied {
            source: DenialSource::NoApprover
        }
    );
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    assert!(!tape.has(EventKind::Notification), "nobody was prompted");
    assert!(tape.has(EventKind::PermissionDenied));
}

#[tokio::test]
async fn a_closed_session_refuses_subscriptions_even_after_its_id_is_reused() {
    let bus = Bus::new();
    let old = bus
        .open_session(BusSessionConfig::new().id("same"))
        .await
        .unwrap();
    old.close("done").await.unwrap();
    let observer = || Subscription::observer("late", ObserverOptions::default());
    assert!(matches!(
        old.subscribe(observer()).await,
        Err(Error::SessionClosed(id)) if id == "same"
    ));
    assert!(matches!(
        old.subscribe(Subscription::gate("late-gate", HookOptions::new()))
            .await,
        Err(Error::SessionClosed(_))
    ));
    // A later session with the same id: the old handle still refuses, and nothing leaks over.
    let new = bus
        .open_session(BusSessionConfig::new().id("same"))
        .await
        .unwrap();
    assert!(matches!(
        old.subscribe(observer()).await,
        Err(Error::SessionClosed(_))
    ));
    let mut mailbox = new.subscribe(observer()).await.unwrap();
    new.dispatch(Event::Notification(Notification {
        message: "hi".into(),
        title: None,
        notification_type: "idle_prompt".into(),
    }))
    .await
    .unwrap();
    assert!(mailbox.next().await.is_some());
    new.close("done").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn close_does_not_wait_the_grace_on_a_mailbox_nobody_reads() {
    let bus = Bus::new();
    let session = bus
        .open_session(BusSessionConfig::new().id("s"))
        .await
        .unwrap();
    let _unread = session
        .subscribe(Subscription::observer("unread", ObserverOptions::default()))
        .await
        .unwrap();
    session
        .dispatch(Event::Notification(Notification {
            message: "hi".into(),
            title: None,
            notification_type: "idle_prompt".into(),
        }))
        .await
        .unwrap();
    let t0 = Instant::now();
    session.close("done").await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    bus.shutdown(Duration::from_secs(5)).await;
}

/// A hook that waits on its token (or a minute) and records whether the token fired.
#[derive(Clone)]
struct WaitsOnToken {
    name: &'static str,
    timeout: Duration,
    saw: Arc<AtomicUsize>,
    token: Arc<Mutex<Option<CancellationToken>>>,
}

#[async_trait]
impl Hook for WaitsOnToken {
    fn name(&self) -> &str {
        self.name
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PreToolUse])
            .timeout(self.timeout)
    }
    async fn pre_tool_use(&self, cx: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        *self.token.lock() = Some(cx.cancellation().clone());
        tokio::select! {
            _ = cx.cancellation().cancelled() => {
                self.saw.fetch_add(1, Ordering::SeqCst);
            }
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        Ok(PreToolUseAction::proceed().into())
    }
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_hook_sees_its_own_token_fire_and_no_other_hook_does() {
    let bus = Bus::new();
    let slow = WaitsOnToken {
        name: "slow",
        timeout: Duration::from_secs(1),
        saw: Arc::default(),
        token: Arc::default(),
    };
    // A second hook of the same dispatch (a session hook), still running when the first times
    // out.
    let quick = WaitsOnToken {
        name: "quick",
        timeout: Duration::from_secs(120),
        saw: Arc::default(),
        token: Arc::default(),
    };
    bus.register(slow.clone()).await.unwrap();
    let session = bus
        .open_session(BusSessionConfig::new().id("t"))
        .await
        .unwrap();
    session.register(quick.clone()).await.unwrap();
    let dispatching = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .dispatch(Event::PreToolUse(PreToolUse {
                    tool_name: "x".into(),
                    tool_input: json!({}),
                    tool_use_id: "1".into(),
                }))
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The slow hook timed out: its token fired and its select! saw it within the grace.
    assert_eq!(
        slow.saw.load(Ordering::SeqCst),
        1,
        "the timed-out hook saw its token"
    );
    let quick_token = quick.token.lock().clone().expect("quick ran");
    assert!(
        !quick_token.is_cancelled(),
        "another hook's token is untouched"
    );
    session.cancel_turn();
    let outcome = dispatching.await.unwrap().unwrap();
    assert!(outcome
        .runs
        .iter()
        .any(|r| &*r.hook == "slow" && r.status == RunStatus::TimedOut));
    assert!(
        quick_token.is_cancelled(),
        "the turn's cancellation reaches every hook"
    );
    session.close("done").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
}

/// A tool that waits on its token past its timeout and records that it saw it.
#[derive(Clone, Default)]
struct Stubborn(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Stubborn {
    fn name(&self) -> &str {
        "stubborn"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    async fn execute(&self, _: Value, cx: ToolCx) -> Result<Value, ToolError> {
        cx.cancel.cancelled().await;
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(ToolError::new("stopped"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_tool_sees_its_token_fire_before_it_is_dropped() {
    let ws = tempfile::tempdir().unwrap();
    let tool = Stubborn::default();
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("go").call_with_id("s1", "stubborn", json!({})))
                .turn(ScriptTurn::text("done")),
        )
        .clear_tools()
        .tool(tool.clone())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("t"))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    assert_eq!(
        result.calls[0].status,
        CallStatus::Failed {
            kind: FailureKind::Timeout
        }
    );
    assert_eq!(
        tool.0.load(Ordering::SeqCst),
        1,
        "the tool saw its token fire"
    );
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
}
