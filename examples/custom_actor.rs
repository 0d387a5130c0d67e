//! A user's own task subscribed through a mailbox, answering PreToolUse without implementing the
//! `Hook` trait: it reads deliveries from a stream and answers through each reply slot.
//!
//! Run: `cargo run --example custom_actor`

use std::time::Duration;

use hookbus::*;
use serde_json::json;
use tokio_stream::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let bus = Bus::new();
    let mut mailbox = bus
        .subscribe(Subscription::gate(
            "budget-guard",
            HookOptions::new()
                .events([EventKind::PreToolUse])
                .timeout(Duration::from_secs(2)),
        ))
        .await?;

    // The custom actor: owns its state (a call budget per session) and answers each delivery.
    let actor = tokio::spawn(async move {
        let mut calls_per_session = std::collections::HashMap::<String, u32>::new();
        while let Some(delivery) = mailbox.next().await {
            let session = delivery.envelope().session_id.clone();
            let n = calls_per_session.entry(session).or_default();
            *n += 1;
            let reply = if *n > 2 {
                Reply::block(format!("tool budget of 2 calls spent ({} asked)", n))
            } else {
                Reply::proceed().with_context(format!("{} of 2 tool calls used", n))
            };
            delivery.reply(reply);
        }
    });

    let session = bus
        .open_session(BusSessionConfig::new().id("custom-actor"))
        .await?;
    for i in 1..=3 {
        let outcome = session
            .dispatch(Event::PreToolUse(PreToolUse {
                tool_name: "read_file".into(),
                tool_input: json!({ "path": format!("file{i}.txt") }),
                tool_use_id: format!("call-{i}"),
            }))
            .await?;
        println!(
            "call {i}: {:?} {} {}",
            outcome.decision,
            outcome.reason_text(),
            outcome
                .contexts
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    session.close("other").await?;
    bus.shutdown(Duration::from_secs(5)).await;
    actor.await.ok();
    Ok(())
}
