//! Errors of the runtime's API, and the error type hooks return.

use std::fmt;

use serde::Serialize;

/// What went wrong in a call to the runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event name that is not one of the 17.
    #[error("unknown event name `{0}`")]
    UnknownEvent(String),
    /// A hook or observer name already used in the same scope.
    #[error("a hook named `{0}` is already registered in this scope")]
    DuplicateName(String),
    /// `after` names a hook that is not registered.
    #[error("hook `{hook}` is declared to run after `{missing}`, which is not registered")]
    UnknownDependency {
        /// The hook being registered.
        hook: String,
        /// The name it depends on.
        missing: String,
    },
    /// `after` dependencies form a cycle.
    #[error("hook dependencies form a cycle: {}", .0.join(" -> "))]
    DependencyCycle(Vec<String>),
    /// A regular expression in a filter did not compile.
    #[error("invalid regex `{pattern}`: {message}")]
    InvalidRegex {
        /// The pattern as written.
        pattern: String,
        /// The compiler's message.
        message: String,
    },
    /// A permission rule or argument pattern that does not parse.
    #[error("invalid rule `{rule}` at column {column}: {message}")]
    InvalidRule {
        /// The rule as written.
        rule: String,
        /// 1-based column of the fault.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// No hook with that name in that scope.
    #[error("no hook named `{0}` is registered in this scope")]
    NoSuchHook(String),
    /// The session id is not open.
    #[error("no open session `{0}`")]
    NoSuchSession(String),
    /// A session with that id is already open.
    #[error("a session `{0}` is already open")]
    SessionExists(String),
    /// An actor this call depends on panicked and stopped (a session's dispatcher, an agent loop),
    /// or dropped the call when it panicked (the registry, the permission service).
    #[error("{0}")]
    ActorFailed(Box<ActorFailure>),
    /// The session has ended; it takes no more events.
    #[error("session `{0}` is closed")]
    SessionClosed(String),
    /// No pending approval has that id.
    #[error("no pending approval with id {0}")]
    NoSuchApproval(u64),
    /// No tool of that name is registered.
    #[error("no tool named `{0}`")]
    NoSuchTool(String),
    /// A JSON document (script, settings, request body) that does not parse.
    #[error("{origin}:{line}:{column}: {message}")]
    InvalidJson {
        /// Where it came from (a file path, or a description).
        origin: String,
        /// 1-based line of the fault.
        line: usize,
        /// 1-based column of the fault.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A line of a transcript that is not what a transcript line must be.
    #[error("{path}:{line}: {message}")]
    InvalidTranscript {
        /// The transcript file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A path that leaves the workspace it must stay in.
    #[error("path `{path}` is outside the workspace {workspace}")]
    OutsideWorkspace {
        /// The path as given.
        path: String,
        /// The workspace.
        workspace: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The system's message.
        message: String,
    },
    /// An audit database that cannot be used (not an audit log, a newer schema, a failed write).
    #[error("audit log {path}: {message}")]
    Audit {
        /// The database file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A settings file key whose value is not what it must be.
    #[error("{file}: `{key}`: {message}")]
    InvalidSetting {
        /// The settings file.
        file: String,
        /// The JSON path of the key (`permissions.deny[2]`).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The runtime is shutting down or has shut down.
    #[error("the runtime is shutting down")]
    ShuttingDown,
}

impl Error {
    /// A JSON parse error of the document from `origin`, located by line and column.
    pub fn json(origin: &str, e: &serde_json::Error) -> Self {
        let text = e.to_string();
        // serde_json ends its message with the location, which is reported separately.
        let message = match text.rfind(" at line ") {
            Some(i) => text[..i].to_owned(),
            None => text,
        };
        Self::InvalidJson {
            origin: origin.to_owned(),
            line: e.line(),
            column: e.column(),
            message,
        }
    }
}

/// The error a hook returns. Whatever the hook's failure policy says happens next (FL-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    message: String,
}

impl HookError {
    /// A hook error with this message.
    pub fn new(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HookError {}

impl From<String> for HookError {
    fn from(message: String) -> Self {
        Self { message }
    }
}

impl From<&str> for HookError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

impl From<std::io::Error> for HookError {
    fn from(e: std::io::Error) -> Self {
        Self::new(e)
    }
}

impl From<serde_json::Error> for HookError {
    fn from(e: serde_json::Error) -> Self {
        Self::new(e)
    }
}

/// Which of the runtime's actors (or the caller's code it was serving) panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ActorKind {
    /// The registry actor, which publishes the hook snapshots.
    Registry,
    /// A session's dispatcher, which dispatches its events in order.
    Session,
    /// A hook's actor, or a hook call.
    Hook,
    /// An observer's actor, or an observer call.
    Observer,
    /// The permission service.
    Permission,
    /// An agent session's loop (provider, tools, lifecycle events).
    AgentLoop,
}

impl ActorKind {
    /// Every kind, in a fixed order (the metrics' index).
    pub const ALL: [ActorKind; 6] = [
        ActorKind::Registry,
        ActorKind::Session,
        ActorKind::Hook,
        ActorKind::Observer,
        ActorKind::Permission,
        ActorKind::AgentLoop,
    ];

    /// The kind's name, as logs and metrics show it.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Registry => "registry",
            ActorKind::Session => "session",
            ActorKind::Hook => "hook",
            ActorKind::Observer => "observer",
            ActorKind::Permission => "permission",
            ActorKind::AgentLoop => "agent_loop",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ActorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A panic in one of the runtime's actors, or in a caller's call one of them served, as the
/// supervisor reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActorFailure {
    /// Which kind of actor.
    pub kind: ActorKind,
    /// Which one: the hook's or observer's name, the session's id, `registry`, `permission`.
    pub name: String,
    /// The panic's message.
    pub message: String,
    /// Whether the actor serves on: restarted with its state, or the panic was inside one
    /// call it served. `false`: the actor stopped and its session failed.
    pub serving: bool,
}

impl fmt::Display for ActorFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} actor `{}` panicked: {}",
            self.kind, self.name, self.message
        )
    }
}
