//! Verdicts as JSON: the shape the HTTP API, `verdict eval -o json` and
//! policy test cases use. Enumerations are spelled as in the WIT
//! (`running-healthy`, `not-existed`), times as RFC 3339 text.

use serde::Serialize;

use crate::observe::resources::Generic;
use crate::time::rfc3339;
use crate::wit::{WitName, types};

/// One container's verdict.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct InstanceView {
    pub name: String,
    pub app_instance: bool,
    pub status: &'static str,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub restart_count: u32,
}

/// One pod's verdict.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct GroupView {
    pub name: String,
    pub node: Option<String>,
    pub status: &'static str,
    pub reason: String,
    pub message: Option<String>,
    pub instances: Vec<InstanceView>,
}

/// The in-flight task of an application.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TransitionalView {
    pub status: &'static str,
    pub task: String,
    pub phase: &'static str,
    pub progress: u8,
}

/// What a person should see.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DisplayView {
    pub status: String,
    pub text: String,
    pub severity: &'static str,
    pub progress: Option<u8>,
}

/// An object of a configured kind in an application (a virtual machine,
/// an operator's resource): the policy's verdict on it, and what was
/// observed of it (served by the API, which knows the observation).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct ObjectView {
    pub kind: String,
    pub name: String,
    /// `group/version/Kind`, when observed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// `ready`, `progressing`, `suspended`, `succeeded`, `failed`,
    /// `unknown` or `terminating`; none when the policy did not judge it.
    pub status: Option<&'static str>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Percent, when the object reports its progress (a disk import).
    pub progress: Option<u8>,
    /// Whether it is an instance of the app (a virtual machine).
    pub app_instance: bool,
    /// Its stage of seed 002's life cycle, for an instance.
    pub stage: Option<&'static str>,
    /// The pods it runs in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// The override a person forced on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forced: Option<ForcedView>,
    /// The node it runs on.
    pub node: Option<String>,
    /// Its printable status or phase, as observed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionView>,
    /// When its deletion was asked for (RFC 3339), and what holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleting_since: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
}

/// An override in force, as a verdict shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ForcedView {
    pub status: String,
    pub by: String,
    pub reason: String,
    /// RFC 3339.
    pub at: String,
    pub expires_at: Option<String>,
}

impl From<&types::StatusOverride> for ForcedView {
    fn from(o: &types::StatusOverride) -> Self {
        Self {
            status: o.status.clone(),
            by: o.by.clone(),
            reason: o.reason.clone(),
            at: rfc3339(o.at),
            expires_at: o.expires_at.map(rfc3339),
        }
    }
}

/// A condition of an object.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl ObjectView {
    /// Add what was observed of the object.
    pub fn observed(&mut self, o: &Generic) {
        self.resource = Some(o.resource.clone());
        self.phase = o.phase.clone();
        self.conditions = o
            .conditions
            .iter()
            .map(|c| ConditionView {
                kind: c.kind.clone(),
                status: c.status.kubernetes_name(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect();
        if self.node.is_none() {
            self.node = o.node.clone();
        }
        self.deleting_since = o.deleting_since.map(rfc3339);
        self.finalizers = o.finalizers.clone();
    }
}

impl From<&types::ObjectVerdict> for ObjectView {
    fn from(v: &types::ObjectVerdict) -> Self {
        Self {
            kind: v.kind.clone(),
            name: v.name.clone(),
            status: Some(v.status.wit_name()),
            reason: Some(v.reason.clone()),
            message: v.message.clone(),
            progress: v.progress,
            app_instance: v.is_app_instance,
            stage: v.stage.map(|s| s.wit_name()),
            pods: v.pods.clone(),
            forced: v.forced.as_ref().map(ForcedView::from),
            node: v.node.clone(),
            ..Self::default()
        }
    }
}

/// One application's verdict.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AppView {
    pub namespace: String,
    pub name: String,
    pub stable: &'static str,
    pub stable_reason: String,
    pub transitional: Option<TransitionalView>,
    pub display: DisplayView,
    pub ready_replicas: u32,
    pub expected_replicas: u32,
    pub recheck_after: Option<String>,
    pub groups: Vec<GroupView>,
    /// Its objects of the configured kinds (`[[resources]]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectView>,
    /// The override a person forced on the whole application.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forced: Option<ForcedView>,
}

impl From<&types::AppVerdict> for AppView {
    fn from(v: &types::AppVerdict) -> Self {
        Self {
            namespace: v.app.namespace.clone(),
            name: v.app.name.clone(),
            stable: v.stable.wit_name(),
            stable_reason: v.stable_reason.clone(),
            transitional: v.transitional.as_ref().map(|t| TransitionalView {
                status: t.status.wit_name(),
                task: t.task_id.clone(),
                phase: t.phase.wit_name(),
                progress: t.progress,
            }),
            display: DisplayView {
                status: v.display.status.clone(),
                text: v.display.text.clone(),
                severity: v.display.severity.wit_name(),
                progress: v.display.progress,
            },
            ready_replicas: v.ready_replicas,
            expected_replicas: v.expected_replicas,
            recheck_after: v.recheck_after.map(rfc3339),
            groups: v
                .groups
                .iter()
                .map(|g| GroupView {
                    name: g.name.clone(),
                    node: g.node.clone(),
                    status: g.status.wit_name(),
                    reason: g.reason.clone(),
                    message: g.message.clone(),
                    instances: g
                        .instances
                        .iter()
                        .map(|i| InstanceView {
                            name: i.name.clone(),
                            app_instance: i.is_app_instance,
                            status: i.status.wit_name(),
                            reason: i.reason.clone(),
                            message: i.message.clone(),
                            restart_count: i.restart_count,
                        })
                        .collect(),
                })
                .collect(),
            objects: v.objects.iter().map(ObjectView::from).collect(),
            forced: v.forced.as_ref().map(ForcedView::from),
        }
    }
}
