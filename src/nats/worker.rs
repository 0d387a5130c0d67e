//! [`serve_hook`]: any [`Hook`] as a worker of a remote hook's queue group.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::{Client, Message, Subscriber};
use dashmap::DashMap;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::subject::{self, DEFAULT_PREFIX};
use super::wire::{CallAnswer, CallRequest};
use super::NatsError;
use crate::model::hook::{call_hook, Hook, HookCx, CANCEL_GRACE};
use crate::model::scratchpad::Scratchpad;
use crate::sys::panics::{panic_message, Contained};

/// Calls one worker runs at once unless the hook declares fewer (`max_concurrency`).
pub const DEFAULT_WORKER_CONCURRENCY: usize = 256;

/// The longest a worker lets a call run when the hook declares no timeout of its own; the
/// calling runtime's timeout is normally shorter, and its cancellation arrives first.
pub const WORKER_CALL_LIMIT: Duration = Duration::from_secs(600);

/// A running worker: [`stop`](HookWorker::stop) it, or let it serve until the connection ends.
#[derive(Debug)]
pub struct HookWorker {
    stop: CancellationToken,
    task: JoinHandle<()>,
    served: Arc<AtomicU64>,
    subject: String,
}

impl HookWorker {
    /// Calls answered so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// The subject it serves.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Stops taking calls; calls in flight are cancelled.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// Serves until the NATS connection closes.
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Serves `hook` as a worker of the remote hook of the same name on the default prefix: joins
/// the hook's queue group (so that each call reaches one worker of many), calls the hook's
/// method for each call's event, and answers with its reply. A hook that errors, panics or
/// outlives its timeout answers with an error, which the caller's failure policy handles. A
/// cancellation from the caller cancels the call's [`HookCx::cancellation`] token.
///
/// A remote call has no session scratchpad: each call sees a fresh one.
pub async fn serve_hook(client: Client, hook: impl Hook) -> Result<HookWorker, NatsError> {
    serve_hook_with_prefix(client, DEFAULT_PREFIX, Arc::new(hook)).await
}

/// [`serve_hook`] for a hook already shared.
pub async fn serve_hook_arc(client: Client, hook: Arc<dyn Hook>) -> Result<HookWorker, NatsError> {
    serve_hook_with_prefix(client, DEFAULT_PREFIX, hook).await
}

/// [`serve_hook`] on subjects under `prefix`.
pub async fn serve_hook_with_prefix(
    client: Client,
    prefix: &str,
    hook: Arc<dyn Hook>,
) -> Result<HookWorker, NatsError> {
    let subject = subject::hook_calls(prefix, hook.name());
    let calls = client
        .queue_subscribe(subject.clone(), subject.clone())
        .await
        .map_err(|e| NatsError::nats("subscribe to the hook's calls", e))?;
    let cancels = client
        .subscribe(subject::hook_cancels(prefix, hook.name()))
        .await
        .map_err(|e| NatsError::nats("subscribe to the hook's cancellations", e))?;
    // The subscriptions are in place once the server has seen them.
    client
        .flush()
        .await
        .map_err(|e| NatsError::nats("flush", e))?;
    let options = hook.options();
    let worker = Worker {
        client,
        limit: options.timeout.unwrap_or(WORKER_CALL_LIMIT),
        permits: Arc::new(Semaphore::new(
            options
                .max_concurrency
                .unwrap_or(DEFAULT_WORKER_CONCURRENCY)
                .max(1),
        )),
        hook,
        running: DashMap::new(),
        early: DashMap::new(),
        served: Arc::new(AtomicU64::new(0)),
        stop: CancellationToken::new(),
    };
    let (stop, served) = (worker.stop.clone(), worker.served.clone());
    let task = tokio::spawn(Arc::new(worker).run(calls, cancels));
    Ok(HookWorker {
        stop,
        task,
        served,
        subject,
    })
}

/// A worker's state, shared by its loop, its cancellation listener and its calls.
struct Worker {
    client: Client,
    hook: Arc<dyn Hook>,
    limit: Duration,
    permits: Arc<Semaphore>,
    running: DashMap<String, CancellationToken>,
    /// Cancellations of calls not started yet (waiting for a permit, or still on their way),
    /// with when they came; forgotten after [`EARLY_CANCEL_MEMORY`].
    early: DashMap<String, Instant>,
    served: Arc<AtomicU64>,
    stop: CancellationToken,
}

/// How long a worker remembers a cancellation that came before its call.
const EARLY_CANCEL_MEMORY: Duration = Duration::from_secs(60);

impl Worker {
    async fn run(self: Arc<Self>, mut calls: Subscriber, cancels: Subscriber) {
        // Cancellations are read by a task of their own, so that they are seen while this
        // loop waits for a permit.
        let listener = tokio::spawn(self.clone().listen(cancels));
        loop {
            tokio::select! {
                () = self.stop.cancelled() => break,
                message = calls.next() => match message {
                    Some(message) => self.take(message).await,
                    None => break,
                },
            }
        }
        listener.abort();
        for call in self.running.iter() {
            call.value().cancel();
        }
    }

    async fn listen(self: Arc<Self>, mut cancels: Subscriber) {
        while let Some(message) = cancels.next().await {
            self.cancel(&message);
        }
    }

    /// Starts a call when a permit frees (so a worker never holds more calls than it runs).
    async fn take(self: &Arc<Self>, message: Message) {
        let permit = tokio::select! {
            permit = self.permits.clone().acquire_owned() => permit,
            () = self.stop.cancelled() => return,
        };
        let Ok(permit) = permit else { return };
        let worker = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            worker.answer(message).await;
        });
    }

    fn cancel(&self, message: &Message) {
        let call = String::from_utf8_lossy(&message.payload);
        if let Some(token) = self.running.get(call.as_ref()) {
            token.cancel();
            return;
        }
        // Not started yet: remembered, so the call is refused when it comes.
        let now = Instant::now();
        if self.early.len() >= 4096 {
            self.early
                .retain(|_, at| now.duration_since(*at) < EARLY_CANCEL_MEMORY);
        }
        self.early.insert(call.to_string(), now);
        // The call may have started between the two looks.
        if let Some(token) = self.running.get(call.as_ref()) {
            token.cancel();
        }
    }

    async fn answer(&self, message: Message) {
        let Some(reply_to) = message.reply.clone() else {
            tracing::warn!(subject = %message.subject, "a hook call without a reply subject");
            return;
        };
        let answer = match serde_json::from_slice::<CallRequest>(&message.payload) {
            Ok(request) => self.run_call(request).await,
            Err(e) => CallAnswer::Error(format!("unreadable call: {e}")),
        };
        self.served.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(&answer).unwrap_or_else(|e| {
            serde_json::to_vec(&CallAnswer::Error(format!("cannot encode the reply: {e}")))
                .unwrap_or_default()
        });
        if let Err(e) = self.client.publish(reply_to, body.into()).await {
            tracing::warn!(error = %e, "cannot answer a hook call");
        }
    }

    async fn run_call(&self, request: CallRequest) -> CallAnswer {
        let token = CancellationToken::new();
        self.running.insert(request.call.clone(), token.clone());
        let _gone = Forget(&self.running, &request.call);
        // A cancellation that came first (the caller gave up while this call waited).
        if self.early.remove(&request.call).is_some() {
            return CallAnswer::Error("cancelled by the caller".into());
        }
        let cx = HookCx::new(
            request.envelope,
            Arc::new(Scratchpad::new()),
            Arc::new(token.clone()),
        );
        let call =
            AssertUnwindSafe(Contained::new(call_hook(self.hook.as_ref(), &cx))).catch_unwind();
        let mut call = std::pin::pin!(call);
        let finished = tokio::select! {
            outcome = &mut call => Ok(outcome),
            () = token.cancelled() => Err("cancelled by the caller".to_owned()),
            () = tokio::time::sleep(self.limit) => {
                token.cancel();
                Err(format!("timed out after {:?} on the worker", self.limit))
            }
        };
        let outcome = match finished {
            Ok(outcome) => outcome,
            Err(why) => {
                // A stopped call gets the runtime's grace to see its token and wind down.
                let _ = tokio::time::timeout(CANCEL_GRACE, &mut call).await;
                return CallAnswer::Error(why);
            }
        };
        match outcome {
            Ok(Ok(reply)) => CallAnswer::Reply(reply.map(|r| *r)),
            Ok(Err(e)) => CallAnswer::Error(e.to_string()),
            Err(panic) => CallAnswer::Error(format!("panicked: {}", panic_message(&*panic))),
        }
    }
}

/// Removes a finished call from the running set.
struct Forget<'a>(&'a DashMap<String, CancellationToken>, &'a str);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}
