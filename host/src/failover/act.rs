//! Carrying out an action that passed: notifications and events here; node
//! writes through the executor ([`NodeActions`]); moves and scales as task
//! records through task admission, so the app's status shows the work.

use super::{Action, Failover, NewTask, REQUESTER, Value, json, model, types};
use crate::events::Kind;

/// The node actions failover asks of the cluster. Failover decides; the
/// one actuator, the executor ([`crate::executor::Nodes`]), writes them.
pub trait NodeActions: Send + Sync + std::fmt::Debug {
    /// Mark the node unschedulable.
    fn cordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), kube::Error>>;
    /// Mark the node schedulable again and take off the out-of-service
    /// taint ([`OUT_OF_SERVICE`]).
    fn uncordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// A boxed future of a trait object's method.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

impl Failover {
    /// Carry out one action: `Ok(Some(task id))` when a task carries it.
    pub(super) async fn act(&self, node: &str, action: &Action) -> Result<Option<String>, Refused> {
        let refused = |e: kube::Error| Refused::Failed(format!("the Kubernetes API refused: {e}"));
        match action {
            Action::Wait { .. } => Ok(None),
            Action::MarkUnknown => Ok(None),
            Action::Notify { text } => {
                tracing::warn!(node, "{text}");
                self.events.publish(
                    Kind::Failover,
                    None,
                    json!({"event": "notify", "node": node, "text": text}),
                );
                Ok(None)
            }
            Action::RequestReplacement => {
                tracing::warn!(node, "a replacement node is requested");
                self.events.publish(
                    Kind::Failover,
                    None,
                    json!({"event": "replacement-requested", "node": node}),
                );
                Ok(None)
            }
            Action::Cordon => self
                .nodes
                .cordon(node)
                .await
                .map(|()| None)
                .map_err(refused),
            Action::Uncordon => self
                .nodes
                .uncordon(node)
                .await
                .map(|()| None)
                .map_err(refused),
            Action::Evict { workload } | Action::Release { workload } => {
                let verb = if matches!(action, Action::Evict { .. }) {
                    "evict"
                } else {
                    "release"
                };
                let params =
                    json!({"failover": {"action": verb, "node": node, "workload": workload}});
                self.task(workload, types::TaskAction::Update, params)
                    .await
                    .map(Some)
            }
            Action::Scale { workload, replicas } => {
                let params = json!({"replicas": replicas, "failover": {"action": "scale", "node": node, "workload": workload}});
                self.task(workload, types::TaskAction::Scale, params)
                    .await
                    .map(Some)
            }
            Action::Repair { instance } => {
                let params =
                    json!({"failover": {"action": "repair", "node": node, "instance": instance}});
                self.task(instance, types::TaskAction::Restart, params)
                    .await
                    .map(Some)
            }
            Action::Rescale { set, replicas } => {
                let params = json!({"replicas": replicas, "failover": {"action": "rescale", "node": node, "set": set}});
                self.task(set, types::TaskAction::Scale, params)
                    .await
                    .map(Some)
            }
        }
    }

    /// Ask for a task on the app of the workload (or the virtual machine's
    /// instance, pool or replica set), through task admission.
    pub(super) async fn task(
        &self,
        workload: &model::Workload,
        action: types::TaskAction,
        params: Value,
    ) -> Result<String, Refused> {
        let app = {
            let snapshot = self.observed.read();
            let (kind, namespace, name) = (&workload.kind, &workload.namespace, &workload.name);
            snapshot
                .app_of_workload_named(kind, namespace, name)
                .or_else(|| snapshot.app_of_object_named(kind, namespace, name))
                .unwrap_or_else(|| (namespace.clone(), name.clone()))
        };
        // A task for this very action that a previous leader asked for in
        // this outage (since the node was last trusted) carries it: taken
        // over, not asked for twice.
        let since = crate::time::now() - self.config.trust_after_ms as types::Timestamp;
        let filter = crate::tasks::Filter {
            app: Some(app.clone()),
            phase: None,
        };
        let asked_before = self.tasks.list(&filter).into_iter().find(|t| {
            t.requested_by.as_deref() == Some(REQUESTER)
                && t.created_at >= since
                && t.params.get("failover") == params.get("failover")
                && !matches!(
                    t.phase,
                    types::TaskPhase::Failed | types::TaskPhase::Cancelled
                )
        });
        if let Some(task) = asked_before {
            return Ok(task.id);
        }
        let request = NewTask {
            app: format!("{}/{}", app.0, app.1),
            action,
            params: match params {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            },
            requested_by: Some(REQUESTER.into()),
            material: Default::default(),
        };
        self.admission
            .ask(&self.tasks, request)
            .await
            .map(|t| t.id)
            .map_err(|e| match e {
                crate::tasks::TaskError::Denied(_) => {
                    Refused::Admission(format!("task admission: {e}"))
                }
                e => Refused::Failed(format!("the task could not be made: {e}")),
            })
    }
}

/// Why an action was not carried out.
#[derive(Debug)]
pub(super) enum Refused {
    /// Task admission did not let its task through.
    Admission(String),
    /// It was tried and failed.
    Failed(String),
}
