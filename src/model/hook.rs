//! The [`Hook`] trait (HK-1), what a hook declares about itself ([`HookOptions`]), and the
//! context a hook method gets ([`HookCx`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::model::action::{
    GateAction, HookOutput, HookResult, PermissionAction, PostToolUseAction, PreToolUseAction,
    Reply,
};
use crate::model::error::HookError;
use crate::model::event::*;
use crate::model::filter::{NamePattern, ToolFilter};
use crate::model::scratchpad::Scratchpad;

/// What happens when a hook errors, panics, times out or drops its reply slot (FL-1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Treat the failure as "no opinion" and record a warning (the default).
    #[default]
    Open,
    /// Treat the failure as a Block on gates that can still prevent something (`PreToolUse`,
    /// `UserPromptSubmit`, `PermissionRequest` → Deny, `PreCompact`); a warning elsewhere.
    Closed,
}

/// After `failures` consecutive failures a hook is skipped for `cool_down` (FL-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitBreaker {
    /// Consecutive failures that open the circuit.
    pub failures: u32,
    /// How long the hook is skipped once the circuit is open.
    pub cool_down: Duration,
}

/// What a hook declares at registration (HK-1). Read once, when the hook is registered.
#[derive(Debug, Clone, Default)]
pub struct HookOptions {
    /// Subscribed events; empty means all.
    pub events: Vec<EventKind>,
    /// Which tool calls it sees (tool events only).
    pub filter: ToolFilter,
    /// Pattern over the query field of non-tool events (`source`, `trigger`, `reason`, ...).
    pub matcher: NamePattern,
    /// Its timeout; `None` takes the runtime default (30 s, or `HOOK_TIMEOUT_SECS`).
    pub timeout: Option<Duration>,
    /// What a failure means.
    pub failure: FailurePolicy,
    /// Names of hooks it must run after (it sees their mutations; their Block skips it).
    pub after: Vec<String>,
    /// At most this many calls at once across all sessions (`None`: unlimited, `1`: serial).
    pub max_concurrency: Option<usize>,
    /// Fold position: lower first, then registration order.
    pub priority: i32,
    /// Run on the dispatcher's task instead of an actor of its own (for cheap, non-blocking
    /// hooks); keeps panic isolation and the timeout.
    pub inline: bool,
    /// Optional circuit breaker.
    pub circuit_breaker: Option<CircuitBreaker>,
}

impl HookOptions {
    /// Default options: all events, every tool, fail-open, default timeout.
    pub fn new() -> Self {
        Self::default()
    }
    /// Subscribe to these events only.
    pub fn events(mut self, events: impl IntoIterator<Item = EventKind>) -> Self {
        self.events = events.into_iter().collect();
        self
    }
    /// Filter tool events.
    pub fn filter(mut self, filter: ToolFilter) -> Self {
        self.filter = filter;
        self
    }
    /// Match the query field of non-tool events.
    pub fn matcher(mut self, matcher: NamePattern) -> Self {
        self.matcher = matcher;
        self
    }
    /// Set the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Set the failure policy.
    pub fn failure(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
        self
    }
    /// Fail closed.
    pub fn fail_closed(self) -> Self {
        self.failure(FailurePolicy::Closed)
    }
    /// Run after the named hook.
    pub fn after(mut self, name: impl Into<String>) -> Self {
        self.after.push(name.into());
        self
    }
    /// Limit concurrent calls.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = Some(n.max(1));
        self
    }
    /// Set the fold priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
    /// Run inline on the dispatcher's task.
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }
    /// Add a circuit breaker.
    pub fn circuit_breaker(mut self, failures: u32, cool_down: Duration) -> Self {
        self.circuit_breaker = Some(CircuitBreaker {
            failures: failures.max(1),
            cool_down,
        });
        self
    }

    /// Whether the hook subscribes to `kind`.
    pub fn subscribes(&self, kind: EventKind) -> bool {
        self.events.is_empty() || self.events.contains(&kind)
    }
}

/// What a hook method gets besides the event: the envelope, the session's scratchpad and a
/// cancellation token that fires when the call times out or the turn is cancelled.
#[derive(Debug, Clone)]
pub struct HookCx {
    /// What every call of one dispatch shares: one pointer per call, not one per field.
    scope: Arc<CallScope>,
    /// A call's own token, a child of the scope's, made the first time the call asks for its
    /// token (or when the call is stopped): a hook that never looks at it costs no child token.
    own: Option<std::sync::OnceLock<CancellationToken>>,
}

/// The part of a [`HookCx`] the calls of one dispatch share.
#[derive(Debug)]
pub(crate) struct CallScope {
    envelope: Arc<Envelope>,
    scratchpad: Arc<Scratchpad>,
    // Shared behind an `Arc`: cloning a `CancellationToken` itself takes the token tree's lock.
    cancel: Arc<CancellationToken>,
    /// Where the last holder hands the envelope back to its session (observers' scopes).
    returns: Option<Arc<Returns>>,
}

impl CallScope {
    pub(crate) fn new(
        envelope: Arc<Envelope>,
        scratchpad: Arc<Scratchpad>,
        cancel: Arc<CancellationToken>,
    ) -> Arc<Self> {
        Arc::new(Self {
            envelope,
            scratchpad,
            cancel,
            returns: None,
        })
    }

    /// A scope whose envelope its last holder hands back to `returns` (see [`Returns`]).
    pub(crate) fn returning(
        envelope: Arc<Envelope>,
        scratchpad: Arc<Scratchpad>,
        cancel: Arc<CancellationToken>,
        returns: Arc<Returns>,
    ) -> Arc<Self> {
        Arc::new(Self {
            envelope,
            scratchpad,
            cancel,
            returns: Some(returns),
        })
    }
}

/// Envelopes handed back to the session that made them, to be freed on its own task at its
/// next dispatch.
///
/// An observer runs after the dispatch that fed it, so it is usually the last holder of the
/// envelope: the event's strings and JSON would be freed on the observer's worker. glibc frees
/// a block made on another thread into that thread's arena, under the arena's lock, and the
/// two workers then fight over it on every event (with one observer, a third of the time went
/// to that lock). Handed back, they are freed where they were made.
///
/// What is handed back waits at most until the session's next event; once the session has
/// ended, nothing is kept.
#[derive(Debug, Default)]
pub(crate) struct Returns {
    /// Set after an envelope is handed back: the session's dispatch looks only then.
    waiting: AtomicBool,
    /// Set when the session ended: nothing is kept any more.
    ended: AtomicBool,
    envelopes: parking_lot::Mutex<Vec<Arc<Envelope>>>,
}

impl Returns {
    /// Keeps `envelope` for the session if this is its last reference and the session goes
    /// on; else lets it go.
    fn give_back(&self, envelope: Arc<Envelope>) {
        // The last reference: nobody else can take another from it meanwhile.
        if Arc::strong_count(&envelope) == 1 && !self.ended.load(Ordering::Acquire) {
            self.envelopes.lock().push(envelope);
            self.waiting.store(true, Ordering::Release);
        }
    }

    /// Frees what was handed back (on the session's task).
    pub(crate) fn free(&self) {
        // Read first: most dispatches find nothing, and a read leaves the line shared.
        if self.waiting.load(Ordering::Relaxed) && self.waiting.swap(false, Ordering::Acquire) {
            self.drop_all();
        }
    }

    /// The session ended: frees what was handed back, and keeps nothing from now on.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.waiting.store(false, Ordering::Relaxed);
        self.drop_all();
    }

    /// Drops every envelope kept, outside the lock.
    fn drop_all(&self) {
        let envelopes = std::mem::take(&mut *self.envelopes.lock());
        drop(envelopes);
    }
}

impl HookCx {
    /// A context of its own (a remote hook's call, served outside any dispatch).
    #[cfg(feature = "nats")]
    pub(crate) fn new(
        envelope: Arc<Envelope>,
        scratchpad: Arc<Scratchpad>,
        cancel: Arc<CancellationToken>,
    ) -> Self {
        Self::scoped(&CallScope::new(envelope, scratchpad, cancel))
    }
    /// Lets go of the context. Where it held the last reference to its scope and the scope
    /// hands its envelope back, the envelope goes back to its session (see [`Returns`]).
    pub(crate) fn release(self) {
        let Ok(scope) = Arc::try_unwrap(self.scope) else {
            return;
        };
        if let Some(returns) = scope.returns {
            returns.give_back(scope.envelope);
        }
    }

    /// A context in a scope the calls of one dispatch share.
    pub(crate) fn scoped(scope: &Arc<CallScope>) -> Self {
        Self {
            scope: scope.clone(),
            own: None,
        }
    }
    /// The event with its place in the session.
    pub fn envelope(&self) -> &Arc<Envelope> {
        &self.scope.envelope
    }
    /// The session's id.
    pub fn session_id(&self) -> &str {
        &self.scope.envelope.session_id
    }
    /// The session's scratchpad.
    pub fn scratchpad(&self) -> &Scratchpad {
        &self.scope.scratchpad
    }
    /// Fires when this call timed out or was cancelled; long work should select on it. It fires
    /// before the call is dropped: an actor hook's future is polled for
    /// [`CANCEL_GRACE`](crate::CANCEL_GRACE) more, so a `select!` on the token sees it.
    pub fn cancellation(&self) -> &CancellationToken {
        match &self.own {
            Some(own) => own.get_or_init(|| self.scope.cancel.child_token()),
            None => &self.scope.cancel,
        }
    }

    /// The same context with a token of its own, a child of this one (made when first asked
    /// for): [`cancel_own`](Self::cancel_own) stops this call alone.
    pub(crate) fn with_own_token(self) -> HookCx {
        HookCx {
            own: Some(std::sync::OnceLock::new()),
            ..self
        }
    }

    /// Fires the call's own token (see [`with_own_token`](Self::with_own_token)), or the shared
    /// one when the context has none of its own.
    pub(crate) fn cancel_own(&self) {
        self.cancellation().cancel();
    }
}

/// How long a hook call or a tool call is still polled after its cancellation token fired
/// (timeout, cancelled turn) before its future is dropped: time to see the token and clean up.
pub const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

macro_rules! default_ok {
    () => {
        Ok(HookOutput::default())
    };
}

/// A lifecycle hook. Every method has a no-op default: implement only what you care about.
///
/// The runtime runs each registered hook as an actor (or inline, if its options say so) and
/// calls the method of the event being dispatched. Methods take `&self`: a hook that keeps state
/// uses interior mutability or the session [`Scratchpad`].
///
/// ```
/// use hookbus::{Hook, HookCx, HookOptions, HookResult, PreToolUseAction, EventKind, PreToolUse};
///
/// struct NoRmRf;
///
/// #[hookbus::async_trait]
/// impl Hook for NoRmRf {
///     fn name(&self) -> &str { "no-rm-rf" }
///     fn options(&self) -> HookOptions { HookOptions::new().events([EventKind::PreToolUse]) }
///     async fn pre_tool_use(&self, _cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
///         let cmd = ev.tool_input["command"].as_str().unwrap_or("");
///         Ok(if cmd.contains("rm -rf") {
///             PreToolUseAction::block("rm -rf is not allowed").into()
///         } else {
///             PreToolUseAction::proceed().into()
///         })
///     }
/// }
/// ```
#[async_trait]
#[allow(unused_variables)]
pub trait Hook: Send + Sync + 'static {
    /// The hook's name, unique in its scope (global, or one session).
    fn name(&self) -> &str;

    /// Events, filter, timeout, failure policy, `after`, concurrency. Read once at registration.
    fn options(&self) -> HookOptions {
        HookOptions::default()
    }

    /// True for a hook driven by data rather than code (a Claude Code settings handler): the
    /// runtime then calls [`handle`](Hook::handle) for every event instead of the typed methods.
    fn untyped(&self) -> bool {
        false
    }

    /// The untyped answer of an [`untyped`](Hook::untyped) hook. An action that does not fit
    /// the event is ignored with a warning (HK-2).
    async fn handle(&self, cx: &HookCx) -> Result<Reply, HookError> {
        Ok(Reply::proceed())
    }

    /// `SessionStart` (context only).
    async fn session_start(&self, cx: &HookCx, ev: &SessionStart) -> HookResult<()> {
        default_ok!()
    }
    /// `UserPromptSubmit` (block, context).
    async fn user_prompt_submit(
        &self,
        cx: &HookCx,
        ev: &UserPromptSubmit,
    ) -> HookResult<GateAction> {
        default_ok!()
    }
    /// `PreToolUse` (block, defer, ask, allow, mutate input).
    async fn pre_tool_use(&self, cx: &HookCx, ev: &PreToolUse) -> HookResult<PreToolUseAction> {
        default_ok!()
    }
    /// `PermissionRequest` (override).
    async fn permission_request(
        &self,
        cx: &HookCx,
        ev: &PermissionRequest,
    ) -> HookResult<PermissionAction> {
        default_ok!()
    }
    /// `PermissionDenied` (observe).
    async fn permission_denied(&self, cx: &HookCx, ev: &PermissionDenied) -> HookResult<()> {
        default_ok!()
    }
    /// `PostToolUse` (replace output, feedback, context).
    async fn post_tool_use(&self, cx: &HookCx, ev: &PostToolUse) -> HookResult<PostToolUseAction> {
        default_ok!()
    }
    /// `PostToolUseFailure` (replace error text, context).
    async fn post_tool_use_failure(
        &self,
        cx: &HookCx,
        ev: &PostToolUseFailure,
    ) -> HookResult<PostToolUseAction> {
        default_ok!()
    }
    /// `StepComplete` (observe).
    async fn step_complete(&self, cx: &HookCx, ev: &StepComplete) -> HookResult<()> {
        default_ok!()
    }
    /// `Stop` (block = keep going).
    async fn stop(&self, cx: &HookCx, ev: &Stop) -> HookResult<GateAction> {
        default_ok!()
    }
    /// `StopFailure` (observe).
    async fn stop_failure(&self, cx: &HookCx, ev: &StopFailure) -> HookResult<()> {
        default_ok!()
    }
    /// `SubagentStart` (context).
    async fn subagent_start(&self, cx: &HookCx, ev: &SubagentStart) -> HookResult<()> {
        default_ok!()
    }
    /// `SubagentStop` (block = keep the subagent going).
    async fn subagent_stop(&self, cx: &HookCx, ev: &SubagentStop) -> HookResult<GateAction> {
        default_ok!()
    }
    /// `PreCompact` (block).
    async fn pre_compact(&self, cx: &HookCx, ev: &PreCompact) -> HookResult<GateAction> {
        default_ok!()
    }
    /// `PostCompact` (observe).
    async fn post_compact(&self, cx: &HookCx, ev: &PostCompact) -> HookResult<()> {
        default_ok!()
    }
    /// `Notification` (observe).
    async fn notification(&self, cx: &HookCx, ev: &Notification) -> HookResult<()> {
        default_ok!()
    }
    /// `Interrupt` (observe).
    async fn interrupt(&self, cx: &HookCx, ev: &Interrupt) -> HookResult<()> {
        default_ok!()
    }
    /// `SessionEnd` (run one hook at a time, last event of the session).
    async fn session_end(&self, cx: &HookCx, ev: &SessionEnd) -> HookResult<()> {
        default_ok!()
    }
}

type HookFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The call of one hook method, with the action's type erased on the way out. It holds the
/// future the method returned, so calling a hook costs no allocation beyond the one
/// `async_trait` makes; it is `Unpin`, so a caller can poll it in place. Its output is the
/// reply boxed (a reply is large and moves several times on its way to the fold), or `None`
/// for a reply that changes nothing.
pub(crate) struct CallHook<'a> {
    kind: EventKind,
    call: Call<'a>,
}

enum Call<'a> {
    Unit(HookFuture<'a, HookResult<()>>),
    Gate(HookFuture<'a, HookResult<GateAction>>),
    Pre(HookFuture<'a, HookResult<PreToolUseAction>>),
    Post(HookFuture<'a, HookResult<PostToolUseAction>>),
    Permission(HookFuture<'a, HookResult<PermissionAction>>),
    Untyped(HookFuture<'a, Result<Reply, HookError>>),
}

/// A reply as it travels to the fold: boxed, and `None` when it changes nothing.
pub(crate) type ErasedReply = Option<Box<Reply>>;

fn erase(reply: Reply, kind: EventKind) -> ErasedReply {
    (!reply.is_noop_for(kind)).then(|| Box::new(reply))
}

impl Future for CallHook<'_> {
    type Output = Result<ErasedReply, HookError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // A typed answer that changes nothing never becomes a `Reply` at all. A typed
        // method's action always fits the event it was called for, so being inert is all
        // `Action::is_noop_for` would check (the `Inert` test holds them to agree).
        fn typed<A>(r: HookResult<A>) -> Result<ErasedReply, HookError>
        where
            A: crate::model::action::Inert,
        {
            r.map(|out| {
                if out.extras.is_empty() && out.action.is_inert() {
                    return None;
                }
                Some(Box::new(Reply {
                    action: out.action.into(),
                    extras: out.extras,
                }))
            })
        }
        let this = self.get_mut();
        let kind = this.kind;
        match &mut this.call {
            Call::Unit(f) => f.as_mut().poll(cx).map(typed),
            Call::Gate(f) => f.as_mut().poll(cx).map(typed),
            Call::Pre(f) => f.as_mut().poll(cx).map(typed),
            Call::Post(f) => f.as_mut().poll(cx).map(typed),
            Call::Permission(f) => f.as_mut().poll(cx).map(typed),
            Call::Untyped(f) => f
                .as_mut()
                .poll(cx)
                .map(|r| r.map(|reply| erase(reply, kind))),
        }
    }
}

/// Calls the method of `hook` that fits the event in `cx`.
pub(crate) fn call_hook<'a>(hook: &'a dyn Hook, cx: &'a HookCx) -> CallHook<'a> {
    let kind = cx.envelope().kind();
    let call = if hook.untyped() {
        Call::Untyped(hook.handle(cx))
    } else {
        match &cx.envelope().event {
            Event::SessionStart(e) => Call::Unit(hook.session_start(cx, e)),
            Event::UserPromptSubmit(e) => Call::Gate(hook.user_prompt_submit(cx, e)),
            Event::PreToolUse(e) => Call::Pre(hook.pre_tool_use(cx, e)),
            Event::PermissionRequest(e) => Call::Permission(hook.permission_request(cx, e)),
            Event::PermissionDenied(e) => Call::Unit(hook.permission_denied(cx, e)),
            Event::PostToolUse(e) => Call::Post(hook.post_tool_use(cx, e)),
            Event::PostToolUseFailure(e) => Call::Post(hook.post_tool_use_failure(cx, e)),
            Event::StepComplete(e) => Call::Unit(hook.step_complete(cx, e)),
            Event::Stop(e) => Call::Gate(hook.stop(cx, e)),
            Event::StopFailure(e) => Call::Unit(hook.stop_failure(cx, e)),
            Event::SubagentStart(e) => Call::Unit(hook.subagent_start(cx, e)),
            Event::SubagentStop(e) => Call::Gate(hook.subagent_stop(cx, e)),
            Event::PreCompact(e) => Call::Gate(hook.pre_compact(cx, e)),
            Event::PostCompact(e) => Call::Unit(hook.post_compact(cx, e)),
            Event::Notification(e) => Call::Unit(hook.notification(cx, e)),
            Event::Interrupt(e) => Call::Unit(hook.interrupt(cx, e)),
            Event::SessionEnd(e) => Call::Unit(hook.session_end(cx, e)),
        }
    };
    CallHook { kind, call }
}
