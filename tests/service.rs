//! The HTTP service (`hookbus::service`) tested over HTTP with a real client, and in headless
//! Chromium.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::external_available;
use futures_util::StreamExt;
use hookbus::service::{router, ServiceState};
use hookbus::{Agent, ChannelApprover};
use serde_json::{json, Value};

struct Service {
    addr: SocketAddr,
    agent: Agent,
    _dir: tempfile::TempDir,
    client: reqwest::Client,
}

async fn start() -> Service {
    let dir = tempfile::tempdir().unwrap();
    let (approver, desk) = ChannelApprover::new();
    let agent = Agent::builder()
        .approver(approver)
        .approval_timeout(Duration::from_secs(120))
        .build()
        .await
        .unwrap();
    let state = ServiceState::new(agent.clone(), desk, dir.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    Service {
        addr,
        agent,
        _dir: dir,
        client: reqwest::Client::new(),
    }
}

impl Service {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(self.url(path)).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
    async fn open(&self, id: &str, script: Value, mode: Option<&str>) -> String {
        let mut body = json!({ "id": id, "script": script });
        if let Some(m) = mode {
            body["permission_mode"] = json!(m);
        }
        let (status, v) = self.post("/sessions", body).await;
        assert_eq!(status, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }
    /// Subscribes to a session's SSE stream (the response has started when this returns) and
    /// reads it to its end (after SessionEnd) in a task.
    async fn collect_events(&self, id: &str) -> tokio::task::JoinHandle<Vec<Value>> {
        let url = self.url(&format!("/sessions/{id}/events"));
        let response = self.client.get(url).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        tokio::spawn(async move {
            let mut stream = response.bytes_stream();
            let mut buf = String::new();
            let mut events = Vec::new();
            while let Some(chunk) = stream.next().await {
                buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
                while let Some(end) = buf.find("\n\n") {
                    let frame = buf[..end].to_owned();
                    buf.drain(..end + 2);
                    let mut name = None;
                    let mut data = String::new();
                    for line in frame.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            name = Some(v.trim().to_owned());
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push_str(v.trim_start());
                        }
                    }
                    if let Some(name) = name {
                        let env: Value = serde_json::from_str(&data).unwrap();
                        assert_eq!(env["hook_event_name"], name.as_str());
                        events.push(env);
                    }
                }
            }
            events
        })
    }
    /// Runs a turn in a task; the task answers the turn's JSON result.
    fn turn(&self, id: &str, prompt: &str) -> tokio::task::JoinHandle<Value> {
        let client = self.client.clone();
        let url = self.url(&format!("/sessions/{id}/turns"));
        let body = json!({ "prompt": prompt });
        tokio::spawn(async move {
            client
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    }

    /// Answers a pending approval through `POST /approvals/{id}`.
    async fn answer(&self, approval: &Value, body: Value) -> (u16, Value) {
        self.post(&format!("/approvals/{}", approval["id"]), body)
            .await
    }

    async fn wait_for_approval(&self) -> Value {
        for _ in 0..400 {
            let (_, v) = self.get("/approvals").await;
            if let Some(a) = v["approvals"].as_array().and_then(|a| a.first()) {
                return a.clone();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no approval appeared");
    }
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["hook_event_name"].as_str().unwrap())
        .collect()
}

fn in_order(events: &[Value]) -> bool {
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    seqs.first() == Some(&1) && seqs.windows(2).all(|w| w[1] == w[0] + 1)
}

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
    let stream = svc.collect_events(&id).await;

    // Turn 1 needs an approval, answered through /approvals.
    let turn = svc.turn(&id, "go");
    let approval = svc.wait_for_approval().await;
    assert_eq!(approval["tool_name"], "bash");
    let (status, v) = svc.answer(&approval, json!({ "decision": "allow" })).await;
    assert_eq!(status, 200, "{v}");
    let result = turn.await.unwrap();
    assert_eq!(result["reason"], "completed");
    assert!(result["calls"][0]["content"]
        .as_str()
        .unwrap()
        .contains("hi"));

    // Turn 2 runs a long command (allowed always for the session this time) and is cancelled.
    let turn = svc.turn(&id, "wait");
    let approval = svc.wait_for_approval().await;
    svc.answer(&approval, json!({ "decision": "allow" })).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) = svc.post(&format!("/sessions/{id}/cancel"), json!({})).await;
    assert_eq!(status, 202);
    let result = turn.await.unwrap();
    assert_eq!(result["reason"], "cancelled");

    let r = svc
        .client
        .delete(svc.url(&format!("/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let events = stream.await.unwrap();
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
    let (_, m) = svc.get("/metrics").await;
    assert!(m["runtime"]["events_dispatched"].as_u64().unwrap() >= 17);
}

#[tokio::test]
async fn bad_requests_get_4xx_with_the_error_and_change_nothing() {
    let svc = start().await;
    let before = svc.agent.sessions().len();
    let bad_json = svc
        .client
        .post(svc.url("/sessions"))
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
    assert_eq!(svc.agent.sessions().len(), before, "no session was opened");

    for path in ["/sessions/nope/turns", "/sessions/nope/cancel"] {
        let (status, body) = svc.post(path, json!({ "prompt": "x" })).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body["error"].as_str().unwrap().contains("nope"));
    }
    let (status, _) = svc.get("/sessions/nope/events").await;
    assert_eq!(status, 404);
    let r = svc
        .client
        .delete(svc.url("/sessions/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
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
    let (_, still) = svc.get("/approvals").await;
    assert_eq!(still["approvals"].as_array().unwrap().len(), 1);
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
    let svc = start().await;
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
            let client = svc.client.clone();
            let turn = svc.url(&format!("/sessions/{id}/turns"));
            let close = svc.url(&format!("/sessions/{id}"));
            tokio::spawn(async move {
                let r: Value = client
                    .post(turn)
                    .json(&json!({ "prompt": "go" }))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(r["reason"], "completed");
                assert_eq!(
                    client.delete(close).send().await.unwrap().status().as_u16(),
                    200
                );
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

    async fn open(&self, url: &str) {
        self.client
            .post(format!("{}/session/{}/url", self.base, self.session))
            .json(&json!({ "url": url }))
            .send()
            .await
            .unwrap();
    }

    /// The live DOM, polled until `ready` holds (at most 15 s).
    async fn dom_when(&self, ready: impl Fn(&str) -> bool) -> String {
        let mut dom = String::new();
        for _ in 0..150 {
            let v: Value = self
                .client
                .get(format!("{}/session/{}/source", self.base, self.session))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
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
async fn the_dashboard_shows_the_session_events_and_a_pending_approval_in_chromium() {
    if !external_available(
        &["chromium", "chromedriver"],
        "the dashboard is driven in headless Chromium; .ci/run installs chromium and chromium-driver",
    ) {
        return;
    }
    let svc = start().await;
    let id = svc
        .open(
            "ui",
            json!({ "turns": [ { "text": "run", "tool_calls": [ { "name": "bash", "input": { "command": "echo from-the-page" } } ] }, { "text": "done" } ] }),
            None,
        )
        .await;
    let turn = svc.turn(&id, "go");
    let approval = svc.wait_for_approval().await;
    let browser = Browser::start().await;
    browser.open(&svc.url(&format!("/?session={id}"))).await;
    let dom = browser
        .dom_when(|d| d.contains("PermissionRequest") && d.contains("class=\"approval\""))
        .await;
    assert!(
        dom.contains("<td>SessionStart</td>"),
        "no events on the page:\n{dom}"
    );
    assert!(
        dom.contains("<td>PreToolUse</td>") && dom.contains("<td>bash</td>"),
        "{dom}"
    );
    assert!(dom.contains("<td>PermissionRequest</td>"), "{dom}");
    assert!(
        dom.contains("class=\"approval\""),
        "no pending approval on the page:\n{dom}"
    );
    assert!(dom.contains("echo from-the-page"), "{dom}");
    assert!(dom.contains(">Allow<") && dom.contains(">Deny<"), "{dom}");
    // Answered elsewhere, the approval leaves the page and the turn's events arrive.
    svc.answer(&approval, json!({ "decision": "allow" })).await;
    let result = turn.await.unwrap();
    assert_eq!(result["reason"], "completed");
    let dom = browser
        .dom_when(|d| d.contains("<td>Stop</td>") && !d.contains("class=\"approval\""))
        .await;
    assert!(
        dom.contains("<td>PostToolUse</td>") && dom.contains("<td>Stop</td>"),
        "{dom}"
    );
    assert!(!dom.contains("class=\"approval\""), "{dom}");
    browser.quit().await;
}

#[tokio::test]
async fn a_script_may_be_the_body_itself_a_json_string_or_a_file() {
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
    let file = svc._dir.path().join("script.json");
    std::fs::write(&file, json!({ "turns": turns }).to_string()).unwrap();
    let (status, _) = svc
        .post(
            "/sessions",
            json!({ "id": "from-file", "script": file.display().to_string() }),
        )
        .await;
    assert_eq!(status, 201);
    for id in ["inline-body", "as-string", "from-file"] {
        let (status, result) = svc
            .post(
                &format!("/sessions/{id}/turns"),
                json!({ "message": "hello" }),
            )
            .await;
        assert_eq!(status, 200, "{id}: {result}");
        assert_eq!(result["text"], "hi", "{id}");
    }
    let (status, body) = svc
        .post(
            "/sessions",
            json!({ "id": "missing", "script": "/no/such/script.json" }),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let (_, list) = svc.get("/sessions").await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 3);
}
