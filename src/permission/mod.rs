//! The permission service: rules, modes and their precedence (P0–P8), session rules and
//! allow-always, hook opinions, and the [`Approver`]s that answer an `ask` (terminal, channel,
//! policy, none), all failing closed.
//!
//! The service's actor applies rule changes and publishes them; a [`PermissionHandle`] checks a
//! call in the caller's task against what is published. This layer knows the model (rules,
//! events) and the actor shape, and nothing of the bus, sessions or the agent loop.

pub(crate) mod approver;
pub(crate) mod service;

pub use approver::{
    Approval, ApprovalDesk, ApprovalRequest, Approver, ChannelApprover, DeskChange, NoApprover,
    PolicyApprover, TerminalApprover,
};
pub use service::{
    HookOpinion, Level, PermissionConfig, PermissionHandle, PermissionMode, PermissionQuery,
    PermissionService, RuleSet, ToolKind, Verdict,
};
