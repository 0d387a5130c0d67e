//! What dispatch reads: the registered hooks ([`HookEntry`]) and observers in fold order, indexed
//! per event and per tool, as one immutable [`Snapshot`] the registry publishes (HK-5).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::model::error::Error;
use crate::model::event::{Envelope, EventKind};
use crate::model::hook::{Hook, HookOptions};
use crate::runtime::channel;
use crate::runtime::mailbox::Delivery;
use crate::runtime::observer::ObserverEntry;
use crate::runtime::stripe::Striped;

/// How the dispatcher reaches a hook.
pub(crate) enum Target {
    /// A task of its own (a trait hook's actor, or a user's mailbox).
    Actor(channel::Sender<Delivery>),
    /// Several actors serving one hook object, each taking the sessions whose id hashes to it:
    /// sessions on different workers stop contending for one task, and each session's calls
    /// still reach one actor in order.
    Sharded(Box<[channel::Sender<Delivery>]>),
    /// Run on the dispatcher's task.
    Inline(Arc<dyn Hook>),
}

/// Circuit-breaker state of one hook (FL-4). Every session's calls of the hook read it, so a
/// call that finds it closed and leaves it so writes nothing: the cache line stays shared.
#[derive(Default)]
pub(crate) struct Breaker {
    consecutive: AtomicU32,
    /// Whether `open_until` is set: read before its lock is taken.
    open: AtomicBool,
    open_until: Mutex<Option<Instant>>,
    reported: AtomicBool,
}

/// A registered hook.
pub(crate) struct HookEntry {
    pub name: String,
    /// The name again, shared: every run of the hook reports it without a copy.
    pub label: Arc<str>,
    pub seq: u64,
    pub options: HookOptions,
    pub timeout: Duration,
    pub target: Target,
    pub session: Option<String>,
    pub breaker: Breaker,
    pub inline_limit: Option<Semaphore>,
}

impl HookEntry {
    pub fn new(
        name: String,
        seq: u64,
        options: HookOptions,
        timeout: Duration,
        target: Target,
        session: Option<String>,
    ) -> Self {
        let inline_limit = match (&target, options.max_concurrency) {
            (Target::Inline(_), Some(n)) => Some(Semaphore::new(n)),
            _ => None,
        };
        Self {
            label: Arc::from(name.as_str()),
            name,
            seq,
            options,
            timeout,
            target,
            session,
            breaker: Breaker::default(),
            inline_limit,
        }
    }

    /// Whether the hook wants this event (its filter or matcher), without messaging it.
    pub fn matches(&self, env: &Envelope) -> bool {
        let kind = env.kind();
        if kind.is_tool_event() {
            if self.options.filter.is_any() {
                return true;
            }
            let (name, input) = env.event.tool().unwrap_or(("", &serde_json::Value::Null));
            let cwd = (!env.fields.cwd.is_empty()).then(|| Path::new(&env.fields.cwd));
            self.options.filter.matches(name, input, cwd)
        } else {
            match env.event.query() {
                Some(q) => self.options.matcher.matches(q),
                None => true,
            }
        }
    }

    /// False while the circuit is open (FL-4).
    pub fn breaker_admits(&self) -> bool {
        if self.options.circuit_breaker.is_none() || !self.breaker.open.load(Ordering::Acquire) {
            return true;
        }
        let mut open = self.breaker.open_until.lock();
        match *open {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                *open = None;
                self.breaker.open.store(false, Ordering::Release);
                self.breaker.consecutive.store(0, Ordering::Relaxed);
                self.breaker.reported.store(false, Ordering::Relaxed);
                true
            }
            None => true,
        }
    }

    /// Records the outcome of a call for the circuit breaker.
    pub fn breaker_record(&self, failed: bool) {
        let Some(cb) = self.options.circuit_breaker else {
            return;
        };
        if !failed {
            if self.breaker.consecutive.load(Ordering::Relaxed) != 0 {
                self.breaker.consecutive.store(0, Ordering::Relaxed);
            }
            return;
        }
        let n = self.breaker.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= cb.failures {
            // Set under the lock, where `breaker_admits` clears it: the flag and the time
            // never disagree.
            let mut open_until = self.breaker.open_until.lock();
            *open_until = Some(crate::model::bounds::deadline_after(
                Instant::now(),
                cb.cool_down,
            ));
            self.breaker.open.store(true, Ordering::Release);
            drop(open_until);
            if !self.breaker.reported.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    hook = %self.name,
                    failures = n,
                    cool_down_ms = cb.cool_down.as_millis() as u64,
                    "circuit breaker opened: hook skipped for the cool-down"
                );
            }
        }
    }
}

/// The next built snapshot's [`Snapshot::generation`].
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// One handle on a published snapshot: what a dispatch holds while it runs. Aligned to its own
/// cache lines, so the reference counts of two stripes' handles (allocated one after another)
/// never share one.
#[repr(align(128))]
pub(crate) struct SnapshotRef(Arc<Snapshot>);

impl SnapshotRef {
    /// A handle of its own on a new snapshot.
    pub fn new(snapshot: Snapshot) -> Arc<SnapshotRef> {
        Arc::new(SnapshotRef(Arc::new(snapshot)))
    }
}

impl std::ops::Deref for SnapshotRef {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.0
    }
}

/// The bus's snapshot as every session reads it at every dispatch: one handle on it per
/// stripe ([`Striped`]), so a dispatch counts its hold on its own session's stripe rather than
/// on the one `Arc` every session would otherwise share.
pub(crate) struct Published {
    stripes: Striped<ArcSwap<SnapshotRef>>,
}

impl Published {
    /// Publishes `snapshot` first.
    pub fn new(snapshot: Snapshot) -> Self {
        let snapshot = Arc::new(snapshot);
        Self {
            stripes: Striped::new(|| ArcSwap::from_pointee(SnapshotRef(snapshot.clone()))),
        }
    }

    /// Replaces the snapshot in every stripe; a dispatch that began before keeps the one it
    /// holds.
    pub fn store(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        for stripe in self.stripes.iter() {
            stripe.store(Arc::new(SnapshotRef(snapshot.clone())));
        }
    }

    /// The snapshot, through the stripe of `key` (a session's hash).
    pub fn load(&self, key: u64) -> Arc<SnapshotRef> {
        self.stripes.get(key).load_full()
    }
}

#[cfg(test)]
mod published_tests {
    use super::*;

    #[test]
    fn every_stripe_counts_its_holds_on_lines_of_its_own() {
        assert!(std::mem::align_of::<SnapshotRef>() >= 128);
        let published = Published::new(Snapshot::default());
        published.store(Snapshot::default());
        let handles: Vec<Arc<SnapshotRef>> = (0..published.stripes.iter().count() as u64)
            .map(|k| published.load(k))
            .collect();
        let mut addresses: Vec<usize> = handles.iter().map(|h| Arc::as_ptr(h) as usize).collect();
        addresses.sort_unstable();
        assert!(
            addresses.windows(2).all(|w| w[1] - w[0] >= 128),
            "stripes' handles share cache lines: {addresses:x?}"
        );
        // Every stripe holds the one snapshot that was stored last.
        assert!(handles.iter().all(|h| Arc::ptr_eq(&h.0, &handles[0].0)));
    }
}

/// An immutable view of the registered hooks and observers, in fold order, with an index per
/// event.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// Which build this is: every built snapshot has its own (the empty default has 0), so a
    /// session can tell whether what it derived from an earlier one still holds.
    pub generation: u64,
    /// Hooks in fold order: a topological order of `after`, ties by (priority, registration).
    pub hooks: Vec<Arc<HookEntry>>,
    /// Indices into `hooks` per event kind, in fold order.
    pub by_event: [Vec<usize>; EventKind::COUNT],
    /// For each hook, the indices of the hooks it runs after.
    pub deps: Vec<Vec<usize>>,
    /// Whether any hook has dependencies.
    pub has_deps: bool,
    pub observers: Vec<Arc<ObserverEntry>>,
    pub obs_by_event: [Vec<usize>; EventKind::COUNT],
    /// Tool events only: hooks whose filter is a list of exact tool names, by tool name, in
    /// fold order (a non-matching hook is never even looked at).
    pub by_tool: [HashMap<String, Vec<usize>>; EventKind::COUNT],
    /// Tool events only: the other hooks of the event (checked one by one), in fold order.
    pub untargeted: [Vec<usize>; EventKind::COUNT],
}

impl Snapshot {
    /// Orders `hooks` (fold order) and indexes them; fails on unknown names or cycles.
    pub fn build(
        mut hooks: Vec<Arc<HookEntry>>,
        observers: Vec<Arc<ObserverEntry>>,
    ) -> Result<Snapshot, Error> {
        hooks.sort_by_key(|h| (h.options.priority, h.seq));
        // Later entries of the same name (session scope) shadow earlier ones (global scope).
        let by_name: HashMap<&str, usize> = hooks
            .iter()
            .enumerate()
            .map(|(i, h)| (h.name.as_str(), i))
            .collect();
        let mut deps = Vec::with_capacity(hooks.len());
        for h in &hooks {
            let mut d = Vec::new();
            for name in &h.options.after {
                match by_name.get(name.as_str()) {
                    Some(&j) => d.push(j),
                    None => {
                        return Err(Error::UnknownDependency {
                            hook: h.name.clone(),
                            missing: name.clone(),
                        })
                    }
                }
            }
            deps.push(d);
        }
        let order = topo_order(&hooks, &deps)?;
        let mut position = vec![0; hooks.len()];
        for (pos, &old) in order.iter().enumerate() {
            position[old] = pos;
        }
        let ordered: Vec<Arc<HookEntry>> = order.iter().map(|&i| hooks[i].clone()).collect();
        let deps: Vec<Vec<usize>> = order
            .iter()
            .map(|&i| deps[i].iter().map(|&j| position[j]).collect())
            .collect();
        let has_deps = deps.iter().any(|d| !d.is_empty());
        let mut by_event: [Vec<usize>; EventKind::COUNT] = Default::default();
        let mut obs_by_event: [Vec<usize>; EventKind::COUNT] = Default::default();
        for kind in EventKind::ALL {
            by_event[kind.index()] = (0..ordered.len())
                .filter(|&i| ordered[i].options.subscribes(kind))
                .collect();
            obs_by_event[kind.index()] = (0..observers.len())
                .filter(|&i| {
                    let e = &observers[i].options.events;
                    e.is_empty() || e.contains(&kind)
                })
                .collect();
        }
        let mut by_tool: [HashMap<String, Vec<usize>>; EventKind::COUNT] = Default::default();
        let mut untargeted: [Vec<usize>; EventKind::COUNT] = Default::default();
        for kind in EventKind::ALL.into_iter().filter(|k| k.is_tool_event()) {
            for &i in &by_event[kind.index()] {
                match ordered[i].options.filter.exact_names() {
                    Some(names) => {
                        for name in names {
                            let list = by_tool[kind.index()].entry(name.clone()).or_default();
                            if list.last() != Some(&i) {
                                list.push(i);
                            }
                        }
                    }
                    None => untargeted[kind.index()].push(i),
                }
            }
        }
        Ok(Snapshot {
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
            hooks: ordered,
            by_event,
            deps,
            has_deps,
            observers,
            obs_by_event,
            by_tool,
            untargeted,
        })
    }
}

/// Kahn's algorithm, taking the smallest (priority, registration) ready hook each time, so the
/// order is deterministic and equals registration order when there are no dependencies.
fn topo_order(hooks: &[Arc<HookEntry>], deps: &[Vec<usize>]) -> Result<Vec<usize>, Error> {
    let n = hooks.len();
    let mut indegree: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &j in d {
            dependents[j].push(i);
        }
    }
    let key = |i: usize| Reverse((hooks[i].options.priority, hooks[i].seq, i));
    let mut ready: BinaryHeap<_> = (0..n).filter(|&i| indegree[i] == 0).map(key).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse((_, _, i))) = ready.pop() {
        order.push(i);
        for &k in &dependents[i] {
            indegree[k] -= 1;
            if indegree[k] == 0 {
                ready.push(key(k));
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk dependencies among the hooks left over until one repeats: that is a cycle.
    let mut path = vec![(0..n).find(|&i| indegree[i] > 0).unwrap_or(0)];
    loop {
        let last = *path.last().unwrap_or(&0);
        let next = deps[last]
            .iter()
            .copied()
            .find(|&j| indegree[j] > 0)
            .unwrap_or(last);
        if let Some(start) = path.iter().position(|&p| p == next) {
            let mut names: Vec<String> = path[start..]
                .iter()
                .map(|&i| hooks[i].name.clone())
                .collect();
            names.push(hooks[next].name.clone());
            return Err(Error::DependencyCycle(names));
        }
        path.push(next);
    }
}

impl Target {
    /// The mailbox that serves the session whose id hashes to `shard`; `None` for an inline
    /// hook.
    pub fn mailbox(&self, shard: u64) -> Option<&channel::Sender<Delivery>> {
        match self {
            Target::Actor(tx) => Some(tx),
            // The hash scaled to the number of actors (a multiply, where `%` is a division).
            Target::Sharded(txs) => {
                let at = (u128::from(shard) * txs.len() as u128) >> 64;
                txs.get(at as usize)
            }
            Target::Inline(_) => None,
        }
    }
}
