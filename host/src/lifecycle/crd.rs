//! The two resources of seed 002's delivery as Rust types: what the API
//! server serves (`kubectl get vmreplicasets,vmdeployments`) is generated
//! from these — their schemas, validation rules, printer columns and
//! subresources (`verdict crds`, which `cargo xtask crds` writes into the
//! chart) — and their specs are read through them.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::lists::{CurrentList, LogEntry};
use super::rollout::Order;

/// A `VMReplicaSet` (seed 002): the machines of an application hosted on
/// virtual machines and the environment they run — the packages, with their
/// versions, installed on every instance. Its instances are KubeVirt
/// `VirtualMachine`s made from `template` (creating one is applying for a
/// machine) or adopted by `selector`. An environment change moves its
/// instances through the instance state machine again, at most
/// `rollout.maxUnavailable` out of `ready` at a time. Instances named in
/// `offline` are drained and deleted, and the set shrinks by them. Status is
/// written by the leader of verdict's replicas only, which carries it out
/// with --vm-delivery.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
// Printer columns repeat their keys, which clippy takes for repeated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "verdict.dev",
    version = "v1alpha1",
    kind = "VMReplicaSet",
    root = "VmReplicaSetResource",
    plural = "vmreplicasets",
    singular = "vmreplicaset",
    shortname = "vmrs",
    namespaced,
    status = "VmReplicaSetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.ready"),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.upToDateReplicas"
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas"
    ),
    printcolumn(
        name = "Waiting",
        type_ = "string",
        json_path = ".status.waiting",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    doc = "The machines of an application hosted on virtual machines and the environment they run (seed 002)."
)]
#[serde(rename_all = "camelCase")]
pub struct VmReplicaSetSpec {
    /// How many instances the set keeps (instances taken offline are not
    /// counted or replaced).
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub replicas: u32,
    /// Existing VirtualMachines with these labels are adopted as instances
    /// of the set.
    pub selector: Option<Selector>,
    /// The instance template, a KubeVirt VirtualMachine's metadata and spec.
    pub template: Template,
    /// The packages every instance runs (runtimes, agents), each with its
    /// version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub environment: Vec<PackageSpec>,
    /// How an environment change rolls over the instances.
    pub rollout: Option<RolloutSpec>,
    /// What an instance lost with its node gets when failover repairs it —
    /// repair (a new instance through the whole machine) or scale-down (it
    /// is named in offline, drained and deleted, and the set is smaller by
    /// it).
    #[serde(default)]
    pub lost_instance: LostInstance,
    /// Instances an operator takes offline for good — each drained, then
    /// deleted; the set runs replicas less these and gives their names to
    /// no new instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"), inner(length(min = 1)))]
    pub offline: Vec<String>,
    /// No instance is moved while set.
    #[serde(default)]
    pub paused: bool,
}

fn one() -> u32 {
    1
}

/// Labels a VM must carry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// A VM template: its labels and annotations, and KubeVirt's spec as it is.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Template {
    pub metadata: Option<TemplateMetadata>,
    #[schemars(schema_with = "crate::schema::any_object")]
    pub spec: Value,
}

/// The labels and annotations of a template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMetadata {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A package of the environment, with its version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PackageSpec {
    #[schemars(length(min = 1))]
    pub name: String,
    #[schemars(length(min = 1))]
    pub version: String,
}

/// How an environment change rolls over a set's instances.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.maxUnavailable) || (type(self.maxUnavailable) == int ? self.maxUnavailable >= 0 : self.maxUnavailable.matches('^([0-9][0-9]?|100)%$'))",
    "message": "maxUnavailable must be a count of at least 0, or a share from 0% to 100%"
}, {
    "rule": "!has(self.maxSurge) || (type(self.maxSurge) == int ? self.maxSurge >= 0 : self.maxSurge.matches('^([0-9][0-9]?|100)%$'))",
    "message": "maxSurge must be a count of at least 0, or a share from 0% to 100%"
}, {
    "rule": "!(has(self.maxUnavailable) && string(self.maxUnavailable) in ['0', '0%']) || (has(self.maxSurge) && !(string(self.maxSurge) in ['0', '0%']))",
    "message": "maxUnavailable may be 0 only with a maxSurge: with neither, no instance could be taken out of service to be updated"
}]))]
pub struct RolloutSpec {
    /// How many of the instances the set wants may be unavailable at once,
    /// a count or a share ("25%"): unavailable as observed — out of
    /// service, its machine not ready, its node not healthy, or missing.
    /// A rollout takes an available instance out only within it (beside
    /// those a surge makes available); 0 only with a `maxSurge`.
    #[serde(default)]
    #[schemars(schema_with = "share_defaulting_to_one")]
    pub max_unavailable: Option<Value>,
    /// How many instances beyond those it wants the set may run while a
    /// change (its environment, its deployment's code) rolls out, a count
    /// or a share of those wanted, rounded up: each is made with the
    /// change, and each available beyond those wanted lets one more be
    /// taken out, so that the set loses no capacity; they go when the
    /// change is out.
    #[serde(default)]
    #[schemars(schema_with = "share_defaulting_to_none")]
    pub max_surge: Option<Value>,
    /// The order instances are taken in.
    #[serde(default)]
    pub order: Order,
}

/// What a set does about an instance lost with its node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LostInstance {
    /// A new instance, through the whole machine.
    #[default]
    Repair,
    /// The set shrinks by it.
    ScaleDown,
}

/// A set's status, as the controller writes it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmReplicaSetStatus {
    pub observed_generation: Option<i64>,
    pub replicas: Option<u32>,
    /// The label selector of the set's instances, as text (the scale
    /// subresource's, for `kubectl scale` and autoscalers).
    pub selector: Option<String>,
    pub ready_replicas: Option<u32>,
    /// Instances running the set's environment.
    pub up_to_date_replicas: Option<u32>,
    pub available_replicas: Option<u32>,
    /// Ready instances / desired.
    pub ready: Option<String>,
    /// Why the rollout waits, when it does.
    pub waiting: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<SetInstance>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One instance in a set's status.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetInstance {
    pub name: Option<String>,
    pub stage: Option<String>,
    #[schemars(extend("format" = "date-time"))]
    pub since: Option<String>,
    /// The environment the instance runs, as package=version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment: Vec<String>,
    pub code: Option<String>,
    /// The task in progress, as stage/step.
    pub task: Option<String>,
    pub locked_by: Option<String>,
}

/// A condition, in the shape of Kubernetes' `metav1.Condition`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: ConditionType,
    pub status: ConditionStatus,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The generation of the object the condition was set from.
    pub observed_generation: Option<i64>,
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: Option<String>,
}

impl Condition {
    /// A condition `on` or not for `reason`, set from the object's
    /// `generation` at `at`.
    pub fn new(
        type_: ConditionType,
        on: bool,
        reason: &str,
        message: &str,
        generation: i64,
        at: crate::time::Timestamp,
    ) -> Self {
        Self {
            type_,
            status: match on {
                true => ConditionStatus::True,
                false => ConditionStatus::False,
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            observed_generation: Some(generation),
            last_transition_time: Some(crate::time::rfc3339(at)),
        }
    }
}

/// The conditions the controller writes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionType {
    /// At least the instances wanted less maxUnavailable are available.
    Available,
    Ready,
    Progressing,
    Paused,
    Degraded,
    /// A set being deleted: its instances' clean-up, each at its step.
    Deleting,
}

/// A condition's state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A `VMDeployment` (seed 002): the code of an application hosted on
/// virtual machines, deployed to the instances of a `VMReplicaSet` of its
/// namespace by a gray release — its `steps`, each either a number (or
/// share) of instances that get the new code and must be ready before the
/// next step, or a pause: `pause: {}` waits for a person to approve
/// (through verdict's HTTP API or dashboard, audited), `pause: {duration:
/// 10m}` resumes by itself. A failed task stops the rollout and marks it
/// Degraded; past `progressDeadlineSeconds` it says so. Status is written
/// by the leader of verdict's replicas only, which carries it out with
/// --vm-delivery.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
// Printer columns repeat their keys, which clippy takes for repeated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "verdict.dev",
    version = "v1alpha1",
    kind = "VMDeployment",
    root = "VmDeploymentResource",
    plural = "vmdeployments",
    singular = "vmdeployment",
    shortname = "vmdeploy",
    namespaced,
    status = "VmDeploymentStatus",
    printcolumn(name = "Set", type_ = "string", json_path = ".spec.replicaSet"),
    printcolumn(name = "Code", type_ = "string", json_path = ".spec.code.version"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.updatedInstances"
    ),
    printcolumn(
        name = "Waiting",
        type_ = "string",
        json_path = ".status.waiting",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    doc = "The code of an application hosted on virtual machines, deployed to a VMReplicaSet's instances by a gray release (seed 002)."
)]
#[serde(rename_all = "camelCase")]
pub struct VmDeploymentSpec {
    /// The VMReplicaSet of this namespace whose instances get the code.
    #[schemars(length(min = 1))]
    pub replica_set: String,
    pub code: CodeSpec,
    /// The gray release; without steps every instance gets the code,
    /// maxUnavailable of the set at a time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub steps: Vec<StepSpec>,
    /// A rollout that makes no progress for this long is marked as past its
    /// deadline.
    #[serde(default = "six_hundred")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: u64,
    /// The rollout does not advance while set.
    #[serde(default)]
    pub paused: bool,
}

fn six_hundred() -> u64 {
    600
}

/// The code a deployment delivers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CodeSpec {
    /// Where the code comes from (a package, an image, a URL), handed to
    /// the deploy step.
    #[schemars(length(min = 1))]
    pub artifact: String,
    #[schemars(length(min = 1))]
    pub version: String,
}

/// One step of a gray release.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.instances) != has(self.pause)",
        "message": "a step is either instances or a pause, not both and not neither"
    },
    {
        "rule": "!has(self.instances) || (type(self.instances) == int ? self.instances >= 1 : self.instances.matches('^([1-9][0-9]?|100)%$'))",
        "message": "instances must be at least 1, or a share from 1% to 100%"
    }
]))]
pub struct StepSpec {
    /// How many instances have the new code when this step ends, a count or
    /// a share ("50%").
    #[serde(default)]
    #[schemars(schema_with = "share")]
    pub instances: Option<Value>,
    /// Wait here; with no duration, until a person approves.
    pub pause: Option<PauseSpec>,
}

/// A pause of a gray release.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PauseSpec {
    /// How long to wait, as 30s, 10m or 1h.
    #[schemars(regex(pattern = "^[0-9]+(s|m|h)$"))]
    pub duration: Option<String>,
}

/// A deployment's status, as the controller writes it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmDeploymentStatus {
    pub observed_generation: Option<i64>,
    pub phase: Option<RolloutPhase>,
    /// The current step, as index/count.
    pub step: Option<String>,
    /// The version this rollout delivers.
    pub code: Option<String>,
    /// What this rollout delivers in one word, a digest of the code
    /// (version and artifact) and the steps; a new revision starts a new
    /// rollout, which no approval of an earlier one carries into.
    pub revision: Option<String>,
    /// The version released before this rollout; an abort goes back to it.
    pub stable_code: Option<String>,
    /// The step the rollout is at, from 0 (the number of steps once past
    /// the last).
    pub step_index: Option<u32>,
    /// When the rollout reached its step.
    #[schemars(extend("format" = "date-time"))]
    pub step_started_at: Option<String>,
    /// The gate a person approved (its step index) of the revision
    /// approvedRevision, with approvedBy and approvedReason.
    pub approved_step: Option<i64>,
    /// The revision whose gate was approved; an approval of another
    /// revision approves nothing.
    pub approved_revision: Option<String>,
    pub approved_by: Option<String>,
    pub approved_reason: Option<String>,
    /// When this rollout started.
    #[schemars(extend("format" = "date-time"))]
    pub started_at: Option<String>,
    /// What people did to this rollout (approve, promote, abort), oldest
    /// first, the last 20; each is asked with the verdict.dev/approve,
    /// verdict.dev/promote or verdict.dev/abort annotation (the HTTP API
    /// writes it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub actions: Vec<Action>,
    /// The revisions released in full, oldest first, the last 10: what a
    /// rollback goes back to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub history: Vec<Released>,
    /// A person skipped the remaining steps.
    pub promoted: Option<bool>,
    /// A person took the instances back to stableCode.
    pub aborted: Option<bool>,
    /// Why the rollout waits, when it does (a gate, a timed pause,
    /// instances not ready).
    pub waiting: Option<String>,
    /// Instances running this code.
    pub updated_instances: Option<u32>,
    pub ready_instances: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<DeploymentInstance>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A revision released to every instance.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Released {
    pub revision: Option<String>,
    pub code: Option<String>,
    pub artifact: Option<String>,
    #[schemars(extend("format" = "date-time"))]
    pub released_at: Option<String>,
}

/// The phases of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutPhase {
    Progressing,
    Paused,
    Completed,
    Degraded,
    Aborted,
}

/// What a person did to a rollout.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Action {
    pub action: Option<ActionName>,
    pub code: Option<String>,
    pub step: Option<i64>,
    pub by: Option<String>,
    pub why: Option<String>,
    #[schemars(extend("format" = "date-time"))]
    pub at: Option<String>,
}

/// The actions a person may take on a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ActionName {
    Approve,
    Promote,
    Abort,
}

/// One instance in a deployment's status.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeploymentInstance {
    pub name: Option<String>,
    pub stage: Option<String>,
    pub code: Option<String>,
    pub task: Option<String>,
}

/// A `Server` (seed 002's per-instance object): one instance of a
/// `VMReplicaSet`, owned by its set and owning its KubeVirt
/// `VirtualMachine`. Its spec is what the instance should have — the
/// environment and code its set and rollout give it; its status, written
/// by verdict's leader through the status subresource only, where it is:
/// its stage and since when, what it has, the task list in progress with
/// the key, attempt and result of each step, the lists it ran before, and
/// its machine, node and readiness. Deleted (by its set, or its VM deleted
/// by hand), its finalizer holds it until its clean-up list has run.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
// Printer columns repeat their keys, which clippy takes for repeated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "verdict.dev",
    version = "v1alpha1",
    kind = "Server",
    root = "ServerResource",
    plural = "servers",
    singular = "server",
    shortname = "vmsrv",
    namespaced,
    status = "ServerStatus",
    printcolumn(name = "Set", type_ = "string", json_path = ".spec.replicaSet"),
    printcolumn(name = "Stage", type_ = "string", json_path = ".status.stage"),
    printcolumn(name = "Since", type_ = "date", json_path = ".status.since"),
    printcolumn(
        name = "Environment",
        type_ = "string",
        json_path = ".status.environmentText"
    ),
    printcolumn(name = "Code", type_ = "string", json_path = ".status.code"),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.node"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready"),
    printcolumn(
        name = "Step",
        type_ = "string",
        json_path = ".status.step",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    doc = "One instance of a VMReplicaSet: what it should have, and where it is (seed 002)."
)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// The VMReplicaSet of this namespace the instance belongs to.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "replicaSet cannot be changed"}]))]
    pub replica_set: String,
    /// The environment the instance should have.
    #[serde(default)]
    pub environment: Vec<PackageSpec>,
    /// The code version the instance should have, when a VMDeployment
    /// gives it one.
    pub code: Option<String>,
    /// Whether the set's rollout lets the instance leave service for its
    /// target now (within the set's safe rate); written with the target by
    /// the set's controller alone. Until it is written the instance waits.
    pub may_disrupt: Option<bool>,
    /// Whether the target's code is released to the instance (its share of
    /// the traffic whole); written with the target by the set's controller.
    pub released: Option<bool>,
    /// A stage a person forces on the instance (seed 002: the operator
    /// forces the state, and the system goes on from it): the lifecycle
    /// policy's list for it runs from where the instance is, once (the
    /// status's `forced` says it was taken); a forced `offline` holds while
    /// it stays here. The instance's status is its controller's alone.
    pub force: Option<ForceSpec>,
}

/// A person's forced stage: which, who asks, why and when.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForceSpec {
    #[schemars(schema_with = "stage_names")]
    pub stage: String,
    /// Who asks: not blank.
    #[schemars(length(min = 1, max = 256), regex(pattern = r"\S"))]
    pub by: String,
    #[schemars(length(max = 4096))]
    pub why: Option<String>,
    /// When it was asked; a request made again with another time is taken
    /// again.
    #[schemars(extend("format" = "date-time"))]
    pub at: Option<String>,
}

/// A forced stage the controller took: the request, and what came of it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForceTaken {
    pub request: ForceSpec,
    #[schemars(extend("format" = "date-time"))]
    pub taken_at: Option<String>,
    /// Whether the stage was entered (false: refused, `message` says why).
    pub entered: bool,
    pub message: Option<String>,
}

/// Where an instance is, as the controller writes it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    pub observed_generation: Option<i64>,
    /// Its stage (seed 002's instance state machine).
    #[serde(default)]
    #[schemars(schema_with = "stage_names")]
    pub stage: Option<String>,
    /// Since when it has had its stage.
    #[schemars(extend("format" = "date-time"))]
    pub since: Option<String>,
    /// The environment it has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment: Vec<PackageSpec>,
    /// The environment it has, as `name=version` pairs (for `kubectl get`).
    pub environment_text: Option<String>,
    /// The code version it has.
    pub code: Option<String>,
    /// The controller that holds it while a list runs: `replica/term`.
    pub lock: Option<String>,
    /// The task list in progress (or the last one, finished): its stage,
    /// its steps, the step at, its attempt and each finished step's result.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::any_object")]
    pub list: Option<Lenient<CurrentList>>,
    /// The step in progress, as `task (attempt n)`.
    pub step: Option<String>,
    /// The key its hook is asked with: the Server's UID, the list and the
    /// step.
    pub step_key: Option<String>,
    /// The last lists it ran before, newest first, summed up.
    #[serde(default)]
    #[schemars(schema_with = "any_objects")]
    pub lists: Option<Lenient<Vec<LogEntry>>>,
    /// The last stage a person forced through the spec that was taken.
    pub forced: Option<ForceTaken>,
    /// The leader that wrote it, `replica/term` (with the chart's
    /// admission policy, only the term the Lease holds may write it).
    pub writer: Option<String>,
    /// Its VirtualMachine's printable status.
    pub machine: Option<String>,
    /// Its machine as the lifecycle policy sees it.
    #[serde(default)]
    #[schemars(schema_with = "machine_names")]
    pub machine_state: Option<String>,
    /// The node its machine runs on.
    pub node: Option<String>,
    /// In service, its machine ready and its node healthy.
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A field of a status whose schema takes any object (a task list): read
/// when it reads, else kept as written with why not — a Server that a
/// person wrote wrong is that Server's problem, said on it, never a watch
/// that cannot list the others.
#[derive(Debug, Clone, PartialEq)]
pub enum Lenient<T> {
    Read(T),
    Unread { value: Value, error: String },
}

impl<T> Lenient<T> {
    /// What it reads as, or why it does not.
    pub fn read(&self) -> Result<&T, &str> {
        match self {
            Lenient::Read(read) => Ok(read),
            Lenient::Unread { error, .. } => Err(error),
        }
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Ok(match T::deserialize(&value) {
            Ok(read) => Lenient::Read(read),
            Err(error) => Lenient::Unread {
                value,
                error: error.to_string(),
            },
        })
    }
}

impl<T: Serialize> Serialize for Lenient<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Lenient::Read(read) => read.serialize(serializer),
            Lenient::Unread { value, .. } => value.serialize(serializer),
        }
    }
}

/// The stages an instance may be at.
fn stage_names(generator: &mut SchemaGenerator) -> Schema {
    crate::schema::wit_names::<crate::wit::lifecycle::Stage>(generator)
}

/// The states a machine may be in.
fn machine_names(generator: &mut SchemaGenerator) -> Schema {
    crate::schema::wit_names::<crate::wit::lifecycle::Machine>(generator)
}

/// A list of objects of any fields.
fn any_objects(generator: &mut SchemaGenerator) -> Schema {
    let item = crate::schema::any_object(generator);
    json_schema!({"type": "array", "items": item})
}

/// A count or a share ("25%").
fn share(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "maxLength": 4,
    })
}

/// A count or a share, one when not given.
fn share_defaulting_to_one(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = share(generator);
    schema.insert("default".into(), 1.into());
    schema
}

/// A count or a share, none when not given.
fn share_defaulting_to_none(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = share(generator);
    schema.insert("default".into(), 0.into());
    schema
}
