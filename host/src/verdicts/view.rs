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
/// an operator's resource), as observed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ObjectView {
    /// `group/version/Kind`.
    pub resource: String,
    pub kind: String,
    pub name: String,
    /// Its printable status or phase.
    pub phase: Option<String>,
    pub conditions: Vec<ConditionView>,
    /// The node it runs on.
    pub node: Option<String>,
    /// When its deletion was asked for (RFC 3339), and what holds it.
    pub deleting_since: Option<String>,
    pub finalizers: Vec<String>,
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

impl From<&Generic> for ObjectView {
    fn from(o: &Generic) -> Self {
        Self {
            resource: o.resource.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            phase: o.phase.clone(),
            conditions: o
                .conditions
                .iter()
                .map(|c| ConditionView {
                    kind: c.kind.clone(),
                    status: c.status.kubernetes_name(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect(),
            node: o.node.clone(),
            deleting_since: o.deleting_since.map(rfc3339),
            finalizers: o.finalizers.clone(),
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
        }
    }
}
