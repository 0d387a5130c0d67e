//! Background command handlers (`async` / `asyncRewake` in settings, or a first stdout line
//! `{"async": true}`): jobs that outlive the hook call, and what they leave for the model.
//!
//! * A job is bounded: by its deadline (the handler's timeout, or `asyncTimeout` from the
//!   moment it announced itself), by its session (its SessionEnd kills it, and waits a moment
//!   for the kill), and by the settings' hooks (when the last of them is dropped, at bus
//!   shutdown, every job is killed).
//! * When a job ends, its output is read as Claude Code reads an async hook's later output
//!   ([`background_output`]) and queued for its session; [`AsyncDelivery`], a hook on the
//!   events whose context reaches the model, hands the queue to the session's next such event.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::output::background_output;
use super::run::{joined, Job, Raw};
use crate::model::action::Reply;
use crate::model::error::HookError;
use crate::model::event::EventKind;
use crate::model::hook::{Hook, HookCx, HookOptions};

/// How the name of the hook that delivers background handlers' output to the session's next
/// event (and kills a session's background handlers at its end) begins; a hash of the
/// settings' handlers follows, so that several settings can be registered on one bus.
pub const ASYNC_HOOK_NAME: &str = "cc async";

/// Most deliveries a session keeps waiting for its next event; older ones are dropped first.
const MAX_PENDING: usize = 64;

/// How long a SessionEnd waits for its session's jobs to be killed.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// Events whose contexts reach the model in the agent loop: a delivery waits for the next one.
const DELIVERY_EVENTS: [EventKind; 8] = [
    EventKind::SessionStart,
    EventKind::UserPromptSubmit,
    EventKind::PreToolUse,
    EventKind::PermissionRequest,
    EventKind::PostToolUse,
    EventKind::PostToolUseFailure,
    EventKind::Stop,
    EventKind::PreCompact,
];

/// The background jobs of one settings registration, by session.
#[derive(Debug, Default)]
pub(crate) struct Background {
    sessions: Mutex<HashMap<String, SessionJobs>>,
    /// Fires when the registration's hooks are all gone: every job is killed.
    root: CancellationToken,
}

/// One session's jobs and what they left.
#[derive(Debug)]
struct SessionJobs {
    /// Fires at the session's end: its jobs are killed. A child of the root token.
    cancel: CancellationToken,
    tracker: TaskTracker,
    /// Contexts waiting for the session's next event, oldest first.
    pending: Vec<String>,
}

/// What a finished job is read as.
#[derive(Debug, Clone)]
pub(crate) struct JobSpec {
    /// `asyncRewake`: an exit 2 delivers its stderr (else stdout).
    pub rewake: bool,
    /// For logs: the hook name.
    pub hook: String,
}

impl Drop for Background {
    fn drop(&mut self) {
        self.root.cancel();
    }
}

impl Background {
    /// Runs `job` on for `session`; what it leaves is queued for the session's next event.
    pub fn adopt(self: &Arc<Self>, session: &str, job: Job, spec: JobSpec) {
        let (token, tracker) = {
            let mut sessions = self.sessions.lock();
            let jobs = sessions
                .entry(session.to_owned())
                .or_insert_with(|| SessionJobs {
                    cancel: self.root.child_token(),
                    tracker: TaskTracker::new(),
                    pending: Vec::new(),
                });
            (jobs.cancel.clone(), jobs.tracker.clone())
        };
        let owner: Weak<Self> = Arc::downgrade(self);
        let session = session.to_owned();
        tracker.spawn(async move {
            let Job {
                mut handle,
                cancel,
                first_line,
            } = job;
            let done = tokio::select! {
                done = &mut handle => done,
                _ = token.cancelled() => {
                    cancel.cancel();
                    (&mut handle).await
                }
            };
            let raw = joined(done, &spec.hook);
            log_end(&spec.hook, &session, &raw);
            let contexts = background_output(&raw, spec.rewake, first_line);
            if let Some(owner) = owner.upgrade() {
                owner.deposit(&session, contexts);
            }
        });
    }

    /// Queues `contexts` for `session`'s next event (if the session is still known).
    fn deposit(&self, session: &str, contexts: Vec<String>) {
        if contexts.is_empty() {
            return;
        }
        let mut sessions = self.sessions.lock();
        let Some(jobs) = sessions.get_mut(session) else {
            return;
        };
        jobs.pending.extend(contexts);
        let excess = jobs.pending.len().saturating_sub(MAX_PENDING);
        if excess > 0 {
            jobs.pending.drain(..excess);
            tracing::warn!(
                session,
                dropped = excess,
                "background hook output waiting for the next event passed the limit; the \
                 oldest was dropped"
            );
        }
    }

    /// Takes what `session`'s finished jobs left.
    pub fn take(&self, session: &str) -> Vec<String> {
        self.sessions
            .lock()
            .get_mut(session)
            .map(|jobs| std::mem::take(&mut jobs.pending))
            .unwrap_or_default()
    }

    /// Kills `session`'s jobs and forgets the session, waiting at most [`KILL_WAIT`] for the
    /// kills; what was not delivered is dropped.
    pub async fn close(&self, session: &str) {
        let Some(jobs) = self.sessions.lock().remove(session) else {
            return;
        };
        jobs.cancel.cancel();
        jobs.tracker.close();
        if tokio::time::timeout(KILL_WAIT, jobs.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                session,
                "background hooks of a closed session were not killed in time"
            );
        }
    }
}

/// Logs how a background job ended (a timeout or a failure is a warning: no failure is silent).
fn log_end(hook: &str, session: &str, raw: &Raw) {
    match raw {
        Raw::Exited { code, .. } => {
            tracing::debug!(hook, session, code, "background hook finished")
        }
        Raw::Cancelled => tracing::debug!(hook, session, "background hook killed"),
        Raw::Timeout => tracing::warn!(hook, session, "background hook timed out; killed"),
        Raw::SpawnError(e) | Raw::HttpError(e) => {
            tracing::warn!(hook, session, error = %e, "background hook failed")
        }
    }
}

/// The hook that hands background jobs' output to the session's next event whose context
/// reaches the model, and kills a session's jobs at its SessionEnd.
pub(crate) struct AsyncDelivery {
    name: String,
    background: Arc<Background>,
}

impl AsyncDelivery {
    /// The delivery hook of the handlers named `handlers` (their hook names), whose jobs
    /// `background` keeps.
    pub fn new<'a>(
        handlers: impl IntoIterator<Item = &'a str>,
        background: Arc<Background>,
    ) -> Self {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        for name in handlers {
            name.hash(&mut hasher);
        }
        Self {
            name: format!("{ASYNC_HOOK_NAME} {:08x}", hasher.finish() as u32),
            background,
        }
    }
}

#[async_trait]
impl Hook for AsyncDelivery {
    fn name(&self) -> &str {
        &self.name
    }

    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events(DELIVERY_EVENTS.into_iter().chain([EventKind::SessionEnd]))
            .timeout(KILL_WAIT + Duration::from_secs(1))
            .inline()
    }

    fn untyped(&self) -> bool {
        true
    }

    async fn handle(&self, cx: &HookCx) -> Result<Reply, HookError> {
        let env = cx.envelope();
        if env.kind() == EventKind::SessionEnd {
            self.background.close(&env.session_id).await;
            return Ok(Reply::proceed());
        }
        let mut reply = Reply::proceed();
        reply.extras.context = self.background.take(&env.session_id);
        Ok(reply)
    }
}
