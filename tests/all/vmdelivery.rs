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

use crate::live::{Cluster, PATIENCE, start_host};
use crate::support::wait_until;

/// The step names of the default lifecycle policy.
const STEPS: [&str; 8] = [
    "install-environment",
    "deploy-code",
    "health-check",
    "bind-monitoring",
    "attach-load-balancer",
    "detach-load-balancer",
    "pause-monitoring",
    "delete-machine",
];

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
    _server: crate::serve::Server,
    pub hooks: HookServer,
    pub cluster: Cluster,
    _data: tempfile::TempDir,
}

pub fn delivering(config: &str) -> Delivery {
    let cluster = cluster();
    let hooks = HookServer::start(|_| (200, r#"{"status":"done"}"#.into()));
    let data = tempfile::tempdir().unwrap();
    let mut text = config.to_string();
    for step in STEPS {
        text.push_str(&format!(
            "[hooks.{step}]\nurl = \"{}\"\ntimeout-seconds = 5\n",
            hooks.url
        ));
    }
    let path = data.path().join("verdict.toml");
    std::fs::write(&path, text).unwrap();
    let server = start_host(
        &cluster,
        data.path(),
        &["--config", path.to_str().unwrap(), "--vm-delivery"],
    );
    Delivery {
        _server: server,
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

/// Each instance of the set by name, with its annotations.
pub fn instances(cluster: &Cluster) -> BTreeMap<String, Value> {
    let store = cluster.sim().store();
    store
        .list(
            resource(cluster, "kubevirt.io", "virtualmachines"),
            Some("shop"),
        )
        .0
        .into_iter()
        .filter(|vm| vm["metadata"]["labels"]["verdict.dev/vmreplicaset"] == "web")
        .map(|vm| {
            (
                vm["metadata"]["name"].as_str().unwrap().to_string(),
                vm["metadata"]["annotations"].clone(),
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
                .all(|a| a["verdict.dev/stage"] == "serving" && a.get("verdict.dev/lock").is_none())
    });
    assert!(
        serving.is_some(),
        "never all serving: {:#?}",
        instances(cluster)
    );
    for (name, annotations) in instances(cluster) {
        assert_eq!(annotations["verdict.dev/environment"], "jdk=21", "{name}");
        assert!(
            annotations.get("verdict.dev/lock").is_none(),
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
fn an_environment_change_takes_at_most_max_unavailable_out_of_service_at_once() {
    let Delivery { cluster, hooks, .. } = &delivering("");
    cluster.apply(set(5, json!([{"name": "jdk", "version": "21"}])));
    let settled = |environment: &str| {
        let all = instances(cluster);
        all.len() == 5
            && all.values().all(|a| {
                a["verdict.dev/stage"] == "serving"
                    && a.get("verdict.dev/lock").is_none()
                    && a["verdict.dev/environment"] == environment
            })
    };
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
                    a["verdict.dev/stage"].as_str(),
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

#[test]
fn an_instance_whose_node_is_lost_for_a_while_is_unknown_then_checked_again() {
    let Delivery { cluster, hooks, .. } = &delivering(FAILOVER);
    cluster.apply(set(1, json!([{"name": "jdk", "version": "21"}])));
    let stage = || {
        instances(cluster)
            .get("web-0")
            .and_then(|a| a["verdict.dev/stage"].as_str().map(String::from))
            .unwrap_or_default()
    };
    assert!(
        wait_until(PATIENCE * 2, || stage() == "serving").is_some(),
        "never serving: {:#?}",
        instances(cluster)
    );
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
        stage() == "serving"
            && instances(cluster)["web-0"]
                .get("verdict.dev/lock")
                .is_none()
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
