//! The HTTP service (`hookbus::service`) over real HTTP with a real client: turns, approvals,
//! streams, scripts, the lifecycle (disconnects, workspaces, shutdown), and the console in
//! headless Chromium.

mod common;

use std::time::Duration;

use common::external_available;
use common::http::*;
use hookbus::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_with_an_approval_and_a_cancelled_turn_over_http() {
    let svc = start().await;
    let script = json!({ "turns": [
        { "text": "running", "tool_calls": [ { "id": "t1", "name": "bash", "input": { "command": "echo hi" } } ] },
        { "text": "done" },
        { "text": "waiting", "tool_calls": [ { "id": "t2", "name": "bash", "input": { "command": "sleep 30" } } ] },
        { "text": "never" }
    ]});
    let id = svc.open("web", script, None).await;
    let stream = svc.frames(&id).await;

    // Turn 1 needs an approval, answered through /approvals.
    let turn = svc.turn(&id, "go");
    let approval = svc.wait_for_approval().await;
    assert_eq!(approval["tool_name"], "bash");
    assert_eq!(
        approval["session_id"], "web",
        "an approval names its session"
    );
    let (status, v) = svc.answer(&approval, json!({ "decision": "allow" })).await;
    assert_eq!(status, 200, "{v}");
    let result = turn.await.unwrap();
    assert_eq!(result["reason"], "completed");
    assert!(result["calls"][0]["content"]
        .as_str()
        .unwrap()
        .contains("hi"));

    // Turn 2 runs a long command and is cancelled.
    let turn = svc.turn(&id, "wait");
    let approval = svc.wait_for_approval().await;
    svc.answer(&approval, json!({ "decision": "allow" })).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) = svc.post(&format!("/sessions/{id}/cancel"), json!({})).await;
    assert_eq!(status, 202);
    let result = turn.await.unwrap();
    assert_eq!(result["reason"], "cancelled");

    let (status, _) = svc.delete(&format!("/sessions/{id}")).await;
    assert_eq!(status, 200);
    let frames = stream.await.unwrap();
    let events = envelopes(&frames);
    assert!(in_order(&events), "{:?}", kinds(&events));
    assert_eq!(
        kinds(&events),
        [
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PermissionRequest",
            "Notification",
            "PostToolUse",
            "StepComplete",
            "StepComplete",
            "Stop",
            "UserPromptSubmit",
            "PreToolUse",
            "PermissionRequest",
            "Notification",
            "PostToolUseFailure",
            "StepComplete",
            "Interrupt",
            "SessionEnd",
        ]
    );
    let failure = events
        .iter()
        .find(|e| e["hook_event_name"] == "PostToolUseFailure")
        .unwrap();
    assert_eq!(failure["is_interrupt"], true);
    let last = frames.last().unwrap();
    assert_eq!(last.name, "closed");
    assert_eq!(last.data["reason"], "ended");
    let (_, m) = svc.get("/metrics").await;
    assert!(m["runtime"]["events_dispatched"].as_u64().unwrap() >= 17);
}

/// A PreToolUse hook that, after a little while, allows `list_dir` and asks for the rest.
fn allow_hook() -> common::ScriptHook {
    common::ScriptHook::new("gatekeeper", |ev| {
        if ev.tool_name == "list_dir" {
            PreToolUseAction::allow()
        } else {
            PreToolUseAction::ask("the gatekeeper asks")
        }
    })
    .delay(Duration::from_millis(5))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_tells_which_hooks_ran_on_each_event_with_decision_and_latency() {
    let svc = start_with(|_| {}, |a| a.hook(allow_hook())).await;
    let id = svc
        .open(
            "hooks",
            json!({ "turns": [ { "tool_calls": [ { "name": "list_dir", "input": {} } ] }, { "text": "done" } ] }),
            None,
        )
        .await;
    let stream = svc.frames(&id).await;
    let result = svc.turn(&id, "go").await.unwrap();
    assert_eq!(result["reason"], "completed");
    svc.delete(&format!("/sessions/{id}")).await;
    let frames = stream.await.unwrap();
    let pre = envelopes(&frames)
        .into_iter()
        .find(|e| e["hook_event_name"] == "PreToolUse")
        .unwrap();
    let hooks = frames
        .iter()
        .find(|f| f.name == "hooks" && f.data["seq"] == pre["seq"])
        .expect("a hooks frame for the PreToolUse");
    assert_eq!(hooks.data["event"], "PreToolUse");
    assert_eq!(hooks.data["decision"], "allow");
    let run = &hooks.data["runs"][0];
    assert_eq!(run["hook"], "gatekeeper");
    assert_eq!(run["decision"], "allow");
    assert_eq!(run["status"], "answered");
    assert!(run["latency_us"].as_u64().unwrap() >= 5_000, "{run}");
    // Frames of an event's hooks come after the event itself.
    let at = |pred: &dyn Fn(&Frame) -> bool| frames.iter().position(pred).unwrap();
    assert!(
        at(&|f| f.name == "PreToolUse") < at(&|f| f.name == "hooks" && f.data["seq"] == pre["seq"])
    );
}

#[tokio::test]
async fn bad_requests_get_4xx_with_the_error_and_change_nothing() {
    let svc = start().await;
    let before = svc.service().agent().sessions().len();
    let bad_json = svc
        .client
        .post(svc.url("/sessions"))
        .header("authorization", svc.auth())
        .header("content-type", "application/json")
        .body("{ not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status().as_u16(), 400);
    let body: Value = bad_json.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().len() > 5, "{body}");
    let (status, body) = svc
        .post("/sessions", json!({ "script": { "turnz": [] } }))
        .await;
    assert_eq!(status, 422, "JSON of the wrong shape: {body}");
    assert!(body["error"].as_str().is_some());
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "script": {}, "permission_mode": "yolo" }),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = svc
        .post("/sessions", json!({ "script": {}, "id": "../escape" }))
        .await;
    assert_eq!(status, 400);
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "id": "escape-files", "script": { "turns": [], "files": { "../../x": "y" } } }),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(
        svc.service().agent().sessions().len(),
        before,
        "no session was opened"
    );
    let left: Vec<_> = std::fs::read_dir(svc.service().workspace_root())
        .unwrap()
        .collect();
    assert!(left.is_empty(), "a rejected request left {left:?}");

    for path in ["/sessions/nope/turns", "/sessions/nope/cancel"] {
        let (status, body) = svc.post(path, json!({ "prompt": "x" })).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body["error"].as_str().unwrap().contains("nope"));
    }
    let (status, _) = svc.get("/sessions/nope/events").await;
    assert_eq!(status, 404);
    let (status, _) = svc.delete("/sessions/nope").await;
    assert_eq!(status, 404);
    let (status, _) = svc
        .post("/approvals/999", json!({ "decision": "allow" }))
        .await;
    assert_eq!(status, 404);

    // A real pending approval is untouched by an invalid decision.
    let id = svc
        .open(
            "pending",
            json!({ "turns": [ { "tool_calls": [ { "name": "bash", "input": { "command": "true" } } ] } ] }),
            None,
        )
        .await;
    let turn = svc.turn(&id, "go");
    let approval = svc.wait_for_approval().await;
    let (status, body) = svc.answer(&approval, json!({ "decision": "maybe" })).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(svc.approvals().await.len(), 1);
    let (status, _) = svc
        .answer(
            &approval,
            json!({ "decision": "deny", "reason": "not now" }),
        )
        .await;
    assert_eq!(status, 200);
    let result = turn.await.unwrap();
    assert_eq!(result["calls"][0]["status"]["source"], "user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_sessions_each_with_a_complete_ordered_stream() {
    let svc = start_with(|c| c.limits.max_sessions = 100, |a| a).await;
    let script = json!({ "turns": [
        { "text": "look", "tool_calls": [ { "name": "list_dir", "input": {} } ] },
        { "text": "done" }
    ]});
    let mut ids = Vec::new();
    for i in 0..100 {
        ids.push(svc.open(&format!("c{i}"), script.clone(), None).await);
    }
    let mut streams = Vec::new();
    for id in &ids {
        streams.push(svc.collect_events(id).await);
    }
    let turns: Vec<_> = ids
        .iter()
        .map(|id| {
            let svc = svc.as_token(TOKEN);
            let id = id.clone();
            tokio::spawn(async move {
                let r = svc.turn(&id, "go").await.unwrap();
                assert_eq!(r["reason"], "completed");
                assert_eq!(svc.delete(&format!("/sessions/{id}")).await.0, 200);
            })
        })
        .collect();
    for t in turns {
        t.await.unwrap();
    }
    for (id, stream) in ids.iter().zip(streams) {
        let events = stream.await.unwrap();
        assert!(in_order(&events), "{id}");
        assert_eq!(
            kinds(&events),
            [
                "SessionStart",
                "UserPromptSubmit",
                "PreToolUse",
                "PostToolUse",
                "StepComplete",
                "StepComplete",
                "Stop",
                "SessionEnd"
            ],
            "{id}"
        );
        assert!(events.iter().all(|e| e["session_id"] == id.as_str()));
    }
}

#[tokio::test]
async fn a_script_is_the_body_itself_or_json_never_a_path() {
    let svc = start().await;
    let turns = json!([ { "text": "hi" } ]);
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "id": "inline-body", "turns": turns, "mode": "plan" }),
        )
        .await;
    assert_eq!(status, 201);
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "id": "as-string", "script": json!({ "turns": turns }).to_string() }),
        )
        .await;
    assert_eq!(status, 201);
    for id in ["inline-body", "as-string"] {
        let (status, result) = svc
            .post(
                &format!("/sessions/{id}/turns"),
                json!({ "message": "hello" }),
            )
            .await;
        assert_eq!(status, 200, "{id}: {result}");
        assert_eq!(result["text"], "hi", "{id}");
    }
    // A path is refused without being opened: a FIFO nobody writes would hang an open().
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("script.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let file = dir.path().join("script.json");
    std::fs::write(&file, json!({ "turns": turns }).to_string()).unwrap();
    for path in [
        fifo.display().to_string(),
        file.display().to_string(),
        "/etc/passwd".into(),
    ] {
        let asked = tokio::time::timeout(
            Duration::from_secs(5),
            svc.post("/sessions", json!({ "id": "from-file", "script": path })),
        )
        .await
        .expect("a path in a request is never opened");
        let (status, body) = asked;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            !body["error"].as_str().unwrap().contains("root:"),
            "no file content in errors: {body}"
        );
    }
    let (_, list) = svc.get("/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_withdraws_its_approval_unless_the_session_is_detached() {
    let svc = start().await;
    let script = json!({ "turns": [
        { "tool_calls": [ { "id": "c1", "name": "bash", "input": { "command": "echo one" } } ] },
        { "text": "done" }
    ]});
    let id = svc.open("attached", script.clone(), None).await;
    let stream = svc.collect_events(&id).await;
    let turn = svc.turn(&id, "go");
    let approval = svc.wait_for_approval().await;
    assert_eq!(approval["session_id"], "attached");
    // The client goes: its request (and connection) is dropped.
    turn.abort();
    let _ = turn.await;
    let mut gone = false;
    for _ in 0..200 {
        if svc.approvals().await.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(gone, "the approval was withdrawn");
    svc.delete(&format!("/sessions/{id}")).await;
    let events = stream.await.unwrap();
    let denied = events
        .iter()
        .find(|e| e["hook_event_name"] == "PermissionDenied")
        .expect("the withdrawn approval is a denial");
    assert_eq!(denied["source"], "cancelled");
    assert!(
        !events.iter().any(|e| e["hook_event_name"] == "PostToolUse"),
        "the command did not run"
    );

    // Detached: the approval waits for an answer after its client went away.
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "id": "detached", "detached": true, "script": script }),
        )
        .await;
    assert_eq!(status, 201);
    let turn = svc.turn("detached", "go");
    let approval = svc.wait_for_approval().await;
    turn.abort();
    let _ = turn.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still = svc.approvals().await;
    assert_eq!(still.len(), 1, "{still:?}");
    let (status, _) = svc.answer(&approval, json!({ "decision": "allow" })).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn one_turn_at_a_time_per_session() {
    let svc = start().await;
    let id = svc
        .open(
            "busy",
            json!({ "turns": [ { "tool_calls": [ { "name": "bash", "input": { "command": "true" } } ] }, { "text": "ok" } ] }),
            None,
        )
        .await;
    let turn = svc.turn(&id, "go");
    let approval = svc.wait_for_approval().await;
    let (status, body) = svc
        .post(
            &format!("/sessions/{id}/turns"),
            json!({ "prompt": "again" }),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    svc.answer(&approval, json!({ "decision": "allow" })).await;
    assert_eq!(turn.await.unwrap()["reason"], "completed");
}

#[tokio::test]
async fn workspaces_are_private_and_removed_when_sessions_end_unless_kept() {
    let svc = start().await;
    let root = svc.service().workspace_root().to_path_buf();
    let meta = std::fs::metadata(&root).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.mode() & 0o777, 0o700);
    let script = json!({ "turns": [ { "text": "hi" } ], "files": { "notes.txt": "n" } });
    svc.open("gone", script.clone(), None).await;
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "id": "kept", "keep_workspace": true, "script": script }),
        )
        .await;
    assert_eq!(status, 201);
    assert!(root.join("gone/notes.txt").is_file());
    assert!(root.join("kept/notes.txt").is_file());
    assert_eq!(svc.delete("/sessions/gone").await.0, 200);
    assert_eq!(svc.delete("/sessions/kept").await.0, 200);
    assert!(!root.join("gone").exists(), "the workspace was removed");
    assert!(root.join("kept/notes.txt").is_file(), "kept on request");
    // A kept workspace is not reused by a new session of the same id.
    let (status, _) = svc
        .post("/sessions", json!({ "id": "kept", "script": script }))
        .await;
    assert_eq!(status, 409);
    std::fs::remove_dir_all(root.join("kept")).unwrap();
    // Shutdown removes the rest, and the temporary root with them.
    svc.open("at-shutdown", script, None).await;
    assert!(root.join("at-shutdown").is_dir());
    svc.stop().await;
    assert!(!root.join("at-shutdown").exists());
}

#[tokio::test]
async fn a_workspace_root_that_is_not_privately_ours_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let config = |root: &std::path::Path| {
        let mut c = hookbus::service::ServiceConfig::new(TOKEN).unwrap();
        c.workspace_root = Some(root.to_path_buf());
        c
    };
    let refused = |r: Result<hookbus::service::Service, hookbus::service::ServiceError>| {
        r.err().expect("refused").to_string()
    };
    // Another user's directory.
    let theirs = base.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
    let other_owner = std::os::unix::fs::chown(&theirs, Some(65534), None);
    if other_owner.is_ok() {
        let e = refused(hookbus::service::Service::new(config(&theirs), Agent::builder()).await);
        assert!(e.contains("owned by uid 65534"), "{e}");
    } else {
        eprintln!("not root: the other-owner case is checked on `/` instead");
        let e = refused(
            hookbus::service::Service::new(config(std::path::Path::new("/")), Agent::builder())
                .await,
        );
        assert!(e.contains("owned by uid"), "{e}");
    }
    // Open to others.
    let open = base.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = refused(hookbus::service::Service::new(config(&open), Agent::builder()).await);
    assert!(e.contains("mode 755"), "{e}");
    // A symlink to a good directory.
    let good = base.path().join("good");
    std::fs::create_dir(&good).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let e = refused(hookbus::service::Service::new(config(&link), Agent::builder()).await);
    assert!(e.contains("symbolic link"), "{e}");
    // Ours, private: accepted; a missing one is created private.
    let svc = hookbus::service::Service::new(config(&good), Agent::builder())
        .await
        .unwrap();
    assert_eq!(svc.workspace_root(), good.canonicalize().unwrap());
    let fresh = base.path().join("fresh");
    let svc = hookbus::service::Service::new(config(&fresh), Agent::builder())
        .await
        .unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(svc.workspace_root()).unwrap().mode() & 0o777,
        0o700
    );
}

/// The example binary, built by `cargo test` with the other targets.
fn example_binary() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("examples").join("service");
    bin.is_file().then_some(bin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_with_an_open_event_stream_exits_within_the_deadline() {
    use tokio::io::AsyncBufReadExt;
    let Some(bin) = example_binary() else {
        let why = "skipped: the service example is not built (a full `cargo test` builds it)";
        if std::env::var("HOOKBUS_REQUIRE_EXTERNAL").as_deref() == Ok("1") {
            panic!("{why}");
        }
        eprintln!("{why}");
        return;
    };
    let mut child = tokio::process::Command::new(bin)
        .args(["--addr", "127.0.0.1:0", "--shutdown-deadline", "3s"])
        .env("HOOKBUS_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let addr: std::net::SocketAddr = first
        .rsplit("http://")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let svc = Svc::remote(addr);
    let id = svc
        .open(
            "sig",
            json!({ "turns": [ { "tool_calls": [ { "name": "bash", "input": { "command": "true" } } ] } ] }),
            None,
        )
        .await;
    let stream = svc.frames(&id).await;
    // A turn waiting for an approval, too.
    let _turn = svc.turn(&id, "go");
    svc.wait_for_approval().await;
    let started = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(8), child.wait())
        .await
        .expect("the service exits within its deadline")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let frames = tokio::time::timeout(Duration::from_secs(2), stream)
        .await
        .expect("the event stream ended")
        .unwrap();
    assert_eq!(frames.last().unwrap().name, "closed", "{frames:?}");
    assert_eq!(frames.last().unwrap().data["reason"], "shutdown");
}

// ---- the console in Chromium ----

/// Headless Chromium driven through chromedriver (WebDriver), which reads the live DOM.
struct Browser {
    driver: tokio::process::Child,
    base: String,
    session: String,
    client: reqwest::Client,
}

impl Browser {
    async fn start() -> Browser {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let driver = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver is needed for this test (.ci/run installs chromium and chromium-driver)");
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] }
        } } });
        let mut session = None;
        for _ in 0..100 {
            if let Ok(r) = client
                .post(format!("{base}/session"))
                .json(&caps)
                .send()
                .await
            {
                let v: Value = r.json().await.unwrap();
                session = v["value"]["sessionId"].as_str().map(str::to_owned);
                assert!(session.is_some(), "chromedriver refused: {v}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Browser {
            driver,
            base,
            session: session.expect("chromedriver did not start"),
            client,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut r = self.client.request(method, url);
        if let Some(body) = body {
            r = r.json(&body);
        }
        r.send().await.unwrap().json().await.unwrap()
    }

    async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None).await["value"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Clicks the first element matching a CSS selector.
    /// Clicks the first element matching `css`; false when there is none, or it was replaced
    /// before the click landed (the page redraws as events arrive).
    async fn try_click(&self, css: &str) -> bool {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        let Some(element) = found["value"]
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return false;
        };
        let clicked = self
            .call(
                reqwest::Method::POST,
                &format!("/element/{element}/click"),
                Some(json!({})),
            )
            .await;
        clicked["value"].is_null()
    }

    /// The live DOM, polled until `ready` holds (at most 15 s).
    async fn dom_when(&self, ready: impl Fn(&str) -> bool) -> String {
        let mut dom = String::new();
        for _ in 0..150 {
            let v = self.call(reqwest::Method::GET, "/source", None).await;
            dom = v["value"].as_str().unwrap_or_default().to_owned();
            if ready(&dom) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        dom
    }

    async fn quit(mut self) {
        let _ = self
            .client
            .delete(format!("{}/session/{}", self.base, self.session))
            .send()
            .await;
        let _ = self.driver.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_sessions_draws_hook_waterfalls_and_answers_an_approval_in_chromium() {
    if !external_available(
        &["chromium", "chromedriver"],
        "the console is driven in headless Chromium; .ci/run installs chromium and chromium-driver",
    ) {
        return;
    }
    let svc = start_with(|_| {}, |a| a.hook(allow_hook())).await;
    svc.open("older", json!({ "turns": [] }), None).await;
    svc.open("ui", json!({ "turns": [] }), Some("plan")).await;
    let asking = svc
        .open(
            "asking",
            json!({ "turns": [ { "text": "run", "tool_calls": [ { "name": "bash", "input": { "command": "echo from-the-page" } } ] }, { "text": "done" } ] }),
            None,
        )
        .await;
    let turn = svc.turn(&asking, "go");
    svc.wait_for_approval().await;
    let browser = Browser::start().await;
    browser
        .open(&svc.url(&format!("/?session={asking}#token={TOKEN}")))
        .await;
    let dom = browser
        .dom_when(|d| d.contains("class=\"approval\"") && d.contains("class=\"run decided\""))
        .await;
    assert!(
        !browser.url().await.contains(TOKEN),
        "the token left the address bar"
    );
    for s in ["older", "ui", "asking"] {
        assert!(
            dom.contains(&format!("data-id=\"{s}\"")),
            "session {s} is listed:\n{dom}"
        );
    }
    assert!(dom.contains("<td>SessionStart</td>"), "no events:\n{dom}");
    assert!(
        dom.contains("<td>PreToolUse</td>") && dom.contains("<td>bash</td>"),
        "{dom}"
    );
    assert!(
        dom.contains("data-hook=\"gatekeeper\""),
        "a waterfall row per hook run:\n{dom}"
    );
    assert!(dom.contains("data-session=\"asking\""), "{dom}");
    assert!(dom.contains("echo from-the-page"), "{dom}");
    assert!(dom.contains("state live"), "{dom}");
    // Answered by clicking: the turn completes and its events arrive.
    // The page redraws as events arrive, so a click can land on a button just replaced: click
    // again while the turn still waits (a second answer to an answered approval is refused).
    let mut turn = turn;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let result = loop {
        browser.try_click("div.approval button.allow").await;
        match tokio::time::timeout(Duration::from_secs(1), &mut turn).await {
            Ok(result) => break result.unwrap(),
            Err(_) if tokio::time::Instant::now() < deadline => continue,
            Err(_) => panic!("the turn did not complete after the approval was clicked"),
        }
    };
    assert_eq!(result["reason"], "completed", "{result}");
    let dom = browser
        .dom_when(|d| d.contains("<td>Stop</td>") && !d.contains("class=\"approval\""))
        .await;
    assert!(
        dom.contains("<td>PostToolUse</td>") && dom.contains("<td>Stop</td>"),
        "{dom}"
    );
    assert!(!dom.contains("class=\"approval\""), "{dom}");
    svc.delete(&format!("/sessions/{asking}")).await;
    let dom = browser.dom_when(|d| d.contains("state closed")).await;
    assert!(dom.contains("state closed"), "the closed indicator:\n{dom}");
    browser.quit().await;
}
