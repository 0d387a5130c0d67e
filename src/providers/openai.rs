//! [`OpenAiProvider`]: chat completions, streamed, against OpenAI or any compatible server.

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

/// The base URL when `OPENAI_BASE_URL` is not set.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The model when none is named.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4.1";

/// OpenAI's chat completions with `tools` / `tool_calls`, streamed, with usage counted
/// (`stream_options.include_usage`). Any compatible server works (vLLM, llama.cpp's server,
/// Ollama): point the base URL at it; an empty key sends no `Authorization` header.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    base_url: String,
    api_key: String,
    model: String,
    options: HttpOptions,
}

impl OpenAiProvider {
    /// A provider for `model` with this key, on the public API.
    pub fn new(api_key: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: DEFAULT_OPENAI_BASE_URL.to_owned(),
            api_key: api_key.into(),
            model: model.into(),
            options: HttpOptions::default(),
        }
    }

    /// From the environment: `OPENAI_API_KEY` (required unless `OPENAI_BASE_URL` names another
    /// server), `OPENAI_BASE_URL`, and the model (`model`, else `OPENAI_MODEL`, else
    /// [`DEFAULT_OPENAI_MODEL`]).
    pub fn from_env(model: Option<&str>) -> Result<Self, ProviderConfigError> {
        let base = env_var("OPENAI_BASE_URL");
        let key = match (env_var("OPENAI_API_KEY"), &base) {
            (Some(key), _) => key,
            (None, Some(_)) => String::new(),
            (None, None) => return Err(ProviderConfigError::MissingKey("OPENAI_API_KEY")),
        };
        let model = model
            .map(str::to_owned)
            .or_else(|| env_var("OPENAI_MODEL"))
            .unwrap_or_else(|| DEFAULT_OPENAI_MODEL.to_owned());
        let provider = Self::new(key, model);
        Ok(match base {
            Some(url) => provider.base_url(url),
            None => provider,
        })
    }

    /// Another base URL (up to and including `/v1`).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    /// Timeouts, retries and caps.
    pub fn options(mut self, options: HttpOptions) -> Self {
        self.options = options;
        self
    }

    /// The request body for `request`.
    fn body(&self, request: &ModelRequest<'_>) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": request.messages.iter().map(message).collect::<Vec<_>>(),
            "stream": true,
            "stream_options": { "include_usage": true },
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": { "name": t.name, "parameters": t.input_schema },
                    })
                })
                .collect();
        }
        body
    }

    async fn call(
        &self,
        body: &Value,
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let url = format!("{}/chat/completions", self.base_url);
        let client = client()?;
        let build = || {
            let request = client.post(&url).json(body);
            if self.api_key.is_empty() {
                request
            } else {
                request.bearer_auth(&self.api_key)
            }
        };
        let response = send(build, &self.options, cancel).await?;
        let mut stream = std::pin::pin!(events(response, self.options.max_response_bytes));
        let mut answer = Answer::default();
        while let Some(event) = stream.next().await {
            let event = event?;
            if event.data.trim() == "[DONE]" {
                answer.done = true;
                break;
            }
            answer.take(&json_of(&event)?)?;
        }
        answer.finish()
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
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

/// One message in the API's shape.
fn message(m: &Message) -> Value {
    match m.role {
        Role::System => json!({ "role": "system", "content": m.content }),
        Role::User => json!({ "role": "user", "content": m.content }),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_use_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
        Role::Assistant => {
            let mut out = json!({
                "role": "assistant",
                "content": if m.content.is_empty() { Value::Null } else { json!(m.content) },
            });
            if !m.tool_calls.is_empty() {
                out["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": { "name": c.name, "arguments": c.input.to_string() },
                        })
                    })
                    .collect();
            }
            out
        }
    }
}

/// A tool call as its deltas arrive.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The answer being assembled from the stream's chunks.
#[derive(Default)]
struct Answer {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Usage,
    finished: bool,
    done: bool,
}

impl Answer {
    /// Takes one chunk.
    fn take(&mut self, chunk: &Value) -> Result<(), ProviderError> {
        if let Some(error) = chunk.get("error") {
            let message = error["message"].as_str().unwrap_or("error").to_owned();
            return Err(ProviderError::Server(message));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let get = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.usage = Usage {
                input_tokens: get("prompt_tokens"),
                output_tokens: get("completion_tokens"),
            };
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str() {
                self.text.push_str(text);
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = call["index"].as_u64().unwrap_or(0);
                let partial = self.calls.entry(index).or_default();
                if let Some(id) = call["id"].as_str() {
                    partial.id.push_str(id);
                }
                let function = &call["function"];
                if let Some(name) = function["name"].as_str() {
                    partial.name.push_str(name);
                }
                if let Some(arguments) = function["arguments"].as_str() {
                    partial.arguments.push_str(arguments);
                }
            }
            if choice["finish_reason"].is_string() {
                self.finished = true;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<ModelResponse, ProviderError> {
        if !self.done && !self.finished {
            return Err(ProviderError::Other(
                "the response stream ended before a finish reason".into(),
            ));
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (_, call) in self.calls {
            let input = tool_input(&call.id, &call.arguments)?;
            tool_calls.push(ToolCall {
                id: call.id,
                name: call.name,
                input,
            });
        }
        Ok(ModelResponse {
            text: self.text,
            tool_calls,
            usage: self.usage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_deltas_assemble_by_index() {
        let mut answer = Answer::default();
        let chunks = [
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_file","arguments":""}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"list_dir","arguments":"{}"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"x\"}"}}]},"finish_reason":"tool_calls"}]}),
            json!({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}}),
        ];
        for c in &chunks {
            answer.take(c).unwrap();
        }
        answer.done = true;
        let response = answer.finish().unwrap();
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(response.tool_calls[0].input, json!({"path": "x"}));
        assert_eq!(response.tool_calls[1].name, "list_dir");
        assert_eq!(response.usage.input_tokens, 12);
    }
}
