//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod audit_hooks;
pub mod http;
#[cfg(feature = "service")]
pub mod model_server;
#[cfg(all(feature = "nats", feature = "bench"))]
pub mod nats;
#[cfg(feature = "postgres")]
pub mod postgres;

use std::sync::Arc;
use std::time::Duration;

use hookbus::*;
use parking_lot::Mutex;
use serde_json::{json, Value};

pub fn pre(tool: &str, input: Value, id: &str) -> Event {
    Event::PreToolUse(PreToolUse {
        tool_name: tool.into(),
        tool_input: input,
        tool_use_id: id.into(),
    })
}

pub fn bash(cmd: &str, id: &str) -> Event {
    pre("Bash", json!({ "command": cmd }), id)
}

pub fn post(tool: &str, output: Value, id: &str) -> Event {
    Event::PostToolUse(PostToolUse {
        tool_name: tool.into(),
        tool_input: json!({}),
        original_input: None,
        tool_response: output,
        original_response: None,
        tool_use_id: id.into(),
        is_error: false,
        duration_ms: 0,
    })
}

pub fn notification(msg: &str) -> Event {
    Event::Notification(Notification {
        message: msg.into(),
        title: None,
        notification_type: "idle_prompt".into(),
    })
}

type PreFn = dyn Fn(&PreToolUse) -> PreToolUseAction + Send + Sync;

/// A PreToolUse hook whose behaviour is a closure, with an optional delay, recording calls.
#[derive(Clone)]
pub struct ScriptHook {
    pub name: String,
    pub options: HookOptions,
    pub delay: Duration,
    pub act: Arc<PreFn>,
    pub seen: Arc<Mutex<Vec<Value>>>,
}

impl ScriptHook {
    pub fn new(
        name: &str,
        act: impl Fn(&PreToolUse) -> PreToolUseAction + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            options: HookOptions::new().events([EventKind::PreToolUse]),
            delay: Duration::ZERO,
            act: Arc::new(act),
            seen: Arc::default(),
        }
    }
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
    pub fn options(mut self, f: impl FnOnce(HookOptions) -> HookOptions) -> Self {
        self.options = f(self.options);
        self
    }
    pub fn calls(&self) -> usize {
        self.seen.lock().len()
    }
}

#[async_trait]
impl Hook for ScriptHook {
    fn name(&self) -> &str {
        &self.name
    }
    fn options(&self) -> HookOptions {
        self.options.clone()
    }
    async fn pre_tool_use(&self, _cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        self.seen.lock().push(ev.tool_input.clone());
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        Ok((self.act)(ev).into())
    }
}

/// An observer that records (session, seq, kind) of everything it sees.
#[derive(Clone, Default)]
pub struct Recorder {
    pub name: String,
    pub options: ObserverOptions,
    pub seen: Arc<Mutex<Vec<(String, u64, EventKind)>>>,
    pub delay: Duration,
}

impl Recorder {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            ..Default::default()
        }
    }
    pub fn events(&self) -> Vec<(String, u64, EventKind)> {
        self.seen.lock().clone()
    }
}

#[async_trait]
impl Observer for Recorder {
    fn name(&self) -> &str {
        &self.name
    }
    fn options(&self) -> ObserverOptions {
        self.options.clone()
    }
    async fn on_event(&self, env: &Arc<Envelope>) {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.seen
            .lock()
            .push((env.session_id.clone(), env.seq, env.kind()));
    }
}

/// Whether an outside program this test needs is here. When it is not, the test reports itself
/// skipped with the reason and returns — unless `HOOKBUS_REQUIRE_EXTERNAL=1` (set by CI, which
/// installs the programs), where a missing program fails the test.
pub fn external_available(programs: &[&str], why: &str) -> bool {
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| {
            !std::env::var_os("PATH")
                .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(p).is_file()))
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let reason = format!("skipped: {} not installed ({why})", missing.join(", "));
    if std::env::var("HOOKBUS_REQUIRE_EXTERNAL").as_deref() == Ok("1") {
        panic!("{reason}; HOOKBUS_REQUIRE_EXTERNAL=1 makes a skip a failure");
    }
    eprintln!("{reason}");
    false
}

/// The resident set size of this process, in bytes (`VmRSS` of `/proc/self/status`).
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS in /proc/self/status")
}
