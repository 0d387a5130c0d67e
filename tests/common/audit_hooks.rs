//! Hooks shared by the audit log tests of both backends.

use hookbus::*;
use serde_json::json;

/// Blocks `rm` commands.
pub struct NoRm;

#[async_trait]
impl Hook for NoRm {
    fn name(&self) -> &str {
        "no-rm"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PreToolUse])
            .filter(ToolFilter::rule("bash(rm *)").unwrap())
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        Ok(PreToolUseAction::block("rm is not allowed").into())
    }
}

/// Rewrites the probe's input on PreToolUse.
pub struct PreRewrite;

#[async_trait]
impl Hook for PreRewrite {
    fn name(&self) -> &str {
        "pre-rewrite"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PreToolUse])
    }
    async fn pre_tool_use(&self, _: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        let mut input = ev.tool_input.clone();
        input["step"] = json!("pre");
        Ok(PreToolUseAction::proceed().with_input(input).into())
    }
}
