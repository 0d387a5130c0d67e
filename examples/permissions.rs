//! Permissions: rules, a mode, a hook that asks, and a channel approver answered from another
//! task (as a service would answer over its own API).
//!
//! Run: `cargo run --example permissions`

use std::sync::Arc;
use std::time::Duration;

use hookbus::*;
use serde_json::{json, Value};

/// A shell tool that only pretends (the example runs nothing).
struct FakeShell;

#[async_trait]
impl Tool for FakeShell {
    fn name(&self) -> &str {
        "Bash"
    }
    async fn execute(&self, input: Value, _cx: ToolCx) -> Result<Value, ToolError> {
        Ok(json!(format!(
            "(would run) {}",
            input["command"].as_str().unwrap_or_default()
        )))
    }
}

/// Asks before any `git push`, whatever the rules say.
struct AskBeforePush;

#[async_trait]
impl Hook for AskBeforePush {
    fn name(&self) -> &str {
        "ask-before-push"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PreToolUse])
            .filter(ToolFilter::rule("Bash(git push *)").expect("valid rule"))
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        Ok(PreToolUseAction::ask("pushing publishes your commits").into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let bus = Bus::new();
    bus.register(AskBeforePush).await?;
    let session = bus
        .open_session(BusSessionConfig::new().id("perm-demo").cwd("/tmp"))
        .await?;

    let permissions = PermissionService::spawn(PermissionConfig {
        global: RuleSet::new()
            .deny("Bash(rm -rf *)")?
            .allow("Bash(git *)")?,
        default_mode: PermissionMode::Default,
        ..Default::default()
    });

    // The service side: answers pending approvals from its own task.
    let (approver, desk) = ChannelApprover::new();
    let answering = tokio::spawn(async move {
        for _ in 0..200 {
            for req in desk.pending() {
                println!(
                    "  [desk] #{} {} {} ({})",
                    req.id, req.tool_name, req.input, req.reason
                );
                let answer = if req.input["command"] == "git push" {
                    Approval::AllowOnce
                } else {
                    Approval::Deny {
                        reason: Some("not on a Friday".into()),
                    }
                };
                desk.answer(req.id, answer).ok();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });

    let pipeline = Pipeline::new(
        session.clone(),
        permissions,
        Arc::new(approver),
        [Arc::new(FakeShell) as Arc<dyn Tool>],
    )
    .approval_timeout(Duration::from_secs(2));
    for (i, cmd) in ["git status", "git push", "make deploy", "rm -rf /"]
        .into_iter()
        .enumerate()
    {
        let result = pipeline
            .execute(ToolCall::new(
                format!("call-{i}"),
                "Bash",
                json!({ "command": cmd }),
            ))
            .await?;
        println!("{cmd:>12} -> {:?}: {}", result.status, result.content);
        if let Some(explain) = &result.explain {
            println!("{:>12}    decided by: {explain}", "");
        }
    }
    answering.abort();
    session.close("other").await?;
    bus.shutdown(Duration::from_secs(5)).await;
    Ok(())
}
