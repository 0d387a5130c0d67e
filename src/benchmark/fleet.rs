//! The fleet's scenarios (feature `nats`): a remote hook next to an in-process actor hook and a
//! bare NATS request/reply, and throughput with 1, 2 and 4 hook workers — on a private
//! `nats-server` this module starts on a free loopback port (reported as skipped when
//! `nats-server` is not installed).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;

use super::run::line;
use super::*;
use crate::nats::{serve_hook, CallAnswer, CallRequest, RemoteHook};

/// A private `nats-server` with JetStream: a free loopback port, its store in a temporary
/// directory; killed when dropped.
pub struct LocalNatsServer {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl LocalNatsServer {
    /// Starts one, or says why it cannot (`nats-server` not installed, no free port).
    pub fn start() -> Result<Self, String> {
        let program = find_nats_server().ok_or("nats-server is not installed")?;
        let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let child = Command::new(program)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start nats-server: {e}"))?;
        let server = Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(format!("nats-server did not listen on {port}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A connection to it (retried while the server finishes starting).
    pub async fn client(&self) -> Result<crate::nats::Client, String> {
        let mut last = String::new();
        for _ in 0..100 {
            match async_nats::connect(&self.url).await {
                Ok(client) => return Ok(client),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("cannot connect to {}: {last}", self.url))
    }
}

impl Drop for LocalNatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `nats-server` on `PATH`, or where Debian installs it.
fn find_nats_server() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("nats-server"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    })
}

fn skipped(scenario: &str, why: &str) -> BenchResult {
    line(
        scenario,
        None,
        Unit::Ns,
        f64::NAN,
        [None, None, None],
        format!("skipped: {why}"),
        true,
    )
}

/// `remote_hook_pair`: one trivial hook over loopback NATS (a worker in this process, on a
/// connection of its own), the same hook as an in-process actor, and a bare NATS
/// request/reply pair of the same payload, each timed in a task on the same runtime.
pub fn remote_hook_pair(config: &BenchConfig) -> Vec<BenchResult> {
    let server = match LocalNatsServer::start() {
        Ok(server) => server,
        Err(why) => return vec![skipped("remote_hook_pair", &why)],
    };
    let rt = runtime(RuntimeKind::MultiThread);
    match rt.block_on(remote_pair_figures(config, &server)) {
        Ok((remote, local, bare)) => {
            let r = remote / bare;
            let mut result = line(
                "remote_hook_pair",
                Some(RuntimeKind::MultiThread),
                Unit::Ns,
                remote,
                [None, None, None],
                format!(
                    "≤ 1.5× a bare NATS request/reply pair ({r:.2}×); in-process actor hook {:.1} µs",
                    local / 1000.0
                ),
                r <= 1.5,
            );
            result.extra.insert("in_process_actor_ns".into(), local);
            result.extra.insert("bare_nats_pair_ns".into(), bare);
            vec![result]
        }
        Err(why) => vec![skipped("remote_hook_pair", &why)],
    }
}

async fn remote_pair_figures(
    config: &BenchConfig,
    server: &LocalNatsServer,
) -> Result<(f64, f64, f64), String> {
    // A round trip through the server takes tens of microseconds: samples long enough to
    // hold thousands of them.
    let config = BenchConfig {
        sample_time: config.sample_time.max(Duration::from_millis(150)),
        ..*config
    };
    // The bare request/reply: an echo of a reply the size of a worker's.
    let echo = server.client().await?;
    let mut requests = echo
        .subscribe("bench.echo")
        .await
        .map_err(|e| e.to_string())?;
    let answer = serde_json::to_vec(&CallAnswer::Reply(None)).map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Some(m) = requests.next().await {
            if let Some(reply) = m.reply {
                let _ = echo.publish(reply, answer.clone().into()).await;
            }
        }
    });
    let caller = server.client().await?;
    let payload = call_payload()?;
    let bare = in_spawned_task(async move {
        median_ns(&config, || async {
            for _ in 0..2 {
                let _ = caller.request("bench.echo", payload.clone().into()).await;
            }
        })
        .await
    })
    .await?;
    // The remote hook, served by a worker on a connection of its own.
    let worker = serve_hook(server.client().await?, BenchHook::trivial("remote"))
        .await
        .map_err(|e| e.to_string())?;
    let bus = Bus::new();
    let options = HookOptions::new()
        .events([EventKind::PreToolUse, EventKind::PostToolUse])
        .timeout(Duration::from_secs(5));
    let client = server.client().await?;
    bus.register(RemoteHook::new(client, "remote", options))
        .await
        .map_err(|e| e.to_string())?;
    let remote = Subject::hookbus(&bus, Vec::new()).await;
    let remote = in_spawned_task(async move { median_ns(&config, || remote.pair()).await }).await?;
    bus.shutdown(Duration::from_secs(5)).await;
    worker.stop().await;
    let bus = Bus::new();
    let local = Subject::hookbus(&bus, vec![BenchHook::trivial("local")]).await;
    let local = in_spawned_task(async move { median_ns(&config, || local.pair()).await }).await?;
    bus.shutdown(Duration::from_secs(5)).await;
    Ok((remote, local, bare))
}

/// A remote call's request for the benchmark's PreToolUse, as bytes.
fn call_payload() -> Result<Vec<u8>, String> {
    let envelope = Arc::new(crate::model::event::Envelope {
        session_id: "bench".into(),
        parent_session_id: None,
        seq: 1,
        turn: 0,
        step: 0,
        timestamp_ms: 0,
        fields: Arc::default(),
        event: pre_event(),
    });
    serde_json::to_vec(&CallRequest {
        call: "_INBOX.0123456789abcdefghijkl".into(),
        envelope,
    })
    .map_err(|e| e.to_string())
}

async fn in_spawned_task<T: Send + 'static>(
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    tokio::spawn(f).await.map_err(|e| e.to_string())
}

/// A hook whose answer takes `delay` (a policy service's round trip), at most `concurrency`
/// calls at once per worker.
struct Work {
    delay: Duration,
    concurrency: usize,
}

#[async_trait]
impl Hook for Work {
    fn name(&self) -> &str {
        "fleet-work"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::PreToolUse, EventKind::PostToolUse])
            .max_concurrency(self.concurrency)
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        precise_sleep(self.delay).await;
        Ok(PreToolUseAction::proceed().into())
    }
    async fn post_tool_use(&self, _: &HookCx, _: &PostToolUse) -> HookResult<PostToolUseAction> {
        precise_sleep(self.delay).await;
        Ok(PostToolUseAction::keep().into())
    }
}

/// Per-worker calls at once and each call's time in the throughput scenarios.
const WORK: (usize, Duration) = (4, Duration::from_millis(2));

/// `fleet_throughput_{1,2,4}_workers`: 64 sessions dispatching tool-call pairs whose hook is
/// served by 1, 2 or 4 workers (each runs 4 calls of 2 ms at once): the fleet's capacity
/// should grow with its workers.
pub fn fleet_throughput(config: &BenchConfig) -> Vec<BenchResult> {
    let server = match LocalNatsServer::start() {
        Ok(server) => server,
        Err(why) => return vec![skipped("fleet_throughput", &why)],
    };
    let rt = runtime(RuntimeKind::MultiThread);
    let mut out = Vec::new();
    let mut one = None;
    for workers in [1usize, 2, 4] {
        let figure = match rt.block_on(fleet_pairs_per_second(config, &server, workers)) {
            Ok(figure) => figure,
            Err(why) => return vec![skipped("fleet_throughput", &why)],
        };
        let base = *one.get_or_insert(figure);
        let r = figure / base;
        let want = match workers {
            1 => 0.0,
            2 => 1.8,
            _ => 3.0,
        };
        let ceiling = workers as f64 * WORK.0 as f64 / (2.0 * WORK.1.as_secs_f64());
        let mut result = line(
            format!("fleet_throughput_{workers}_workers"),
            Some(RuntimeKind::MultiThread),
            Unit::PairsPerS,
            figure,
            [None, None, None],
            if workers == 1 {
                format!("the 1-worker base (ceiling {ceiling:.0} pairs/s)")
            } else {
                format!("≥ {want}× one worker ({r:.2}×; ceiling {ceiling:.0} pairs/s)")
            },
            r >= want,
        );
        result.extra.insert("ratio_to_1_worker".into(), r);
        out.push(result);
    }
    out
}

async fn fleet_pairs_per_second(
    config: &BenchConfig,
    server: &LocalNatsServer,
    workers: usize,
) -> Result<f64, String> {
    let mut served = Vec::new();
    for _ in 0..workers {
        let hook = Work {
            delay: WORK.1,
            concurrency: WORK.0,
        };
        served.push(
            serve_hook(server.client().await?, hook)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let bus = Bus::new();
    let options = HookOptions::new()
        .events([EventKind::PreToolUse, EventKind::PostToolUse])
        .timeout(Duration::from_secs(30));
    bus.register(RemoteHook::new(
        server.client().await?,
        "fleet-work",
        options,
    ))
    .await
    .map_err(|e| e.to_string())?;
    let mut subjects = Vec::new();
    for _ in 0..64 {
        subjects.push(Subject::hookbus(&bus, Vec::new()).await);
    }
    let time = config.throughput_time;
    let figure = in_spawned_task(pairs_per_second(subjects, time)).await?;
    bus.shutdown(Duration::from_secs(5)).await;
    for worker in served {
        worker.stop().await;
    }
    Ok(figure)
}
