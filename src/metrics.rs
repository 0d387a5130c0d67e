//! The runtime's own counters (FL-6: nothing is dropped silently). Lock-free atomics, read as a
//! serializable [`MetricsSnapshot`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use serde::{Deserialize, Serialize};

/// Counters shared by every actor of one runtime.
#[derive(Debug, Default)]
pub(crate) struct RuntimeMetrics {
    pub events_dispatched: AtomicU64,
    pub hook_calls: AtomicU64,
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
    /// Failures per hook name.
    pub hook_failures: DashMap<String, u64>,
}

impl RuntimeMetrics {
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
            events_dispatched: r(&self.events_dispatched),
            hook_calls: r(&self.hook_calls),
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
}
