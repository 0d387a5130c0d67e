//! The `hookbus` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The benchmarks build their own runtimes.
    if let Command::Bench(args) = cli.command {
        return match bench_cmd::run_bench(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("hookbus: {e}");
                ExitCode::FAILURE
            }
        };
    }
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
        match cli.command {
            Command::Demo(args) => demo::run(args).await,
            Command::Replay(args) => replay_cmd::run(args).await,
            Command::Bench(_) => Ok(ExitCode::SUCCESS),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hookbus: {e}");
            ExitCode::FAILURE
        }
    }
}
