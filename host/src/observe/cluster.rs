//! Following a live cluster with the `kube` client: one runtime watcher per
//! kind (list, then watch; resumption and re-list after `410 Gone` are the
//! watcher's, backoff on errors is ours; the node Leases, which renew all
//! the time, are listed every few seconds instead), each object reduced on arrival into the
//! shared [`Snapshot`]. Every change wakes the deriver. Each watcher's health
//! is kept so that verdicts can say how old their observations are.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::ListParams;
use kube::core::DynamicObject;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::resources::{Generic, ResourceRef};
use super::wire::{NodeLease, PodFields};
use super::{AppKey, Grouping, Snapshot, reduce};
use crate::wit::types;

/// How one kind's watch is doing.
#[derive(Debug, Clone, Serialize)]
pub struct KindHealth {
    /// Whether the first full list has arrived.
    pub synced: bool,
    /// Whether the watch is working now.
    pub healthy: bool,
    /// Since when it has been in its current state.
    #[serde(serialize_with = "crate::time::serialize_time")]
    pub since: SystemTime,
    pub last_error: Option<String>,
    /// Events applied since the start.
    pub events: u64,
    /// Full lists taken (the first, and each after `410 Gone`).
    pub lists: u64,
    /// Times the watch failed and was restarted.
    pub failures: u64,
}

/// The health of every watch, by kind, and the configured kinds the
/// server does not serve (yet).
#[derive(Debug, Default)]
pub struct WatchHealth {
    kinds: Mutex<BTreeMap<&'static str, KindHealth>>,
    unserved: Mutex<BTreeMap<String, SystemTime>>,
    /// The configured kinds: shown, but no verdict rests on them yet, so
    /// they hold neither readiness nor freshness back.
    optional: Mutex<BTreeSet<&'static str>>,
}

impl WatchHealth {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, KindHealth>> {
        self.kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn start(&self, kind: &'static str) {
        self.lock().insert(
            kind,
            KindHealth {
                synced: false,
                healthy: false,
                since: SystemTime::now(),
                last_error: None,
                events: 0,
                lists: 0,
                failures: 0,
            },
        );
    }

    /// The watch of a kind works (and has `synced`); returns whether
    /// that is new.
    fn ok(&self, kind: &'static str, synced: bool) -> bool {
        let mut kinds = self.lock();
        let Some(h) = kinds.get_mut(kind) else {
            return false;
        };
        let new = !h.healthy || (synced && !h.synced);
        if !h.healthy {
            h.since = SystemTime::now();
        }
        h.healthy = true;
        h.synced |= synced;
        new
    }

    /// Count one event of a kind (a full list's start counts as a list).
    fn counted(&self, kind: &'static str, list: bool) {
        if let Some(h) = self.lock().get_mut(kind) {
            h.events += 1;
            h.lists += u64::from(list);
        }
    }

    fn failed(&self, kind: &'static str, error: String) {
        let mut kinds = self.lock();
        if let Some(h) = kinds.get_mut(kind) {
            h.failures += 1;
            if h.healthy {
                h.since = SystemTime::now();
                tracing::warn!(kind, %error, "watch failed; retrying with backoff");
            }
            h.healthy = false;
            h.last_error = Some(error);
        }
    }

    /// Whether the watch of a kind has had its first full list.
    pub fn synced(&self, kind: &str) -> bool {
        self.lock().get(kind).is_some_and(|h| h.synced)
    }

    /// Whether the watch of a kind (e.g. `nodes`) works now.
    pub fn healthy(&self, kind: &str) -> bool {
        self.lock().get(kind).is_some_and(|h| h.healthy)
    }

    /// Every kind's health.
    pub fn kinds(&self) -> BTreeMap<&'static str, KindHealth> {
        self.lock().clone()
    }

    /// The configured kinds the server does not serve, since when they
    /// were first looked for. They do not hold readiness back: a kind is
    /// watched as soon as it is served.
    pub fn unserved(&self) -> BTreeMap<String, SystemTime> {
        self.unserved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn served(&self, resource: &str, served: bool) {
        let mut unserved = self
            .unserved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if served {
            unserved.remove(resource);
        } else {
            unserved
                .entry(resource.to_string())
                .or_insert_with(SystemTime::now);
        }
    }

    /// Mark a configured kind's watch as one nothing waits for.
    fn optional_kind(&self, kind: &'static str) {
        self.optional
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(kind);
    }

    fn optional(&self) -> BTreeSet<&'static str> {
        self.optional
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether every watch (of the built-in kinds) has synced and works
    /// now.
    pub fn ready(&self) -> bool {
        self.required_all(|h| h.synced && h.healthy)
    }

    /// Whether every watch of the built-in kinds has had its first full
    /// list (a verdict derived before then could judge an app by half of
    /// it: its pods, but not yet its namespace).
    pub fn synced_all(&self) -> bool {
        self.required_all(|h| h.synced)
    }

    fn required_all(&self, check: impl Fn(&KindHealth) -> bool) -> bool {
        let optional = self.optional();
        let kinds = self.lock();
        let mut required = kinds
            .iter()
            .filter(|(k, _)| !optional.contains(*k))
            .peekable();
        required.peek().is_some() && required.all(|(_, h)| check(h))
    }

    /// Up to when observations are known to be current: now while every
    /// watch (of the built-in kinds) works, else when the first broken one
    /// broke.
    pub(crate) fn observed_until(&self) -> SystemTime {
        let optional = self.optional();
        self.lock()
            .iter()
            .filter(|(k, h)| !h.healthy && !optional.contains(*k))
            .map(|(_, h)| h.since)
            .min()
            .unwrap_or_else(SystemTime::now)
    }
}

/// What changed since the last derivation.
#[derive(Debug, Default)]
pub(crate) struct Dirty {
    /// Everything (a full list arrived).
    pub all: bool,
    pub apps: BTreeSet<AppKey>,
    pub namespaces: BTreeSet<String>,
    pub nodes: BTreeSet<String>,
}

/// The shared state the watchers write and the deriver reads.
#[derive(Debug, Default)]
pub struct Observed {
    /// Read by many (the deriver's threads, the API) at once, written by
    /// the watchers.
    pub snapshot: RwLock<Snapshot>,
    pub health: WatchHealth,
    /// Woken on every change.
    pub changed: Notify,
    dirty: Mutex<Dirty>,
}

impl Observed {
    /// Observations grouped into apps by `grouping`.
    pub fn new(grouping: Grouping) -> Self {
        Self {
            snapshot: RwLock::new(Snapshot::grouped_by(grouping)),
            ..Self::default()
        }
    }

    /// The snapshot, to change it.
    pub fn snapshot(&self) -> std::sync::RwLockWriteGuard<'_, Snapshot> {
        self.snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The snapshot, to read it (readers do not wait for each other).
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn dirty(&self) -> std::sync::MutexGuard<'_, Dirty> {
        self.dirty
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take what changed since the last call.
    pub(crate) fn take_dirty(&self) -> Dirty {
        std::mem::take(&mut *self.dirty())
    }

    fn mark(&self, change: Change) {
        let mut dirty = self.dirty();
        match change {
            Change::Apps(apps) => dirty.apps.extend(apps),
            Change::Namespace(name) => {
                dirty.namespaces.insert(name);
            }
            Change::Node(name) => {
                dirty.nodes.insert(name);
            }
            Change::Nothing => {}
        }
    }

    /// Have the next derivation cover these apps.
    pub(crate) fn mark_apps(&self, apps: Vec<AppKey>) {
        self.mark(Change::Apps(apps));
    }

    /// Have the next derivation cover everything.
    pub(crate) fn mark_all(&self) {
        self.dirty().all = true;
    }
}

/// What a change of one object touches.
enum Change {
    Apps(Vec<AppKey>),
    Namespace(String),
    Node(String),
    /// Nothing a verdict rests on (a heartbeat renewed in time).
    Nothing,
}

/// How one kind enters the snapshot.
trait Observe: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static {
    const KIND: &'static str;
    /// Where the kind is watched: in every namespace, unless said.
    fn api(client: Client) -> Api<Self>
    where
        Self::DynamicType: Default,
    {
        Api::all(client)
    }
    /// The object reduced (without the snapshot's lock), and how it
    /// enters the snapshot.
    fn put(object: &Self) -> Put;
    fn remove(snapshot: &mut Snapshot, object: &Self) -> Change;
    /// Forget the objects of the kind a full list did not name, by
    /// namespace (empty for cluster objects) and name.
    fn retain(snapshot: &mut Snapshot, listed: &BTreeSet<(String, String)>);
}

fn name(meta: &kube::api::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn namespace(meta: &kube::api::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

impl Observe for PodFields {
    const KIND: &'static str = "pods";
    fn put(object: &Self) -> Put {
        let pod = reduce::pod(&object.0);
        Box::new(move |snapshot| Change::Apps(snapshot.put_pod(pod)))
    }
    fn remove(snapshot: &mut Snapshot, object: &Self) -> Change {
        Change::Apps(snapshot.remove_pod(&namespace(object.meta()), &name(object.meta())))
    }
    fn retain(snapshot: &mut Snapshot, listed: &BTreeSet<(String, String)>) {
        let gone: Vec<(String, String)> = snapshot
            .pods
            .keys()
            .map(|(namespace, name)| (namespace.to_string(), name.to_string()))
            .filter(|k| !listed.contains(k))
            .collect();
        for (ns, name) in gone {
            snapshot.remove_pod(&ns, &name);
        }
    }
}

impl Observe for Node {
    const KIND: &'static str = "nodes";
    fn put(object: &Self) -> Put {
        let node = reduce::node(object);
        Box::new(move |snapshot| {
            let name = node.name.clone();
            match snapshot.put_node(node) {
                true => Change::Node(name),
                false => Change::Nothing,
            }
        })
    }
    fn remove(snapshot: &mut Snapshot, object: &Self) -> Change {
        snapshot.nodes.remove(&name(&object.metadata));
        Change::Node(name(&object.metadata))
    }
    fn retain(snapshot: &mut Snapshot, listed: &BTreeSet<(String, String)>) {
        snapshot
            .nodes
            .retain(|name, _| listed.contains(&(String::new(), name.clone())));
    }
}

impl Observe for Namespace {
    const KIND: &'static str = "namespaces";
    fn put(object: &Self) -> Put {
        let (name, labels) = reduce::namespace(object);
        Box::new(move |snapshot| {
            snapshot.namespaces.insert(name.clone(), labels);
            Change::Namespace(name)
        })
    }
    fn remove(snapshot: &mut Snapshot, object: &Self) -> Change {
        snapshot.namespaces.remove(&name(&object.metadata));
        Change::Namespace(name(&object.metadata))
    }
    fn retain(snapshot: &mut Snapshot, listed: &BTreeSet<(String, String)>) {
        snapshot
            .namespaces
            .retain(|name, _| listed.contains(&(String::new(), name.clone())));
    }
}

/// Where kubelets keep their heartbeat Leases.
pub(crate) const NODE_LEASES: &str = "kube-node-lease";

impl Observe for NodeLease {
    const KIND: &'static str = "node-leases";
    fn api(client: Client) -> Api<Self> {
        Api::namespaced(client, NODE_LEASES)
    }
    fn put(object: &Self) -> Put {
        let renewed = object.heartbeat();
        let name = name(object.meta());
        Box::new(move |snapshot| match renewed {
            Some((node, renewed)) if !snapshot.put_node_lease(&node, renewed) => Change::Nothing,
            _ => Change::Node(name),
        })
    }
    fn remove(snapshot: &mut Snapshot, object: &Self) -> Change {
        snapshot.node_leases.remove(&name(object.meta()));
        Change::Node(name(object.meta()))
    }
    fn retain(snapshot: &mut Snapshot, listed: &BTreeSet<(String, String)>) {
        snapshot
            .node_leases
            .retain(|name, _| listed.contains(&(NODE_LEASES.to_string(), name.clone())));
    }
}

macro_rules! observe_workload {
    ($ty:ty, $kind:literal, $reduce:path, $wk:expr) => {
        impl Observe for $ty {
            const KIND: &'static str = $kind;
            fn put(object: &Self) -> Put {
                let workload = $reduce(object);
                let uid = object.metadata.uid.clone();
                Box::new(move |snapshot| {
                    Change::Apps(snapshot.put_workload_with_uid(workload, uid))
                })
            }
            fn remove(snapshot: &mut Snapshot, object: &Self) -> Change {
                Change::Apps(snapshot.remove_workload(
                    $wk,
                    &namespace(&object.metadata),
                    &name(&object.metadata),
                ))
            }
            fn retain(snapshot: &mut Snapshot, listed: &BTreeSet<(String, String)>) {
                snapshot.retain_workloads($wk, listed);
            }
        }
    };
}

observe_workload!(
    Deployment,
    "deployments",
    reduce::deployment,
    types::WorkloadKind::Deployment
);
observe_workload!(
    StatefulSet,
    "statefulsets",
    reduce::stateful_set,
    types::WorkloadKind::StatefulSet
);
observe_workload!(
    DaemonSet,
    "daemonsets",
    reduce::daemon_set,
    types::WorkloadKind::DaemonSet
);

/// How a reduced object enters the snapshot, and what that touches.
type Put = Box<dyn FnOnce(&mut Snapshot) -> Change + Send>;

/// How an object leaves the snapshot, and what that touches.
type Apply<K> = Box<dyn Fn(&mut Snapshot, &K) -> Change + Send + Sync>;

/// Forget the objects a full list did not name (by namespace and name).
type Retain = Box<dyn Fn(&mut Snapshot, &BTreeSet<(String, String)>) + Send + Sync>;

/// How the objects of one watched kind enter and leave the snapshot.
struct Entry<K> {
    /// The kind's name in the watch health.
    name: &'static str,
    put: Box<dyn Fn(&K) -> Put + Send + Sync>,
    remove: Apply<K>,
    retain: Retain,
}

impl<K: Observe> Entry<K> {
    fn of_kind() -> Self {
        Self {
            name: K::KIND,
            put: Box::new(K::put),
            remove: Box::new(K::remove),
            retain: Box::new(K::retain),
        }
    }
}

/// Follow one kind until the task is aborted.
async fn follow_kind<K>(client: Client, observed: Arc<Observed>)
where
    K: Observe,
    K::DynamicType: Default,
{
    follow_api(K::api(client), Entry::<K>::of_kind(), observed).await;
}

/// Follow the objects of `api` until the task is aborted.
async fn follow_api<K>(api: Api<K>, entry: Entry<K>, observed: Arc<Observed>)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let kind = entry.name;
    observed.health.start(kind);
    // The first list streamed from the API server's watch cache (watch
    // events, one object at a time, no page held whole); a server that
    // refuses streaming lists is listed page by page instead.
    let mut streaming = true;
    let mut stream = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    // A full list arrives as Init, InitApply…, InitDone: each object enters
    // as it arrives (no copy of the whole list is held), and at the end the
    // objects the list did not name are forgotten: they were deleted while
    // the watch was away.
    let mut listing: Option<BTreeSet<(String, String)>> = None;
    let mut backoff = MIN_BACKOFF;
    // A watch that resumes after an error says nothing until something
    // changes; while unhealthy, a small list tells when the server is back.
    let mut probe = tokio::time::interval(PROBE_EVERY);
    loop {
        tokio::select! {
            event = stream.next() => {
                let Some(event) = event else { return };
                match event {
                    Ok(event) => {
                        backoff = MIN_BACKOFF;
                        apply(&observed, &entry, &mut listing, event);
                    }
                    Err(error) if streaming && refuses_streaming(&error) => {
                        tracing::info!(kind, %error, "the API server does not stream lists; listing page by page");
                        streaming = false;
                        stream = watcher(api.clone(), watcher::Config::default()).boxed();
                    }
                    Err(error) => {
                        observed.health.failed(kind, error.to_string());
                        observed.changed.notify_one();
                        // The watcher retries on the next poll: pace it.
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
            _ = probe.tick(), if !observed.health.healthy(kind) => {
                if api.list_metadata(&ListParams::default().limit(1)).await.is_ok() {
                    observed.health.ok(kind, false);
                    observed.changed.notify_one();
                }
            }
        }
    }
}

/// Follow the objects of kind `K` by listing them every `every`.
async fn poll_kind<K>(client: Client, observed: Arc<Observed>, every: Duration)
where
    K: Observe,
    K::DynamicType: Default,
{
    poll_api(K::api(client), Entry::<K>::of_kind(), observed, every).await;
}

/// Follow the objects of `api` by listing them from the API server's
/// cache every `every`, until the task is aborted: each object listed is
/// put (only what changed is derived again), the ones no longer listed
/// are forgotten. A failed list marks the kind unhealthy until one
/// succeeds.
async fn poll_api<K>(api: Api<K>, entry: Entry<K>, observed: Arc<Observed>, every: Duration)
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let kind = entry.name;
    observed.health.start(kind);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The resource version of each object at the last list.
    let mut versions: BTreeMap<(String, String), String> = BTreeMap::new();
    loop {
        tick.tick().await;
        let list = match api.list(&ListParams::default().match_any()).await {
            Ok(list) => list,
            Err(error) => {
                observed.health.failed(kind, error.to_string());
                observed.changed.notify_one();
                continue;
            }
        };
        observed.health.counted(kind, true);
        let listed: BTreeSet<(String, String)> =
            list.items.iter().map(|o| listed_key(o.meta())).collect();
        // Only what changed since the last list is put again.
        let fresh: Vec<&K> = list
            .items
            .iter()
            .filter(|o| {
                let version = o.meta().resource_version.clone().unwrap_or_default();
                versions.insert(listed_key(o.meta()), version.clone()) != Some(version)
            })
            .collect();
        versions.retain(|key, _| listed.contains(key));
        let changes: Vec<Change> = {
            let mut snapshot = observed.snapshot();
            let changes = fresh
                .into_iter()
                .map(|object| (entry.put)(object)(&mut snapshot))
                .filter(|change| !matches!(change, Change::Nothing))
                .collect();
            (entry.retain)(&mut snapshot, &listed);
            changes
        };
        let news = !changes.is_empty();
        for change in changes {
            observed.mark(change);
        }
        if observed.health.ok(kind, true) || news {
            observed.changed.notify_one();
        }
    }
}

/// Whether a watch failed because the server refuses streaming lists
/// (`sendInitialEvents`, which servers without the `WatchList` feature
/// reject as invalid).
fn refuses_streaming(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::InitialListFailed(kube::Error::Api(status)) => {
            matches!(status.code, 400 | 422)
        }
        watcher::Error::WatchError(status) => {
            matches!(status.code, 400 | 422) && status.message.contains("sendInitialEvents")
        }
        _ => false,
    }
}

/// How often a configured kind the server does not serve is looked for.
const DISCOVER_EVERY: Duration = Duration::from_secs(2);

/// Follow a configured kind: look it up through discovery until the
/// server serves it, then watch it.
async fn follow_resource(client: Client, observed: Arc<Observed>, resource: ResourceRef) {
    let gvk = kube::api::GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
    let text = resource.to_string();
    let api_resource = loop {
        match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok((api_resource, _)) => break api_resource,
            Err(error) => {
                tracing::debug!(resource = %text, %error, "not served; looking again later");
                observed.health.served(&text, false);
                tokio::time::sleep(DISCOVER_EVERY).await;
            }
        }
    };
    observed.health.served(&text, true);
    tracing::info!(resource = %text, "watching");
    // The watch health names kinds for the life of the process.
    let name: &'static str = Box::leak(text.clone().into_boxed_str());
    observed.health.optional_kind(name);
    let (put_resource, removed, retained) = (resource.clone(), text.clone(), text);
    let entry = Entry {
        name,
        put: Box::new(move |object: &DynamicObject| -> Put {
            let object = Generic::reduce(&put_resource, object);
            Box::new(move |snapshot| Change::Apps(snapshot.put_object(object)))
        }),
        remove: Box::new(move |snapshot: &mut Snapshot, object: &DynamicObject| {
            let key = (
                removed.clone(),
                namespace(&object.metadata),
                name_of(object),
            );
            Change::Apps(snapshot.remove_object(&key))
        }),
        retain: Box::new(move |snapshot: &mut Snapshot, listed| {
            snapshot.retain_objects(&retained, listed);
        }),
    };
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource);
    follow_api(api, entry, observed).await;
}

fn name_of(object: &DynamicObject) -> String {
    name(&object.metadata)
}

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const PROBE_EVERY: Duration = Duration::from_millis(250);

fn listed_key(meta: &kube::api::ObjectMeta) -> (String, String) {
    (namespace(meta), name(meta))
}

fn apply<K: Resource>(
    observed: &Observed,
    entry: &Entry<K>,
    listing: &mut Option<BTreeSet<(String, String)>>,
    event: Event<K>,
) {
    let kind = entry.name;
    observed.health.counted(kind, matches!(event, Event::Init));
    match event {
        Event::Init => *listing = Some(BTreeSet::new()),
        Event::InitApply(object) => {
            listing
                .get_or_insert_with(BTreeSet::new)
                .insert(listed_key(object.meta()));
            let put = (entry.put)(&object);
            drop(object);
            put(&mut observed.snapshot());
            // Derivation waits for the whole list.
            return;
        }
        Event::InitDone => {
            let listed = listing.take().unwrap_or_default();
            (entry.retain)(&mut observed.snapshot(), &listed);
            observed.mark_all();
            observed.health.ok(kind, true);
        }
        Event::Apply(object) => {
            let put = (entry.put)(&object);
            drop(object);
            let change = put(&mut observed.snapshot());
            let back = observed.health.ok(kind, false);
            if matches!(change, Change::Nothing) && !back {
                return;
            }
            observed.mark(change);
        }
        Event::Delete(object) => {
            let change = (entry.remove)(&mut observed.snapshot(), &object);
            observed.mark(change);
            observed.health.ok(kind, false);
        }
    }
    observed.changed.notify_one();
}

/// The watchers of a cluster; dropping this stops them.
#[derive(Debug)]
pub struct Following {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Start a watcher per observed kind, and one per configured kind; the
/// node Leases are listed every `lease_poll_every` instead. Every kubelet
/// renews its Lease every 10 s: watched, 500 nodes are 50 events a second,
/// each its own read, decryption and wake-up, to learn a heartbeat that is
/// news only after 40 s of silence. One list from the API server's cache
/// every few seconds tells the same at a fraction of the cost.
pub fn follow(
    client: Client,
    observed: &Arc<Observed>,
    resources: &[ResourceRef],
    lease_poll_every: Duration,
) -> Following {
    // Every built-in kind is known from the start, so that none counts as
    // synced before all of them are.
    for kind in [
        Namespace::KIND,
        Node::KIND,
        NodeLease::KIND,
        PodFields::KIND,
        Deployment::KIND,
        StatefulSet::KIND,
        DaemonSet::KIND,
    ] {
        observed.health.start(kind);
    }
    let mut tasks: Vec<JoinHandle<()>> = resources
        .iter()
        .map(|r| {
            tokio::spawn(follow_resource(
                client.clone(),
                Arc::clone(observed),
                r.clone(),
            ))
        })
        .collect();
    tasks.extend([
        tokio::spawn(follow_kind::<Namespace>(
            client.clone(),
            Arc::clone(observed),
        )),
        tokio::spawn(follow_kind::<Node>(client.clone(), Arc::clone(observed))),
        tokio::spawn(poll_kind::<NodeLease>(
            client.clone(),
            Arc::clone(observed),
            lease_poll_every,
        )),
        tokio::spawn(follow_kind::<PodFields>(
            client.clone(),
            Arc::clone(observed),
        )),
        tokio::spawn(follow_kind::<Deployment>(
            client.clone(),
            Arc::clone(observed),
        )),
        tokio::spawn(follow_kind::<StatefulSet>(
            client.clone(),
            Arc::clone(observed),
        )),
        tokio::spawn(follow_kind::<DaemonSet>(client, Arc::clone(observed))),
    ]);
    Following { tasks }
}
