//! Observation: Kubernetes objects reduced to compact observations
//! ([`reduce`]), read from files ([`objects`]), and grouped into
//! applications with their tasks ([`Snapshot::apps`]).

pub mod cluster;
pub mod objects;
pub mod reduce;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::plugins::bindings::{status, types};

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

/// What is known of the cluster at one moment, keyed as the API keys it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Namespaces by name, with their labels.
    pub namespaces: BTreeMap<String, Vec<types::KeyValue>>,
    /// Workloads by kind, namespace and name.
    pub workloads: BTreeMap<(&'static str, String, String), types::Workload>,
    /// Pods by namespace and name.
    pub pods: BTreeMap<(String, String), types::Pod>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, types::Node>,
    /// Measured usage by pod (namespace, name), then by container.
    pub usage: BTreeMap<(String, String), BTreeMap<String, types::Resources>>,
}

fn workload_kind(kind: types::WorkloadKind) -> &'static str {
    match kind {
        types::WorkloadKind::Deployment => "Deployment",
        types::WorkloadKind::StatefulSet => "StatefulSet",
        types::WorkloadKind::DaemonSet => "DaemonSet",
    }
}

impl Snapshot {
    pub fn put_pod(&mut self, pod: types::Pod) {
        self.pods
            .insert((pod.namespace.clone(), pod.name.clone()), pod);
    }

    pub fn put_workload(&mut self, w: types::Workload) {
        self.workloads.insert(
            (workload_kind(w.kind), w.namespace.clone(), w.name.clone()),
            w,
        );
    }

    /// Remove a workload of a kind (`Deployment`, `StatefulSet`, `DaemonSet`).
    pub fn remove_workload(&mut self, kind: types::WorkloadKind, namespace: &str, name: &str) {
        self.workloads
            .remove(&(workload_kind(kind), namespace.to_string(), name.to_string()));
    }

    /// Forget every workload of a kind (before a full re-list).
    pub fn clear_workloads(&mut self, kind: types::WorkloadKind) {
        let kind = workload_kind(kind);
        self.workloads.retain(|(k, _, _), _| *k != kind);
    }

    pub fn put_node(&mut self, node: types::Node) {
        self.nodes.insert(node.name.clone(), node);
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

    fn app_of_pod(grouping: &Grouping, p: &types::Pod) -> types::AppId {
        let owner = p.owner.as_ref().map(|o| o.name.as_str());
        let name = match grouping {
            Grouping::Label(key) => label(&p.labels, key).or(owner).unwrap_or(&p.name),
            Grouping::Owner => owner.unwrap_or(&p.name),
            Grouping::Namespace => &p.namespace,
        };
        types::AppId {
            namespace: p.namespace.clone(),
            name: name.to_string(),
        }
    }

    /// Group the snapshot into applications, each with its tasks (newest
    /// first) and the nodes its pods run on. Applications named only by a
    /// task, or `known` from before, exist too, with nothing in them. `now`
    /// stamps the observations.
    pub fn apps(
        &self,
        grouping: &Grouping,
        tasks: &[types::Task],
        known: &[types::AppId],
        now: types::Timestamp,
    ) -> Vec<status::AppInput> {
        // A namespace exists when its object was seen or something lives in it.
        let mut live: BTreeSet<&str> = self.namespaces.keys().map(String::as_str).collect();
        live.extend(self.workloads.values().map(|w| w.namespace.as_str()));
        live.extend(self.pods.values().map(|p| p.namespace.as_str()));

        let new_app = |id: types::AppId| status::AppInput {
            app: types::App {
                namespace_exists: live.contains(id.namespace.as_str()),
                namespace_labels: self
                    .namespaces
                    .get(&id.namespace)
                    .cloned()
                    .unwrap_or_default(),
                id,
                expected_replicas: None,
                workloads: Vec::new(),
                pods: Vec::new(),
                probe: None,
                observed_at: now,
            },
            tasks: Vec::new(),
            nodes: Vec::new(),
        };
        let mut apps: BTreeMap<(String, String), status::AppInput> = BTreeMap::new();
        fn entry<'m>(
            apps: &'m mut BTreeMap<(String, String), status::AppInput>,
            id: types::AppId,
            new_app: &impl Fn(types::AppId) -> status::AppInput,
        ) -> &'m mut status::AppInput {
            let key = (id.namespace.clone(), id.name.clone());
            apps.entry(key).or_insert_with(|| new_app(id))
        }
        for id in known {
            entry(&mut apps, id.clone(), &new_app);
        }
        for w in self.workloads.values() {
            entry(&mut apps, Self::app_of_workload(grouping, w), &new_app)
                .app
                .workloads
                .push(w.clone());
        }
        for p in self.pods.values() {
            let mut pod = p.clone();
            if let Some(usage) = self.usage.get(&(p.namespace.clone(), p.name.clone())) {
                for c in &mut pod.containers {
                    c.usage = usage.get(&c.name).copied();
                }
                pod.usage = Some(types::Resources {
                    cpu_millis: usage.values().map(|u| u.cpu_millis).sum(),
                    memory_bytes: usage.values().map(|u| u.memory_bytes).sum(),
                });
            }
            entry(&mut apps, Self::app_of_pod(grouping, p), &new_app)
                .app
                .pods
                .push(pod);
        }
        for t in tasks {
            entry(&mut apps, t.app.clone(), &new_app)
                .tasks
                .push(t.clone());
        }
        let mut apps: Vec<status::AppInput> = apps.into_values().collect();
        for input in &mut apps {
            input.tasks.sort_by_key(|t| std::cmp::Reverse(t.created_at));
            let on: BTreeSet<&str> = input
                .app
                .pods
                .iter()
                .filter_map(|p| p.node.as_deref())
                .collect();
            input.nodes = on
                .iter()
                .filter_map(|n| self.nodes.get(*n))
                .cloned()
                .collect();
        }
        apps
    }
}
