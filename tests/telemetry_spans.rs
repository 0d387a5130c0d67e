//! Telemetry: every hook run is a `tracing` span with its hook, event, session, decision and
//! latency. In a test binary of its own: a scoped subscriber (`set_default`) sees a callsite
//! reliably only when no other test thread touches the same callsites at the same time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hookbus::*;
use parking_lot::Mutex;
use serde_json::json;

/// Records the fields of every `hook_run` span.
#[derive(Clone, Default)]
struct SpanTape(Arc<Mutex<Vec<HashMap<String, String>>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanTape {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() == "hook_run" {
            let mut fields = HashMap::new();
            attrs.record(&mut Fields(&mut fields));
            self.0.lock().push(fields);
        }
    }
}

/// Blocks `rm`.
struct Blocker;

#[async_trait]
impl Hook for Blocker {
    fn name(&self) -> &str {
        "blocker"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::PreToolUse])
    }
    async fn pre_tool_use(&self, _: &HookCx, _: &PreToolUse) -> HookResult<PreToolUseAction> {
        Ok(PreToolUseAction::block("no rm here").into())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_hook_run_is_a_span_with_its_decision_reason_and_latency() {
    use tracing_subscriber::layer::SubscriberExt;
    let tape = SpanTape::default();
    let subscriber = tracing_subscriber::registry().with(tape.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let bus = Bus::new();
    bus.register(Blocker).await.unwrap();
    let session = bus
        .open_session(BusSessionConfig::new().id("tel"))
        .await
        .unwrap();
    let out = session
        .dispatch(Event::PreToolUse(PreToolUse {
            tool_name: "Bash".into(),
            tool_input: json!({ "command": "rm -rf /" }),
            tool_use_id: "t1".into(),
        }))
        .await
        .unwrap();
    assert!(out.is_blocked());
    session.close("other").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
    let spans = tape.0.lock().clone();
    let span = spans
        .iter()
        .find(|s| s.get("hook").map(String::as_str) == Some("blocker"))
        .unwrap_or_else(|| panic!("no hook_run span for blocker in {spans:?}"));
    assert_eq!(span["event"], "PreToolUse");
    assert_eq!(span["session"], "tel");
    assert_eq!(span["tool"], "Bash");
    assert_eq!(span["decision"], "Block");
    assert_eq!(span["reason"], "no rm here");
    assert!(span.contains_key("latency_us"));
}

/// A log's marker and the names of the spans it was recorded in.
type Scoped = (String, Vec<String>);

/// Records, for each `tracing` event with a `marker` field, the names of the spans it is in.
#[derive(Clone, Default)]
struct Scopes(Arc<Mutex<Vec<Scoped>>>);

impl<S> tracing_subscriber::Layer<S> for Scopes
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        let Some(marker) = fields.get("marker") else {
            return;
        };
        let spans = ctx
            .event_scope(event)
            .map(|scope| scope.map(|s| s.name().to_owned()).collect())
            .unwrap_or_default();
        self.0.lock().push((marker.clone(), spans));
    }
}

/// Logs from inside its call.
struct Chatty {
    name: &'static str,
    inline: bool,
}

#[async_trait]
impl Hook for Chatty {
    fn name(&self) -> &str {
        self.name
    }
    fn options(&self) -> HookOptions {
        let o = HookOptions::new().events([EventKind::Notification]);
        if self.inline {
            o.inline()
        } else {
            o
        }
    }
    async fn notification(&self, _: &HookCx, _: &Notification) -> HookResult<()> {
        tracing::info!(marker = self.name, "inside the hook");
        Ok(().into())
    }
}

/// Logs from inside `on_event`.
struct ChattyObserver;

#[async_trait]
impl Observer for ChattyObserver {
    fn name(&self) -> &str {
        "chatty-observer"
    }
    async fn on_event(&self, _: &Arc<Envelope>) {
        tracing::info!(marker = "observer", "inside the observer");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_hooks_own_logs_nest_under_its_dispatch_span() {
    use tracing_subscriber::layer::SubscriberExt;
    let scopes = Scopes::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(scopes.clone()));
    let bus = Bus::new();
    bus.register(Chatty {
        name: "actor-hook",
        inline: false,
    })
    .await
    .unwrap();
    bus.register(Chatty {
        name: "inline-hook",
        inline: true,
    })
    .await
    .unwrap();
    bus.observe(ChattyObserver).await.unwrap();
    let session = bus
        .open_session(BusSessionConfig::new().id("nest"))
        .await
        .unwrap();
    session
        .dispatch(Event::Notification(Notification {
            message: "hi".into(),
            title: None,
            notification_type: "idle_prompt".into(),
        }))
        .await
        .unwrap();
    session.close("done").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;
    let seen = scopes.0.lock().clone();
    for marker in ["actor-hook", "inline-hook", "observer"] {
        let (_, spans) = seen
            .iter()
            .find(|(m, _)| m == marker)
            .unwrap_or_else(|| panic!("no log from {marker} in {seen:?}"));
        assert!(
            spans.iter().any(|s| s == "dispatch"),
            "{marker} logged outside its dispatch span: {spans:?}"
        );
    }
}
