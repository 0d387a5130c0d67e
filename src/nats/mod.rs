//! Running across machines on NATS (feature `nats`): remote hooks served by worker processes,
//! every event on a JetStream stream read by durable remote observers, and approvals seen and
//! answered on any instance of a fleet.
//!
//! * **Remote hooks.** A [`RemoteHook`] registered on a bus is called by request/reply on
//!   `<prefix>.hooks.<name>`; any number of worker processes serve it in a queue group
//!   ([`serve_hook`] turns any [`Hook`](crate::Hook) into one), and each call reaches one of
//!   them. The runtime's rules apply unchanged: the timeout and failure policy are the
//!   [`HookOptions`](crate::HookOptions) given to the remote hook, replies fold in
//!   registration order, and a call the runtime gives up on is cancelled on the worker by a
//!   message on `<prefix>.hooks.<name>.cancel`.
//! * **Events.** [`EventPublisher`] is an observer publishing every envelope to
//!   `<prefix>.events.<instance>.<session>.<Event>` on a JetStream stream
//!   ([`EventStreamConfig`]: retention by age, bytes, count). Like any observer it never blocks
//!   a dispatch (bounded mailbox, counted drops). [`follow_events`] reads the stream as a
//!   durable consumer: a remote observer that restarts resumes where it left off, in order.
//! * **Approvals.** [`FleetApprovals`] announces an instance's pending approvals, keeps the
//!   others', and forwards an answer to the instance that owns the approval (its fleet id is
//!   `<instance>:<number>`).
//!
//! Ids become subject tokens through [`subject::token`], which escapes every byte that could
//! reach another subject (`.`, `*`, `>`, white space).
//!
//! **Trust.** Everything on the fleet's subjects is trusted: a client of the NATS account can
//! call and answer hooks, read events and answer approvals. Give the fleet an account of its
//! own with credentials (`nats://user:password@host:4222`, or TLS), as for any NATS service.
//!
//! ```no_run
//! use hookbus::nats::{serve_hook, RemoteHook};
//! use hookbus::{Bus, EventKind, HookOptions};
//!
//! # struct Policy;
//! # #[async_trait::async_trait] impl hookbus::Hook for Policy { fn name(&self) -> &str { "policy" } }
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // A worker process:
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let worker = serve_hook(client, Policy).await?;
//!
//! // A service process:
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let bus = Bus::builder().build();
//! let options = HookOptions::new()
//!     .events([EventKind::PreToolUse])
//!     .timeout(std::time::Duration::from_secs(2))
//!     .fail_closed();
//! bus.register(RemoteHook::new(client, "policy", options)).await?;
//! # worker.stop().await;
//! # Ok(()) }
//! ```

mod approvals;
mod events;
mod follow;
mod remote_hook;
pub mod subject;
mod wire;
mod worker;

pub use approvals::{AnswerError, ApprovalOwners, FleetApproval, FleetApprovals, ANSWER_TIMEOUT};
pub use async_nats::Client;
pub use events::{EventPublisher, EventStreamConfig, PublishCounters, DEFAULT_STREAM};
pub use follow::{follow_events, follow_into, FollowOptions, Followed, HandlerError};
pub use remote_hook::{RemoteHook, RemoteHookSpec};
pub use subject::DEFAULT_PREFIX;
pub use wire::{CallAnswer, CallRequest, CALL_HEADER};
pub use worker::{
    serve_hook, serve_hook_arc, serve_hook_with_prefix, HookWorker, DEFAULT_WORKER_CONCURRENCY,
    WORKER_CALL_LIMIT,
};

/// What went wrong talking to NATS, or with what was asked of it.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// A NATS operation failed.
    #[error("NATS: cannot {what}: {source}")]
    Nats {
        /// What was being done.
        what: String,
        /// The client's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An instance name that cannot be one subject token.
    #[error("instance name {0:?}: use 1 to 64 letters, digits, `_` or `-`")]
    InstanceName(String),
    /// A handler of [`follow_events`] failed; its envelope was not acknowledged.
    #[error("the event handler failed: {0}")]
    Handler(Box<dyn std::error::Error + Send + Sync>),
    /// Another live instance of the fleet has this name.
    #[error("instance name {0:?} is in use by a live instance of the fleet")]
    InstanceInUse(String),
    /// A remote hook given on the command line that cannot be read.
    #[error("remote hook {spec:?}: {why}")]
    Spec {
        /// The text given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
}

impl NatsError {
    pub(crate) fn nats(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Nats {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// The same for a client error that comes boxed.
    pub(crate) fn boxed(
        what: impl Into<String>,
        source: Box<dyn std::error::Error + Send + Sync>,
    ) -> Self {
        Self::Nats {
            what: what.into(),
            source,
        }
    }
}

/// Connects to NATS at `url` (`nats://[user:password@]host:port`, several separated by
/// commas), naming the connection `name` in the server's monitoring.
pub async fn connect(url: &str, name: &str) -> Result<Client, NatsError> {
    async_nats::ConnectOptions::new()
        .name(name)
        .connect(url)
        .await
        .map_err(|e| NatsError::nats(format!("connect to {url}"), e))
}
