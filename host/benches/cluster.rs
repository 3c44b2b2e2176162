//! Benchmark of following a large cluster: 100 000 pods in 10 000 apps (10
//! pods and a Deployment each, 100 apps in each of 100 namespaces) served by
//! the simulator, followed by the `verdict` binary over HTTP with the real
//! `kube` client. Reports the time from start to every verdict derived, the
//! host's resident memory, and the delay from one pod change to its new
//! verdict on HTTP.
//!
//! Run with `cargo xtask bench` (release profile); `--quick` for 1 000 pods;
//! `--no-history` for a host that keeps no history, `--no-kube-events` for
//! one that writes no Kubernetes Events (`cargo bench -p verdict --bench
//! cluster -- --no-history --no-kube-events`), to set their figures beside
//! the default's.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict_sim::{Options, Simulator, resources};

// The tests' helpers: starting the binary.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

fn deployment(ns: &str, app: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns, "labels": {"app.kubernetes.io/instance": app}},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "updatedReplicas": replicas}
    })
}

fn pod(ns: &str, app: &str, name: &str, waiting: Option<&str>) -> Value {
    let state = match waiting {
        Some(reason) => json!({"waiting": {"reason": reason}}),
        None => json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns,
            "labels": {"app.kubernetes.io/instance": app, "pod-template-hash": "h"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-h"), "uid": "u", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "app:1",
            "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": if waiting.is_none() { "True" } else { "False" }, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{"name": "main", "image": "app:1", "imageID": "", "ready": waiting.is_none(), "restartCount": 0, "state": state}]}
    })
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let history = !std::env::args().any(|a| a == "--no-history");
    let kube_events = !std::env::args().any(|a| a == "--no-kube-events");
    let (namespaces, apps_per_namespace, pods_per_app) =
        if quick { (10, 10, 10) } else { (100, 100, 10) };
    let apps = namespaces * apps_per_namespace;
    let changes = if quick { 20 } else { 100 };

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let simulator = runtime
        .block_on(Simulator::start(Options {
            log_capacity: 1_000_000,
            ..Options::default()
        }))
        .unwrap();
    let store = simulator.store();
    let loading = Instant::now();
    for n in 0..namespaces {
        let ns = format!("ns-{n:03}");
        simulator
            .apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap();
        for a in 0..apps_per_namespace {
            let app = format!("app-{a:03}");
            simulator
                .apply(deployment(&ns, &app, pods_per_app))
                .unwrap();
            for p in 0..pods_per_app {
                simulator
                    .apply(pod(&ns, &app, &format!("{app}-h-{p:02}"), None))
                    .unwrap();
            }
        }
    }
    let pods = apps * pods_per_app as usize;
    println!(
        "verdict cluster benchmark: {pods} pods in {apps} apps ({} mode, history {}, Kubernetes Events {}); simulator loaded in {:.1} s",
        if quick { "quick" } else { "full" },
        if history { "on" } else { "off" },
        if kube_events { "on" } else { "off" },
        loading.elapsed().as_secs_f64()
    );
    println!();

    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let data = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let url = simulator.url();
    let mut flags = vec!["--cluster-url", &url];
    if !history {
        flags.push("--no-history");
    }
    if !kube_events {
        flags.push("--no-kube-events");
    }
    let (child, base) = support::spawn_verdict(
        &workspace.join("target/plugins"),
        data.path(),
        &flags,
        "error",
    );
    let host = support::KillOnDrop(child);
    let client = reqwest::blocking::Client::new();
    let get = |path: &str| -> Value {
        client
            .get(format!("{base}{path}"))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };

    // Every verdict derived from every pod: all watches synced, a verdict
    // for every app, and the last app's verdict carrying all its pods (a
    // derivation covers all apps at once after a full list).
    let last = format!(
        "/v1/apps/ns-{:03}/app-{:03}",
        namespaces - 1,
        apps_per_namespace - 1
    );
    loop {
        let ready = get("/readyz");
        let complete = ready["ready"] == true
            && ready["apps"].as_u64() == Some(apps as u64)
            && get(&last)["groups"].as_array().map(Vec::len) == Some(pods_per_app as usize);
        if complete {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "not all verdicts after 10 min: {ready}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let derived = started.elapsed();
    let (rss, peak) = support::memory(host.0.id());

    // One pod starts crash-looping; time until its app's verdict says so.
    let pods_resource = resources::find("", "v1", "pods").unwrap();
    let mut delays = Vec::new();
    // The first few changes warm the policy's instance pool and overlap the
    // last full derivations after start; they are not counted.
    let warm_up = 5;
    for i in 0..changes + warm_up {
        let (ns, app) = (
            format!("ns-{:03}", i % namespaces),
            // A different app each time, so that no change repeats.
            format!("app-{:03}", (i / namespaces) % apps_per_namespace),
        );
        let name = format!("{app}-h-00");
        let changed = Instant::now();
        store
            .replace(
                pods_resource,
                &ns,
                &name,
                pod(&ns, &app, &name, Some("CrashLoopBackOff")),
            )
            .unwrap();
        loop {
            let verdict = get(&format!("/v1/apps/{ns}/{app}"));
            let seen = verdict["groups"].as_array().is_some_and(|g| {
                g.iter()
                    .any(|p| p["name"] == name.as_str() && p["reason"] == "CrashLoopBackOff")
            });
            if seen {
                break;
            }
            assert!(
                changed.elapsed() < Duration::from_secs(60),
                "change never seen: {verdict} / {}",
                get("/readyz")
            );
        }
        if i >= warm_up {
            delays.push(changed.elapsed());
        }
    }
    delays.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p99 = delays[(delays.len() * 99 / 100).min(delays.len() - 1)];

    println!("| measure | figure | budget |");
    println!("|---|---|---|");
    println!(
        "| start → all {apps} verdicts derived | {:.2} s | — |",
        derived.as_secs_f64()
    );
    println!(
        "| host resident memory after derivation | {rss:.0} MiB (peak {peak:.0} MiB) | ≤ 400 MB for 100 000 pods |"
    );
    println!(
        "| pod change → new verdict on HTTP, median of {changes} | {:.1} ms | — |",
        ms(delays[delays.len() / 2])
    );
    println!(
        "| pod change → new verdict on HTTP, p99 | {:.1} ms | ≤ 5 ms |",
        ms(p99)
    );
    drop(host);
}
