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
use std::time::Duration;

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::crd;
use super::instance::{FINALIZER, SERVER, SET_LABEL};
use super::model::Package;
use super::requests::{self, Request};
use super::rollout::{DeploymentSpec, Order, Phase, Plan, Progress, SetSpec, Share, Step};
use crate::time::{Timestamp, parse_time, rfc3339};

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

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

fn identity(object: &Value) -> (String, String, String, i64) {
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
fn typed<T: serde::de::DeserializeOwned>(object: &Value) -> Result<T, String> {
    let spec = match &object["spec"] {
        Value::Null => &Value::Object(Default::default()),
        spec => spec,
    };
    serde_path_to_error::deserialize(spec).map_err(|e| match e.path().to_string().as_str() {
        "." => format!("spec: {}", e.inner()),
        path => format!("spec.{path}: {}", e.inner()),
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
        rows: Vec<Value>,
        (problem, cleaning): (Option<&str>, &[String]),
        now: Timestamp,
    ) -> Value {
        let total = rows.len();
        let wanted = self.wanted();
        let done = plan.up_to_date == total && plan.ready == total && total == wanted;
        let failed: Vec<String> = rows
            .iter()
            .filter(|r| r["stage"] == "failed")
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
            condition(kind, on, reason, message, self.generation, now)
        };
        json!({
            "observedGeneration": self.generation,
            "replicas": total,
            "selector": format!("{SET_LABEL}={}", self.name),
            "readyReplicas": plan.ready,
            "upToDateReplicas": plan.up_to_date,
            "availableReplicas": plan.available,
            "ready": format!("{}/{wanted}", plan.ready),
            "waiting": waiting,
            "instances": rows,
            "conditions": [
                condition(
                    "Available",
                    enough,
                    if enough { "Available" } else { "NotAvailable" },
                    &format!("{} of {wanted} instances available; at least {least} wanted", plan.available),
                ),
                condition("Ready", done, if done { "AllReady" } else { "NotAllReady" }, &waiting),
                condition(
                    "Progressing",
                    !done && !self.spec.paused && degraded.is_none(),
                    "Rolling",
                    &rolling,
                ),
                condition("Paused", self.spec.paused, "Paused", ""),
                condition(
                    "Degraded",
                    degraded.is_some(),
                    "CannotProceed",
                    degraded.as_deref().unwrap_or_default(),
                ),
            ],
        })
    }

    /// The status of a set being deleted: its instances being cleaned up,
    /// each with the step it is at, in a `Deleting` condition.
    pub fn deleting_status(&self, previous: &Value, rows: Vec<Value>, now: Timestamp) -> Value {
        let held: Vec<String> = rows.iter().map(row_with_step).collect();
        let message = format!(
            "cleaning up {} instance(s): {}",
            held.len(),
            held.join(", ")
        );
        let mut status = match previous {
            Value::Object(_) => previous.clone(),
            _ => json!({}),
        };
        status["replicas"] = json!(rows.len());
        status["instances"] = json!(rows);
        status["waiting"] = json!(message);
        let mut conditions: Vec<Value> = status["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c["type"] != "Deleting")
            .collect();
        conditions.push(condition(
            "Deleting",
            true,
            "CleaningUp",
            &message,
            self.generation,
            now,
        ));
        status["conditions"] = json!(conditions);
        status
    }
}

/// An instance row of a status by name, with the step its list is at
/// (`web-1 at install-environment`).
fn row_with_step(row: &Value) -> String {
    let name = row["name"].as_str().unwrap_or_default();
    match row["task"].as_str() {
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

/// A deployment's revision: a digest of its code's version and artifact
/// and its steps, 12 hex digits.
fn revision(code: &str, artifact: &str, steps: &[Step]) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{code}\n{artifact}\n{steps:?}").as_bytes());
    hex::encode(&digest[..6])
}

/// The longest pause a gray release takes: a year.
const LONGEST_PAUSE: Duration = Duration::from_secs(366 * 24 * 3600);

/// `30s`, `10m`, `2h`, at most a year.
pub fn duration(text: &str) -> Result<Duration, String> {
    let not = || {
        format!(
            "`{}` is not a duration such as 30s, 10m or 2h",
            crate::text::printable(text)
        )
    };
    let (number, unit) = text.split_at(text.len().saturating_sub(1));
    let n: u64 = number.parse().map_err(|_| not())?;
    let seconds = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        _ => return Err(not()),
    };
    match seconds.map(Duration::from_secs) {
        Some(pause) if pause <= LONGEST_PAUSE => Ok(pause),
        _ => Err(format!(
            "`{text}` is longer than a year: a pause waits at most 366 days"
        )),
    }
}

/// A `VMDeployment`, read, with its rollout's progress from its status.
#[derive(Debug, Clone)]
pub struct VmDeployment {
    pub namespace: String,
    pub name: String,
    pub generation: i64,
    /// The `VMReplicaSet` it deploys to.
    pub set: String,
    pub artifact: String,
    pub spec: DeploymentSpec,
    /// What a rollout delivers, in one word: a digest of the code (version
    /// and artifact) and the steps. A new revision is a new rollout, which
    /// no approval of an earlier one carries into.
    pub revision: String,
    pub progress: Progress,
    /// The version its status is about.
    pub status_code: Option<String>,
    /// The revision its status is about (a new one starts a new rollout).
    pub status_revision: Option<String>,
    pub status_phase: Option<String>,
    /// What people asked of it (approve, promote, abort).
    pub requests: DeploymentRequests,
    /// The people's actions its status keeps, newest last.
    pub actions: Vec<Value>,
    /// The revisions released in full, oldest first, the last
    /// [`KEPT_RELEASES`] (`status.history`).
    pub history: Vec<Value>,
}

/// What people asked of a deployment, from its annotations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentRequests {
    pub approve: Option<Request>,
    pub promote: Option<Request>,
    pub abort: Option<Request>,
}

impl DeploymentRequests {
    fn read(object: &Value) -> Result<Self, String> {
        let annotations = super::instance::annotations_of(object);
        Ok(Self {
            approve: Request::read(&annotations, requests::APPROVE)?,
            promote: Request::read(&annotations, requests::PROMOTE)?,
            abort: Request::read(&annotations, requests::ABORT)?,
        })
    }

    /// Whether `request` is about the rollout of `code` at `revision` that
    /// started at `started`: made for that code after the rollout started,
    /// and, when it names a revision (the HTTP API's do), for this one.
    fn is_about(request: &Request, code: &str, revision: &str, started: Timestamp) -> bool {
        request.code.as_deref() == Some(code)
            && request.at >= started
            && request.revision.as_deref().is_none_or(|r| r == revision)
    }

    /// The requests about the rollout of `code` at `revision` that started
    /// at `started`, each with its action's name.
    fn about<'a>(
        &'a self,
        code: &'a str,
        revision: &'a str,
        started: Timestamp,
    ) -> impl Iterator<Item = (&'static str, &'a Request)> + 'a {
        [
            ("approve", &self.approve),
            ("promote", &self.promote),
            ("abort", &self.abort),
        ]
        .into_iter()
        .filter_map(move |(action, request)| {
            request
                .as_ref()
                .filter(|r| Self::is_about(r, code, revision, started))
                .map(|r| (action, r))
        })
    }
}

/// How many people's actions a deployment's status keeps.
const KEPT_ACTIONS: usize = 20;
/// How many released revisions a deployment's status keeps (its history,
/// which `rollback` goes back to).
pub const KEPT_RELEASES: usize = 10;

impl VmDeployment {
    /// Read a `VMDeployment` object.
    pub fn read(object: &Value) -> Result<Self, String> {
        let (namespace, name, _, generation) = identity(object);
        let spec: crd::VmDeploymentSpec = typed(object)?;
        let set = Some(spec.replica_set)
            .filter(|s| !s.is_empty())
            .ok_or("spec.replicaSet names no VMReplicaSet")?;
        let code = Some(spec.code.version)
            .filter(|s| !s.is_empty())
            .ok_or("spec.code.version is missing")?;
        let artifact = spec.code.artifact;
        let mut steps = Vec::new();
        for (i, step) in spec.steps.iter().enumerate() {
            let at = |e: String| format!("spec.steps[{i}]: {e}");
            steps.push(match (&step.instances, &step.pause) {
                (Some(share), None) => Step::Instances(Share::parse(share).map_err(at)?),
                (None, Some(pause)) => Step::Pause(
                    pause
                        .duration
                        .as_deref()
                        .map(duration)
                        .transpose()
                        .map_err(at)?,
                ),
                _ => return Err(at("a step is either instances or a pause".into())),
            });
        }
        let deadline = spec.progress_deadline_seconds;
        let revision = revision(&code, &artifact, &steps);
        let status = &object["status"];
        let history = status["history"].as_array().cloned().unwrap_or_default();
        let progress = Progress {
            step: status["stepIndex"].as_u64().unwrap_or(0) as usize,
            since: text(status, "/stepStartedAt")
                .and_then(|t| parse_time(t).ok())
                .unwrap_or(0),
            started: text(status, "/startedAt")
                .and_then(|t| parse_time(t).ok())
                .unwrap_or(0),
            // An approval is of one step of one revision: kept for a later
            // revision (or, from before revisions were kept, for none), it
            // approves nothing.
            approved: status["approvedStep"].as_u64().is_some()
                && status["approvedStep"].as_u64() == status["stepIndex"].as_u64()
                && text(status, "/approvedRevision") == Some(revision.as_str()),
            promoted: status["promoted"].as_bool().unwrap_or(false),
            aborted: status["aborted"].as_bool().unwrap_or(false),
        };
        Ok(Self {
            namespace,
            name,
            generation,
            set,
            artifact,
            spec: DeploymentSpec {
                // What an abort goes back to: the newest revision released
                // in full with other code (the history), else the status's
                // stable code.
                previous: history
                    .iter()
                    .rev()
                    .filter_map(|r| r["code"].as_str())
                    .find(|c| *c != code)
                    .or_else(|| text(status, "/stableCode"))
                    .map(String::from),
                code,
                steps,
                paused: spec.paused,
                progress_deadline: Duration::from_secs(deadline),
            },
            revision,
            progress,
            status_code: text(status, "/code").map(String::from),
            status_revision: text(status, "/revision").map(String::from),
            status_phase: text(status, "/phase").map(String::from),
            requests: DeploymentRequests::read(object)?,
            actions: status["actions"].as_array().cloned().unwrap_or_default(),
            history,
        })
    }

    /// The rollout to carry on at `now`: the one in its status, or a new
    /// one when the code changed — its step back to the first, and the
    /// code released before it the last one that completed.
    pub fn rollout(&self, now: Timestamp) -> (DeploymentSpec, Progress) {
        let mut spec = self.spec.clone();
        // The rollout in the status goes on while it is of this revision
        // (a status written before revisions were kept: of this code).
        let same = match &self.status_revision {
            Some(revision) => *revision == self.revision,
            None => self.status_code.as_deref() == Some(spec.code.as_str()),
        };
        match &self.status_code {
            Some(code) if same => {
                let mut progress = self.progress.clone();
                if progress.since == 0 {
                    progress.since = now;
                }
                if progress.started == 0 {
                    progress.started = progress.since;
                }
                // What people asked of this rollout.
                for (action, request) in self.requests.about(code, &self.revision, progress.started)
                {
                    match action {
                        "approve" => progress.approved |= request.step == Some(progress.step),
                        "promote" => progress.promoted = true,
                        _ => progress.aborted = true,
                    }
                }
                (spec, progress)
            }
            previous => {
                // The code of a completed rollout is what was released; an
                // unfinished one leaves the one released before it.
                if self.status_phase.as_deref() == Some("Completed") {
                    spec.previous = previous.clone().or(spec.previous);
                }
                let progress = Progress {
                    since: now,
                    started: now,
                    ..Progress::default()
                };
                (spec, progress)
            }
        }
    }

    /// The status of the rollout planned, at `now`; `rows` are the set's
    /// instances as its status shows them.
    pub fn status(
        &self,
        spec: &DeploymentSpec,
        plan: &Plan,
        updated: usize,
        rows: &[Value],
        now: Timestamp,
    ) -> Value {
        let steps = spec.steps.len().max(1);
        let degraded = plan.phase == Phase::Degraded;
        let waiting_on_person = plan.waiting.contains("approve");
        let conditions = vec![
            condition(
                "Ready",
                plan.phase == Phase::Completed,
                phase_reason(plan.phase),
                &plan.waiting,
                self.generation,
                now,
            ),
            condition(
                "Progressing",
                plan.phase == Phase::Progressing && !plan.past_deadline,
                match plan.past_deadline {
                    true => "ProgressDeadlineExceeded",
                    false => phase_reason(plan.phase),
                },
                &match plan.past_deadline {
                    true => format!(
                        "no progress within {}s: {}",
                        spec.progress_deadline.as_secs(),
                        plan.waiting
                    ),
                    false => plan.waiting.clone(),
                },
                self.generation,
                now,
            ),
            condition(
                "Paused",
                plan.phase == Phase::Paused || waiting_on_person,
                match waiting_on_person {
                    true => "WaitingForApproval",
                    false => phase_reason(plan.phase),
                },
                &plan.waiting,
                self.generation,
                now,
            ),
            condition(
                "Degraded",
                degraded,
                phase_reason(plan.phase),
                &plan.waiting,
                self.generation,
                now,
            ),
        ];
        let mut status = json!({
            "observedGeneration": self.generation,
            "phase": format!("{:?}", plan.phase),
            "step": format!("{}/{steps}", (plan.progress.step + 1).min(steps)),
            "waiting": plan.waiting,
            "updatedInstances": updated,
            "readyInstances": plan.ready,
            "code": spec.code,
            "revision": self.revision,
            "stableCode": match plan.phase {
                Phase::Completed => Some(spec.code.clone()),
                _ => spec.previous.clone(),
            },
            "stepIndex": plan.progress.step,
            "stepStartedAt": rfc3339(plan.progress.since),
            "startedAt": rfc3339(plan.progress.started),
            "promoted": plan.progress.promoted,
            "aborted": plan.progress.aborted,
            "actions": self.actions_kept(&spec.code, plan.progress.started),
            "history": self.history_kept(spec, plan.phase, now),
            "instances": rows.iter().map(|r| {
                let mut row = json!({
                    "name": r["name"], "stage": r["stage"], "code": r["code"], "task": r["task"],
                });
                // As the server keeps it: no nulls.
                if let Some(fields) = row.as_object_mut() {
                    fields.retain(|_, value| !value.is_null());
                }
                row
            }).collect::<Vec<_>>(),
            "conditions": conditions,
        });
        if let Some(approval) = self.requests.approve.as_ref().filter(|r| {
            DeploymentRequests::is_about(r, &spec.code, &self.revision, plan.progress.started)
        }) {
            status["approvedStep"] = json!(approval.step);
            status["approvedRevision"] = json!(self.revision);
            status["approvedBy"] = json!(approval.by);
            status["approvedReason"] = json!(approval.why);
        }
        // No code released before: no field (a null in a merge patch
        // deletes, and the server keeps no nulls).
        if let Some(fields) = status.as_object_mut() {
            fields.retain(|_, value| !value.is_null());
        }
        status
    }
}

impl VmDeployment {
    /// The released revisions the status keeps: those it kept, and this
    /// one once its rollout completed (a revision released again moves to
    /// the end).
    fn history_kept(&self, spec: &DeploymentSpec, phase: Phase, now: Timestamp) -> Vec<Value> {
        let mut history = self.history.clone();
        let last = history.last().and_then(|r| r["revision"].as_str());
        if phase == Phase::Completed && last != Some(self.revision.as_str()) {
            history.retain(|r| r["revision"] != self.revision.as_str());
            history.push(json!({
                "revision": self.revision, "code": spec.code, "artifact": self.artifact,
                "releasedAt": rfc3339(now),
            }));
        }
        let excess = history.len().saturating_sub(KEPT_RELEASES);
        history.drain(..excess);
        history
    }

    /// The actions the status keeps: those it kept, and each request about
    /// this rollout not among them yet (the audit of who approved,
    /// promoted or aborted, when and why).
    fn actions_kept(&self, code: &str, started: Timestamp) -> Vec<Value> {
        let mut actions = self.actions.clone();
        for (action, request) in self.requests.about(code, &self.revision, started) {
            let at = rfc3339(request.at);
            let kept = actions
                .iter()
                .any(|a| a["action"] == action && a["at"] == at.as_str());
            if !kept {
                actions.push(json!({
                    "action": action, "code": code, "step": request.step,
                    "by": request.by, "why": request.why, "at": at,
                }));
            }
        }
        let excess = actions.len().saturating_sub(KEPT_ACTIONS);
        actions.drain(..excess);
        actions
    }
}

fn phase_reason(phase: Phase) -> &'static str {
    match phase {
        Phase::Progressing => "Progressing",
        Phase::Paused => "Paused",
        Phase::Completed => "Completed",
        Phase::Degraded => "TaskFailed",
        Phase::Aborted => "Aborted",
    }
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
fn condition(
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
) -> Value {
    use super::instance::ListOutcome;
    use crate::wit::WitName;
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
    let step = |l: &super::instance::CurrentList| {
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
    json!([
        condition("Ready", ready, reason, &message, generation, now),
        match running {
            Some(l) if l.awaiting_approval() => condition(
                "Progressing",
                true,
                "WaitingForApproval",
                &format!("the {stage} list waits for a person"),
                generation,
                now
            ),
            Some(l) => condition(
                "Progressing",
                true,
                "ListRunning",
                &format!("{stage}: {} (attempt {})", step(l), l.attempt + 1),
                generation,
                now
            ),
            None => condition(
                "Progressing",
                false,
                "AtRest",
                &format!("{stage}: no list runs"),
                generation,
                now
            ),
        },
        match failed {
            Some(l) => condition(
                "Degraded",
                true,
                "ListFailed",
                &format!(
                    "{} failed at {}: {}",
                    l.stage.wit_name(),
                    l.task.as_deref().unwrap_or_default(),
                    l.message
                ),
                generation,
                now
            ),
            None => condition("Degraded", false, "AsExpected", "", generation, now),
        },
    ])
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
mod tests {
    use super::*;

    fn set_object(spec: Value) -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": "VMReplicaSet",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "generation": 3},
            "spec": spec,
        })
    }

    fn template() -> Value {
        json!({
            "metadata": {"labels": {"app": "web"}, "annotations": {"team": "shop"}},
            "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
        })
    }

    #[test]
    fn a_set_reads_whole_and_makes_its_machines() {
        let set = VmReplicaSet::read(&set_object(json!({
            "replicas": 3,
            "template": template(),
            "environment": [{"name": "jdk", "version": "21"}],
            "rollout": {"maxUnavailable": "50%", "order": "newest-first"},
            "lostInstance": "scale-down",
            "offline": ["web-1"],
            "paused": true,
        })))
        .unwrap();
        assert_eq!(
            (set.replicas, set.generation, set.lost),
            (3, 3, Lost::ScaleDown)
        );
        assert_eq!(set.spec.max_unavailable, Share::Percent(50));
        assert_eq!(set.spec.order, Order::NewestFirst);
        assert_eq!(set.offline, ["web-1"]);
        assert!(set.spec.paused);
        assert_eq!(set.spec.environment[0].version, "21");

        let server = set.server("web-0", &set.spec.environment, Some("1.0"));
        assert_eq!(server["kind"], "Server");
        assert_eq!(
            server["metadata"]["labels"],
            json!({"verdict.dev/vmreplicaset": "web"})
        );
        assert_eq!(
            server["metadata"]["finalizers"],
            json!(["verdict.dev/cleanup"])
        );
        assert_eq!(server["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(
            server["spec"],
            json!({"replicaSet": "web", "environment": [{"name": "jdk", "version": "21"}], "code": "1.0"})
        );
        let vm = set.machine("web-0", "s-1");
        assert_eq!(
            vm["metadata"]["labels"],
            json!({"app": "web", "verdict.dev/vmreplicaset": "web"})
        );
        assert_eq!(vm["metadata"]["annotations"]["verdict.dev/server"], "web-0");
        assert_eq!(vm["metadata"]["annotations"]["team"], "shop");
        assert_eq!(vm["metadata"]["finalizers"], json!(["verdict.dev/cleanup"]));
        assert_eq!(
            vm["metadata"]["ownerReferences"],
            json!([{"apiVersion": "verdict.dev/v1alpha1", "kind": "Server", "name": "web-0",
                "uid": "s-1", "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(vm["spec"], template()["spec"]);

        // Defaults: one instance, one out of service at a time.
        let plain = VmReplicaSet::read(&set_object(json!({"template": template()}))).unwrap();
        assert_eq!((plain.replicas, plain.lost), (1, Lost::Repair));
        assert_eq!(plain.spec.max_unavailable, Share::Count(1));
    }

    #[test]
    fn a_set_adopts_a_vm_no_controller_owns_and_no_other() {
        let set = VmReplicaSet::read(&set_object(json!({"replicas": 2, "template": template(),
            "selector": {"matchLabels": {"tier": "legacy"}}})))
        .unwrap();
        let free = json!({"metadata": {"name": "old", "resourceVersion": "7",
            "ownerReferences": [{"kind": "ConfigMap", "name": "notes", "uid": "u-2"}],
            "finalizers": ["example.com/keep"]}});
        assert_eq!(
            set.adoption(&free, None),
            None,
            "not before its Server is made"
        );
        let adoption = set.adoption(&free, Some("s-9")).unwrap();
        assert_eq!(adoption["resourceVersion"], "7", "on the version read");
        assert_eq!(adoption["labels"][SET_LABEL], "web");
        assert_eq!(adoption["annotations"][SERVER], "old");
        assert_eq!(adoption["ownerReferences"][1], server_owner("old", "s-9"));
        assert_eq!(
            adoption["finalizers"],
            json!(["example.com/keep", FINALIZER])
        );
        let owned = json!({"metadata": {"name": "pooled",
            "ownerReferences": [{"kind": "VirtualMachinePool", "name": "db", "uid": "u-3", "controller": true}]}});
        assert_eq!(set.adoption(&owned, Some("s-9")), None);
        let going =
            json!({"metadata": {"name": "going", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(set.adoption(&going, Some("s-9")), None);
    }

    #[test]
    fn a_servers_conditions_say_whether_it_serves_moves_or_failed() {
        use crate::lifecycle::instance::{CurrentList, Recorded};
        use crate::lifecycle::model::{Next, Task};
        use crate::wit::lifecycle::Stage;
        let of = |conditions: &Value, kind: &str| -> (String, String) {
            let c = conditions
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == kind)
                .unwrap();
            (
                c["status"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        };
        let serving = Recorded {
            stage: Some(Stage::Serving),
            ..Recorded::default()
        };
        let at_rest = server_conditions(&serving, (true, true), 2, 0);
        assert_eq!(of(&at_rest, "Ready"), ("True".into(), "InService".into()));
        assert_eq!(
            of(&at_rest, "Progressing"),
            ("False".into(), "AtRest".into())
        );
        assert_eq!(
            of(&at_rest, "Degraded"),
            ("False".into(), "AsExpected".into())
        );
        assert_eq!(at_rest[0]["observedGeneration"], 2);
        let lost_node = server_conditions(&serving, (true, false), 2, 0);
        assert_eq!(
            of(&lost_node, "Ready"),
            ("False".into(), "NodeNotHealthy".into())
        );

        let next = Next::Move {
            stage: Stage::Deploying,
            tasks: vec![Task {
                name: "deploy-code".into(),
                params: json!({}),
            }],
            environment: None,
            code: Some("2.0".into()),
            needs_approval: false,
            reason: "a test".into(),
        };
        let mut moving = serving.clone();
        moving.enter(CurrentList::entered(0, &next, 0).unwrap(), 0);
        let running = server_conditions(&moving, (true, true), 2, 0);
        assert_eq!(
            of(&running, "Ready"),
            ("False".into(), "NotInService".into())
        );
        assert_eq!(
            of(&running, "Progressing"),
            ("True".into(), "ListRunning".into())
        );
        assert_eq!(running[1]["message"], "deploying: deploy-code (attempt 1)");
        let list = moving.list.as_mut().unwrap();
        list.advance(
            crate::lifecycle::hooks::StepOutcome::Failed {
                message: "disk full".into(),
            },
            1,
        );
        let failed = server_conditions(&moving, (true, true), 2, 0);
        assert_eq!(
            of(&failed, "Degraded"),
            ("True".into(), "ListFailed".into())
        );
        assert_eq!(
            failed[2]["message"],
            "deploying failed at deploy-code: disk full"
        );
    }

    #[test]
    fn a_set_that_cannot_be_carried_out_says_why() {
        let refused = |spec: Value| VmReplicaSet::read(&set_object(spec)).unwrap_err();
        assert!(refused(json!({})).contains("spec.template.spec is missing"));
        assert!(
            refused(json!({"template": template(), "rollout": {"maxUnavailable": 0}}))
                .contains("maxUnavailable and maxSurge are both 0")
        );
        assert!(
            refused(json!({"template": template(), "rollout": {"maxSurge": "x"}}))
                .starts_with("spec.rollout.maxSurge: `x` is not a share")
        );
        let surging = VmReplicaSet::read(&set_object(
            json!({"template": template(), "rollout": {"maxUnavailable": 0, "maxSurge": "25%"}}),
        ))
        .unwrap();
        assert_eq!(
            (surging.spec.max_unavailable, surging.spec.max_surge),
            (Share::Count(0), Share::Percent(25))
        );
        assert!(
            refused(json!({"template": template(), "lostInstance": "ignore"}))
                .contains("spec.lostInstance: unknown variant `ignore`")
        );
        assert!(
            refused(json!({"template": template(), "environment": [{"name": "jdk"}]}))
                .starts_with("spec.environment[0]: missing field `version`")
        );
    }

    #[test]
    fn new_instances_take_the_lowest_free_number_and_durations_read() {
        assert_eq!(instance_name("web", ["web-0", "web-2"]), "web-1");
        assert_eq!(instance_name("web", []), "web-0");
        assert_eq!(duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(duration("10").is_err());
        assert!(duration("m").is_err());
        assert!(duration("1d").is_err());
        // Many digits (the CRD's pattern allows them) are refused in words,
        // never multiplied past u64.
        for long in [
            "99999999999999999999h",
            "5124095576030432h",
            "8784h1",
            "8785h",
        ] {
            assert!(duration(long).is_err(), "{long}");
        }
        assert!(
            duration("5124095576030432h")
                .unwrap_err()
                .contains("longer than a year")
        );
        assert_eq!(duration("8784h"), Ok(Duration::from_secs(8784 * 3600)));
    }

    fn deployment(status: Value) -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": "VMDeployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": 2},
            "spec": {
                "replicaSet": "web",
                "code": {"artifact": "registry.example/web", "version": "1.1"},
                "steps": [{"instances": 1}, {"pause": {}}, {"instances": "50%"}, {"pause": {"duration": "10m"}}],
                "progressDeadlineSeconds": 300,
            },
            "status": status,
        })
    }

    /// An abort goes back to the newest code released in full, as the
    /// history keeps it, whatever the stable code of the status says.
    #[test]
    fn the_code_an_abort_goes_back_to_is_the_newest_released_other_code() {
        let previous = |status: Value| {
            VmDeployment::read(&deployment(status))
                .unwrap()
                .spec
                .previous
        };
        let history = json!([
            {"revision": "a", "code": "0.9"},
            {"revision": "b", "code": "1.0"},
            {"revision": "c", "code": "1.1"},
        ]);
        assert_eq!(
            previous(json!({"code": "1.1", "stableCode": "0.1", "history": history})),
            Some("1.0".into())
        );
        assert_eq!(
            previous(json!({"code": "1.1", "stableCode": "1.0"})),
            Some("1.0".into())
        );
        assert_eq!(
            previous(json!({"history": [{"revision": "c", "code": "1.1"}]})),
            None
        );
    }

    #[test]
    fn a_deployment_reads_its_steps_and_its_progress() {
        let at_gate = |approved_revision: &str| {
            VmDeployment::read(&deployment(json!({
                "code": "1.1", "stableCode": "1.0", "stepIndex": 1,
                "stepStartedAt": "2026-01-01T00:00:00Z", "approvedStep": 1,
                "approvedRevision": approved_revision,
            })))
            .unwrap()
        };
        let revision = at_gate("").revision;
        assert_eq!(revision.len(), 12, "{revision}");
        // An approval of the step of another revision (or of none named)
        // approves nothing.
        assert!(!at_gate("").progress.approved);
        assert!(!at_gate("0123456789ab").progress.approved);
        let read = at_gate(&revision);
        assert_eq!(read.set, "web");
        assert_eq!(
            read.spec.steps,
            [
                Step::Instances(Share::Count(1)),
                Step::Pause(None),
                Step::Instances(Share::Percent(50)),
                Step::Pause(Some(Duration::from_secs(600))),
            ]
        );
        assert_eq!(read.spec.progress_deadline, Duration::from_secs(300));
        assert_eq!(read.spec.previous.as_deref(), Some("1.0"));
        assert_eq!((read.progress.step, read.progress.approved), (1, true));
        // The same code carries its rollout on.
        let (spec, progress) = read.rollout(5);
        assert_eq!((spec.previous.as_deref(), progress.step), (Some("1.0"), 1));

        // A new version starts over; the last completed one is the stable one.
        let completed = VmDeployment::read(&deployment(json!({
            "code": "1.0", "phase": "Completed", "stableCode": "0.9", "stepIndex": 4,
        })))
        .unwrap();
        let (spec, progress) = completed.rollout(7);
        assert_eq!(
            (spec.previous.as_deref(), progress.step, progress.since),
            (Some("1.0"), 0, 7)
        );
        // Replacing an unfinished rollout keeps the one released before it.
        let unfinished = VmDeployment::read(&deployment(json!({
            "code": "1.0", "phase": "Progressing", "stableCode": "0.9", "stepIndex": 2,
        })))
        .unwrap();
        let (spec, progress) = unfinished.rollout(7);
        assert_eq!((spec.previous.as_deref(), progress.step), (Some("0.9"), 0));
    }

    #[test]
    fn a_new_revision_is_a_new_rollout_whose_status_keeps_no_earlier_approval() {
        let read = |steps: Value, status: Value| {
            let mut object = deployment(status);
            object["spec"]["steps"] = steps;
            VmDeployment::read(&object).unwrap()
        };
        let gated = json!([{"instances": 1}, {"pause": {}}]);
        let first = read(gated.clone(), Value::Null);
        // Approved at its gate.
        let approved = read(
            gated.clone(),
            json!({"code": "1.1", "revision": first.revision, "stepIndex": 1,
                "startedAt": "2026-01-01T00:00:00Z", "stepStartedAt": "2026-01-01T00:00:00Z",
                "approvedStep": 1, "approvedRevision": first.revision}),
        );
        assert!(approved.rollout(1).1.approved);
        // The same code with other steps: another revision, a new rollout
        // from its first step, and no approval.
        let other = read(
            json!([{"instances": 2}, {"pause": {}}]),
            json!({"code": "1.1", "revision": first.revision, "stepIndex": 1,
                "approvedStep": 1, "approvedRevision": first.revision}),
        );
        assert_ne!(other.revision, first.revision);
        let (_, progress) = other.rollout(1);
        assert_eq!((progress.step, progress.approved), (0, false));
    }

    #[test]
    fn people_approve_promote_and_abort_a_rollout_through_its_annotations() {
        let at_gate = json!({"code": "1.1", "stableCode": "1.0", "stepIndex": 1,
            "stepStartedAt": "2026-01-01T00:10:00Z", "startedAt": "2026-01-01T00:00:00Z"});
        let with = |key: &str, request: &Request| {
            let mut object = deployment(at_gate.clone());
            object["metadata"]["annotations"] = json!({ key: request.write() });
            VmDeployment::read(&object).unwrap()
        };
        let started = parse_time("2026-01-01T00:00:00Z").unwrap();
        let mut approval = Request::new("alice", "canary is fine", started + 700_000);
        approval.code = Some("1.1".into());
        approval.step = Some(1);
        let read = with(requests::APPROVE, &approval);
        let (_, progress) = read.rollout(started + 800_000);
        assert!(
            progress.approved,
            "the gate the rollout waits at is approved"
        );
        let plan = Plan {
            targets: BTreeMap::new(),
            progress: progress.clone(),
            phase: Phase::Progressing,
            waiting: String::new(),
            ready: 3,
            up_to_date: 1,
            available: 1,
            past_deadline: false,
        };
        let status = read.status(&read.spec, &plan, 1, &[], started + 800_000);
        assert_eq!(
            (
                &status["approvedStep"],
                &status["approvedBy"],
                &status["approvedReason"]
            ),
            (&json!(1), &json!("alice"), &json!("canary is fine"))
        );
        assert_eq!(status["actions"][0]["action"], "approve");
        assert_eq!(status["actions"][0]["by"], "alice");
        // Written again, the action is kept once.
        let mut again = deployment(status.clone());
        again["metadata"]["annotations"] = json!({ requests::APPROVE: approval.write() });
        let again = VmDeployment::read(&again).unwrap();
        let status = again.status(&again.spec, &plan, 1, &[], started + 900_000);
        assert_eq!(status["actions"].as_array().unwrap().len(), 1);

        // An approval of another step, another code, or made before this
        // rollout started, approves nothing.
        let changes: [&dyn Fn(&mut Request); 3] = [
            &|r| r.step = Some(3),
            &|r| r.code = Some("1.0".into()),
            &|r| r.at = started - 1,
        ];
        for change in changes {
            let mut stale = approval.clone();
            change(&mut stale);
            let (_, progress) = with(requests::APPROVE, &stale).rollout(started + 800_000);
            assert!(!progress.approved, "{stale:?}");
        }
        let (_, progress) = with(requests::PROMOTE, &approval).rollout(started + 800_000);
        assert!(progress.promoted && !progress.aborted);
        let (_, progress) = with(requests::ABORT, &approval).rollout(started + 800_000);
        assert!(progress.aborted && !progress.promoted);
        // A request that does not read is named.
        let mut bad = deployment(at_gate.clone());
        bad["metadata"]["annotations"] = json!({ requests::ABORT: "yes" });
        assert!(
            VmDeployment::read(&bad)
                .unwrap_err()
                .starts_with("verdict.dev/abort does not read")
        );
    }

    #[test]
    fn a_deployment_that_cannot_be_carried_out_says_why() {
        let refused = |change: &dyn Fn(&mut Value)| {
            let mut object = deployment(Value::Null);
            change(&mut object);
            VmDeployment::read(&object).unwrap_err()
        };
        assert_eq!(
            refused(&|o| o["spec"]["replicaSet"] = json!("")),
            "spec.replicaSet names no VMReplicaSet"
        );
        assert_eq!(
            refused(&|o| o["spec"]["steps"] = json!([{"instances": 1, "pause": {}}])),
            "spec.steps[0]: a step is either instances or a pause"
        );
        assert!(
            refused(&|o| o["spec"]["steps"] = json!([{"pause": {"duration": "soon"}}]))
                .starts_with("spec.steps[0]: `soon` is not a duration")
        );
        assert!(
            refused(&|o| o["spec"]["code"] = json!({"artifact": "x"}))
                .starts_with("spec.code: missing field `version`")
        );
    }

    #[test]
    fn statuses_say_where_a_rollout_is_and_keep_their_transition_times() {
        let read = VmDeployment::read(&deployment(Value::Null)).unwrap();
        let (spec, progress) = read.rollout(1_000);
        let plan = Plan {
            targets: BTreeMap::new(),
            progress: Progress {
                step: 1,
                ..progress
            },
            phase: Phase::Progressing,
            waiting: "step 2: waiting for a person to approve".into(),
            ready: 3,
            up_to_date: 1,
            available: 1,
            past_deadline: false,
        };
        let status = read.status(&spec, &plan, 1, &[], 2_000);
        assert_eq!(status["step"], "2/4");
        assert_eq!(status["phase"], "Progressing");
        assert_eq!(status["code"], "1.1");
        assert_eq!(status["stepIndex"], 1);
        let paused = &status["conditions"][2];
        assert_eq!(paused["observedGeneration"], status["observedGeneration"]);
        assert_eq!(
            (
                paused["type"].as_str(),
                paused["status"].as_str(),
                paused["reason"].as_str()
            ),
            (Some("Paused"), Some("True"), Some("WaitingForApproval"))
        );

        let mut later = read.status(&spec, &plan, 1, &[], 9_000);
        keep_transitions(&status, &mut later);
        assert_eq!(
            later["conditions"][2]["lastTransitionTime"],
            status["conditions"][2]["lastTransitionTime"]
        );

        let set = VmReplicaSet::read(&set_object(json!({"replicas": 2, "template": template()})))
            .unwrap();
        let rows = vec![
            json!({"name": "web-0", "stage": "serving"}),
            json!({"name": "web-1", "stage": "failed", "task": "install-environment"}),
        ];
        let status = set.status(&plan, rows.clone(), (None, &[]), 2_000);
        assert_eq!(status["ready"], "3/2");
        assert_eq!(status["availableReplicas"], 1);
        // Degraded names the instance and the step it failed at.
        assert_eq!(
            status["waiting"],
            "failed: web-1 at install-environment (a person decides)"
        );
        let condition = |status: &Value, kind: &str| {
            status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == kind)
                .cloned()
                .unwrap()
        };
        assert_eq!(condition(&status, "Degraded")["status"], "True");
        // Every condition says which generation it was set from.
        assert!(
            status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["observedGeneration"] == status["observedGeneration"]),
            "{status:#}"
        );
        // One of two available, with one allowed out: available.
        let available = condition(&status, "Available");
        assert_eq!(
            (available["status"].as_str(), available["message"].as_str()),
            (
                Some("True"),
                Some("1 of 2 instances available; at least 1 wanted")
            )
        );
        let none = Plan {
            available: 0,
            ..plan.clone()
        };
        let status = set.status(&none, rows.clone(), (None, &[]), 2_000);
        assert_eq!(condition(&status, "Available")["reason"], "NotAvailable");

        // Deleted: which instances hold it, and where.
        let deleting = set.deleting_status(&status, rows, 3_000);
        assert_eq!(
            condition(&deleting, "Deleting")["message"],
            "cleaning up 2 instance(s): web-0, web-1 at install-environment"
        );
        assert_eq!(condition(&deleting, "Degraded")["status"], "True");
    }
}
