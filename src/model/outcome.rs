//! The folded result of one dispatch ([`Outcome`]) and the fold itself (SPEC section 4, "Folding
//! results"). The fold is a pure function of the answers in fold order, so the result never
//! depends on which hook finished first.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::action::{
    Action, Extras, GateAction, PermissionAction, PermissionDecision, Reply, ToolDecision,
};
use crate::model::event::EventKind;
use crate::model::hook::FailurePolicy;

/// The folded decision of one event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// No hook had an opinion (or the event cannot be decided).
    #[default]
    Continue,
    /// `PreToolUse`: skip the prompt. `PermissionRequest`: allow.
    Allow,
    /// Ask the user.
    Ask,
    /// `PreToolUse`: defer the call.
    Defer,
    /// Blocked (on Post events: feedback shown to the model; on Stop: keep going).
    Block,
    /// `PermissionRequest`: deny.
    Deny,
}

impl Decision {
    fn rank(self, kind: EventKind) -> u8 {
        match kind {
            EventKind::PermissionRequest => match self {
                Decision::Continue => 0,
                Decision::Allow => 1,
                Decision::Ask => 2,
                _ => 3,
            },
            _ => match self {
                Decision::Continue => 0,
                Decision::Allow => 1,
                Decision::Ask => 2,
                Decision::Defer => 3,
                Decision::Block | Decision::Deny => 4,
            },
        }
    }
}

/// A value with the hook it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attributed<T> {
    /// The hook's name.
    pub hook: String,
    /// The value.
    pub value: T,
}

/// Context for the model, tagged with its source (`[Hook: name | Event] text`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaggedContext {
    /// The hook that added it.
    pub hook: String,
    /// The event it was added on.
    pub event: EventKind,
    /// The text.
    pub text: String,
}

impl fmt::Display for TaggedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[Hook: {} | {}] {}", self.hook, self.event, self.text)
    }
}

/// How one hook's call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "detail")]
pub enum RunStatus {
    /// It answered.
    Answered,
    /// It returned an error.
    Failed(String),
    /// It panicked.
    Panicked(String),
    /// It did not answer within its timeout; its cancellation token fired.
    TimedOut,
    /// Its reply slot was dropped unanswered.
    ReplyDropped,
    /// It was not called: a hook it runs after blocked.
    SkippedDependencyBlocked,
    /// It was not called: its circuit breaker is open.
    SkippedCircuitOpen,
    /// It was not called: the SessionEnd grace period was spent.
    SkippedGraceExpired,
    /// The turn was cancelled while it ran; the dispatcher stopped waiting and its token fired.
    Cancelled,
}

impl RunStatus {
    /// Whether the call counts as a failure for the hook's failure policy.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            RunStatus::Failed(_)
                | RunStatus::Panicked(_)
                | RunStatus::TimedOut
                | RunStatus::ReplyDropped
                | RunStatus::Cancelled
        )
    }
    pub(crate) fn describe(&self, timeout: Duration) -> String {
        match self {
            RunStatus::Answered => "answered".into(),
            RunStatus::Failed(e) => format!("failed: {e}"),
            RunStatus::Panicked(p) => format!("panicked: {p}"),
            RunStatus::TimedOut => format!("timed out after {} ms", timeout.as_millis()),
            RunStatus::ReplyDropped => "dropped its reply slot without answering".into(),
            RunStatus::SkippedDependencyBlocked => "skipped: a hook it runs after blocked".into(),
            RunStatus::SkippedCircuitOpen => "skipped: circuit breaker open".into(),
            RunStatus::SkippedGraceExpired => "skipped: SessionEnd grace period spent".into(),
            RunStatus::Cancelled => "cancelled with the turn".into(),
        }
    }
}

/// One hook's part in a dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookRun {
    /// The hook's name.
    pub hook: Arc<str>,
    /// How it ended.
    pub status: RunStatus,
    /// Time from dispatch to answer.
    pub elapsed: Duration,
    /// The decision this hook's answer gave on its own (before the fold; `Continue` for an
    /// answer without one, an action that does not fit the event, or a fail-open failure).
    #[serde(default)]
    pub decision: Decision,
}

/// The folded result of dispatching one event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The event's sequence number in its session.
    pub seq: u64,
    /// The event's kind.
    pub kind: Option<EventKind>,
    /// The folded decision.
    pub decision: Decision,
    /// Reasons given with the folded decision, in fold order (all block reasons are kept).
    pub reasons: Vec<Attributed<String>>,
    /// `PreToolUse`: the input as the last mutation in fold order left it (`None`: unchanged).
    pub updated_input: Option<Value>,
    /// Post events: the replacement output, last in fold order (`None`: unchanged).
    pub updated_output: Option<Value>,
    /// Post events: feedback for the model (block reasons), in fold order.
    pub feedback: Vec<Attributed<String>>,
    /// Contexts, tagged, de-duplicated by text, in fold order.
    pub contexts: Vec<TaggedContext>,
    /// Messages for the user.
    pub system_messages: Vec<Attributed<String>>,
    /// Warnings: hook warnings, failures under fail-open, actions that did not fit the event.
    pub warnings: Vec<Attributed<String>>,
    /// Metadata, all kept.
    pub metadata: Vec<Attributed<(String, Value)>>,
    /// The first request to end the turn, in fold order.
    pub stop: Option<Attributed<String>>,
    /// Every matched hook, in fold order.
    pub runs: Vec<HookRun>,
}

impl Outcome {
    /// Whether the event was blocked (PreToolUse Block, PermissionRequest Deny, gate Block).
    pub fn is_blocked(&self) -> bool {
        matches!(self.decision, Decision::Block | Decision::Deny)
    }

    /// The reasons joined with `; `.
    pub fn reason_text(&self) -> String {
        self.reasons
            .iter()
            .map(|r| r.value.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The hook that decided (first in fold order among those giving the folded decision).
    pub fn decided_by(&self) -> Option<&str> {
        self.reasons.first().map(|r| r.hook.as_str())
    }
}

/// What the fold needs to know about one hook's call.
pub(crate) struct Answered<'a> {
    pub hook: &'a Arc<str>,
    pub policy: FailurePolicy,
    pub timeout: Duration,
    pub status: RunStatus,
    pub reply: Option<Box<Reply>>,
    pub elapsed: Duration,
}

/// The decision and reason one reply gives on `kind` (after HK-2 filtering).
pub(crate) fn reply_decision(kind: EventKind, action: &Action) -> (Decision, Option<String>) {
    match action {
        Action::PreToolUse(a) => (
            match a.decision {
                ToolDecision::Continue => Decision::Continue,
                ToolDecision::Allow => Decision::Allow,
                ToolDecision::Ask => Decision::Ask,
                ToolDecision::Defer => Decision::Defer,
                ToolDecision::Block => Decision::Block,
            },
            a.reason.clone(),
        ),
        Action::Permission(PermissionAction::Override { decision, reason }) => (
            match decision {
                PermissionDecision::Allow => Decision::Allow,
                PermissionDecision::Ask => Decision::Ask,
                PermissionDecision::Deny => Decision::Deny,
            },
            reason.clone(),
        ),
        Action::Permission(PermissionAction::AllowWithInput { reason, .. }) => {
            (Decision::Allow, reason.clone())
        }
        Action::Gate(GateAction::Block { reason }) => (block_decision(kind), Some(reason.clone())),
        Action::PostToolUse(a) => match &a.block_reason {
            Some(r) => (Decision::Block, Some(r.clone())),
            None => (Decision::Continue, None),
        },
        _ => (Decision::Continue, None),
    }
}

/// Whether this answer stops hooks that run after it (ORD-3).
pub(crate) fn blocks_chain(
    kind: EventKind,
    status: &RunStatus,
    reply: Option<&Reply>,
    policy: FailurePolicy,
) -> bool {
    if status.is_failure() {
        return policy == FailurePolicy::Closed && kind.fails_closed();
    }
    match reply {
        Some(r) if r.action.fits(kind) => {
            let (d, _) = reply_decision(kind, &r.action);
            matches!(d, Decision::Block | Decision::Deny)
                && kind != EventKind::PostToolUse
                && kind != EventKind::PostToolUseFailure
        }
        _ => false,
    }
}

/// What the fold counted, for the runtime's metrics.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FoldStats {
    /// Failures of fail-closed hooks that became a Block / Deny.
    pub fail_closed: u64,
    /// Actions ignored because they do not fit the event.
    pub ignored: u64,
}

/// Folds the answers (given in fold order) into one [`Outcome`], built where it is returned
/// (boxed: an outcome is large, and moves on its way to the caller).
pub(crate) fn fold<'a>(
    kind: EventKind,
    seq: u64,
    answers: impl ExactSizeIterator<Item = Answered<'a>>,
) -> (Box<Outcome>, FoldStats) {
    let mut folding = Folding {
        kind,
        stats: FoldStats::default(),
        out: Box::new(Outcome {
            runs: Vec::with_capacity(answers.len()),
            seq,
            kind: Some(kind),
            ..Outcome::default()
        }),
        decided: Vec::new(),
        seen_contexts: None,
    };
    for a in answers {
        folding.answer(a);
    }
    folding.finish()
}

/// The fold in progress: the outcome so far and what it has yet to settle.
struct Folding {
    kind: EventKind,
    stats: FoldStats,
    out: Box<Outcome>,
    /// Every decision other than Continue, with its reason, in fold order.
    decided: Vec<(Decision, Attributed<String>)>,
    /// The context texts already kept.
    /// Made at the first context: most folds have none.
    seen_contexts: Option<HashSet<String>>,
}

impl Folding {
    /// Folds in one hook's answer: its run, then its failure or its reply.
    #[inline]
    fn answer(&mut self, a: Answered<'_>) {
        let failed = a.status.is_failure();
        let decision = match failed {
            true => self.failure(&a),
            false => Decision::Continue,
        };
        self.out.runs.push(HookRun {
            hook: a.hook.clone(),
            status: a.status,
            elapsed: a.elapsed,
            decision,
        });
        if failed {
            return;
        }
        let Some(reply) = a.reply else { return };
        let reply = *reply;
        self.extras(a.hook, reply.extras);
        self.action(a.hook, &reply.action);
    }

    /// A failed call: a warning, and under a fail-closed policy on an event that can fail
    /// closed, a Block / Deny (the run's decision, returned).
    #[inline]
    fn failure(&mut self, a: &Answered<'_>) -> Decision {
        let what = format!("hook `{}` {}", a.hook, a.status.describe(a.timeout));
        let mut decision = Decision::Continue;
        if a.policy == FailurePolicy::Closed && self.kind.fails_closed() {
            self.stats.fail_closed += 1;
            decision = block_decision(self.kind);
            self.decided.push((
                decision,
                attributed(a.hook, format!("{what} (fail-closed)")),
            ));
        }
        self.out.warnings.push(attributed(a.hook, what));
        decision
    }

    /// The reply's common fields: contexts (de-duplicated by text), messages, warnings,
    /// metadata and the first `stop`.
    #[inline]
    fn extras(&mut self, hook: &Arc<str>, extras: Extras) {
        let out = &mut self.out;
        for text in extras.context {
            if self
                .seen_contexts
                .get_or_insert_with(HashSet::new)
                .insert(text.clone())
            {
                out.contexts.push(TaggedContext {
                    hook: hook.to_string(),
                    event: self.kind,
                    text,
                });
            }
        }
        if let Some(m) = extras.system_message {
            out.system_messages.push(attributed(hook, m));
        }
        for w in extras.warnings {
            out.warnings.push(attributed(hook, w));
        }
        for (k, v) in extras.metadata {
            out.metadata.push(attributed(hook, (k, v)));
        }
        if out.stop.is_none() {
            if let Some(s) = extras.stop {
                out.stop = Some(attributed(hook, s));
            }
        }
    }

    /// The reply's action: ignored (with a warning) when it does not fit the event; else its
    /// rewrites, and its decision (on Post events, feedback).
    #[inline]
    fn action(&mut self, hook: &Arc<str>, action: &Action) {
        let kind = self.kind;
        if !action.fits(kind) {
            self.stats.ignored += 1;
            self.out.warnings.push(attributed(
                hook,
                format!(
                    "action {:?} does not fit {kind}; ignored",
                    action_name(action)
                ),
            ));
            return;
        }
        self.rewrites(action);
        let (d, reason) = reply_decision(kind, action);
        set_run_decision(&mut self.out.runs, d);
        if matches!(kind, EventKind::PostToolUse | EventKind::PostToolUseFailure) {
            if let Some(r) = reason {
                self.out.feedback.push(attributed(hook, r));
            }
            return;
        }
        if d != Decision::Continue {
            self.decided
                .push((d, attributed(hook, reason.unwrap_or_default())));
        }
    }

    /// A rewritten input or output replaces the one before it in fold order.
    #[inline]
    fn rewrites(&mut self, action: &Action) {
        match action {
            Action::PreToolUse(p) => {
                if let Some(input) = &p.updated_input {
                    self.out.updated_input = Some(input.clone());
                }
            }
            Action::PostToolUse(p) => {
                if let Some(output) = &p.replace_output {
                    self.out.updated_output = Some(output.clone());
                }
            }
            Action::Permission(PermissionAction::AllowWithInput { input, .. }) => {
                self.out.updated_input = Some(input.clone());
            }
            _ => {}
        }
    }

    /// The folded decision (the highest rank; any feedback blocks) and its reasons.
    #[inline]
    fn finish(self) -> (Box<Outcome>, FoldStats) {
        let Folding {
            kind,
            stats,
            mut out,
            decided,
            ..
        } = self;
        let winner = decided
            .iter()
            .map(|(d, _)| *d)
            .max_by_key(|d| d.rank(kind))
            .unwrap_or(Decision::Continue);
        out.decision = if !out.feedback.is_empty() {
            Decision::Block
        } else {
            winner
        };
        out.reasons = decided
            .into_iter()
            .filter(|(d, r)| d.rank(kind) == winner.rank(kind) && !r.value.is_empty())
            .map(|(_, r)| r)
            .collect();
        if !out.feedback.is_empty() {
            out.reasons = out.feedback.clone();
        }
        (out, stats)
    }
}

/// A value attributed to `hook`.
#[inline]
fn attributed<T>(hook: &Arc<str>, value: T) -> Attributed<T> {
    Attributed {
        hook: hook.to_string(),
        value,
    }
}

/// What a block gives on `kind`: Deny on `PermissionRequest`, Block on any other event.
#[inline]
fn block_decision(kind: EventKind) -> Decision {
    if kind == EventKind::PermissionRequest {
        Decision::Deny
    } else {
        Decision::Block
    }
}

/// Records the decision of the run just pushed.
fn set_run_decision(runs: &mut [HookRun], decision: Decision) {
    if let Some(run) = runs.last_mut() {
        run.decision = decision;
    }
}

fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Continue => "Continue",
        Action::PreToolUse(_) => "PreToolUse",
        Action::PostToolUse(_) => "PostToolUse",
        Action::Permission(_) => "Permission",
        Action::Gate(_) => "Gate",
    }
}
