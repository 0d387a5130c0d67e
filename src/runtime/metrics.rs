//! The runtime's own counters (FL-6: nothing is dropped silently). Lock-free atomics, read as a
//! serializable [`MetricsSnapshot`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use serde::{Deserialize, Serialize};

use crate::model::error::ActorKind;
use crate::model::event::EventKind;
use crate::runtime::stripe::Striped;

/// Counters shared by every actor of one runtime.
#[derive(Debug, Default)]
pub(crate) struct RuntimeMetrics {
    /// What every dispatch counts, striped by session (see [`Striped`]).
    pub dispatches: Striped<DispatchCounts>,
    pub hook_errors: AtomicU64,
    pub hook_panics: AtomicU64,
    pub hook_timeouts: AtomicU64,
    pub hook_reply_dropped: AtomicU64,
    pub hook_skipped: AtomicU64,
    pub fail_closed_blocks: AtomicU64,
    pub ignored_actions: AtomicU64,
    pub observer_delivered: AtomicU64,
    pub observer_dropped: AtomicU64,
    pub observer_panics: AtomicU64,
    pub observer_timeouts: AtomicU64,
    pub sessions_opened: AtomicU64,
    pub sessions_closed: AtomicU64,
    /// Panics the supervisor reported, by [`ActorKind::index`].
    pub actor_panics: [AtomicU64; ActorKind::ALL.len()],
    /// Failures per hook name.
    pub hook_failures: DashMap<String, u64>,
    /// Per-event, per-hook and per-tool figures.
    pub detail: DetailedMetrics,
}

/// What every dispatch counts, in one session's stripe.
#[derive(Debug, Default)]
pub(crate) struct DispatchCounts {
    /// Events dispatched, by [`EventKind::index`].
    pub by_event: [AtomicU64; EventKind::COUNT],
    /// Hook calls made (every start but the skipped ones).
    pub hook_calls: AtomicU64,
}

impl RuntimeMetrics {
    /// Events dispatched of one kind, over every stripe.
    pub fn events_of(&self, kind: EventKind) -> u64 {
        self.dispatches
            .iter()
            .map(|d| d.by_event[kind.index()].load(Ordering::Relaxed))
            .sum()
    }

    pub fn record_hook_failure(&self, hook: &str) {
        *self.hook_failures.entry(hook.to_owned()).or_default() += 1;
    }

    pub fn failures_by_hook(&self) -> BTreeMap<String, u64> {
        self.hook_failures
            .iter()
            .map(|e| (e.key().clone(), *e.value()))
            .collect()
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MetricsSnapshot {
            // Counted once per event, by kind; the total is their sum.
            events_dispatched: self
                .dispatches
                .iter()
                .flat_map(|d| d.by_event.iter())
                .map(r)
                .sum(),
            hook_calls: self.dispatches.iter().map(|d| r(&d.hook_calls)).sum(),
            hook_errors: r(&self.hook_errors),
            hook_panics: r(&self.hook_panics),
            hook_timeouts: r(&self.hook_timeouts),
            hook_reply_dropped: r(&self.hook_reply_dropped),
            hook_skipped: r(&self.hook_skipped),
            fail_closed_blocks: r(&self.fail_closed_blocks),
            ignored_actions: r(&self.ignored_actions),
            observer_delivered: r(&self.observer_delivered),
            observer_dropped: r(&self.observer_dropped),
            observer_panics: r(&self.observer_panics),
            observer_timeouts: r(&self.observer_timeouts),
            sessions_opened: r(&self.sessions_opened),
            sessions_closed: r(&self.sessions_closed),
            actor_panics: ActorPanics {
                registry: r(&self.actor_panics[ActorKind::Registry.index()]),
                session: r(&self.actor_panics[ActorKind::Session.index()]),
                hook: r(&self.actor_panics[ActorKind::Hook.index()]),
                observer: r(&self.actor_panics[ActorKind::Observer.index()]),
                permission: r(&self.actor_panics[ActorKind::Permission.index()]),
                agent_loop: r(&self.actor_panics[ActorKind::AgentLoop.index()]),
            },
        }
    }
}

/// A point-in-time copy of the runtime's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// Events dispatched, all sessions.
    pub events_dispatched: u64,
    /// Hook calls made.
    pub hook_calls: u64,
    /// Hook calls that returned an error.
    pub hook_errors: u64,
    /// Hook calls that panicked.
    pub hook_panics: u64,
    /// Hook calls that timed out.
    pub hook_timeouts: u64,
    /// Deliveries whose reply slot was dropped unanswered.
    pub hook_reply_dropped: u64,
    /// Hook calls skipped (open circuit breaker, blocked dependency, grace period spent).
    pub hook_skipped: u64,
    /// Failures of fail-closed hooks that became a Block.
    pub fail_closed_blocks: u64,
    /// Actions ignored because they do not fit their event.
    pub ignored_actions: u64,
    /// Events an observer finished handling.
    pub observer_delivered: u64,
    /// Events dropped for an observer (full mailbox past the enqueue limit, or closed).
    pub observer_dropped: u64,
    /// Observer calls that panicked.
    pub observer_panics: u64,
    /// Observer calls that timed out.
    pub observer_timeouts: u64,
    /// Sessions opened.
    pub sessions_opened: u64,
    /// Sessions closed.
    pub sessions_closed: u64,
    /// Panics the supervisor reported (each also a `tracing` error event and an
    /// [`ActorFailure`](crate::ActorFailure) to [`Bus::actor_failures`](crate::Bus::actor_failures)).
    #[serde(default)]
    pub actor_panics: ActorPanics,
}

/// Panics reported by the supervisor, by kind of actor: a panic in an actor's own loop, or in
/// a caller's call it served (a hook's, an observer's, the approver's, a tool's, the model's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorPanics {
    /// The registry actor.
    pub registry: u64,
    /// Sessions' dispatchers.
    pub session: u64,
    /// Hook actors and hook calls.
    pub hook: u64,
    /// Observer actors and observer calls.
    pub observer: u64,
    /// The permission service (its evaluation, or the approver).
    pub permission: u64,
    /// Agent loops (the loop, the model provider, tools).
    pub agent_loop: u64,
}

impl ActorPanics {
    /// The count for one kind.
    pub fn of(&self, kind: ActorKind) -> u64 {
        match kind {
            ActorKind::Registry => self.registry,
            ActorKind::Session => self.session,
            ActorKind::Hook => self.hook,
            ActorKind::Observer => self.observer,
            ActorKind::Permission => self.permission,
            ActorKind::AgentLoop => self.agent_loop,
        }
    }

    /// All kinds together.
    pub fn total(&self) -> u64 {
        ActorKind::ALL.iter().map(|k| self.of(*k)).sum()
    }
}

/// One hook's or tool's figures: counts and latency percentiles (microseconds).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Runs recorded.
    pub count: u64,
    /// Runs that failed (error, panic, timeout, dropped reply; for tools: error results).
    pub failures: u64,
    /// Runs that timed out.
    pub timeouts: u64,
    /// Runs that panicked.
    pub panics: u64,
    /// Median latency.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Slowest run.
    pub max_us: u64,
}

/// Counts and a latency histogram (hdrhistogram, 3 significant digits, up to an hour).
#[derive(Debug)]
pub(crate) struct Series {
    hist: hdrhistogram::Histogram<u64>,
    stats: LatencyStats,
}

impl Default for Series {
    fn default() -> Self {
        Self {
            // 1 µs .. 1 h at 3 significant digits: valid bounds, so this cannot fail.
            hist: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid histogram bounds"),
            stats: LatencyStats::default(),
        }
    }
}

impl Series {
    fn record(&mut self, latency: std::time::Duration, failed: bool, timeout: bool, panic: bool) {
        let us = (latency.as_micros() as u64).clamp(1, 3_600_000_000);
        let _ = self.hist.record(us);
        self.stats.count += 1;
        self.stats.failures += u64::from(failed);
        self.stats.timeouts += u64::from(timeout);
        self.stats.panics += u64::from(panic);
    }

    fn stats(&self) -> LatencyStats {
        let q = |p: f64| {
            if self.hist.is_empty() {
                0
            } else {
                self.hist.value_at_quantile(p)
            }
        };
        LatencyStats {
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            max_us: if self.hist.is_empty() {
                0
            } else {
                self.hist.max()
            },
            ..self.stats.clone()
        }
    }
}

/// Per-hook and per-tool latencies, recorded once a
/// [`MetricsHook`](crate::builtins::MetricsHook) asks for them (events are counted by kind in
/// [`RuntimeMetrics::dispatches`]).
#[derive(Debug, Default)]
pub(crate) struct DetailedMetrics {
    pub enabled: std::sync::atomic::AtomicBool,
    pub hooks: DashMap<String, parking_lot::Mutex<Series>>,
    pub tools: DashMap<String, parking_lot::Mutex<Series>>,
}

impl DetailedMetrics {
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn record_hook(
        &self,
        hook: &str,
        latency: std::time::Duration,
        failed: bool,
        timeout: bool,
        panic: bool,
    ) {
        if let Some(series) = self.hooks.get(hook) {
            series.lock().record(latency, failed, timeout, panic);
            return;
        }
        self.hooks
            .entry(hook.to_owned())
            .or_default()
            .lock()
            .record(latency, failed, timeout, panic);
    }

    pub fn record_tool(&self, tool: &str, latency: std::time::Duration, failed: bool) {
        if let Some(series) = self.tools.get(tool) {
            series.lock().record(latency, failed, false, false);
            return;
        }
        self.tools
            .entry(tool.to_owned())
            .or_default()
            .lock()
            .record(latency, failed, false, false);
    }
}

/// Everything the runtime counts: its counters, events by name, and per-hook and per-tool
/// latency percentiles. Serializable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsReport {
    /// The runtime's counters.
    pub runtime: MetricsSnapshot,
    /// Events dispatched, by wire name.
    pub events: BTreeMap<String, u64>,
    /// Per hook.
    pub hooks: BTreeMap<String, LatencyStats>,
    /// Per tool (from `PostToolUse` / `PostToolUseFailure` durations).
    pub tools: BTreeMap<String, LatencyStats>,
}

impl RuntimeMetrics {
    /// The full report.
    pub fn report(&self) -> MetricsReport {
        let d = &self.detail;
        MetricsReport {
            runtime: self.snapshot(),
            events: EventKind::ALL
                .iter()
                .map(|&k| (k.as_str().to_owned(), self.events_of(k)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            hooks: d
                .hooks
                .iter()
                .map(|e| (e.key().clone(), e.value().lock().stats()))
                .collect(),
            tools: d
                .tools
                .iter()
                .map(|e| (e.key().clone(), e.value().lock().stats()))
                .collect(),
        }
    }
}
