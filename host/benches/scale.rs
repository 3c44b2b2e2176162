//! Benchmark of the largest clusters on the real API server: a control
//! plane of its own (kube-apiserver, etcd and KWOK built from their Go
//! modules, `testcluster/`) with `--nodes` KWOK nodes, filled with
//! `--pods` pods in apps of ten (a Deployment each, 100 namespaces), then
//! the `verdict` binary started against it. Reports the API server's own
//! time to answer the whole list, verdict's time to every verdict, its
//! intake rate over time, memory, CPU, idle CPU while the nodes' Leases
//! renew, one answer's time, and a relist after an API server restart.
//!
//! The pods are made directly (the controller manager is stopped once the
//! namespaces have their ServiceAccounts, so that nothing else makes or
//! deletes pods), bound to nodes by name, each with requests and limits, a
//! port, an environment variable and a readiness probe, and played Running
//! by KWOK; the Deployments' status is written through the status
//! subresource.
//!
//! ```sh
//! cargo xtask bench --scale                      # 150 000 pods on 500 nodes
//! cargo xtask bench --scale --pods 20000 --nodes 100
//! cargo xtask bench --scale --fill               # only fill it, and leave it up…
//! cargo xtask bench --scale --keep               # leave the filled cluster up…
//! cargo xtask bench --scale --keep               # …and measure it again
//! cargo xtask bench --scale --keep --no-history  # …without the history
//! cargo xtask bench --scale --quick              # 2 000 pods (what CI runs)
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};
use verdict_testcluster::{Binaries, Cluster, Options};

// The tests' helpers: starting the binary, reading its memory.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

// Histograms read from the host's `/metrics`.
#[path = "common/histogram.rs"]
mod histogram;

/// The cluster's shape.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
struct Shape {
    pods: usize,
    nodes: usize,
    namespaces: usize,
    per_app: usize,
}

impl Shape {
    fn apps(&self) -> usize {
        self.pods / self.per_app
    }

    fn apps_per_namespace(&self) -> usize {
        self.apps() / self.namespaces
    }
}

fn flag(args: &[String], name: &str) -> Option<usize> {
    let at = args.iter().position(|a| a == name)?;
    Some(
        args.get(at + 1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name} needs a number")),
    )
}

fn deployment(ns: &str, app: &str, replicas: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns, "labels": {"app.kubernetes.io/instance": app}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": app}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/instance": app}},
                "spec": {"containers": [{"name": "main", "image": format!("registry.example/{app}:1")}]},
            },
        },
    })
}

const HASH: &str = "5d8f7c9b4";

fn pod(ns: &str, app: &str, index: usize, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-{HASH}-{index:02}"), "namespace": ns,
            "labels": {"app.kubernetes.io/instance": app, "pod-template-hash": HASH},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{app}-{HASH}"), "uid": "6a1f0c52-3f1e-4d0e-9d4b-0c9a4e5b7f21",
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "main", "image": format!("registry.example/{app}:1"),
                "ports": [{"containerPort": 8080, "name": "http"}],
                "env": [{"name": "MODE", "value": "production"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"cpu": "500m", "memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
            }],
        },
    })
}

/// Create, taking an object that is there already as made.
async fn create<K>(api: &Api<K>, object: Value)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let object: K = serde_json::from_value(object).unwrap();
    for attempt in 0.. {
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => return,
            // The API server sheds load under a burst: ask again.
            Err(error) if attempt < 20 => {
                eprintln!("retrying a create: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("creating {object:?}: {error}"),
        }
    }
}

/// Make the cluster's objects, `in_flight` requests at a time.
async fn fill(client: &Client, shape: Shape) {
    let started = Instant::now();
    let namespaces: Vec<String> = (0..shape.namespaces)
        .map(|n| format!("ns-{n:03}"))
        .collect();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for ns in &namespaces {
        create(
            &ns_api,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        create(
            &accounts,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}),
        )
        .await;
    }
    let in_flight = 48;
    let apps: Vec<(String, String)> = namespaces
        .iter()
        .flat_map(|ns| {
            (0..shape.apps_per_namespace()).map(move |a| (ns.clone(), format!("app-{a:03}")))
        })
        .collect();
    futures_util::stream::iter(apps.iter().cloned())
        .map(|(ns, app)| {
            let client = client.clone();
            async move {
                let api: Api<Deployment> = Api::namespaced(client, &ns);
                create(&api, deployment(&ns, &app, shape.per_app)).await;
                let status = json!({"status": {"observedGeneration": 1, "replicas": shape.per_app,
                    "readyReplicas": shape.per_app, "availableReplicas": shape.per_app,
                    "updatedReplicas": shape.per_app}});
                api.patch_status(&app, &PatchParams::default(), &Patch::Merge(status))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(in_flight)
        .collect::<Vec<()>>()
        .await;
    println!(
        "  {} Deployments made in {:.0} s",
        apps.len(),
        started.elapsed().as_secs_f64()
    );
    make_pods(client, shape, &namespaces).await;
    println!(
        "  {} pods made in {:.0} s",
        shape.pods,
        started.elapsed().as_secs_f64()
    );
}

/// Make the pods of the apps in `namespaces`, each bound to its node by
/// name, `in_flight` requests at a time.
async fn make_pods(client: &Client, shape: Shape, namespaces: &[String]) {
    let (started, in_flight) = (Instant::now(), 48);
    let pods = namespaces.iter().flat_map(|ns| {
        let n: usize = ns.trim_start_matches("ns-").parse().unwrap();
        (0..shape.apps_per_namespace()).flat_map(move |a| {
            // Numbered across the namespaces, so that the nodes share them.
            let app_number = n * shape.apps_per_namespace() + a;
            (0..shape.per_app).map(move |p| {
                let node = format!("n{}", (app_number * shape.per_app + p) % shape.nodes + 1);
                (ns.clone(), pod(ns, &format!("app-{a:03}"), p, &node))
            })
        })
    });
    let made = std::sync::atomic::AtomicUsize::new(0);
    futures_util::stream::iter(pods)
        .map(|(ns, pod)| {
            let (client, made) = (client.clone(), &made);
            async move {
                let api: Api<Pod> = Api::namespaced(client, &ns);
                create(&api, pod).await;
                let n = made.fetch_add(1, Ordering::Relaxed) + 1;
                if n % 10_000 == 0 {
                    println!("  {n} pods made ({:.0} s)", started.elapsed().as_secs_f64());
                }
            }
        })
        .buffer_unordered(in_flight)
        .collect::<Vec<()>>()
        .await;
}

/// Make again the pods of the namespaces that lack some (those an earlier
/// run's burst deleted), and wait until they run.
async fn refill(client: &Client, shape: Shape) {
    let per_namespace = shape.pods / shape.namespaces;
    let mut short = Vec::new();
    for n in 0..shape.namespaces {
        let ns = format!("ns-{n:03}");
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let held = api.list_metadata(&ListParams::default()).await.unwrap();
        if held.items.len() < per_namespace {
            short.push(ns);
        }
    }
    if !short.is_empty() {
        println!("  the pods of {} namespaces made again", short.len());
        make_pods(client, shape, &short).await;
        all_running(client, shape.pods).await;
    }
}

/// Wait until the process `pid` uses under 0.9 of a core over 5 s (at most
/// 10 minutes; the API server idles at about 0.65 with 500 KWOK nodes);
/// how long that took.
fn settle(pid: u32) -> Duration {
    let started = Instant::now();
    loop {
        let (from, cpu) = (Instant::now(), support::cpu_time(pid));
        std::thread::sleep(Duration::from_secs(5));
        let used = (support::cpu_time(pid) - cpu).as_secs_f64() / from.elapsed().as_secs_f64();
        if used < 0.9 || started.elapsed() > Duration::from_secs(600) {
            return started.elapsed();
        }
    }
}

/// Wait until the namespaces hold no pod.
async fn all_gone(client: &Client, namespaces: &[String]) {
    let started = Instant::now();
    for ns in namespaces {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        loop {
            let left = api.list_metadata(&ListParams::default().limit(1)).await;
            if left.is_ok_and(|l| l.items.is_empty()) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(900),
                "the pods of {ns} still there after 15 min"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Wait until KWOK has played every pod Running.
async fn all_running(client: &Client, pods: usize) {
    let started = Instant::now();
    let api: Api<Pod> = Api::all(client.clone());
    loop {
        let waiting = api
            .list_metadata(
                &ListParams::default()
                    .fields("status.phase!=Running")
                    .limit(1),
            )
            .await;
        // A field selector gives no count of the rest: only whether any
        // is left.
        if let Ok(list) = waiting {
            if list.items.is_empty() {
                println!(
                    "  all {pods} pods Running ({:.0} s)",
                    started.elapsed().as_secs_f64()
                );
                return;
            }
            println!(
                "  pods not Running yet ({:.0} s)",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// The API server's own time to answer the whole list of pods from its
/// watch cache (`kubectl get --raw`, the answer written to a file), and
/// the answer's size.
fn server_list(cluster: &Cluster, dir: &Path) -> (Duration, u64) {
    let out = dir.join("pods.json");
    let started = Instant::now();
    let status = cluster
        .kubectl()
        .args(["get", "--raw", "/api/v1/pods?resourceVersion=0"])
        .stdout(std::fs::File::create(&out).unwrap())
        .status()
        .unwrap();
    let took = started.elapsed();
    assert!(status.success(), "kubectl get --raw failed");
    let size = std::fs::metadata(&out).map_or(0, |m| m.len());
    let _ = std::fs::remove_file(&out);
    (took, size)
}

/// Now, as a kubelet writes times.
fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A pod's status as its kubelet reports it: running and ready after
/// `restarts` restarts, the last a moment ago.
fn pod_status(app: &str, restarts: u64) -> Value {
    let at = now();
    json!({"status": {
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": at},
            {"type": "Ready", "status": "True", "lastTransitionTime": at},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": at},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}],
        "containerStatuses": [{"name": "main", "image": format!("registry.example/{app}:1"),
            "imageID": "", "ready": true, "started": true,
            "restartCount": restarts, "state": {"running": {"startedAt": at}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": at}}}],
    }})
}

/// The restart counts of the probes' writes start here, far past any the
/// churn gives (and within the API's 32 bits).
const PROBED: u64 = 1_000_000_000;

/// The namespace and name of the app numbered `number` across the cluster.
fn app_numbered(shape: Shape, number: usize) -> (String, String) {
    let per_namespace = shape.apps_per_namespace();
    (
        format!("ns-{:03}", number / per_namespace % shape.namespaces),
        format!("app-{:03}", number % per_namespace),
    )
}

/// Write `rate` pod changes a second (a container's restart, each on the
/// next pod but the first of each app) until `stop`; how many were written.
async fn churn(client: Client, shape: Shape, rate: u32, stop: Arc<AtomicBool>) -> u64 {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let writes = Arc::new(tokio::sync::Semaphore::new(64));
    let mut written = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let i = written as usize;
        let (ns, app) = app_numbered(shape, i);
        let index = 1 + (i / shape.apps()) % (shape.per_app - 1);
        let name = format!("{app}-{HASH}-{index:02}");
        let permit = Arc::clone(&writes).acquire_owned().await.unwrap();
        let client = client.clone();
        tokio::spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, &ns);
            let status = pod_status(&app, written);
            let _ = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await;
            drop(permit);
        });
        written += 1;
    }
    written
}

/// Opens a watch of the pod `name` from the collection's current version
/// (not the pod's own: a pod unchanged for long has a version the server
/// no longer keeps, and its watch would end at once with `410 Gone`); the
/// task it returns ends when the watch delivers the pod with the restart
/// count `marker` (the time it did), or with `None` when it does not within
/// a minute.
async fn watch_for(
    api: &Api<Pod>,
    name: &str,
    marker: u64,
) -> tokio::task::JoinHandle<Option<Instant>> {
    let selector = format!("metadata.name={name}");
    let version = api
        .list_metadata(&ListParams::default().fields(&selector))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let params = WatchParams::default().fields(&selector).timeout(60);
    let stream = api.watch(&params, &version).await.unwrap();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let Ok(WatchEvent::Modified(pod)) = event else {
                continue;
            };
            let restarts = pod
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.first().map(|c| c.restart_count));
            if restarts.is_some_and(|r| r as u64 == marker) {
                return Some(Instant::now());
            }
        }
        None
    })
}

/// What a steady churn of pod changes measured: each probe's change to
/// its new verdict on HTTP, its write, its watch event's delivery (all
/// from the write), the last read's own time, the host's derivations
/// meanwhile (mean ms, p99 bucket, count), the host's CPU and the rate.
struct Churned {
    seen: Vec<Duration>,
    writes: Vec<Duration>,
    delivered: Vec<Duration>,
    /// From the watch event's delivery to the new verdict read: the
    /// host's part of the way.
    after_delivery: Vec<Duration>,
    reads: Vec<Duration>,
    derivations: (f64, String, f64),
    cpu: f64,
    rate: f64,
}

impl Churned {
    /// Its parts, p50 / p99: the write answered, the watch event
    /// delivered, the last read; the derivations meanwhile.
    fn parts(&self) -> String {
        let (mean, p99, count) = &self.derivations;
        let p = |d: &[Duration]| format!("{:.1} / {:.1} ms", quantile(d, 0.5), quantile(d, 0.99));
        format!(
            "the write answered {}; its watch event delivered {} ({} of {} seen); from there to the verdict read {}; the last read {}; derivations meanwhile: mean {mean:.1} ms, p99 {p99}, {count} of them",
            p(&self.writes),
            p(&self.delivered),
            self.delivered.len(),
            self.seen.len(),
            p(&self.after_delivery),
            p(&self.reads)
        )
    }
}

/// The derivations of changed apps between two scrapes of `/metrics`:
/// mean ms, the p99 bucket, and how many.
fn derivations_between(before: &str, after: &str) -> (f64, String, f64) {
    let read =
        |text: &str| histogram::histogram(text, "verdict_derivation_seconds", "scope=\"changed\"");
    let (before, after) = (read(before), read(after));
    (
        histogram::mean_ms(&before, &after),
        histogram::p99_bound(&before, &after),
        after.count - before.count,
    )
}

/// The `q` quantile of some durations, in milliseconds.
fn quantile(sorted: &[Duration], q: f64) -> f64 {
    let at = ((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(at).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Sets its flag when dropped: a thread told to stop by it stops however
/// the code that holds it ends, a panic included.
struct Stop(Arc<AtomicBool>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One reading of the host while it works.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss: f64,
    cpu: Duration,
    pod_events: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let keep = args.iter().any(|a| a == "--keep");
    let (pods, nodes) = if quick { (2_000, 20) } else { (150_000, 500) };
    let shape = Shape {
        pods: flag(&args, "--pods").unwrap_or(pods),
        nodes: flag(&args, "--nodes").unwrap_or(nodes),
        namespaces: if quick { 10 } else { 100 },
        per_app: 10,
    };
    assert!(
        shape.pods.is_multiple_of(shape.namespaces * shape.per_app),
        "--pods must be a multiple of {}",
        shape.namespaces * shape.per_app
    );
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let dir = target.join("scale");
    let bin = std::env::var_os("VERDICT_TESTCLUSTER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Binaries::folder(&target));
    let bin = Binaries::at(&bin).expect("the control plane is built (cargo xtask cluster build)");
    let runtime = tokio::runtime::Runtime::new().unwrap();

    println!(
        "verdict scale benchmark: {} pods in {} apps on {} KWOK nodes, the real API server",
        shape.pods,
        shape.apps(),
        shape.nodes
    );
    // A filled cluster kept by an earlier run of the same shape is used
    // again; anything else starts over.
    let shape_file = dir.join("shape.json");
    let kept: Option<Shape> = std::fs::read_to_string(&shape_file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    // A kept cluster whose processes are gone is started again on its data.
    let kept_cluster = match Cluster::attach(&dir) {
        Err(_) if kept == Some(shape) => {
            let reviving = Instant::now();
            let revived = Cluster::revive(&dir);
            if revived.is_ok() {
                println!(
                    "  the kept cluster's processes were gone: started again on its data ({:.0} s)",
                    reviving.elapsed().as_secs_f64()
                );
            }
            revived
        }
        attached => attached,
    };
    let mut cluster = match kept_cluster {
        Ok(cluster) if kept == Some(shape) => {
            println!("  the cluster kept in {} is used again", dir.display());
            // What an earlier run's burst deleted is made again.
            let client = runtime.block_on(support::kube_client(&cluster.kubeconfig()));
            runtime.block_on(refill(&client, shape));
            cluster
        }
        attached => {
            if attached.is_ok() {
                verdict_testcluster::stop_detached(&dir).unwrap();
            }
            let _ = std::fs::remove_file(&shape_file);
            let filling = Instant::now();
            let mut cluster = Cluster::start(
                &bin,
                &dir,
                Options {
                    nodes: shape.nodes,
                    ..Options::default()
                },
            )
            .unwrap();
            println!(
                "  control plane up with {} nodes ({:.0} s)",
                shape.nodes,
                filling.elapsed().as_secs_f64()
            );
            cluster.stop("kube-controller-manager").unwrap();
            let client = runtime.block_on(support::kube_client(&cluster.kubeconfig()));
            runtime.block_on(fill(&client, shape));
            runtime.block_on(all_running(&client, shape.pods));
            std::fs::write(&shape_file, serde_json::to_string(&shape).unwrap()).unwrap();
            println!("  filled in {:.0} s", filling.elapsed().as_secs_f64());
            cluster
        }
    };
    if args.iter().any(|a| a == "--fill") {
        // Made (or made whole again) for a later `--keep` run to measure.
        cluster.detach().unwrap();
        println!(
            "  the filled cluster is left up in {} (`--fill`)",
            dir.display()
        );
        return;
    }
    let kubeconfig = cluster.kubeconfig();
    // Measured on a quiet control plane: pods just made (a refill) keep
    // the API server, etcd and KWOK busy for a while after they run.
    let server_pid = cluster.write_state().unwrap().pids["kube-apiserver"];
    let quiet = settle(server_pid);
    println!(
        "  the API server quiet (under 0.9 of a core over 5 s; 0.65 idle with 500 nodes) after {:.0} s",
        quiet.as_secs_f64()
    );
    let (listed_in, listed_bytes) = server_list(&cluster, &dir);
    println!(
        "  the API server lists every pod from its watch cache in {:.1} s ({:.0} MB)",
        listed_in.as_secs_f64(),
        listed_bytes as f64 / 1e6
    );

    // What the API server spends serving the host's lists (its other work
    // meanwhile, the nodes' Leases, is small beside it).
    let server_cpu = support::cpu_time(server_pid);
    let data = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // `--no-history`: the host keeps no history and writes no Kubernetes
    // Events, for the figures beside those with them.
    let mut flags = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
    if args.iter().any(|a| a == "--no-history") {
        flags.extend(["--no-history", "--no-kube-events"]);
    }
    let (child, base) = support::spawn_verdict(
        &workspace.join("target/plugins"),
        data.path(),
        &flags,
        // The client's own errors while the API server restarts are
        // expected.
        "error,kube_client=off",
    );
    let host = support::KillOnDrop(child);
    let pid = host.0.id();
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let get = |path: &str| -> Value {
        http.get(format!("{base}{path}"))
            .send()
            .and_then(|r| r.json())
            .unwrap_or(Value::Null)
    };
    let scrape = || -> String {
        http.get(format!("{base}/metrics"))
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default()
    };
    let sample = |readyz: &Value| Sample {
        at: started.elapsed(),
        rss: support::memory(pid).0,
        cpu: support::cpu_time(pid),
        pod_events: readyz["watches"]["pods"]["events"].as_u64().unwrap_or(0),
    };
    let last = format!(
        "/v1/apps/ns-{:03}/app-{:03}",
        shape.namespaces - 1,
        shape.apps_per_namespace() - 1
    );
    let mut samples = Vec::new();
    let derived = loop {
        let readyz = get("/readyz");
        samples.push(sample(&readyz));
        let complete = readyz["ready"] == true
            && readyz["apps"].as_u64() == Some(shape.apps() as u64)
            && get(&last)["groups"].as_array().map(Vec::len) == Some(shape.per_app);
        if complete {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "not every verdict after 30 min: {readyz}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let (rss, peak) = support::memory(pid);
    let cpu_to_derive = support::cpu_time(pid);
    let server_cpu = support::cpu_time(server_pid).saturating_sub(server_cpu);
    println!(
        "  every verdict after {:.1} s: {rss:.0} MiB resident (peak {peak:.0}), {:.0} s of CPU (the API server's meanwhile {:.0} s)",
        derived.as_secs_f64(),
        cpu_to_derive.as_secs_f64(),
        server_cpu.as_secs_f64()
    );

    // Idle: settled for 30 s, then CPU over 60 s while the Leases renew.
    std::thread::sleep(Duration::from_secs(30));
    let (settled, _) = support::memory(pid);
    // What of it the heap holds (jemalloc's count of what it handed out).
    let allocated = get("/readyz")["memory"]["allocated_mib"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let idle_from = (Instant::now(), support::cpu_time(pid));
    std::thread::sleep(Duration::from_secs(60));
    let idle =
        (support::cpu_time(pid) - idle_from.1).as_secs_f64() / idle_from.0.elapsed().as_secs_f64();
    println!(
        "  settled at {settled:.0} MiB (the heap {allocated:.0} MiB); idle CPU {:.1} % of a core",
        idle * 100.0
    );

    // One answer: every app, and one app.
    let timed = |path: &str| {
        let at = Instant::now();
        let body = http
            .get(format!("{base}{path}"))
            .send()
            .unwrap()
            .bytes()
            .unwrap();
        (at.elapsed(), body.len())
    };
    let (all_apps, all_bytes) = timed("/v1/apps");
    let (one_app, _) = timed(&last);

    let client = runtime.block_on(support::kube_client(&kubeconfig));

    // A steady churn of 200 pod changes a second; meanwhile probes, one at
    // a time, each restart a container of a pod of another app, with a
    // restart count no other write gives, and time the change from its
    // write to its new verdict over HTTP. (A crash loop would be a plainer
    // change, but KWOK plays a pod that is not ready back to ready, and on
    // a small cluster it does so before the host sees it.)
    // The short run's is lower: its control plane, host and benchmark are
    // dev builds on the same cores, and a churn they cannot keep up with
    // only grows a queue in front of the probes.
    let (rate, probes) = if quick { (50, 20) } else { (200, 100) };
    let stop = Arc::new(AtomicBool::new(false));
    let churning = {
        let (churn_client, churn_stop) = (client.clone(), Arc::clone(&stop));
        let runtime = &runtime;
        std::thread::scope(|scope| {
            let churn =
                scope.spawn(move || runtime.block_on(churn(churn_client, shape, rate, churn_stop)));
            // The churn stops however the probes end (a panic included), so
            // that the scope does.
            let _stop = Stop(Arc::clone(&stop));
            let from = (Instant::now(), support::cpu_time(pid));
            let mut seen = Vec::new();
            let mut writes = Vec::new();
            let (mut delivered, mut reads) = (Vec::new(), Vec::new());
            let mut after_delivery = Vec::new();
            let derivations_before = scrape();
            for k in 0..probes {
                // Apps far apart, none probed twice.
                let (ns, app) = app_numbered(shape, k * 7919 % shape.apps());
                let name = format!("{app}-{HASH}-00");
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let marker = PROBED + k as u64;
                // A watch of the probed pod of the benchmark's own, open
                // before the write: when the API server's watch delivers
                // the change (the host's watch gets it from the same cache
                // at about the same time).
                let watched = runtime.block_on(watch_for(&api, &name, marker));
                let sent = Instant::now();
                runtime
                    .block_on(api.patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(pod_status(&app, marker)),
                    ))
                    .unwrap();
                writes.push(sent.elapsed());
                let path = format!("/v1/apps/{ns}/{app}");
                // Read every millisecond (a read without a pause would be
                // a client taking a core of the two from the host).
                let read = loop {
                    let asked = Instant::now();
                    let verdict = get(&path);
                    let restarted = verdict["groups"].as_array().is_some_and(|g| {
                        g.iter().any(|p| {
                            p["name"] == name.as_str()
                                && p["instances"][0]["restart_count"] == marker
                        })
                    });
                    if restarted {
                        break asked.elapsed();
                    }
                    assert!(
                        sent.elapsed() < Duration::from_secs(60),
                        "change never seen: {verdict}"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                };
                let read_at = Instant::now();
                seen.push(read_at - sent);
                reads.push(read);
                let at = runtime.block_on(watched).unwrap();
                if let Some(at) = at {
                    delivered.push(at.saturating_duration_since(sent));
                    after_delivery.push(read_at.saturating_duration_since(at));
                }
            }
            let cpu =
                (support::cpu_time(pid) - from.1).as_secs_f64() / from.0.elapsed().as_secs_f64();
            let seconds = from.0.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            let written = churn.join().unwrap();
            // The probed pods run again, for the next run of a kept cluster.
            for k in 0..probes {
                let (ns, app) = app_numbered(shape, k * 7919 % shape.apps());
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                runtime
                    .block_on(api.patch_status(
                        &format!("{app}-{HASH}-00"),
                        &PatchParams::default(),
                        &Patch::Merge(pod_status(&app, 1)),
                    ))
                    .unwrap();
            }
            let derivations = derivations_between(&derivations_before, &scrape());
            seen.sort();
            writes.sort();
            delivered.sort();
            after_delivery.sort();
            reads.sort();
            Churned {
                seen,
                writes,
                delivered,
                after_delivery,
                reads,
                derivations,
                cpu,
                rate: written as f64 / seconds,
            }
        })
    };
    println!(
        "  under {:.0} changes/s a change's new verdict p50 / p99: {:.1} / {:.1} ms ({})",
        churning.rate,
        quantile(&churning.seen, 0.5),
        quantile(&churning.seen, 0.99),
        churning.parts()
    );

    // A burst of deletions: the pods of enough namespaces to make 20 000
    // (at most half the cluster's), deleted at once, while another app is
    // read over HTTP without a pause.
    let per_namespace = shape.pods / shape.namespaces;
    let doomed: Vec<String> = (0..20_000usize
        .div_ceil(per_namespace)
        .clamp(1, shape.namespaces / 2))
        .map(|n| format!("ns-{n:03}"))
        .collect();
    let deleted = doomed.len() * per_namespace;
    let survivor = format!("/v1/apps/ns-{:03}/app-000", shape.namespaces - 1);
    let burst = std::thread::scope(|scope| {
        let stopped = Arc::new(AtomicBool::new(false));
        // The reader stops however the burst ends (a panic included), so
        // that the scope does.
        let stop = Stop(Arc::clone(&stopped));
        let reader = {
            let stopped = Arc::clone(&stopped);
            let (http, base, survivor) = (&http, &base, &survivor);
            scope.spawn(move || {
                let mut times = Vec::new();
                while !stopped.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let ok = http
                        .get(format!("{base}{survivor}"))
                        .send()
                        .is_ok_and(|r| r.status().is_success());
                    assert!(ok, "{survivor} not answered during the burst");
                    times.push(at.elapsed());
                    std::thread::sleep(Duration::from_millis(5));
                }
                times
            })
        };
        let started = Instant::now();
        runtime.block_on(futures_util::future::join_all(doomed.iter().map(|ns| {
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            async move {
                // A collection this large can outlast the server's request
                // timeout under load: what it deleted stays deleted, and
                // asking again deletes the rest.
                for attempt in 1.. {
                    match api
                        .delete_collection(
                            &DeleteParams::default().grace_period(0),
                            &ListParams::default(),
                        )
                        .await
                    {
                        Ok(_) => break,
                        Err(e) if attempt < 10 => {
                            eprintln!("  deleting the pods of {ns} again after: {e}");
                        }
                        Err(e) => panic!("the pods of {ns} not deleted: {e}"),
                    }
                }
            }
        })));
        let requested = started.elapsed();
        let last_app = format!("app-{:03}", shape.apps_per_namespace() - 1);
        let gone = support::wait_until(Duration::from_secs(900), || {
            doomed.iter().all(|ns| {
                get(&format!("/v1/apps/{ns}/{last_app}"))["groups"]
                    .as_array()
                    .is_some_and(Vec::is_empty)
            })
        });
        let absorbed = started.elapsed();
        drop(stop);
        let mut times = reader.join().unwrap();
        assert!(gone.is_some(), "the deleted pods still judged after 15 min");
        times.sort();
        (requested, absorbed, times)
    });
    // The deleted pods made again, for the next run of a kept cluster —
    // once the API server has removed them: a pod made again while its
    // namesake is still being deleted is refused as one that exists.
    runtime.block_on(all_gone(&client, &doomed));
    runtime.block_on(make_pods(&client, shape, &doomed));
    runtime.block_on(all_running(&client, shape.pods));

    // A relist after the API server restarts: the last verdicts stay
    // (marked stale), memory is watched until every watch is back.
    let lists_before = get("/readyz")["watches"]["pods"]["lists"]
        .as_u64()
        .unwrap_or(0);
    cluster.kill_apiserver().unwrap();
    let restarted = Instant::now();
    cluster.start_apiserver().unwrap();
    let mut relist_peak: f64 = 0.0;
    // Whether every read meanwhile had the last verdict, all its pods.
    let mut served = true;
    let relisted = loop {
        let readyz = get("/readyz");
        relist_peak = relist_peak.max(support::memory(pid).0);
        served &= get(&last)["groups"].as_array().map(Vec::len) == Some(shape.per_app);
        let lists = readyz["watches"]["pods"]["lists"].as_u64().unwrap_or(0);
        if readyz["ready"] == true && lists > lists_before {
            break Some(restarted.elapsed());
        }
        if readyz["ready"] == true && restarted.elapsed() > Duration::from_secs(120) {
            // Resumed without a new list.
            break None;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(1200),
            "never back: {readyz}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let after_relist = support::memory(pid).0;
    drop(host);

    let secs = |d: Duration| d.as_secs_f64();
    println!();
    println!("| measure | figure |");
    println!("|---|---|");
    println!(
        "| the API server's whole list of pods from its watch cache | {:.1} s ({:.0} MB of JSON) |",
        secs(listed_in),
        listed_bytes as f64 / 1e6
    );
    println!(
        "| start → every verdict ({} apps) | {:.1} s ({:.1}× the server's list) |",
        shape.apps(),
        secs(derived),
        secs(derived) / secs(listed_in)
    );
    println!(
        "| resident memory at every verdict / 30 s later / peak | {rss:.0} MiB / {settled:.0} MiB / {peak:.0} MiB ({:.1} KiB a pod) |",
        settled * 1024.0 / shape.pods as f64
    );
    println!(
        "| of which the heap (what the allocator handed out), 30 s after | {allocated:.0} MiB ({:.1} KiB a pod) |",
        allocated * 1024.0 / shape.pods as f64
    );
    println!(
        "| CPU to get there (the API server's meanwhile) | {:.0} s ({:.0} s) |",
        secs(cpu_to_derive),
        secs(server_cpu)
    );
    println!(
        "| idle CPU afterwards (60 s, the nodes' Leases renewing) | {:.1} % of a core |",
        idle * 100.0
    );
    println!(
        "| one answer: `GET /v1/apps` / one app | {:.2} s ({:.0} MB) / {:.1} ms |",
        secs(all_apps),
        all_bytes as f64 / 1e6,
        secs(one_app) * 1e3
    );
    let c = &churning;
    println!(
        "| pod change → new verdict on HTTP under {:.0} changes/s, p50 / p99 of {} | {:.1} / {:.1} ms; the host's CPU {:.0} % of a core |",
        c.rate,
        c.seen.len(),
        quantile(&c.seen, 0.5),
        quantile(&c.seen, 0.99),
        c.cpu * 100.0
    );
    println!(
        "| … its parts, p50 / p99 (the watch event's delivery to a watch of the benchmark's own) | {} |",
        c.parts()
    );
    let (requested, absorbed, reads) = &burst;
    println!(
        "| {deleted} pods deleted at once ({} namespaces) | requested in {:.1} s, every verdict without them {:.1} s after the first request; one app read {} times meanwhile: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms |",
        doomed.len(),
        secs(*requested),
        secs(*absorbed),
        reads.len(),
        quantile(reads, 0.5),
        quantile(reads, 0.99),
        quantile(reads, 1.0)
    );
    match relisted {
        Some(took) => println!(
            "| relist after an API server restart | every watch back in {:.1} s; peak {relist_peak:.0} MiB ({:.2}× settled), {after_relist:.0} MiB after; the last verdicts served throughout: {served} |",
            secs(took),
            relist_peak / settled
        ),
        None => println!(
            "| API server restart | the watches resumed without a new list; peak {relist_peak:.0} MiB |"
        ),
    }
    println!();
    println!("Pods taken in, by 15 s window of the start:");
    println!();
    println!("| from | pods | per second | resident memory at its end | CPU |");
    println!("|---|---|---|---|---|");
    let mut from = Sample {
        at: Duration::ZERO,
        rss: 0.0,
        cpu: Duration::ZERO,
        pod_events: 0,
    };
    for s in &samples {
        if s.at - from.at >= Duration::from_secs(15) || std::ptr::eq(s, samples.last().unwrap()) {
            let taken = s.pod_events.saturating_sub(from.pod_events);
            let window = secs(s.at - from.at).max(0.001);
            let rate = taken as f64 / window;
            let busy = secs(s.cpu.saturating_sub(from.cpu)) / window * 100.0;
            println!(
                "| {:.0} s | {taken} | {rate:.0} | {:.0} MiB | {busy:.0} % |",
                secs(from.at),
                s.rss
            );
            from = *s;
        }
    }
    let result = json!({
        "shape": shape,
        "server_list_s": secs(listed_in),
        "derived_s": secs(derived),
        "rss_mib": rss, "settled_mib": settled, "peak_mib": peak, "allocated_mib": allocated,
        "cpu_s": secs(cpu_to_derive), "server_cpu_s": secs(server_cpu), "idle_cpu": idle,
        "all_apps_s": secs(all_apps), "one_app_ms": secs(one_app) * 1e3,
        "relist_s": relisted.map(secs), "relist_peak_mib": relist_peak,
        "churn_rate": churning.rate, "churn_p50_ms": quantile(&churning.seen, 0.5),
        "churn_p99_ms": quantile(&churning.seen, 0.99), "churn_write_p99_ms": quantile(&churning.writes, 0.99),
        "churn_delivered_p50_ms": quantile(&churning.delivered, 0.5),
        "churn_delivered_p99_ms": quantile(&churning.delivered, 0.99),
        "churn_after_delivery_p50_ms": quantile(&churning.after_delivery, 0.5),
        "churn_after_delivery_p99_ms": quantile(&churning.after_delivery, 0.99),
        "churn_read_p99_ms": quantile(&churning.reads, 0.99),
        "churn_derivation_mean_ms": churning.derivations.0,
        "churn_cpu": churning.cpu,
        "burst_deleted": deleted, "burst_absorbed_s": secs(burst.1),
        "burst_read_p99_ms": quantile(&burst.2, 0.99), "burst_read_max_ms": quantile(&burst.2, 1.0),
    });
    std::fs::write(
        dir.join("result.json"),
        serde_json::to_string_pretty(&result).unwrap(),
    )
    .unwrap();
    if keep {
        cluster.detach().unwrap();
        println!(
            "\nthe filled cluster is left up in {} (`--keep`)",
            dir.display()
        );
    } else {
        drop(cluster);
        let _ = std::fs::remove_file(&shape_file);
    }
}
