//! Fire-and-forget observers (HK-4): each runs as an actor behind a bounded mailbox; the agent
//! never waits for one beyond enqueueing, and then at most the enqueue limit (FL-2).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use tokio::sync::mpsc::{
    self,
    error::{SendTimeoutError, TrySendError},
};
use tracing::Instrument;

use crate::model::error::ActorKind;
use crate::model::event::{Envelope, EventKind};
use crate::model::filter::ToolFilter;
use crate::runtime::actor::{Actor, OnPanic, Supervisor};
use crate::runtime::mailbox::{Delivery, ObserverMsg};
use crate::runtime::metrics::RuntimeMetrics;
use crate::sys::panics::panic_message;

/// Default mailbox capacity of an observer.
pub const DEFAULT_OBSERVER_MAILBOX: usize = 1024;
/// Default longest wait to enqueue an event for an observer whose mailbox is full.
pub const DEFAULT_ENQUEUE_WAIT: Duration = Duration::from_secs(5);

/// A fire-and-forget subscriber: it sees events in per-session order, and its return value is
/// ignored.
#[async_trait]
pub trait Observer: Send + Sync + 'static {
    /// The observer's name (for logs and metrics).
    fn name(&self) -> &str;

    /// Events, filter, mailbox size. Read once at registration.
    fn options(&self) -> ObserverOptions {
        ObserverOptions::default()
    }

    /// Called for each event, one at a time, in the order the runtime dispatched them.
    async fn on_event(&self, envelope: &Arc<Envelope>);
}

/// What an observer declares at registration.
#[derive(Debug, Clone)]
pub struct ObserverOptions {
    /// Subscribed events; empty means all.
    pub events: Vec<EventKind>,
    /// Which tool calls it sees (tool events only).
    pub filter: ToolFilter,
    /// Mailbox capacity (default 1024).
    pub mailbox: usize,
    /// Longest wait to enqueue when the mailbox is full (default 5 s); then the event is dropped
    /// for this observer and counted.
    pub enqueue_wait: Duration,
    /// Longest time one `on_event` call may take before it is abandoned (default 30 s).
    pub timeout: Duration,
}

impl Default for ObserverOptions {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            filter: ToolFilter::default(),
            mailbox: DEFAULT_OBSERVER_MAILBOX,
            enqueue_wait: DEFAULT_ENQUEUE_WAIT,
            timeout: Duration::from_secs(30),
        }
    }
}

impl ObserverOptions {
    /// Default options.
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
    /// Set the mailbox capacity.
    pub fn mailbox(mut self, capacity: usize) -> Self {
        self.mailbox = capacity.max(1);
        self
    }
    /// Set the enqueue limit.
    pub fn enqueue_wait(mut self, wait: Duration) -> Self {
        self.enqueue_wait = wait;
        self
    }
    /// Set the per-event timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// An observer as the registry holds it: the sending side of its mailbox and its counters.
pub(crate) struct ObserverEntry {
    pub name: String,
    pub options: ObserverOptions,
    /// Only this session's events, for session-scoped subscriptions.
    pub session: Option<String>,
    pub tx: mpsc::Sender<ObserverMsg>,
    /// Set after an enqueue timed out; cleared once an event fits again. While set, a full
    /// mailbox drops at once, so a stuck observer delays a session by one enqueue limit at most.
    congested: AtomicBool,
    pub dropped: AtomicU64,
    /// A user's task reads this mailbox ([`Bus::subscribe`](crate::Bus::subscribe)), not an
    /// actor of the runtime: closing a session waits on it only briefly (see
    /// [`USER_MAILBOX_FLUSH`]).
    pub user_task: bool,
}

/// How long closing a session waits for a subscribed user task to take the session's earlier
/// events before `SessionEnd`. The events are in its mailbox, in order, either way; a task that
/// does not read its mailbox must not hold the session's end for the whole grace period.
pub const USER_MAILBOX_FLUSH: std::time::Duration = std::time::Duration::from_millis(200);

impl ObserverEntry {
    pub fn new(
        name: String,
        options: ObserverOptions,
        session: Option<String>,
        tx: mpsc::Sender<ObserverMsg>,
    ) -> Self {
        Self {
            name,
            options,
            session,
            tx,
            congested: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            user_task: false,
        }
    }

    /// Whether the last enqueue timed out and the mailbox has not had room since.
    pub fn is_congested(&self) -> bool {
        self.congested.load(Ordering::Relaxed)
    }

    pub fn wants(&self, env: &Envelope) -> bool {
        let kind = env.kind();
        if !(self.options.events.is_empty() || self.options.events.contains(&kind)) {
            return false;
        }
        if self.session.as_deref().is_some_and(|s| s != env.session_id) {
            return false;
        }
        match env.event.tool() {
            Some((name, input)) if kind.is_tool_event() => self.options.filter.matches(
                name,
                input,
                Some(std::path::Path::new(&env.fields.cwd)),
            ),
            _ => true,
        }
    }

    /// Enqueues without waiting: `None` when the event was taken, or dropped and counted (a
    /// closed mailbox, or a full one while congested); else the message back, for
    /// [`wait_for_room`](Self::wait_for_room).
    pub fn offer(&self, delivery: Delivery, metrics: &RuntimeMetrics) -> Option<ObserverMsg> {
        match self.tx.try_send(ObserverMsg::Event(delivery)) {
            Ok(()) => {
                self.congested.store(false, Ordering::Relaxed);
                None
            }
            Err(TrySendError::Closed(msg)) => {
                self.count_drop_msg(metrics, &msg, "mailbox closed");
                None
            }
            Err(TrySendError::Full(msg)) if self.congested.load(Ordering::Relaxed) => {
                self.count_drop_msg(metrics, &msg, "mailbox full (congested)");
                None
            }
            Err(TrySendError::Full(msg)) => Some(msg),
        }
    }

    /// Waits at most the enqueue limit for room in the mailbox; past it, the event is dropped
    /// and counted, and the observer is congested until an event fits again.
    pub async fn wait_for_room(&self, msg: ObserverMsg, metrics: &RuntimeMetrics) {
        if let Err(e) = self.tx.send_timeout(msg, self.options.enqueue_wait).await {
            self.congested.store(true, Ordering::Relaxed);
            let msg = match e {
                SendTimeoutError::Timeout(msg) | SendTimeoutError::Closed(msg) => msg,
            };
            self.count_drop_msg(metrics, &msg, "enqueue limit reached");
        }
    }

    fn count_drop_msg(&self, metrics: &RuntimeMetrics, msg: &ObserverMsg, why: &str) {
        if let ObserverMsg::Event(delivery) = msg {
            self.count_drop(metrics, delivery.cx.envelope(), why);
        }
    }

    /// FL-6: counted, and logged with the observer, the event and the session.
    fn count_drop(&self, metrics: &RuntimeMetrics, env: &Envelope, why: &str) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        metrics.observer_dropped.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            observer = %self.name,
            event = %env.kind(),
            session = %env.session_id,
            seq = env.seq,
            why,
            "observer event dropped"
        );
    }
}

/// The observer actor: takes events one at a time, in order, until its mailbox closes and is
/// drained, or the kill switch fires. A panic inside the observer's call is caught around the
/// call and reported; a panic of the loop itself restarts it on the same mailbox.
pub(crate) struct ObserverActor {
    observer: Arc<dyn Observer>,
    rx: mpsc::Receiver<ObserverMsg>,
    timeout: Duration,
    metrics: Arc<RuntimeMetrics>,
    supervisor: Supervisor,
}

impl ObserverActor {
    /// The actor on `rx`, not yet spawned.
    pub fn new(
        observer: Arc<dyn Observer>,
        rx: mpsc::Receiver<ObserverMsg>,
        timeout: Duration,
        metrics: Arc<RuntimeMetrics>,
        supervisor: Supervisor,
    ) -> Self {
        Self {
            observer,
            rx,
            timeout,
            metrics,
            supervisor,
        }
    }
}

impl Actor for ObserverActor {
    const KIND: ActorKind = ActorKind::Observer;
    const ON_PANIC: OnPanic = OnPanic::Restart;

    fn name(&self) -> String {
        self.observer.name().to_owned()
    }

    fn run(&mut self) -> impl std::future::Future<Output = ()> + Send + '_ {
        let ObserverActor {
            observer,
            rx,
            timeout,
            metrics,
            supervisor,
        } = self;
        run_observer(observer, rx, *timeout, metrics, supervisor)
    }
}

async fn run_observer(
    observer: &Arc<dyn Observer>,
    rx: &mut mpsc::Receiver<ObserverMsg>,
    timeout: Duration,
    metrics: &RuntimeMetrics,
    supervisor: &Supervisor,
) {
    // One timer for the actor's life, pushed forward per event (no new registration).
    let timer = tokio::time::sleep(timeout);
    tokio::pin!(timer);
    loop {
        let msg = rx.recv().await;
        match msg {
            None => return,
            Some(ObserverMsg::Flush(ack)) => {
                let _ = ack.send(());
            }
            Some(ObserverMsg::Event(delivery)) => {
                let env = delivery.envelope().clone();
                let call =
                    AssertUnwindSafe(crate::sys::panics::Contained::new(observer.on_event(&env)))
                        .catch_unwind()
                        .instrument(delivery.span.clone());
                timer.as_mut().reset(crate::model::bounds::deadline_after(
                    tokio::time::Instant::now(),
                    timeout,
                ));
                let result = tokio::select! {
                    biased;
                    result = call => Ok(result),
                    _ = &mut timer => Err(()),
                };
                match result {
                    Ok(Ok(())) => {
                        metrics.observer_delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(panic)) => {
                        metrics.observer_delivered.fetch_add(1, Ordering::Relaxed);
                        metrics.observer_panics.fetch_add(1, Ordering::Relaxed);
                        let message = panic_message(panic.as_ref());
                        tracing::warn!(
                            observer = observer.name(),
                            event = %env.kind(),
                            session = %env.session_id,
                            panic = %message,
                            "observer panicked"
                        );
                        supervisor.report_call(ActorKind::Observer, observer.name(), &message);
                    }
                    Err(_) => {
                        metrics.observer_timeouts.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            observer = observer.name(),
                            event = %env.kind(),
                            session = %env.session_id,
                            "observer timed out"
                        );
                    }
                }
                // The envelope goes back to its session to be freed there, when this was the
                // last hold on it.
                drop(env);
                delivery.cx.release();
            }
        }
    }
}
