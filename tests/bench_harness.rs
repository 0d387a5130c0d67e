//! The benchmark harness times every latency loop where an agent session runs: inside a task
//! spawned on the runtime, on one of its workers, never in `block_on`'s own future.

#![cfg(feature = "bench")]

use std::time::Duration;

use hookbus::benchmark::{pair_figures, BenchConfig, RuntimeKind, WORKER_THREAD};

#[test]
fn latency_scenarios_time_their_loops_inside_a_task_on_a_runtime_worker() {
    let config = BenchConfig {
        samples: 1,
        sample_time: Duration::from_millis(1),
        throughput_time: Duration::from_millis(1),
        idle_sessions: 1,
    };
    for kind in [RuntimeKind::MultiThread, RuntimeKind::CurrentThread] {
        for inline in [false, true] {
            let figures = pair_figures(&config, kind, 2, inline);
            for timing in figures.baselines.iter().chain([&figures.hookbus]) {
                assert!(timing.placement.in_task, "{kind:?}: {timing:?}");
                assert!(timing.ns > 0.0, "{kind:?}: {timing:?}");
                if kind == RuntimeKind::MultiThread {
                    assert_eq!(
                        timing.placement.thread.as_deref(),
                        Some(WORKER_THREAD),
                        "{timing:?}"
                    );
                }
            }
        }
    }
}
