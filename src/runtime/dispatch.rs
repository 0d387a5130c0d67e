//! The per-session dispatcher (ORD-1 … ORD-5, FL-1 … FL-6).
//!
//! Each session owns one [`Dispatcher`], behind the session's FIFO lock and driven by the task
//! that holds it (see [`session`](crate::runtime::session)), so a session's events are
//! dispatched one after another in sequence-number order while independent sessions dispatch
//! concurrently over the same immutable registry snapshot (ACT-3). For one event
//! the dispatcher: loads the snapshot, picks the matching hooks from the event index and their
//! filters (no message to a hook that does not match), enqueues the event for observers, runs the
//! hooks in parallel (or as `after` chains / sequentially), and folds the answers in fold order.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use serde_json::Value;
use smallvec::SmallVec;
use tokio::sync::{oneshot, OwnedMutexGuard};
use tokio::time::Instant;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::model::action::{Action, Reply};
use crate::model::error::ActorKind;
use crate::model::event::{now_ms, Envelope, Event, EventKind, SessionEnd};
use crate::model::hook::{CallScope, Hook, HookCx};
use crate::model::outcome::{blocks_chain, fold, reply_decision, Answered, Outcome, RunStatus};
use crate::runtime::channel::TrySendError;
use crate::runtime::core::{HookFailure, RuntimeCore};
use crate::runtime::event_log::HookRuns;
use crate::runtime::hook_actor::Serving;
use crate::runtime::latch::{Latch, Taken};
use crate::runtime::mailbox::{Answer, Delivery, Failure, ObserverMsg, ReplySlot};
use crate::runtime::session_state::SessionShared;
use crate::runtime::snapshot::{HookEntry, Snapshot, SnapshotRef, Target};

/// One hook's call, before folding.
struct Run {
    status: RunStatus,
    /// `None` also when the hook answered with a reply that changes nothing.
    reply: Option<Box<Reply>>,
    elapsed: Duration,
}

/// The tokens of the session's current turn, as a dispatch uses them.
struct TurnTokens {
    /// The turn's epoch when they were read.
    epoch: u64,
    /// The turn's token: observers get it; firing it ends every wait of the turn.
    cancel: Arc<CancellationToken>,
    /// The parent of the tokens hook calls get: a child of the turn's, reused from dispatch to
    /// dispatch until the turn changes, so a dispatch usually creates none. Nothing but the
    /// turn's cancellation fires it: each actor hook call gets a child token of its own, which
    /// its actor fires when the dispatcher stops waiting for it.
    hooks: Arc<CancellationToken>,
}

/// The names a session's runs and attributions carry: this session's own copies of the
/// snapshot's hook labels. Every session cloning a hook's one shared name would write its count
/// at every event, moving that cache line from core to core between sessions.
#[derive(Default)]
struct Labels {
    /// The snapshot they were copied from.
    generation: u64,
    /// One per hook of that snapshot, in its order.
    names: Vec<Arc<str>>,
}

impl Labels {
    /// Copies the labels again when the snapshot is another one.
    fn refresh(&mut self, snapshot: &Snapshot) {
        if self.generation != snapshot.generation || self.names.len() != snapshot.hooks.len() {
            self.names = snapshot
                .hooks
                .iter()
                .map(|h| Arc::from(&*h.label))
                .collect();
            self.generation = snapshot.generation;
        }
    }
}

/// Observer enqueues that wait for room in a full mailbox, beside the hooks.
type Waiting<'a> = Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>;

/// Dispatches one session's events. Not `Clone`: one task drives it.
pub(crate) struct Dispatcher {
    pub shared: Arc<SessionShared>,
    pub bus: Arc<RuntimeCore>,
    seq: u64,
    closed: bool,
    /// One timer for every parallel join of this session, set again only when a join needs it
    /// to fire earlier (see `poll_join`): a fresh timer per hook call, or moving this one at
    /// every dispatch, would cost a registration with the time driver each time.
    timer: Option<Pin<Box<Sleep>>>,
    /// The turn's tokens, read again only when the turn changed (its epoch moved).
    turn: Option<TurnTokens>,
    /// The session id's hash: which actor of a sharded hook serves this session.
    shard: u64,
    /// The last parallel join's latch, reused by the next one when no hook holds a slot of it
    /// any more.
    spare: Option<Arc<Latch<Answer>>>,
    /// The hook names this session's outcomes carry.
    labels: Labels,
}

impl Drop for Dispatcher {
    /// A session killed without `SessionEnd` (shutdown deadline) still ends its event streams.
    fn drop(&mut self) {
        if let Some(log) = self.shared.log.get() {
            log.close();
        }
        self.shared.returns.end();
    }
}

impl Dispatcher {
    pub fn new(shared: Arc<SessionShared>, bus: Arc<RuntimeCore>) -> Self {
        let shard = {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .hash_one(shared.id.as_str())
        };
        Self {
            shared,
            bus,
            seq: 0,
            closed: false,
            timer: None,
            turn: None,
            shard,
            spare: None,
            labels: Labels::default(),
        }
    }

    /// Closed by `SessionEnd`, or failed by a panic.
    pub fn is_closed(&self) -> bool {
        self.closed || self.shared.failure.get().is_some()
    }

    /// The snapshot this dispatch runs over, with the session's labels made to match it.
    fn snapshot(&mut self) -> Arc<SnapshotRef> {
        let snapshot = match self.shared.hooks.load_full() {
            Some(s) => s,
            None => self.bus.published.load(self.shard),
        };
        self.labels.refresh(&snapshot);
        snapshot
    }

    fn envelope(&mut self, event: Event, turn: u32, step: u32) -> Arc<Envelope> {
        // Where the last ones were made: free what observers handed back.
        self.shared.returns.free();
        self.seq += 1;
        let env = Arc::new(Envelope {
            session_id: self.shared.id.clone(),
            parent_session_id: self.shared.parent.clone(),
            seq: self.seq,
            turn,
            step,
            timestamp_ms: now_ms(),
            fields: self.shared.fields.clone(),
            event,
        });
        if let Some(log) = self.shared.log.get() {
            log.push(&env);
        }
        env
    }

    /// The turn's tokens, read under the turn's lock only when the turn changed. Taken out
    /// for the dispatch, which puts them back when it ends (no count moves per event).
    fn tokens(&mut self) -> TurnTokens {
        let epoch = self.shared.turn_epoch();
        if let Some(turn) = self.turn.take().filter(|t| t.epoch == epoch) {
            return turn;
        }
        let (cancel, epoch) = self.shared.turn();
        let hooks = Arc::new(cancel.child_token());
        TurnTokens {
            epoch,
            cancel,
            hooks,
        }
    }

    /// Polls a parallel join: ready when every hook answered, timed out or was cancelled, and
    /// every observer took the event. One timer serves every deadline: a hook past its
    /// deadline is dropped (its reply slot closes, so its actor stops the call) and recorded
    /// as timed out. A cancelled turn ends the wait for every hook still running: their tokens
    /// fired already (they are the turn's children); a timed-out actor hook's own token is
    /// fired by its actor when its reply slot closes.
    fn poll_join(
        &self,
        wait: &mut JoinWait<'_, '_>,
        env: &Envelope,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        if let Some(w) = wait.waiting.as_mut() {
            if w.as_mut().poll(cx).is_ready() {
                wait.waiting = None;
            }
        }
        let join = &mut wait.join;
        if let Some(latch) = &join.latch {
            // Registered before the slots are looked at: a last answer after that wakes us.
            latch.register(cx.waker());
        }
        let hooks_done = loop {
            if join.pending > 0 {
                self.collect_answers(join, env, cx);
            }
            if join.pending == 0 {
                break true;
            }
            // Registered before the check: a `cancel_turn` after it wakes this task.
            self.shared.turn_waker.register(cx.waker());
            if self.shared.turn_cancelled_since(wait.epoch) {
                join.cancel_all();
                break true;
            }
            let timer = wait
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(join.first_deadline())));
            if !wait.armed {
                // Set again only when it would fire too late: one set for an earlier deadline
                // fires early, finds nothing due and is set to the next deadline then, which
                // costs less than moving it at every dispatch.
                wait.armed = true;
                let deadline = join.first_deadline();
                if timer.deadline() > deadline {
                    timer.as_mut().reset(deadline);
                }
            }
            if self.expire(join, env, timer, cx).is_ready() {
                break true;
            }
            // An answer that came while the timer closed other slots wakes nobody: look again.
            if !join.answered_since() {
                break false;
            }
        };
        if hooks_done && wait.waiting.is_none() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Hands what the hooks did with this event to the session's log, when anyone keeps or
    /// reads it.
    fn record_runs(&self, env: &Envelope, outcome: &Outcome) {
        if outcome.runs.is_empty() {
            return;
        }
        if let Some(log) = self.shared.log.get().filter(|l| l.wants_runs()) {
            log.push_runs(HookRuns {
                session_id: env.session_id.clone(),
                seq: env.seq,
                kind: env.kind(),
                decision: outcome.decision,
                runs: outcome.runs.clone(),
            });
        }
    }

    /// Counts the event (and, with detailed metrics, the tool's latency from a Post event).
    fn count(&self, env: &Envelope) {
        let m = &self.bus.metrics;
        m.dispatches.get(self.shard).by_event[env.kind().index()].fetch_add(1, Ordering::Relaxed);
        if m.detail.enabled() {
            match &env.event {
                Event::PostToolUse(e) => {
                    m.detail
                        .record_tool(&e.tool_name, Duration::from_millis(e.duration_ms), false)
                }
                Event::PostToolUseFailure(e) => {
                    m.detail
                        .record_tool(&e.tool_name, Duration::from_millis(e.duration_ms), true)
                }
                _ => {}
            }
        }
    }

    /// Ends the session (ORD-4): waits until observers took every earlier event, dispatches
    /// `SessionEnd` to hooks one at a time within the grace period, then drops session hooks and
    /// the scratchpad.
    pub async fn close(&mut self, reason: &str, turn: u32, step: u32) -> Box<Outcome> {
        if self.closed {
            return Box::default();
        }
        self.closed = true;
        self.shared.closing.store(true, Ordering::Release);
        let span =
            tracing::debug_span!("dispatch", event = "SessionEnd", session = %self.shared.id);
        Box::pin(self.close_in(reason, turn, step).instrument(span)).await
    }

    async fn close_in(&mut self, reason: &str, turn: u32, step: u32) -> Box<Outcome> {
        let grace = Instant::now() + self.bus.config.session_end_grace;
        let snapshot = self.snapshot();
        self.flush_observers(&snapshot, grace).await;
        let env = self.envelope(
            Event::SessionEnd(SessionEnd {
                reason: reason.to_owned(),
            }),
            turn,
            step,
        );
        self.count(&env);
        let cancel = Arc::new(CancellationToken::new());
        self.notify_observers(&snapshot, &env, &cancel).await;
        let matched = matching(&snapshot, &env);
        let mut runs = Vec::with_capacity(matched.len());
        for &i in &matched {
            let entry = &snapshot.hooks[i];
            let run = if Instant::now() >= grace {
                self.bus
                    .metrics
                    .hook_skipped
                    .fetch_add(1, Ordering::Relaxed);
                // FL-6: skipped hooks are logged, not only counted.
                tracing::warn!(
                    hook = %entry.name,
                    event = %env.kind(),
                    session = %env.session_id,
                    "hook skipped: the SessionEnd grace period is over"
                );
                Run {
                    status: RunStatus::SkippedGraceExpired,
                    reply: None,
                    elapsed: Duration::ZERO,
                }
            } else {
                let budget = grace - Instant::now();
                self.call(entry, env.clone(), &cancel, Some(budget)).await
            };
            runs.push(run);
        }
        let outcome = self.fold(&snapshot, &env, &matched, runs);
        self.record_runs(&env, &outcome);
        self.bus.drop_session(&self.shared).await;
        if let Some(log) = self.shared.log.get() {
            log.close();
        }
        // No next event will free what observers hand back: they keep nothing from now on.
        self.shared.returns.end();
        outcome
    }

    async fn flush_observers(&self, snapshot: &Snapshot, deadline: Instant) {
        // A congested observer is already losing (and counting) events; waiting on it would
        // only stall the session's end.
        let acks = snapshot.observers.iter().filter(|o| {
            !o.is_congested()
                && o.session
                    .as_deref()
                    .is_none_or(|s| s == self.shared.id.as_str())
        });
        let waits = acks.map(|o| async move {
            let deadline = if o.user_task {
                deadline.min(Instant::now() + crate::runtime::observer::USER_MAILBOX_FLUSH)
            } else {
                deadline
            };
            let (tx, rx) = oneshot::channel();
            let sent = tokio::time::timeout_at(deadline, o.tx.send(ObserverMsg::Flush(tx))).await;
            if matches!(sent, Ok(Ok(()))) {
                let _ = tokio::time::timeout_at(deadline, rx).await;
            }
        });
        join_all(waits).await;
    }

    /// Enqueues the event for every observer that wants it, where there is room; what waits
    /// for room in a full mailbox comes back as one future.
    fn offer_observers<'a>(
        &'a self,
        snapshot: &'a Snapshot,
        env: &Arc<Envelope>,
        cancel: &Arc<CancellationToken>,
    ) -> Waiting<'a> {
        let indices = &snapshot.obs_by_event[env.kind().index()];
        if indices.is_empty() {
            return None;
        }
        let mut scope = None;
        let mut full = Vec::new();
        for &i in indices {
            let obs = &snapshot.observers[i];
            if !obs.wants(env) {
                continue;
            }
            let scope = scope.get_or_insert_with(|| {
                CallScope::returning(
                    env.clone(),
                    self.shared.scratchpad.clone(),
                    cancel.clone(),
                    self.shared.returns.clone(),
                )
            });
            let delivery = Delivery {
                cx: HookCx::scoped(scope),
                reply: None,
                span: tracing::Span::current(),
            };
            if let Some(msg) = obs.offer(delivery, &self.bus.metrics) {
                full.push((i, msg));
            }
        }
        if full.is_empty() {
            return None;
        }
        let metrics = &self.bus.metrics;
        Some(Box::pin(async move {
            for (i, msg) in full {
                snapshot.observers[i].wait_for_room(msg, metrics).await;
            }
        }))
    }

    /// Enqueues the event for every observer that wants it, waiting for room where needed.
    async fn notify_observers(
        &self,
        snapshot: &Snapshot,
        env: &Arc<Envelope>,
        cancel: &Arc<CancellationToken>,
    ) {
        if let Some(waiting) = self.offer_observers(snapshot, env, cancel) {
            waiting.await;
        }
    }

    /// Starts every matched hook: actor hooks get their delivery, inline hooks their first
    /// poll comes with the join's.
    fn start_all<'a>(
        &self,
        join: &mut Join<'a>,
        spare: Option<Arc<Latch<Answer>>>,
        scope: &Arc<CallScope>,
        inline_cx: &'a HookCx,
        span: &tracing::Span,
    ) {
        let (snapshot, matched) = (join.snapshot, join.matched);
        let actors = matched
            .iter()
            .filter(|&&i| !matches!(snapshot.hooks[i].target, Target::Inline(_)))
            .count();
        // One latch for every actor hook of the dispatch: slot `n` is the `n`-th one's.
        let latch = (actors > 0).then(|| Latch::renew(spare, actors));
        let mut slot = 0;
        let mut calls = 0;
        for &i in matched {
            let entry = &snapshot.hooks[i];
            let flight = match (&entry.target, &latch) {
                (Target::Inline(hook), _) => self.start_inline(entry, hook.as_ref(), inline_cx),
                (_, Some(latch)) => {
                    slot += 1;
                    self.start_actor(entry, scope, latch, slot - 1, span)
                }
                (_, None) => Err(RunStatus::ReplyDropped),
            };
            if !matches!(flight, Err(RunStatus::SkippedCircuitOpen)) {
                calls += 1;
            }
            match flight {
                Ok(flight) => {
                    join.pending += 1;
                    join.shortest = join.shortest.min(entry.timeout);
                    join.flights.push(flight);
                    join.runs.push(None);
                }
                Err(status) => {
                    join.flights.push(InFlight::Done);
                    join.runs.push(Some(Run {
                        status,
                        reply: None,
                        elapsed: Duration::ZERO,
                    }));
                }
            }
        }
        join.latch = latch;
        self.count_calls(calls);
    }

    /// Polls every hook still running and records the ones that answered.
    fn collect_answers(&self, join: &mut Join<'_>, env: &Envelope, cx: &mut Context<'_>) {
        // Actor hooks' slots are looked at only when one of them was finished since the last
        // pass.
        let latch = join.latch.as_deref();
        let answered = latch.is_some_and(|l| {
            let finished = l.finished();
            std::mem::replace(&mut join.seen, finished) != finished
        });
        // One clock read per pass, for every inline hook that finished in it; an actor hook's
        // answer carries its own time.
        let mut now: Option<Duration> = None;
        for (k, flight) in join.flights.iter_mut().enumerate() {
            if matches!(flight, InFlight::Latched(_)) && !answered {
                continue;
            }
            if let Poll::Ready((answer, at)) = flight.poll(latch, cx) {
                *flight = InFlight::Done;
                join.pending -= 1;
                let entry = &join.snapshot.hooks[join.matched[k]];
                let elapsed = match at {
                    Some(at) => at.saturating_duration_since(join.started),
                    None => *now.get_or_insert_with(|| join.started.elapsed()),
                };
                join.runs[k] = Some(self.finish(entry, env, answer, elapsed));
            }
        }
    }

    /// Records the hooks past their deadline as timed out and sets the timer to the next
    /// deadline; ready when nothing is left to wait for.
    fn expire(
        &self,
        join: &mut Join<'_>,
        env: &Envelope,
        timer: &mut Pin<Box<Sleep>>,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        while timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let mut next: Option<Instant> = None;
            for k in 0..join.flights.len() {
                if matches!(join.flights[k], InFlight::Done) {
                    continue;
                }
                let deadline = join.deadline(k);
                if deadline <= now {
                    join.stop(k);
                    join.pending -= 1;
                    let entry = &join.snapshot.hooks[join.matched[k]];
                    join.runs[k] = Some(self.timed_out(entry, env, join.started.elapsed()));
                } else {
                    next = Some(next.map_or(deadline, |n| n.min(deadline)));
                }
            }
            match next {
                Some(at) => timer.as_mut().reset(at),
                None => return Poll::Ready(()),
            }
        }
        Poll::Pending
    }

    /// Says a call is skipped (open circuit), and counts it so.
    fn admit(&self, entry: &HookEntry) -> Result<(), RunStatus> {
        if !entry.breaker_admits() {
            let metrics = &self.bus.metrics;
            metrics.hook_skipped.fetch_add(1, Ordering::Relaxed);
            return Err(RunStatus::SkippedCircuitOpen);
        }
        Ok(())
    }

    /// Counts the calls made (every start but the skipped ones), once per dispatch, in the
    /// session's stripe.
    fn count_calls(&self, calls: u64) {
        if calls > 0 {
            let metrics = &self.bus.metrics;
            let counts = metrics.dispatches.get(self.shard);
            counts.hook_calls.fetch_add(calls, Ordering::Relaxed);
        }
    }

    /// Sends an actor hook its delivery, with slot `slot` of the dispatch's latch to answer
    /// in. A hook not called (open circuit, no actor) has its slot closed at once.
    fn start_actor(
        &self,
        entry: &HookEntry,
        scope: &Arc<CallScope>,
        latch: &Arc<Latch<Answer>>,
        slot: usize,
        span: &tracing::Span,
    ) -> Result<InFlight<'static>, RunStatus> {
        let admitted = self.admit(entry).and_then(|()| {
            entry
                .target
                .mailbox(self.shard)
                .ok_or(RunStatus::ReplyDropped)
        });
        let tx = match admitted {
            Ok(tx) => tx,
            Err(status) => {
                latch.close(slot);
                return Err(status);
            }
        };
        let delivery = Delivery {
            cx: HookCx::scoped(scope),
            reply: Some(ReplySlot::new(latch, slot)),
            span: span.clone(),
        };
        Ok(match tx.try_send(delivery) {
            Ok(()) => InFlight::Latched(slot),
            // A full mailbox: wait for room within the hook's deadline.
            Err(TrySendError::Full(delivery)) => {
                let tx = tx.clone();
                let send = Box::pin(async move {
                    // Refused: the delivery's reply slot is dropped, which answers the slot.
                    let _ = tx.send(delivery).await;
                });
                InFlight::Sending(send, slot)
            }
            Err(TrySendError::Closed(delivery)) => {
                latch.close(slot);
                drop(delivery);
                InFlight::Ready(Some(Err(Failure::Error(
                    "the hook's mailbox is closed".into(),
                ))))
            }
        })
    }

    /// Starts an inline hook on this task.
    fn start_inline<'a>(
        &self,
        entry: &'a HookEntry,
        hook: &'a dyn Hook,
        cx: &'a HookCx,
    ) -> Result<InFlight<'a>, RunStatus> {
        self.admit(entry)?;
        Ok(match &entry.inline_limit {
            // Limited concurrency: wait for a permit first (the rare case).
            Some(limit) => InFlight::Boxed(Box::pin(async move {
                let _permit = limit.acquire().await.ok();
                Some(crate::runtime::hook_actor::serve(hook, cx).await)
            })),
            None => match crate::runtime::hook_actor::serving(hook, cx) {
                Ok(call) => InFlight::Inline(call),
                Err(failure) => InFlight::Ready(Some(Err(failure))),
            },
        })
    }

    /// Classifies an answer (or its absence) and records failures.
    fn finish(
        &self,
        entry: &HookEntry,
        env: &Envelope,
        answer: Option<Answer>,
        elapsed: Duration,
    ) -> Run {
        let metrics = &self.bus.metrics;
        let (status, reply) = match answer {
            None => {
                metrics.hook_reply_dropped.fetch_add(1, Ordering::Relaxed);
                (RunStatus::ReplyDropped, None)
            }
            Some(Ok(reply)) => (RunStatus::Answered, reply),
            Some(Err(Failure::Error(e))) => {
                metrics.hook_errors.fetch_add(1, Ordering::Relaxed);
                (RunStatus::Failed(e), None)
            }
            Some(Err(Failure::Panic(p))) => {
                metrics.hook_panics.fetch_add(1, Ordering::Relaxed);
                self.bus
                    .supervisor
                    .report_call(ActorKind::Hook, &entry.name, &p);
                (RunStatus::Panicked(p), None)
            }
        };
        self.record(entry, env, &status, reply.as_deref(), elapsed);
        Run {
            status,
            reply,
            elapsed,
        }
    }

    fn timed_out(&self, entry: &HookEntry, env: &Envelope, elapsed: Duration) -> Run {
        self.bus
            .metrics
            .hook_timeouts
            .fetch_add(1, Ordering::Relaxed);
        let status = RunStatus::TimedOut;
        self.record(entry, env, &status, None, elapsed);
        Run {
            status,
            reply: None,
            elapsed,
        }
    }

    /// Feeds the circuit breaker; counts and logs a failure (FL-6); records the run's latency
    /// (when detailed metrics are on) and its telemetry span.
    fn record(
        &self,
        entry: &HookEntry,
        env: &Envelope,
        status: &RunStatus,
        reply: Option<&Reply>,
        elapsed: Duration,
    ) {
        let failed = status.is_failure();
        entry.breaker_record(failed);
        let detail = &self.bus.metrics.detail;
        if detail.enabled() {
            detail.record_hook(
                &entry.name,
                elapsed,
                failed,
                *status == RunStatus::TimedOut,
                matches!(status, RunStatus::Panicked(_)),
            );
        }
        // Telemetry: one span per hook run, with why a call was decided and by whom. The
        // fields are only computed when a subscriber wants the span.
        let kind = env.kind();
        let span = tracing::debug_span!(
            "hook_run",
            hook = %entry.name,
            event = %kind,
            session = %env.session_id,
            tool = env.event.tool().map(|(name, _)| name),
            decision = %run_decision(kind, status, reply),
            reason = run_reason(kind, status, reply, entry.timeout).as_deref(),
            latency_us = elapsed.as_micros() as u64,
        );
        drop(span.enter());
        if failed {
            self.bus.metrics.record_hook_failure(&entry.name);
            let listeners = self.bus.failure_listeners.read();
            if !listeners.is_empty() {
                let failure = HookFailure {
                    session_id: env.session_id.clone(),
                    hook: entry.name.clone(),
                    event: env.kind(),
                    status: status.describe(entry.timeout),
                };
                for listener in listeners.iter() {
                    listener(&failure);
                }
            }
            tracing::warn!(
                hook = %entry.name,
                event = %env.kind(),
                session = %env.session_id,
                status = ?status,
                "hook failed"
            );
        }
    }

    /// Runs hooks with dependencies: a hook starts when the hooks it runs after have answered,
    /// sees the input as they left it, and is skipped if one of them blocked (ORD-2, ORD-3).
    async fn run_chains(
        &self,
        snapshot: &Snapshot,
        env: &Arc<Envelope>,
        matched: &[usize],
        sequential: bool,
        cancel: &CancellationToken,
    ) -> Vec<Run> {
        let n = matched.len();
        let deps = chain_deps(snapshot, matched, sequential);
        let mut runs: Vec<Option<Run>> = (0..n).map(|_| None).collect();
        let mut started = vec![false; n];
        let mut pending = FuturesUnordered::new();
        loop {
            // Start every hook whose dependencies have all finished, until none is left.
            while let Some(k) =
                (0..n).find(|&k| !started[k] && deps[k].iter().all(|&d| runs[d].is_some()))
            {
                started[k] = true;
                if self.chain_blocked(snapshot, env.kind(), matched, &deps[k], &runs) {
                    runs[k] = Some(Run {
                        status: RunStatus::SkippedDependencyBlocked,
                        reply: None,
                        elapsed: Duration::ZERO,
                    });
                    continue;
                }
                let input_env = mutated_for(env, &ancestors(&deps, k), &runs);
                let entry = snapshot.hooks[matched[k]].clone();
                pending.push(async move {
                    let run = self.call(&entry, input_env, cancel, None).await;
                    (k, run)
                });
            }
            match pending.next().await {
                Some((k, run)) => runs[k] = Some(run),
                None => break,
            }
        }
        runs.into_iter()
            .map(|r| {
                r.unwrap_or(Run {
                    status: RunStatus::SkippedDependencyBlocked,
                    reply: None,
                    elapsed: Duration::ZERO,
                })
            })
            .collect()
    }

    /// Whether one of a hook's dependencies blocked (or was itself skipped for that): the hook
    /// is then skipped, and counted so.
    fn chain_blocked(
        &self,
        snapshot: &Snapshot,
        kind: EventKind,
        matched: &[usize],
        deps: &[usize],
        runs: &[Option<Run>],
    ) -> bool {
        let blocked = deps.iter().any(|&d| {
            runs[d].as_ref().is_some_and(|r| {
                let entry = &snapshot.hooks[matched[d]];
                matches!(r.status, RunStatus::SkippedDependencyBlocked)
                    || blocks_chain(kind, &r.status, r.reply.as_deref(), entry.options.failure)
            })
        });
        if blocked {
            self.bus
                .metrics
                .hook_skipped
                .fetch_add(1, Ordering::Relaxed);
        }
        blocked
    }

    /// Folds the runs; `snapshot` is the one `Dispatcher::snapshot` gave this dispatch, so the
    /// labels match it.
    fn fold<I>(
        &self,
        snapshot: &Snapshot,
        env: &Envelope,
        matched: &[usize],
        runs: I,
    ) -> Box<Outcome>
    where
        I: IntoIterator<Item = Run>,
        I::IntoIter: ExactSizeIterator,
    {
        let kind = env.kind();
        debug_assert_eq!(
            self.labels.generation, snapshot.generation,
            "labels refreshed"
        );
        let names = &self.labels.names;
        let answers = matched.iter().zip(runs).map(|(&i, run)| {
            let entry = &snapshot.hooks[i];
            Answered {
                hook: &names[i],
                policy: entry.options.failure,
                timeout: entry.timeout,
                status: run.status,
                reply: run.reply,
                elapsed: run.elapsed,
            }
        });
        let (outcome, stats) = fold(kind, env.seq, answers);
        let m = &self.bus.metrics;
        if stats.fail_closed > 0 {
            m.fail_closed_blocks
                .fetch_add(stats.fail_closed, Ordering::Relaxed);
        }
        if stats.ignored > 0 {
            m.ignored_actions
                .fetch_add(stats.ignored, Ordering::Relaxed);
            tracing::warn!(event = %kind, session = %env.session_id, ignored = stats.ignored, "hook actions that do not fit the event were ignored");
        }
        outcome
    }

    /// Calls one hook with its timeout (or `budget`, when shorter) and classifies the result:
    /// the one-at-a-time path of `after` chains and `SessionEnd`, started like a parallel join's
    /// calls and with a child token of its own.
    async fn call(
        &self,
        entry: &Arc<HookEntry>,
        env: Arc<Envelope>,
        parent: &CancellationToken,
        budget: Option<Duration>,
    ) -> Run {
        let started = Instant::now();
        let token = Arc::new(parent.child_token());
        let scope = CallScope::new(env.clone(), self.shared.scratchpad.clone(), token.clone());
        // An inline hook borrows its context from here while it runs.
        let cx;
        let mut latch = None;
        let flight = match &entry.target {
            Target::Inline(hook) => {
                cx = HookCx::scoped(&scope);
                self.start_inline(entry, hook.as_ref(), &cx)
            }
            Target::Actor(_) | Target::Sharded(_) => {
                let latch = latch.insert(Latch::new(1));
                self.start_actor(entry, &scope, latch, 0, &tracing::Span::current())
            }
        };
        if !matches!(flight, Err(RunStatus::SkippedCircuitOpen)) {
            self.count_calls(1);
        }
        let mut flight = match flight {
            Ok(flight) => flight,
            Err(status) => {
                return Run {
                    status,
                    reply: None,
                    elapsed: Duration::ZERO,
                }
            }
        };
        let limit = budget.map_or(entry.timeout, |b| b.min(entry.timeout));
        let latch = latch.as_deref();
        let answer = tokio::time::timeout(
            limit,
            std::future::poll_fn(|c| {
                if let Some(latch) = latch {
                    latch.register(c.waker());
                }
                flight.poll(latch, c).map(|(answer, _)| answer)
            }),
        )
        .await;
        drop(flight);
        if let Some(latch) = latch {
            latch.close_all();
        }
        let elapsed = started.elapsed();
        match answer {
            Err(_) => {
                token.cancel();
                self.timed_out(entry, &env, elapsed)
            }
            Ok(answer) => self.finish(entry, &env, answer, elapsed),
        }
    }
}

/// Starts one event on the session whose lock is held: `SessionEnd` closes the session, any
/// other event is numbered and dispatched. The future is boxed, so it can finish on a task of
/// its own if its caller stops waiting.
pub(crate) fn start(
    mut this: OwnedMutexGuard<Dispatcher>,
    event: Event,
    turn: u32,
    step: u32,
) -> Pin<Box<dyn Future<Output = Box<Outcome>> + Send>> {
    if let Event::SessionEnd(SessionEnd { reason }) = event {
        return Box::pin(async move { this.close(&reason, turn, step).await });
    }
    // Numbered here, before the dispatch's future exists: the event is not carried in it.
    let env = this.envelope(event, turn, step);
    Box::pin(dispatch(this, env))
}

/// Dispatches one numbered event and returns the folded outcome.
///
/// One `async fn` over the session's owned lock, with no nested ones on the hot path: the
/// matched hooks are started, then joined in one `poll_fn`, then folded, so the dispatch's
/// state is built in place rather than copied from layer to layer.
async fn dispatch(mut this: OwnedMutexGuard<Dispatcher>, env: Arc<Envelope>) -> Box<Outcome> {
    let this: &mut Dispatcher = &mut this;
    // Hooks and observers run under this span (actors instrument each delivery with it),
    // so their own logs nest under the dispatch that caused them. Free when nobody listens.
    let span = tracing::debug_span!(
        "dispatch",
        event = %env.kind(),
        session = %env.session_id,
        seq = env.seq
    );
    let snapshot = this.snapshot();
    this.count(&env);
    let turn = this.tokens();
    let mut timer = this.timer.take();
    let spare = this.spare.take();
    let matched = matching(&snapshot, &env);
    // Observers take the event now where their mailbox has room; a full one is waited on
    // beside the hooks (a full mailbox must not delay them).
    let waiting = span.in_scope(|| this.offer_observers(&snapshot, &env, &turn.cancel));
    let sequential = this.bus.config.sequential[env.kind().index()];
    let chained =
        sequential || (snapshot.has_deps && matched.iter().any(|&i| !snapshot.deps[i].is_empty()));
    let mut spare_after = None;
    let outcome = if chained && !matched.is_empty() {
        // Boxed: chains are the rare path; they should not grow the parallel one.
        let chains = this.run_chains(&snapshot, &env, &matched, sequential, &turn.cancel);
        let runs = Box::pin(
            async move {
                match waiting {
                    Some(w) => futures_util::future::join(w, chains).await.1,
                    None => chains.await,
                }
            }
            .instrument(span),
        )
        .await;
        this.fold(&snapshot, &env, &matched, runs)
    } else {
        // Independent hooks run together (ORD-2): actor hooks are sent their delivery at
        // once and awaited on their reply slots, inline hooks are polled here, borrowing
        // one context.
        let scope = CallScope::new(
            env.clone(),
            this.shared.scratchpad.clone(),
            turn.hooks.clone(),
        );
        let inline_cx = HookCx::scoped(&scope);
        let mut wait = JoinWait {
            join: Join::new(&snapshot, &matched),
            waiting,
            timer: timer.take(),
            armed: false,
            epoch: turn.epoch,
        };
        let current = delivery_span(&span);
        span.in_scope(|| this.start_all(&mut wait.join, spare, &scope, &inline_cx, &current));
        std::future::poll_fn(|cx| this.poll_join(&mut wait, &env, cx))
            .instrument(span)
            .await;
        drop(wait.waiting.take());
        timer = wait.timer.take();
        let (runs, latch) = wait.join.finish();
        spare_after = latch;
        this.fold(&snapshot, &env, &matched, runs)
    };
    this.timer = timer;
    this.spare = spare_after;
    this.turn = Some(turn);
    this.record_runs(&env, &outcome);
    outcome
}

/// The span every delivery of a dispatch carries, taken once: the dispatch's, or the caller's
/// when nobody listens to the dispatch's.
fn delivery_span(dispatch: &tracing::Span) -> tracing::Span {
    if dispatch.is_disabled() {
        tracing::Span::current()
    } else {
        dispatch.clone()
    }
}

/// A parallel join while it waits: the hooks, the observers waiting for room, and the
/// session's one timer.
struct JoinWait<'a, 'w> {
    join: Join<'a>,
    waiting: Waiting<'w>,
    timer: Option<Pin<Box<Sleep>>>,
    /// Whether the timer was set for this join yet.
    armed: bool,
    /// The turn's epoch at the start: a later one means the turn was cancelled.
    epoch: u64,
}

/// One hook call in flight in a parallel join.
enum InFlight<'a> {
    /// An actor hook: the answer comes in this slot of the dispatch's latch.
    Latched(usize),
    /// An actor hook whose mailbox was full: its delivery waits for room, then its answer
    /// comes in this slot.
    Sending(Pin<Box<dyn Future<Output = ()> + Send + 'a>>, usize),
    /// An inline hook, polled in place on the dispatcher's task.
    Inline(Serving<'a>),
    /// A call that must wait first (a full mailbox, an inline concurrency limit).
    Boxed(Pin<Box<dyn Future<Output = Option<Answer>> + Send + 'a>>),
    /// Known at once (a closed mailbox, a panic while starting).
    Ready(Option<Answer>),
    /// Finished, timed out or cancelled: nothing left to poll.
    Done,
}

impl InFlight<'_> {
    /// The answer (`None`: the reply slot was dropped unanswered), with the time an actor
    /// hook gave it (`None`: now).
    fn poll(
        &mut self,
        latch: Option<&Latch<Answer>>,
        cx: &mut Context<'_>,
    ) -> Poll<(Option<Answer>, Option<Instant>)> {
        if let InFlight::Sending(send, slot) = self {
            std::task::ready!(send.as_mut().poll(cx));
            *self = InFlight::Latched(*slot);
        }
        match self {
            InFlight::Latched(slot) => match latch.map(|l| l.take(*slot)) {
                Some(Taken::Done(answer, at)) => Poll::Ready((answer, Some(at))),
                Some(Taken::Waiting) => Poll::Pending,
                None => Poll::Ready((None, None)),
            },
            InFlight::Inline(call) => Pin::new(call).poll(cx).map(|a| (Some(a), None)),
            InFlight::Boxed(f) => f.as_mut().poll(cx).map(|a| (a, None)),
            InFlight::Ready(answer) => Poll::Ready((answer.take(), None)),
            InFlight::Sending(..) | InFlight::Done => Poll::Pending,
        }
    }

    /// The latch slot of an actor hook's call.
    fn slot(&self) -> Option<usize> {
        match self {
            InFlight::Latched(slot) | InFlight::Sending(_, slot) => Some(*slot),
            _ => None,
        }
    }
}

/// Each matched hook's dependencies as positions within `matched`: the previous hook when the
/// event runs sequentially, else its `after` hooks that matched (one that did not match this
/// event is satisfied at once).
fn chain_deps(snapshot: &Snapshot, matched: &[usize], sequential: bool) -> Vec<Vec<usize>> {
    (0..matched.len())
        .map(|k| {
            if sequential {
                return if k == 0 { vec![] } else { vec![k - 1] };
            }
            snapshot.deps[matched[k]]
                .iter()
                .filter_map(|d| matched.iter().position(|m| m == d))
                .collect()
        })
        .collect()
}

/// The hooks of one parallel dispatch while they run.
struct Join<'a> {
    snapshot: &'a Snapshot,
    matched: &'a [usize],
    started: Instant,
    flights: SmallVec<[InFlight<'a>; 4]>,
    /// In `matched` order; `None` while the hook runs.
    runs: SmallVec<[Option<Run>; 4]>,
    /// Where the actor hooks answer (none without actor hooks).
    latch: Option<Arc<Latch<Answer>>>,
    /// How many latch slots were finished at the last look.
    seen: usize,
    pending: usize,
    /// The shortest timeout of the hooks started.
    shortest: Duration,
}

impl<'a> Join<'a> {
    /// A join of the `matched` hooks, none started yet.
    fn new(snapshot: &'a Snapshot, matched: &'a [usize]) -> Self {
        Join {
            snapshot,
            matched,
            started: Instant::now(),
            flights: SmallVec::new(),
            runs: SmallVec::new(),
            latch: None,
            seen: 0,
            pending: 0,
            shortest: Duration::MAX,
        }
    }

    /// Stops waiting on the `k`-th hook: an actor hook's slot closes (its actor stops the
    /// call), an inline hook's future is dropped.
    fn stop(&mut self, k: usize) {
        if let (Some(slot), Some(latch)) = (self.flights[k].slot(), &self.latch) {
            latch.close(slot);
        }
        self.flights[k] = InFlight::Done;
    }

    /// Whether an actor hook finished since the last look: the join must look again before
    /// it waits (no wake-up comes for it when the dispatcher closed the last other slot).
    fn answered_since(&self) -> bool {
        self.latch
            .as_ref()
            .is_some_and(|l| l.finished() != self.seen)
    }

    /// When the `k`-th matched hook times out.
    fn deadline(&self, k: usize) -> Instant {
        self.started + self.snapshot.hooks[self.matched[k]].timeout
    }

    /// The earliest deadline of the hooks started: a hook that answered since makes it only
    /// earlier, and a timer set for it then fires early, finds nothing due and is set again.
    fn first_deadline(&self) -> Instant {
        crate::model::bounds::deadline_after(self.started, self.shortest)
    }

    /// The turn was cancelled: every hook still running is recorded as cancelled.
    fn cancel_all(&mut self) {
        for k in 0..self.flights.len() {
            if !matches!(self.flights[k], InFlight::Done) {
                self.stop(k);
                self.runs[k] = Some(Run {
                    status: RunStatus::Cancelled,
                    reply: None,
                    elapsed: self.started.elapsed(),
                });
            }
        }
        self.pending = 0;
    }

    /// The runs in `matched` order (the slots of the hooks that did not answer close), and
    /// the latch, for the next join.
    /// (Taken in place: the join is large, and moving it costs a copy.)
    fn finish(
        &mut self,
    ) -> (
        impl ExactSizeIterator<Item = Run> + '_,
        Option<Arc<Latch<Answer>>>,
    ) {
        if let Some(latch) = &self.latch {
            latch.close_all();
        }
        let latch = self.latch.take();
        let runs = self.runs.drain(..).map(|r| {
            r.unwrap_or(Run {
                status: RunStatus::ReplyDropped,
                reply: None,
                elapsed: Duration::ZERO,
            })
        });
        (runs, latch)
    }
}

impl Drop for Join<'_> {
    /// However the join ends (done, cancelled, dropped mid-way), no actor hook is left
    /// waiting to be told that nobody waits for its answer.
    fn drop(&mut self) {
        if let Some(latch) = &self.latch {
            latch.close_all();
        }
    }
}

/// What one run decided, for telemetry: the reply's decision, or how the call failed.
fn run_decision(kind: EventKind, status: &RunStatus, reply: Option<&Reply>) -> String {
    match (status, reply) {
        (RunStatus::Answered, Some(r)) => format!("{:?}", reply_decision(kind, &r.action).0),
        (RunStatus::Answered, None) => "Continue".into(),
        (other, _) => format!("{other:?}")
            .split('(')
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// The reason of a run's decision, or the failure's description.
fn run_reason(
    kind: EventKind,
    status: &RunStatus,
    reply: Option<&Reply>,
    timeout: Duration,
) -> Option<String> {
    match (status, reply) {
        (RunStatus::Answered, Some(r)) => reply_decision(kind, &r.action).1,
        (RunStatus::Answered, None) => None,
        (other, _) => Some(other.describe(timeout)),
    }
}

/// Indices into the snapshot of the hooks that want this event, in fold order.
fn matching(snapshot: &Snapshot, env: &Envelope) -> SmallVec<[usize; 8]> {
    let k = env.kind().index();
    let mut out = SmallVec::new();
    let wanted = |list: &[usize], out: &mut SmallVec<[usize; 8]>| {
        for &i in list {
            if snapshot.hooks[i].matches(env) {
                out.push(i);
            }
        }
    };
    let Some((tool, _)) = env.event.tool() else {
        wanted(&snapshot.by_event[k], &mut out);
        return out;
    };
    // Hooks indexed under this tool's name match by construction; the rest are asked. Both
    // lists are in fold order; merging keeps it.
    let named = snapshot.by_tool[k].get(tool).map_or(&[][..], Vec::as_slice);
    if named.is_empty() {
        wanted(&snapshot.untargeted[k], &mut out);
        return out;
    }
    let mut named = named.iter().copied().peekable();
    for i in snapshot.untargeted[k].iter().copied() {
        if !snapshot.hooks[i].matches(env) {
            continue;
        }
        while let Some(n) = named.next_if(|&n| n < i) {
            out.push(n);
        }
        out.push(i);
    }
    out.extend(named);
    out
}

/// Every hook `k` transitively runs after, in fold order.
fn ancestors(deps: &[Vec<usize>], k: usize) -> Vec<usize> {
    let mut seen = vec![false; deps.len()];
    let mut stack = deps[k].clone();
    while let Some(d) = stack.pop() {
        if !seen[d] {
            seen[d] = true;
            stack.extend(deps[d].iter().copied());
        }
    }
    (0..deps.len()).filter(|&i| seen[i]).collect()
}

/// The envelope as the mutations of `ancestors` (in fold order) left it.
fn mutated_for(env: &Arc<Envelope>, ancestors: &[usize], runs: &[Option<Run>]) -> Arc<Envelope> {
    let mut current: Option<Envelope> = None;
    for &a in ancestors {
        let Some(Run {
            status: RunStatus::Answered,
            reply: Some(reply),
            ..
        }) = &runs[a]
        else {
            continue;
        };
        let base = current.as_ref().unwrap_or(env.as_ref());
        if let Some(next) = apply_mutation(base, &reply.action) {
            current = Some(next);
        }
    }
    current.map_or_else(|| env.clone(), Arc::new)
}

fn apply_mutation(env: &Envelope, action: &Action) -> Option<Envelope> {
    let mut next = env.clone();
    match (&mut next.event, action) {
        (Event::PreToolUse(e), Action::PreToolUse(a)) => {
            e.tool_input = a.updated_input.clone()?;
        }
        (Event::PostToolUse(e), Action::PostToolUse(a)) => {
            let output = a.replace_output.clone()?;
            let original = std::mem::replace(&mut e.tool_response, output);
            e.original_response.get_or_insert(original);
        }
        (Event::PostToolUseFailure(e), Action::PostToolUse(a)) => {
            e.error = match a.replace_output.clone()? {
                Value::String(s) => s,
                other => other.to_string(),
            };
        }
        _ => return None,
    }
    Some(next)
}
