//! Benchmark of seed 002's delivery at scale, on the real API server:
//! `VMReplicaSet`s of 10 instances each (1 000 sets by default; `--sets N`,
//! `--quick` for 20) in 10 namespaces, carried out by the `verdict` binary
//! (`--vm-delivery`, default plugins) against the real `kube-apiserver`
//! with KWOK nodes (`testcluster/`), KubeVirt played by the benchmark (a
//! running `VirtualMachineInstance` for each VM asked to run, as
//! virt-controller would), every step's hook an endpoint of the benchmark
//! that answers at once. Reports:
//!
//! - the time to deliver every instance from nothing, and the host's
//!   memory then;
//! - the requests the host makes of the API server over a minute at rest,
//!   by verb (`verdict_kube_requests_total`; a watch counts once);
//! - from a set's edit (a new environment) to its first hook call, p50 and
//!   p99 over edits of sets one after another;
//! - one set's rollout while another set's hook hangs (its calls answered
//!   only at their 300 s timeout), beside the same rollout with none
//!   hanging.
//!
//! Run with `cargo xtask bench --delivery` (release; `--quick` in the dev
//! profile). To see where the host's memory goes, build it with the
//! system allocator and name a heap profiler to run it under:
//! `VERDICT_BENCH_PROFILER="heaptrack -o target/bench-delivery/heap"
//! cargo bench -p verdict --bench delivery --no-default-features --features
//! demo -- --sets 200` (its memory figures are then the profiler's).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use verdict_testcluster::{Binaries, Cluster, Options};

// The tests' helpers: starting the binary, reading its memory.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

/// The set whose hook hangs in the last measure.
const HANGING: &str = "hangs";

const NAMESPACES: usize = 10;
const PER_SET: usize = 10;

/// The hook calls seen, by `namespace/set`: when, and which step.
#[derive(Default)]
struct Calls {
    by_set: Mutex<BTreeMap<String, Vec<(Instant, String)>>>,
    total: std::sync::atomic::AtomicU64,
}

impl Calls {
    fn first_after(&self, set: &str, after: Instant) -> Option<Instant> {
        let by_set = self.by_set.lock().unwrap();
        by_set
            .get(set)?
            .iter()
            .map(|(at, _)| *at)
            .find(|at| *at >= after)
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The hook endpoint: every call answered `done` at once, but those of the
/// set [`HANGING`] while `hang` holds, which are never answered (the host
/// gives up at its timeout).
async fn hook_server(calls: Arc<Calls>, hang: Arc<std::sync::atomic::AtomicBool>) -> String {
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |axum::Json(call): axum::Json<Value>| {
            let (calls, hang) = (Arc::clone(&calls), Arc::clone(&hang));
            async move {
                let set = format!(
                    "{}/{}",
                    call["instance"]["namespace"].as_str().unwrap_or_default(),
                    call["instance"]["set"].as_str().unwrap_or_default()
                );
                calls
                    .by_set
                    .lock()
                    .unwrap()
                    .entry(set.clone())
                    .or_default()
                    .push((
                        Instant::now(),
                        call["step"].as_str().unwrap_or_default().into(),
                    ));
                calls
                    .total
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if set.ends_with(&format!("/{HANGING}"))
                    && hang.load(std::sync::atomic::Ordering::Relaxed)
                {
                    std::future::pending::<()>().await;
                }
                axum::Json(json!({"status": "done"}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Play KubeVirt: each VM asked to run without a running instance gets
/// one, on a KWOK node, with its status written as virt-controller would.
async fn play_kubevirt(client: Client, nodes: usize) {
    let vms = resource("kubevirt.io", "v1", "VirtualMachine", "virtualmachines");
    let vmis = resource(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
    );
    let started = Arc::new(Mutex::new(std::collections::BTreeSet::<String>::new()));
    let room = Arc::new(tokio::sync::Semaphore::new(32));
    // With backoff, as a controller watches: once the control plane is gone
    // at the end, a watch that fails at once would otherwise be polled again
    // without end, and the runtime could never stop it.
    let mut events = std::pin::pin!(
        watcher(
            Api::<DynamicObject>::all_with(client.clone(), &vms),
            watcher::Config::default()
        )
        .default_backoff()
    );
    let mut placed = 0usize;
    while let Some(event) = events.next().await {
        let Ok(watcher::Event::Apply(vm) | watcher::Event::InitApply(vm)) = event else {
            continue;
        };
        let namespace = vm.metadata.namespace.clone().unwrap_or_default();
        let name = vm.metadata.name.clone().unwrap_or_default();
        let uid = vm.metadata.uid.clone().unwrap_or_default();
        let key = format!("{namespace}/{name}/{uid}");
        if vm.metadata.deletion_timestamp.is_some() || !started.lock().unwrap().insert(key) {
            continue;
        }
        placed += 1;
        let node = format!("n{}", placed % nodes + 1);
        let (client, vms, vmis, permit) = (
            client.clone(),
            vms.clone(),
            vmis.clone(),
            Arc::clone(&room).acquire_owned().await.unwrap(),
        );
        tokio::spawn(async move {
            let ready = json!([{"type": "Ready", "status": "True"}]);
            let instances =
                Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &vmis);
            let instance: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": name, "namespace": namespace,
                    "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                        "name": name, "uid": uid, "controller": true}]},
                "spec": {}
            }))
            .unwrap();
            let _ = instances.create(&PostParams::default(), &instance).await;
            let status = |status: Value| Patch::Merge(json!({ "status": status }));
            let _ = instances
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &status(json!({"phase": "Running", "nodeName": node, "conditions": ready})),
                )
                .await;
            let _ = Api::<DynamicObject>::namespaced_with(client, &namespace, &vms)
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &status(
                        json!({"printableStatus": "Running", "ready": true, "conditions": ready}),
                    ),
                )
                .await;
            drop(permit);
        });
    }
}

fn set(namespace: &str, name: &str, jdk: &str) -> Value {
    json!({
        "apiVersion": "verdict.dev/v1alpha1", "kind": "VMReplicaSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": PER_SET,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/instance": name}},
                "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
            },
            "environment": [{"name": "jdk", "version": jdk}],
            "rollout": {"maxUnavailable": 2},
        }
    })
}

/// A sample of the host's `/metrics`: each line's value by its name and
/// labels.
fn metrics(base: &str) -> BTreeMap<String, f64> {
    let text = reqwest::blocking::get(format!("{base}/metrics"))
        .and_then(|r| r.text())
        .unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn serving(base: &str) -> f64 {
    metrics(base)
        .get(r#"verdict_vm_delivery_instances{stage="serving"}"#)
        .copied()
        .unwrap_or(0.0)
}

/// The instances of `namespace/name` serving with `jdk`, as the host's
/// route shows them.
fn serving_with(base: &str, namespace: &str, name: &str, jdk: &str) -> usize {
    let view: Value = reqwest::blocking::get(format!("{base}/v1/vm-delivery/{namespace}/{name}"))
        .and_then(|r| r.json())
        .unwrap_or_default();
    view["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| {
            i["stage"] == "serving"
                && i["lock"].is_null()
                && i["environment"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|p| p["name"] == "jdk" && p["version"] == jdk))
        })
        .count()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn flag(args: &[String], name: &str) -> Option<usize> {
    args.iter()
        .skip_while(|a| *a != name)
        .nth(1)
        .and_then(|v| v.parse().ok())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let sets = flag(&args, "--sets").unwrap_or(if quick { 20 } else { 1_000 });
    let edits = flag(&args, "--edits").unwrap_or(if quick { 10 } else { 100 });
    let nodes = if quick { 5 } else { 50 };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let bin = std::env::var_os("VERDICT_TESTCLUSTER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Binaries::folder(&target));
    let bin = Binaries::at(&bin).expect("the control plane is built (cargo xtask cluster build)");
    let dir = target.join("bench-delivery");
    let _ = verdict_testcluster::stop_detached(&dir);
    println!(
        "verdict delivery benchmark: {sets} VMReplicaSets × {PER_SET} instances in {NAMESPACES} namespaces, {nodes} KWOK nodes, the real API server"
    );
    let started = Instant::now();
    let cluster = Cluster::start(
        &bin,
        &dir,
        Options {
            nodes,
            ..Options::default()
        },
    )
    .unwrap();
    for crd in verdict_sim::kubevirt::crds() {
        cluster.apply(&crd.to_string()).unwrap();
    }
    for file in [
        "vmreplicaset-crd.yaml",
        "vmdeployment-crd.yaml",
        "server-crd.yaml",
    ] {
        let crd = workspace.join("deploy/chart/verdict/crds").join(file);
        cluster
            .kubectl_run(
                &["apply", "--server-side", "-f", crd.to_str().unwrap()],
                None,
            )
            .unwrap();
    }
    cluster
        .kubectl_run(
            &[
                "wait",
                "--for=condition=Established",
                "crd",
                "--all",
                "--timeout=120s",
            ],
            None,
        )
        .unwrap();
    for n in 0..NAMESPACES {
        cluster.create_namespace(&format!("d{n:02}"), &[]).unwrap();
    }
    println!(
        "  control plane up, CRDs served ({:.0} s)",
        started.elapsed().as_secs_f64()
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kube = runtime.block_on(support::kube_client(&cluster.kubeconfig()));
    let calls = Arc::new(Calls::default());
    let hang = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let url = runtime.block_on(hook_server(Arc::clone(&calls), Arc::clone(&hang)));
    let kubevirt = runtime.spawn(play_kubevirt(kube.clone(), nodes));

    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("verdict.toml");
    let hooks: String = verdict::lifecycle::hooks::DEFAULT_STEPS
        .iter()
        .map(|step| format!("[hooks.{step}]\nurl = \"{url}\"\ntimeout-seconds = 300\n"))
        .collect();
    std::fs::write(&config, hooks).unwrap();
    let kubeconfig = cluster.kubeconfig();
    let flags = [
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--vm-delivery",
        "--no-kube-events",
    ];
    let plugins = workspace.join("target/plugins");
    let (child, base) = match std::env::var("VERDICT_BENCH_PROFILER") {
        Ok(profiler) => {
            let mut words = profiler.split_whitespace();
            let mut command = std::process::Command::new(words.next().expect("a profiler"));
            command
                .args(words)
                .arg(env!("CARGO_BIN_EXE_verdict"))
                .args(["serve", "--listen", "127.0.0.1:0", "--plugins"])
                .arg(&plugins)
                .arg("--data-dir")
                .arg(data.path())
                .args(flags);
            support::spawn_serving(command, "error")
        }
        Err(_) => support::spawn_verdict(&plugins, data.path(), &flags, "error"),
    };
    let host = support::KillOnDrop(child);
    let pid = host.0.id();

    // Every set made, then every instance delivered.
    let sets_api = |namespace: &str| {
        Api::<DynamicObject>::namespaced_with(
            kube.clone(),
            namespace,
            &resource("verdict.dev", "v1alpha1", "VMReplicaSet", "vmreplicasets"),
        )
    };
    let names: Vec<(String, String)> = (0..sets)
        .map(|i| (format!("d{:02}", i % NAMESPACES), format!("s{i:04}")))
        .collect();
    let delivering = Instant::now();
    runtime.block_on(async {
        let made = futures_util::stream::iter(names.iter().map(|(namespace, name)| {
            let api = sets_api(namespace);
            let object: DynamicObject = serde_json::from_value(set(namespace, name, "21")).unwrap();
            async move {
                api.create(&PostParams::default(), &object).await.unwrap();
            }
        }))
        .buffer_unordered(16)
        .collect::<Vec<()>>();
        made.await;
    });
    let wanted = (sets * PER_SET) as f64;
    let mut last_said = Instant::now();
    loop {
        let now = serving(&base);
        if now >= wanted {
            break;
        }
        if last_said.elapsed() > Duration::from_secs(30) {
            println!(
                "  … {now} of {wanted} serving after {:.0} s ({} hook calls)",
                delivering.elapsed().as_secs_f64(),
                calls.total.load(std::sync::atomic::Ordering::Relaxed)
            );
            last_said = Instant::now();
        }
        assert!(
            delivering.elapsed() < Duration::from_secs(3 * 3600),
            "not delivered in 3 hours: {now} of {wanted}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let delivered = delivering.elapsed();
    let (rss, peak) = support::memory(pid);
    println!(
        "| every instance delivered from nothing ({} instances, {} hook calls) | {:.0} s |",
        sets * PER_SET,
        calls.total.load(std::sync::atomic::Ordering::Relaxed),
        delivered.as_secs_f64()
    );
    println!("| host resident memory then (peak) | {rss:.0} MiB ({peak:.0} MiB) |");

    // At rest: what the host asks of the API server over a minute.
    std::thread::sleep(Duration::from_secs(10));
    let requests = |m: &BTreeMap<String, f64>| -> BTreeMap<String, f64> {
        m.iter()
            .filter_map(|(k, v)| {
                let verb = k.strip_prefix("verdict_kube_requests_total{verb=\"")?;
                Some((verb.trim_end_matches("\"}").to_string(), *v))
            })
            .collect()
    };
    let before = requests(&metrics(&base));
    let calls_before = calls.total.load(std::sync::atomic::Ordering::Relaxed);
    let window = if quick { 20.0 } else { 60.0 };
    std::thread::sleep(Duration::from_secs_f64(window));
    let after = requests(&metrics(&base));
    let idle: Vec<String> = after
        .iter()
        .map(|(verb, n)| {
            let made = n - before.get(verb).copied().unwrap_or(0.0);
            format!("{verb} {:.0}", made * 60.0 / window)
        })
        .collect();
    let (rss, _) = support::memory(pid);
    println!(
        "| requests of the API server a minute at rest, by verb | {} (hook calls {}) |",
        idle.join(", "),
        calls.total.load(std::sync::atomic::Ordering::Relaxed) - calls_before
    );
    println!("| host resident memory at rest | {rss:.0} MiB |");

    // A set's edit to its first hook call, one set after another.
    let mut latencies = Vec::new();
    let edited_sets: Vec<&(String, String)> = (0..edits.min(sets))
        .map(|k| &names[(k * 7919) % sets])
        .collect();
    for (namespace, name) in &edited_sets {
        let edited = Instant::now();
        runtime
            .block_on(sets_api(namespace).patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"environment": [{"name": "jdk", "version": "22"}]}})),
            ))
            .unwrap();
        let key = format!("{namespace}/{name}");
        let called = (0..).find_map(|_| {
            if let Some(at) = calls.first_after(&key, edited) {
                return Some(at);
            }
            assert!(
                edited.elapsed() < Duration::from_secs(120),
                "{key}: no hook call in 120 s"
            );
            std::thread::sleep(Duration::from_millis(1));
            None
        });
        latencies.push(called.unwrap().duration_since(edited).as_secs_f64() * 1000.0);
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "| a set's edit → its first hook call, p50 / p99 / max ({} edits) | {:.0} / {:.0} / {:.0} ms |",
        latencies.len(),
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(f64::NAN)
    );

    // Every edited set rolled out before the next measure.
    for (namespace, name) in &edited_sets {
        while serving_with(&base, namespace, name, "22") < PER_SET {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // One set's whole rollout, with no hook hanging and while another
    // set's hangs.
    let rollout = |namespace: &str, name: &str, jdk: &str| -> f64 {
        let edited = Instant::now();
        runtime
            .block_on(sets_api(namespace).patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"environment": [{"name": "jdk", "version": jdk}]}})),
            ))
            .unwrap();
        while serving_with(&base, namespace, name, jdk) < PER_SET {
            assert!(
                edited.elapsed() < Duration::from_secs(600),
                "{namespace}/{name} never rolled out"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        edited.elapsed().as_secs_f64()
    };
    let (namespace, name) = &names[sets - 1];
    let alone = rollout(namespace, name, "23");
    runtime
        .block_on(sets_api("d00").create(
            &PostParams::default(),
            &serde_json::from_value(set("d00", HANGING, "21")).unwrap(),
        ))
        .unwrap();
    while serving_with(&base, "d00", HANGING, "21") < PER_SET {
        std::thread::sleep(Duration::from_millis(100));
    }
    hang.store(true, std::sync::atomic::Ordering::Relaxed);
    runtime
        .block_on(sets_api("d00").patch(
            HANGING,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"environment": [{"name": "jdk", "version": "22"}]}})),
        ))
        .unwrap();
    let hanging_key = format!("d00/{HANGING}");
    let hung_from = Instant::now();
    while calls
        .first_after(&hanging_key, hung_from - Duration::from_secs(5))
        .is_none()
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let beside = rollout(namespace, name, "24");
    println!(
        "| one set's rollout of {PER_SET} instances alone / while another set's hook hangs | {alone:.1} s / {beside:.1} s |"
    );
    kubevirt.abort();
    drop(host);
    drop(cluster);
}
