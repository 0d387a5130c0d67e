use async_trait::async_trait;

use crate::model::action::HookResult;
use crate::model::event::*;
use crate::model::hook::{Hook, HookCx, HookOptions};
use crate::runtime::bus::Bus;
use crate::runtime::metrics::MetricsReport;

/// Counts per event, per hook and per tool, with latency percentiles (p50, p90, p99, max) per
/// hook and per tool, timeouts, panics, fail-closed blocks and dropped observer events.
///
/// It reads the same figures the runtime keeps ([`Bus::metrics_report`]): creating it turns on
/// the runtime's per-hook and per-tool latency recording. As a hook it logs a `tracing` summary
/// every `every` steps of a session (default 3) and at `SessionEnd`.
#[derive(Clone)]
pub struct MetricsHook {
    bus: Bus,
    every: u32,
}

/// The scratchpad key of a session's step count.
const STEPS: &str = "hookbus.metrics.steps";

impl MetricsHook {
    /// A metrics hook over `bus`'s figures (turns on detailed recording).
    pub fn new(bus: &Bus) -> Self {
        bus.enable_detailed_metrics();
        Self {
            bus: bus.clone(),
            every: 3,
        }
    }

    /// Log a summary every `n` steps (at least 1).
    pub fn every(mut self, n: u32) -> Self {
        self.every = n.max(1);
        self
    }

    /// The figures now.
    pub fn snapshot(&self) -> MetricsReport {
        self.bus.metrics_report()
    }

    fn summary(&self, session: &str, why: &str) {
        let r = self.snapshot();
        let slowest = r
            .hooks
            .iter()
            .max_by_key(|(_, s)| s.p99_us)
            .map(|(name, s)| format!("{name} p99 {} µs", s.p99_us))
            .unwrap_or_default();
        tracing::info!(
            session,
            why,
            events = r.runtime.events_dispatched,
            hook_calls = r.runtime.hook_calls,
            timeouts = r.runtime.hook_timeouts,
            panics = r.runtime.hook_panics,
            fail_closed_blocks = r.runtime.fail_closed_blocks,
            observer_dropped = r.runtime.observer_dropped,
            slowest_hook = %slowest,
            "hookbus metrics"
        );
    }
}

impl std::fmt::Debug for MetricsHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsHook")
            .field("every", &self.every)
            .finish()
    }
}

#[async_trait]
impl Hook for MetricsHook {
    fn name(&self) -> &str {
        "metrics"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::StepComplete, EventKind::SessionEnd])
            .inline()
    }
    async fn step_complete(&self, cx: &HookCx, _: &StepComplete) -> HookResult<()> {
        let n = cx.scratchpad().update(STEPS, |n: &mut u32| {
            *n += 1;
            *n
        });
        if n.is_multiple_of(self.every) {
            self.summary(cx.session_id(), "steps");
        }
        Ok(().into())
    }
    async fn session_end(&self, cx: &HookCx, _: &SessionEnd) -> HookResult<()> {
        self.summary(cx.session_id(), "session end");
        Ok(().into())
    }
}
