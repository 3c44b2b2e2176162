//! The `verdict` binary following the Kubernetes API simulator over real
//! HTTP with the real `kube` client: verdicts follow the cluster as it
//! changes, survive cut watches and `410 Gone`, turn stale when the API
//! server goes away, and recover when it returns.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use verdict_sim::{Options, Simulator};

use crate::serve::Server;
use crate::support::wait_until;

/// Bound on every wait for a verdict to change.
pub const PATIENCE: Duration = Duration::from_secs(20);

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

pub fn deployment(replicas: i64, ready: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app.kubernetes.io/instance": "web"}},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready, "updatedReplicas": replicas}
    })
}

fn node(name: &str, ready: &str) -> Value {
    let taints = if ready == "True" {
        json!([])
    } else {
        json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
    };
    json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    })
}

/// A pod of `web`; `waiting` puts its container in that waiting reason.
pub fn pod(name: &str, waiting: Option<&str>) -> Value {
    let (state, ready) = match waiting {
        Some(reason) => (json!({"waiting": {"reason": reason}}), false),
        None => (
            json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
            true,
        ),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop",
            "labels": {"app.kubernetes.io/instance": "web", "pod-template-hash": "abc"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "u1", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "web", "image": "web:1"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{"name": "web", "image": "web:1", "imageID": "", "ready": ready, "restartCount": 0, "state": state}]}
    })
}

pub struct Cluster {
    simulator: Option<Simulator>,
    runtime: tokio::runtime::Runtime,
}

impl Cluster {
    pub fn start() -> Self {
        Self::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Self {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let simulator = runtime.block_on(Simulator::start(options)).unwrap();
        for object in [
            namespace("shop"),
            node("n1", "True"),
            deployment(1, 1),
            pod("web-1", None),
        ] {
            simulator.apply(object).unwrap();
        }
        Self {
            simulator: Some(simulator),
            runtime,
        }
    }

    pub fn sim(&self) -> &Simulator {
        self.simulator.as_ref().unwrap()
    }

    pub fn apply(&self, object: Value) {
        self.sim().apply(object).unwrap();
    }
}

/// Wait until the app's verdict satisfies `check`; panics with the last
/// verdict seen when it never does.
fn until(server: &Server, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    server.app_until("shop/web", what, PATIENCE, check)
}

/// The host following the cluster, with more flags, once it has judged
/// the cluster's app `shop/web` (its first derivation done): apps named
/// only by tasks asked after that are not judged until something about
/// them changes, so a test's restart of an app that does not exist is not
/// refused for it.
pub fn start_host(cluster: &Cluster, data: &Path, extra: &[&str]) -> Server {
    let server = start_host_now(cluster, data, extra);
    let judged = wait_until(PATIENCE, || server.get("/v1/apps/shop/web").0 == 200);
    assert!(
        judged.is_some(),
        "shop/web never judged: {}",
        server.get("/readyz").1
    );
    server
}

/// The host following the cluster, with more flags, as soon as it serves.
pub fn start_host_now(cluster: &Cluster, data: &Path, extra: &[&str]) -> Server {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let url = cluster.sim().url();
    let mut flags = vec!["--cluster-url", url.as_str()];
    flags.extend_from_slice(extra);
    Server::start_with(&plugins, data, &flags)
}

#[test]
fn verdicts_follow_the_cluster() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--stale-after-ms", "300"]);
    assert!(
        wait_until(PATIENCE, || server.get("/readyz").0 == 200).is_some(),
        "never ready: {}",
        server.get("/readyz").1
    );
    let running = until(&server, "running", |v| v["stable"] == "running");
    assert_eq!(running["ready_replicas"], 1);
    assert_eq!(running["stale"], false);
    assert_eq!(running["groups"][0]["status"], "running-healthy");

    // A change of the pod alone reaches its app's verdict.
    cluster.apply(pod("web-1", Some("ContainerCreating")));
    until(&server, "pod change", |v| {
        v["groups"][0]["reason"] == "ContainerCreating"
    });

    // A pod starts crash-looping.
    cluster.apply(deployment(1, 0));
    cluster.apply(pod("web-1", Some("CrashLoopBackOff")));
    let panic = until(&server, "panic", |v| v["stable"] == "panic");
    assert_eq!(panic["groups"][0]["reason"], "CrashLoopBackOff");

    // Scaling: fewer ready than expected is degraded, all ready is running.
    cluster.apply(pod("web-1", None));
    cluster.apply(deployment(3, 1));
    until(&server, "degraded", |v| {
        v["stable"] == "degraded" && v["expected_replicas"] == 3
    });
    cluster.apply(deployment(3, 3));
    until(&server, "running again", |v| v["stable"] == "running");

    // The node stops heartbeating: its pods are unknown.
    cluster.apply(node("n1", "Unknown"));
    until(&server, "unknown pod", |v| {
        v["groups"][0]["status"] == "unknown"
    });
    let (_, nodes) = server.get("/v1/nodes");
    assert_eq!(nodes["nodes"][0]["ready"], "Unknown");
    cluster.apply(node("n1", "True"));
    until(&server, "pod back", |v| {
        v["groups"][0]["status"] == "running-healthy"
    });

    // A cut connection and an expired version lose no update.
    cluster.sim().cut_watches();
    cluster.apply(deployment(2, 2));
    until(&server, "after a cut", |v| v["expected_replicas"] == 2);
    cluster.sim().store().compact();
    cluster.sim().cut_watches();
    cluster.apply(deployment(4, 4));
    until(&server, "after 410 Gone", |v| v["expected_replicas"] == 4);

    // Filters.
    let (_, listed) = server.get("/v1/apps?namespace=shop&status=running");
    assert_eq!(listed["apps"].as_array().unwrap().len(), 1);
    let (_, none) = server.get("/v1/apps?status=panic");
    assert!(none["apps"].as_array().unwrap().is_empty());
    // A status no rule gives is a typo, said as one (as a bad task phase is).
    let (code, bogus) = server.get("/v1/apps?status=bogus");
    assert_eq!(code, 422, "{bogus}");
    assert_eq!(bogus["error"]["field"], "status", "{bogus}");

    // The namespace goes: the app has not existed since.
    let namespaces = verdict_sim::resources::find("", "v1", "namespaces").unwrap();
    cluster
        .sim()
        .store()
        .delete(namespaces, "", "shop")
        .unwrap();
    let gone = until(&server, "not-existed", |v| v["stable"] == "not-existed");
    assert!(gone["groups"].as_array().unwrap().is_empty());
    // Known still, but gone: no status is forced on it.
    let (code, refused) = server.send(
        "PUT",
        "/v1/apps/shop/web/override",
        Some(r#"{"status": "running", "by": "ana", "reason": "keep"}"#),
    );
    assert_eq!(code, 404, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no longer exists")),
        "{refused}"
    );
    let (code, missing) = server.get("/v1/apps/shop/nothing");
    assert_eq!(
        (code, missing["error"]["code"].as_str()),
        (404, Some("no-such-app"))
    );
}

#[test]
fn a_server_that_refuses_streaming_lists_is_listed_page_by_page() {
    // An API server without the WatchList feature refuses a watch that
    // asks for its initial events: each kind is listed instead.
    let cluster = Cluster::start_with(Options {
        streaming_lists: false,
        ..Options::default()
    });
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &[]);
    let running = until(&server, "running", |v| v["stable"] == "running");
    assert_eq!(running["groups"][0]["status"], "running-healthy");
    let readyz = server.get("/readyz").1;
    assert_eq!(readyz["ready"], true, "{readyz}");
    // Asked once per watched kind (the node Leases are listed, not
    // watched), then never again.
    let refused = cluster.sim().streaming_lists_refused();
    assert!(refused >= 6, "{refused} refused");
    cluster.apply(pod("web-1", Some("CrashLoopBackOff")));
    until(&server, "a change after the list", |v| {
        v["groups"][0]["reason"] == "CrashLoopBackOff"
    });
    // A list again after 410 Gone, page by page too.
    cluster.sim().store().compact();
    cluster.sim().cut_watches();
    cluster.apply(deployment(2, 2));
    until(&server, "after 410 Gone", |v| v["expected_replicas"] == 2);
    assert_eq!(cluster.sim().streaming_lists_refused(), refused);
    assert_eq!(
        server.get("/readyz").1["watches"]["pods"]["failures"],
        0,
        "a refused streaming list is no failure of the watch"
    );
}

#[test]
fn no_app_is_judged_before_every_kind_is_listed() {
    // The namespaces' list comes 3 s after the others'.
    let cluster = Cluster::start_with(Options {
        slow_list: Some(("namespaces", Duration::from_secs(3))),
        ..Options::default()
    });
    let data = tempfile::tempdir().unwrap();
    let server = start_host_now(&cluster, data.path(), &[]);
    let watches = || server.get("/readyz").1["watches"].clone();
    let half = wait_until(PATIENCE, || {
        let w = watches();
        w["pods"]["synced"] == true && w["deployments"]["synced"] == true
    });
    assert!(half.is_some(), "{}", watches());
    assert_eq!(watches()["namespaces"]["synced"], false, "{}", watches());
    // Its pods seen but not its namespace, the app is not judged yet (it
    // would be judged not to exist), so a task asked now is admitted.
    let (code, missing) = server.get("/v1/apps/shop/web");
    assert_eq!(code, 404, "{missing}");
    let (code, task) = server.send(
        "POST",
        "/v1/tasks",
        Some(&json!({"app": "shop/web", "action": "restart"}).to_string()),
    );
    assert_eq!(code, 201, "{task}");
    let running = until(&server, "running", |v| v["stable"] == "running");
    assert_eq!(running["groups"][0]["status"], "running-healthy");
}

#[test]
fn verdicts_turn_stale_without_the_api_server_and_recover() {
    let mut cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--stale-after-ms", "300"]);
    until(&server, "running", |v| {
        v["stable"] == "running" && v["stale"] == false
    });

    let simulator = cluster.simulator.take().unwrap();
    let addr = simulator.addr();
    let store = simulator.stop();
    assert!(
        wait_until(PATIENCE, || server.get("/readyz").0 == 503).is_some(),
        "still ready without an API server"
    );
    let stale = until(&server, "stale", |v| v["stale"] == true);
    assert!(stale["observation_age_ms"].as_u64().unwrap() >= 300);
    assert_eq!(
        stale["stable"], "running",
        "the last verdict stays, marked stale"
    );

    // The API server returns with what it had, plus a change.
    let restarted = cluster
        .runtime
        .block_on(Simulator::start_with(
            Options {
                listen: addr,
                ..Options::default()
            },
            store,
        ))
        .unwrap();
    restarted.apply(deployment(2, 1)).unwrap();
    cluster.simulator = Some(restarted);
    let fresh = until(&server, "fresh again", |v| {
        v["stale"] == false && v["stable"] == "degraded"
    });
    assert!(fresh["observation_age_ms"].as_u64().unwrap() < 300);
    assert!(wait_until(PATIENCE, || server.get("/readyz").0 == 200).is_some());
}

#[test]
fn the_demo_cluster_plays_its_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("scenario.yaml");
    std::fs::write(
        &scenario,
        format!(
            "loop-every: 2s\nobjects:\n  - {}\n  - {}\n  - {}\nsteps:\n  - at: 300ms\n    apply:\n      - {}\n      - {}\n",
            namespace("shop"),
            deployment(1, 1),
            pod("web-1", None),
            deployment(1, 0),
            pod("web-1", Some("ImagePullBackOff")),
        ),
    )
    .unwrap();
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let server = Server::start_with(
        &plugins,
        dir.path(),
        &["--scenario", scenario.to_str().unwrap()],
    );
    // The scenario loops: running, then panic, then running again.
    until(&server, "running", |v| v["stable"] == "running");
    until(&server, "panic", |v| {
        v["stable"] == "panic" && v["groups"][0]["reason"] == "ImagePullBackOff"
    });
    until(&server, "running after the loop", |v| {
        v["stable"] == "running"
    });

    // The built-in demo serves its apps.
    let demo_data = tempfile::tempdir().unwrap();
    let demo = Server::start_with(&plugins, demo_data.path(), &["--demo"]);
    let listed = wait_until(PATIENCE, || {
        demo.get("/v1/apps").1["apps"]
            .as_array()
            .is_some_and(|a| a.len() >= 5)
    });
    assert!(listed.is_some(), "{}", demo.get("/v1/apps").1);

    // A broken scenario file stops the host with the reason.
    std::fs::write(&scenario, "steps:\n  - at: 5s\n  - at: 1s\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--scenario",
            scenario.to_str().unwrap(),
        ])
        .arg("--data-dir")
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("scenario"));
}

#[test]
fn a_rule_on_recent_restarts_fires_on_the_demo() {
    use crate::support::{default_plugin, example_plugin};
    // The restart-budget example as the status policy of the demo: its
    // crash-looping pod restarts as a real one does (a recent last
    // termination), so once it runs again it is over the budget.
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        example_plugin("restart-budget"),
        plugins.path().join("status.wasm"),
    )
    .unwrap();
    for world in ["failover", "admission"] {
        std::fs::copy(
            default_plugin(world),
            plugins.path().join(format!("{world}.wasm")),
        )
        .unwrap();
    }
    let data = tempfile::tempdir().unwrap();
    let demo = Server::start_with(plugins.path(), data.path(), &["--demo"]);
    // The scenario loops every minute; the pod recovers within it.
    demo.app_until(
        "shop/api",
        "over the restart budget",
        Duration::from_secs(90),
        |v| {
            v["stable"] == "degraded"
                && v["stable_reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("over the budget of 3"))
                && v["recheck_after"].is_string()
        },
    );
}

#[test]
fn the_binary_alone_serves_the_default_policies_it_carries() {
    // Started outside the repository, given no plugin folder.
    let away = tempfile::tempdir().unwrap();
    let serve = |data: &str, extra: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_verdict"));
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--demo",
                "--data-dir",
                data,
            ])
            .args(extra)
            .current_dir(away.path());
        Server::start_command(command)
    };
    let demo = serve("data", &[]);
    let plugins = demo.get("/v1/plugins").1;
    let listed = plugins["plugins"].as_array().unwrap();
    for world in ["status", "failover", "admission", "lifecycle"] {
        let plugin = listed
            .iter()
            .find(|p| p["name"] == world)
            .unwrap_or_else(|| panic!("no {world} plugin: {plugins}"));
        assert_eq!(plugin["active"], true, "{plugin}");
        assert_eq!(
            plugin["file"],
            format!("(built in)/{world}.wasm"),
            "{plugin}"
        );
        assert!(
            plugin["current"]["name"]
                .as_str()
                .unwrap()
                .starts_with("default-"),
            "{plugin}"
        );
    }
    // The demo's apps are judged and their tasks admitted.
    let judged = wait_until(PATIENCE, || {
        let apps = demo.get("/v1/apps").1;
        apps["apps"]
            .as_array()
            .is_some_and(|a| a.len() >= 5 && a.iter().all(|a| a["stable"].is_string()))
    });
    assert!(judged.is_some(), "{}", demo.get("/v1/apps").1);
    let (code, task) = demo.send(
        "POST",
        "/v1/tasks",
        Some(r#"{"app": "shop/web", "action": "restart", "requested-by": "ana"}"#),
    );
    assert!(code == 201 || code == 202, "{task}");
    assert!(!away.path().join("target").exists());
    drop(demo);
    // Asked for none, it serves none.
    let bare = serve("bare", &["--no-builtin-policies"]);
    let plugins = bare.get("/v1/plugins").1;
    assert_eq!(plugins["plugins"], serde_json::json!([]), "{plugins}");
}

#[test]
fn an_apps_own_health_check_enters_its_verdict() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU16, Ordering};

    let cluster = Cluster::start();
    // The app's health endpoint, answering what the test sets.
    let answer = Arc::new(AtomicU16::new(200));
    let served = Arc::clone(&answer);
    let listener = cluster
        .runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/health", listener.local_addr().unwrap());
    let endpoint = cluster.runtime.spawn(async move {
        let app = axum::Router::new().route(
            "/health",
            axum::routing::get(move || {
                let code = served.load(Ordering::Relaxed);
                async move { axum::http::StatusCode::from_u16(code).unwrap() }
            }),
        );
        let _ = axum::serve(listener, app).await;
    });
    let mut with_probe = deployment(1, 1);
    with_probe["metadata"]["annotations"] = json!({ "verdict.dev/health-url": url });
    cluster.apply(with_probe);

    let data = tempfile::tempdir().unwrap();
    let server = start_host(
        &cluster,
        data.path(),
        &["--probe-interval-ms", "50", "--probe-timeout-ms", "500"],
    );
    until(&server, "running with a passing check", |v| {
        v["stable"] == "running"
    });

    answer.store(503, Ordering::Relaxed);
    let failing = until(&server, "degraded", |v| v["stable"] == "degraded");
    let reason = failing["stable_reason"].as_str().unwrap();
    assert!(
        reason.contains("health check") && reason.contains("failing"),
        "{reason}"
    );

    endpoint.abort();
    let unreachable = until(&server, "panic", |v| v["stable"] == "panic");
    assert!(
        unreachable["stable_reason"]
            .as_str()
            .unwrap()
            .contains("unreachable"),
        "{unreachable}"
    );
}

#[test]
fn pod_usage_from_the_metrics_api_enters_the_verdict() {
    let cluster = Cluster::start();
    let mut limited = pod("web-1", None);
    limited["spec"]["containers"][0]["resources"] =
        json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    cluster.apply(limited);
    let metrics = |cpu: &str| {
        json!({
            "apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
            "metadata": {"name": "web-1", "namespace": "shop"},
            "containers": [{"name": "web", "usage": {"cpu": cpu, "memory": "100Mi"}}]
        })
    };
    cluster.apply(metrics("100m"));
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--metrics-interval-ms", "50"]);
    until(&server, "healthy at 10% CPU", |v| {
        v["groups"][0]["status"] == "running-healthy"
    });
    cluster.apply(metrics("950m"));
    let busy = until(&server, "overloaded", |v| {
        v["groups"][0]["status"] == "running-overloaded"
    });
    assert_eq!(
        busy["groups"][0]["message"],
        "container web uses 950m of 1000m CPU"
    );
}

#[test]
fn verdicts_that_are_not_derived_again_turn_stale() {
    let cluster = Cluster::start();
    let plugins = crate::support::plugin_folder(&["status", "failover", "admission"]);
    let data = tempfile::tempdir().unwrap();
    let url = cluster.sim().url();
    let server = Server::start_with(
        plugins.path(),
        data.path(),
        &[
            "--cluster-url",
            url.as_str(),
            "--stale-after-ms",
            "300",
            "--reload-debounce-ms",
            "50",
        ],
    );
    until(&server, "running", |v| {
        v["stable"] == "running" && v["stale"] == false
    });

    // The status policy goes: nothing is derived any more, and the
    // verdicts say so instead of claiming to be current.
    std::fs::remove_file(plugins.path().join("status.wasm")).unwrap();
    let unloaded = wait_until(PATIENCE, || {
        server.get("/readyz").1["status_policy"] == false
    });
    assert!(unloaded.is_some(), "{}", server.get("/readyz").1);
    cluster.apply(deployment(2, 1));
    let stale = until(&server, "stale without a policy", |v| v["stale"] == true);
    assert_eq!(
        stale["stable"], "running",
        "the last verdict stays, marked stale"
    );
    assert!(
        stale["observation_age_ms"].as_u64().unwrap() >= 300,
        "{stale}"
    );
    let (code, ready) = server.get("/readyz");
    assert_eq!(code, 503);
    assert!(ready["derive_error"].is_string(), "{ready}");

    // It comes back: derived again, current.
    std::fs::copy(
        crate::support::default_plugin("status"),
        plugins.path().join("status.wasm"),
    )
    .unwrap();
    let fresh = until(&server, "current again", |v| {
        v["stale"] == false && v["stable"] == "degraded"
    });
    assert!(
        fresh["observation_age_ms"].as_u64().unwrap() < 300,
        "{fresh}"
    );
}

#[test]
fn a_verdict_the_previous_version_gave_says_so() {
    let cluster = Cluster::start();
    cluster.apply(deployment(1, 1));
    cluster.apply(pod("web-1", None));
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        crate::support::default_plugin("status"),
        plugins.path().join("status.wasm"),
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let url = cluster.sim().url();
    let server = Server::start_with(plugins.path(), data.path(), &["--cluster-url", &url]);
    until(&server, "running", |v| {
        v["stable"] == "running" && v["fallback"].is_null()
    });
    // A new version that traps on an app of the batch: the version before
    // it answers for the batch, and each of its verdicts says so.
    std::fs::copy(
        crate::support::test_plugin("stamp-b"),
        plugins.path().join("status.wasm"),
    )
    .unwrap();
    let mut trap = deployment(1, 1);
    trap["metadata"]["name"] = json!("trap");
    trap["metadata"]["labels"] = json!({"app.kubernetes.io/instance": "trap"});
    cluster.apply(trap);
    let marked = until(&server, "marked as the previous version's", |v| {
        !v["fallback"].is_null()
    });
    assert!(
        marked["fallback"]["answered_by"]
            .as_str()
            .is_some_and(|a| a.starts_with("default-status@")),
        "{marked}"
    );
    assert!(
        marked["fallback"]["because"]
            .as_str()
            .is_some_and(|b| b.contains("stamp-b") || b.contains("unruly")),
        "{marked}"
    );
}
