//! A local server speaking the model APIs' wire formats (Anthropic's Messages API and OpenAI's
//! chat completions, streamed), answering each request with the next scripted reply.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::Notify;

/// What the server answers to one request.
pub enum Reply {
    /// A stream of these bytes, sent in pieces of `chunk` bytes.
    Sse(String),
    /// A status, headers and a body.
    Status(u16, Vec<(&'static str, String)>, String),
    /// Headers, then nothing, until the client goes away (`dropped` is notified then).
    Hang,
}

/// The replies still to give and what was asked.
#[derive(Clone, Default)]
pub struct Script {
    pub replies: Arc<Mutex<VecDeque<Reply>>>,
    /// Every request: its headers and JSON body.
    pub requests: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
    /// Notified as each request arrives.
    pub arrived: Arc<Notify>,
    /// Notified when a hanging reply's connection closes.
    pub dropped: Arc<Notify>,
}

/// Notifies when the response body is dropped (the client closed the connection).
struct DropSignal(Arc<Notify>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

async fn handle(State(script): State<Script>, headers: HeaderMap, body: String) -> Response<Body> {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    script.requests.lock().push((headers, body));
    script.arrived.notify_one();
    let reply = script.replies.lock().pop_front();
    match reply {
        Some(Reply::Sse(text)) => {
            // Seven-byte pieces, a millisecond apart: events and UTF-8 split anywhere.
            let pieces: Vec<Vec<u8>> = text.as_bytes().chunks(7).map(<[u8]>::to_vec).collect();
            let stream = futures_util::stream::iter(pieces).then(|piece| async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Ok::<_, Infallible>(piece)
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Some(Reply::Status(code, headers, body)) => {
            let mut response = Response::builder().status(StatusCode::from_u16(code).unwrap());
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response.body(Body::from(body)).unwrap()
        }
        Some(Reply::Hang) => {
            let signal = DropSignal(script.dropped.clone());
            let stream =
                futures_util::stream::pending::<Result<Vec<u8>, Infallible>>().map(move |item| {
                    let _keep = &signal;
                    item
                });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap()
        }
        None => Response::builder()
            .status(500)
            .body(Body::from("no reply scripted"))
            .unwrap(),
    }
}

/// Serves `replies` in order on a free loopback port.
pub async fn serve(replies: Vec<Reply>) -> (SocketAddr, Script) {
    let script = Script::default();
    script.replies.lock().extend(replies);
    let app = Router::new()
        .route("/v1/messages", post(handle))
        .route("/v1/chat/completions", post(handle))
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, script)
}

/// Server-sent events with these names and data.
pub fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// An Anthropic answer: `text`, then these tool calls (input JSON split in two deltas).
pub fn anthropic_answer(text: &str, calls: &[(&str, &str, Value)], usage: (u64, u64)) -> String {
    let mut events = vec![
        (
            "message_start",
            json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":usage.0,"output_tokens":1}}}),
        ),
        ("ping", json!({"type":"ping"})),
        (
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        (
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}),
        ),
        (
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        ),
    ];
    for (i, (id, name, input)) in calls.iter().enumerate() {
        let index = i + 1;
        let input = input.to_string();
        let (head, tail) = input.split_at(input.len() / 2);
        events.push((
            "content_block_start",
            json!({"type":"content_block_start","index":index,"content_block":{"type":"tool_use","id":id,"name":name,"input":{}}}),
        ));
        for part in [head, tail] {
            events.push((
                "content_block_delta",
                json!({"type":"content_block_delta","index":index,"delta":{"type":"input_json_delta","partial_json":part}}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type":"content_block_stop","index":index}),
        ));
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    events.push((
        "message_delta",
        json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":usage.1}}),
    ));
    events.push(("message_stop", json!({"type":"message_stop"})));
    sse(&events)
}

/// An OpenAI answer: `text`, then these tool calls (arguments split in two deltas), then usage.
pub fn openai_answer(text: &str, calls: &[(&str, &str, Value)], usage: (u64, u64)) -> String {
    let chunk = |delta: Value, finish: Value| json!({"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
    let mut chunks = vec![chunk(
        json!({"role":"assistant","content":text}),
        Value::Null,
    )];
    for (i, (id, name, input)) in calls.iter().enumerate() {
        let input = input.to_string();
        let (head, tail) = input.split_at(input.len() / 2);
        chunks.push(chunk(
            json!({"tool_calls":[{"index":i,"id":id,"type":"function","function":{"name":name,"arguments":head}}]}),
            Value::Null,
        ));
        chunks.push(chunk(
            json!({"tool_calls":[{"index":i,"function":{"arguments":tail}}]}),
            Value::Null,
        ));
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    chunks.push(chunk(json!({}), json!(finish)));
    chunks.push(json!({"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":usage.0,"completion_tokens":usage.1,"total_tokens":usage.0 + usage.1}}));
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}
