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
//! cargo xtask bench --scale --keep               # leave the filled cluster up…
//! cargo xtask bench --scale --keep               # …and measure it again
//! cargo xtask bench --scale --quick              # 2 000 pods (what CI runs)
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use verdict_testcluster::{Binaries, Cluster, Options};

// The tests' helpers: starting the binary, reading its memory.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

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

async fn client(kubeconfig: &Path) -> Client {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
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
    let pods = apps.iter().enumerate().flat_map(|(a, (ns, app))| {
        (0..shape.per_app).map(move |p| {
            let node = format!("n{}", (a * shape.per_app + p) % shape.nodes + 1);
            (ns.clone(), pod(ns, app, p, &node))
        })
    });
    let made = std::sync::atomic::AtomicUsize::new(0);
    futures_util::stream::iter(pods)
        .map(|(ns, pod)| {
            let (client, made) = (client.clone(), &made);
            async move {
                let api: Api<Pod> = Api::namespaced(client, &ns);
                create(&api, pod).await;
                let n = made.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n % 10_000 == 0 {
                    println!("  {n} pods made ({:.0} s)", started.elapsed().as_secs_f64());
                }
            }
        })
        .buffer_unordered(in_flight)
        .collect::<Vec<()>>()
        .await;
    println!(
        "  {} pods made in {:.0} s",
        shape.pods,
        started.elapsed().as_secs_f64()
    );
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

/// CPU time a process has used (user and system).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are the 14th and 15th fields; the two before `)` are
    // not in `fields`. Linux counts 100 ticks a second.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
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
    let mut cluster = match Cluster::attach(&dir) {
        Ok(cluster) if kept == Some(shape) => {
            println!("  the cluster kept in {} is used again", dir.display());
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
            let client = runtime.block_on(client(&cluster.kubeconfig()));
            runtime.block_on(fill(&client, shape));
            runtime.block_on(all_running(&client, shape.pods));
            std::fs::write(&shape_file, serde_json::to_string(&shape).unwrap()).unwrap();
            println!("  filled in {:.0} s", filling.elapsed().as_secs_f64());
            cluster
        }
    };
    let kubeconfig = cluster.kubeconfig();
    let (listed_in, listed_bytes) = server_list(&cluster, &dir);
    println!(
        "  the API server lists every pod from its watch cache in {:.1} s ({:.0} MB)",
        listed_in.as_secs_f64(),
        listed_bytes as f64 / 1e6
    );

    let data = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let (child, base) = support::spawn_verdict(
        &workspace.join("target/plugins"),
        data.path(),
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
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
    let sample = |readyz: &Value| Sample {
        at: started.elapsed(),
        rss: support::memory(pid).0,
        cpu: cpu(pid),
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
    let cpu_to_derive = cpu(pid);

    // Idle: settled for 30 s, then CPU over 60 s while the Leases renew.
    std::thread::sleep(Duration::from_secs(30));
    let (settled, _) = support::memory(pid);
    let idle_from = (Instant::now(), cpu(pid));
    std::thread::sleep(Duration::from_secs(60));
    let idle = (cpu(pid) - idle_from.1).as_secs_f64() / idle_from.0.elapsed().as_secs_f64();

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
    println!("| CPU to get there | {:.0} s |", secs(cpu_to_derive));
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
        "rss_mib": rss, "settled_mib": settled, "peak_mib": peak,
        "cpu_s": secs(cpu_to_derive), "idle_cpu": idle,
        "all_apps_s": secs(all_apps), "one_app_ms": secs(one_app) * 1e3,
        "relist_s": relisted.map(secs), "relist_peak_mib": relist_peak,
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
