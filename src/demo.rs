//! `hookbus demo`: a scripted session in a temporary workspace with real tools, the built-in
//! hooks, a maintenance-window gate, an audit observer and a Post hook that fails, printing the
//! trace.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hookbus::builtins::{LogSink, LoggingHook, TimingHook};
use hookbus::*;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// Options of `hookbus demo`.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Close the maintenance window: the gate blocks the run.
    #[arg(long)]
    maintenance: bool,
    /// Answer to permission prompts when stdin is not a terminal.
    #[arg(long, value_parser = ["yes", "no"], default_value = "yes")]
    approve: String,
}

/// Blocks every prompt while the maintenance window is closed (seed 004's gate).
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
            .events([EventKind::UserPromptSubmit, EventKind::PreToolUse])
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
            .filter(ToolFilter::names("write_file").expect("valid pattern"))
    }
    async fn post_tool_use(&self, _: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        Err(HookError::new("linter service unreachable"))
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
            _ => return,
        };
        self.records.lock().push(line);
    }
}

struct Summary {
    events: u64,
    decisions: Vec<String>,
    warnings: Vec<String>,
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let workspace = std::env::temp_dir().join(format!("hookbus-demo-{}", std::process::id()));
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("main.py"), "print(6 * 7)\n")?;
    println!("workspace: {}", workspace.display());

    let bus = Bus::new();
    bus.register(LoggingHook::with_sink(LogSink::Stdout))
        .await?;
    bus.register(TimingHook::with_sink(LogSink::Stdout)).await?;
    bus.register(MaintenanceGate {
        closed: args.maintenance,
    })
    .await?;
    bus.register(FlakyLinter).await?;
    let audit = AuditTrail::default();
    bus.observe(audit.clone()).await?;

    let session = bus
        .open_session(
            SessionConfig::new()
                .id("demo")
                .cwd(workspace.display().to_string())
                .permission_mode("default"),
        )
        .await?;
    let mut summary = Summary {
        events: 0,
        decisions: Vec::new(),
        warnings: Vec::new(),
    };
    session
        .dispatch(Event::SessionStart(SessionStart {
            source: SessionSource::Startup,
            model: Some("scripted".into()),
        }))
        .await?;
    let prompt = session
        .dispatch(Event::UserPromptSubmit(UserPromptSubmit {
            prompt: "Run main.py and write a summary".into(),
        }))
        .await?;
    let mut code = ExitCode::SUCCESS;
    if prompt.is_blocked() {
        println!("[Gate] run blocked: {}", prompt.reason_text());
        summary.decisions.push(format!(
            "UserPromptSubmit: blocked ({})",
            prompt.reason_text()
        ));
        code = ExitCode::from(3);
    } else {
        let calls = [
            ("read_file", json!({"path": "main.py"}), false),
            ("bash", json!({"command": "python3 main.py"}), true),
        ];
        let mut output = String::new();
        for (i, (tool, input, ask)) in calls.into_iter().enumerate() {
            let id = format!("toolu_{:02}", i + 1);
            if let Some(out) = call_tool(
                &session,
                &workspace,
                tool,
                input,
                &id,
                ask,
                &args.approve,
                &mut summary,
            )
            .await?
            {
                output = out;
            }
        }
        let text = format!("main.py prints {}\n", output.trim());
        call_tool(
            &session,
            &workspace,
            "write_file",
            json!({"path": "SUMMARY.md", "content": text}),
            "toolu_03",
            false,
            &args.approve,
            &mut summary,
        )
        .await?;
        println!("[Model] main.py prints {}", output.trim());
        session
            .dispatch(Event::Stop(Stop {
                stop_hook_active: false,
                last_assistant_message: Some(format!("main.py prints {}", output.trim())),
            }))
            .await?;
    }
    session.close("other").await?;
    let report = bus.shutdown(Duration::from_secs(10)).await;
    summary.events = report.events_dispatched;
    println!();
    println!("== summary ==");
    println!("events dispatched: {}", summary.events);
    println!("hooks: logging, timing, maintenance-window, lint-after-write; observer: audit");
    for d in &summary.decisions {
        println!("decision: {d}");
    }
    for w in &summary.warnings {
        println!("warning: {w}");
    }
    for r in audit.records.lock().iter() {
        println!("audit: {r}");
    }
    Ok(code)
}

#[allow(clippy::too_many_arguments)]
async fn call_tool(
    session: &Session,
    workspace: &Path,
    tool: &str,
    input: Value,
    id: &str,
    ask: bool,
    approve: &str,
    summary: &mut Summary,
) -> Result<Option<String>, Box<dyn std::error::Error>> {
    let pre = session
        .dispatch(Event::PreToolUse(PreToolUse {
            tool_name: tool.into(),
            tool_input: input.clone(),
            tool_use_id: id.into(),
        }))
        .await?;
    if pre.is_blocked() {
        summary
            .decisions
            .push(format!("{tool}: blocked ({})", pre.reason_text()));
        return Ok(None);
    }
    let input = pre.updated_input.unwrap_or(input);
    if ask {
        let allowed = ask_user(tool, &input, approve);
        summary.decisions.push(format!(
            "{tool}: {}",
            if allowed {
                "allowed by user"
            } else {
                "denied by user"
            }
        ));
        if !allowed {
            session
                .dispatch(Event::PermissionDenied(PermissionDenied {
                    tool_name: tool.into(),
                    tool_input: input,
                    tool_use_id: id.into(),
                    reason: "the user said no".into(),
                    source: DenialSource::User,
                    decided_by: None,
                }))
                .await?;
            return Ok(None);
        }
    } else {
        summary.decisions.push(format!("{tool}: allowed"));
    }
    let started = Instant::now();
    let result = run_tool(workspace, tool, &input).await;
    let duration_ms = started.elapsed().as_millis() as u64;
    let out = match result {
        Ok(text) => {
            let post = session
                .dispatch(Event::PostToolUse(PostToolUse {
                    tool_name: tool.into(),
                    tool_input: input.clone(),
                    original_input: None,
                    tool_response: json!(text),
                    original_response: None,
                    tool_use_id: id.into(),
                    is_error: false,
                    duration_ms,
                }))
                .await?;
            summary.warnings.extend(
                post.warnings
                    .iter()
                    .map(|w| format!("{}: {}", w.hook, w.value)),
            );
            Some(text)
        }
        Err(e) => {
            session
                .dispatch(Event::PostToolUseFailure(PostToolUseFailure {
                    tool_name: tool.into(),
                    tool_input: input,
                    original_input: None,
                    tool_use_id: id.into(),
                    error: e.clone(),
                    is_error: true,
                    is_interrupt: false,
                    kind: FailureKind::Error,
                    duration_ms,
                }))
                .await?;
            None
        }
    };
    Ok(out)
}

fn ask_user(tool: &str, input: &Value, approve: &str) -> bool {
    let question = format!("[Permission] Allow {tool} {input}? (y/n/always)");
    if std::io::stdin().is_terminal() {
        println!("{question}");
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).is_err() {
            return false;
        }
        matches!(line.trim(), "y" | "yes" | "always")
    } else {
        let yes = approve == "yes";
        println!("{question} {}", if yes { "y" } else { "n" });
        yes
    }
}

async fn run_tool(workspace: &Path, tool: &str, input: &Value) -> Result<String, String> {
    let arg = |k: &str| input[k].as_str().unwrap_or_default().to_owned();
    match tool {
        "read_file" => {
            std::fs::read_to_string(workspace.join(arg("path"))).map_err(|e| e.to_string())
        }
        "write_file" => std::fs::write(workspace.join(arg("path")), arg("content"))
            .map(|_| "written".to_owned())
            .map_err(|e| e.to_string()),
        "bash" => {
            let out = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(arg("command"))
                .current_dir(workspace)
                .output()
                .await
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(String::from_utf8_lossy(&out.stdout).into_owned())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        }
        other => Err(format!("unknown tool {other}")),
    }
}
