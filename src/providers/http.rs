//! What both providers share: the HTTP options, sending with retries (exponential backoff with
//! jitter, `retry-after` honoured), typed errors from status codes and API error bodies, and a
//! capped server-sent-events stream.

use std::time::Duration;

use eventsource_stream::{Event, Eventsource};
use futures_util::{Stream, StreamExt, TryStreamExt};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::provider::ProviderError;

/// How a provider talks to its API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// The longest one model call may take, response stream included (default 10 min).
    pub timeout: Duration,
    /// Retries after a 429, a 5xx or a connection error (default 2: three attempts).
    pub retries: u32,
    /// The first retry's delay; each retry doubles it, with jitter (default 500 ms).
    pub backoff: Duration,
    /// The longest delay between two attempts, `retry-after` included (default 60 s).
    pub max_backoff: Duration,
    /// The most bytes one response may take (default 32 MiB).
    pub max_response_bytes: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            retries: 2,
            backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            max_response_bytes: 32 << 20,
        }
    }
}

/// The HTTP client every provider shares (one connection pool), with TLS by rustls; an error
/// if it cannot be built.
pub(crate) fn client() -> Result<reqwest::Client, ProviderError> {
    static CLIENT: std::sync::OnceLock<Result<reqwest::Client, String>> =
        std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .build()
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| ProviderError::Other(format!("no HTTP client: {e}")))
}

/// The most bytes of an error body read for its message.
const MAX_ERROR_BODY: usize = 64 << 10;

/// Sends the request `build` makes until it succeeds, retrying what is worth retrying; stops at
/// once when `cancel` fires (the request in flight is dropped, which closes its connection).
pub(crate) async fn send(
    build: impl Fn() -> RequestBuilder,
    options: &HttpOptions,
    cancel: &CancellationToken,
) -> Result<Response, ProviderError> {
    let mut attempt = 0;
    loop {
        let sent = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            sent = build().send() => sent,
        };
        let retry_after = match sent {
            Ok(response) if response.status().is_success() => return Ok(response),
            Ok(response) => {
                let status = response.status();
                let after = retry_after(&response);
                let error = error_of(status, response).await;
                if !retryable(status) || attempt >= options.retries {
                    return Err(error);
                }
                tracing::warn!(%status, attempt, "model call failed, retrying: {error}");
                after
            }
            Err(e) => {
                if attempt >= options.retries || !(e.is_connect() || e.is_timeout()) {
                    return Err(ProviderError::Other(format!(
                        "the request failed: {}",
                        with_causes(&e)
                    )));
                }
                tracing::warn!(attempt, "model call failed, retrying: {e}");
                None
            }
        };
        let delay = retry_after
            .unwrap_or_else(|| backoff(options.backoff, attempt))
            .min(options.max_backoff);
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            _ = tokio::time::sleep(delay) => {}
        }
        attempt += 1;
    }
}

/// An error with the chain of its causes, which say what actually failed (DNS, TLS, ...).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// 429, 408, 409 and every 5xx (529 is Anthropic's "overloaded") are worth another attempt.
fn retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 409 | 429) || status.is_server_error()
}

/// `base × 2^attempt`, with up to a quarter of it added at random.
fn backoff(base: Duration, attempt: u32) -> Duration {
    let delay = base.saturating_mul(2u32.saturating_pow(attempt));
    let jitter = delay.mul_f64(fastrand::f64() / 4.0);
    delay.saturating_add(jitter)
}

/// The `retry-after` header: seconds (or `retry-after-ms`, milliseconds).
fn retry_after(response: &Response) -> Option<Duration> {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    header("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| header("retry-after").map(Duration::from_secs_f64))
}

/// The typed error of a failed response, with the API's own message when its body has one.
async fn error_of(status: StatusCode, response: Response) -> ProviderError {
    let body = read_capped(response, MAX_ERROR_BODY).await;
    let message = api_message(&body).unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&body).trim().to_owned();
        if text.is_empty() {
            status.to_string()
        } else {
            text
        }
    });
    classify(status, message)
}

/// The error kind of a status code.
pub(crate) fn classify(status: StatusCode, message: String) -> ProviderError {
    match status.as_u16() {
        401 | 403 => ProviderError::Authentication(message),
        429 => ProviderError::RateLimit(message),
        503 | 529 => ProviderError::Overloaded(message),
        400..=499 => ProviderError::InvalidRequest(message),
        _ => ProviderError::Server(message),
    }
}

/// `{"error": {"message": ...}}`, as both APIs write errors.
fn api_message(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let error = v.get("error")?;
    error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map(str::to_owned)
}

/// Up to `cap` bytes of a body; a body that fails halfway is what arrived.
async fn read_capped(response: Response, cap: usize) -> Vec<u8> {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = cap.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= cap {
            break;
        }
    }
    body
}

/// The server-sent events of a streamed response, ending with an error past `cap` bytes.
pub(crate) fn events(
    response: Response,
    cap: usize,
) -> impl Stream<Item = Result<Event, ProviderError>> {
    let mut seen = 0usize;
    response
        .bytes_stream()
        .map_err(|e| ProviderError::Other(format!("the response stream failed: {e}")))
        .and_then(move |chunk| {
            seen = seen.saturating_add(chunk.len());
            let over = seen > cap;
            async move {
                if over {
                    Err(ProviderError::Other(format!(
                        "the response is larger than {cap} bytes"
                    )))
                } else {
                    Ok(chunk)
                }
            }
        })
        .eventsource()
        .map_err(|e| ProviderError::Other(format!("malformed event stream: {e}")))
}

/// A tool call's input from the JSON text its deltas assembled: nothing is `{}`, anything
/// else must be JSON (an error naming the call otherwise).
pub(crate) fn tool_input(id: &str, text: &str) -> Result<Value, ProviderError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_str(text).map_err(|e| {
        ProviderError::Other(format!("the input of tool call `{id}` is not JSON: {e}"))
    })
}

/// An event's data as JSON, or a clear error naming the event.
pub(crate) fn json_of(event: &Event) -> Result<Value, ProviderError> {
    serde_json::from_str(&event.data).map_err(|e| {
        ProviderError::Other(format!(
            "malformed `{}` event from the API: {e}",
            if event.event.is_empty() {
                "message"
            } else {
                &event.event
            }
        ))
    })
}

/// Runs `call` unless `cancel` fires or `timeout` passes first.
pub(crate) async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
    options: &HttpOptions,
    cancel: &CancellationToken,
) -> Result<T, ProviderError> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(ProviderError::Cancelled),
        done = tokio::time::timeout(options.timeout, call) => done.unwrap_or_else(|_| {
            Err(ProviderError::Other(format!(
                "the model call took longer than {} s",
                options.timeout.as_secs()
            )))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_to_the_stop_failure_kinds() {
        let kind = |code: u16| classify(StatusCode::from_u16(code).unwrap(), "m".into()).kind();
        assert_eq!(kind(401), "authentication_failed");
        assert_eq!(kind(429), "rate_limit");
        assert_eq!(kind(529), "overloaded");
        assert_eq!(kind(400), "invalid_request");
        assert_eq!(kind(500), "server_error");
        assert!(retryable(StatusCode::TOO_MANY_REQUESTS));
        assert!(retryable(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(!retryable(StatusCode::UNAUTHORIZED));
        assert!(!retryable(StatusCode::BAD_REQUEST));
    }

    #[test]
    fn backoff_doubles_with_at_most_a_quarter_of_jitter() {
        for attempt in 0..4 {
            let base = Duration::from_millis(100) * 2u32.pow(attempt);
            let d = backoff(Duration::from_millis(100), attempt);
            assert!(d >= base && d <= base + base / 4, "{attempt}: {d:?}");
        }
    }

    #[test]
    fn api_error_bodies_give_their_message() {
        let body = br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        assert_eq!(api_message(body).as_deref(), Some("invalid x-api-key"));
        assert_eq!(api_message(b"not json"), None);
    }
}
