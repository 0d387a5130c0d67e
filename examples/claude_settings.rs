//! Claude Code hook settings next to a typed Rust hook, in one agent: the settings' shell hook
//! blocks `rm`, the Rust hook adds context after every tool, and both fold by the same rules.
//!
//! `cargo run --example claude_settings` (from the repository root)

use std::time::Duration;

use hookbus::claude::{ClaudeSettings, CompatOptions};
use hookbus::*;
use serde_json::json;

/// A typed Rust hook beside the settings' scripts.
struct Reminder;

#[async_trait]
impl Hook for Reminder {
    fn name(&self) -> &str {
        "reminder"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PostToolUse])
    }
    async fn post_tool_use(&self, _: &HookCx, ev: &PostToolUse) -> HookResult<PostToolUseAction> {
        Ok(HookOutput::new(PostToolUseAction::default())
            .context(format!("{} ran; keep the workspace tidy", ev.tool_name)))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let project = std::env::current_dir()?;
    let settings = ClaudeSettings::load(
        &[project.join("examples/claude/settings.json")],
        CompatOptions {
            project_dir: Some(project.clone()),
            ..CompatOptions::default()
        },
    )?;
    for warning in &settings.warnings {
        eprintln!("warning: {warning}");
    }
    let workspace = std::env::temp_dir().join(format!("hookbus-cc-{}", std::process::id()));
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("keep.txt"), "important\n")?;

    let agent = Agent::builder()
        .provider(
            ScriptedProvider::new()
                .turn(
                    ScriptTurn::text("Cleaning up.")
                        .call("bash", json!({ "command": "rm keep.txt" })),
                )
                .turn(ScriptTurn::text("Listing instead.").call("bash", json!({ "command": "ls" })))
                .turn(ScriptTurn::text("keep.txt is still there.")),
        )
        .claude_settings(&settings)
        .hook(Reminder)
        .approver(PolicyApprover::allow())
        .build()
        .await?;
    let session = agent.open_session(SessionOptions::new(&workspace)).await?;
    let result = session.run_turn("Tidy up the workspace").await?;
    for call in &result.calls {
        println!(
            "{} {:?}: {}",
            call.tool_name,
            call.status,
            call.content.trim()
        );
    }
    for m in &result.messages {
        if m.content.starts_with("<system-reminder>") {
            println!("reminder to the model:\n{}", m.content);
        }
    }
    println!(
        "keep.txt still there: {}",
        workspace.join("keep.txt").exists()
    );
    session.close().await?;
    agent.shutdown(Duration::from_secs(5)).await;
    std::fs::remove_dir_all(&workspace)?;
    Ok(())
}
