use hookbus::*;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;
struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        unsafe { std::alloc::System.realloc(p, l, n) }
    }
}
#[global_allocator]
static A: Counting = Counting;

struct Trivial(String, bool);
#[async_trait]
impl Hook for Trivial {
    fn name(&self) -> &str {
        &self.0
    }
    fn options(&self) -> HookOptions {
        let o = HookOptions::new().events([EventKind::PreToolUse, EventKind::PostToolUse]);
        if self.1 {
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let multi = args.get(1).map(|s| s == "multi").unwrap_or(false);
    let inline = args.get(2).map(|s| s == "inline").unwrap_or(false);
    let n: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let rt = if multi {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    if args.get(2).map(|s| s == "base").unwrap_or(false) {
        rt.block_on(async {
            use tokio::sync::{mpsc, oneshot};
            let mut hook_txs = Vec::new();
            for _ in 0..4 {
                let (tx, mut rx) =
                    mpsc::channel::<(std::sync::Arc<Event>, oneshot::Sender<bool>)>(1024);
                tokio::spawn(async move {
                    while let Some((ev, r)) = rx.recv().await {
                        let _ = r.send(matches!(*ev, Event::PreToolUse(_)));
                    }
                });
                hook_txs.push(tx);
            }
            let (tx, mut rx) =
                mpsc::channel::<(std::sync::Arc<Event>, oneshot::Sender<bool>)>(1024);
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
            let pre = || {
                Event::PreToolUse(PreToolUse {
                    tool_name: "Bash".into(),
                    tool_input: json!({"command": "ls"}),
                    tool_use_id: "t1".into(),
                })
            };
            let post = || {
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
            };
            let d = |ev: Event| {
                let tx = tx.clone();
                async move {
                    let (t, r) = oneshot::channel();
                    let _ = tx.send((std::sync::Arc::new(ev), t)).await;
                    r.await.unwrap()
                }
            };
            for _ in 0..10000 {
                d(pre()).await;
                d(post()).await;
            }
            let a0 = ALLOCS.load(Relaxed);
            let t = Instant::now();
            for _ in 0..n {
                d(pre()).await;
                d(post()).await;
            }
            println!(
                "{:.0} ns/pair, {:.1} allocs/pair",
                t.elapsed().as_nanos() as f64 / n as f64,
                (ALLOCS.load(Relaxed) - a0) as f64 / n as f64
            );
        });
        return;
    }
    rt.block_on(async {
        let bus = Bus::new();
        for i in 0..4 {
            bus.register(Trivial(format!("h{i}"), inline))
                .await
                .unwrap();
        }
        let s = bus.open_session(SessionConfig::new()).await.unwrap();
        let pre = || {
            Event::PreToolUse(PreToolUse {
                tool_name: "Bash".into(),
                tool_input: json!({"command": "ls"}),
                tool_use_id: "t1".into(),
            })
        };
        let post = || {
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
        };
        for _ in 0..10000 {
            s.dispatch(pre()).await.unwrap();
            s.dispatch(post()).await.unwrap();
        }
        let a0 = ALLOCS.load(Relaxed);
        let t = Instant::now();
        for _ in 0..n {
            s.dispatch(pre()).await.unwrap();
            s.dispatch(post()).await.unwrap();
        }
        println!(
            "{:.0} ns/pair, {:.1} allocs/pair",
            t.elapsed().as_nanos() as f64 / n as f64,
            (ALLOCS.load(Relaxed) - a0) as f64 / n as f64
        );
    });
}
