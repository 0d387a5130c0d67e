//! The session loop actor (LOOP-1 … LOOP-7): model call → tool calls → results → next model
//! call, firing each lifecycle event at its moment.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use std::panic::AssertUnwindSafe;

use futures_util::future::join_all;
use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::compact;
use super::turn::{TerminalReason, TurnMetrics, TurnResult};
use super::{AgentInner, LoopMsg, LoopShared};
use crate::agent::dedup::ContextDeduplicator;
use crate::agent::pipeline::{reminders_of, system_reminder, CallResult, CallStatus, Pipeline};
use crate::agent::provider::{
    Message, ModelRequest, ModelResponse, ProviderError, Role, ToolSpec, COMPACTION_PROMPT,
};
use crate::agent::tool::{Tool, ToolCall};
use crate::model::error::Error;
use crate::model::error::{ActorFailure, ActorKind};
use crate::model::event::*;
use crate::model::outcome::Outcome;
use crate::runtime::actor::{Actor, OnPanic};
use crate::sys::panics::panic_message;

/// How a turn's body ended, before the result is assembled.
struct End {
    reason: TerminalReason,
    detail: Option<String>,
}

impl End {
    fn new(reason: TerminalReason, detail: impl Into<Option<String>>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }
}

/// One turn in progress.
struct TurnState {
    cancel: CancellationToken,
    messages: Vec<Message>,
    calls: Vec<CallResult>,
    metrics: TurnMetrics,
    text: String,
    /// Bytes of tool results this turn kept so far.
    output_bytes: usize,
}

/// The actor that owns one session's conversation.
pub(crate) struct SessionLoop {
    agent: Arc<AgentInner>,
    shared: Arc<LoopShared>,
    pipeline: Pipeline,
    specs: Vec<ToolSpec>,
    messages: Vec<Message>,
    reminders: Vec<String>,
    turn: u32,
    step: u32,
}

impl SessionLoop {
    pub fn new(agent: Arc<AgentInner>, shared: Arc<LoopShared>, system: Option<String>) -> Self {
        let mut tools: Vec<Arc<dyn Tool>> = agent.tools.clone();
        if shared.lineage.depth < agent.limits.subagent_depth
            && !tools.iter().any(|t| t.name() == "task")
        {
            tools.push(agent.task.clone());
        }
        let specs = tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                input_schema: t.schema(),
            })
            .collect();
        let pipeline = Pipeline::new(
            shared.session.clone(),
            agent.permissions.clone(),
            agent.approver.clone(),
            tools,
        )
        .approval_timeout(agent.approval_timeout)
        .cwd(&shared.workspace);
        let pipeline = match shared.sandbox {
            Some(policy) => pipeline.sandbox(policy),
            None => pipeline,
        };
        Self {
            agent,
            shared,
            pipeline,
            specs,
            messages: system.map(Message::system).into_iter().collect(),
            reminders: Vec::new(),
            turn: 0,
            step: 0,
        }
    }

    /// Serves one message; true when the session is over.
    async fn serve(&mut self, msg: LoopMsg) -> bool {
        match msg {
            LoopMsg::Turn {
                prompt,
                cancel,
                reply,
            } => {
                let result = self.run_turn(prompt, cancel).await;
                let _ = reply.send(result);
            }
            LoopMsg::Compact {
                instructions,
                reply,
            } => {
                let mut metrics = TurnMetrics::default();
                let done = self
                    .compact(CompactTrigger::Manual, instructions, &mut metrics)
                    .await
                    .unwrap_or(false);
                let _ = reply.send(done);
            }
            LoopMsg::Messages { reply } => {
                let _ = reply.send(self.messages.clone());
            }
            LoopMsg::Close { reason, reply } => {
                self.close(&reason).await;
                let _ = reply.send(());
                return true;
            }
            #[cfg(test)]
            LoopMsg::Panic => panic!("agent loop fault injected"),
        }
        false
    }

    async fn close(&mut self, reason: &str) {
        let _ = self
            .shared
            .session
            .close_at(reason, self.turn, self.step)
            .await;
        self.agent.sessions.remove(&self.shared.id);
        self.agent.permissions.forget_session(&self.shared.id).await;
    }

    async fn dispatch(&self, event: Event) -> Result<Outcome, Error> {
        self.shared
            .session
            .dispatch_at(event, self.turn, self.step)
            .await
    }

    /// `SessionStart`; its contexts reach the model before the next model call.
    async fn session_start(&mut self, source: SessionSource) {
        let model = Some(self.shared.provider.model().to_owned());
        if let Ok(outcome) = self
            .dispatch(Event::SessionStart(SessionStart { source, model }))
            .await
        {
            self.reminders.extend(reminders_of(&outcome));
        }
    }

    async fn run_turn(&mut self, prompt: String, cancel: CancellationToken) -> TurnResult {
        self.turn += 1;
        self.step = 0;
        self.shared.turn.store(self.turn, Ordering::Relaxed);
        self.shared.step.store(0, Ordering::Relaxed);
        let started = Instant::now();
        let mut t = TurnState {
            cancel,
            messages: Vec::new(),
            calls: Vec::new(),
            metrics: TurnMetrics::default(),
            text: String::new(),
            output_bytes: 0,
        };
        let end = match self.turn_body(prompt, &mut t).await {
            Ok(end) => end,
            Err(e) => End::new(TerminalReason::Error, e.to_string()),
        };
        t.metrics.duration_ms = started.elapsed().as_millis() as u64;
        TurnResult {
            session_id: self.shared.id.clone(),
            turn: self.turn,
            reason: end.reason,
            text: t.text,
            detail: end.detail,
            messages: t.messages,
            calls: t.calls,
            metrics: t.metrics,
        }
    }

    fn push(&mut self, t: &mut TurnState, message: Message) {
        t.messages.push(message.clone());
        self.messages.push(message);
    }

    async fn interrupted(&self) -> Result<End, Error> {
        self.dispatch(Event::Interrupt(Interrupt {
            reason: "cancelled".into(),
        }))
        .await?;
        Ok(End::new(
            TerminalReason::Cancelled,
            "the turn was cancelled".to_owned(),
        ))
    }

    /// The turn: `UserPromptSubmit`, then model steps until one ends it.
    async fn turn_body(&mut self, prompt: String, t: &mut TurnState) -> Result<End, Error> {
        if let ControlFlow::Break(end) = self.submit_prompt(prompt, t).await? {
            return Ok(end);
        }
        loop {
            if let ControlFlow::Break(end) = self.before_step(t).await? {
                return Ok(end);
            }
            self.begin_step(t);
            let response = match self.call_model(&t.cancel).await {
                Ok(response) => response,
                Err(_) if t.cancel.is_cancelled() => return self.interrupted().await,
                Err(e) => return self.model_failed(e).await,
            };
            let (text, calls) = self.record_response(t, response);
            let next = if calls.is_empty() {
                self.answered(t, text).await?
            } else {
                self.run_step_calls(t, &calls).await?
            };
            if let ControlFlow::Break(end) = next {
                return Ok(end);
            }
        }
    }

    /// `UserPromptSubmit`: a block or a hook's `stop` ends the turn; else the prompt joins the
    /// history and the hooks' contexts become reminders.
    async fn submit_prompt(
        &mut self,
        prompt: String,
        t: &mut TurnState,
    ) -> Result<ControlFlow<End>, Error> {
        if t.cancel.is_cancelled() {
            return self.interrupted().await.map(ControlFlow::Break);
        }
        let submitted = self
            .dispatch(Event::UserPromptSubmit(UserPromptSubmit {
                prompt: prompt.clone(),
            }))
            .await?;
        if submitted.is_blocked() {
            let end = End::new(TerminalReason::Blocked, submitted.reason_text());
            return Ok(ControlFlow::Break(end));
        }
        self.push(t, Message::user(prompt));
        self.reminders.extend(reminders_of(&submitted));
        if let Some(stop) = submitted.stop {
            return Ok(ControlFlow::Break(End::new(
                TerminalReason::Blocked,
                stop.value,
            )));
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Before each model call: a cancelled turn or `max_steps` ends it; a history over the
    /// token limit is compacted (LOOP-4).
    async fn before_step(&mut self, t: &mut TurnState) -> Result<ControlFlow<End>, Error> {
        if t.cancel.is_cancelled() {
            return self.interrupted().await.map(ControlFlow::Break);
        }
        let max_steps = self.agent.limits.max_steps;
        if self.step >= max_steps {
            return Ok(ControlFlow::Break(End::new(
                TerminalReason::MaxSteps,
                format!("the turn reached max_steps ({max_steps})"),
            )));
        }
        if compact::estimate(&self.messages) > self.agent.limits.token_limit {
            self.compact(CompactTrigger::Auto, None, &mut t.metrics)
                .await?;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Counts the step and puts the pending reminders, de-duplicated, before the model call.
    fn begin_step(&mut self, t: &mut TurnState) {
        self.step += 1;
        self.shared.step.store(self.step, Ordering::Relaxed);
        let reminders = ContextDeduplicator::unique(std::mem::take(&mut self.reminders));
        if let Some(reminder) = system_reminder(&reminders) {
            self.push(t, Message::user(reminder));
        }
    }

    /// One model call on the history, racing the turn's cancellation; a panicking provider is
    /// reported and becomes an error.
    async fn call_model(&self, cancel: &CancellationToken) -> Result<ModelResponse, ProviderError> {
        let request = ModelRequest {
            session_id: &self.shared.id,
            agent_type: self.shared.lineage.agent_type.as_deref(),
            messages: &self.messages,
            tools: &self.specs,
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(ProviderError::Cancelled),
            answer = AssertUnwindSafe(crate::sys::panics::Contained::new(self.shared.provider.complete(request, cancel))).catch_unwind() => {
                answer.unwrap_or_else(|panic| {
                    let message = panic_message(panic.as_ref());
                    self.shared.session.core.supervisor.report_call(ActorKind::AgentLoop, "provider", &message);
                    Err(ProviderError::Other(format!("the provider panicked: {message}")))
                })
            }
        }
    }

    /// A failed model call: `StopFailure`, and the turn ends with the error.
    async fn model_failed(&self, e: ProviderError) -> Result<End, Error> {
        self.dispatch(Event::StopFailure(StopFailure {
            error: e.kind().to_owned(),
            error_details: Some(e.to_string()),
        }))
        .await?;
        Ok(End::new(TerminalReason::Error, e.to_string()))
    }

    /// Counts the response's usage and adds it to the history; gives back its text and calls.
    fn record_response(
        &mut self,
        t: &mut TurnState,
        response: ModelResponse,
    ) -> (String, Vec<ToolCall>) {
        t.metrics.steps += 1;
        t.metrics.input_tokens += response.usage.input_tokens;
        t.metrics.output_tokens += response.usage.output_tokens;
        t.text.clone_from(&response.text);
        let calls = response.tool_calls;
        self.push(t, Message::assistant(response.text.clone(), calls.clone()));
        (response.text, calls)
    }

    /// A response without tool calls: `Stop` hooks may make the turn go on (LOOP-3, up to the
    /// continuation cap); else the turn is complete.
    async fn answered(
        &mut self,
        t: &mut TurnState,
        text: String,
    ) -> Result<ControlFlow<End>, Error> {
        self.step_complete().await?;
        if t.cancel.is_cancelled() {
            return self.interrupted().await.map(ControlFlow::Break);
        }
        let stop = self
            .dispatch(Event::Stop(Stop {
                stop_hook_active: t.metrics.stop_continuations > 0,
                last_assistant_message: Some(text),
            }))
            .await?;
        self.reminders.extend(reminders_of(&stop));
        if let Some(s) = stop.stop {
            return Ok(ControlFlow::Break(End::new(
                TerminalReason::Blocked,
                s.value,
            )));
        }
        if stop.is_blocked() {
            let cap = self.agent.limits.stop_continuations;
            if t.metrics.stop_continuations < cap {
                t.metrics.stop_continuations += 1;
                self.push(t, Message::user(stop.reason_text()));
                return Ok(ControlFlow::Continue(()));
            }
            tracing::warn!(
                session = %self.shared.id,
                cap,
                "Stop hooks kept blocking; the turn ends at the continuation cap"
            );
        }
        Ok(ControlFlow::Break(End::new(
            TerminalReason::Completed,
            None,
        )))
    }

    /// A response with tool calls: runs them (LOOP-2), adds their results to the history in
    /// call order; a hook's `stop` on any call ends the turn after the step.
    async fn run_step_calls(
        &mut self,
        t: &mut TurnState,
        calls: &[ToolCall],
    ) -> Result<ControlFlow<End>, Error> {
        t.metrics.tool_calls += calls.len() as u32;
        let pipeline = self.pipeline.clone().cancellation(t.cancel.clone());
        let results = self.run_calls(&pipeline, calls).await?;
        let mut hook_stop = None;
        for mut r in results {
            self.cap_output(&mut r, &mut t.output_bytes);
            count(&mut t.metrics, &r);
            self.push(
                t,
                Message::tool_result(r.tool_use_id.clone(), r.content.clone(), r.is_error),
            );
            self.reminders.extend(r.reminders.iter().cloned());
            if hook_stop.is_none() {
                hook_stop.clone_from(&r.stop);
            }
            t.calls.push(r);
        }
        self.step_complete().await?;
        Ok(match hook_stop {
            Some(reason) => ControlFlow::Break(End::new(TerminalReason::Blocked, reason)),
            None => ControlFlow::Continue(()),
        })
    }

    /// Applies [`Limits::tool_output_bytes`](super::Limits) and `turn_tool_output_bytes` to a
    /// call's result before the model and the turn's result see it.
    fn cap_output(&self, r: &mut CallResult, spent: &mut usize) {
        let limits = &self.agent.limits;
        if limits.tool_output_bytes > 0 {
            cut_text(&mut r.content, limits.tool_output_bytes);
        }
        if limits.turn_tool_output_bytes > 0 {
            if *spent >= limits.turn_tool_output_bytes {
                r.content = format!(
                    "[result withheld: this turn's tool results passed {} bytes]",
                    limits.turn_tool_output_bytes
                );
            } else {
                cut_text(&mut r.content, limits.turn_tool_output_bytes - *spent);
            }
            *spent += r.content.len();
        }
    }

    async fn step_complete(&self) -> Result<(), Error> {
        self.dispatch(Event::StepComplete(StepComplete {
            step: self.step,
            max_steps: self.agent.limits.max_steps,
            message_count: self.messages.len(),
            estimated_tokens: compact::estimate(&self.messages),
            token_limit: self.agent.limits.token_limit,
        }))
        .await
        .map(drop)
    }

    /// LOOP-2: runs of concurrency-safe calls run together, any other call alone, in order;
    /// results come back in call order.
    async fn run_calls(
        &self,
        pipeline: &Pipeline,
        calls: &[ToolCall],
    ) -> Result<Vec<CallResult>, Error> {
        let safe = |c: &ToolCall| pipeline.tool(&c.name).is_some_and(|t| t.concurrency_safe());
        let mut results = Vec::with_capacity(calls.len());
        let mut i = 0;
        while i < calls.len() {
            let end = if safe(&calls[i]) {
                calls[i..]
                    .iter()
                    .position(|c| !safe(c))
                    .map_or(calls.len(), |n| i + n)
            } else {
                i + 1
            };
            let batch = join_all(calls[i..end].iter().map(|c| self.call(pipeline, c))).await;
            for r in batch {
                results.push(r?);
            }
            i = end;
        }
        Ok(results)
    }

    async fn call(&self, pipeline: &Pipeline, call: &ToolCall) -> Result<CallResult, Error> {
        match pipeline
            .execute_at(call.clone(), self.turn, self.step)
            .await
        {
            Err(Error::NoSuchTool(name)) => Ok(CallResult {
                tool_use_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: format!("no such tool: `{name}`"),
                is_error: true,
                executed: false,
                status: CallStatus::UnknownTool,
                final_input: call.input.clone(),
                reminders: Vec::new(),
                explain: None,
                stop: None,
            }),
            other => other,
        }
    }

    /// LOOP-4: PreCompact (a block prevents it), compaction, PostCompact, SessionStart
    /// (source `compact`). True when the history was compacted.
    async fn compact(
        &mut self,
        trigger: CompactTrigger,
        instructions: Option<String>,
        metrics: &mut TurnMetrics,
    ) -> Result<bool, Error> {
        // A system prompt stays first; the rest is summarized up to the cut.
        let head = usize::from(
            self.messages
                .first()
                .is_some_and(|m| m.role == Role::System),
        );
        let Some(cut) = compact::cut_point(&self.messages[head..], self.agent.limits.keep_recent)
            .map(|c| c + head)
        else {
            return Ok(false);
        };
        let pre = self
            .dispatch(Event::PreCompact(PreCompact {
                trigger,
                custom_instructions: instructions.clone(),
                message_count: self.messages.len(),
                estimated_tokens: compact::estimate(&self.messages),
            }))
            .await?;
        self.reminders.extend(reminders_of(&pre));
        if pre.is_blocked() {
            metrics.compactions_blocked += 1;
            tracing::info!(session = %self.shared.id, reason = %pre.reason_text(), "compaction blocked by a PreCompact hook");
            return Ok(false);
        }
        let summary = self
            .summary(cut, instructions.as_deref(), metrics)
            .await
            .unwrap_or_else(|| {
                compact::summarize(&self.messages[head..cut], instructions.as_deref())
            });
        self.messages
            .splice(head..cut, [Message::user(summary.clone())]);
        metrics.compactions += 1;
        self.dispatch(Event::PostCompact(PostCompact {
            trigger,
            compact_summary: summary,
            message_count: self.messages.len(),
        }))
        .await?;
        self.session_start(SessionSource::Compact).await;
        Ok(true)
    }
}

impl SessionLoop {
    /// The model's summary of the messages before `cut` (the system prompt included), when the
    /// provider summarises; `None` to fall back to the offline summary (also when the call
    /// fails, with a warning).
    async fn summary(
        &self,
        cut: usize,
        instructions: Option<&str>,
        metrics: &mut TurnMetrics,
    ) -> Option<String> {
        if !self.shared.provider.summarizes() {
            return None;
        }
        let mut ask = COMPACTION_PROMPT.to_owned();
        if let Some(text) = instructions.filter(|t| !t.trim().is_empty()) {
            ask.push_str("\n\nAdditional instructions: ");
            ask.push_str(text);
        }
        let mut messages = self.messages[..cut].to_vec();
        messages.push(Message::user(ask));
        let request = ModelRequest {
            session_id: &self.shared.id,
            agent_type: self.shared.lineage.agent_type.as_deref(),
            messages: &messages,
            tools: &[],
        };
        let cancel = self.shared.cancel.lock().clone();
        match self.shared.provider.complete(request, &cancel).await {
            Ok(response) if !response.text.trim().is_empty() => {
                metrics.input_tokens += response.usage.input_tokens;
                metrics.output_tokens += response.usage.output_tokens;
                Some(format!(
                    "Summary of the earlier conversation:\n{}",
                    response.text.trim()
                ))
            }
            Ok(_) => {
                tracing::warn!(session = %self.shared.id, "the model's summary was empty; summarising offline");
                None
            }
            Err(e) => {
                tracing::warn!(session = %self.shared.id, "the model could not summarise ({e}); summarising offline");
                None
            }
        }
    }
}

fn count(metrics: &mut TurnMetrics, r: &CallResult) {
    if r.executed {
        metrics.executed += 1;
    }
    if r.is_error {
        metrics.tool_errors += 1;
    }
    match r.status {
        CallStatus::Blocked | CallStatus::Deferred => metrics.blocked_calls += 1,
        CallStatus::Denied { .. } => metrics.denied_calls += 1,
        _ => {}
    }
}

/// Cuts `text` to at most `max` bytes (on a character boundary) plus a note saying how long it
/// was.
pub(crate) fn cut_text(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let total = text.len();
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("\n[cut: {total} bytes in all]"));
}

/// An agent session's loop as an actor: `SessionStart`, then its messages (turns, compaction,
/// close) in order, then `SessionEnd`. A panic stops it and fails the session: its callers get
/// [`Error::ActorFailed`](crate::Error::ActorFailed), and no caller is left waiting.
pub(crate) struct AgentLoop {
    session: SessionLoop,
    rx: mpsc::Receiver<LoopMsg>,
    started: bool,
}

impl AgentLoop {
    /// The loop on `rx`, not yet spawned.
    pub fn new(session: SessionLoop, rx: mpsc::Receiver<LoopMsg>) -> Self {
        Self {
            session,
            rx,
            started: false,
        }
    }
}

impl Actor for AgentLoop {
    const KIND: ActorKind = ActorKind::AgentLoop;
    const ON_PANIC: OnPanic = OnPanic::Stop;

    fn name(&self) -> String {
        self.session.shared.id.clone()
    }

    async fn run(&mut self) {
        if !self.started {
            self.started = true;
            self.session.session_start(SessionSource::Startup).await;
        }
        while let Some(msg) = self.rx.recv().await {
            if Box::pin(self.session.serve(msg)).await {
                return;
            }
        }
        self.session.close("other").await;
    }

    fn failed(&mut self, failure: &ActorFailure) {
        let _ = self.session.shared.failure.set(failure.clone());
        self.rx.close();
        self.session.agent.sessions.remove(&self.session.shared.id);
    }
}
