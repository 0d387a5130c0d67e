//! What a user's own task subscribes as ([`Subscription`]): a gate, answered like a hook, or an
//! observer.

use crate::model::hook::HookOptions;
use crate::runtime::observer::ObserverOptions;

/// What to subscribe a user task as: a gate (it answers through reply slots, like a [`Hook`](crate::Hook)) or
/// an observer (fire-and-forget).
#[derive(Debug, Clone)]
pub enum Subscription {
    /// A hook answered by the user's task.
    Gate {
        /// Unique name in its scope.
        name: String,
        /// Events, filter, timeout, failure policy, `after`.
        options: HookOptions,
    },
    /// An observer fed by the runtime.
    Observer {
        /// Unique name among observers.
        name: String,
        /// Events, filter, mailbox size, enqueue limit.
        options: ObserverOptions,
    },
}

impl Subscription {
    /// A gate subscription.
    pub fn gate(name: impl Into<String>, options: HookOptions) -> Self {
        Subscription::Gate {
            name: name.into(),
            options,
        }
    }
    /// An observer subscription.
    pub fn observer(name: impl Into<String>, options: ObserverOptions) -> Self {
        Subscription::Observer {
            name: name.into(),
            options,
        }
    }
}
