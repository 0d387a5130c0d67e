//! The agent loop (SPEC section 7, LOOP-1 … LOOP-7) through the embedding API.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hookbus::*;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Records every envelope it sees, whole.
#[derive(Clone, Default)]
struct Tape {
    seen: Arc<Mutex<Vec<Arc<Envelope>>>>,
}

impl Tape {
    fn kinds(&self, session: &str) -> Vec<EventKind> {
        self.seen
            .lock()
            .iter()
            .filter(|e| e.session_id == session)
            .map(|e| e.kind())
            .collect()
    }
    fn all(&self) -> Vec<Arc<Envelope>> {
        self.seen.lock().clone()
    }
    /// The first envelope of this kind.
    fn first(&self, kind: EventKind) -> Arc<Envelope> {
        self.seen
            .lock()
            .iter()
            .find(|e| e.kind() == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} was seen"))
    }
}

#[async_trait]
impl Observer for Tape {
    fn name(&self) -> &str {
        "tape"
    }
    async fn on_event(&self, env: &Arc<Envelope>) {
        self.seen.lock().push(env.clone());
    }
}

/// Builds the agent, runs one `go` turn in session `id` over `ws`, closes the session and shuts
/// the agent down (observers have seen every event when this returns).
async fn one_turn(builder: AgentBuilder, ws: &std::path::Path, id: &str) -> TurnResult {
    let agent = builder.build().await.unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws).id(id))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    result
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("main.py"), "print(6 * 7)\n").expect("write");
    dir
}

use EventKind as K;

#[tokio::test]
async fn a_full_turn_fires_the_events_in_order() {
    let ws = workspace();
    let provider = ScriptedProvider::new()
        .turn(ScriptTurn::text("Reading.").call("read_file", json!({ "path": "main.py" })))
        .turn(ScriptTurn::text("Running.").call("bash", json!({ "command": "echo 42" })))
        .turn(ScriptTurn::text("It prints 42."));
    let tape = Tape::default();
    let agent = Agent::builder()
        .provider(provider)
        .approver(PolicyApprover::allow())
        .observer(tape.clone())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("s1"))
        .await
        .unwrap();
    let stream = session.events();
    let result = session.run_turn("Run main.py").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Completed);
    assert_eq!(result.text, "It prints 42.");
    assert_eq!(result.metrics.steps, 3);
    assert_eq!(result.metrics.executed, 2);
    assert_eq!(result.calls[0].content, "print(6 * 7)\n");
    assert!(result.calls[1].content.contains("42"));
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;

    let expected = vec![
        K::SessionStart,
        K::UserPromptSubmit,
        K::PreToolUse,
        K::PostToolUse,
        K::StepComplete,
        K::PreToolUse,
        K::PermissionRequest,
        K::Notification,
        K::PostToolUse,
        K::StepComplete,
        K::StepComplete,
        K::Stop,
        K::SessionEnd,
    ];
    assert_eq!(tape.kinds("s1"), expected);
    // The live stream saw the same envelopes, in the same order, and ended after SessionEnd.
    let streamed: Vec<EventKind> = stream.map(|e| e.kind()).collect().await;
    assert_eq!(streamed, expected);
    let seqs: Vec<u64> = tape.all().iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    // Turn and step indices travel in the envelope.
    let steps: Vec<(u32, u32)> = tape.all().iter().map(|e| (e.turn, e.step)).collect();
    assert_eq!(steps[0], (0, 0));
    assert_eq!(steps[2], (1, 1));
    assert_eq!(steps[5], (1, 2));
}

/// A read-only tool that sleeps `ms` and logs when it ran; or, as `write`, an edit tool.
struct Clocked {
    name: &'static str,
    kind: ToolKind,
    log: Arc<Mutex<Vec<(String, Instant, Instant)>>>,
}

#[async_trait]
impl Tool for Clocked {
    fn name(&self) -> &str {
        self.name
    }
    fn kind(&self) -> ToolKind {
        self.kind
    }
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        let start = Instant::now();
        tokio::time::sleep(Duration::from_millis(input["ms"].as_u64().unwrap_or(0))).await;
        self.log
            .lock()
            .push((cx.tool_use_id.clone(), start, Instant::now()));
        Ok(json!(format!("{} done", cx.tool_use_id)))
    }
}

#[tokio::test(start_paused = true)]
async fn read_only_calls_run_together_and_a_write_runs_after_them() {
    let ws = workspace();
    let log = Arc::new(Mutex::new(Vec::new()));
    let provider = ScriptedProvider::new()
        .turn(
            ScriptTurn::text("Three reads and a write.")
                .call_with_id("r1", "slow_read", json!({ "ms": 300 }))
                .call_with_id("r2", "slow_read", json!({ "ms": 100 }))
                .call_with_id("r3", "slow_read", json!({ "ms": 200 }))
                .call_with_id("w1", "slow_write", json!({ "ms": 50 })),
        )
        .turn(ScriptTurn::text("Done."));
    let agent = Agent::builder()
        .provider(provider)
        .clear_tools()
        .tool(Clocked {
            name: "slow_read",
            kind: ToolKind::ReadOnly,
            log: log.clone(),
        })
        .tool(Clocked {
            name: "slow_write",
            kind: ToolKind::Edit,
            log: log.clone(),
        })
        .approver(PolicyApprover::allow())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let t0 = Instant::now();
    let result = session.run_turn("go").await.unwrap();
    let elapsed = t0.elapsed();
    assert_eq!(result.reason, TerminalReason::Completed);
    // Results in call order, whatever order the tools finished in.
    let ids: Vec<&str> = result
        .calls
        .iter()
        .map(|c| c.tool_use_id.as_str())
        .collect();
    assert_eq!(ids, ["r1", "r2", "r3", "w1"]);
    let tool_msgs: Vec<&str> = result
        .messages
        .iter()
        .filter_map(|m| m.tool_use_id.as_deref())
        .collect();
    assert_eq!(tool_msgs, ["r1", "r2", "r3", "w1"]);
    // Reads overlapped: the turn took about the slowest read plus the write, not the sum.
    assert!(elapsed >= Duration::from_millis(350), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(400), "{elapsed:?}");
    let log = log.lock().clone();
    let reads_end = log
        .iter()
        .filter(|(id, ..)| id.starts_with('r'))
        .map(|(_, _, end)| *end)
        .max()
        .unwrap();
    let write_start = log.iter().find(|(id, ..)| id == "w1").unwrap().1;
    assert!(
        write_start >= reads_end,
        "the write started before the reads ended"
    );
    let read_starts: Vec<Instant> = log
        .iter()
        .filter(|(id, ..)| id.starts_with('r'))
        .map(|(_, s, _)| *s)
        .collect();
    assert!(read_starts.iter().all(|s| *s == read_starts[0]));
    session.close().await.unwrap();
}

/// A Stop gate that blocks the first `blocks` times and records `stop_hook_active`.
struct StopGate {
    blocks: u32,
    calls: Arc<AtomicU32>,
    active: Arc<Mutex<Vec<bool>>>,
}

#[async_trait]
impl Hook for StopGate {
    fn name(&self) -> &str {
        "stop-gate"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::Stop])
    }
    async fn stop(&self, _: &HookCx, ev: &hookbus::Stop) -> HookResult<GateAction> {
        self.active.lock().push(ev.stop_hook_active);
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(if n < self.blocks {
            GateAction::block(format!("keep going ({n})")).into()
        } else {
            GateAction::Continue.into()
        })
    }
}

async fn run_with_stop_gate(blocks: u32) -> (TurnResult, Vec<bool>) {
    let ws = workspace();
    let active = Arc::new(Mutex::new(Vec::new()));
    let result = one_turn(
        Agent::builder()
            .provider(ScriptedProvider::new().turn(ScriptTurn::text("first")))
            .hook(StopGate {
                blocks,
                calls: Arc::default(),
                active: active.clone(),
            }),
        ws.path(),
        "s",
    )
    .await;
    let seen = active.lock().clone();
    (result, seen)
}

#[tokio::test]
async fn a_stop_gate_that_blocks_twice_makes_two_extra_steps() {
    let (result, active) = run_with_stop_gate(2).await;
    assert_eq!(result.reason, TerminalReason::Completed);
    assert_eq!(result.metrics.steps, 3);
    assert_eq!(result.metrics.stop_continuations, 2);
    assert_eq!(active, [false, true, true]);
    // The block reasons became the next user messages.
    let users: Vec<&str> = result
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(users, ["go", "keep going (0)", "keep going (1)"]);
}

#[tokio::test]
async fn a_stop_gate_that_always_blocks_is_cut_at_the_cap() {
    let (result, active) = run_with_stop_gate(u32::MAX).await;
    assert_eq!(result.reason, TerminalReason::Completed);
    assert_eq!(result.metrics.stop_continuations, 8);
    assert_eq!(result.metrics.steps, 9);
    assert_eq!(active.len(), 9);
}

/// A PreCompact gate that blocks when told to.
struct CompactGate(bool);

#[async_trait]
impl Hook for CompactGate {
    fn name(&self) -> &str {
        "compact-gate"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PreCompact])
    }
    async fn pre_compact(&self, _: &HookCx, _: &hookbus::PreCompact) -> HookResult<GateAction> {
        Ok(if self.0 {
            GateAction::block("not now").into()
        } else {
            GateAction::Continue.into()
        })
    }
}

async fn run_compaction(block: bool) -> (TurnResult, Vec<Arc<Envelope>>) {
    let ws = workspace();
    std::fs::write(ws.path().join("big.txt"), "x".repeat(2_000)).unwrap();
    let provider = ScriptedProvider::new()
        .turn(ScriptTurn::text("Reading.").call("read_file", json!({ "path": "big.txt" })))
        .turn(ScriptTurn::text("Again.").call("read_file", json!({ "path": "main.py" })))
        .turn(ScriptTurn::text("Done."));
    let tape = Tape::default();
    let result = one_turn(
        Agent::builder()
            .provider(provider)
            .observer(tape.clone())
            .hook(CompactGate(block))
            .limits(Limits {
                token_limit: 200,
                keep_recent: 2,
                ..Limits::default()
            }),
        ws.path(),
        "c",
    )
    .await;
    (result, tape.all())
}

#[tokio::test]
async fn compaction_fires_pre_post_and_session_start_compact_in_order() {
    let (result, tape) = run_compaction(false).await;
    assert_eq!(result.reason, TerminalReason::Completed);
    assert!(result.metrics.compactions >= 1);
    let kinds: Vec<EventKind> = tape.iter().map(|e| e.kind()).collect();
    let at = kinds
        .iter()
        .position(|k| *k == K::PreCompact)
        .expect("PreCompact");
    assert_eq!(
        &kinds[at..at + 3],
        [K::PreCompact, K::PostCompact, K::SessionStart]
    );
    match &tape[at + 2].event {
        Event::SessionStart(s) => assert_eq!(s.source, SessionSource::Compact),
        other => panic!("{other:?}"),
    }
    match &tape[at + 1].event {
        Event::PostCompact(p) => {
            assert!(p.compact_summary.contains("Summary of the"));
            assert_eq!(p.trigger, CompactTrigger::Auto);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_pre_compact_block_prevents_compaction() {
    let (result, tape) = run_compaction(true).await;
    assert_eq!(result.reason, TerminalReason::Completed);
    assert_eq!(result.metrics.compactions, 0);
    assert!(result.metrics.compactions_blocked >= 1);
    let kinds: Vec<EventKind> = tape.iter().map(|e| e.kind()).collect();
    assert!(kinds.contains(&K::PreCompact));
    assert!(!kinds.contains(&K::PostCompact));
    assert_eq!(kinds.iter().filter(|k| **k == K::SessionStart).count(), 1);
}

#[tokio::test]
async fn a_task_call_runs_a_subagent_as_a_child_session() {
    let ws = workspace();
    let provider = ScriptedProvider::new()
        .turn(ScriptTurn::text("Delegating.").call_with_id(
            "t1",
            "task",
            json!({ "prompt": "look around", "subagent_type": "explorer" }),
        ))
        .turn(ScriptTurn::text("Thanks."))
        .agent_turn(
            "explorer",
            ScriptTurn::text("Listing.").call("list_dir", json!({})),
        )
        .agent_turn("explorer", ScriptTurn::text("found main.py"));
    let tape = Tape::default();
    let result = one_turn(
        Agent::builder().provider(provider).observer(tape.clone()),
        ws.path(),
        "p",
    )
    .await;
    assert_eq!(result.reason, TerminalReason::Completed);
    assert_eq!(result.calls[0].tool_name, "task");
    assert_eq!(result.calls[0].content, "found main.py");

    let all = tape.all();
    let parent: Vec<EventKind> = tape.kinds("p");
    let start = parent.iter().position(|k| *k == K::SubagentStart).unwrap();
    let stop = parent.iter().position(|k| *k == K::SubagentStop).unwrap();
    assert!(start < stop);
    let Event::SubagentStart(s) = &tape.first(K::SubagentStart).event else {
        unreachable!()
    };
    assert_eq!(s.agent_type, "explorer");
    let child_id = s.agent_id.clone();
    let child_pre = all
        .iter()
        .find(|e| e.kind() == K::PreToolUse && e.session_id == child_id)
        .expect("the child's K::PreToolUse");
    assert_eq!(
        child_pre.fields.agent_id.as_deref(),
        Some(child_id.as_str())
    );
    assert_eq!(child_pre.fields.agent_type.as_deref(), Some("explorer"));
    assert_eq!(child_pre.parent_session_id.as_deref(), Some("p"));
    assert_eq!(child_pre.event.tool().map(|t| t.0), Some("list_dir"));
    // The child ended (SessionEnd) before the parent's SubagentStop.
    let child_end = all
        .iter()
        .position(|e| e.kind() == K::SessionEnd && e.session_id == child_id);
    assert!(child_end.is_some());
    let Event::SubagentStop(st) = &tape.first(K::SubagentStop).event else {
        unreachable!()
    };
    assert_eq!(st.last_assistant_message.as_deref(), Some("found main.py"));
}

fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie is dead; only its parent's (or init's) wait is missing.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_long_bash_interrupts_and_kills_the_process_group() {
    let ws = workspace();
    let provider = ScriptedProvider::new()
        .turn(ScriptTurn::text("Waiting.").call(
            "bash",
            json!({ "command": "sleep 30 & echo $! > bg.pid; sleep 30" }),
        ))
        .turn(ScriptTurn::text("never reached"));
    let tape = Tape::default();
    let agent = Agent::builder()
        .provider(provider)
        .approver(PolicyApprover::allow())
        .observer(tape.clone())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("k"))
        .await
        .unwrap();
    let running = tokio::spawn({
        let session = session.clone();
        async move { session.run_turn("wait").await }
    });
    let pid_file = ws.path().join("bg.pid");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break pid;
        }
        assert!(std::time::Instant::now() < deadline, "bash never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    session.cancel();
    let result = running.await.unwrap().unwrap();
    assert_eq!(result.reason, TerminalReason::Cancelled);
    assert_eq!(
        result.calls[0].status,
        CallStatus::Failed {
            kind: FailureKind::Interrupted
        }
    );
    assert_eq!(result.metrics.steps, 1, "no model call after the cancel");
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !process_gone(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the background process {pid} survived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let kinds = tape.kinds("k");
    let n = kinds.len();
    assert_eq!(kinds[n - 1], K::SessionEnd);
    assert!(kinds.contains(&K::Interrupt));
    assert!(kinds.contains(&K::PostToolUseFailure));
    let interrupt = tape.first(K::Interrupt);
    let Event::Interrupt(i) = &interrupt.event else {
        unreachable!()
    };
    assert_eq!(i.reason, "cancelled");
}

#[tokio::test]
async fn a_provider_error_ends_the_turn_with_stop_failure() {
    let ws = workspace();
    let tape = Tape::default();
    let result = one_turn(
        Agent::builder()
            .provider(ScriptedProvider::new().turn(ScriptTurn::error("rate_limit", "slow down")))
            .observer(tape.clone()),
        ws.path(),
        "e",
    )
    .await;
    assert_eq!(result.reason, TerminalReason::Error);
    assert!(result.detail.unwrap().contains("slow down"));
    let kinds = tape.kinds("e");
    assert_eq!(
        kinds,
        [
            K::SessionStart,
            K::UserPromptSubmit,
            K::StopFailure,
            K::SessionEnd
        ]
    );
    let failure = tape.first(K::StopFailure);
    let Event::StopFailure(f) = &failure.event else {
        unreachable!()
    };
    assert_eq!(f.error, "rate_limit");
}

#[tokio::test]
async fn max_steps_ends_the_turn() {
    let ws = workspace();
    let mut provider = ScriptedProvider::new();
    for _ in 0..10 {
        provider = provider.turn(ScriptTurn::text("more").call("list_dir", json!({})));
    }
    let result = one_turn(
        Agent::builder().provider(provider).max_steps(3),
        ws.path(),
        "s",
    )
    .await;
    assert_eq!(result.reason, TerminalReason::MaxSteps);
    assert_eq!(result.metrics.steps, 3);
    assert_eq!(result.metrics.executed, 3);
}

/// A PostToolUse hook that adds context, and a provider that records what it was sent.
struct AddContext;

#[async_trait]
impl Hook for AddContext {
    fn name(&self) -> &str {
        "ctx"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PostToolUse])
    }
    async fn post_tool_use(&self, _: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        Ok(HookOutput::new(PostToolUseAction::default())
            .context("the file is generated; do not edit it")
            .warning("slow disk"))
    }
}

struct Recording {
    inner: ScriptedProvider,
    requests: Arc<Mutex<Vec<Vec<Message>>>>,
}

#[async_trait]
impl Provider for Recording {
    async fn complete(
        &self,
        request: ModelRequest<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        self.requests.lock().push(request.messages.to_vec());
        self.inner.complete(request, cancel).await
    }
}

#[tokio::test]
async fn hook_contexts_and_warnings_reach_the_next_model_call_as_system_reminders() {
    let ws = workspace();
    let requests = Arc::new(Mutex::new(Vec::new()));
    one_turn(
        Agent::builder()
            .provider(Recording {
                inner: ScriptedProvider::new()
                    .turn(ScriptTurn::text("r").call("read_file", json!({ "path": "main.py" })))
                    .turn(ScriptTurn::text("done")),
                requests: requests.clone(),
            })
            .hook(AddContext),
        ws.path(),
        "s",
    )
    .await;
    let requests = requests.lock().clone();
    assert_eq!(requests.len(), 2);
    assert!(!requests[0]
        .iter()
        .any(|m| m.content.contains("<system-reminder>")));
    let last = requests[1].last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(last.content.starts_with("<system-reminder>"));
    assert!(last
        .content
        .contains("[Hook: ctx | PostToolUse] the file is generated; do not edit it"));
    assert!(last.content.contains("slow disk"));
    // The reminder comes after the tool result it is about.
    let n = requests[1].len();
    assert_eq!(requests[1][n - 2].role, Role::Tool);
}

/// Blocks every prompt.
struct PromptGate;

#[async_trait]
impl Hook for PromptGate {
    fn name(&self) -> &str {
        "prompt-gate"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::UserPromptSubmit])
    }
    async fn user_prompt_submit(
        &self,
        _: &HookCx,
        _: &hookbus::UserPromptSubmit,
    ) -> HookResult<GateAction> {
        Ok(GateAction::block("closed for maintenance").into())
    }
}

#[tokio::test]
async fn a_blocked_prompt_never_reaches_the_model() {
    let ws = workspace();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let agent = Agent::builder()
        .provider(Recording {
            inner: ScriptedProvider::new().turn(ScriptTurn::text("hi")),
            requests: requests.clone(),
        })
        .hook(PromptGate)
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Blocked);
    assert_eq!(result.detail.as_deref(), Some("closed for maintenance"));
    assert!(result.messages.is_empty());
    assert!(requests.lock().is_empty());
    assert!(session.messages().await.unwrap().is_empty());
    session.close().await.unwrap();
}

#[tokio::test]
async fn an_unknown_tool_is_an_error_result_not_a_failed_turn() {
    let ws = workspace();
    let result = one_turn(
        Agent::builder().provider(
            ScriptedProvider::new()
                .turn(ScriptTurn::text("x").call("teleport", json!({})))
                .turn(ScriptTurn::text("ok")),
        ),
        ws.path(),
        "s",
    )
    .await;
    assert_eq!(result.reason, TerminalReason::Completed);
    assert_eq!(result.calls[0].status, CallStatus::UnknownTool);
    assert!(result.calls[0].is_error);
}

#[tokio::test]
async fn session_workspace_must_exist() {
    let agent = Agent::builder().build().await.unwrap();
    let err = agent
        .open_session(SessionOptions::new("/definitely/not/here"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(agent.sessions().is_empty());
}

#[tokio::test]
async fn escapes_through_the_loop_are_refused_and_nothing_outside_is_touched() {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(root.path().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(root.path(), ws.join("up")).unwrap();
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(
                    ScriptTurn::text("sneaky")
                        .call("read_file", json!({ "path": "../secret.txt" }))
                        .call("read_file", json!({ "path": "/etc/passwd" }))
                        .call("read_file", json!({ "path": "up/secret.txt" }))
                        .call(
                            "write_file",
                            json!({ "path": "../planted.txt", "content": "x" }),
                        )
                        .call(
                            "write_file",
                            json!({ "path": "up/planted.txt", "content": "x" }),
                        ),
                )
                .turn(ScriptTurn::text("ok")),
        )
        .approver(PolicyApprover::allow())
        .build()
        .await
        .unwrap();
    let session = agent.open_session(SessionOptions::new(&ws)).await.unwrap();
    let result = session.run_turn("go").await.unwrap();
    assert_eq!(result.calls.len(), 5);
    for call in &result.calls {
        assert!(call.is_error, "{call:?}");
        assert!(
            call.content.contains("outside the workspace"),
            "{}",
            call.content
        );
        assert!(!call.content.contains("top secret"));
        assert!(!call.content.contains("root:"));
    }
    assert!(!root.path().join("planted.txt").exists());
    session.close().await.unwrap();
}

/// A PreToolUse hook that waits for its cancellation token (or a minute).
#[derive(Clone, Default)]
struct Patient {
    token: Arc<Mutex<Option<CancellationToken>>>,
    started: Arc<tokio::sync::Notify>,
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
    async fn pre_tool_use(
        &self,
        cx: &HookCx,
        _: &hookbus::PreToolUse,
    ) -> HookResult<PreToolUseAction> {
        *self.token.lock() = Some(cx.cancellation().clone());
        self.started.notify_one();
        tokio::select! {
            _ = cx.cancellation().cancelled() => {}
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        Ok(PreToolUseAction::proceed().into())
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_reaches_hooks_in_flight_and_refuses_the_rest_of_the_turn() {
    let ws = workspace();
    let patient = Patient::default();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let tape = Tape::default();
    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(
                    ScriptTurn::text("two writes")
                        .call_with_id("w1", "slow_write", json!({ "ms": 1 }))
                        .call_with_id("w2", "slow_write", json!({ "ms": 1 })),
                )
                .turn(ScriptTurn::text("never")),
        )
        .clear_tools()
        .tool(Clocked {
            name: "slow_write",
            kind: ToolKind::Edit,
            log: ran.clone(),
        })
        .approver(PolicyApprover::allow())
        .hook(patient.clone())
        .observer(tape.clone())
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("x"))
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
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "the hook was not cancelled"
    );
    let token = patient.token.lock().clone().expect("the hook ran");
    assert!(token.is_cancelled(), "the hook's token did not fire");
    assert_eq!(result.reason, TerminalReason::Cancelled);
    assert!(ran.lock().is_empty(), "no tool ran after the cancel");
    assert_eq!(result.calls[1].status, CallStatus::Cancelled);
    session.close().await.unwrap();
    agent.shutdown(Duration::from_secs(5)).await;
    // The second call never reached a hook; Interrupt fired; SessionEnd closed the session.
    let pre = tape
        .all()
        .iter()
        .filter(|e| e.kind() == K::PreToolUse)
        .count();
    assert_eq!(pre, 1);
    let kinds = tape.kinds("x");
    assert!(kinds.contains(&K::Interrupt));
    assert_eq!(kinds.last(), Some(&K::SessionEnd));
}

#[tokio::test]
async fn the_same_context_from_several_calls_reaches_the_model_once() {
    let ws = workspace();
    let requests = Arc::new(Mutex::new(Vec::new()));
    one_turn(
        Agent::builder()
            .provider(Recording {
                inner: ScriptedProvider::new()
                    .turn(
                        ScriptTurn::text("r")
                            .call("read_file", json!({ "path": "main.py" }))
                            .call("list_dir", json!({})),
                    )
                    .turn(ScriptTurn::text("done")),
                requests: requests.clone(),
            })
            .hook(AddContext),
        ws.path(),
        "s",
    )
    .await;
    let requests = requests.lock().clone();
    let reminder = &requests[1].last().unwrap().content;
    assert_eq!(
        reminder
            .matches("the file is generated; do not edit it")
            .count(),
        1,
        "{reminder}"
    );
}
