//! The two resources of seed 002's delivery, read and written: a
//! `VMReplicaSet` (its instances' template, count and environment, the
//! rollout's safe rate and order, what a lost instance gets, the instances
//! named offline) and a `VMDeployment` (the code, its steps, the rollout's
//! progress kept in its status); the `VirtualMachine` a set makes for a new
//! instance; the status both get.
//!
//! What cannot be carried out is an error in words a person can act on;
//! the controller shows it in the resource's `Degraded` condition.

use std::collections::BTreeMap;

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::crd::{self, Condition, ConditionType, SetInstance, VmReplicaSetStatus};
use super::instance::{FINALIZER, SERVER, SET_LABEL};
use super::model::Package;
use super::rollout::{Order, Plan, SetSpec, Share};
use crate::time::{Timestamp, rfc3339};

/// The API group and version of both resources.
pub const API_VERSION: &str = "verdict.dev/v1alpha1";

/// A resource by its group, version, kind and plural.
fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// `VMReplicaSet`s.
pub fn sets() -> ApiResource {
    resource("verdict.dev", "v1alpha1", "VMReplicaSet", "vmreplicasets")
}

/// `VMDeployment`s.
pub fn deployments() -> ApiResource {
    resource("verdict.dev", "v1alpha1", "VMDeployment", "vmdeployments")
}

/// `Server`s: the instances, one a machine.
pub fn servers() -> ApiResource {
    resource("verdict.dev", "v1alpha1", "Server", "servers")
}

/// KubeVirt's `VirtualMachine`s: the instances' machines.
pub fn machines() -> ApiResource {
    resource("kubevirt.io", "v1", "VirtualMachine", "virtualmachines")
}

/// KubeVirt's `VirtualMachineInstance`s: the instances' running machines.
pub fn instances() -> ApiResource {
    resource(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
    )
}

/// What a set does about an instance that is lost (its node offline).
pub use super::crd::LostInstance as Lost;

/// A `VMReplicaSet`, read.
#[derive(Debug, Clone)]
pub struct VmReplicaSet {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub replicas: u32,
    /// The labels of the VMs it adopts besides those it made.
    pub selector: BTreeMap<String, String>,
    /// The VM template: `metadata` (labels, annotations) and `spec`.
    pub template: Value,
    pub spec: SetSpec,
    pub lost: Lost,
    /// The instances an operator takes offline.
    pub offline: Vec<String>,
}

pub(super) fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

pub(super) fn identity(object: &Value) -> (String, String, String, i64) {
    (
        text(object, "/metadata/namespace")
            .unwrap_or_default()
            .into(),
        text(object, "/metadata/name").unwrap_or_default().into(),
        text(object, "/metadata/uid").unwrap_or_default().into(),
        object
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    )
}

/// An object's spec read through its type; what does not read is named by
/// its path (`spec.rollout.order: unknown variant …`).
pub(super) fn typed<T: serde::de::DeserializeOwned>(object: &Value) -> Result<T, String> {
    typed_field(object, "spec")
}

/// An object's `field` (`spec`, `status`) read into its type (none read as
/// empty), or the field that does not read and why.
pub(super) fn typed_field<T: serde::de::DeserializeOwned>(
    object: &Value,
    field: &str,
) -> Result<T, String> {
    let value = match &object[field] {
        Value::Null => &Value::Object(Default::default()),
        value => value,
    };
    serde_path_to_error::deserialize(value).map_err(|e| match e.path().to_string().as_str() {
        "." => format!("{field}: {}", e.inner()),
        path => format!("{field}.{path}: {}", e.inner()),
    })
}

impl VmReplicaSet {
    /// Read a `VMReplicaSet` object: its spec through its type
    /// ([`crd::VmReplicaSetSpec`]), then what the schema cannot say.
    pub fn read(object: &Value) -> Result<Self, String> {
        let (namespace, name, uid, generation) = identity(object);
        if !object["spec"]["template"]["spec"].is_object() {
            return Err(
                "spec.template.spec is missing: there is nothing to make a machine of".into(),
            );
        }
        let spec: crd::VmReplicaSetSpec = typed(object)?;
        let rollout = spec.rollout.unwrap_or_default();
        let max_surge = match &rollout.max_surge {
            None | Some(Value::Null) => Share::Count(0),
            Some(value) => {
                Share::parse_or_none(value).map_err(|e| format!("spec.rollout.maxSurge: {e}"))?
            }
        };
        let max_unavailable = match &rollout.max_unavailable {
            None | Some(Value::Null) => Share::Count(1),
            Some(value) => Share::parse_or_none(value)
                .map_err(|e| format!("spec.rollout.maxUnavailable: {e}"))?,
        };
        if max_unavailable.is_none() && max_surge.is_none() {
            return Err("spec.rollout: maxUnavailable and maxSurge are both 0: no instance could ever be taken out of service to be updated".into());
        }
        let template = serde_json::to_value(&spec.template).unwrap_or_default();
        Ok(Self {
            namespace,
            name,
            uid,
            generation,
            replicas: spec.replicas,
            selector: spec.selector.unwrap_or_default().match_labels,
            template,
            spec: SetSpec {
                environment: spec
                    .environment
                    .into_iter()
                    .map(|p| Package {
                        name: p.name,
                        version: p.version,
                    })
                    .collect(),
                max_unavailable,
                max_surge,
                order: rollout.order,
                paused: spec.paused,
                desired: Some((spec.replicas as usize).saturating_sub(spec.offline.len())),
            },
            lost: spec.lost_instance,
            offline: spec.offline,
        })
    }

    /// The `Server` of a new instance named `name`: the set's label,
    /// owned by the set, held by the clean-up finalizer, to have `target`.
    pub fn server(&self, name: &str, environment: &[Package], code: Option<&str>) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": "Server",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": { SET_LABEL: self.name },
                "finalizers": [FINALIZER],
                "ownerReferences": [self.owner()],
            },
            "spec": server_spec(&self.name, environment, code),
        })
    }

    /// The `VirtualMachine` of the Server `name` (of UID `uid`): the
    /// template's spec and labels, the set's label, owned by its Server,
    /// held by the clean-up finalizer (deleted by hand, its Server's
    /// clean-up runs first).
    pub fn machine(&self, name: &str, uid: &str) -> Value {
        let mut labels = self.template["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        labels.insert(SET_LABEL.into(), json!(self.name));
        let mut annotations = self.template["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        annotations.insert(SERVER.into(), json!(name));
        json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "annotations": annotations,
                "finalizers": [FINALIZER],
                "ownerReferences": [server_owner(name, uid)],
            },
            "spec": self.template["spec"],
        })
    }
}

/// A Server's spec: its set, and what it should have.
pub fn server_spec(set: &str, environment: &[Package], code: Option<&str>) -> Value {
    let mut spec = json!({ "replicaSet": set, "environment": environment });
    if let Some(code) = code {
        spec["code"] = json!(code);
    }
    spec
}

/// The owner reference a Server's machine carries.
pub fn server_owner(name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "Server",
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

impl VmReplicaSet {
    /// A set known by name only — deleted, or whose spec does not read —
    /// whose instances are cleaned up and let go: nothing is made of it.
    pub fn named(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
            generation: 0,
            replicas: 0,
            selector: BTreeMap::new(),
            template: Value::Null,
            spec: SetSpec {
                environment: Vec::new(),
                max_unavailable: Share::Count(1),
                max_surge: Share::Count(0),
                order: Order::Name,
                paused: false,
                desired: Some(0),
            },
            lost: Lost::Repair,
            offline: Vec::new(),
        }
    }

    /// How many instances the set runs: its replicas, less those named
    /// offline (taken out for good, not replaced).
    pub fn wanted(&self) -> usize {
        (self.replicas as usize).saturating_sub(self.offline.len())
    }

    /// The status of the set as planned: counts, each instance (`rows`, as
    /// the controller shows them) and the conditions; `problem` is what
    /// stops it, when something does, and `cleaning` the clean-ups under
    /// way (each instance with its step).
    pub fn status(
        &self,
        plan: &Plan,
        rows: Vec<SetInstance>,
        (problem, cleaning): (Option<&str>, &[String]),
        now: Timestamp,
    ) -> VmReplicaSetStatus {
        let total = rows.len();
        let wanted = self.wanted();
        let done = plan.up_to_date == total && plan.ready == total && total == wanted;
        let failed: Vec<String> = rows
            .iter()
            .filter(|r| r.stage.as_deref() == Some("failed"))
            .map(row_with_step)
            .collect();
        let degraded = match (problem, failed.is_empty()) {
            (Some(problem), _) => Some(problem.to_string()),
            (None, false) => Some(format!("failed: {} (a person decides)", failed.join(", "))),
            (None, true) => None,
        };
        let rolling = match (plan.waiting.as_str(), cleaning) {
            (waiting, []) => waiting.to_string(),
            ("", cleaning) => format!("cleaning up {}", cleaning.join(", ")),
            (waiting, cleaning) => format!("{waiting}; cleaning up {}", cleaning.join(", ")),
        };
        let waiting = degraded.clone().unwrap_or_else(|| rolling.clone());
        // Available as a Deployment is: at least the instances wanted less
        // those the rollout may have out.
        let least = wanted.saturating_sub(self.spec.max_unavailable.at_most(wanted));
        let enough = plan.available >= least;
        let condition = |kind, on, reason, message: &str| {
            Condition::new(kind, on, reason, message, self.generation, now)
        };
        let count = |n: usize| Some(u32::try_from(n).unwrap_or(u32::MAX));
        VmReplicaSetStatus {
            observed_generation: Some(self.generation),
            replicas: count(total),
            selector: Some(format!("{SET_LABEL}={}", self.name)),
            ready_replicas: count(plan.ready),
            up_to_date_replicas: count(plan.up_to_date),
            available_replicas: count(plan.available),
            ready: Some(format!("{}/{wanted}", plan.ready)),
            waiting: Some(waiting.clone()),
            instances: rows,
            conditions: vec![
                condition(
                    ConditionType::Available,
                    enough,
                    if enough { "Available" } else { "NotAvailable" },
                    &format!(
                        "{} of {wanted} instances available; at least {least} wanted",
                        plan.available
                    ),
                ),
                condition(
                    ConditionType::Ready,
                    done,
                    if done { "AllReady" } else { "NotAllReady" },
                    &waiting,
                ),
                condition(
                    ConditionType::Progressing,
                    !done && !self.spec.paused && degraded.is_none(),
                    "Rolling",
                    &rolling,
                ),
                condition(ConditionType::Paused, self.spec.paused, "Paused", ""),
                condition(
                    ConditionType::Degraded,
                    degraded.is_some(),
                    "CannotProceed",
                    degraded.as_deref().unwrap_or_default(),
                ),
            ],
        }
    }

    /// The status of a set being deleted: its instances being cleaned up,
    /// each with the step it is at, in a `Deleting` condition; what the
    /// status said before stays.
    pub fn deleting_status(
        &self,
        previous: VmReplicaSetStatus,
        rows: Vec<SetInstance>,
        now: Timestamp,
    ) -> VmReplicaSetStatus {
        let held: Vec<String> = rows.iter().map(row_with_step).collect();
        let message = format!(
            "cleaning up {} instance(s): {}",
            held.len(),
            held.join(", ")
        );
        let mut status = previous;
        status.replicas = Some(u32::try_from(rows.len()).unwrap_or(u32::MAX));
        status.instances = rows;
        status.waiting = Some(message.clone());
        status
            .conditions
            .retain(|c| c.type_ != ConditionType::Deleting);
        status.conditions.push(Condition::new(
            ConditionType::Deleting,
            true,
            "CleaningUp",
            &message,
            self.generation,
            now,
        ));
        status
    }
}

/// An instance row of a status by name, with the step its list is at
/// (`web-1 at install-environment`).
pub fn row_with_step(row: &SetInstance) -> String {
    let name = row.name.as_deref().unwrap_or_default();
    match &row.task {
        Some(task) => format!("{name} at {task}"),
        None => name.to_string(),
    }
}

impl VmReplicaSet {
    /// The owner reference a set's instances carry.
    pub fn owner(&self) -> Value {
        json!({
            "apiVersion": API_VERSION,
            "kind": "VMReplicaSet",
            "name": self.name,
            "uid": self.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        })
    }

    /// The metadata that makes an existing VM the machine of the Server
    /// `name` (of UID `uid`) the set made for it (a merge patch), when the
    /// set adopts it: its label, the Server as its owner, the pointer to
    /// it, the clean-up finalizer. None for a VM the set may not adopt
    /// (another controller owns it, or it is being deleted).
    pub fn adoption(&self, vm: &Value, uid: Option<&str>) -> Option<Value> {
        if !adoptable(vm) {
            return None;
        }
        let metadata = &vm["metadata"];
        let name = metadata["name"].as_str()?;
        let mut owners = metadata["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        owners.push(server_owner(name, uid?));
        let mut finalizers = metadata["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        finalizers.push(json!(FINALIZER));
        Some(json!({
            "resourceVersion": metadata["resourceVersion"],
            "labels": { SET_LABEL: self.name },
            "annotations": { SERVER: name },
            "ownerReferences": owners,
            "finalizers": finalizers,
        }))
    }
}

/// Whether a VM may be adopted: no controller owns it, and it is not being
/// deleted.
pub fn adoptable(vm: &Value) -> bool {
    let metadata = &vm["metadata"];
    let owned = metadata["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["controller"] == true);
    !owned && metadata["deletionTimestamp"].is_null()
}

/// The name of a new instance of `set`: the set's name and the lowest free
/// number (`web-0`, `web-1`, …), as a StatefulSet names its pods.
pub fn instance_name<'a>(set: &str, taken: impl IntoIterator<Item = &'a str>) -> String {
    let taken: std::collections::BTreeSet<&str> = taken.into_iter().collect();
    (0..)
        .map(|n| format!("{set}-{n}"))
        .find(|name| !taken.contains(name.as_str()))
        .unwrap_or_default()
}

/// The status of a resource that cannot be carried out: `Degraded`, with
/// why in words a person can act on.
pub fn cannot_proceed(object: &Value, problem: &str, now: Timestamp) -> Value {
    degraded(object, "CannotProceed", problem, now)
}

/// The status of a resource that is `Degraded` for `reason`, with the
/// problem in words.
pub fn degraded(object: &Value, reason: &str, problem: &str, now: Timestamp) -> Value {
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
    let mut status = json!({
        "observedGeneration": generation,
        "waiting": problem,
        "conditions": [condition("Degraded", true, reason, problem, generation, now)],
    });
    if object["kind"] == "VMDeployment" {
        status["phase"] = json!("Degraded");
    }
    status
}

/// The status of a resource held where it is for `problem`: what it said
/// stays, and `Degraded` says why it holds.
pub fn held(object: &Value, problem: &str, now: Timestamp) -> Value {
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
    let mut status = match &object["status"] {
        Value::Object(status) => Value::Object(status.clone()),
        _ => json!({}),
    };
    let degraded = condition("Degraded", true, "Unread", problem, generation, now);
    let mut conditions: Vec<Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] != "Degraded")
        .cloned()
        .collect();
    conditions.push(degraded);
    status["conditions"] = Value::Array(conditions);
    status
}

/// A status condition (its `lastTransitionTime` is kept by the writer when
/// the status did not change).
pub(super) fn condition(
    kind: &str,
    on: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: Timestamp,
) -> Value {
    json!({
        "type": kind,
        "status": if on { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": rfc3339(now),
    })
}

/// A Server's conditions, in the shape of the set's: `Ready` (in service,
/// its machine running and ready, its node healthy), `Progressing` (a list
/// runs: its step) and `Degraded` (its list failed: the step, and what the
/// hook said).
pub fn server_conditions(
    recorded: &super::instance::Recorded,
    (machine_ready, node_healthy): (bool, bool),
    generation: i64,
    now: Timestamp,
) -> Vec<Condition> {
    use super::lists::ListOutcome;
    use crate::wit::WitName;
    use crd::ConditionType::{Degraded, Progressing, Ready};
    let stage = recorded.stage.map_or("none", |s| s.wit_name());
    let in_service = super::rollout::in_service(recorded.stage);
    let (ready, reason, message) = match (in_service, machine_ready, node_healthy) {
        (true, true, true) => (true, "InService", format!("{stage}: in service")),
        (false, ..) => (false, "NotInService", format!("{stage}: not in service")),
        (true, false, _) => (
            false,
            "MachineNotReady",
            format!("{stage}: its machine is not ready"),
        ),
        (true, true, false) => (
            false,
            "NodeNotHealthy",
            format!("{stage}: its node is not healthy"),
        ),
    };
    let list = recorded.list.as_ref();
    let running = list.filter(|l| l.outcome == ListOutcome::Running);
    let step = |l: &super::lists::CurrentList| {
        l.tasks
            .get(l.step)
            .map(|t| t.name.clone())
            .unwrap_or_default()
    };
    // The list that failed: the one in progress, or — the instance moved
    // to `failed` since — the last that failed.
    let failed = match recorded.stage {
        Some(crate::wit::lifecycle::Stage::Failed) => list
            .map(|l| l.entry())
            .into_iter()
            .chain(recorded.lists.iter().cloned())
            .find(|l| l.outcome == ListOutcome::Failed),
        _ => list
            .filter(|l| l.outcome == ListOutcome::Failed)
            .map(|l| l.entry()),
    };
    let condition = |type_, on, reason: &str, message: &str| {
        Condition::new(type_, on, reason, message, generation, now)
    };
    vec![
        condition(Ready, ready, reason, &message),
        match running {
            Some(l) if l.awaiting_approval() => condition(
                Progressing,
                true,
                "WaitingForApproval",
                &format!("the {stage} list waits for a person"),
            ),
            Some(l) => condition(
                Progressing,
                true,
                "ListRunning",
                &format!("{stage}: {} (attempt {})", step(l), l.attempt + 1),
            ),
            None => condition(
                Progressing,
                false,
                "AtRest",
                &format!("{stage}: no list runs"),
            ),
        },
        match failed {
            Some(l) => condition(
                Degraded,
                true,
                "ListFailed",
                &format!(
                    "{} failed at {}: {}",
                    l.stage.wit_name(),
                    l.task.as_deref().unwrap_or_default(),
                    l.message
                ),
            ),
            None => condition(Degraded, false, "AsExpected", ""),
        },
    ]
}

/// The conditions of `next`, each keeping the transition time of the same
/// condition in `previous` when its status did not change.
pub fn keep_transitions(previous: &Value, next: &mut Value) {
    let before: BTreeMap<&str, &Value> = previous["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c["type"].as_str()?, c)))
        .collect();
    for c in next["conditions"].as_array_mut().into_iter().flatten() {
        let Some(old) = c["type"].as_str().and_then(|t| before.get(t)) else {
            continue;
        };
        if old["status"] == c["status"] {
            c["lastTransitionTime"] = old["lastTransitionTime"].clone();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
