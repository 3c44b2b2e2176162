//! KubeVirt's and CDI's part, played: the CustomResourceDefinitions of
//! their kinds, and a controller step that moves their objects as KubeVirt
//! would — a VM asked to run (run strategy `Always`, `RerunOnFailure`, or
//! `running: true`) gets an instance once its disk imports are done, the
//! instance is scheduled on the least loaded ready node with a
//! `virt-launcher` pod and runs; a VM asked to stop loses its instance; a
//! replica set keeps its count of instances and a pool its count of VMs; a
//! migration moves an instance to another node; a disk import advances to
//! done. An instance whose node is lost stays where it is, reporting
//! nothing new, until it is deleted (fenced): its VM then starts it again
//! elsewhere.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::resources::Resource;
use crate::store::{Store, StoreError};
use crate::text;

/// How long each step of a VM's start takes (scheduled, then running).
pub const STEP: Duration = Duration::from_secs(1);

/// How much of a disk import is done per step, in percent.
const IMPORT_STEP: f64 = 25.0;

/// The kinds: group, version, kind, plural.
const KINDS: [(&str, &str, &str, &str); 6] = [
    ("kubevirt.io", "v1", "VirtualMachine", "virtualmachines"),
    (
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
    ),
    (
        "kubevirt.io",
        "v1",
        "VirtualMachineInstanceReplicaSet",
        "virtualmachineinstancereplicasets",
    ),
    (
        "kubevirt.io",
        "v1",
        "VirtualMachineInstanceMigration",
        "virtualmachineinstancemigrations",
    ),
    (
        "pool.kubevirt.io",
        "v1alpha1",
        "VirtualMachinePool",
        "virtualmachinepools",
    ),
    ("cdi.kubevirt.io", "v1beta1", "DataVolume", "datavolumes"),
];

/// KubeVirt's and CDI's own short names and `kubectl get` columns of each
/// kind (as their CustomResourceDefinitions declare them).
fn names_and_columns(kind: &str) -> (Value, Value) {
    let column = |name: &str, path: &str| json!({"name": name, "type": "string", "jsonPath": path});
    let age = json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"});
    let ready = column("Ready", ".status.conditions[?(@.type=='Ready')].status");
    match kind {
        "VirtualMachine" => (
            json!(["vm", "vms"]),
            json!([age, column("Status", ".status.printableStatus"), ready]),
        ),
        "VirtualMachineInstance" => (
            json!(["vmi", "vmis"]),
            json!([
                age,
                column("Phase", ".status.phase"),
                column("IP", ".status.interfaces[0].ipAddress"),
                column("NodeName", ".status.nodeName"),
                ready
            ]),
        ),
        "VirtualMachineInstanceReplicaSet" => (
            json!(["vmirs", "vmirss"]),
            json!([
                column("Desired", ".spec.replicas"),
                column("Current", ".status.replicas"),
                column("Ready", ".status.readyReplicas"),
                age
            ]),
        ),
        "VirtualMachineInstanceMigration" => (
            json!(["vmim", "vmims"]),
            json!([
                column("Phase", ".status.phase"),
                column("VMI", ".spec.vmiName")
            ]),
        ),
        "VirtualMachinePool" => (
            json!(["vmpool", "vmpools"]),
            json!([
                column("Desired", ".spec.replicas"),
                column("Current", ".status.replicas"),
                column("Ready", ".status.readyReplicas"),
                age
            ]),
        ),
        _ => (
            json!(["dv", "dvs"]),
            json!([
                column("Phase", ".status.phase"),
                column("Progress", ".status.progress"),
                age
            ]),
        ),
    }
}

/// The CustomResourceDefinitions of KubeVirt's and CDI's kinds, keeping any
/// field (as the tests of the real control plane install them too), with
/// their short names (`kubectl get vm`) and columns.
pub fn crds() -> Vec<Value> {
    KINDS
        .iter()
        .map(|(group, version, kind, plural)| {
            let (short_names, columns) = names_and_columns(kind);
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.{group}")},
                "spec": {
                    "group": group,
                    "scope": "Namespaced",
                    "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                        "shortNames": short_names, "categories": ["all"]},
                    "versions": [{"name": version, "served": true, "storage": true,
                        "subresources": {"status": {}},
                        "additionalPrinterColumns": columns,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}]
                }
            })
        })
        .collect()
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn since(object: &Value, pointer: &str) -> SystemTime {
    humantime::parse_rfc3339_weak(&text(object, pointer)).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// The store's resources of these kinds, when their definitions exist.
struct Kinds {
    vm: &'static Resource,
    vmi: &'static Resource,
    replica_set: &'static Resource,
    migration: &'static Resource,
    pool: &'static Resource,
    data_volume: &'static Resource,
    pod: &'static Resource,
}

impl Kinds {
    fn of(store: &Store) -> Option<Self> {
        let find = |i: usize| {
            let (group, version, _, plural) = KINDS[i];
            store.find(group, version, plural)
        };
        Some(Self {
            vm: find(0)?,
            vmi: find(1)?,
            replica_set: find(2)?,
            migration: find(3)?,
            pool: find(4)?,
            data_volume: find(5)?,
            pod: store.find("", "v1", "pods")?,
        })
    }
}

fn owned_by(object: &Value, kind: &str, name: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["kind"] == kind && o["name"] == name && o["controller"] == true)
}

fn owner_ref(kind: &str, name: &str, api_version: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name,
            "uid": format!("sim-{kind}-{name}"), "controller": true}])
}

fn ready_condition(ready: bool, reason: &str, now: SystemTime) -> Value {
    let mut c = json!({"type": "Ready", "status": if ready { "True" } else { "False" },
                       "lastTransitionTime": rfc3339(now)});
    if !ready {
        c["reason"] = json!(reason);
    }
    c
}

/// Whether a VM's spec asks it to run.
fn asked_to_run(vm: &Value) -> bool {
    match vm.pointer("/spec/runStrategy").and_then(Value::as_str) {
        Some(strategy) => matches!(strategy, "Always" | "RerunOnFailure"),
        None => vm.pointer("/spec/running").and_then(Value::as_bool) == Some(true),
    }
}

/// Write `status` when it differs from what is stored; 1 when written.
fn set_status(
    store: &Store,
    resource: &'static Resource,
    object: &Value,
    status: Value,
) -> Result<usize, StoreError> {
    if object["status"] == status {
        return Ok(0);
    }
    store.patch(
        resource,
        &text(object, "/metadata/namespace"),
        &text(object, "/metadata/name"),
        &json!({ "status": status }),
    )?;
    Ok(1)
}

/// A new instance from a template (a VM's or a replica set's).
fn new_instance(
    namespace: &str,
    name: &str,
    template: &Value,
    owner: Value,
    now: SystemTime,
) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace,
            "labels": template.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({})),
            "creationTimestamp": rfc3339(now), "ownerReferences": owner},
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": {"phase": "Pending", "phaseTransitionTimestamp": rfc3339(now),
            "conditions": [ready_condition(false, "GuestNotRunning", now)]},
    })
}

/// An instance's `virt-launcher` pod on `node`, running.
fn launcher(vmi: &Value, node: &str, now: SystemTime) -> Value {
    let name = text(vmi, "/metadata/name");
    let mut labels = vmi["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels["kubevirt.io"] = json!("virt-launcher");
    labels["vm.kubevirt.io/name"] = json!(name);
    let at = rfc3339(now);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("virt-launcher-{name}-{}", &node_suffix(node)),
            "namespace": text(vmi, "/metadata/namespace"), "labels": labels,
            "creationTimestamp": at,
            "ownerReferences": owner_ref("VirtualMachineInstance", &name, "kubevirt.io/v1")},
        "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "virt-launcher:sim"}]},
        "status": {"phase": "Running", "startTime": at,
            "conditions": [{"type": "PodScheduled", "status": "True"},
                           {"type": "Ready", "status": "True", "lastTransitionTime": at}],
            "containerStatuses": [{"name": "compute", "image": "virt-launcher:sim", "imageID": "",
                "ready": true, "restartCount": 0, "state": {"running": {"startedAt": at}}}]},
    })
}

fn node_suffix(node: &str) -> String {
    node.chars().filter(char::is_ascii_alphanumeric).collect()
}

/// One step of everything KubeVirt and CDI would do. `nodes` are the ready
/// nodes that take new pods, `load` how many pods each runs.
pub fn reconcile(
    store: &Store,
    nodes: &[String],
    ready: &[String],
    load: &mut BTreeMap<String, usize>,
    now: SystemTime,
) -> Result<usize, StoreError> {
    let Some(k) = Kinds::of(store) else {
        return Ok(0);
    };
    let mut changes = collect(store, &k)?;
    changes += imports(store, &k, now)?;
    changes += migrations(store, &k, ready, load, now)?;
    changes += sets(store, &k, now)?;
    changes += machines(store, &k, now)?;
    changes += instances(store, &k, nodes, ready, load, now)?;
    changes += machine_status(store, &k, now)?;
    Ok(changes)
}

/// What the garbage collector does: instances, VMs and disk imports whose
/// owner (a VM, a pool, a replica set) is gone go too.
fn collect(store: &Store, k: &Kinds) -> Result<usize, StoreError> {
    let owners: Vec<(String, String, String)> = [k.vm, k.pool, k.replica_set]
        .iter()
        .flat_map(|r| store.list(r, None).0)
        .map(|o| {
            (
                text(&o, "/metadata/namespace"),
                text(&o, "/kind"),
                text(&o, "/metadata/name"),
            )
        })
        .collect();
    let mut changes = 0;
    for resource in [k.vm, k.vmi, k.data_volume] {
        for object in store.list(resource, None).0 {
            let namespace = text(&object, "/metadata/namespace");
            let orphaned = object["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|o| o["controller"] == true)
                .filter(|o| {
                    [
                        "VirtualMachine",
                        "VirtualMachinePool",
                        "VirtualMachineInstanceReplicaSet",
                    ]
                    .contains(&o["kind"].as_str().unwrap_or_default())
                })
                .any(|o| {
                    let owner = (namespace.clone(), text(o, "/kind"), text(o, "/name"));
                    !owners.contains(&owner)
                });
            if orphaned {
                match store.delete(resource, &namespace, &text(&object, "/metadata/name")) {
                    Ok(_) => changes += 1,
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(changes)
}

/// Disk imports advance a step at a time to done.
fn imports(store: &Store, k: &Kinds, now: SystemTime) -> Result<usize, StoreError> {
    let (volumes, _) = store.list(k.data_volume, None);
    let mut changes = 0;
    for dv in &volumes {
        let phase = text(dv, "/status/phase");
        let progress: f64 = text(dv, "/status/progress")
            .trim_end_matches('%')
            .parse()
            .unwrap_or(0.0);
        let last = since(dv, "/status/updated");
        if phase == "Succeeded" || now.duration_since(last).unwrap_or_default() < STEP {
            continue;
        }
        let status = if phase.is_empty() {
            json!({"phase": "ImportScheduled", "progress": "N/A", "updated": rfc3339(now),
                   "conditions": [{"type": "Ready", "status": "False"},
                                  {"type": "Running", "status": "False", "reason": "ContainerCreating"}]})
        } else if progress + IMPORT_STEP >= 100.0 {
            json!({"phase": "Succeeded", "progress": "100.0%", "updated": rfc3339(now),
                   "conditions": [{"type": "Ready", "status": "True"},
                                  {"type": "Running", "status": "False", "reason": "Completed"}]})
        } else {
            json!({"phase": "ImportInProgress", "progress": format!("{:.1}%", progress + IMPORT_STEP),
                   "updated": rfc3339(now),
                   "conditions": [{"type": "Ready", "status": "False", "reason": "TransferRunning"},
                                  {"type": "Running", "status": "True", "reason": "Pod is running"}]})
        };
        changes += set_status(store, k.data_volume, dv, status)?;
    }
    Ok(changes)
}

/// Replica sets keep their count of instances; pools their count of VMs.
fn sets(store: &Store, k: &Kinds, now: SystemTime) -> Result<usize, StoreError> {
    let mut changes = 0;
    let (instances, _) = store.list(k.vmi, None);
    for set in store.list(k.replica_set, None).0 {
        let kind = "VirtualMachineInstanceReplicaSet";
        let instance = |namespace: &str, name: &str| {
            let owner = owner_ref(kind, &text(&set, "/metadata/name"), "kubevirt.io/v1");
            new_instance(namespace, name, &set["spec"]["template"], owner, now)
        };
        let ready = |i: &Value| text(i, "/status/phase") == "Running" && condition_true(i, "Ready");
        let members = Members {
            kind,
            resource: k.vmi,
            all: &instances,
        };
        changes += keep_count(store, k.replica_set, &set, &members, instance, ready)?;
    }
    let (machines, _) = store.list(k.vm, None);
    for pool in store.list(k.pool, None).0 {
        let kind = "VirtualMachinePool";
        let machine = |namespace: &str, name: &str| {
            let template = &pool["spec"]["virtualMachineTemplate"];
            json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": name, "namespace": namespace,
                    "labels": template.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({})),
                    "ownerReferences": owner_ref(kind, &text(&pool, "/metadata/name"), "pool.kubevirt.io/v1alpha1")},
                "spec": template.get("spec").cloned().unwrap_or_else(|| json!({"runStrategy": "Always"})),
            })
        };
        let members = Members {
            kind,
            resource: k.vm,
            all: &machines,
        };
        changes += keep_count(store, k.pool, &pool, &members, machine, |m| {
            condition_true(m, "Ready")
        })?;
    }
    Ok(changes)
}

/// What a set owns: its kind (as owners name it), the members' resource,
/// and every object of that resource.
struct Members<'a> {
    kind: &'a str,
    resource: &'static Resource,
    all: &'a [Value],
}

/// Bring a set's members to its count, one created (`make`) or deleted a
/// step; its status counts them and the `ready` ones.
fn keep_count(
    store: &Store,
    resource: &'static Resource,
    set: &Value,
    members: &Members<'_>,
    make: impl Fn(&str, &str) -> Value,
    ready: impl Fn(&Value) -> bool,
) -> Result<usize, StoreError> {
    let (namespace, name) = (
        text(set, "/metadata/namespace"),
        text(set, "/metadata/name"),
    );
    let mine: Vec<&Value> = members
        .all
        .iter()
        .filter(|m| text(m, "/metadata/namespace") == namespace)
        .filter(|m| owned_by(m, members.kind, &name))
        .filter(|m| m["metadata"].get("deletionTimestamp").is_none())
        .collect();
    let desired = set
        .pointer("/spec/replicas")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize;
    let mut changes = 0;
    if mine.len() < desired {
        let taken: Vec<String> = mine.iter().map(|m| text(m, "/metadata/name")).collect();
        let fresh = (0..)
            .map(|n| format!("{name}-{n}"))
            .find(|n| !taken.contains(n))
            .unwrap_or_default();
        store.create(members.resource, &namespace, make(&namespace, &fresh))?;
        changes += 1;
    } else if mine.len() > desired
        && let Some(last) = mine.iter().map(|m| text(m, "/metadata/name")).max()
    {
        store.delete(members.resource, &namespace, &last)?;
        changes += 1;
    }
    let status = json!({"replicas": mine.len(), "readyReplicas": mine.iter().filter(|m| ready(m)).count(),
                        "observedGeneration": set.pointer("/metadata/generation").cloned().unwrap_or(json!(1))});
    Ok(changes + set_status(store, resource, set, status)?)
}

fn condition_true(object: &Value, kind: &str) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// A VM's instance (named as the VM), and whether a disk import of it is
/// unfinished.
fn instance_and_import<'a>(
    vm: &Value,
    instances: &'a [Value],
    volumes: &[Value],
) -> (Option<&'a Value>, bool) {
    let (namespace, name) = (text(vm, "/metadata/namespace"), text(vm, "/metadata/name"));
    let instance = instances
        .iter()
        .find(|i| text(i, "/metadata/namespace") == namespace && text(i, "/metadata/name") == name);
    let importing = volumes.iter().any(|d| {
        text(d, "/metadata/namespace") == namespace
            && owned_by(d, "VirtualMachine", &name)
            && text(d, "/status/phase") != "Succeeded"
    });
    (instance, importing)
}

/// VMs asked to run get an instance (once their disks are imported); VMs
/// asked to stop lose it.
fn machines(store: &Store, k: &Kinds, now: SystemTime) -> Result<usize, StoreError> {
    let (machines, _) = store.list(k.vm, None);
    let (instances, _) = store.list(k.vmi, None);
    let (volumes, _) = store.list(k.data_volume, None);
    let mut changes = 0;
    for vm in &machines {
        let (namespace, name) = (text(vm, "/metadata/namespace"), text(vm, "/metadata/name"));
        let (instance, importing) = instance_and_import(vm, &instances, &volumes);
        let deleting = vm["metadata"].get("deletionTimestamp").is_some();
        match instance {
            None if asked_to_run(vm) && !importing && !deleting => {
                let owner = owner_ref("VirtualMachine", &name, "kubevirt.io/v1");
                let vmi = new_instance(&namespace, &name, &vm["spec"]["template"], owner, now);
                store.create(k.vmi, &namespace, vmi)?;
                changes += 1;
            }
            Some(vmi)
                if (!asked_to_run(vm) || deleting)
                    && vmi["metadata"].get("deletionTimestamp").is_none() =>
            {
                store.delete(k.vmi, &namespace, &name)?;
                changes += 1;
            }
            _ => {}
        }
    }
    Ok(changes)
}

/// A VM's printable status and conditions, from its instance and disks.
fn machine_status(store: &Store, k: &Kinds, now: SystemTime) -> Result<usize, StoreError> {
    let (machines, _) = store.list(k.vm, None);
    let (instances, _) = store.list(k.vmi, None);
    let (volumes, _) = store.list(k.data_volume, None);
    let mut changes = 0;
    for vm in &machines {
        let (instance, importing) = instance_and_import(vm, &instances, &volumes);
        let migrating = instance
            .is_some_and(|i| i.pointer("/status/migrationState/completed") == Some(&json!(false)));
        let previous = vm["status"]["conditions"].clone();
        let kept_ready = |ready: bool, reason: &str| {
            // The transition time moves only when readiness changes.
            let before = previous
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .cloned();
            match before {
                Some(c) if (c["status"] == "True") == ready => c,
                _ => ready_condition(ready, reason, now),
            }
        };
        let (printable, ready) = match instance {
            _ if vm["metadata"].get("deletionTimestamp").is_some() => ("Terminating", false),
            None if importing && asked_to_run(vm) => ("Provisioning", false),
            None if asked_to_run(vm) => ("Starting", false),
            None => ("Stopped", false),
            Some(i) if i["metadata"].get("deletionTimestamp").is_some() => ("Stopping", false),
            Some(_) if migrating => ("Migrating", true),
            Some(i) if text(i, "/status/phase") == "Running" && condition_true(i, "Ready") => {
                ("Running", true)
            }
            Some(_) => ("Starting", false),
        };
        let reason = if printable == "Stopped" {
            "VMINotExists"
        } else {
            "GuestNotRunning"
        };
        let status = json!({"printableStatus": printable, "ready": ready,
                            "created": instance.is_some(),
                            "conditions": [kept_ready(ready, reason)]});
        changes += set_status(store, k.vm, vm, status)?;
    }
    Ok(changes)
}

/// Instances are scheduled, started and given a launcher pod; one on a lost
/// node is left as it was. The launcher pods of instances gone are
/// collected.
fn instances(
    store: &Store,
    k: &Kinds,
    nodes: &[String],
    ready: &[String],
    load: &mut BTreeMap<String, usize>,
    now: SystemTime,
) -> Result<usize, StoreError> {
    let (instances, _) = store.list(k.vmi, None);
    let (pods, _) = store.list(k.pod, None);
    let mut changes = 0;
    for vmi in &instances {
        let namespace = text(vmi, "/metadata/namespace");
        let phase = text(vmi, "/status/phase");
        let node = text(vmi, "/status/nodeName");
        let waited = now
            .duration_since(since(vmi, "/status/phaseTransitionTimestamp"))
            .unwrap_or_default()
            >= STEP;
        if vmi["metadata"].get("deletionTimestamp").is_some() || !waited {
            continue;
        }
        let status = match phase.as_str() {
            "" | "Pending" => {
                let Some(target) = nodes
                    .iter()
                    .min_by_key(|n| load.get(*n).copied().unwrap_or(0))
                else {
                    continue;
                };
                *load.entry(target.clone()).or_default() += 1;
                json!({"phase": "Scheduled", "nodeName": target, "phaseTransitionTimestamp": rfc3339(now),
                       "conditions": [ready_condition(false, "GuestNotRunning", now)]})
            }
            "Scheduled" if ready.contains(&node) => {
                let pod = launcher(vmi, &node, now);
                if store.create(k.pod, &namespace, pod).is_ok() {
                    changes += 1;
                }
                // The simulator's claims are ReadWriteOnce: an instance
                // with one cannot move live.
                let claims = vmi
                    .pointer("/spec/volumes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|v| {
                        v.get("persistentVolumeClaim").is_some() || v.get("dataVolume").is_some()
                    });
                let migratable = if claims {
                    json!({"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
                           "message": "cannot migrate VMI: PVC is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"})
                } else {
                    json!({"type": "LiveMigratable", "status": "True"})
                };
                json!({"phase": "Running", "nodeName": node, "phaseTransitionTimestamp": rfc3339(now),
                       "conditions": [ready_condition(true, "", now),
                                      {"type": "AgentConnected", "status": "True"},
                                      migratable]})
            }
            _ => continue,
        };
        changes += set_status(store, k.vmi, vmi, status)?;
    }
    // Launcher pods whose instance is gone, or moved to another node.
    for pod in pods
        .iter()
        .filter(|p| p["metadata"]["labels"]["kubevirt.io"] == "virt-launcher")
    {
        let namespace = text(pod, "/metadata/namespace");
        let owner = pod["metadata"]["ownerReferences"][0]["name"]
            .as_str()
            .unwrap_or_default();
        let current = instances.iter().find(|i| {
            text(i, "/metadata/namespace") == namespace && text(i, "/metadata/name") == owner
        });
        let stale = match current {
            None => true,
            Some(i) => {
                text(i, "/status/nodeName") != text(pod, "/spec/nodeName")
                    && text(i, "/status/phase") == "Running"
            }
        };
        if stale {
            match store.delete(k.pod, &namespace, &text(pod, "/metadata/name")) {
                Ok(_) => changes += 1,
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(changes)
}

/// A migration moves its instance to another ready node: pending, then
/// running (the instance says so), then done.
fn migrations(
    store: &Store,
    k: &Kinds,
    ready: &[String],
    load: &mut BTreeMap<String, usize>,
    now: SystemTime,
) -> Result<usize, StoreError> {
    let (migrations, _) = store.list(k.migration, None);
    let mut changes = 0;
    for m in &migrations {
        let namespace = text(m, "/metadata/namespace");
        let phase = text(m, "/status/phase");
        if matches!(phase.as_str(), "Succeeded" | "Failed") {
            continue;
        }
        let waited = now
            .duration_since(since(m, "/status/updated"))
            .unwrap_or_default()
            >= STEP;
        if !phase.is_empty() && !waited {
            continue;
        }
        let vmi_name = text(m, "/spec/vmiName");
        let vmi = match store.get(k.vmi, &namespace, &vmi_name) {
            Ok(vmi) if text(&vmi, "/status/phase") == "Running" => vmi,
            _ => {
                let failed = json!({"phase": "Failed", "updated": rfc3339(now),
                    "migrationState": {"failed": true, "failureReason": format!("instance {vmi_name} is not running")}});
                changes += set_status(store, k.migration, m, failed)?;
                continue;
            }
        };
        let source = text(&vmi, "/status/nodeName");
        let target = ready
            .iter()
            .filter(|n| **n != source)
            .min_by_key(|n| load.get(*n).copied().unwrap_or(0))
            .cloned();
        let Some(target) = target else {
            let failed = json!({"phase": "Failed", "updated": rfc3339(now),
                "migrationState": {"failed": true, "failureReason": "no other ready node"}});
            changes += set_status(store, k.migration, m, failed)?;
            continue;
        };
        if phase.is_empty() || phase == "Pending" {
            let status = json!({"phase": "Running", "updated": rfc3339(now),
                "migrationState": {"sourceNode": source, "targetNode": target, "completed": false}});
            store.patch(
                k.vmi,
                &namespace,
                &vmi_name,
                &json!({"status": {"migrationState":
                {"sourceNode": source, "targetNode": target, "completed": false}}}),
            )?;
            changes += 1 + set_status(store, k.migration, m, status)?;
        } else {
            let target = text(m, "/status/migrationState/targetNode");
            *load.entry(target.clone()).or_default() += 1;
            store.patch(k.vmi, &namespace, &vmi_name, &json!({"status": {"nodeName": target,
                "migrationState": {"sourceNode": source, "targetNode": target, "completed": true}}}))?;
            let pod = launcher(&vmi, &target, now);
            let _ = store.create(k.pod, &namespace, pod);
            let status = json!({"phase": "Succeeded", "updated": rfc3339(now),
                "migrationState": {"sourceNode": source, "targetNode": target, "completed": true}});
            changes += 2 + set_status(store, k.migration, m, status)?;
        }
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::reconcile as tick;
    use crate::resources;

    fn store() -> Store {
        let store = Store::new(10_000);
        for crd in crds() {
            crate::apply(&store, crd).unwrap();
        }
        for object in [
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vms"}}),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                   "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
                   "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                   "metadata": {"name": "db", "namespace": "vms", "labels": {"app.kubernetes.io/instance": "db"}},
                   "spec": {"runStrategy": "Always",
                            "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "db"}}, "spec": {}}}}),
            json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                   "metadata": {"name": "db-disk", "namespace": "vms",
                                "ownerReferences": owner_ref("VirtualMachine", "db", "kubevirt.io/v1")},
                   "spec": {"source": {"http": {"url": "http://images.local/disk.img"}}}}),
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet",
                   "metadata": {"name": "web", "namespace": "vms"},
                   "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "web"}}, "spec": {}}}}),
        ] {
            crate::apply(&store, object).unwrap();
        }
        store
    }

    fn get(store: &Store, group: &str, version: &str, plural: &str, name: &str) -> Value {
        let resource = resources::find_among(&store.resources(), group, version, plural).unwrap();
        store.get(resource, "vms", name).unwrap()
    }

    fn vmis(store: &Store) -> Vec<Value> {
        let resource = resources::find_among(
            &store.resources(),
            "kubevirt.io",
            "v1",
            "virtualmachineinstances",
        )
        .unwrap();
        store.list(resource, Some("vms")).0
    }

    fn launchers(store: &Store) -> Vec<Value> {
        let pods = resources::find("", "v1", "pods").unwrap();
        store
            .list(pods, Some("vms"))
            .0
            .into_iter()
            .filter(|p| p["metadata"]["labels"]["kubevirt.io"] == "virt-launcher")
            .collect()
    }

    /// Tick with the clock moving on a step each time until nothing
    /// changes.
    fn settle(store: &Store, clock: &mut SystemTime) {
        for _ in 0..100 {
            *clock += STEP.max(crate::controller::START_DELAY);
            if tick(store, *clock).unwrap() == 0 {
                return;
            }
        }
        panic!("never settled");
    }

    #[test]
    fn virtual_machines_import_start_stop_migrate_and_come_back_after_a_fence() {
        let store = store();
        let mut clock = SystemTime::now();
        // The disk imports before the VM starts: provisioning meanwhile.
        tick(&store, clock).unwrap();
        clock += STEP;
        tick(&store, clock).unwrap();
        let vm = get(&store, "kubevirt.io", "v1", "virtualmachines", "db");
        assert_eq!(vm["status"]["printableStatus"], "Provisioning", "{vm}");
        assert!(vmis(&store).iter().all(|i| i["metadata"]["name"] != "db"));
        settle(&store, &mut clock);
        let dv = get(
            &store,
            "cdi.kubevirt.io",
            "v1beta1",
            "datavolumes",
            "db-disk",
        );
        assert_eq!(dv["status"]["phase"], "Succeeded");
        let vm = get(&store, "kubevirt.io", "v1", "virtualmachines", "db");
        assert_eq!(vm["status"]["printableStatus"], "Running", "{vm}");
        assert_eq!(vm["status"]["conditions"][0]["status"], "True");
        let vmi = get(&store, "kubevirt.io", "v1", "virtualmachineinstances", "db");
        assert_eq!(vmi["status"]["phase"], "Running");
        assert_eq!(
            vmi["metadata"]["labels"]["app.kubernetes.io/instance"],
            "db"
        );
        let node = vmi["status"]["nodeName"].as_str().unwrap().to_string();

        // The replica set keeps two instances, all ready; three launchers.
        let set = get(
            &store,
            "kubevirt.io",
            "v1",
            "virtualmachineinstancereplicasets",
            "web",
        );
        assert_eq!(set["status"]["readyReplicas"], 2, "{set}");
        assert_eq!(launchers(&store).len(), 3);

        // A migration moves db's instance to the other node.
        crate::apply(
            &store,
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "move-db", "namespace": "vms"}, "spec": {"vmiName": "db"}}),
        )
        .unwrap();
        settle(&store, &mut clock);
        let m = get(
            &store,
            "kubevirt.io",
            "v1",
            "virtualmachineinstancemigrations",
            "move-db",
        );
        assert_eq!(m["status"]["phase"], "Succeeded", "{m}");
        let moved = get(&store, "kubevirt.io", "v1", "virtualmachineinstances", "db");
        assert_ne!(moved["status"]["nodeName"], node.as_str());
        let db_launchers: Vec<Value> = launchers(&store)
            .into_iter()
            .filter(|p| p["metadata"]["ownerReferences"][0]["name"] == "db")
            .collect();
        assert_eq!(db_launchers.len(), 1, "the old launcher is collected");
        assert_eq!(
            db_launchers[0]["spec"]["nodeName"],
            moved["status"]["nodeName"]
        );

        // A lost node leaves its instance as it was until it is deleted
        // (fenced); the VM then starts it on a ready node.
        let lost = moved["status"]["nodeName"].as_str().unwrap().to_string();
        let nodes = resources::find("", "v1", "nodes").unwrap();
        store
            .patch(
                nodes,
                "",
                &lost,
                &json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
            )
            .unwrap();
        settle(&store, &mut clock);
        let stuck = get(&store, "kubevirt.io", "v1", "virtualmachineinstances", "db");
        assert_eq!(stuck["status"]["nodeName"], lost.as_str());
        assert_eq!(stuck["status"]["phase"], "Running");
        let vmi_resource = resources::find_among(
            &store.resources(),
            "kubevirt.io",
            "v1",
            "virtualmachineinstances",
        )
        .unwrap();
        store.delete(vmi_resource, "vms", "db").unwrap();
        settle(&store, &mut clock);
        let again = get(&store, "kubevirt.io", "v1", "virtualmachineinstances", "db");
        assert_eq!(again["status"]["phase"], "Running");
        assert_ne!(again["status"]["nodeName"], lost.as_str());

        // Halted: the instance and its launcher go, the VM says Stopped.
        let vms = resources::find_among(&store.resources(), "kubevirt.io", "v1", "virtualmachines")
            .unwrap();
        store
            .patch(
                vms,
                "vms",
                "db",
                &json!({"spec": {"runStrategy": "Halted"}}),
            )
            .unwrap();
        settle(&store, &mut clock);
        let vm = get(&store, "kubevirt.io", "v1", "virtualmachines", "db");
        assert_eq!(vm["status"]["printableStatus"], "Stopped", "{vm}");
        assert!(vmis(&store).iter().all(|i| i["metadata"]["name"] != "db"));
        assert!(
            launchers(&store)
                .iter()
                .all(|p| p["metadata"]["ownerReferences"][0]["name"] != "db")
        );

        // Scaled down, the replica set keeps one.
        let sets = resources::find_among(
            &store.resources(),
            "kubevirt.io",
            "v1",
            "virtualmachineinstancereplicasets",
        )
        .unwrap();
        store
            .patch(sets, "vms", "web", &json!({"spec": {"replicas": 1}}))
            .unwrap();
        settle(&store, &mut clock);
        let set = get(
            &store,
            "kubevirt.io",
            "v1",
            "virtualmachineinstancereplicasets",
            "web",
        );
        assert_eq!(
            (
                set["status"]["replicas"].as_u64(),
                set["status"]["readyReplicas"].as_u64()
            ),
            (Some(1), Some(1))
        );
    }
}
