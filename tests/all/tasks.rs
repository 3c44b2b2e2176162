//! Task records over HTTP, against both stores (a SQLite file, and `Task`
//! custom resources in the simulator): the whole life cycle with plans,
//! approval and rejection, illegal transitions, each admission outcome of
//! the default policy, bad input, restarts, and replicas sharing tasks.

use std::path::Path;

use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE, start_host};
use crate::serve::Server;
use crate::support::wait_until;

/// The cluster the task tests run on: `shop/web` running, `shop/vault`
/// protected, `prod/db` in a production namespace.
fn cluster() -> Cluster {
    let cluster = Cluster::start();
    let deployment = |ns: &str, name: &str, labels: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"replicas": 1},
            "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1}
        })
    };
    cluster.apply(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "prod", "labels": {"verdict.dev/environment": "production"}}
    }));
    cluster.apply(deployment(
        "prod",
        "db",
        json!({"app.kubernetes.io/instance": "db"}),
    ));
    cluster.apply(deployment(
        "shop",
        "vault",
        json!({"app.kubernetes.io/instance": "vault", "verdict.dev/protected": "true"}),
    ));
    cluster
}

/// Serve the `Task` definition, as the chart's `crds/` does, and the
/// namespace the tasks live in.
pub fn define_tasks(cluster: &Cluster) {
    cluster.apply(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "verdict-system"}}),
    );
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart/verdict/crds/task-crd.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let object: Value = serde::Deserialize::deserialize(document).unwrap();
        cluster.apply(object);
    }
}

fn host(cluster: &Cluster, data: &Path, store: &str) -> Server {
    let server = start_host(cluster, data, &["--task-store", store]);
    let ready = wait_until(PATIENCE, || {
        let apps = server.get("/v1/apps").1;
        ["shop/web", "shop/vault", "prod/db"].iter().all(|id| {
            apps["apps"].as_array().into_iter().flatten().any(|a| {
                format!(
                    "{}/{}",
                    a["namespace"].as_str().unwrap(),
                    a["name"].as_str().unwrap()
                ) == *id
            })
        })
    });
    assert!(
        ready.is_some(),
        "apps never derived: {}",
        server.get("/v1/apps").1
    );
    server
}

fn create(server: &Server, body: Value) -> (u16, Value) {
    server.send("POST", "/v1/tasks", Some(&body.to_string()))
}

fn patch(server: &Server, id: &str, body: Value) -> (u16, Value) {
    server.send("PATCH", &format!("/v1/tasks/{id}"), Some(&body.to_string()))
}

fn act(server: &Server, id: &str, verb: &str, body: Value) -> (u16, Value) {
    server.send(
        "POST",
        &format!("/v1/tasks/{id}/{verb}"),
        Some(&body.to_string()),
    )
}

fn id(task: &Value) -> String {
    task["id"].as_str().unwrap().to_string()
}

/// The suite both stores pass. Returns the ids of the tasks it left.
fn life_cycle(server: &Server) -> Vec<String> {
    // Allowed: a restart, which the app's verdict shows at once.
    let (code, restart) = create(
        server,
        json!({"app": "shop/web", "action": "restart", "requested-by": "ann"}),
    );
    assert_eq!(code, 201, "{restart}");
    assert_eq!(restart["phase"], "pending");
    assert_eq!(restart["admission"]["decision"], "allow");
    assert!(
        restart["admission"]["policy"]
            .as_str()
            .unwrap()
            .starts_with("default-admission@")
    );
    let restart_id = id(&restart);
    server.app_until("shop/web", "restart shown", PATIENCE, |v| {
        v["transitional"]["status"] == "restarting" && v["transitional"]["task"] == restart_id
    });

    // Denied: one mutating task in flight per app.
    let (code, denied) = create(server, json!({"app": "shop/web", "action": "stop"}));
    assert_eq!(code, 403, "{denied}");
    assert_eq!(denied["error"]["code"], "denied");
    let reason = denied["error"]["message"].as_str().unwrap();
    assert!(
        reason.contains("restart") && reason.contains("pending"),
        "{reason}"
    );

    // The executor reports progress; the verdict follows.
    let (code, running) = patch(
        server,
        &restart_id,
        json!({"phase": "running", "progress": 40, "message": "rolling"}),
    );
    assert_eq!(code, 200, "{running}");
    assert_eq!(running["revision"], 2);
    server.app_until("shop/web", "progress shown", PATIENCE, |v| {
        v["display"]["progress"] == 40
    });
    // A null phase is no change of phase.
    let (code, same) = patch(server, &restart_id, json!({"phase": null, "progress": 45}));
    assert_eq!(
        (code, same["phase"].clone(), same["progress"].clone()),
        (200, json!("running"), json!(45)),
        "{same}"
    );
    // Illegal transitions are conflicts that say why.
    let (code, illegal) = patch(server, &restart_id, json!({"phase": "pending"}));
    assert_eq!(code, 409, "{illegal}");
    assert!(
        illegal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("running to pending")
    );
    let (code, done) = patch(server, &restart_id, json!({"phase": "succeeded"}));
    assert_eq!(
        (code, done["progress"].clone()),
        (200, json!(100)),
        "{done}"
    );
    let (code, again) = patch(server, &restart_id, json!({"progress": 10}));
    assert_eq!(code, 409, "{again}");
    server.app_until("shop/web", "restart over", PATIENCE, |v| {
        v["transitional"].is_null()
    });

    // Denied: deleting a protected app.
    let (code, denied) = create(server, json!({"app": "shop/vault", "action": "delete"}));
    assert_eq!(code, 403, "{denied}");
    assert!(
        denied["error"]["message"]
            .as_str()
            .unwrap()
            .contains("protected")
    );

    // Held for approval in production; approval needs a name.
    let (code, stop) = create(
        server,
        json!({"app": "prod/db", "action": "stop", "requested-by": "carl"}),
    );
    assert_eq!(code, 202, "{stop}");
    assert_eq!(stop["phase"], "awaiting-approval");
    assert_eq!(stop["admission"]["decision"], "require-approval");
    let stop_id = id(&stop);
    server.app_until("prod/db", "approval shown", PATIENCE, |v| {
        v["transitional"]["phase"] == "awaiting-approval"
    });
    let (code, early) = patch(server, &stop_id, json!({"phase": "running"}));
    assert_eq!(code, 409, "{early}");
    let (code, nameless) = act(server, &stop_id, "approve", json!({}));
    assert_eq!(
        (code, nameless["error"]["field"].clone()),
        (422, json!("by")),
        "{nameless}"
    );
    let (code, approved) = act(
        server,
        &stop_id,
        "approve",
        json!({"by": "dana", "reason": "maintenance"}),
    );
    assert_eq!(code, 200, "{approved}");
    assert_eq!(approved["phase"], "pending");
    assert_eq!(approved["review"]["by"], "dana");
    assert_eq!(approved["review"]["approved"], true);
    let (code, twice) = act(server, &stop_id, "approve", json!({"by": "dana"}));
    assert_eq!(code, 409, "{twice}");
    let (code, cancelled) = act(
        server,
        &stop_id,
        "cancel",
        json!({"by": "carl", "reason": "not tonight"}),
    );
    assert_eq!(code, 200, "{cancelled}");
    assert_eq!(cancelled["phase"], "cancelled");
    assert_eq!(cancelled["message"], "cancelled by carl: not tonight");

    // Rejected.
    let (code, delete) = create(server, json!({"app": "prod/db", "action": "stop"}));
    assert_eq!(code, 202, "{delete}");
    let (code, rejected) = act(
        server,
        &id(&delete),
        "reject",
        json!({"by": "erin", "reason": "still in use"}),
    );
    assert_eq!(code, 200, "{rejected}");
    assert_eq!(rejected["phase"], "cancelled");
    assert_eq!(rejected["review"]["approved"], false);
    assert_eq!(rejected["message"], "rejected by erin: still in use");

    // A plan: create expands into steps; progress follows them; a failed
    // step fails the task, naming it.
    let (code, created) = create(
        server,
        json!({"app": "shop/new", "action": "create", "params": {"image": "shop/new:1.0"}}),
    );
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["params"]["replicas"], 1, "defaults filled in");
    let steps: Vec<&str> = created["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "prepare-environment",
            "deploy",
            "health-check",
            "open-traffic"
        ]
    );
    let create_id = id(&created);
    let (code, skipped) = patch(
        server,
        &create_id,
        json!({"steps": [{"name": "deploy", "phase": "running"}]}),
    );
    assert_eq!(code, 409, "{skipped}");
    let (code, unknown) = patch(
        server,
        &create_id,
        json!({"steps": [{"name": "paint", "phase": "running"}]}),
    );
    assert_eq!(
        (code, unknown["error"]["field"].clone()),
        (422, json!("steps[0].name")),
        "{unknown}"
    );
    let (code, half) = patch(
        server,
        &create_id,
        json!({"steps": [{"name": "prepare-environment", "phase": "succeeded"}, {"name": "deploy", "phase": "running"}], "progress": 50}),
    );
    assert_eq!(code, 200, "{half}");
    assert_eq!(half["phase"], "running");
    assert_eq!(
        half["progress"], 37,
        "one step of four done, half of the second"
    );
    server.app_until("shop/new", "creating shown", PATIENCE, |v| {
        v["transitional"]["status"] == "creating" && v["display"]["progress"] == 37
    });
    let (code, failed) = patch(
        server,
        &create_id,
        json!({"steps": [{"name": "deploy", "phase": "failed", "message": "image pull failed"}]}),
    );
    assert_eq!(code, 200, "{failed}");
    assert_eq!(failed["phase"], "failed");
    assert_eq!(failed["message"], "step `deploy` failed: image pull failed");
    assert_eq!(failed["steps"][3]["phase"], "cancelled");

    // Parameters are checked.
    let (code, denied) = create(server, json!({"app": "shop/web", "action": "scale"}));
    assert_eq!(code, 403, "{denied}");
    assert!(
        denied["error"]["message"]
            .as_str()
            .unwrap()
            .contains("replicas")
    );
    let (code, denied) = create(
        server,
        json!({"app": "shop/web", "action": "scale", "params": {"replicas": 5000}}),
    );
    assert_eq!(code, 403, "{denied}");
    let (code, denied) = create(server, json!({"app": "shop/other", "action": "update"}));
    assert_eq!(code, 403, "{denied}");
    let (code, denied) = create(
        server,
        json!({"app": "shop/web", "action": "create", "params": {"image": "web:2"}}),
    );
    assert_eq!(code, 403, "{denied}");
    assert!(
        denied["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exists already")
    );

    // Listing and filters.
    let (code, listed) = server.send("GET", "/v1/tasks?app=prod/db", None);
    assert_eq!(code, 200);
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 2);
    let (_, cancelled) = server.send("GET", "/v1/tasks?phase=cancelled", None);
    assert_eq!(cancelled["tasks"].as_array().unwrap().len(), 2);
    let (code, one) = server.send("GET", &format!("/v1/tasks/{create_id}"), None);
    assert_eq!((code, one["phase"].clone()), (200, json!("failed")));

    vec![restart_id, stop_id, id(&delete), create_id]
}

/// A request, the status it must get, and the field its error must name.
type BadCase = (
    &'static str,
    &'static str,
    Option<&'static str>,
    u16,
    Option<&'static str>,
);

/// Bad input: a 4xx with a JSON error naming the field.
fn bad_input(server: &Server) {
    let cases: [BadCase; 9] = [
        (
            "POST",
            "/v1/tasks",
            Some(r#"{"app": "shop/web", "action": "launch"}"#),
            422,
            Some("action"),
        ),
        (
            "POST",
            "/v1/tasks",
            Some(r#"{"app": "web", "action": "start"}"#),
            422,
            Some("app"),
        ),
        (
            "POST",
            "/v1/tasks",
            Some(r#"{"app": "Shop/Web!", "action": "start"}"#),
            422,
            Some("app"),
        ),
        (
            "POST",
            "/v1/tasks",
            Some(r#"{"app": "shop/web", "action": "start", "colour": 1}"#),
            422,
            Some("colour"),
        ),
        (
            "POST",
            "/v1/tasks",
            Some(r#"{"action": "start"}"#),
            422,
            Some("app"),
        ),
        ("POST", "/v1/tasks", Some("{not json"), 400, None),
        (
            "PATCH",
            "/v1/tasks/no-such-task",
            Some(r#"{"progress": 5}"#),
            404,
            None,
        ),
        ("GET", "/v1/tasks?phase=sleeping", None, 422, Some("phase")),
        (
            "POST",
            "/v1/tasks/no-such-task/approve",
            Some(r#"{"by": "ann"}"#),
            404,
            None,
        ),
    ];
    for (method, path, body, status, field) in cases {
        let (code, error) = server.send(method, path, body);
        assert_eq!(code, status, "{method} {path} {body:?}: {error}");
        assert!(error["error"]["message"].is_string(), "{error}");
        if let Some(field) = field {
            assert_eq!(
                error["error"]["field"], field,
                "{method} {path} {body:?}: {error}"
            );
        }
    }
    // Progress out of range, on a task that exists.
    let (_, task) = create(
        server,
        json!({"app": "shop/bad", "action": "create", "params": {"image": "x:1"}}),
    );
    let (code, error) = patch(server, &id(&task), json!({"progress": 101}));
    assert_eq!(
        (code, error["error"]["field"].clone()),
        (422, json!("progress")),
        "{error}"
    );
    let (code, error) = patch(server, &id(&task), json!({"progress": 300}));
    assert_eq!(
        (code, error["error"]["field"].clone()),
        (422, json!("progress")),
        "{error}"
    );
}

fn suite(store: &str, cluster: &Cluster) {
    let data = tempfile::tempdir().unwrap();
    let mut server = host(cluster, data.path(), store);
    let ids = life_cycle(&server);
    bad_input(&server);
    let before: Vec<Value> = ids
        .iter()
        .map(|i| server.get(&format!("/v1/tasks/{i}")).1)
        .collect();
    server.kill();
    // A restart finds every task as it was.
    let server = host(cluster, data.path(), store);
    for (id, task) in ids.iter().zip(before) {
        let (code, after) = server.get(&format!("/v1/tasks/{id}"));
        assert_eq!(code, 200, "{id} lost: {after}");
        assert_eq!(after, task);
    }
}

#[test]
fn task_life_cycle_with_the_sqlite_store() {
    suite("sqlite", &cluster());
}

#[test]
fn task_life_cycle_with_the_kubernetes_store() {
    let cluster = cluster();
    define_tasks(&cluster);
    suite("kubernetes", &cluster);
    // The tasks are `Task` objects, labelled by app.
    let store = cluster.sim().store();
    let (tasks, _) = store.list(
        store.find("verdict.dev", "v1", "tasks").unwrap(),
        Some("verdict-system"),
    );
    assert!(tasks.len() >= 5, "{} Task objects", tasks.len());
    assert!(
        tasks
            .iter()
            .any(|t| t["metadata"]["labels"]["verdict.dev/app-name"] == "db"
                && t["spec"]["app"] == "prod/db")
    );
}

#[test]
fn replicas_share_tasks_through_the_kubernetes_store() {
    let cluster = cluster();
    define_tasks(&cluster);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = host(&cluster, a.path(), "kubernetes");
    let second = host(&cluster, b.path(), "kubernetes");
    let (code, task) = create(&first, json!({"app": "shop/web", "action": "restart"}));
    assert_eq!(code, 201, "{task}");
    let task_id = id(&task);
    // The other replica sees it, and its admission counts it.
    let seen = wait_until(PATIENCE, || {
        second.get(&format!("/v1/tasks/{task_id}")).0 == 200
    });
    assert!(seen.is_some(), "the second replica never saw the task");
    let (code, denied) = create(&second, json!({"app": "shop/web", "action": "stop"}));
    assert_eq!(code, 403, "{denied}");
    // A report through the second is seen by the first.
    let (code, _) = patch(
        &second,
        &task_id,
        json!({"phase": "running", "progress": 70}),
    );
    assert_eq!(code, 200);
    let seen = wait_until(PATIENCE, || {
        first.get(&format!("/v1/tasks/{task_id}")).1["progress"] == 70
    });
    assert!(seen.is_some(), "the first replica never saw the report");
    // Each write builds on the last, whichever replica made it.
    let (code, task) = patch(&first, &task_id, json!({"progress": 80}));
    assert_eq!((code, task["revision"].clone()), (200, json!(3)), "{task}");
}

#[test]
fn retention_keeps_the_newest_finished_tasks_per_app() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--task-history", "2"]);
    let mut ids = Vec::new();
    for _ in 0..4 {
        let (code, task) = create(&server, json!({"app": "shop/web", "action": "restart"}));
        assert_eq!(code, 201, "{task}");
        let (code, _) = act(&server, &id(&task), "cancel", json!({"by": "ann"}));
        assert_eq!(code, 200);
        ids.push(id(&task));
    }
    let (_, listed) = server.send("GET", "/v1/tasks?app=shop/web", None);
    let kept: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(kept, [ids[3].as_str(), ids[2].as_str()]);
}

/// Wait until a task finishes; its last state.
fn finished(server: &Server, id: &str) -> Value {
    let mut last = Value::Null;
    let done = wait_until(PATIENCE * 2, || {
        last = server.get(&format!("/v1/tasks/{id}")).1;
        ["succeeded", "failed", "cancelled"].contains(&last["phase"].as_str().unwrap_or_default())
    });
    assert!(done.is_some(), "task never finished: {last}");
    last
}

fn pod_names(cluster: &Cluster, app: &str) -> Vec<String> {
    let pods = verdict_sim::resources::find("", "v1", "pods").unwrap();
    let (items, _) = cluster.sim().store().list(pods, Some("shop"));
    items
        .iter()
        .filter(|p| p["metadata"]["labels"]["app.kubernetes.io/instance"] == app)
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_executor_carries_out_tasks_on_the_cluster() {
    let cluster = Cluster::start_with(verdict_sim::Options {
        controller: Some(std::time::Duration::from_millis(100)),
        ..verdict_sim::Options::default()
    });
    let labels = json!({"app.kubernetes.io/instance": "cart"});
    cluster.apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cart", "namespace": "shop", "labels": labels},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "cart", "image": "cart:1"}]}}}
    }));
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--execute-tasks"]);
    let running = |want: u64| {
        move |v: &Value| {
            v["stable"] == "running" && v["ready_replicas"] == want && v["transitional"].is_null()
        }
    };
    server.app_until("shop/cart", "cart running", PATIENCE, running(2));
    let run = |body: Value| -> Value {
        let (code, task) = create(&server, body);
        assert_eq!(code, 201, "{task}");
        let done = finished(&server, &id(&task));
        assert_eq!(done["phase"], "succeeded", "{done}");
        assert_eq!(done["progress"], 100);
        done
    };

    // Stop, and start again at the count it had.
    let stop = run(json!({"app": "shop/cart", "action": "stop"}));
    assert_eq!(stop["message"], "0 of 2 pods left");
    server.app_until("shop/cart", "cart stopped", PATIENCE, |v| {
        v["stable"] == "stopped"
    });
    assert!(pod_names(&cluster, "cart").is_empty());
    run(json!({"app": "shop/cart", "action": "start"}));
    server.app_until("shop/cart", "cart started", PATIENCE, running(2));

    // Scale, restart (every pod replaced), update (every pod on the image).
    run(json!({"app": "shop/cart", "action": "scale", "params": {"replicas": 3}}));
    server.app_until("shop/cart", "cart scaled", PATIENCE, running(3));
    let before = pod_names(&cluster, "cart");
    run(json!({"app": "shop/cart", "action": "restart"}));
    let after = pod_names(&cluster, "cart");
    assert_eq!(after.len(), 3);
    assert!(
        after.iter().all(|p| !before.contains(p)),
        "{before:?} → {after:?}"
    );
    run(json!({"app": "shop/cart", "action": "update", "params": {"image": "cart:2"}}));
    let pods = verdict_sim::resources::find("", "v1", "pods").unwrap();
    let (items, _) = cluster.sim().store().list(pods, Some("shop"));
    let images: Vec<&Value> = items
        .iter()
        .filter(|p| p["metadata"]["labels"]["app.kubernetes.io/instance"] == "cart")
        .map(|p| &p["spec"]["containers"][0]["image"])
        .collect();
    assert_eq!(images, [&json!("cart:2"); 3]);

    // Create (through its plan) and delete an app.
    let created =
        run(json!({"app": "shop/fresh", "action": "create", "params": {"image": "fresh:1"}}));
    assert!(
        created["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["phase"] == "succeeded"),
        "{created}"
    );
    server.app_until("shop/fresh", "fresh running", PATIENCE, running(1));
    run(json!({"app": "shop/fresh", "action": "delete"}));
    assert!(pod_names(&cluster, "fresh").is_empty());

    // What cannot be done fails, saying why.
    let (code, task) = create(&server, json!({"app": "shop/ghost", "action": "restart"}));
    assert_eq!(code, 201, "{task}");
    let failed = finished(&server, &id(&task));
    assert_eq!(failed["phase"], "failed");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("no Deployment, StatefulSet or virtual machine"),
        "{failed}"
    );
}

#[test]
fn the_kubernetes_store_without_its_definition_stops_the_host_saying_why() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--task-store",
            "kubernetes",
        ])
        .args(["--cluster-url", &cluster.sim().url()])
        .arg("--data-dir")
        .arg(data.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    wait_until(PATIENCE, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    let Some(status) = status else {
        let _ = child.kill();
        panic!("the host kept running without the Task definition");
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("task-crd.yaml"), "{stderr}");
}

#[test]
fn task_fields_are_bounded() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), "sqlite");
    let long = "a".repeat(100_000);
    for (body, field) in [
        (
            json!({"app": "shop/web", "action": "restart", "requested-by": long}),
            "requested-by",
        ),
        (
            json!({"app": "shop/web", "action": "update", "params": {"image": "web:2", "x-notes": "x".repeat(900 * 1024)}}),
            "params",
        ),
    ] {
        let (code, error) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
        assert_eq!(code, 422, "{field}: {error}");
        assert_eq!(error["error"]["field"], field, "{error}");
    }
    assert!(
        server.get("/v1/tasks").1["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Within the bounds all is well; a decision's reason is bounded too.
    let (code, task) = server.send(
        "POST",
        "/v1/tasks",
        Some(
            &json!({"app": "shop/web", "action": "restart", "requested-by": "a".repeat(256)})
                .to_string(),
        ),
    );
    assert_eq!(code, 201, "{task}");
    let id = task["id"].as_str().unwrap();
    let (code, error) = server.send(
        "POST",
        &format!("/v1/tasks/{id}/cancel"),
        Some(&json!({"by": "ana", "reason": "r".repeat(5000)}).to_string()),
    );
    assert_eq!(code, 422, "{error}");
    assert_eq!(error["error"]["field"], "reason");
    let (code, _) = server.send(
        "POST",
        &format!("/v1/tasks/{id}/cancel"),
        Some(&json!({"by": "ana", "reason": "done"}).to_string()),
    );
    assert_eq!(code, 200);
}

#[test]
fn task_lists_come_in_pages() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), "sqlite");
    for n in 0..5 {
        let body = json!({"app": format!("shop/page-{n}"), "action": "restart"}).to_string();
        assert_eq!(server.send("POST", "/v1/tasks", Some(&body)).0, 201);
    }
    let all = server.get("/v1/tasks").1;
    assert!(all["continue"].is_null(), "one page holds them all: {all}");
    let ids = |list: &Value| -> Vec<String> {
        list["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    let mut paged = Vec::new();
    let mut path = "/v1/tasks?limit=2".to_string();
    let mut pages = 0;
    loop {
        let (code, page) = server.get(&path);
        assert_eq!(code, 200, "{page}");
        assert!(page["tasks"].as_array().unwrap().len() <= 2);
        paged.extend(ids(&page));
        pages += 1;
        match page["continue"].as_str() {
            Some(mark) => path = format!("/v1/tasks?limit=2&continue={mark}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(paged, ids(&all));
    for bad in [
        "/v1/tasks?limit=0",
        "/v1/tasks?limit=1001",
        "/v1/tasks?continue=nonsense",
    ] {
        let (code, error) = server.get(bad);
        assert_eq!(code, 422, "{bad}: {error}");
    }
    // An empty mark is the first page, as in Kubernetes' lists.
    let (code, first) = server.get("/v1/tasks?limit=2&continue=");
    assert_eq!(code, 200, "{first}");
    assert_eq!(ids(&first), ids(&all)[..2]);
}

#[test]
fn applications_known_only_from_tasks_or_overrides_are_bounded() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), "sqlite");
    let limit = verdict::tasks::MAX_APPS_WITHOUT_WORKLOAD;
    // An app forced while it existed, then deleted: its override keeps it
    // known, and it counts as one of the apps without a workload.
    let (code, forced) = server.send(
        "PUT",
        "/v1/apps/prod/db/override",
        Some(r#"{"status": "running", "by": "ana", "reason": "keep"}"#),
    );
    assert_eq!(code, 200, "{forced}");
    let deployments = verdict_sim::resources::find("apps", "v1", "deployments").unwrap();
    cluster
        .sim()
        .store()
        .delete(deployments, "prod", "db")
        .unwrap();
    server.app_until("prod/db", "gone", PATIENCE, |v| {
        v["stable_reason"]
            .as_str()
            .is_some_and(|r| r.contains("no longer exists"))
    });
    // As many more names that exist nowhere as are kept, each with a task
    // in flight.
    let mut ids = Vec::new();
    for n in 0..limit - 1 {
        let (code, task) = create(
            &server,
            json!({"app": format!("ghost/app-{n}"), "action": "create", "params": {"image": "web:1"}}),
        );
        assert_eq!(code, 201, "{n}: {task}");
        ids.push(id(&task));
    }
    // One more is refused, saying why; an application with a workload is
    // not held back by them.
    let one_more =
        json!({"app": "ghost/one-more", "action": "create", "params": {"image": "web:1"}});
    let (code, refused) = create(&server, one_more.clone());
    assert_eq!(code, 403, "{refused}");
    let reason = refused["error"]["message"].as_str().unwrap();
    assert!(
        reason.contains(&format!("{limit} applications with no workload are kept"))
            && reason.contains("override"),
        "{reason}"
    );
    let (code, real) = create(&server, json!({"app": "shop/web", "action": "restart"}));
    assert!(code == 201 || code == 202, "{real}");
    // Lifting the deleted app's override makes room.
    let (code, lifted) = server.send("DELETE", "/v1/apps/prod/db/override?by=ana", None);
    assert_eq!(code, 200, "{lifted}");
    let (code, admitted) = create(&server, one_more);
    assert_eq!(code, 201, "{admitted}");
    // And once one of them has finished, it makes room: its tasks go.
    let two_more =
        json!({"app": "ghost/two-more", "action": "create", "params": {"image": "web:1"}});
    assert_eq!(create(&server, two_more.clone()).0, 403);
    let (code, done) = act(&server, &ids[7], "cancel", json!({"by": "ana"}));
    assert_eq!(code, 200, "{done}");
    let (code, admitted) = create(&server, two_more);
    assert_eq!(code, 201, "{admitted}");
    assert_eq!(server.get(&format!("/v1/tasks/{}", ids[7])).0, 404);
    assert_eq!(server.get(&format!("/v1/tasks/{}", ids[8])).0, 200);
    let (_, listed) = server.get("/v1/tasks?app=ghost/app-7");
    assert_eq!(listed["tasks"], json!([]), "{listed}");
}

#[test]
fn a_never_seen_app_is_judged_on_the_same_facts_the_first_time_and_the_second() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), "sqlite");
    let restart = json!({"app": "ghost/web", "action": "restart"});
    let (first, answer) = create(&server, restart.clone());
    let (second, again) = create(&server, restart);
    assert_eq!(
        first, 403,
        "a restart of an app that does not exist: {answer}"
    );
    assert_eq!(
        (first, &answer["error"]["message"]),
        (second, &again["error"]["message"])
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("does not exist")),
        "{answer}"
    );
    // Creating it is what is let in.
    let (code, created) = create(
        &server,
        json!({"app": "ghost/web", "action": "create", "params": {"image": "web:1"}}),
    );
    assert_eq!(code, 201, "{created}");
}
