//! The restart-budget rule in Rust, JavaScript and Python side by side
//! (`examples/restart-budget`, `-js`, `-py`, built by `cargo xtask
//! plugins` into `target/example-plugins`), each measured by `verdict
//! bench` over the same objects in one run: 60 applications of three pods
//! each, every fifth with a container over its restart budget, every
//! seventh namespace in maintenance. Prints each report, then a Markdown
//! table for BENCHMARKS.md.
//!
//! `--quick`: fewer calls (the figures are then rough).

use std::path::PathBuf;

use serde_json::{Value, json};
use verdict::offline::bench::{BenchArgs, Figures, run};
use verdict::offline::eval::InputArgs;
use verdict::plugins::Limits;

const POLICIES: [(&str, &str); 3] = [
    ("Rust", "restart-budget"),
    ("JavaScript", "restart-budget-js"),
    ("Python", "restart-budget-py"),
];

/// A `kubectl get -o json` list: namespaces, Deployments and their pods.
fn objects(apps: usize) -> Value {
    let mut items = Vec::new();
    let namespaces = apps.div_ceil(6);
    for n in 0..namespaces {
        let mut labels = json!({});
        if n % 7 == 3 {
            labels["example.dev/maintenance"] = json!("true");
        }
        items.push(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("team-{n}"), "labels": labels}}));
    }
    for a in 0..apps {
        let namespace = format!("team-{}", a / 6);
        let name = format!("app-{a}");
        let selector = json!({"app.kubernetes.io/instance": name});
        items.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": selector},
            "spec": {"replicas": 3},
            "status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3, "updatedReplicas": 3}}));
        for p in 0..3 {
            let restarts = if a % 5 == 0 && p == 0 { 7 } else { 0 };
            let mut status = json!({"name": "main", "image": "app:1", "imageID": "", "ready": true,
                "restartCount": restarts, "state": {"running": {"startedAt": "@now-20m"}}});
            if restarts > 0 {
                status["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "@now-20m"}});
            }
            items.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-{p}"), "namespace": namespace,
                    "labels": {"app.kubernetes.io/instance": name, "pod-template-hash": "abc"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-abc"), "uid": format!("u{a}"), "controller": true}]},
                "spec": {"nodeName": format!("node-{}", p), "containers": [{"name": "main", "image": "app:1"}]},
                "status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "@now-20m"}],
                    "containerStatuses": [status]}}));
        }
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let plugins = root.join("target/example-plugins");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("objects.json");
    std::fs::write(&file, objects(60).to_string()).expect("writing the objects");

    let mut rows: Vec<(&str, Figures)> = Vec::new();
    for (language, policy) in POLICIES {
        let args = BenchArgs {
            input: InputArgs {
                objects: vec![file.clone()],
                tasks: None,
                now: Some("2026-06-01T12:00:00Z".into()),
                group_by: "label=app.kubernetes.io/instance"
                    .parse()
                    .expect("a grouping"),
                resources: Vec::new(),
            },
            plugins: plugins.clone(),
            policy: policy.into(),
            settings: None,
            iterations: if quick { 20 } else { 200 },
            batches: if quick { 5 } else { 50 },
            json: false,
            limits: Limits {
                memory_bytes: 256 << 20,
                ..Limits::default()
            },
        };
        match run(&args) {
            Ok((figures, report)) => {
                println!("{report}");
                rows.push((language, figures));
            }
            Err(error) => {
                eprintln!("{policy}: {error} (build it with `cargo xtask plugins`)");
                std::process::exit(1);
            }
        }
    }
    println!(
        "| restart-budget in | component | load, cold | load, cached | instance memory | per app p50 / p99 | one app per call | batch of 60, per app | batched |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (language, f) in &rows {
        println!(
            "| {language} | {:.0} KiB | {:.0} ms | {:.1} ms | {:.1} MiB | {:.1} / {:.1} µs | {:.0} apps/s | {:.1} µs | {:.0} apps/s |",
            f.component_bytes as f64 / 1024.0,
            f.load_cold_ms,
            f.load_cached_ms,
            f.instance_memory_bytes as f64 / (1 << 20) as f64,
            f.per_app.p50_us,
            f.per_app.p99_us,
            f.per_app_throughput,
            f.batch.p50_us / f.apps as f64,
            f.batch_throughput,
        );
    }
}
