//! Observation: Kubernetes objects reduced to compact observations
//! ([`reduce`]), read from files ([`objects`]), and grouped into
//! applications with their tasks ([`Snapshot::apps`]).

pub mod cluster;
pub mod metrics;
pub mod objects;
pub mod probe;
pub mod record;
pub mod reduce;
pub mod resources;
mod wire;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use serde::{Deserialize, Serialize};

use crate::wit::{status, types};
use record::PodRecord;
use resources::kubevirt;

/// What observation is told: how apps are grouped, and how often their
/// health and usage are read.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// Group pods into apps by `label=KEY` (objects without the label fall
    /// back to their owning workload's name), `owner` (the owning
    /// Deployment, StatefulSet or DaemonSet) or `namespace` (one app per
    /// namespace).
    #[arg(long = "group-by", value_name = "RULE", default_value_t)]
    pub group_by: Grouping,
    #[command(flatten)]
    pub probes: probe::ProbeConfig,
    /// Further kinds to watch, by group, version and kind (in the file
    /// only: `[[resources]]`; KubeVirt's and CDI's kinds by default).
    #[arg(skip = resources::defaults())]
    pub resources: Vec<resources::ResourceRef>,
    /// How often pod usage is read from `metrics.k8s.io`, where the cluster
    /// serves it, in milliseconds.
    #[arg(long = "metrics-interval-ms", value_name = "MS", default_value = "15000", value_parser = crate::settings::positive_millis)]
    pub metrics_every: std::time::Duration,
    /// How often the nodes' heartbeat Leases (`kube-node-lease`) are
    /// listed, in milliseconds: a node's heartbeat is at most this much
    /// older than its Lease.
    #[arg(long = "lease-poll-ms", value_name = "MS", default_value = "5000", value_parser = crate::settings::positive_millis)]
    pub lease_poll_every: std::time::Duration,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// How pods and workloads are grouped into applications.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Grouping {
    /// By the value of a label (default `app.kubernetes.io/instance`);
    /// objects without it fall back to their owning workload's name.
    Label(String),
    /// By the owning workload (Deployment, StatefulSet, DaemonSet).
    Owner,
    /// One application per namespace (seed 000).
    Namespace,
}

impl Default for Grouping {
    fn default() -> Self {
        Grouping::Label("app.kubernetes.io/instance".into())
    }
}

impl std::fmt::Display for Grouping {
    /// The form `--group-by` takes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Grouping::Label(key) => write!(f, "label={key}"),
            Grouping::Owner => f.write_str("owner"),
            Grouping::Namespace => f.write_str("namespace"),
        }
    }
}

impl std::str::FromStr for Grouping {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "owner" => Ok(Grouping::Owner),
            "namespace" => Ok(Grouping::Namespace),
            _ => match text.strip_prefix("label=") {
                Some(label) if !label.is_empty() => Ok(Grouping::Label(label.to_string())),
                _ => Err(format!(
                    "`{text}` is not a grouping: use label=KEY, owner or namespace"
                )),
            },
        }
    }
}

fn label<'a>(labels: &'a [types::KeyValue], key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|l| l.key == key)
        .map(|l| l.value.as_str())
}

/// What the host holds of an app besides its observations: its tasks and
/// the overrides in force on it.
#[derive(Debug, Clone, Default)]
pub struct Around {
    pub tasks: Vec<types::Task>,
    pub overrides: Vec<types::StatusOverride>,
}

/// An application's key: namespace and name.
pub(crate) type AppKey = (String, String);
type WorkloadKey = (&'static str, String, String);

/// What belongs to one application.
#[derive(Debug, Clone, Default)]
struct Members {
    workloads: BTreeSet<WorkloadKey>,
    /// Its pods by name (an app's pods are in its namespace): their
    /// records, shared with the snapshot's map of pods, so that an app's
    /// pods are found without looking each one up there.
    pods: BTreeMap<Arc<str>, Arc<PodRecord>>,
    objects: BTreeSet<resources::ObjectKey>,
}

impl Members {
    fn is_empty(&self) -> bool {
        self.workloads.is_empty() && self.pods.is_empty() && self.objects.is_empty()
    }
}

/// How far an owner chain is followed (a VMI's VM's pool is two steps).
const OWNER_DEPTH: usize = 8;

/// What is known of the cluster at one moment, keyed as the API keys it,
/// with an index from applications (by the snapshot's grouping) to their
/// workloads and pods, kept up to date as objects come and go.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Namespaces by name, with their labels.
    pub namespaces: BTreeMap<String, Vec<types::KeyValue>>,
    /// Workloads by kind, namespace and name.
    pub workloads: BTreeMap<WorkloadKey, types::Workload>,
    /// Pods by namespace and name.
    pub pods: Pods,
    /// Nodes by name.
    pub nodes: BTreeMap<String, types::Node>,
    /// When each node's kubelet last renewed its Lease (`kube-node-lease`):
    /// the heartbeat a kubelet sends every few seconds, while it posts the
    /// node's status (and the `Ready` condition's heartbeat) only every few
    /// minutes.
    pub node_leases: BTreeMap<String, types::Timestamp>,
    /// Measured usage by pod (namespace, name), then by container.
    pub usage: BTreeMap<(String, String), BTreeMap<String, types::Resources>>,
    /// The last result of each app's own health check.
    pub probes: BTreeMap<AppKey, types::HealthProbe>,
    /// Objects of the kinds named by configuration ([`resources`]).
    pub objects: resources::Objects,
    grouping: Grouping,
    /// Apps to their members. Which app a stored workload belongs to is
    /// computed from it; a pod or an object may follow its owner chain
    /// through stored objects (a `virt-launcher` pod to its VMI, a VMI to
    /// its VM, a VM to its pool), so theirs is kept beside the index.
    index: BTreeMap<Arc<AppKey>, Members>,
    /// The app each indexed object is in (a pod's is stored with it).
    object_apps: BTreeMap<resources::ObjectKey, AppKey>,
    /// Stored objects by namespace, kind and name: how owners are found.
    object_names: BTreeMap<(String, String, String), resources::ObjectKey>,
    /// The apps with pods or objects on each node.
    on_nodes: OnNodes,
    /// Each workload's `metadata.uid`, when it came from the API: what an
    /// Event about it refers to.
    workload_uids: BTreeMap<WorkloadKey, Box<str>>,
}

/// A pod as the snapshot holds it: its record (behind a pointer, so that
/// the map's nodes do not hold the record and the room beside it; shared
/// with its app's entry in the index) and the app it is in.
#[derive(Debug, Clone)]
pub struct StoredPod {
    pod: Arc<PodRecord>,
    /// Shared with the app index's key.
    app: Arc<AppKey>,
}

impl std::ops::Deref for StoredPod {
    type Target = PodRecord;

    fn deref(&self) -> &PodRecord {
        &self.pod
    }
}

/// Pods by namespace, then name: found by a namespace and a name without
/// a key made to look them up, each name held once (the record's, shared
/// with the map and the app index), in the order of namespace and name.
#[derive(Debug, Clone, Default)]
pub struct Pods {
    namespaces: BTreeMap<Arc<str>, BTreeMap<Arc<str>, StoredPod>>,
    len: usize,
}

impl Pods {
    pub fn get(&self, namespace: &str, name: &str) -> Option<&StoredPod> {
        self.namespaces.get(namespace)?.get(name)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every pod, by namespace and name.
    pub fn values(&self) -> impl Iterator<Item = &StoredPod> {
        self.namespaces.values().flat_map(BTreeMap::values)
    }

    /// Every pod's namespace and name.
    pub fn keys(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values().map(|p| (p.namespace(), p.name()))
    }

    /// The pods of a namespace.
    pub fn in_namespace(&self, namespace: &str) -> impl Iterator<Item = &StoredPod> {
        self.namespaces
            .get(namespace)
            .into_iter()
            .flat_map(BTreeMap::values)
    }

    fn insert(&mut self, pod: StoredPod) {
        let (namespace, name) = pod.key();
        if self
            .namespaces
            .entry(namespace)
            .or_default()
            .insert(name, pod)
            .is_none()
        {
            self.len += 1;
        }
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<StoredPod> {
        let pods = self.namespaces.get_mut(namespace)?;
        let removed = pods.remove(name)?;
        if pods.is_empty() {
            self.namespaces.remove(namespace);
        }
        self.len -= 1;
        Some(removed)
    }
}

/// The apps with pods or objects on each node, with how many: what a
/// node's change touches, found without going through every pod.
#[derive(Debug, Clone, Default)]
struct OnNodes(BTreeMap<String, BTreeMap<Arc<AppKey>, u32>>);

impl OnNodes {
    fn add(&mut self, node: Option<&str>, app: &Arc<AppKey>) {
        if let Some(node) = node {
            let apps = match self.0.get_mut(node) {
                Some(apps) => apps,
                None => self.0.entry(node.to_string()).or_default(),
            };
            *apps.entry(app.clone()).or_default() += 1;
        }
    }

    fn remove(&mut self, node: Option<&str>, app: &AppKey) {
        let Some(apps) = node.and_then(|node| self.0.get_mut(node)) else {
            return;
        };
        if let Some(count) = apps.get_mut(app) {
            *count -= 1;
            if *count == 0 {
                apps.remove(app);
            }
        }
        if apps.is_empty() {
            self.0.remove(node.unwrap_or_default());
        }
    }

    fn apps(&self, node: &str) -> impl Iterator<Item = &AppKey> {
        self.0
            .get(node)
            .into_iter()
            .flat_map(BTreeMap::keys)
            .map(|app| &**app)
    }
}

/// How old a node's heartbeat must be for its renewal to be news: the
/// node lifecycle controller's default grace period. A kubelet renews its
/// Lease every 10 s; a renewal of a heartbeat younger than this, on a
/// ready node, changes nothing a verdict rests on and derives nothing.
const HEARTBEAT_NEWS_AFTER: types::Timestamp = 40_000;

/// Whether a heartbeat at `renewed` is news about a node: it is not
/// ready, or its last heartbeat before was long ago (or never).
fn heartbeat_news(node: &types::Node, renewed: Option<types::Timestamp>) -> bool {
    let quiet = match (node.last_heartbeat, renewed) {
        (Some(before), Some(renewed)) => renewed - before < HEARTBEAT_NEWS_AFTER,
        (_, None) => true,
        (None, Some(_)) => false,
    };
    node.ready != types::ConditionStatus::True || !quiet
}

/// The Kubernetes kind of a workload kind: `Deployment`, `StatefulSet`,
/// `DaemonSet`.
pub(crate) fn workload_kind(kind: types::WorkloadKind) -> &'static str {
    match kind {
        types::WorkloadKind::Deployment => "Deployment",
        types::WorkloadKind::StatefulSet => "StatefulSet",
        types::WorkloadKind::DaemonSet => "DaemonSet",
    }
}

/// The workload kind of a Kubernetes kind, when it is one the host observes.
pub(crate) fn workload_kind_named(kind: &str) -> Option<types::WorkloadKind> {
    match kind {
        "Deployment" => Some(types::WorkloadKind::Deployment),
        "StatefulSet" => Some(types::WorkloadKind::StatefulSet),
        "DaemonSet" => Some(types::WorkloadKind::DaemonSet),
        _ => None,
    }
}

fn key_of(id: types::AppId) -> AppKey {
    (id.namespace, id.name)
}

impl Snapshot {
    /// An empty snapshot that indexes applications by `grouping`.
    pub(crate) fn grouped_by(grouping: Grouping) -> Self {
        Self {
            grouping,
            ..Self::default()
        }
    }

    /// Take a member out of an app's entry, dropping the entry when
    /// nothing is left in it.
    fn unindex(&mut self, app: &AppKey, take: impl FnOnce(&mut Members)) {
        if let Some(members) = self.index.get_mut(app) {
            take(members);
            if members.is_empty() {
                self.index.remove(app);
            }
        }
    }

    /// The app index's entry of `app`, made when there is none; its key,
    /// shared, and the entry.
    fn index_entry(&mut self, app: &AppKey) -> (Arc<AppKey>, &mut Members) {
        let key = match self.index.get_key_value(app) {
            Some((key, _)) => key.clone(),
            None => {
                let key = Arc::new(app.clone());
                self.index.insert(key.clone(), Members::default());
                key
            }
        };
        let members = self.index.get_mut(app).expect("just made");
        (key, members)
    }

    /// Forget a stored pod and take it out of the index; the app it was in
    /// and its record.
    fn unindex_pod(&mut self, namespace: &str, name: &str) -> Option<(AppKey, Arc<PodRecord>)> {
        let StoredPod { pod, app } = self.pods.remove(namespace, name)?;
        self.on_nodes.remove(pod.node(), &app);
        self.unindex(&app, |m| {
            m.pods.remove(name);
        });
        Some(((*app).clone(), pod))
    }

    /// Take a stored workload out of the index (it stays stored).
    fn unindex_workload(&mut self, key: &WorkloadKey) -> Option<AppKey> {
        let app = self.app_of_workload_key(key)?;
        self.unindex(&app, |m| {
            m.workloads.remove(key);
        });
        Some(app)
    }

    /// Add or replace a pod; returns the apps it left and joined.
    pub fn put_pod(&mut self, pod: types::Pod) -> Vec<AppKey> {
        self.put_record(Arc::new(PodRecord::new(pod)))
    }

    /// Add or replace a pod's record; returns the apps it left and joined.
    pub fn put_record(&mut self, pod: Arc<PodRecord>) -> Vec<AppKey> {
        let mut touched: Vec<AppKey> = self
            .unindex_pod(pod.namespace(), pod.name())
            .map(|(app, _)| app)
            .into_iter()
            .collect();
        let app = self.app_of_pod(&pod);
        let (shared, members) = self.index_entry(&app);
        members.pods.insert(pod.key().1, pod.clone());
        self.on_nodes.add(pod.node(), &shared);
        self.pods.insert(StoredPod { pod, app: shared });
        if !touched.contains(&app) {
            touched.push(app);
        }
        touched
    }

    /// Remove a pod; returns the app it belonged to.
    pub(crate) fn remove_pod(&mut self, namespace: &str, name: &str) -> Vec<AppKey> {
        self.unindex_pod(namespace, name)
            .map(|(app, _)| app)
            .into_iter()
            .collect()
    }

    /// Forget every pod (before a full re-list).
    pub fn clear_pods(&mut self) {
        let keys: Vec<(Arc<str>, Arc<str>)> = self.pods.values().map(|p| p.key()).collect();
        for (namespace, name) in keys {
            self.remove_pod(&namespace, &name);
        }
    }

    /// Add or replace a workload; returns the apps it left and joined.
    pub fn put_workload(&mut self, w: types::Workload) -> Vec<AppKey> {
        self.put_workload_with_uid(w, None)
    }

    /// Add or replace a workload of the API, with its `metadata.uid`.
    pub(crate) fn put_workload_with_uid(
        &mut self,
        w: types::Workload,
        uid: Option<String>,
    ) -> Vec<AppKey> {
        let key = (workload_kind(w.kind), w.namespace.clone(), w.name.clone());
        match uid {
            Some(uid) => self.workload_uids.insert(key.clone(), uid.into()),
            None => self.workload_uids.remove(&key),
        };
        let mut touched: Vec<AppKey> = self.unindex_workload(&key).into_iter().collect();
        let app = key_of(Self::app_of_workload(&self.grouping, &w));
        self.index_entry(&app).1.workloads.insert(key.clone());
        self.workloads.insert(key, w);
        touched.push(app);
        touched
    }

    /// Remove a workload of a kind; returns the app it belonged to.
    pub(crate) fn remove_workload(
        &mut self,
        kind: types::WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Vec<AppKey> {
        let key = (workload_kind(kind), namespace.to_string(), name.to_string());
        let left = self.unindex_workload(&key).into_iter().collect();
        self.workloads.remove(&key);
        self.workload_uids.remove(&key);
        left
    }

    /// Keep only the workloads of a kind that `listed` names (namespace,
    /// name); those of other kinds stay.
    pub(crate) fn retain_workloads(
        &mut self,
        kind: types::WorkloadKind,
        listed: &BTreeSet<(String, String)>,
    ) {
        let kind_name = workload_kind(kind);
        let gone: Vec<WorkloadKey> = self
            .workloads
            .keys()
            .filter(|(k, ns, name)| {
                *k == kind_name && !listed.contains(&(ns.clone(), name.clone()))
            })
            .cloned()
            .collect();
        for key in gone {
            self.unindex_workload(&key);
            self.workloads.remove(&key);
            self.workload_uids.remove(&key);
        }
    }

    /// Add or replace a namespace (its labels are all that is kept).
    pub fn put_namespace(&mut self, namespace: &k8s_openapi::api::core::v1::Namespace) {
        let (name, labels) = reduce::namespace(namespace);
        self.namespaces.insert(name, labels);
    }

    /// Add or replace a node; returns whether anything but its heartbeat
    /// changed (a kubelet posts its status with a new heartbeat every few
    /// minutes, and nothing else changes).
    pub fn put_node(&mut self, mut node: types::Node) -> bool {
        if let Some(&renewed) = self.node_leases.get(&node.name) {
            node.last_heartbeat = node.last_heartbeat.max(Some(renewed));
        }
        let news = match self.nodes.get(&node.name) {
            Some(before) => {
                let heartbeat = before.last_heartbeat;
                let was_news = heartbeat_news(before, node.last_heartbeat);
                let same = types::Node {
                    last_heartbeat: heartbeat,
                    ..node.clone()
                } == *before;
                !same || was_news
            }
            None => true,
        };
        self.nodes.insert(node.name.clone(), node);
        news
    }

    /// A node's Lease was renewed at `renewed`: its last heartbeat.
    /// Returns whether that is news (see [`HEARTBEAT_NEWS_AFTER`]): the
    /// node is not ready, or was not heard from for a while.
    pub(crate) fn put_node_lease(&mut self, node: &str, renewed: types::Timestamp) -> bool {
        self.node_leases.insert(node.to_string(), renewed);
        let Some(observed) = self.nodes.get_mut(node) else {
            return false;
        };
        let news = heartbeat_news(observed, Some(renewed));
        observed.last_heartbeat = observed.last_heartbeat.max(Some(renewed));
        news
    }

    /// The health-check URL of every app whose workload names one in the
    /// `verdict.dev/health-url` annotation.
    pub(crate) fn health_urls(&self) -> BTreeMap<AppKey, String> {
        let mut urls = BTreeMap::new();
        for w in self.workloads.values() {
            let url = w.annotations.iter().find(|a| a.key == probe::ANNOTATION);
            if let Some(url) = url {
                let app = key_of(Self::app_of_workload(&self.grouping, w));
                urls.entry(app).or_insert_with(|| url.value.clone());
            }
        }
        urls
    }

    /// Every app with a workload, a pod or an object.
    pub(crate) fn app_keys(&self) -> impl Iterator<Item = &AppKey> {
        self.index.keys().map(|key| &**key)
    }

    /// Whether an app has a workload, a pod or an object.
    pub(crate) fn has_app(&self, key: &AppKey) -> bool {
        self.index.contains_key(key)
    }

    /// What an Event about an app's status refers to: its first workload
    /// (by kind, then name), else its first object of a configured kind;
    /// `None` for an app of bare pods.
    pub(crate) fn regarding(&self, app: &AppKey) -> Option<ObjectReference> {
        let members = self.index.get(app)?;
        if let Some(key @ (kind, namespace, name)) = members.workloads.iter().next() {
            return Some(ObjectReference {
                api_version: Some("apps/v1".into()),
                kind: Some((*kind).into()),
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                uid: self.workload_uids.get(key).map(|u| u.to_string()),
                ..ObjectReference::default()
            });
        }
        let object = members
            .objects
            .iter()
            .find_map(|key| self.objects.get(key))?;
        Some(ObjectReference {
            api_version: Some(object.api_version.clone()),
            kind: Some(object.kind.clone()),
            namespace: Some(object.namespace.clone()),
            name: Some(object.name.clone()),
            uid: object.uid.clone(),
            ..ObjectReference::default()
        })
    }

    /// The app a pod (namespace, name) belongs to.
    pub(crate) fn app_of_pod_key(&self, (namespace, name): (&str, &str)) -> Option<AppKey> {
        self.pods
            .get(namespace, name)
            .map(|stored| (*stored.app).clone())
    }

    /// The app a workload (`Deployment`, `StatefulSet` or `DaemonSet`, its
    /// namespace and name) belongs to, when it is observed.
    pub(crate) fn app_of_workload_named(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<AppKey> {
        let w = self.workload(workload_kind_named(kind)?, namespace, name)?;
        Some(key_of(Self::app_of_workload(&self.grouping, w)))
    }

    /// A stored workload by kind, namespace and name.
    pub fn workload(
        &self,
        kind: types::WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Option<&types::Workload> {
        self.workloads
            .get(&(workload_kind(kind), namespace.to_string(), name.to_string()))
    }

    fn app_of_workload_key(&self, key: &WorkloadKey) -> Option<AppKey> {
        let w = self.workloads.get(key)?;
        Some(key_of(Self::app_of_workload(&self.grouping, w)))
    }

    /// Whether any workload or pod lives in a namespace.
    fn namespace_has_apps(&self, namespace: &str) -> bool {
        self.index
            .range::<AppKey, _>((namespace.to_string(), String::new())..)
            .next()
            .is_some_and(|(key, _)| key.0 == namespace)
    }

    /// The indexed apps of a namespace.
    pub(crate) fn apps_in_namespace(&self, namespace: &str) -> Vec<AppKey> {
        self.index
            .range::<AppKey, _>((namespace.to_string(), String::new())..)
            .take_while(|(key, _)| key.0 == namespace)
            .map(|(key, _)| (**key).clone())
            .collect()
    }

    /// The apps with a pod or an object on a node.
    pub(crate) fn apps_on_node(&self, node: &str) -> BTreeSet<AppKey> {
        self.on_nodes.apps(node).cloned().collect()
    }

    /// The pods on a node, found through the apps on it rather than among
    /// every pod.
    pub(crate) fn pods_on_node<'s>(&'s self, node: &'s str) -> impl Iterator<Item = &'s PodRecord> {
        self.on_nodes
            .apps(node)
            .filter_map(|app| self.index.get(app))
            .flat_map(|members| members.pods.values())
            .map(|pod| &**pod)
            .filter(move |pod| pod.node() == Some(node))
    }

    /// The inputs of some apps, by the snapshot's own grouping, without
    /// tasks. An app with nothing in it is there too.
    pub(crate) fn inputs_for<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k AppKey>,
        now: types::Timestamp,
    ) -> Vec<status::AppInput> {
        keys.into_iter()
            .map(|key| {
                let (workloads, pods, exists) = self.members_of(key);
                self.input(key, &workloads, &pods, Around::default(), exists, now)
            })
            .collect()
    }

    /// An app's workloads and pods as stored, and whether its namespace
    /// exists.
    fn members_of(&self, key: &AppKey) -> (Vec<&types::Workload>, Vec<&PodRecord>, bool) {
        let members = self.index.get(key);
        let workloads = members
            .into_iter()
            .flat_map(|m| m.workloads.iter())
            .filter_map(|k| self.workloads.get(k))
            .collect();
        let pods = members
            .into_iter()
            .flat_map(|m| m.pods.values())
            .map(|p| &**p)
            .collect();
        let exists = self.namespaces.contains_key(&key.0) || self.namespace_has_apps(&key.0);
        (workloads, pods, exists)
    }

    /// The nodes an app's pods and objects are on.
    fn nodes_of<'a>(
        &'a self,
        pods: impl Iterator<Item = &'a PodRecord>,
        app: &AppKey,
    ) -> Vec<&'a types::Node> {
        let mut on: BTreeSet<&str> = pods.filter_map(PodRecord::node).collect();
        on.extend(
            self.objects_of(app)
                .iter()
                .filter_map(|o| o.node.as_deref()),
        );
        on.iter().filter_map(|n| self.nodes.get(*n)).collect()
    }

    /// The inputs of some apps, with their tasks and observation time,
    /// encoded into `into` as the `status-encoded` interface takes them — written
    /// straight from the stored observations, without copying them into
    /// inputs first.
    pub(crate) fn encode_inputs(
        &self,
        keys: &[AppKey],
        observed_at: types::Timestamp,
        around: impl Fn(&AppKey) -> Around,
        into: &mut Vec<u8>,
    ) -> Result<(), postcard::Error> {
        // `status::AppInput` and `types::App`, field for field, borrowing.
        #[derive(Serialize)]
        struct Input<'a> {
            app: App<'a>,
            tasks: Vec<types::Task>,
            nodes: Vec<&'a types::Node>,
            overrides: Vec<types::StatusOverride>,
        }
        #[derive(Serialize)]
        struct App<'a> {
            id: types::AppId,
            namespace_exists: bool,
            namespace_labels: &'a [types::KeyValue],
            expected_replicas: Option<u32>,
            workloads: Vec<&'a types::Workload>,
            pods: Vec<record::Wire<'a>>,
            objects: Vec<types::Object>,
            probe: Option<&'a types::HealthProbe>,
            observed_at: types::Timestamp,
        }
        let inputs: Vec<Input<'_>> = keys
            .iter()
            .map(|key| {
                let (workloads, stored, namespace_exists) = self.members_of(key);
                let nodes = self.nodes_of(stored.iter().copied(), key);
                let pods = stored
                    .into_iter()
                    .map(|p| p.wire(self.usage_of(p)))
                    .collect();
                let Around { tasks, overrides } = around(key);
                Input {
                    nodes,
                    app: App {
                        id: types::AppId {
                            namespace: key.0.clone(),
                            name: key.1.clone(),
                        },
                        namespace_exists,
                        namespace_labels: self.namespaces.get(&key.0).map_or(&[], Vec::as_slice),
                        expected_replicas: None,
                        workloads,
                        pods,
                        objects: self.wit_objects_of(key),
                        probe: self.probes.get(key),
                        observed_at,
                    },
                    tasks,
                    overrides,
                }
            })
            .collect();
        crate::wit::encode_into(&inputs, into)
    }

    fn input(
        &self,
        key: &AppKey,
        workloads: &[&types::Workload],
        pods: &[&PodRecord],
        around: Around,
        namespace_exists: bool,
        now: types::Timestamp,
    ) -> status::AppInput {
        let nodes = self
            .nodes_of(pods.iter().copied(), key)
            .into_iter()
            .cloned()
            .collect();
        let pods: Vec<types::Pod> = pods.iter().map(|p| p.to_wit(self.usage_of(p))).collect();
        let Around {
            mut tasks,
            overrides,
        } = around;
        tasks.sort_by_key(|t| std::cmp::Reverse(t.created_at));
        status::AppInput {
            app: types::App {
                id: types::AppId {
                    namespace: key.0.clone(),
                    name: key.1.clone(),
                },
                namespace_exists,
                namespace_labels: self.namespaces.get(&key.0).cloned().unwrap_or_default(),
                expected_replicas: None,
                workloads: workloads.iter().map(|w| (*w).clone()).collect(),
                pods,
                objects: self.wit_objects_of(key),
                probe: self.probes.get(key).cloned(),
                observed_at: now,
            },
            tasks,
            nodes,
            overrides,
        }
    }

    /// A pod's measured usage by container, when metrics were seen.
    fn usage_of(&self, p: &PodRecord) -> Option<&BTreeMap<String, types::Resources>> {
        // Without metrics (the usual case) no key is built to look up.
        if self.usage.is_empty() {
            return None;
        }
        self.usage
            .get(&(p.namespace().to_string(), p.name().to_string()))
    }
}

impl Snapshot {
    fn app_of_workload(grouping: &Grouping, w: &types::Workload) -> types::AppId {
        let name = match grouping {
            Grouping::Label(key) => label(&w.labels, key).unwrap_or(&w.name),
            Grouping::Owner => &w.name,
            Grouping::Namespace => &w.namespace,
        };
        types::AppId {
            namespace: w.namespace.clone(),
            name: name.to_string(),
        }
    }

    /// The app an object of a configured kind (its kind, namespace and
    /// name) is in, when it is observed.
    pub(crate) fn app_of_object_named(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<AppKey> {
        let object = self.object_named(kind, namespace, name)?;
        self.object_apps.get(&object.key()).cloned()
    }

    /// The stored object of a kind in a namespace, by name.
    pub(crate) fn object_named(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<&resources::Generic> {
        let named = (namespace.to_string(), kind.to_string(), name.to_string());
        self.objects.get(self.object_names.get(&named)?)
    }

    /// The app of a pod or an object by the snapshot's grouping: its
    /// label; else, when its owner is a stored object, that object's app
    /// (up the owner chain: a VMI's VM, a VM's pool), else its owner's name,
    /// else its own; or its namespace.
    fn app_by_rule<'l>(
        &self,
        (namespace, name): (&str, &str),
        label: impl FnOnce(&str) -> Option<&'l str>,
        owner: Option<(&str, &str)>,
        depth: usize,
    ) -> AppKey {
        let app = |name: &str| (namespace.to_string(), name.to_string());
        if let Grouping::Namespace = self.grouping {
            return app(namespace);
        }
        if let Grouping::Label(key) = &self.grouping
            && let Some(value) = label(key)
        {
            return app(value);
        }
        match owner {
            Some((kind, owner_name)) => self
                .object_named(kind, namespace, owner_name)
                .filter(|_| depth < OWNER_DEPTH)
                .map_or_else(|| app(owner_name), |o| self.app_of_object_at(o, depth + 1)),
            None => app(name),
        }
    }

    /// The app an object of a configured kind belongs to: by the rule of
    /// [`Snapshot::app_by_rule`]; a live migration, which has no owner,
    /// goes with the instance it moves.
    fn app_of_object(&self, o: &resources::Generic) -> AppKey {
        self.app_of_object_at(o, 0)
    }

    fn app_of_object_at(&self, o: &resources::Generic, depth: usize) -> AppKey {
        let moves = (o.kind == kubevirt::MIGRATION)
            .then(|| o.spec_value()["vmiName"].as_str().map(String::from))
            .flatten()
            .filter(|vmi| {
                self.object_named(kubevirt::VMI, &o.namespace, vmi)
                    .is_some()
            });
        let owner = match &moves {
            Some(vmi) => Some((kubevirt::VMI, vmi.as_str())),
            None => o.owner.as_ref().map(|(k, n)| (k.as_str(), n.as_str())),
        };
        self.app_by_rule(
            (&o.namespace, &o.name),
            |key| label(&o.labels, key),
            owner,
            depth,
        )
    }

    /// The app a pod belongs to (a `virt-launcher` pod's is its VMI's).
    fn app_of_pod(&self, p: &PodRecord) -> AppKey {
        self.app_by_rule((p.namespace(), p.name()), |key| p.label(key), p.owner(), 0)
    }

    /// An app's objects as policies see them, for both input paths.
    fn wit_objects_of(&self, app: &AppKey) -> Vec<types::Object> {
        self.objects_of(app)
            .into_iter()
            .map(resources::Generic::to_wit)
            .collect()
    }

    /// The objects of the configured kinds in an app.
    pub fn objects_of(&self, app: &AppKey) -> Vec<&resources::Generic> {
        self.index
            .get(app)
            .into_iter()
            .flat_map(|m| m.objects.iter())
            .filter_map(|key| self.objects.get(key))
            .collect()
    }

    /// Store an object of a configured kind; returns the apps it left and
    /// joined. When its app changed, what it owns (its instances, their
    /// pods) follows it.
    pub(crate) fn put_object(&mut self, object: resources::Generic) -> Vec<AppKey> {
        let key = object.key();
        let before = self.unindex_object(&key);
        let app = self.app_of_object(&object);
        let (namespace, kind, name) = (
            object.namespace.clone(),
            object.kind.clone(),
            object.name.clone(),
        );
        let (shared, members) = self.index_entry(&app);
        members.objects.insert(key.clone());
        self.object_apps.insert(key.clone(), app.clone());
        self.on_nodes.add(object.node.as_deref(), &shared);
        self.object_names
            .insert((namespace.clone(), kind.clone(), name.clone()), key.clone());
        self.objects.insert(key, object);
        let mut touched: Vec<AppKey> = before.iter().cloned().collect();
        if !touched.contains(&app) {
            touched.push(app.clone());
        }
        if before.as_ref() != Some(&app) {
            for moved in self.reindex_owned(&namespace, &kind, &name) {
                if !touched.contains(&moved) {
                    touched.push(moved);
                }
            }
        }
        touched
    }

    /// Index again the objects and pods an object (kind, name) owns, after
    /// its app changed; returns the apps they left and joined.
    fn reindex_owned(&mut self, namespace: &str, kind: &str, name: &str) -> Vec<AppKey> {
        let owns = |owner: Option<(&str, &str)>| owner == Some((kind, name));
        let objects: Vec<resources::Generic> = self
            .objects
            .values()
            .filter(|o| o.namespace == namespace)
            .filter(|o| owns(o.owner.as_ref().map(|(k, n)| (k.as_str(), n.as_str()))))
            .cloned()
            .collect();
        let pods: Vec<Arc<str>> = self
            .pods
            .in_namespace(namespace)
            .filter(|p| owns(p.owner()))
            .map(|p| p.key().1)
            .collect();
        let mut touched = Vec::new();
        for object in objects {
            touched.extend(self.put_object(object));
        }
        for name in pods {
            if let Some((app, pod)) = self.unindex_pod(namespace, &name) {
                touched.push(app);
                touched.extend(self.put_record(pod));
            }
        }
        touched
    }

    /// Take a stored object out of the index (it stays stored).
    fn unindex_object(&mut self, key: &resources::ObjectKey) -> Option<AppKey> {
        let app = self.object_apps.remove(key)?;
        let node = self.objects.get(key).and_then(|o| o.node.as_deref());
        self.on_nodes.remove(node, &app);
        self.unindex(&app, |m| {
            m.objects.remove(key);
        });
        Some(app)
    }

    /// Forget an object; returns the app it was in.
    pub(crate) fn remove_object(&mut self, key: &resources::ObjectKey) -> Vec<AppKey> {
        let app = self.unindex_object(key);
        if let Some(o) = self.objects.remove(key) {
            self.object_names.remove(&(o.namespace, o.kind, o.name));
        }
        app.into_iter().collect()
    }

    /// Forget the objects of a resource a full list did not name.
    pub(crate) fn retain_objects(&mut self, resource: &str, listed: &BTreeSet<(String, String)>) {
        let gone: Vec<resources::ObjectKey> = self
            .objects
            .keys()
            .filter(|(r, namespace, name)| {
                r == resource && !listed.contains(&(namespace.clone(), name.clone()))
            })
            .cloned()
            .collect();
        for key in gone {
            self.remove_object(&key);
        }
    }

    /// Every application with its tasks (newest first) and the nodes its
    /// pods and objects are on, by the snapshot's grouping. Applications
    /// named only by a task, or `known` from before, exist too, with
    /// nothing in them. `now` stamps the observations.
    pub fn apps(
        &self,
        tasks: &[types::Task],
        known: &[types::AppId],
        now: types::Timestamp,
    ) -> Vec<status::AppInput> {
        let mut groups: BTreeMap<AppKey, Vec<types::Task>> = self
            .index
            .keys()
            .map(|key| ((**key).clone(), Vec::new()))
            .collect();
        for id in known {
            groups.entry(key_of(id.clone())).or_default();
        }
        for t in tasks {
            groups
                .entry(key_of(t.app.clone()))
                .or_default()
                .push(t.clone());
        }
        groups
            .into_iter()
            .map(|(key, tasks)| {
                let (workloads, pods, exists) = self.members_of(&key);
                let around = Around {
                    tasks,
                    overrides: Vec::new(),
                };
                self.input(&key, &workloads, &pods, around, exists, now)
            })
            .collect()
    }
}

/// Every object of `kind` among the fixtures (real objects in unusual
/// states), each document of a file apart, with its file's path; the
/// `@now…` placeholders of times given one fixed time.
#[cfg(test)]
pub(crate) fn fixture_objects(kind: &str) -> Vec<(String, serde_json::Value)> {
    use serde::Deserialize;
    fn fix_times(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) if text.starts_with("@now") => {
                *text = "2026-12-04T10:00:00Z".into();
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(fix_times),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(fix_times),
            _ => {}
        }
    }
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/status/tests/fixtures");
    let mut objects = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            if let Ok(mut value) = serde_json::Value::deserialize(document)
                && value["kind"] == kind
            {
                fix_times(&mut value);
                objects.push((path.display().to_string(), value));
            }
        }
    }
    objects
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, app: &str) -> types::Pod {
        types::Pod {
            namespace: "shop".into(),
            name: name.into(),
            node: Some("n1".into()),
            phase: types::PodPhase::Running,
            reason: None,
            message: None,
            conditions: Vec::new(),
            restart_policy: types::RestartPolicy::Always,
            created_at: None,
            started_at: None,
            deleting_since: None,
            finalizers: Vec::new(),
            containers: Vec::new(),
            owner: None,
            labels: vec![types::KeyValue {
                key: "app.kubernetes.io/instance".into(),
                value: app.into(),
            }],
            ip: None,
            usage: None,
        }
    }

    fn key(name: &str) -> AppKey {
        ("shop".into(), name.into())
    }

    /// A virtual machine of an app, as the watch of a configured kind
    /// stores it.
    fn vm(name: &str, app: &str) -> resources::Generic {
        let object: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": "shop", "generation": 3,
                "uid": format!("uid-{name}"),
                "labels": {"app.kubernetes.io/instance": app}},
            "status": {"printableStatus": "Running", "observedGeneration": 2,
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let resource = resources::defaults().remove(0);
        resources::Generic::reduce(&resource, &object)
    }

    #[test]
    fn an_event_about_an_app_regards_its_workload_else_its_object() {
        let mut snapshot = Snapshot::default();
        let deployment: k8s_openapi::api::apps::v1::Deployment =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "shop", "uid": "d-1",
                    "labels": {"app.kubernetes.io/instance": "web"}},
                "spec": {"replicas": 1, "selector": {}, "template": {}}
            }))
            .unwrap();
        snapshot.put_workload_with_uid(
            reduce::deployment(&deployment),
            deployment.metadata.uid.clone(),
        );
        snapshot.put_pod(pod("web-1", "web"));
        snapshot.put_object(vm("web-vm", "web"));
        let web = snapshot.regarding(&key("web")).unwrap();
        assert_eq!(
            (web.api_version, web.kind, web.name, web.uid),
            (
                Some("apps/v1".into()),
                Some("Deployment".into()),
                Some("web".into()),
                Some("d-1".into())
            )
        );
        snapshot.put_object(vm("db-vm", "db"));
        let db = snapshot.regarding(&key("db")).unwrap();
        assert_eq!(
            (db.api_version, db.kind, db.uid),
            (
                Some("kubevirt.io/v1".into()),
                Some("VirtualMachine".into()),
                Some("uid-db-vm".into())
            )
        );
        snapshot.put_pod(pod("bare-1", "bare"));
        assert_eq!(snapshot.regarding(&key("bare")), None, "bare pods");
        // Gone, with its uid.
        snapshot.remove_workload(types::WorkloadKind::Deployment, "shop", "web");
        assert!(snapshot.workload_uids.is_empty());
        assert_eq!(
            snapshot.regarding(&key("web")).unwrap().kind.as_deref(),
            Some("VirtualMachine")
        );
    }

    #[test]
    fn an_apps_objects_reach_its_input_typed_and_encoded_alike() {
        let mut snapshot = Snapshot::default();
        snapshot.put_pod(pod("web-1", "web"));
        // The object joins an app that exists: it is to be derived again.
        assert_eq!(snapshot.put_object(vm("web-vm", "web")), [key("web")]);
        // An object alone makes an app of its own.
        assert_eq!(snapshot.put_object(vm("lone-vm", "lone")), [key("lone")]);
        assert!(snapshot.has_app(&key("lone")));

        let inputs = snapshot.inputs_for([&key("web")], 0);
        let objects = &inputs[0].app.objects;
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].api_version, "kubevirt.io/v1");
        assert_eq!(objects[0].kind, "VirtualMachine");
        assert_eq!(objects[0].phase.as_deref(), Some("Running"));
        assert_eq!(
            (objects[0].generation, objects[0].observed_generation),
            (Some(3), Some(2))
        );
        assert_eq!(objects[0].conditions[0].kind, "Ready");

        // The encoded batch carries the same, in the WIT's order.
        let mut encoded = Vec::new();
        snapshot
            .encode_inputs(&[key("web")], 0, |_| Around::default(), &mut encoded)
            .unwrap();
        let decoded: Vec<status::AppInput> = postcard::from_bytes(&encoded).unwrap();
        assert_eq!(decoded[0].app.objects, inputs[0].app.objects);

        // Gone from the cluster, gone from the input.
        let gone = vm("web-vm", "web").key();
        assert_eq!(snapshot.remove_object(&gone), [key("web")]);
        assert!(
            snapshot.inputs_for([&key("web")], 0)[0]
                .app
                .objects
                .is_empty()
        );
    }

    /// An object of a kind, owned by another (kind, name), with labels.
    fn owned(
        kind: &str,
        name: &str,
        owner: Option<(&str, &str)>,
        labels: serde_json::Value,
    ) -> resources::Generic {
        let owners: Vec<serde_json::Value> = owner
            .into_iter()
            .map(|(kind, name)| {
                serde_json::json!({"apiVersion": "kubevirt.io/v1", "kind": kind,
                    "name": name, "uid": "u", "controller": true})
            })
            .collect();
        let object: kube::core::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": "shop", "ownerReferences": owners,
                "labels": labels},
        }))
        .unwrap();
        let resource = resources::defaults()
            .into_iter()
            .find(|r| r.kind == kind)
            .unwrap();
        resources::Generic::reduce(&resource, &object)
    }

    #[test]
    fn pods_and_objects_follow_their_owner_chain_whatever_the_order_they_arrive_in() {
        let none = serde_json::json!({});
        let mut snapshot = Snapshot::grouped_by(Grouping::default());
        // The launcher pod first, unlabelled: its owner, the VMI, is not
        // known yet, so its app is named after it.
        let mut launcher = pod("virt-launcher-db-0-x", "ignored");
        launcher.labels.clear();
        launcher.owner = Some(types::Owner {
            kind: "VirtualMachineInstance".into(),
            name: "db-0".into(),
        });
        assert_eq!(snapshot.put_pod(launcher), [key("db-0")]);
        // The VMI, owned by VM db-0, owned by the pool db: unlabelled too.
        let vmi = || {
            owned(
                "VirtualMachineInstance",
                "db-0",
                Some(("VirtualMachine", "db-0")),
                none.clone(),
            )
        };
        assert_eq!(snapshot.put_object(vmi()), [key("db-0")]);
        let vm = owned(
            "VirtualMachine",
            "db-0",
            Some(("VirtualMachinePool", "db")),
            none.clone(),
        );
        let touched = snapshot.put_object(vm.clone());
        assert!(touched.contains(&key("db")), "{touched:?}");
        // The pool arrives last, labelled: the whole chain moves to its app.
        let label = serde_json::json!({"app.kubernetes.io/instance": "shopdb"});
        let pool = owned("VirtualMachinePool", "db", None, label);
        let touched = snapshot.put_object(pool.clone());
        assert!(
            touched.contains(&key("shopdb")) && touched.contains(&key("db")),
            "{touched:?}"
        );
        assert!(!snapshot.has_app(&key("db")) && !snapshot.has_app(&key("db-0")));
        let input = &snapshot.inputs_for([&key("shopdb")], 0)[0];
        let kinds: Vec<&str> = input.app.objects.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "VirtualMachine",
                "VirtualMachineInstance",
                "VirtualMachinePool"
            ]
        );
        assert_eq!(input.app.pods[0].name, "virt-launcher-db-0-x");
        assert_eq!(
            snapshot.app_of_pod_key(("shop", "virt-launcher-db-0-x")),
            Some(key("shopdb"))
        );
        // The same objects in another order land in the same app.
        let mut other = Snapshot::grouped_by(Grouping::default());
        other.put_object(pool);
        other.put_object(vm);
        other.put_object(vmi());
        assert!(other.has_app(&key("shopdb")) && !other.has_app(&key("db")));
    }

    #[test]
    fn the_index_follows_pods_between_apps_and_agrees_with_a_full_grouping() {
        let mut snapshot = Snapshot::grouped_by(Grouping::default());
        assert_eq!(snapshot.put_pod(pod("p1", "web")), [key("web")]);
        assert_eq!(snapshot.put_pod(pod("p2", "web")), [key("web")]);
        // A relabelled pod leaves one app and joins another.
        assert_eq!(snapshot.put_pod(pod("p2", "api")), [key("web"), key("api")]);
        assert_eq!(snapshot.apps_in_namespace("shop"), [key("api"), key("web")]);
        assert_eq!(snapshot.apps_on_node("n1"), [key("api"), key("web")].into());

        let keys: BTreeSet<AppKey> = [key("api"), key("web")].into();
        let incremental = snapshot.inputs_for(&keys, 0);
        let full = snapshot.apps(&[], &[], 0);
        let names = |inputs: &[status::AppInput]| -> Vec<(String, Vec<String>)> {
            inputs
                .iter()
                .map(|i| {
                    (
                        i.app.id.name.clone(),
                        i.app.pods.iter().map(|p| p.name.clone()).collect(),
                    )
                })
                .collect()
        };
        assert_eq!(names(&incremental), names(&full));
        assert_eq!(
            names(&full),
            [
                ("api".into(), vec!["p2".into()]),
                ("web".into(), vec!["p1".into()])
            ]
        );

        assert_eq!(snapshot.remove_pod("shop", "p1"), [key("web")]);
        assert_eq!(snapshot.apps_in_namespace("shop"), [key("api")]);
        snapshot.clear_pods();
        assert!(snapshot.apps_in_namespace("shop").is_empty());
    }

    #[test]
    fn the_apps_on_a_node_follow_pods_and_objects_as_they_move_and_go() {
        let mut snapshot = Snapshot::grouped_by(Grouping::default());
        snapshot.put_pod(pod("p1", "web"));
        snapshot.put_pod(pod("p2", "web"));
        let mut moved = pod("p3", "api");
        moved.node = Some("n2".into());
        snapshot.put_pod(moved.clone());
        assert_eq!(snapshot.apps_on_node("n1"), [key("web")].into());
        assert_eq!(snapshot.apps_on_node("n2"), [key("api")].into());
        // One of web's two pods leaves n1: web is still there.
        moved = pod("p1", "web");
        moved.node = Some("n2".into());
        snapshot.put_pod(moved);
        assert_eq!(snapshot.apps_on_node("n1"), [key("web")].into());
        assert_eq!(snapshot.apps_on_node("n2"), [key("api"), key("web")].into());
        // The pods on a node: those of its apps that are on it.
        let on = |snapshot: &Snapshot, node: &str| -> Vec<String> {
            let mut names: Vec<String> = snapshot
                .pods_on_node(node)
                .map(|p| p.name().to_string())
                .collect();
            names.sort();
            names
        };
        assert_eq!(on(&snapshot, "n1"), ["p2"]);
        assert_eq!(on(&snapshot, "n2"), ["p1", "p3"]);
        snapshot.remove_pod("shop", "p2");
        assert!(on(&snapshot, "n1").is_empty());
        assert!(snapshot.apps_on_node("n1").is_empty());
        // A pod not yet scheduled is on no node.
        let mut pending = pod("p4", "db");
        pending.node = None;
        snapshot.put_pod(pending);
        assert_eq!(snapshot.apps_on_node("n2"), [key("api"), key("web")].into());
        // An object on a node counts, until it goes.
        let mut machine = vm("db-0", "db");
        machine.node = Some("n3".into());
        let object = machine.key();
        snapshot.put_object(machine);
        assert_eq!(snapshot.apps_on_node("n3"), [key("db")].into());
        snapshot.remove_object(&object);
        assert!(snapshot.apps_on_node("n3").is_empty());
        snapshot.clear_pods();
        assert!(snapshot.on_nodes.0.is_empty(), "{:?}", snapshot.on_nodes);
    }

    fn node(ready: types::ConditionStatus, heartbeat: types::Timestamp) -> types::Node {
        types::Node {
            name: "n1".into(),
            ready,
            ready_since: Some(0),
            last_heartbeat: Some(heartbeat),
            unschedulable: false,
            taints: Vec::new(),
            conditions: Vec::new(),
            labels: Vec::new(),
            address: None,
            allocatable: types::Resources {
                cpu_millis: None,
                memory_bytes: None,
            },
        }
    }

    #[test]
    fn a_heartbeat_renewed_in_time_on_a_ready_node_is_no_news() {
        use types::ConditionStatus::{True, Unknown};
        let mut snapshot = Snapshot::grouped_by(Grouping::default());
        assert!(snapshot.put_node(node(True, 0)), "a new node is news");
        // Leases renewed every 10 s: stored, but nothing to derive.
        assert!(!snapshot.put_node_lease("n1", 10_000));
        assert!(!snapshot.put_node_lease("n1", 20_000));
        assert_eq!(snapshot.nodes["n1"].last_heartbeat, Some(20_000));
        // The node's status posted again with only a new heartbeat.
        assert!(!snapshot.put_node(node(True, 25_000)));
        // Anything else that changes is news.
        let mut cordoned = node(True, 25_000);
        cordoned.unschedulable = true;
        assert!(snapshot.put_node(cordoned));
        // Heard from again after a long silence: news.
        assert!(snapshot.put_node_lease("n1", 25_000 + HEARTBEAT_NEWS_AFTER));
        // Renewals of a node that is not ready are news.
        assert!(snapshot.put_node(node(Unknown, 70_000)));
        assert!(snapshot.put_node_lease("n1", 71_000));
        // A Lease of a node not (yet) seen is kept for when it comes.
        assert!(!snapshot.put_node_lease("n9", 5_000));
        assert!(snapshot.put_node(types::Node {
            name: "n9".into(),
            ..node(True, 1_000)
        }));
        assert_eq!(snapshot.nodes["n9"].last_heartbeat, Some(5_000));
    }
}
