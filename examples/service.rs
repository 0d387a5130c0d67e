//! hookbus embedded in a web service: sessions, turns, a live SSE stream per session, remote
//! approvals and a dashboard page (see `hookbus::service` for the routes).
//!
//! `cargo run --example service -- --addr 127.0.0.1:8080` (or `HOOKBUS_ADDR`), then open
//! `http://127.0.0.1:8080/` and, from another terminal:
//!
//! ```text
//! curl -s localhost:8080/sessions -d '{"script":{"turns":[{"text":"run","tool_calls":[{"name":"bash","input":{"command":"echo hi"}}]},{"text":"done"}]}}' -H 'content-type: application/json'
//! curl -s localhost:8080/sessions/<id>/turns -d '{"prompt":"go"}' -H 'content-type: application/json'
//! ```
//!
//! The bash call asks for permission: answer it on the page, or with
//! `curl -s localhost:8080/approvals/1 -d '{"decision":"allow"}' -H 'content-type: application/json'`.
//! Ctrl-C drains the runtime and logs the shutdown report.

use std::time::Duration;

use hookbus::service::{router, ServiceState};
use hookbus::{Agent, ChannelApprover};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let mut addr = std::env::var("HOOKBUS_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--addr" => addr = args.next().ok_or("--addr needs a value")?,
            other => {
                return Err(format!("unknown argument `{other}` (use --addr HOST:PORT)").into())
            }
        }
    }
    let workspaces = std::env::temp_dir().join(format!("hookbus-service-{}", std::process::id()));
    std::fs::create_dir_all(&workspaces)?;
    let (approver, desk) = ChannelApprover::new();
    let agent = Agent::builder()
        .approver(approver)
        .approval_timeout(Duration::from_secs(300))
        .build()
        .await?;
    let state = ServiceState::new(agent.clone(), desk, &workspaces);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let local = listener.local_addr()?;
    // One plain line first, for scripts that start the service on port 0.
    println!("hookbus service listening on http://{local}");
    tracing::info!(addr = %local, "hookbus service listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    let report = agent.shutdown(Duration::from_secs(10)).await;
    tracing::info!(?report, "runtime drained");
    Ok(())
}
