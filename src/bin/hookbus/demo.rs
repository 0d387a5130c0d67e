//! `hookbus demo`: a scripted agent session in a temporary workspace with the real tools, the
//! built-in hooks, a maintenance-window gate, an audit observer and a Post hook that fails,
//! printing the trace and a closing summary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use hookbus::builtins::{LogSink, LoggingHook, TimingHook};
use hookbus::*;
use parking_lot::Mutex;
use serde_json::json;

/// Prints a line; a closed stdout (`| head`) is not an error worth failing the run for.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Exit status when the maintenance gate blocked the run.
const BLOCKED: u8 = 3;

/// Options of `hookbus demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Close the maintenance window: the gate blocks the run.
    #[arg(long)]
    maintenance: bool,
    /// Answer to permission prompts when stdin is not a terminal.
    #[arg(long, value_parser = ["yes", "no"], default_value = "yes")]
    approve: String,
    /// Run this script file (see the `ScriptedProvider` docs) instead of the built-in one.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// The model: the script (`scripted`), or a real one: `anthropic` (ANTHROPIC_API_KEY,
    /// ANTHROPIC_BASE_URL, ANTHROPIC_MODEL) or `openai` (OPENAI_API_KEY, OPENAI_BASE_URL,
    /// OPENAI_MODEL), given the script's prompt and files.
    #[arg(long, value_parser = ["scripted", "anthropic", "openai"], default_value = "scripted")]
    provider: String,
    /// The model's name (with `--provider anthropic|openai`).
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
}

/// What the demo tells a real model before the prompt.
const DEMO_SYSTEM_PROMPT: &str = "You are a coding agent working in the current directory. \
Use the tools to read files, run commands (python3 is available) and write files. \
Keep answers short.";

/// The model the demo talks to: the script, or a real one configured from the environment.
fn demo_provider(args: &DemoArgs, script: &Script) -> Result<Arc<dyn Provider>, String> {
    use hookbus::providers::{AnthropicProvider, OpenAiProvider};
    let model = args.model.as_deref();
    Ok(match args.provider.as_str() {
        "anthropic" => Arc::new(AnthropicProvider::from_env(model).map_err(|e| e.to_string())?),
        "openai" => Arc::new(OpenAiProvider::from_env(model).map_err(|e| e.to_string())?),
        _ => Arc::new(ScriptedProvider::from_script(script.clone())),
    })
}

/// The built-in run: read main.py, run it, write a summary, stop.
fn default_script() -> Script {
    let turns = vec![
        ScriptTurn::text("Let me read main.py first.")
            .call("read_file", json!({ "path": "main.py" })),
        ScriptTurn::text("It prints a product; I'll run it.")
            .call("bash", json!({ "command": "python3 main.py" })),
        ScriptTurn::text("It prints 42. Writing the summary.").call(
            "write_file",
            json!({ "path": "SUMMARY.md", "content": "main.py prints 42\n" }),
        ),
        ScriptTurn::text("Done: main.py prints 42, and SUMMARY.md says so."),
    ];
    Script {
        model: Some("scripted-demo".into()),
        prompts: vec!["Run main.py and write a summary of what it prints".into()],
        files: [("main.py".to_owned(), "print(6 * 7)\n".to_owned())].into(),
        turns,
        agents: Default::default(),
    }
}

/// Blocks every prompt while the maintenance window is closed (seed 004's gate). It fails
/// closed: if it cannot decide, nothing runs.
struct MaintenanceGate {
    closed: bool,
}

#[async_trait]
impl Hook for MaintenanceGate {
    fn name(&self) -> &str {
        "maintenance-window"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::UserPromptSubmit])
            .fail_closed()
    }
    async fn user_prompt_submit(&self, _: &HookCx, _: &UserPromptSubmit) -> HookResult<GateAction> {
        Ok(if self.closed {
            GateAction::block("maintenance window: tool runs are paused until 06:00 UTC").into()
        } else {
            GateAction::Continue.into()
        })
    }
}

/// A Post hook whose backend is down: its failure becomes a host warning; the tool is not re-run.
struct FlakyLinter;

#[async_trait]
impl Hook for FlakyLinter {
    fn name(&self) -> &str {
        "lint-after-write"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PostToolUse])
            .filter(ToolFilter::names("write_file").expect("a valid pattern"))
    }
    async fn post_tool_use(&self, _: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        Err(HookError::new("linter service unreachable"))
    }
}

/// Prints what each tool returned, as the model will see it.
struct ShowResults;

#[async_trait]
impl Hook for ShowResults {
    fn name(&self) -> &str {
        "show-results"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PostToolUse, EventKind::PostToolUseFailure])
            .inline()
    }
    async fn post_tool_use(&self, _: &HookCx, ev: &PostToolUse) -> HookResult<PostToolUseAction> {
        let shown = match ev
            .tool_response
            .get("stdout")
            .and_then(serde_json::Value::as_str)
        {
            Some(stdout) => stdout.trim().to_owned(),
            None => match &ev.tool_response {
                serde_json::Value::String(s) => s.trim().to_owned(),
                other => other.to_string(),
            },
        };
        let mut line: String = shown.chars().take(200).collect();
        if shown.chars().count() > 200 {
            line.push('…');
        }
        say!("[Tool] {} → {}", ev.tool_name, line.replace('\n', " ⏎ "));
        Ok(PostToolUseAction::default().into())
    }
    async fn post_tool_use_failure(
        &self,
        _: &HookCx,
        ev: &PostToolUseFailure,
    ) -> HookResult<PostToolUseAction> {
        say!(
            "[Tool] {} failed: {}",
            ev.tool_name,
            ev.error.lines().next().unwrap_or("")
        );
        Ok(PostToolUseAction::default().into())
    }
}

/// Records every request and outcome (an in-memory audit trail).
#[derive(Clone, Default)]
struct AuditTrail {
    records: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Observer for AuditTrail {
    fn name(&self) -> &str {
        "audit"
    }
    async fn on_event(&self, env: &Arc<Envelope>) {
        let line = match &env.event {
            Event::PreToolUse(e) => {
                format!("request {} {} {}", e.tool_use_id, e.tool_name, e.tool_input)
            }
            Event::PostToolUse(e) => format!("outcome {} ok", e.tool_use_id),
            Event::PostToolUseFailure(e) => {
                format!("outcome {} failed: {}", e.tool_use_id, e.error)
            }
            Event::PermissionDenied(e) => format!("denied {} ({})", e.tool_use_id, e.source),
            Event::UserPromptSubmit(e) => format!("prompt {:?}", e.prompt),
            _ => return,
        };
        self.records.lock().push(line);
    }
}

/// Prints the model's text as each answer arrives.
struct Narrated(Arc<dyn Provider>);

#[async_trait]
impl Provider for Narrated {
    fn model(&self) -> &str {
        self.0.model()
    }
    fn summarizes(&self) -> bool {
        self.0.summarizes()
    }
    async fn complete(
        &self,
        request: ModelRequest<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let response = self.0.complete(request, cancel).await?;
        if !response.text.is_empty() {
            say!("[Model] {}", response.text);
        }
        Ok(response)
    }
}

/// A fresh directory for the run, kept afterwards so its files can be inspected.
fn make_workspace(script: &Script) -> Result<PathBuf, Error> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("hookbus-demo-{}-{stamp}", std::process::id()));
    let io = |path: &Path, e: std::io::Error| Error::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    script.write_files(&dir)?;
    dir.canonicalize().map_err(|e| io(&dir, e))
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let script = match &args.script {
        Some(path) => Script::load(path)?,
        None => default_script(),
    };
    let provider = match demo_provider(&args, &script) {
        Ok(provider) => provider,
        Err(why) => {
            eprintln!("hookbus demo: {why}");
            return Ok(ExitCode::from(2));
        }
    };
    let prompts = prompts_of(&script);
    let workspace = make_workspace(&script)?;
    say!("workspace: {}", workspace.display());

    let fallback = fallback_approval(&args.approve);
    let audit = AuditTrail::default();
    let audit_path = workspace.join("audit.sqlite");
    let audit_log =
        hookbus::builtins::AuditLog::open(&audit_path, hookbus::builtins::AuditMode::BestEffort)?;
    let agent = build_agent(provider, args.maintenance, fallback, &audit).await?;
    audit_log.install(agent.bus()).await?;
    print_sandbox(&agent, &workspace).await?;
    let mut options = SessionOptions::new(&workspace)
        .id("demo")
        .permission_mode(PermissionMode::AcceptEdits);
    if args.provider != "scripted" {
        options = options.system_prompt(DEMO_SYSTEM_PROMPT);
    }
    let session = agent.open_session(options).await?;

    let (results, code) = run_prompts(&session, prompts).await?;
    session.close().await?;
    let report = agent.shutdown(Duration::from_secs(10)).await;
    let written = audit_log.close().await;
    print_summary(&workspace, &results, &report, &audit);
    say!(
        "audit log: {} ({} records); inspect it with: hookbus audit --db {} calls",
        audit_path.display(),
        written.written,
        audit_path.display()
    );
    Ok(code)
}

/// The script's prompts, or one that tells the model to go ahead.
fn prompts_of(script: &Script) -> Vec<String> {
    if script.prompts.is_empty() {
        vec!["Go ahead.".to_owned()]
    } else {
        script.prompts.clone()
    }
}

/// The answer to permission prompts when stdin is not a terminal (`--approve`).
fn fallback_approval(approve: &str) -> Approval {
    if approve == "yes" {
        Approval::AllowOnce
    } else {
        Approval::Deny {
            reason: Some("the user said no".into()),
        }
    }
}

/// The demo's agent: the narrated script, its hooks and observer, the deny rules and the approver.
async fn build_agent(
    provider: Arc<dyn Provider>,
    maintenance: bool,
    fallback: Approval,
    audit: &AuditTrail,
) -> Result<Agent, Error> {
    Agent::builder()
        .provider(Narrated(provider))
        .hook(LoggingHook::with_sink(LogSink::Stdout))
        .hook(TimingHook::with_sink(LogSink::Stdout))
        .hook(MaintenanceGate {
            closed: maintenance,
        })
        .hook(FlakyLinter)
        .hook(ShowResults)
        .observer(audit.clone())
        .permissions(PermissionConfig {
            global: RuleSet::new()
                .deny("Bash(rm -rf *)")?
                .deny("Read(**/.env)")?
                .deny("Read(~/.ssh/**)")?,
            default_mode: PermissionMode::AcceptEdits,
            ..Default::default()
        })
        .approver(TerminalApprover::new(fallback))
        .build()
        .await
}

/// Prints the sandbox the workspace's commands would run in.
async fn print_sandbox(agent: &Agent, workspace: &Path) -> Result<(), Error> {
    let sandbox = hookbus::sandbox::Sandbox {
        policy: SandboxPolicy::default(),
        deny_read: agent.permissions().read_denies("demo", workspace).await?,
        kernel: hookbus::sandbox::KernelSupport::Detect,
    };
    say!("{}", sandbox.describe(workspace));
    Ok(())
}

/// Runs the prompts one turn each, printing how each ended, until one does not complete; the
/// exit code is [`BLOCKED`] when the maintenance gate blocked a turn.
async fn run_prompts(
    session: &AgentSession,
    prompts: Vec<String>,
) -> Result<(Vec<TurnResult>, ExitCode), Error> {
    let mut code = ExitCode::SUCCESS;
    let mut results = Vec::new();
    for prompt in prompts {
        say!("[User] {prompt}");
        let result = session.run_turn(prompt).await?;
        say!(
            "[Turn {}] {}{}",
            result.turn,
            result.reason,
            result
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        );
        let stop = result.reason != TerminalReason::Completed;
        if result.reason == TerminalReason::Blocked {
            say!(
                "[Gate] run blocked: {}",
                result.detail.as_deref().unwrap_or("")
            );
            code = ExitCode::from(BLOCKED);
        }
        results.push(result);
        if stop {
            break;
        }
    }
    Ok((results, code))
}

fn print_summary(
    workspace: &Path,
    results: &[TurnResult],
    report: &ShutdownReport,
    audit: &AuditTrail,
) {
    say!("");
    say!("== summary ==");
    say!("events dispatched: {}", report.events_dispatched);
    say!(
        "hooks: logging, timing, maintenance-window, lint-after-write, show-results; observer: audit"
    );
    for r in results {
        let m = &r.metrics;
        say!(
            "turn {}: {} ({} steps, {} tool calls, {} ran, {} blocked, {} denied)",
            r.turn,
            r.reason,
            m.steps,
            m.tool_calls,
            m.executed,
            m.blocked_calls,
            m.denied_calls
        );
        if let Some(detail) = &r.detail {
            say!("decision: turn {}: {} ({detail})", r.turn, r.reason);
        }
        for call in &r.calls {
            say!(
                "decision: {} {}: {:?} ({})",
                call.tool_name,
                call.tool_use_id,
                call.status,
                call.explain.as_deref().unwrap_or("-")
            );
        }
        for warning in r
            .calls
            .iter()
            .flat_map(|c| &c.reminders)
            .filter(|w| w.contains("warning:"))
        {
            say!("warning: {warning}");
        }
    }
    for record in audit.records.lock().iter() {
        say!("audit: {record}");
    }
    say!("workspace kept at {}", workspace.display());
}

/// Options of the durable-audit crash helper.
#[derive(clap::Args)]
pub struct DurableChildArgs {
    /// The audit database (durable mode): a SQLite file, or a `postgres://` URL.
    #[arg(long)]
    db: String,
    /// The workspace.
    #[arg(long)]
    workspace: PathBuf,
    /// Tool calls to make, one per step.
    #[arg(long, default_value_t = 20)]
    calls: u32,
    /// How long each call's tool sleeps (at most 24 hours).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=hookbus::bounds::MAX_TIMEOUT.as_millis() as u64))]
    sleep_ms: u64,
}

/// A tool that says when it starts (its intent is durable by then) and then sleeps.
struct Slow {
    sleep: Duration,
}

#[async_trait]
impl Tool for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    async fn execute(
        &self,
        _: serde_json::Value,
        cx: ToolCx,
    ) -> Result<serde_json::Value, ToolError> {
        say!("running {}", cx.tool_use_id);
        tokio::time::sleep(self.sleep).await;
        Ok(json!("done"))
    }
}

/// Runs a durable-audit session of slow calls, printing `instance <n>` (its log's instance in
/// the store) first and `running <id>` as each tool starts.
pub async fn durable_child(args: DurableChildArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let log = hookbus::builtins::AuditLog::connect(&args.db, hookbus::builtins::AuditMode::Durable)
        .await?;
    say!("instance {}", log.instance());
    let mut provider = ScriptedProvider::new();
    for i in 0..args.calls {
        provider = provider.turn(ScriptTurn::text("next").call_with_id(
            format!("call-{i:03}"),
            "slow",
            json!({}),
        ));
    }
    let agent = Agent::builder()
        .provider(provider.turn(ScriptTurn::text("finished")))
        .clear_tools()
        .tool(Slow {
            sleep: Duration::from_millis(args.sleep_ms),
        })
        .max_steps(args.calls + 5)
        .build()
        .await?;
    log.install(agent.bus()).await?;
    let session = agent
        .open_session(SessionOptions::new(&args.workspace).id("durable"))
        .await?;
    let result = session.run_turn("go").await?;
    session.close().await?;
    agent.shutdown(Duration::from_secs(10)).await;
    let report = log.close().await;
    say!("finished {} ({} records)", result.reason, report.written);
    Ok(ExitCode::SUCCESS)
}
