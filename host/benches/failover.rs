//! Benchmark of failover over the largest clusters: 5 000 nodes carrying
//! 150 000 pods (apps of 10 pods, spread over the nodes), 1 % of the nodes
//! out of contact for ten minutes (offline, with actions proposed for
//! their pods), served by the simulator and followed by the `verdict`
//! binary over HTTP. Every node is judged every second; the benchmark
//! reads how long each judgement took from the host's own histogram
//! (`verdict_failover_evaluation_seconds`: the policy's input, its call,
//! the brakes and the saved state) and the policy call's share of it
//! (`verdict_policy_call_seconds`), over a number of rounds.
//!
//! ```sh
//! cargo bench -p verdict --bench failover                 # 5 000 nodes, 150 000 pods
//! cargo bench -p verdict --bench failover -- --quick      # 500 nodes, 5 000 pods
//! cargo bench -p verdict --bench failover -- --nodes 2000 --pods 20000 --rounds 60
//! cargo bench -p verdict --bench failover -- --scrape-every-ms 2000  # fewer scrapes
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_sim::{Options, Simulator};

// The tests' helpers: starting the binary.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

// Histograms read from the host's `/metrics`.
#[path = "common/histogram.rs"]
mod histogram;
use histogram::{histogram, mean_ms, p99_bound};

/// When the lost nodes were last heard of: long enough ago to be offline.
const LOST_AT: &str = "2026-01-01T00:00:00Z";

/// Now, as the API server writes times.
fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn node(name: &str, lost: bool) -> Value {
    let (status, heartbeat) = if lost {
        ("Unknown", LOST_AT.to_string())
    } else {
        ("True", now())
    };
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone-{}", name.len() % 3),
            "node.kubernetes.io/instance-type": "m6i.2xlarge"}},
        "spec": if lost {
            json!({"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": LOST_AT}]})
        } else {
            json!({})
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "7800m", "memory": "30Gi", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat, "lastTransitionTime": LOST_AT},
                {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": heartbeat, "lastTransitionTime": LOST_AT},
                {"type": "Ready", "status": status, "lastHeartbeatTime": heartbeat, "lastTransitionTime": LOST_AT}]}
    })
}

fn deployment(ns: &str, app: &str, replicas: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns, "labels": {"app.kubernetes.io/instance": app}},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "updatedReplicas": replicas}
    })
}

fn pod(ns: &str, app: &str, name: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"app.kubernetes.io/instance": app, "pod-template-hash": "h"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-h"), "uid": "u", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "app:1"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": LOST_AT}],
            "containerStatuses": [{"name": "main", "image": "app:1", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": LOST_AT}}}]}
    })
}

fn flag(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let nodes = flag("--nodes").unwrap_or(if quick { 500 } else { 5_000 });
    let pods = flag("--pods").unwrap_or(if quick { 5_000 } else { 150_000 });
    let rounds = flag("--rounds").unwrap_or(if quick { 5 } else { 30 });
    let lost = nodes.div_ceil(100);
    let (namespaces, per_app) = (100, 10);
    let apps = pods / per_app;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let simulator = runtime
        .block_on(Simulator::start(Options {
            log_capacity: 1_000_000,
            ..Options::default()
        }))
        .unwrap();
    let loading = Instant::now();
    let node_name = |i: usize| format!("node-{i:05}");
    for i in 0..nodes {
        // The lost nodes are spread over the cluster.
        let lost = i % (nodes / lost) == 0;
        simulator.apply(node(&node_name(i), lost)).unwrap();
    }
    for n in 0..namespaces {
        simulator
            .apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{n:03}")}}))
            .unwrap();
    }
    for a in 0..apps {
        let (ns, app) = (format!("ns-{:03}", a % namespaces), format!("app-{a:06}"));
        simulator.apply(deployment(&ns, &app, per_app)).unwrap();
        for p in 0..per_app {
            let index = a * per_app + p;
            let name = format!("{app}-h-{p:02}");
            simulator
                .apply(pod(&ns, &app, &name, &node_name(index % nodes)))
                .unwrap();
        }
    }
    println!(
        "verdict failover benchmark: {nodes} nodes ({lost} out of contact), {pods} pods in {apps} apps; simulator loaded in {:.1} s",
        loading.elapsed().as_secs_f64()
    );

    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let data = tempfile::tempdir().unwrap();
    let (child, base) = support::spawn_verdict(
        &workspace.join("target/plugins"),
        data.path(),
        &["--cluster-url", &simulator.url()],
        "error",
    );
    let host = support::KillOnDrop(child);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let get = |path: &str| client.get(format!("{base}{path}")).send().unwrap();

    // Every node judged, the lost ones offline, every app derived.
    let judged = support::wait_until(Duration::from_secs(600), || {
        std::thread::sleep(Duration::from_millis(250));
        let failover: Value = get("/v1/failover").json().unwrap();
        let ready: Value = get("/readyz").json().unwrap();
        failover["brakes"]["nodes"].as_u64() == Some(nodes as u64)
            && failover["brakes"]["unhealthy"].as_u64() == Some(lost as u64)
            && ready["apps"].as_u64() == Some(apps as u64)
    });
    assert!(
        judged.is_some(),
        "not every node judged within 10 min: {}",
        get("/v1/failover")
            .text()
            .unwrap()
            .chars()
            .take(2000)
            .collect::<String>()
    );

    // Read a few times a second (`--scrape-every-ms`, 250 by default): a
    // scrape is work for the host too, on the same cores as the
    // judgements.
    let scrape_every = flag("--scrape-every-ms").unwrap_or(250) as u64;
    let scrape = || {
        std::thread::sleep(Duration::from_millis(scrape_every));
        get("/metrics").text().unwrap()
    };
    let evaluation = |text: &str| histogram(text, "verdict_failover_evaluation_seconds", "");
    let call = |text: &str| {
        histogram(
            text,
            "verdict_policy_call_seconds",
            "policy=\"default-failover\"",
        )
    };
    // The rounds right after start overlap the first derivations; they
    // are not counted.
    let first = scrape();
    let warm = evaluation(&first).count;
    let settled = support::wait_until(Duration::from_secs(120), || {
        evaluation(&scrape()).count >= warm + 3.0
    });
    assert!(settled.is_some(), "failover stopped judging");
    let before_text = scrape();
    let (before, before_call) = (evaluation(&before_text), call(&before_text));
    let (cpu_before, measured) = (support::cpu_time(host.0.id()).as_secs_f64(), Instant::now());
    let done = support::wait_until(Duration::from_secs(rounds as u64 * 10 + 60), || {
        evaluation(&scrape()).count >= before.count + rounds as f64
    });
    assert!(done.is_some(), "fewer than {rounds} rounds");
    let after_text = scrape();
    let (after, after_call) = (evaluation(&after_text), call(&after_text));
    let cpu = (support::cpu_time(host.0.id()).as_secs_f64() - cpu_before)
        / measured.elapsed().as_secs_f64();
    let n = after.count - before.count;
    let mean = mean_ms(&before, &after);
    let call_mean = mean_ms(&before_call, &after_call);
    let (rss, _) = support::memory(host.0.id());

    println!();
    println!("| measure | figure | target |");
    println!("|---|---|---|");
    println!(
        "| one judgement of all {nodes} nodes, mean of {n:.0} rounds | {mean:.1} ms | ≤ 50 ms every second |"
    );
    println!(
        "| the same, 99th percentile | {} | — |",
        p99_bound(&before, &after)
    );
    println!("| the failover policy's call in it, mean | {call_mean:.1} ms | — |");
    println!(
        "| the host's CPU while it follows the cluster | {:.1} % of a core | — |",
        cpu * 100.0
    );
    println!("| the host's resident memory | {rss:.0} MiB | — |");
    drop(host);
}
