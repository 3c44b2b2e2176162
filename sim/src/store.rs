//! The simulator's state: objects by resource, namespace and name, one
//! resource version counter, and a bounded log of change events that watches
//! replay from. A watch from a version older than the log holds gets
//! `410 Gone`, as from a real API server after compaction.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::resources::Resource;

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watches see it.
#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub resource: &'static Resource,
    pub namespace: String,
    pub kind: EventType,
    pub object: Value,
}

/// Why an operation was refused, as a Kubernetes `Status`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct StoreError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl StoreError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
        }
    }

    pub fn not_found(resource: &Resource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!(
                "{}.{} \"{name}\" not found",
                resource.plural,
                group_or_core(resource)
            ),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// The `Status` object of this error.
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code,
        })
    }
}

/// What a write changes of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Everything: the simulator's own controllers and scenarios.
    Whole,
    /// A request to the object's URL.
    Object,
    /// A request to its `/status`.
    Status,
}

fn group_or_core(resource: &Resource) -> &'static str {
    if resource.group.is_empty() {
        "core"
    } else {
        resource.group
    }
}

type Key = (&'static str, &'static str, String, String);

fn key(resource: &'static Resource, namespace: &str, name: &str) -> Key {
    (
        resource.group,
        resource.plural,
        namespace.to_string(),
        name.to_string(),
    )
}

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    log: VecDeque<Arc<Event>>,
    /// Events at or below this version are no longer in the log.
    compacted: u64,
    uid: u64,
}

impl Inner {
    /// Take the next resource version and stamp it on `object`.
    fn stamp(&mut self, object: &mut Value) -> u64 {
        self.rv += 1;
        meta(object).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.rv
    }
}

/// Objects, versions and the change log.
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<Event>>,
    log_capacity: usize,
    /// Resources defined by the `CustomResourceDefinition`s created here.
    custom: Mutex<Vec<&'static Resource>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

fn now_text() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn meta(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata was made an object")
}

fn name_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/name").and_then(Value::as_str)
}

fn finalizers(object: &Value) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            let map = target.as_object_mut().expect("made an object above");
            for (key, value) in fields {
                if value.is_null() {
                    map.remove(key);
                } else {
                    merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        other => *target = other.clone(),
    }
}

impl Store {
    pub fn new(log_capacity: usize) -> Self {
        // The channel keeps the last events it sent until they are
        // overwritten, so it is sized to the log: more would hold memory the
        // log has let go of. A watch that falls further behind ends, and
        // resumes from the log, as from a real API server.
        let (events, _) = broadcast::channel(log_capacity.clamp(1024, 4096));
        Self {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                log: VecDeque::new(),
                compacted: 0,
                uid: 0,
            }),
            events,
            log_capacity,
            custom: Mutex::new(Vec::new()),
        }
    }

    fn custom(&self) -> std::sync::MutexGuard<'_, Vec<&'static Resource>> {
        self.custom
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every resource served: the built-in ones, then the defined ones.
    pub fn resources(&self) -> Vec<&'static Resource> {
        crate::resources::RESOURCES
            .iter()
            .chain(self.custom().iter().copied())
            .collect()
    }

    /// The served resource at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
        crate::resources::find_among(&self.resources(), group, version, plural)
    }

    /// The served resource of a kind, by apiVersion and kind.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&'static Resource> {
        crate::resources::by_kind_among(&self.resources(), api_version, kind)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Subscribe to live events.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    /// The current resource version.
    pub fn version(&self) -> u64 {
        self.lock().rv
    }

    fn record(
        &self,
        inner: &mut Inner,
        resource: &'static Resource,
        namespace: &str,
        kind: EventType,
        object: Value,
    ) {
        let event = Arc::new(Event {
            rv: inner.rv,
            resource,
            namespace: namespace.to_string(),
            kind,
            object,
        });
        inner.log.push_back(Arc::clone(&event));
        while inner.log.len() > self.log_capacity {
            if let Some(old) = inner.log.pop_front() {
                inner.compacted = old.rv;
            }
        }
        // No subscriber is fine: nobody watches.
        let _ = self.events.send(event);
    }

    /// Keep an object under its key and tell the watches.
    fn store_and_record(
        &self,
        inner: &mut Inner,
        k: Key,
        resource: &'static Resource,
        namespace: &str,
        kind: EventType,
        object: &Value,
    ) {
        inner.objects.insert(k, object.clone());
        self.record(inner, resource, namespace, kind, object.clone());
    }

    /// Objects of a resource, in a namespace or all; with the list's version.
    pub fn list(&self, resource: &'static Resource, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|((g, p, ns, _), _)| {
                *g == resource.group && *p == resource.plural && namespace.is_none_or(|n| n == ns)
            })
            .map(|(_, v)| v.clone())
            .collect();
        (items, inner.rv)
    }

    /// One page of a list: objects of the resource after the key `after`
    /// (namespace, name) that pass `keep`, at most `limit`; with the key
    /// to continue from when more remain.
    pub fn list_page(
        &self,
        resource: &'static Resource,
        namespace: Option<&str>,
        after: Option<(String, String)>,
        limit: usize,
        keep: impl Fn(&Value) -> bool,
    ) -> (Vec<Value>, Option<(String, String)>, u64) {
        use std::ops::Bound;
        let inner = self.lock();
        let start = match after {
            Some((ns, name)) => Bound::Excluded((resource.group, resource.plural, ns, name)),
            None => Bound::Included((
                resource.group,
                resource.plural,
                String::new(),
                String::new(),
            )),
        };
        let mut items = Vec::new();
        let mut next = None;
        for ((g, p, ns, name), object) in inner.objects.range((start, Bound::Unbounded)) {
            if *g != resource.group || *p != resource.plural {
                break;
            }
            if namespace.is_some_and(|n| n != ns) || !keep(object) {
                continue;
            }
            if items.len() == limit {
                next = Some((ns.clone(), name.clone()));
                break;
            }
            items.push(object.clone());
        }
        // The continue key is the last item returned, so the next page
        // starts after it.
        let next = next.and_then(|_| {
            items.last().map(|o| {
                (
                    o.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    o.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                )
            })
        });
        (items, next, inner.rv)
    }

    pub fn get(
        &self,
        resource: &'static Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, StoreError> {
        self.lock()
            .objects
            .get(&key(resource, namespace, name))
            .cloned()
            .ok_or_else(|| StoreError::not_found(resource, name))
    }

    /// Events after `since` that the log still holds, or `410 Gone`.
    pub fn since(&self, since: u64) -> Result<Vec<Arc<Event>>, StoreError> {
        let inner = self.lock();
        if since < inner.compacted {
            return Err(StoreError::gone(format!(
                "too old resource version: {since} ({})",
                inner.compacted + 1
            )));
        }
        Ok(inner.log.iter().filter(|e| e.rv > since).cloned().collect())
    }

    /// Forget the event log, as compaction does: watches from any version
    /// before now get `410 Gone`.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.log.clear();
        inner.compacted = inner.rv;
    }

    /// Create an object; `AlreadyExists` if it does.
    pub fn create(
        &self,
        resource: &'static Resource,
        namespace: &str,
        mut object: Value,
    ) -> Result<Value, StoreError> {
        let name = name_of(&object)
            .ok_or_else(|| StoreError::bad_request("metadata.name is required"))?
            .to_string();
        let namespace = if resource.namespaced { namespace } else { "" };
        let mut inner = self.lock();
        let k = key(resource, namespace, &name);
        if inner.objects.contains_key(&k) {
            return Err(StoreError::new(
                409,
                "AlreadyExists",
                format!(
                    "{}.{} \"{name}\" already exists",
                    resource.plural,
                    group_or_core(resource)
                ),
            ));
        }
        if resource.namespaced {
            let ns_exists = inner
                .objects
                .keys()
                .any(|(g, p, _, n)| g.is_empty() && *p == "namespaces" && n == namespace);
            if !ns_exists {
                return Err(StoreError::new(
                    404,
                    "NotFound",
                    format!("namespaces \"{namespace}\" not found"),
                ));
            }
        }
        if resource.kind == "CustomResourceDefinition" {
            let defined = crate::resources::define(&object).map_err(|message| {
                StoreError::new(
                    422,
                    "Invalid",
                    format!("CustomResourceDefinition {name}: {message}"),
                )
            })?;
            let mut custom = self.custom();
            for r in defined {
                if crate::resources::find_among(&custom, r.group, r.version, r.plural).is_none() {
                    custom.push(r);
                }
            }
        }
        inner.stamp(&mut object);
        inner.uid += 1;
        let uid = format!("00000000-0000-4000-8000-{:012x}", inner.uid);
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind);
        let m = meta(&mut object);
        m.insert("uid".into(), json!(uid));
        m.entry("creationTimestamp")
            .or_insert_with(|| json!(now_text()));
        m.entry("generation").or_insert(json!(1));
        if resource.namespaced {
            m.insert("namespace".into(), json!(namespace));
        }
        self.store_and_record(
            &mut inner,
            k,
            resource,
            namespace,
            EventType::Added,
            &object,
        );
        Ok(object)
    }

    /// Replace an object. A `resourceVersion` in the new object must match
    /// the stored one (`Conflict` otherwise). Removing the last finalizer of
    /// an object being deleted deletes it.
    pub fn replace(
        &self,
        resource: &'static Resource,
        namespace: &str,
        name: &str,
        object: Value,
    ) -> Result<Value, StoreError> {
        self.write(resource, namespace, name, object, Part::Whole)
    }

    /// Replace the part of an object a request writes: of a resource whose
    /// status is a subresource, a write of the object keeps the stored
    /// status and a write of its status keeps everything else, as an API
    /// server does.
    pub fn write(
        &self,
        resource: &'static Resource,
        namespace: &str,
        name: &str,
        mut object: Value,
        part: Part,
    ) -> Result<Value, StoreError> {
        let namespace = if resource.namespaced { namespace } else { "" };
        let mut inner = self.lock();
        let k = key(resource, namespace, name);
        let current = inner
            .objects
            .get(&k)
            .cloned()
            .ok_or_else(|| StoreError::not_found(resource, name))?;
        if let Some(expected) = object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            && Some(expected)
                != current
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
        {
            return Err(StoreError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    resource.plural,
                    group_or_core(resource)
                ),
            ));
        }
        if name_of(&object).is_some_and(|n| n != name) {
            return Err(StoreError::bad_request(
                "the name in the body does not match the URL",
            ));
        }
        if resource.status_subresource {
            match part {
                Part::Whole => {}
                Part::Object => match current.get("status") {
                    Some(status) => object["status"] = status.clone(),
                    None => {
                        object.as_object_mut().map(|o| o.remove("status"));
                    }
                },
                Part::Status => {
                    let status = object.get("status").cloned();
                    let version = object.pointer("/metadata/resourceVersion").cloned();
                    object = current.clone();
                    match status {
                        Some(status) => object["status"] = status,
                        None => {
                            object.as_object_mut().map(|o| o.remove("status"));
                        }
                    }
                    if let Some(version) = version {
                        meta(&mut object).insert("resourceVersion".into(), version);
                    }
                }
            }
        }
        inner.stamp(&mut object);
        object["apiVersion"] = json!(resource.api_version());
        object["kind"] = json!(resource.kind);
        // What the server owns is kept from the stored object.
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "namespace",
            "name",
        ] {
            match current.pointer(&format!("/metadata/{field}")) {
                Some(value) => {
                    meta(&mut object).insert(field.into(), value.clone());
                }
                None => {
                    meta(&mut object).remove(field);
                }
            }
        }
        let spec_changed = object.get("spec") != current.get("spec");
        let generation = current
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        meta(&mut object).insert(
            "generation".into(),
            json!(if spec_changed {
                generation + 1
            } else {
                generation
            }),
        );

        let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
        if deleting && !finalizers(&object) {
            inner.objects.remove(&k);
            self.record(
                &mut inner,
                resource,
                namespace,
                EventType::Deleted,
                object.clone(),
            );
            drop(inner);
            self.collect_dependents(&object);
        } else {
            self.store_and_record(
                &mut inner,
                k,
                resource,
                namespace,
                EventType::Modified,
                &object,
            );
        }
        Ok(object)
    }

    /// Apply a JSON merge patch.
    pub fn patch(
        &self,
        resource: &'static Resource,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, StoreError> {
        self.patch_part(resource, namespace, name, patch, Part::Whole)
    }

    /// Apply a JSON merge patch to the part of an object a request writes
    /// (see [`Store::write`]).
    pub fn patch_part(
        &self,
        resource: &'static Resource,
        namespace: &str,
        name: &str,
        patch: &Value,
        part: Part,
    ) -> Result<Value, StoreError> {
        let mut object = self.get(
            resource,
            if resource.namespaced { namespace } else { "" },
            name,
        )?;
        merge_patch(&mut object, patch);
        // A patch carrying no resourceVersion applies to whatever is stored.
        if patch.pointer("/metadata/resourceVersion").is_none() {
            meta(&mut object).remove("resourceVersion");
        }
        self.write(resource, namespace, name, object, part)
    }

    /// Apply a JSON patch (RFC 6902) to the part of an object a request
    /// writes, as the API server does: to the object stored when it is
    /// applied (tried again when it changed meanwhile); a `test` that fails
    /// refuses the whole patch.
    pub fn json_patch_part(
        &self,
        resource: &'static Resource,
        namespace: &str,
        name: &str,
        patch: &json_patch::Patch,
        part: Part,
    ) -> Result<Value, StoreError> {
        let namespace = if resource.namespaced { namespace } else { "" };
        let mut tries = 0;
        loop {
            let mut object = self.get(resource, namespace, name)?;
            // As the API server's JSON patch does, a test that a field is
            // null holds where the field is missing.
            let ops: Vec<json_patch::PatchOperation> = patch
                .0
                .iter()
                .filter(|op| match op {
                    json_patch::PatchOperation::Test(test) if test.value.is_null() => !object
                        .pointer(test.path.as_str())
                        .is_none_or(Value::is_null),
                    _ => true,
                })
                .cloned()
                .collect();
            json_patch::patch(&mut object, &ops).map_err(|error| {
                StoreError::new(
                    422,
                    "Invalid",
                    format!(
                        "the server rejected our request due to an error in our request: {error}"
                    ),
                )
            })?;
            match self.write(resource, namespace, name, object, part) {
                Err(conflict) if conflict.code == 409 && tries < 5 => tries += 1,
                written => return written,
            }
        }
    }

    /// Delete an object: with finalizers it only gets a deletion timestamp;
    /// a namespace takes everything in it along.
    pub fn delete(
        &self,
        resource: &'static Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, StoreError> {
        let namespace = if resource.namespaced { namespace } else { "" };
        let mut inner = self.lock();
        let k = key(resource, namespace, name);
        let mut object = inner
            .objects
            .get(&k)
            .cloned()
            .ok_or_else(|| StoreError::not_found(resource, name))?;
        if finalizers(&object) {
            if object.pointer("/metadata/deletionTimestamp").is_none() {
                inner.stamp(&mut object);
                meta(&mut object).insert("deletionTimestamp".into(), json!(now_text()));
                self.store_and_record(
                    &mut inner,
                    k,
                    resource,
                    namespace,
                    EventType::Modified,
                    &object,
                );
            }
            return Ok(object);
        }
        if resource.kind == "Namespace" {
            let inside: Vec<Key> = inner
                .objects
                .keys()
                .filter(|(_, _, ns, _)| ns == name)
                .cloned()
                .collect();
            for k in inside {
                if let Some(mut child) = inner.objects.remove(&k) {
                    inner.stamp(&mut child);
                    let child_resource = self.find(k.0, version_of(&child), k.1);
                    if let Some(r) = child_resource {
                        self.record(&mut inner, r, name, EventType::Deleted, child);
                    }
                }
            }
        }
        inner.objects.remove(&k);
        inner.stamp(&mut object);
        self.record(
            &mut inner,
            resource,
            namespace,
            EventType::Deleted,
            object.clone(),
        );
        drop(inner);
        self.collect_dependents(&object);
        Ok(object)
    }

    /// The garbage collector's part, in the background as by default: the
    /// objects `owner` (just gone) owned are deleted in turn, each held by
    /// its finalizers as any deletion is.
    fn collect_dependents(&self, owner: &Value) {
        let Some(uid) = owner.pointer("/metadata/uid").and_then(Value::as_str) else {
            return;
        };
        let namespace = owner
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let owned: Vec<Value> = self
            .lock()
            .objects
            .values()
            .filter(|o| {
                let in_reach = namespace.is_empty()
                    || o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace);
                in_reach
                    && o.pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(|owners| owners.iter().any(|r| r["uid"] == uid))
            })
            .cloned()
            .collect();
        for dependent in owned {
            let text = |pointer: &str| {
                dependent
                    .pointer(pointer)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            if let Some(resource) = self.by_kind(text("/apiVersion"), text("/kind")) {
                let _ = self.delete(
                    resource,
                    text("/metadata/namespace"),
                    text("/metadata/name"),
                );
            }
        }
    }
}

fn version_of(object: &Value) -> &str {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1");
    api_version.rsplit('/').next().unwrap_or("v1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    fn pods() -> &'static Resource {
        find("", "v1", "pods").unwrap()
    }

    fn namespaces() -> &'static Resource {
        find("", "v1", "namespaces").unwrap()
    }

    fn store_with_namespace() -> Store {
        let store = Store::new(100);
        store
            .create(namespaces(), "", json!({"metadata": {"name": "shop"}}))
            .unwrap();
        store
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut target, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(target, json!({"a": "z", "c": {"d": "e"}}));
    }

    #[test]
    fn versions_increase_and_conflicts_are_refused() {
        let store = store_with_namespace();
        let created = store
            .create(pods(), "shop", json!({"metadata": {"name": "a"}}))
            .unwrap();
        let rv = created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let mut stale = created.clone();
        store
            .patch(
                pods(),
                "shop",
                "a",
                &json!({"metadata": {"labels": {"x": "1"}}}),
            )
            .unwrap();
        stale["metadata"]["labels"] = json!({"x": "2"});
        let error = store.replace(pods(), "shop", "a", stale).unwrap_err();
        assert_eq!(error.code, 409);
        let now = store.get(pods(), "shop", "a").unwrap();
        assert!(
            now["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
                > rv.parse().unwrap()
        );
        assert_eq!(
            store
                .create(pods(), "shop", json!({"metadata": {"name": "a"}}))
                .unwrap_err()
                .code,
            409
        );
        assert_eq!(
            store
                .create(pods(), "nowhere", json!({"metadata": {"name": "b"}}))
                .unwrap_err()
                .code,
            404
        );
    }

    #[test]
    fn finalizers_hold_deletion_until_removed() {
        let store = store_with_namespace();
        store
            .create(
                pods(),
                "shop",
                json!({"metadata": {"name": "a", "finalizers": ["x/y"]}}),
            )
            .unwrap();
        let held = store.delete(pods(), "shop", "a").unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        assert!(store.get(pods(), "shop", "a").is_ok());
        store
            .patch(
                pods(),
                "shop",
                "a",
                &json!({"metadata": {"finalizers": null}}),
            )
            .unwrap();
        assert_eq!(store.get(pods(), "shop", "a").unwrap_err().code, 404);
    }

    #[test]
    fn a_json_patch_whose_test_fails_changes_nothing_and_one_that_holds_applies() {
        let store = store_with_namespace();
        store
            .create(
                pods(),
                "shop",
                json!({"metadata": {"name": "a", "finalizers": ["x/y", "z/w"]}}),
            )
            .unwrap();
        store.delete(pods(), "shop", "a").unwrap();
        let remove = |at: usize, expected: &str| -> json_patch::Patch {
            serde_json::from_value(json!([
                {"op": "test", "path": format!("/metadata/finalizers/{at}"), "value": expected},
                {"op": "remove", "path": format!("/metadata/finalizers/{at}")},
            ]))
            .unwrap()
        };
        // A test that a missing field is null holds.
        let none: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/labels", "value": null},
        ]))
        .unwrap();
        store
            .json_patch_part(pods(), "shop", "a", &none, Part::Whole)
            .unwrap();
        // Someone else's finalizer where ours was read: refused whole.
        let refused = store
            .json_patch_part(pods(), "shop", "a", &remove(0, "z/w"), Part::Whole)
            .unwrap_err();
        assert_eq!(refused.code, 422, "{}", refused.message);
        assert_eq!(
            store.get(pods(), "shop", "a").unwrap()["metadata"]["finalizers"],
            json!(["x/y", "z/w"])
        );
        store
            .json_patch_part(pods(), "shop", "a", &remove(1, "z/w"), Part::Whole)
            .unwrap();
        store
            .json_patch_part(pods(), "shop", "a", &remove(0, "x/y"), Part::Whole)
            .unwrap();
        // The last finalizer gone, the deleted object goes.
        assert_eq!(store.get(pods(), "shop", "a").unwrap_err().code, 404);
    }

    #[test]
    fn what_an_object_owned_goes_with_it_once_it_is_gone() {
        let store = store_with_namespace();
        let owner = store
            .create(
                pods(),
                "shop",
                json!({"metadata": {"name": "owner", "finalizers": ["x/y"]}}),
            )
            .unwrap();
        let owned_by =
            |uid: &Value| json!([{"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": uid}]);
        let uid = owner["metadata"]["uid"].clone();
        store
            .create(
                pods(),
                "shop",
                json!({"metadata": {"name": "plain", "ownerReferences": owned_by(&uid)}}),
            )
            .unwrap();
        store
            .create(
                pods(),
                "shop",
                json!({"metadata": {"name": "held", "finalizers": ["x/y"], "ownerReferences": owned_by(&uid)}}),
            )
            .unwrap();
        store
            .create(
                pods(),
                "shop",
                json!({"metadata": {"name": "other", "ownerReferences": owned_by(&json!("u-else"))}}),
            )
            .unwrap();
        // Held by its finalizer, the owner keeps what it owns.
        store.delete(pods(), "shop", "owner").unwrap();
        assert!(store.get(pods(), "shop", "plain").is_ok());
        // Gone, it takes them along: one at once, one held by its own
        // finalizer; another's stays.
        store
            .patch(
                pods(),
                "shop",
                "owner",
                &json!({"metadata": {"finalizers": null}}),
            )
            .unwrap();
        assert_eq!(store.get(pods(), "shop", "plain").unwrap_err().code, 404);
        let held = store.get(pods(), "shop", "held").unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
        assert!(store.get(pods(), "shop", "other").is_ok());
    }

    #[test]
    fn compaction_makes_old_versions_gone() {
        let store = store_with_namespace();
        let before = store.version();
        store
            .create(pods(), "shop", json!({"metadata": {"name": "a"}}))
            .unwrap();
        assert_eq!(store.since(before).unwrap().len(), 1);
        store.compact();
        assert_eq!(store.since(before).unwrap_err().code, 410);
        assert!(store.since(store.version()).unwrap().is_empty());
    }

    #[test]
    fn deleting_a_namespace_deletes_what_is_in_it() {
        let store = store_with_namespace();
        store
            .create(pods(), "shop", json!({"metadata": {"name": "a"}}))
            .unwrap();
        let mark = store.version();
        store.delete(namespaces(), "", "shop").unwrap();
        let events = store.since(mark).unwrap();
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| e.kind == EventType::Deleted));
        assert!(store.list(pods(), None).0.is_empty());
    }

    #[test]
    fn a_custom_resources_status_subresource_is_written_apart() {
        let store = store_with_namespace();
        let crds = find("apiextensions.k8s.io", "v1", "customresourcedefinitions").unwrap();
        let definition = json!({
            "metadata": {"name": "gadgets.example.dev"},
            "spec": {"group": "example.dev", "scope": "Namespaced",
                     "names": {"plural": "gadgets", "kind": "Gadget"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "subresources": {"status": {}}}]},
        });
        store.create(crds, "", definition).unwrap();
        let gadgets = store.find("example.dev", "v1", "gadgets").unwrap();
        assert!(gadgets.status_subresource);
        store
            .create(
                gadgets,
                "shop",
                json!({"metadata": {"name": "g"}, "spec": {"size": 1}}),
            )
            .unwrap();
        store
            .patch_part(
                gadgets,
                "shop",
                "g",
                &json!({"status": {"phase": "Ready"}}),
                Part::Status,
            )
            .unwrap();
        // A write of the object changes its spec and keeps the status.
        let mut whole = store.get(gadgets, "shop", "g").unwrap();
        whole["spec"]["size"] = json!(2);
        whole["status"] = json!({"phase": "Lost"});
        let written = store
            .write(gadgets, "shop", "g", whole, Part::Object)
            .unwrap();
        assert_eq!(written["spec"]["size"], 2);
        assert_eq!(written["status"]["phase"], "Ready");
        // A write of the status changes nothing else.
        let written = store
            .patch_part(
                gadgets,
                "shop",
                "g",
                &json!({"spec": {"size": 9}, "status": {"phase": "Done"}}),
                Part::Status,
            )
            .unwrap();
        assert_eq!(written["spec"]["size"], 2);
        assert_eq!(written["status"]["phase"], "Done");
        assert_eq!(written["metadata"]["generation"], 2);
    }
}
