//! Handover benchmark: three replicas with leader election; the leader is
//! stopped, with SIGTERM (it frees the Lease on its way out) or SIGKILL
//! (nobody frees it; it expires), `--rounds` times each (20 by default).
//! A handover lasts from the signal until another replica says it leads
//! (`/readyz`'s `leader`, which is true only while it may act). Reported:
//! median and worst of each.
//!
//! Against the real API server with `--kubeconfig FILE` (`cargo xtask bench
//! --handover` passes the local control plane's when `cargo xtask cluster
//! up` runs), else the simulator in-process. The Lease's timings are
//! those printed: a SIGKILL handover follows the lease duration.

use std::path::Path;
use std::time::{Duration, Instant};

// The tests' helpers: starting the binary.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

const TIMINGS: [&str; 6] = [
    "--lease-duration-ms",
    "3000",
    "--lease-renew-deadline-ms",
    "2000",
    "--lease-retry-ms",
    "250",
];

struct Replica {
    child: support::KillOnDrop,
    base: String,
    _data: tempfile::TempDir,
}

fn get(base: &str, path: &str) -> Option<serde_json::Value> {
    reqwest::blocking::Client::new()
        .get(format!("{base}{path}"))
        .timeout(Duration::from_secs(2))
        .send()
        .ok()?
        .json()
        .ok()
}

fn leads(replica: &Replica) -> bool {
    get(&replica.base, "/readyz").is_some_and(|r| r["leader"] == true)
}

fn start(cluster: &[String], namespace: &str, name: &str) -> Replica {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let data = tempfile::tempdir().unwrap();
    let mut flags: Vec<&str> = cluster.iter().map(String::as_str).collect();
    flags.extend([
        "--task-store",
        "kubernetes",
        "--tasks-namespace",
        namespace,
        "--leader-election",
        "--replica-name",
        name,
    ]);
    flags.extend(TIMINGS);
    let (child, base) = support::spawn_verdict(&plugins, data.path(), &flags, "error");
    let replica = Replica {
        child: support::KillOnDrop(child),
        base,
        _data: data,
    };
    let ready = support::wait_until(Duration::from_secs(120), || {
        get(&replica.base, "/readyz").is_some_and(|r| r["ready"] == true)
    });
    assert!(ready.is_some(), "replica {name} never ready");
    replica
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let rounds: usize = flag("--rounds").and_then(|r| r.parse().ok()).unwrap_or(20);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let namespace = format!("bench-handover-{}", std::process::id());
    let mut _simulator = None;
    let (cluster, against): (Vec<String>, String) = match flag("--kubeconfig") {
        Some(kubeconfig) => {
            let kubectl = |args: &[&str]| {
                std::process::Command::new(
                    flag("--kubectl").unwrap_or_else(|| "kubectl".to_string()),
                )
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(args)
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
            };
            let crd = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../deploy/chart/verdict/crds/task-crd.yaml");
            assert!(
                kubectl(&[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "-f",
                    crd.to_str().unwrap()
                ]),
                "the Task CRD could not be installed"
            );
            assert!(
                kubectl(&["create", "namespace", &namespace]),
                "no namespace"
            );
            (
                vec!["--kubeconfig".into(), kubeconfig],
                "the real API server".into(),
            )
        }
        None => {
            let simulator = runtime
                .block_on(verdict_sim::Simulator::start(
                    verdict_sim::Options::default(),
                ))
                .unwrap();
            simulator
                .apply(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}))
                .unwrap();
            let crd = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../deploy/chart/verdict/crds/task-crd.yaml"),
            )
            .unwrap();
            for document in serde_yaml_ng::Deserializer::from_str(&crd) {
                let object: serde_json::Value = serde::Deserialize::deserialize(document).unwrap();
                simulator.apply(object).unwrap();
            }
            let url = simulator.url();
            _simulator = Some(simulator);
            (vec!["--cluster-url".into(), url], "the simulator".into())
        }
    };
    println!(
        "handover: 3 replicas on {against}, lease {} ms, renew deadline {} ms, retry {} ms; {rounds} rounds each",
        TIMINGS[1], TIMINGS[3], TIMINGS[5]
    );

    let mut spawned = 0;
    let mut next_name = || {
        spawned += 1;
        format!("bench-{spawned}")
    };
    let mut replicas: Vec<Replica> = (0..3)
        .map(|_| start(&cluster, &namespace, &next_name()))
        .collect();
    for signal in ["TERM", "KILL"] {
        let mut took = Vec::new();
        for _ in 0..rounds {
            let mut leader = None;
            let found = support::wait_until(Duration::from_secs(60), || {
                leader = replicas.iter().position(leads);
                leader.is_some()
            });
            assert!(found.is_some(), "no leader");
            let mut old = replicas.remove(leader.unwrap());
            let pid = old.child.0.id().to_string();
            let signalled = Instant::now();
            std::process::Command::new("kill")
                .args([format!("-{signal}").as_str(), &pid])
                .status()
                .unwrap();
            let handed =
                support::wait_until(Duration::from_secs(60), || replicas.iter().any(leads));
            assert!(handed.is_some(), "no handover after SIG{signal}");
            took.push(signalled.elapsed());
            let _ = old.child.0.wait();
            drop(old);
            replicas.push(start(&cluster, &namespace, &next_name()));
        }
        took.sort();
        println!(
            "  SIG{signal:<4}  median {:>7.1} ms   p90 {:>7.1} ms   worst {:>7.1} ms",
            percentile(&took, 0.5).as_secs_f64() * 1e3,
            percentile(&took, 0.9).as_secs_f64() * 1e3,
            took.last().unwrap().as_secs_f64() * 1e3,
        );
    }
}
