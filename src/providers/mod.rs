//! Model providers over HTTP (feature `providers`): [`AnthropicProvider`] for Anthropic's
//! Messages API and [`OpenAiProvider`] for OpenAI-compatible chat completions (OpenAI, vLLM,
//! llama.cpp's server, Ollama).
//!
//! Both stream their answers over server-sent events and assemble tool calls from their deltas;
//! retry 429, 5xx and connection errors with exponential backoff and jitter, honouring
//! `retry-after`; bound each call by a timeout and each response by a size cap; drop the request
//! in flight (closing its connection) when the turn is cancelled; and turn 4xx answers into typed
//! [`ProviderError`](crate::ProviderError)s carrying the API's message, which end the turn with
//! `StopFailure`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use hookbus::providers::AnthropicProvider;
//!
//! let agent = hookbus::Agent::builder()
//!     .provider(AnthropicProvider::from_env(None)?)
//!     .build()
//!     .await?;
//! # Ok(()) }
//! ```

mod anthropic;
mod http;
mod openai;

pub use anthropic::{
    AnthropicProvider, ANTHROPIC_VERSION, DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL,
};
pub use http::HttpOptions;
pub use openai::{OpenAiProvider, DEFAULT_OPENAI_BASE_URL, DEFAULT_OPENAI_MODEL};

/// A provider that cannot be configured from the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderConfigError {
    /// The variable holding the API key is not set.
    #[error("set {0} to use this provider")]
    MissingKey(&'static str),
}

/// A variable of the environment, when set and not empty.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
