//! `hookbus replay`: feeds the tool calls of a recorded Claude Code transcript through a hooks
//! configuration and reports, per event, which handlers matched, what each returned, the folded
//! decision and the final input — a debugger for hook configurations.
//!
//! The transcript is JSONL: `type: "assistant"` lines whose `message.content` holds `tool_use`
//! blocks `{id, name, input}` (lines sharing `message.id` are one message), and `type: "user"`
//! lines whose `message.content` holds `tool_result` blocks `{tool_use_id, content, is_error}`
//! or is a prompt: a string, or a list of blocks (text and images) whose text blocks are joined
//! by newlines. User lines Claude Code writes itself are not prompts: `isMeta` and
//! `isCompactSummary` lines and interruption notes; a user line that begins `Stop hook
//! feedback:` (or an `attachment` line with a Stop `hook_blocking_error`) is a Stop hook's block
//! that the session went on from ([`Item::StopContinuation`]). Other lines and blocks are
//! skipped.
//!
//! Each event's hooks get, as `transcript_path`, the transcript as it stood at the event: cut
//! after the line that produced the event (see [`LineEnd`]), in a private directory that lives
//! as long as the replay.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::cuts::TranscriptCut;
use super::hook::{HandlerRun, REPORT_KEY};
use super::settings::{ClaudeSettings, CompatOptions, SettingsWarning};
use crate::agent::provider::Provider;
use crate::agent::scripted::ScriptedProvider;
use crate::model::bounds::{MAX_TRANSCRIPT_BYTES, MAX_TRANSCRIPT_LINE_BYTES};
use crate::model::error::Error;
use crate::model::event::*;
use crate::model::outcome::{Decision, Outcome};
use crate::runtime::bus::Bus;
use crate::runtime::session::{BusSession, BusSessionConfig};

/// How Claude Code begins the user message that hands a Stop hook's block to the model.
const STOP_FEEDBACK: &str = "Stop hook feedback:";

/// How Claude Code's interruption notes begin (user lines that are not prompts).
const INTERRUPTED: &str = "[Request interrupted by user";

/// A line of the transcript, and where the transcript up to and including it ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LineEnd {
    /// The line's number, from 1 (0: before the first line).
    pub line: usize,
    /// The byte just past the line and its newline: the transcript as it stood at the line is
    /// its first `end` bytes.
    pub end: u64,
}

/// One tool call of a transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolUse {
    /// Its id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its input.
    pub input: Value,
    /// The line that holds it.
    pub at: LineEnd,
}

/// A call's recorded result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The `tool_result` content.
    pub content: Value,
    /// Whether it was an error.
    pub is_error: bool,
    /// The line's `toolUseResult`, when present.
    pub tool_use_result: Option<Value>,
    /// The line that holds it.
    pub at: LineEnd,
}

/// What a transcript holds, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A user prompt: a user line whose content is a string, or a list of blocks without a
    /// `tool_result` (text and images, as Claude Code records a prompt with an attachment).
    Prompt {
        /// The prompt's text: the string, or the text blocks joined by newlines.
        text: String,
        /// Its line.
        at: LineEnd,
    },
    /// An assistant message: its text and tool calls.
    Assistant {
        /// The message's text blocks, joined.
        text: String,
        /// Its tool calls, in order.
        calls: Vec<ToolUse>,
        /// Its last line (a message may span several lines sharing `message.id`).
        at: LineEnd,
    },
    /// A Stop hook blocked the end of the turn and the session went on: the user line `Stop
    /// hook feedback: ...` (or the Stop `hook_blocking_error` attachment line) Claude Code
    /// records then. Consecutive such lines are one item.
    StopContinuation {
        /// The first line that records it.
        at: LineEnd,
    },
}

/// A parsed transcript.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    /// The first `sessionId` found.
    pub session_id: Option<String>,
    /// Prompts, assistant messages and Stop continuations in order.
    pub items: Vec<Item>,
    /// Results by tool-use id.
    pub results: HashMap<String, ToolResult>,
    /// The last line read: the whole transcript.
    pub end: LineEnd,
}

impl Transcript {
    /// Reads a transcript file line by line; a malformed line is an error naming its line
    /// number, and so is a line longer than [`MAX_TRANSCRIPT_LINE_BYTES`] or a file larger than
    /// [`MAX_TRANSCRIPT_BYTES`] (read no further).
    pub fn load(path: &Path) -> Result<Self, Error> {
        use std::io::{BufRead, BufReader, Read};
        let origin = path.display().to_string();
        let io = |message: String| Error::Io {
            path: origin.clone(),
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| io(e.to_string()))?;
        let mut reader = BufReader::new(file);
        let mut parser = Parser::default();
        let mut buf = Vec::new();
        let mut total = 0u64;
        for n in 1.. {
            buf.clear();
            let read = (&mut reader)
                .take(MAX_TRANSCRIPT_LINE_BYTES as u64 + 2)
                .read_until(b'\n', &mut buf)
                .map_err(|e| io(e.to_string()))?;
            if read == 0 {
                break;
            }
            total += read as u64;
            if total > MAX_TRANSCRIPT_BYTES {
                return Err(io(format!(
                    "larger than {MAX_TRANSCRIPT_BYTES} bytes, the limit for a transcript"
                )));
            }
            let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let bad = |message: String| Error::InvalidTranscript {
                path: origin.clone(),
                line: n,
                message,
            };
            if line.len() > MAX_TRANSCRIPT_LINE_BYTES {
                return Err(bad(format!(
                    "longer than {MAX_TRANSCRIPT_LINE_BYTES} bytes, the limit for a line"
                )));
            }
            let text = std::str::from_utf8(line).map_err(|e| bad(format!("not UTF-8: {e}")))?;
            let at = LineEnd {
                line: n,
                end: total,
            };
            parser.line(at, text, &origin)?;
        }
        Ok(parser.done())
    }

    /// Parses transcript text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, Error> {
        let mut parser = Parser::default();
        let mut end = 0u64;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            end += line.len() as u64;
            let line = line.strip_suffix('\n').unwrap_or(line);
            let line = line.strip_suffix('\r').unwrap_or(line);
            parser.line(LineEnd { line: i + 1, end }, line, origin)?;
        }
        Ok(parser.done())
    }
}

/// A transcript being read, line by line.
#[derive(Default)]
struct Parser {
    t: Transcript,
    by_message_id: HashMap<String, usize>,
}

impl Parser {
    fn done(self) -> Transcript {
        self.t
    }

    /// Takes the line that ends at `at`.
    fn line(&mut self, at: LineEnd, line: &str, origin: &str) -> Result<(), Error> {
        self.t.end = at;
        if line.trim().is_empty() {
            return Ok(());
        }
        let bad = |message: String| Error::InvalidTranscript {
            path: origin.to_owned(),
            line: at.line,
            message,
        };
        let value: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let Some(obj) = value.as_object() else {
            return Err(bad("a transcript line must be a JSON object".into()));
        };
        if self.t.session_id.is_none() {
            self.t.session_id = obj
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        let message = obj.get("message").and_then(Value::as_object);
        let content = message.and_then(|m| m.get("content"));
        match obj.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                let (text, calls) = assistant_content(content, at).map_err(bad)?;
                let id = message.and_then(|m| m.get("id")).and_then(Value::as_str);
                self.push_assistant(id, text, calls, at);
            }
            Some("user") => self.user_line(obj, content, at).map_err(bad)?,
            Some("attachment") if stop_block_attachment(obj.get("attachment")) => {
                self.push_continuation(at)
            }
            _ => {}
        }
        Ok(())
    }

    /// A user line: tool results, a prompt, a Stop continuation, or a line Claude Code wrote
    /// itself (skipped).
    fn user_line(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        content: Option<&Value>,
        at: LineEnd,
    ) -> Result<(), String> {
        let text = match content {
            Some(Value::String(prompt)) => prompt.clone(),
            Some(Value::Array(blocks)) if blocks.iter().any(is_tool_result) => {
                return self.record_results(blocks, obj.get("toolUseResult"), at);
            }
            Some(Value::Array(blocks)) if !blocks.is_empty() => text_blocks(blocks),
            _ => return Ok(()),
        };
        let flag = |name: &str| obj.get(name).and_then(Value::as_bool).unwrap_or(false);
        if text.starts_with(STOP_FEEDBACK) {
            self.push_continuation(at);
        } else if !flag("isMeta") && !flag("isCompactSummary") && !text.starts_with(INTERRUPTED) {
            self.t.items.push(Item::Prompt { text, at });
        }
        Ok(())
    }

    /// Records a Stop continuation, unless the item before is one already.
    fn push_continuation(&mut self, at: LineEnd) {
        if !matches!(self.t.items.last(), Some(Item::StopContinuation { .. })) {
            self.t.items.push(Item::StopContinuation { at });
        }
    }

    /// Adds an assistant message, or merges it into the earlier one with the same message `id`.
    fn push_assistant(
        &mut self,
        id: Option<&str>,
        text: String,
        calls: Vec<ToolUse>,
        line: LineEnd,
    ) {
        match id.and_then(|id| self.by_message_id.get(id).copied()) {
            Some(index) => {
                if let Item::Assistant {
                    text: t0,
                    calls: c0,
                    at: a0,
                } = &mut self.t.items[index]
                {
                    *a0 = line;
                    if !text.is_empty() {
                        if !t0.is_empty() {
                            t0.push('\n');
                        }
                        t0.push_str(&text);
                    }
                    c0.extend(calls);
                }
            }
            None => {
                if let Some(id) = id {
                    self.by_message_id.insert(id.to_owned(), self.t.items.len());
                }
                self.t.items.push(Item::Assistant {
                    text,
                    calls,
                    at: line,
                });
            }
        }
    }

    /// Records the `tool_result` blocks of a user line; `tool_use_result` is the line's
    /// `toolUseResult`.
    fn record_results(
        &mut self,
        blocks: &[Value],
        tool_use_result: Option<&Value>,
        at: LineEnd,
    ) -> Result<(), String> {
        for block in blocks.iter().filter(|b| is_tool_result(b)) {
            let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else {
                return Err("a tool_result block without a `tool_use_id`".into());
            };
            self.t.results.insert(
                id.to_owned(),
                ToolResult {
                    content: block.get("content").cloned().unwrap_or(Value::Null),
                    is_error: block
                        .get("is_error")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    tool_use_result: tool_use_result.cloned(),
                    at,
                },
            );
        }
        Ok(())
    }
}

/// Whether a content block is a `tool_result`.
fn is_tool_result(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("tool_result")
}

/// The `text` of a list of content blocks' text blocks, joined by newlines (images and other
/// blocks carry no text).
fn text_blocks(blocks: &[Value]) -> String {
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether an `attachment` line's attachment records a Stop hook's block.
fn stop_block_attachment(attachment: Option<&Value>) -> bool {
    let field = |name: &str| attachment.and_then(|a| a.get(name)).and_then(Value::as_str);
    field("type") == Some("hook_blocking_error") && field("hookEvent") == Some("Stop")
}

/// The text blocks (joined by newlines) and tool calls of an assistant message's content, on
/// the line that ends at `at`.
fn assistant_content(
    content: Option<&Value>,
    at: LineEnd,
) -> Result<(String, Vec<ToolUse>), String> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in content.and_then(Value::as_array).into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(s) = block.get("text").and_then(Value::as_str) {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(s);
                }
            }
            Some("tool_use") => calls.push(tool_use(block, at)?),
            _ => {}
        }
    }
    Ok((text, calls))
}

/// A `tool_use` block as a [`ToolUse`]; its input defaults to `{}`.
fn tool_use(block: &Value, at: LineEnd) -> Result<ToolUse, String> {
    let id = block
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| String::from("a tool_use block without an `id`"))?;
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("tool_use `{id}` has no `name`"))?;
    Ok(ToolUse {
        id: id.to_owned(),
        name: name.to_owned(),
        input: block
            .get("input")
            .cloned()
            .unwrap_or(Value::Object(Default::default())),
        at,
    })
}

/// What to replay, and how.
#[derive(Clone)]
pub struct ReplayOptions {
    /// Settings files, merged in this order.
    pub settings: Vec<PathBuf>,
    /// Plugin directories whose `hooks/hooks.json` is loaded after the settings, in this order
    /// ([`ClaudeSettings::load_with_plugins`]).
    pub plugin_dirs: Vec<PathBuf>,
    /// The transcript.
    pub transcript: PathBuf,
    /// The hooks' cwd and the payloads' `cwd` (default: the current directory).
    pub cwd: Option<PathBuf>,
    /// `CLAUDE_PROJECT_DIR` (default: the cwd).
    pub project_dir: Option<PathBuf>,
    /// Also SessionStart, UserPromptSubmit, Stop and SessionEnd.
    pub all_events: bool,
    /// Version-dependent behaviour.
    pub compat: CompatOptions,
    /// The model that answers `prompt` handlers (see [`provider_from_spec`]); without one they
    /// fail open, with a warning at load.
    pub provider: Option<Arc<dyn Provider>>,
}

impl std::fmt::Debug for ReplayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayOptions")
            .field("settings", &self.settings)
            .field("plugin_dirs", &self.plugin_dirs)
            .field("transcript", &self.transcript)
            .field("cwd", &self.cwd)
            .field("project_dir", &self.project_dir)
            .field("all_events", &self.all_events)
            .field("compat", &self.compat)
            .field(
                "provider",
                &self.provider.as_ref().map(|p| p.model().to_owned()),
            )
            .finish()
    }
}

/// A provider from its command-line form: `scripted:FILE` plays a [`ScriptedProvider`] script
/// whose turns' texts are the models' answers, one per prompt-handler call, in order.
pub fn provider_from_spec(spec: &str) -> Result<Arc<dyn Provider>, Error> {
    match spec.split_once(':') {
        Some(("scripted", file)) if !file.is_empty() => {
            Ok(Arc::new(ScriptedProvider::load(file)?) as Arc<dyn Provider>)
        }
        _ => Err(Error::InvalidSetting {
            file: "--provider".into(),
            key: spec.to_owned(),
            message: "a provider is given as `scripted:FILE` (a ScriptedProvider script)".into(),
        }),
    }
}

/// One handler in a [`ReplayLine`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayHandler {
    /// The settings file, as given (a plugin's handler: its `hooks/hooks.json`).
    pub source: String,
    /// The matcher, as written (null when omitted).
    pub matcher: Option<String>,
    /// The command, URL or prompt, as written.
    pub command: String,
    /// The names of the settings' `env` variables set for the command, and
    /// `CLAUDE_PLUGIN_ROOT` for a plugin's (values are not shown).
    pub env: Vec<String>,
    /// Its exit code (null on timeout or spawn failure).
    pub exit_code: Option<i32>,
    /// `success`, `blocking_error`, `non_blocking_error`, `timeout`, `spawn_error`,
    /// `skipped_by_if`, `cancelled`, or `async` (it went to the background; what it leaves
    /// shows as context on a later event).
    pub outcome: super::output::HandlerOutcome,
    /// Its parsed JSON output.
    pub json: Option<Value>,
    /// Its wall time.
    pub duration_ms: u64,
}

/// What replay prints for one dispatched event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayLine {
    /// The event's wire name.
    pub event: EventKind,
    /// The tool call's id (tool events).
    pub tool_use_id: Option<String>,
    /// The tool (tool events).
    pub tool_name: Option<String>,
    /// The matched handlers, in settings order.
    pub handlers: Vec<ReplayHandler>,
    /// The folded decision.
    pub decision: &'static str,
    /// The reasons of the hooks whose decision is the folded one, joined by newlines.
    pub reason: Option<String>,
    /// PreToolUse: the input that would run (null on deny or defer).
    pub final_input: Option<Value>,
    /// PostToolUse: the replacement output.
    pub updated_output: Option<Value>,
    /// Contexts for the model, in fold order.
    pub additional_context: Vec<String>,
    /// Messages for the user.
    pub system_messages: Vec<String>,
    /// False when a hook said `continue: false`.
    #[serde(rename = "continue")]
    pub continue_: bool,
    /// The first `stopReason`.
    pub stop_reason: Option<String>,
}

fn decision_name(kind: EventKind, d: Decision) -> &'static str {
    match kind {
        EventKind::PreToolUse => match d {
            Decision::Block | Decision::Deny => "deny",
            Decision::Defer => "defer",
            Decision::Ask => "ask",
            Decision::Allow => "allow",
            Decision::Continue => "none",
        },
        EventKind::PermissionRequest => match d {
            Decision::Deny | Decision::Block => "deny",
            Decision::Allow => "allow",
            _ => "none",
        },
        EventKind::UserPromptSubmit
        | EventKind::Stop
        | EventKind::SubagentStop
        | EventKind::PreCompact
        | EventKind::PostToolUse
        | EventKind::PostToolUseFailure => match d {
            Decision::Block | Decision::Deny => "block",
            _ => "none",
        },
        _ => "none",
    }
}

/// Builds the printed line of one event from its outcome.
fn line_of(env_event: &Event, outcome: &Outcome) -> ReplayLine {
    let kind = env_event.kind();
    let runs: Vec<HandlerRun> = outcome
        .metadata
        .iter()
        .filter(|m| m.value.0 == REPORT_KEY)
        .filter_map(|m| serde_json::from_value(m.value.1.clone()).ok())
        .collect();
    let decision = decision_name(kind, outcome.decision);
    let stopper = runs.iter().find(|r| !r.report.continue_);
    let (tool_name, original) = match env_event.tool() {
        Some((name, input)) => (Some(name.to_owned()), Some(input.clone())),
        None => (None, None),
    };
    ReplayLine {
        event: kind,
        tool_use_id: env_event.tool_use_id().map(str::to_owned),
        tool_name,
        decision,
        reason: (decision != "none" && !outcome.reasons.is_empty()).then(|| {
            outcome
                .reasons
                .iter()
                .map(|r| r.value.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        }),
        final_input: match (kind, decision) {
            (EventKind::PreToolUse, "deny" | "defer") => None,
            (EventKind::PreToolUse, _) => outcome.updated_input.clone().or(original),
            _ => None,
        },
        updated_output: outcome.updated_output.clone(),
        additional_context: outcome.contexts.iter().map(|c| c.text.clone()).collect(),
        system_messages: outcome
            .system_messages
            .iter()
            .map(|m| m.value.clone())
            .collect(),
        continue_: stopper.is_none(),
        stop_reason: stopper.and_then(|r| r.report.stop_reason.clone()),
        handlers: runs
            .into_iter()
            .map(|r| ReplayHandler {
                source: r.source,
                matcher: r.matcher,
                command: r.command,
                env: r.env,
                exit_code: r.report.exit_code,
                outcome: r.report.outcome,
                json: r.report.json,
                duration_ms: r.report.duration_ms,
            })
            .collect(),
    }
}

/// The loaded inputs of a replay: checked before anything is printed.
pub struct Replay {
    settings: ClaudeSettings,
    transcript: Transcript,
    transcript_path: PathBuf,
    cwd: PathBuf,
    all_events: bool,
}

impl Replay {
    /// Loads the settings and the transcript; any error here comes before any output.
    pub fn load(options: ReplayOptions) -> Result<Self, Error> {
        let cwd = match options.cwd {
            Some(c) => c,
            None => std::env::current_dir().map_err(|e| Error::Io {
                path: ".".into(),
                message: e.to_string(),
            })?,
        };
        let mut compat = options.compat;
        compat.project_dir = Some(options.project_dir.unwrap_or_else(|| cwd.clone()));
        let mut settings =
            ClaudeSettings::load_with_plugins(&options.settings, &options.plugin_dirs, compat)?;
        match options.provider {
            Some(provider) => settings = settings.with_provider(provider),
            None if settings.has_prompt_handlers() => settings.warnings.push(SettingsWarning {
                file: "hookbus replay".into(),
                path: "--provider".into(),
                message: "prompt handlers need a model; without one they fail open (give \
                          `--provider scripted:FILE`)"
                    .into(),
            }),
            None => {}
        }
        let transcript = Transcript::load(&options.transcript)?;
        let transcript_path =
            std::path::absolute(&options.transcript).unwrap_or(options.transcript);
        Ok(Self {
            settings,
            transcript,
            transcript_path,
            cwd,
            all_events: options.all_events,
        })
    }

    /// The settings' warnings (print them on stderr).
    pub fn warnings(&self) -> &[SettingsWarning] {
        &self.settings.warnings
    }

    /// Runs the replay, handing each event's line to `emit` as soon as it is folded. Each
    /// event's hooks see, at `transcript_path`, the transcript cut after the event's line (see
    /// [`LineEnd`]); the cut is removed when the replay ends.
    pub async fn run(self, emit: impl FnMut(&ReplayLine)) -> Result<(), Error> {
        let bus = Bus::new();
        self.settings.register(&bus).await?;
        let mut cut = TranscriptCut::new(&self.transcript_path)?;
        let session = self.open_session(&bus, cut.path()).await?;
        let mut out = Emitter {
            session: &session,
            emit,
            cut: &mut cut,
            at: None,
        };
        if self.all_events {
            let start = Event::SessionStart(SessionStart {
                source: SessionSource::Startup,
                model: None,
            });
            out.fire(start, LineEnd::default()).await?;
        }
        self.items(&mut out).await?;
        out.close(self.all_events, self.transcript.end).await?;
        bus.shutdown(Duration::from_secs(5)).await;
        drop(cut);
        Ok(())
    }

    /// Replays the transcript's items in order. A prompt starts a new query loop; a Stop
    /// continuation makes the Stops after it, until the next prompt, `stop_hook_active`.
    async fn items<E: FnMut(&ReplayLine)>(&self, out: &mut Emitter<'_, E>) -> Result<(), Error> {
        let mut continuing = false;
        for item in &self.transcript.items {
            match item {
                Item::Prompt { text, at } => {
                    continuing = false;
                    if self.all_events {
                        let prompt = Event::UserPromptSubmit(UserPromptSubmit {
                            prompt: text.clone(),
                        });
                        out.fire(prompt, *at).await?;
                    }
                }
                Item::StopContinuation { .. } => continuing = true,
                Item::Assistant { text, calls, at } => {
                    self.assistant_message(out, text, calls, *at, continuing)
                        .await?
                }
            }
        }
        Ok(())
    }

    /// Opens the replay's session: the transcript's session id (or `replay`), the path of the
    /// transcript cut and the cwd.
    async fn open_session(&self, bus: &Bus, transcript: &Path) -> Result<BusSession, Error> {
        let session_id = self
            .transcript
            .session_id
            .clone()
            .unwrap_or_else(|| "replay".into());
        bus.open_session(BusSessionConfig {
            id: Some(session_id),
            fields: SessionFields {
                transcript_path: transcript.display().to_string(),
                cwd: self.cwd.display().to_string(),
                permission_mode: Some("default".into()),
                ..SessionFields::default()
            },
            ..BusSessionConfig::default()
        })
        .await
    }

    /// Replays one assistant message (whose last line is `at`): PreToolUse for each call, then
    /// the Post event of each call that ran, then (all events) Stop for a message with text and
    /// no calls, `stop_hook_active` when a Stop hook's block made the session go on.
    async fn assistant_message<E: FnMut(&ReplayLine)>(
        &self,
        out: &mut Emitter<'_, E>,
        text: &str,
        calls: &[ToolUse],
        at: LineEnd,
        stop_hook_active: bool,
    ) -> Result<(), Error> {
        let mut runs = Vec::with_capacity(calls.len());
        for call in calls {
            let (ran, input) = self.pre_tool_use(out, call).await?;
            runs.push((call, ran, input));
        }
        for (call, ran, input) in runs {
            let Some(result) = self.transcript.results.get(&call.id).filter(|_| ran) else {
                continue;
            };
            out.fire(post_tool_event(call, result, input), result.at)
                .await?;
        }
        if self.all_events && calls.is_empty() && !text.is_empty() {
            let stop = Event::Stop(Stop {
                stop_hook_active,
                last_assistant_message: Some(text.to_owned()),
            });
            out.fire(stop, at).await?;
        }
        Ok(())
    }

    /// Fires PreToolUse for `call`: whether the call would run, and the input it would run with.
    async fn pre_tool_use<E: FnMut(&ReplayLine)>(
        &self,
        out: &mut Emitter<'_, E>,
        call: &ToolUse,
    ) -> Result<(bool, Value), Error> {
        let pre = Event::PreToolUse(PreToolUse {
            tool_name: call.name.clone(),
            tool_input: call.input.clone(),
            tool_use_id: call.id.clone(),
        });
        let outcome = out.fire(pre, call.at).await?;
        let legacy_continue = self.settings.options.continue_false_runs_tool;
        let stopped = outcome.stop.is_some() && !legacy_continue;
        let ran = !matches!(
            outcome.decision,
            Decision::Block | Decision::Deny | Decision::Defer
        ) && !stopped;
        let input = outcome.updated_input.unwrap_or_else(|| call.input.clone());
        Ok((ran, input))
    }
}

/// The session a replay dispatches to, the transcript cut its hooks read, and where each
/// event's line goes.
struct Emitter<'s, E> {
    session: &'s BusSession,
    emit: E,
    cut: &'s mut TranscriptCut,
    /// The line the cut ends at now.
    at: Option<LineEnd>,
}

impl<E: FnMut(&ReplayLine)> Emitter<'_, E> {
    /// Dispatches `event`, produced by the line `at`, and emits its line.
    async fn fire(&mut self, event: Event, at: LineEnd) -> Result<Outcome, Error> {
        self.cut_at(at).await?;
        let outcome = self.session.dispatch(event.clone()).await?;
        (self.emit)(&line_of(&event, &outcome));
        Ok(outcome)
    }

    /// Cuts the transcript the hooks see after the line `at`, unless it is cut there already.
    async fn cut_at(&mut self, at: LineEnd) -> Result<(), Error> {
        if self.at != Some(at) {
            self.cut.cut_at(at).await?;
            self.at = Some(at);
        }
        Ok(())
    }

    /// Closes the session, its hooks seeing the whole transcript (`end`); with `all_events`,
    /// emits the SessionEnd line.
    async fn close(mut self, all_events: bool, end: LineEnd) -> Result<(), Error> {
        self.cut_at(end).await?;
        let outcome = self.session.close("other").await?;
        if all_events {
            (self.emit)(&line_of(
                &Event::SessionEnd(SessionEnd {
                    reason: "other".into(),
                }),
                &outcome,
            ));
        }
        Ok(())
    }
}

/// The event of a call that ran: PostToolUse, or PostToolUseFailure for an error result.
fn post_tool_event(call: &ToolUse, result: &ToolResult, input: Value) -> Event {
    let original_input = (input != call.input).then(|| call.input.clone());
    if result.is_error {
        Event::PostToolUseFailure(PostToolUseFailure {
            tool_name: call.name.clone(),
            tool_input: input,
            original_input,
            tool_use_id: call.id.clone(),
            error: content_text(&result.content),
            is_error: true,
            is_interrupt: false,
            kind: FailureKind::Error,
            duration_ms: 0,
        })
    } else {
        Event::PostToolUse(PostToolUse {
            tool_name: call.name.clone(),
            tool_input: input,
            original_input,
            tool_response: result
                .tool_use_result
                .clone()
                .unwrap_or_else(|| result.content.clone()),
            original_response: None,
            tool_use_id: call.id.clone(),
            is_error: false,
            duration_ms: 0,
        })
    }
}

/// A `tool_result` content as text: a string, or the text blocks of a list joined.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The text format of one line: the event, its handlers with outcomes and timings, the fold.
pub fn format_text(line: &ReplayLine) -> String {
    let mut out = format!("{}", line.event);
    if let (Some(tool), Some(id)) = (&line.tool_name, &line.tool_use_id) {
        out.push_str(&format!(" {tool} ({id})"));
    }
    out.push('\n');
    if line.handlers.is_empty() {
        out.push_str("  no handler matched\n");
    }
    for h in &line.handlers {
        let code = h
            .exit_code
            .map_or_else(|| "no exit code".to_owned(), |c| format!("exit {c}"));
        let matcher = h.matcher.as_deref().unwrap_or("*");
        out.push_str(&format!(
            "  [{matcher}] {} — {} ({code}, {} ms) from {}\n",
            h.command,
            serde_json::to_value(h.outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            h.duration_ms,
            h.source
        ));
        if !h.env.is_empty() {
            out.push_str(&format!("      env: {}\n", h.env.join(", ")));
        }
        if let Some(json) = &h.json {
            out.push_str(&format!("      output: {json}\n"));
        }
    }
    out.push_str(&format!("  decision: {}", line.decision));
    if let Some(reason) = &line.reason {
        out.push_str(&format!(" — {}", reason.replace('\n', " / ")));
    }
    out.push('\n');
    if let Some(input) = &line.final_input {
        out.push_str(&format!("  final input: {input}\n"));
    }
    if let Some(output) = &line.updated_output {
        out.push_str(&format!("  updated output: {output}\n"));
    }
    for c in &line.additional_context {
        out.push_str(&format!("  context: {c}\n"));
    }
    for m in &line.system_messages {
        out.push_str(&format!("  system message: {m}\n"));
    }
    if !line.continue_ {
        out.push_str(&format!(
            "  continue: false{}\n",
            line.stop_reason
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default()
        ));
    }
    out
}
