//! Acceptance tests of the permission service and the tool-call pipeline (SPEC section 6).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use hookbus::*;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// A tool that counts its runs and echoes its input (or fails when asked to).
#[derive(Clone)]
struct Echo {
    name: &'static str,
    kind: ToolKind,
    runs: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Echo {
    fn new(name: &'static str, kind: ToolKind) -> Self {
        Self {
            name,
            kind,
            runs: Arc::default(),
            seen: Arc::default(),
        }
    }
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        self.name
    }
    fn kind(&self) -> ToolKind {
        self.kind
    }
    async fn execute(&self, input: Value, _cx: ToolCx) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.seen.lock().push(input.clone());
        if input.get("fail").is_some() {
            return Err(ToolError::new("the tool failed"));
        }
        Ok(json!(format!("ran {input}")))
    }
}

/// Records every event kind it sees, with its payload.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Arc<Envelope>>>>);

#[async_trait]
impl Hook for Seen {
    fn name(&self) -> &str {
        "seen"
    }
    async fn pre_tool_use(&self, cx: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        self.0.lock().push(cx.envelope().clone());
        Ok(Default::default())
    }
    async fn post_tool_use(&self, cx: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        self.0.lock().push(cx.envelope().clone());
        Ok(Default::default())
    }
    async fn post_tool_use_failure(
        &self,
        cx: &HookCx,
        _: &PostToolUseFailure,
    ) -> HookResult<PostToolUseAction> {
        self.0.lock().push(cx.envelope().clone());
        Ok(Default::default())
    }
    async fn permission_denied(&self, cx: &HookCx, _: &PermissionDenied) -> HookResult<()> {
        self.0.lock().push(cx.envelope().clone());
        Ok(Default::default())
    }
}

impl Seen {
    fn kinds(&self) -> Vec<EventKind> {
        self.0.lock().iter().map(|e| e.kind()).collect()
    }
    fn denied(&self) -> Vec<PermissionDenied> {
        self.0
            .lock()
            .iter()
            .filter_map(|e| match &e.event {
                Event::PermissionDenied(d) => Some(d.clone()),
                _ => None,
            })
            .collect()
    }
}

struct Setup {
    bus: Bus,
    pipeline: Pipeline,
    seen: Seen,
    bash: Echo,
    write: Echo,
    read: Echo,
    permissions: PermissionHandle,
}

async fn setup(
    config: PermissionConfig,
    approver: Arc<dyn Approver>,
    hooks: Vec<Arc<dyn Hook>>,
) -> Setup {
    let bus = Bus::new();
    let seen = Seen::default();
    bus.register(seen.clone()).await.unwrap();
    for h in hooks {
        bus.register_arc(h).await.unwrap();
    }
    let session = bus
        .open_session(BusSessionConfig::new().id("s1").cwd("/w"))
        .await
        .unwrap();
    let permissions = PermissionService::spawn(config);
    let (bash, write, read) = (
        Echo::new("Bash", ToolKind::Other),
        Echo::new("Write", ToolKind::Edit),
        Echo::new("Read", ToolKind::ReadOnly),
    );
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(bash.clone()),
        Arc::new(write.clone()),
        Arc::new(read.clone()),
    ];
    let pipeline = Pipeline::new(session, permissions.clone(), approver, tools).cwd("/w");
    Setup {
        bus,
        pipeline,
        seen,
        bash,
        write,
        read,
        permissions,
    }
}

fn deny(rule: &str) -> PermissionConfig {
    PermissionConfig {
        global: RuleSet::new().deny(rule).unwrap(),
        ..Default::default()
    }
}

fn allow_all() -> Arc<dyn Approver> {
    Arc::new(PolicyApprover::allow())
}

fn call(id: &str, tool: &str, input: Value) -> ToolCall {
    ToolCall::new(id, tool, input)
}

// ---- seed 000's five integration cases ----

#[tokio::test]
async fn permission_deny_runs_neither_pre_nor_post_hooks() {
    let s = setup(deny("Bash(rm *)"), allow_all(), vec![]).await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "rm -rf /"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Rule
        }
    );
    assert!(
        r.content.starts_with("Permission denied: "),
        "{}",
        r.content
    );
    assert_eq!(s.seen.kinds(), vec![EventKind::PermissionDenied]);
    assert_eq!(s.bash.runs(), 0);
}

#[tokio::test]
async fn pre_block_means_no_post() {
    let blocker: Arc<dyn Hook> = Arc::new(ScriptHook::new("blocker", |_| {
        PreToolUseAction::block("not today")
    }));
    let s = setup(PermissionConfig::default(), allow_all(), vec![blocker]).await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "ls"})))
        .await
        .unwrap();
    assert_eq!(r.status, CallStatus::Blocked);
    assert_eq!(r.content, "Blocked by hook: not today");
    assert_eq!(
        s.seen.kinds(),
        vec![EventKind::PreToolUse, EventKind::PermissionDenied]
    );
    let d = &s.seen.denied()[0];
    assert_eq!(
        (d.source, d.decided_by.as_deref()),
        (DenialSource::Hook, Some("blocker"))
    );
    assert_eq!(s.bash.runs(), 0);
}

#[tokio::test]
async fn tool_error_runs_post_tool_use_failure_with_is_error() {
    let s = setup(PermissionConfig::default(), allow_all(), vec![]).await;
    let r = s
        .pipeline
        .execute(call("1", "Read", json!({"path": "x", "fail": true})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Failed {
            kind: FailureKind::Error
        }
    );
    assert!(r.is_error && r.executed);
    let events = s.seen.0.lock().clone();
    match &events.last().unwrap().event {
        Event::PostToolUseFailure(f) => {
            assert!(f.is_error);
            assert_eq!(f.error, "the tool failed");
        }
        other => panic!("expected PostToolUseFailure, got {other:?}"),
    }
}

#[tokio::test]
async fn post_replacement_is_what_the_model_receives() {
    struct Redact;
    #[async_trait]
    impl Hook for Redact {
        fn name(&self) -> &str {
            "redact"
        }
        async fn post_tool_use(
            &self,
            _: &HookCx,
            _: &PostToolUse,
        ) -> HookResult<PostToolUseAction> {
            Ok(PostToolUseAction::replace(json!("[redacted]")).into())
        }
    }
    let s = setup(
        PermissionConfig::default(),
        allow_all(),
        vec![Arc::new(Redact)],
    )
    .await;
    let r = s
        .pipeline
        .execute(call("1", "Read", json!({"path": "secret"})))
        .await
        .unwrap();
    assert_eq!(r.content, "[redacted]");
    assert_eq!(s.read.runs(), 1);
}

#[tokio::test]
async fn permission_deny_wins_over_a_pre_block() {
    let blocker = ScriptHook::new("blocker", |_| PreToolUseAction::block("hook says no"));
    let s = setup(deny("Bash"), allow_all(), vec![Arc::new(blocker.clone())]).await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "ls"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Rule
        }
    );
    assert_eq!(blocker.calls(), 0, "the hook is never asked");
}

// ---- SEC-1 … SEC-3 ----

#[tokio::test]
async fn sec1_permission_is_checked_on_the_rewritten_input() {
    let rewriter = ScriptHook::new("rewriter", |_| {
        PreToolUseAction::mutate(json!({"command": "rm -rf /"}))
    });
    let s = setup(deny("Bash(rm *)"), allow_all(), vec![Arc::new(rewriter)]).await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "ls"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Rule
        }
    );
    assert_eq!(r.final_input, json!({"command": "rm -rf /"}));
    assert_eq!(s.bash.runs(), 0, "the tool never runs");
}

#[tokio::test]
async fn sec2_no_hook_loosens_a_deny_rule_or_plan_mode() {
    // A PreToolUse Allow against a deny rule.
    let allow = ScriptHook::new("allow", |_| PreToolUseAction::allow());
    let s = setup(
        deny("Bash(rm *)"),
        allow_all(),
        vec![Arc::new(allow.clone())],
    )
    .await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "rm x"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Rule
        }
    );
    // Also when the deny rule only matches the rewritten input: the hook Allow does not help.
    let sneaky = ScriptHook::new("sneaky", |_| {
        PreToolUseAction::allow().with_input(json!({"command": "rm y"}))
    });
    let s = setup(deny("Bash(rm *)"), allow_all(), vec![Arc::new(sneaky)]).await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "ls"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Rule
        }
    );
    assert_eq!(s.bash.runs(), 0);

    // A PermissionRequest Allow override against a deny rule (the rule decides first).
    struct OverrideAllow;
    #[async_trait]
    impl Hook for OverrideAllow {
        fn name(&self) -> &str {
            "override"
        }
        async fn permission_request(
            &self,
            _: &HookCx,
            _: &PermissionRequest,
        ) -> HookResult<PermissionAction> {
            Ok(PermissionAction::decide(PermissionDecision::Allow, "trust me").into())
        }
    }
    let cfg = PermissionConfig {
        global: RuleSet::new()
            .deny("Bash(curl *)")
            .unwrap()
            .ask("Bash")
            .unwrap(),
        ..Default::default()
    };
    let s = setup(
        cfg,
        Arc::new(PolicyApprover::deny()),
        vec![Arc::new(OverrideAllow)],
    )
    .await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "curl evil"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Rule
        }
    );
    // ...while on a plain Ask the override skips the prompt.
    let r = s
        .pipeline
        .execute(call("2", "Bash", json!({"command": "ls"})))
        .await
        .unwrap();
    assert_eq!(r.status, CallStatus::Completed);

    // A hook Allow in plan mode for a write tool.
    let cfg = PermissionConfig {
        default_mode: PermissionMode::Plan,
        ..Default::default()
    };
    let s = setup(
        cfg,
        allow_all(),
        vec![Arc::new(ScriptHook::new("allow", |_| {
            PreToolUseAction::allow()
        }))],
    )
    .await;
    let r = s
        .pipeline
        .execute(call("1", "Write", json!({"path": "a"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Mode
        }
    );
    assert_eq!(s.write.runs(), 0);
    let r = s
        .pipeline
        .execute(call("2", "Read", json!({"path": "a"})))
        .await
        .unwrap();
    assert_eq!(r.status, CallStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn sec3_a_failing_post_hook_never_reruns_the_tool() {
    struct PanicPost;
    #[async_trait]
    impl Hook for PanicPost {
        fn name(&self) -> &str {
            "panic-post"
        }
        async fn post_tool_use(
            &self,
            _: &HookCx,
            _: &PostToolUse,
        ) -> HookResult<PostToolUseAction> {
            panic!("post hook exploded")
        }
    }
    struct HangPost;
    #[async_trait]
    impl Hook for HangPost {
        fn name(&self) -> &str {
            "hang-post"
        }
        fn options(&self) -> HookOptions {
            HookOptions::new()
                .timeout(Duration::from_secs(1))
                .fail_closed()
        }
        async fn post_tool_use(
            &self,
            _: &HookCx,
            _: &PostToolUse,
        ) -> HookResult<PostToolUseAction> {
            std::future::pending().await
        }
    }
    let s = setup(
        PermissionConfig::default(),
        allow_all(),
        vec![Arc::new(PanicPost), Arc::new(HangPost)],
    )
    .await;
    let r = s
        .pipeline
        .execute(call("1", "Read", json!({"path": "a"})))
        .await
        .unwrap();
    assert_eq!(s.read.runs(), 1, "ran exactly once");
    assert_eq!(r.status, CallStatus::Completed);
    assert_eq!(r.content, "ran {\"path\":\"a\"}", "result kept");
    assert!(
        r.reminders.iter().any(|w| w.contains("panicked")),
        "{:?}",
        r.reminders
    );
    assert!(
        r.reminders.iter().any(|w| w.contains("timed out")),
        "{:?}",
        r.reminders
    );
}

// ---- precedence table ----

fn query(tool: &str, input: Value, kind: ToolKind, hook: HookOpinion) -> PermissionQuery {
    PermissionQuery {
        session_id: "s".into(),
        tool_name: tool.into(),
        input,
        kind,
        cwd: Some("/w".into()),
        hook,
        deny_rules_only: false,
    }
}

#[tokio::test]
async fn precedence_table_p0_to_p8_and_modes() {
    use PermissionDecision::*;
    let mut tools = std::collections::HashMap::new();
    tools.insert(
        "Bash".to_string(),
        RuleSet::new()
            .deny("Bash(sudo *)")
            .unwrap()
            .ask("Bash(git push *)")
            .unwrap()
            .allow("Bash(ls *)")
            .unwrap(),
    );
    let config = PermissionConfig {
        global: RuleSet::new()
            .deny("Bash(rm *)")
            .unwrap()
            .allow("Bash(git *)")
            .unwrap(),
        tools,
        default_mode: PermissionMode::Default,
    };
    let h = PermissionService::spawn(config);
    h.add_session_rules(
        "s",
        RuleSet::new()
            .deny("Bash(curl *)")
            .unwrap()
            .ask("Bash(make *)")
            .unwrap(),
    )
    .await
    .unwrap();
    let bash = |c: &str| json!({ "command": c });
    let o = ToolKind::Other;
    let cases: Vec<(PermissionQuery, PermissionDecision, Level, &str)> = vec![
        (
            query("Bash", bash("rm -rf /"), o, HookOpinion::Allow("x".into())),
            Deny,
            Level::P0GlobalDeny,
            "P0 global deny rule `Bash(rm *)`",
        ),
        (
            query("Bash", bash("sudo ls"), o, HookOpinion::None),
            Deny,
            Level::P1ToolDeny,
            "P1 tool deny rule `Bash(sudo *)`",
        ),
        (
            query("Bash", bash("curl x"), o, HookOpinion::None),
            Deny,
            Level::P2SessionDeny,
            "P2 session deny rule `Bash(curl *)`",
        ),
        (
            query("Bash", bash("ls"), o, HookOpinion::Block("no".into())),
            Deny,
            Level::P3HookBlock,
            "P3 hook block: no",
        ),
        (
            query("Bash", bash("ls"), o, HookOpinion::Ask("sure?".into())),
            Ask,
            Level::P4HookAsk,
            "P4 hook ask: sure?",
        ),
        (
            query("Bash", bash("make all"), o, HookOpinion::Allow("x".into())),
            Ask,
            Level::P5SessionAsk,
            "P5 session ask rule `Bash(make *)`",
        ),
        (
            query("Bash", bash("git push"), o, HookOpinion::None),
            Ask,
            Level::P6ToolAsk,
            "P6 ask rule `Bash(git push *)`",
        ),
        (
            query("Bash", bash("git status"), o, HookOpinion::None),
            Allow,
            Level::P7Allow,
            "P7 allow rule `Bash(git *)`",
        ),
        (
            query(
                "Bash",
                bash("echo"),
                o,
                HookOpinion::Allow("trusted".into()),
            ),
            Allow,
            Level::P7Allow,
            "P7 hook allow: trusted",
        ),
        (
            query("Bash", bash("echo"), o, HookOpinion::None),
            Ask,
            Level::P8Implicit,
            "P8 implicit: mode default asks for Other tools",
        ),
        (
            query(
                "Read",
                json!({"path": "a"}),
                ToolKind::ReadOnly,
                HookOpinion::None,
            ),
            Allow,
            Level::P8Implicit,
            "P8 implicit: mode default allows ReadOnly tools",
        ),
        // A compound command is allowed only if every part is.
        (
            query("Bash", bash("git log && echo hi"), o, HookOpinion::None),
            Ask,
            Level::P8Implicit,
            "P8 implicit",
        ),
    ];
    for (q, decision, level, explain) in cases {
        let cmd = q.input.clone();
        let v = h.check(q).await;
        assert_eq!(v.decision, decision, "{cmd}: {}", v.explain);
        assert_eq!(v.level, Some(level), "{cmd}: {}", v.explain);
        assert!(
            v.explain.starts_with(explain),
            "{cmd}: `{}` does not start with `{explain}`",
            v.explain
        );
    }

    // Modes.
    let mode_cases = [
        (PermissionMode::Default, ToolKind::Edit, Ask),
        (PermissionMode::AcceptEdits, ToolKind::Edit, Allow),
        (PermissionMode::AcceptEdits, ToolKind::Other, Ask),
        (PermissionMode::Plan, ToolKind::Edit, Deny),
        (PermissionMode::Plan, ToolKind::ReadOnly, Allow),
        (PermissionMode::DontAsk, ToolKind::Other, Deny),
        (PermissionMode::DontAsk, ToolKind::ReadOnly, Allow),
        (PermissionMode::BypassPermissions, ToolKind::Other, Allow),
    ];
    for (mode, kind, decision) in mode_cases {
        h.set_mode("m", mode).await.unwrap();
        let mut q = query("Tool", json!({}), kind, HookOpinion::None);
        q.session_id = "m".into();
        let v = h.check(q).await;
        assert_eq!(v.decision, decision, "{mode} {kind:?}: {}", v.explain);
        if decision == Deny {
            assert_eq!(v.source, Some(DenialSource::Mode));
        }
    }
    // bypassPermissions still honours deny rules.
    h.set_mode("m", PermissionMode::BypassPermissions)
        .await
        .unwrap();
    let mut q = query("Bash", bash("rm x"), o, HookOpinion::None);
    q.session_id = "m".into();
    assert_eq!(h.check(q).await.decision, Deny);
    assert_eq!(
        "acceptEdits".parse::<PermissionMode>().unwrap(),
        PermissionMode::AcceptEdits
    );
    assert!("sudo".parse::<PermissionMode>().is_err());
}

// ---- approvers ----

#[tokio::test(start_paused = true)]
async fn approver_timeout_denies_with_source_timeout() {
    let (approver, desk) = ChannelApprover::new();
    let observed = Arc::new(Mutex::new(Vec::new()));
    struct DenialObserver(Arc<Mutex<Vec<DenialSource>>>);
    #[async_trait]
    impl Observer for DenialObserver {
        fn name(&self) -> &str {
            "denials"
        }
        fn options(&self) -> ObserverOptions {
            ObserverOptions::new().events([EventKind::PermissionDenied])
        }
        async fn on_event(&self, env: &Arc<Envelope>) {
            if let Event::PermissionDenied(d) = &env.event {
                self.0.lock().push(d.source);
            }
        }
    }
    let s = setup(PermissionConfig::default(), Arc::new(approver), vec![]).await;
    s.bus
        .observe(DenialObserver(observed.clone()))
        .await
        .unwrap();
    let pipeline = s.pipeline.clone().approval_timeout(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let task = tokio::spawn(async move {
        pipeline
            .execute(call("1", "Bash", json!({"command": "make"})))
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(desk.pending().len(), 1, "the request waits at the desk");
    let r = task.await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Timeout
        }
    );
    assert!(
        desk.pending().is_empty(),
        "a timed-out request leaves the desk"
    );
    s.pipeline.session().close("other").await.unwrap();
    assert_eq!(*observed.lock(), vec![DenialSource::Timeout]);
    assert_eq!(s.bash.runs(), 0);
}

#[tokio::test]
async fn channel_approver_answers_from_another_task() {
    let (approver, desk) = ChannelApprover::new();
    let s = setup(PermissionConfig::default(), Arc::new(approver), vec![]).await;
    let answering = tokio::spawn(async move {
        loop {
            if let Some(req) = desk.pending().first() {
                assert_eq!(req.tool_name, "Bash");
                desk.answer(req.id, Approval::AllowOnce).unwrap();
                assert!(matches!(
                    desk.answer(req.id, Approval::AllowOnce),
                    Err(Error::NoSuchApproval(_))
                ));
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "make"})))
        .await
        .unwrap();
    answering.await.unwrap();
    assert_eq!(r.status, CallStatus::Completed);
    assert!(r.explain.unwrap().contains("allowed once by the user"));
}

#[tokio::test]
async fn permission_service_error_denies_with_source_error() {
    let s = setup(PermissionConfig::default(), allow_all(), vec![]).await;
    s.permissions.stop();
    tokio::task::yield_now().await;
    let r = s
        .pipeline
        .execute(call("1", "Read", json!({"path": "a"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Error
        }
    );
    assert_eq!(s.read.runs(), 0);
    assert_eq!(s.seen.denied()[0].source, DenialSource::Error);
}

#[tokio::test]
async fn allow_always_applies_to_later_calls_of_the_same_session_only() {
    struct Counting(Arc<AtomicUsize>, Approval);
    #[async_trait]
    impl Approver for Counting {
        async fn approve(&self, _: ApprovalRequest) -> Approval {
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1.clone()
        }
    }
    let asked = Arc::new(AtomicUsize::new(0));
    let s = setup(
        PermissionConfig::default(),
        Arc::new(Counting(asked.clone(), Approval::AllowAlways)),
        vec![],
    )
    .await;
    for i in 0..3 {
        let r = s
            .pipeline
            .execute(call(
                &i.to_string(),
                "Bash",
                json!({"command": "make test"}),
            ))
            .await
            .unwrap();
        assert_eq!(r.status, CallStatus::Completed);
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "asked once, then the session rule allows"
    );
    // Another command still asks; another session still asks.
    s.pipeline
        .execute(call("x", "Bash", json!({"command": "make clean"})))
        .await
        .unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    let other = s
        .bus
        .open_session(BusSessionConfig::new().id("s2"))
        .await
        .unwrap();
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(s.bash.clone())];
    let p2 = Pipeline::new(
        other,
        s.permissions.clone(),
        Arc::new(Counting(asked.clone(), Approval::AllowOnce)),
        tools,
    );
    p2.execute(call("y", "Bash", json!({"command": "make test"})))
        .await
        .unwrap();
    assert_eq!(
        asked.load(Ordering::SeqCst),
        3,
        "the other session is asked"
    );
}

#[tokio::test]
async fn a_user_deny_reaches_the_model_and_the_observers() {
    let s = setup(
        PermissionConfig::default(),
        Arc::new(PolicyApprover::deny()),
        vec![],
    )
    .await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "make"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::User
        }
    );
    assert!(r.content.starts_with("Permission denied:"));
    assert_eq!(s.seen.denied()[0].source, DenialSource::User);
}

#[tokio::test]
async fn permission_request_hooks_fold_most_restrictive() {
    struct Over(&'static str, PermissionDecision);
    #[async_trait]
    impl Hook for Over {
        fn name(&self) -> &str {
            self.0
        }
        async fn permission_request(
            &self,
            _: &HookCx,
            _: &PermissionRequest,
        ) -> HookResult<PermissionAction> {
            Ok(HookOutput::new(PermissionAction::decide(self.1, self.0))
                .context(format!("ctx {}", self.0)))
        }
    }
    let s = setup(
        PermissionConfig::default(),
        allow_all(),
        vec![
            Arc::new(Over("allower", PermissionDecision::Allow)),
            Arc::new(Over("denier", PermissionDecision::Deny)),
        ],
    )
    .await;
    let r = s
        .pipeline
        .execute(call("1", "Bash", json!({"command": "make"})))
        .await
        .unwrap();
    assert_eq!(
        r.status,
        CallStatus::Denied {
            source: DenialSource::Hook
        }
    );
    assert!(r.content.contains("denier"));
    assert_eq!(
        r.reminders.len(),
        2,
        "both injected contexts kept: {:?}",
        r.reminders
    );
}

#[test]
fn rule_parsing_reports_the_position() {
    for ok in [
        "Bash",
        "Bash(git push *)",
        "Read(**/.env)",
        "mcp__github__*",
        "Bash(npm run:*)",
    ] {
        Rule::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for (bad, column) in [
        ("Bash(ls", 8),
        ("Ba$h", 3),
        ("(x)", 1),
        ("Bash()", 6),
        ("mcp*x", 4),
    ] {
        match Rule::parse(bad) {
            Err(Error::InvalidRule {
                rule, column: c, ..
            }) => {
                assert_eq!(rule, bad);
                assert_eq!(c, column, "{bad}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(RuleSet::new().deny("Bash(").is_err());
}
