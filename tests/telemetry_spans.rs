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
        .open_session(SessionConfig::new().id("tel"))
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
