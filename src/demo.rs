//! `hookbus demo`: a scripted session in a temporary workspace with real tools, the built-in
//! hooks, a maintenance-window gate, an audit observer and a Post hook that fails, printing the
//! trace.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

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

/// The demo's tools, confined to the workspace by joining relative paths only.
struct DemoTool {
    name: &'static str,
    kind: ToolKind,
}

#[async_trait]
impl Tool for DemoTool {
    fn name(&self) -> &str {
        self.name
    }
    fn kind(&self) -> ToolKind {
        self.kind
    }
    async fn execute(&self, input: Value, cx: ToolCx) -> Result<Value, ToolError> {
        run_tool(&cx.cwd, self.name, &input)
            .await
            .map(Value::String)
            .map_err(ToolError)
    }
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
                .permission_mode("acceptEdits"),
        )
        .await?;
    let permissions = PermissionService::spawn(PermissionConfig {
        global: RuleSet::new().deny("bash(rm *)")?,
        default_mode: PermissionMode::AcceptEdits,
        ..Default::default()
    });
    let fallback = if args.approve == "yes" {
        Approval::AllowOnce
    } else {
        Approval::Deny {
            reason: Some("the user said no".into()),
        }
    };
    let tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(DemoTool {
            name: "read_file",
            kind: ToolKind::ReadOnly,
        }),
        Arc::new(DemoTool {
            name: "bash",
            kind: ToolKind::Other,
        }),
        Arc::new(DemoTool {
            name: "write_file",
            kind: ToolKind::Edit,
        }),
    ];
    let pipeline = Pipeline::new(
        session.clone(),
        permissions,
        Arc::new(TerminalApprover::new(fallback)),
        tools,
    )
    .cwd(&workspace);
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
        let mut output = String::new();
        let calls = [
            ToolCall::new("toolu_01", "read_file", json!({"path": "main.py"})),
            ToolCall::new("toolu_02", "bash", json!({"command": "python3 main.py"})),
        ];
        for call in calls {
            let result = pipeline.execute(call).await?;
            record(&mut summary, &result);
            if !result.is_error {
                output = result.content;
            }
        }
        let text = format!("main.py prints {}\n", output.trim());
        let write = ToolCall::new(
            "toolu_03",
            "write_file",
            json!({"path": "SUMMARY.md", "content": text}),
        );
        let result = pipeline.execute(write).await?;
        record(&mut summary, &result);
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

fn record(summary: &mut Summary, result: &CallResult) {
    summary.decisions.push(format!(
        "{} {}: {:?} ({})",
        result.tool_name,
        result.tool_use_id,
        result.status,
        result.explain.as_deref().unwrap_or("-")
    ));
    summary.warnings.extend(
        result
            .reminders
            .iter()
            .filter(|r| r.contains("warning:"))
            .cloned(),
    );
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
