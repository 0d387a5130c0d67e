//! The agent loop embedded: a scripted model, the built-in tools in a temporary workspace, a Stop
//! gate that asks for one more step, the live event stream, and `cancel()` on a long command.
//!
//! `cargo run --example agent`

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use hookbus::*;
use serde_json::json;

/// Asks the model, once, to check its work before it stops.
#[derive(Default)]
struct CheckYourWork {
    asked: AtomicBool,
}

#[async_trait]
impl Hook for CheckYourWork {
    fn name(&self) -> &str {
        "check-your-work"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::Stop])
    }
    async fn stop(&self, _: &HookCx, ev: &Stop) -> HookResult<GateAction> {
        if ev.stop_hook_active || self.asked.swap(true, Ordering::SeqCst) {
            return Ok(GateAction::Continue.into());
        }
        Ok(GateAction::block("Check that notes.txt was written before you stop.").into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let workspace = std::env::temp_dir().join(format!("hookbus-agent-{}", std::process::id()));
    std::fs::create_dir_all(&workspace)?;

    let provider = ScriptedProvider::new()
        .turn(ScriptTurn::text("Writing notes.").call(
            "write_file",
            json!({ "path": "notes.txt", "content": "hello\n" }),
        ))
        .turn(ScriptTurn::text("Done."))
        .turn(ScriptTurn::text("Checking.").call("read_file", json!({ "path": "notes.txt" })))
        .turn(ScriptTurn::text("Checked: notes.txt says hello."))
        .turn(ScriptTurn::text("A long one.").call("bash", json!({ "command": "sleep 30" })));
    let agent = Agent::builder()
        .provider(provider)
        .hook(CheckYourWork::default())
        .approver(PolicyApprover::allow())
        .build()
        .await?;
    let session = agent
        .open_session(
            SessionOptions::new(&workspace)
                .id("example")
                .permission_mode(PermissionMode::AcceptEdits),
        )
        .await?;

    // A UI would read this stream; here a task prints it.
    let mut events = session.events();
    let printer = tokio::spawn(async move {
        while let Some(env) = events.next().await {
            let tool = env.event.tool().map(|(name, _)| name).unwrap_or("");
            println!(
                "  #{:<2} turn {} step {} {} {tool}",
                env.seq,
                env.turn,
                env.step,
                env.kind()
            );
        }
    });

    let first = session.run_turn("Write notes.txt").await?;
    println!(
        "turn 1: {} in {} steps ({} Stop continuation): {}",
        first.reason, first.metrics.steps, first.metrics.stop_continuations, first.text
    );

    let long = tokio::spawn({
        let session = session.clone();
        async move { session.run_turn("Now wait a while").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    session.cancel();
    let second = long.await??;
    println!("turn 2: {} ({})", second.reason, second.calls[0].content);

    session.close().await?;
    printer.await?;
    let report = agent.shutdown(Duration::from_secs(5)).await;
    println!("{} events dispatched", report.events_dispatched);
    std::fs::remove_dir_all(&workspace)?;
    Ok(())
}
