//! # hookbus
//!
//! Lifecycle hooks for an LLM agent loop, as actors on tokio: the extension points around every
//! tool call, permission decision, step, compaction, subagent and session, in the style of
//! Claude Code's hooks.
//!
//! ## A tour
//!
//! * [`Bus`] is the runtime. Build it once ([`Bus::builder`]), register [`Hook`]s (answered,
//!   folded) and [`Observer`]s (fire-and-forget), or [`subscribe`](Bus::subscribe) a task of
//!   your own and read its [`Mailbox`].
//! * [`Bus::open_session`] gives a [`BusSession`]: its events are numbered and dispatched in order by
//!   the session's own actor, so independent sessions never wait for each other.
//! * [`BusSession::dispatch`] sends an [`Event`] to the hooks that match it (event index, tool
//!   filter, matcher: a hook that does not match costs no message), runs them in parallel with
//!   per-hook timeouts and failure policies, and folds their answers into an [`Outcome`] in
//!   registration order, so the result never depends on which hook finished first.
//! * Each hook method returns an action typed for its event ([`PreToolUseAction`],
//!   [`PostToolUseAction`], [`PermissionAction`], [`GateAction`]) plus common extras (context for
//!   the model, a user message, metadata, a request to stop).
//! * [`Agent`] is the embedded agent loop on top: [`Agent::builder`] assembles hooks, observers,
//!   permission rules ([`PermissionConfig`]) and an [`Approver`], a model ([`Provider`]; the
//!   deterministic [`ScriptedProvider`] plays JSON scripts) and [`Tool`]s (the workspace-confined
//!   built-ins in [`tools`], plus the `task` tool for subagents). Each [`AgentSession`] is an
//!   actor that runs turns ([`AgentSession::run_turn`] → [`TurnResult`]), fires every lifecycle
//!   event at its moment, can be cancelled, and streams its envelopes ([`AgentSession::events`]).
//! * [`claude`] runs existing Claude Code hook settings and scripts unchanged, as hooks in the
//!   same registry ([`claude::ClaudeSettings`]), and [`claude::replay`] feeds a recorded
//!   transcript through them (`hookbus replay`).
//! * [`builtins`] holds [`builtins::LoggingHook`], [`builtins::TimingHook`],
//!   [`builtins::MetricsHook`] and [`builtins::AuditLog`] (SQLite, with a durable mode);
//!   [`service`] is an axum HTTP service around an [`Agent`]; [`benchmark`] holds the benchmark
//!   scenarios and baselines of `cargo bench` and `hookbus bench`.
//! * [`BusSession::close`] dispatches `SessionEnd` last, hook by hook, after observers took every
//!   earlier event; [`Bus::shutdown`] closes everything and drains observers.
//!
//! ```
//! use hookbus::{Bus, Event, EventKind, Hook, HookCx, HookOptions, HookResult, PreToolUse,
//!               PreToolUseAction, BusSessionConfig, Decision};
//! use serde_json::json;
//!
//! struct NoRmRf;
//!
//! #[hookbus::async_trait]
//! impl Hook for NoRmRf {
//!     fn name(&self) -> &str { "no-rm-rf" }
//!     fn options(&self) -> HookOptions { HookOptions::new().events([EventKind::PreToolUse]) }
//!     async fn pre_tool_use(&self, _cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
//!         let cmd = ev.tool_input["command"].as_str().unwrap_or_default();
//!         Ok(if cmd.contains("rm -rf") {
//!             PreToolUseAction::block("rm -rf is not allowed").into()
//!         } else {
//!             PreToolUseAction::proceed().into()
//!         })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), hookbus::Error> {
//! let bus = Bus::new();
//! bus.register(NoRmRf).await?;
//! let session = bus.open_session(BusSessionConfig::new().id("s1")).await?;
//! let outcome = session
//!     .dispatch(Event::PreToolUse(PreToolUse {
//!         tool_name: "Bash".into(),
//!         tool_input: json!({ "command": "rm -rf /" }),
//!         tool_use_id: "call-1".into(),
//!     }))
//!     .await?;
//! assert_eq!(outcome.decision, Decision::Block);
//! assert_eq!(outcome.reason_text(), "rm -rf is not allowed");
//! session.close("other").await?;
//! bus.shutdown(std::time::Duration::from_secs(5)).await;
//! # Ok(())
//! # }
//! ```
//!
//! See `ARCHITECTURE.md` for where each piece lives and the invariants it keeps.

#![warn(missing_docs)]
// Non-test code handles its errors; tests may unwrap (clippy.toml).
#![warn(clippy::unwrap_used)]

mod agent;
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod benchmark;
pub mod builtins;
#[cfg(feature = "claude")]
pub mod claude;
pub mod model;
#[cfg(feature = "nats")]
pub mod nats;
pub mod permission;
pub mod prelude;
#[cfg(feature = "providers")]
pub mod providers;
pub mod runtime;
#[cfg(feature = "service")]
pub mod service;
mod sys;

#[cfg(test)]
mod supervision_tests;

// The README's Rust blocks compile as doctests (with the default features they use).
#[cfg(all(doctest, feature = "claude", feature = "audit"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use agent::{
    system_reminder, tools, Agent, AgentBuilder, AgentSession, CallResult, CallStatus, Limits,
    Message, ModelRequest, ModelResponse, Pipeline, Provider, ProviderError, Role, Script,
    ScriptCall, ScriptError, ScriptTurn, ScriptedProvider, SessionOptions, SessionProvider,
    TaskTool, TerminalReason, Tool, ToolCall, ToolCx, ToolError, ToolSpec, TurnMetrics, TurnResult,
    Usage, COMPACTION_PROMPT, DEFAULT_APPROVAL_TIMEOUT,
};
pub use async_trait::async_trait;
pub use model::{
    bounds, rule, Action, ActorFailure, ActorKind, ArgPattern, Attributed, CircuitBreaker,
    CompactTrigger, Decision, DenialSource, Envelope, Error, Event, EventKind, Extras, FailureKind,
    FailurePolicy, GateAction, Hook, HookCx, HookError, HookOptions, HookOutput, HookResult,
    HookRun, Interrupt, NamePattern, Notification, Outcome, PermissionAction, PermissionDecision,
    PermissionDenied, PermissionRequest, PostCompact, PostToolUse, PostToolUseAction,
    PostToolUseFailure, PreCompact, PreToolUse, PreToolUseAction, Reply, Rule, RunStatus,
    Scratchpad, SessionEnd, SessionFields, SessionSource, SessionStart, StepComplete, Stop,
    StopFailure, SubagentStart, SubagentStop, TaggedContext, ToolDecision, ToolFilter,
    UserPromptSubmit, CANCEL_GRACE,
};
pub use permission::{
    Approval, ApprovalDesk, ApprovalRequest, Approver, ChannelApprover, DeskChange, HookOpinion,
    Level, NoApprover, PermissionConfig, PermissionHandle, PermissionMode, PermissionQuery,
    PermissionService, PolicyApprover, RuleSet, TerminalApprover, ToolKind, Verdict,
};
pub use runtime::{
    ActorPanics, Bus, BusBuilder, BusSession, BusSessionConfig, Delivery, EventStream,
    HistoryStats, HookRunStream, HookRuns, LatencyStats, Mailbox, MetricsReport, MetricsSnapshot,
    Observer, ObserverOptions, ReplySlot, ShutdownReport, Subscription, DEFAULT_ENQUEUE_WAIT,
    DEFAULT_HOOK_MAILBOX, DEFAULT_HOOK_TIMEOUT, DEFAULT_OBSERVER_MAILBOX,
    DEFAULT_SESSION_END_GRACE, DEFAULT_STREAM_BUFFER,
};
pub use sandbox::SandboxPolicy;
pub use sys::{panic_is_contained, sandbox};
pub use tokio_util::sync::CancellationToken;

/// The bus session handle under its former name.
#[deprecated(
    since = "0.2.0",
    note = "renamed to `BusSession` (an `AgentSession` is the agent loop's)"
)]
pub type Session = BusSession;
/// The bus session configuration under its former name.
#[deprecated(since = "0.2.0", note = "renamed to `BusSessionConfig`")]
pub type SessionConfig = BusSessionConfig;
