use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::action::{HookResult, PostToolUseAction, PreToolUseAction};
use crate::builtins::LogSink;
use crate::event::*;
use crate::hook::{Hook, HookCx, HookOptions};

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

#[derive(Default)]
struct State {
    open: DashMap<(String, String), Instant>,
    done: Mutex<Vec<ToolTiming>>,
}

/// Times tool calls by pairing `PreToolUse` with `PostToolUse` (or `PostToolUseFailure`) by
/// session and tool-use id, so concurrent calls do not mix. A denied call's timer is dropped at
/// `PermissionDenied`; a session's leftovers at `SessionEnd`. Clones share their state.
#[derive(Clone, Default)]
pub struct TimingHook {
    state: Arc<State>,
    sink: Option<LogSink>,
}

impl TimingHook {
    /// A timing hook that only records.
    pub fn new() -> Self {
        Self::default()
    }
    /// Also logs `[Hook] Tool 'x' executed in Nms` to `sink`.
    pub fn with_sink(sink: LogSink) -> Self {
        Self {
            state: Arc::default(),
            sink: Some(sink),
        }
    }
    /// Timers started and not yet paired.
    pub fn open_timers(&self) -> usize {
        self.state.open.len()
    }
    /// Every finished call so far.
    pub fn timings(&self) -> Vec<ToolTiming> {
        self.state.done.lock().clone()
    }

    fn finish(&self, cx: &HookCx, tool: &str, id: &str, failed: bool) {
        let key = (cx.session_id().to_owned(), id.to_owned());
        let Some((_, started)) = self.state.open.remove(&key) else {
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
        self.state.done.lock().push(ToolTiming {
            session_id: key.0,
            tool_use_id: key.1,
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
        self.state.open.insert(
            (cx.session_id().to_owned(), ev.tool_use_id.clone()),
            Instant::now(),
        );
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
