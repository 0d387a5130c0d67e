//! The baselines hookbus is measured against, with none of its features.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use tokio::sync::{mpsc, oneshot};

use crate::model::event::Event;

/// A hook as the baselines see it: an async function of the event.
#[async_trait]
pub trait BaselineHook: Send + Sync + 'static {
    /// Answers the event (true: "block").
    async fn on_event(&self, event: &Event) -> bool;
}

/// A hook that answers at once.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrivialBaseline;

#[async_trait]
impl BaselineHook for TrivialBaseline {
    async fn on_event(&self, event: &Event) -> bool {
        matches!(event, Event::PreToolUse(_))
    }
}

/// A hook that takes this long to answer.
#[derive(Debug, Clone, Copy)]
pub struct SleepyBaseline(pub Duration);

#[async_trait]
impl BaselineHook for SleepyBaseline {
    async fn on_event(&self, _: &Event) -> bool {
        super::precise_sleep(self.0).await;
        false
    }
}

/// seed 000's HookManager: a plain in-process registry calling the hooks one after another.
#[derive(Clone)]
pub struct Direct {
    hooks: Vec<Arc<dyn BaselineHook>>,
}

impl Direct {
    /// A registry of these hooks.
    pub fn new(hooks: Vec<Arc<dyn BaselineHook>>) -> Self {
        Self { hooks }
    }

    /// Calls every hook in turn.
    pub async fn dispatch(&self, event: Event) -> bool {
        let mut any = false;
        for h in &self.hooks {
            any |= h.on_event(&event).await;
        }
        any
    }
}

/// seed 002's registry: the same hooks polled together in the caller's task.
#[derive(Clone)]
pub struct JoinAll {
    hooks: Vec<Arc<dyn BaselineHook>>,
}

impl JoinAll {
    /// A registry of these hooks.
    pub fn new(hooks: Vec<Arc<dyn BaselineHook>>) -> Self {
        Self { hooks }
    }

    /// Polls every hook together.
    pub async fn dispatch(&self, event: Event) -> bool {
        join_all(self.hooks.iter().map(|h| h.on_event(&event)))
            .await
            .into_iter()
            .any(|b| b)
    }
}

type Request = (Arc<Event>, oneshot::Sender<bool>);

/// The bare actor fan-out: a dispatcher task that sends each event to one task per hook over a
/// bounded mpsc and awaits a oneshot reply from each. The floor for "each hook is an actor".
#[derive(Clone)]
pub struct ActorBaseline {
    tx: mpsc::Sender<Request>,
}

impl ActorBaseline {
    /// Spawns the dispatcher and one task per hook (inside a runtime).
    pub fn start(hooks: Vec<Arc<dyn BaselineHook>>) -> Self {
        let mut hook_txs = Vec::with_capacity(hooks.len());
        for hook in hooks {
            let (tx, mut rx) = mpsc::channel::<Request>(1024);
            tokio::spawn(async move {
                while let Some((event, reply)) = rx.recv().await {
                    let _ = reply.send(hook.on_event(&event).await);
                }
            });
            hook_txs.push(tx);
        }
        let (tx, mut rx) = mpsc::channel::<Request>(1024);
        tokio::spawn(async move {
            while let Some((event, reply)) = rx.recv().await {
                let mut waits = Vec::with_capacity(hook_txs.len());
                for h in &hook_txs {
                    let (t, r) = oneshot::channel();
                    let _ = h.send((event.clone(), t)).await;
                    waits.push(r);
                }
                let mut any = false;
                for w in waits {
                    any |= w.await.unwrap_or(false);
                }
                let _ = reply.send(any);
            }
        });
        Self { tx }
    }

    /// Sends the event through the dispatcher and awaits the answer.
    pub async fn dispatch(&self, event: Event) -> bool {
        let (t, r) = oneshot::channel();
        let _ = self.tx.send((Arc::new(event), t)).await;
        r.await.unwrap_or(false)
    }
}
