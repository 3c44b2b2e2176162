//! What the failover side keeps and serves: the policy's decisions in a
//! serializable mirror of their WIT form, the actions with the state the
//! host gave them, overrides, approvals, and the ledger of what was done.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::observe::{workload_kind, workload_kind_named};
use crate::tasks::model::time;
use crate::wit::failover as wit;
use crate::wit::types::{Timestamp, WorkloadKind};

/// A node's health as the policy judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Health {
    Healthy,
    Suspect,
    Unknown,
    Offline,
    Recovering,
}

impl Health {
    /// Whether the node counts as down (towards the storm brake, and for
    /// flapping).
    pub fn unhealthy(self) -> bool {
        matches!(self, Health::Suspect | Health::Unknown | Health::Offline)
    }

    pub fn name(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Suspect => "suspect",
            Health::Unknown => "unknown",
            Health::Offline => "offline",
            Health::Recovering => "recovering",
        }
    }

    fn from_wit(h: wit::NodeHealth) -> Self {
        match h {
            wit::NodeHealth::Healthy => Health::Healthy,
            wit::NodeHealth::Suspect => Health::Suspect,
            wit::NodeHealth::Unknown => Health::Unknown,
            wit::NodeHealth::Offline => Health::Offline,
            wit::NodeHealth::Recovering => Health::Recovering,
        }
    }

    fn to_wit(self) -> wit::NodeHealth {
        match self {
            Health::Healthy => wit::NodeHealth::Healthy,
            Health::Suspect => wit::NodeHealth::Suspect,
            Health::Unknown => wit::NodeHealth::Unknown,
            Health::Offline => wit::NodeHealth::Offline,
            Health::Recovering => wit::NodeHealth::Recovering,
        }
    }
}

/// A workload, or a virtual machine's instance, pool or replica set, by
/// kind, namespace and name.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
pub struct Workload {
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `VirtualMachineInstance`,
    /// `VirtualMachinePool` or `VirtualMachineInstanceReplicaSet`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Workload {
    pub(crate) fn from_wit(w: &wit::WorkloadRef) -> Self {
        Self {
            kind: workload_kind(w.kind).into(),
            namespace: w.namespace.clone(),
            name: w.name.clone(),
        }
    }

    fn to_wit(&self) -> wit::WorkloadRef {
        wit::WorkloadRef {
            kind: workload_kind_named(&self.kind).unwrap_or(WorkloadKind::Deployment),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl Workload {
    fn instance(i: &wit::InstanceRef) -> Self {
        Self {
            kind: crate::observe::resources::kubevirt::VMI.into(),
            namespace: i.namespace.clone(),
            name: i.name.clone(),
        }
    }

    fn set(s: &wit::SetRef) -> Self {
        Self {
            kind: s.kind.clone(),
            namespace: s.namespace.clone(),
            name: s.name.clone(),
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// One thing a policy proposes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    Wait {
        #[serde(with = "time")]
        #[schema(value_type = String, format = DateTime)]
        until: Timestamp,
    },
    MarkUnknown,
    Cordon,
    Uncordon,
    Evict {
        workload: Workload,
    },
    Release {
        workload: Workload,
    },
    RequestReplacement,
    Scale {
        workload: Workload,
        replicas: u32,
    },
    /// Fence the node, then delete the instance so that its VM or set
    /// starts it elsewhere.
    Repair {
        instance: Workload,
    },
    /// Change a pool's or replica set's count.
    Rescale {
        set: Workload,
        replicas: u32,
    },
    Notify {
        text: String,
    },
}

impl Action {
    pub(crate) fn from_wit(a: &wit::Action) -> Self {
        match a {
            wit::Action::Wait(until) => Action::Wait { until: *until },
            wit::Action::MarkUnknown => Action::MarkUnknown,
            wit::Action::Cordon => Action::Cordon,
            wit::Action::Uncordon => Action::Uncordon,
            wit::Action::Evict(w) => Action::Evict {
                workload: Workload::from_wit(w),
            },
            wit::Action::Release(w) => Action::Release {
                workload: Workload::from_wit(w),
            },
            wit::Action::RequestReplacement => Action::RequestReplacement,
            wit::Action::Scale(s) => Action::Scale {
                workload: Workload::from_wit(&s.workload),
                replicas: s.replicas,
            },
            wit::Action::Repair(i) => Action::Repair {
                instance: Workload::instance(i),
            },
            wit::Action::Rescale(s) => Action::Rescale {
                set: Workload::set(s),
                replicas: s.replicas,
            },
            wit::Action::Notify(text) => Action::Notify { text: text.clone() },
        }
    }

    fn to_wit(&self) -> wit::Action {
        match self {
            Action::Wait { until } => wit::Action::Wait(*until),
            Action::MarkUnknown => wit::Action::MarkUnknown,
            Action::Cordon => wit::Action::Cordon,
            Action::Uncordon => wit::Action::Uncordon,
            Action::Evict { workload } => wit::Action::Evict(workload.to_wit()),
            Action::Release { workload } => wit::Action::Release(workload.to_wit()),
            Action::RequestReplacement => wit::Action::RequestReplacement,
            Action::Scale { workload, replicas } => wit::Action::Scale(wit::ScaleRequest {
                workload: workload.to_wit(),
                replicas: *replicas,
            }),
            Action::Repair { instance } => wit::Action::Repair(wit::InstanceRef {
                namespace: instance.namespace.clone(),
                name: instance.name.clone(),
            }),
            Action::Rescale { set, replicas } => wit::Action::Rescale(wit::SetRef {
                namespace: set.namespace.clone(),
                kind: set.kind.clone(),
                name: set.name.clone(),
                replicas: *replicas,
            }),
            Action::Notify { text } => wit::Action::Notify(text.clone()),
        }
    }

    /// The action's identity on its node: what the ledger, approvals and
    /// the audit name it by (`cordon`, `evict:Deployment/shop/web`,
    /// `scale:Deployment/shop/web=3`).
    pub fn key(&self) -> String {
        match self {
            Action::Wait { .. } => "wait".into(),
            Action::MarkUnknown => "mark-unknown".into(),
            Action::Cordon => "cordon".into(),
            Action::Uncordon => "uncordon".into(),
            Action::Evict { workload } => format!("evict:{workload}"),
            Action::Release { workload } => format!("release:{workload}"),
            Action::RequestReplacement => "request-replacement".into(),
            Action::Scale { workload, replicas } => format!("scale:{workload}={replicas}"),
            Action::Repair { instance } => format!("repair:{instance}"),
            Action::Rescale { set, replicas } => format!("rescale:{set}={replicas}"),
            Action::Notify { text } => format!("notify:{text}"),
        }
    }

    /// Whether the action disturbs workloads or capacity: what the brakes
    /// hold back. Waiting, recording and notifying never are.
    pub(crate) fn disruptive(&self) -> bool {
        matches!(
            self,
            Action::Cordon
                | Action::Evict { .. }
                | Action::Release { .. }
                | Action::RequestReplacement
                | Action::Scale { .. }
                | Action::Repair { .. }
                | Action::Rescale { .. }
        )
    }
}

/// An action as the policy proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Proposed {
    #[serde(flatten)]
    pub action: Action,
    pub reason: String,
    pub needs_approval: bool,
}

/// A policy's decision on one node, as it answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Decided {
    pub node: String,
    pub health: Health,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    pub since: Timestamp,
    pub reason: String,
    pub rule: String,
    pub actions: Vec<Proposed>,
}

impl Decided {
    /// Whether `other` is the same decision but for the reason's wording.
    pub(crate) fn decides_as(&self, other: &Self) -> bool {
        let Self {
            node,
            health,
            since,
            reason: _,
            rule,
            actions,
        } = self;
        *node == other.node
            && *health == other.health
            && *since == other.since
            && *rule == other.rule
            && *actions == other.actions
    }

    pub(crate) fn from_wit(d: &wit::NodeDecision) -> Self {
        Self {
            node: d.node.clone(),
            health: Health::from_wit(d.health),
            since: d.since,
            reason: d.reason.clone(),
            rule: d.rule.clone(),
            actions: d
                .actions
                .iter()
                .map(|a| Proposed {
                    action: Action::from_wit(&a.action),
                    reason: a.reason.clone(),
                    needs_approval: a.needs_approval,
                })
                .collect(),
        }
    }

    pub fn to_wit(&self) -> wit::NodeDecision {
        wit::NodeDecision {
            node: self.node.clone(),
            health: self.health.to_wit(),
            since: self.since,
            reason: self.reason.clone(),
            rule: self.rule.clone(),
            actions: self
                .actions
                .iter()
                .map(|a| wit::ProposedAction {
                    action: a.action.to_wit(),
                    reason: a.reason.clone(),
                    needs_approval: a.needs_approval,
                })
                .collect(),
        }
    }
}

/// What a person forced on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OverrideKind {
    /// Treat the node as down, whatever it reports.
    Offline,
    /// Treat the node as healthy, whatever it reports.
    Healthy,
    /// Take no action on the node.
    Pause,
}

/// A manual override of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Override {
    pub node: String,
    pub kind: OverrideKind,
    pub by: String,
    pub reason: String,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    #[serde(with = "time::optional", default)]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
}

impl Override {
    pub fn active(&self, now: Timestamp) -> bool {
        self.expires_at.is_none_or(|e| e > now)
    }

    pub fn to_wit(&self) -> wit::Override {
        wit::Override {
            node: self.node.clone(),
            kind: match self.kind {
                OverrideKind::Offline => wit::OverrideKind::Offline,
                OverrideKind::Healthy => wit::OverrideKind::Healthy,
                OverrideKind::Pause => wit::OverrideKind::Pause,
            },
            by: self.by.clone(),
            reason: self.reason.clone(),
            at: self.at,
            expires_at: self.expires_at,
        }
    }
}

/// A person's approval of one proposed action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Approval {
    pub by: String,
    pub reason: Option<String>,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
}

/// Where an action the host took stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Carried out (or, for a task, the task succeeded).
    Done,
    /// Would have been carried out; enforcement is off.
    DryRun,
    /// Its task is under way.
    InFlight,
    /// The last attempt failed; retried after a backoff.
    Failed,
}

/// What the host did about one action on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Attempt {
    pub outcome: Outcome,
    /// Attempts made so far.
    pub attempts: u32,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// When a failed action may be tried again.
    #[serde(with = "time::optional", default)]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub retry_at: Option<Timestamp>,
    /// The task carrying it out, when it is one.
    pub task: Option<String>,
    /// Why the last attempt failed.
    pub error: Option<String>,
    /// Who carried it out: the leading replica and its term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<crate::leader::Term>,
}

/// The state an action was given in the latest evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// A wait: nothing to do until its time.
    Waiting,
    /// Carried out.
    Done,
    /// Would have been carried out; enforcement is off.
    DryRun,
    /// Under way.
    InFlight,
    /// Held until a person approves it.
    AwaitingApproval,
    /// Held back by a brake.
    Held,
    /// Failed; retried after a backoff.
    Failed,
    /// Enforcing, but this replica does not lead: the leader carries it
    /// out.
    Standby,
}

/// An action with the state the host gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ActionReport {
    pub key: String,
    #[serde(flatten)]
    pub action: Action,
    pub reason: String,
    pub needs_approval: bool,
    pub state: State,
    /// The brake that holds it back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brake: Option<String>,
    /// What the state means here: the brake's reason, the error, the task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(skip_serializing_if = "is_zero", default)]
    pub attempts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The host's decision on one node: the policy's, with overrides applied
/// and each action's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct NodeReport {
    pub node: String,
    pub health: Health,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    pub since: Timestamp,
    pub reason: String,
    pub rule: String,
    /// The override in force on the node, shown wherever it decides.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    pub overridden: Option<Override>,
    pub actions: Vec<ActionReport>,
    /// What was done about the node since it was last trusted, by action
    /// key (an action stays here after the policy stops proposing it, as
    /// an eviction does once the pods are gone).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub taken: BTreeMap<String, Attempt>,
}

impl NodeReport {
    /// Whether `other` is the same decision: all of it but the reason's
    /// wording, which may count the seconds a node has been down (a new
    /// count is no new decision to record).
    pub(crate) fn decides_as(&self, other: &Self) -> bool {
        // Every field named, so that a new one is not left out.
        let Self {
            node,
            health,
            since,
            reason: _,
            rule,
            overridden,
            actions,
            taken,
        } = self;
        *node == other.node
            && *health == other.health
            && *since == other.since
            && *rule == other.rule
            && *overridden == other.overridden
            && *actions == other.actions
            && *taken == other.taken
    }
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Record {
    pub seq: u64,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    pub node: String,
    /// `decision`, `override`, `override-cleared`, `override-expired`,
    /// `approval`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_health: Option<Health>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    pub reason: String,
    /// What the decision rested on: the node's readiness and heartbeat,
    /// its pods, the override in force.
    #[serde(skip_serializing_if = "serde_json::Value::is_null", default)]
    #[schema(value_type = Object)]
    pub inputs: serde_json::Value,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub actions: Vec<ActionReport>,
    /// The brakes that held something back, by name.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub brakes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}
