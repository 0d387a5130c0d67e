//! Runs every scenario and judges it against its target.

use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::Either;

use super::*;
use crate::claude::{ClaudeSettings, CompatOptions};
use crate::model::event::{Event, PreToolUse};

const KINDS: [&str; 3] = ["direct", "join_all", "actor_baseline"];

/// Baseline figures of one scenario, in [`KINDS`] order.
type Baselines = [Option<f64>; 3];

pub(super) fn line(
    scenario: impl Into<String>,
    runtime: Option<RuntimeKind>,
    unit: Unit,
    hookbus: f64,
    base: Baselines,
    target: String,
    pass: bool,
) -> BenchResult {
    BenchResult {
        scenario: scenario.into(),
        runtime,
        unit,
        hookbus,
        direct: base[0],
        join_all: base[1],
        actor_baseline: base[2],
        target,
        pass,
        extra: Default::default(),
    }
}

/// One `pair_<n>_hooks` scenario's figures: hookbus and the three baselines, each timed in a
/// task spawned on the same runtime.
#[derive(Debug, Clone)]
pub struct PairFigures {
    /// hookbus.
    pub hookbus: Timing,
    /// `direct`, `join_all`, `actor_baseline`, in that order.
    pub baselines: [Timing; 3],
}

impl PairFigures {
    fn base(&self) -> Baselines {
        [
            Some(self.baselines[0].ns),
            Some(self.baselines[1].ns),
            Some(self.baselines[2].ns),
        ]
    }
}

/// Measures the three baselines and hookbus for `n` trivial hooks (inline or actors) on a
/// runtime of `kind`, every timed loop inside a task spawned on it, their samples interleaved
/// ([`interleaved_ns`]).
pub fn pair_figures(
    config: &BenchConfig,
    kind: RuntimeKind,
    n: usize,
    inline: bool,
) -> PairFigures {
    let rt = runtime(kind);
    let bus = rt.block_on(async { Bus::new() });
    let mut subjects: Vec<Subject> = KINDS
        .iter()
        .map(|k| rt.block_on(async { Subject::baseline(k, n, Duration::ZERO) }))
        .collect();
    subjects.push(rt.block_on(Subject::hookbus(&bus, trivial_hooks(n, inline))));
    let mut timings = pair_latencies(&rt, config, subjects);
    rt.block_on(bus.shutdown(Duration::from_secs(5)));
    let hookbus = timings.pop().expect("one timing per subject");
    let baselines: [Timing; 3] = timings.try_into().expect("one timing per baseline");
    PairFigures { hookbus, baselines }
}

/// `pair_4_hooks` timed from `block_on` on the main thread, as an outside caller sees it (no
/// target: every message then wakes a parked worker from another thread).
fn external_caller(config: &BenchConfig) -> BenchResult {
    let rt = runtime(RuntimeKind::MultiThread);
    let actor = rt.block_on(async { Subject::baseline("actor_baseline", 4, Duration::ZERO) });
    let base = rt.block_on(median_ns(config, || actor.pair()));
    let bus = rt.block_on(async { Bus::new() });
    let subject = rt.block_on(Subject::hookbus(&bus, trivial_hooks(4, false)));
    let hookbus = rt.block_on(median_ns(config, || subject.pair()));
    rt.block_on(bus.shutdown(Duration::from_secs(5)));
    let r = hookbus / base;
    line(
        "pair_4_hooks_external_caller",
        Some(RuntimeKind::MultiThread),
        Unit::Ns,
        hookbus,
        [None, None, Some(base)],
        format!("no target: timed from block_on outside the runtime ({r:.2}× actor_baseline)"),
        true,
    )
}

fn ratio(a: f64, b: Option<f64>) -> f64 {
    b.map_or(f64::NAN, |b| a / b)
}

/// Every scenario, in order; `progress` gets each scenario's name as it starts.
pub fn run(config: &BenchConfig, progress: impl FnMut(&str)) -> Vec<BenchResult> {
    run_only(config, None, progress)
}

/// A group of scenarios: its name, how many progress steps it reports, and how it runs.
type Group = (
    &'static str,
    u64,
    fn(&BenchConfig, &mut dyn FnMut(&str)) -> Vec<BenchResult>,
);

/// Every group, in the order of the report.
const GROUPS: &[Group] = &[
    ("pair_multi_thread", 4, |c, p| {
        pair_scenarios(c, RuntimeKind::MultiThread, p)
    }),
    ("pair_current_thread", 4, |c, p| {
        pair_scenarios(c, RuntimeKind::CurrentThread, p)
    }),
    ("pair_4_hooks_external_caller", 1, |c, _| {
        vec![external_caller(c)]
    }),
    ("slow_4x10ms", 1, |c, _| vec![slow(c)]),
    ("throughput", 4, |c, p| throughput_scenarios(c, p)),
    ("sessions_10000_active", 1, |c, _| {
        vec![super::scale::many_sessions(c, 10_000)]
    }),
    ("pipeline_noop_tool", 1, |c, _| {
        vec![super::scale::pipeline_noop_tool(c)]
    }),
    ("filter_100_registered", 1, |c, _| vec![filter(c)]),
    ("idle_session_bytes", 1, |c, _| vec![idle(c)]),
    ("agent_session_bytes", 1, |c, _| {
        vec![super::scale::agent_session_bytes(c)]
    }),
    ("command_hook", 1, |c, _| vec![command(c)]),
    ("audit_durable_intents_per_s", 1, |c, _| vec![audit(c)]),
    ("remote_hook_pair", 1, |c, _| {
        super::fleet::remote_hook_pair(c)
    }),
    ("fleet_throughput", 1, |c, _| {
        super::fleet::fleet_throughput(c)
    }),
];

/// The groups whose name contains `only` (every group when `None`).
fn selected(only: Option<&str>) -> impl Iterator<Item = &'static Group> + '_ {
    GROUPS
        .iter()
        .filter(move |(name, _, _)| only.is_none_or(|o| name.contains(o)))
}

/// How many progress steps [`run_only`] reports for `only`.
pub fn steps(only: Option<&str>) -> u64 {
    selected(only).map(|(_, steps, _)| steps).sum()
}

/// The scenarios of the groups whose name contains `only` (e.g. `pair`, `throughput`,
/// `sessions`), in report order.
pub fn run_only(
    config: &BenchConfig,
    only: Option<&str>,
    mut progress: impl FnMut(&str),
) -> Vec<BenchResult> {
    let mut out = Vec::new();
    for (name, steps, group) in selected(only) {
        if *steps == 1 {
            progress(name);
        }
        out.extend(group(config, &mut progress));
    }
    out
}

/// `pair_{1,4,16}_hooks`, `per_extra_hook` and `pair_4_hooks_inline` on one runtime.
fn pair_scenarios(
    config: &BenchConfig,
    kind: RuntimeKind,
    progress: &mut dyn FnMut(&str),
) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let mut figure = |n: usize, inline: bool| {
        let name = if inline { "_inline" } else { "" };
        progress(&format!("pair_{n}_hooks{name} ({kind:?})"));
        let figures = pair_figures(config, kind, n, inline);
        (figures.hookbus.ns, figures.base())
    };
    let mut four = 0.0;
    for n in [1usize, 4, 16] {
        let (hookbus, base) = figure(n, false);
        let r = ratio(hookbus, base[2]);
        let (target, pass) = if n == 4 {
            four = hookbus;
            (format!("≤ 1.0× actor_baseline (is {r:.2}×)"), r <= 1.0)
        } else {
            (format!("scale, no target ({r:.2}× actor_baseline)"), true)
        };
        let name = format!("pair_{n}_hooks");
        out.push(line(
            name,
            Some(kind),
            Unit::Ns,
            hookbus,
            base,
            target,
            pass,
        ));
        if n == 16 {
            let extra = (hookbus - four) / 12.0;
            let limit = match kind {
                RuntimeKind::CurrentThread => 300.0,
                RuntimeKind::MultiThread => 1000.0,
            };
            let target = format!("≤ {limit:.0} ns per hook beyond 4 (from pair_4 and pair_16)");
            let figure = line(
                "per_extra_hook",
                Some(kind),
                Unit::Ns,
                extra,
                [None; 3],
                target,
                extra <= limit,
            );
            out.push(figure);
        }
    }
    let (hookbus, base) = figure(4, true);
    let r = ratio(hookbus, base[2]);
    let target = format!("≤ 0.5× actor_baseline (is {r:.2}×)");
    out.push(line(
        "pair_4_hooks_inline",
        Some(kind),
        Unit::Ns,
        hookbus,
        base,
        target,
        r <= 0.5,
    ));
    out
}

/// `throughput_{8,64}_sessions` (and 8 with inline hooks) against one shared actor fan-out.
fn throughput_scenarios(config: &BenchConfig, progress: &mut dyn FnMut(&str)) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let mt = Some(RuntimeKind::MultiThread);
    progress("throughput_8_sessions");
    let (t8, base8) = throughput(config, 8, false);
    let r8 = ratio(t8, base8);
    let target = format!("≥ 2.5× actor_baseline with one shared dispatcher (is {r8:.2}×)");
    out.push(line(
        "throughput_8_sessions",
        mt,
        Unit::PairsPerS,
        t8,
        [None, None, base8],
        target,
        r8 >= 2.5,
    ));
    progress("throughput_8_sessions_inline");
    let (t8i, base8i) = throughput(config, 8, true);
    let r8i = ratio(t8i, base8i);
    let target = format!("≥ 2.5× actor_baseline with one shared dispatcher (is {r8i:.2}×)");
    out.push(line(
        "throughput_8_sessions_inline",
        mt,
        Unit::PairsPerS,
        t8i,
        [None, None, base8i],
        target,
        r8i >= 2.5,
    ));
    progress("throughput_8_sessions_observed");
    let t8o = hookbus_throughput(&runtime(RuntimeKind::MultiThread), config, 8, false, true);
    let r8o = t8o / t8;
    out.push(line(
        "throughput_8_sessions_observed",
        mt,
        Unit::PairsPerS,
        t8o,
        [None, None, base8],
        format!("no target: with a no-op observer of every event, {r8o:.2}× the figure without"),
        true,
    ));
    progress("throughput_64_sessions");
    let (t64, base64) = throughput(config, 64, false);
    let r64 = t64 / t8;
    let target = format!("≥ 0.9× the 8-session figure (is {r64:.2}×)");
    out.push(line(
        "throughput_64_sessions",
        mt,
        Unit::PairsPerS,
        t64,
        [None, None, base64],
        target,
        r64 >= 0.9,
    ));
    out
}

/// Durable intents per second with 8 sessions (batched commits), next to one commit per record.
fn audit(config: &BenchConfig) -> BenchResult {
    use crate::builtins::{AuditLog, AuditMode};
    let dir = std::env::temp_dir().join(format!(
        "hookbus-bench-audit-{}-{}",
        std::process::id(),
        crate::model::event::now_ms()
    ));
    let _ = std::fs::create_dir_all(&dir);
    let rt = runtime(RuntimeKind::MultiThread);
    let window = config.throughput_time;
    let batched = rt.block_on(async {
        let Ok(log) = AuditLog::open(dir.join("batched.sqlite"), AuditMode::Durable) else {
            return 0.0;
        };
        let bus = Bus::new();
        if log.install(&bus).await.is_err() {
            return 0.0;
        }
        let done = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + window;
        let mut tasks = Vec::new();
        for s in 0..8 {
            let Ok(session) = bus.open_session(BusSessionConfig::new()).await else {
                continue;
            };
            let done = done.clone();
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while Instant::now() < deadline {
                    i += 1;
                    let _ = session
                        .dispatch(Event::PreToolUse(PreToolUse {
                            tool_name: "Bash".into(),
                            tool_input: json!({ "command": "ls" }),
                            tool_use_id: format!("s{s}-{i}"),
                        }))
                        .await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let started = Instant::now();
        for t in tasks {
            let _ = t.await;
        }
        let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
        bus.shutdown(Duration::from_secs(10)).await;
        log.close().await;
        rate
    });
    let single = one_commit_per_record(&dir.join("single.sqlite"), window);
    let _ = std::fs::remove_dir_all(&dir);
    let r = batched / single;
    line(
        "audit_durable_intents_per_s",
        Some(RuntimeKind::MultiThread),
        Unit::PairsPerS,
        batched,
        [Some(single), None, None],
        format!("batched commits, 8 sessions, vs one commit per record (direct column): {r:.1}×"),
        r >= 1.0,
    )
}

/// Intent records per second, each in its own `synchronous=FULL` transaction.
fn one_commit_per_record(path: &std::path::Path, window: Duration) -> f64 {
    use crate::builtins::{AuditLog, AuditMode};
    // Create the schema the same way, then write with a plain connection.
    if AuditLog::open(path, AuditMode::Durable).is_err() {
        return f64::NAN;
    }
    let Ok(conn) = rusqlite::Connection::open(path) else {
        return f64::NAN;
    };
    let _ = conn.pragma_update(None, "journal_mode", "WAL");
    let _ = conn.pragma_update(None, "synchronous", "FULL");
    let deadline = Instant::now() + window;
    let started = Instant::now();
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let ok = conn.execute(
            "INSERT INTO tool_calls (session_id, tool_use_id, tool_name, request_input, requested_ms, intent_ms)
             VALUES ('bench', ?1, 'Bash', '{}', 0, 0)",
            [n.to_string()],
        );
        if ok.is_err() {
            break;
        }
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn slow(config: &BenchConfig) -> BenchResult {
    let rt = runtime(RuntimeKind::CurrentThread);
    let few = BenchConfig {
        samples: config.samples.min(9),
        sample_time: Duration::ZERO,
        ..*config
    };
    let delay = Duration::from_millis(10);
    let mut base = [None; 3];
    for (i, k) in KINDS.iter().enumerate() {
        let subject = rt.block_on(async { Subject::baseline(k, 4, delay) });
        base[i] = Some(in_task(&rt, async move {
            median_ns(&few, || subject.event(pre_event())).await
        }));
    }
    let hookbus = in_task(&rt, async move {
        let bus = Bus::new();
        let hooks = (0..4)
            .map(|i| BenchHook::trivial(format!("slow{i}")).delay(delay))
            .collect();
        let subject = Subject::hookbus(&bus, hooks).await;
        let figure = median_ns(&few, || subject.event(pre_event())).await;
        bus.shutdown(Duration::from_secs(5)).await;
        figure
    });
    line(
        "slow_4x10ms",
        Some(RuntimeKind::CurrentThread),
        Unit::Ns,
        hookbus,
        base,
        format!("≤ 10.5 ms per event (is {:.2} ms)", hookbus / 1e6),
        hookbus <= 10.5e6,
    )
}

fn throughput(config: &BenchConfig, sessions: usize, inline: bool) -> (f64, Option<f64>) {
    let rt = runtime(RuntimeKind::MultiThread);
    let hookbus = hookbus_throughput(&rt, config, sessions, inline, false);
    let base = rt.block_on(async {
        let shared = Subject::baseline("actor_baseline", 4, Duration::ZERO);
        pairs_per_second(vec![shared; sessions], config.throughput_time).await
    });
    (hookbus, Some(base))
}

/// An observer that takes every event and does nothing with it.
struct NoopObserver;

#[async_trait::async_trait]
impl crate::runtime::observer::Observer for NoopObserver {
    fn name(&self) -> &str {
        "noop"
    }

    async fn on_event(&self, _: &Arc<crate::model::event::Envelope>) {}
}

/// Pairs per second of `sessions` sessions through 4 trivial hooks (and a no-op observer of
/// every event when `observed`).
fn hookbus_throughput(
    rt: &tokio::runtime::Runtime,
    config: &BenchConfig,
    sessions: usize,
    inline: bool,
    observed: bool,
) -> f64 {
    rt.block_on(async {
        let bus = Bus::new();
        if observed {
            let _ = bus.observe(NoopObserver).await;
        }
        for hook in trivial_hooks(4, inline) {
            let _ = bus.register(hook).await;
        }
        let mut subjects = Vec::with_capacity(sessions);
        for _ in 0..sessions {
            if let Ok(s) = bus.open_session(BusSessionConfig::new()).await {
                subjects.push(Subject::Hookbus(s));
            }
        }
        let figure = pairs_per_second(subjects, config.throughput_time).await;
        bus.shutdown(Duration::from_secs(5)).await;
        figure
    })
}

fn filter(config: &BenchConfig) -> BenchResult {
    let rt = runtime(RuntimeKind::CurrentThread);
    let config = *config;
    let figure = |registered: usize| {
        in_task(&rt, async move {
            let bus = Bus::new();
            let mut hooks = vec![BenchHook::trivial("match").tool("Bash")];
            hooks.extend(
                (1..registered)
                    .map(|i| BenchHook::trivial(format!("other{i}")).tool(format!("tool_{i}"))),
            );
            let subject = Subject::hookbus(&bus, hooks).await;
            let f = median_ns(&config, || subject.pair()).await;
            bus.shutdown(Duration::from_secs(5)).await;
            f
        })
    };
    let single = figure(1);
    let hundred = figure(100);
    let r = hundred / single;
    line(
        "filter_100_registered",
        Some(RuntimeKind::CurrentThread),
        Unit::Ns,
        hundred,
        [None; 3],
        format!("≤ 1.2× the single-hook figure of {single:.0} ns (is {r:.2}×)"),
        r <= 1.2,
    )
}

fn idle(config: &BenchConfig) -> BenchResult {
    let rt = runtime(RuntimeKind::CurrentThread);
    let per_session = rt.block_on(async {
        let bus = Bus::new();
        for hook in trivial_hooks(4, false) {
            let _ = bus.register(hook).await;
        }
        // One session first, so one-time allocations are not counted.
        let first = bus.open_session(BusSessionConfig::new()).await.ok();
        let before = resident_bytes();
        let mut sessions = Vec::with_capacity(config.idle_sessions);
        for _ in 0..config.idle_sessions {
            if let Ok(s) = bus.open_session(BusSessionConfig::new()).await {
                sessions.push(s);
            }
        }
        // Let whatever the sessions spawned settle.
        tokio::task::yield_now().await;
        let after = resident_bytes();
        drop(first);
        let per = after.saturating_sub(before) as f64 / config.idle_sessions as f64;
        bus.shutdown(Duration::from_secs(10)).await;
        drop(sessions);
        per
    });
    line(
        "idle_session_bytes",
        None,
        Unit::Bytes,
        per_session,
        [None; 3],
        format!(
            "≤ 8192 bytes per idle session, {} open",
            config.idle_sessions
        ),
        per_session <= 8192.0,
    )
}

fn command(config: &BenchConfig) -> BenchResult {
    let rt = runtime(RuntimeKind::MultiThread);
    let few = BenchConfig {
        samples: config.samples,
        sample_time: config.sample_time * 4,
        ..*config
    };
    // The bare spawn and hookbus's command hook, their samples interleaved.
    let figures = in_task(&rt, async move {
        let settings = ClaudeSettings::parse(
            &[(
                "bench".to_owned(),
                json!({ "hooks": { "PreToolUse": [ { "hooks": [ { "type": "command", "command": "true" } ] } ] } })
                    .to_string(),
            )],
            CompatOptions::default(),
        )
        .expect("a valid settings document");
        let bus = Bus::new();
        let _ = settings.register(&bus).await;
        let session = bus
            .open_session(BusSessionConfig::new())
            .await
            .expect("a session");
        let subject = Subject::Hookbus(session);
        let subject = &subject;
        let figures = interleaved_ns(&few, 2, |k| {
            if k == 0 {
                Either::Left(async {
                    let _ = tokio::process::Command::new("sh")
                        .arg("-c")
                        .arg("true")
                        .output()
                        .await;
                })
            } else {
                Either::Right(subject.event(pre_event()))
            }
        })
        .await;
        bus.shutdown(Duration::from_secs(5)).await;
        figures
    });
    let (bare, hookbus) = (figures[0], figures[1]);
    let r = hookbus / bare;
    line(
        "command_hook",
        Some(RuntimeKind::MultiThread),
        Unit::Ns,
        hookbus,
        [Some(bare), None, None],
        format!("≤ 1.1× a bare `sh -c true` spawn (direct column; is {r:.2}×)"),
        r <= 1.1,
    )
}
