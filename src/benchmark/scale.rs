//! Scale scenarios: many sessions at once, an agent session's memory, and a whole tool call
//! through the pipeline next to the direct equivalent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::baselines::{BaselineHook, Direct, TrivialBaseline};
use super::run::line;
use super::*;
use crate::agent::tool::{Tool, ToolCall, ToolCx, ToolError};
use crate::agent::{Agent, Pipeline, ScriptTurn, ScriptedProvider, SessionOptions};
use crate::permission::{PermissionConfig, PermissionService, PolicyApprover, RuleSet};

/// `sessions` sessions dispatching tool-call pairs through 4 trivial actor hooks at once, on
/// the multi-thread runtime, for the throughput window: pairs per second, with the p50 and p99
/// latency of one pair in `extra`; next to the same sessions through one shared bare
/// dispatcher (`actor_baseline`), measured the same way in the same run.
pub fn many_sessions(config: &BenchConfig, sessions: usize) -> BenchResult {
    let rt = runtime(RuntimeKind::MultiThread);
    let window = config.throughput_time.max(Duration::from_millis(500));
    let (hookbus, baseline) = in_task(&rt, async move {
        let bus = Bus::new();
        for hook in trivial_hooks(4, false) {
            let _ = bus.register(hook).await;
        }
        let mut open = Vec::with_capacity(sessions);
        for _ in 0..sessions {
            if let Ok(s) = bus.open_session(BusSessionConfig::new()).await {
                open.push(Subject::Hookbus(s));
            }
        }
        let hookbus = pairs_at_once(open, window).await;
        bus.shutdown(Duration::from_secs(30)).await;
        let shared = Subject::baseline("actor_baseline", 4, Duration::ZERO);
        let baseline = pairs_at_once(vec![shared; sessions], window).await;
        (hookbus, baseline)
    });
    let quantiles = |l: &Histogram<u64>| {
        (
            l.value_at_quantile(0.5) as f64 / 1e3,
            l.value_at_quantile(0.99) as f64 / 1e3,
        )
    };
    let (p50, p99) = quantiles(&hookbus.1);
    let (base_p50, base_p99) = quantiles(&baseline.1);
    let mut result = line(
        format!("sessions_{sessions}_active"),
        Some(RuntimeKind::MultiThread),
        Unit::PairsPerS,
        hookbus.0,
        [None, None, Some(baseline.0)],
        format!(
            "no target: {sessions} sessions, 4 hooks; pair latency p50 {p50:.1} µs, p99 \
             {p99:.1} µs (shared dispatcher: p50 {base_p50:.1} µs, p99 {base_p99:.1} µs)"
        ),
        true,
    );
    for (key, value) in [
        ("p50_ns", p50),
        ("p99_ns", p99),
        ("actor_baseline_p50_ns", base_p50),
        ("actor_baseline_p99_ns", base_p99),
    ] {
        result.extra.insert(key.into(), value * 1e3);
    }
    result
}

/// Runs every subject's tool-call pairs in a task of its own until `window` is over: pairs per
/// second over all of them, and the latency of each pair.
async fn pairs_at_once(subjects: Vec<Subject>, window: Duration) -> (f64, Histogram<u64>) {
    let deadline = Instant::now() + window;
    let started = Instant::now();
    let tasks: Vec<_> = subjects
        .into_iter()
        .map(|subject| {
            tokio::spawn(async move {
                let mut took = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    subject.pair().await;
                    took.push(t.elapsed().as_nanos() as u64);
                }
                took
            })
        })
        .collect();
    let mut latencies = Histogram::<u64>::new(3).expect("a valid histogram precision");
    for task in tasks {
        for ns in task.await.unwrap_or_default() {
            let _ = latencies.record(ns.max(1));
        }
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    (rate, latencies)
}

/// Resident memory per agent session (its loop, bus session, default history) after one
/// scripted turn, with `config.idle_sessions` open.
pub fn agent_session_bytes(config: &BenchConfig) -> BenchResult {
    let rt = runtime(RuntimeKind::CurrentThread);
    let count = config.idle_sessions;
    let per_session = in_task(&rt, async move {
        let Ok(dir) = tempfile::tempdir() else {
            return f64::NAN;
        };
        let provider = ScriptedProvider::new().turn(ScriptTurn::text("ok"));
        let Ok(agent) = Agent::builder().provider(provider).build().await else {
            return f64::NAN;
        };
        let open = |id: usize| {
            let agent = agent.clone();
            let options = SessionOptions::new(dir.path()).id(format!("a{id}"));
            async move {
                let session = agent.open_session(options).await.ok()?;
                session.run_turn("hi").await.ok()?;
                Some(session)
            }
        };
        // One session first, so one-time allocations are not counted.
        let first = open(0).await;
        let before = resident_bytes();
        let mut sessions = Vec::with_capacity(count);
        for id in 1..=count {
            sessions.extend(open(id).await);
        }
        let after = resident_bytes();
        let per = after.saturating_sub(before) as f64 / sessions.len().max(1) as f64;
        drop(first);
        agent.shutdown(Duration::from_secs(30)).await;
        per
    });
    line(
        "agent_session_bytes",
        None,
        Unit::Bytes,
        per_session,
        [None; 3],
        format!("no target: per agent session after one turn, default history, {count} open"),
        true,
    )
}

/// A tool that does nothing.
pub struct Noop;

#[async_trait]
impl Tool for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    async fn execute(&self, _input: Value, _cx: ToolCx) -> Result<Value, ToolError> {
        Ok(json!("ok"))
    }
}

/// One call of a no-op tool through `Pipeline::execute` (permission check, PreToolUse and
/// PostToolUse through 4 trivial actor hooks), next to the direct equivalent: the same 4 hooks
/// called in the caller's task around the tool (the `direct` column).
pub fn pipeline_noop_tool(config: &BenchConfig) -> BenchResult {
    let rt = runtime(RuntimeKind::CurrentThread);
    let config = *config;
    let (hookbus, direct) = in_task(&rt, async move {
        let bus = Bus::new();
        for hook in trivial_hooks(4, false) {
            let _ = bus.register(hook).await;
        }
        let Some(pipeline) = noop_pipeline(&bus).await else {
            return (f64::NAN, f64::NAN);
        };
        let tool: Arc<dyn Tool> = Arc::new(Noop);
        let call = || ToolCall::new("t1", "noop", json!({}));
        let hookbus = median_ns(&config, || async {
            let _ = pipeline.execute(call()).await;
        })
        .await;
        let direct_hooks = direct_hooks(4);
        let direct = median_ns(&config, || direct_call(&direct_hooks, &tool)).await;
        bus.shutdown(Duration::from_secs(5)).await;
        (hookbus, direct)
    });
    let r = hookbus / direct;
    line(
        "pipeline_noop_tool",
        Some(RuntimeKind::CurrentThread),
        Unit::Ns,
        hookbus,
        [Some(direct), None, None],
        format!("no target: permission + Pre + Post through 4 hooks, {r:.1}× the direct calls"),
        true,
    )
}

/// A pipeline over a new session of `bus` (hooks registered already) with the [`Noop`] tool
/// allowed by a rule, so no call asks.
pub async fn noop_pipeline(bus: &Bus) -> Option<Pipeline> {
    let session = bus.open_session(BusSessionConfig::new()).await.ok()?;
    let permissions = PermissionService::spawn(PermissionConfig {
        global: RuleSet::new().allow("noop").ok()?,
        ..Default::default()
    });
    let tool: Arc<dyn Tool> = Arc::new(Noop);
    Some(Pipeline::new(
        session,
        permissions,
        Arc::new(PolicyApprover::allow()),
        [tool],
    ))
}

/// `n` trivial hooks called one after another (the direct equivalent of dispatching).
pub fn direct_hooks(n: usize) -> Direct {
    let hooks: Vec<Arc<dyn BaselineHook>> = (0..n)
        .map(|_| -> Arc<dyn BaselineHook> { Arc::new(TrivialBaseline) })
        .collect();
    Direct::new(hooks)
}

/// The direct equivalent of one pipeline call: the hooks around the tool, in the caller's task.
pub async fn direct_call(hooks: &Direct, tool: &Arc<dyn Tool>) {
    hooks.dispatch(pre_event()).await;
    let cx = ToolCx {
        cancel: crate::CancellationToken::new(),
        cwd: std::env::temp_dir(),
        session_id: "s".into(),
        tool_use_id: "t1".into(),
    };
    let _ = tool.execute(json!({}), cx).await;
    hooks.dispatch(post_event()).await;
}
