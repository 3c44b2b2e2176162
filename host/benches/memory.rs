//! Where the memory of a large cluster goes: pods as the API server sends
//! them (KWOK's Running pods of the scale benchmark, `benches/scale.rs`)
//! reduced and held as the host holds them, every byte counted by a
//! counting allocator. Reports, per pod: the reduced records alone, the
//! snapshot that keys and indexes them, the inputs a derivation of every
//! app builds, and the verdicts of the default rules.
//!
//! ```sh
//! cargo bench -p verdict --bench memory              # 150 000 pods
//! cargo bench -p verdict --bench memory -- --pods 10000
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use verdict::observe::record::PodRecord;
use verdict::observe::{Snapshot, reduce};
use verdict::wit::types;

/// The system allocator, counting the bytes it holds.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: as the caller promised for `layout`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as the caller promised for `ptr` and `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(new_size, Ordering::Relaxed);
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as the caller promised for `ptr`, `layout` and `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> usize {
    HELD.load(Ordering::Relaxed)
}

const HASH: &str = "5d8f7c9b4";
const AT: &str = "2026-12-01T10:00:00Z";

/// A pod of the scale benchmark as the API server returns it once KWOK
/// has played it Running.
fn pod(ns: &str, app: &str, index: usize, node: &str) -> Pod {
    let conditions: Vec<Value> = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .iter()
    .map(|kind| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": AT}))
    .collect();
    let value: Value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-{HASH}-{index:02}"), "namespace": ns,
            "uid": "0b7f6c2e-9a51-4c8e-b1d3-5e2f8a9c0d14", "resourceVersion": "123456",
            "creationTimestamp": AT,
            "labels": {"app.kubernetes.io/instance": app, "pod-template-hash": HASH},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{app}-{HASH}"), "uid": "6a1f0c52-3f1e-4d0e-9d4b-0c9a4e5b7f21",
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": node, "serviceAccountName": "default", "restartPolicy": "Always",
            "containers": [{
                "name": "main", "image": format!("registry.example/{app}:1"),
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "production"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"cpu": "500m", "memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
            }],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1"}], "startTime": AT, "qosClass": "Burstable",
            "conditions": conditions,
            "containerStatuses": [{"name": "main", "image": format!("registry.example/{app}:1"),
                "imageID": "", "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": AT}}}],
        },
    });
    serde_json::from_value(value).unwrap()
}

fn deployment(ns: &str, app: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns, "labels": {"app.kubernetes.io/instance": app}},
        "spec": {"replicas": 10, "selector": {"matchLabels": {"app.kubernetes.io/instance": app}},
            "template": {"spec": {"containers": []}}},
        "status": {"observedGeneration": 1, "replicas": 10, "readyReplicas": 10,
            "availableReplicas": 10, "updatedReplicas": 10},
    }))
    .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pods: usize = args
        .iter()
        .position(|a| a == "--pods")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(150_000);
    let (namespaces, per_app, nodes) = (100, 10, 500);
    let apps_per_namespace = (pods / per_app / namespaces).max(1);
    let apps: Vec<(String, String)> = (0..namespaces)
        .flat_map(|n| {
            (0..apps_per_namespace).map(move |a| (format!("ns-{n:03}"), format!("app-{a:03}")))
        })
        .collect();
    let pods = apps.len() * per_app;
    let per_pod = |bytes: usize| bytes as f64 / pods as f64;

    // The pods reduced, one at a time, as the watch takes them in: first
    // to the WIT record, then to the compact one the snapshot holds.
    let before = held();
    let mut reduced = Vec::with_capacity(pods);
    for (a, (ns, app)) in apps.iter().enumerate() {
        for p in 0..per_app {
            let node = format!("n{}", (a * per_app + p) % nodes + 1);
            reduced.push(reduce::pod(&pod(ns, app, p, &node)));
        }
    }
    let reduced_bytes = held() - before;
    let before = held();
    let records: Vec<Arc<PodRecord>> = reduced
        .iter()
        .map(|p| Arc::new(PodRecord::new(p.clone())))
        .collect();
    let records_bytes = held() - before;
    drop(reduced);

    // The same records in the snapshot, keyed and indexed by app and node.
    let before = held();
    let mut snapshot = Snapshot::default();
    for (ns, app) in &apps {
        snapshot.put_workload(reduce::deployment(&deployment(ns, app)));
    }
    let workloads_bytes = held() - before;
    let before_pods = held();
    for record in records {
        snapshot.put_record(record);
    }
    // What the records' own Vec held is freed as they move: the snapshot's
    // growth is what it adds to them.
    let snapshot_bytes = held() + records_bytes - before_pods;

    // A derivation's inputs of every app at once, and the verdicts.
    let before = held();
    let inputs = snapshot.apps(&[], &[], 0);
    let inputs_bytes = held() - before;
    let settings = verdict::native::Settings::parse("{}");
    let before = held();
    let verdicts: Vec<types::AppVerdict> = inputs
        .iter()
        .map(|input| verdict::native::evaluate(&settings, 0, input))
        .collect();
    let verdicts_bytes = held() - before;
    drop(inputs);

    println!(
        "verdict memory benchmark: {pods} pods in {} apps on {nodes} nodes (bytes counted by the allocator)",
        apps.len()
    );
    println!();
    println!("| held | bytes a pod |");
    println!("|---|---|");
    println!(
        "| a pod as the WIT record (`types::Pod`: {} bytes inline), what a typed call copies | {:.0} |",
        size_of::<types::Pod>(),
        per_pod(reduced_bytes)
    );
    println!(
        "| a pod record as held (`PodRecord`: {} bytes inline, in an `Arc`; what pods share counted once) | {:.0} |",
        size_of::<PodRecord>(),
        per_pod(records_bytes)
    );
    println!(
        "| the snapshot: records, keys, the app and node indexes | {:.0} (the records' {:.0} and {:.0} more) |",
        per_pod(snapshot_bytes),
        per_pod(records_bytes),
        per_pod(snapshot_bytes - records_bytes)
    );
    println!(
        "| workloads (one a ten pods) | {:.0} |",
        per_pod(workloads_bytes)
    );
    println!(
        "| every app's input at once (a full derivation by typed calls) | {:.0} |",
        per_pod(inputs_bytes)
    );
    println!(
        "| every app's verdict (the default rules) | {:.0} |",
        per_pod(verdicts_bytes)
    );
    println!();
    println!(
        "inline sizes: container {} bytes, condition {}, key-value {}, app verdict {}",
        size_of::<types::Container>(),
        size_of::<types::Condition>(),
        size_of::<types::KeyValue>(),
        size_of::<types::AppVerdict>()
    );
    drop(verdicts);
    drop(snapshot);
}
