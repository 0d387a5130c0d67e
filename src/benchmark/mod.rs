//! The benchmark scenarios of `benches/` and `hookbus bench`, with the baselines they are
//! measured against in the same run (SPEC section 11). Exposed so that users can run the same
//! scenarios against their own setup.
//!
//! * [`Subject`] is one way of dispatching a tool-call pair (PreToolUse + PostToolUse): a
//!   baseline ([`baselines`]) or hookbus itself.
//! * `run` measures every scenario (with warm-up and repeated timing; medians) and returns
//!   [`BenchResult`]s with the target of each and whether it passed.

pub mod baselines;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::json;
use tokio::runtime::Runtime;

use self::baselines::{
    ActorBaseline, BaselineHook, Direct, JoinAll, SleepyBaseline, TrivialBaseline,
};
use crate::model::action::{HookResult, PostToolUseAction, PreToolUseAction};
use crate::model::event::{Event, EventKind, PostToolUse, PreToolUse};
use crate::model::filter::ToolFilter;
use crate::model::hook::{Hook, HookCx, HookOptions};
use crate::runtime::bus::Bus;
use crate::runtime::session::{BusSession, BusSessionConfig};

/// The PreToolUse of the benchmark's tool call.
pub fn pre_event() -> Event {
    Event::PreToolUse(PreToolUse {
        tool_name: "Bash".into(),
        tool_input: json!({ "command": "ls" }),
        tool_use_id: "t1".into(),
    })
}

/// The PostToolUse of the benchmark's tool call.
pub fn post_event() -> Event {
    Event::PostToolUse(PostToolUse {
        tool_name: "Bash".into(),
        tool_input: json!({ "command": "ls" }),
        original_input: None,
        tool_response: json!("ok"),
        original_response: None,
        tool_use_id: "t1".into(),
        is_error: false,
        duration_ms: 0,
    })
}

/// Waits `delay` to within a few microseconds: tokio's timer wheel has a 1 ms resolution and
/// rounds a 10 ms sleep up to 11 ms, which would hide the cost being measured. Sleeps on the
/// timer until 1 ms before the end, then yields until the end.
pub async fn precise_sleep(delay: Duration) {
    let end = Instant::now() + delay;
    if let Some(coarse) = delay.checked_sub(Duration::from_millis(1)) {
        tokio::time::sleep(coarse).await;
    }
    while Instant::now() < end {
        tokio::task::yield_now().await;
    }
}

/// A hook that answers at once (or after `delay`), optionally only for one tool.
#[derive(Debug, Clone)]
pub struct BenchHook {
    name: String,
    inline: bool,
    delay: Duration,
    tool: Option<String>,
}

impl BenchHook {
    /// A trivial hook.
    pub fn trivial(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            inline: false,
            delay: Duration::ZERO,
            tool: None,
        }
    }
    /// Run on the dispatcher's task.
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }
    /// Take this long.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
    /// Only for this tool.
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }
}

#[async_trait]
impl Hook for BenchHook {
    fn name(&self) -> &str {
        &self.name
    }
    fn options(&self) -> HookOptions {
        let mut o = HookOptions::new().events([EventKind::PreToolUse, EventKind::PostToolUse]);
        if let Some(tool) = &self.tool {
            o = o.filter(ToolFilter::names(tool).unwrap_or_default());
        }
        if self.inline {
            o = o.inline();
        }
        o
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        if !self.delay.is_zero() {
            precise_sleep(self.delay).await;
        }
        Ok(PreToolUseAction::proceed().into())
    }
    async fn post_tool_use(&self, _: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        if !self.delay.is_zero() {
            precise_sleep(self.delay).await;
        }
        Ok(PostToolUseAction::keep().into())
    }
}

/// One way of dispatching the benchmark's events.
#[derive(Clone)]
pub enum Subject {
    /// Hooks called one after another in the caller's task.
    Direct(Direct),
    /// Hooks polled together in the caller's task.
    JoinAll(JoinAll),
    /// The bare actor fan-out.
    ActorBaseline(ActorBaseline),
    /// A hookbus session.
    Hookbus(BusSession),
}

impl Subject {
    /// `n` trivial hooks (`delay` > 0: sleeping hooks) for the baseline `kind`
    /// (`direct`, `join_all`, `actor_baseline`). Call inside a runtime.
    pub fn baseline(kind: &str, n: usize, delay: Duration) -> Subject {
        let hooks: Vec<Arc<dyn BaselineHook>> = (0..n)
            .map(|_| -> Arc<dyn BaselineHook> {
                if delay.is_zero() {
                    Arc::new(TrivialBaseline)
                } else {
                    Arc::new(SleepyBaseline(delay))
                }
            })
            .collect();
        match kind {
            "direct" => Subject::Direct(Direct::new(hooks)),
            "join_all" => Subject::JoinAll(JoinAll::new(hooks)),
            _ => Subject::ActorBaseline(ActorBaseline::start(hooks)),
        }
    }

    /// A hookbus session on `bus` with these hooks registered on the bus first.
    pub async fn hookbus(bus: &Bus, hooks: Vec<BenchHook>) -> Subject {
        for hook in hooks {
            // Names are unique by construction; a failure here is a bug in the scenario.
            bus.register(hook).await.expect("benchmark hooks register");
        }
        Subject::Hookbus(
            bus.open_session(BusSessionConfig::new())
                .await
                .expect("benchmark session opens"),
        )
    }

    /// Dispatches one event.
    pub async fn event(&self, event: Event) {
        match self {
            Subject::Direct(d) => {
                d.dispatch(event).await;
            }
            Subject::JoinAll(j) => {
                j.dispatch(event).await;
            }
            Subject::ActorBaseline(a) => {
                a.dispatch(event).await;
            }
            Subject::Hookbus(s) => {
                let _ = s.dispatch(event).await;
            }
        }
    }

    /// Dispatches one tool-call pair.
    pub async fn pair(&self) {
        self.event(pre_event()).await;
        self.event(post_event()).await;
    }
}

/// `n` trivial hooks named `h0`, `h1`, ...
pub fn trivial_hooks(n: usize, inline: bool) -> Vec<BenchHook> {
    (0..n)
        .map(|i| {
            let h = BenchHook::trivial(format!("h{i}"));
            if inline {
                h.inline()
            } else {
                h
            }
        })
        .collect()
}

/// The name of the multi-thread runtime's worker threads.
pub const WORKER_THREAD: &str = "hookbus-bench-worker";

/// The two runtimes every latency scenario runs on.
pub fn runtime(kind: RuntimeKind) -> Runtime {
    let rt = match kind {
        RuntimeKind::MultiThread => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(WORKER_THREAD)
            .enable_all()
            .build(),
        RuntimeKind::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    };
    rt.expect("a tokio runtime")
}

/// Which runtime a figure was taken on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeKind {
    /// Multi-thread, 2 workers.
    MultiThread,
    /// Current-thread.
    CurrentThread,
}

/// What one figure measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Nanoseconds per operation (lower is better).
    Ns,
    /// Tool-call pairs per second (higher is better).
    PairsPerS,
    /// Bytes (lower is better).
    Bytes,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// The scenario.
    pub scenario: String,
    /// The runtime, when it matters.
    pub runtime: Option<RuntimeKind>,
    /// The unit of every figure of the line.
    pub unit: Unit,
    /// hookbus's figure.
    pub hookbus: f64,
    /// The direct registry's figure.
    pub direct: Option<f64>,
    /// The join_all registry's figure.
    pub join_all: Option<f64>,
    /// The bare actor fan-out's figure.
    pub actor_baseline: Option<f64>,
    /// The target, with the measured ratio.
    pub target: String,
    /// Whether the target is met.
    pub pass: bool,
    /// Further figures of the line (e.g. `p50_ns`, `p99_ns`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub extra: std::collections::BTreeMap<String, f64>,
}

/// How long to measure.
#[derive(Debug, Clone, Copy)]
pub struct BenchConfig {
    /// Samples per figure (the median is reported).
    pub samples: usize,
    /// Least time one sample runs.
    pub sample_time: Duration,
    /// How long throughput runs.
    pub throughput_time: Duration,
    /// Sessions opened for the idle-memory figure.
    pub idle_sessions: usize,
}

impl BenchConfig {
    /// `--quick`: the whole run within a minute.
    pub fn quick() -> Self {
        Self {
            samples: 7,
            sample_time: Duration::from_millis(15),
            throughput_time: Duration::from_millis(400),
            idle_sessions: 10_000,
        }
    }
    /// The default run.
    pub fn full() -> Self {
        Self {
            samples: 21,
            sample_time: Duration::from_millis(60),
            throughput_time: Duration::from_secs(2),
            idle_sessions: 10_000,
        }
    }
}

/// Runs `fut` as a task spawned on `rt` and waits for it: the way an agent session runs, on a
/// runtime worker. `block_on` only starts and joins it; timing from `block_on` itself would
/// measure an outside caller waking a parked worker on every message instead.
pub fn in_task<F>(rt: &Runtime, fut: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    rt.block_on(async move {
        tokio::spawn(fut)
            .await
            .expect("the benchmark task completes")
    })
}

/// Where a timed loop ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Inside a spawned tokio task (not a `block_on` future).
    pub in_task: bool,
    /// The thread's name ([`WORKER_THREAD`] on the multi-thread runtime's workers).
    pub thread: Option<String>,
}

impl Placement {
    /// Where the caller runs now.
    pub fn here() -> Self {
        Self {
            in_task: tokio::task::try_id().is_some(),
            thread: std::thread::current().name().map(str::to_owned),
        }
    }
}

/// A median time and where it was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    /// Median nanoseconds per operation.
    pub ns: f64,
    /// Where the timed loop ran.
    pub placement: Placement,
}

/// Times one tool-call pair of each subject (median ns) in one task spawned on `rt`, their
/// samples interleaved (see [`interleaved_ns`]).
pub fn pair_latencies(rt: &Runtime, config: &BenchConfig, subjects: Vec<Subject>) -> Vec<Timing> {
    let config = *config;
    in_task(rt, async move {
        let placement = Placement::here();
        interleaved_ns(&config, subjects.len(), |k| subjects[k].pair())
            .await
            .into_iter()
            .map(|ns| Timing {
                ns,
                placement: placement.clone(),
            })
            .collect()
    })
}

/// Median time of one `op(k)` for each of `n` subjects `k`, over `config.samples` rounds. Each
/// round takes one sample of every subject in turn, starting one further along each round, so
/// that a change in the machine's speed during the run reaches every subject alike and the
/// ratios between them stay fair (timing one subject after another puts such drift into the
/// ratio).
pub async fn interleaved_ns<F, Fut>(config: &BenchConfig, n: usize, mut op: F) -> Vec<f64>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future,
{
    // Warm each up, and find how many operations fill one of its samples.
    let mut per_sample = Vec::with_capacity(n);
    for k in 0..n {
        let start = Instant::now();
        let mut ops = 0u64;
        while start.elapsed() < config.sample_time {
            op(k).await;
            ops += 1;
        }
        per_sample.push(ops.max(1));
    }
    let mut samples = vec![Vec::with_capacity(config.samples); n];
    for round in 0..config.samples {
        for j in 0..n {
            let k = (round + j) % n;
            let t = Instant::now();
            for _ in 0..per_sample[k] {
                op(k).await;
            }
            samples[k].push(t.elapsed().as_nanos() as f64 / per_sample[k] as f64);
        }
    }
    samples.into_iter().map(median).collect()
}

/// The median of `samples` (0 for none).
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(0.0)
}

/// Times `iters` tool-call pairs of `subject` in a task spawned on `rt` (for criterion's
/// `iter_custom`).
pub fn time_pairs(rt: &Runtime, subject: &Subject, iters: u64) -> Duration {
    let subject = subject.clone();
    in_task(rt, async move {
        let start = Instant::now();
        for _ in 0..iters {
            subject.pair().await;
        }
        start.elapsed()
    })
}

/// Times `iters` PreToolUse events of `subject` in a task spawned on `rt`.
pub fn time_events(rt: &Runtime, subject: &Subject, iters: u64) -> Duration {
    let subject = subject.clone();
    in_task(rt, async move {
        let start = Instant::now();
        for _ in 0..iters {
            subject.event(pre_event()).await;
        }
        start.elapsed()
    })
}

/// Median time of one `op`, over `config.samples` samples of at least `sample_time` each.
pub async fn median_ns<F, Fut>(config: &BenchConfig, mut op: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    interleaved_ns(config, 1, |_| op()).await[0]
}

/// Tool-call pairs per second with `sessions` concurrent callers for `time`.
pub async fn pairs_per_second(subjects: Vec<Subject>, time: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + time;
    let tasks: Vec<_> = subjects
        .into_iter()
        .map(|s| {
            let done = done.clone();
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    s.pair().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    for t in tasks {
        let _ = t.await;
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Resident memory of this process, in bytes (Linux; 0 elsewhere).
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

pub mod fleet;
mod run;
mod scale;
pub use run::{pair_figures, run, run_only, steps, PairFigures};
pub use scale::{direct_call, direct_hooks, noop_pipeline, Noop};
