//! Reading one handler's result (CC-4, CC-5): exit code, stdout as JSON or text, stderr; what it
//! decides, as a report and as a hookbus [`Reply`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::run::Raw;
use crate::model::action::{
    Action, Extras, GateAction, PermissionAction, PermissionDecision, PostToolUseAction,
    PreToolUseAction, Reply, ToolDecision,
};
use crate::model::event::EventKind;

/// Longest context, system message or plain-stdout string passed on (CC-5).
pub const CONTEXT_CAP: usize = 10_000;

/// How one handler run went, in Claude Code's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandlerOutcome {
    /// Exit 0, or another code with valid JSON output.
    Success,
    /// Exit 2.
    BlockingError,
    /// Any other failure that lets the action proceed.
    NonBlockingError,
    /// The deadline passed; the process group was killed.
    Timeout,
    /// The program could not start (exec form).
    SpawnError,
    /// The matcher matched but the `if` rule did not; nothing ran.
    SkippedByIf,
    /// The turn was cancelled while it ran.
    Cancelled,
    /// Went to the background (`async` in settings, or a first stdout line
    /// `{"async": true}`): the event did not wait for it and it gives no decision; what it
    /// leaves for the model reaches the session's next event.
    Async,
}

/// The decision one handler gives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CcDecision {
    /// No opinion.
    #[default]
    None,
    /// PreToolUse allow / PermissionRequest allow.
    Allow,
    /// PreToolUse ask.
    Ask,
    /// PreToolUse defer.
    Defer,
    /// PreToolUse deny / PermissionRequest deny.
    Deny,
    /// A block on UserPromptSubmit, Stop, SubagentStop, PreCompact, or Post feedback.
    Block,
}

/// What one handler did and decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandlerReport {
    /// How it went.
    pub outcome: HandlerOutcome,
    /// Its exit code (`None` on timeout, spawn failure or a skipped run).
    pub exit_code: Option<i32>,
    /// Its parsed JSON output.
    pub json: Option<Value>,
    /// Its decision.
    pub decision: CcDecision,
    /// The reason of that decision.
    pub reason: Option<String>,
    /// `updatedInput` (PreToolUse; not with deny or defer).
    pub updated_input: Option<Value>,
    /// `updatedToolOutput` (PostToolUse).
    pub updated_output: Option<Value>,
    /// Context for the model, capped.
    pub additional_context: Vec<String>,
    /// A message for the user.
    pub system_message: Option<String>,
    /// False when it said `continue: false`.
    #[serde(rename = "continue")]
    pub continue_: bool,
    /// Its `stopReason`.
    pub stop_reason: Option<String>,
    /// A non-blocking error to report.
    pub error: Option<String>,
    /// Wall time of the run.
    pub duration_ms: u64,
}

impl HandlerReport {
    fn new(outcome: HandlerOutcome, exit_code: Option<i32>) -> Self {
        Self {
            outcome,
            exit_code,
            json: None,
            decision: CcDecision::None,
            reason: None,
            updated_input: None,
            updated_output: None,
            additional_context: Vec::new(),
            system_message: None,
            continue_: true,
            stop_reason: None,
            error: None,
            duration_ms: 0,
        }
    }

    /// The report of a handler whose `if` did not match.
    pub fn skipped() -> Self {
        Self::new(HandlerOutcome::SkippedByIf, None)
    }

    /// The report of a handler that went to the background.
    pub(crate) fn backgrounded() -> Self {
        Self::new(HandlerOutcome::Async, None)
    }

    /// A report with this outcome, exit code and nothing else (for handlers other than
    /// commands, which read their result themselves).
    pub(crate) fn with_outcome(outcome: HandlerOutcome, exit_code: Option<i32>) -> Self {
        Self::new(outcome, exit_code)
    }
}

/// Cuts a string at [`CONTEXT_CAP`] characters, keeping the head and noting the cut.
pub fn cap(text: &str) -> String {
    if text.chars().count() <= CONTEXT_CAP {
        return text.to_owned();
    }
    let head: String = text.chars().take(CONTEXT_CAP).collect();
    format!(
        "{head}\n[truncated: {} characters in all]",
        text.chars().count()
    )
}

/// Whether exit 2 (and `onFailure: "block"`) blocks on this event, and as what.
fn exit2_decision(event: EventKind) -> Option<CcDecision> {
    match event {
        EventKind::PreToolUse => Some(CcDecision::Deny),
        EventKind::UserPromptSubmit
        | EventKind::Stop
        | EventKind::SubagentStop
        | EventKind::PreCompact
        | EventKind::PostToolUse
        | EventKind::PostToolUseFailure => Some(CcDecision::Block),
        _ => None,
    }
}

/// Events whose `systemMessage` and `continue` are discarded.
fn discards_common(event: EventKind) -> bool {
    matches!(
        event,
        EventKind::Notification
            | EventKind::PreCompact
            | EventKind::PostCompact
            | EventKind::SessionEnd
            | EventKind::StopFailure
    )
}

/// Output valid for the event: the fields that apply.
#[derive(Default)]
struct Parsed {
    decision: CcDecision,
    reason: Option<String>,
    updated_input: Option<Value>,
    updated_output: Option<Value>,
    context: Vec<String>,
    system_message: Option<String>,
    stop: Option<Option<String>>,
    /// The top-level `reason` even without a `decision`: on exit 2 it is the block message
    /// ahead of stderr. Uncapped, as `reason`: the report caps both where it takes them.
    exit2_reason: Option<String>,
}

fn opt_str<'a>(o: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("`{key}` must be a string, not {other}")),
    }
}

fn opt_bool(o: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(format!("`{key}` must be true or false, not {other}")),
    }
}

/// Validates JSON output against the schema for `event` and extracts what applies.
fn parse_output(event: EventKind, o: &Map<String, Value>) -> Result<Parsed, String> {
    let mut p = parse_common(event, o)?;
    let Some(h) = specific_output(event, o)? else {
        return Ok(p);
    };
    let context = opt_str(h, "additionalContext")?;
    match event {
        EventKind::PreToolUse => parse_pre_tool_use(h, &mut p)?,
        EventKind::PermissionRequest => parse_permission_request(h, &mut p)?,
        EventKind::PostToolUse => {
            if let Some(v) = h
                .get("updatedToolOutput")
                .or_else(|| h.get("updatedMCPToolOutput"))
            {
                p.updated_output = Some(v.clone());
            }
        }
        EventKind::Stop | EventKind::SubagentStop => {
            // Stop's additionalContext is feedback that also keeps the agent going.
            if let (Some(text), CcDecision::None) = (context, p.decision) {
                p.decision = CcDecision::Block;
                p.reason = Some(text.to_owned());
            }
        }
        EventKind::SessionStart
        | EventKind::UserPromptSubmit
        | EventKind::PostToolUseFailure
        | EventKind::SubagentStart
        | EventKind::Notification
        | EventKind::PermissionDenied => {}
        other => return Err(format!("`{other}` has no `hookSpecificOutput`")),
    }
    if let Some(text) = context {
        p.context.push(cap(text));
    }
    Ok(p)
}

/// Reads the fields every event shares: `continue`, `stopReason`, `suppressOutput`,
/// `systemMessage` and the top-level `decision` and `reason`.
fn parse_common(event: EventKind, o: &Map<String, Value>) -> Result<Parsed, String> {
    let mut p = Parsed::default();
    let cont = opt_bool(o, "continue")?;
    let stop_reason = opt_str(o, "stopReason")?;
    opt_bool(o, "suppressOutput")?;
    let system = opt_str(o, "systemMessage")?;
    let top_reason = opt_str(o, "reason")?;
    let top_decision = match opt_str(o, "decision")? {
        None => None,
        Some(d @ ("approve" | "block")) => Some(d),
        Some(other) => {
            return Err(format!(
                "`decision` must be `approve` or `block`, not `{other}`"
            ))
        }
    };
    p.exit2_reason = top_reason.map(str::to_owned);
    if !discards_common(event) {
        p.system_message = system.map(cap);
        if cont == Some(false) {
            p.stop = Some(stop_reason.map(str::to_owned));
        }
    }
    if let Some(d) = top_decision {
        match (event, d) {
            (EventKind::PreToolUse, "approve") => p.decision = CcDecision::Allow,
            (EventKind::PreToolUse, _) => p.decision = CcDecision::Deny,
            (e, "block") if exit2_decision(e) == Some(CcDecision::Block) => {
                p.decision = CcDecision::Block
            }
            _ => {}
        }
        if p.decision != CcDecision::None {
            p.reason = top_reason.map(str::to_owned);
        }
    }
    Ok(p)
}

/// The `hookSpecificOutput` object, when present and not null, checked to name `event`.
fn specific_output(
    event: EventKind,
    o: &Map<String, Value>,
) -> Result<Option<&Map<String, Value>>, String> {
    let Some(specific) = o.get("hookSpecificOutput") else {
        return Ok(None);
    };
    if specific.is_null() {
        return Ok(None);
    }
    let Some(h) = specific.as_object() else {
        return Err("`hookSpecificOutput` must be an object".into());
    };
    match opt_str(h, "hookEventName")? {
        Some(name) if name == event.as_str() => Ok(Some(h)),
        Some(name) => Err(format!(
            "`hookSpecificOutput.hookEventName` is `{name}` but the running event is `{event}`"
        )),
        None => Err("`hookSpecificOutput` needs `hookEventName`".into()),
    }
}

/// Reads PreToolUse's `permissionDecision`, its reason and `updatedInput`.
fn parse_pre_tool_use(h: &Map<String, Value>, p: &mut Parsed) -> Result<(), String> {
    match opt_str(h, "permissionDecision")? {
        None => {}
        Some("allow") => p.decision = CcDecision::Allow,
        Some("deny") => p.decision = CcDecision::Deny,
        Some("ask") => p.decision = CcDecision::Ask,
        Some("defer") => p.decision = CcDecision::Defer,
        Some(other) => {
            return Err(format!(
                "`permissionDecision` must be allow, deny, ask or defer, not `{other}`"
            ))
        }
    }
    if let Some(r) = opt_str(h, "permissionDecisionReason")? {
        p.reason = Some(r.to_owned());
    }
    match h.get("updatedInput") {
        None | Some(Value::Null) => {}
        Some(v @ Value::Object(_)) => p.updated_input = Some(v.clone()),
        Some(_) => return Err("`updatedInput` must be an object".into()),
    }
    Ok(())
}

/// Reads PermissionRequest's `decision` object: its behavior, message and `updatedInput`.
fn parse_permission_request(h: &Map<String, Value>, p: &mut Parsed) -> Result<(), String> {
    let Some(d) = h.get("decision") else {
        return Ok(());
    };
    let Some(d) = d.as_object() else {
        return Err("`decision` must be an object".into());
    };
    match opt_str(d, "behavior")? {
        Some("allow") => p.decision = CcDecision::Allow,
        Some("deny") => p.decision = CcDecision::Deny,
        Some(other) => {
            return Err(format!(
                "`decision.behavior` must be allow or deny, not `{other}`"
            ))
        }
        None => return Err("`decision` needs `behavior`".into()),
    }
    p.reason = opt_str(d, "message")?.map(str::to_owned);
    match d.get("updatedInput") {
        None | Some(Value::Null) => {}
        Some(v @ Value::Object(_)) if p.decision == CcDecision::Allow => {
            p.updated_input = Some(v.clone())
        }
        Some(Value::Object(_)) => {
            return Err("`decision.updatedInput` applies only with behavior allow".into())
        }
        Some(_) => return Err("`decision.updatedInput` must be an object".into()),
    }
    Ok(())
}

/// Reads one run of a handler on `event` (the procedure of Claude Code's docs, section 3.1).
pub(crate) fn interpret(
    event: EventKind,
    raw: Raw,
    on_failure_block: bool,
    json_over_exit_2: bool,
) -> HandlerReport {
    match raw {
        Raw::Exited {
            code,
            stdout,
            stderr,
        } => exited(
            event,
            code,
            &stdout.text(),
            &stderr.text(),
            on_failure_block,
            json_over_exit_2,
        ),
        Raw::Timeout => failure(
            event,
            HandlerOutcome::Timeout,
            None,
            on_failure_block,
            "the hook timed out".into(),
        ),
        Raw::Cancelled => HandlerReport::new(HandlerOutcome::Cancelled, None),
        Raw::SpawnError(e) => failure(event, HandlerOutcome::SpawnError, None, on_failure_block, e),
        Raw::HttpError(e) => failure(
            event,
            HandlerOutcome::NonBlockingError,
            None,
            on_failure_block,
            e,
        ),
    }
}

/// Reads a run that exited: its exit code, its stdout as JSON or text, and its stderr.
fn exited(
    event: EventKind,
    code: Option<i32>,
    stdout: &str,
    stderr: &str,
    on_failure_block: bool,
    json_over_exit_2: bool,
) -> HandlerReport {
    let json = json_object(stdout);
    let parsed = json.as_ref().map(|o| parse_output(event, o));
    let mut report = match (code, parsed) {
        (Some(2), parsed) => exit2_report(event, parsed, json_over_exit_2, stderr),
        (Some(0), None) => plain_stdout_report(event, stdout),
        (code, Some(Ok(p))) => {
            let mut r = HandlerReport::new(HandlerOutcome::Success, code);
            apply(&mut r, p);
            r
        }
        (code, Some(Err(schema))) => {
            return with_json(
                failure(
                    event,
                    HandlerOutcome::NonBlockingError,
                    code,
                    on_failure_block,
                    format!("invalid hook output: {schema}"),
                ),
                json,
            )
        }
        (code, None) => {
            let first = stderr.lines().next().unwrap_or("").to_owned();
            return failure(
                event,
                HandlerOutcome::NonBlockingError,
                code,
                on_failure_block,
                format!("Failed with non-blocking status code: {first}"),
            );
        }
    };
    report.json = json.map(Value::Object);
    report
}

/// Stdout parsed as a JSON object, when it is one.
fn json_object(stdout: &str) -> Option<Map<String, Value>> {
    let trimmed = stdout.trim_start();
    trimmed
        .starts_with('{')
        .then(|| serde_json::from_str::<Value>(trimmed).ok())
        .flatten()
        .and_then(|v| match v {
            Value::Object(o) => Some(o),
            _ => None,
        })
}

/// What a background run leaves for the model, read as Claude Code reads an async hook's later
/// output: the `hookSpecificOutput.additionalContext` and `systemMessage` of its JSON output (a
/// field of another type is dropped); with `asyncRewake`, an exit 2 gives its stderr, else its
/// stdout (its fields and `reason` when it is JSON). Never the JSON itself. `skip_first_line`:
/// the run went to the background by printing `{"async": true}` first.
pub(crate) fn background_output(raw: &Raw, rewake: bool, skip_first_line: bool) -> Vec<String> {
    let Raw::Exited {
        code,
        stdout,
        stderr,
    } = raw
    else {
        return Vec::new();
    };
    let text = stdout.text();
    let rest = if skip_first_line {
        text.split_once('\n').map_or("", |(_, rest)| rest)
    } else {
        text.as_str()
    };
    let json = later_json(rest);
    let woken = rewake && *code == Some(2);
    if woken {
        if let Some(err) = stderr_reason(&stderr.text()) {
            return vec![cap(&err)];
        }
    }
    match json {
        Some(o) => async_fields(&o, woken),
        None if woken => stderr_reason(rest).map(|t| cap(&t)).into_iter().collect(),
        None => Vec::new(),
    }
}

/// The JSON object a background run printed: all of `text`, or else its last line that is one.
fn later_json(text: &str) -> Option<Map<String, Value>> {
    json_object(text).or_else(|| text.lines().rev().find_map(json_object))
}

/// The string `additionalContext` (under `hookSpecificOutput`) and `systemMessage` of an async
/// run's output, and with `with_reason` its `reason`, each capped.
fn async_fields(o: &Map<String, Value>, with_reason: bool) -> Vec<String> {
    let context = o
        .get("hookSpecificOutput")
        .and_then(|h| h.get("additionalContext"))
        .and_then(Value::as_str);
    let system = o.get("systemMessage").and_then(Value::as_str);
    let reason = o
        .get("reason")
        .and_then(Value::as_str)
        .filter(|_| with_reason);
    [reason, context, system]
        .into_iter()
        .flatten()
        .filter(|t| !t.trim().is_empty())
        .map(cap)
        .collect()
}

/// Stderr, trimmed, as a reason when it is not empty.
fn stderr_reason(stderr: &str) -> Option<String> {
    let s = stderr.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// The report of exit 2: a block with the JSON reason or stderr, or with `json_over_exit_2`
/// what valid JSON output says.
fn exit2_report(
    event: EventKind,
    parsed: Option<Result<Parsed, String>>,
    json_over_exit_2: bool,
    stderr: &str,
) -> HandlerReport {
    let mut r = HandlerReport::new(HandlerOutcome::BlockingError, Some(2));
    match parsed {
        Some(Ok(p)) if json_over_exit_2 => apply(&mut r, p),
        Some(Ok(p)) => {
            let json_reason = p.reason.clone().or_else(|| p.exit2_reason.clone());
            apply(&mut r, p);
            block_on_exit2(event, &mut r, json_reason.or_else(|| stderr_reason(stderr)));
        }
        _ => {
            block_on_exit2(event, &mut r, stderr_reason(stderr));
        }
    }
    r
}

/// The report of exit 0 with non-JSON stdout: context on SessionStart and UserPromptSubmit.
fn plain_stdout_report(event: EventKind, stdout: &str) -> HandlerReport {
    let mut r = HandlerReport::new(HandlerOutcome::Success, Some(0));
    let text = stdout.trim();
    if !text.is_empty() && matches!(event, EventKind::SessionStart | EventKind::UserPromptSubmit) {
        r.additional_context.push(cap(text));
    }
    r
}

fn with_json(mut r: HandlerReport, json: Option<Map<String, Value>>) -> HandlerReport {
    r.json = json.map(Value::Object);
    r
}

/// Applies valid output. Every text it carries is capped (CC-5), the reasons too: they reach
/// the model as much as a context does.
fn apply(r: &mut HandlerReport, p: Parsed) {
    r.decision = p.decision;
    r.reason = p.reason.as_deref().map(cap);
    // updatedInput applies with allow, ask or no decision.
    if matches!(
        r.decision,
        CcDecision::None | CcDecision::Allow | CcDecision::Ask
    ) {
        r.updated_input = p.updated_input;
    }
    r.updated_output = p.updated_output;
    r.additional_context = p.context;
    r.system_message = p.system_message;
    if let Some(reason) = p.stop {
        r.continue_ = false;
        r.stop_reason = reason.as_deref().map(cap);
    }
}

fn block_on_exit2(event: EventKind, r: &mut HandlerReport, reason: Option<String>) {
    match exit2_decision(event) {
        Some(d) => {
            r.decision = d;
            r.updated_input = None;
            r.reason = reason.as_deref().map(cap);
        }
        // Ignored on PermissionRequest; a non-blocking error elsewhere.
        None if event == EventKind::PermissionRequest => {}
        None => {
            r.error = Some(format!(
                "exit 2 does not block {event}: {}",
                reason.unwrap_or_default()
            ))
        }
    }
}

/// A prompt handler that could not decide (no provider, timeout, model error, an answer out of
/// schema): as a failed command run.
pub(crate) fn prompt_failure(
    event: EventKind,
    outcome: HandlerOutcome,
    on_failure_block: bool,
    message: String,
) -> HandlerReport {
    failure(event, outcome, None, on_failure_block, message)
}

/// Reads a prompt handler's answer, `{"ok": bool, "reason"?: string, "impossible"?: bool}`
/// (in a ```` ``` ```` fence or not). `ok: false` blocks with the reason: Stop and SubagentStop
/// go on with it as the next instruction (not with `impossible: true`); PreToolUse denies the
/// call and, without `continueOnBlock`, ends the turn; PostToolUse gives it as feedback and,
/// without `continueOnBlock`, ends the turn; PostToolUseFailure gives it as feedback;
/// UserPromptSubmit blocks the prompt; PermissionRequest and PermissionDenied take no effect.
pub(crate) fn prompt_answer(
    event: EventKind,
    text: &str,
    continue_on_block: bool,
    on_failure_block: bool,
) -> HandlerReport {
    let fail = |message: String| {
        failure(
            event,
            HandlerOutcome::NonBlockingError,
            None,
            on_failure_block,
            message,
        )
    };
    let Some(o) = json_object(unfenced(text)) else {
        return fail(format!(
            "the model's answer is not a JSON object: {}",
            cap(text.trim())
        ));
    };
    let (ok, reason, impossible) = match (
        o.get("ok").and_then(Value::as_bool),
        opt_str(&o, "reason"),
        opt_bool(&o, "impossible"),
    ) {
        (Some(ok), Ok(reason), Ok(impossible)) => (ok, reason, impossible == Some(true)),
        (None, _, _) => {
            return with_json(
                fail("the model's answer has no boolean `ok`".into()),
                Some(o),
            )
        }
        (_, Err(e), _) | (_, _, Err(e)) => {
            return with_json(
                fail(format!("the model's answer is out of schema: {e}")),
                Some(o),
            )
        }
    };
    let mut r = HandlerReport::new(HandlerOutcome::Success, None);
    if !ok {
        let reason =
            reason.map_or_else(|| "the prompt hook's condition was not met".to_owned(), cap);
        prompt_block(event, &mut r, reason, continue_on_block, impossible);
    }
    with_json(r, Some(o))
}

/// What `ok: false` does on `event` (see [`prompt_answer`]).
fn prompt_block(
    event: EventKind,
    r: &mut HandlerReport,
    reason: String,
    continue_on_block: bool,
    impossible: bool,
) {
    let ends_turn =
        !continue_on_block && matches!(event, EventKind::PreToolUse | EventKind::PostToolUse);
    r.decision = match event {
        EventKind::Stop | EventKind::SubagentStop if impossible => return,
        EventKind::PermissionRequest | EventKind::PermissionDenied => return,
        EventKind::PreToolUse => CcDecision::Deny,
        _ => CcDecision::Block,
    };
    r.outcome = HandlerOutcome::BlockingError;
    if ends_turn {
        r.continue_ = false;
        r.stop_reason = Some(reason.clone());
    }
    r.reason = Some(reason);
}

/// `text` without a surrounding Markdown code fence.
fn unfenced(text: &str) -> &str {
    let t = text.trim();
    let Some(inner) = t.strip_prefix("```").and_then(|t| t.strip_suffix("```")) else {
        return t;
    };
    // An info string (`json`) ends at the first newline.
    inner.split_once('\n').map_or(inner, |(_, body)| body)
}

/// A failed run: a non-blocking error, or with `onFailure: "block"` a block where the event can
/// block (not on Stop / SubagentStop, as in Claude Code).
fn failure(
    event: EventKind,
    outcome: HandlerOutcome,
    exit_code: Option<i32>,
    on_failure_block: bool,
    message: String,
) -> HandlerReport {
    let mut r = HandlerReport::new(outcome, exit_code);
    let blocks = on_failure_block && !matches!(event, EventKind::Stop | EventKind::SubagentStop);
    match exit2_decision(event).filter(|_| blocks) {
        Some(d) => {
            r.decision = d;
            r.reason = Some(message);
        }
        None => r.error = Some(message),
    }
    r
}

impl HandlerReport {
    /// The hookbus answer this report gives on `event`.
    pub fn to_reply(&self, event: EventKind) -> Reply {
        let reason = self.reason.clone();
        let action = match event {
            EventKind::PreToolUse => {
                let decision = match self.decision {
                    CcDecision::Allow => ToolDecision::Allow,
                    CcDecision::Ask => ToolDecision::Ask,
                    CcDecision::Defer => ToolDecision::Defer,
                    CcDecision::Deny | CcDecision::Block => ToolDecision::Block,
                    CcDecision::None => ToolDecision::Continue,
                };
                Action::PreToolUse(PreToolUseAction {
                    decision,
                    reason,
                    updated_input: self.updated_input.clone(),
                })
            }
            EventKind::PermissionRequest => match self.decision {
                CcDecision::Allow if self.updated_input.is_some() => {
                    Action::Permission(PermissionAction::AllowWithInput {
                        input: self.updated_input.clone().unwrap_or_default(),
                        reason,
                    })
                }
                CcDecision::Allow => Action::Permission(PermissionAction::Override {
                    decision: PermissionDecision::Allow,
                    reason,
                }),
                CcDecision::Deny => Action::Permission(PermissionAction::Override {
                    decision: PermissionDecision::Deny,
                    reason,
                }),
                _ => Action::Continue,
            },
            EventKind::PostToolUse | EventKind::PostToolUseFailure => {
                Action::PostToolUse(PostToolUseAction {
                    replace_output: self.updated_output.clone(),
                    block_reason: (self.decision == CcDecision::Block)
                        .then(|| reason.unwrap_or_else(|| "blocked by hook".into())),
                })
            }
            _ if self.decision == CcDecision::Block => Action::Gate(GateAction::Block {
                reason: reason.unwrap_or_else(|| "blocked by hook".into()),
            }),
            _ => Action::Continue,
        };
        Reply {
            action,
            extras: Extras {
                context: self.additional_context.clone(),
                system_message: self.system_message.clone(),
                metadata: Default::default(),
                stop: (!self.continue_).then(|| {
                    self.stop_reason
                        .clone()
                        .unwrap_or_else(|| "a hook said continue: false".into())
                }),
                warnings: self.error.iter().cloned().collect(),
            },
        }
    }
}
