//! [`AnthropicProvider`]: the Messages API, streamed.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::http::{bounded, client, events, json_of, send, tool_input, HttpOptions};
use super::{env_var, ProviderConfigError};
use crate::agent::provider::{
    Message, ModelRequest, ModelResponse, Provider, ProviderError, Role, Usage,
};
use crate::agent::tool::ToolCall;

/// The API version every request names (`anthropic-version`).
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// The base URL when `ANTHROPIC_BASE_URL` is not set.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The model when none is named.
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-sonnet-4-5";

/// Anthropic's Messages API: tools as `tool_use` / `tool_result` blocks, the answer streamed
/// over server-sent events with tool inputs assembled from their JSON deltas, usage counted.
///
/// System messages become the `system` parameter; every other message keeps its place, tool
/// results as `tool_result` blocks of a user message (consecutive messages of one role are
/// merged, as the API wants roles to alternate).
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    base_url: String,
    api_key: String,
    model: String,
    max_tokens: u32,
    options: HttpOptions,
}

impl AnthropicProvider {
    /// A provider for `model` with this key, on the public API.
    pub fn new(api_key: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: DEFAULT_ANTHROPIC_BASE_URL.to_owned(),
            api_key: api_key.into(),
            model: model.into(),
            max_tokens: 8192,
            options: HttpOptions::default(),
        }
    }

    /// From the environment: `ANTHROPIC_API_KEY` (required), `ANTHROPIC_BASE_URL`, and the
    /// model (`model`, else `ANTHROPIC_MODEL`, else [`DEFAULT_ANTHROPIC_MODEL`]).
    pub fn from_env(model: Option<&str>) -> Result<Self, ProviderConfigError> {
        let key = env_var("ANTHROPIC_API_KEY")
            .ok_or(ProviderConfigError::MissingKey("ANTHROPIC_API_KEY"))?;
        let model = model
            .map(str::to_owned)
            .or_else(|| env_var("ANTHROPIC_MODEL"))
            .unwrap_or_else(|| DEFAULT_ANTHROPIC_MODEL.to_owned());
        let provider = Self::new(key, model);
        Ok(match env_var("ANTHROPIC_BASE_URL") {
            Some(url) => provider.base_url(url),
            None => provider,
        })
    }

    /// Another base URL (a proxy, a compatible server, a test server).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    /// The most tokens one answer may take (default 8192).
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens.max(1);
        self
    }

    /// Timeouts, retries and caps.
    pub fn options(mut self, options: HttpOptions) -> Self {
        self.options = options;
        self
    }

    /// The request body for `request`.
    fn body(&self, request: &ModelRequest<'_>) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "input_schema": t.input_schema }))
            .collect();
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages(request.messages),
            "stream": true,
        });
        if !system.is_empty() {
            body["system"] = Value::String(system.join("\n\n"));
        }
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        body
    }

    async fn call(
        &self,
        body: &Value,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let url = format!("{}/v1/messages", self.base_url);
        let client = client()?;
        let build = || {
            client
                .post(&url)
                .header("x-api-key", &self.api_key)
                .header("anthropic-version", ANTHROPIC_VERSION)
                .header("accept", "text/event-stream")
                .json(body)
        };
        let response = send(build, &self.options, cancel).await?;
        let mut stream = std::pin::pin!(events(response, self.options.max_response_bytes));
        let mut answer = Answer::default();
        while let Some(event) = stream.next().await {
            if answer.take(&json_of(&event?)?)? {
                break;
            }
        }
        answer.finish()
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn model(&self) -> &str {
        &self.model
    }

    fn summarizes(&self) -> bool {
        true
    }

    async fn complete(
        &self,
        request: ModelRequest<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let body = self.body(&request);
        bounded(self.call(&body, cancel), &self.options, cancel).await
    }
}

/// The conversation in the API's shape: roles alternate, tool results are user content.
fn messages(conversation: &[Message]) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in conversation {
        let (role, blocks) = match m.role {
            Role::System => continue,
            Role::User => ("user", text_block(&m.content).into_iter().collect()),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_use_id.clone().unwrap_or_default(),
                    "content": m.content,
                    "is_error": m.is_error,
                })],
            ),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                blocks.extend(m.tool_calls.iter().map(
                    |c| json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": c.input }),
                ));
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect()
}

/// A text block, unless the text is empty (the API refuses empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "type": "text", "text": text }))
}

/// One content block as it streams in.
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
    Other,
}

/// The answer being assembled from the stream's events.
#[derive(Default)]
struct Answer {
    text: String,
    blocks: BTreeMap<u64, Block>,
    calls: Vec<ToolCall>,
    usage: Usage,
    stopped: bool,
}

impl Answer {
    /// Takes one event; true once the message is complete.
    fn take(&mut self, event: &Value) -> Result<bool, ProviderError> {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => self.count(&event["message"]["usage"]),
            "content_block_start" => {
                let block = &event["content_block"];
                let started = match block["type"].as_str() {
                    Some("text") => {
                        self.text.push_str(block["text"].as_str().unwrap_or(""));
                        Block::Text
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: block["id"].as_str().unwrap_or_default().to_owned(),
                        name: block["name"].as_str().unwrap_or_default().to_owned(),
                        input: String::new(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, started);
            }
            "content_block_delta" => self.delta(index, &event["delta"]),
            "content_block_stop" => self.stop_block(index)?,
            "message_delta" => self.count(&event["usage"]),
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => return Err(stream_error(&event["error"])),
            _ => {}
        }
        Ok(false)
    }

    fn delta(&mut self, index: u64, delta: &Value) {
        match (self.blocks.get_mut(&index), delta["type"].as_str()) {
            (Some(Block::Text), Some("text_delta")) => {
                self.text.push_str(delta["text"].as_str().unwrap_or(""));
            }
            (Some(Block::ToolUse { input, .. }), Some("input_json_delta")) => {
                input.push_str(delta["partial_json"].as_str().unwrap_or(""));
            }
            _ => {}
        }
    }

    /// A finished tool_use block becomes a call, its input parsed from the assembled JSON.
    fn stop_block(&mut self, index: u64) -> Result<(), ProviderError> {
        if let Some(Block::ToolUse { id, name, input }) = self.blocks.remove(&index) {
            let input = tool_input(&id, &input)?;
            self.calls.push(ToolCall { id, name, input });
        }
        Ok(())
    }

    fn count(&mut self, usage: &Value) {
        let get = |key: &str| usage.get(key).and_then(Value::as_u64);
        if let Some(n) = get("input_tokens") {
            let cached = get("cache_read_input_tokens").unwrap_or(0)
                + get("cache_creation_input_tokens").unwrap_or(0);
            self.usage.input_tokens = n + cached;
        }
        if let Some(n) = get("output_tokens") {
            self.usage.output_tokens = n;
        }
    }

    fn finish(self) -> Result<ModelResponse, ProviderError> {
        if !self.stopped {
            return Err(ProviderError::Other(
                "the response stream ended before `message_stop`".into(),
            ));
        }
        Ok(ModelResponse {
            text: self.text,
            tool_calls: self.calls,
            usage: self.usage,
        })
    }
}

/// An `error` event of the stream, by its type.
fn stream_error(error: &Value) -> ProviderError {
    let message = error["message"].as_str().unwrap_or("error").to_owned();
    match error["type"].as_str().unwrap_or("") {
        "overloaded_error" => ProviderError::Overloaded(message),
        "rate_limit_error" => ProviderError::RateLimit(message),
        "authentication_error" | "permission_error" => ProviderError::Authentication(message),
        "invalid_request_error" | "not_found_error" | "request_too_large" => {
            ProviderError::InvalidRequest(message)
        }
        _ => ProviderError::Server(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_become_user_tool_result_blocks_and_roles_alternate() {
        let conversation = vec![
            Message::system("be brief"),
            Message::user("hi"),
            Message::assistant(
                "",
                vec![
                    ToolCall::new("a", "read_file", json!({"path": "x"})),
                    ToolCall::new("b", "list_dir", json!({})),
                ],
            ),
            Message::tool_result("a", "text", false),
            Message::tool_result("b", "boom", true),
            Message::user("<system-reminder>r</system-reminder>"),
        ];
        let out = messages(&conversation);
        assert_eq!(out.len(), 3, "{out:#?}");
        assert_eq!(out[1]["content"][1]["type"], "tool_use");
        assert_eq!(out[2]["role"], "user");
        assert_eq!(out[2]["content"][0]["tool_use_id"], "a");
        assert_eq!(out[2]["content"][1]["is_error"], true);
        assert_eq!(out[2]["content"][2]["type"], "text");
    }
}
