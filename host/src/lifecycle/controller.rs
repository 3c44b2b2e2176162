//! The controller of seed 002's delivery, on the leader only: every tick it
//! reads each `VMReplicaSet`, its `VirtualMachine`s and instances and the
//! `VMDeployment` that targets it, from the API server itself; makes the
//! machines the set is short of; plans the rollout ([`super::rollout`]);
//! and moves each instance one step — the hook of the step in progress
//! asked, or the lifecycle policy asked for the next stage and its list.
//! Every change to an instance is one patch of its annotations on the
//! resource version it was read at (a compare-and-swap: a conflict waits
//! for the next tick), and names the leader and term that hold its lock.
//! An instance's clean-up releases its finalizer last. The statuses of
//! both resources are written after.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::hooks::{Hooks, InstanceRef, StepCall};
use super::instance::{self, CurrentList, Lock, Recorded};
use super::model::{self, InstanceState, Next};
use super::resources::{VmDeployment, VmReplicaSet, instance_name};
use super::rollout::{self, Member};
use crate::failover::Failover;
use crate::failover::model::Health;
use crate::leader::{Leadership, Term};
use crate::plugins::{Registry, World};
use crate::time::{Timestamp, now};
use crate::wit::WitName;
use crate::wit::lifecycle::{NodeHealth, Outcome, Stage};

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn sets() -> ApiResource {
    resource("verdict.dev", "v1alpha1", "VMReplicaSet", "vmreplicasets")
}

fn deployments() -> ApiResource {
    resource("verdict.dev", "v1alpha1", "VMDeployment", "vmdeployments")
}

fn machines() -> ApiResource {
    resource("kubevirt.io", "v1", "VirtualMachine", "virtualmachines")
}

fn instances() -> ApiResource {
    resource(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
    )
}

/// The controller and what it works with.
pub struct Controller {
    /// Reads, from any replica's client.
    reader: kube::Client,
    /// Writes, through the leader's fenced client.
    writer: kube::Client,
    leadership: Arc<Leadership>,
    registry: Arc<Registry>,
    /// The nodes' health, as failover judges them.
    failover: Option<Arc<Failover>>,
    hooks: Hooks,
    every: Duration,
}

/// An instance's node as the lifecycle policy sees it: a node within its
/// grace period is waited out; one out of contact, or back but not yet
/// trusted, is unknown.
fn node_health(health: Option<Health>) -> NodeHealth {
    match health {
        None | Some(Health::Healthy | Health::Suspect) => NodeHealth::Healthy,
        Some(Health::Unknown | Health::Recovering) => NodeHealth::Unknown,
        Some(Health::Offline) => NodeHealth::Offline,
    }
}

/// One machine of a set, as read.
struct Read {
    name: String,
    resource_version: String,
    recorded: Result<Recorded, String>,
    state: InstanceState,
    created: Timestamp,
    finalizers: Vec<String>,
}

fn map_of(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl Controller {
    pub fn new(
        reader: kube::Client,
        leadership: Arc<Leadership>,
        registry: Arc<Registry>,
        failover: Option<Arc<Failover>>,
        (hooks, every): (Hooks, Duration),
    ) -> Self {
        let writer = leadership.fenced(reader.clone());
        Self {
            reader,
            writer,
            leadership,
            registry,
            failover,
            hooks,
            every,
        }
    }

    /// Reconcile every tick while this replica leads, until the process
    /// ends.
    pub async fn run(self: Arc<Self>) {
        tracing::info!(
            every_ms = self.every.as_millis() as u64,
            hooks = ?self.hooks.names().collect::<Vec<_>>(),
            "VM delivery: following VMReplicaSets and VMDeployments"
        );
        let mut missing_said = false;
        loop {
            let mut wait = self.every;
            if let Some(term) = self.leadership.acting() {
                match self.reconcile_all(&term).await {
                    Ok(()) => missing_said = false,
                    Err(error) => {
                        // The resources are not served (their CRDs not
                        // installed) or the API server is away: asked
                        // again in a while, said once.
                        if !missing_said {
                            tracing::warn!(%error, "VM delivery: the VMReplicaSets cannot be listed; asking again every 5 s");
                            missing_said = true;
                        }
                        wait = wait.max(Duration::from_secs(5));
                    }
                }
            }
            tokio::time::sleep(wait).await;
        }
    }

    async fn reconcile_all(&self, term: &Term) -> Result<(), kube::Error> {
        let all_sets = Api::<DynamicObject>::all_with(self.reader.clone(), &sets())
            .list(&ListParams::default())
            .await?;
        let all_deployments: Vec<Value> =
            Api::<DynamicObject>::all_with(self.reader.clone(), &deployments())
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .iter()
                .map(|d| serde_json::to_value(d).unwrap_or_default())
                .collect();
        // The nodes' health, once a tick for every set.
        let health: BTreeMap<String, Health> = match &self.failover {
            Some(failover) => failover
                .view()
                .await
                .nodes
                .into_iter()
                .map(|report| (report.node, report.health))
                .collect(),
            None => BTreeMap::new(),
        };
        for set in all_sets.items {
            let value = serde_json::to_value(&set).unwrap_or_default();
            let namespace = set.metadata.namespace.clone().unwrap_or_default();
            let name = set.metadata.name.clone().unwrap_or_default();
            let deployment = all_deployments.iter().find(|d| {
                d["metadata"]["namespace"] == namespace.as_str()
                    && d["spec"]["replicaSet"] == name.as_str()
            });
            if let Err(error) = self.reconcile_set(&value, deployment, &health, term).await {
                tracing::warn!(namespace, name, %error, "VM delivery: the set could not be reconciled");
            }
        }
        Ok(())
    }

    async fn reconcile_set(
        &self,
        object: &Value,
        deployment: Option<&Value>,
        health: &BTreeMap<String, Health>,
        term: &Term,
    ) -> Result<(), kube::Error> {
        let at = now();
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let set = match VmReplicaSet::read(object) {
            Ok(set) => set,
            Err(problem) => {
                let status = json!({"observedGeneration": object["metadata"]["generation"],
                    "waiting": problem,
                    "conditions": [{"type": "Degraded", "status": "True", "reason": "CannotProceed",
                        "message": problem, "lastTransitionTime": crate::time::rfc3339(at)}]});
                return self
                    .write_status(&sets(), namespace, name, object, status)
                    .await;
            }
        };
        let mut read = self.read_machines(&set, health).await?;

        // Make the machines the set is short of.
        let staying = read.iter().filter(|m| !m.state.deleting).count();
        if staying < set.replicas as usize {
            let names: Vec<String> = read.iter().map(|m| m.name.clone()).collect();
            let name = instance_name(&set.name, names.iter().map(String::as_str));
            let machine = set.machine(&name, at);
            let api =
                Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &machines());
            let machine: DynamicObject =
                serde_json::from_value(machine).map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &machine).await?;
            tracing::info!(
                namespace,
                set = set.name,
                instance = name,
                "VM delivery: a machine is requested"
            );
            read = self.read_machines(&set, health).await?;
        }

        let deployment_object = deployment;
        let deployment = deployment.and_then(|d| VmDeployment::read(d).ok());
        let rollout = deployment.as_ref().map(|d| d.rollout(at));
        let members: Vec<Member<'_>> = read
            .iter()
            .map(|m| Member {
                state: &m.state,
                created: m.created,
            })
            .collect();
        let plan = rollout::plan(
            &set.spec,
            rollout.as_ref().map(|(spec, progress)| (spec, progress)),
            &members,
            at,
        );

        let mut rows = Vec::new();
        for machine in &read {
            let target = plan.targets.get(&machine.name).cloned();
            if let (Ok(recorded), Some(target)) = (&machine.recorded, target)
                && let Err(error) = self
                    .step(&set, machine, recorded.clone(), &target, term, at)
                    .await
            {
                tracing::warn!(namespace, instance = machine.name, %error, "VM delivery: the instance could not be moved on");
            }
            rows.push(row(machine));
        }
        let problems: Vec<String> = read
            .iter()
            .filter_map(|m| {
                m.recorded
                    .as_ref()
                    .err()
                    .map(|e| format!("{}: {e}", m.name))
            })
            .collect();
        let problem = (!problems.is_empty()).then(|| problems.join("; "));
        let status = set.status(&plan, rows, problem.as_deref(), at);
        self.write_status(&sets(), namespace, name, object, status)
            .await?;
        if let (Some(d), Some((spec, _))) = (&deployment, &rollout) {
            let updated = read
                .iter()
                .filter(|m| m.state.code.as_deref() == Some(spec.code.as_str()))
                .count();
            let status = d.status(spec, &plan, updated, at);
            let object = deployment_object.cloned().unwrap_or_default();
            self.write_status(&deployments(), namespace, &d.name, &object, status)
                .await?;
        }
        Ok(())
    }

    async fn read_machines(
        &self,
        set: &VmReplicaSet,
        health: &BTreeMap<String, Health>,
    ) -> Result<Vec<Read>, kube::Error> {
        let api =
            Api::<DynamicObject>::namespaced_with(self.reader.clone(), &set.namespace, &machines());
        let listed = api
            .list(&ListParams::default().labels(&format!("{}={}", instance::SET_LABEL, set.name)))
            .await?;
        let vmis = Api::<DynamicObject>::namespaced_with(
            self.reader.clone(),
            &set.namespace,
            &instances(),
        )
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
        let nodes: BTreeMap<String, String> = vmis
            .iter()
            .filter_map(|vmi| {
                let value = serde_json::to_value(vmi).ok()?;
                Some((
                    vmi.metadata.name.clone()?,
                    value["status"]["nodeName"].as_str()?.to_string(),
                ))
            })
            .collect();
        Ok(listed
            .items
            .into_iter()
            .map(|vm| {
                let value = serde_json::to_value(&vm).unwrap_or_default();
                let name = vm.metadata.name.clone().unwrap_or_default();
                let annotations = map_of(&value["metadata"]["annotations"]);
                let recorded = Recorded::read(&annotations);
                let ready = value["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Ready")
                    .map(|c| c["status"] == "True");
                let machine = instance::machine(value["status"]["printableStatus"].as_str(), ready);
                let at_rest = recorded.clone().unwrap_or_default();
                let state = InstanceState {
                    namespace: set.namespace.clone(),
                    name: name.clone(),
                    set: set.name.clone(),
                    stage: at_rest.stage,
                    since: at_rest.since.unwrap_or(0),
                    machine,
                    node: nodes.get(&name).cloned(),
                    node_health: node_health(
                        nodes.get(&name).and_then(|node| health.get(node)).copied(),
                    ),
                    environment: at_rest.environment.clone(),
                    code: at_rest.code.clone(),
                    lists: at_rest.all_lists(),
                    deleting: vm.metadata.deletion_timestamp.is_some(),
                    take_offline: set.offline.contains(&name),
                    forced: None,
                };
                Read {
                    name,
                    resource_version: vm.metadata.resource_version.clone().unwrap_or_default(),
                    recorded,
                    state,
                    created: vm
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.as_millisecond())
                        .unwrap_or(0),
                    finalizers: vm.metadata.finalizers.clone().unwrap_or_default(),
                }
            })
            .collect())
    }

    /// Move one instance on by one step.
    async fn step(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        mut recorded: Recorded,
        target: &model::TargetState,
        term: &Term,
        at: Timestamp,
    ) -> Result<(), kube::Error> {
        if !instance::may_take(recorded.lock.as_ref(), &term.holder, term.term) {
            return Ok(());
        }
        let running = recorded
            .list
            .as_ref()
            .is_some_and(|l| l.outcome == Outcome::Running);
        if running {
            let list = recorded.list.as_mut().expect("a running list");
            if list.awaiting_approval() || list.next_at > at {
                return Ok(());
            }
            let Some(task) = list.current().cloned() else {
                return Ok(());
            };
            list.attempt += 1;
            let key = list.key(&set.namespace, &machine.name);
            let reference = InstanceRef {
                namespace: set.namespace.clone(),
                name: machine.name.clone(),
                set: set.name.clone(),
            };
            let outcome = self
                .hooks
                .call(&StepCall {
                    key: &key,
                    attempt: list.attempt,
                    instance: &reference,
                    stage: list.stage.wit_name(),
                    step: &task.name,
                    params: &task.params,
                })
                .await;
            list.advance(outcome, now());
            recorded.settle();
            let done = recorded
                .list
                .as_ref()
                .is_some_and(|l| l.outcome != Outcome::Running);
            recorded.lock = (!done).then(|| Lock {
                holder: term.holder.clone(),
                term: term.term,
            });
            return self.record(set, machine, &recorded).await;
        }
        // A finished clean-up lets the machine go.
        if machine.state.deleting
            && recorded.stage == Some(Stage::Deleting)
            && recorded
                .list
                .as_ref()
                .is_some_and(|l| l.outcome == Outcome::Succeeded)
        {
            return self.release(set, machine).await;
        }
        let Ok(slot) = self.registry.policy(World::Lifecycle) else {
            return Ok(());
        };
        let input = model::input(&machine.state, target);
        let answer = slot.call(|version| version.next(&version.context(at), &input));
        let decision = match answer {
            Ok(answer) => Next::from_wit(&answer.value),
            Err(error) => {
                tracing::warn!(instance = machine.name, %error, "the lifecycle policy could not decide");
                return Ok(());
            }
        };
        let Some(list) = CurrentList::entered(recorded.last_number(), &decision, at) else {
            return Ok(());
        };
        tracing::info!(
            namespace = set.namespace,
            instance = machine.name,
            stage = list.stage.wit_name(),
            tasks = list.tasks.len(),
            "VM delivery: {}",
            list.reason
        );
        let done = list.outcome != Outcome::Running;
        recorded.enter(list, at);
        recorded.lock = (!done).then(|| Lock {
            holder: term.holder.clone(),
            term: term.term,
        });
        self.record(set, machine, &recorded).await
    }

    /// Write what an instance records, on the version it was read at.
    async fn record(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        recorded: &Recorded,
    ) -> Result<(), kube::Error> {
        let annotations: serde_json::Map<String, Value> = recorded
            .annotations()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.map_or(Value::Null, Value::String)))
            .collect();
        self.patch_machine(set, machine, json!({ "annotations": annotations }))
            .await
    }

    /// Release the clean-up finalizer: the machine goes.
    async fn release(&self, set: &VmReplicaSet, machine: &Read) -> Result<(), kube::Error> {
        let finalizers: Vec<&String> = machine
            .finalizers
            .iter()
            .filter(|f| f.as_str() != instance::FINALIZER)
            .collect();
        tracing::info!(
            namespace = set.namespace,
            instance = machine.name,
            "VM delivery: cleaned up; the machine goes"
        );
        self.patch_machine(set, machine, json!({ "finalizers": finalizers }))
            .await
    }

    /// Merge `metadata` into a machine's, on the resource version it was
    /// read at: a compare-and-swap, which a change since fails.
    async fn patch_machine(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        mut metadata: Value,
    ) -> Result<(), kube::Error> {
        metadata["resourceVersion"] = json!(machine.resource_version);
        Api::<DynamicObject>::namespaced_with(self.writer.clone(), &set.namespace, &machines())
            .patch(
                &machine.name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "metadata": metadata })),
            )
            .await
            .map(drop)
    }

    async fn write_status(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        object: &Value,
        mut status: Value,
    ) -> Result<(), kube::Error> {
        status = pruned(status);
        super::resources::keep_transitions(&object["status"], &mut status);
        if object["status"] == status {
            return Ok(());
        }
        Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, resource)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .map(drop)
    }
}

/// An instance as the set's status shows it.
fn row(machine: &Read) -> Value {
    let state = &machine.state;
    let recorded = machine.recorded.as_ref().ok();
    json!({
        "name": machine.name,
        "stage": state.stage.map(|s| s.wit_name()),
        "environment": state.environment.iter().map(|p| format!("{}={}", p.name, p.version)).collect::<Vec<_>>(),
        "code": state.code,
        "task": recorded.and_then(|r| r.list.as_ref()).and_then(|l| l.current()).map(|t| t.name.clone()),
        "lockedBy": recorded.and_then(|r| r.lock.as_ref()).map(|l| l.holder.clone()),
        "since": recorded.and_then(|r| r.since).map(crate::time::rfc3339),
    })
}

/// A value without its nulls, as the API server keeps it.
fn pruned(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, pruned(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(pruned).collect()),
        other => other,
    }
}
