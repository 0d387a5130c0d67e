//! Quickstart: a hook that blocks `rm -rf`, a logging observer, a few events dispatched by hand,
//! and the folded results printed.
//!
//! Run: `cargo run --example quickstart`

use std::sync::Arc;
use std::time::Duration;

use hookbus::*;
use serde_json::json;

/// Blocks any Bash command containing `rm -rf`.
struct NoRmRf;

#[async_trait]
impl Hook for NoRmRf {
    fn name(&self) -> &str {
        "no-rm-rf"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PreToolUse])
            .filter(ToolFilter::names("Bash").expect("valid pattern"))
    }
    async fn pre_tool_use(&self, _cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        let cmd = ev.tool_input["command"].as_str().unwrap_or_default();
        Ok(if cmd.contains("rm -rf") {
            PreToolUseAction::block(format!("`{cmd}` is destructive")).into()
        } else {
            HookOutput::new(PreToolUseAction::proceed()).context("commands run in the sandbox")
        })
    }
}

/// Prints every event it sees; fire-and-forget.
struct PrintObserver;

#[async_trait]
impl Observer for PrintObserver {
    fn name(&self) -> &str {
        "printer"
    }
    async fn on_event(&self, env: &Arc<Envelope>) {
        println!(
            "  [observer] #{} {} in {}",
            env.seq,
            env.kind(),
            env.session_id
        );
    }
}

fn bash(cmd: &str, id: &str) -> Event {
    Event::PreToolUse(PreToolUse {
        tool_name: "Bash".into(),
        tool_input: json!({ "command": cmd }),
        tool_use_id: id.into(),
    })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let bus = Bus::new();
    bus.register(NoRmRf).await?;
    bus.observe(PrintObserver).await?;

    let session = bus
        .open_session(BusSessionConfig::new().id("quickstart").cwd("/tmp"))
        .await?;
    session
        .dispatch(Event::SessionStart(SessionStart {
            source: SessionSource::Startup,
            model: None,
        }))
        .await?;
    for (cmd, id) in [("ls -la", "call-1"), ("rm -rf /", "call-2")] {
        let outcome = session.dispatch(bash(cmd, id)).await?;
        println!("PreToolUse `{cmd}` -> {:?}", outcome.decision);
        if outcome.is_blocked() {
            println!(
                "  blocked by {:?}: {}",
                outcome.decided_by(),
                outcome.reason_text()
            );
        }
        for context in &outcome.contexts {
            println!("  context: {context}");
        }
    }
    session.close("other").await?;
    let report = bus.shutdown(Duration::from_secs(5)).await;
    println!(
        "shutdown: {} events dispatched, {} delivered to observers, {} dropped",
        report.events_dispatched, report.observer_events_delivered, report.observer_events_dropped
    );
    Ok(())
}
