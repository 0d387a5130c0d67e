//! A hookbus service on an ephemeral port, and a client for it (the service tests).

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use hookbus::service::{serve, Service, ServiceConfig};
use hookbus::{Agent, AgentBuilder};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The primary token of test services.
pub const TOKEN: &str = "test-operator-token-0123456789";
/// A second identity's token (named `other`).
pub const OTHER: &str = "test-other-token-0123456789ab";

pub struct Svc {
    pub addr: SocketAddr,
    service: Option<Service>,
    pub client: reqwest::Client,
    pub token: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

/// A service with the default configuration and agent.
pub async fn start() -> Svc {
    start_with(|_| {}, |a| a).await
}

/// A service with the test tokens (the second one named `other`) and an approval timeout of
/// two minutes, changed by `configure`, over an agent from `agent`.
pub async fn start_with(
    configure: impl FnOnce(&mut ServiceConfig),
    agent: impl FnOnce(AgentBuilder) -> AgentBuilder,
) -> Svc {
    let mut config = ServiceConfig::new(TOKEN).unwrap();
    config.tokens.add("other", OTHER).unwrap();
    config.limits.approval_timeout = Duration::from_secs(120);
    configure(&mut config);
    let service = Service::new(config, agent(Agent::builder())).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = {
        let service = service.clone();
        tokio::spawn(async move {
            serve(listener, service, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        })
    };
    Svc {
        addr,
        service: Some(service),
        client: reqwest::Client::new(),
        token: TOKEN.into(),
        stop: Some(stop),
        served: Some(served),
    }
}

/// One parsed SSE frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub name: String,
    pub data: Value,
}

impl Svc {
    /// A client for a service running elsewhere (another process), with the primary token.
    pub fn remote(addr: SocketAddr) -> Svc {
        Svc {
            addr,
            service: None,
            client: reqwest::Client::new(),
            token: TOKEN.into(),
            stop: None,
            served: None,
        }
    }

    /// The service (of one started in this process).
    pub fn service(&self) -> &Service {
        self.service.as_ref().expect("a service of this process")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The same service, called with another token.
    pub fn as_token(&self, token: &str) -> Svc {
        Svc {
            addr: self.addr,
            service: self.service.clone(),
            client: self.client.clone(),
            token: token.into(),
            stop: None,
            served: None,
        }
    }

    pub fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(path))
            .header("authorization", self.auth())
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(self.url(path))
            .header("authorization", self.auth())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .delete(self.url(path))
            .header("authorization", self.auth())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn open(&self, id: &str, script: Value, mode: Option<&str>) -> String {
        let mut body = json!({ "id": id, "script": script });
        if let Some(m) = mode {
            body["permission_mode"] = json!(m);
        }
        let (status, v) = self.post("/sessions", body).await;
        assert_eq!(status, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    /// Subscribes to a session's SSE stream (the response has started when this returns) and
    /// reads every frame to its end in a task.
    pub async fn frames(&self, id: &str) -> tokio::task::JoinHandle<Vec<Frame>> {
        let response = self
            .client
            .get(self.url(&format!("/sessions/{id}/events")))
            .header("authorization", self.auth())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        tokio::spawn(read_frames(response))
    }

    /// The envelopes of a session's stream, read to its end in a task.
    pub async fn collect_events(&self, id: &str) -> tokio::task::JoinHandle<Vec<Value>> {
        let frames = self.frames(id).await;
        tokio::spawn(async move { envelopes(&frames.await.unwrap()) })
    }

    /// Runs a turn in a task; the task answers the turn's JSON result.
    pub fn turn(&self, id: &str, prompt: &str) -> tokio::task::JoinHandle<Value> {
        let client = self.client.clone();
        let url = self.url(&format!("/sessions/{id}/turns"));
        let auth = self.auth();
        let body = json!({ "prompt": prompt });
        tokio::spawn(async move {
            client
                .post(url)
                .header("authorization", auth)
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
    pub async fn answer(&self, approval: &Value, body: Value) -> (u16, Value) {
        self.post(&format!("/approvals/{}", approval["id"]), body)
            .await
    }

    pub async fn approvals(&self) -> Vec<Value> {
        let (_, v) = self.get("/approvals").await;
        v["approvals"].as_array().cloned().unwrap_or_default()
    }

    pub async fn wait_for_approval(&self) -> Value {
        for _ in 0..400 {
            if let Some(a) = self.approvals().await.first() {
                return a.clone();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("no approval appeared");
    }

    /// Sends raw bytes on a new connection and answers the response's status code (0 when the
    /// connection closed without one).
    pub async fn raw(&self, request: &str) -> u16 {
        raw_status(self.addr, request).await
    }

    /// Stops serving (as a signal would) and waits until `serve` returned.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.unwrap();
        }
    }
}

pub async fn raw_status(addr: SocketAddr, request: &str) -> u16 {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        loop {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Reads an SSE response to its end.
pub async fn read_frames(response: reqwest::Response) -> Vec<Frame> {
    let mut stream = response.bytes_stream();
    let mut buf = String::new();
    let mut frames = Vec::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block = buf[..end].to_owned();
            buf.drain(..end + 2);
            if let Some(frame) = parse_frame(&block) {
                frames.push(frame);
            }
        }
    }
    frames
}

pub fn parse_frame(block: &str) -> Option<Frame> {
    let mut name = None;
    let mut data = String::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    Some(Frame {
        name: name?,
        data: serde_json::from_str(&data).unwrap(),
    })
}

/// The envelopes among frames (named after their event), each checked against its name.
pub fn envelopes(frames: &[Frame]) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| !matches!(f.name.as_str(), "hooks" | "lagged" | "closed"))
        .map(|f| {
            assert_eq!(f.data["hook_event_name"], f.name.as_str());
            f.data.clone()
        })
        .collect()
}

pub fn kinds(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["hook_event_name"].as_str().unwrap())
        .collect()
}

pub fn in_order(events: &[Value]) -> bool {
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    seqs.first() == Some(&1) && seqs.windows(2).all(|w| w[1] == w[0] + 1)
}
