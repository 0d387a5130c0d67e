//! The `hookbus` command line.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::{Parser, Subcommand};

mod audit;
mod bench;
mod demo;
mod fleet;
mod replay;

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
    Replay(replay::ReplayArgs),
    /// Measure dispatch against the baselines (direct, join_all, a bare actor fan-out) and
    /// report each target with pass/fail.
    Bench(bench::BenchArgs),
    /// Read an audit log: sessions, calls, calls in doubt, one call.
    Audit(audit::AuditArgs),
    /// Serve sessions over HTTP (see `hookbus::service`), alone or as an instance of a fleet
    /// on NATS.
    Serve(Box<fleet::ServeCmd>),
    /// Serve the hooks of Claude Code settings files to a fleet's instances over NATS.
    Worker(fleet::WorkerCmd),
    /// Follow a fleet's events as a durable observer: one JSON line per event.
    Observe(fleet::ObserveCmd),
    /// Runs a durable-audit session for crash tests (not for users).
    #[command(hide = true)]
    DurableChild(demo::DurableChildArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    guarded(|| run(cli.command))
}

fn run(command: Command) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // These build their own runtimes, or need none.
    let command = match command {
        Command::Bench(args) => return bench::run_bench(args),
        Command::Audit(args) => return audit::run(args),
        other => other,
    };
    warn_about_env();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))?;
    let result = runtime.block_on(async {
        match command {
            Command::Demo(args) => demo::run(args).await,
            Command::Replay(args) => replay::run(args).await,
            Command::DurableChild(args) => demo::durable_child(args).await,
            Command::Serve(cmd) => fleet::serve_cmd(*cmd).await,
            Command::Worker(cmd) => fleet::worker_cmd(cmd).await,
            Command::Observe(cmd) => fleet::observe_cmd(cmd).await,
            Command::Bench(_) | Command::Audit(_) => Ok(ExitCode::SUCCESS),
        }
    });
    // Tasks still running end here; a panic among them counts too.
    drop(runtime);
    result
}

/// Says on stderr what the runtime does with a `HOOK_TIMEOUT_SECS` it cannot take as given
/// (the runtime's own warning goes to `tracing`, which the binary does not print).
fn warn_about_env() {
    let Ok(value) = std::env::var("HOOK_TIMEOUT_SECS") else {
        return;
    };
    if let Err(e) = hookbus::bounds::parse_timeout_secs(&value) {
        match e.clamped() {
            Some(max) => eprintln!(
                "hookbus: warning: HOOK_TIMEOUT_SECS: {e}; using {} s",
                max.as_secs()
            ),
            None => eprintln!(
                "hookbus: warning: HOOK_TIMEOUT_SECS: {e}; ignored, the default {} s applies",
                hookbus::DEFAULT_HOOK_TIMEOUT.as_secs()
            ),
        }
    }
}

/// Exit status after a panic that was not caught (Rust's own for a panicking `main`).
const PANICKED: u8 = 101;

/// Panics that hookbus did not catch (see `hookbus::panic_is_contained`), in any thread.
static UNCAUGHT_PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts uncaught panics, then reports each as the default hook does. Installed once.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !hookbus::panic_is_contained() {
                UNCAUGHT_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            report(info);
        }));
    });
}

/// Runs a command; a task that panicked without hookbus catching it (tokio swallows those)
/// makes the exit status 101 whatever the command returned.
fn guarded(command: impl FnOnce() -> Result<ExitCode, Box<dyn std::error::Error>>) -> ExitCode {
    install_panic_hook();
    let before = UNCAUGHT_PANICS.load(Ordering::SeqCst);
    let code = finish(command());
    let panics = UNCAUGHT_PANICS.load(Ordering::SeqCst) - before;
    if panics > 0 {
        eprintln!(
            "hookbus: {panics} task(s) panicked (reported above); the run did not finish cleanly"
        );
        return ExitCode::from(PANICKED);
    }
    code
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

#[cfg(test)]
mod tests {
    use super::*;
    use hookbus::{
        async_trait, Bus, BusSessionConfig, Event, EventKind, Hook, HookCx, HookOptions,
        HookResult, PreToolUse, PreToolUseAction,
    };

    struct Panics;

    #[async_trait]
    impl Hook for Panics {
        fn name(&self) -> &str {
            "panics"
        }
        fn options(&self) -> HookOptions {
            HookOptions::new().events([EventKind::PreToolUse])
        }
        async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
            panic!("a hook's own panic, caught by the runtime");
        }
    }

    fn status(code: ExitCode) -> String {
        format!("{code:?}")
    }

    /// Runs `body` on a runtime of its own, as `run` does.
    fn on_runtime(
        body: impl std::future::Future<Output = ()>,
    ) -> Result<ExitCode, Box<dyn std::error::Error>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        runtime.block_on(body);
        drop(runtime);
        Ok(ExitCode::SUCCESS)
    }

    #[test]
    fn an_uncaught_task_panic_makes_the_exit_status_101_and_a_hooks_caught_panic_does_not() {
        // A hook's panic is caught (FL-3): the run is fine.
        let code = guarded(|| {
            on_runtime(async {
                let bus = Bus::new();
                bus.register(Panics).await.unwrap();
                let s = bus.open_session(BusSessionConfig::new()).await.unwrap();
                let outcome = s
                    .dispatch(Event::PreToolUse(PreToolUse {
                        tool_name: "Bash".into(),
                        tool_input: serde_json::json!({}),
                        tool_use_id: "1".into(),
                    }))
                    .await
                    .unwrap();
                assert_eq!(outcome.warnings.len(), 1, "the panic became a warning");
                s.close("other").await.unwrap();
            })
        });
        assert_eq!(status(code), status(ExitCode::SUCCESS));
        // A task that dies of a panic: tokio swallows it, the exit status does not.
        let code = guarded(|| {
            on_runtime(async {
                let _ = tokio::spawn(async { panic!("a worker's panic") }).await;
            })
        });
        assert_eq!(status(code), status(ExitCode::from(PANICKED)));
    }
}
