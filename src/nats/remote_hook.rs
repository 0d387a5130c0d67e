//! [`RemoteHook`]: a hook whose calls are answered by worker processes over NATS.

use std::time::Duration;

use async_nats::{Client, HeaderMap};
use async_trait::async_trait;

use super::subject::{self, DEFAULT_PREFIX};
use super::wire::{CallAnswer, CallRequest, CALL_HEADER};
use super::NatsError;
use crate::model::action::Reply;
use crate::model::error::HookError;
use crate::model::event::EventKind;
use crate::model::filter::{NamePattern, ToolFilter};
use crate::model::hook::{FailurePolicy, Hook, HookCx, HookOptions};

/// A hook registered as remote: each call is a NATS request on the hook's subject
/// (`<prefix>.hooks.<name>`), answered by whichever worker of the queue group
/// ([`serve_hook`](super::serve_hook)) takes it. The runtime's rules apply unchanged: its
/// [`HookOptions`] (events, filter, timeout, failure policy) are the ones declared here, its
/// reply folds in registration order with the rest, and when the runtime cancels the call (its
/// timeout, a cancelled turn) a cancellation message names the call to every worker.
///
/// A call no worker serves fails at once (`no worker serves hook …`), and the failure policy
/// decides; a worker that dies mid-call leaves the call to the runtime's timeout.
#[derive(Clone)]
pub struct RemoteHook {
    client: Client,
    name: String,
    calls: String,
    cancels: String,
    options: HookOptions,
}

impl std::fmt::Debug for RemoteHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteHook")
            .field("name", &self.name)
            .field("subject", &self.calls)
            .finish_non_exhaustive()
    }
}

impl RemoteHook {
    /// A remote hook `name` with these options, on the default subject prefix.
    pub fn new(client: Client, name: impl Into<String>, options: HookOptions) -> Self {
        Self::with_prefix(client, DEFAULT_PREFIX, name, options)
    }

    /// The same on subjects under `prefix` (a fleet of its own on a shared NATS).
    pub fn with_prefix(
        client: Client,
        prefix: &str,
        name: impl Into<String>,
        options: HookOptions,
    ) -> Self {
        let name = name.into();
        Self {
            calls: subject::hook_calls(prefix, &name),
            cancels: subject::hook_cancels(prefix, &name),
            client,
            name,
            options,
        }
    }

    /// The subject its calls go to.
    pub fn subject(&self) -> &str {
        &self.calls
    }

    async fn call(&self, call: &str, cx: &HookCx) -> Result<Reply, HookError> {
        let request = CallRequest {
            call: call.to_owned(),
            envelope: cx.envelope().clone(),
        };
        let body = serde_json::to_vec(&request)
            .map_err(|e| HookError::new(format!("cannot encode the call: {e}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(CALL_HEADER, call);
        // The runtime's timeout bounds the call, not the client's.
        let request = async_nats::Request::new()
            .payload(body.into())
            .headers(headers)
            .timeout(None);
        let answer = self
            .client
            .send_request(self.calls.clone(), request)
            .await
            .map_err(|e| match e.kind() {
                async_nats::RequestErrorKind::NoResponders => {
                    HookError::new(format!("no worker serves hook {:?}", self.name))
                }
                _ => HookError::new(format!("remote hook {:?}: {e}", self.name)),
            })?;
        match serde_json::from_slice::<CallAnswer>(&answer.payload) {
            Ok(CallAnswer::Reply(reply)) => Ok(reply.unwrap_or_default()),
            Ok(CallAnswer::Error(message)) => Err(HookError::new(format!(
                "remote hook {:?}: {message}",
                self.name
            ))),
            Err(e) => Err(HookError::new(format!(
                "remote hook {:?}: unreadable answer: {e}",
                self.name
            ))),
        }
    }
}

/// Tells the workers a call ended on this side unless it completed: dropped by the runtime's
/// timeout, or cancelled.
struct CancelOnDrop<'a> {
    hook: &'a RemoteHook,
    call: &'a str,
    done: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.hook.client.clone();
        let subject = self.hook.cancels.clone();
        let call = self.call.to_owned();
        runtime.spawn(async move {
            let mut headers = HeaderMap::new();
            headers.insert(CALL_HEADER, call.as_str());
            if let Err(e) = client
                .publish_with_headers(subject, headers, call.into_bytes().into())
                .await
            {
                tracing::debug!(error = %e, "cannot send a remote hook's cancellation");
            }
        });
    }
}

#[async_trait]
impl Hook for RemoteHook {
    fn name(&self) -> &str {
        &self.name
    }

    fn options(&self) -> HookOptions {
        self.options.clone()
    }

    /// Every event goes over the wire the same way; the worker calls the typed method.
    fn untyped(&self) -> bool {
        true
    }

    async fn handle(&self, cx: &HookCx) -> Result<Reply, HookError> {
        // Unique across the fleet (a NUID).
        let call = self.client.new_inbox();
        let mut guard = CancelOnDrop {
            hook: self,
            call: &call,
            done: false,
        };
        let result = tokio::select! {
            result = self.call(&call, cx) => result,
            () = cx.cancellation().cancelled() => {
                return Err(HookError::new(format!("remote hook {:?}: cancelled", self.name)));
            }
        };
        guard.done = true;
        result
    }
}

/// A remote hook as the `hookbus serve` command line gives it:
/// `NAME[,events=E1|E2][,tools=PATTERN][,matcher=PATTERN][,timeout=DUR][,failure=open|closed]`:
/// `tools` picks tool calls by the tool's name, `matcher` the other events by their query
/// field (a pattern lists names with `|`, as a comma ends it).
#[derive(Debug, Clone)]
pub struct RemoteHookSpec {
    /// The hook's name (its subject).
    pub name: String,
    /// Its options.
    pub options: HookOptions,
}

impl std::str::FromStr for RemoteHookSpec {
    type Err = NatsError;

    fn from_str(text: &str) -> Result<Self, NatsError> {
        let bad = |why: String| NatsError::Spec {
            spec: text.to_owned(),
            why,
        };
        let mut parts = text.split(',');
        let name = parts.next().unwrap_or_default().trim();
        if name.is_empty() || name.contains('=') {
            return Err(bad("it starts with the hook's name".into()));
        }
        let mut options = HookOptions::new();
        for part in parts {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            options = match key.trim() {
                "events" => options.events(parse_events(value).map_err(bad)?),
                "tools" => {
                    options.filter(ToolFilter::names(value.trim()).map_err(|e| bad(e.to_string()))?)
                }
                "matcher" => options
                    .matcher(NamePattern::parse(value.trim()).map_err(|e| bad(e.to_string()))?),
                "timeout" => options.timeout(parse_timeout(value).map_err(bad)?),
                "failure" => match value.trim() {
                    "open" => options.failure(FailurePolicy::Open),
                    "closed" => options.fail_closed(),
                    other => return Err(bad(format!("failure={other:?}: use open or closed"))),
                },
                other => {
                    return Err(bad(format!(
                        "unknown key {other:?} (events, tools, matcher, timeout, failure)"
                    )))
                }
            };
        }
        Ok(Self {
            name: name.to_owned(),
            options,
        })
    }
}

fn parse_events(value: &str) -> Result<Vec<EventKind>, String> {
    value
        .split('|')
        .map(|e| e.trim().parse::<EventKind>().map_err(|e| e.to_string()))
        .collect()
}

fn parse_timeout(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let (digits, unit) = value
        .find(|c: char| !c.is_ascii_digit())
        .map_or((value, "s"), |i| value.split_at(i));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("timeout={value:?}: use e.g. 500ms, 5s, 1m"))?;
    let secs = |factor: u64| n.checked_mul(factor).map(Duration::from_secs);
    let duration = match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        _ => return Err(format!("timeout={value:?}: use e.g. 500ms, 5s, 1m")),
    }
    .ok_or_else(|| format!("timeout={value:?} is too long"))?;
    if duration.is_zero() {
        return Err("timeout must be above zero".into());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_every_option_and_refuse_what_is_wrong_by_name() {
        let spec: RemoteHookSpec =
            "policy,events=PreToolUse|PostToolUse,tools=bash|Bash,timeout=1500ms,failure=closed"
                .parse()
                .unwrap();
        assert_eq!(spec.name, "policy");
        assert_eq!(
            spec.options.events,
            [EventKind::PreToolUse, EventKind::PostToolUse]
        );
        assert_eq!(spec.options.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(spec.options.failure, FailurePolicy::Closed);
        let plain: RemoteHookSpec = "p".parse().unwrap();
        assert!(plain.options.events.is_empty() && plain.options.timeout.is_none());
        for (bad, says) in [
            ("", "name"),
            ("events=PreToolUse", "name"),
            ("p,colour=blue", "unknown key"),
            ("p,events", "key=value"),
            ("p,events=Nope", "Nope"),
            ("p,timeout=0s", "above zero"),
            ("p,timeout=5d", "use e.g."),
            ("p,timeout=x", "use e.g."),
            ("p,timeout=99999999999999999999h", "use e.g."),
            ("p,timeout=999999999999999999h", "too long"),
            ("p,failure=maybe", "open or closed"),
            ("p,matcher=(", "p,matcher=("),
        ] {
            let err = bad.parse::<RemoteHookSpec>().unwrap_err().to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }
}
