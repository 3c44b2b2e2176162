//! The lifecycle policy's questions and answers in their JSON form (the
//! shape of `verdict test` cases, the task log and the HTTP routes), and
//! to and from the WIT records.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Timestamp;
use crate::wit::lifecycle;

/// A package of an environment, at a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Package {
    pub name: String,
    pub version: String,
}

impl Package {
    fn to_wit(&self) -> lifecycle::Package {
        lifecycle::Package {
            name: self.name.clone(),
            version: self.version.clone(),
        }
    }

    fn from_wit(p: &lifecycle::Package) -> Self {
        Self {
            name: p.name.clone(),
            version: p.version.clone(),
        }
    }
}

/// Packages as a person reads them: `jdk 21, agent 3.2`.
pub fn versions(packages: &[Package]) -> String {
    match packages.is_empty() {
        true => "no packages".into(),
        false => packages
            .iter()
            .map(|p| format!("{} {}", p.name, p.version))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn packages_to_wit(packages: &[Package]) -> Vec<lifecycle::Package> {
    packages.iter().map(Package::to_wit).collect()
}

/// A task list an instance entered, with how it went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TaskList {
    #[serde(with = "crate::wit::wit_name")]
    #[schema(value_type = String)]
    pub stage: lifecycle::Stage,
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub started: Timestamp,
    #[serde(with = "crate::wit::wit_name")]
    #[schema(value_type = String)]
    pub outcome: lifecycle::Outcome,
    /// The task running or failed, when one is.
    #[serde(default)]
    pub task: Option<String>,
    /// What the last hook answered.
    #[serde(default)]
    pub message: String,
    #[serde(default, with = "crate::time::text_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished: Option<Timestamp>,
}

impl TaskList {
    fn to_wit(&self) -> lifecycle::TaskList {
        lifecycle::TaskList {
            stage: self.stage,
            started: self.started,
            outcome: self.outcome,
            task: self.task.clone(),
            message: self.message.clone(),
            finished: self.finished,
        }
    }
}

fn healthy() -> lifecycle::NodeHealth {
    lifecycle::NodeHealth::Healthy
}

/// What the host observes of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct InstanceState {
    pub namespace: String,
    pub name: String,
    /// The `VMReplicaSet` it belongs to.
    pub set: String,
    /// Its stage; none before the machine has taken it.
    #[serde(default, with = "crate::wit::wit_name_opt")]
    #[schema(value_type = Option<String>)]
    pub stage: Option<lifecycle::Stage>,
    /// Since when it has had its stage.
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub since: Timestamp,
    #[serde(with = "crate::wit::wit_name")]
    #[schema(value_type = String)]
    pub machine: lifecycle::Machine,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default = "healthy", with = "crate::wit::wit_name")]
    #[schema(value_type = String)]
    pub node_health: lifecycle::NodeHealth,
    #[serde(default)]
    pub environment: Vec<Package>,
    #[serde(default)]
    pub code: Option<String>,
    /// Its task lists, newest first.
    #[serde(default)]
    pub lists: Vec<TaskList>,
    #[serde(default)]
    pub deleting: bool,
    #[serde(default)]
    pub take_offline: bool,
    /// The stage an operator forced on it and the host has not taken yet.
    #[serde(default, with = "crate::wit::wit_name_opt")]
    #[schema(value_type = Option<String>)]
    pub forced: Option<lifecycle::Stage>,
}

/// What an instance should have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TargetState {
    #[serde(default)]
    pub environment: Vec<Package>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub may_disrupt: bool,
    #[serde(default)]
    pub released: bool,
}

/// One question to the lifecycle policy.
pub fn input(instance: &InstanceState, target: &TargetState) -> lifecycle::LifecycleInput {
    lifecycle::LifecycleInput {
        instance: lifecycle::Instance {
            namespace: instance.namespace.clone(),
            name: instance.name.clone(),
            set: instance.set.clone(),
            stage: instance.stage,
            since: instance.since,
            machine: instance.machine,
            node: instance.node.clone(),
            node_health: instance.node_health,
            environment: packages_to_wit(&instance.environment),
            code: instance.code.clone(),
            lists: instance.lists.iter().map(TaskList::to_wit).collect(),
            deleting: instance.deleting,
            take_offline: instance.take_offline,
            forced: instance.forced,
        },
        target: lifecycle::Target {
            environment: packages_to_wit(&target.environment),
            code: target.code.clone(),
            may_disrupt: target.may_disrupt,
            released: target.released,
        },
    }
}

/// One task of a list: its step hook's name and parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub name: String,
    /// A JSON object.
    #[schema(value_type = Object)]
    pub params: Value,
}

/// The policy's decision on one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", tag = "decision")]
pub enum Next {
    /// Stay; `why` says what it waits for.
    Stay { why: String },
    /// Move to `stage`, running `tasks` on entering it.
    Move {
        #[serde(with = "crate::wit::wit_name")]
        #[schema(value_type = String)]
        stage: lifecycle::Stage,
        tasks: Vec<Task>,
        /// The environment it has once the list succeeds.
        environment: Option<Vec<Package>>,
        /// The code it has once the list succeeds.
        code: Option<String>,
        #[serde(rename = "needs-approval")]
        needs_approval: bool,
        reason: String,
    },
}

impl Next {
    /// Why the policy decided it.
    pub fn reason(&self) -> &str {
        match self {
            Next::Stay { why } => why,
            Next::Move { reason, .. } => reason,
        }
    }

    /// The decision of a policy, whose task parameters the host has
    /// checked are JSON objects.
    pub fn from_wit(decision: &lifecycle::Decision) -> Self {
        match decision {
            lifecycle::Decision::Stay(why) => Next::Stay { why: why.clone() },
            lifecycle::Decision::Move(t) => Next::Move {
                stage: t.stage,
                tasks: t
                    .tasks
                    .iter()
                    .map(|task| Task {
                        name: task.name.clone(),
                        params: serde_json::from_str(&task.params).unwrap_or(Value::Null),
                    })
                    .collect(),
                environment: t
                    .environment
                    .as_ref()
                    .map(|e| e.iter().map(Package::from_wit).collect()),
                code: t.code.clone(),
                needs_approval: t.needs_approval,
                reason: t.reason.clone(),
            },
        }
    }
}
