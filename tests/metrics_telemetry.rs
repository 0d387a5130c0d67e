//! MetricsHook figures (counts, percentiles) and hook-run telemetry spans.

use std::time::Duration;

use hookbus::builtins::MetricsHook;
use hookbus::*;
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
