//! [`ScriptedProvider`]: a deterministic model for tests, the demo, benches and users' own
//! scripted runs, built in code or loaded from a JSON script file.
//!
//! # Script file format
//!
//! ```json
//! {
//!   "model": "scripted",
//!   "prompts": ["Run main.py and write a summary"],
//!   "files": { "main.py": "print(6 * 7)\n" },
//!   "turns": [
//!     { "text": "Reading it.", "tool_calls": [{ "name": "read_file", "input": { "path": "main.py" } }] },
//!     { "text": "Running it.", "tool_calls": [{ "id": "run-1", "name": "bash", "input": { "command": "python3 main.py" } }] },
//!     { "text": "It prints 42.", "delay_ms": 20, "usage": { "input_tokens": 900, "output_tokens": 12 } },
//!     { "error": { "kind": "rate_limit", "message": "slow down" } }
//!   ],
//!   "agents": { "general-purpose": [ { "text": "Child done." } ] }
//! }
//! ```
//!
//! * `turns`: the model's answers in order, one per model call: `text`, `tool_calls` (each with
//!   `name`, `input`, and an optional `id`; missing ids are `toolu_01`, `toolu_02`, ... per
//!   session), an optional `delay_ms` (the call takes that long; cancellation cuts it short),
//!   optional `usage` (else estimated from the text), or `error` instead of an answer (`kind` is a
//!   `StopFailure` kind such as `rate_limit`, `overloaded`, `server_error`).
//! * `agents`: scripts for subagents started by the `task` tool, by `subagent_type`; `default`
//!   serves types with no script of their own.
//! * `prompts` and `files` are read by `hookbus demo --script`: the user prompts of the run (one
//!   turn each) and files written into the workspace before it starts.
//! * Each session walks the script from the start with its own cursor. A session that runs past
//!   the end gets an empty answer with no tool calls, so the model stops.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::provider::{ModelRequest, ModelResponse, Provider, ProviderError, Usage};
use crate::agent::tool::ToolCall;
use crate::model::error::Error;

/// A whole script: the main agent's answers, subagents' answers, and the run's prompts and files.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The model name reported in `SessionStart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// User prompts, one per turn (read by `hookbus demo --script`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<String>,
    /// Files to create in the workspace before the run (path → content).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// The main agent's answers, one per model call.
    #[serde(default, alias = "steps")]
    pub turns: Vec<ScriptTurn>,
    /// Subagents' answers by agent type (`default` for any other type).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, Vec<ScriptTurn>>,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// The call id; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool.
    pub name: String,
    /// Its input.
    #[serde(default = "empty_object")]
    pub input: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// A scripted provider failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptError {
    /// A `StopFailure` kind (`rate_limit`, `overloaded`, `server_error`, ...).
    pub kind: String,
    /// The message.
    #[serde(default)]
    pub message: String,
}

/// One model answer of a script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    /// The model's text.
    #[serde(default)]
    pub text: String,
    /// The tool calls, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptCall>,
    /// How long the call takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Token usage to report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Fail instead of answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ScriptError>,
}

impl ScriptTurn {
    /// An answer with this text and no tool call.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// Adds a tool call with a generated id.
    pub fn call(mut self, name: impl Into<String>, input: Value) -> Self {
        self.tool_calls.push(ScriptCall {
            id: None,
            name: name.into(),
            input,
        });
        self
    }

    /// Adds a tool call with this id.
    pub fn call_with_id(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        input: Value,
    ) -> Self {
        self.tool_calls.push(ScriptCall {
            id: Some(id.into()),
            name: name.into(),
            input,
        });
        self
    }

    /// The call takes this long.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay_ms = Some(delay.as_millis() as u64);
        self
    }

    /// A failing model call.
    pub fn error(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            error: Some(ScriptError {
                kind: kind.into(),
                message: message.into(),
            }),
            ..Self::default()
        }
    }
}

impl Script {
    /// Parses a script; errors name `origin` (a file name) with line and column.
    pub fn parse(text: &str, origin: &str) -> Result<Self, Error> {
        serde_json::from_str(text).map_err(|e| Error::json(origin, &e))
    }

    /// Reads and parses a script file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::parse(&text, &path.display().to_string())
    }
}

impl Script {
    /// Writes the script's `files` into the workspace `dir` (which must exist), creating their
    /// directories; a file outside the workspace is refused before anything is written.
    pub fn write_files(&self, dir: &Path) -> Result<(), Error> {
        let io = |path: &Path, e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let ws = crate::agent::tools::Workspace::new(dir).map_err(|e| io(dir, e))?;
        let mut targets = Vec::with_capacity(self.files.len());
        for (name, content) in &self.files {
            let path = ws.resolve(name).map_err(|_| Error::OutsideWorkspace {
                path: name.clone(),
                workspace: ws.root().display().to_string(),
            })?;
            targets.push((path, content));
        }
        for (path, content) in targets {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
            std::fs::write(&path, content).map_err(|e| io(&path, e))?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Cursor {
    next: usize,
    calls: usize,
}

/// A deterministic [`Provider`] that plays a [`Script`]; each session has its own cursor.
#[derive(Debug, Default)]
pub struct ScriptedProvider {
    script: Script,
    cursors: Mutex<HashMap<String, Cursor>>,
}

impl ScriptedProvider {
    /// An empty script (every call answers "done"); add answers with [`turn`](Self::turn).
    pub fn new() -> Self {
        Self::default()
    }

    /// Plays this script.
    pub fn from_script(script: Script) -> Self {
        Self {
            script,
            cursors: Mutex::default(),
        }
    }

    /// Loads a script file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        Script::load(path).map(Self::from_script)
    }

    /// Appends an answer of the main agent.
    pub fn turn(mut self, turn: ScriptTurn) -> Self {
        self.script.turns.push(turn);
        self
    }

    /// Appends an answer for subagents of `agent_type`.
    pub fn agent_turn(mut self, agent_type: impl Into<String>, turn: ScriptTurn) -> Self {
        self.script
            .agents
            .entry(agent_type.into())
            .or_default()
            .push(turn);
        self
    }

    /// The script.
    pub fn script(&self) -> &Script {
        &self.script
    }

    /// The next answer for a session, with its call ids filled in.
    fn next(
        &self,
        session_id: &str,
        agent_type: Option<&str>,
    ) -> Option<(ScriptTurn, Vec<ToolCall>)> {
        let turns = match agent_type {
            None => &self.script.turns,
            Some(t) => self
                .script
                .agents
                .get(t)
                .or_else(|| self.script.agents.get("default"))?,
        };
        let mut cursors = self.cursors.lock();
        let cursor = cursors.entry(session_id.to_owned()).or_default();
        let turn = turns.get(cursor.next)?.clone();
        cursor.next += 1;
        let calls = turn
            .tool_calls
            .iter()
            .map(|c| {
                cursor.calls += 1;
                let id =
                    c.id.clone()
                        .unwrap_or_else(|| format!("toolu_{:02}", cursor.calls));
                ToolCall::new(id, c.name.clone(), c.input.clone())
            })
            .collect();
        Some((turn, calls))
    }
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn model(&self) -> &str {
        self.script.model.as_deref().unwrap_or("scripted")
    }

    async fn complete(
        &self,
        request: ModelRequest<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let Some((turn, tool_calls)) = self.next(request.session_id, request.agent_type) else {
            return Ok(ModelResponse::default());
        };
        if let Some(ms) = turn.delay_ms {
            tokio::select! {
                _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
            }
        }
        if let Some(e) = turn.error {
            return Err(ProviderError::from_kind(&e.kind, e.message));
        }
        let usage = turn.usage.unwrap_or_else(|| Usage {
            input_tokens: request.messages.iter().map(|m| m.estimated_tokens()).sum(),
            output_tokens: (turn.text.len() as u64).div_ceil(4),
        });
        Ok(ModelResponse {
            text: turn.text,
            tool_calls,
            usage,
        })
    }
}
