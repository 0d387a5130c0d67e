//! `hookbus audit`: reads an audit log, in a SQLite file or a PostgreSQL database.

use std::io::Write;
use std::process::ExitCode;

use clap::Subcommand;
use hookbus::builtins::{AuditDb, CallRecord};

/// Options of `hookbus audit`.
#[derive(clap::Args)]
pub struct AuditArgs {
    /// The audit database (before or after the query): a SQLite file, or a `postgres://` URL.
    #[arg(long, value_name = "FILE|URL", global = true)]
    db: Option<String>,
    /// `text` or `json`.
    #[arg(long, value_parser = ["text", "json"], default_value = "text", global = true)]
    format: String,
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Every session.
    Sessions,
    /// Tool calls, of one session or all.
    Calls {
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
    },
    /// Calls with a committed intent and no outcome: they may have run; do not re-run blindly.
    InDoubt,
    /// One call, by its number or its tool_use_id.
    Show {
        /// The call.
        call: String,
    },
}

fn call_line(c: &CallRecord) -> String {
    let decision = match (&c.decision, &c.source, &c.decided_by) {
        (Some(d), Some(src), Some(by)) => format!("{d} ({src}: {by})"),
        (Some(d), Some(src), None) => format!("{d} ({src})"),
        (Some(d), None, _) => d.clone(),
        (None, ..) => "-".into(),
    };
    let outcome = if c.in_doubt {
        "IN DOUBT".to_owned()
    } else {
        c.outcome.clone().unwrap_or_else(|| "-".into())
    };
    // A second call with the same id in the same turn shows as `id/2`.
    let id = if c.attempt > 1 {
        format!("{}/{}", c.tool_use_id, c.attempt)
    } else {
        c.tool_use_id.clone()
    };
    format!(
        "#{:<4} {:<16} {:<14} {:<12} {:<28} {}",
        c.id, c.session_id, id, c.tool_name, decision, outcome
    )
}

/// Runs the query.
pub fn run(args: AuditArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let target = args
        .db
        .ok_or("--db FILE|URL is required: the audit database to read")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let db = runtime.block_on(AuditDb::connect(&target))?;
    let json = args.format == "json";
    let mut out = std::io::stdout().lock();
    match args.what {
        What::Sessions => {
            let sessions = db.sessions()?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&sessions)?)?;
            } else {
                for s in sessions {
                    writeln!(
                        out,
                        "{:<20} calls {:<5} instance {:<4} ended: {}",
                        s.id,
                        s.calls,
                        s.instance,
                        s.end_reason.as_deref().unwrap_or("(open or crashed)")
                    )?;
                }
            }
        }
        What::Calls { session } => {
            let calls = db.calls(session.as_deref())?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&calls)?)?;
            } else {
                for c in &calls {
                    writeln!(out, "{}", call_line(c))?;
                }
            }
        }
        What::InDoubt => {
            let calls = db.in_doubt()?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&calls)?)?;
            } else if calls.is_empty() {
                writeln!(out, "no call is in doubt")?;
            } else {
                for c in &calls {
                    writeln!(out, "{}", call_line(c))?;
                }
            }
        }
        What::Show { call } => match db.call(&call)? {
            None => {
                return Err(format!("{}: no call `{call}`", db.target()).into());
            }
            Some(c) => {
                if json {
                    writeln!(out, "{}", serde_json::to_string(&c)?)?;
                } else {
                    writeln!(out, "{}", serde_json::to_string_pretty(&c)?)?;
                }
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}
