//! The kinds the simulator serves and the discovery documents that
//! describe them (`/api`, `/apis`, resource lists, `/version`). Besides the
//! built-in kinds, every `CustomResourceDefinition` created in a store is
//! served by it from then on, as an API server does.

use serde_json::{Value, json};

/// One resource type of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// API group, `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    /// The plural name in URLs, e.g. `pods`.
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Whether the status is a subresource of its own (a custom resource
    /// whose definition says so): a write of the object keeps the stored
    /// status, a write of `/status` keeps everything else.
    pub status_subresource: bool,
    /// Its scale subresource (Deployments, StatefulSets, and a custom
    /// resource whose definition has one), for `kubectl scale` and
    /// autoscalers.
    pub scale: Option<&'static Scale>,
}

/// Where a custom resource's scale subresource reads and writes, as JSON
/// paths of the object (`.spec.replicas`).
#[derive(Debug, PartialEq, Eq)]
pub struct Scale {
    pub spec_replicas: &'static str,
    pub status_replicas: &'static str,
    pub label_selector: Option<&'static str>,
}

impl Resource {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The scale subresource of Deployments and StatefulSets (`kubectl
/// scale`).
static WORKLOAD_SCALE: Scale = Scale {
    spec_replicas: ".spec.replicas",
    status_replicas: ".status.replicas",
    label_selector: None,
};

/// Every resource the simulator serves.
pub static RESOURCES: &[Resource] = &[
    Resource {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        short_names: &["pvc"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "resourcequotas",
        singular: "resourcequota",
        kind: "ResourceQuota",
        namespaced: true,
        short_names: &["quota"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "storage.k8s.io",
        version: "v1",
        plural: "storageclasses",
        singular: "storageclass",
        kind: "StorageClass",
        namespaced: false,
        short_names: &["sc"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        status_subresource: false,
        scale: Some(&WORKLOAD_SCALE),
    },
    Resource {
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        singular: "statefulset",
        kind: "StatefulSet",
        namespaced: true,
        short_names: &["sts"],
        status_subresource: false,
        scale: Some(&WORKLOAD_SCALE),
    },
    Resource {
        group: "apps",
        version: "v1",
        plural: "daemonsets",
        singular: "daemonset",
        kind: "DaemonSet",
        namespaced: true,
        short_names: &["ds"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "batch",
        version: "v1",
        plural: "jobs",
        singular: "job",
        kind: "Job",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        kind: "PodDisruptionBudget",
        namespaced: true,
        short_names: &["pdb"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "apiextensions.k8s.io",
        version: "v1",
        plural: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short_names: &["crd", "crds"],
        status_subresource: false,
        scale: None,
    },
    Resource {
        group: "metrics.k8s.io",
        version: "v1beta1",
        plural: "pods",
        singular: "",
        kind: "PodMetrics",
        namespaced: true,
        short_names: &[],
        status_subresource: false,
        scale: None,
    },
];

/// The resources a `CustomResourceDefinition` defines: its kind in each
/// version it serves. They live as long as the process (a simulator's store
/// keeps the ones defined in it).
pub fn define(crd: &Value) -> Result<Vec<&'static Resource>, String> {
    let text = |pointer: &str| -> Result<&'static str, String> {
        crd.pointer(pointer)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(|t| &*Box::leak(t.to_string().into_boxed_str()))
            .ok_or_else(|| format!("{pointer} is required"))
    };
    let group = text("/spec/group")?;
    let plural = text("/spec/names/plural")?;
    let kind = text("/spec/names/kind")?;
    let singular = text("/spec/names/singular").unwrap_or("");
    let namespaced = match crd.pointer("/spec/scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            return Err(format!(
                "spec.scope must be Namespaced or Cluster, not {other:?}"
            ));
        }
    };
    let short_names: &'static [&'static str] = Box::leak(
        crd.pointer("/spec/names/shortNames")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|s| &*Box::leak(s.to_string().into_boxed_str()))
            .collect::<Vec<&'static str>>()
            .into_boxed_slice(),
    );
    let versions: Vec<(&'static str, bool, Option<&'static Scale>)> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .filter_map(|v| {
            let name = v["name"].as_str()?;
            let status = v.pointer("/subresources/status").is_some();
            let leak = |text: &str| &*Box::leak(text.to_string().into_boxed_str());
            let scale = v.pointer("/subresources/scale").and_then(|scale| {
                Some(&*Box::leak(Box::new(Scale {
                    spec_replicas: leak(scale["specReplicasPath"].as_str()?),
                    status_replicas: leak(scale["statusReplicasPath"].as_str()?),
                    label_selector: scale["labelSelectorPath"].as_str().map(leak),
                })))
            });
            Some((leak(name), status, scale))
        })
        .collect();
    if versions.is_empty() {
        return Err("spec.versions names no served version".into());
    }
    Ok(versions
        .into_iter()
        .map(|(version, status_subresource, scale)| {
            &*Box::leak(Box::new(Resource {
                group,
                version,
                plural,
                singular,
                kind,
                namespaced,
                short_names,
                status_subresource,
                scale,
            }))
        })
        .collect())
}

fn find_in(
    mut resources: impl Iterator<Item = &'static Resource>,
    group: &str,
    version: &str,
    plural: &str,
) -> Option<&'static Resource> {
    resources.find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The built-in resource at `group/version/plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    find_in(RESOURCES.iter(), group, version, plural)
}

/// The resource at `group/version/plural` among these.
pub fn find_among(
    resources: &[&'static Resource],
    group: &str,
    version: &str,
    plural: &str,
) -> Option<&'static Resource> {
    find_in(resources.iter().copied(), group, version, plural)
}

/// The resource of a kind among these, by apiVersion and kind.
pub fn by_kind_among(
    resources: &[&'static Resource],
    api_version: &str,
    kind: &str,
) -> Option<&'static Resource> {
    resources
        .iter()
        .copied()
        .find(|r| r.api_version() == api_version && r.kind == kind)
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "get",
    "list",
    "patch",
    "update",
    "watch",
    "deletecollection",
];

/// `APIResourceList` of one group version, among the served resources.
pub fn resource_list(served: &[&'static Resource], group: &str, version: &str) -> Option<Value> {
    let resources: Vec<&Resource> = served
        .iter()
        .copied()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    let first = resources.first()?;
    let mut items = Vec::new();
    for r in &resources {
        let verbs: &[&str] = if r.kind == "PodMetrics" {
            &["get", "list"]
        } else {
            &VERBS
        };
        items.push(json!({
            "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": r.kind, "verbs": verbs, "shortNames": r.short_names,
        }));
        if r.kind != "PodMetrics" && r.kind != "Namespace" {
            items.push(json!({
                "name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if r.scale.is_some() {
            items.push(json!({
                "name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                "group": "autoscaling", "version": "v1",
                "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
    }
    Some(json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": first.api_version(), "resources": items,
    }))
}

/// `APIVersions` of the core group (`/api`).
pub fn core_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server }],
    })
}

/// `APIGroupList` of the named groups (`/apis`) of the served resources.
pub fn groups(served: &[&'static Resource]) -> Value {
    let mut names: Vec<(&str, &str)> = served
        .iter()
        .filter(|r| !r.group.is_empty())
        .map(|r| (r.group, r.version))
        .collect();
    names.sort_unstable();
    names.dedup();
    let groups: Vec<Value> = names
        .into_iter()
        .map(|(group, version)| {
            let gv = json!({ "groupVersion": format!("{group}/{version}"), "version": version });
            json!({ "name": group, "versions": [gv.clone()], "preferredVersion": gv })
        })
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-verdict-sim",
        "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "none", "compiler": "none", "platform": "linux/amd64",
    })
}
