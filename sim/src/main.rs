//! `verdict-sim`: the Kubernetes API simulator as a program, for trying
//! `kubectl` or a `kube` client against it: it starts as a new cluster does
//! (the namespaces Kubernetes makes, three ready nodes — `--nodes N` — and
//! verdict's CRDs), loaded with objects from files.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

fn usage() -> ExitCode {
    eprintln!(
        "usage: verdict-sim [--listen ADDR] [--nodes N] [--scenario FILE.yaml] [--no-controller] [--no-kubevirt] [FILE.json ...]"
    );
    ExitCode::from(2)
}

/// verdict's own CustomResourceDefinitions, as the chart installs them.
const VERDICT_CRDS: [&str; 5] = [
    include_str!("../../deploy/chart/verdict/crds/task-crd.yaml"),
    include_str!("../../deploy/chart/verdict/crds/policy-crd.yaml"),
    include_str!("../../deploy/chart/verdict/crds/server-crd.yaml"),
    include_str!("../../deploy/chart/verdict/crds/vmreplicaset-crd.yaml"),
    include_str!("../../deploy/chart/verdict/crds/vmdeployment-crd.yaml"),
];

/// What a new cluster has before anyone writes to it: the namespaces
/// Kubernetes makes, `nodes` ready nodes, and verdict's CRDs.
fn cluster(nodes: usize) -> Vec<Value> {
    let mut objects: Vec<Value> = ["default", "kube-system", "kube-public", "kube-node-lease"]
        .into_iter()
        .map(|name| serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
        .collect();
    for n in 1..=nodes {
        objects.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{n}"), "labels": {
                "kubernetes.io/hostname": format!("node-{n}"), "kubernetes.io/os": "linux"}},
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "addresses": [{"type": "InternalIP", "address": format!("10.0.0.{n}")}],
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            },
        }));
    }
    for text in VERDICT_CRDS {
        let crd: Value = serde_yaml_ng::from_str(text).expect("the chart's CRDs are YAML");
        objects.push(crd);
    }
    objects
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut options = verdict_sim::Options {
        controller: Some(verdict_sim::CONTROLLER_TICK),
        kubevirt: true,
        ..verdict_sim::Options::default()
    };
    let mut nodes = 3;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut scenario: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => match args.next().and_then(|a| a.parse().ok()) {
                Some(addr) => options.listen = addr,
                None => return usage(),
            },
            "--nodes" => match args.next().and_then(|a| a.parse().ok()) {
                Some(count) => nodes = count,
                None => return usage(),
            },
            "--scenario" => match args.next() {
                Some(path) => scenario = Some(PathBuf::from(path)),
                None => return usage(),
            },
            "--no-controller" => options.controller = None,
            "--no-kubevirt" => options.kubevirt = false,
            "-h" | "--help" => return usage(),
            file => files.push(PathBuf::from(file)),
        }
    }
    let simulator = match verdict_sim::Simulator::start(options).await {
        Ok(simulator) => simulator,
        Err(error) => {
            eprintln!("verdict-sim: {error}");
            return ExitCode::FAILURE;
        }
    };
    for object in cluster(nodes) {
        if let Err(error) = simulator.apply(object) {
            eprintln!("verdict-sim: {error}");
            return ExitCode::FAILURE;
        }
    }
    for file in files {
        let loaded = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()));
        let objects = match loaded {
            Ok(Value::Array(items)) => items,
            Ok(object) => match object.get("items").and_then(Value::as_array) {
                Some(items) => items.clone(),
                None => vec![object],
            },
            Err(error) => {
                eprintln!("verdict-sim: {}: {error}", file.display());
                return ExitCode::from(2);
            }
        };
        for object in objects {
            if let Err(error) = simulator.apply(object) {
                eprintln!("verdict-sim: {}: {error}", file.display());
                return ExitCode::from(2);
            }
        }
    }
    if let Some(path) = scenario {
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| verdict_sim::Scenario::parse(&text));
        match parsed {
            Ok(mut scenario) => {
                scenario.bind(&simulator.url());
                tokio::spawn(scenario.run(std::sync::Arc::clone(simulator.store())));
            }
            Err(error) => {
                eprintln!("verdict-sim: {}: {error}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    println!("verdict-sim listening on {}", simulator.url());
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
