//! The HTTP providers against a local server speaking each API's wire format: full agent turns
//! (a tool call, its result sent back in the right shape, parallel calls, a final answer, usage
//! counted), retries, failures ending the turn with `StopFailure`, and cancellation dropping the
//! request in flight. Streams are cut at awkward byte boundaries.

#![cfg(all(feature = "providers", feature = "service"))]

mod common;

use std::time::{Duration, Instant};

use common::model_server::{anthropic_answer, openai_answer, serve, Reply};
use futures_util::StreamExt;
use hookbus::providers::{AnthropicProvider, HttpOptions, OpenAiProvider};
use hookbus::*;
use serde_json::{json, Value};

fn quick() -> HttpOptions {
    HttpOptions {
        backoff: Duration::from_millis(10),
        timeout: Duration::from_secs(20),
        ..HttpOptions::default()
    }
}

async fn agent_with(provider: impl Provider) -> (Agent, tempfile::TempDir) {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("main.py"), "print(6 * 7)\n").unwrap();
    let agent = Agent::builder()
        .provider(provider)
        .approver(PolicyApprover::allow())
        .build()
        .await
        .unwrap();
    (agent, ws)
}

fn two_calls() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("call_1", "read_file", json!({"path": "main.py"})),
        ("call_2", "list_dir", json!({"path": "."})),
    ]
}

#[tokio::test]
async fn anthropic_turn_with_parallel_tool_calls_sends_results_back_and_counts_usage() {
    let (addr, script) = serve(vec![
        Reply::Sse(anthropic_answer(
            "Looking — ünïcode.",
            &two_calls(),
            (10, 20),
        )),
        Reply::Sse(anthropic_answer("It prints 42.", &[], (30, 5))),
    ])
    .await;
    let provider = AnthropicProvider::new("sk-test", "claude-test")
        .base_url(format!("http://{addr}"))
        .options(quick());
    let (agent, ws) = agent_with(provider).await;
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("What does main.py print?").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Completed, "{result:?}");
    assert_eq!(result.text, "It prints 42.");
    assert_eq!(result.calls.len(), 2);
    assert_eq!(
        (result.metrics.input_tokens, result.metrics.output_tokens),
        (40, 25)
    );

    let requests = script.requests.lock().clone();
    assert_eq!(requests.len(), 2);
    let (headers, first) = &requests[0];
    assert_eq!(headers["x-api-key"], "sk-test");
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(first["model"], "claude-test");
    assert_eq!(first["stream"], true);
    assert!(first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "read_file"));
    let second = &requests[1].1;
    let messages = second["messages"].as_array().unwrap();
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"][1]["type"], "tool_use");
    assert_eq!(assistant["content"][1]["input"], json!({"path": "main.py"}));
    let results = &messages[messages.len() - 1];
    assert_eq!(results["role"], "user");
    assert_eq!(results["content"][0]["type"], "tool_result");
    assert_eq!(results["content"][0]["tool_use_id"], "call_1");
    assert!(results["content"][0]["content"]
        .as_str()
        .unwrap()
        .contains("print(6 * 7)"));
    assert_eq!(results["content"][1]["tool_use_id"], "call_2");
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn openai_turn_with_parallel_tool_calls_sends_results_back_and_counts_usage() {
    let (addr, script) = serve(vec![
        Reply::Sse(openai_answer("", &two_calls(), (11, 21))),
        Reply::Sse(openai_answer("It prints 42.", &[], (31, 6))),
    ])
    .await;
    let provider = OpenAiProvider::new("sk-test", "gpt-test")
        .base_url(format!("http://{addr}/v1"))
        .options(quick());
    let (agent, ws) = agent_with(provider).await;
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("What does main.py print?").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Completed, "{result:?}");
    assert_eq!(result.text, "It prints 42.");
    assert_eq!(result.calls.len(), 2);
    assert_eq!(
        (result.metrics.input_tokens, result.metrics.output_tokens),
        (42, 27)
    );

    let requests = script.requests.lock().clone();
    let (headers, first) = &requests[0];
    assert_eq!(headers["authorization"], "Bearer sk-test");
    assert_eq!(first["stream_options"]["include_usage"], true);
    assert_eq!(first["tools"][0]["type"], "function");
    let messages = requests[1].1["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 3]["role"], "assistant");
    assert_eq!(
        messages[n - 3]["tool_calls"][0]["function"]["name"],
        "read_file"
    );
    let arguments = messages[n - 3]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(arguments).unwrap(),
        json!({"path": "main.py"})
    );
    assert_eq!(messages[n - 2]["role"], "tool");
    assert_eq!(messages[n - 2]["tool_call_id"], "call_1");
    assert!(messages[n - 2]["content"]
        .as_str()
        .unwrap()
        .contains("print(6 * 7)"));
    assert_eq!(messages[n - 1]["tool_call_id"], "call_2");
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_then_the_call_succeeds() {
    let error = json!({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}});
    let (addr, script) = serve(vec![
        Reply::Status(429, vec![("retry-after", "1".into())], error.to_string()),
        Reply::Sse(anthropic_answer("Fine.", &[], (1, 1))),
    ])
    .await;
    let provider = AnthropicProvider::new("k", "m")
        .base_url(format!("http://{addr}"))
        .options(quick());
    let (agent, ws) = agent_with(provider).await;
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let started = Instant::now();
    let result = session.run_turn("hi").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Completed, "{result:?}");
    assert_eq!(result.text, "Fine.");
    assert_eq!(script.requests.lock().len(), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retry-after was honoured"
    );
    agent.shutdown(Duration::from_secs(5)).await;
}

/// The `StopFailure` events of a session, after it closed.
async fn stop_failures(session: &AgentSession) -> Vec<StopFailure> {
    let mut events = session.events();
    session.close().await.unwrap();
    let mut out = Vec::new();
    while let Some(env) = events.next().await {
        if let Event::StopFailure(e) = &env.event {
            out.push(e.clone());
        }
    }
    out
}

#[tokio::test]
async fn three_500s_end_the_turn_with_stop_failure_after_the_retries() {
    let error = json!({"error":{"message":"upstream broke","type":"server_error"}}).to_string();
    let (addr, script) = serve(
        (0..3)
            .map(|_| Reply::Status(500, vec![], error.clone()))
            .collect(),
    )
    .await;
    let provider = OpenAiProvider::new("k", "m")
        .base_url(format!("http://{addr}/v1"))
        .options(quick());
    let (agent, ws) = agent_with(provider).await;
    let session = agent
        .open_session(SessionOptions::new(ws.path()).id("s500"))
        .await
        .unwrap();
    let result = session.run_turn("hi").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Error, "{result:?}");
    assert!(
        result
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("upstream broke"),
        "{result:?}"
    );
    assert_eq!(script.requests.lock().len(), 3, "one call and two retries");
    let failures = stop_failures(&session).await;
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].error, "server_error");
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_401_ends_the_turn_at_once_with_the_apis_message() {
    let error = json!({"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}});
    let (addr, script) = serve(vec![Reply::Status(401, vec![], error.to_string())]).await;
    let provider = AnthropicProvider::new("bad", "m")
        .base_url(format!("http://{addr}"))
        .options(quick());
    let (agent, ws) = agent_with(provider).await;
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("hi").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Error, "{result:?}");
    assert!(
        result
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("invalid x-api-key"),
        "{result:?}"
    );
    assert_eq!(script.requests.lock().len(), 1, "a 401 is not retried");
    let failures = stop_failures(&session).await;
    assert_eq!(failures[0].error, "authentication_failed");
    assert!(failures[0]
        .error_details
        .as_deref()
        .unwrap_or("")
        .contains("invalid x-api-key"));
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn cancelling_the_turn_drops_the_request_in_flight() {
    let (addr, script) = serve(vec![Reply::Hang]).await;
    let provider = AnthropicProvider::new("k", "m")
        .base_url(format!("http://{addr}"))
        .options(quick());
    let (agent, ws) = agent_with(provider).await;
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let arrived = script.arrived.notified();
    let dropped = script.dropped.notified();
    let turn = tokio::spawn({
        let session = session.clone();
        async move { session.run_turn("hi").await }
    });
    tokio::time::timeout(Duration::from_secs(10), arrived)
        .await
        .expect("the request reached the server");
    session.cancel();
    tokio::time::timeout(Duration::from_secs(10), dropped)
        .await
        .expect("the server saw the connection close");
    let result = turn.await.unwrap().unwrap();
    assert_eq!(result.reason, TerminalReason::Cancelled, "{result:?}");
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn compaction_asks_the_model_for_the_summary_and_the_next_request_carries_it() {
    let (addr, script) = serve(vec![
        Reply::Sse(anthropic_answer("First answer.", &[], (5, 5))),
        Reply::Sse(anthropic_answer("SUMMARY: the user said hi.", &[], (7, 3))),
        Reply::Sse(anthropic_answer("Second answer.", &[], (9, 2))),
    ])
    .await;
    let provider = AnthropicProvider::new("k", "m")
        .base_url(format!("http://{addr}"))
        .options(quick());
    let ws = tempfile::tempdir().unwrap();
    let agent = Agent::builder()
        .provider(provider)
        .with_limits(|l| l.keep_recent = 1)
        .build()
        .await
        .unwrap();
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    session.run_turn("hi").await.unwrap();
    assert!(session.compact(Some("keep names".into())).await.unwrap());
    session.run_turn("and now?").await.unwrap();

    let requests = script.requests.lock().clone();
    assert_eq!(requests.len(), 3);
    let ask = &requests[1].1;
    assert!(ask.get("tools").is_none(), "no tools while summarising");
    // The messages being compacted (the first prompt), then the question, in one user message.
    let messages = ask["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["content"][0]["text"], "hi");
    let text = messages[0]["content"][1]["text"].as_str().unwrap();
    assert!(text.starts_with(COMPACTION_PROMPT), "{text}");
    assert!(text.contains("keep names"));
    // The next call starts from the summary; the most recent message is kept after it.
    let next = requests[2].1["messages"].as_array().unwrap().clone();
    let first = next[0]["content"][0]["text"].as_str().unwrap();
    assert!(first.contains("SUMMARY: the user said hi."), "{next:?}");
    assert_eq!(next[1]["content"][0]["text"], "First answer.");
    agent.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_response_past_the_size_cap_fails_the_call_instead_of_growing() {
    let big = "x".repeat(12 << 10);
    let (addr, _script) = serve(vec![Reply::Sse(anthropic_answer(&big, &[], (1, 1)))]).await;
    let provider = AnthropicProvider::new("k", "m")
        .base_url(format!("http://{addr}"))
        .options(HttpOptions {
            max_response_bytes: 4 << 10,
            ..quick()
        });
    let (agent, ws) = agent_with(provider).await;
    let session = agent
        .open_session(SessionOptions::new(ws.path()))
        .await
        .unwrap();
    let result = session.run_turn("hi").await.unwrap();
    assert_eq!(result.reason, TerminalReason::Error, "{result:?}");
    assert!(
        result
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("larger than"),
        "{result:?}"
    );
    agent.shutdown(Duration::from_secs(5)).await;
}
