//! The agent loop and the embedding API: [`Agent`] assembles the runtime (hooks, observers,
//! permission rules and approver, provider, tools, limits); [`AgentSession`] runs turns as an
//! actor, fires every lifecycle event at its moment (SPEC section 7) and streams them.

mod compact;
pub(crate) mod dedup;
pub(crate) mod pipeline;
pub(crate) mod provider;
mod run;
pub(crate) mod scripted;
mod task;
pub(crate) mod tool;
pub mod tools;
mod turn;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::agent::tools::builtin_tools;
use crate::model::error::Error;
use crate::model::event::SessionFields;
use crate::model::hook::Hook;
use crate::permission::approver::{Approver, NoApprover};
use crate::permission::service::{
    PermissionConfig, PermissionHandle, PermissionMode, PermissionService,
};
use crate::runtime::bus::{Bus, ShutdownReport};
use crate::runtime::event_log::{EventStream, HistoryStats, HookRunStream};
use crate::runtime::observer::Observer;
use crate::runtime::session::BusSessionConfig;
use crate::sys::sandbox::SandboxPolicy;

pub use pipeline::{system_reminder, CallResult, CallStatus, Pipeline, DEFAULT_APPROVAL_TIMEOUT};
pub use provider::{
    Message, ModelRequest, ModelResponse, Provider, ProviderError, Role, SessionProvider, ToolSpec,
    Usage, COMPACTION_PROMPT,
};
#[cfg(feature = "service")]
pub(crate) use run::cut_text;
pub use scripted::{Script, ScriptCall, ScriptError, ScriptTurn, ScriptedProvider};
pub use task::TaskTool;
pub use tool::{Tool, ToolCall, ToolCx, ToolError};
pub use turn::{TerminalReason, TurnMetrics, TurnResult};

/// The loop's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Model calls per turn (default 50).
    pub max_steps: u32,
    /// Consecutive Stop (and SubagentStop) blocks honoured per turn (default 8, LOOP-3).
    pub stop_continuations: u32,
    /// Estimated tokens above which the history is compacted (default 100,000).
    pub token_limit: u64,
    /// Messages kept verbatim by a compaction (default 4).
    pub keep_recent: usize,
    /// Envelopes a session keeps for late readers of [`AgentSession::events`] (default 10,000).
    pub event_history: usize,
    /// The most bytes (as JSON) that kept history may take (default 8 MiB); older envelopes are
    /// dropped and counted ([`AgentSession::history_stats`]).
    pub event_history_bytes: usize,
    /// Envelopes a reader of [`AgentSession::events`] may fall behind by before it skips what it
    /// missed (default [`DEFAULT_STREAM_BUFFER`](crate::DEFAULT_STREAM_BUFFER)).
    pub event_stream_buffer: usize,
    /// How deep subagents may nest (default 1: a subagent has no `task` tool).
    pub subagent_depth: u32,
    /// The most bytes of one call's result the model (and the turn's result) receives; longer
    /// results are cut with a note (default 0: no cap beyond the tools' own).
    pub tool_output_bytes: usize,
    /// The most bytes of tool results one turn keeps in all; once spent, each further result
    /// is replaced by a short note (default 0: no cap).
    pub turn_tool_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: 50,
            stop_continuations: 8,
            token_limit: 100_000,
            keep_recent: 4,
            event_history: 10_000,
            event_history_bytes: 8 << 20,
            event_stream_buffer: crate::runtime::event_log::DEFAULT_STREAM_BUFFER,
            subagent_depth: 1,
            tool_output_bytes: 0,
            turn_tool_output_bytes: 0,
        }
    }
}

/// Assembles an [`Agent`].
pub struct AgentBuilder {
    bus: Option<Bus>,
    hooks: Vec<Arc<dyn Hook>>,
    observers: Vec<Arc<dyn Observer>>,
    permissions: PermissionConfig,
    approver: Arc<dyn Approver>,
    approval_timeout: Duration,
    provider: Arc<dyn Provider>,
    tools: Vec<Arc<dyn Tool>>,
    limits: Limits,
    sandbox: Option<SandboxPolicy>,
}

impl Default for AgentBuilder {
    fn default() -> Self {
        Self {
            bus: None,
            hooks: Vec::new(),
            observers: Vec::new(),
            permissions: PermissionConfig::default(),
            approver: Arc::new(NoApprover),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            provider: Arc::new(ScriptedProvider::new()),
            tools: builtin_tools(),
            limits: Limits::default(),
            sandbox: None,
        }
    }
}

impl AgentBuilder {
    /// Use this bus (default: a new [`Bus`] with default settings).
    pub fn bus(mut self, bus: Bus) -> Self {
        self.bus = Some(bus);
        self
    }
    /// Registers a global hook at build time.
    pub fn hook(self, hook: impl Hook) -> Self {
        self.hook_arc(Arc::new(hook))
    }
    /// Registers a shared global hook at build time.
    pub fn hook_arc(mut self, hook: Arc<dyn Hook>) -> Self {
        self.hooks.push(hook);
        self
    }
    /// Registers a global observer at build time.
    pub fn observer(self, observer: impl Observer) -> Self {
        self.observer_arc(Arc::new(observer))
    }
    /// Registers a shared global observer at build time.
    pub fn observer_arc(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observers.push(observer);
        self
    }
    /// Permission rules and default mode.
    pub fn permissions(mut self, config: PermissionConfig) -> Self {
        self.permissions = config;
        self
    }
    /// Who answers permission asks (default: [`NoApprover`], which denies every ask with source
    /// `no_approver`).
    pub fn approver(self, approver: impl Approver) -> Self {
        self.approver_arc(Arc::new(approver))
    }
    /// A shared approver.
    pub fn approver_arc(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }
    /// How long the approver may take (default 60 s; then Deny with source `timeout`). At most
    /// [`MAX_TIMEOUT`](crate::model::bounds::MAX_TIMEOUT) (24 h; longer is clamped).
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = crate::model::bounds::clamp_timeout(timeout);
        self
    }
    /// The model (default: an empty [`ScriptedProvider`]).
    pub fn provider(self, provider: impl Provider) -> Self {
        self.provider_arc(Arc::new(provider))
    }
    /// A shared model.
    pub fn provider_arc(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = provider;
        self
    }
    /// Adds a tool (replacing a tool of the same name). The built-in tools are there by default.
    pub fn tool(self, tool: impl Tool) -> Self {
        self.tool_arc(Arc::new(tool))
    }
    /// Adds a shared tool (replacing a tool of the same name).
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(tool);
        self
    }
    /// Removes every tool added so far, the built-ins included.
    pub fn clear_tools(mut self) -> Self {
        self.tools.clear();
        self
    }
    /// The loop's limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
    /// Changes some of the loop's limits in place, keeping the others.
    pub fn with_limits(mut self, change: impl FnOnce(&mut Limits)) -> Self {
        change(&mut self.limits);
        self
    }
    /// Model calls per turn.
    pub fn max_steps(mut self, n: u32) -> Self {
        self.limits.max_steps = n;
        self
    }
    /// The sandbox policy of every session that does not set its own (default: each tool's
    /// own, which for the `bash` tool is [`SandboxPolicy::Workspace`]).
    pub fn sandbox(mut self, policy: SandboxPolicy) -> Self {
        self.sandbox = Some(policy);
        self
    }

    /// Starts the permission service, registers hooks and observers, and returns the handle.
    pub async fn build(self) -> Result<Agent, Error> {
        let bus = self.bus.unwrap_or_default();
        for hook in self.hooks {
            bus.register_arc(hook).await?;
        }
        for observer in self.observers {
            bus.observe_arc(observer).await?;
        }
        let permissions = self.permissions;
        let names: Vec<&str> = self
            .tools
            .iter()
            .map(|t| t.name())
            .chain(std::iter::once("task"))
            .collect();
        let warnings = permissions.unknown_tool_warnings(names.iter().copied());
        for w in &warnings {
            tracing::warn!("{w}");
        }
        let (service, actor) = PermissionService::actor(permissions, bus.core.supervisor.clone());
        bus.core.spawn(actor);
        for tool in &self.tools {
            let declared = tool.path_arguments();
            if !declared.is_empty() {
                service
                    .declare_path_arguments(tool.name(), declared.iter().copied())
                    .await?;
            }
        }
        Ok(Agent {
            inner: Arc::new_cyclic(|weak| AgentInner {
                bus,
                warnings,
                sandbox: self.sandbox,
                permissions: service,
                approver: self.approver,
                approval_timeout: self.approval_timeout,
                provider: self.provider,
                tools: self.tools,
                task: Arc::new(TaskTool::new(weak.clone())),
                limits: self.limits,
                sessions: DashMap::new(),
                next_agent: AtomicU64::new(1),
            }),
        })
    }
}

pub(crate) struct AgentInner {
    pub bus: Bus,
    pub warnings: Vec<String>,
    pub sandbox: Option<SandboxPolicy>,
    pub permissions: PermissionHandle,
    pub approver: Arc<dyn Approver>,
    pub approval_timeout: Duration,
    pub provider: Arc<dyn Provider>,
    pub tools: Vec<Arc<dyn Tool>>,
    pub task: Arc<TaskTool>,
    pub limits: Limits,
    pub sessions: DashMap<String, SessionEntry>,
    pub next_agent: AtomicU64,
}

/// The embedded runtime: a cloneable handle that opens agent sessions.
///
/// ```no_run
/// use hookbus::{Agent, ScriptedProvider, ScriptTurn, SessionOptions, TerminalReason};
/// use serde_json::json;
///
/// # async fn demo() -> Result<(), hookbus::Error> {
/// let provider = ScriptedProvider::new()
///     .turn(ScriptTurn::text("Listing.").call("list_dir", json!({})))
///     .turn(ScriptTurn::text("Done."));
/// let agent = Agent::builder().provider(provider).build().await?;
/// let session = agent.open_session(SessionOptions::new("/tmp/ws").id("s1")).await?;
/// let result = session.run_turn("What is in here?").await?;
/// assert_eq!(result.reason, TerminalReason::Completed);
/// session.close().await?;
/// agent.shutdown(std::time::Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

/// How to open an agent session.
#[derive(Clone)]
pub struct SessionOptions {
    /// The id; generated when `None`.
    pub id: Option<String>,
    /// The workspace directory (must exist): the tools' cwd and confinement root.
    pub workspace: PathBuf,
    /// The permission mode (default: the service's default mode).
    pub permission_mode: Option<PermissionMode>,
    /// A model for this session only.
    pub provider: Option<Arc<dyn Provider>>,
    /// A system prompt placed first in the conversation.
    pub system_prompt: Option<String>,
    /// The sandbox policy of this session's `bash` commands (default: the agent's, else the
    /// tool's own, [`SandboxPolicy::Workspace`]). [`SandboxPolicy::Unconfined`] is the
    /// explicit opt-out.
    pub sandbox: Option<SandboxPolicy>,
}

impl SessionOptions {
    /// A session working in `workspace`.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            id: None,
            workspace: workspace.into(),
            permission_mode: None,
            provider: None,
            system_prompt: None,
            sandbox: None,
        }
    }
    /// Use this id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
    /// Use this permission mode.
    pub fn permission_mode(mut self, mode: PermissionMode) -> Self {
        self.permission_mode = Some(mode);
        self
    }
    /// Use this model for this session.
    pub fn provider(mut self, provider: impl Provider) -> Self {
        self.provider = Some(Arc::new(provider));
        self
    }
    /// Start the conversation with this system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }
    /// Confine this session's `bash` commands with this policy.
    pub fn sandbox(mut self, policy: SandboxPolicy) -> Self {
        self.sandbox = Some(policy);
        self
    }
}

/// Where a session sits: the main agent, or a subagent of a parent.
#[derive(Clone, Default)]
pub(crate) struct Lineage {
    pub parent: Option<String>,
    pub agent_id: Option<String>,
    pub agent_type: Option<String>,
    pub depth: u32,
}

impl Agent {
    /// A builder with the built-in tools, a deny-all approver and an empty scripted provider.
    pub fn builder() -> AgentBuilder {
        AgentBuilder::default()
    }

    /// The bus the sessions dispatch on (register more hooks and observers here).
    pub fn bus(&self) -> &Bus {
        &self.inner.bus
    }

    /// The permission service.
    pub fn permissions(&self) -> &PermissionHandle {
        &self.inner.permissions
    }

    /// What was found wrong with the configuration at build time (each also logged with
    /// `tracing`): permission rules that name no known tool, and so could never match.
    pub fn warnings(&self) -> &[String] {
        &self.inner.warnings
    }

    /// An open session by id.
    pub fn session(&self, id: &str) -> Option<AgentSession> {
        self.inner.sessions.get(id).and_then(|s| s.handle())
    }

    /// Ids of the open agent sessions.
    pub fn sessions(&self) -> Vec<String> {
        self.inner
            .sessions
            .iter()
            .map(|s| s.key().clone())
            .collect()
    }

    /// Opens a session: fires `SessionStart` (source `startup`) and waits for turns.
    pub async fn open_session(&self, options: SessionOptions) -> Result<AgentSession, Error> {
        open(&self.inner, options, Lineage::default()).await
    }

    /// Cancels running turns, closes every session (`SessionEnd` reason `shutdown`), stops the
    /// permission service and shuts the bus down within `deadline`.
    pub async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        let sessions: Vec<AgentSession> = self
            .inner
            .sessions
            .iter()
            .filter_map(|s| s.handle())
            .collect();
        let closing = sessions.iter().map(|s| async move {
            s.cancel();
            let _ = tokio::time::timeout(deadline, s.close_with("shutdown")).await;
        });
        futures_util::future::join_all(closing).await;
        self.inner.permissions.stop();
        self.inner.bus.shutdown(deadline).await
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("sessions", &self.inner.sessions.len())
            .finish()
    }
}

pub(crate) async fn open(
    inner: &Arc<AgentInner>,
    options: SessionOptions,
    lineage: Lineage,
) -> Result<AgentSession, Error> {
    let workspace = options.workspace.canonicalize().map_err(|e| Error::Io {
        path: options.workspace.display().to_string(),
        message: format!("the workspace is not usable: {e}"),
    })?;
    let mode = options.permission_mode;
    let mut config = BusSessionConfig {
        id: options.id,
        parent: lineage.parent.clone(),
        fields: SessionFields {
            cwd: workspace.display().to_string(),
            permission_mode: mode.map(|m| m.as_str().to_owned()),
            agent_id: lineage.agent_id.clone(),
            agent_type: lineage.agent_type.clone(),
            ..SessionFields::default()
        },
        history: inner.limits.event_history,
        history_bytes: inner.limits.event_history_bytes,
        stream_buffer: inner.limits.event_stream_buffer,
    };
    if config.id.is_none() {
        config.id = lineage.agent_id.clone();
    }
    let session = inner.bus.open_session(config).await?;
    let id = session.id().to_owned();
    if let Some(mode) = mode {
        inner.permissions.set_mode(&id, mode).await?;
    }
    let provider = options.provider.unwrap_or_else(|| inner.provider.clone());
    // Hooks that ask the session's model find it here (before SessionStart fires).
    session
        .scratchpad()
        .insert(SessionProvider::KEY, SessionProvider(provider.clone()));
    let shared = Arc::new(LoopShared {
        sandbox: options.sandbox.or(inner.sandbox),
        id: id.clone(),
        session,
        workspace,
        provider,
        lineage,
        mode,
        cancel: Mutex::new(CancellationToken::new()),
        turn: AtomicU32::new(0),
        step: AtomicU32::new(0),
        failure: std::sync::OnceLock::new(),
    });
    let (tx, rx) = mpsc::channel(16);
    let handle = AgentSession {
        shared: shared.clone(),
        tx,
    };
    inner.sessions.insert(
        id,
        SessionEntry {
            shared: shared.clone(),
            tx: handle.tx.downgrade(),
        },
    );
    let session = run::SessionLoop::new(inner.clone(), shared, options.system_prompt);
    inner.bus.core.spawn(run::AgentLoop::new(session, rx));
    Ok(handle)
}

/// The agent's record of an open session; weak, so that it never keeps the loop alive (ACT-5).
pub(crate) struct SessionEntry {
    pub shared: Arc<LoopShared>,
    pub tx: mpsc::WeakSender<LoopMsg>,
}

impl SessionEntry {
    fn handle(&self) -> Option<AgentSession> {
        self.tx.upgrade().map(|tx| AgentSession {
            shared: self.shared.clone(),
            tx,
        })
    }
}

/// State a session's handles share with its loop actor.
pub(crate) struct LoopShared {
    pub id: String,
    pub sandbox: Option<SandboxPolicy>,
    pub session: crate::runtime::session::BusSession,
    pub workspace: PathBuf,
    pub provider: Arc<dyn Provider>,
    pub lineage: Lineage,
    pub mode: Option<PermissionMode>,
    /// Cancels every turn submitted before the next `cancel()`.
    pub cancel: Mutex<CancellationToken>,
    pub turn: AtomicU32,
    pub step: AtomicU32,
    /// Set when the loop panicked and stopped.
    pub failure: std::sync::OnceLock<crate::model::error::ActorFailure>,
}

pub(crate) enum LoopMsg {
    Turn {
        prompt: String,
        cancel: CancellationToken,
        reply: oneshot::Sender<TurnResult>,
    },
    Compact {
        instructions: Option<String>,
        reply: oneshot::Sender<bool>,
    },
    Messages {
        reply: oneshot::Sender<Vec<Message>>,
    },
    Close {
        reason: String,
        reply: oneshot::Sender<()>,
    },
    /// Panics in the loop (tests of its supervision).
    #[cfg(test)]
    Panic,
}

/// A cloneable handle to one agent session, served by its loop actor.
#[derive(Clone)]
pub struct AgentSession {
    shared: Arc<LoopShared>,
    tx: mpsc::Sender<LoopMsg>,
}

impl AgentSession {
    /// The session's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The workspace (canonical).
    pub fn workspace(&self) -> &std::path::Path {
        &self.shared.workspace
    }

    /// The bus session (dispatch events of your own, register session hooks).
    pub fn session(&self) -> &crate::runtime::session::BusSession {
        &self.shared.session
    }

    /// Inside a subagent: its parent session's id.
    pub fn parent_id(&self) -> Option<&str> {
        self.shared.lineage.parent.as_deref()
    }

    /// Runs one turn with this user prompt and returns how it ended. Turns of one session run
    /// one after another.
    pub async fn run_turn(&self, prompt: impl Into<String>) -> Result<TurnResult, Error> {
        let cancel = self.shared.cancel.lock().clone();
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::Turn {
            prompt: prompt.into(),
            cancel,
            reply,
        })
        .await?;
        rx.await.map_err(|_| self.closed())
    }

    /// Cancels the running turn and any turn already submitted (LOOP-6): `Interrupt` fires,
    /// running tools and hooks see their cancellation token, further tool calls of the turn are
    /// refused, and the turn ends with reason `cancelled`. Turns submitted later run normally.
    pub fn cancel(&self) {
        let old = std::mem::take(&mut *self.shared.cancel.lock());
        old.cancel();
        self.shared.session.cancel_turn();
    }

    /// Compacts the history now (trigger `manual`); false when a PreCompact gate blocked it or
    /// there was nothing to compact.
    pub async fn compact(&self, instructions: Option<String>) -> Result<bool, Error> {
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::Compact {
            instructions,
            reply,
        })
        .await?;
        rx.await.map_err(|_| self.closed())
    }

    /// The whole conversation so far.
    pub async fn messages(&self) -> Result<Vec<Message>, Error> {
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::Messages { reply }).await?;
        rx.await.map_err(|_| self.closed())
    }

    /// A live stream of the session's lifecycle envelopes, in order, from `SessionStart` (the
    /// last [`Limits::event_history`] of them) to `SessionEnd`.
    pub fn events(&self) -> EventStream {
        self.shared.session.events()
    }

    /// What the hooks did with each of the session's events, as each dispatch finishes (see
    /// [`BusSession::hook_runs`](crate::BusSession::hook_runs)).
    pub fn hook_runs(&self) -> HookRunStream {
        self.shared.session.hook_runs()
    }

    /// What the session's kept history holds and has dropped to stay within
    /// [`Limits::event_history`] and [`Limits::event_history_bytes`].
    pub fn history_stats(&self) -> HistoryStats {
        self.shared.session.history_stats()
    }

    /// Ends the session after the turns already submitted: `SessionEnd` with reason `other`.
    pub async fn close(&self) -> Result<(), Error> {
        self.close_with("other").await
    }

    /// Ends the session with this `SessionEnd` reason.
    pub async fn close_with(&self, reason: &str) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::Close {
            reason: reason.to_owned(),
            reply,
        })
        .await?;
        rx.await.map_err(|_| self.closed())
    }

    async fn send(&self, msg: LoopMsg) -> Result<(), Error> {
        self.tx.send(msg).await.map_err(|_| self.closed())
    }

    /// Makes the loop panic (tests of its supervision).
    #[cfg(test)]
    pub(crate) async fn inject_panic(&self) {
        let _ = self.tx.send(LoopMsg::Panic).await;
    }

    /// Why a message got no answer: the loop failed, or the session is closed.
    fn closed(&self) -> Error {
        match self.shared.failure.get() {
            Some(failure) => Error::ActorFailed(Box::new(failure.clone())),
            None => Error::SessionClosed(self.shared.id.clone()),
        }
    }
}

impl std::fmt::Debug for AgentSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSession")
            .field("id", &self.shared.id)
            .finish()
    }
}

pub(crate) fn next_agent_id(inner: &AgentInner, parent: &str) -> String {
    format!(
        "{parent}/agent-{}",
        inner.next_agent.fetch_add(1, Ordering::Relaxed)
    )
}
