//! Task records as `Task` objects on the real API server: the chart's CRD
//! is accepted, the server's schema validation refuses a malformed Task,
//! and two verdict replicas share their tasks through it.

use std::path::Path;

use serde_json::{Value, json};
use verdict_testcluster::Cluster;

use super::{PATIENCE, follow, shared, unique};
use crate::support::wait_until;

/// A CRD of the chart's `crds/`, applied as `helm install` applies it,
/// once the server serves it.
pub fn install_crd(cluster: &Cluster, file: &str, name: &str) {
    let crd = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/chart/verdict/crds")
        .join(file);
    cluster
        .kubectl_run(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                crd.to_str().unwrap(),
            ],
            None,
        )
        .unwrap();
    cluster
        .kubectl_run(
            &[
                "wait",
                "--for=condition=Established",
                &format!("crd/{name}"),
                "--timeout=60s",
            ],
            None,
        )
        .unwrap();
}

/// The chart's Task CRD.
pub fn install_task_crd(cluster: &Cluster) {
    install_crd(cluster, "task-crd.yaml", "tasks.verdict.dev");
}

fn task(ns: &str, spec: Value) -> String {
    json!({
        "apiVersion": "verdict.dev/v1", "kind": "Task",
        "metadata": {"name": "t-malformed", "namespace": ns},
        "spec": spec,
    })
    .to_string()
}

#[test]
fn the_task_crd_is_served_and_validated_by_the_real_api_server() {
    let Some(cluster) = shared("the_task_crd_is_served_and_validated_by_the_real_api_server")
    else {
        return;
    };
    install_task_crd(cluster);
    let ns = &unique("real-task-schema");
    cluster.create_namespace(ns, &[]).unwrap();

    let valid = json!({
        "id": "t-malformed", "app": "shop/web", "action": "scale", "phase": "pending",
        "progress": 0, "created-at": "2026-11-30T10:00:00Z", "updated-at": "2026-11-30T10:00:00Z",
        "revision": 1, "params": {"replicas": 3}, "admission": {"decision": "allow"},
    });
    // Each of these breaks the schema in one place.
    let broken = [
        ("phase", json!("exploded"), "Unsupported value"),
        (
            "progress",
            json!(150),
            "should be less than or equal to 100",
        ),
        ("app", json!("Shop/Web!"), "should match"),
        ("action", json!("reboot"), "Unsupported value"),
    ];
    for (field, value, message) in broken {
        let mut spec = valid.clone();
        spec[field] = value;
        let refused = cluster
            .apply(&task(ns, spec))
            .expect_err(&format!("a Task with a bad {field} was accepted"));
        let text = refused.to_string();
        assert!(
            text.contains(&format!("spec.{field}")) && text.contains(message),
            "{field}: {text}"
        );
    }
    let mut missing = valid.clone();
    missing.as_object_mut().unwrap().remove("revision");
    let refused = cluster.apply(&task(ns, missing)).unwrap_err().to_string();
    assert!(
        refused.contains("spec.revision: Required value"),
        "{refused}"
    );

    // Every action of the task model is one the schema takes (the schema
    // is generated from the model), `migrate` among them; and so is a
    // lone host's term, whose `alone` the server keeps.
    let mut migrate = valid.clone();
    migrate["action"] = json!("migrate");
    migrate["actor"] = json!({"holder": "verdict-0", "term": 0, "alone": true});
    cluster.apply(&task(ns, migrate)).unwrap();
    let kept = cluster
        .kubectl_run(
            &["get", "task", "t-malformed", "-n", ns, "-o", "json"],
            None,
        )
        .unwrap();
    let kept: Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept["spec"]["action"], "migrate", "{kept}");
    assert_eq!(kept["spec"]["actor"]["alone"], true, "{kept}");

    // The valid one is taken, and `kubectl get tasks` prints its columns.
    cluster.apply(&task(ns, valid)).unwrap();
    let table = cluster
        .kubectl_run(&["get", "tasks", "-n", ns], None)
        .unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "APP", "ACTION", "PHASE", "PROGRESS", "AGE"],
        "{table}"
    );
    assert!(
        table.contains("shop/web") && table.contains("scale"),
        "{table}"
    );
}

#[test]
fn two_replicas_share_their_tasks_through_the_real_api_server() {
    let Some(cluster) = shared("two_replicas_share_their_tasks_through_the_real_api_server") else {
        return;
    };
    install_task_crd(cluster);
    let tasks_ns = &unique("real-task-store");
    let app_ns = &unique("real-task-app");
    let app = format!("{app_ns}/web");
    cluster.create_namespace(tasks_ns, &[]).unwrap();
    cluster.create_namespace(app_ns, &[]).unwrap();
    cluster
        .apply(&super::deployment(app_ns, "web", 1, "0s").to_string())
        .unwrap();

    let flags = ["--task-store", "kubernetes", "--tasks-namespace", tasks_ns];
    let (a_data, b_data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = follow(&cluster.kubeconfig(), a_data.path(), &flags);
    let b = follow(&cluster.kubeconfig(), b_data.path(), &flags);
    for server in [&a, &b] {
        assert!(
            wait_until(PATIENCE, || server.get("/readyz").0 == 200).is_some(),
            "{}",
            server.get("/readyz").1
        );
    }

    let (status, created) = a.send(
        "POST",
        "/v1/tasks",
        Some(&format!(r#"{{"app": "{app}", "action": "scale", "params": {{"replicas": 2}}, "requested-by": "ops"}}"#)),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();

    // B sees it through the API server, and so does kubectl.
    let seen = wait_until(PATIENCE, || b.get(&format!("/v1/tasks/{id}")).0 == 200);
    assert!(seen.is_some(), "replica B never saw task {id}");
    // The object is named by the app and the task's place among its
    // tasks, and labelled by the app.
    let selector = format!("verdict.dev/app-namespace={app_ns},verdict.dev/app-name=web");
    let objects = cluster
        .kubectl_run(
            &[
                "get", "tasks", "-n", tasks_ns, "-l", &selector, "-o", "json",
            ],
            None,
        )
        .unwrap();
    let objects: Value = serde_json::from_str(&objects).unwrap();
    let object = objects["items"][0].clone();
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    assert!(
        name.starts_with("task-") && name.ends_with("-00000001"),
        "{name}"
    );
    assert_eq!(object["spec"]["id"], id.as_str());
    assert_eq!(object["spec"]["app"], app.as_str());
    assert_eq!(object["spec"]["requested-by"], "ops");

    // A second task for the app, asked on B while A's is in flight, is
    // refused by admission there too: B knows A's task.
    let (status, refused) = b.send(
        "POST",
        "/v1/tasks",
        Some(&format!(r#"{{"app": "{app}", "action": "restart"}}"#)),
    );
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (403, Some("denied")),
        "{refused}"
    );
    assert!(
        refused["error"]["message"].as_str().unwrap().contains(&id),
        "{refused}"
    );

    // B cancels it; A sees the cancellation.
    let (status, cancelled) = b.send("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(status, 200, "{cancelled}");
    let on_a = wait_until(PATIENCE, || {
        a.get(&format!("/v1/tasks/{id}")).1["phase"] == "cancelled"
    });
    assert!(on_a.is_some(), "{}", a.get(&format!("/v1/tasks/{id}")).1);
    let phase = cluster
        .kubectl_run(
            &[
                "get",
                "task",
                &name,
                "-n",
                tasks_ns,
                "-o",
                "jsonpath={.spec.phase}",
            ],
            None,
        )
        .unwrap();
    assert_eq!(phase, "cancelled");
}
