//! `hookbus serve`, `hookbus worker` and `hookbus observe`: the HTTP service as a command, and
//! the processes of a fleet on NATS (remote hook workers, durable event observers).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use hookbus::builtins::{AuditLog, AuditMode};
use hookbus::claude::{ClaudeSettings, CompatOptions, ASYNC_HOOK_NAME};
use hookbus::nats::{
    self, follow_events, EventPublisher, EventStreamConfig, FollowOptions, RemoteHook,
    RemoteHookSpec,
};
use hookbus::service::{parse_duration, serve, Fleet, ServeArgs, Service, TokenSource};
use hookbus::{Agent, AgentBuilder, Hook};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Options of `hookbus serve`.
#[derive(clap::Args)]
pub struct ServeCmd {
    #[command(flatten)]
    serve: ServeArgs,
    /// Join a fleet on this NATS server (`nats://[user:password@]host:port`): events are
    /// published to JetStream, approvals are seen and answered on every instance, and
    /// `--remote-hook`s are called there.
    #[arg(long, value_name = "URL", env = "NATS_URL")]
    nats: Option<String>,
    /// This instance's name in the fleet (letters, digits, `_`, `-`; default
    /// `<host>-<pid>`); a live instance of the same name is refused.
    #[arg(long, value_name = "NAME")]
    instance: Option<String>,
    /// A hook served by workers over NATS:
    /// `NAME[,events=E1|E2][,tools=PATTERN][,matcher=PATTERN][,timeout=5s][,failure=open|closed]`.
    /// Repeatable; registered in order, after the `--settings` hooks.
    #[arg(long = "remote-hook", value_name = "SPEC")]
    remote_hooks: Vec<RemoteHookSpec>,
    /// A Claude Code settings file whose hooks run on `hookbus worker --settings FILE`
    /// processes instead of here: each is registered as a remote hook of the same name and
    /// options. Repeatable.
    #[arg(long = "remote-settings", value_name = "FILE")]
    remote_settings: Vec<PathBuf>,
    /// The audit log: a SQLite file, or a `postgres://` URL.
    #[arg(long, value_name = "PATH|URL")]
    audit_db: Option<String>,
    /// Commit each tool call's intent to the audit log before it runs (fail-closed).
    #[arg(long, requires = "audit_db")]
    audit_durable: bool,
    /// How long the event stream keeps events, e.g. 24h, 7d (default 7 days), when it is
    /// created by this instance.
    #[arg(long, value_parser = parse_duration)]
    events_max_age: Option<Duration>,
    /// Bytes the event stream keeps at most (default 1 GiB), when created by this instance.
    #[arg(long)]
    events_max_bytes: Option<i64>,
}

/// Runs `hookbus serve`.
pub async fn serve_cmd(cmd: ServeCmd) -> Result<ExitCode> {
    let (mut config, token) = cmd.serve.config()?;
    let mut agent = Agent::builder();
    if !cmd.serve.settings.is_empty() {
        let settings = ClaudeSettings::load(&cmd.serve.settings, CompatOptions::default())?;
        agent = agent.claude_settings(&settings);
    }
    let instance = cmd.instance.clone().unwrap_or_else(default_instance);
    if !nats::subject::is_plain_token(&instance) {
        return Err(nats::NatsError::InstanceName(instance).into());
    }
    let client = match &cmd.nats {
        Some(url) => Some(nats::connect(url, &instance).await?),
        None if !cmd.remote_hooks.is_empty() || !cmd.remote_settings.is_empty() => {
            return Err("--remote-hook and --remote-settings need --nats".into())
        }
        None => None,
    };
    if let Some(client) = &client {
        agent = join_fleet(&cmd, agent, client, &instance).await?;
        config.fleet = Some(Fleet::new(client.clone(), instance.clone()));
    }
    let service = Service::new(config, agent).await?;
    for warning in service.agent().warnings() {
        eprintln!("warning: {warning}");
    }
    let audit = match &cmd.audit_db {
        Some(target) => {
            let mode = if cmd.audit_durable {
                AuditMode::Durable
            } else {
                AuditMode::BestEffort
            };
            let log = AuditLog::connect(target, mode).await?;
            log.install(service.agent().bus()).await?;
            Some(log)
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(cmd.serve.addr()).await?;
    let local = listener.local_addr()?;
    let token_file = announce(&service, &token, local, &instance, cmd.nats.as_deref());
    let report = serve(listener, service, stop_signal()).await;
    if let Some(file) = token_file {
        let _ = std::fs::remove_file(file);
    }
    if let Some(log) = audit {
        log.close().await;
    }
    if let Some(client) = client {
        let _ = client.flush().await;
    }
    report?;
    Ok(ExitCode::SUCCESS)
}

/// `<host>-<pid>`, as a plain name.
fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let host = if host.is_empty() {
        "hookbus".into()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

/// The remote hooks and the event publisher of an instance.
async fn join_fleet(
    cmd: &ServeCmd,
    mut agent: AgentBuilder,
    client: &nats::Client,
    instance: &str,
) -> Result<AgentBuilder> {
    for file in &cmd.remote_settings {
        for hook in settings_hooks(file)? {
            agent = agent.hook(RemoteHook::new(client.clone(), hook.name(), hook.options()));
        }
    }
    for spec in &cmd.remote_hooks {
        agent = agent.hook(RemoteHook::new(
            client.clone(),
            spec.name.clone(),
            spec.options.clone(),
        ));
    }
    let mut stream = EventStreamConfig::default();
    if let Some(age) = cmd.events_max_age {
        stream.max_age = age;
    }
    if let Some(bytes) = cmd.events_max_bytes {
        stream.max_bytes = bytes;
    }
    let publisher = EventPublisher::new(client, instance, &stream).await?;
    Ok(agent.observer(publisher))
}

/// The hooks of one Claude Code settings file that a worker can serve: every handler (the
/// background-output delivery stays with the session).
fn settings_hooks(file: &std::path::Path) -> Result<Vec<Arc<dyn Hook>>> {
    let settings = ClaudeSettings::load(&[file], CompatOptions::default())?;
    Ok(settings
        .hooks()
        .into_iter()
        .filter(|h| !h.name().starts_with(ASYNC_HOOK_NAME))
        .collect())
}

/// Prints where the service listens (the first line, for scripts) and how to reach it.
fn announce(
    service: &Service,
    token: &TokenSource,
    local: std::net::SocketAddr,
    instance: &str,
    nats: Option<&str>,
) -> Option<PathBuf> {
    println!("hookbus service listening on http://{local}");
    let file = token.print_console(local);
    if let Some(url) = nats {
        println!("fleet instance {instance} on {url}");
    }
    println!(
        "workspaces in {}; permission modes up to {}",
        service.workspace_root().display(),
        service.config().max_mode
    );
    let _ = std::io::stdout().flush();
    file
}

/// Completes on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Options of `hookbus worker`.
#[derive(clap::Args)]
pub struct WorkerCmd {
    /// The fleet's NATS server.
    #[arg(long, value_name = "URL", env = "NATS_URL")]
    nats: String,
    /// Claude Code settings files whose hooks this worker serves (the same files the
    /// instances give as `--remote-settings`). Repeatable.
    #[arg(long = "settings", value_name = "FILE", required = true)]
    settings: Vec<PathBuf>,
}

/// Runs `hookbus worker` until Ctrl-C or SIGTERM.
pub async fn worker_cmd(cmd: WorkerCmd) -> Result<ExitCode> {
    let client =
        nats::connect(&cmd.nats, &format!("hookbus-worker-{}", std::process::id())).await?;
    let mut workers = Vec::new();
    for file in &cmd.settings {
        for hook in settings_hooks(file)? {
            let name = hook.name().to_owned();
            let worker = nats::serve_hook_arc(client.clone(), hook).await?;
            println!("serving {name:?} on {}", worker.subject());
            workers.push(worker);
        }
    }
    println!("worker ready: {} hooks", workers.len());
    let _ = std::io::stdout().flush();
    stop_signal().await;
    for worker in workers {
        worker.stop().await;
    }
    Ok(ExitCode::SUCCESS)
}

/// Options of `hookbus observe`.
#[derive(clap::Args)]
pub struct ObserveCmd {
    /// The fleet's NATS server.
    #[arg(long, value_name = "URL", env = "NATS_URL")]
    nats: String,
    /// The observer's durable name: a restarted observer of the same name resumes where it
    /// left off. One process per name.
    #[arg(long, value_name = "NAME", default_value = "hookbus-observer")]
    durable: String,
    /// Only events on subjects matching this, e.g. `hookbus.events.a.>` (one instance).
    #[arg(long, value_name = "SUBJECT")]
    filter: Option<String>,
}

/// Runs `hookbus observe`: one JSON line per event, `{"stream_seq": N, "envelope": {...}}`,
/// each written before it is acknowledged.
pub async fn observe_cmd(cmd: ObserveCmd) -> Result<ExitCode> {
    let client = nats::connect(&cmd.nats, &format!("hookbus-observer-{}", cmd.durable)).await?;
    let mut options = FollowOptions::new(cmd.durable.clone());
    options.filter = cmd.filter.clone();
    let stream = EventStreamConfig::default();
    let follow = follow_to_stdout(&client, &stream, &options);
    tokio::select! {
        result = follow => result?,
        () = stop_signal() => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints each event as a JSON line (flushed before it is acknowledged) until printing fails;
/// a lost or restarted server is waited for.
async fn follow_to_stdout(
    client: &nats::Client,
    stream: &EventStreamConfig,
    options: &FollowOptions,
) -> std::result::Result<(), nats::NatsError> {
    loop {
        let followed = follow_events(client, stream, options, |followed| {
            let line = serde_json::json!({
                "stream_seq": followed.stream_seq,
                "envelope": followed.envelope,
            });
            let mut out = std::io::stdout().lock();
            let written = writeln!(out, "{line}").and_then(|()| out.flush());
            std::future::ready(written.map_err(|e| e.into()))
        })
        .await;
        match followed {
            Err(e @ nats::NatsError::Handler(_)) => return Err(e),
            // The server went away or restarted: the client reconnects; read on.
            Err(e) => eprintln!("hookbus observe: {e}; resuming"),
            Ok(()) => {}
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
