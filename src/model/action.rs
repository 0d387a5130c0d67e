//! What a hook may answer: typed actions per event (HK-2) plus the fields every answer may carry
//! (HK-3).
//!
//! A [`Hook`](crate::Hook) method returns a [`HookOutput<A>`] whose action type `A` fits its event,
//! so a `PreToolUse` hook cannot return "replace output". Custom actors answer through a
//! [`ReplySlot`](crate::ReplySlot) with the untyped [`Reply`]; an action that does not fit the
//! event is then ignored with a warning.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::event::EventKind;

/// The decision of a `PreToolUse` hook. Folding: Block > Defer > Ask > Allow > Continue.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolDecision {
    /// No opinion: the permission service decides.
    #[default]
    Continue,
    /// Skip the permission prompt (never loosens a deny rule or the mode).
    Allow,
    /// Ask the user even if the rules would allow.
    Ask,
    /// Defer the call (Claude Code's `defer`): it does not run now.
    Defer,
    /// Block the call.
    Block,
}

/// What a `PreToolUse` hook answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PreToolUseAction {
    /// The decision.
    pub decision: ToolDecision,
    /// Why (shown to the model on Block, to the user on Ask).
    pub reason: Option<String>,
    /// A full replacement of the tool's input.
    pub updated_input: Option<Value>,
}

impl PreToolUseAction {
    /// No opinion.
    pub fn proceed() -> Self {
        Self::default()
    }
    /// Block the call with a reason.
    pub fn block(reason: impl Into<String>) -> Self {
        Self::with(ToolDecision::Block, reason)
    }
    /// Ask the user, with a reason.
    pub fn ask(reason: impl Into<String>) -> Self {
        Self::with(ToolDecision::Ask, reason)
    }
    /// Defer the call.
    pub fn defer(reason: impl Into<String>) -> Self {
        Self::with(ToolDecision::Defer, reason)
    }
    /// Allow the call without a prompt.
    pub fn allow() -> Self {
        Self {
            decision: ToolDecision::Allow,
            ..Self::default()
        }
    }
    /// Replace the tool's input (no decision).
    pub fn mutate(input: Value) -> Self {
        Self {
            updated_input: Some(input),
            ..Self::default()
        }
    }
    /// Also replace the input.
    pub fn with_input(mut self, input: Value) -> Self {
        self.updated_input = Some(input);
        self
    }
    fn with(decision: ToolDecision, reason: impl Into<String>) -> Self {
        Self {
            decision,
            reason: Some(reason.into()),
            updated_input: None,
        }
    }
}

/// What a `PostToolUse` or `PostToolUseFailure` hook answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PostToolUseAction {
    /// Replace what the model receives (the output, or on failure the error text).
    pub replace_output: Option<Value>,
    /// Feedback shown to the model next to the result; the tool is never re-run.
    pub block_reason: Option<String>,
}

impl PostToolUseAction {
    /// Keep the result as it is.
    pub fn keep() -> Self {
        Self::default()
    }
    /// Replace the output the model receives.
    pub fn replace(output: Value) -> Self {
        Self {
            replace_output: Some(output),
            block_reason: None,
        }
    }
    /// Show feedback to the model next to the result.
    pub fn block(reason: impl Into<String>) -> Self {
        Self {
            replace_output: None,
            block_reason: Some(reason.into()),
        }
    }
}

/// The permission decisions, ordered by restrictiveness (Deny is the most restrictive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionDecision {
    /// Run it.
    Allow,
    /// Ask the user.
    Ask,
    /// Do not run it.
    Deny,
}

/// What a `PermissionRequest` hook answers. Folding: the most restrictive override wins.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub enum PermissionAction {
    /// No opinion: the approver is asked.
    #[default]
    Continue,
    /// Decide in the user's place (an Allow never loosens a rule deny).
    Override {
        /// The decision.
        decision: PermissionDecision,
        /// Why.
        reason: Option<String>,
    },
    /// Allow in the user's place, running this input instead (Claude Code's PermissionRequest
    /// `updatedInput`, a full replacement). The pipeline checks the new input against the
    /// rules again, so it can never smuggle a denied call through.
    AllowWithInput {
        /// The input that runs.
        input: Value,
        /// Why.
        reason: Option<String>,
    },
}

impl PermissionAction {
    /// Allow with a rewritten input (see [`PermissionAction::AllowWithInput`]).
    pub fn allow_with_input(input: Value, reason: impl Into<String>) -> Self {
        PermissionAction::AllowWithInput {
            input,
            reason: Some(reason.into()),
        }
    }

    /// Override with a decision and a reason.
    pub fn decide(decision: PermissionDecision, reason: impl Into<String>) -> Self {
        PermissionAction::Override {
            decision,
            reason: Some(reason.into()),
        }
    }
}

/// What a hook on a blockable gate (`UserPromptSubmit`, `Stop`, `SubagentStop`, `PreCompact`)
/// answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub enum GateAction {
    /// Let it happen.
    #[default]
    Continue,
    /// Prevent it (on Stop: keep the turn going, with the reason as the next instruction).
    Block {
        /// Why.
        reason: String,
    },
}

impl GateAction {
    /// Block with a reason.
    pub fn block(reason: impl Into<String>) -> Self {
        GateAction::Block {
            reason: reason.into(),
        }
    }
}

/// An action of any event, as a custom actor's [`Reply`] carries it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub enum Action {
    /// No effect.
    #[default]
    Continue,
    /// A `PreToolUse` action.
    PreToolUse(PreToolUseAction),
    /// A `PostToolUse` / `PostToolUseFailure` action.
    PostToolUse(PostToolUseAction),
    /// A `PermissionRequest` action.
    Permission(PermissionAction),
    /// A gate action; a `Block` also fits `PreToolUse` (block) and the Post events (feedback).
    Gate(GateAction),
}

impl Action {
    /// Whether this action has a meaning on `kind` (HK-2).
    pub fn fits(&self, kind: EventKind) -> bool {
        use EventKind as K;
        match self {
            Action::Continue => true,
            Action::PreToolUse(_) => kind == K::PreToolUse,
            Action::PostToolUse(_) => matches!(kind, K::PostToolUse | K::PostToolUseFailure),
            Action::Permission(_) => kind == K::PermissionRequest,
            Action::Gate(GateAction::Continue) => true,
            Action::Gate(GateAction::Block { .. }) => matches!(
                kind,
                K::UserPromptSubmit
                    | K::PreToolUse
                    | K::PostToolUse
                    | K::PostToolUseFailure
                    | K::Stop
                    | K::SubagentStop
                    | K::PreCompact
                    | K::PermissionRequest
            ),
        }
    }
}

impl Reply {
    /// Whether folding this reply on `kind` would change nothing: an action without effect that
    /// fits the event, and no extras. The runtime then carries no reply at all.
    pub(crate) fn is_noop_for(&self, kind: EventKind) -> bool {
        self.extras.is_empty() && self.action.is_noop_for(kind)
    }
}

impl Extras {
    /// Whether there is nothing in them.
    pub(crate) fn is_empty(&self) -> bool {
        self.context.is_empty()
            && self.system_message.is_none()
            && self.metadata.is_empty()
            && self.stop.is_none()
            && self.warnings.is_empty()
    }
}

impl Action {
    /// Whether this action, folded on `kind`, changes nothing: one without effect that fits
    /// the event.
    pub(crate) fn is_noop_for(&self, kind: EventKind) -> bool {
        let inert = match self {
            Action::Continue | Action::Gate(GateAction::Continue) => true,
            Action::PreToolUse(a) => {
                a.decision == ToolDecision::Continue
                    && a.reason.is_none()
                    && a.updated_input.is_none()
            }
            Action::PostToolUse(a) => a.replace_output.is_none() && a.block_reason.is_none(),
            Action::Permission(PermissionAction::Continue) => true,
            _ => false,
        };
        inert && self.fits(kind)
    }
}

/// A typed action that can say, before it becomes an [`Action`], that it has no effect. A
/// typed hook method's action always fits the event it was called for, so an inert one with no
/// extras changes nothing and is dropped where the hook returns it.
pub(crate) trait Inert: Into<Action> {
    /// Whether folding it would change nothing.
    fn is_inert(&self) -> bool;
}

impl Inert for () {
    fn is_inert(&self) -> bool {
        true
    }
}
impl Inert for GateAction {
    fn is_inert(&self) -> bool {
        matches!(self, GateAction::Continue)
    }
}
impl Inert for PermissionAction {
    fn is_inert(&self) -> bool {
        matches!(self, PermissionAction::Continue)
    }
}
impl Inert for PreToolUseAction {
    fn is_inert(&self) -> bool {
        self.decision == ToolDecision::Continue
            && self.reason.is_none()
            && self.updated_input.is_none()
    }
}
impl Inert for PostToolUseAction {
    fn is_inert(&self) -> bool {
        self.replace_output.is_none() && self.block_reason.is_none()
    }
}

impl From<PreToolUseAction> for Action {
    fn from(a: PreToolUseAction) -> Self {
        Action::PreToolUse(a)
    }
}
impl From<PostToolUseAction> for Action {
    fn from(a: PostToolUseAction) -> Self {
        Action::PostToolUse(a)
    }
}
impl From<PermissionAction> for Action {
    fn from(a: PermissionAction) -> Self {
        Action::Permission(a)
    }
}
impl From<GateAction> for Action {
    fn from(a: GateAction) -> Self {
        Action::Gate(a)
    }
}
impl From<()> for Action {
    fn from(_: ()) -> Self {
        Action::Continue
    }
}

/// The fields every hook answer may carry, whatever the event (HK-3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Extras {
    /// Context for the model, injected as a `<system-reminder>` before the next model call.
    pub context: Vec<String>,
    /// A message for the user.
    pub system_message: Option<String>,
    /// Structured metadata, all kept.
    pub metadata: Vec<(String, Value)>,
    /// End the turn after this event, with this reason.
    pub stop: Option<String>,
    /// Warnings, all kept.
    pub warnings: Vec<String>,
}

/// A typed hook answer: the action for its event plus the common fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookOutput<A> {
    /// The event-specific action.
    pub action: A,
    /// Context, message, metadata, stop, warnings.
    pub extras: Extras,
}

impl<A> HookOutput<A> {
    /// An answer with this action and nothing else.
    pub fn new(action: A) -> Self {
        Self {
            action,
            extras: Extras::default(),
        }
    }
    /// Add context for the model.
    pub fn context(mut self, text: impl Into<String>) -> Self {
        self.extras.context.push(text.into());
        self
    }
    /// Set a message for the user.
    pub fn system_message(mut self, text: impl Into<String>) -> Self {
        self.extras.system_message = Some(text.into());
        self
    }
    /// Add a metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extras.metadata.push((key.into(), value));
        self
    }
    /// Ask to end the turn after this event.
    pub fn stop(mut self, reason: impl Into<String>) -> Self {
        self.extras.stop = Some(reason.into());
        self
    }
    /// Add a warning.
    pub fn warning(mut self, text: impl Into<String>) -> Self {
        self.extras.warnings.push(text.into());
        self
    }
}

impl<A> From<A> for HookOutput<A> {
    fn from(action: A) -> Self {
        Self::new(action)
    }
}

/// An untyped hook answer, as custom actors send it through a reply slot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The action.
    pub action: Action,
    /// Context, message, metadata, stop, warnings.
    pub extras: Extras,
}

impl Reply {
    /// "No opinion".
    pub fn proceed() -> Self {
        Self::default()
    }
    /// A reply with this action.
    pub fn action(action: impl Into<Action>) -> Self {
        Self {
            action: action.into(),
            extras: Extras::default(),
        }
    }
    /// A gate Block (also blocks `PreToolUse`).
    pub fn block(reason: impl Into<String>) -> Self {
        Self::action(GateAction::block(reason))
    }
    /// Add context for the model.
    pub fn with_context(mut self, text: impl Into<String>) -> Self {
        self.extras.context.push(text.into());
        self
    }
}

impl<A: Into<Action>> From<HookOutput<A>> for Reply {
    fn from(out: HookOutput<A>) -> Self {
        Reply {
            action: out.action.into(),
            extras: out.extras,
        }
    }
}

/// The result type of every [`Hook`](crate::Hook) method.
pub type HookResult<A> = Result<HookOutput<A>, crate::HookError>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `Inert::is_inert` is the shortcut of `Action::is_noop_for` for a typed method's action
    /// on the events that method serves: the two never disagree.
    #[test]
    fn a_typed_action_is_inert_exactly_when_its_action_changes_nothing() {
        fn agree<A: Inert + Clone + std::fmt::Debug>(actions: &[A], kinds: &[EventKind]) {
            for a in actions {
                for &kind in kinds {
                    let action: Action = a.clone().into();
                    assert_eq!(a.is_inert(), action.is_noop_for(kind), "{a:?} on {kind:?}");
                }
            }
        }
        use EventKind as K;
        agree(&[()], &K::ALL);
        agree(
            &[GateAction::Continue, GateAction::block("no")],
            &[K::UserPromptSubmit, K::Stop, K::SubagentStop, K::PreCompact],
        );
        agree(
            &[
                PreToolUseAction::proceed(),
                PreToolUseAction::block("no"),
                PreToolUseAction::ask("sure?"),
                PreToolUseAction::defer("later"),
                PreToolUseAction {
                    updated_input: Some(json!({"command": "ls"})),
                    ..PreToolUseAction::default()
                },
                PreToolUseAction {
                    reason: Some("noted".into()),
                    ..PreToolUseAction::default()
                },
            ],
            &[K::PreToolUse],
        );
        agree(
            &[
                PostToolUseAction::keep(),
                PostToolUseAction {
                    replace_output: Some(json!("redacted")),
                    block_reason: None,
                },
                PostToolUseAction {
                    replace_output: None,
                    block_reason: Some("look again".into()),
                },
            ],
            &[K::PostToolUse, K::PostToolUseFailure],
        );
        agree(
            &[
                PermissionAction::Continue,
                PermissionAction::decide(PermissionDecision::Allow, "fine"),
                PermissionAction::allow_with_input(json!({}), "rewritten"),
            ],
            &[K::PermissionRequest],
        );
    }
}
