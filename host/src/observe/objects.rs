//! Kubernetes objects read from files: what `kubectl get … -o json` or
//! `-o yaml` prints (a `List`, one object, or several YAML documents),
//! reduced into a [`Snapshot`]. A file that does not parse is an error that
//! names the file and the place in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::resources::{self, Generic, ResourceRef};
use super::{Grouping, Snapshot, reduce};
use crate::time::rfc3339;
use crate::wit::types;

/// A file that could not be read or understood.
#[derive(Debug)]
pub struct ObjectError {
    pub file: PathBuf,
    /// Where in the file, ending in `: ` (empty for the whole file).
    pub place: String,
    /// What is wrong, in the host's words (empty when the source says it).
    pub message: String,
    /// The reader's or parser's error.
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for ObjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}{}", self.file.display(), self.place, self.message)?;
        if let Some(source) = &self.source {
            if !self.message.is_empty() {
                f.write_str(": ")?;
            }
            write!(f, "{source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ObjectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// Objects read so far, and the kinds that were passed over.
#[derive(Debug)]
pub struct Objects {
    pub snapshot: Snapshot,
    /// The further kinds read as objects of their own ([`resources`]).
    pub resources: Vec<ResourceRef>,
    /// Kinds the host does not observe (Services, Jobs …), with counts.
    pub skipped: BTreeMap<String, usize>,
}

impl Default for Objects {
    /// Grouped by the default rule, with the default further kinds.
    fn default() -> Self {
        Self::new(Grouping::default(), resources::defaults())
    }
}

/// The value of an `@now`, `@now-5m` or `@now+1h` placeholder at `now`
/// (units `ms`, `s`, `m`, `h`, `d`), or `None` for any other text.
fn placeholder(text: &str, now: types::Timestamp) -> Option<types::Timestamp> {
    let rest = text.strip_prefix("@now")?;
    if rest.is_empty() {
        return Some(now);
    }
    let (sign, amount) = match (rest.strip_prefix('-'), rest.strip_prefix('+')) {
        (Some(amount), _) => (-1, amount),
        (_, Some(amount)) => (1, amount),
        _ => return None,
    };
    let digits = amount.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = match &amount[digits.len()..] {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    let n: i64 = digits.parse().ok()?;
    // Out of range is not a placeholder: the text stays as written.
    n.checked_mul(unit)?.checked_mul(sign)?.checked_add(now)
}

/// Replace every `@now…` placeholder string in `value` by the time it names.
pub(crate) fn substitute_now(value: &mut Value, now: types::Timestamp) {
    match value {
        Value::String(text) => {
            if let Some(at) = placeholder(text, now) {
                *text = rfc3339(at);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| substitute_now(v, now)),
        Value::Object(map) => map.values_mut().for_each(|v| substitute_now(v, now)),
        _ => {}
    }
}

/// The documents of a file: JSON (one value) or YAML (one or more).
pub fn documents(file: &Path, text: &str) -> Result<Vec<Value>, ObjectError> {
    let error = |place: String, message: &str, source: Box<dyn std::error::Error + Send + Sync>| {
        ObjectError {
            file: file.to_path_buf(),
            place,
            message: message.into(),
            source: Some(source),
        }
    };
    if text.trim_start().starts_with(['{', '[']) {
        return serde_json::from_str(text)
            .map(|v| vec![v])
            .map_err(|e| error(String::new(), "not valid JSON", e.into()));
    }
    let mut values = Vec::new();
    for (i, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document)
            .map_err(|e| error(format!("document {}: ", i + 1), "not valid YAML", e.into()))?;
        if !value.is_null() {
            values.push(value);
        }
    }
    Ok(values)
}

impl Objects {
    /// No objects yet; apps are to be grouped by `grouping`, and objects of
    /// the `resources` kinds read besides the built-in ones.
    pub fn new(grouping: Grouping, resources: Vec<ResourceRef>) -> Self {
        Self {
            snapshot: Snapshot::grouped_by(grouping),
            resources,
            skipped: BTreeMap::new(),
        }
    }

    /// Read files of objects, substituting `@now` placeholders.
    pub fn read(&mut self, paths: &[PathBuf], now: types::Timestamp) -> Result<(), ObjectError> {
        for path in paths {
            let text = std::fs::read_to_string(path).map_err(|e| ObjectError {
                file: path.clone(),
                place: String::new(),
                message: String::new(),
                source: Some(e.into()),
            })?;
            self.add_text(path, &text, now)?;
        }
        Ok(())
    }

    /// Add the objects of one file's text, substituting `@now` placeholders.
    pub fn add_text(
        &mut self,
        file: &Path,
        text: &str,
        now: types::Timestamp,
    ) -> Result<(), ObjectError> {
        for (i, mut document) in documents(file, text)?.into_iter().enumerate() {
            substitute_now(&mut document, now);
            self.add(file, &format!("document {}", i + 1), document)?;
        }
        Ok(())
    }

    /// Add one object (or a `List` of them); `place` says where it came from.
    pub fn add(&mut self, file: &Path, place: &str, object: Value) -> Result<(), ObjectError> {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_string);
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        // `kubectl get … -o json` of several kinds is a `List`; so is an
        // array of objects.
        let items = match (&kind, &object) {
            (_, Value::Array(items)) => Some(items.clone()),
            (Some(k), _) if k.ends_with("List") => {
                object.get("items").and_then(Value::as_array).cloned()
            }
            _ => None,
        };
        if let Some(items) = items {
            for (i, item) in items.into_iter().enumerate() {
                self.add(file, &format!("{place}, items[{i}]"), item)?;
            }
            return Ok(());
        }
        let not_an_object = |message: String| ObjectError {
            file: file.to_path_buf(),
            place: format!("{place}: "),
            message,
            source: None,
        };
        if !object.is_object() {
            return Err(not_an_object(format!(
                "not a Kubernetes object but {}",
                match object {
                    Value::Null => "nothing",
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::String(_) => "a string",
                    _ => "a value of another shape",
                }
            )));
        }
        // Client libraries often drop `kind`; a pod is still recognisable.
        let kind = match kind {
            Some(kind) => kind,
            None if object.pointer("/spec/containers").is_some() => "Pod".into(),
            None => {
                return Err(not_an_object(
                    "not a Kubernetes object: it has no `kind`".into(),
                ));
            }
        };
        let typed = |what: &str| format!("{place} ({what} {name})");
        match kind.as_str() {
            "Pod" => {
                let pod: Pod = parse(file, &typed("Pod"), object)?;
                self.snapshot.put_pod(reduce::pod(&pod));
            }
            "Deployment" => {
                let d: Deployment = parse(file, &typed("Deployment"), object)?;
                self.snapshot.put_workload(reduce::deployment(&d));
            }
            "StatefulSet" => {
                let s: StatefulSet = parse(file, &typed("StatefulSet"), object)?;
                self.snapshot.put_workload(reduce::stateful_set(&s));
            }
            "DaemonSet" => {
                let d: DaemonSet = parse(file, &typed("DaemonSet"), object)?;
                self.snapshot.put_workload(reduce::daemon_set(&d));
            }
            "Node" => {
                let n: Node = parse(file, &typed("Node"), object)?;
                self.snapshot.put_node(reduce::node(&n));
            }
            "Namespace" => {
                let ns: Namespace = parse(file, &typed("Namespace"), object)?;
                self.snapshot.put_namespace(&ns);
            }
            "PodMetrics" => self.add_metrics(file, place, &object)?,
            other => match self.resource_of(other, &object) {
                Some(_)
                    if object
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty) =>
                {
                    return Err(not_an_object(format!(
                        "a {other} without metadata.name is not an object of the cluster"
                    )));
                }
                Some(resource) => {
                    // As `kubectl apply` reads a file: no namespace is the
                    // default one.
                    let mut object = object;
                    if object
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        object["metadata"]["namespace"] = Value::from("default");
                    }
                    let dynamic: kube::core::DynamicObject = parse(file, &typed(other), object)?;
                    self.snapshot
                        .put_object(Generic::reduce(&resource, &dynamic));
                }
                None => *self.skipped.entry(other.to_string()).or_default() += 1,
            },
        }
        Ok(())
    }
}

impl Objects {
    /// The further kind an object of `kind` is, by its `apiVersion`.
    fn resource_of(&self, kind: &str, object: &Value) -> Option<ResourceRef> {
        let api_version = object.get("apiVersion").and_then(Value::as_str)?;
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.resources
            .iter()
            .find(|r| r.kind == kind && r.group == group && r.version == version)
            .cloned()
    }

    /// A `metrics.k8s.io` PodMetrics: the usage of each container.
    fn add_metrics(&mut self, file: &Path, place: &str, object: &Value) -> Result<(), ObjectError> {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let key = (
            text("/metadata/namespace").to_string(),
            text("/metadata/name").to_string(),
        );
        let mut usage = BTreeMap::new();
        for (i, c) in object
            .get("containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let quantity = |resource: &str| -> Result<Option<f64>, ObjectError> {
                match c
                    .pointer(&format!("/usage/{resource}"))
                    .and_then(Value::as_str)
                {
                    None => Ok(None),
                    Some(q) => reduce::parse_quantity(q)
                        .map(Some)
                        .ok_or_else(|| ObjectError {
                            file: file.to_path_buf(),
                            place: format!(
                                "{place} (PodMetrics {}): containers[{i}].usage.{resource}: ",
                                key_name(&key)
                            ),
                            message: format!("`{q}` is not a quantity"),
                            source: None,
                        }),
                }
            };
            let name = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            usage.insert(
                name,
                types::Resources {
                    cpu_millis: quantity("cpu")?.map(|cores| (cores * 1000.0).round() as u64),
                    memory_bytes: quantity("memory")?.map(|bytes| bytes.round() as u64),
                },
            );
        }
        self.snapshot.usage.insert(key, usage);
        Ok(())
    }
}

fn key_name(key: &(String, String)) -> String {
    format!("{}/{}", key.0, key.1)
}

/// Deserialize a typed object, naming the field that does not fit.
fn parse<T: DeserializeOwned>(file: &Path, place: &str, object: Value) -> Result<T, ObjectError> {
    serde_path_to_error::deserialize(object).map_err(|e| ObjectError {
        file: file.to_path_buf(),
        place: format!("{place}: {}: ", e.path()),
        message: String::new(),
        source: Some(e.into_inner().into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::parse_time;

    const NOW: types::Timestamp = 1_780_000_000_000;

    #[test]
    fn now_placeholders_become_times() {
        assert_eq!(placeholder("@now", NOW), Some(NOW));
        assert_eq!(placeholder("@now-5m", NOW), Some(NOW - 300_000));
        assert_eq!(placeholder("@now+2h", NOW), Some(NOW + 7_200_000));
        assert_eq!(placeholder("@now-90s", NOW), Some(NOW - 90_000));
        assert_eq!(placeholder("@nowhere", NOW), None);
        assert_eq!(placeholder("@now-5y", NOW), None);
        assert_eq!(parse_time(&rfc3339(NOW)), Ok(NOW));
    }

    #[test]
    fn placeholders_out_of_range_stay_text_and_far_times_are_written() {
        // Each of these panicked: an amount whose milliseconds overflow, a
        // character of more than one byte after `@now`, a time past 9999.
        assert_eq!(placeholder("@now+9223372036854775807d", NOW), None);
        assert_eq!(placeholder("@now-9223372036854775807ms", i64::MIN), None);
        assert_eq!(placeholder("@now€5m", NOW), None);
        let far = placeholder("@now+3000000d", NOW).unwrap();
        assert_eq!(rfc3339(far), "9999-12-30T22:00:00.000Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00.000Z");
        let mut objects = Objects::default();
        objects
            .add_text(
                Path::new("far.yaml"),
                "kind: Namespace\napiVersion: v1\nmetadata:\n  name: x\n  creationTimestamp: \"@now+3000000d\"\n",
                NOW,
            )
            .unwrap();
        assert!(objects.snapshot.namespaces.contains_key("x"));
    }

    #[test]
    fn a_list_of_kinds_is_reduced_and_other_kinds_are_counted() {
        let text = r#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"shop","labels":{"team":"a"}}},
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"shop"},
             "spec":{"containers":[{"name":"web","image":"web:1"}]},"status":{"phase":"Running"}},
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop"}}]}"#;
        let mut objects = Objects::default();
        for doc in documents(Path::new("list.json"), text).unwrap() {
            objects
                .add(Path::new("list.json"), "document 1", doc)
                .unwrap();
        }
        assert_eq!(objects.snapshot.pods.len(), 1);
        let pod = objects.snapshot.pods.get("shop", "web-1").unwrap();
        assert_eq!(pod.to_wit(None).containers[0].image, "web:1");
        assert_eq!(objects.snapshot.namespaces["shop"][0].key, "team");
        assert_eq!(objects.skipped["Service"], 1);
    }

    #[test]
    fn an_object_of_a_further_kind_is_read_and_one_without_a_name_refused() {
        let mut objects = Objects::default();
        let vm = serde_json::json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "db-0", "namespace": "vms"}, "status": {"printableStatus": "Running"}});
        objects
            .add(Path::new("vms.yaml"), "document 1", vm)
            .unwrap();
        assert_eq!(objects.snapshot.objects.len(), 1);
        let nameless = serde_json::json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "spec": {"runStrategy": "Always"}});
        let error = objects
            .add(Path::new("vms.yaml"), "document 2", nameless)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("document 2") && error.contains("metadata.name"),
            "{error}"
        );
        // A kind that is not configured is counted, not read.
        let other = serde_json::json!({"apiVersion": "example.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "shop"}});
        objects
            .add(Path::new("vms.yaml"), "document 3", other)
            .unwrap();
        assert_eq!(objects.skipped["Widget"], 1);
    }

    #[test]
    fn a_bad_field_is_named_with_file_and_place() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web-2\nspec:\n  containers:\n  - name: 7\n    image: [1]\n";
        let mut objects = Objects::default();
        let mut error = None;
        for (i, doc) in documents(Path::new("pods.yaml"), text)
            .unwrap()
            .into_iter()
            .enumerate()
        {
            if let Err(e) = objects.add(Path::new("pods.yaml"), &format!("document {}", i + 1), doc)
            {
                error = Some(e);
            }
        }
        let message = error.expect("the second pod is malformed").to_string();
        assert!(
            message.starts_with("pods.yaml: document 2 (Pod web-2): spec.containers[0]."),
            "{message}"
        );
    }

    #[test]
    fn broken_yaml_names_the_document_and_line() {
        let error = documents(Path::new("x.yaml"), "a: 1\n---\nb: [1, 2\n").unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("x.yaml: document 2: not valid YAML"),
            "{message}"
        );
        assert!(message.contains("line"), "{message}");
    }
}
