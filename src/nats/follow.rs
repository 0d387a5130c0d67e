//! [`follow_events`]: a durable remote observer of the fleet's event stream.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer;
use async_nats::Client;
use futures_util::StreamExt;

use super::events::EventStreamConfig;
use super::NatsError;
use crate::model::event::Envelope;
use crate::runtime::observer::Observer;

/// How a durable remote observer reads the stream.
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// The consumer's durable name: the observer's identity in the stream. One process per
    /// name at a time.
    pub durable: String,
    /// Only subjects matching this (default: every event of the stream, `<prefix>.events.>`).
    pub filter: Option<String>,
    /// Envelopes pulled at once (default 256).
    pub batch: usize,
}

impl FollowOptions {
    /// Options for the durable consumer `durable`.
    pub fn new(durable: impl Into<String>) -> Self {
        Self {
            durable: durable.into(),
            filter: None,
            batch: 256,
        }
    }
}

/// One envelope as a remote observer gets it, with its place in the stream.
#[derive(Debug, Clone)]
pub struct Followed {
    /// The stream's sequence number of this envelope.
    pub stream_seq: u64,
    /// The envelope.
    pub envelope: Arc<Envelope>,
}

/// What stops a handler of [`follow_events`]: the envelope it was given is not acknowledged,
/// so the durable observer gets it again when it resumes.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// Reads the event stream as the durable consumer `options.durable`, handing each envelope to
/// `handle` in stream order (so each session's envelopes arrive in their order), and
/// acknowledging each after `handle` returned `Ok`. It runs until the connection ends, an
/// error stops it, or `handle` fails (then that envelope is not acknowledged, and
/// [`NatsError::Handler`] is returned).
///
/// A restarted observer resumes where it left off, with no gap and in order: it reopens its
/// consumer at the first envelope it had not acknowledged. Delivery is at least once: the
/// envelope being handled when the process died is handed over again.
pub async fn follow_events<F>(
    client: &Client,
    stream: &EventStreamConfig,
    options: &FollowOptions,
    mut handle: impl FnMut(Followed) -> F,
) -> Result<(), NatsError>
where
    F: Future<Output = Result<(), HandlerError>>,
{
    let mut messages = open(client, stream, options).await?;
    // A redelivery after an acknowledgement timed out comes after newer envelopes: it was
    // handed over already.
    let mut last = 0;
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| NatsError::nats("read the event stream", e))?;
        let stream_seq = message
            .info()
            .map_err(|e| NatsError::boxed("read an event's stream position", e))?
            .stream_sequence;
        if stream_seq > last {
            match serde_json::from_slice::<Envelope>(&message.payload) {
                Ok(envelope) => {
                    let envelope = Arc::new(envelope);
                    let handled = handle(Followed {
                        stream_seq,
                        envelope,
                    })
                    .await
                    .map_err(NatsError::Handler);
                    if let Err(e) = handled {
                        // What was acknowledged before reaches the server before this returns.
                        let _ = client.flush().await;
                        return Err(e);
                    }
                }
                Err(e) => tracing::warn!(stream_seq, error = %e, "skipping an unreadable event"),
            }
            last = stream_seq;
        }
        message
            .ack()
            .await
            .map_err(|e| NatsError::boxed("acknowledge an event", e))?;
    }
    Ok(())
}

/// [`follow_events`] into an [`Observer`]: its `on_event` gets each envelope.
pub async fn follow_into(
    client: &Client,
    stream: &EventStreamConfig,
    options: &FollowOptions,
    observer: Arc<dyn Observer>,
) -> Result<(), NatsError> {
    follow_events(client, stream, options, |followed| {
        let observer = observer.clone();
        async move {
            observer.on_event(&followed.envelope).await;
            Ok(())
        }
    })
    .await
}

/// Opens the durable consumer at the first envelope not yet acknowledged: an existing
/// consumer is read for its acknowledgement floor and made again from just after it, so that
/// what was delivered but not acknowledged comes again first, in order (a consumer's own
/// redelivery would bring it after newer envelopes).
async fn open(
    client: &Client,
    stream: &EventStreamConfig,
    options: &FollowOptions,
) -> Result<consumer::pull::Stream, NatsError> {
    let js_stream = stream.ensure(client).await?;
    let durable = options.durable.as_str();
    let start = match js_stream.consumer_info(durable).await {
        Ok(info) => Some(info.ack_floor.stream_sequence + 1),
        Err(e) if e.kind() == async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound => {
            None
        }
        Err(e) => return Err(NatsError::nats(format!("read the consumer {durable}"), e)),
    };
    if start.is_some() {
        js_stream
            .delete_consumer(durable)
            .await
            .map_err(|e| NatsError::nats(format!("reopen the consumer {durable}"), e))?;
    }
    let deliver_policy = match start {
        Some(seq) => consumer::DeliverPolicy::ByStartSequence {
            start_sequence: seq,
        },
        None => consumer::DeliverPolicy::All,
    };
    let consumer: consumer::PullConsumer = js_stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(durable.to_owned()),
            filter_subject: options.filter.clone().unwrap_or_default(),
            deliver_policy,
            ack_policy: consumer::AckPolicy::All,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: options.batch.max(1) as i64 * 4,
            ..Default::default()
        })
        .await
        .map_err(|e| NatsError::nats(format!("create the consumer {durable}"), e))?;
    consumer
        .stream()
        .max_messages_per_batch(options.batch.max(1))
        .messages()
        .await
        .map_err(|e| NatsError::nats(format!("read the consumer {durable}"), e))
}
