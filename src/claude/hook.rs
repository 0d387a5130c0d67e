//! [`ClaudeHook`]: one settings handler as a hookbus [`Hook`], folded with every other hook.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::background::{AsyncDelivery, Background, JobSpec};
use super::input::hook_input;
use super::output::{interpret, HandlerReport};
use super::prompt::{evaluate, PromptCall};
use super::run::{self, Job, Mode, Ran, Raw, RunCx};
use super::settings::{AsyncMode, ClaudeSettings, CompatOptions, Handler, HandlerKind};
use super::vars::{PLUGIN_ROOT, SET_BY_HOOKBUS};
use crate::agent::provider::{Provider, SessionProvider};
use crate::model::action::Reply;
use crate::model::error::{Error, HookError};
use crate::model::event::{Envelope, EventKind};
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
    /// The command, URL or prompt, as written.
    pub command: String,
    /// The names of the variables set for the command beyond the inherited environment,
    /// `CLAUDE_PROJECT_DIR` and `CLAUDECODE`: the settings' `env` keys, then
    /// `CLAUDE_PLUGIN_ROOT` for a plugin's handler. Names only, as the values may be secrets;
    /// empty for an http or prompt handler and a run skipped by its `if`.
    #[serde(default)]
    pub env: Vec<String>,
    /// How it went and what it decided.
    #[serde(flatten)]
    pub report: HandlerReport,
}

/// A Claude Code settings handler (command, HTTP or prompt) as a hook: it runs the handler on
/// its event with the event's input (Claude Code's fields) and answers what the output says.
pub struct ClaudeHook {
    name: String,
    handler: Arc<Handler>,
    after: Option<String>,
    options: Arc<CompatOptions>,
    background: Arc<Background>,
    provider: Option<Arc<dyn Provider>>,
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

/// A hook name that is unique per handler and says where it came from (a prompt by the start
/// of its first line).
fn hook_name(index: usize, h: &Handler) -> String {
    match &h.kind {
        HandlerKind::Prompt { prompt, .. } => {
            let line = prompt.lines().next().unwrap_or_default();
            let head: String = line.chars().take(60).collect();
            let more = if head.len() < prompt.len() { "…" } else { "" };
            format!("cc#{index} prompt: {head}{more}")
        }
        _ => format!("cc#{index} {}", h.command()),
    }
}

impl ClaudeSettings {
    /// The handlers as hooks, in settings order (register them in this order so the fold
    /// follows settings order), then, when there is a command handler, the hook that delivers
    /// background handlers' output to the session's next event and kills a session's
    /// background handlers at its end (its name begins with
    /// [`ASYNC_HOOK_NAME`](super::ASYNC_HOOK_NAME)).
    pub fn hooks(&self) -> Vec<Arc<dyn Hook>> {
        let options = Arc::new(self.options.clone());
        let env = Arc::new(self.env.clone());
        let background = Arc::new(Background::default());
        let mut hooks: Vec<Arc<dyn Hook>> = self
            .handlers
            .iter()
            .enumerate()
            .map(|(i, h)| {
                Arc::new(ClaudeHook {
                    name: hook_name(i, h),
                    after: h.after.map(|a| hook_name(a, &self.handlers[a])),
                    handler: Arc::new(h.clone()),
                    options: options.clone(),
                    background: background.clone(),
                    provider: self.provider().cloned(),
                    env: env.clone(),
                }) as Arc<dyn Hook>
            })
            .collect();
        let commands = self
            .handlers
            .iter()
            .any(|h| matches!(h.kind, HandlerKind::Command { .. }));
        if commands {
            let names = hooks.iter().map(|h| h.name());
            let delivery = AsyncDelivery::new(names, background);
            hooks.push(Arc::new(delivery));
        }
        hooks
    }

    /// Registers every handler on `bus` as a global hook, in settings order (with the
    /// background delivery hook of [`hooks`](Self::hooks)).
    pub async fn register(&self, bus: &Bus) -> Result<(), Error> {
        for hook in self.hooks() {
            bus.register_arc(hook).await?;
        }
        Ok(())
    }
}

impl ClaudeHook {
    /// The handler it runs.
    pub fn handler(&self) -> &Handler {
        &self.handler
    }

    /// Runs the handler on the event of `cx` and reads its result.
    async fn run(&self, cx: &HookCx) -> HandlerReport {
        let env = cx.envelope();
        let input = hook_input(env, self.options.hookbus_extensions).to_string();
        let h = &self.handler;
        match &h.kind {
            HandlerKind::Prompt {
                prompt,
                continue_on_block,
                ..
            } => self.prompt(cx, prompt, &input, *continue_on_block).await,
            HandlerKind::Http {
                url,
                headers,
                allowed_env_vars,
            } => {
                let (cwd, project_dir) = self.places(env);
                let run_cx = self.run_cx(cx, input.as_bytes(), &cwd, &project_dir, Mode::Wait);
                let (raw, elapsed) = run::http(url, headers, allowed_env_vars, run_cx).await;
                self.read(env.kind(), raw, elapsed)
            }
            HandlerKind::Command { command, args } => {
                let (cwd, project_dir) = self.places(env);
                let mode = self.mode(env.kind());
                let run_cx = self.run_cx(cx, input.as_bytes(), &cwd, &project_dir, mode);
                match run::command(command, args.as_deref(), run_cx).await {
                    (Ran::Done(raw), elapsed) => self.read(env.kind(), raw, elapsed),
                    (Ran::Detached(job), elapsed) => self.detach(&env.session_id, job, elapsed),
                }
            }
        }
    }

    /// Asks the model (the settings' provider, else the session's) about the event.
    async fn prompt(
        &self,
        cx: &HookCx,
        prompt: &str,
        input: &str,
        continue_on_block: bool,
    ) -> HandlerReport {
        let started = tokio::time::Instant::now();
        let env = cx.envelope();
        let provider = self
            .provider
            .clone()
            .or_else(|| SessionProvider::of(cx.scratchpad()));
        let call = PromptCall {
            prompt,
            input,
            event: env.kind(),
            session_id: &env.session_id,
            continue_on_block,
            on_failure_block: self.handler.on_failure_block,
            timeout: self.handler.timeout,
            cancel: cx.cancellation(),
        };
        let mut report = evaluate(provider, call).await;
        report.duration_ms = started.elapsed().as_millis() as u64;
        report
    }

    /// The hooks' working directory (the session's cwd) and `CLAUDE_PROJECT_DIR`.
    fn places(&self, env: &Envelope) -> (PathBuf, PathBuf) {
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
        (cwd, project_dir)
    }

    /// Where and how a command or http handler runs.
    fn run_cx<'a>(
        &'a self,
        cx: &'a HookCx,
        input: &'a [u8],
        cwd: &'a Path,
        project_dir: &'a Path,
        mode: Mode,
    ) -> RunCx<'a> {
        RunCx {
            input,
            cwd,
            project_dir,
            timeout: self.handler.timeout,
            cap: self.options.output_cap,
            cancel: cx.cancellation(),
            mode,
            env: &self.env,
            plugin_root: self.handler.plugin_root.as_deref(),
        }
    }

    /// Whether a command run may go to the background: not on SessionEnd (the session's jobs
    /// die with it), at once with `async` / `asyncRewake`, else when it says so first.
    fn mode(&self, event: EventKind) -> Mode {
        match self.handler.async_mode {
            _ if event == EventKind::SessionEnd => Mode::Wait,
            AsyncMode::Off => Mode::Detachable,
            AsyncMode::Async | AsyncMode::Rewake => Mode::Background,
        }
    }

    /// Reads a run that ended while the event waited.
    fn read(&self, event: EventKind, raw: Raw, elapsed: Duration) -> HandlerReport {
        let mut report = interpret(
            event,
            raw,
            self.handler.on_failure_block,
            self.options.json_over_exit_2,
        );
        report.duration_ms = elapsed.as_millis() as u64;
        report
    }

    /// Leaves a run to the background: no decision now.
    fn detach(&self, session: &str, job: Job, elapsed: Duration) -> HandlerReport {
        let spec = JobSpec {
            rewake: self.handler.async_mode == AsyncMode::Rewake,
            hook: self.name.clone(),
        };
        self.background.adopt(session, job, spec);
        let mut report = HandlerReport::backgrounded();
        report.duration_ms = elapsed.as_millis() as u64;
        report
    }

    /// The names [`HandlerRun::env`] reports for a run.
    fn env_names(&self) -> Vec<String> {
        if !matches!(self.handler.kind, HandlerKind::Command { .. }) {
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
            (self.run(cx).await, self.env_names())
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
