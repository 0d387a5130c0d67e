//! The permission service (SPEC section 6): rule sets, modes, the precedence P0–P8 with an
//! `explain` of what decided, session memory of "allow always", and fail-closed behaviour (FL-5).
//!
//! Its actor ([`PermissionService::spawn`]) is the one writer of the rules: it applies session
//! rules, modes and declared path fields and publishes them (an `ArcSwap` of the shared rules,
//! one `Arc` per session). A [`PermissionHandle::check`] evaluates in the caller's task against
//! what is published: no message, no wait on a shared task. Any internal failure — the service
//! stopped, its actor gone, a panic while evaluating — is a Deny with source `error`.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use arc_swap::ArcSwap;
use dashmap::DashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::model::action::PermissionDecision;
use crate::model::action::PermissionDecision::{Allow, Ask, Deny};
use crate::model::error::ActorKind;
use crate::model::error::Error;
use crate::model::event::DenialSource;
use crate::model::rule::{allowed_by, Rule, Subject};
use crate::runtime::actor::{supervise, Actor, OnPanic, Supervisor};
use crate::runtime::kill::KillSwitch;
use crate::sys::panics::panic_message;

/// How permissive a session is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    /// Read-only tools run; others ask.
    #[default]
    Default,
    /// Edit tools run without asking too.
    AcceptEdits,
    /// Only read-only tools run; everything else is denied.
    Plan,
    /// Whatever would ask is denied.
    DontAsk,
    /// Everything that no deny rule forbids runs.
    BypassPermissions,
}

impl PermissionMode {
    /// The wire name (`acceptEdits`).
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::DontAsk => "dontAsk",
            PermissionMode::BypassPermissions => "bypassPermissions",
        }
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PermissionMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        [
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Plan,
            PermissionMode::DontAsk,
            PermissionMode::BypassPermissions,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
        .ok_or_else(|| Error::InvalidRule {
            rule: s.to_owned(),
            column: 1,
            message:
                "unknown permission mode (default, acceptEdits, plan, dontAsk, bypassPermissions)"
                    .to_owned(),
        })
    }
}

/// What kind of tool a call is for, as far as modes care.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Reads only: allowed in `plan` and without a prompt in `default`.
    ReadOnly,
    /// Edits files: allowed without a prompt in `acceptEdits`.
    Edit,
    /// Anything else (shell, network, ...).
    #[default]
    Other,
}

/// Deny, ask and allow rules.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// Deny rules.
    pub deny: Vec<Rule>,
    /// Ask rules.
    pub ask: Vec<Rule>,
    /// Allow rules.
    pub allow: Vec<Rule>,
}

impl RuleSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a deny rule (parsed; a bad rule is an error naming it and the column).
    pub fn deny(mut self, rule: &str) -> Result<Self, Error> {
        self.deny.push(Rule::parse(rule)?);
        Ok(self)
    }
    /// Adds an ask rule.
    pub fn ask(mut self, rule: &str) -> Result<Self, Error> {
        self.ask.push(Rule::parse(rule)?);
        Ok(self)
    }
    /// Adds an allow rule.
    pub fn allow(mut self, rule: &str) -> Result<Self, Error> {
        self.allow.push(Rule::parse(rule)?);
        Ok(self)
    }
}

/// The level of the precedence that decided (seed 002's P0–P8, plus the mode's own limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Level {
    /// P0: a global deny rule.
    P0GlobalDeny,
    /// P1: a deny rule of the tool.
    P1ToolDeny,
    /// P2: a deny rule of the session.
    P2SessionDeny,
    /// The mode forbids it (`plan` for a tool that is not read-only).
    ModeDeny,
    /// P3: a PreToolUse hook blocked.
    P3HookBlock,
    /// P4: a PreToolUse hook asked.
    P4HookAsk,
    /// P5: an ask rule of the session.
    P5SessionAsk,
    /// P6: an ask rule of the tool (or a global ask rule).
    P6ToolAsk,
    /// P7: an allow rule, or a hook's Allow.
    P7Allow,
    /// P8: nothing matched; the mode decides.
    P8Implicit,
}

/// One permission question.
#[derive(Debug, Clone)]
pub struct PermissionQuery {
    /// The session asking.
    pub session_id: String,
    /// The tool.
    pub tool_name: String,
    /// The input that will run.
    pub input: Value,
    /// Read-only / edit / other.
    pub kind: ToolKind,
    /// The session's working directory (for path rules).
    pub cwd: Option<PathBuf>,
    /// The folded PreToolUse decision, if any hook had one.
    pub hook: HookOpinion,
    /// Only the rules (P0–P2): the early check on the original input.
    pub deny_rules_only: bool,
}

/// What the PreToolUse hooks said, for the precedence.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HookOpinion {
    /// No opinion.
    #[default]
    None,
    /// A hook allowed (skips the prompt; never loosens a deny).
    Allow(String),
    /// A hook asked.
    Ask(String),
    /// A hook blocked.
    Block(String),
}

/// The service's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Allow, ask or deny.
    pub decision: PermissionDecision,
    /// Which level decided (`None` for internal errors).
    pub level: Option<Level>,
    /// For a Deny: who denied.
    pub source: Option<DenialSource>,
    /// The rule that matched, if a rule decided.
    pub rule: Option<String>,
    /// One line saying what decided and why.
    pub explain: String,
}

impl Verdict {
    fn new(
        decision: PermissionDecision,
        level: Level,
        rule: Option<&Rule>,
        explain: String,
    ) -> Self {
        let source = (decision == PermissionDecision::Deny).then_some(match level {
            Level::P3HookBlock => DenialSource::Hook,
            Level::ModeDeny | Level::P8Implicit => DenialSource::Mode,
            _ => DenialSource::Rule,
        });
        Verdict {
            decision,
            level: Some(level),
            source,
            rule: rule.map(|r| r.as_str().to_owned()),
            explain,
        }
    }

    /// The fail-closed answer.
    pub fn error(why: impl Into<String>) -> Self {
        Verdict {
            decision: PermissionDecision::Deny,
            level: None,
            source: Some(DenialSource::Error),
            rule: None,
            explain: format!("permission service error: {}", why.into()),
        }
    }
}

/// The service's configuration.
#[derive(Debug, Clone, Default)]
pub struct PermissionConfig {
    /// Rules for every tool and session (P0 deny, P6 ask, P7 allow).
    pub global: RuleSet,
    /// Rules of one tool (P1 deny, P6 ask, P7 allow), by tool name.
    pub tools: HashMap<String, RuleSet>,
    /// The mode of sessions that do not set one.
    pub default_mode: PermissionMode,
}

impl PermissionConfig {
    /// Reads the `permissions` section (`allow`, `ask`, `deny` rule lists and `defaultMode`) of
    /// Claude Code settings files and merges them in order: rules add up, the last
    /// `defaultMode` wins. A rule's `/path` patterns are relative to the directory of the file
    /// it comes from. Anything malformed — a file that is not JSON, a rule that does not parse,
    /// an unknown mode — is an error naming the file and key, and nothing is loaded.
    pub fn from_settings_files(files: &[impl AsRef<Path>]) -> Result<Self, Error> {
        let mut config = PermissionConfig::default();
        for file in files {
            let path = file.as_ref();
            let name = path.display().to_string();
            let text = crate::model::bounds::read_to_string_capped(
                path,
                crate::model::bounds::MAX_SETTINGS_BYTES,
                "a settings file",
            )?;
            let value: Value = serde_json::from_str(&text).map_err(|e| Error::json(&name, &e))?;
            let dir = path
                .canonicalize()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .unwrap_or_else(|| PathBuf::from("."));
            config.merge_settings(&name, &value, &dir)?;
        }
        Ok(config)
    }

    fn merge_settings(&mut self, file: &str, value: &Value, dir: &Path) -> Result<(), Error> {
        let bad = |key: String, message: String| Error::InvalidSetting {
            file: file.to_owned(),
            key,
            message,
        };
        let Some(section) = value.get("permissions") else {
            return Ok(());
        };
        let Some(section) = section.as_object() else {
            return Err(bad("permissions".into(), "must be an object".into()));
        };
        for (kind, list) in [
            ("deny", &mut self.global.deny),
            ("ask", &mut self.global.ask),
            ("allow", &mut self.global.allow),
        ] {
            let Some(rules) = section.get(kind) else {
                continue;
            };
            let Some(rules) = rules.as_array() else {
                return Err(bad(
                    format!("permissions.{kind}"),
                    "must be an array of rules".into(),
                ));
            };
            for (i, rule) in rules.iter().enumerate() {
                let key = format!("permissions.{kind}[{i}]");
                let text = rule
                    .as_str()
                    .ok_or_else(|| bad(key.clone(), "must be a rule string".into()))?;
                list.push(Rule::parse_in(text, dir).map_err(|e| bad(key, e.to_string()))?);
            }
        }
        if let Some(mode) = section.get("defaultMode") {
            let text = mode.as_str().unwrap_or_default();
            self.default_mode = text
                .parse()
                .map_err(|e: Error| bad("permissions.defaultMode".into(), e.to_string()))?;
        }
        Ok(())
    }

    /// Every rule of the configuration, with where it stands (`global deny`, `tool bash allow`).
    fn rules(&self) -> Vec<(String, &Rule)> {
        fn set<'a>(scope: &str, rules: &'a RuleSet, out: &mut Vec<(String, &'a Rule)>) {
            for (kind, list) in [
                ("deny", &rules.deny),
                ("ask", &rules.ask),
                ("allow", &rules.allow),
            ] {
                out.extend(list.iter().map(|r| (format!("{scope} {kind}"), r)));
            }
        }
        let mut out = Vec::new();
        set("global", &self.global, &mut out);
        for (tool, rules) in &self.tools {
            set(&format!("tool {tool}"), rules, &mut out);
        }
        out
    }

    /// One warning per rule that names no tool among `tools` (directly or through
    /// [`TOOL_ALIASES`](crate::model::rule::TOOL_ALIASES)): such a rule could never match, and a rule
    /// that silently never matches is a hole in a policy.
    pub fn unknown_tool_warnings<'t>(
        &self,
        tools: impl IntoIterator<Item = &'t str> + Clone,
    ) -> Vec<String> {
        self.rules()
            .into_iter()
            .filter(|(_, r)| !r.names_any_of(tools.clone()))
            .map(|(scope, r)| {
                format!("permission rule `{r}` ({scope}) names no known tool; it can never match")
            })
            .collect()
    }
}

#[derive(Default, Clone)]
struct SessionState {
    rules: RuleSet,
    mode: Option<PermissionMode>,
}

/// The rules every session shares: the configuration and the tools' declared path fields.
#[derive(Clone)]
struct Evaluator {
    config: PermissionConfig,
    /// Path fields each tool declares beyond the standard ones.
    path_arguments: HashMap<String, Vec<String>>,
}

/// What checks read, in the caller's task: the shared rules as one snapshot, and each
/// session's rules and mode as its own. Only the actor writes them (a whole new value per
/// change), so a check never waits for the actor and never sees half a change.
struct Published {
    global: ArcSwap<Evaluator>,
    sessions: DashMap<String, Arc<SessionState>>,
    supervisor: Supervisor,
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published")
            .field("sessions", &self.sessions.len())
            .finish()
    }
}

impl Published {
    /// A session's rules and mode as they stand.
    fn session(&self, id: &str) -> Option<Arc<SessionState>> {
        self.sessions.get(id).map(|s| s.value().clone())
    }

    /// Replaces a session's state with `change` applied to a copy of it.
    fn update_session(&self, id: String, change: impl FnOnce(&mut SessionState)) {
        let mut state = self
            .session(&id)
            .map(|s| SessionState::clone(&s))
            .unwrap_or_default();
        change(&mut state);
        self.sessions.insert(id, Arc::new(state));
    }
}

impl Evaluator {
    /// The verdict on `q`: the first precedence step (P0–P8) that decides.
    fn evaluate(&self, session: Option<&SessionState>, q: &PermissionQuery) -> Verdict {
        let extra_paths = self
            .path_arguments
            .get(&q.tool_name)
            .map_or(&[][..], Vec::as_slice);
        // The command is parsed and the paths resolved once for every rule below.
        let subject = Subject::new(&q.tool_name, &q.input, q.cwd.as_deref(), extra_paths);
        let e = Evaluation {
            config: &self.config,
            q,
            session,
            mode: session
                .and_then(|s| s.mode)
                .unwrap_or(self.config.default_mode),
            tool_rules: self.config.tools.get(&q.tool_name),
            subject: &subject,
        };
        e.deny_rules()
            .or_else(|| e.deny_rules_only())
            .or_else(|| e.plan_mode())
            .or_else(|| e.hook_block_or_ask())
            .or_else(|| e.ask_rules())
            .or_else(|| e.allow_rules())
            .or_else(|| e.hook_allow())
            .unwrap_or_else(|| e.implicit())
    }

    /// Absolute globs of the paths `Read` deny rules (global, `read_file`'s and the session's)
    /// keep from being read, for the `bash` sandbox.
    fn read_denies(&self, session: Option<&SessionState>, cwd: &Path) -> Vec<String> {
        let session = session.map(|s| &s.rules.deny);
        let mut globs: Vec<String> = self
            .config
            .global
            .deny
            .iter()
            .chain(self.config.tools.values().flat_map(|t| &t.deny))
            .chain(session.into_iter().flatten())
            .flat_map(|r| r.read_deny_globs(cwd))
            .collect();
        globs.sort();
        globs.dedup();
        globs
    }
}

/// One query being evaluated: what every precedence step reads. Each step gives the verdict
/// when it decides, `None` to leave it to the next.
struct Evaluation<'a> {
    config: &'a PermissionConfig,
    q: &'a PermissionQuery,
    session: Option<&'a SessionState>,
    mode: PermissionMode,
    tool_rules: Option<&'a RuleSet>,
    subject: &'a Subject<'a>,
}

impl Evaluation<'_> {
    /// The first of `rules` that matches the call.
    fn first_match<'r>(&self, rules: &'r [Rule]) -> Option<&'r Rule> {
        rules.iter().find(|r| r.matches_subject(self.subject))
    }

    /// P0–P2: a global, tool or session deny rule denies.
    fn deny_rules(&self) -> Option<Verdict> {
        if let Some(r) = self.first_match(&self.config.global.deny) {
            return Some(Verdict::new(
                Deny,
                Level::P0GlobalDeny,
                Some(r),
                format!("P0 global deny rule `{r}`"),
            ));
        }
        if let Some(r) = self.tool_rules.and_then(|t| self.first_match(&t.deny)) {
            return Some(Verdict::new(
                Deny,
                Level::P1ToolDeny,
                Some(r),
                format!("P1 tool deny rule `{r}`"),
            ));
        }
        let r = self.session.and_then(|s| self.first_match(&s.rules.deny))?;
        Some(Verdict::new(
            Deny,
            Level::P2SessionDeny,
            Some(r),
            format!("P2 session deny rule `{r}`"),
        ))
    }

    /// The early check on the original input asks only the deny rules: none matched.
    fn deny_rules_only(&self) -> Option<Verdict> {
        self.q.deny_rules_only.then(|| {
            Verdict::new(
                Allow,
                Level::P8Implicit,
                None,
                "no deny rule matches".to_owned(),
            )
        })
    }

    /// Mode `plan` denies every tool that is not read-only.
    fn plan_mode(&self) -> Option<Verdict> {
        (self.mode == PermissionMode::Plan && self.q.kind != ToolKind::ReadOnly).then(|| {
            Verdict::new(
                Deny,
                Level::ModeDeny,
                None,
                format!(
                    "mode plan allows only read-only tools; `{}` is not",
                    self.q.tool_name
                ),
            )
        })
    }

    /// An Ask at `level`, as the mode adjusts it (`dontAsk`, `bypassPermissions`).
    fn ask(&self, level: Level, rule: Option<&Rule>, explain: String) -> Verdict {
        mode_adjusts_ask(Verdict::new(Ask, level, rule, explain), self.mode)
    }

    /// P3–P4: a hook's block denies; a hook's ask asks.
    fn hook_block_or_ask(&self) -> Option<Verdict> {
        match &self.q.hook {
            HookOpinion::Block(reason) => Some(Verdict::new(
                Deny,
                Level::P3HookBlock,
                None,
                format!("P3 hook block: {reason}"),
            )),
            HookOpinion::Ask(reason) => {
                Some(self.ask(Level::P4HookAsk, None, format!("P4 hook ask: {reason}")))
            }
            HookOpinion::None | HookOpinion::Allow(_) => None,
        }
    }

    /// P5–P6: a session ask rule, then a tool or global ask rule, asks.
    fn ask_rules(&self) -> Option<Verdict> {
        if let Some(r) = self.session.and_then(|s| self.first_match(&s.rules.ask)) {
            return Some(self.ask(
                Level::P5SessionAsk,
                Some(r),
                format!("P5 session ask rule `{r}`"),
            ));
        }
        let r = self
            .tool_rules
            .and_then(|t| self.first_match(&t.ask))
            .or_else(|| self.first_match(&self.config.global.ask))?;
        Some(self.ask(Level::P6ToolAsk, Some(r), format!("P6 ask rule `{r}`")))
    }

    /// P7: allow rules of every scope together allow when each simple command (each path) is
    /// covered by one of them (SEC-5).
    fn allow_rules(&self) -> Option<Verdict> {
        let allow_rules = self
            .session
            .map_or(&[][..], |s| s.rules.allow.as_slice())
            .iter()
            .chain(self.tool_rules.map_or(&[][..], |t| t.allow.as_slice()))
            .chain(&self.config.global.allow);
        let used = allowed_by(allow_rules, self.subject)?;
        let names: Vec<&str> = used.iter().map(|r| r.as_str()).collect();
        let mut v = Verdict::new(
            Allow,
            Level::P7Allow,
            used.first().copied(),
            format!("P7 allow rule `{}`", names.join("` + `")),
        );
        v.rule = Some(names.join(" + "));
        Some(v)
    }

    /// P7: a hook's allow allows.
    fn hook_allow(&self) -> Option<Verdict> {
        let HookOpinion::Allow(reason) = &self.q.hook else {
            return None;
        };
        Some(Verdict::new(
            Allow,
            Level::P7Allow,
            None,
            format!("P7 hook allow: {reason}"),
        ))
    }

    /// P8: what the mode does with this kind of tool when nothing else decided.
    fn implicit(&self) -> Verdict {
        let (mode, kind) = (self.mode, self.q.kind);
        let implicit = match (mode, kind) {
            (PermissionMode::BypassPermissions, _) => Allow,
            (_, ToolKind::ReadOnly) => Allow,
            (PermissionMode::AcceptEdits, ToolKind::Edit) => Allow,
            _ => Ask,
        };
        let explain = format!(
            "P8 implicit: mode {mode} {} {kind:?} tools",
            if implicit == Allow {
                "allows"
            } else {
                "asks for"
            },
        );
        let v = Verdict::new(implicit, Level::P8Implicit, None, explain);
        if implicit == Ask {
            mode_adjusts_ask(v, mode)
        } else {
            v
        }
    }
}

/// `dontAsk` turns an Ask into a Deny; `bypassPermissions` into an Allow.
fn mode_adjusts_ask(mut v: Verdict, mode: PermissionMode) -> Verdict {
    match mode {
        PermissionMode::DontAsk => {
            v.decision = PermissionDecision::Deny;
            v.source = Some(DenialSource::Mode);
            v.explain = format!("{} → denied by mode dontAsk", v.explain);
        }
        PermissionMode::BypassPermissions => {
            v.decision = PermissionDecision::Allow;
            v.explain = format!("{} → allowed by mode bypassPermissions", v.explain);
        }
        _ => {}
    }
    v
}

enum Msg {
    AddSessionRules(String, RuleSet, oneshot::Sender<()>),
    SetMode(String, PermissionMode, oneshot::Sender<()>),
    ForgetSession(String),
    PathArguments(String, Vec<String>, oneshot::Sender<()>),
    /// Panics in the actor (tests of its supervision).
    #[cfg(test)]
    Panic,
}

/// The permission service actor.
pub struct PermissionService;

impl PermissionService {
    /// Starts the actor on the current runtime (supervised on its own: a panic is logged and
    /// the actor restarts with its rules) and returns its handle. An [`Agent`](crate::Agent)
    /// spawns its service on its runtime's task tracker instead, under the runtime's supervisor.
    pub fn spawn(config: PermissionConfig) -> PermissionHandle {
        let (handle, fut) = Self::pair(config);
        tokio::spawn(fut);
        handle
    }

    /// The handle and the actor's loop as a future, for tests and custom executors (ACT-4).
    pub fn pair(
        config: PermissionConfig,
    ) -> (
        PermissionHandle,
        impl std::future::Future<Output = ()> + Send,
    ) {
        let supervisor = Supervisor::detached();
        let (handle, actor) = Self::actor(config, supervisor.clone());
        let fut = supervise(actor, supervisor, KillSwitch::default().watch());
        (handle, fut)
    }

    /// The handle and the actor, not yet spawned; panics in its evaluation go to `supervisor`.
    pub(crate) fn actor(
        config: PermissionConfig,
        supervisor: Supervisor,
    ) -> (PermissionHandle, PermissionActor) {
        let (tx, rx) = mpsc::channel::<Msg>(256);
        let stop = CancellationToken::new();
        let published = Arc::new(Published {
            global: ArcSwap::from_pointee(Evaluator {
                config,
                path_arguments: HashMap::new(),
            }),
            sessions: DashMap::new(),
            supervisor,
        });
        let handle = PermissionHandle {
            tx,
            stop: stop.clone(),
            published: published.clone(),
        };
        let actor = PermissionActor {
            published,
            rx,
            stop,
        };
        (handle, actor)
    }
}

/// The permission service's actor: the one writer of the published rules (session rules,
/// modes, declared path fields); serves `stop` before any queued change. Checks do not go
/// through it: they read the published rules in the caller's task. A panic of the loop
/// restarts it with the rules kept.
pub(crate) struct PermissionActor {
    published: Arc<Published>,
    rx: mpsc::Receiver<Msg>,
    stop: CancellationToken,
}

impl Actor for PermissionActor {
    const KIND: ActorKind = ActorKind::Permission;
    const ON_PANIC: OnPanic = OnPanic::Restart;

    fn name(&self) -> String {
        "permission".to_owned()
    }

    async fn run(&mut self) {
        loop {
            let msg = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                msg = self.rx.recv() => msg,
            };
            let Some(msg) = msg else { return };
            self.serve(msg);
        }
    }
}

impl PermissionActor {
    fn serve(&mut self, msg: Msg) {
        let published = &self.published;
        match msg {
            Msg::AddSessionRules(id, rules, reply) => {
                published.update_session(id, |s| {
                    s.rules.deny.extend(rules.deny);
                    s.rules.ask.extend(rules.ask);
                    s.rules.allow.extend(rules.allow);
                });
                let _ = reply.send(());
            }
            Msg::SetMode(id, mode, reply) => {
                published.update_session(id, |s| s.mode = Some(mode));
                let _ = reply.send(());
            }
            Msg::ForgetSession(id) => {
                published.sessions.remove(&id);
            }
            Msg::PathArguments(tool, fields, reply) => {
                let mut global = Evaluator::clone(&published.global.load());
                global.path_arguments.insert(tool, fields);
                published.global.store(Arc::new(global));
                let _ = reply.send(());
            }
            #[cfg(test)]
            Msg::Panic => panic!("permission actor fault injected"),
        }
    }
}

/// A cloneable handle to the permission service.
#[derive(Clone, Debug)]
pub struct PermissionHandle {
    tx: mpsc::Sender<Msg>,
    stop: CancellationToken,
    published: Arc<Published>,
}

impl PermissionHandle {
    /// Decides a query. Fail-closed: if the service cannot answer, the verdict is a Deny with
    /// source `error`.
    pub async fn check(&self, query: PermissionQuery) -> Verdict {
        if let Some(why) = self.down() {
            return Verdict::error(why);
        }
        let global = self.published.global.load();
        let session = self.published.session(&query.session_id);
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            crate::sys::panics::contained(|| global.evaluate(session.as_deref(), &query))
        }))
        .unwrap_or_else(|panic| {
            let message = panic_message(panic.as_ref());
            self.published
                .supervisor
                .report_call(ActorKind::Permission, "rules", &message);
            Verdict::error("panic while evaluating rules")
        })
    }

    /// Why the service cannot answer, if it cannot: stopped, or its actor is gone.
    fn down(&self) -> Option<&'static str> {
        if self.stop.is_cancelled() {
            Some("the permission service is stopped")
        } else if self.tx.is_closed() {
            Some("the permission service is not running")
        } else {
            None
        }
    }

    /// Adds rules to one session (P2 deny, P5 ask, session allow), e.g. "allow always".
    pub async fn add_session_rules(&self, session_id: &str, rules: RuleSet) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::AddSessionRules(session_id.to_owned(), rules, reply))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        rx.await.map_err(|_| Error::ShuttingDown)
    }

    /// Sets a session's mode.
    pub async fn set_mode(&self, session_id: &str, mode: PermissionMode) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::SetMode(session_id.to_owned(), mode, reply))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        rx.await.map_err(|_| Error::ShuttingDown)
    }

    /// Forgets a session's rules and mode.
    pub async fn forget_session(&self, session_id: &str) {
        let _ = self
            .tx
            .send(Msg::ForgetSession(session_id.to_owned()))
            .await;
    }

    /// Declares the path fields of `tool` beyond the standard ones (see
    /// [`Tool::path_arguments`](crate::Tool::path_arguments)), so that path rules check them
    /// too; an [`Agent`](crate::Agent) declares its tools' at build time.
    pub async fn declare_path_arguments(
        &self,
        tool: &str,
        fields: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        let fields = fields.into_iter().map(Into::into).collect();
        self.tx
            .send(Msg::PathArguments(tool.to_owned(), fields, reply))
            .await
            .map_err(|_| Error::ShuttingDown)?;
        rx.await.map_err(|_| Error::ShuttingDown)
    }

    /// Absolute globs of the paths that `Read` deny rules (global, tool and the session's) keep
    /// from being read, for the `bash` sandbox. Fails closed: an error when the service does not
    /// answer.
    pub async fn read_denies(&self, session_id: &str, cwd: &Path) -> Result<Vec<String>, Error> {
        if self.down().is_some() {
            return Err(Error::ShuttingDown);
        }
        let session = self.published.session(session_id);
        Ok(self
            .published
            .global
            .load()
            .read_denies(session.as_deref(), cwd))
    }

    /// Makes the actor panic (tests of its supervision).
    #[cfg(test)]
    pub(crate) async fn inject_panic(&self) {
        let _ = self.tx.send(Msg::Panic).await;
    }

    /// Stops the service (its control path, served before queued checks). Later checks deny
    /// with source `error`.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}
