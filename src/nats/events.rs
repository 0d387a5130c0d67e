//! Events on JetStream: [`EventPublisher`], the observer that publishes every envelope of an
//! instance, and the stream it publishes to.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishAckFuture, stream};
use async_nats::{Client, HeaderMap};
use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::subject::{self, DEFAULT_PREFIX};
use super::NatsError;
use crate::model::event::Envelope;
use crate::runtime::observer::{Observer, ObserverOptions};

/// The stream's name unless configured otherwise.
pub const DEFAULT_STREAM: &str = "HOOKBUS_EVENTS";

/// Publish acknowledgements one publisher awaits at once; the next publish waits for room.
const ACKS_IN_FLIGHT: usize = 1024;

/// The JetStream stream of a fleet's events and how long it keeps them.
#[derive(Debug, Clone)]
pub struct EventStreamConfig {
    /// Stream name (default [`DEFAULT_STREAM`]).
    pub name: String,
    /// Subject prefix (default `hookbus`): events go to `<prefix>.events.<instance>.<session>.<Event>`.
    pub prefix: String,
    /// Oldest event kept (default 7 days; zero keeps them until a size limit).
    pub max_age: Duration,
    /// Most bytes kept, oldest dropped first (default 1 GiB; `-1` is no limit).
    pub max_bytes: i64,
    /// Most events kept (default no limit: `-1`).
    pub max_messages: i64,
    /// Replicas in a clustered JetStream (default 1).
    pub replicas: usize,
}

impl Default for EventStreamConfig {
    fn default() -> Self {
        Self {
            name: DEFAULT_STREAM.into(),
            prefix: DEFAULT_PREFIX.into(),
            max_age: Duration::from_secs(7 * 24 * 3600),
            max_bytes: 1 << 30,
            max_messages: -1,
            replicas: 1,
        }
    }
}

impl EventStreamConfig {
    /// Creates the stream, or checks that it exists (an existing stream's limits are left
    /// as they are).
    pub async fn ensure(&self, client: &Client) -> Result<stream::Stream, NatsError> {
        let js = jetstream::new(client.clone());
        js.get_or_create_stream(stream::Config {
            name: self.name.clone(),
            subjects: vec![subject::all_events(&self.prefix)],
            max_age: self.max_age,
            max_bytes: self.max_bytes,
            max_messages: self.max_messages,
            num_replicas: self.replicas,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| NatsError::nats(format!("create the stream {}", self.name), e))
    }
}

/// An observer that publishes every envelope of this instance to the event stream, on
/// `<prefix>.events.<instance>.<session>.<Event>`, with a `Nats-Msg-Id` of
/// `<instance>:<publisher>:<session>:<seq>` (the publisher's own NUID: an id never repeats, even
/// for a session id used again, or after a restart).
///
/// It never blocks a dispatch: its mailbox is bounded, and an event that does not fit is
/// dropped and counted ([`MetricsSnapshot::observer_dropped`](crate::MetricsSnapshot)), as for
/// any observer. Publishes are pipelined; a publish the server does not acknowledge is
/// counted in [`failed`](EventPublisher::failed) and logged.
pub struct EventPublisher {
    js: jetstream::Context,
    instance: String,
    /// Unique to this publisher (a NUID): message ids never repeat across restarts, or across
    /// sessions that reuse an id.
    boot: String,
    prefix: String,
    mailbox: usize,
    /// One permit per acknowledgement awaited.
    acks: Arc<Semaphore>,
    published: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl EventPublisher {
    /// A publisher for `instance` (an instance name: letters, digits, `_`, `-`) to `stream`,
    /// which it creates when missing.
    pub async fn new(
        client: &Client,
        instance: &str,
        stream: &EventStreamConfig,
    ) -> Result<Self, NatsError> {
        if !subject::is_plain_token(instance) {
            return Err(NatsError::InstanceName(instance.to_owned()));
        }
        stream.ensure(client).await?;
        let inbox = client.new_inbox();
        let boot = inbox.rsplit('.').next().unwrap_or(&inbox).to_owned();
        Ok(Self {
            js: jetstream::new(client.clone()),
            instance: instance.to_owned(),
            boot,
            prefix: stream.prefix.clone(),
            mailbox: 65_536,
            acks: Arc::new(Semaphore::new(ACKS_IN_FLIGHT)),
            published: Arc::new(AtomicU64::new(0)),
            failed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Its mailbox's capacity (default 65,536 envelopes).
    pub fn mailbox(mut self, capacity: usize) -> Self {
        self.mailbox = capacity.max(1);
        self
    }

    /// Envelopes the stream acknowledged.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Envelopes whose publish failed.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Counters that outlive the publisher once the bus owns it.
    pub fn counters(&self) -> PublishCounters {
        PublishCounters {
            published: self.published.clone(),
            failed: self.failed.clone(),
        }
    }

    /// Waits until every publish so far was acknowledged (or failed).
    pub async fn flush(&self) {
        let _ = self.acks.acquire_many(ACKS_IN_FLIGHT as u32).await;
    }

    /// Counts the publish's acknowledgement when it comes, in a task of its own (it outlives
    /// the publisher, so a publish made before shutdown is still counted).
    fn watch(&self, ack: PublishAckFuture, permit: OwnedSemaphorePermit) {
        let (published, failed) = (self.published.clone(), self.failed.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match ack.await {
                Ok(_) => published.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::warn!(error = %e, "the event stream did not take an event");
                    failed.fetch_add(1, Ordering::Relaxed)
                }
            };
        });
    }
}

/// The counts of an [`EventPublisher`], readable after it was handed to a bus.
#[derive(Debug, Clone)]
pub struct PublishCounters {
    published: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl PublishCounters {
    /// Envelopes the stream acknowledged.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }
    /// Envelopes whose publish failed.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Observer for EventPublisher {
    fn name(&self) -> &str {
        "nats-events"
    }

    fn options(&self) -> ObserverOptions {
        ObserverOptions::default()
            .mailbox(self.mailbox)
            .enqueue_wait(Duration::ZERO)
    }

    async fn on_event(&self, envelope: &Arc<Envelope>) {
        let subject = subject::event(
            &self.prefix,
            &self.instance,
            &envelope.session_id,
            envelope.kind().as_str(),
        );
        let body = match serde_json::to_vec(envelope.as_ref()) {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode an envelope");
                self.failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let mut headers = HeaderMap::new();
        let id = format!(
            "{}:{}:{}:{}",
            self.instance,
            self.boot,
            subject::token(&envelope.session_id),
            envelope.seq
        );
        headers.insert("Nats-Msg-Id", id.as_str());
        let Ok(permit) = self.acks.clone().acquire_owned().await else {
            return;
        };
        match self
            .js
            .publish_with_headers(subject, headers, body.into())
            .await
        {
            Ok(ack) => self.watch(ack, permit),
            Err(e) => {
                tracing::warn!(error = %e, "cannot publish an event");
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
