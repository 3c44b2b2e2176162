//! What the delivery controllers read: each resource they follow, watched
//! from the API server into a reflector store, and whether that store can
//! be trusted. A store is trusted once its first list is in and while its
//! watch runs; after a failed list or watch it is not, until the watch is
//! back (a new list, or no failure for a while after the last one: the
//! watch is retried well within that). A resource the server does not
//! serve (its CRD not installed) knowably has no objects.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, DynamicObject};
use serde::de::DeserializeOwned;

use super::crd::ServerResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, Event};
use tokio_util::task::AbortOnDropHandle;

/// The longest wait between two tries of a failed list or watch.
const RETRY_AT_MOST: Duration = Duration::from_secs(4);

/// How long after its last failure a watch that failed no more is trusted
/// again: longer than the longest wait between two tries, so that a watch
/// that still fails fails again within it.
const HEALED_AFTER: Duration = Duration::from_secs(10);

/// A store's objects could not be read: what it governs is held (nothing
/// is released, deleted or started on a guess) and asked again later.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the {what} could not be read, so nothing they govern moves: {why}")]
pub struct Unread {
    pub what: &'static str,
    pub why: String,
}

/// Where a watched resource's reading stands.
#[derive(Debug, Clone)]
enum Reading {
    /// Its first list is not in yet.
    Starting,
    /// Listed, and watched since.
    Read,
    /// The server does not serve it: none can exist.
    NotServed,
    /// Its list or watch failed, last at `at`.
    Failed { at: Instant, why: String },
}

/// What a watched resource's objects do: an object applied or deleted,
/// or every object of a new list (`None`).
pub type OnChange<K> = Box<dyn Fn(Option<&K>) + Send + Sync>;

/// What a store keeps of an object of no type of its own beside its
/// metadata (an object of a type keeps what its type has).
#[derive(Debug, Clone, Copy)]
pub enum Keep {
    /// Everything.
    Whole,
    /// Only these fields of its status (a `conditions` field only its
    /// `Ready` condition): a machine's store keeps what its readiness and
    /// its node are read from, not its spec, a tenth of its size.
    Status(&'static [&'static str]),
}

/// What a store keeps of an object: its metadata slimmed, and of the rest
/// what its kind says.
pub trait Kept:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
where
    Self::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    /// How its kind is kept.
    type Keeping: Copy + Send + Sync + 'static;
    fn keep(&mut self, keeping: Self::Keeping);
}

impl Kept for DynamicObject {
    type Keeping = Keep;
    fn keep(&mut self, keeping: Keep) {
        slim(self, keeping);
    }
}

impl Kept for ServerResource {
    type Keeping = ();
    fn keep(&mut self, (): ()) {
        slim_metadata(&mut self.metadata);
    }
}

/// One resource, watched into a store.
#[derive(Clone)]
pub struct Watched<K: Kept = DynamicObject>
where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    pub store: Store<K>,
    /// What names its kind (for an object of no type, its API resource).
    pub resource: K::DynamicType,
    what: &'static str,
    reading: Arc<Mutex<Reading>>,
    /// Its objects' names by the set they are labelled with.
    by_set: BySet,
    /// The watch: it ends when the last copy of this is dropped.
    _watching: Arc<AbortOnDropHandle<()>>,
}

impl<K: Kept> Watched<K>
where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    /// Watch `api`'s objects of `resource` (`what` names them in errors)
    /// for as long as this (or a copy) is kept, telling `on_change` of each
    /// change once the store has it.
    pub fn start(
        api: Api<K>,
        (resource, keep): (&K::DynamicType, K::Keeping),
        what: &'static str,
        on_change: OnChange<K>,
    ) -> Self {
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let reading = Arc::new(Mutex::new(Reading::Starting));
        let retry = Retry::new();
        let succeeded = retry.clone();
        let by_set = BySet::default();
        let indexing = by_set.clone();
        let events = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default())
                .backoff(retry.clone())
                .modify(move |object| object.keep(keep))
                // Indexed before the store has it: a name the store does
                // not have yet is passed over, never an object it has
                // missed.
                .map(move |event| {
                    if let Ok(event) = &event {
                        indexing.index(event);
                    }
                    event
                }),
        );
        let told = Arc::clone(&reading);
        let watching = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let set = |now: Reading| {
                    *told.lock().unwrap_or_else(|p| p.into_inner()) = now;
                };
                match event {
                    Ok(Event::Apply(object) | Event::Delete(object)) => {
                        set(Reading::Read);
                        succeeded.succeeded();
                        on_change(Some(&object));
                    }
                    Ok(Event::InitDone) => {
                        set(Reading::Read);
                        succeeded.succeeded();
                        on_change(None);
                    }
                    Ok(Event::Init | Event::InitApply(_)) => {}
                    Err(error) => {
                        let not_served = matches!(
                            &error,
                            watcher::Error::InitialListFailed(kube::Error::Api(status))
                                if status.code == 404
                        );
                        set(match not_served {
                            true => Reading::NotServed,
                            false => Reading::Failed {
                                at: Instant::now(),
                                why: error.to_string(),
                            },
                        });
                    }
                }
            }
        });
        Self {
            store,
            resource: resource.clone(),
            what,
            reading,
            by_set,
            _watching: Arc::new(AbortOnDropHandle::new(watching)),
        }
    }

    /// The objects of `namespace` labelled as the set `set`'s, when the
    /// store can be trusted: looked up by name, not found by going through
    /// every object (a set's reconcile reads its own among 10 000).
    pub fn of_set(&self, namespace: &str, set: &str) -> Result<Vec<Arc<K>>, Unread> {
        self.check()?;
        let names = self.by_set.names(namespace, set);
        Ok(names
            .iter()
            .filter_map(|name| self.store.get(&self.reference(namespace, name)))
            .filter(|object| set_of(&**object) == Some(set))
            .collect())
    }

    /// Whether the store can be trusted, and why not.
    pub fn check(&self) -> Result<(), Unread> {
        let reading = self
            .reading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let unread = |why: String| {
            Err(Unread {
                what: self.what,
                why,
            })
        };
        match reading {
            Reading::Read | Reading::NotServed => Ok(()),
            Reading::Starting => unread("not listed yet".into()),
            Reading::Failed { at, .. } if at.elapsed() >= HEALED_AFTER && self.listed() => Ok(()),
            Reading::Failed { why, .. } => unread(why),
        }
    }

    /// Whether a first list is in.
    fn listed(&self) -> bool {
        futures_util::FutureExt::now_or_never(self.store.wait_until_ready()).is_some()
    }

    /// The objects the store has that `keep` keeps, when it can be trusted.
    pub fn filtered(&self, keep: impl Fn(&K) -> bool) -> Result<Vec<Arc<K>>, Unread> {
        self.check()?;
        Ok(self.store.state_filter(|o| keep(o)))
    }

    /// The object named `name` in `namespace`, when the store can be
    /// trusted.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, Unread> {
        self.check()?;
        Ok(self.store.get(&self.reference(namespace, name)))
    }

    /// A reference to the object named `name` in `namespace`.
    pub fn reference(&self, namespace: &str, name: &str) -> reflector::ObjectRef<K> {
        reflector::ObjectRef::new_with(name, self.resource.clone()).within(namespace)
    }
}

/// The set a machine or Server belongs to, by its label.
pub fn set_of<K: Resource>(object: &K) -> Option<&str> {
    object
        .meta()
        .labels
        .as_ref()?
        .get(super::instance::SET_LABEL)
        .map(String::as_str)
}

/// The names of a store's objects by the namespace and set they are
/// labelled with. A name is added when its object is listed or applied and
/// taken away when it is deleted; one whose object moved to another set
/// stays, and is passed over by what reads it (each object read is checked
/// against its label).
#[derive(Clone, Default)]
struct BySet(Arc<Mutex<Names>>);

/// Names by namespace and set.
type Names = std::collections::HashMap<(String, String), std::collections::BTreeSet<String>>;

impl BySet {
    fn index<K: Resource>(&self, event: &Event<K>) {
        let (object, deleted) = match event {
            Event::Apply(object) | Event::InitApply(object) => (object, false),
            Event::Delete(object) => (object, true),
            Event::Init | Event::InitDone => return,
        };
        let Some(set) = set_of(object) else { return };
        let meta = object.meta();
        let key = (meta.namespace.clone().unwrap_or_default(), set.to_string());
        let name = meta.name.clone().unwrap_or_default();
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match deleted {
            false => {
                all.entry(key).or_default().insert(name);
            }
            true => {
                if let Some(names) = all.get_mut(&key) {
                    names.remove(&name);
                    if names.is_empty() {
                        all.remove(&key);
                    }
                }
            }
        }
    }

    fn names(&self, namespace: &str, set: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_string(), set.to_string()))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The field manager of the Servers' statuses, their controller's.
pub const STATUS_MANAGER: &str = "verdict-delivery";

/// An object as a store keeps it: what the controllers read. Of the field
/// managers only the last to write a status other than its controller is
/// kept, by name and time (who to name when a status is put back), and no
/// last-applied configuration; of the rest what `keep` says.
fn slim(object: &mut DynamicObject, keep: Keep) {
    slim_metadata(&mut object.metadata);
    if let Keep::Status(fields) = keep {
        let mut kept = serde_json::Map::new();
        if let Some(status) = object
            .data
            .get_mut("status")
            .and_then(|s| s.as_object_mut())
        {
            for field in fields {
                let Some(mut value) = status.remove(*field) else {
                    continue;
                };
                if *field == "conditions"
                    && let Some(conditions) = value.as_array_mut()
                {
                    conditions.retain(|c| c["type"] == "Ready");
                    for condition in conditions.iter_mut().filter_map(|c| c.as_object_mut()) {
                        condition.retain(|k, _| k == "type" || k == "status");
                    }
                }
                kept.insert((*field).to_string(), value);
            }
        }
        object.data = serde_json::json!({ "status": kept });
    }
}

/// An object's metadata as a store keeps it: of the field managers only
/// the last to write a status other than its controller, by name and time
/// (who to name when a status is put back), and no last-applied
/// configuration.
fn slim_metadata(metadata: &mut ObjectMeta) {
    let managers = metadata.managed_fields.take().unwrap_or_default();
    let foreign = managers
        .into_iter()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .filter(|f| f.manager.as_deref() != Some(STATUS_MANAGER))
        .max_by_key(|f| f.time.as_ref().map(|t| t.0));
    metadata.managed_fields = foreign.map(|mut f| {
        f.fields_v1 = None;
        vec![f]
    });
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// The wait between tries of a failed list or watch: from a quarter of a
/// second, doubling, to [`RETRY_AT_MOST`]; back to the start only once a
/// list or watch succeeds (a list that starts and fails again, as one
/// refused for a permission taken away, is no success: the stream's own
/// reset on each event it passes, the start of a list among them, would
/// try a refused list every quarter second).
#[derive(Clone)]
struct Retry {
    next: Arc<Mutex<Duration>>,
}

/// The first wait of a failed list or watch.
const RETRY_FIRST: Duration = Duration::from_millis(250);

impl Retry {
    fn new() -> Self {
        Self {
            next: Arc::new(Mutex::new(RETRY_FIRST)),
        }
    }

    /// A list or watch succeeded: the next failure waits the least again.
    fn succeeded(&self) {
        *self.next.lock().unwrap_or_else(|p| p.into_inner()) = RETRY_FIRST;
    }
}

impl Iterator for Retry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let wait = *next;
        *next = (wait * 2).min(RETRY_AT_MOST);
        Some(wait)
    }
}

impl Backoff for Retry {
    /// Not on the stream's word: see [`Retry::succeeded`].
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sets_objects_are_indexed_by_name_as_they_are_listed_applied_and_deleted() {
        let object = |name: &str, set: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": name, "namespace": "shop",
                    "labels": {super::super::instance::SET_LABEL: set}},
            }))
            .unwrap()
        };
        let index = BySet::default();
        index.index(&Event::InitApply(object("web-0", "web")));
        index.index(&Event::Apply(object("web-1", "web")));
        index.index(&Event::Apply(object("api-0", "api")));
        assert_eq!(index.names("shop", "web"), ["web-0", "web-1"]);
        assert_eq!(index.names("other", "web"), Vec::<String>::new());
        index.index(&Event::Delete(object("web-0", "web")));
        assert_eq!(index.names("shop", "web"), ["web-1"]);
        // Relabelled to another set: found there, and passed over by what
        // reads the old one (each object is checked against its label).
        index.index(&Event::Apply(object("web-1", "api")));
        assert_eq!(index.names("shop", "api"), ["api-0", "web-1"]);
        index.index(&Event::Delete(object("web-1", "api")));
        index.index(&Event::Delete(object("api-0", "api")));
        assert!(
            index
                .0
                .lock()
                .unwrap()
                .get(&("shop".into(), "api".into()))
                .is_none()
        );
    }

    #[test]
    fn a_store_keeps_of_the_field_managers_only_the_last_other_status_writer() {
        let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "verdict.dev/v1alpha1", "kind": "Server",
            "metadata": {
                "name": "web-0", "namespace": "shop",
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"huge\": true}",
                    "verdict.dev/retry": "{}",
                },
                "managedFields": [
                    {"manager": "verdict", "operation": "Update", "time": "2026-01-01T00:00:00Z",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
                    {"manager": STATUS_MANAGER, "operation": "Update", "subresource": "status",
                     "time": "2026-01-01T00:00:09Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
                    {"manager": "kubectl-patch", "operation": "Update", "subresource": "status",
                     "time": "2026-01-01T00:00:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
                    {"manager": "older-script", "operation": "Update", "subresource": "status",
                     "time": "2026-01-01T00:00:01Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
                ],
            },
        }))
        .unwrap();
        slim(&mut object, Keep::Whole);
        let kept = object.metadata.managed_fields.clone().unwrap();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].manager.as_deref(), Some("kubectl-patch"));
        assert!(kept[0].fields_v1.is_none());
        let annotations = object.metadata.annotations.clone().unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["verdict.dev/retry"]
        );
    }

    #[test]
    fn a_machines_store_keeps_what_its_state_and_node_are_read_from() {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../plugins/status/tests/fixtures");
        let read = |file: &str| -> DynamicObject {
            let text = std::fs::read_to_string(fixtures.join(file)).unwrap();
            serde_yaml_ng::from_str(&text).unwrap()
        };
        for file in [
            "argocd__vm-healthy-ready.yaml",
            "argocd__vm-progressing-starting.yaml",
            "argocd__vm-suspended-stopped.yaml",
            "argocd__vm-progressing-nostatus.yaml",
        ] {
            let whole = read(file);
            let mut kept = whole.clone();
            slim(&mut kept, Keep::Status(&["printableStatus", "conditions"]));
            let value = |o: &DynamicObject| serde_json::to_value(o).unwrap();
            assert_eq!(
                crate::lifecycle::instance::machine_of(&value(&kept)),
                crate::lifecycle::instance::machine_of(&value(&whole)),
                "{file}"
            );
            assert!(kept.data.get("spec").is_none(), "{file}");
            assert_eq!(kept.metadata, whole.metadata, "{file}");
            let size = |o: &DynamicObject| serde_json::to_string(o).unwrap().len();
            assert!(size(&kept) < size(&whole), "{file}");
        }
        let mut vmi = read("argocd__vmi-healthy-ready.yaml");
        let node = vmi.data["status"]["nodeName"].clone();
        slim(&mut vmi, Keep::Status(&["nodeName"]));
        assert_eq!(vmi.data, serde_json::json!({"status": {"nodeName": node}}));
    }

    #[test]
    fn a_failed_list_waits_longer_each_time_until_one_succeeds() {
        let mut retry = Retry::new();
        let waits: Vec<u64> = (0..6)
            .map(|_| retry.next().unwrap().as_millis() as u64)
            .collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 4000, 4000]);
        // The stream resets on every event it passes, a list's start among
        // them: no shorter wait for that.
        Backoff::reset(&mut retry);
        assert_eq!(retry.next(), Some(RETRY_AT_MOST));
        // A list that succeeded: from the start again.
        retry.succeeded();
        assert_eq!(retry.next(), Some(RETRY_FIRST));
    }
}
