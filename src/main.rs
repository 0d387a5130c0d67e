//! The `hookbus` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod audit_cmd;
mod bench_cmd;
mod demo;
mod replay_cmd;

/// Lifecycle hooks for LLM agent loops.
#[derive(Parser)]
#[command(name = "hookbus", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scripted session with the built-in hooks and print the trace.
    Demo(demo::DemoArgs),
    /// Feed a Claude Code transcript's tool calls through a hooks configuration and show, per
    /// event, which handlers matched, what each returned and the folded decision.
    Replay(replay_cmd::ReplayArgs),
    /// Measure dispatch against the baselines (direct, join_all, a bare actor fan-out) and
    /// report each target with pass/fail.
    Bench(bench_cmd::BenchArgs),
    /// Read an audit log: sessions, calls, calls in doubt, one call.
    Audit(audit_cmd::AuditArgs),
    /// Runs a durable-audit session for crash tests (not for users).
    #[command(hide = true)]
    DurableChild(demo::DurableChildArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // These build their own runtimes, or need none.
    let command = match cli.command {
        Command::Bench(args) => return finish(bench_cmd::run_bench(args)),
        Command::Audit(args) => return finish(audit_cmd::run(args)),
        other => other,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hookbus: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match command {
            Command::Demo(args) => demo::run(args).await,
            Command::Replay(args) => replay_cmd::run(args).await,
            Command::DurableChild(args) => demo::durable_child(args).await,
            Command::Bench(_) | Command::Audit(_) => Ok(ExitCode::SUCCESS),
        }
    });
    finish(result)
}

/// The exit status of a command; an error is one line on stderr.
fn finish(result: Result<ExitCode, Box<dyn std::error::Error>>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hookbus: {e}");
            ExitCode::FAILURE
        }
    }
}
