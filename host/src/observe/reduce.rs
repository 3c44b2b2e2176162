//! Reduce Kubernetes objects to the compact observations policies see. Only
//! the fields a rule may use are kept; the full object is dropped.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    Container, ContainerState as K8sContainerState, ContainerStateTerminated, ContainerStatus,
    Node, Pod, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::wit::types;

/// Milliseconds since the epoch of a Kubernetes time.
pub(crate) fn millis(time: &Time) -> types::Timestamp {
    time.0.as_millisecond()
}

/// A namespace's name and labels (all that is kept of it).
pub(crate) fn namespace(
    namespace: &k8s_openapi::api::core::v1::Namespace,
) -> (String, Vec<types::KeyValue>) {
    let name = namespace.metadata.name.clone().unwrap_or_default();
    (name, key_values(namespace.metadata.labels.as_ref()))
}

/// Labels or annotations as key-value pairs.
pub(crate) fn key_values(map: Option<&BTreeMap<String, String>>) -> Vec<types::KeyValue> {
    map.into_iter()
        .flatten()
        .map(|(key, value)| types::KeyValue {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// CPU in millicores and memory in bytes from a Kubernetes quantity text
/// (`500m`, `2`, `128Mi`, `1G`, `1.5Gi`, `1e3`).
pub(crate) fn parse_quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let suffixes: [(&str, f64); 14] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    for (suffix, factor) in suffixes {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    if let Some(number) = text.strip_suffix('E') {
        return number.parse::<f64>().ok().map(|n| n * 1e18);
    }
    text.parse::<f64>().ok()
}

fn resources(map: Option<&BTreeMap<String, Quantity>>) -> types::Resources {
    let get = |key: &str| {
        map.and_then(|m| m.get(key))
            .and_then(|q| parse_quantity(&q.0))
    };
    types::Resources {
        cpu_millis: get("cpu").map(|cores| (cores * 1000.0).round() as u64),
        memory_bytes: get("memory").map(|bytes| bytes.round() as u64),
    }
}

fn terminated(t: &ContainerStateTerminated) -> types::TerminatedState {
    types::TerminatedState {
        exit_code: t.exit_code,
        signal: t.signal,
        reason: t.reason.clone(),
        message: t.message.clone(),
        started_at: t.started_at.as_ref().map(millis),
        finished_at: t.finished_at.as_ref().map(millis),
    }
}

fn container_state(
    state: Option<&K8sContainerState>,
    no_status_unknown: bool,
) -> types::ContainerState {
    let unknown_or_waiting = || {
        if no_status_unknown {
            types::ContainerState::Unknown
        } else {
            types::ContainerState::Waiting(types::WaitingState {
                reason: None,
                message: None,
            })
        }
    };
    let Some(state) = state else {
        return unknown_or_waiting();
    };
    if let Some(t) = &state.terminated {
        return types::ContainerState::Terminated(terminated(t));
    }
    if let Some(r) = &state.running {
        return types::ContainerState::Running(types::RunningState {
            started_at: r.started_at.as_ref().map(millis),
        });
    }
    if let Some(w) = &state.waiting {
        return types::ContainerState::Waiting(types::WaitingState {
            reason: w.reason.clone(),
            message: w.message.clone(),
        });
    }
    unknown_or_waiting()
}

fn container(
    spec: Option<&Container>,
    status: Option<&ContainerStatus>,
    name: &str,
    kind: types::ContainerKind,
    no_status_unknown: bool,
) -> types::Container {
    let requirements: Option<&ResourceRequirements> = spec.and_then(|c| c.resources.as_ref());
    types::Container {
        name: name.to_string(),
        image: status
            .map(|s| s.image.clone())
            .filter(|i| !i.is_empty())
            .or_else(|| spec.and_then(|c| c.image.clone()))
            .unwrap_or_default(),
        kind,
        ready: status.is_some_and(|s| s.ready),
        started: status.and_then(|s| s.started),
        restart_count: status.map_or(0, |s| s.restart_count.max(0) as u32),
        state: container_state(status.and_then(|s| s.state.as_ref()), no_status_unknown),
        last_state: status
            .and_then(|s| s.last_state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .map(terminated),
        limits: resources(requirements.and_then(|r| r.limits.as_ref())),
        requests: resources(requirements.and_then(|r| r.requests.as_ref())),
        usage: None,
    }
}

fn pod_phase(phase: Option<&str>) -> types::PodPhase {
    match phase {
        Some("Pending") | None => types::PodPhase::Pending,
        Some("Running") => types::PodPhase::Running,
        Some("Succeeded") => types::PodPhase::Succeeded,
        Some("Failed") => types::PodPhase::Failed,
        Some(_) => types::PodPhase::Unknown,
    }
}

/// The controlling owner of an object, with a pod's ReplicaSet resolved to
/// its Deployment by the `pod-template-hash` label the Deployment put on it.
fn owner(meta: &ObjectMeta) -> Option<types::Owner> {
    let reference = meta
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))?;
    let hash = meta
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"));
    if reference.kind == "ReplicaSet"
        && let Some(deployment) = hash.and_then(|h| reference.name.strip_suffix(&format!("-{h}")))
    {
        return Some(types::Owner {
            kind: "Deployment".into(),
            name: deployment.to_string(),
        });
    }
    Some(types::Owner {
        kind: reference.kind.clone(),
        name: reference.name.clone(),
    })
}

/// The `status.conditions` of any kind of object: they share their fields
/// but not their Rust type.
macro_rules! conditions {
    ($list:expr) => {
        $list
            .into_iter()
            .flatten()
            .map(|c| types::Condition {
                kind: c.type_.clone(),
                status: types::ConditionStatus::from_kubernetes(&c.status),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition: c.last_transition_time.as_ref().map(millis),
            })
            .collect::<Vec<_>>()
            // A flattened iterator's length is not known ahead: without
            // this, five conditions hold room for eight.
            .into_boxed_slice()
            .into_vec()
    };
}

/// A pod as the status rules see it.
pub fn pod(pod: &Pod) -> types::Pod {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let phase = pod_phase(status.and_then(|s| s.phase.as_deref()));
    // A container without a status is still being created while the pod is
    // pending; past that, nothing is known of it.
    let unknown = phase != types::PodPhase::Pending;

    let status_of = |list: Option<&Vec<ContainerStatus>>, name: &str| {
        list.and_then(|l| l.iter().find(|s| s.name == name))
            .cloned()
    };
    let mut containers = Vec::new();
    for c in spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
    {
        let kind = if c.restart_policy.as_deref() == Some("Always") {
            types::ContainerKind::Sidecar
        } else {
            types::ContainerKind::Init
        };
        let s = status_of(
            status.and_then(|s| s.init_container_statuses.as_ref()),
            &c.name,
        );
        containers.push(container(Some(c), s.as_ref(), &c.name, kind, unknown));
    }
    let main_statuses = status.and_then(|s| s.container_statuses.as_ref());
    for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
        let s = status_of(main_statuses, &c.name);
        containers.push(container(
            Some(c),
            s.as_ref(),
            &c.name,
            types::ContainerKind::Main,
            unknown,
        ));
    }
    // Statuses of containers the spec does not list (a trimmed object)
    // still describe containers.
    let in_spec = |name: &str| spec.is_some_and(|s| s.containers.iter().any(|c| c.name == name));
    for s in main_statuses
        .into_iter()
        .flatten()
        .filter(|s| !in_spec(&s.name))
    {
        containers.push(container(
            None,
            Some(s),
            &s.name,
            types::ContainerKind::Main,
            unknown,
        ));
    }
    for s in status
        .and_then(|s| s.ephemeral_container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        containers.push(container(
            None,
            Some(s),
            &s.name,
            types::ContainerKind::Ephemeral,
            unknown,
        ));
    }

    // Held for as long as the pod lives: no room for containers it does
    // not have (a vector grown by one holds room for four).
    containers.shrink_to_fit();
    types::Pod {
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
        node: spec.and_then(|s| s.node_name.clone()),
        phase,
        reason: status.and_then(|s| s.reason.clone()),
        message: status.and_then(|s| s.message.clone()),
        conditions: conditions!(status.and_then(|s| s.conditions.as_ref())),
        restart_policy: match spec.and_then(|s| s.restart_policy.as_deref()) {
            Some("Never") => types::RestartPolicy::Never,
            Some("OnFailure") => types::RestartPolicy::OnFailure,
            _ => types::RestartPolicy::Always,
        },
        created_at: meta.creation_timestamp.as_ref().map(millis),
        started_at: status.and_then(|s| s.start_time.as_ref()).map(millis),
        deleting_since: meta.deletion_timestamp.as_ref().map(millis),
        finalizers: meta.finalizers.clone().unwrap_or_default(),
        containers,
        owner: owner(meta),
        labels: key_values(meta.labels.as_ref()),
        ip: status.and_then(|s| s.pod_ip.clone()),
        usage: None,
    }
}

/// A node as the failover rules see it.
pub fn node(node: &Node) -> types::Node {
    let status = node.status.as_ref();
    let spec = node.spec.as_ref();
    let all = status.and_then(|s| s.conditions.as_ref());
    let ready = all.and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    types::Node {
        name: node.metadata.name.clone().unwrap_or_default(),
        ready: ready.map_or(types::ConditionStatus::Unknown, |c| {
            types::ConditionStatus::from_kubernetes(&c.status)
        }),
        ready_since: ready
            .and_then(|c| c.last_transition_time.as_ref())
            .map(millis),
        last_heartbeat: ready
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .map(millis),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .map(|t| types::Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
                added_at: t.time_added.as_ref().map(millis),
            })
            .collect(),
        conditions: conditions!(all),
        labels: key_values(node.metadata.labels.as_ref()),
        address: status
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone()),
        allocatable: resources(status.and_then(|s| s.allocatable.as_ref())),
    }
}

fn workload_base(meta: &ObjectMeta, kind: types::WorkloadKind) -> types::Workload {
    types::Workload {
        kind,
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name: meta.name.clone().unwrap_or_default(),
        desired_replicas: 0,
        current_replicas: 0,
        ready_replicas: 0,
        available_replicas: 0,
        updated_replicas: 0,
        generation: meta.generation.unwrap_or(0),
        observed_generation: 0,
        paused: false,
        conditions: Vec::new(),
        labels: key_values(meta.labels.as_ref()),
        annotations: key_values(meta.annotations.as_ref()),
        created_at: meta.creation_timestamp.as_ref().map(millis),
    }
}

fn count(n: Option<i32>) -> u32 {
    n.unwrap_or(0).max(0) as u32
}

/// A Deployment's counts and conditions.
pub fn deployment(d: &Deployment) -> types::Workload {
    let mut w = workload_base(&d.metadata, types::WorkloadKind::Deployment);
    let spec = d.spec.as_ref();
    w.desired_replicas = spec.and_then(|s| s.replicas).map_or(1, |r| r.max(0) as u32);
    w.paused = spec.and_then(|s| s.paused).unwrap_or(false);
    if let Some(s) = &d.status {
        w.current_replicas = count(s.replicas);
        w.ready_replicas = count(s.ready_replicas);
        w.available_replicas = count(s.available_replicas);
        w.updated_replicas = count(s.updated_replicas);
        w.observed_generation = s.observed_generation.unwrap_or(0);
        w.conditions = conditions!(s.conditions.as_ref());
    }
    w
}

/// A StatefulSet's counts and conditions.
pub(crate) fn stateful_set(s: &StatefulSet) -> types::Workload {
    let mut w = workload_base(&s.metadata, types::WorkloadKind::StatefulSet);
    w.desired_replicas = s
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .map_or(1, |r| r.max(0) as u32);
    if let Some(st) = &s.status {
        w.current_replicas = count(Some(st.replicas));
        w.ready_replicas = count(st.ready_replicas);
        w.available_replicas = count(st.available_replicas);
        w.updated_replicas = count(st.updated_replicas);
        w.observed_generation = st.observed_generation.unwrap_or(0);
        w.conditions = conditions!(st.conditions.as_ref());
    }
    w
}

/// A DaemonSet's counts (desired = nodes it should run on) and conditions.
pub(crate) fn daemon_set(d: &DaemonSet) -> types::Workload {
    let mut w = workload_base(&d.metadata, types::WorkloadKind::DaemonSet);
    if let Some(s) = &d.status {
        w.desired_replicas = count(Some(s.desired_number_scheduled));
        w.current_replicas = count(Some(s.current_number_scheduled));
        w.ready_replicas = count(Some(s.number_ready));
        w.available_replicas = count(s.number_available);
        w.updated_replicas = count(s.updated_number_scheduled);
        w.observed_generation = s.observed_generation.unwrap_or(0);
        w.conditions = conditions!(s.conditions.as_ref());
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_cores_and_bytes() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("128Mi"), Some(128.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("1.5Gi"), Some(1.5 * 1024f64.powi(3)));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("lots"), None);
    }
}
