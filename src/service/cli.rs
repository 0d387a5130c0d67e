//! The command-line options of a service binary (`examples/service.rs`), shared so that every
//! binary that serves reads them the same way.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::config::{generate_token, parse_duration, ServiceConfig, ServiceError};
use crate::permission::service::{PermissionConfig, PermissionMode};

/// Options of a service binary. The primary token comes from `HOOKBUS_TOKEN`; without it one is
/// generated, printed once and written to a private file.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on (also `HOOKBUS_ADDR`).
    #[arg(long)]
    pub addr: Option<String>,
    /// More tokens, one `NAME TOKEN` per line (a file only its owner can read): each name is
    /// an identity whose sessions and approvals only it sees.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A host name (`name` or `name:port`) accepted in `Host` and `Origin` besides the
    /// loopback names of the bound address; repeatable.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// The loosest permission mode a client may ask for: plan, dontAsk, default, acceptEdits,
    /// or bypassPermissions (which only this allows).
    #[arg(long, default_value = "default", value_parser = parse_mode)]
    pub max_mode: PermissionMode,
    /// Claude Code settings files whose `permissions` rules (and `defaultMode`) apply to every
    /// session; repeatable, merged in order.
    #[arg(long = "settings", value_name = "FILE")]
    pub settings: Vec<PathBuf>,
    /// Where session workspaces are made (default: a fresh private temporary directory). An
    /// existing directory must be yours, not a symlink, with mode 0700.
    #[arg(long, value_name = "DIR")]
    pub workspace_root: Option<PathBuf>,
    /// Sessions open at once (default 64).
    #[arg(long)]
    pub max_sessions: Option<usize>,
    /// Idle time after which a session is closed, e.g. 30m, 90s (default 30m).
    #[arg(long, value_parser = parse_duration)]
    pub idle_expiry: Option<std::time::Duration>,
    /// The largest request body in bytes (default 1 MiB).
    #[arg(long)]
    pub max_body_bytes: Option<usize>,
    /// The largest turn response in bytes (default 4 MiB).
    #[arg(long)]
    pub max_response_bytes: Option<usize>,
    /// Bytes of one tool result the model and the response get (default 64 KiB).
    #[arg(long)]
    pub tool_output_bytes: Option<usize>,
    /// Bytes of a session's kept event history (default 2 MiB).
    #[arg(long)]
    pub history_bytes: Option<usize>,
    /// Envelopes an event-stream subscriber may fall behind by (default 256).
    #[arg(long)]
    pub stream_buffer: Option<usize>,
    /// How long a permission ask waits, e.g. 5m (default 5m).
    #[arg(long, value_parser = parse_duration)]
    pub approval_timeout: Option<std::time::Duration>,
    /// How long a graceful shutdown may take, e.g. 10s (default 10s).
    #[arg(long, value_parser = parse_duration)]
    pub shutdown_deadline: Option<std::time::Duration>,
    /// Offer this model to clients by name (`"provider": NAME` when a session opens), configured
    /// from the environment: `anthropic` (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
    /// ANTHROPIC_MODEL) or `openai` (OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL). Repeatable.
    #[cfg(feature = "providers")]
    #[arg(long = "provider", value_name = "NAME", value_parser = ["anthropic", "openai"])]
    pub providers: Vec<String>,
}

fn parse_mode(text: &str) -> Result<PermissionMode, String> {
    text.parse().map_err(|e: crate::Error| e.to_string())
}

/// Where the primary token came from.
#[derive(Debug)]
pub enum TokenSource {
    /// `HOOKBUS_TOKEN`: the operator knows it; it is not printed.
    Environment,
    /// Generated now: print it once; it is also in this file (mode 0600), removed at exit.
    Generated {
        /// The token.
        token: String,
        /// The private file holding it.
        file: PathBuf,
    },
}

impl TokenSource {
    /// Prints the console's address for a service listening on `local` (the token in the
    /// fragment when it was generated, with the private file holding it), and answers that
    /// file, to remove at exit.
    pub fn print_console(&self, local: std::net::SocketAddr) -> Option<PathBuf> {
        match self {
            TokenSource::Environment => {
                println!("console: http://{local}/#token=<HOOKBUS_TOKEN>");
                None
            }
            TokenSource::Generated { token, file } => {
                println!("console: http://{local}/#token={token}");
                println!("token file: {}", file.display());
                Some(file.clone())
            }
        }
    }
}

impl ServeArgs {
    /// The address to listen on: `--addr`, else `HOOKBUS_ADDR`, else `127.0.0.1:8080`.
    pub fn addr(&self) -> String {
        self.addr
            .clone()
            .or_else(|| std::env::var("HOOKBUS_ADDR").ok())
            .unwrap_or_else(|| "127.0.0.1:8080".into())
    }

    /// The configuration these options describe, with the primary token from
    /// `HOOKBUS_TOKEN` or a generated one (written to a new private file).
    pub fn config(&self) -> Result<(ServiceConfig, TokenSource), ServiceError> {
        let (token, source) = match std::env::var("HOOKBUS_TOKEN") {
            Ok(token) if !token.is_empty() => (token, TokenSource::Environment),
            _ => {
                let token = generate_token()?;
                let file = write_token_file(&token)?;
                (token.clone(), TokenSource::Generated { token, file })
            }
        };
        let mut config = ServiceConfig::new(&token)?;
        if let Some(file) = &self.token_file {
            config.tokens.add_file(file)?;
        }
        config.allowed_hosts.clone_from(&self.allow_hosts);
        config.max_mode = self.max_mode;
        if !self.settings.is_empty() {
            config.permissions = Some(PermissionConfig::from_settings_files(&self.settings)?);
        }
        config.workspace_root.clone_from(&self.workspace_root);
        #[cfg(feature = "providers")]
        self.offer_providers(&mut config)?;
        let l = &mut config.limits;
        let set = |slot: &mut usize, v: Option<usize>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut l.max_sessions, self.max_sessions);
        set(&mut l.max_body_bytes, self.max_body_bytes);
        set(&mut l.max_response_bytes, self.max_response_bytes);
        set(&mut l.tool_output_bytes, self.tool_output_bytes);
        set(&mut l.event_history_bytes, self.history_bytes);
        set(&mut l.event_stream_buffer, self.stream_buffer);
        if let Some(d) = self.idle_expiry {
            l.idle_expiry = d;
        }
        if let Some(d) = self.approval_timeout {
            l.approval_timeout = d;
        }
        if let Some(d) = self.shutdown_deadline {
            l.shutdown_deadline = d;
        }
        if l.max_sessions == 0 || l.event_stream_buffer == 0 || l.max_body_bytes == 0 {
            return Err(ServiceError::Option {
                option: "limits".into(),
                message: "--max-sessions, --stream-buffer and --max-body-bytes must be > 0".into(),
            });
        }
        Ok((config, source))
    }
}

/// Writes a generated token to a new file only its owner can read, and keeps the file.
fn write_token_file(token: &str) -> Result<PathBuf, ServiceError> {
    let bad = |e: std::io::Error| ServiceError::TokenFile {
        path: std::env::temp_dir().display().to_string(),
        message: format!("cannot write the token file: {e}"),
    };
    // tempfile creates the file exclusively, with mode 0600.
    let mut file = tempfile::Builder::new()
        .prefix("hookbus-token-")
        .tempfile()
        .map_err(bad)?;
    file.write_all(token.as_bytes()).map_err(bad)?;
    file.write_all(b"\n").map_err(bad)?;
    let (_, path) = file.keep().map_err(|e| bad(e.error))?;
    Ok(path)
}

#[cfg(feature = "providers")]
impl ServeArgs {
    /// The `--provider` models, each configured from the environment now: a missing key is an
    /// error at start, not at a client's first turn.
    fn offer_providers(&self, config: &mut ServiceConfig) -> Result<(), ServiceError> {
        use crate::providers::{AnthropicProvider, OpenAiProvider};
        for name in &self.providers {
            let provider: std::sync::Arc<dyn crate::Provider> = match name.as_str() {
                "anthropic" => {
                    std::sync::Arc::new(AnthropicProvider::from_env(None).map_err(|e| {
                        ServiceError::Option {
                            option: "--provider anthropic".into(),
                            message: e.to_string(),
                        }
                    })?)
                }
                _ => std::sync::Arc::new(OpenAiProvider::from_env(None).map_err(|e| {
                    ServiceError::Option {
                        option: "--provider openai".into(),
                        message: e.to_string(),
                    }
                })?),
            };
            config.providers.insert(name.clone(), provider);
        }
        Ok(())
    }
}
