//! The tool-call pipeline: the one entry point every tool call passes through, in the order of
//! SPEC section 6.
//!
//! 1. A host deny rule on the original input denies at once (no hook is called).
//! 2. `PreToolUse` gates give the folded decision and the final input.
//! 3. Block or Defer: the model gets an error result; no `PostToolUse`.
//! 4. Permission is resolved on the **final** input (SEC-1), with the hooks' Allow / Ask as
//!    P7 / P4 of the precedence.
//! 5. Ask: `PermissionRequest` gates may override (most restrictive wins; a rule deny was already
//!    final); still Ask: the approver answers within a timeout (then: Deny, source `timeout`).
//! 6. Deny: the model gets `Permission denied: <reason>`; `PermissionDenied` carries the source.
//! 7. The tool runs once (SEC-3), with cancellation and its timeout; errors, panics and timeouts
//!    become error results.
//! 8. `PostToolUse` / `PostToolUseFailure` gates; the final result goes to the model; contexts and
//!    warnings become reminders for the next model call.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::agent::tool::{Tool, ToolCall, ToolCx};
use crate::model::action::PermissionDecision;
use crate::model::error::ActorKind;
use crate::model::error::Error;
use crate::model::event::*;
use crate::model::hook::CANCEL_GRACE;
use crate::model::outcome::{Decision, Outcome};
use crate::model::rule::{Rule, Subject};
use crate::permission::approver::{Approval, ApprovalRequest, Approver};
use crate::permission::service::{
    HookOpinion, PermissionHandle, PermissionQuery, RuleSet, ToolKind, Verdict,
};
use crate::runtime::session::BusSession;
use crate::sys::panics::panic_message;
use crate::sys::sandbox::{with_call_env, CallEnv, SandboxPolicy};

/// Default time the approver has to answer.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(60);

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum CallStatus {
    /// The tool ran and succeeded.
    Completed,
    /// The tool ran and failed.
    Failed {
        /// How.
        kind: FailureKind,
    },
    /// A PreToolUse hook blocked it.
    Blocked,
    /// A PreToolUse hook deferred it.
    Deferred,
    /// Permission was denied.
    Denied {
        /// Who denied it.
        source: DenialSource,
    },
    /// The turn was cancelled before the call started (LOOP-6); no hook saw it.
    Cancelled,
    /// The model named a tool that does not exist; no hook saw it.
    UnknownTool,
}

/// What one call produced: what the model receives, and how it came about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    /// The call's id.
    pub tool_use_id: String,
    /// The tool.
    pub tool_name: String,
    /// The text the model receives.
    pub content: String,
    /// Whether the model sees an error.
    pub is_error: bool,
    /// Whether the tool ran (at most once, SEC-3).
    pub executed: bool,
    /// How it ended.
    pub status: CallStatus,
    /// The input that ran (or would have).
    pub final_input: Value,
    /// Tagged contexts and warnings, for `<system-reminder>`s before the next model call.
    pub reminders: Vec<String>,
    /// What decided permission.
    pub explain: Option<String>,
    /// A hook asked to end the turn after this call (HK-3 `stop`), with its reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
}

/// Formats reminders as one `<system-reminder>` block, or `None` when there are none.
pub fn system_reminder(reminders: &[String]) -> Option<String> {
    (!reminders.is_empty()).then(|| {
        format!(
            "<system-reminder>\n{}\n</system-reminder>",
            reminders.join("\n")
        )
    })
}

/// Runs tool calls for one session through hooks, permission, approver and the tool.
#[derive(Clone)]
pub struct Pipeline {
    session: BusSession,
    permissions: PermissionHandle,
    approver: Arc<dyn Approver>,
    approval_timeout: Duration,
    tools: Arc<HashMap<String, Arc<dyn Tool>>>,
    cwd: PathBuf,
    cancel: CancellationToken,
    sandbox: Option<SandboxPolicy>,
}

impl Pipeline {
    /// A pipeline for `session` with these tools.
    pub fn new(
        session: BusSession,
        permissions: PermissionHandle,
        approver: Arc<dyn Approver>,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Self {
        Self {
            session,
            permissions,
            approver,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            tools: Arc::new(
                tools
                    .into_iter()
                    .map(|t| (t.name().to_owned(), t))
                    .collect(),
            ),
            cwd: PathBuf::from("."),
            cancel: CancellationToken::new(),
            sandbox: None,
        }
    }

    /// The session's sandbox policy for tools that confine what they run (the `bash` tool);
    /// without one, each tool's own policy applies.
    pub fn sandbox(mut self, policy: SandboxPolicy) -> Self {
        self.sandbox = Some(policy);
        self
    }

    /// How long the approver may take (default 60 s).
    pub fn approval_timeout(mut self, timeout: Duration) -> Self {
        self.approval_timeout = timeout;
        self
    }

    /// The session's workspace (tools' cwd, relative path rules).
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = cwd.into();
        self
    }

    /// The token that cancels running tools (the turn's).
    pub fn cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// The session.
    pub fn session(&self) -> &BusSession {
        &self.session
    }

    /// A tool by name.
    pub fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Runs one call at turn 0, step 0.
    pub async fn execute(&self, call: ToolCall) -> Result<CallResult, Error> {
        self.execute_at(call, 0, 0).await
    }

    /// Runs one call, dispatching its events at this turn and step: the steps of SPEC section
    /// 6, one function each, any of which may end the call.
    pub async fn execute_at(
        &self,
        call: ToolCall,
        turn: u32,
        step: u32,
    ) -> Result<CallResult, Error> {
        let tool = self
            .tools
            .get(&call.name)
            .cloned()
            .ok_or_else(|| Error::NoSuchTool(call.name.clone()))?;
        let mut cx = CallCx {
            pipeline: self,
            call: &call,
            kind: tool.kind(),
            turn,
            step,
            stop: Mutex::new(None),
            input: call.input.clone(),
            reminders: Vec::new(),
        };
        match cx.through_permission().await? {
            Flow::Done(result) => Ok(result),
            Flow::Go(verdict) => cx.execute_and_post(&tool, verdict).await,
        }
    }
}

/// Whether a call goes on to its next step, or ended with this result.
enum Flow<T> {
    Go(T),
    Done(CallResult),
}

/// Ends the step function with the call's result when a step ended the call.
macro_rules! step {
    ($flow:expr) => {
        match $flow {
            Flow::Go(value) => value,
            Flow::Done(result) => return Ok(Flow::Done(result)),
        }
    };
}

impl CallCx<'_> {
    /// Steps 1–6: from the host deny rules to the final permission verdict, an Allow.
    async fn through_permission(&mut self) -> Result<Flow<Verdict>, Error> {
        step!(self.not_cancelled());
        step!(self.host_deny_rules().await?);
        let pre = self.pre_tool_use().await?;
        step!(self.pre_decision(&pre).await?);
        step!(self.not_cancelled());
        let verdict = self.permission(&pre).await;
        let verdict = step!(self.resolve_ask(verdict).await?);
        step!(self.deny(&verdict).await?);
        step!(self.not_cancelled());
        step!(self.execution_gates(&verdict).await?);
        Ok(Flow::Go(verdict))
    }

    /// A call the turn's cancellation stopped before its tool started: not executed, no
    /// further event (LOOP-6).
    fn not_cancelled(&self) -> Flow<()> {
        if !self.pipeline.cancel.is_cancelled() {
            return Flow::Go(());
        }
        Flow::Done(self.result(
            "Cancelled: the turn was cancelled before this call ran".into(),
            true,
            CallStatus::Cancelled,
            None,
        ))
    }

    /// 1. A host deny rule on the original input denies at once; no hook is called.
    async fn host_deny_rules(&mut self) -> Result<Flow<()>, Error> {
        let early = self.check(&self.input, HookOpinion::None, true).await;
        if early.decision == PermissionDecision::Deny {
            return Ok(Flow::Done(self.denied(&early).await?));
        }
        Ok(Flow::Go(()))
    }

    /// 2. `PreToolUse` gates: the folded decision, and the final input.
    async fn pre_tool_use(&mut self) -> Result<Outcome, Error> {
        let pre = self
            .dispatch(Event::PreToolUse(PreToolUse {
                tool_name: self.call.name.clone(),
                tool_input: self.call.input.clone(),
                tool_use_id: self.call.id.clone(),
            }))
            .await?;
        self.reminders = reminders_of(&pre);
        if let Some(input) = &pre.updated_input {
            self.input = input.clone();
        }
        Ok(pre)
    }

    /// 3. Block, a hook's `stop`, or Defer end the call; no `PostToolUse`.
    async fn pre_decision(&mut self, pre: &Outcome) -> Result<Flow<()>, Error> {
        let (content, status) = match pre.decision {
            Decision::Block => {
                let reason = pre.reason_text();
                self.dispatch(Event::PermissionDenied(PermissionDenied {
                    tool_name: self.call.name.clone(),
                    tool_input: self.input.clone(),
                    tool_use_id: self.call.id.clone(),
                    reason: reason.clone(),
                    source: DenialSource::Hook,
                    decided_by: pre.decided_by().map(str::to_owned),
                }))
                .await?;
                (format!("Blocked by hook: {reason}"), CallStatus::Blocked)
            }
            // HK-3 / Claude Code's `continue: false`: the turn ends after this event, so the
            // call does not run.
            _ if pre.stop.is_some() => {
                let reason = pre.stop.as_ref().map(|s| s.value.as_str()).unwrap_or("");
                (format!("Stopped by hook: {reason}"), CallStatus::Blocked)
            }
            Decision::Defer => (
                format!("Deferred by hook: {}", pre.reason_text()),
                CallStatus::Deferred,
            ),
            _ => return Ok(Flow::Go(())),
        };
        Ok(Flow::Done(self.result(content, true, status, None)))
    }

    /// 4. Permission on the final input (SEC-1), the hooks' Allow and Ask as P7 and P4.
    async fn permission(&self, pre: &Outcome) -> Verdict {
        let opinion = match pre.decision {
            Decision::Ask => HookOpinion::Ask(pre.reason_text()),
            Decision::Allow => HookOpinion::Allow(pre.reason_text()),
            _ => HookOpinion::None,
        };
        self.check(&self.input, opinion, false).await
    }

    /// Step 5, an Ask: `PermissionRequest` gates may decide (a rewritten input is checked
    /// again); else the approver answers.
    async fn resolve_ask(&mut self, verdict: Verdict) -> Result<Flow<Verdict>, Error> {
        if verdict.decision != PermissionDecision::Ask {
            return Ok(Flow::Go(verdict));
        }
        step!(self.not_cancelled());
        let req = self
            .dispatch(Event::PermissionRequest(PermissionRequest {
                tool_name: self.call.name.clone(),
                tool_input: self.input.clone(),
                tool_use_id: self.call.id.clone(),
                reason: Some(verdict.explain.clone()),
            }))
            .await?;
        self.reminders.extend(reminders_of(&req));
        let decided = match req.decision {
            Decision::Deny => Verdict {
                decision: PermissionDecision::Deny,
                source: Some(DenialSource::Hook),
                explain: format!("PermissionRequest hook denied: {}", req.reason_text()),
                ..verdict
            },
            Decision::Allow => match req.updated_input.clone() {
                Some(rewritten) => self.allow_rewritten(rewritten, &req, verdict).await,
                None => Verdict {
                    decision: PermissionDecision::Allow,
                    explain: format!("PermissionRequest hook allowed: {}", req.reason_text()),
                    ..verdict
                },
            },
            _ => self.ask_approver(&self.input, verdict).await?,
        };
        Ok(Flow::Go(decided))
    }

    /// A PermissionRequest hook's allow with a rewritten input: the input is checked against
    /// the rules again (SEC-1); the hook's allow answers the ask, never a deny rule or the mode.
    async fn allow_rewritten(
        &mut self,
        rewritten: Value,
        req: &Outcome,
        asked: Verdict,
    ) -> Verdict {
        let reason = req.reason_text();
        let again = self
            .check(&rewritten, HookOpinion::Allow(reason.clone()), false)
            .await;
        self.input = rewritten;
        if again.decision == PermissionDecision::Deny {
            Verdict {
                explain: format!(
                    "the input a PermissionRequest hook rewrote: {}",
                    again.explain
                ),
                ..again
            }
        } else {
            Verdict {
                decision: PermissionDecision::Allow,
                explain: format!("PermissionRequest hook allowed a rewritten input: {reason}"),
                ..asked
            }
        }
    }

    /// 6. Anything but an Allow denies: the model gets `Permission denied: <reason>`.
    async fn deny(&mut self, verdict: &Verdict) -> Result<Flow<()>, Error> {
        if verdict.decision == PermissionDecision::Allow {
            return Ok(Flow::Go(()));
        }
        Ok(Flow::Done(self.denied(verdict).await?))
    }

    /// The bus's execution gates (the durable audit intent) see the input that will run; a
    /// failing one keeps the tool from running (fail-closed, source `error`).
    async fn execution_gates(&mut self, verdict: &Verdict) -> Result<Flow<()>, Error> {
        let Err(why) = self.before_execution(&self.input).await else {
            return Ok(Flow::Go(()));
        };
        let verdict = Verdict {
            decision: PermissionDecision::Deny,
            source: Some(DenialSource::Error),
            explain: why,
            ..verdict.clone()
        };
        Ok(Flow::Done(self.denied(&verdict).await?))
    }

    /// Steps 7 and 8: the tool runs once (SEC-3), then `PostToolUse` or `PostToolUseFailure`
    /// gates shape what the model receives.
    async fn execute_and_post(
        &mut self,
        tool: &Arc<dyn Tool>,
        verdict: Verdict,
    ) -> Result<CallResult, Error> {
        let started = Instant::now();
        let executed = self.run(tool, self.input.clone()).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        let original_input = (self.input != self.call.input).then(|| self.call.input.clone());
        let (post, content, status) = match executed {
            Ok(output) => {
                let post = self
                    .dispatch(Event::PostToolUse(PostToolUse {
                        tool_name: self.call.name.clone(),
                        tool_input: self.input.clone(),
                        original_input,
                        tool_response: output.clone(),
                        original_response: None,
                        tool_use_id: self.call.id.clone(),
                        is_error: false,
                        duration_ms,
                    }))
                    .await?;
                let shown = post.updated_output.clone().unwrap_or(output);
                (post, as_text(&shown), CallStatus::Completed)
            }
            Err((kind, error)) => {
                let post = self
                    .dispatch(Event::PostToolUseFailure(PostToolUseFailure {
                        tool_name: self.call.name.clone(),
                        tool_input: self.input.clone(),
                        original_input,
                        tool_use_id: self.call.id.clone(),
                        error: error.clone(),
                        is_error: true,
                        is_interrupt: kind == FailureKind::Interrupted,
                        kind,
                        duration_ms,
                    }))
                    .await?;
                let shown = post.updated_output.as_ref().map(as_text).unwrap_or(error);
                (post, shown, CallStatus::Failed { kind })
            }
        };
        self.reminders.extend(reminders_of(&post));
        let mut content = content;
        for fb in &post.feedback {
            content.push_str(&format!("\n[Hook feedback: {}] {}", fb.hook, fb.value));
        }
        let is_error = status != CallStatus::Completed;
        Ok(self.result(content, is_error, status, Some(verdict.explain)))
    }
}

/// One call in progress.
struct CallCx<'a> {
    pipeline: &'a Pipeline,
    call: &'a ToolCall,
    kind: ToolKind,
    turn: u32,
    step: u32,
    /// The first `stop` a hook asked for during this call.
    stop: Mutex<Option<String>>,
    /// The input that will run: the model's, as hooks rewrote it.
    input: Value,
    /// Tagged contexts and warnings gathered so far.
    reminders: Vec<String>,
}

/// How the wait for the approver ended.
enum Waited {
    /// It answered in time.
    Answered(Approval),
    /// The turn was cancelled first.
    Cancelled,
    /// It panicked, with this message.
    Panicked(String),
    /// It did not answer within the approval timeout.
    TimedOut,
}

impl CallCx<'_> {
    async fn dispatch(&self, event: Event) -> Result<Outcome, Error> {
        let outcome = self
            .pipeline
            .session
            .dispatch_at(event, self.turn, self.step)
            .await?;
        if let Some(stop) = &outcome.stop {
            self.stop.lock().get_or_insert_with(|| stop.value.clone());
        }
        Ok(outcome)
    }

    async fn before_execution(&self, input: &Value) -> Result<(), String> {
        let intent = crate::runtime::execution::ExecutionIntent {
            session_id: self.pipeline.session.id(),
            turn: self.turn,
            tool_use_id: &self.call.id,
            tool_name: &self.call.name,
            requested: &self.call.input,
            input,
        };
        self.pipeline.session.core.before_execution(&intent).await
    }

    async fn check(&self, input: &Value, hook: HookOpinion, deny_rules_only: bool) -> Verdict {
        self.pipeline
            .permissions
            .check(PermissionQuery {
                session_id: self.pipeline.session.id().to_owned(),
                tool_name: self.call.name.clone(),
                input: input.clone(),
                kind: self.kind,
                cwd: Some(self.pipeline.cwd.clone()),
                hook,
                deny_rules_only,
            })
            .await
    }

    /// Step 5, still an Ask: the approver answers within the timeout; no approver, a
    /// cancelled turn, a panic or no answer in time deny.
    async fn ask_approver(&self, input: &Value, verdict: Verdict) -> Result<Verdict, Error> {
        let p = self.pipeline;
        if !p.approver.present() {
            return Ok(Verdict {
                decision: PermissionDecision::Deny,
                source: Some(DenialSource::NoApprover),
                explain: format!("{} → no approver to ask", verdict.explain),
                ..verdict
            });
        }
        self.notify_permission_prompt().await?;
        Ok(match self.wait_for_approver(input, &verdict).await {
            Waited::Answered(approval) => self.apply_approval(input, approval, verdict).await,
            Waited::Cancelled => Verdict {
                decision: PermissionDecision::Deny,
                source: Some(DenialSource::Cancelled),
                explain: "the turn was cancelled while the approver was asked".into(),
                ..verdict
            },
            Waited::Panicked(why) => Verdict {
                decision: PermissionDecision::Deny,
                source: Some(DenialSource::Error),
                explain: format!("the approver failed: {why}"),
                ..verdict
            },
            Waited::TimedOut => Verdict {
                decision: PermissionDecision::Deny,
                source: Some(DenialSource::Timeout),
                explain: format!(
                    "no answer from the approver within {} ms",
                    p.approval_timeout.as_millis()
                ),
                ..verdict
            },
        })
    }

    /// The `Notification` (`permission_prompt`) that tells the user an answer is needed.
    async fn notify_permission_prompt(&self) -> Result<(), Error> {
        self.dispatch(Event::Notification(Notification {
            message: format!("hookbus needs your permission to use {}", self.call.name),
            title: Some("Permission needed".into()),
            notification_type: "permission_prompt".into(),
        }))
        .await
        .map(drop)
    }

    /// Asks the approver about `input`, racing the turn's cancellation and the approval
    /// timeout; a panicking approver is reported and fails this call only (fail-closed).
    async fn wait_for_approver(&self, input: &Value, verdict: &Verdict) -> Waited {
        let p = self.pipeline;
        let request = ApprovalRequest {
            id: 0,
            session_id: p.session.id().to_owned(),
            tool_use_id: self.call.id.clone(),
            tool_name: self.call.name.clone(),
            input: input.clone(),
            reason: verdict.explain.clone(),
        };
        // The wait races the turn's cancellation, and a panicking approver denies this call
        // (fail-closed) without taking the session down.
        let asking = AssertUnwindSafe(crate::sys::panics::Contained::new(
            p.approver.approve(request),
        ))
        .catch_unwind();
        let answer = tokio::select! {
            biased;
            _ = p.cancel.cancelled() => return Waited::Cancelled,
            answer = tokio::time::timeout(p.approval_timeout, asking) => answer,
        };
        match answer {
            Ok(Err(panic)) => {
                let why = panic_message(panic.as_ref());
                tracing::error!(session = p.session.id(), tool = %self.call.name, "the approver panicked: {why}");
                p.session
                    .core
                    .supervisor
                    .report_call(ActorKind::Permission, "approver", &why);
                Waited::Panicked(why)
            }
            Ok(Ok(approval)) => Waited::Answered(approval),
            Err(_elapsed) => Waited::TimedOut,
        }
    }

    /// The verdict the approver's answer gives; "allow always" first remembers exactly this
    /// call as a session allow rule (SEC-7).
    async fn apply_approval(&self, input: &Value, approval: Approval, verdict: Verdict) -> Verdict {
        match approval {
            Approval::AllowOnce => Verdict {
                decision: PermissionDecision::Allow,
                explain: format!("{} → allowed once by the user", verdict.explain),
                ..verdict
            },
            Approval::AllowAlways => {
                self.remember_approval(input).await;
                Verdict {
                    decision: PermissionDecision::Allow,
                    explain: format!(
                        "{} → allowed always (this session) by the user",
                        verdict.explain
                    ),
                    ..verdict
                }
            }
            Approval::Deny { reason } => Verdict {
                decision: PermissionDecision::Deny,
                source: Some(DenialSource::User),
                explain: reason.unwrap_or_else(|| "the user said no".into()),
                ..verdict
            },
        }
    }

    /// SEC-7: adds exactly what was approved, never more, to the session's allow rules.
    async fn remember_approval(&self, input: &Value) {
        let p = self.pipeline;
        let _ = p
            .permissions
            .add_session_rules(
                p.session.id(),
                RuleSet {
                    allow: vec![Rule::exact(&self.call.name, input)],
                    ..RuleSet::default()
                },
            )
            .await;
    }

    /// A denied call: `PermissionDenied` with its source, and the model's error result.
    async fn denied(&self, verdict: &Verdict) -> Result<CallResult, Error> {
        let source = verdict.source.unwrap_or(DenialSource::Error);
        self.dispatch(Event::PermissionDenied(PermissionDenied {
            tool_name: self.call.name.clone(),
            tool_input: self.input.clone(),
            tool_use_id: self.call.id.clone(),
            reason: verdict.explain.clone(),
            source,
            decided_by: verdict.rule.clone(),
        }))
        .await?;
        Ok(self.result(
            format!("Permission denied: {}", verdict.explain),
            true,
            CallStatus::Denied { source },
            Some(verdict.explain.clone()),
        ))
    }

    /// Runs the tool once, with its timeout and the turn's cancellation; a panic is an error.
    async fn run(
        &self,
        tool: &Arc<dyn Tool>,
        input: Value,
    ) -> Result<Value, (FailureKind, String)> {
        let p = self.pipeline;
        let token = p.cancel.child_token();
        let cx = ToolCx {
            cancel: token.clone(),
            cwd: p.cwd.clone(),
            session_id: p.session.id().to_owned(),
            tool_use_id: self.call.id.clone(),
        };
        let input = pin_paths(input, tool.path_arguments(), &p.cwd);
        // Only a sandboxed tool needs the session's read denies: one more round trip to the
        // permission service, paid by those calls alone.
        let deny_read = if tool.sandboxed() {
            match p.permissions.read_denies(p.session.id(), &p.cwd).await {
                Ok(globs) => globs,
                Err(e) => {
                    return Err((
                        FailureKind::Error,
                        format!("the permission service could not list the read denies: {e}"),
                    ))
                }
            }
        } else {
            Vec::new()
        };
        let env = CallEnv {
            policy: p.sandbox,
            deny_read,
        };
        let limit = tool.timeout();
        let fut = AssertUnwindSafe(crate::sys::panics::Contained::new(with_call_env(
            env,
            tool.execute(input, cx),
        )))
        .catch_unwind();
        tokio::pin!(fut);
        let stopped = tokio::select! {
            biased;
            _ = p.cancel.cancelled() => (FailureKind::Interrupted, "interrupted: the turn was cancelled".to_owned()),
            _ = tokio::time::sleep(limit) => (FailureKind::Timeout, format!("tool timed out after {} ms", limit.as_millis())),
            r = &mut fut => {
                token.cancel();
                return match r {
                    Err(panic) => {
                        let message = panic_message(panic.as_ref());
                        p.session.core.supervisor.report_call(ActorKind::AgentLoop, tool.name(), &message);
                        Err((FailureKind::Panic, format!("tool panicked: {message}")))
                    }
                    Ok(Err(e)) => Err((FailureKind::Error, e.to_string())),
                    Ok(Ok(v)) => Ok(v),
                };
            }
        };
        // The tool's token fires first; its future gets a short grace to see it and clean up.
        token.cancel();
        let _ = tokio::time::timeout(CANCEL_GRACE, fut).await;
        Err(stopped)
    }

    /// The call's result, with the input that ran (or would have) and the reminders so far.
    fn result(
        &self,
        content: String,
        is_error: bool,
        status: CallStatus,
        explain: Option<String>,
    ) -> CallResult {
        CallResult {
            tool_use_id: self.call.id.clone(),
            tool_name: self.call.name.clone(),
            executed: matches!(status, CallStatus::Completed | CallStatus::Failed { .. }),
            content,
            is_error,
            status,
            final_input: self.input.clone(),
            reminders: self.reminders.clone(),
            explain,
            stop: self.stop.lock().clone(),
        }
    }
}

/// The input with each declared path field replaced by the absolute path the rules checked
/// (resolved through symlinks), so that the tool opens exactly that path (SEC-6).
fn pin_paths(mut input: Value, fields: &[&str], cwd: &Path) -> Value {
    for (field, path) in Subject::resolved_paths(&input, cwd, fields.iter().copied()) {
        input[field] = Value::String(path.to_string_lossy().into_owned());
    }
    input
}

/// An outcome's contexts and warnings as reminder lines.
pub(crate) fn reminders_of(outcome: &Outcome) -> Vec<String> {
    outcome
        .contexts
        .iter()
        .map(ToString::to_string)
        .chain(outcome.warnings.iter().map(|w| {
            format!(
                "[Hook: {} | {}] warning: {}",
                w.hook,
                outcome.kind.map_or("", |k| k.as_str()),
                w.value
            )
        }))
        .collect()
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
