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
//! * [`Bus::open_session`] gives a [`Session`]: its events are numbered and dispatched in order by
//!   the session's own actor, so independent sessions never wait for each other.
//! * [`Session::dispatch`] sends an [`Event`] to the hooks that match it (event index, tool
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
//! * [`Session::close`] dispatches `SessionEnd` last, hook by hook, after observers took every
//!   earlier event; [`Bus::shutdown`] closes everything and drains observers.
//!
//! ```
//! use hookbus::{Bus, Event, EventKind, Hook, HookCx, HookOptions, HookResult, PreToolUse,
//!               PreToolUseAction, SessionConfig, Decision};
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
//! let session = bus.open_session(SessionConfig::new().id("s1")).await?;
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

mod action;
mod actor;
mod agent;
mod approver;
#[cfg(feature = "bench")]
pub mod benchmark;
pub mod bounds;
pub mod builtins;
mod bus;
#[cfg(feature = "claude")]
pub mod claude;
mod dispatch;
mod error;
mod event;
mod event_log;
mod execution;
mod filter;
mod hook;
mod kill;
mod mailbox;
mod metrics;
mod observer;
mod outcome;
mod panics;
mod paths;
mod permission;
mod pipeline;
mod process;
mod provider;
mod registry;
pub mod rule;
pub mod sandbox;
mod scratchpad;
mod scripted;
#[cfg(feature = "service")]
pub mod service;
mod session;
mod shell;
mod tool;
pub mod tools;

pub use action::{
    Action, Extras, GateAction, HookOutput, HookResult, PermissionAction, PermissionDecision,
    PostToolUseAction, PreToolUseAction, Reply, ToolDecision,
};
pub use agent::{
    Agent, AgentBuilder, AgentSession, Limits, SessionOptions, TaskTool, TerminalReason,
    TurnMetrics, TurnResult,
};
pub use approver::{
    Approval, ApprovalDesk, ApprovalRequest, Approver, ChannelApprover, NoApprover, PolicyApprover,
    TerminalApprover,
};
pub use async_trait::async_trait;
pub use bus::{
    Bus, BusBuilder, ShutdownReport, Subscription, DEFAULT_HOOK_MAILBOX, DEFAULT_HOOK_TIMEOUT,
    DEFAULT_SESSION_END_GRACE,
};
pub use error::{Error, HookError};
pub use event::*;
pub use event_log::{EventStream, HistoryStats, HookRunStream, HookRuns, DEFAULT_STREAM_BUFFER};
pub use filter::{ArgPattern, NamePattern, ToolFilter};
pub use hook::{CircuitBreaker, FailurePolicy, Hook, HookCx, HookOptions, CANCEL_GRACE};
pub use mailbox::{Delivery, Mailbox, ReplySlot};
pub use metrics::{LatencyStats, MetricsReport, MetricsSnapshot};
pub use observer::{Observer, ObserverOptions, DEFAULT_ENQUEUE_WAIT, DEFAULT_OBSERVER_MAILBOX};
pub use outcome::{Attributed, Decision, HookRun, Outcome, RunStatus, TaggedContext};
pub use panics::panic_is_contained;
pub use permission::{
    HookOpinion, Level, PermissionConfig, PermissionHandle, PermissionMode, PermissionQuery,
    PermissionService, RuleSet, ToolKind, Verdict,
};
pub use pipeline::{system_reminder, CallResult, CallStatus, Pipeline, DEFAULT_APPROVAL_TIMEOUT};
pub use provider::{
    Message, ModelRequest, ModelResponse, Provider, ProviderError, Role, ToolSpec, Usage,
};
pub use rule::Rule;
pub use sandbox::SandboxPolicy;
pub use scratchpad::Scratchpad;
pub use scripted::{Script, ScriptCall, ScriptError, ScriptTurn, ScriptedProvider};
pub use session::{Session, SessionConfig};
pub use tokio_util::sync::CancellationToken;
pub use tool::{Tool, ToolCall, ToolCx, ToolError};
