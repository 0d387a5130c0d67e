//! One tool call (PreToolUse + PostToolUse) through 4 trivial hooks, next to the baselines,
//! measured in the same run:
//!
//! * `direct`: a plain in-process registry calling the hooks one after another;
//! * `mpsc_oneshot`: one bare tokio mpsc + oneshot round trip to a task (the floor of any actor
//!   design);
//! * `actor_baseline`: a dispatcher task fanning each event out to one task per hook over mpsc
//!   and awaiting a oneshot from each, with none of hookbus's features;
//! * `hookbus_actor` / `hookbus_inline`: hookbus with the hooks as actors / inline.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hookbus::*;
use serde_json::json;
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

const HOOKS: usize = 4;

struct Trivial {
    name: String,
    inline: bool,
}

#[async_trait]
impl Hook for Trivial {
    fn name(&self) -> &str {
        &self.name
    }
    fn options(&self) -> HookOptions {
        let o = HookOptions::new().events([EventKind::PreToolUse, EventKind::PostToolUse]);
        if self.inline {
            o.inline()
        } else {
            o
        }
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        Ok(PreToolUseAction::proceed().into())
    }
    async fn post_tool_use(&self, _: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        Ok(PostToolUseAction::keep().into())
    }
}

fn pre_event() -> Event {
    Event::PreToolUse(PreToolUse {
        tool_name: "Bash".into(),
        tool_input: json!({"command": "ls"}),
        tool_use_id: "t1".into(),
    })
}

fn post_event() -> Event {
    Event::PostToolUse(PostToolUse {
        tool_name: "Bash".into(),
        tool_input: json!({"command": "ls"}),
        original_input: None,
        tool_response: json!("ok"),
        original_response: None,
        tool_use_id: "t1".into(),
        is_error: false,
        duration_ms: 0,
    })
}

/// seed 000's HookManager: hooks called one after another in the caller's task.
trait DirectHook: Send + Sync {
    fn pre(&self, ev: &Event) -> bool;
}
struct DirectTrivial;
impl DirectHook for DirectTrivial {
    fn pre(&self, ev: &Event) -> bool {
        matches!(ev, Event::PreToolUse(_))
    }
}

/// The bare actor fan-out: a dispatcher task, one task per hook, mpsc + oneshot.
struct ActorBaseline {
    tx: mpsc::Sender<(Arc<Event>, oneshot::Sender<bool>)>,
}

impl ActorBaseline {
    fn start(hooks: usize) -> Self {
        let mut hook_txs = Vec::new();
        for _ in 0..hooks {
            let (tx, mut rx) = mpsc::channel::<(Arc<Event>, oneshot::Sender<bool>)>(1024);
            tokio::spawn(async move {
                while let Some((ev, reply)) = rx.recv().await {
                    let _ = reply.send(matches!(*ev, Event::PreToolUse(_)));
                }
            });
            hook_txs.push(tx);
        }
        let (tx, mut rx) = mpsc::channel::<(Arc<Event>, oneshot::Sender<bool>)>(1024);
        tokio::spawn(async move {
            while let Some((ev, reply)) = rx.recv().await {
                let mut waits = Vec::with_capacity(hook_txs.len());
                for h in &hook_txs {
                    let (t, r) = oneshot::channel();
                    let _ = h.send((ev.clone(), t)).await;
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

    async fn dispatch(&self, ev: Event) -> bool {
        let (t, r) = oneshot::channel();
        let _ = self.tx.send((Arc::new(ev), t)).await;
        r.await.unwrap_or(false)
    }
}

fn runtimes() -> Vec<(&'static str, Runtime)> {
    vec![
        (
            "multi_thread",
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime"),
        ),
        (
            "current_thread",
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        ),
    ]
}

fn pair_4_hooks(c: &mut Criterion) {
    for (rt_name, rt) in runtimes() {
        let mut group = c.benchmark_group(format!("pair_{HOOKS}_hooks/{rt_name}"));

        let direct: Vec<Box<dyn DirectHook>> =
            (0..HOOKS).map(|_| Box::new(DirectTrivial) as _).collect();
        group.bench_function("direct", |b| {
            b.iter(|| {
                let (pre, post) = (pre_event(), post_event());
                let a = direct.iter().filter(|h| h.pre(&pre)).count();
                let b2 = direct.iter().filter(|h| h.pre(&post)).count();
                criterion::black_box((a, b2))
            })
        });

        let (tx, mut rx) = rt.block_on(async { mpsc::channel::<oneshot::Sender<()>>(1024) });
        rt.spawn(async move {
            while let Some(reply) = rx.recv().await {
                let _ = reply.send(());
            }
        });
        group.bench_function("mpsc_oneshot", |b| {
            b.to_async(&rt).iter(|| async {
                for _ in 0..2 {
                    let (t, r) = oneshot::channel();
                    let _ = tx.send(t).await;
                    let _ = r.await;
                }
            })
        });

        let baseline = rt.block_on(async { ActorBaseline::start(HOOKS) });
        group.bench_function("actor_baseline", |b| {
            b.to_async(&rt).iter(|| async {
                baseline.dispatch(pre_event()).await;
                baseline.dispatch(post_event()).await;
            })
        });

        for inline in [false, true] {
            let session = rt.block_on(async {
                let bus = Bus::new();
                for i in 0..HOOKS {
                    bus.register(Trivial {
                        name: format!("h{i}"),
                        inline,
                    })
                    .await
                    .expect("register");
                }
                bus.open_session(SessionConfig::new())
                    .await
                    .expect("session")
            });
            let id = BenchmarkId::new("hookbus", if inline { "inline" } else { "actor" });
            group.bench_function(id, |b| {
                b.to_async(&rt).iter(|| async {
                    session.dispatch(pre_event()).await.expect("pre");
                    session.dispatch(post_event()).await.expect("post");
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, pair_4_hooks);
criterion_main!(benches);
