//! hookbus embedded in a web service: sessions, turns, a live SSE stream per session, remote
//! approvals and a console page (see `hookbus::service` for the routes, the authentication and
//! the bounds).
//!
//! ```text
//! cargo run --example service -- --addr 127.0.0.1:8080 [--max-mode default] [--settings FILE]
//! ```
//!
//! It prints the console's address with the token (`http://127.0.0.1:8080/#token=...`) and the
//! private file holding the token, unless `HOOKBUS_TOKEN` gives it. Then, from another terminal:
//!
//! ```text
//! T=$(cat /tmp/hookbus-token-XXXX)
//! curl -s localhost:8080/sessions -H "authorization: Bearer $T" -H 'content-type: application/json' \
//!   -d '{"id":"s1","script":{"turns":[{"text":"run","tool_calls":[{"name":"bash","input":{"command":"echo hi"}}]},{"text":"done"}]}}'
//! curl -s localhost:8080/sessions/s1/turns -H "authorization: Bearer $T" -H 'content-type: application/json' -d '{"prompt":"go"}'
//! ```
//!
//! The bash call asks for permission: answer it on the page, or with
//! `curl -s localhost:8080/approvals/1 -H "authorization: Bearer $T" -H 'content-type: application/json' -d '{"decision":"allow"}'`.
//! Ctrl-C ends the event streams, cancels running turns, removes the workspaces and drains the
//! runtime within the shutdown deadline.

use clap::Parser;
use hookbus::builtins::TimingHook;
use hookbus::service::{serve, ServeArgs, Service};
use hookbus::Agent;

/// hookbus behind HTTP.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let (config, token) = cli.serve.config()?;
    // A timing hook, so that the console's waterfall has something to show.
    let agent = Agent::builder().hook(TimingHook::new());
    let service = Service::new(config, agent).await?;
    for warning in service.agent().warnings() {
        eprintln!("warning: {warning}");
    }
    let listener = tokio::net::TcpListener::bind(cli.serve.addr()).await?;
    let local = listener.local_addr()?;
    // One plain line first, for scripts that start the service on port 0.
    println!("hookbus service listening on http://{local}");
    let token_file = token.print_console(local);
    println!(
        "workspaces in {}; permission modes up to {}",
        service.workspace_root().display(),
        service.config().max_mode
    );
    tracing::info!(addr = %local, "hookbus service listening");
    let report = serve(listener, service, async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    })
    .await;
    if let Some(file) = token_file {
        let _ = std::fs::remove_file(file);
    }
    let report = report?;
    tracing::info!(?report, "runtime drained");
    Ok(())
}
