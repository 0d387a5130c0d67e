use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::builtins::LogSink;
use crate::model::action::{HookResult, PostToolUseAction, PreToolUseAction};
use crate::model::event::*;
use crate::model::hook::{Hook, HookCx, HookOptions};
use crate::runtime::metrics::LatencyStats;

/// Default most timers open at once (calls between their `PreToolUse` and their Post event,
/// denial or session end): 10,000.
pub const DEFAULT_MAX_OPEN_TIMERS: usize = 10_000;
/// Default finished calls kept for [`TimingHook::recent`]: 100.
pub const DEFAULT_RECENT: usize = 100;
/// Default tool names with a histogram of their own (the rest share [`OTHER_TOOLS`]): 64.
pub const DEFAULT_MAX_TOOLS: usize = 64;
/// The name under which tools past the limit of distinct names are counted.
pub const OTHER_TOOLS: &str = "*";

/// Histogram range: 1 µs to 1 h (longer calls count as 1 h), 2 significant digits (1 %):
/// about 26 KiB per histogram.
const HIST_MAX_US: u64 = 3_600_000_000;
const HIST_DIGITS: u8 = 2;

/// One finished tool call as [`TimingHook`] measured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolTiming {
    /// The session.
    pub session_id: String,
    /// The call's id.
    pub tool_use_id: String,
    /// The tool.
    pub tool_name: String,
    /// From `PreToolUse` to `PostToolUse` / `PostToolUseFailure`.
    pub elapsed: Duration,
    /// Whether the tool failed.
    pub failed: bool,
}

impl ToolTiming {
    fn heap_bytes(&self) -> usize {
        self.session_id.capacity() + self.tool_use_id.capacity() + self.tool_name.capacity()
    }
}

/// What [`TimingHook::stats`] reports: latency percentiles over every call timed, overall and
/// per tool, and the calls that could not be timed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimingStats {
    /// Every call timed (`failures` counts the failed ones).
    pub all: LatencyStats,
    /// Per tool name; tools past the limit of distinct names are counted under [`OTHER_TOOLS`].
    pub tools: std::collections::BTreeMap<String, LatencyStats>,
    /// `PreToolUse` events not timed because the open timers were at their limit.
    pub untimed: u64,
}

/// A latency histogram and counts.
struct Series {
    hist: hdrhistogram::Histogram<u64>,
    count: u64,
    failures: u64,
}

impl Series {
    fn new() -> Self {
        Self {
            // Valid bounds: this cannot fail.
            hist: hdrhistogram::Histogram::new_with_bounds(1, HIST_MAX_US, HIST_DIGITS)
                .expect("valid histogram bounds"),
            count: 0,
            failures: 0,
        }
    }

    fn record(&mut self, elapsed: Duration, failed: bool) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let _ = self.hist.record(us.clamp(1, HIST_MAX_US));
        self.count += 1;
        self.failures += u64::from(failed);
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
            count: self.count,
            failures: self.failures,
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            max_us: if self.hist.is_empty() {
                0
            } else {
                self.hist.max()
            },
            ..LatencyStats::default()
        }
    }

    fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.hist.distinct_values() * std::mem::size_of::<u64>()
    }
}

/// The limits of a [`TimingHook`].
#[derive(Debug, Clone, Copy)]
struct Limits {
    open: usize,
    recent: usize,
    tools: usize,
}

struct Finished {
    all: Series,
    tools: HashMap<String, Series>,
    recent: VecDeque<ToolTiming>,
    recent_heap: usize,
}

struct State {
    limits: Limits,
    open: DashMap<(String, String), Instant>,
    untimed: AtomicU64,
    finished: Mutex<Finished>,
}

impl State {
    fn new(limits: Limits) -> Self {
        Self {
            limits,
            open: DashMap::new(),
            untimed: AtomicU64::new(0),
            finished: Mutex::new(Finished {
                all: Series::new(),
                tools: HashMap::new(),
                recent: VecDeque::new(),
                recent_heap: 0,
            }),
        }
    }
}

/// Times tool calls by pairing `PreToolUse` with `PostToolUse` (or `PostToolUseFailure`) by
/// session and tool-use id, so concurrent calls do not mix. A denied call's timer is dropped at
/// `PermissionDenied`; a session's leftovers at `SessionEnd`. Clones share their state.
///
/// Its memory is bounded whatever the number of calls: finished calls go into latency
/// histograms (hdrhistogram, 1 µs to 1 h, 2 significant digits, about 26 KiB each), overall
/// and per tool for at most [`DEFAULT_MAX_TOOLS`] tool names (the rest share one under
/// [`OTHER_TOOLS`]); only the last [`DEFAULT_RECENT`] calls are kept whole; at most
/// [`DEFAULT_MAX_OPEN_TIMERS`] timers are open at once (a call past it is not timed, and counted
/// in [`TimingStats::untimed`]). [`memory_bytes`](Self::memory_bytes) reports the size.
#[derive(Clone)]
pub struct TimingHook {
    state: Arc<State>,
    sink: Option<LogSink>,
}

impl Default for TimingHook {
    fn default() -> Self {
        Self {
            state: Arc::new(State::new(Limits {
                open: DEFAULT_MAX_OPEN_TIMERS,
                recent: DEFAULT_RECENT,
                tools: DEFAULT_MAX_TOOLS,
            })),
            sink: None,
        }
    }
}

impl TimingHook {
    /// A timing hook that only records, with the default limits.
    pub fn new() -> Self {
        Self::default()
    }
    /// Also logs `[Hook] Tool 'x' executed in Nms` to `sink`.
    pub fn with_sink(sink: LogSink) -> Self {
        Self {
            sink: Some(sink),
            ..Self::default()
        }
    }

    fn with_limits(mut self, limits: Limits) -> Self {
        self.state = Arc::new(State::new(limits));
        self
    }

    /// At most `n` timers open at once (default [`DEFAULT_MAX_OPEN_TIMERS`]). Starts afresh:
    /// call it before registering the hook.
    pub fn max_open_timers(self, n: usize) -> Self {
        let limits = Limits {
            open: n,
            ..self.state.limits
        };
        self.with_limits(limits)
    }

    /// Keeps the last `n` finished calls (default [`DEFAULT_RECENT`]). Starts afresh: call it
    /// before registering the hook.
    pub fn recent_calls(self, n: usize) -> Self {
        let limits = Limits {
            recent: n,
            ..self.state.limits
        };
        self.with_limits(limits)
    }

    /// Gives at most `n` tool names a histogram of their own (default [`DEFAULT_MAX_TOOLS`]).
    /// Starts afresh: call it before registering the hook.
    pub fn max_tools(self, n: usize) -> Self {
        let limits = Limits {
            tools: n,
            ..self.state.limits
        };
        self.with_limits(limits)
    }

    /// Timers started and not yet paired.
    pub fn open_timers(&self) -> usize {
        self.state.open.len()
    }

    /// The last finished calls (at most the `recent_calls` limit), oldest first.
    pub fn recent(&self) -> Vec<ToolTiming> {
        self.state.finished.lock().recent.iter().cloned().collect()
    }

    /// Latency percentiles over every call timed so far, overall and per tool.
    pub fn stats(&self) -> TimingStats {
        let f = self.state.finished.lock();
        TimingStats {
            all: f.all.stats(),
            tools: f
                .tools
                .iter()
                .map(|(name, s)| (name.clone(), s.stats()))
                .collect(),
            untimed: self.state.untimed.load(Ordering::Relaxed),
        }
    }

    /// The memory this hook holds, in bytes: histograms, recent calls and open timers (with
    /// the text of their names and ids). Bounded by the limits, whatever the number of calls.
    pub fn memory_bytes(&self) -> usize {
        let finished = {
            let f = self.state.finished.lock();
            f.all.bytes()
                + f.tools
                    .iter()
                    .map(|(name, s)| name.capacity() + s.bytes())
                    .sum::<usize>()
                + f.recent.capacity() * std::mem::size_of::<ToolTiming>()
                + f.recent_heap
        };
        let open: usize = self
            .state
            .open
            .iter()
            .map(|e| {
                std::mem::size_of::<((String, String), Instant)>()
                    + e.key().0.capacity()
                    + e.key().1.capacity()
            })
            .sum();
        std::mem::size_of::<State>() + finished + open
    }

    /// Records a finished call: what the hook does when a call's Post event arrives, for calls
    /// timed elsewhere too.
    pub fn record(&self, timing: ToolTiming) {
        let limits = self.state.limits;
        let mut f = self.state.finished.lock();
        f.all.record(timing.elapsed, timing.failed);
        let name = if f.tools.contains_key(&timing.tool_name) || f.tools.len() < limits.tools {
            timing.tool_name.as_str()
        } else {
            OTHER_TOOLS
        };
        match f.tools.get_mut(name) {
            Some(series) => series.record(timing.elapsed, timing.failed),
            None => {
                let mut series = Series::new();
                series.record(timing.elapsed, timing.failed);
                f.tools.insert(name.to_owned(), series);
            }
        }
        if limits.recent == 0 {
            return;
        }
        while f.recent.len() >= limits.recent {
            if let Some(old) = f.recent.pop_front() {
                f.recent_heap -= old.heap_bytes();
            }
        }
        f.recent_heap += timing.heap_bytes();
        f.recent.push_back(timing);
    }

    fn start(&self, cx: &HookCx, id: &str) {
        let key = (cx.session_id().to_owned(), id.to_owned());
        // A repeated id restarts its timer; a new one past the limit is not timed.
        if self.state.open.len() >= self.state.limits.open && !self.state.open.contains_key(&key) {
            self.state.untimed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.state.open.insert(key, Instant::now());
    }

    fn finish(&self, cx: &HookCx, tool: &str, id: &str, failed: bool) {
        let key = (cx.session_id().to_owned(), id.to_owned());
        let Some(((session_id, tool_use_id), started)) = self.state.open.remove(&key) else {
            return;
        };
        let elapsed = started.elapsed();
        if let Some(sink) = &self.sink {
            let line = format!("[Hook] Tool '{tool}' executed in {}ms", elapsed.as_millis());
            match sink {
                LogSink::Tracing => tracing::info!(session = cx.session_id(), "{line}"),
                LogSink::Stdout => {
                    let _ = writeln!(std::io::stdout().lock(), "{line}");
                }
                LogSink::Custom(f) => f(&line),
            }
        }
        self.record(ToolTiming {
            session_id,
            tool_use_id,
            tool_name: tool.to_owned(),
            elapsed,
            failed,
        });
    }
}

#[async_trait]
impl Hook for TimingHook {
    fn name(&self) -> &str {
        "timing"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().inline().events([
            EventKind::PreToolUse,
            EventKind::PostToolUse,
            EventKind::PostToolUseFailure,
            EventKind::PermissionDenied,
            EventKind::SessionEnd,
        ])
    }
    async fn pre_tool_use(&self, cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        self.start(cx, &ev.tool_use_id);
        Ok(Default::default())
    }
    async fn post_tool_use(&self, cx: &HookCx, ev: &PostToolUse) -> HookResult<PostToolUseAction> {
        self.finish(cx, &ev.tool_name, &ev.tool_use_id, false);
        Ok(Default::default())
    }
    async fn post_tool_use_failure(
        &self,
        cx: &HookCx,
        ev: &PostToolUseFailure,
    ) -> HookResult<PostToolUseAction> {
        self.finish(cx, &ev.tool_name, &ev.tool_use_id, true);
        Ok(Default::default())
    }
    async fn permission_denied(&self, cx: &HookCx, ev: &PermissionDenied) -> HookResult<()> {
        self.state
            .open
            .remove(&(cx.session_id().to_owned(), ev.tool_use_id.clone()));
        Ok(Default::default())
    }
    async fn session_end(&self, cx: &HookCx, _: &SessionEnd) -> HookResult<()> {
        let sid = cx.session_id();
        self.state.open.retain(|(s, _), _| s != sid);
        Ok(Default::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(tool: &str, ms: u64) -> ToolTiming {
        ToolTiming {
            session_id: "s".into(),
            tool_use_id: "t".into(),
            tool_name: tool.into(),
            elapsed: Duration::from_millis(ms),
            failed: ms % 2 == 1,
        }
    }

    #[test]
    fn stats_come_from_histograms_and_tools_past_the_limit_share_one() {
        let hook = TimingHook::new().max_tools(2).recent_calls(3);
        for ms in 1..=100 {
            hook.record(timing("bash", ms));
        }
        hook.record(timing("read_file", 7));
        hook.record(timing("write_file", 9));
        hook.record(timing("list_dir", 11));
        let stats = hook.stats();
        assert_eq!(stats.all.count, 103);
        assert_eq!(stats.all.failures, 53);
        let bash = &stats.tools["bash"];
        assert_eq!(bash.count, 100);
        // 2 significant digits: within 1 %.
        assert!((49_500..=50_500).contains(&bash.p50_us), "{bash:?}");
        assert!((98_000..=100_000).contains(&bash.p99_us), "{bash:?}");
        assert_eq!(stats.tools[OTHER_TOOLS].count, 2);
        assert_eq!(stats.tools.len(), 3);
        let recent: Vec<_> = hook.recent().into_iter().map(|t| t.tool_name).collect();
        assert_eq!(recent, ["read_file", "write_file", "list_dir"]);
    }
}
