//! [`ClaudeHook`]: one settings handler as a hookbus [`Hook`], folded with every other hook.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::output::{interpret, HandlerReport};
use super::run::{run, RunCx};
use super::settings::{ClaudeSettings, CompatOptions, Handler, HandlerKind};
use super::vars::{PLUGIN_ROOT, SET_BY_HOOKBUS};
use crate::model::action::Reply;
use crate::model::error::{Error, HookError};
use crate::model::filter::ToolFilter;
use crate::model::hook::{Hook, HookCx, HookOptions};
use crate::runtime::bus::Bus;

/// The metadata key under which a [`ClaudeHook`] reports its run ([`HandlerRun`]).
pub const REPORT_KEY: &str = "claude_code";

/// What a [`ClaudeHook`] reports for one run, in the outcome's metadata under [`REPORT_KEY`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HandlerRun {
    /// The settings file.
    pub source: String,
    /// The matcher of the group that applied, as written.
    pub matcher: Option<String>,
    /// The command (or URL), as written.
    pub command: String,
    /// The names of the variables set for the command beyond the inherited environment,
    /// `CLAUDE_PROJECT_DIR` and `CLAUDECODE`: the settings' `env` keys, then
    /// `CLAUDE_PLUGIN_ROOT` for a plugin's handler. Names only, as the values may be secrets;
    /// empty for an http handler and a run skipped by its `if`.
    #[serde(default)]
    pub env: Vec<String>,
    /// How it went and what it decided.
    #[serde(flatten)]
    pub report: HandlerReport,
}

/// A Claude Code settings handler (command or HTTP) as a hook: it runs the handler on its
/// event with the event's JSON on stdin and answers what the output says.
pub struct ClaudeHook {
    name: String,
    handler: Arc<Handler>,
    after: Option<String>,
    options: Arc<CompatOptions>,
    env: Arc<BTreeMap<String, String>>,
}

impl std::fmt::Debug for ClaudeHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaudeHook")
            .field("name", &self.name)
            .field("command", &self.handler.command())
            .finish()
    }
}

/// A hook name that is unique per handler and says where it came from.
fn hook_name(index: usize, h: &Handler) -> String {
    format!("cc#{index} {}", h.command())
}

impl ClaudeSettings {
    /// The handlers as hooks, in settings order (register them in this order so the fold
    /// follows settings order).
    pub fn hooks(&self) -> Vec<ClaudeHook> {
        let options = Arc::new(self.options.clone());
        let env = Arc::new(self.env.clone());
        self.handlers
            .iter()
            .enumerate()
            .map(|(i, h)| ClaudeHook {
                name: hook_name(i, h),
                after: h.after.map(|a| hook_name(a, &self.handlers[a])),
                handler: Arc::new(h.clone()),
                options: options.clone(),
                env: env.clone(),
            })
            .collect()
    }

    /// Registers every handler on `bus` as a global hook, in settings order.
    pub async fn register(&self, bus: &Bus) -> Result<(), Error> {
        for hook in self.hooks() {
            bus.register(hook).await?;
        }
        Ok(())
    }
}

impl ClaudeHook {
    /// The handler it runs.
    pub fn handler(&self) -> &Handler {
        &self.handler
    }

    /// Runs the handler once on the event and reads its output.
    async fn run_once(&self, cx: &HookCx) -> Result<HandlerReport, HookError> {
        let env = cx.envelope();
        let input = serde_json::to_vec(&**env)?;
        let cwd = if env.fields.cwd.is_empty() {
            std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
        } else {
            PathBuf::from(&env.fields.cwd)
        };
        let project_dir = self
            .options
            .project_dir
            .clone()
            .unwrap_or_else(|| cwd.clone());
        let (raw, elapsed) = run(
            &self.handler.kind,
            RunCx {
                input: &input,
                cwd: &cwd,
                project_dir: &project_dir,
                timeout: self.handler.timeout,
                cap: self.options.output_cap,
                cancel: cx.cancellation(),
                env: &self.env,
                plugin_root: self.handler.plugin_root.as_deref(),
            },
        )
        .await;
        let mut report = interpret(
            env.kind(),
            raw,
            self.handler.on_failure_block,
            self.options.json_over_exit_2,
        );
        report.duration_ms = elapsed.as_millis() as u64;
        Ok(report)
    }

    /// The names [`HandlerRun::env`] reports for a run.
    fn env_names(&self) -> Vec<String> {
        if let HandlerKind::Http { .. } = self.handler.kind {
            return Vec::new();
        }
        let plugin = self.handler.plugin_root.is_some();
        // What hookbus sets itself wins over the settings' `env`.
        let overridden = |k: &str| SET_BY_HOOKBUS.contains(&k) || (plugin && k == PLUGIN_ROOT);
        self.env
            .keys()
            .filter(|k| !overridden(k))
            .cloned()
            .chain(plugin.then(|| PLUGIN_ROOT.to_owned()))
            .collect()
    }

    /// The first of the handler's groups whose matcher accepts the event, and whether its `if`
    /// (if any) holds; `None` when no group applies.
    fn applies(&self, cx: &HookCx) -> Option<(Option<String>, bool)> {
        let env = cx.envelope();
        let query = env.event.query();
        let tool_event = env.kind().is_tool_event();
        let cwd = (!env.fields.cwd.is_empty()).then(|| std::path::Path::new(&env.fields.cwd));
        let mut matched: Option<Option<String>> = None;
        for occ in &self.handler.occurrences {
            // The matcher is ignored on events without a query field.
            let hit = match query {
                Some(q) => occ.pattern.matches(q),
                None => true,
            };
            if !hit {
                continue;
            }
            let passes = match (&occ.if_rule, env.event.tool()) {
                (Some(rule), Some((name, input))) if tool_event => rule.matches(name, input, cwd),
                (Some(_), _) => false,
                (None, _) => true,
            };
            if passes {
                return Some((occ.matcher.clone(), true));
            }
            matched.get_or_insert(occ.matcher.clone());
        }
        matched.map(|m| (m, false))
    }
}

#[async_trait]
impl Hook for ClaudeHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn options(&self) -> HookOptions {
        let h = &self.handler;
        // The runner enforces the handler's deadline and kills the process group; the
        // runtime's own timeout is a backstop just after it.
        let mut options = HookOptions::new()
            .events([h.event])
            .timeout(h.timeout + Duration::from_secs(2));
        // Should the backstop ever fire, `onFailure: "block"` still blocks.
        if h.on_failure_block {
            options = options.fail_closed();
        }
        // One group: let the dispatcher skip non-matching events without a message. Several
        // groups (a de-duplicated handler): every event comes in and `applies` decides.
        if let [only] = h.occurrences.as_slice() {
            if h.event.is_tool_event() {
                options = options.filter(ToolFilter::pattern(only.pattern.clone()));
            } else {
                options = options.matcher(only.pattern.clone());
            }
        }
        if let Some(after) = &self.after {
            options = options.after(after.clone());
        }
        options
    }

    fn untyped(&self) -> bool {
        true
    }

    async fn handle(&self, cx: &HookCx) -> Result<Reply, HookError> {
        let Some((matcher, passes)) = self.applies(cx) else {
            return Ok(Reply::proceed());
        };
        let kind = cx.envelope().kind();
        let (report, env) = if passes {
            (self.run_once(cx).await?, self.env_names())
        } else {
            (HandlerReport::skipped(), Vec::new())
        };
        tracing::debug!(hook = %self.name, event = %kind, outcome = ?report.outcome, decision = ?report.decision, "claude code handler ran");
        let mut reply = report.to_reply(kind);
        let run = HandlerRun {
            source: self.handler.source.clone(),
            matcher,
            command: self.handler.command().to_owned(),
            env,
            report,
        };
        reply.extras.metadata.push((
            REPORT_KEY.to_owned(),
            serde_json::to_value(&run).unwrap_or(Value::Null),
        ));
        Ok(reply)
    }
}
