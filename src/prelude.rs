//! The names most hook and embedding code needs, for a glob import:
//!
//! ```
//! use hookbus::prelude::*;
//! ```

pub use crate::agent::{Agent, AgentSession, SessionOptions, Tool, ToolCall, ToolCx, ToolError};
pub use crate::model::{
    Decision, Error, Event, EventKind, GateAction, Hook, HookCx, HookOptions, HookResult, Outcome,
    PermissionAction, PostToolUseAction, PreToolUseAction,
};
pub use crate::permission::{PermissionConfig, PermissionMode};
pub use crate::runtime::{Bus, BusSession, BusSessionConfig, Observer, ObserverOptions};
pub use async_trait::async_trait;
