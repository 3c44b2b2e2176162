//! A small controller, so that the simulated cluster moves on its own as a
//! real one does: for every Deployment and StatefulSet with a pod template,
//! pods are created and deleted to match `spec.replicas` (one at a time, as
//! a rollout shows), start after a moment on the least loaded ready node that takes pods
//! (not cordoned or tainted `NoSchedule`/`NoExecute`),
//! are replaced one by one when the template changes, and lose readiness
//! while their node is not ready; the workload's status counts them.
//! Workloads without a template (hand-written pods) are left alone.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::resources::{self, Resource};
use crate::store::{Store, StoreError};
use crate::text;

/// The label marking the pods the controller owns: `Kind.name`.
pub const OWNER: &str = "sim.verdict.dev/owner";

/// How long a new pod takes to start.
pub const START_DELAY: Duration = Duration::from_secs(2);

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn resource(group: &str, plural: &str) -> &'static Resource {
    let version = "v1";
    resources::find(group, version, plural).expect("a built-in resource")
}

/// Whether a pod's Ready condition is True.
pub(crate) fn ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn pending(pod: &Value) -> bool {
    text(pod, "/status/phase") == "Pending"
}

/// A short stable hash of a pod template (as `pod-template-hash`).
fn template_hash(template: &Value) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    template.to_string().hash(&mut hasher);
    format!("{:08x}", hasher.finish() as u32)
}

fn node_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Whether new pods may be placed on a ready node: not cordoned, and no
/// taint that keeps pods off (`NoSchedule`, `NoExecute`).
fn node_schedulable(node: &Value) -> bool {
    let cordoned = node
        .pointer("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tainted = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")));
    !cordoned && !tainted
}

/// The nodes whose Ready condition is True, and those of them that take
/// new pods.
fn ready_nodes(store: &Store) -> (Vec<String>, Vec<String>) {
    let (nodes, _) = store.list(resource("", "nodes"), None);
    let ready: Vec<&Value> = nodes.iter().filter(|n| node_ready(n)).collect();
    let names = |n: &&Value| text(n, "/metadata/name");
    (
        ready.iter().map(names).collect(),
        ready
            .iter()
            .filter(|n| node_schedulable(n))
            .map(names)
            .collect(),
    )
}

/// The conditions and container states of a pod that runs (`ready`) or has
/// lost readiness.
fn running_status(pod: &Value, ready: bool, now: SystemTime) -> Value {
    let mut status = pod["status"].clone();
    let since = rfc3339(now);
    status["phase"] = json!("Running");
    status["conditions"] = json!([
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": since},
    ]);
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let previous = status["containerStatuses"].clone();
    status["containerStatuses"] = containers
        .iter()
        .map(|c| {
            let name = text(c, "/name");
            let before = previous
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["name"] == name.as_str());
            let started = before
                .and_then(|s| s.pointer("/state/running/startedAt").cloned())
                .unwrap_or_else(|| json!(since));
            json!({
                "name": name, "image": text(c, "/image"), "imageID": "",
                "ready": ready,
                "restartCount": before.and_then(|s| s["restartCount"].as_u64()).unwrap_or(0),
                "state": {"running": {"startedAt": started}},
            })
        })
        .collect();
    status["startTime"] = status
        .get("startTime")
        .cloned()
        .filter(|s| !s.is_null())
        .unwrap_or_else(|| json!(since));
    status
}

/// The claims of a StatefulSet's pod, made from its volume claim templates
/// when missing (`<template>-<pod>`, the template's labels) and bound at
/// once; they stay when the pod or the set goes, as Kubernetes keeps them.
fn claim(store: &Store, set: &Value, pod: &str) -> Result<(), StoreError> {
    let claims = resource("", "persistentvolumeclaims");
    let namespace = text(set, "/metadata/namespace");
    for template in set
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = format!("{}-{pod}", text(template, "/metadata/name"));
        let mut spec = template["spec"].clone();
        spec["volumeName"] = json!(format!("pv-{namespace}-{name}"));
        let requested = spec
            .pointer("/resources/requests/storage")
            .cloned()
            .unwrap_or(json!("1Gi"));
        let claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": template.pointer("/metadata/labels").cloned().unwrap_or(json!({}))},
            "spec": spec,
            "status": {"phase": "Bound", "capacity": {"storage": requested}},
        });
        match store.create(claims, &namespace, claim) {
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A new pod of a workload, pending on `node`.
fn new_pod(
    workload: &Value,
    kind: &str,
    name: String,
    hash: &str,
    node: Option<&String>,
    now: SystemTime,
) -> Value {
    let namespace = text(workload, "/metadata/namespace");
    let owner = text(workload, "/metadata/name");
    let template = &workload["spec"]["template"];
    let mut labels = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    labels[OWNER] = json!(format!("{kind}.{owner}"));
    let (owner_kind, owner_name, owner_version) = if kind == "Deployment" {
        labels["pod-template-hash"] = json!(hash);
        ("ReplicaSet", format!("{owner}-{hash}"), "apps/v1")
    } else {
        labels["controller-revision-hash"] = json!(format!("{owner}-{hash}"));
        ("StatefulSet", owner.clone(), "apps/v1")
    };
    let mut spec = template["spec"].clone();
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    let waiting: Vec<Value> = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "name": text(c, "/name"), "image": text(c, "/image"), "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            })
        })
        .collect();
    let scheduled = if node.is_some() {
        json!({"type": "PodScheduled", "status": "True"})
    } else {
        json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": "0/0 nodes are available: no node is ready"})
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace, "labels": labels,
            "creationTimestamp": rfc3339(now),
            "ownerReferences": [{"apiVersion": owner_version, "kind": owner_kind, "name": owner_name,
                                 "uid": format!("sim-{owner_name}"), "controller": true}],
        },
        "spec": spec,
        "status": {"phase": "Pending", "conditions": [scheduled], "containerStatuses": waiting},
    })
}

fn created(pod: &Value) -> SystemTime {
    humantime::parse_rfc3339_weak(&text(pod, "/metadata/creationTimestamp"))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Bring every templated workload one step towards its spec. Returns how
/// many objects changed.
pub fn reconcile(store: &Store, now: SystemTime) -> Result<usize, StoreError> {
    let pods_resource = resource("", "pods");
    let (nodes, schedulable) = ready_nodes(store);
    let (all_pods, _) = store.list(pods_resource, None);
    let mut load: BTreeMap<String, usize> = schedulable.iter().map(|n| (n.clone(), 0)).collect();
    for pod in &all_pods {
        if let Some(count) = load.get_mut(&text(pod, "/spec/nodeName")) {
            *count += 1;
        }
    }
    let mut changes = 0;

    // Readiness follows the node (the node lifecycle controller's part),
    // and pods that waited long enough start.
    for pod in &all_pods {
        let node = text(pod, "/spec/nodeName");
        let on_ready_node = nodes.contains(&node);
        let waiting_reason = pod
            .pointer("/status/containerStatuses/0/state/waiting/reason")
            .and_then(Value::as_str);
        let owned = pod
            .pointer(&format!("/metadata/labels/{}", OWNER.replace('/', "~1")))
            .is_some();
        let status = if pending(pod) && owned {
            (on_ready_node && now.duration_since(created(pod)).unwrap_or_default() >= START_DELAY)
                .then(|| running_status(pod, true, now))
        } else if text(pod, "/status/phase") == "Running"
            && ready(pod)
            && !on_ready_node
            && !node.is_empty()
        {
            Some(running_status(pod, false, now))
        } else if owned
            && text(pod, "/status/phase") == "Running"
            && !ready(pod)
            && on_ready_node
            && waiting_reason.is_none()
        {
            Some(running_status(pod, true, now))
        } else {
            None
        };
        if let Some(status) = status {
            store.patch(
                pods_resource,
                &text(pod, "/metadata/namespace"),
                &text(pod, "/metadata/name"),
                &json!({ "status": status }),
            )?;
            changes += 1;
        }
    }

    // Pods whose workload is gone (or no longer templated) go too, as the
    // garbage collector does.
    let mut owners = Vec::new();
    for (kind, plural) in [
        ("Deployment", "deployments"),
        ("StatefulSet", "statefulsets"),
    ] {
        let (items, _) = store.list(resource("apps", plural), None);
        owners.extend(
            items
                .iter()
                .filter(|w| w.pointer("/spec/template").is_some())
                .map(|w| {
                    (
                        text(w, "/metadata/namespace"),
                        format!("{kind}.{}", text(w, "/metadata/name")),
                    )
                }),
        );
    }
    for pod in &all_pods {
        let Some(owner) = pod["metadata"]["labels"][OWNER].as_str() else {
            continue;
        };
        let namespace = text(pod, "/metadata/namespace");
        if !owners.iter().any(|(ns, o)| *ns == namespace && o == owner) {
            match store.delete(pods_resource, &namespace, &text(pod, "/metadata/name")) {
                Ok(_) => changes += 1,
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }

    for (kind, plural) in [
        ("Deployment", "deployments"),
        ("StatefulSet", "statefulsets"),
    ] {
        let workloads = resource("apps", plural);
        let (items, _) = store.list(workloads, None);
        for workload in items
            .iter()
            .filter(|w| w.pointer("/spec/template").is_some())
        {
            changes += step(store, workload, kind, &all_pods, &mut load, now)?;
            changes += count(store, workloads, workload, kind)?;
        }
    }
    changes += crate::kubevirt::reconcile(store, &schedulable, &nodes, &mut load, now)?;
    Ok(changes)
}

/// One step of one workload: create, delete or replace one pod.
fn step(
    store: &Store,
    workload: &Value,
    kind: &str,
    all_pods: &[Value],
    load: &mut BTreeMap<String, usize>,
    now: SystemTime,
) -> Result<usize, StoreError> {
    let pods_resource = resource("", "pods");
    let namespace = text(workload, "/metadata/namespace");
    let name = text(workload, "/metadata/name");
    let owner = format!("{kind}.{name}");
    let desired = workload
        .pointer("/spec/replicas")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize;
    let hash = template_hash(&workload["spec"]["template"]);
    let hash_label = if kind == "Deployment" {
        ("pod-template-hash", hash.clone())
    } else {
        ("controller-revision-hash", format!("{name}-{hash}"))
    };
    let mut mine: Vec<&Value> = all_pods
        .iter()
        .filter(|p| {
            text(p, "/metadata/namespace") == namespace
                && p.pointer(&format!("/metadata/labels/{}", OWNER.replace('/', "~1")))
                    .and_then(Value::as_str)
                    == Some(owner.as_str())
                && p.pointer("/metadata/deletionTimestamp").is_none()
        })
        .collect();
    mine.sort_by_key(|p| text(p, "/metadata/name"));
    let (new, old): (Vec<&Value>, Vec<&Value>) = mine.iter().partition(|p| {
        p.pointer(&format!("/metadata/labels/{}", hash_label.0))
            .and_then(Value::as_str)
            == Some(hash_label.1.as_str())
    });
    let delete = |pod: &Value| -> Result<usize, StoreError> {
        match store.delete(pods_resource, &namespace, &text(pod, "/metadata/name")) {
            Ok(_) => Ok(1),
            Err(e) if e.code == 404 => Ok(0),
            Err(e) => Err(e),
        }
    };
    if new.len() > desired {
        return delete(new[new.len() - 1]);
    }
    if new.len() < desired && !new.iter().any(|p| pending(p)) {
        let pod_name = if kind == "Deployment" {
            // The suffix counts up, so names stay unique through rollouts.
            let taken: Vec<String> = mine.iter().map(|p| text(p, "/metadata/name")).collect();
            (0..)
                .map(|i| format!("{name}-{hash}-{i:02}"))
                .find(|n| !taken.contains(n))
                .unwrap_or_default()
        } else {
            // A StatefulSet's pods are numbered; an old revision's pod of
            // the same ordinal goes first. A released pod's ordinal is
            // filled again before a new one is added.
            let taken: Vec<String> = new.iter().map(|p| text(p, "/metadata/name")).collect();
            let pod_name = (0..)
                .map(|i| format!("{name}-{i}"))
                .find(|n| !taken.contains(n))
                .unwrap_or_default();
            if let Some(old_pod) = old.iter().find(|p| text(p, "/metadata/name") == pod_name) {
                return delete(old_pod);
            }
            pod_name
        };
        let node = load
            .iter()
            .min_by_key(|(_, count)| **count)
            .map(|(n, _)| n.clone());
        if let Some(node) = &node {
            *load.entry(node.clone()).or_default() += 1;
        }
        if kind == "StatefulSet" {
            claim(store, workload, &pod_name)?;
        }
        let pod = new_pod(workload, kind, pod_name, &hash, node.as_ref(), now);
        store.create(pods_resource, &namespace, pod)?;
        return Ok(1);
    }
    if let Some(old_pod) = old.last()
        && new.iter().all(|p| ready(p))
    {
        return delete(old_pod);
    }
    Ok(0)
}

/// Write the workload's status from its pods, when it changed.
fn count(
    store: &Store,
    workloads: &'static Resource,
    workload: &Value,
    kind: &str,
) -> Result<usize, StoreError> {
    let namespace = text(workload, "/metadata/namespace");
    let name = text(workload, "/metadata/name");
    let owner = format!("{kind}.{name}");
    let (pods, _) = store.list(resource("", "pods"), Some(&namespace));
    let mine: Vec<&Value> = pods
        .iter()
        .filter(|p| {
            p.pointer(&format!("/metadata/labels/{}", OWNER.replace('/', "~1")))
                .and_then(Value::as_str)
                == Some(owner.as_str())
        })
        .collect();
    let hash = template_hash(&workload["spec"]["template"]);
    let updated = mine
        .iter()
        .filter(|p| {
            let label = if kind == "Deployment" {
                "pod-template-hash"
            } else {
                "controller-revision-hash"
            };
            let value = p
                .pointer(&format!("/metadata/labels/{label}"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            value.ends_with(&hash)
        })
        .count();
    let ready_count = mine.iter().filter(|p| ready(p)).count();
    let status = json!({
        "replicas": mine.len(), "readyReplicas": ready_count, "availableReplicas": ready_count,
        "updatedReplicas": updated, "currentReplicas": mine.len(),
        "observedGeneration": workload.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
    });
    let before = &workload["status"];
    let same = [
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "updatedReplicas",
    ]
    .iter()
    .all(|k| {
        before.get(*k).and_then(Value::as_u64).unwrap_or(0) == status[*k].as_u64().unwrap_or(0)
    });
    if same && before.get("replicas").is_some() {
        return Ok(0);
    }
    store.patch(workloads, &namespace, &name, &json!({ "status": status }))?;
    Ok(1)
}

/// Reconcile every `every` until the task is aborted.
pub async fn run(store: Arc<Store>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(error) = reconcile(&store, SystemTime::now()) {
            tracing::warn!(%error, "simulator controller: a change did not apply");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    const CLUSTER: &str = "
objects:
  - {apiVersion: v1, kind: Namespace, metadata: {name: shop}}
  - apiVersion: v1
    kind: Node
    metadata: {name: n1}
    status: {conditions: [{type: Ready, status: 'True'}]}
  - apiVersion: v1
    kind: Node
    metadata: {name: n2}
    status: {conditions: [{type: Ready, status: 'True'}]}
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: shop, labels: {app.kubernetes.io/instance: web}}
    spec:
      replicas: 3
      template:
        metadata: {labels: {app.kubernetes.io/instance: web}}
        spec: {containers: [{name: web, image: 'web:1'}]}
steps:
  - {at: 1s, node-lost: n2}
  - {at: 2s, node-back: n2}
  - {at: 3s, update: {workload: shop/web, image: 'web:2'}}
  - {at: 4s, crash-loop: shop/web}
  - {at: 5s, recover: shop/web}
  - {at: 6s, scale: {workload: shop/web, replicas: 0}}
";

    fn pods(store: &Store) -> Vec<Value> {
        store.list(resource("", "pods"), Some("shop")).0
    }

    fn web(store: &Store) -> Value {
        store
            .get(resource("apps", "deployments"), "shop", "web")
            .unwrap()
    }

    /// Reconcile with the clock moving on by the start delay each time,
    /// until nothing changes; returns how many rounds it took.
    fn settle(store: &Store, clock: &mut SystemTime) -> usize {
        for round in 1..100 {
            *clock += START_DELAY;
            if reconcile(store, *clock).unwrap() == 0 {
                return round;
            }
        }
        panic!("the controller never settled");
    }

    #[test]
    fn pods_follow_the_workload_and_its_nodes() {
        let scenario = Scenario::parse(CLUSTER).unwrap();
        let store = Store::new(10_000);
        scenario.reset(&store).unwrap();
        let mut clock = SystemTime::now();

        // Scale-up from nothing, one pod at a time, spread over the nodes.
        reconcile(&store, clock).unwrap();
        assert_eq!(pods(&store).len(), 1);
        assert_eq!(pods(&store)[0]["status"]["phase"], "Pending");
        assert!(settle(&store, &mut clock) > 3, "one pod at a time");
        let running = pods(&store);
        assert_eq!(running.len(), 3);
        assert!(running.iter().all(ready));
        let on_n1 = running
            .iter()
            .filter(|p| p["spec"]["nodeName"] == "n1")
            .count();
        assert!((1..=2).contains(&on_n1), "spread over both nodes");
        assert_eq!(web(&store)["status"]["readyReplicas"], 3);

        // A lost node takes its pods' readiness; back, they are ready again.
        scenario.play(&store, &scenario.steps[0]).unwrap();
        settle(&store, &mut clock);
        let on_n2: Vec<Value> = pods(&store)
            .into_iter()
            .filter(|p| p["spec"]["nodeName"] == "n2")
            .collect();
        assert!(!on_n2.is_empty() && on_n2.iter().all(|p| !ready(p)));
        assert_eq!(
            web(&store)["status"]["readyReplicas"],
            3 - on_n2.len() as u64
        );
        scenario.play(&store, &scenario.steps[1]).unwrap();
        settle(&store, &mut clock);
        assert_eq!(web(&store)["status"]["readyReplicas"], 3);

        // A new image rolls out: every pod replaced, one at a time.
        scenario.play(&store, &scenario.steps[2]).unwrap();
        let old: Vec<String> = pods(&store)
            .iter()
            .map(|p| text(p, "/metadata/name"))
            .collect();
        settle(&store, &mut clock);
        let rolled = pods(&store);
        assert_eq!(rolled.len(), 3);
        assert!(
            rolled
                .iter()
                .all(|p| p["spec"]["containers"][0]["image"] == "web:2")
        );
        assert!(
            rolled
                .iter()
                .all(|p| !old.contains(&text(p, "/metadata/name")))
        );
        assert_eq!(web(&store)["status"]["updatedReplicas"], 3);

        // A crash loop stays until it recovers.
        scenario.play(&store, &scenario.steps[3]).unwrap();
        settle(&store, &mut clock);
        assert_eq!(web(&store)["status"]["readyReplicas"], 2);
        let looping = &pods(&store)[0];
        assert_eq!(
            looping["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
            "CrashLoopBackOff"
        );
        scenario.play(&store, &scenario.steps[4]).unwrap();
        settle(&store, &mut clock);
        assert_eq!(web(&store)["status"]["readyReplicas"], 3);

        // Scaled to zero, the pods go.
        scenario.play(&store, &scenario.steps[5]).unwrap();
        settle(&store, &mut clock);
        assert!(pods(&store).is_empty());
        assert_eq!(web(&store)["status"]["replicas"], 0);

        // Deleted, its pods go with it.
        let again =
            Scenario::parse("steps: [{at: 0s, scale: {workload: shop/web, replicas: 2}}]").unwrap();
        scenario.play(&store, &again.steps[0]).unwrap();
        settle(&store, &mut clock);
        assert_eq!(pods(&store).len(), 2);
        store
            .delete(resource("apps", "deployments"), "shop", "web")
            .unwrap();
        settle(&store, &mut clock);
        assert!(pods(&store).is_empty());
    }

    #[test]
    fn workloads_without_a_template_are_left_alone() {
        let store = Store::new(100);
        let scenario = Scenario::parse(
            "objects:\n  - {apiVersion: v1, kind: Namespace, metadata: {name: shop}}\n  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: shop}, spec: {replicas: 2}}\n",
        )
        .unwrap();
        scenario.reset(&store).unwrap();
        assert_eq!(reconcile(&store, SystemTime::now()).unwrap(), 0);
        assert!(pods(&store).is_empty());
    }
}
