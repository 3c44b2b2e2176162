//! Seed 002's delivery on the simulator, through the real binary: a
//! `VMReplicaSet` made from nothing goes through the whole instance machine
//! with every task carried out by step hooks — a real HTTP server on
//! 127.0.0.1 that the test starts — and KubeVirt's part played by the
//! simulator.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE};
use crate::support::wait_until;
use crate::support::{example_plugin, install_by_rename};

/// The step names of the default lifecycle policy.
pub use verdict::lifecycle::hooks::DEFAULT_STEPS as STEPS;

/// A step hook server on 127.0.0.1: every call is kept, and answered by
/// `answer` (a status code and a JSON body).
pub struct HookServer {
    pub url: String,
    pub calls: Arc<Mutex<Vec<Value>>>,
}

impl HookServer {
    pub fn start(answer: impl Fn(&Value) -> (u16, String) + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/step", listener.local_addr().unwrap());
        let calls = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&calls);
        let answer = Arc::new(answer);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (kept, answer) = (Arc::clone(&kept), Arc::clone(&answer));
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let line = line.trim_end();
                        if line.is_empty() {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let (code, text) = answer(&request);
                    kept.lock().unwrap().push(request);
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                        text.len()
                    );
                });
            }
        });
        Self { url, calls }
    }

    /// The steps called for an instance, in order, each once (a step asked
    /// again with its key counts once).
    pub fn steps_of(&self, instance: &str) -> Vec<String> {
        let mut seen = Vec::new();
        let mut keys = std::collections::BTreeSet::new();
        for call in self.calls.lock().unwrap().iter() {
            if call["instance"]["name"] == instance && keys.insert(call["key"].to_string()) {
                seen.push(call["step"].as_str().unwrap_or_default().to_string());
            }
        }
        seen
    }
}

/// A host delivering on the simulator, every step's hook a server that
/// answers done; `config` is more of its configuration.
pub struct Delivery {
    pub server: crate::serve::Server,
    pub hooks: HookServer,
    pub cluster: Cluster,
    _data: tempfile::TempDir,
}

pub fn delivering(config: &str) -> Delivery {
    delivering_with(config, |_| (200, DONE.into()))
}

/// A step hook's answer: done.
pub const DONE: &str = r#"{"status":"done"}"#;

/// A host delivering on the simulator, every step's hook answered by
/// `answer`.
pub fn delivering_with(
    config: &str,
    answer: impl Fn(&Value) -> (u16, String) + Send + Sync + 'static,
) -> Delivery {
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    delivering_from(&plugins, config, answer)
}

/// A host delivering on the simulator with the policies of the folder
/// `plugins`, every step's hook (the default machine's, and `smoke-test`)
/// answered by `answer`.
pub fn delivering_from(
    plugins: &std::path::Path,
    config: &str,
    answer: impl Fn(&Value) -> (u16, String) + Send + Sync + 'static,
) -> Delivery {
    let cluster = cluster();
    let hooks = HookServer::start(answer);
    let data = tempfile::tempdir().unwrap();
    let mut text = config.to_string();
    for step in STEPS.iter().chain(&["smoke-test"]) {
        // A hook the configuration names is left to it.
        if config.contains(&format!("[hooks.{step}]")) {
            continue;
        }
        text.push_str(&format!(
            "[hooks.{step}]\nurl = \"{}\"\ntimeout-seconds = 5\n",
            hooks.url
        ));
    }
    let path = data.path().join("verdict.toml");
    std::fs::write(&path, text).unwrap();
    let flags = [
        "--cluster-url",
        &cluster.sim().url(),
        "--config",
        path.to_str().unwrap(),
        "--vm-delivery",
    ];
    let server = crate::serve::Server::start_with(plugins, data.path(), &flags);
    Delivery {
        server,
        hooks,
        cluster,
        _data: data,
    }
}

/// The chart's CRD of `file`, as JSON.
fn crd(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/chart/verdict/crds")
        .join(file);
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The simulator with KubeVirt played, three ready nodes and the chart's
/// delivery CRDs.
pub fn cluster() -> Cluster {
    let cluster = Cluster::start_with(verdict_sim::Options {
        controller: Some(verdict_sim::CONTROLLER_TICK),
        kubevirt: true,
        ..Default::default()
    });
    for node in ["n2", "n3"] {
        cluster.apply(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "allocatable": {"cpu": "8", "memory": "32Gi"}}
        }));
    }
    cluster.apply(crd("vmreplicaset-crd.yaml"));
    cluster.apply(crd("vmdeployment-crd.yaml"));
    cluster.apply(crd("server-crd.yaml"));
    cluster
}

pub fn set(replicas: u32, environment: Value) -> Value {
    json!({
        "apiVersion": "verdict.dev/v1alpha1", "kind": "VMReplicaSet",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/instance": "web"}},
                "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
            },
            "environment": environment,
            "rollout": {"maxUnavailable": 2},
        }
    })
}

fn resource(
    cluster: &Cluster,
    group: &str,
    plural: &str,
) -> &'static verdict_sim::resources::Resource {
    let version = if group == "kubevirt.io" {
        "v1"
    } else {
        "v1alpha1"
    };
    cluster.sim().store().find(group, version, plural).unwrap()
}

/// Each instance of the set `web` by name: its Server's status.
pub fn instances(cluster: &Cluster) -> BTreeMap<String, Value> {
    instances_of(cluster, "web")
}

/// Each instance of the set `set` by name: its Server's status.
pub fn instances_of(cluster: &Cluster, set: &str) -> BTreeMap<String, Value> {
    let store = cluster.sim().store();
    store
        .list(resource(cluster, "verdict.dev", "servers"), Some("shop"))
        .0
        .into_iter()
        .filter(|server| server["metadata"]["labels"]["verdict.dev/vmreplicaset"] == set)
        .map(|server| {
            (
                server["metadata"]["name"].as_str().unwrap().to_string(),
                match &server["status"] {
                    Value::Null => json!({}),
                    status => status.clone(),
                },
            )
        })
        .collect()
}

#[test]
fn a_set_made_from_nothing_goes_through_every_stage_by_its_hooks() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));

    let serving = wait_until(PATIENCE * 2, || {
        let all = instances(cluster);
        // Serving, and its list done: no lock held.
        all.len() == 3
            && all
                .values()
                .all(|a| a["stage"] == "serving" && a.get("lock").is_none())
    });
    assert!(
        serving.is_some(),
        "never all serving: {:#?}",
        instances(cluster)
    );
    for (name, annotations) in instances(cluster) {
        assert_eq!(annotations["environmentText"], "jdk=21", "{name}");
        assert!(
            annotations.get("lock").is_none(),
            "{name}: a finished list holds no lock"
        );
        assert_eq!(
            hooks.steps_of(&name),
            [
                "install-environment",
                "health-check",
                "bind-monitoring",
                "attach-load-balancer"
            ],
            "{name}"
        );
    }
    let status = wait_until(PATIENCE, || {
        let set = cluster
            .sim()
            .store()
            .get(
                resource(cluster, "verdict.dev", "vmreplicasets"),
                "shop",
                "web",
            )
            .unwrap();
        set["status"]["ready"] == "3/3"
    });
    assert!(status.is_some());
}

#[test]
fn a_set_scaled_through_its_scale_subresource_makes_and_lets_go_of_instances() {
    let Delivery { cluster, .. } = &delivering("");
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 2, || all_serving_with(cluster, 1, "jdk=21")).is_some(),
        "{:#?}",
        instances(cluster)
    );
    // `kubectl scale vmrs web --replicas=3`: the Scale read, then written.
    let url = format!(
        "{}/apis/verdict.dev/v1alpha1/namespaces/shop/vmreplicasets/web/scale",
        cluster.sim().url()
    );
    let http = reqwest::blocking::Client::new();
    // (A write on the version read is refused, 409, when the controller
    // wrote the set meanwhile: read again and write again, as kubectl
    // does.)
    let scaled = wait_until(PATIENCE, || {
        let mut scale: Value = http.get(&url).send().unwrap().json().unwrap();
        assert_eq!(scale["kind"], "Scale", "{scale}");
        scale["spec"]["replicas"] = json!(3);
        let answer = http.put(&url).json(&scale).send().unwrap();
        match answer.status().as_u16() {
            200 => true,
            409 => false,
            other => panic!("{other}: {}", answer.text().unwrap()),
        }
    });
    assert!(scaled.is_some(), "never scaled");
    assert!(
        wait_until(PATIENCE * 3, || all_serving_with(cluster, 3, "jdk=21")).is_some(),
        "{:#?}",
        instances(cluster)
    );
    let scale = || -> Value { http.get(&url).send().unwrap().json().unwrap() };
    let counted = wait_until(PATIENCE, || scale()["status"]["replicas"] == 3);
    assert!(counted.is_some(), "{}", scale());
    assert_eq!(
        scale()["status"]["selector"],
        "verdict.dev/vmreplicaset=web"
    );
    // Down again, by a merge patch of the Scale: the set lets two go.
    let answer = http
        .patch(&url)
        .header("content-type", "application/merge-patch+json")
        .body(json!({"spec": {"replicas": 1}}).to_string())
        .send()
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(
        wait_until(PATIENCE * 3, || all_serving_with(cluster, 1, "jdk=21")).is_some(),
        "{:#?}",
        instances(cluster)
    );
}

/// Whether the set `web` has `n` instances, each serving with
/// `environment` and no list running.
fn all_serving_with(cluster: &Cluster, n: usize, environment: &str) -> bool {
    let all = instances(cluster);
    all.len() == n
        && all.values().all(|a| {
            a["stage"] == "serving"
                && a.get("lock").is_none()
                && a["environmentText"] == environment
        })
}

#[test]
fn an_environment_change_takes_at_most_max_unavailable_out_of_service_at_once() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    cluster.apply(set(5, json!([{"name": "jdk", "version": "21"}])));
    let settled = |environment: &str| all_serving_with(cluster, 5, environment);
    assert!(
        wait_until(PATIENCE * 3, || settled("jdk=21")).is_some(),
        "never all serving: {:#?}",
        instances(cluster)
    );

    cluster.apply(set(5, json!([{"name": "jdk", "version": "25"}])));
    let mut most_out = 0;
    let done = wait_until(PATIENCE * 3, || {
        let out = instances(cluster)
            .values()
            .filter(|a| {
                !matches!(
                    a["stage"].as_str(),
                    Some("ready" | "gray-release" | "serving")
                )
            })
            .count();
        most_out = most_out.max(out);
        settled("jdk=25")
    });
    assert!(done.is_some(), "never rolled: {:#?}", instances(cluster));
    assert!(
        (1..=2).contains(&most_out),
        "{most_out} instances were out of service at once"
    );
    for name in instances(cluster).keys() {
        let steps = hooks.steps_of(name);
        assert_eq!(
            steps.iter().filter(|s| *s == "install-environment").count(),
            2,
            "{name}: {steps:?}"
        );
    }
}

/// The safe rate is the set's to give: each Server's spec holds its
/// target and whether it may leave service for it now, written by the
/// set's controller; each instance moves on by its own controller on that
/// word alone. A person who gives an instance leave by hand does not move
/// it: the set's plan is written back and the instance waits its turn.
#[test]
fn an_instance_leaves_service_on_its_sets_word_alone() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    cluster.apply(set(2, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 3, || all_serving_with(cluster, 2, "jdk=21")).is_some(),
        "never all serving: {:#?}",
        instances(cluster)
    );
    let servers = resource(cluster, "verdict.dev", "servers");
    let server = |name: &str| cluster.sim().store().get(servers, "shop", name).unwrap();
    // At rest: nothing to leave service for; no deployment, the code is
    // no one's to hold back.
    assert_eq!(server("web-0")["spec"]["mayDisrupt"], false);
    assert_eq!(server("web-0")["spec"]["released"], true);

    // A change, paused: every instance is given the new target, and none
    // may leave service for it.
    let mut paused = set(2, json!([{"name": "jdk", "version": "25"}]));
    paused["spec"]["paused"] = json!(true);
    cluster.apply(paused);
    let planned = wait_until(PATIENCE, || {
        ["web-0", "web-1"].iter().all(|name| {
            let spec = &server(name)["spec"];
            spec["environment"][0]["version"] == "25" && spec["mayDisrupt"] == false
        })
    });
    assert!(planned.is_some(), "{:#?}", server("web-0"));
    let steps = hooks.steps_of("web-0");
    let generation = server("web-0")["metadata"]["generation"].as_i64().unwrap();

    // A person gives web-0 leave by hand: the set's word is written back
    // (a later generation), and web-0 never left service.
    cluster
        .sim()
        .store()
        .patch(
            servers,
            "shop",
            "web-0",
            &json!({"spec": {"mayDisrupt": true}}),
        )
        .unwrap();
    let back = wait_until(PATIENCE, || {
        let now = server("web-0");
        now["metadata"]["generation"].as_i64() > Some(generation + 1)
            && now["spec"]["mayDisrupt"] == false
    });
    assert!(back.is_some(), "never written back: {:#?}", server("web-0"));
    assert_eq!(instances(cluster)["web-0"]["stage"], "serving");
    assert_eq!(
        hooks.steps_of("web-0"),
        steps,
        "web-0 moved on a word not its set's"
    );

    // The set unpaused: both roll over, on the set's word.
    cluster.apply(set(2, json!([{"name": "jdk", "version": "25"}])));
    assert!(
        wait_until(PATIENCE * 3, || all_serving_with(cluster, 2, "jdk=25")).is_some(),
        "never rolled: {:#?}",
        instances(cluster)
    );
}

#[test]
fn a_surge_rolls_an_environment_out_without_running_fewer_instances_than_wanted() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    let surging = |environment: Value| {
        let mut set = set(3, environment);
        set["spec"]["rollout"] = json!({"maxUnavailable": 0, "maxSurge": 1});
        set
    };
    cluster.apply(surging(json!([{"name": "jdk", "version": "21"}])));
    // Each instance of the set: available (in service, its machine ready,
    // not going), and its environment.
    let machines = || -> Vec<(bool, String)> {
        let store = cluster.sim().store();
        let vms = resource(cluster, "kubevirt.io", "virtualmachines");
        store
            .list(resource(cluster, "verdict.dev", "servers"), Some("shop"))
            .0
            .into_iter()
            .filter(|server| server["metadata"]["labels"]["verdict.dev/vmreplicaset"] == "web")
            .map(|server| {
                let a = &server["status"];
                let name = server["metadata"]["name"].as_str().unwrap_or_default();
                let vm = store.get(vms, "shop", name).unwrap_or_default();
                let serving = matches!(
                    a["stage"].as_str(),
                    Some("ready" | "gray-release" | "serving")
                ) && server["metadata"]["deletionTimestamp"].is_null()
                    && vm["metadata"]["deletionTimestamp"].is_null()
                    && vm["status"]["ready"] == true;
                let environment = a["environmentText"].as_str().unwrap_or_default();
                (serving, environment.to_string())
            })
            .collect()
    };
    let settled = |environment: &str| all_serving_with(cluster, 3, environment);
    assert!(
        wait_until(PATIENCE * 3, || settled("jdk=21")).is_some(),
        "never all serving: {:?}",
        machines()
    );

    cluster.apply(surging(json!([{"name": "jdk", "version": "25"}])));
    // Seen at every look: never fewer than 3 in service, never more than 4
    // machines.
    let (mut fewest, mut most) = (3, 3);
    let done = wait_until(PATIENCE * 4, || {
        let all = machines();
        fewest = fewest.min(all.iter().filter(|(serving, _)| *serving).count());
        most = most.max(all.len());
        settled("jdk=25")
    });
    assert!(done.is_some(), "never rolled: {:?}", machines());
    assert_eq!(fewest, 3, "fewer than wanted were in service at once");
    assert_eq!(most, 4, "the surge is one machine, and it was made");
    let gone = wait_until(PATIENCE, || vms_of(cluster, "web") == 3);
    assert!(gone.is_some(), "the surge goes once the change is out");
    // The newest went, as the docs say: the surge, made with the change —
    // not an older instance deleted right after it was updated.
    let left: Vec<String> = instances(cluster).into_keys().collect();
    assert_eq!(left, ["web-0", "web-1", "web-2"]);
    let installed_25: std::collections::BTreeSet<String> = hooks
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| {
            c["step"] == "install-environment" && c["params"].to_string().contains("\"25\"")
        })
        .map(|c| {
            c["instance"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(
        installed_25.contains("web-3"),
        "the surge was made with the change: {installed_25:?}"
    );
}

/// The failover policy's clocks, short: a node out of contact is unknown
/// after 1.5 s, offline after 20 s; one that returns is trusted after 2 s.
const FAILOVER: &str = "
[failover]
every-ms = 100

[settings.failover]
grace-ms = 1500
offline-after-ms = 20000
stabilize-ms = 2000
";

fn set_node_ready(cluster: &Cluster, node: &str, status: &str) {
    let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let nodes = cluster.sim().store().find("", "v1", "nodes").unwrap();
    cluster
        .sim()
        .store()
        .patch(
            nodes,
            "",
            node,
            &json!({"status": {"conditions": [{"type": "Ready", "status": status,
                "lastHeartbeatTime": at, "lastTransitionTime": at}]}}),
        )
        .unwrap();
}

/// A set of one made and serving; the stage of its instance, when asked.
fn one_serving(cluster: &Cluster) -> impl Fn() -> String + '_ {
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    let stage = || {
        instances(cluster)
            .get("web-0")
            .and_then(|a| a["stage"].as_str().map(String::from))
            .unwrap_or_default()
    };
    assert!(
        wait_until(PATIENCE * 2, || stage() == "serving").is_some(),
        "never serving: {:#?}",
        instances(cluster)
    );
    stage
}

#[test]
fn an_instance_whose_node_is_lost_for_a_while_is_unknown_then_checked_again() {
    let Delivery { cluster, hooks, .. } = &delivering(FAILOVER);
    let stage = one_serving(cluster);
    let vmis = resource(cluster, "kubevirt.io", "virtualmachineinstances");
    let vmi = cluster.sim().store().get(vmis, "shop", "web-0").unwrap();
    let node = vmi["status"]["nodeName"].as_str().unwrap().to_string();

    set_node_ready(cluster, &node, "Unknown");
    assert!(
        wait_until(PATIENCE, || stage() == "unknown").is_some(),
        "never unknown: {:#?}",
        instances(cluster)
    );
    set_node_ready(cluster, &node, "True");
    let back = wait_until(PATIENCE * 2, || {
        stage() == "serving" && instances(cluster)["web-0"].get("lock").is_none()
    });
    assert!(back.is_some(), "never back: {:#?}", instances(cluster));
    assert_eq!(
        hooks.steps_of("web-0"),
        [
            "install-environment",
            "health-check",
            "bind-monitoring",
            "attach-load-balancer",
            // Lost: load balancer and monitoring let go.
            "detach-load-balancer",
            "pause-monitoring",
            // Back: the environment checked again, then the health check.
            "install-environment",
            "health-check",
            "bind-monitoring",
            "attach-load-balancer",
        ]
    );
}

/// An instance whose node is NotReady but still within failover's grace
/// (the lifecycle policy waits it out) counts as unavailable at once: a
/// rollout allowed one instance out takes no other out beside it, and
/// installs nothing on the instance whose machine may not be reached; once
/// the node is Ready again the rollout goes on.
#[test]
fn an_instance_on_a_node_not_ready_within_its_grace_counts_as_unavailable() {
    let Delivery { cluster, hooks, .. } = &delivering(
        "
[failover]
every-ms = 100

[settings.failover]
grace-ms = 600000
offline-after-ms = 1200000
stabilize-ms = 1000
",
    );
    let mut one_out = set(3, json!([{"name": "jdk", "version": "21"}]));
    one_out["spec"]["rollout"] = json!({"maxUnavailable": 1});
    cluster.apply(one_out.clone());
    assert!(
        wait_until(PATIENCE * 3, || settled_in(cluster, "serving", "") == 3).is_some(),
        "{:#?}",
        stages(cluster)
    );
    let vmis = resource(cluster, "kubevirt.io", "virtualmachineinstances");
    let vmi = cluster.sim().store().get(vmis, "shop", "web-0").unwrap();
    let node = vmi["status"]["nodeName"].as_str().unwrap().to_string();
    set_node_ready(cluster, &node, "False");
    // Its Server says it is not ready, though the policy waits the node out.
    let not_ready = wait_until(PATIENCE * 2, || {
        instances(cluster)["web-0"]["ready"] == false
    });
    assert!(not_ready.is_some(), "{:#?}", instances(cluster));
    assert_eq!(instances(cluster)["web-0"]["stage"], "serving");

    one_out["spec"]["environment"] = json!([{"name": "jdk", "version": "25"}]);
    cluster.apply(one_out);
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    let seen = wait_until(PATIENCE * 2, || {
        let set = cluster.sim().store().get(sets, "shop", "web").unwrap();
        set["status"]["observedGeneration"] == set["metadata"]["generation"]
    });
    assert!(seen.is_some(), "the set's change was never reconciled");
    let out: Vec<(String, Value)> = instances(cluster)
        .into_iter()
        .filter(|(_, status)| status["stage"] != "serving" || status.get("lock").is_some())
        .map(|(name, status)| (name, status["stage"].clone()))
        .collect();
    assert!(
        out.is_empty(),
        "taken out beside an instance whose node is not ready: {out:?}"
    );
    assert!(
        hooks
            .steps_of("web-0")
            .iter()
            .filter(|s| *s == "install-environment")
            .count()
            == 1,
        "installed on an instance whose node is not ready: {:?}",
        hooks.steps_of("web-0")
    );

    set_node_ready(cluster, &node, "True");
    let rolled = wait_until(PATIENCE * 4, || all_serving_with(cluster, 3, "jdk=25"));
    assert!(rolled.is_some(), "{:#?}", instances(cluster));
}

/// The `VMDeployment` of the set `web`, at `version`, with `steps`.
pub fn deployment(version: &str, steps: Value) -> Value {
    json!({
        "apiVersion": "verdict.dev/v1alpha1", "kind": "VMDeployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicaSet": "web",
            "code": {"artifact": "registry.example/shop/web", "version": version},
            "steps": steps,
        }
    })
}

/// Change the deployment's code and steps as `kubectl edit` does: its
/// spec only (a whole object applied would replace the status the
/// controller keeps, which the real server's status subresource keeps).
fn redeploy(cluster: &Cluster, version: &str, steps: Value) {
    let spec = deployment(version, steps)["spec"].clone();
    cluster
        .sim()
        .store()
        .patch(
            resource(cluster, "verdict.dev", "vmdeployments"),
            "shop",
            "web",
            &json!({ "spec": spec }),
        )
        .unwrap();
}

/// The code each instance has, by name.
fn codes(cluster: &Cluster) -> BTreeMap<String, String> {
    instances(cluster)
        .into_iter()
        .map(|(name, a)| {
            let code = a["code"].as_str().unwrap_or_default().to_string();
            (name, code)
        })
        .collect()
}

/// Whether every one of `n` instances serves `code` with no list running.
fn all_serve(cluster: &Cluster, n: usize, code: &str) -> bool {
    let all = instances(cluster);
    all.len() == n
        && all
            .values()
            .all(|a| a["stage"] == "serving" && a["code"] == code && a.get("lock").is_none())
}

/// Why a resource is `Degraded`, as its condition says (empty when it is
/// not).
pub fn degraded_of(object: &Value) -> String {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Degraded" && c["status"] == "True")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The rollout of the set `web`, as `GET /v1/vm-delivery/shop/web` shows it.
fn rollout(server: &crate::serve::Server) -> Value {
    server.get("/v1/vm-delivery/shop/web").1["rollout"].clone()
}

fn post(server: &crate::serve::Server, path: &str, body: Value) -> (u16, Value) {
    server.send("POST", path, Some(&body.to_string()))
}

/// The deployment keeps the revisions it released; a rollback sends its
/// code back to one of them, as `kubectl rollout undo` does.
#[test]
fn a_rollback_goes_back_to_a_released_revision_of_the_history() {
    let Delivery {
        cluster, server, ..
    } = &delivering("");
    cluster.apply(set(2, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));
    let deployments = resource(cluster, "verdict.dev", "vmdeployments");
    let history = || -> Vec<(String, String)> {
        cluster
            .sim()
            .store()
            .get(deployments, "shop", "web")
            .unwrap()["status"]["history"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let text = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (text("code"), text("revision"))
            })
            .collect()
    };
    // Every instance serves `code`, and the history has released `codes`.
    let settled = |code: &str, codes: &[&str]| {
        all_serve(cluster, 2, code)
            && history()
                .iter()
                .map(|(c, _)| c.as_str())
                .collect::<Vec<_>>()
                == codes
    };
    assert!(
        wait_until(PATIENCE * 3, || settled("1.0", &["1.0"])).is_some(),
        "{:#?} {:?}",
        codes(cluster),
        history()
    );
    let rollback = "/v1/vm-delivery/shop/web/rollback";
    // Nothing released before 1.0: nothing to roll back to.
    let (code, body) = post(server, rollback, json!({"by": "erin"}));
    assert_eq!(code, 409, "{body}");
    redeploy(cluster, "2.0", json!([]));
    assert!(
        wait_until(PATIENCE * 3, || settled("2.0", &["1.0", "2.0"])).is_some(),
        "{:#?} {:?}",
        codes(cluster),
        history()
    );
    let (code, body) = post(server, rollback, json!({"by": "erin", "revision": "nope"}));
    assert_eq!(code, 404, "{body}");
    assert!(body.to_string().contains("was not released"), "{body}");

    // Back to the last revision before 2.0: 1.0, delivered again.
    let first = history()[0].1.clone();
    let (code, body) = post(server, rollback, json!({"by": "erin", "why": "latency"}));
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["action"], "rollback", "{body}");
    let object = cluster
        .sim()
        .store()
        .get(deployments, "shop", "web")
        .unwrap();
    assert_eq!(object["spec"]["code"]["version"], "1.0", "{object:#}");
    assert!(
        object["metadata"]["annotations"]["verdict.dev/rollback"]
            .as_str()
            .is_some_and(|a| a.contains("erin") && a.contains("latency")),
        "{object:#}"
    );
    assert!(
        wait_until(PATIENCE * 3, || settled("1.0", &["2.0", "1.0"])).is_some(),
        "{:#?} {:?}",
        codes(cluster),
        history()
    );
    // The same revision, released again.
    assert_eq!(history()[1].1, first);
    let (code, body) = post(server, rollback, json!({"by": "erin", "revision": first}));
    assert_eq!(code, 409, "{body}");
}

#[test]
fn without_a_history_the_task_log_is_what_the_servers_sum_up_and_says_so() {
    let Delivery {
        cluster, server, ..
    } = &delivering("no-history = true\n");
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 2, || all_serving_with(cluster, 1, "jdk=21")).is_some(),
        "{:#?}",
        instances(cluster)
    );
    let (code, page) = server.get("/v1/vm-delivery/shop/web/instances/web-0/log?limit=1000");
    assert_eq!(code, 200, "{page}");
    let entries = page["entries"].as_array().unwrap();
    // The list in progress (or the last, finished) comes whole from its
    // Server; the lists before it as the Server sums them up.
    assert!(entries.len() >= 3, "{page:#}");
    assert!(
        entries[1..].iter().all(|e| e.get("steps").is_none()),
        "{page:#}"
    );
    let initializing = entries
        .iter()
        .find(|e| e["stage"] == "initializing")
        .expect("initializing summed up");
    assert_eq!(initializing["outcome"], "succeeded", "{page:#}");
    let why = page["summed-up"].as_str().unwrap_or_default();
    assert!(
        why.contains("summed up") && why.contains("--no-history"),
        "{page:#}"
    );
}

#[test]
fn a_gray_release_waits_at_its_gate_until_a_person_approves_it() {
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering("");
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));
    assert!(
        wait_until(PATIENCE * 3, || all_serve(cluster, 3, "1.0")).is_some(),
        "1.0 never served: {:#?}",
        instances(cluster)
    );
    let completed = wait_until(PATIENCE, || rollout(server)["phase"] == "Completed");
    assert!(completed.is_some(), "{:#}", rollout(server));

    redeploy(
        cluster,
        "2.0",
        json!([{"instances": 1}, {"pause": {}}, {"instances": "100%"}]),
    );
    let at_gate = wait_until(PATIENCE * 2, || rollout(server)["at-gate"] == true);
    assert!(
        at_gate.is_some(),
        "never at the gate: {:#}",
        rollout(server)
    );
    let seen = rollout(server);
    assert_eq!(seen["step"], "2/3", "{seen:#}");
    assert_eq!(seen["stable-code"], "1.0", "{seen:#}");
    // The first step gave the new code to one instance, and the gate holds
    // the rest.
    let new = |codes: &BTreeMap<String, String>| codes.values().filter(|c| *c == "2.0").count();
    assert_eq!(new(&codes(cluster)), 1, "{:#?}", codes(cluster));

    // A request without who is refused; a promote or approve on another set
    // finds nothing.
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/approve",
        json!({"by": " "}),
    );
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (422, Some("invalid-field")),
        "{body}"
    );
    let (code, _) = post(
        server,
        "/v1/vm-delivery/shop/nothing/approve",
        json!({"by": "alice"}),
    );
    assert_eq!(code, 404);
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/instances/web-2/skip",
        json!({"by": "alice"}),
    );
    assert_eq!(code, 409, "nothing runs on web-2, held at the gate: {body}");

    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/approve",
        json!({"by": "alice", "why": "the canary's error rate is flat"}),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["request"]["step"], 1, "{body}");
    assert_eq!(body["on"], json!(["VMDeployment/shop/web"]));

    assert!(
        wait_until(PATIENCE * 3, || all_serve(cluster, 3, "2.0")).is_some(),
        "2.0 never rolled out: {:#?}",
        codes(cluster)
    );
    let done = wait_until(PATIENCE, || rollout(server)["phase"] == "Completed");
    assert!(done.is_some(), "{:#}", rollout(server));
    let seen = rollout(server);
    let approval = &seen["actions"][0];
    assert_eq!(
        (
            &approval["action"],
            &approval["by"],
            &approval["why"],
            &approval["step"]
        ),
        (
            &json!("approve"),
            &json!("alice"),
            &json!("the canary's error rate is flat"),
            &json!(1)
        ),
        "{seen:#}"
    );
    // The approval is an Event on the deployment too.
    let approved = wait_until(PATIENCE, || {
        let url = format!(
            "{}/apis/events.k8s.io/v1/namespaces/shop/events",
            cluster.sim().url()
        );
        let list: Value = reqwest::blocking::get(url).unwrap().json().unwrap();
        list["items"].as_array().into_iter().flatten().any(|e| {
            e["regarding"]["kind"] == "VMDeployment"
                && e["reason"] == "RolloutApproved"
                && e["note"]
                    == "alice approved the gate of the rollout of 2.0: the canary's error rate is flat"
        })
    });
    assert!(approved.is_some(), "no RolloutApproved Event");
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/approve",
        json!({"by": "alice"}),
    );
    assert_eq!(code, 409, "no gate any more: {body}");
    for name in ["web-0", "web-1", "web-2"] {
        assert_eq!(
            hooks
                .steps_of(name)
                .iter()
                .filter(|s| *s == "deploy-code")
                .count(),
            2,
            "{name}: {:?}",
            hooks.steps_of(name)
        );
    }

    // The task log, paged: newest first, each list's steps kept.
    let (code, page) = server.get("/v1/vm-delivery/shop/web/instances/web-0/log?limit=2");
    assert_eq!(code, 200, "{page}");
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert!(entries[0]["number"].as_u64() > entries[1]["number"].as_u64());
    let before = page["next-before"].as_u64().expect("more pages");
    let (_, rest) = server.get(&format!(
        "/v1/vm-delivery/shop/web/instances/web-0/log?limit=1000&before={before}"
    ));
    let all: Vec<Value> = entries
        .iter()
        .chain(rest["entries"].as_array().unwrap())
        .cloned()
        .collect();
    let deploys: Vec<&Value> = all.iter().filter(|e| e["stage"] == "deploying").collect();
    assert_eq!(deploys.len(), 2, "{all:#?}");
    // The newest deploy took it out of service first; every step is kept.
    let steps: Vec<(&str, &str)> = deploys[0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["task"].as_str().unwrap(), s["result"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [
            ("detach-load-balancer", "done"),
            ("pause-monitoring", "done"),
            ("deploy-code", "done")
        ]
    );
    assert!(rest["next-before"].is_null());
    assert!(rest["summed-up"].is_null(), "{rest:#}");
    // The Server sums its finished lists up: the steps above came from the
    // task log, not from its status.
    let store = cluster.sim().store();
    let web0 = store
        .get(resource(cluster, "verdict.dev", "servers"), "shop", "web-0")
        .unwrap();
    let summed: Vec<&Value> = web0["status"]["lists"].as_array().unwrap().iter().collect();
    assert!(
        !summed.is_empty() && summed.len() <= 5,
        "{:#}",
        web0["status"]
    );
    assert!(
        summed.iter().all(|l| l.get("steps").is_none()),
        "{:#}",
        web0["status"]
    );
    let newest_deploy = summed
        .iter()
        .find(|l| l["stage"] == "deploying")
        .expect("a deploy summed up");
    assert_eq!(newest_deploy["number"], deploys[0]["number"]);

    // The metrics count instances by stage, rollouts by phase, hook calls.
    let text = reqwest::blocking::get(format!("{}/metrics", server.base))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        text.contains("verdict_vm_delivery_instances{stage=\"serving\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("verdict_vm_delivery_rollouts{phase=\"Completed\"} 1"),
        "{text}"
    );
    // The lists the instances finished are counted kept in the task log,
    // none lost.
    let kept = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    assert!(
        kept("verdict_history_task_lists_total ").is_some_and(|n| n + 1 >= all.len() as u64),
        "{text}"
    );
    assert_eq!(kept("verdict_history_task_lists_lost_total "), Some(0));
    assert!(
        text.contains("verdict_vm_delivery_hook_calls_total{step=\"deploy-code\"} 6"),
        "{text}"
    );
}

#[test]
fn a_failed_step_stops_the_rollout_until_a_person_forces_the_stage() {
    let failed_once = Arc::new(Mutex::new(false));
    let failing = Arc::clone(&failed_once);
    let Delivery {
        cluster, server, ..
    } = &delivering_with("", move |call| {
        let mut failed = failing.lock().unwrap();
        if call["step"] == "deploy-code" && call["instance"]["name"] == "web-1" && !*failed {
            *failed = true;
            return (
                200,
                r#"{"status":"failed","message":"artifact not found"}"#.into(),
            );
        }
        (200, DONE.into())
    });
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));

    let degraded = wait_until(PATIENCE * 3, || rollout(server)["phase"] == "Degraded");
    assert!(degraded.is_some(), "never degraded: {:#}", rollout(server));
    let seen = rollout(server);
    assert!(
        seen["waiting"]
            .as_str()
            .unwrap_or_default()
            .contains("web-1"),
        "{seen:#}"
    );
    let stage = |name: &str| instances(cluster)[name]["stage"].clone();
    assert!(
        wait_until(PATIENCE, || stage("web-1") == "failed").is_some(),
        "{:#?}",
        instances(cluster)
    );

    // The operator fixed the cause, and sets the stage: the machine goes on
    // from there, and the rollout with it.
    let (code, body) = force(server, "web-1", "deploying", "artifact uploaded");
    assert_eq!(code, 200, "{body}");
    assert!(
        wait_until(PATIENCE * 3, || all_serve(cluster, 3, "1.0")).is_some(),
        "never all serving: {:#?}",
        instances(cluster)
    );
    let done = wait_until(PATIENCE, || rollout(server)["phase"] == "Completed");
    assert!(done.is_some(), "{:#}", rollout(server));

    let (_, page) = server.get("/v1/vm-delivery/shop/web/instances/web-1/log?limit=1000");
    let entries = page["entries"].as_array().unwrap();
    let failed = entries
        .iter()
        .find(|e| e["outcome"] == "failed")
        .unwrap_or_else(|| panic!("{entries:#?}"));
    assert_eq!(failed["steps"][0]["result"], "failed");
    assert_eq!(failed["steps"][0]["message"], "artifact not found");
    assert!(
        entries.iter().any(|e| e["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("forced by bob: artifact uploaded")),
        "{entries:#?}"
    );
    // The override is taken once: the instance stays serving under it.
    let (code, _) = post(
        server,
        "/v1/vm-delivery/shop/web/instances/web-1/retry",
        json!({"by": "bob"}),
    );
    assert_eq!(code, 409, "nothing failed any more");
}

#[test]
fn a_failed_instance_is_retried_and_an_aborted_rollout_goes_back_to_the_stable_code() {
    let fail = Arc::new(Mutex::new(true));
    let failing = Arc::clone(&fail);
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering_with("", move |call| {
        if call["step"] == "deploy-code"
            && call["params"]["version"] == "2.0"
            && *failing.lock().unwrap()
        {
            return (200, r#"{"status":"failed","message":"disk full"}"#.into());
        }
        (200, DONE.into())
    });
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));
    assert!(
        wait_until(PATIENCE * 3, || all_serve(cluster, 3, "1.0")).is_some(),
        "1.0 never served: {:#?}",
        instances(cluster)
    );
    redeploy(cluster, "2.0", json!([{"instances": 1}, {"pause": {}}]));
    let degraded = wait_until(PATIENCE * 2, || rollout(server)["phase"] == "Degraded");
    assert!(degraded.is_some(), "never degraded: {:#}", rollout(server));
    // Its status, the set's and a warning Event on the set name the
    // instance and the step it failed at.
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    let deployments = resource(cluster, "verdict.dev", "vmdeployments");
    let named = wait_until(PATIENCE, || {
        let store = cluster.sim().store();
        degraded_of(&store.get(sets, "shop", "web").unwrap()).contains("web-0 at deploy-code")
            && degraded_of(&store.get(deployments, "shop", "web").unwrap())
                .contains("web-0 at deploy-code failed")
    });
    assert!(
        named.is_some(),
        "{:#}\n{:#}",
        cluster.sim().store().get(sets, "shop", "web").unwrap()["status"],
        cluster
            .sim()
            .store()
            .get(deployments, "shop", "web")
            .unwrap()["status"]
    );
    let events_of_set = || -> Vec<Value> {
        let url = format!(
            "{}/apis/events.k8s.io/v1/namespaces/shop/events",
            cluster.sim().url()
        );
        let list: Value = reqwest::blocking::get(url).unwrap().json().unwrap();
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["regarding"]["kind"] == "VMReplicaSet" && e["regarding"]["name"] == "web")
            .cloned()
            .collect()
    };
    let warned = wait_until(PATIENCE, || {
        events_of_set().iter().any(|e| {
            e["type"] == "Warning"
                && e["reason"] == "ListFailed"
                && e["note"] == "web-0: deploying failed at deploy-code: disk full"
        })
    });
    assert!(warned.is_some(), "{:#?}", events_of_set());
    // Its Server's conditions say it: not ready, degraded at the step.
    let conditions = instances(cluster)["web-0"]["conditions"].clone();
    let condition = |kind: &str| {
        conditions
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(condition("Ready")["status"], "False", "{conditions:#}");
    assert_eq!(condition("Degraded")["status"], "True", "{conditions:#}");
    assert_eq!(
        condition("Degraded")["message"],
        "deploying failed at deploy-code: disk full",
        "{conditions:#}"
    );
    // The instance's Server has it too (`kubectl describe server web-0`).
    let url = format!(
        "{}/apis/events.k8s.io/v1/namespaces/shop/events",
        cluster.sim().url()
    );
    let all: Value = reqwest::blocking::get(url).unwrap().json().unwrap();
    let on_server = all["items"].as_array().into_iter().flatten().find(|e| {
        e["regarding"]["kind"] == "Server"
            && e["regarding"]["name"] == "web-0"
            && e["reason"] == "ListFailed"
    });
    let on_server = on_server.expect("no Event on the Server");
    assert_eq!(
        on_server["related"]["kind"], "VMReplicaSet",
        "{on_server:#}"
    );

    // Retried with the cause fixed: the failed list runs again.
    *fail.lock().unwrap() = false;
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/retry",
        json!({"by": "carol", "why": "disk freed"}),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["on"], json!(["Server/shop/web-0"]), "{body}");
    let at_gate = wait_until(PATIENCE * 2, || rollout(server)["at-gate"] == true);
    assert!(
        at_gate.is_some(),
        "never at the gate: {:#}",
        rollout(server)
    );
    assert_eq!(codes(cluster)["web-0"], "2.0");
    let retried = wait_until(PATIENCE, || {
        events_of_set().iter().any(|e| {
            e["reason"] == "StageForced"
                && e["note"].as_str().is_some_and(|n| {
                    n.starts_with("web-0 enters") && n.contains("retried by carol")
                })
        })
    });
    assert!(retried.is_some(), "{:#?}", events_of_set());

    // Aborted at the gate: the instance that got 2.0 goes back to 1.0.
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/abort",
        json!({"by": "carol", "why": "latency"}),
    );
    assert_eq!(code, 200, "{body}");
    assert!(
        wait_until(PATIENCE * 3, || all_serve(cluster, 3, "1.0")
            && rollout(server)["phase"] == "Aborted")
        .is_some(),
        "never back: {:#?} {:#}",
        codes(cluster),
        rollout(server)
    );
    let deployed: Vec<String> = hooks
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c["instance"]["name"] == "web-0" && c["step"] == "deploy-code")
        .map(|c| {
            c["params"]["version"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(deployed, ["1.0", "2.0", "2.0", "1.0"]);
    let (code, _) = post(
        server,
        "/v1/vm-delivery/shop/web/abort",
        json!({"by": "carol"}),
    );
    assert_eq!(code, 409, "an aborted rollout is not aborted again");
}

/// The clean-up holds every instance: a Server whose finalizer a person
/// took off gets it back from its controller (kube-runtime's finalizer
/// helper), so that deleted later it still runs its clean-up before it
/// and its machine go.
#[test]
fn a_server_whose_finalizer_was_taken_off_gets_it_back_and_is_still_cleaned_up() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 2, || all_serving_with(cluster, 1, "jdk=21")).is_some(),
        "{:#?}",
        instances(cluster)
    );
    let (servers, machines) = (
        resource(cluster, "verdict.dev", "servers"),
        resource(cluster, "kubevirt.io", "virtualmachines"),
    );
    let finalizers = || {
        cluster.sim().store().get(servers, "shop", "web-0").unwrap()["metadata"]["finalizers"]
            .clone()
    };
    assert_eq!(finalizers(), json!(["verdict.dev/cleanup"]));
    cluster
        .sim()
        .store()
        .patch(
            servers,
            "shop",
            "web-0",
            &json!({"metadata": {"finalizers": null}}),
        )
        .unwrap();
    let back = wait_until(PATIENCE, || finalizers() == json!(["verdict.dev/cleanup"]));
    assert!(back.is_some(), "never put back: {}", finalizers());

    // The set scaled to none: web-0 runs its clean-up, then it goes, with
    // its machine.
    cluster.apply(set(0, json!([{"name": "jdk", "version": "21"}])));
    let gone = wait_until(PATIENCE * 2, || {
        let store = cluster.sim().store();
        store.get(servers, "shop", "web-0").is_err()
            && store.get(machines, "shop", "web-0").is_err()
    });
    assert!(gone.is_some(), "held for ever: {:#?}", instances(cluster));
    let steps = hooks.steps_of("web-0");
    assert_eq!(
        steps[steps.len() - 3..],
        ["detach-load-balancer", "pause-monitoring", "delete-machine"],
        "{steps:?}"
    );
}

#[test]
fn a_deleted_instance_is_held_until_its_clean_up_ends_and_a_stuck_step_can_be_skipped() {
    // The machine's deletion hangs (the hook keeps answering running).
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering_with("", |call| {
        match call["step"].as_str() {
        Some("delete-machine") => (
            200,
            r#"{"status":"running","message":"the hypervisor does not answer","progress":10,"retryAfterSeconds":1}"#.into(),
        ),
        _ => (200, DONE.into()),
    }
    });
    cluster.apply(set(2, json!([{"name": "jdk", "version": "21"}])));
    let serving = || {
        let all = instances(cluster);
        all.len() == 2
            && all
                .values()
                .all(|a| a["stage"] == "serving" && a.get("lock").is_none())
    };
    assert!(
        wait_until(PATIENCE * 2, serving).is_some(),
        "{:#?}",
        instances(cluster)
    );

    let machines = resource(cluster, "kubevirt.io", "virtualmachines");
    cluster
        .sim()
        .store()
        .delete(machines, "shop", "web-1")
        .unwrap();
    let held = wait_until(PATIENCE, || {
        hooks.steps_of("web-1").last().map(String::as_str) == Some("delete-machine")
    });
    assert!(held.is_some(), "{:?}", hooks.steps_of("web-1"));
    // Held by the finalizer, its status says which step holds it.
    let vm = cluster
        .sim()
        .store()
        .get(machines, "shop", "web-1")
        .unwrap();
    assert!(vm["metadata"]["deletionTimestamp"].is_string(), "{vm:#}");
    let web1 = || {
        let (_, view) = server.get("/v1/vm-delivery/shop/web");
        view["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["name"] == "web-1")
            .cloned()
            .unwrap_or_default()
    };
    // The hook's answer is taken by the controller's next reconcile.
    let recorded = wait_until(PATIENCE, || web1()["progress"] == 10);
    assert!(recorded.is_some(), "{:#}", web1());
    let web1 = web1();
    assert_eq!(web1["stage"], "deleting", "{web1:#}");
    assert!(web1["deleting"].as_bool().unwrap());
    assert_eq!(web1["list"]["task"], "delete-machine", "{web1:#}");
    assert_eq!(web1["progress"], 10, "{web1:#}");
    assert_eq!(
        hooks.steps_of("web-1")[4..],
        ["detach-load-balancer", "pause-monitoring", "delete-machine"]
    );

    // A skip of a step the person did not see is refused; of the stuck
    // one, done: the finalizer goes last, and the machine with it.
    let skip = "/v1/vm-delivery/shop/web/instances/web-1/skip";
    let (code, body) = post(server, skip, json!({"by": "dave", "task": "health-check"}));
    assert_eq!(code, 409, "{body}");
    let (code, body) = post(
        server,
        skip,
        json!({"by": "dave", "why": "the hypervisor is gone", "task": "delete-machine"}),
    );
    assert_eq!(code, 200, "{body}");
    let gone = wait_until(PATIENCE, || {
        cluster
            .sim()
            .store()
            .get(machines, "shop", "web-1")
            .is_err()
    });
    assert!(gone.is_some(), "still held");
    // The set was short of one while web-1 was held, and made another
    // through the whole machine.
    assert!(
        wait_until(PATIENCE * 2, serving).is_some(),
        "{:#?}",
        instances(cluster)
    );
    assert!(!instances(cluster).contains_key("web-1"));
}

#[test]
fn an_instance_named_offline_is_drained_and_deleted_and_not_replaced_and_a_smaller_set_lets_go() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));
    let settled = |names: &[&str]| {
        let all = instances(cluster);
        all.keys().map(String::as_str).collect::<Vec<_>>() == names
            && all
                .values()
                .all(|a| a["stage"] == "serving" && a.get("lock").is_none())
    };
    assert!(
        wait_until(PATIENCE * 2, || settled(&["web-0", "web-1", "web-2"])).is_some(),
        "{:#?}",
        instances(cluster)
    );
    let mut offline = set(3, json!([{"name": "jdk", "version": "21"}]));
    offline["spec"]["offline"] = json!(["web-1"]);
    cluster.apply(offline.clone());
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    assert!(
        wait_until(PATIENCE * 3, || settled(&["web-0", "web-2"])).is_some(),
        "{:#?}\nthe set: {:#}",
        instances(cluster),
        cluster.sim().store().get(sets, "shop", "web").unwrap()
    );
    assert_eq!(
        hooks.steps_of("web-1")[4..],
        // Drained, then cleaned up as it is deleted.
        ["detach-load-balancer", "pause-monitoring", "delete-machine"]
    );

    // Two replicas less the one offline: the newest of the rest goes.
    offline["spec"]["replicas"] = json!(2);
    cluster.apply(offline);
    assert!(
        wait_until(PATIENCE * 2, || settled(&["web-0"])).is_some(),
        "{:#?}",
        instances(cluster)
    );
    let status = wait_until(PATIENCE, || {
        cluster.sim().store().get(sets, "shop", "web").unwrap()["status"]["ready"] == "1/1"
    });
    assert!(
        status.is_some(),
        "{:#}",
        cluster.sim().store().get(sets, "shop", "web").unwrap()
    );
}

/// Instances named offline are out of the replica count: with two of
/// four named offline and another deleted by hand, the set makes one in
/// its place and never takes a serving instance out "to make room".
#[test]
fn instances_named_offline_do_not_count_and_no_serving_instance_makes_room() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    let settled = |names: &[&str]| {
        let all = instances(cluster);
        all.keys().map(String::as_str).collect::<Vec<_>>() == names
            && all
                .values()
                .all(|a| a["stage"] == "serving" && a.get("lock").is_none())
    };
    cluster.apply(set(4, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 2, || settled(&[
            "web-0", "web-1", "web-2", "web-3"
        ]))
        .is_some(),
        "{:#?}",
        instances(cluster)
    );
    let mut offline = set(4, json!([{"name": "jdk", "version": "21"}]));
    offline["spec"]["offline"] = json!(["web-1", "web-2"]);
    cluster.apply(offline);
    assert!(
        wait_until(PATIENCE * 3, || settled(&["web-0", "web-3"])).is_some(),
        "{:#?}",
        instances(cluster)
    );
    let serving_steps = hooks.steps_of("web-3").len();

    // web-0 deleted by hand: the set is short of one, makes web-4 (no
    // name of those offline), and leaves web-3 serving throughout.
    let machines = resource(cluster, "kubevirt.io", "virtualmachines");
    cluster
        .sim()
        .store()
        .delete(machines, "shop", "web-0")
        .unwrap();
    assert!(
        wait_until(PATIENCE * 3, || settled(&["web-3", "web-4"])).is_some(),
        "{:#?}",
        instances(cluster)
    );
    assert_eq!(
        hooks.steps_of("web-3").len(),
        serving_steps,
        "a step was asked of the serving web-3: {:?}",
        hooks.steps_of("web-3")
    );
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    let ready = wait_until(PATIENCE, || {
        cluster.sim().store().get(sets, "shop", "web").unwrap()["status"]["ready"] == "2/2"
    });
    assert!(
        ready.is_some(),
        "{:#}",
        cluster.sim().store().get(sets, "shop", "web").unwrap()
    );
}

#[test]
fn an_instance_lost_with_its_node_is_repaired_by_failover_and_goes_through_the_whole_machine() {
    // Failover's clocks short, its repairs carried out; enough nodes that
    // losing one is not a storm that holds every action.
    let config =
        crate::failover::CONFIG.replacen("[failover]\n", "[failover]\nenforce = true\n", 1);
    let Delivery {
        cluster,
        hooks,
        server,
        ..
    } = &delivering(&config);
    for n in ["n4", "n5", "n6"] {
        cluster.apply(crate::failover::node(n));
    }
    let stage = one_serving(cluster);
    let vmis = resource(cluster, "kubevirt.io", "virtualmachineinstances");
    let node_of = || {
        cluster
            .sim()
            .store()
            .get(vmis, "shop", "web-0")
            .ok()
            .and_then(|vmi| vmi["status"]["nodeName"].as_str().map(String::from))
    };
    let lost = node_of().expect("web-0 runs on a node");
    set_node_ready(cluster, &lost, "Unknown");
    // Repaired: fenced, its instance deleted and started on a healthy node,
    // where it goes through the whole machine again.
    let repaired = wait_until(PATIENCE * 3, || {
        stage() == "serving"
            && node_of().is_some_and(|n| n != lost)
            && instances(cluster)["web-0"].get("lock").is_none()
    });
    assert!(
        repaired.is_some(),
        "never repaired: {:#?} on {:?}; failover: {:#}",
        instances(cluster),
        node_of(),
        server.get("/v1/failover").1
    );
    // Out of contact, it was let go of; repaired, the whole machine again.
    let (_, log) = server.get("/v1/vm-delivery/shop/web/instances/web-0/log?limit=1000");
    let stages: Vec<&str> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    let lost_at = stages
        .iter()
        .position(|s| *s == "unknown")
        .expect("unknown");
    assert!(
        stages[lost_at..].ends_with(&["initializing", "ready", "serving"])
            && !stages.contains(&"failed"),
        "{stages:?}"
    );
    // Said to be repaired, from which node to which, and its Server shows
    // the node it runs on now.
    let now_on = node_of().unwrap();
    let said = format!("(repaired: moved from {lost} to {now_on})");
    assert!(
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"].as_str().is_some_and(|r| r.ends_with(&said))),
        "no list says {said}: {log:#}"
    );
    assert_eq!(instances(cluster)["web-0"]["node"], now_on.as_str());
    // Its environment installed again on the new machine.
    let steps = hooks.steps_of("web-0");
    let lost_at = steps
        .iter()
        .position(|s| s == "detach-load-balancer")
        .unwrap();
    assert!(
        steps[lost_at..].contains(&"install-environment".to_string()),
        "{steps:?}"
    );
}

/// Two instances of a set on one lost node: each is repaired (one after
/// the other), neither waits for the other to leave the node first, and
/// both serve again on healthy nodes.
#[test]
fn two_instances_lost_with_one_node_are_both_repaired() {
    let config =
        crate::failover::CONFIG.replacen("[failover]\n", "[failover]\nenforce = true\n", 1);
    let Delivery {
        cluster, server, ..
    } = &delivering(&config);
    cluster.apply(set(4, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 3, || settled_in(cluster, "serving", "") == 4).is_some(),
        "{:#?}",
        stages(cluster)
    );
    // Room elsewhere, and enough nodes that losing one is no storm.
    for n in ["n4", "n5", "n6"] {
        cluster.apply(crate::failover::node(n));
    }
    let vmis = resource(cluster, "kubevirt.io", "virtualmachineinstances");
    let nodes = || -> BTreeMap<String, String> {
        cluster
            .sim()
            .store()
            .list(vmis, Some("shop"))
            .0
            .iter()
            .filter_map(|vmi| {
                Some((
                    vmi["metadata"]["name"].as_str()?.to_string(),
                    vmi["status"]["nodeName"].as_str()?.to_string(),
                ))
            })
            .collect()
    };
    let placed = nodes();
    let mut by_node: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (instance, node) in &placed {
        by_node.entry(node).or_default().push(instance);
    }
    let (lost, on_it) = by_node
        .into_iter()
        .find(|(_, on)| on.len() >= 2)
        .unwrap_or_else(|| panic!("four instances on three nodes: {placed:?}"));
    let (lost, on_it): (String, Vec<String>) = (lost.clone(), on_it.into_iter().cloned().collect());
    set_node_ready(cluster, &lost, "Unknown");
    let repaired = wait_until(PATIENCE * 4, || {
        let now = nodes();
        let all = instances(cluster);
        on_it.iter().all(|name| {
            now.get(name).is_some_and(|n| *n != lost)
                && all
                    .get(name)
                    .is_some_and(|a| a["stage"] == "serving" && a.get("lock").is_none())
        })
    });
    assert!(
        repaired.is_some(),
        "{on_it:?} on {lost} never both repaired: {:?} {:#?}; failover: {:#}",
        nodes(),
        stages(cluster),
        server.get("/v1/failover").1
    );
}

#[test]
fn a_set_that_scales_down_on_a_lost_instance_takes_it_offline_instead_of_repairing_it() {
    let config =
        crate::failover::CONFIG.replacen("[failover]\n", "[failover]\nenforce = true\n", 1);
    let Delivery {
        cluster, server, ..
    } = &delivering(&config);
    for n in ["n4", "n5", "n6"] {
        cluster.apply(crate::failover::node(n));
    }
    let mut shrinking = set(2, json!([{"name": "jdk", "version": "21"}]));
    shrinking["spec"]["lostInstance"] = json!("scale-down");
    cluster.apply(shrinking);
    let serving = |n: usize| {
        let all = instances(cluster);
        all.len() == n && all.values().all(|a| a["stage"] == "serving")
    };
    assert!(
        wait_until(PATIENCE * 3, || serving(2)).is_some(),
        "never serving: {:#?}",
        instances(cluster)
    );
    let vmis = resource(cluster, "kubevirt.io", "virtualmachineinstances");
    let store = cluster.sim().store();
    let node_of = |name: &str| {
        store.get(vmis, "shop", name).unwrap()["status"]["nodeName"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let lost = node_of("web-0");
    // The instances on that node (one or both, as the simulator placed them).
    let on_lost: Vec<String> = ["web-0", "web-1"]
        .into_iter()
        .filter(|name| node_of(name) == lost)
        .map(String::from)
        .collect();
    set_node_ready(cluster, &lost, "Unknown");
    // Failover's repair marks each instance's Server lost: drained, its
    // machine deleted, its Server left offline, and the set makes no other
    // — its spec untouched.
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    let vms = resource(cluster, "kubevirt.io", "virtualmachines");
    let servers = resource(cluster, "verdict.dev", "servers");
    let shrunk = wait_until(PATIENCE * 3, || {
        let all = instances(cluster);
        let serving = all.values().filter(|a| a["stage"] == "serving").count();
        all.len() == 2
            && serving == 2 - on_lost.len()
            && on_lost.iter().all(|name| {
                all.get(name).is_some_and(|a| a["stage"] == "offline")
                    && store.get(vms, "shop", name).is_err()
            })
    });
    assert!(
        shrunk.is_some(),
        "{on_lost:?} never taken offline: {:#?}; failover: {:#}",
        instances(cluster),
        server.get("/v1/failover").1
    );
    assert!(
        store.get(sets, "shop", "web").unwrap()["spec"]["offline"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "failover wrote the set's spec"
    );
    for name in &on_lost {
        let mark = store.get(servers, "shop", name).unwrap()["metadata"]["annotations"]
            ["verdict.dev/lost"]
            .clone();
        let mark: Value = serde_json::from_str(mark.as_str().unwrap_or("null")).unwrap();
        assert_eq!(mark["node"], lost.as_str(), "{name}: {mark}");
    }
    let (_, set_view) = server.get("/v1/vm-delivery/shop/web");
    assert_eq!(set_view["replicas"], 2, "{set_view:#}");
    let offline = set_view["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["stage"] == "offline")
        .count();
    assert_eq!(offline, on_lost.len(), "{set_view:#}");
    // The repair's task says what it did.
    let task = |server: &crate::serve::Server| {
        let (_, failover) = server.get("/v1/failover");
        let taken = failover["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["node"] == lost.as_str())
            .map(|n| n["taken"]["repair:VirtualMachineInstance/shop/web-0"]["task"].clone())
            .unwrap_or_default();
        server
            .get(&format!("/v1/tasks/{}", taken.as_str().unwrap_or("none")))
            .1
    };
    let said = wait_until(PATIENCE, || {
        task(server).to_string().contains("web-0 was taken offline")
    });
    assert!(said.is_some(), "{:#}", task(server));
}

#[test]
fn a_deployment_that_cannot_be_carried_out_says_why_in_its_status() {
    let Delivery { cluster, .. } = &delivering("");
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));
    let mut nowhere = deployment("1.0", json!([]));
    nowhere["metadata"]["name"] = json!("nowhere");
    nowhere["spec"]["replicaSet"] = json!("nothing");
    cluster.apply(nowhere);
    let deployments = resource(cluster, "verdict.dev", "vmdeployments");
    // Made later than the one delivering already.
    assert!(
        wait_until(PATIENCE * 2, || all_serve(cluster, 1, "1.0")).is_some(),
        "{:#?}",
        instances(cluster)
    );
    let mut second = deployment("2.0", json!([]));
    second["metadata"]["name"] = json!("second");
    cluster.apply(second);
    let degraded = |name: &str, words: &str| {
        let status = cluster
            .sim()
            .store()
            .get(deployments, "shop", name)
            .unwrap()["status"]
            .clone();
        status["phase"] == "Degraded"
            && status["conditions"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "Degraded"
                        && c["status"] == "True"
                        && c["message"].as_str().unwrap_or_default().contains(words)
                })
            })
    };
    let said = wait_until(PATIENCE, || {
        degraded("nowhere", "no VMReplicaSet nothing in namespace shop")
            && degraded(
                "second",
                "VMDeployment web targets VMReplicaSet web already",
            )
    });
    assert!(
        said.is_some(),
        "{:#}",
        json!(cluster.sim().store().list(deployments, Some("shop")).0)
    );
    // The one that targets the set first goes on delivering.
    assert!(all_serve(cluster, 1, "1.0"), "{:#?}", instances(cluster));
}

#[test]
fn a_leader_killed_mid_rollout_hands_over_and_no_step_runs_twice() {
    use crate::replicas::Group;
    let cluster = &cluster();
    crate::tasks::define_tasks(cluster);
    // Each step runs a while: asked first, it is under way; asked again
    // (by the same key), it is done.
    let seen = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let answered = Arc::clone(&seen);
    let hooks = HookServer::start(move |call| {
        let first = answered.lock().unwrap().insert(call["key"].to_string());
        match first {
            true => (
                200,
                r#"{"status":"running","progress":50,"retryAfterSeconds":1}"#.into(),
            ),
            false => (200, DONE.into()),
        }
    });
    let folder = tempfile::tempdir().unwrap();
    let config = folder.path().join("verdict.toml");
    let mut text = String::new();
    for step in STEPS {
        text.push_str(&format!("[hooks.{step}]\nurl = \"{}\"\n", hooks.url));
    }
    std::fs::write(&config, text).unwrap();
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let url = cluster.sim().url();
    let mut group = Group::start(
        &plugins,
        &["--cluster-url", &url],
        "verdict-system",
        2,
        &["--config", config.to_str().unwrap(), "--vm-delivery"],
    );
    let first = group.leader();
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));

    // Killed while its lists run: a lock is held and a step under way.
    let under_way = wait_until(PATIENCE * 2, || {
        instances(cluster)
            .values()
            .filter(|a| a["stage"] == "ready" && a.get("lock").is_some())
            .count()
            >= 1
    });
    assert!(under_way.is_some(), "{:#?}", instances(cluster));
    group.kill(first);
    let next = group.leader();
    assert_ne!(next, first);

    let serving = wait_until(PATIENCE * 3, || {
        let all = instances(cluster);
        all.len() == 3
            && all
                .values()
                .all(|a| a["stage"] == "serving" && a.get("lock").is_none())
    });
    assert!(serving.is_some(), "{:#?}", instances(cluster));
    // Every step of every instance ran once, by one key, across the
    // handover (a key asked again is the same step).
    for name in ["web-0", "web-1", "web-2"] {
        assert_eq!(
            hooks.steps_of(name),
            [
                "install-environment",
                "health-check",
                "bind-monitoring",
                "attach-load-balancer"
            ],
            "{name}"
        );
    }
}

#[test]
fn a_set_adopts_the_vms_its_selector_names_and_takes_them_through_the_machine() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    // Two VMs made before the set: one free, one another controller owns.
    cluster.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "someone-else", "namespace": "shop"}}));
    let maps = cluster.sim().store().find("", "v1", "configmaps").unwrap();
    let uid = cluster
        .sim()
        .store()
        .get(maps, "shop", "someone-else")
        .unwrap()["metadata"]["uid"]
        .clone();
    for (name, owner) in [("legacy-a", None), ("legacy-b", Some("someone-else"))] {
        let mut vm = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": "shop", "labels": {"tier": "legacy"}},
            "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
        });
        if let Some(owner) = owner {
            vm["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1",
                "kind": "ConfigMap", "name": owner, "uid": uid, "controller": true}]);
        }
        cluster.apply(vm);
    }
    let mut adopting = set(2, json!([{"name": "jdk", "version": "21"}]));
    adopting["spec"]["selector"] = json!({"matchLabels": {"tier": "legacy"}});
    cluster.apply(adopting);
    let settled = wait_until(PATIENCE * 2, || {
        let all = instances(cluster);
        all.keys().map(String::as_str).collect::<Vec<_>>() == ["legacy-a", "web-0"]
            && all
                .values()
                .all(|a| a["stage"] == "serving" && a.get("lock").is_none())
    });
    assert!(settled.is_some(), "{:#?}", instances(cluster));
    // Adopted: labelled, owned and held by the clean-up like its own.
    let machines = resource(cluster, "kubevirt.io", "virtualmachines");
    let adopted = cluster
        .sim()
        .store()
        .get(machines, "shop", "legacy-a")
        .unwrap();
    // Its Server owns it, and the set its Server.
    assert_eq!(adopted["metadata"]["ownerReferences"][0]["kind"], "Server");
    assert_eq!(
        adopted["metadata"]["annotations"]["verdict.dev/server"],
        "legacy-a"
    );
    let server = cluster
        .sim()
        .store()
        .get(
            resource(cluster, "verdict.dev", "servers"),
            "shop",
            "legacy-a",
        )
        .unwrap();
    assert_eq!(
        server["metadata"]["ownerReferences"][0]["kind"],
        "VMReplicaSet"
    );
    assert_eq!(
        adopted["metadata"]["finalizers"],
        json!(["verdict.dev/cleanup"])
    );
    assert_eq!(hooks.steps_of("legacy-a")[0], "install-environment");
    let other = cluster
        .sim()
        .store()
        .get(machines, "shop", "legacy-b")
        .unwrap();
    assert!(
        other["metadata"]["labels"]
            .get("verdict.dev/vmreplicaset")
            .is_none()
    );
}

/// The task names of a Server status's list in progress.
pub fn list_tasks(status: &Value) -> Vec<&str> {
    status["list"]["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect()
}

/// Each Kubernetes Event of the namespace `shop` on the simulator.
fn shop_events(cluster: &Cluster) -> Vec<Value> {
    let url = format!(
        "{}/apis/events.k8s.io/v1/namespaces/shop/events",
        cluster.sim().url()
    );
    let all: Value = reqwest::blocking::get(url).unwrap().json().unwrap();
    all["items"].as_array().cloned().unwrap_or_default()
}

/// A Server's status is its controller's: a person who writes it (here its
/// stage to `serving` while the code is being deployed, as `kubectl patch
/// server --subresource=status` does) has it put back and said in a warning
/// Event, and nothing the write claimed is taken (no traffic, no rollout
/// completed). A person forces a stage through the spec instead: the list in
/// progress ends once its step answers, superseded with an outcome, and the
/// policy's list runs from where the instance is — the checks before any
/// traffic, the load balancer detached before a reinstall.
#[test]
fn a_status_written_by_hand_is_put_back_and_a_stage_is_forced_through_the_spec() {
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let holding = Arc::clone(&hold);
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering_with("", move |call| {
        if call["step"] == "deploy-code" && holding.load(std::sync::atomic::Ordering::SeqCst) {
            return (200, r#"{"status":"running","retryAfterSeconds":1}"#.into());
        }
        (200, DONE.into())
    });
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));
    let servers = resource(cluster, "verdict.dev", "servers");
    let web0 = || {
        cluster
            .sim()
            .store()
            .get(servers, "shop", "web-0")
            .unwrap_or(Value::Null)
    };
    let deploying = wait_until(PATIENCE * 3, || {
        web0()["status"]["list"]["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "deploy-code"))
            && web0()["status"]["stage"] == "deploying"
            && hooks.steps_of("web-0").contains(&"deploy-code".to_string())
    });
    assert!(deploying.is_some(), "{:#}", web0());

    // Written by hand, as `kubectl edit` would (on no version): the
    // fields of web-0's status `fields` names.
    let by_hand = |fields: Value| {
        let mut edited = web0();
        for (field, value) in fields.as_object().unwrap() {
            edited["status"][field] = value.clone();
        }
        edited["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        cluster
            .sim()
            .store()
            .replace(servers, "shop", "web-0", edited)
            .unwrap();
    };
    // Serving and ready, mid-deploy.
    let ours = web0()["status"].clone();
    by_hand(json!({"stage": "serving", "ready": true}));
    let put_back = wait_until(PATIENCE * 2, || {
        let status = web0()["status"].clone();
        status["stage"] == "deploying"
            && status["ready"] == false
            && status["list"]["number"] == ours["list"]["number"]
            && status["list"]["outcome"] == "running"
    });
    assert!(put_back.is_some(), "never put back: {:#}", web0());
    let said = wait_until(PATIENCE, || {
        shop_events(cluster).iter().any(|e| {
            e["type"] == "Warning"
                && e["reason"] == "StatusRestored"
                && e["regarding"]["name"] == "web-0"
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.contains("stage deploying → serving"))
        })
    });
    assert!(said.is_some(), "{:#?}", shop_events(cluster));
    // A task list written by hand that is no list (its schema takes any
    // object): that Server reads as a problem of its own — the Servers'
    // watch goes on — and it is put back too.
    by_hand(json!({"list": {"tasks": "all of them", "step": -1}}));
    let put_back = wait_until(PATIENCE * 2, || {
        let status = web0()["status"].clone();
        status["list"]["number"] == ours["list"]["number"]
            && status["list"]["tasks"].is_array()
            && status["stage"] == "deploying"
    });
    assert!(
        put_back.is_some(),
        "the garbled list was never put back: {:#}",
        web0()
    );
    assert_ne!(
        rollout(server)["phase"],
        "Completed",
        "the hand-written status completed the rollout: {:#}",
        rollout(server)
    );
    assert!(
        !hooks
            .steps_of("web-0")
            .contains(&"attach-load-balancer".to_string()),
        "traffic to a half-deployed machine: {:?}",
        hooks.steps_of("web-0")
    );

    // Forced through the spec: `serving`, while deploy-code runs.
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/instances/web-0/force",
        json!({"by": "bob", "why": "deployed by hand", "stage": "serving"}),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["on"], json!(["Server/shop/web-0"]), "{body}");
    let spec = web0()["spec"]["force"].clone();
    assert_eq!(spec["stage"], "serving", "{spec:#}");
    assert_eq!(spec["by"], "bob", "{spec:#}");
    let entered = wait_until(PATIENCE * 3, || {
        let status = web0()["status"].clone();
        status["stage"] == "serving"
            && status["list"]["outcome"] == "succeeded"
            && status["forced"]["entered"] == true
    });
    assert!(entered.is_some(), "{:#}", web0());
    let status = web0()["status"].clone();
    assert_eq!(
        list_tasks(&status),
        ["health-check", "bind-monitoring", "attach-load-balancer"],
        "{status:#}"
    );
    // The deploy list it left has an outcome: superseded, at deploy-code.
    let left = status["lists"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["stage"] == "deploying")
        .cloned()
        .unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!(left["outcome"], "superseded", "{left:#}");
    assert_eq!(left["task"], "deploy-code", "{left:#}");
    assert!(
        left["message"].as_str().unwrap().contains("forced by bob"),
        "{left:#}"
    );
    // One deploy list, one key: no second deploy was started for it.
    let deploy_keys: std::collections::BTreeSet<String> = hooks
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c["step"] == "deploy-code" && c["instance"]["name"] == "web-0")
        .map(|c| c["key"].to_string())
        .collect();
    assert_eq!(deploy_keys.len(), 1, "{deploy_keys:?}");

    // `requested` forced on a serving instance: detached and paused
    // before anything is installed again.
    hold.store(false, std::sync::atomic::Ordering::SeqCst);
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/instances/web-0/force",
        json!({"by": "bob", "why": "reinstall", "stage": "requested"}),
    );
    assert_eq!(code, 200, "{body}");
    let requested = wait_until(PATIENCE * 2, || {
        web0()["status"]["lists"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(Some(&web0()["status"]["list"]))
            .any(|l| l["stage"] == "requested" && l["outcome"] == "succeeded")
    });
    assert!(requested.is_some(), "{:#}", web0());
    let reinstalled = wait_until(PATIENCE * 2, || {
        let steps = hooks.steps_of("web-0");
        let last = |step: &str| steps.iter().rposition(|s| s == step);
        let installed = last("install-environment");
        last("detach-load-balancer").is_some_and(|d| installed > Some(d))
            && last("pause-monitoring").is_some_and(|p| installed > Some(p))
    });
    assert!(reinstalled.is_some(), "{:?}", hooks.steps_of("web-0"));

    // A stage that is none of the machine's is refused, by the route and
    // by the resource's own schema.
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/instances/web-0/force",
        json!({"by": "bob", "stage": "-5"}),
    );
    assert_eq!(code, 422, "{body}");
}

#[test]
fn a_lifecycle_policy_swapped_mid_rollout_decides_the_rest_of_it() {
    let folder = crate::support::plugin_folder(&["status", "failover", "admission", "lifecycle"]);
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering_from(folder.path(), "", |_| (200, DONE.into()));
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));
    assert!(
        wait_until(PATIENCE * 3, || all_serve(cluster, 3, "1.0")).is_some(),
        "1.0 never served: {:#?}",
        instances(cluster)
    );
    redeploy(
        cluster,
        "2.0",
        json!([{"instances": 1}, {"pause": {}}, {"instances": "100%"}]),
    );
    let at_gate = wait_until(PATIENCE * 2, || rollout(server)["at-gate"] == true);
    assert!(
        at_gate.is_some(),
        "never at the gate: {:#}",
        rollout(server)
    );
    let first: Vec<String> = codes(cluster)
        .into_iter()
        .filter(|(_, code)| code == "2.0")
        .map(|(name, _)| name)
        .collect();
    assert_eq!(first.len(), 1, "{:#?}", codes(cluster));

    // The new policy is dropped in while the rollout waits at its gate; the
    // host serves it without a restart.
    let bytes = std::fs::read(example_plugin("smoke-test")).unwrap();
    install_by_rename(&folder.path().join("lifecycle.wasm"), &bytes);
    let swapped = wait_until(PATIENCE, || {
        server.get("/v1/plugins").1["plugins"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| {
                p["name"] == "lifecycle"
                    && p["active"] == true
                    && p["current"]["name"] == "smoke-test"
            })
    });
    assert!(swapped.is_some(), "{:#}", server.get("/v1/plugins").1);

    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/approve",
        json!({"by": "alice", "why": "the canary is fine"}),
    );
    assert_eq!(code, 200, "{body}");
    assert!(
        wait_until(PATIENCE * 3, || all_serve(cluster, 3, "2.0")).is_some(),
        "2.0 never rolled out under the new policy: {:#?}",
        instances(cluster)
    );
    for name in ["web-0", "web-1", "web-2"] {
        let steps = hooks.steps_of(name);
        let deploys = steps.iter().filter(|s| *s == "deploy-code").count();
        let smoke = steps.iter().filter(|s| *s == "smoke-test").count();
        assert_eq!(deploys, 2, "{name}: every deploy once: {steps:?}");
        // The instance deployed before the swap was not smoke-tested; the
        // ones deployed after it were, right after their deploy.
        match first.contains(&name.to_string()) {
            true => assert_eq!(smoke, 0, "{name}: {steps:?}"),
            false => {
                assert_eq!(smoke, 1, "{name}: {steps:?}");
                let at = steps.iter().position(|s| s == "smoke-test").unwrap();
                assert_eq!(steps[at - 1], "deploy-code", "{name}: {steps:?}");
            }
        }
    }
}

/// KubeVirt's neighbour in a cluster: the Job controller, played on the
/// simulator until dropped. Each new Job completes, or fails when
/// `fails(job)` says so.
struct JobPlayer {
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl JobPlayer {
    fn start(cluster: &Cluster, fails: impl Fn(&Value) -> bool + Send + 'static) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let store = cluster.sim().store().clone();
        std::thread::spawn(move || {
            let jobs = store.find("batch", "v1", "jobs").unwrap();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                for job in store.list(jobs, Some("shop")).0 {
                    if job
                        .get("status")
                        .is_some_and(|s| s.get("conditions").is_some())
                    {
                        continue;
                    }
                    let condition = match fails(&job) {
                        true => json!({"type": "Failed", "status": "True",
                            "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}),
                        false => json!({"type": "Complete", "status": "True"}),
                    };
                    let name = job["metadata"]["name"].as_str().unwrap();
                    let _ = store.patch(
                        jobs,
                        "shop",
                        name,
                        &json!({"status": {"conditions": [condition]}}),
                    );
                }
                // The pace of a controller's resync, not a wait for a condition.
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        Self { stop }
    }
}

impl Drop for JobPlayer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A Job's environment variable, from its first container.
fn job_env(job: &Value, name: &str) -> Option<String> {
    job["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
        .and_then(|v| v["value"].as_str())
        .map(str::to_string)
}

#[test]
fn steps_carried_out_by_jobs_go_as_their_jobs_go() {
    let templates = tempfile::tempdir().unwrap();
    let template = templates.path().join("step.yaml");
    std::fs::write(
        &template,
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  labels: {team: shop}\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: step\n        image: registry.example/steps:1\n",
    )
    .unwrap();
    let config = format!(
        "[hooks.install-environment]\njob = {path:?}\n[hooks.deploy-code]\njob = {path:?}\ntimeout-seconds = 5\n",
        path = template.display().to_string()
    );
    let Delivery {
        cluster,
        hooks,
        server,
        ..
    } = &delivering(&config);
    let _player = JobPlayer::start(cluster, |job| {
        job_env(job, "VERDICT_PARAMS").is_some_and(|p| p.contains("\"bad\""))
    });
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));
    assert!(
        wait_until(PATIENCE * 3, || all_serve(cluster, 1, "1.0")).is_some(),
        "1.0 never served: {:#?}",
        instances(cluster)
    );
    let store = cluster.sim().store();
    let jobs = store.find("batch", "v1", "jobs").unwrap();
    let made = store.list(jobs, Some("shop")).0;
    let steps: Vec<Option<String>> = made.iter().map(|j| job_env(j, "VERDICT_STEP")).collect();
    assert_eq!(made.len(), 2, "one Job a step: {steps:?}");
    for (job, step) in made.iter().zip(&steps) {
        let step = step.as_deref().unwrap();
        assert!(
            ["install-environment", "deploy-code"].contains(&step),
            "{step}"
        );
        assert_eq!(job["metadata"]["labels"]["team"], "shop");
        assert_eq!(job["metadata"]["labels"]["verdict.dev/instance"], "web-0");
        assert_eq!(job["metadata"]["labels"]["verdict.dev/step"], step);
        assert_eq!(job_env(job, "VERDICT_INSTANCE").as_deref(), Some("web-0"));
        assert_eq!(job_env(job, "VERDICT_SET").as_deref(), Some("web"));
    }
    let deploy = made
        .iter()
        .find(|j| job_env(j, "VERDICT_STEP").as_deref() == Some("deploy-code"))
        .unwrap();
    assert_eq!(
        job_env(deploy, "VERDICT_PARAMS").as_deref(),
        Some(r#"{"version":"1.0"}"#)
    );
    // The other steps went to the endpoint; these two did not.
    let called = hooks.steps_of("web-0");
    assert!(called.contains(&"health-check".to_string()), "{called:?}");
    assert!(!called.contains(&"deploy-code".to_string()), "{called:?}");

    // A Job that fails fails its step, with the Job's reason.
    redeploy(cluster, "bad", json!([]));
    let stage = || instances(cluster)["web-0"]["stage"].clone();
    assert!(
        wait_until(PATIENCE * 2, || stage() == "failed").is_some(),
        "never failed: {:#?}",
        instances(cluster)
    );
    let (_, page) = server.get("/v1/vm-delivery/shop/web/instances/web-0/log?limit=1000");
    let failed = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["outcome"] == "failed")
        .cloned()
        .unwrap_or_default();
    let step = failed["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["result"] == "failed")
        .cloned()
        .unwrap_or_default();
    assert_eq!(step["task"], "deploy-code", "{page:#}");
    let message = step["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("failed: BackoffLimitExceeded"),
        "{message}"
    );

    // Each Job is its Server's: the set deleted and its instance cleaned
    // up, no Job outlives it.
    let servers = resource(cluster, "verdict.dev", "servers");
    let uid = store.get(servers, "shop", "web-0").unwrap()["metadata"]["uid"].clone();
    for job in store.list(jobs, Some("shop")).0 {
        let owner = &job["metadata"]["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["name"], &owner["uid"]),
            (&json!("Server"), &json!("web-0"), &uid),
            "{job:#}"
        );
    }
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    store.delete(sets, "shop", "web").unwrap();
    let gone = wait_until(PATIENCE * 3, || {
        store.list(jobs, Some("shop")).0.is_empty()
            && store.list(servers, Some("shop")).0.is_empty()
    });
    assert!(
        gone.is_some(),
        "{:#?}",
        store
            .list(jobs, Some("shop"))
            .0
            .iter()
            .map(|j| j["metadata"]["name"].clone())
            .collect::<Vec<_>>()
    );
}

/// Each instance's stage, code and whether a list runs (its lock held).
fn stages(cluster: &Cluster) -> BTreeMap<String, (String, String, bool)> {
    stages_of(cluster, "web")
}

/// How many instances (Servers) the set `set` has.
fn vms_of(cluster: &Cluster, set: &str) -> usize {
    instances_of(cluster, set).len()
}

/// Each instance of `set`: its stage, code and whether a list runs.
fn stages_of(cluster: &Cluster, set: &str) -> BTreeMap<String, (String, String, bool)> {
    instances_of(cluster, set)
        .into_iter()
        .map(|(name, a)| {
            let text = |key: &str| a[key].as_str().unwrap_or_default().to_string();
            let running = a.get("lock").is_some();
            (name, (text("stage"), text("code"), running))
        })
        .collect()
}

/// How many instances are settled (no list running) in `stage` with `code`.
fn settled_in(cluster: &Cluster, stage: &str, code: &str) -> usize {
    stages(cluster)
        .values()
        .filter(|(s, c, running)| s == stage && c == code && !running)
        .count()
}

#[test]
fn a_first_rollout_goes_by_its_steps_and_a_later_release_stops_at_its_own_gate() {
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering("");
    let gated = json!([{"instances": 1}, {"pause": {}}, {"instances": "100%"}]);
    // The deployment's first rollout: no code was released before it.
    cluster.apply(deployment("1.0", gated.clone()));
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));
    let canary = wait_until(PATIENCE * 3, || {
        rollout(server)["at-gate"] == true
            && settled_in(cluster, "gray-release", "1.0") == 1
            && settled_in(cluster, "ready", "") == 2
    });
    assert!(
        canary.is_some(),
        "the first step did not give one instance the code and hold the rest: {:#?} {:#}",
        stages(cluster),
        rollout(server)
    );
    // The two the step has not reached got no code and take no traffic.
    for (name, (stage, _, _)) in stages(cluster) {
        if stage == "ready" {
            let steps = hooks.steps_of(&name);
            assert!(
                !steps
                    .iter()
                    .any(|s| s == "deploy-code" || s == "attach-load-balancer"),
                "{name}: {steps:?}"
            );
        }
    }
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/approve",
        json!({"by": "alice", "why": "the canary is fine"}),
    );
    assert_eq!(code, 200, "{body}");
    let released = wait_until(PATIENCE * 3, || {
        all_serve(cluster, 3, "1.0") && rollout(server)["phase"] == "Completed"
    });
    assert!(
        released.is_some(),
        "{:#?} {:#}",
        stages(cluster),
        rollout(server)
    );

    // The next release with the same steps stops at its own gate: the
    // approval of 1.0's gate approves nothing of 2.0's.
    redeploy(cluster, "2.0", gated);
    let at_gate = wait_until(PATIENCE * 3, || {
        rollout(server)["at-gate"] == true && settled_in(cluster, "gray-release", "2.0") == 1
    });
    assert!(
        at_gate.is_some(),
        "2.0 did not stop at its gate: {:#?} {:#}",
        stages(cluster),
        rollout(server)
    );
    assert_eq!(
        settled_in(cluster, "serving", "1.0"),
        2,
        "{:#?}",
        stages(cluster)
    );
    let status = cluster
        .sim()
        .store()
        .get(
            resource(cluster, "verdict.dev", "vmdeployments"),
            "shop",
            "web",
        )
        .unwrap()["status"]
        .clone();
    assert!(
        status.get("approvedStep").is_none() && status.get("approvedBy").is_none(),
        "the last release's approval is not kept on the next: {status:#}"
    );
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/approve",
        json!({"by": "bob"}),
    );
    assert_eq!(code, 200, "{body}");
    let released = wait_until(PATIENCE * 3, || {
        all_serve(cluster, 3, "2.0") && rollout(server)["phase"] == "Completed"
    });
    assert!(
        released.is_some(),
        "{:#?} {:#}",
        stages(cluster),
        rollout(server)
    );
}

#[test]
fn an_instance_made_again_under_an_old_name_runs_its_own_steps_by_keys_of_its_own() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    let environment = json!([{"name": "jdk", "version": "21"}]);
    cluster.apply(set(2, environment.clone()));
    let serving = |n: usize| {
        move || {
            let all = stages(cluster);
            all.len() == n
                && all
                    .values()
                    .all(|(s, _, running)| s == "serving" && !running)
        }
    };
    assert!(
        wait_until(PATIENCE * 3, serving(2)).is_some(),
        "{:#?}",
        stages(cluster)
    );
    // The keys web-1's installs were asked by.
    let install_keys = || -> Vec<String> {
        hooks
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c["instance"]["name"] == "web-1" && c["step"] == "install-environment")
            .map(|c| c["key"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let first_install = install_keys();
    // 2 → 1: web-1 is cleaned up and goes; 1 → 2: a new machine named web-1.
    cluster.apply(set(1, environment.clone()));
    assert!(
        wait_until(PATIENCE * 3, serving(1)).is_some(),
        "{:#?}",
        stages(cluster)
    );
    cluster.apply(set(2, environment));
    assert!(
        wait_until(PATIENCE * 3, serving(2)).is_some(),
        "{:#?}",
        stages(cluster)
    );
    let installs = install_keys();
    let distinct: std::collections::BTreeSet<&String> = installs.iter().collect();
    assert_eq!(
        distinct.len(),
        2,
        "the new web-1's install has a key of its own, not the old machine's {first_install:?}: {installs:?}"
    );
    // Every step of the new machine ran under its own keys.
    let steps = hooks.steps_of("web-1");
    assert_eq!(
        steps.iter().filter(|s| *s == "install-environment").count(),
        2,
        "{steps:?}"
    );
}

#[test]
fn a_lone_host_started_again_takes_up_the_steps_its_earlier_process_left_running() {
    let cluster = &cluster();
    // Every install runs until the test lets it finish.
    let finish = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let finishing = Arc::clone(&finish);
    let hooks = HookServer::start(move |call| {
        let done = call["step"] != "install-environment"
            || finishing.load(std::sync::atomic::Ordering::SeqCst);
        match done {
            true => (200, DONE.into()),
            false => (
                200,
                r#"{"status":"running","progress":10,"retryAfterSeconds":1}"#.into(),
            ),
        }
    });
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("verdict.toml");
    let text: String = STEPS
        .iter()
        .map(|step| format!("[hooks.{step}]\nurl = \"{}\"\n", hooks.url))
        .collect();
    std::fs::write(&config, text).unwrap();
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let url = cluster.sim().url();
    let flags = [
        "--cluster-url",
        url.as_str(),
        "--config",
        config.to_str().unwrap(),
        "--vm-delivery",
    ];
    let mut first = crate::serve::Server::start_with(&plugins, data.path(), &flags);
    cluster.apply(set(2, json!([{"name": "jdk", "version": "21"}])));
    let installing = wait_until(PATIENCE * 3, || {
        let all = stages(cluster);
        all.len() == 2
            && all
                .values()
                .all(|(s, _, running)| s == "initializing" && *running)
    });
    assert!(installing.is_some(), "{:#?}", stages(cluster));
    first.kill();

    // The same host started again: another process, another name.
    let second_data = tempfile::tempdir().unwrap();
    let _second = crate::serve::Server::start_with(&plugins, second_data.path(), &flags);
    finish.store(true, std::sync::atomic::Ordering::SeqCst);
    let serving = wait_until(PATIENCE * 3, || {
        let all = stages(cluster);
        all.len() == 2
            && all
                .values()
                .all(|(s, _, running)| s == "serving" && !running)
    });
    assert!(
        serving.is_some(),
        "the restarted host did not take up the running installs: {:#?}",
        stages(cluster)
    );
    for name in ["web-0", "web-1"] {
        let installs: std::collections::BTreeSet<String> = hooks
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c["instance"]["name"] == name && c["step"] == "install-environment")
            .map(|c| c["key"].to_string())
            .collect();
        assert_eq!(
            installs.len(),
            1,
            "{name}: asked again with the same key: {installs:?}"
        );
    }
}

#[test]
fn a_hook_that_hangs_holds_its_own_step_and_no_other_sets() {
    let cluster = &cluster();
    // The installs of the set `slow` hang until the test ends (within
    // their hook's timeout of two minutes); every other call is done.
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let released = Arc::clone(&release);
    let hooks = HookServer::start(move |call| {
        if call["instance"]["set"] == "slow" && call["step"] == "install-environment" {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while !released.load(std::sync::atomic::Ordering::SeqCst)
                && std::time::Instant::now() < until
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        (200, DONE.into())
    });
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("verdict.toml");
    let text: String = STEPS
        .iter()
        .map(|step| {
            format!(
                "[hooks.{step}]\nurl = \"{}\"\ntimeout-seconds = 120\n",
                hooks.url
            )
        })
        .collect();
    std::fs::write(&config, text).unwrap();
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let url = cluster.sim().url();
    let _server = crate::serve::Server::start_with(
        &plugins,
        data.path(),
        &[
            "--cluster-url",
            url.as_str(),
            "--config",
            config.to_str().unwrap(),
            "--vm-delivery",
        ],
    );
    let mut slow = set(2, json!([{"name": "jdk", "version": "21"}]));
    slow["metadata"]["name"] = json!("slow");
    cluster.apply(slow);
    let hanging = wait_until(PATIENCE * 2, || {
        vms_of(cluster, "slow") == 2
            && stages_of(cluster, "slow")
                .values()
                .all(|(stage, _, running)| stage == "initializing" && *running)
    });
    assert!(hanging.is_some(), "{:#?}", stages_of(cluster, "slow"));

    // Another set is delivered whole while those installs hang.
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));
    let delivered = wait_until(PATIENCE * 3, || {
        let all = stages(cluster);
        all.len() == 3
            && all
                .values()
                .all(|(s, _, running)| s == "serving" && !running)
    });
    assert!(
        delivered.is_some(),
        "held by another set's hanging hook: {:#?}",
        stages(cluster)
    );
    assert!(
        stages_of(cluster, "slow")
            .values()
            .all(|(stage, _, running)| stage == "initializing" && *running),
        "{:#?}",
        stages_of(cluster, "slow")
    );
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    let slow_serving = wait_until(PATIENCE * 3, || {
        let all = stages_of(cluster, "slow");
        all.len() == 2
            && all
                .values()
                .all(|(s, _, running)| s == "serving" && !running)
    });
    assert!(slow_serving.is_some(), "{:#?}", stages_of(cluster, "slow"));
}

#[test]
fn a_failed_clean_up_step_is_retried_or_skipped_and_no_step_after_it_is_dropped() {
    // Each clean-up's first ask of the load balancer fails.
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering_with("", |call| {
        match (
            call["stage"].as_str(),
            call["step"].as_str(),
            call["attempt"].as_u64(),
        ) {
            (Some("deleting"), Some("detach-load-balancer"), Some(1)) => (
                200,
                r#"{"status":"failed","message":"the load balancer's API is down"}"#.into(),
            ),
            _ => (200, DONE.into()),
        }
    });
    cluster.apply(set(2, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 3, || settled_in(cluster, "serving", "") == 2).is_some(),
        "{:#?}",
        stages(cluster)
    );
    let machines = resource(cluster, "kubevirt.io", "virtualmachines");
    let clean_up = |name: &str| -> Vec<(String, u64)> {
        hooks
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c["instance"]["name"] == name && c["stage"] == "deleting")
            .map(|c| {
                (
                    c["step"].as_str().unwrap_or_default().to_string(),
                    c["attempt"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    };
    for name in ["web-0", "web-1"] {
        cluster
            .sim()
            .store()
            .delete(machines, "shop", name)
            .unwrap();
    }
    let failed = wait_until(PATIENCE, || {
        ["web-0", "web-1"]
            .iter()
            .all(|name| clean_up(name) == [("detach-load-balancer".to_string(), 1)])
            && ["web-0", "web-1"]
                .iter()
                .all(|name| instances(cluster)[*name]["list"]["outcome"] == "failed")
    });
    assert!(
        failed.is_some(),
        "{:?} {:?}",
        clean_up("web-0"),
        clean_up("web-1")
    );
    // The set says so, naming each and the step (not only their Servers),
    // and so does what /v1/vm-delivery shows it waits for.
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    let said = wait_until(PATIENCE, || {
        let degraded = degraded_of(&cluster.sim().store().get(sets, "shop", "web").unwrap());
        ["web-0", "web-1"].iter().all(|name| {
            degraded.contains(&format!(
                "the clean-up of {name} failed at detach-load-balancer: the load balancer's API is down"
            ))
        })
    });
    assert!(
        said.is_some(),
        "{}",
        degraded_of(&cluster.sim().store().get(sets, "shop", "web").unwrap())
    );
    let (_, listed) = server.get("/v1/vm-delivery?namespace=shop");
    assert!(
        listed.to_string().contains("the clean-up of web-0 failed"),
        "{listed:#}"
    );
    let path =
        |name: &str, action: &str| format!("/v1/vm-delivery/shop/web/instances/{name}/{action}");
    // web-0: retried — the failed step asked again, then every step after it.
    let (code, body) = post(server, &path("web-0", "retry"), json!({"by": "erin"}));
    assert_eq!(code, 200, "{body}");
    // web-1: the failed step skipped by a person; the rest runs.
    let (code, body) = post(
        server,
        &path("web-1", "skip"),
        json!({"by": "erin", "why": "detached by hand", "task": "detach-load-balancer"}),
    );
    assert_eq!(code, 200, "{body}");
    let gone = wait_until(PATIENCE, || {
        ["web-0", "web-1"]
            .iter()
            .all(|name| cluster.sim().store().get(machines, "shop", name).is_err())
    });
    assert!(
        gone.is_some(),
        "{:?} {:?} {:#?}",
        clean_up("web-0"),
        clean_up("web-1"),
        stages(cluster)
    );
    let step = |name: &str, attempt: u64| (name.to_string(), attempt);
    assert_eq!(
        clean_up("web-0"),
        [
            step("detach-load-balancer", 1),
            step("detach-load-balancer", 2),
            step("pause-monitoring", 1),
            step("delete-machine", 1)
        ]
    );
    assert_eq!(
        clean_up("web-1"),
        [
            step("detach-load-balancer", 1),
            step("pause-monitoring", 1),
            step("delete-machine", 1)
        ]
    );
}

/// The set `web` of `n` instances made, serving, holding its instances'
/// clean-up, and then deleted; its resource, to read it by.
fn serving_set_deleted(cluster: &Cluster, n: usize) -> &'static verdict_sim::resources::Resource {
    cluster.apply(set(n as u32, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 3, || settled_in(cluster, "serving", "") == n).is_some(),
        "{:#?}",
        stages(cluster)
    );
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    let held = wait_until(PATIENCE, || {
        cluster.sim().store().get(sets, "shop", "web").unwrap()["metadata"]["finalizers"]
            == json!(["verdict.dev/cleanup"])
    });
    assert!(
        held.is_some(),
        "the set does not hold its instances' clean-up"
    );
    cluster.sim().store().delete(sets, "shop", "web").unwrap();
    sets
}

#[test]
fn a_deleted_set_cleans_up_every_instance_before_it_goes() {
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering("");
    let sets = serving_set_deleted(cluster, 2);
    let gone = wait_until(PATIENCE * 2, || {
        cluster.sim().store().get(sets, "shop", "web").is_err() && instances(cluster).is_empty()
    });
    assert!(
        gone.is_some(),
        "{:#?} {:#}",
        stages(cluster),
        cluster
            .sim()
            .store()
            .get(sets, "shop", "web")
            .unwrap_or_default()
    );
    for name in ["web-0", "web-1"] {
        assert!(
            hooks.steps_of(name).ends_with(&[
                "detach-load-balancer".into(),
                "pause-monitoring".into(),
                "delete-machine".into()
            ]),
            "{name}: {:?}",
            hooks.steps_of(name)
        );
    }
    assert_eq!(server.get("/readyz").0, 200);
}

/// A deleted set whose instance's clean-up is held says so: its
/// `Deleting` condition names the instance and the step that holds it.
#[test]
fn a_deleted_set_says_which_instance_and_step_hold_it() {
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let holding = Arc::clone(&hold);
    let Delivery { cluster, .. } = &delivering_with("", move |call| {
        if call["step"] == "delete-machine" && holding.load(std::sync::atomic::Ordering::SeqCst) {
            return (
                200,
                r#"{"status":"running","progress":10,"retryAfterSeconds":1}"#.into(),
            );
        }
        (200, DONE.into())
    });
    let sets = serving_set_deleted(cluster, 1);
    let deleting = || {
        cluster
            .sim()
            .store()
            .get(sets, "shop", "web")
            .ok()
            .and_then(|set| {
                set["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Deleting")
                    .cloned()
            })
            .unwrap_or_default()
    };
    let said = wait_until(PATIENCE * 2, || {
        deleting()["message"] == "cleaning up 1 instance(s): web-0 at delete-machine"
    });
    assert!(said.is_some(), "{:#}", deleting());
    assert_eq!(deleting()["status"], "True");
    hold.store(false, std::sync::atomic::Ordering::SeqCst);
    let gone = wait_until(PATIENCE * 2, || {
        cluster.sim().store().get(sets, "shop", "web").is_err()
    });
    assert!(gone.is_some(), "{:#}", deleting());
}

#[test]
fn instances_whose_set_is_gone_are_cleaned_up_when_deleted() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    // A Server a set made and held, with its VM, whose set went without
    // letting go of it.
    cluster.apply(json!({
        "apiVersion": "verdict.dev/v1alpha1", "kind": "Server",
        "metadata": {
            "name": "old-0", "namespace": "shop", "uid": "s-old",
            "labels": {"verdict.dev/vmreplicaset": "old"},
            "finalizers": ["verdict.dev/cleanup"],
            "ownerReferences": [{"apiVersion": "verdict.dev/v1alpha1", "kind": "VMReplicaSet",
                "name": "old", "uid": "u-gone", "controller": true}],
        },
        "spec": {"replicaSet": "old", "environment": [{"name": "jdk", "version": "21"}]},
        "status": {"stage": "serving", "since": "2026-01-01T00:00:00Z",
            "environment": [{"name": "jdk", "version": "21"}]},
    }));
    cluster.apply(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {
            "name": "old-0", "namespace": "shop",
            "labels": {"verdict.dev/vmreplicaset": "old"},
            "annotations": {"verdict.dev/server": "old-0"},
            "finalizers": ["verdict.dev/cleanup"],
            "ownerReferences": [{"apiVersion": "verdict.dev/v1alpha1", "kind": "Server",
                "name": "old-0", "uid": "s-old", "controller": true}],
        },
        "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
    }));
    let (servers, machines) = (
        resource(cluster, "verdict.dev", "servers"),
        resource(cluster, "kubevirt.io", "virtualmachines"),
    );
    assert!(
        wait_until(PATIENCE, || vms_of(cluster, "old") == 1).is_some(),
        "{:#?}",
        instances_of(cluster, "old")
    );
    // As the garbage collector deletes what the gone set owned.
    cluster
        .sim()
        .store()
        .delete(servers, "shop", "old-0")
        .unwrap();
    let cleaned = wait_until(PATIENCE * 2, || {
        let store = cluster.sim().store();
        store.get(servers, "shop", "old-0").is_err()
            && store.get(machines, "shop", "old-0").is_err()
    });
    assert!(
        cleaned.is_some(),
        "held for ever: {:#?}",
        instances_of(cluster, "old")
    );
    assert_eq!(
        hooks.steps_of("old-0"),
        ["detach-load-balancer", "pause-monitoring", "delete-machine"]
    );
}

#[test]
fn a_vm_made_before_servers_is_taken_over_with_what_it_recorded() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    // A VM its set made and annotated before instances had Servers,
    // serving with the set's environment.
    cluster.apply(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {
            "name": "web-0", "namespace": "shop",
            "labels": {"verdict.dev/vmreplicaset": "web", "app.kubernetes.io/instance": "web"},
            "annotations": {"verdict.dev/stage": "serving", "verdict.dev/since": "2026-01-01T00:00:00Z",
                "verdict.dev/environment": "jdk=21", "team": "shop"},
            "finalizers": ["verdict.dev/cleanup"],
            "ownerReferences": [{"apiVersion": "verdict.dev/v1alpha1", "kind": "VMReplicaSet",
                "name": "web", "uid": "u-before", "controller": true}],
        },
        "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
    }));
    let machines = resource(cluster, "kubevirt.io", "virtualmachines");
    let vm = || {
        cluster
            .sim()
            .store()
            .get(machines, "shop", "web-0")
            .unwrap()
    };
    // Running, as it was when the host before Servers left it.
    let running = wait_until(PATIENCE, || {
        let vm = vm();
        vm["status"]["printableStatus"] == "Running" && vm["status"]["ready"] == true
    });
    assert!(running.is_some(), "{:#}", vm());
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    let taken = wait_until(PATIENCE * 2, || {
        let vm = vm();
        instances(cluster)
            .get("web-0")
            .is_some_and(|a| a["stage"] == "serving" && a["environmentText"] == "jdk=21")
            && vm["metadata"]["ownerReferences"][0]["kind"] == "Server"
    });
    assert!(taken.is_some(), "{:#?} {:#}", instances(cluster), vm());
    let annotations = vm()["metadata"]["annotations"].clone();
    assert_eq!(
        annotations,
        json!({"team": "shop", "verdict.dev/server": "web-0"}),
        "what it recorded moved to its Server"
    );
    assert_eq!(instances(cluster).len(), 1, "no other instance made");
    assert!(
        !hooks
            .steps_of("web-0")
            .contains(&"install-environment".to_string()),
        "{:?}",
        hooks.steps_of("web-0")
    );
}

#[test]
fn without_a_lifecycle_policy_the_host_is_not_ready_and_the_set_says_why() {
    let plugins = crate::support::plugin_folder(&["status", "failover", "admission"]);
    let Delivery {
        cluster, server, ..
    } = &delivering_from(plugins.path(), "", |_| (200, DONE.into()));
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    let sets = resource(cluster, "verdict.dev", "vmreplicasets");
    let degraded = wait_until(PATIENCE, || {
        cluster.sim().store().get(sets, "shop", "web").unwrap()["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Degraded"
                    && c["status"] == "True"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("no lifecycle policy is loaded"))
            })
    });
    assert!(
        degraded.is_some(),
        "{:#}",
        cluster.sim().store().get(sets, "shop", "web").unwrap()["status"]
    );
    let (code, body) = server.get("/readyz");
    assert_eq!(
        (code, &body["lifecycle_policy"]),
        (503, &json!(false)),
        "{body:#}"
    );
}

#[test]
fn a_person_forcing_ready_vouches_for_a_failed_install_and_offline_holds_until_lifted() {
    // web-1's installs of jdk 25 fail, every time.
    let Delivery {
        cluster,
        server,
        hooks,
        ..
    } = &delivering_with("", |call| {
        let broken = call["step"] == "install-environment"
            && call["instance"]["name"] == "web-1"
            && call["params"].to_string().contains("\"25\"");
        match broken {
            true => (200, r#"{"status":"failed","message":"mirror down"}"#.into()),
            false => (200, DONE.into()),
        }
    });
    cluster.apply(set(2, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 3, || settled_in(cluster, "serving", "") == 2).is_some(),
        "{:#?}",
        stages(cluster)
    );
    cluster.apply(set(2, json!([{"name": "jdk", "version": "25"}])));
    let failed = wait_until(PATIENCE * 2, || {
        stages(cluster)
            .get("web-1")
            .is_some_and(|(stage, _, _)| stage == "failed")
    });
    assert!(failed.is_some(), "{:#?}", stages(cluster));
    let installs = |name: &str| {
        hooks
            .steps_of(name)
            .iter()
            .filter(|s| *s == "install-environment")
            .count()
    };
    let tried = installs("web-1");
    // The operator installed jdk 25 by hand and vouches for it.
    let (code, body) = force(server, "web-1", "ready", "installed by hand");
    assert_eq!(code, 200, "{body}");
    let rolled = wait_until(PATIENCE * 3, || {
        let all = instances(cluster);
        all.len() == 2
            && all.values().all(|a| {
                a["stage"] == "serving"
                    && a["environmentText"] == "jdk=25"
                    && a.get("lock").is_none()
            })
    });
    assert!(
        rolled.is_some(),
        "the rollout did not go on past the vouched instance: {:#?}",
        instances(cluster)
    );
    assert_eq!(
        installs("web-1"),
        tried,
        "no install was asked again of the vouched instance"
    );
    // The forced `ready` was entered once and is taken: its Server says so.
    let servers = resource(cluster, "verdict.dev", "servers");
    let taken = cluster.sim().store().get(servers, "shop", "web-1").unwrap();
    assert_eq!(
        taken["status"]["forced"]["request"]["stage"], "ready",
        "{taken:#}"
    );
    assert_eq!(taken["status"]["forced"]["entered"], true, "{taken:#}");

    // An operator's offline holds: no rule brings the instance back while
    // it is in force.
    let (code, body) = force(server, "web-0", "offline", "disk check");
    assert_eq!(code, 200, "{body}");
    let offline = wait_until(PATIENCE, || {
        stages(cluster)
            .get("web-0")
            .is_some_and(|(stage, _, running)| stage == "offline" && !running)
    });
    assert!(offline.is_some(), "{:#?}", stages(cluster));
    // The set is short of one in service and makes another; web-0 stays
    // offline meanwhile.
    let replaced = wait_until(PATIENCE * 3, || {
        let all = stages(cluster);
        all.values()
            .filter(|(stage, _, running)| stage == "serving" && !running)
            .count()
            == 2
    });
    assert!(replaced.is_some(), "{:#?}", stages(cluster));
    assert_eq!(
        stages(cluster)["web-0"].0,
        "offline",
        "{:#?}",
        stages(cluster)
    );
    // Lifted by a person, it goes through the whole machine again on the
    // node it stayed on (not said to be repaired: it never moved), and the
    // set, one too many, lets one go.
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/instances/web-0/lift",
        json!({"by": "bob", "why": "disk fine"}),
    );
    assert_eq!(code, 200, "{body}");
    let back = wait_until(PATIENCE * 3, || {
        let all = stages(cluster);
        all.len() == 2
            && all
                .values()
                .all(|(stage, _, running)| stage == "serving" && !running)
    });
    assert!(back.is_some(), "{:#?}", stages(cluster));
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/instances/web-1/lift",
        json!({"by": "bob"}),
    );
    assert_eq!(code, 200, "the taken `ready` is still asked: {body}");
    let (code, body) = post(
        server,
        "/v1/vm-delivery/shop/web/instances/web-1/lift",
        json!({"by": "bob"}),
    );
    assert_eq!(code, 409, "nothing left to lift: {body}");
}

/// A person forces a stage on an instance through the delivery's route:
/// a request in its Server's spec.
fn force(server: &crate::serve::Server, instance: &str, stage: &str, why: &str) -> (u16, Value) {
    post(
        server,
        &format!("/v1/vm-delivery/shop/web/instances/{instance}/force"),
        json!({"by": "bob", "why": why, "stage": stage}),
    )
}

#[test]
fn an_environment_changed_again_before_its_install_installs_only_the_newest() {
    // The load balancer lets go of web-0 only when the test says.
    let detach = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let detaching = Arc::clone(&detach);
    let Delivery { cluster, hooks, .. } = &delivering_with("", move |call| {
        let held = call["step"] == "detach-load-balancer"
            && !detaching.load(std::sync::atomic::Ordering::SeqCst);
        match held {
            true => (
                200,
                r#"{"status":"running","message":"draining","retryAfterSeconds":1}"#.into(),
            ),
            false => (200, DONE.into()),
        }
    });
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    assert!(
        wait_until(PATIENCE * 3, || settled_in(cluster, "serving", "") == 1).is_some(),
        "{:#?}",
        stages(cluster)
    );
    cluster.apply(set(1, json!([{"name": "jdk", "version": "25"}])));
    let draining = wait_until(PATIENCE, || {
        hooks
            .calls
            .lock()
            .unwrap()
            .iter()
            .any(|c| c["step"] == "detach-load-balancer")
    });
    assert!(draining.is_some(), "{:?}", hooks.steps_of("web-0"));
    // A newer environment while the list for 25 still lets go.
    cluster.apply(set(1, json!([{"name": "jdk", "version": "26"}])));
    detach.store(true, std::sync::atomic::Ordering::SeqCst);
    let installed = wait_until(PATIENCE * 3, || {
        instances(cluster)
            .get("web-0")
            .is_some_and(|a| a["environmentText"] == "jdk=26")
            && settled_in(cluster, "serving", "") == 1
    });
    assert!(installed.is_some(), "{:#?}", instances(cluster));
    let installs: Vec<String> = hooks
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c["step"] == "install-environment" && c["stage"] == "initializing")
        .map(|c| {
            c["params"]["packages"][0]["version"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    // The first install (21, when the machine was new) and then 26 only.
    assert_eq!(installs, ["21", "26"], "{:?}", hooks.steps_of("web-0"));
}
