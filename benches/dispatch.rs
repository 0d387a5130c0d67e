//! Criterion benchmarks of the dispatch path, each scenario next to its baselines in the same
//! run, named `<scenario>/<implementation>` (SPEC section 11; the targets are in `hookbus bench`,
//! which runs the same scenarios from `hookbus::benchmark`).
//!
//! * `direct`: hooks called one after another in the caller's task;
//! * `join_all`: the same hooks polled together in the caller's task;
//! * `actor_baseline`: a dispatcher task, one task per hook, mpsc + oneshot;
//! * `hookbus` / `hookbus_inline`: hookbus with the hooks as actors / inline.
//!
//! Every timed loop runs inside a task spawned on the runtime (as an agent session does);
//! `block_on` only starts and joins it. `idle_session_bytes` is a memory figure, reported by
//! `hookbus bench` only.

// `criterion_group!` and `criterion_main!` generate public functions without docs.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::sync::Arc;

use hookbus::benchmark::{
    direct_call, direct_hooks, in_task, noop_pipeline, pairs_per_second, runtime, time_events,
    time_pairs, trivial_hooks, BenchHook, Noop, RuntimeKind, Subject,
};
use hookbus::claude::{ClaudeSettings, CompatOptions};
use hookbus::{Bus, BusSessionConfig};
use serde_json::json;

const BASELINES: [&str; 3] = ["direct", "join_all", "actor_baseline"];

fn pair_n_hooks(c: &mut Criterion) {
    for (rt_name, kind) in [
        ("multi_thread", RuntimeKind::MultiThread),
        ("current_thread", RuntimeKind::CurrentThread),
    ] {
        let rt = runtime(kind);
        for n in [1usize, 4, 16] {
            let mut group = c.benchmark_group(format!("pair_{n}_hooks/{rt_name}"));
            for base in BASELINES {
                let subject = rt.block_on(async { Subject::baseline(base, n, Duration::ZERO) });
                group.bench_function(base, |b| {
                    b.iter_custom(|iters| time_pairs(&rt, &subject, iters))
                });
            }
            for inline in [false, true] {
                let subject = rt.block_on(async {
                    Subject::hookbus(&Bus::new(), trivial_hooks(n, inline)).await
                });
                let name = if inline { "hookbus_inline" } else { "hookbus" };
                group.bench_function(name, |b| {
                    b.iter_custom(|iters| time_pairs(&rt, &subject, iters))
                });
            }
            group.finish();
        }
    }
}

fn slow_4x10ms(c: &mut Criterion) {
    let rt = runtime(RuntimeKind::CurrentThread);
    let delay = Duration::from_millis(10);
    let mut group = c.benchmark_group("slow_4x10ms");
    group.sample_size(10);
    for base in BASELINES {
        let subject = rt.block_on(async { Subject::baseline(base, 4, delay) });
        group.bench_function(base, |b| {
            b.iter_custom(|iters| time_events(&rt, &subject, iters))
        });
    }
    let subject = rt.block_on(async {
        let hooks = (0..4)
            .map(|i| BenchHook::trivial(format!("slow{i}")).delay(delay))
            .collect();
        Subject::hookbus(&Bus::new(), hooks).await
    });
    group.bench_function("hookbus", |b| {
        b.iter_custom(|iters| time_events(&rt, &subject, iters))
    });
    group.finish();
}

fn throughput(c: &mut Criterion) {
    let rt = runtime(RuntimeKind::MultiThread);
    for sessions in [8usize, 64] {
        let mut group = c.benchmark_group(format!("throughput_{sessions}_sessions"));
        group.sample_size(10);
        // Time per pair with `sessions` callers at once (the reciprocal of pairs per second).
        let per_pair = |subjects: Vec<Subject>| {
            let rt = &rt;
            move |iters: u64| {
                let window = Duration::from_millis(50).max(Duration::from_micros(iters));
                let rate = rt.block_on(pairs_per_second(subjects.clone(), window));
                Duration::from_secs_f64(iters as f64 / rate)
            }
        };
        let shared = rt.block_on(async { Subject::baseline("actor_baseline", 4, Duration::ZERO) });
        let f = per_pair(vec![shared; sessions]);
        group.bench_function("actor_baseline", |b| b.iter_custom(&f));
        for inline in [false, true] {
            let subjects = rt.block_on(async {
                let bus = Bus::new();
                for hook in trivial_hooks(4, inline) {
                    bus.register(hook).await.expect("register");
                }
                let mut v = Vec::new();
                for _ in 0..sessions {
                    v.push(Subject::Hookbus(
                        bus.open_session(BusSessionConfig::new())
                            .await
                            .expect("session"),
                    ));
                }
                v
            });
            let f = per_pair(subjects);
            let name = if inline { "hookbus_inline" } else { "hookbus" };
            group.bench_function(name, |b| b.iter_custom(&f));
        }
        group.finish();
    }
}

fn filter_100_registered(c: &mut Criterion) {
    let rt = runtime(RuntimeKind::CurrentThread);
    let mut group = c.benchmark_group("filter_100_registered");
    for registered in [1usize, 100] {
        let subject = rt.block_on(async {
            let mut hooks = vec![BenchHook::trivial("match").tool("Bash")];
            hooks.extend(
                (1..registered)
                    .map(|i| BenchHook::trivial(format!("other{i}")).tool(format!("tool_{i}"))),
            );
            Subject::hookbus(&Bus::new(), hooks).await
        });
        group.bench_function(BenchmarkId::new("hookbus", registered), |b| {
            b.iter_custom(|iters| time_pairs(&rt, &subject, iters))
        });
    }
    group.finish();
}

fn command_hook(c: &mut Criterion) {
    let rt = runtime(RuntimeKind::MultiThread);
    let mut group = c.benchmark_group("command_hook");
    group.sample_size(20);
    group.bench_function("bare_spawn", |b| {
        b.iter_custom(|iters| {
            in_task(&rt, async move {
                let start = std::time::Instant::now();
                for _ in 0..iters {
                    let _ = tokio::process::Command::new("sh")
                        .arg("-c")
                        .arg("true")
                        .output()
                        .await;
                }
                start.elapsed()
            })
        })
    });
    let subject = rt.block_on(async {
        let doc = json!({ "hooks": { "PreToolUse": [ { "hooks": [ { "type": "command", "command": "true" } ] } ] } });
        let settings = ClaudeSettings::parse(
            &[("bench".to_owned(), doc.to_string())],
            CompatOptions::default(),
        )
        .expect("settings");
        let bus = Bus::new();
        settings.register(&bus).await.expect("register");
        Subject::Hookbus(bus.open_session(BusSessionConfig::new()).await.expect("session"))
    });
    group.bench_function("hookbus", |b| {
        b.iter_custom(|iters| time_events(&rt, &subject, iters))
    });
    group.finish();
}

/// `sessions_10000_active`: time per pair with 10,000 sessions dispatching at once.
fn sessions_10000_active(c: &mut Criterion) {
    let rt = runtime(RuntimeKind::MultiThread);
    let mut group = c.benchmark_group("sessions_10000_active");
    group.sample_size(10);
    let subjects = rt.block_on(async {
        let bus = Bus::new();
        for hook in trivial_hooks(4, false) {
            bus.register(hook).await.expect("register");
        }
        let mut v = Vec::with_capacity(10_000);
        for _ in 0..10_000 {
            v.push(Subject::Hookbus(
                bus.open_session(BusSessionConfig::new())
                    .await
                    .expect("session"),
            ));
        }
        v
    });
    group.bench_function("hookbus", |b| {
        b.iter_custom(|iters| {
            let window = Duration::from_millis(200).max(Duration::from_micros(iters));
            let rate = rt.block_on(pairs_per_second(subjects.clone(), window));
            Duration::from_secs_f64(iters as f64 / rate)
        })
    });
    group.finish();
}

/// `pipeline_noop_tool`: one no-op tool call through the whole pipeline, next to the hooks and
/// the tool called directly.
fn pipeline_noop_tool(c: &mut Criterion) {
    let rt = runtime(RuntimeKind::CurrentThread);
    let mut group = c.benchmark_group("pipeline_noop_tool");
    let pipeline = rt.block_on(async {
        let bus = Bus::new();
        for hook in trivial_hooks(4, false) {
            bus.register(hook).await.expect("register");
        }
        Arc::new(noop_pipeline(&bus).await.expect("a pipeline"))
    });
    group.bench_function("hookbus", |b| {
        b.iter_custom(|iters| {
            let pipeline = pipeline.clone();
            in_task(&rt, async move {
                let start = std::time::Instant::now();
                for _ in 0..iters {
                    let call = hookbus::ToolCall::new("t1", "noop", json!({}));
                    let _ = pipeline.execute(call).await;
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("direct", |b| {
        b.iter_custom(|iters| {
            in_task(&rt, async move {
                let hooks = direct_hooks(4);
                let tool: Arc<dyn hookbus::Tool> = Arc::new(Noop);
                let start = std::time::Instant::now();
                for _ in 0..iters {
                    direct_call(&hooks, &tool).await;
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    sessions_10000_active,
    pipeline_noop_tool,
    pair_n_hooks,
    slow_4x10ms,
    throughput,
    filter_100_registered,
    command_hook
);
criterion_main!(benches);
