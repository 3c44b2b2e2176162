//! The Kubernetes API simulator speaks the real protocol: `kubectl` lists,
//! gets and watches through it; a watch resumes after a cut connection
//! without losing an event; a compacted version is `410 Gone`; bookmarks
//! arrive when asked for.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use verdict_sim::{Options, Simulator};

/// A simulator on its own runtime, with one namespace and one pod.
struct Running {
    simulator: Simulator,
    _runtime: tokio::runtime::Runtime,
}

fn start(options: Options) -> Running {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let simulator = runtime.block_on(Simulator::start(options)).unwrap();
    simulator
        .apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}))
        .unwrap();
    simulator.apply(pod("web-1", "Running", 0)).unwrap();
    Running {
        simulator,
        _runtime: runtime,
    }
}

fn pod(name: &str, phase: &str, restarts: i64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "web", "image": "web:1"}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "web", "image": "web:1", "imageID": "",
            "ready": phase == "Running", "restartCount": restarts, "state": {"running": {}}}]}
    })
}

/// Read watch lines on a thread, so that every wait has a bound.
fn watch(url: &str) -> mpsc::Receiver<Value> {
    let response = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap()
        .get(url)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(response).lines() {
            let Ok(line) = line else { return };
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                return;
            }
        }
    });
    rx
}

fn next(events: &mpsc::Receiver<Value>) -> Value {
    events
        .recv_timeout(Duration::from_secs(10))
        .expect("no watch event within 10 s")
}

fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn kubectl_lists_gets_and_watches() {
    let Some(program) = crate::real::kubectl("kubectl_lists_gets_and_watches") else {
        return;
    };
    let running = start(Options::default());
    let server = running.simulator.url();
    let kubectl = |args: &[&str]| {
        let output = Command::new(&program)
            .arg("--server")
            .arg(&server)
            .args(args)
            .output()
            .expect("kubectl runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let wide = kubectl(&["get", "pods", "-A", "-o", "wide"]);
    assert!(wide.starts_with("NAMESPACE"), "{wide}");
    let row = wide.lines().nth(1).unwrap();
    for cell in ["shop", "web-1", "1/1", "Running", "n1"] {
        assert!(row.contains(cell), "{wide}");
    }
    let one = kubectl(&["get", "pod", "web-1", "-n", "shop", "-o", "json"]);
    let object: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(object["metadata"]["name"], "web-1");
    assert_eq!(object["kind"], "Pod");

    // Watch for one change, printed as kubectl prints it.
    let mut watching = Command::new(&program)
        .arg("--server")
        .arg(&server)
        .args([
            "get",
            "pods",
            "-n",
            "shop",
            "--watch",
            "--output-watch-events",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = watching.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(first.contains("EVENT"), "{first}");
    assert!(
        lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap()
            .contains("ADDED")
    );
    running.simulator.apply(pod("web-1", "Failed", 3)).unwrap();
    let change = lines.recv_timeout(Duration::from_secs(20)).unwrap();
    let _ = watching.kill();
    let _ = watching.wait();
    assert!(
        change.contains("MODIFIED") && change.contains("Failed"),
        "{change}"
    );
}

#[test]
fn a_watch_resumes_after_a_cut_and_old_versions_are_gone() {
    let running = start(Options::default());
    let base = running.simulator.url();
    let list: Value = reqwest::blocking::get(format!("{base}/api/v1/namespaces/shop/pods"))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(list["kind"], "PodList");
    let listed_at = resource_version(&list);

    let events = watch(&format!(
        "{base}/api/v1/namespaces/shop/pods?watch=true&resourceVersion={listed_at}"
    ));
    running.simulator.apply(pod("web-2", "Pending", 0)).unwrap();
    let added = next(&events);
    assert_eq!(added["type"], "ADDED");
    assert_eq!(added["object"]["metadata"]["name"], "web-2");
    let seen = resource_version(&added["object"]);

    // The connection drops; a change happens while nobody watches.
    running.simulator.cut_watches();
    assert!(
        events.recv_timeout(Duration::from_secs(10)).is_err(),
        "the stream ended"
    );
    running.simulator.apply(pod("web-2", "Running", 0)).unwrap();
    let resumed = watch(&format!(
        "{base}/api/v1/namespaces/shop/pods?watch=true&resourceVersion={seen}"
    ));
    let missed = next(&resumed);
    assert_eq!(missed["type"], "MODIFIED");
    assert_eq!(missed["object"]["status"]["phase"], "Running");

    // After compaction the old version is gone, with a 410 in the stream.
    running.simulator.store().compact();
    let expired = watch(&format!(
        "{base}/api/v1/namespaces/shop/pods?watch=true&resourceVersion={seen}"
    ));
    let error = next(&expired);
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["code"], 410);

    // Lists come in pages when asked.
    for name in ["web-3", "web-4", "web-5"] {
        running.simulator.apply(pod(name, "Running", 0)).unwrap();
    }
    let mut names = Vec::new();
    let mut token = String::new();
    let mut versions: Vec<String> = Vec::new();
    loop {
        let page: Value = reqwest::blocking::get(format!(
            "{base}/api/v1/pods?limit=2&continue={token}&labelSelector=app%3Dweb"
        ))
        .unwrap()
        .json()
        .unwrap();
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        names.extend(
            items
                .iter()
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string()),
        );
        versions.push(resource_version(&page));
        if names.len() == 2 {
            // A change between pages: the later pages keep the first
            // page's version, so a watch from it replays the change.
            running.simulator.apply(pod("web-1", "Failed", 1)).unwrap();
        }
        match page["metadata"]["continue"].as_str() {
            Some(next) => token = next.to_string(),
            None => break,
        }
    }
    assert_eq!(names, ["web-1", "web-2", "web-3", "web-4", "web-5"]);
    assert!(versions.iter().all(|v| *v == versions[0]), "{versions:?}");
    let replay = watch(&format!(
        "{base}/api/v1/namespaces/shop/pods?watch=true&resourceVersion={}",
        versions[0]
    ));
    let change = next(&replay);
    assert_eq!(change["object"]["metadata"]["name"], "web-1");
    assert_eq!(change["object"]["status"]["phase"], "Failed");

    // A selector narrows the watch; deletion is an event too.
    let only_web_1 = watch(&format!(
        "{base}/api/v1/namespaces/shop/pods?watch=true&fieldSelector=metadata.name%3Dweb-1&resourceVersion={}",
        running.simulator.store().version()
    ));
    let client = reqwest::blocking::Client::new();
    client
        .delete(format!("{base}/api/v1/namespaces/shop/pods/web-2"))
        .send()
        .unwrap();
    client
        .delete(format!("{base}/api/v1/namespaces/shop/pods/web-1"))
        .send()
        .unwrap();
    let deleted = next(&only_web_1);
    assert_eq!(deleted["type"], "DELETED");
    assert_eq!(deleted["object"]["metadata"]["name"], "web-1");
}

#[test]
fn bookmarks_arrive_when_asked_for() {
    let running = start(Options {
        bookmark_every: Duration::from_millis(50),
        ..Options::default()
    });
    let base = running.simulator.url();
    let events = watch(&format!(
        "{base}/api/v1/pods?watch=1&allowWatchBookmarks=true"
    ));
    assert_eq!(next(&events)["type"], "ADDED");
    let bookmark = next(&events);
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(
        resource_version(&bookmark["object"]),
        running.simulator.store().version().to_string()
    );
}

#[test]
fn discovery_and_errors_are_kubernetes_documents() {
    let running = start(Options::default());
    let base = running.simulator.url();
    let get = |path: &str| -> (u16, Value) {
        let response = reqwest::blocking::get(format!("{base}{path}")).unwrap();
        (response.status().as_u16(), response.json().unwrap())
    };
    assert_eq!(get("/api").1["versions"], json!(["v1"]));
    let groups = get("/apis").1;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apps")
    );
    let apps = get("/apis/apps/v1").1;
    assert!(
        apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "deployments")
    );
    let (code, status) = get("/api/v1/namespaces/shop/pods/nope");
    assert_eq!(
        (code, status["kind"].as_str(), status["reason"].as_str()),
        (404, Some("Status"), Some("NotFound"))
    );
    let client = reqwest::blocking::Client::new();
    let conflict = client
        .post(format!("{base}/api/v1/namespaces/shop/pods"))
        .json(&pod("web-1", "Running", 0))
        .send()
        .unwrap();
    assert_eq!(conflict.status(), 409);
    let bad = client
        .post(format!("{base}/api/v1/namespaces/shop/pods"))
        .body("{not json")
        .send()
        .unwrap();
    assert_eq!(bad.status(), 400);
}

#[test]
fn the_demo_health_endpoints_follow_their_annotation() {
    let running = start(Options::default());
    let base = running.simulator.url();
    let status = |path: &str| {
        reqwest::blocking::get(format!("{base}{path}"))
            .unwrap()
            .status()
            .as_u16()
    };
    let deployment = |failing: bool| {
        let mut annotations = json!({});
        if failing {
            annotations["verdict.dev/demo-health"] = json!("failing");
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "shop", "annotations": annotations},
               "spec": {"replicas": 1}})
    };
    running.simulator.apply(deployment(false)).unwrap();
    assert_eq!(status("/demo/health/shop/web"), 200);
    running.simulator.apply(deployment(true)).unwrap();
    assert_eq!(status("/demo/health/shop/web"), 503);
    assert_eq!(status("/demo/health/shop/nothing"), 404);

    // A scenario's `@sim` texts point at the simulator it plays on.
    let mut scenario = verdict_sim::Scenario::parse(
        "objects:\n  - {apiVersion: v1, kind: Namespace, metadata: {name: shop, annotations: {url: '@sim/demo/health/shop/web'}}}\n",
    )
    .unwrap();
    scenario.bind(&base);
    assert_eq!(
        scenario.objects[0]["metadata"]["annotations"]["url"],
        format!("{base}/demo/health/shop/web")
    );
}

#[test]
fn a_restarted_simulator_answers_old_versions_with_410_as_a_restarted_api_server_does() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let simulator = runtime
        .block_on(Simulator::start(Options::default()))
        .unwrap();
    simulator
        .apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}))
        .unwrap();
    simulator.apply(pod("web-1", "Running", 0)).unwrap();
    let list: Value =
        reqwest::blocking::get(format!("{}/api/v1/namespaces/shop/pods", simulator.url()))
            .unwrap()
            .json()
            .unwrap();
    let listed_at = resource_version(&list);
    // The cluster moves on (on a real one, leases move it every few
    // seconds) and the API server restarts.
    simulator.apply(pod("web-2", "Running", 0)).unwrap();
    let store = simulator.stop();
    let restarted = runtime
        .block_on(Simulator::start_with(Options::default(), store))
        .unwrap();
    // What was stored is still there…
    let again: Value =
        reqwest::blocking::get(format!("{}/api/v1/namespaces/shop/pods", restarted.url()))
            .unwrap()
            .json()
            .unwrap();
    assert_eq!(again["items"].as_array().unwrap().len(), 2);
    // …but a watch from before the restart must list again.
    let events = watch(&format!(
        "{}/api/v1/namespaces/shop/pods?watch=true&resourceVersion={listed_at}",
        restarted.url()
    ));
    let error = next(&events);
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["code"], 410);
    assert_eq!(error["object"]["reason"], "Expired");
}
