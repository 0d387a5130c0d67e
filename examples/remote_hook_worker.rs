//! A remote hook worker: serves a policy hook to every `hookbus serve` instance of a fleet
//! over NATS. Start as many as you like; each call reaches one of them.
//!
//! ```text
//! nats-server -js &
//! cargo run --example remote_hook_worker -- --nats nats://127.0.0.1:4222
//! hookbus serve --nats nats://127.0.0.1:4222 --instance a \
//!   --remote-hook 'no-secrets,events=PreToolUse,tools=bash|Bash,timeout=2s,failure=closed'
//! ```
//!
//! The instance registers a remote hook of the same name; the runtime keeps its rules: a call
//! that takes more than 2 s, or finds no worker, fails closed (the tool does not run).

use hookbus::nats::{connect, serve_hook};
use hookbus::{
    async_trait, EventKind, Hook, HookCx, HookOptions, HookOutput, HookResult, PreToolUse,
    PreToolUseAction,
};

/// Blocks commands that read credentials; notes every command it let through.
struct NoSecrets;

#[async_trait]
impl Hook for NoSecrets {
    fn name(&self) -> &str {
        "no-secrets"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PreToolUse])
    }
    async fn pre_tool_use(&self, _cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        let command = ev.tool_input["command"].as_str().unwrap_or_default();
        for secret in [".env", "id_rsa", ".aws/credentials", ".netrc"] {
            if command.contains(secret) {
                return Ok(PreToolUseAction::block(format!("{secret} is off limits")).into());
            }
        }
        Ok(
            HookOutput::new(PreToolUseAction::proceed())
                .context("checked by the no-secrets worker"),
        )
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `--nats URL`, or the URL alone, or NATS_URL.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = match args.as_slice() {
        [flag, url, ..] if flag == "--nats" => url.clone(),
        [url, ..] => url.clone(),
        [] => std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into()),
    };
    let client = connect(&url, "no-secrets-worker").await?;
    let worker = serve_hook(client, NoSecrets).await?;
    println!("serving no-secrets on {} (Ctrl-C stops)", worker.subject());
    tokio::signal::ctrl_c().await?;
    worker.stop().await;
    Ok(())
}
