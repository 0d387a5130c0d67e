//! The vocabulary every layer shares: the lifecycle [events](Event), the typed
//! [actions](Action) a hook answers with, the folded [`Outcome`], the [`Hook`] trait and its
//! options, tool filters, permission [rules](rule), errors and bounds.
//!
//! This layer does not know about tasks, channels or sessions: nothing here spawns, sends or
//! waits. The runtime moves these values; the permission service and the agent loop read them.

pub(crate) mod action;
pub mod bounds;
pub(crate) mod error;
pub(crate) mod event;
pub(crate) mod filter;
pub(crate) mod hook;
pub(crate) mod outcome;
pub mod rule;
pub(crate) mod scratchpad;
pub(crate) mod shell;

pub use action::{
    Action, Extras, GateAction, HookOutput, HookResult, PermissionAction, PermissionDecision,
    PostToolUseAction, PreToolUseAction, Reply, ToolDecision,
};
pub use error::{ActorFailure, ActorKind, Error, HookError};
pub use event::{
    CompactTrigger, DenialSource, Envelope, Event, EventKind, FailureKind, Interrupt, Notification,
    PermissionDenied, PermissionRequest, PostCompact, PostToolUse, PostToolUseFailure, PreCompact,
    PreToolUse, SessionEnd, SessionFields, SessionSource, SessionStart, StepComplete, Stop,
    StopFailure, SubagentStart, SubagentStop, UserPromptSubmit,
};
pub use filter::{ArgPattern, NamePattern, ToolFilter};
pub use hook::{CircuitBreaker, FailurePolicy, Hook, HookCx, HookOptions, CANCEL_GRACE};
pub use outcome::{Attributed, Decision, HookRun, Outcome, RunStatus, TaggedContext};
pub use rule::Rule;
pub use scratchpad::Scratchpad;
