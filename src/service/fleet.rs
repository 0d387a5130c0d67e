//! The service in a fleet: approvals seen and answered on any instance (feature `nats`).

use std::sync::{Arc, Weak};

use crate::nats::{ApprovalOwners, Client, FleetApprovals, NatsError};

use super::Inner;

/// An instance's place in a fleet of services sharing one NATS.
#[derive(Debug, Clone)]
pub struct Fleet {
    /// The fleet's NATS connection.
    pub client: Client,
    /// This instance's name, unique in the fleet (letters, digits, `_`, `-`).
    pub instance: String,
    /// The fleet's subject prefix ([`DEFAULT_PREFIX`](crate::nats::DEFAULT_PREFIX) unless
    /// several fleets share a NATS account).
    pub prefix: String,
}

impl Fleet {
    /// Instance `instance` of the fleet on `client`, on the default prefix.
    pub fn new(client: Client, instance: impl Into<String>) -> Self {
        Self {
            client,
            instance: instance.into(),
            prefix: crate::nats::DEFAULT_PREFIX.into(),
        }
    }
}

/// The service's sessions as the fleet asks about them: who owns one.
struct Owners(Weak<Inner>);

impl ApprovalOwners for Owners {
    fn owner(&self, session_id: &str) -> Option<String> {
        let inner = self.0.upgrade()?;
        let root = session_id.split('/').next().unwrap_or(session_id);
        inner
            .sessions
            .owner(root)
            .map(|who| inner.tokens.fleet_key(&who))
    }
}

/// Joins the fleet's approvals for the service `inner`.
pub(super) async fn join(fleet: &Fleet, inner: &Arc<Inner>) -> Result<FleetApprovals, NatsError> {
    FleetApprovals::start(
        fleet.client.clone(),
        &fleet.prefix,
        &fleet.instance,
        inner.desk.clone(),
        Arc::new(Owners(Arc::downgrade(inner))),
    )
    .await
}
