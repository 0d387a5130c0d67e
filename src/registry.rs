//! The registry (HK-5): an actor that owns the registered hooks and observers and publishes
//! immutable [`Snapshot`]s. Dispatch reads a snapshot with one atomic load and never takes a lock
//! that registration holds; an event keeps the snapshot it started with.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;

use crate::error::Error;
use crate::event::{Envelope, EventKind};
use crate::hook::{Hook, HookOptions};
use crate::mailbox::Delivery;
use crate::observer::ObserverEntry;
use crate::session::SessionShared;

/// How the dispatcher reaches a hook.
pub(crate) enum Target {
    /// A task of its own (a trait hook's actor, or a user's mailbox).
    Actor(mpsc::Sender<Delivery>),
    /// Run on the dispatcher's task.
    Inline(Arc<dyn Hook>),
}

/// Circuit-breaker state of one hook (FL-4).
#[derive(Default)]
pub(crate) struct Breaker {
    consecutive: AtomicU32,
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
    pub calls: AtomicU64,
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
            calls: AtomicU64::new(0),
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
        if self.options.circuit_breaker.is_none() {
            return true;
        }
        let mut open = self.breaker.open_until.lock();
        match *open {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                *open = None;
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
            self.breaker.consecutive.store(0, Ordering::Relaxed);
            return;
        }
        let n = self.breaker.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= cb.failures {
            *self.breaker.open_until.lock() =
                Some(crate::bounds::deadline_after(Instant::now(), cb.cool_down));
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

/// An immutable view of the registered hooks and observers, in fold order, with an index per
/// event.
#[derive(Default)]
pub(crate) struct Snapshot {
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

/// Messages the registry actor serves.
pub(crate) enum RegistryMsg {
    AddHook(Arc<HookEntry>, oneshot::Sender<Result<(), Error>>),
    RemoveHook(Option<String>, String, oneshot::Sender<Result<(), Error>>),
    AddObserver(Arc<ObserverEntry>, oneshot::Sender<Result<(), Error>>),
    RemoveObserver(String, oneshot::Sender<Result<(), Error>>),
    /// Drops a session's hooks and observers (after its SessionEnd).
    DropSession(String, oneshot::Sender<()>),
    /// Drops everything (shutdown).
    Clear(oneshot::Sender<()>),
}

/// What one session registered for itself: hooks and observers. Its snapshot merges them with
/// the global ones; nothing of it is in the global snapshot, so opening N sessions with a session
/// observer each is O(N).
#[derive(Default, Clone)]
struct SessionScope {
    hooks: Vec<Arc<HookEntry>>,
    observers: Vec<Arc<ObserverEntry>>,
}

impl SessionScope {
    fn is_empty(&self) -> bool {
        self.hooks.is_empty() && self.observers.is_empty()
    }
}

/// The registry actor's state.
pub(crate) struct Registry {
    global: Vec<Arc<HookEntry>>,
    /// Global observers only: a session's own live with its hooks, in `sessions`.
    observers: Vec<Arc<ObserverEntry>>,
    sessions: HashMap<String, SessionScope>,
    published: Arc<arc_swap::ArcSwap<Snapshot>>,
    session_states: Arc<dashmap::DashMap<String, Arc<SessionShared>>>,
}

impl Registry {
    pub fn new(
        published: Arc<arc_swap::ArcSwap<Snapshot>>,
        session_states: Arc<dashmap::DashMap<String, Arc<SessionShared>>>,
    ) -> Self {
        Self {
            global: Vec::new(),
            observers: Vec::new(),
            sessions: HashMap::new(),
            published,
            session_states,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::Receiver<RegistryMsg>) {
        while let Some(msg) = rx.recv().await {
            match msg {
                RegistryMsg::AddHook(entry, reply) => {
                    let _ = reply.send(self.add_hook(entry));
                }
                RegistryMsg::RemoveHook(scope, name, reply) => {
                    let _ = reply.send(self.remove_hook(scope, &name));
                }
                RegistryMsg::AddObserver(entry, reply) => {
                    let _ = reply.send(self.add_observer(entry));
                }
                RegistryMsg::RemoveObserver(name, reply) => {
                    let _ = reply.send(self.remove_observer(&name));
                }
                RegistryMsg::DropSession(id, reply) => {
                    self.sessions.remove(&id);
                    let _ = reply.send(());
                }
                RegistryMsg::Clear(reply) => {
                    self.global.clear();
                    self.observers.clear();
                    self.sessions.clear();
                    self.published.store(Arc::new(Snapshot::default()));
                    for s in self.session_states.iter() {
                        s.hooks.store(None);
                    }
                    let _ = reply.send(());
                    return;
                }
            }
        }
    }

    /// Observer names are unique among the global observers and a session's own together (a
    /// session observer may not shadow a global one, nor the reverse).
    fn add_observer(&mut self, entry: Arc<ObserverEntry>) -> Result<(), Error> {
        let taken = |list: &[Arc<ObserverEntry>]| list.iter().any(|o| o.name == entry.name);
        if taken(&self.observers) {
            return Err(Error::DuplicateName(entry.name.clone()));
        }
        match entry.session.clone() {
            None => {
                if self.sessions.values().any(|s| taken(&s.observers)) {
                    return Err(Error::DuplicateName(entry.name.clone()));
                }
                self.observers.push(entry);
                self.publish_all()
            }
            Some(id) => {
                self.check_session(Some(&id))?;
                let mut scope = self.sessions.get(&id).cloned().unwrap_or_default();
                if taken(&scope.observers) {
                    return Err(Error::DuplicateName(entry.name.clone()));
                }
                scope.observers.push(entry);
                self.commit_session(id, scope)
            }
        }
    }

    /// Removes a global observer, or else the first session observer of that name.
    fn remove_observer(&mut self, name: &str) -> Result<(), Error> {
        let before = self.observers.len();
        self.observers.retain(|o| o.name != name);
        if before != self.observers.len() {
            return self.publish_all();
        }
        let owner = self
            .sessions
            .iter()
            .find(|(_, s)| s.observers.iter().any(|o| o.name == name))
            .map(|(id, _)| id.clone());
        let Some(id) = owner else {
            return Err(Error::NoSuchHook(name.to_owned()));
        };
        let mut scope = self.sessions.get(&id).cloned().unwrap_or_default();
        scope.observers.retain(|o| o.name != name);
        self.commit_session(id, scope)
    }

    fn add_hook(&mut self, entry: Arc<HookEntry>) -> Result<(), Error> {
        let scope = entry.session.clone();
        let mut candidate = self.scope_hooks(scope.as_deref());
        if candidate.iter().any(|h| h.name == entry.name) {
            return Err(Error::DuplicateName(entry.name.clone()));
        }
        self.check_session(scope.as_deref())?;
        candidate.push(entry);
        self.commit(scope, candidate)
    }

    /// A session scope must name an open session that is not closing (HK-5).
    fn check_session(&self, scope: Option<&str>) -> Result<(), Error> {
        let Some(id) = scope else { return Ok(()) };
        match self.session_states.get(id) {
            None => Err(Error::NoSuchSession(id.to_owned())),
            Some(s) if s.closing.load(std::sync::atomic::Ordering::Acquire) => {
                Err(Error::SessionClosed(id.to_owned()))
            }
            Some(_) => Ok(()),
        }
    }

    fn remove_hook(&mut self, scope: Option<String>, name: &str) -> Result<(), Error> {
        let mut candidate = self.scope_hooks(scope.as_deref());
        let Some(pos) = candidate.iter().position(|h| h.name == name) else {
            return Err(Error::NoSuchHook(name.to_owned()));
        };
        candidate.remove(pos);
        self.commit(scope, candidate)
    }

    fn scope_hooks(&self, scope: Option<&str>) -> Vec<Arc<HookEntry>> {
        match scope {
            None => self.global.clone(),
            Some(id) => self
                .sessions
                .get(id)
                .map(|s| s.hooks.clone())
                .unwrap_or_default(),
        }
    }

    /// Validates the new hook list of a scope (ordering, dependencies, and for the global scope
    /// every session's merged view) and publishes it; on error nothing changes.
    fn commit(
        &mut self,
        scope: Option<String>,
        candidate: Vec<Arc<HookEntry>>,
    ) -> Result<(), Error> {
        match scope {
            None => {
                let snapshot = Snapshot::build(candidate.clone(), self.observers.clone())?;
                let merged = self.merged_for_all(&candidate)?;
                self.global = candidate;
                self.published.store(Arc::new(snapshot));
                self.store_merged(merged);
            }
            Some(id) => {
                let mut scope = self.sessions.get(&id).cloned().unwrap_or_default();
                scope.hooks = candidate;
                self.commit_session(id, scope)?;
            }
        }
        Ok(())
    }

    /// Validates and publishes one session's own hooks and observers: only that session's
    /// snapshot is rebuilt.
    fn commit_session(&mut self, id: String, scope: SessionScope) -> Result<(), Error> {
        let snapshot = self.merged(&self.global, &scope)?;
        if let Some(state) = self.session_states.get(&id) {
            state
                .hooks
                .store((!scope.is_empty()).then(|| Arc::new(snapshot)));
        }
        self.sessions.insert(id, scope);
        Ok(())
    }

    fn merged(&self, global: &[Arc<HookEntry>], own: &SessionScope) -> Result<Snapshot, Error> {
        let mut hooks = global.to_vec();
        hooks.extend(own.hooks.iter().cloned());
        let mut observers = self.observers.clone();
        observers.extend(own.observers.iter().cloned());
        Snapshot::build(hooks, observers)
    }

    fn merged_for_all(&self, global: &[Arc<HookEntry>]) -> Result<Vec<(String, Snapshot)>, Error> {
        self.sessions
            .iter()
            .filter(|(_, own)| !own.is_empty())
            .map(|(id, own)| Ok((id.clone(), self.merged(global, own)?)))
            .collect()
    }

    fn store_merged(&self, merged: Vec<(String, Snapshot)>) {
        for (id, snapshot) in merged {
            if let Some(state) = self.session_states.get(&id) {
                state.hooks.store(Some(Arc::new(snapshot)));
            }
        }
    }

    /// Republishes the global snapshot and every session's merged one (observers changed).
    fn publish_all(&mut self) -> Result<(), Error> {
        let snapshot = Snapshot::build(self.global.clone(), self.observers.clone())?;
        let merged = self.merged_for_all(&self.global)?;
        self.published.store(Arc::new(snapshot));
        self.store_merged(merged);
        Ok(())
    }
}
