//! `hookbus replay`: a Claude Code transcript through a hooks configuration, event by event.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use hookbus::claude::replay::{format_text, provider_from_spec, Replay, ReplayOptions};
use hookbus::claude::CompatOptions;

/// Options of `hookbus replay`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// A Claude Code settings file; repeat to merge several, in order (user, project, local).
    #[arg(
        long = "settings",
        value_name = "FILE",
        required_unless_present = "plugin_dirs"
    )]
    settings: Vec<PathBuf>,
    /// A Claude Code plugin directory whose `hooks/hooks.json` is loaded after the settings,
    /// its hooks run with `CLAUDE_PLUGIN_ROOT` set to it; repeat for several, in order.
    #[arg(long = "plugin-dir", value_name = "DIR")]
    plugin_dirs: Vec<PathBuf>,
    /// The session transcript (JSONL).
    #[arg(long, value_name = "FILE")]
    transcript: PathBuf,
    /// Output: `text` (readable blocks) or `json` (one object per line, per event).
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    format: String,
    /// The hooks' working directory and the payloads' `cwd` (default: the current directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// `CLAUDE_PROJECT_DIR` for the hooks (default: the cwd).
    #[arg(long, value_name = "DIR")]
    project_dir: Option<PathBuf>,
    /// Also fire SessionStart, UserPromptSubmit, Stop and SessionEnd.
    #[arg(long)]
    all_events: bool,
    /// Claude Code 2.0.76 behaviour: valid JSON output decides even on exit 2.
    #[arg(long)]
    legacy_json_over_exit_2: bool,
    /// Claude Code 2.0.76 behaviour: `continue: false` on PreToolUse still runs the tool.
    #[arg(long)]
    legacy_continue_false: bool,
    /// Default handler timeout in seconds (600; Claude Code before 2.1.3 used 60), at most
    /// 86400 (24 hours).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=hookbus::bounds::MAX_TIMEOUT.as_secs()))]
    default_timeout: Option<u64>,
    /// The model that answers `prompt` handlers: `scripted:FILE`, a ScriptedProvider script
    /// whose turns' texts are the answers (`{"ok": false, "reason": "..."}`), one per call.
    /// Without it prompt handlers fail open.
    #[arg(long, value_name = "scripted:FILE")]
    provider: Option<String>,
}

/// Runs the replay.
pub async fn run(args: ReplayArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut compat = CompatOptions {
        json_over_exit_2: args.legacy_json_over_exit_2,
        continue_false_runs_tool: args.legacy_continue_false,
        ..CompatOptions::default()
    };
    if let Some(secs) = args.default_timeout {
        compat.default_timeout = std::time::Duration::from_secs(secs);
    }
    let provider = args
        .provider
        .as_deref()
        .map(provider_from_spec)
        .transpose()?;
    let replay = Replay::load(ReplayOptions {
        settings: args.settings,
        plugin_dirs: args.plugin_dirs,
        transcript: args.transcript,
        cwd: args.cwd,
        project_dir: args.project_dir,
        all_events: args.all_events,
        compat,
        provider,
    })?;
    for warning in replay.warnings() {
        eprintln!("warning: {warning}");
    }
    let json = args.format == "json";
    let mut stdout = std::io::stdout().lock();
    let mut first = true;
    replay
        .run(|line| {
            let text = if json {
                serde_json::to_string(line).unwrap_or_default()
            } else {
                let block = format_text(line);
                if first {
                    first = false;
                    block
                } else {
                    format!("\n{block}")
                }
            };
            // A closed stdout (`| head`) only ends the printing.
            let _ = writeln!(stdout, "{}", text.trim_end());
        })
        .await?;
    Ok(ExitCode::SUCCESS)
}
