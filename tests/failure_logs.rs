//! FL-6: every dropped observer event, skipped hook and failed hook is logged with `tracing`,
//! naming the hook or observer, the event and the session. In a test binary of its own: a scoped
//! subscriber sees callsites reliably only when no other test thread touches them meanwhile.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hookbus::*;
use parking_lot::Mutex;

/// Records the fields of every WARN event.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<HashMap<String, String>>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut fields = HashMap::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().push(fields);
        }
    }
}

impl Warnings {
    fn find(&self, message: &str) -> Vec<HashMap<String, String>> {
        self.0
            .lock()
            .iter()
            .filter(|f| f.get("message").is_some_and(|m| m.contains(message)))
            .cloned()
            .collect()
    }
}

/// An observer slower than the events it gets.
struct Slow;

#[async_trait]
impl Observer for Slow {
    fn name(&self) -> &str {
        "slow-observer"
    }
    fn options(&self) -> ObserverOptions {
        ObserverOptions {
            mailbox: 1,
            enqueue_wait: Duration::from_millis(10),
            ..ObserverOptions::default()
        }
    }
    async fn on_event(&self, _: &Arc<Envelope>) {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// A SessionEnd hook that takes its time.
struct Lingering(&'static str);

#[async_trait]
impl Hook for Lingering {
    fn name(&self) -> &str {
        self.0
    }
    fn options(&self) -> HookOptions {
        HookOptions::new()
            .events([EventKind::SessionEnd])
            .timeout(Duration::from_secs(5))
    }
    async fn session_end(&self, _: &HookCx, _: &SessionEnd) -> HookResult<()> {
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok(().into())
    }
}

/// A hook that panics.
struct Panics;

#[async_trait]
impl Hook for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    fn options(&self) -> HookOptions {
        HookOptions::new().events([EventKind::Notification])
    }
    async fn notification(&self, _: &HookCx, _: &Notification) -> HookResult<()> {
        panic!("hook bug")
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn drops_skips_and_failures_are_logged_with_who_what_and_where() {
    use tracing_subscriber::layer::SubscriberExt;
    let warnings = Warnings::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let bus = Bus::builder()
        .session_end_grace(Duration::from_secs(1))
        .build();
    bus.observe(Slow).await.unwrap();
    bus.register(Lingering("first-end")).await.unwrap();
    bus.register(Lingering("second-end")).await.unwrap();
    bus.register(Panics).await.unwrap();
    let session = bus
        .open_session(BusSessionConfig::new().id("logged"))
        .await
        .unwrap();
    for _ in 0..5 {
        session
            .dispatch(Event::Notification(Notification {
                message: "n".into(),
                title: None,
                notification_type: "idle_prompt".into(),
            }))
            .await
            .unwrap();
    }
    session.close("done").await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await;

    let dropped = warnings.find("observer event dropped");
    assert!(!dropped.is_empty(), "no drop logged");
    for d in &dropped {
        assert_eq!(d["observer"], "slow-observer");
        assert_eq!(d["session"], "logged");
        assert!(d.contains_key("event"), "{d:?}");
    }
    let skipped = warnings.find("grace period is over");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0]["hook"], "second-end");
    assert_eq!(skipped[0]["event"], "SessionEnd");
    assert_eq!(skipped[0]["session"], "logged");
    let failed = warnings.find("hook failed");
    assert!(failed.iter().any(|f| f["hook"] == "panics"
        && f["event"] == "Notification"
        && f["session"] == "logged"));
}
