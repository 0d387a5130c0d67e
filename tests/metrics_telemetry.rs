//! MetricsHook figures (counts, percentiles) and hook-run telemetry spans.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hookbus::builtins::MetricsHook;
use hookbus::*;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// A PreToolUse hook that takes `delay` (and panics on the call with id `boom`).
struct Slow {
    name: &'static str,
    delay: Duration,
}

#[async_trait]
impl Hook for Slow {
    fn name(&self) -> &str {
        self.name
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PreToolUse])
    }
    async fn pre_tool_use(&self, _: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        tokio::time::sleep(self.delay).await;
        if ev.tool_use_id == "boom" && self.name == "slow10" {
            panic!("boom");
        }
        Ok(PreToolUseAction::proceed().into())
    }
}

/// A tool that takes 20 ms.
struct Sleepy;

#[async_trait]
impl Tool for Sleepy {
    fn name(&self) -> &str {
        "sleepy"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    async fn execute(&self, _: Value, _: ToolCx) -> Result<Value, ToolError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(json!("ok"))
    }
}

fn near(actual: u64, expected: u64) -> bool {
    // hdrhistogram at 3 significant digits: within 0.1 %, plus a microsecond of scheduling.
    actual.abs_diff(expected) <= expected / 500 + 2
}

#[tokio::test(start_paused = true)]
async fn a_scripted_session_gives_the_expected_counts_and_percentiles() {
    let ws = tempfile::tempdir().unwrap();
    let bus = Bus::new();
    let metrics = MetricsHook::new(&bus).every(2);
    bus.register(metrics.clone()).await.unwrap();
    bus.register(Slow {
        name: "slow10",
        delay: Duration::from_millis(10),
    })
    .await
    .unwrap();
    bus.register(Slow {
        name: "slow30",
        delay: Duration::from_millis(30),
    })
    .await
    .unwrap();
    let mut provider = ScriptedProvider::new();
    for i in 0..9 {
        provider =
            provider.turn(ScriptTurn::text("x").call_with_id(format!("c{i}"), "sleepy", json!({})));
    }
    provider = provider
        .turn(ScriptTurn::text("x").call_with_id("boom", "sleepy", json!({})))
        .turn(ScriptTurn::text("done"));
    let agent = Agent::builder()
        .bus(bus.clone())
        .provider(provider)
        .clear_tools()
        .tool(Sleepy)
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("go").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Completed);
    session.close().await.unwrap();

    let r = metrics.snapshot();
    assert_eq!(
        r,
        bus.metrics_report(),
        "the hook and the runtime read the same data"
    );
    assert_eq!(r.events["PreToolUse"], 10);
    assert_eq!(r.events["PostToolUse"], 10);
    assert_eq!(r.events["StepComplete"], 11);
    let s10 = &r.hooks["slow10"];
    assert_eq!((s10.count, s10.panics, s10.failures), (10, 1, 1));
    assert!(near(s10.p50_us, 10_000), "{s10:?}");
    assert!(near(s10.p99_us, 10_000), "{s10:?}");
    let s30 = &r.hooks["slow30"];
    assert_eq!(s30.count, 10);
    assert!(
        near(s30.p90_us, 30_000) && near(s30.max_us, 30_000),
        "{s30:?}"
    );
    let tool = &r.tools["sleepy"];
    assert_eq!(tool.count, 10);
    assert!(near(tool.p50_us, 20_000), "{tool:?}");
    assert_eq!(r.runtime.hook_panics, 1);
    assert_eq!(
        r.hooks["metrics"].count,
        11 + 1,
        "StepComplete x11 and SessionEnd"
    );
    agent.shutdown(Duration::from_secs(5)).await;
}

/// Records the fields of every `hook_run` span.
#[derive(Clone, Default)]
struct SpanTape(Arc<Mutex<Vec<HashMap<String, String>>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanTape {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "hook_run" {
            let mut fields = HashMap::new();
            attrs.record(&mut Fields(&mut fields));
            self.0.lock().push(fields);
        }
    }
}

/// Blocks `rm`.
struct Blocker;

#[async_trait]
impl Hook for Blocker {
    fn name(&self) -> &str {
        "blocker"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PreToolUse])
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        Ok(PreToolUseAction::block("no rm here").into())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_hook_run_is_a_span_with_its_decision_reason_and_latency() {
    use tracing_subscriber::layer::SubscriberExt;
    let tape = SpanTape::default();
    let subscriber = tracing_subscriber::registry().with(tape.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let bus = Bus::new();
    bus.register(Blocker).await.unwrap();
    let session = bus
        .open_session(SessionConfig::new().id("tel"))
        .await
        .unwrap();
    let out = session
        .dispatch(Event::PreToolUse(PreToolUse {
            tool_name: "Bash".into(),
            tool_input: json!({ "command": "rm -rf /" }),
            tool_use_id: "t1".into(),
        }))
        .await
        .unwrap();
    assert!(out.is_blocked());
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
    let spans = tape.0.lock().clone();
    let span = spans
        .iter()
        .find(|s| s.get("hook").map(String::as_str) == Some("blocker"))
        .unwrap_or_else(|| panic!("no hook_run span for blocker in {spans:?}"));
    assert_eq!(span["event"], "PreToolUse");
    assert_eq!(span["session"], "tel");
    assert_eq!(span["tool"], "Bash");
    assert_eq!(span["decision"], "Block");
    assert_eq!(span["reason"], "no rm here");
    assert!(span.contains_key("latency_us"));
}
