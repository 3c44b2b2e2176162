//! Tasks on an app made of KubeVirt virtual machines (seed 002), through
//! the objects KubeVirt itself reads: `start` sets each VM's run strategy
//! to `Always` and each pool's or VMI replica set's replicas (the request's
//! `replicas`, else what it had before it was stopped, else 1); `stop` sets
//! the run strategy to `Halted` and the sets' replicas to 0, remembering
//! the count; `restart` deletes the app's instances that are older than the
//! task, which their VM or set starts again (what KubeVirt's `restart`
//! does); `scale` sets a pool's or replica set's replicas; `migrate` creates
//! a `VirtualMachineInstanceMigration` of `params.instance`; `delete`
//! deletes the VMs and sets. Failover's repair (a `restart` whose
//! `params.failover` names the node and the instance) fences the node, then
//! force-deletes the instance, so that its VM or set starts it elsewhere —
//! or, for an instance of a `VMReplicaSet` whose `lostInstance` is
//! `scale-down`, marks its `Server` lost (`verdict.dev/lost`), for the
//! delivery's controller to take it offline, the set smaller by it — the
//! user's spec is not touched; its rescale is a `scale` of the set
//! `params.failover.set` names.
//! Progress is read from what the host observes of them.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use super::{Executor, Job, REPLICAS_BEFORE_STOP};
use crate::observe::resources::Generic;
use crate::observe::{AppKey, Snapshot};
use crate::tasks::Task;
use crate::wit::types::{self, ConditionStatus, TaskAction as Action};

use crate::observe::resources::kubevirt::{LOST, MIGRATION, SETS, VM, VM_REPLICA_SET, VMI};

/// The kind of a delivered instance of a `VMReplicaSet`.
const SERVER: &str = "Server";

/// The API resource of a KubeVirt kind (or of a VMReplicaSet's or its
/// Servers').
fn resource(kind: &str) -> ApiResource {
    let (group, version, plural) = match kind {
        "VirtualMachinePool" => ("pool.kubevirt.io", "v1alpha1", "virtualmachinepools"),
        "VirtualMachineInstanceReplicaSet" => {
            ("kubevirt.io", "v1", "virtualmachineinstancereplicasets")
        }
        VM_REPLICA_SET => ("verdict.dev", "v1alpha1", "vmreplicasets"),
        SERVER => ("verdict.dev", "v1alpha1", "servers"),
        VMI => ("kubevirt.io", "v1", "virtualmachineinstances"),
        MIGRATION => ("kubevirt.io", "v1", "virtualmachineinstancemigrations"),
        _ => ("kubevirt.io", "v1", "virtualmachines"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn ready(o: &Generic) -> bool {
    o.conditions
        .iter()
        .any(|c| c.kind == "Ready" && c.status == ConditionStatus::True)
}

/// A pool or VMI replica set of the app.
#[derive(Debug, Clone)]
pub(super) struct Set {
    kind: String,
    name: String,
    replicas: u32,
    remembered: Option<u32>,
}

/// An app's virtual machines, as observed.
#[derive(Debug, Clone, Default)]
pub(super) struct Machines {
    sets: Vec<Set>,
    /// VMs no set of the app owns.
    vms: Vec<String>,
    /// Every instance, with when it was created.
    instances: Vec<(String, Option<types::Timestamp>)>,
}

impl Machines {
    pub fn of(snapshot: &Snapshot, app: &AppKey) -> Self {
        let objects = snapshot.objects_of(app);
        let sets: Vec<Set> = objects
            .iter()
            .filter(|o| SETS.contains(&o.kind.as_str()))
            .map(|o| Set {
                kind: o.kind.clone(),
                name: o.name.clone(),
                replicas: o.spec_value()["replicas"].as_u64().unwrap_or(1) as u32,
                remembered: o
                    .annotations
                    .iter()
                    .find(|a| a.key == REPLICAS_BEFORE_STOP)
                    .and_then(|a| a.value.parse().ok()),
            })
            .collect();
        let in_a_set = |o: &Generic| {
            o.owner
                .as_ref()
                .is_some_and(|(kind, name)| sets.iter().any(|s| &s.kind == kind && &s.name == name))
        };
        let vms = objects
            .iter()
            .filter(|o| o.kind == VM && !in_a_set(o))
            .map(|o| o.name.clone())
            .collect();
        let instances = objects
            .iter()
            .filter(|o| o.kind == VMI)
            .map(|o| (o.name.clone(), o.created_at))
            .collect();
        Self {
            sets,
            vms,
            instances,
        }
    }

    /// The sets and the virtual machines outside them, by kind and name:
    /// what a delete deletes and an adoption hands over.
    pub fn adoptable(&self) -> Vec<(String, String)> {
        self.sets
            .iter()
            .map(|set| (set.kind.clone(), set.name.clone()))
            .chain(self.vms.iter().map(|vm| (VM.to_string(), vm.clone())))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty() && self.vms.is_empty() && self.instances.is_empty()
    }
}

/// What a task on virtual machines waits for.
#[derive(Debug, Clone)]
pub(super) enum Wait {
    /// This many instances ready (start, scale).
    Running(u32),
    /// No instance left (stop).
    Halted,
    /// This many instances ready that started at or after a time (restart).
    Restarted(u32, types::Timestamp),
    /// The migration of this name done.
    Migrated(String),
    /// Nothing left of the VMs and sets (delete).
    Gone,
    /// The repaired instance no longer on the node, and (when its VM
    /// starts it again under its name) running elsewhere.
    Repaired { node: String, instance: String },
    /// The instance's VM gone: its set took it offline.
    TakenOffline { instance: String },
}

impl Wait {
    /// Whether it is done, its progress in percent, and what to say; an
    /// error when it cannot get there (a failed migration).
    pub fn progress(&self, snapshot: &Snapshot, app: &AppKey) -> (bool, u8, String) {
        let objects = snapshot.objects_of(app);
        let of = |kind: &'static str| objects.iter().filter(move |o| o.kind == kind);
        let percent = |part: u32, whole: u32| {
            (part.min(whole) * 100)
                .checked_div(whole)
                .map_or(100, |p| p as u8)
        };
        // Ready instances: a set's count, and each VM of no set.
        let ready_now = || -> u32 {
            let sets: u32 = objects
                .iter()
                .filter(|o| SETS.contains(&o.kind.as_str()))
                .map(|o| o.status_value()["readyReplicas"].as_u64().unwrap_or(0) as u32)
                .sum();
            let vms = of(VM)
                .filter(|o| {
                    o.owner
                        .as_ref()
                        .is_none_or(|(k, _)| !SETS.contains(&k.as_str()))
                })
                .filter(|o| o.phase.as_deref() == Some("Running") && ready(o))
                .count() as u32;
            sets + vms
        };
        match self {
            Wait::Running(want) => {
                let ready = ready_now();
                let live = of(VMI).filter(|o| o.deleting_since.is_none()).count() as u32;
                (
                    ready >= *want && live == *want,
                    percent(ready, *want),
                    format!("{ready}/{want} instances ready"),
                )
            }
            Wait::Halted => {
                let left = of(VMI).count() as u32;
                (
                    left == 0,
                    if left == 0 { 100 } else { 50 },
                    format!("{left} instances left"),
                )
            }
            Wait::Restarted(want, since) => {
                let fresh = of(VMI)
                    .filter(|o| o.created_at.is_some_and(|c| c >= *since))
                    .filter(|o| o.phase.as_deref() == Some("Running") && ready(o))
                    .count() as u32;
                (
                    fresh >= *want,
                    percent(fresh, *want),
                    format!("{fresh}/{want} instances restarted and ready"),
                )
            }
            Wait::Migrated(name) => match of(MIGRATION).find(|o| &o.name == name) {
                Some(m) => {
                    let phase = m.phase.clone().unwrap_or_else(|| "Pending".into());
                    let progress = match phase.as_str() {
                        "Succeeded" => 100,
                        "Running" => 50,
                        _ => 10,
                    };
                    (
                        phase == "Succeeded",
                        progress,
                        format!("migration {name} is {phase}"),
                    )
                }
                None => (
                    false,
                    0,
                    format!("waiting for migration {name} to be observed"),
                ),
            },
            Wait::Repaired { node, instance } => {
                // The instance's own machine only: another instance of the
                // app on the same node has a repair of its own, which runs
                // after this one.
                let left = of(VMI)
                    .filter(|o| {
                        &o.name == instance
                            && o.node.as_deref() == Some(node.as_str())
                            && o.deleting_since.is_none()
                    })
                    .count();
                let again = of(VMI).find(|o| &o.name == instance);
                let back = of(VM).all(|vm| &vm.name != instance)
                    || again.is_some_and(|o| {
                        o.node.as_deref() != Some(node.as_str())
                            && o.phase.as_deref() == Some("Running")
                            && ready(o)
                    });
                let done = left == 0 && back;
                (
                    done,
                    if done {
                        100
                    } else if left == 0 {
                        50
                    } else {
                        10
                    },
                    match (left, back) {
                        (0, true) => format!("{instance} runs on another node"),
                        (0, false) => format!("{instance} is starting on another node"),
                        _ => format!("{instance} is still on node {node}"),
                    },
                )
            }
            Wait::TakenOffline { instance } => {
                let gone = of(VM).all(|vm| &vm.name != instance);
                (
                    gone,
                    if gone { 100 } else { 50 },
                    match gone {
                        true => format!("{instance} was taken offline; its set is smaller by one"),
                        false => format!("{instance} is being taken offline"),
                    },
                )
            }
            Wait::Gone => {
                let left = objects
                    .iter()
                    .filter(|o| o.kind == VM || o.kind == VMI || SETS.contains(&o.kind.as_str()))
                    .count();
                (
                    left == 0,
                    if left == 0 { 100 } else { 50 },
                    format!("{left} objects left"),
                )
            }
        }
    }

    /// Why the wait can never end, when it cannot.
    pub fn failure(&self, snapshot: &Snapshot, app: &AppKey) -> Option<String> {
        let Wait::Migrated(name) = self else {
            return None;
        };
        let objects = snapshot.objects_of(app);
        let m = objects
            .iter()
            .find(|o| o.kind == MIGRATION && &o.name == name)?;
        (m.phase.as_deref() == Some("Failed")).then(|| {
            let why = m
                .status_value()
                .pointer("/migrationState/failureReason")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| "no reason given".into());
            format!("migration {name} failed: {why}")
        })
    }
}

impl Executor {
    fn dynamic(&self, namespace: &str, kind: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &resource(kind))
    }

    pub(super) async fn merge(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
        patch: Value,
    ) -> Result<(), String> {
        self.dynamic(namespace, kind)
            .patch(name, &super::day_two(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| format!("the Kubernetes API refused the change of {kind} {name}: {e}"))
    }

    async fn set_replicas(&self, namespace: &str, set: &Set, replicas: u32) -> Result<(), String> {
        let patch = json!({"spec": {"replicas": replicas}});
        self.merge(namespace, &set.kind, &set.name, patch).await
    }

    async fn remove(&self, namespace: &str, kind: &str, name: &str) -> Result<(), String> {
        match self
            .dynamic(namespace, kind)
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(format!(
                "the Kubernetes API refused to delete {kind} {name}: {e}"
            )),
        }
    }

    /// How to delete one of the app's machines or sets, when it is
    /// verdict's (made or handed to it), read as it is now: preconditions
    /// on its UID and resource version. `None`: gone already; someone
    /// else's is an error naming it.
    async fn deletable(
        &self,
        app: &AppKey,
        kind: &str,
        name: &str,
    ) -> Result<Option<DeleteParams>, String> {
        let namespace = app.0.as_str();
        let object = self
            .dynamic(namespace, kind)
            .get_opt(name)
            .await
            .map_err(|e| format!("{kind} {namespace}/{name} could not be read: {e}"))?;
        object
            .map(|o| {
                let what = format!("{kind} {namespace}/{name}");
                super::deleting_as_read(o.metadata, (namespace, &app.1), &what)
            })
            .transpose()
    }

    /// Make the change a task asks of an app's virtual machines.
    pub(super) async fn begin_machines(
        &self,
        task: &Task,
        app: &AppKey,
        machines: Machines,
        mut job: Job,
    ) -> Result<Job, String> {
        let namespace = app.0.as_str();
        let replicas_param = task
            .params
            .get("replicas")
            .and_then(Value::as_u64)
            .map(|r| r as u32);
        let failover = task.params.get("failover");
        if let Some(f) = failover.filter(|f| f["action"] == "repair") {
            return self.repair(namespace, f, job).await;
        }
        let running = json!({"spec": {"runStrategy": "Always", "running": null}});
        let halted = json!({"spec": {"runStrategy": "Halted", "running": null}});
        job.initial = machines.instances.len() as u32;
        let wait = match task.action {
            Action::Start => {
                let mut want = 0;
                for set in &machines.sets {
                    let replicas = replicas_param
                        .or(set.remembered)
                        .unwrap_or(set.replicas)
                        .max(1);
                    want += replicas;
                    self.set_replicas(namespace, set, replicas).await?;
                }
                for vm in &machines.vms {
                    self.merge(namespace, VM, vm, running.clone()).await?;
                    want += 1;
                }
                Wait::Running(want)
            }
            Action::Stop => {
                for set in &machines.sets {
                    let before = if set.replicas > 0 {
                        set.replicas
                    } else {
                        set.remembered.unwrap_or(1)
                    };
                    let patch = json!({"metadata": {"annotations": {REPLICAS_BEFORE_STOP: before.to_string()}},
                                       "spec": {"replicas": 0}});
                    self.merge(namespace, &set.kind, &set.name, patch).await?;
                }
                for vm in &machines.vms {
                    self.merge(namespace, VM, vm, halted.clone()).await?;
                }
                Wait::Halted
            }
            Action::Restart => {
                // Only instances older than the task go: making the change
                // again (after this process restarted) deletes nothing new.
                let since = task.created_at - task.created_at.rem_euclid(1000);
                let want = machines.instances.len() as u32;
                for (name, created) in &machines.instances {
                    if created.is_none_or(|c| c < since) {
                        self.remove(namespace, VMI, name).await?;
                    }
                }
                Wait::Restarted(want, since)
            }
            Action::Scale => {
                let replicas = replicas_param.ok_or("params.replicas is required")?;
                let named = failover
                    .and_then(|f| f.pointer("/set/name"))
                    .and_then(Value::as_str);
                let set = machines
                    .sets
                    .iter()
                    .find(|s| named.is_none_or(|n| n == s.name))
                    .ok_or_else(|| {
                    format!(
                        "scale needs a VirtualMachinePool or VirtualMachineInstanceReplicaSet; {}/{} has none",
                        app.0, app.1
                    )
                })?;
                self.set_replicas(namespace, set, replicas).await?;
                Wait::Running(replicas)
            }
            Action::Migrate => {
                let instance = task
                    .params
                    .get("instance")
                    .and_then(Value::as_str)
                    .ok_or("params.instance is required")?;
                if !machines.instances.iter().any(|(name, _)| name == instance) {
                    return Err(format!("{instance} has no running instance to migrate"));
                }
                // Named after the task, so that asking again finds it.
                let name = format!("{instance}-{}", task.created_at / 1000);
                let migration: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "kubevirt.io/v1", "kind": MIGRATION,
                    "metadata": {"name": name, "namespace": namespace,
                                 "labels": {"verdict.dev/task": task.id}},
                    "spec": {"vmiName": instance},
                }))
                .map_err(|e| e.to_string())?;
                match self
                    .dynamic(namespace, MIGRATION)
                    .create(&PostParams::default(), &migration)
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(e) => return Err(format!("the Kubernetes API refused the migration: {e}")),
                }
                Wait::Migrated(name)
            }
            Action::Delete => {
                // Each checked before any is deleted: all or nothing.
                let mut deletions = Vec::new();
                for (kind, name) in machines.adoptable() {
                    if let Some(params) = self.deletable(app, &kind, &name).await? {
                        deletions.push((kind, name, params));
                    }
                }
                for (kind, name, params) in deletions {
                    match self.dynamic(namespace, &kind).delete(&name, &params).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Err(e) => {
                            return Err(format!(
                                "the Kubernetes API refused to delete {kind} {name}: {e}"
                            ));
                        }
                    }
                }
                Wait::Gone
            }
            Action::Create | Action::Update | Action::Adopt => {
                return Err(format!(
                    "{} of virtual machines is not something this executor does; change them with their own tools",
                    task.action_name()
                ));
            }
        };
        job.machines = Some(wait);
        Ok(job)
    }

    /// Whether an instance's VM is of a VMReplicaSet that scales down on
    /// a lost instance (`lostInstance: scale-down`).
    fn shrinking_set(&self, namespace: &str, instance: &str) -> bool {
        let snapshot = self.observed.read();
        let Some((kind, set)) = snapshot
            .object_named(VM, namespace, instance)
            .and_then(|vm| vm.owner.clone())
        else {
            return false;
        };
        kind == VM_REPLICA_SET
            && snapshot
                .object_named(VM_REPLICA_SET, namespace, &set)
                .and_then(|set| serde_json::from_str::<Value>(&set.spec).ok())
                .is_some_and(|spec| spec["lostInstance"] == "scale-down")
    }

    /// Failover's repair: fence the node, so that it cannot run the
    /// instance any more, then force-delete the instance (or, in a set
    /// that scales down on a lost instance, mark its Server lost).
    async fn repair(&self, namespace: &str, failover: &Value, mut job: Job) -> Result<Job, String> {
        let node = failover["node"]
            .as_str()
            .ok_or("params.failover.node is required")?;
        let instance = failover
            .pointer("/instance/name")
            .and_then(Value::as_str)
            .ok_or("params.failover.instance is required")?;
        self.fence(node).await?;
        // An instance of a VMReplicaSet that gives up lost instances is
        // taken offline instead, by the delivery's controller: drained, its
        // machine deleted, not replaced. Its Server is marked lost, with
        // the node.
        if self.shrinking_set(namespace, instance) {
            let mark = json!({"node": node, "at": crate::time::rfc3339(crate::time::now())});
            let patch = json!({"metadata": {"annotations": {LOST: mark.to_string()}}});
            self.merge(namespace, SERVER, instance, patch).await?;
            job.machines = Some(Wait::TakenOffline {
                instance: instance.to_string(),
            });
            return Ok(job);
        }
        // Only the instance on the fenced node: asking again (after this
        // process restarted) must not delete the one started elsewhere.
        let still_there = self
            .observed
            .read()
            .object_named(VMI, namespace, instance)
            .is_some_and(|o| o.node.as_deref() == Some(node));
        job.machines = Some(Wait::Repaired {
            node: node.to_string(),
            instance: instance.to_string(),
        });
        if !still_there {
            return Ok(job);
        }
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::background()
        };
        match self.dynamic(namespace, VMI).delete(instance, &force).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(format!(
                    "the Kubernetes API refused to delete instance {instance}: {e}"
                ));
            }
        }
        Ok(job)
    }
}
