//! One session's Server-Sent Events: its envelopes, what the hooks did with each, how much
//! this subscriber skipped, and why the stream closed.
//!
//! | `event:` | `data:` |
//! |---|---|
//! | the event's name (`PreToolUse`, …) | the envelope's JSON |
//! | `hooks` | `{"seq", "event", "decision", "runs": [{"hook", "decision", "status", "detail"?, "latency_us"}]}` once that event's dispatch finished |
//! | `lagged` | `{"skipped": n, "total": t}`: this subscriber fell behind and skipped `n` records (`t` so far) |
//! | `closed` | `{"reason": "ended" \| "shutdown"}`: the last frame |
//!
//! Memory per subscriber is bounded: the session's records sit in one shared ring
//! ([`ServiceLimits::event_stream_buffer`](super::ServiceLimits)); a subscriber whose
//! connection does not drain falls behind and skips, it never queues.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::sse::Event as SseEvent;
use futures_util::{FutureExt, Stream};
use serde_json::{json, Value};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::model::outcome::RunStatus;
use crate::runtime::event_log::{EventStream, HookRunStream, HookRuns};

/// The longest `detail` of a hook run sent (a failing hook's error text).
const DETAIL_CAP: usize = 500;

/// The frames of one subscription.
pub(crate) struct Feed {
    events: Option<EventStream>,
    runs: Option<HookRunStream>,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    reported_lag: u64,
    /// A frame that waits behind a `lagged` frame.
    pending: Option<SseEvent>,
    /// The `closed` frame was sent: the stream is over.
    finished: bool,
}

impl Feed {
    pub fn new(events: EventStream, runs: HookRunStream, shutdown: CancellationToken) -> Self {
        Self {
            events: Some(events),
            runs: Some(runs),
            shutdown: Box::pin(shutdown.cancelled_owned()),
            reported_lag: 0,
            pending: None,
            finished: false,
        }
    }

    fn lag(&self) -> u64 {
        self.events.as_ref().map_or(0, EventStream::lagged)
            + self.runs.as_ref().map_or(0, HookRunStream::lagged)
    }

    /// A `lagged` frame when this subscriber skipped more since the last one.
    fn lag_frame(&mut self) -> Option<SseEvent> {
        let total = self.lag();
        (total > self.reported_lag).then(|| {
            let skipped = total - self.reported_lag;
            self.reported_lag = total;
            frame("lagged", &json!({ "skipped": skipped, "total": total }))
        })
    }

    fn close(&mut self, reason: &str) -> Poll<Option<Result<SseEvent, Infallible>>> {
        self.finished = true;
        self.events = None;
        self.runs = None;
        Poll::Ready(Some(Ok(frame("closed", &json!({ "reason": reason })))))
    }
}

impl Stream for Feed {
    type Item = Result<SseEvent, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.finished {
            return Poll::Ready(None);
        }
        if let Some(pending) = self.pending.take() {
            return Poll::Ready(Some(Ok(pending)));
        }
        if self.shutdown.poll_unpin(cx).is_ready() {
            return self.close("shutdown");
        }
        if let Some(events) = self.events.as_mut() {
            match Pin::new(events).poll_next(cx) {
                Poll::Ready(Some(env)) => {
                    // A lag noticed while getting this envelope is reported before it.
                    if let Some(lagged) = self.lag_frame() {
                        self.pending = Some(envelope_frame(&env));
                        return Poll::Ready(Some(Ok(lagged)));
                    }
                    return Poll::Ready(Some(Ok(envelope_frame(&env))));
                }
                Poll::Ready(None) => {
                    if let Some(lagged) = self.lag_frame() {
                        return Poll::Ready(Some(Ok(lagged)));
                    }
                    self.events = None;
                }
                Poll::Pending => {}
            }
        }
        if let Some(runs) = self.runs.as_mut() {
            match Pin::new(runs).poll_next(cx) {
                Poll::Ready(Some(r)) => {
                    if let Some(lagged) = self.lag_frame() {
                        self.pending = Some(runs_frame(&r));
                        return Poll::Ready(Some(Ok(lagged)));
                    }
                    return Poll::Ready(Some(Ok(runs_frame(&r))));
                }
                Poll::Ready(None) => self.runs = None,
                Poll::Pending => {}
            }
        }
        if self.events.is_none() && self.runs.is_none() {
            return self.close("ended");
        }
        Poll::Pending
    }
}

fn frame(name: &str, data: &Value) -> SseEvent {
    SseEvent::default().event(name).data(data.to_string())
}

fn envelope_frame(env: &crate::model::event::Envelope) -> SseEvent {
    let data = serde_json::to_string(env)
        .unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string());
    SseEvent::default().event(env.kind().as_str()).data(data)
}

/// A `hooks` frame: each matched hook's name, decision, status and latency.
fn runs_frame(r: &Arc<HookRuns>) -> SseEvent {
    let runs: Vec<Value> = r
        .runs
        .iter()
        .map(|run| {
            let (status, detail) = status_of(&run.status);
            let mut v = json!({
                "hook": &*run.hook,
                "decision": run.decision,
                "status": status,
                "latency_us": run.elapsed.as_micros() as u64,
            });
            if let Some(mut d) = detail {
                crate::agent::cut_text(&mut d, DETAIL_CAP);
                v["detail"] = Value::String(d);
            }
            v
        })
        .collect();
    frame(
        "hooks",
        &json!({
            "seq": r.seq,
            "event": r.kind.as_str(),
            "decision": r.decision,
            "runs": runs,
        }),
    )
}

fn status_of(status: &RunStatus) -> (&'static str, Option<String>) {
    match status {
        RunStatus::Answered => ("answered", None),
        RunStatus::Failed(e) => ("failed", Some(e.clone())),
        RunStatus::Panicked(p) => ("panicked", Some(p.clone())),
        RunStatus::TimedOut => ("timed_out", None),
        RunStatus::ReplyDropped => ("reply_dropped", None),
        RunStatus::SkippedDependencyBlocked => ("skipped_dependency_blocked", None),
        RunStatus::SkippedCircuitOpen => ("skipped_circuit_open", None),
        RunStatus::SkippedGraceExpired => ("skipped_grace_expired", None),
        RunStatus::Cancelled => ("cancelled", None),
    }
}
