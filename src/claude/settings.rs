//! Loading the `hooks` section of Claude Code settings files (CC-1, CC-2).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::agent::provider::Provider;
use crate::model::bounds::{clamp_timeout, timeout_from_secs, MAX_TIMEOUT};
use crate::model::error::Error;
use crate::model::event::EventKind;
use crate::model::filter::NamePattern;
use crate::model::rule::Rule;

use super::plugin::PluginDoc;
use super::vars::{claude_refs, merge_env, settings_env, Dirs, PLUGIN_ROOT, SET_BY_HOOKBUS};

/// Version-dependent behaviour, with the current Claude Code behaviour as default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompatOptions {
    /// `CLAUDE_PROJECT_DIR` for hooks (default: the session's cwd).
    pub project_dir: Option<PathBuf>,
    /// Timeout of a handler without its own (default 600 s; 60 s before Claude Code 2.1.3).
    /// At most [`MAX_TIMEOUT`] (24 h), like a handler's own `timeout`: longer is clamped.
    pub default_timeout: Duration,
    /// Timeout of a UserPromptSubmit handler without its own (default 30 s, at most 24 h).
    pub prompt_timeout: Duration,
    /// Claude Code 2.0.76: valid JSON output decides even on exit 2 (default false: exit 2
    /// blocks whatever the JSON says).
    pub json_over_exit_2: bool,
    /// Claude Code 2.0.76: on PreToolUse, `continue: false` without a deny lets the tool run
    /// and ends the turn after it (default false: the call does not run). Read by replay.
    pub continue_false_runs_tool: bool,
    /// Bytes of stdout and of stderr kept per command handler run, the rest read and discarded;
    /// and the largest HTTP handler reply read, a larger one being a non-blocking error (or a
    /// block with `onFailure: "block"`) that is not read further (default 1 MiB).
    pub output_cap: usize,
    /// Opt-in: the JSON a handler receives also carries, under one `hookbus` key
    /// ([`EXTENSIONS_KEY`](super::EXTENSIONS_KEY)), what the envelope holds beyond Claude
    /// Code's fields for the event (`seq`, `turn`, `step`, `timestamp_ms`,
    /// `parent_session_id`, payload fields such as `PostToolUseFailure.kind`). Default false:
    /// exactly Claude Code's fields, which strict input validators accept.
    pub hookbus_extensions: bool,
}

impl Default for CompatOptions {
    fn default() -> Self {
        Self {
            project_dir: None,
            default_timeout: Duration::from_secs(600),
            prompt_timeout: Duration::from_secs(30),
            json_over_exit_2: false,
            continue_false_runs_tool: false,
            output_cap: 1 << 20,
            hookbus_extensions: false,
        }
    }
}

/// A problem in a settings file that does not stop the load: it names the file and JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsWarning {
    /// The settings file, as given.
    pub file: String,
    /// Where in it (`hooks.PreToolUse[0].hooks[1].timeout`).
    pub path: String,
    /// What is wrong, and what was done about it.
    pub message: String,
}

impl fmt::Display for SettingsWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.path, self.message)
    }
}

/// What a handler runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HandlerKind {
    /// A command: shell form (`sh -c command`) or exec form (`command` with `args`).
    Command {
        /// The command as written.
        command: String,
        /// Exec-form arguments as written.
        args: Option<Vec<String>>,
    },
    /// An HTTP endpoint that gets the event JSON as a POST body.
    Http {
        /// The URL.
        url: String,
        /// Headers; values may use `$VAR` / `${VAR}` for names in `allowed_env_vars`.
        headers: Vec<(String, String)>,
        /// Environment variables headers may use.
        allowed_env_vars: Vec<String>,
    },
    /// A question to a model (`type: "prompt"`): `$ARGUMENTS` in the text is replaced by the
    /// hook input, and the model answers `{"ok": bool, "reason": "..."}`.
    Prompt {
        /// The prompt text as written.
        prompt: String,
        /// `model` as written; not used (the session's provider answers), warned at load.
        model: Option<String>,
        /// `continueOnBlock`: a PreToolUse or PostToolUse block does not end the turn.
        continue_on_block: bool,
    },
}

/// Whether a command handler runs in the background (`async` / `asyncRewake` in settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AsyncMode {
    /// The event waits for it (it may still go to the background by printing
    /// `{"async": true}` as its first line).
    #[default]
    Off,
    /// `async: true`: started in the background; the event does not wait, and the
    /// `additionalContext` and `systemMessage` of its output reach the model on the session's
    /// next event.
    Async,
    /// `asyncRewake: true`: as `Async`, and an exit 2 delivers its stderr (else its stdout)
    /// to the model on the session's next event.
    Rewake,
}

/// Timeout of a `prompt` handler without its own, as in Claude Code.
pub const PROMPT_HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

/// Events on which Claude Code runs `prompt` handlers (among those hookbus fires).
const PROMPT_EVENTS: &[EventKind] = &[
    EventKind::PreToolUse,
    EventKind::PostToolUse,
    EventKind::PostToolUseFailure,
    EventKind::PermissionRequest,
    EventKind::PermissionDenied,
    EventKind::Stop,
    EventKind::SubagentStop,
    EventKind::UserPromptSubmit,
];

/// Where a handler applies: one matcher group's matcher and the handler's `if`.
#[derive(Debug, Clone)]
pub struct Occurrence {
    /// The matcher as written (`None` when omitted).
    pub matcher: Option<String>,
    /// The compiled matcher.
    pub pattern: NamePattern,
    /// The `if` rule (tool events only).
    pub if_rule: Option<Rule>,
}

/// One handler, after merging and de-duplication.
#[derive(Debug, Clone)]
pub struct Handler {
    /// The settings file it came from (the first, when several define it).
    pub source: String,
    /// Its JSON path there.
    pub path: String,
    /// The event.
    pub event: EventKind,
    /// What it runs.
    pub kind: HandlerKind,
    /// Its timeout.
    pub timeout: Duration,
    /// `onFailure: "block"`.
    pub on_failure_block: bool,
    /// The matcher groups it appears under; it runs (once) when one applies. Definitions are
    /// merged only when identical in everything but the matcher, so every occurrence carries the
    /// same `if`, and `timeout` and `onFailure` are each definition's own.
    pub occurrences: Vec<Occurrence>,
    /// In a `sequential` group: the index (in [`ClaudeSettings::handlers`]) of the handler before it.
    pub after: Option<usize>,
    /// `async` / `asyncRewake` (command handlers).
    pub async_mode: AsyncMode,
    /// For a handler from a plugin's `hooks/hooks.json`: the plugin's directory (absolute), its
    /// runs' `CLAUDE_PLUGIN_ROOT`.
    pub plugin_root: Option<PathBuf>,
}

impl Handler {
    /// The command (or URL, or prompt text) as written.
    pub fn command(&self) -> &str {
        match &self.kind {
            HandlerKind::Command { command, .. } => command,
            HandlerKind::Http { url, .. } => url,
            HandlerKind::Prompt { prompt, .. } => prompt,
        }
    }
}

/// The merged `hooks` of one or more settings files, and of plugin directories
/// ([`ClaudeSettings::load_with_plugins`]).
#[derive(Debug, Clone, Default)]
pub struct ClaudeSettings {
    /// The handlers in settings order (file order, then event, group and handler order), the
    /// settings files' first and then each plugin's, in the order given.
    pub handlers: Vec<Handler>,
    /// What was skipped or corrected while loading.
    pub warnings: Vec<SettingsWarning>,
    /// `disableAllHooks`, as the last file that sets it says.
    pub disabled: bool,
    /// The merged `env` of the settings files (a later file's key overrides an earlier one's),
    /// set in every command handler's environment and read by an http handler's header
    /// expansion before the process environment. The variables hookbus sets itself
    /// (`CLAUDE_PROJECT_DIR`, `CLAUDECODE`) win over it.
    pub env: BTreeMap<String, String>,
    /// The behaviour settings.
    pub options: CompatOptions,
    /// The model that answers `prompt` handlers, when given ([`with_provider`](Self::with_provider)).
    provider: ProviderSlot,
}

/// An optional [`Provider`], shown by its model name.
#[derive(Clone, Default)]
struct ProviderSlot(Option<Arc<dyn Provider>>);

impl fmt::Debug for ProviderSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(p) => write!(f, "Some({:?})", p.model()),
            None => f.write_str("None"),
        }
    }
}

impl ClaudeSettings {
    /// Answers `prompt` handlers with `provider` (a small, fast model, as Claude Code uses),
    /// whatever session they run in. Without one, a prompt handler in an agent session asks
    /// the session's own provider ([`SessionProvider`](crate::SessionProvider)); elsewhere it
    /// fails open with a non-blocking error.
    pub fn with_provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = ProviderSlot(Some(provider));
        self
    }

    /// The provider given with [`with_provider`](Self::with_provider).
    pub fn provider(&self) -> Option<&Arc<dyn Provider>> {
        self.provider.0.as_ref()
    }

    /// Whether any handler is a `prompt` handler.
    pub fn has_prompt_handlers(&self) -> bool {
        self.handlers
            .iter()
            .any(|h| matches!(h.kind, HandlerKind::Prompt { .. }))
    }
}

/// The shared budget of SessionEnd handlers: 1.5 s, raised to the largest SessionEnd timeout
/// configured in a settings file (at most 60 s). A handler without a `timeout` of its own, and
/// a plugin's, does not raise it: `largest_configured` counts only the others.
pub(crate) fn session_end_budget(largest_configured: Duration) -> Duration {
    largest_configured.clamp(Duration::from_millis(1500), Duration::from_secs(60))
}

impl ClaudeSettings {
    /// Loads and merges settings files in order (user, project, local). A file that is not
    /// valid JSON, or larger than [`MAX_SETTINGS_BYTES`], or whose `env` is not an object of
    /// strings, is an error naming it (and the key), and nothing is loaded.
    ///
    /// [`MAX_SETTINGS_BYTES`]: crate::bounds::MAX_SETTINGS_BYTES
    pub fn load(files: &[impl AsRef<Path>], options: CompatOptions) -> Result<Self, Error> {
        Self::load_with_plugins::<_, PathBuf>(files, &[], options)
    }

    /// Merges settings documents given as `(name, JSON text)`, in order.
    pub fn parse(documents: &[(String, String)], options: CompatOptions) -> Result<Self, Error> {
        Self::parse_with(documents, &[], options)
    }

    /// Merges settings documents, then plugins' `hooks/hooks.json`, in order.
    pub(crate) fn parse_with(
        documents: &[(String, String)],
        plugins: &[PluginDoc],
        options: CompatOptions,
    ) -> Result<Self, Error> {
        let json = |name: &str, text: &str| -> Result<Value, Error> {
            serde_json::from_str(text).map_err(|e| Error::json(name, &e))
        };
        let mut settings = Vec::with_capacity(documents.len());
        for (name, text) in documents {
            settings.push((name.as_str(), json(name, text)?));
        }
        let mut plugin_hooks = Vec::with_capacity(plugins.len());
        for plugin in plugins {
            let value = plugin.text.as_deref().map(|t| json(&plugin.file, t));
            plugin_hooks.push((plugin, value.transpose()?));
        }
        let env = merge_env(
            settings
                .iter()
                .filter_map(|(name, value)| Some((name, value.as_object()?)))
                .map(|(name, root)| settings_env(name, root))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let mut loader = Loader {
            options: &options,
            out: Vec::new(),
            warnings: Vec::new(),
            keys: HashMap::new(),
            plugin: None,
            session_end_largest: Duration::ZERO,
            refs: Vec::new(),
        };
        let mut disabled = false;
        for (name, value) in &settings {
            loader.settings_document(name, value, &mut disabled);
        }
        for (plugin, value) in &plugin_hooks {
            loader.plugin_document(plugin, value.as_ref());
        }
        loader.warn_unset(&env);
        let mut handlers = loader.out;
        let budget = session_end_budget(loader.session_end_largest);
        for h in &mut handlers {
            if h.event == EventKind::SessionEnd {
                h.timeout = h.timeout.min(budget);
            }
        }
        Ok(Self {
            handlers: if disabled { Vec::new() } else { handlers },
            warnings: loader.warnings,
            disabled,
            env,
            options,
            provider: ProviderSlot::default(),
        })
    }
}

struct Loader<'a> {
    options: &'a CompatOptions,
    out: Vec<Handler>,
    warnings: Vec<SettingsWarning>,
    /// De-duplication: what makes two handlers the same → index in `out`.
    keys: HashMap<DedupKey, usize>,
    /// The directory of the plugin whose `hooks.json` is being loaded.
    plugin: Option<PathBuf>,
    /// The `CLAUDE_*` variables the commands read, checked once every `env` is known.
    refs: Vec<VarRef>,
    /// The largest `timeout` a settings file (not a plugin) gives a SessionEnd handler.
    session_end_largest: Duration,
}

/// A `CLAUDE_*` variable a command reads, and where.
struct VarRef {
    file: String,
    /// The JSON path of the `command` or the argument.
    path: String,
    /// As written (`${CLAUDE_PLUGIN_ROOT}`).
    written: String,
    name: String,
    /// Whether the handler is a plugin's (which gets `CLAUDE_PLUGIN_ROOT`).
    plugin: bool,
}

/// Everything that makes a handler behave as it does, save the matcher: two definitions with
/// equal keys are one handler that applies under either group's matcher. `statusMessage` (display
/// only) is not part of it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct DedupKey {
    event: EventKind,
    /// The kind with `${CLAUDE_PROJECT_DIR}` expanded in the command and args.
    kind: HandlerKind,
    /// `shell`, as written.
    shell: Option<String>,
    /// `if`, as written.
    if_rule: Option<String>,
    timeout: Duration,
    on_failure_block: bool,
    /// `async` and `asyncRewake`.
    async_flags: (bool, bool),
    /// The plugin it comes from: a plugin's copy of a handler stays separate (Claude Code's
    /// documented rule), and so does another plugin's.
    plugin: Option<PathBuf>,
}

/// Events Claude Code has that hookbus does not fire.
const NOT_FIRED: &[&str] = &[
    "PostToolBatch",
    "UserPromptExpansion",
    "Setup",
    "TaskCreated",
    "TaskCompleted",
    "TeammateIdle",
    "ConfigChange",
    "CwdChanged",
    "FileChanged",
    "InstructionsLoaded",
    "WorktreeCreate",
    "WorktreeRemove",
    "Elicitation",
    "ElicitationResult",
    "DirectoryAdded",
    "MessageDisplay",
    "PreModelSwitch",
    "PostModelSwitch",
    "PreSkillShellCommand",
];

impl Loader<'_> {
    fn warn(&mut self, file: &str, path: &str, message: impl Into<String>) {
        let w = SettingsWarning {
            file: file.to_owned(),
            path: path.to_owned(),
            message: message.into(),
        };
        tracing::warn!("{w}");
        self.warnings.push(w);
    }

    /// Loads one settings document: `disableAllHooks` (into `disabled`) and `hooks`.
    fn settings_document(&mut self, name: &str, value: &Value, disabled: &mut bool) {
        let Some(root) = value.as_object() else {
            self.warn(name, "$", "settings must be a JSON object; ignored");
            return;
        };
        for var in SET_BY_HOOKBUS {
            if root.get("env").and_then(|e| e.get(*var)).is_some() {
                self.warn(
                    name,
                    &format!("env.{var}"),
                    "hookbus sets this variable for every hook itself; the value is not used",
                );
            }
        }
        match root.get("disableAllHooks") {
            Some(Value::Bool(b)) => *disabled = *b,
            Some(_) => self.warn(name, "disableAllHooks", "must be true or false; ignored"),
            None => {}
        }
        match root.get("hooks") {
            Some(Value::Object(hooks)) => self.file(name, hooks),
            Some(_) => self.warn(name, "hooks", "must be an object; ignored"),
            None => {}
        }
    }

    /// Loads a plugin's `hooks/hooks.json` (`None`: the plugin has none): the same `hooks`
    /// shape as settings, beside an optional `description`; its handlers get the plugin's root.
    fn plugin_document(&mut self, plugin: &PluginDoc, value: Option<&Value>) {
        let file = plugin.file.as_str();
        let Some(value) = value else {
            self.warn(
                file,
                "$",
                "the plugin has no hooks/hooks.json; it adds no hooks",
            );
            return;
        };
        match value.get("hooks") {
            Some(Value::Object(hooks)) => {
                self.plugin = Some(plugin.root.clone());
                self.file(file, hooks);
                self.plugin = None;
            }
            Some(_) => self.warn(file, "hooks", "must be an object; ignored"),
            None if value.is_object() => {
                self.warn(file, "hooks", "no `hooks` object; the plugin adds no hooks")
            }
            None => self.warn(file, "$", "hooks.json must be a JSON object; ignored"),
        }
    }

    /// Records the `CLAUDE_*` variables a command handler reads in its command and args.
    fn note_refs(&mut self, file: &str, path: &str, kind: &HandlerKind) {
        let HandlerKind::Command { command, args } = kind else {
            return;
        };
        let texts = std::iter::once((format!("{path}.command"), command)).chain(
            args.iter()
                .flatten()
                .enumerate()
                .map(|(i, a)| (format!("{path}.args[{i}]"), a)),
        );
        for (at, text) in texts {
            for (written, name) in claude_refs(text) {
                self.refs.push(VarRef {
                    file: file.to_owned(),
                    path: at.clone(),
                    written: written.to_owned(),
                    name: name.to_owned(),
                    plugin: self.plugin.is_some(),
                });
            }
        }
    }

    /// Warns of each `CLAUDE_*` variable a command reads that nobody sets for it: not hookbus
    /// (`CLAUDE_PROJECT_DIR`, and `CLAUDE_PLUGIN_ROOT` for a plugin's handlers), not the
    /// settings' `env`, not this process's environment (which hooks inherit).
    fn warn_unset(&mut self, env: &BTreeMap<String, String>) {
        for r in std::mem::take(&mut self.refs) {
            let set = SET_BY_HOOKBUS.contains(&r.name.as_str())
                || (r.plugin && r.name == PLUGIN_ROOT)
                || env.contains_key(&r.name)
                || std::env::var_os(&r.name).is_some();
            if set {
                continue;
            }
            let message = if r.name == PLUGIN_ROOT {
                format!(
                    "`{}` is not set here: hookbus sets it only for the hooks of a plugin \
                     directory (`load_with_plugins`, `--plugin-dir`); the command would see it empty",
                    r.written
                )
            } else {
                format!(
                    "`{}` is not set for hooks (not by hookbus, the settings' `env` or this \
                     process's environment); the command would see it empty",
                    r.written
                )
            };
            self.warn(&r.file, &r.path, message);
        }
    }

    fn file(&mut self, file: &str, hooks: &Map<String, Value>) {
        for (event_name, groups) in hooks {
            let path = format!("hooks.{event_name}");
            let event = match EventKind::from_str(event_name) {
                Ok(e) => e,
                Err(_) if NOT_FIRED.contains(&event_name.as_str()) => {
                    self.warn(
                        file,
                        &path,
                        format!("hookbus does not fire `{event_name}`; its handlers are ignored"),
                    );
                    continue;
                }
                Err(_) => {
                    self.warn(
                        file,
                        &path,
                        format!("unknown event `{event_name}`; ignored"),
                    );
                    continue;
                }
            };
            let Some(groups) = groups.as_array() else {
                self.warn(file, &path, "must be a list of matcher groups; ignored");
                continue;
            };
            for (g, group) in groups.iter().enumerate() {
                self.group(file, &format!("{path}[{g}]"), event, group);
            }
        }
    }

    fn group(&mut self, file: &str, path: &str, event: EventKind, group: &Value) {
        let Some(group) = group.as_object() else {
            self.warn(file, path, "a matcher group must be an object; ignored");
            return;
        };
        let matcher = match group.get("matcher") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.warn(
                    file,
                    &format!("{path}.matcher"),
                    format!("must be a string, not {other}; group ignored"),
                );
                return;
            }
        };
        let (pattern, error) =
            NamePattern::claude_code(matcher.as_deref(), event == EventKind::StopFailure);
        if let Some(e) = error {
            self.warn(
                file,
                &format!("{path}.matcher"),
                format!("{e}; the group matches nothing"),
            );
        }
        let sequential = match group.get("sequential") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                self.warn(
                    file,
                    &format!("{path}.sequential"),
                    "must be true or false; ignored",
                );
                false
            }
        };
        let Some(handlers) = group.get("hooks").and_then(Value::as_array) else {
            self.warn(
                file,
                &format!("{path}.hooks"),
                "must be a list of handlers; group ignored",
            );
            return;
        };
        let mut previous = None;
        for (h, handler) in handlers.iter().enumerate() {
            let hpath = format!("{path}.hooks[{h}]");
            let occurrence = Occurrence {
                matcher: matcher.clone(),
                pattern: pattern.clone(),
                if_rule: None,
            };
            if let Some(index) = self.handler(
                file,
                &hpath,
                event,
                handler,
                occurrence,
                sequential.then_some(previous).flatten(),
                sequential,
            ) {
                previous = Some(index);
            }
        }
    }

    /// Loads the handler at `path`: its index in `out`, or `None` (warned) when it is ignored.
    #[allow(clippy::too_many_arguments)]
    fn handler(
        &mut self,
        file: &str,
        path: &str,
        event: EventKind,
        handler: &Value,
        occurrence: Occurrence,
        after: Option<usize>,
        sequential: bool,
    ) -> Option<usize> {
        let Some(h) = handler.as_object() else {
            self.warn(file, path, "a handler must be an object; ignored");
            return None;
        };
        let kind = self.handler_kind(file, path, event, h)?;
        let occurrence = self.with_if(file, path, event, h, occurrence)?;
        self.note_refs(file, path, &kind);
        let timeout = self.timeout(file, path, event, &kind, h);
        let on_failure_block = self.on_failure_block(file, path, h);
        let async_mode = self.async_mode(file, path, event, &kind, h);
        let flag = |name: &str| h.get(name).and_then(Value::as_bool) == Some(true);
        let key = DedupKey {
            event,
            kind: self.expanded(&kind),
            shell: h.get("shell").and_then(Value::as_str).map(str::to_owned),
            if_rule: h.get("if").and_then(Value::as_str).map(str::to_owned),
            timeout,
            on_failure_block,
            async_flags: (flag("async"), flag("asyncRewake")),
            plugin: self.plugin.clone(),
        };
        let handler = Handler {
            source: file.to_owned(),
            path: path.to_owned(),
            event,
            kind,
            timeout,
            on_failure_block,
            occurrences: vec![occurrence],
            after,
            async_mode,
            plugin_root: self.plugin.clone(),
        };
        Some(self.add(handler, key, sequential))
    }

    /// `async` / `asyncRewake`: command handlers only, and not on SessionEnd (the session ends
    /// right after, and its background jobs with it), each refusal warned.
    fn async_mode(
        &mut self,
        file: &str,
        path: &str,
        event: EventKind,
        kind: &HandlerKind,
        h: &Map<String, Value>,
    ) -> AsyncMode {
        let mut flag = |key: &str| match h.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.warn(
                    file,
                    &format!("{path}.{key}"),
                    format!("must be true or false, not {other}; false applies"),
                );
                false
            }
        };
        let mode = match (flag("async"), flag("asyncRewake")) {
            (_, true) => AsyncMode::Rewake,
            (true, false) => AsyncMode::Async,
            (false, false) => return AsyncMode::Off,
        };
        let key = if mode == AsyncMode::Rewake {
            "asyncRewake"
        } else {
            "async"
        };
        if !matches!(kind, HandlerKind::Command { .. }) {
            self.warn(
                file,
                &format!("{path}.{key}"),
                "only command handlers run in the background; this one runs synchronously",
            );
            return AsyncMode::Off;
        }
        if event == EventKind::SessionEnd {
            self.warn(
                file,
                &format!("{path}.{key}"),
                "a background job would be killed as the session ends; on SessionEnd it runs \
                 synchronously, within the SessionEnd budget",
            );
            return AsyncMode::Off;
        }
        if h.get("onFailure").and_then(Value::as_str) == Some("block") {
            self.warn(
                file,
                &format!("{path}.onFailure"),
                "ignored for a background handler: it cannot block",
            );
        }
        mode
    }

    /// What a handler runs, by its `type`; `None` (warned) when the type is missing or unsupported.
    fn handler_kind(
        &mut self,
        file: &str,
        path: &str,
        event: EventKind,
        h: &Map<String, Value>,
    ) -> Option<HandlerKind> {
        match h.get("type").and_then(Value::as_str) {
            Some("command") => self.command_kind(file, path, h),
            Some("http") => self.http_kind(file, path, h),
            Some("prompt") => self.prompt_kind(file, path, event, h),
            Some(t @ ("agent" | "mcp_tool")) => {
                self.warn(
                    file,
                    &format!("{path}.type"),
                    format!(
                        "handler type `{t}` is not supported by hookbus; this handler never \
                         runs (its gate is open)"
                    ),
                );
                None
            }
            Some(t) => {
                self.warn(
                    file,
                    &format!("{path}.type"),
                    format!("unknown handler type `{t}`; ignored"),
                );
                None
            }
            None => {
                self.warn(
                    file,
                    &format!("{path}.type"),
                    "a handler needs a `type`; ignored",
                );
                None
            }
        }
    }

    /// A command handler's `command` and exec-form `args`.
    fn command_kind(
        &mut self,
        file: &str,
        path: &str,
        h: &Map<String, Value>,
    ) -> Option<HandlerKind> {
        let Some(command) = h.get("command").and_then(Value::as_str) else {
            self.warn(
                file,
                &format!("{path}.command"),
                "a command handler needs a `command` string; ignored",
            );
            return None;
        };
        let args = match h.get("args") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => Some(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
            ),
            Some(_) => {
                self.warn(
                    file,
                    &format!("{path}.args"),
                    "must be a list of strings; handler ignored",
                );
                return None;
            }
        };
        Some(HandlerKind::Command {
            command: command.to_owned(),
            args,
        })
    }

    /// A prompt handler's `prompt`, `model` and `continueOnBlock`; `None` (warned) without a
    /// prompt or on an event where Claude Code runs no prompt handler.
    fn prompt_kind(
        &mut self,
        file: &str,
        path: &str,
        event: EventKind,
        h: &Map<String, Value>,
    ) -> Option<HandlerKind> {
        let Some(prompt) = h.get("prompt").and_then(Value::as_str) else {
            self.warn(
                file,
                &format!("{path}.prompt"),
                "a prompt handler needs a `prompt` string; ignored",
            );
            return None;
        };
        if !PROMPT_EVENTS.contains(&event) {
            self.warn(
                file,
                &format!("{path}.type"),
                format!("Claude Code runs no `prompt` handler on {event}; ignored"),
            );
            return None;
        }
        let model = h.get("model").and_then(Value::as_str).map(str::to_owned);
        if let Some(m) = &model {
            self.warn(
                file,
                &format!("{path}.model"),
                format!("`{m}` is not used: the session's model provider answers prompt hooks"),
            );
        }
        let continue_on_block = match h.get("continueOnBlock") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                self.warn(
                    file,
                    &format!("{path}.continueOnBlock"),
                    "must be true or false; false applies",
                );
                false
            }
        };
        Some(HandlerKind::Prompt {
            prompt: prompt.to_owned(),
            model,
            continue_on_block,
        })
    }

    /// An http handler's `url`, string `headers` and `allowedEnvVars`.
    fn http_kind(&mut self, file: &str, path: &str, h: &Map<String, Value>) -> Option<HandlerKind> {
        let Some(url) = h.get("url").and_then(Value::as_str) else {
            self.warn(
                file,
                &format!("{path}.url"),
                "an http handler needs a `url` string; ignored",
            );
            return None;
        };
        let headers = h
            .get("headers")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let allowed_env_vars = h
            .get("allowedEnvVars")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Some(HandlerKind::Http {
            url: url.to_owned(),
            headers,
            allowed_env_vars,
        })
    }

    /// The occurrence with the handler's `if` rule, if any; `None` (warned) when the `if` is
    /// invalid or the event is not a tool event.
    fn with_if(
        &mut self,
        file: &str,
        path: &str,
        event: EventKind,
        h: &Map<String, Value>,
        mut occurrence: Occurrence,
    ) -> Option<Occurrence> {
        let Some(cond) = h.get("if") else {
            return Some(occurrence);
        };
        let Some(text) = cond.as_str() else {
            self.warn(
                file,
                &format!("{path}.if"),
                "must be a permission-rule string; handler ignored",
            );
            return None;
        };
        if !event.is_tool_event() {
            self.warn(file, &format!("{path}.if"), format!("`if` applies to tool events only; on {event} the handler would never run, so it is ignored"));
            return None;
        }
        match Rule::parse(text) {
            Ok(rule) => {
                occurrence.if_rule = Some(rule);
                Some(occurrence)
            }
            Err(e) => {
                self.warn(file, &format!("{path}.if"), format!("{e}; handler ignored"));
                None
            }
        }
    }

    /// The handler's `timeout`, or the event's default; an out-of-range one is clamped or
    /// replaced by the default, with a warning.
    fn timeout(
        &mut self,
        file: &str,
        path: &str,
        event: EventKind,
        kind: &HandlerKind,
        h: &Map<String, Value>,
    ) -> Duration {
        let default_timeout = clamp_timeout(match kind {
            HandlerKind::Prompt { .. } => PROMPT_HANDLER_TIMEOUT,
            _ if event == EventKind::UserPromptSubmit => self.options.prompt_timeout,
            _ => self.options.default_timeout,
        });
        let timeout = self.configured_timeout(file, path, default_timeout, h);
        if event == EventKind::SessionEnd && self.plugin.is_none() {
            if let Some(t) = timeout {
                self.session_end_largest = self.session_end_largest.max(t);
            }
        }
        timeout.unwrap_or(default_timeout)
    }

    /// The handler's own `timeout`, if it gives a valid one (warned about when it does not).
    fn configured_timeout(
        &mut self,
        file: &str,
        path: &str,
        default_timeout: Duration,
        h: &Map<String, Value>,
    ) -> Option<Duration> {
        match h.get("timeout") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match n.as_f64().map(timeout_from_secs) {
                Some(Ok(timeout)) => Some(timeout),
                Some(Err(e)) if e.clamped().is_some() => {
                    self.warn(
                        file,
                        &format!("{path}.timeout"),
                        format!("{e}; {} s applies", MAX_TIMEOUT.as_secs()),
                    );
                    Some(MAX_TIMEOUT)
                }
                _ => {
                    self.warn(file, &format!("{path}.timeout"), format!("must be a positive number of seconds, not {n}; the default {} s applies", default_timeout.as_secs()));
                    None
                }
            },
            Some(other) => {
                self.warn(file, &format!("{path}.timeout"), format!("must be a positive number of seconds, not {other}; the default {} s applies", default_timeout.as_secs()));
                None
            }
        }
    }

    /// Whether `onFailure` is `block`; anything but `continue` or `block` warns.
    fn on_failure_block(&mut self, file: &str, path: &str, h: &Map<String, Value>) -> bool {
        match h.get("onFailure").and_then(Value::as_str) {
            None | Some("continue") => false,
            Some("block") => true,
            Some(other) => {
                self.warn(
                    file,
                    &format!("{path}.onFailure"),
                    format!("must be `continue` or `block`, not `{other}`; `continue` applies"),
                );
                false
            }
        }
    }

    /// Adds `handler` and gives its index. A handler identical in everything but its matcher to
    /// one already loaded (same `key`) runs once per event, so outside a sequential chain (which
    /// keeps its own members) it joins the first one's occurrences instead; a handler that
    /// differs in anything else (`if`, `timeout`, `onFailure`, ...) stays a handler of its own.
    fn add(&mut self, handler: Handler, key: DedupKey, sequential: bool) -> usize {
        if !sequential {
            if let Some(&index) = self.keys.get(&key) {
                self.out[index].occurrences.extend(handler.occurrences);
                return index;
            }
        }
        let index = self.out.len();
        self.out.push(handler);
        if !sequential {
            self.keys.insert(key, index);
        }
        index
    }

    /// `kind` with `${CLAUDE_PROJECT_DIR}` and `${CLAUDE_PLUGIN_ROOT}` expanded in a command
    /// and its args: the same script written two ways is the same handler.
    fn expanded(&self, kind: &HandlerKind) -> HandlerKind {
        let dirs = Dirs {
            project_dir: self.options.project_dir.as_deref(),
            plugin_root: self.plugin.as_deref(),
        };
        let expand = |s: &str| dirs.exec(s);
        match kind {
            HandlerKind::Command { command, args } => HandlerKind::Command {
                command: expand(command),
                args: args.as_ref().map(|a| a.iter().map(|s| expand(s)).collect()),
            },
            HandlerKind::Http { .. } | HandlerKind::Prompt { .. } => kind.clone(),
        }
    }
}
