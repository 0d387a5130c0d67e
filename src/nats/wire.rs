//! What a remote hook call and its answer look like on the wire (JSON).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::action::Reply;
use crate::model::event::Envelope;

/// The header naming a call, on requests and on cancellations.
pub const CALL_HEADER: &str = "Hookbus-Call";

/// A call of a remote hook: the envelope, as the runtime dispatched it.
#[derive(Debug, Serialize, Deserialize)]
pub struct CallRequest {
    /// The call's id, unique in the fleet (also in [`CALL_HEADER`]).
    pub call: String,
    /// The event with its place in the session.
    pub envelope: Arc<Envelope>,
}

/// A worker's answer: the hook's reply (`null` when it changes nothing), or its error.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallAnswer {
    /// The hook answered.
    Reply(Option<Reply>),
    /// The hook failed, panicked, timed out or was cancelled on the worker; or the request
    /// could not be read.
    Error(String),
}
