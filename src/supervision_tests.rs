//! A panic in each kind of actor: it is reported (a metric, a `tracing` error and an
//! [`ActorFailure`] to [`Bus::actor_failures`]), hook, observer, registry and permission actors
//! serve on, and no caller is left waiting. The actors' own loops are made to panic through
//! test-only messages; a caller's code (a hook, an observer, the model) through the public API.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::broadcast;

use crate::prelude::*;
use crate::{
    ActorFailure, ActorKind, Envelope, PolicyApprover, PreToolUse, ScriptTurn, ScriptedProvider,
};

/// The next report, without waiting on a runtime that might never send one.
async fn next_report(reports: &mut broadcast::Receiver<ActorFailure>) -> ActorFailure {
    tokio::time::timeout(Duration::from_secs(10), reports.recv())
        .await
        .expect("a report within 10 s")
        .expect("the supervisor is alive")
}

fn pre_tool_use(id: &str) -> Event {
    Event::PreToolUse(PreToolUse {
        tool_name: "bash".into(),
        tool_input: json!({ "command": "ls" }),
        tool_use_id: id.into(),
    })
}

/// Panics on its first call only.
struct PanicsOnce {
    fired: AtomicBool,
}

#[async_trait]
impl Hook for PanicsOnce {
    fn name(&self) -> &str {
        "panics-once"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PreToolUse])
    }
    async fn pre_tool_use(&self, _cx: &HookCx, _ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        if !self.fired.swap(true, Ordering::SeqCst) {
            panic!("hook fault");
        }
        Ok(PreToolUseAction::block("second call").into())
    }
}

#[tokio::test]
async fn a_hook_panic_is_reported_and_the_hook_serves_the_next_event() {
    let bus = Bus::new();
    let mut reports = bus.actor_failures();
    bus.register(PanicsOnce {
        fired: AtomicBool::new(false),
    })
    .await
    .unwrap();
    let session = bus
        .open_session(BusSessionConfig::new().id("s"))
        .await
        .unwrap();
    let first = session.dispatch(pre_tool_use("1")).await.unwrap();
    assert_ne!(first.decision, Decision::Block, "fail-open by default");
    let report = next_report(&mut reports).await;
    assert_eq!(
        (report.kind, report.name.as_str(), report.serving),
        (ActorKind::Hook, "panics-once", true)
    );
    assert!(report.message.contains("hook fault"), "{report:?}");
    let second = session.dispatch(pre_tool_use("2")).await.unwrap();
    assert_eq!(
        second.decision,
        Decision::Block,
        "the same hook answers again"
    );
    assert_eq!(bus.metrics().actor_panics.hook, 1);
    bus.shutdown(Duration::from_secs(5)).await;
}

/// Panics on its first event, counts the others.
struct CountingObserver {
    seen: Arc<AtomicU32>,
}

#[async_trait]
impl Observer for CountingObserver {
    fn name(&self) -> &str {
        "counting"
    }
    async fn on_event(&self, _env: &Arc<Envelope>) {
        if self.seen.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("observer fault");
        }
    }
}

#[tokio::test]
async fn an_observer_panic_is_reported_and_the_observer_takes_later_events() {
    let bus = Bus::new();
    let mut reports = bus.actor_failures();
    let seen = Arc::new(AtomicU32::new(0));
    bus.observe(CountingObserver { seen: seen.clone() })
        .await
        .unwrap();
    let session = bus
        .open_session(BusSessionConfig::new().id("s"))
        .await
        .unwrap();
    session.dispatch(pre_tool_use("1")).await.unwrap();
    let report = next_report(&mut reports).await;
    assert_eq!((report.kind, report.serving), (ActorKind::Observer, true));
    session.dispatch(pre_tool_use("2")).await.unwrap();
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "PreToolUse, PreToolUse, SessionEnd"
    );
    assert_eq!(bus.metrics().actor_panics.observer, 1);
}

#[tokio::test]
async fn a_registry_panic_is_reported_and_the_registry_keeps_its_registrations() {
    let bus = Bus::new();
    let mut reports = bus.actor_failures();
    bus.register(PanicsOnce {
        fired: AtomicBool::new(true),
    })
    .await
    .unwrap();
    bus.core.inject_registry_panic().await;
    let report = next_report(&mut reports).await;
    assert_eq!(
        (report.kind, report.name.as_str(), report.serving),
        (ActorKind::Registry, "registry", true)
    );
    assert_eq!(
        bus.register(PanicsOnce {
            fired: AtomicBool::new(true),
        })
        .await,
        Err(Error::DuplicateName("panics-once".into())),
        "the restarted registry still holds the hook"
    );
    let session = bus
        .open_session(BusSessionConfig::new().id("s"))
        .await
        .unwrap();
    let outcome = session.dispatch(pre_tool_use("1")).await.unwrap();
    assert_eq!(outcome.decision, Decision::Block);
    assert_eq!(bus.metrics().actor_panics.registry, 1);
    let report = bus.shutdown(Duration::from_secs(5)).await;
    assert!(!report.killed);
}

#[tokio::test]
async fn a_session_actor_panic_fails_that_session_with_a_typed_error_and_no_caller_hangs() {
    let bus = Bus::new();
    let mut reports = bus.actor_failures();
    let doomed = bus
        .open_session(BusSessionConfig::new().id("doomed"))
        .await
        .unwrap();
    let other = bus
        .open_session(BusSessionConfig::new().id("other"))
        .await
        .unwrap();
    doomed.inject_panic().await;
    let report = next_report(&mut reports).await;
    assert_eq!(
        (report.kind, report.name.as_str(), report.serving),
        (ActorKind::Session, "doomed", false)
    );
    match doomed.dispatch(pre_tool_use("1")).await {
        Err(Error::ActorFailed(failure)) => {
            assert_eq!(failure.kind, ActorKind::Session);
            assert_eq!(failure.name, "doomed");
        }
        other => panic!("expected ActorFailed, got {other:?}"),
    }
    assert!(matches!(
        doomed.close("other").await,
        Err(Error::ActorFailed(_))
    ));
    assert_eq!(
        bus.sessions(),
        vec!["other".to_owned()],
        "the failed session is forgotten"
    );
    other.dispatch(pre_tool_use("2")).await.unwrap();
    assert_eq!(bus.metrics().actor_panics.session, 1);
    // Its id is free again.
    bus.open_session(BusSessionConfig::new().id("doomed"))
        .await
        .unwrap();
    let report = bus.shutdown(Duration::from_secs(5)).await;
    assert!(!report.killed);
}

#[tokio::test]
async fn a_permission_actor_panic_is_reported_and_it_restarts_with_its_rules() {
    let bus = Bus::new();
    let mut reports = bus.actor_failures();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::builder()
        .bus(bus.clone())
        .permissions(PermissionConfig {
            global: crate::RuleSet::new().deny("Bash(rm:*)").unwrap(),
            ..Default::default()
        })
        .build()
        .await
        .unwrap();
    agent.permissions().inject_panic().await;
    let report = next_report(&mut reports).await;
    assert_eq!(
        (report.kind, report.name.as_str(), report.serving),
        (ActorKind::Permission, "permission", true)
    );
    let verdict = agent
        .permissions()
        .check(crate::PermissionQuery {
            session_id: "s".into(),
            tool_name: "bash".into(),
            input: json!({ "command": "rm -rf x" }),
            kind: crate::ToolKind::Other,
            cwd: Some(dir.path().to_owned()),
            hook: crate::HookOpinion::default(),
            deny_rules_only: false,
        })
        .await;
    assert_eq!(verdict.decision, crate::PermissionDecision::Deny);
    assert!(verdict.explain.contains("rm"), "{}", verdict.explain);
    assert_eq!(bus.metrics().actor_panics.permission, 1);
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn an_agent_loop_panic_fails_its_session_and_a_provider_panic_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::builder()
        .provider(ScriptedProvider::new().turn(ScriptTurn::text("hello")))
        .approver(PolicyApprover::allow())
        .build()
        .await
        .unwrap();
    let mut reports = agent.bus().actor_failures();
    let session = agent
        .open_session(SessionOptions::new(dir.path()).id("a1"))
        .await
        .unwrap();
    session.inject_panic().await;
    let report = next_report(&mut reports).await;
    assert_eq!(
        (report.kind, report.name.as_str(), report.serving),
        (ActorKind::AgentLoop, "a1", false)
    );
    match session.run_turn("hi").await {
        Err(Error::ActorFailed(failure)) => assert_eq!(failure.kind, ActorKind::AgentLoop),
        other => panic!("expected ActorFailed, got {other:?}"),
    }
    assert_eq!(agent.bus().metrics().actor_panics.agent_loop, 1);

    struct Panicking;
    #[async_trait]
    impl crate::Provider for Panicking {
        fn model(&self) -> &str {
            "panicking"
        }
        async fn complete(
            &self,
            _request: crate::ModelRequest<'_>,
            _cancel: &crate::CancellationToken,
        ) -> Result<crate::ModelResponse, crate::ProviderError> {
            panic!("provider fault")
        }
    }
    let session = agent
        .open_session(SessionOptions::new(dir.path()).id("a2").provider(Panicking))
        .await
        .unwrap();
    let result = session.run_turn("hi").await.unwrap();
    assert_eq!(result.reason, crate::TerminalReason::Error);
    let report = next_report(&mut reports).await;
    assert_eq!(
        (report.kind, report.name.as_str(), report.serving),
        (ActorKind::AgentLoop, "provider", true)
    );
    agent.shutdown(Duration::from_secs(5)).await;
}
