//! An application made of KubeVirt virtual machines, end to end on the
//! simulator: its VMs, their instances and `virt-launcher` pods grouped
//! into one app with seed 002's stages; a person forces a state on an
//! instance and on the app, sees it in the verdict, the event stream and
//! the audit, and automation's verdict comes back when the override is
//! lifted or expires — also across a restart of the host.

use serde_json::{Value, json};

use crate::events::Stream;
use crate::live::{Cluster, PATIENCE, start_host};
use crate::support::wait_until;

/// A CustomResourceDefinition of a KubeVirt kind, keeping any field.
pub fn kubevirt_crd(kind: &str, plural: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.kubevirt.io")},
        "spec": {
            "group": "kubevirt.io",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// A running VM of the app `vms/db`, its instance on `n1`, and the
/// instance's launcher pod (which carries no app label, as KubeVirt makes
/// it: it belongs to the app through its owner chain).
pub fn running_vm(name: &str) -> [Value; 3] {
    let ready =
        json!([{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
    [
        json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": "vms", "labels": {"app.kubernetes.io/instance": "db"}},
            "spec": {"runStrategy": "Always"},
            "status": {"printableStatus": "Running", "ready": true, "conditions": ready}
        }),
        json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "vms",
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": name, "uid": format!("uid-{name}"), "controller": true}]},
            "status": {"phase": "Running", "nodeName": "n1", "conditions": ready}
        }),
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("virt-launcher-{name}-x1"), "namespace": "vms",
                "labels": {"kubevirt.io": "virt-launcher"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": name, "uid": format!("uid-vmi-{name}"), "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "compute", "image": "virt-launcher:1"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "compute", "image": "virt-launcher:1", "imageID": "", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
        }),
    ]
}

/// The simulator with KubeVirt's VM and VMI kinds served and `vms/db` of
/// two running VMs.
pub fn vm_cluster() -> Cluster {
    let cluster = Cluster::start();
    cluster.apply(kubevirt_crd("VirtualMachine", "virtualmachines"));
    cluster.apply(kubevirt_crd(
        "VirtualMachineInstance",
        "virtualmachineinstances",
    ));
    cluster.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vms"}}));
    for name in ["db-0", "db-1"] {
        for object in running_vm(name) {
            cluster.apply(object);
        }
    }
    cluster
}

fn object<'a>(app: &'a Value, kind: &str, name: &str) -> &'a Value {
    app["objects"]
        .as_array()
        .and_then(|objects| {
            objects
                .iter()
                .find(|o| o["kind"] == kind && o["name"] == name)
        })
        .unwrap_or(&Value::Null)
}

#[test]
fn an_app_of_virtual_machines_shows_its_instances_and_a_forced_state_wins_until_lifted() {
    let cluster = vm_cluster();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &[]);

    // Two VMs, each with its instance and launcher pod: one app, 2/2, the
    // launcher pods shown but not counted again.
    // Each kind is watched apart: wait for all of them in the verdict.
    let app = server.app_until("vms/db", "both VMs ready", PATIENCE, |v| {
        v["stable"] == "running"
            && v["ready_replicas"] == 2
            && v["objects"].as_array().map(Vec::len) == Some(4)
            && v["groups"].as_array().map(Vec::len) == Some(2)
            && v["objects"]
                .as_array()
                .is_some_and(|o| o.iter().all(|o| o["status"].is_string()))
    });
    assert_eq!(
        (&app["ready_replicas"], &app["expected_replicas"]),
        (&json!(2), &json!(2)),
        "{app}"
    );
    let vm = object(&app, "VirtualMachine", "db-0");
    assert_eq!(vm["status"], "ready", "{app}");
    assert_eq!(vm["stage"], "ready");
    assert_eq!(vm["app_instance"], true);
    assert_eq!(vm["node"], "n1");
    assert_eq!(vm["pods"], json!(["virt-launcher-db-0-x1"]));
    assert_eq!(vm["resource"], "kubevirt.io/v1/VirtualMachine");
    assert_eq!(
        object(&app, "VirtualMachineInstance", "db-0")["app_instance"],
        false
    );
    let pods: Vec<&str> = app["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(pods, ["virt-launcher-db-0-x1", "virt-launcher-db-1-x1"]);

    // Bad requests are refused, naming what is wrong; nothing is stored.
    let put = |path: &str, body: Value| server.send("PUT", path, Some(&body.to_string()));
    let (code, body) = put(
        "/v1/apps/vms/db/instances/db-1/override",
        json!({"status": "on-fire", "by": "bob"}),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("offline"),
        "{body}"
    );
    let (code, body) = put(
        "/v1/apps/vms/db/instances/virt-launcher-db-1-x1/override",
        json!({"status": "offline", "by": "bob"}),
    );
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (404, Some("no-such-instance")),
        "{body}"
    );
    let (code, _) = put(
        "/v1/apps/vms/nope/override",
        json!({"status": "running", "by": "bob"}),
    );
    assert_eq!(code, 404);
    let (code, body) = put(
        "/v1/apps/vms/db/override",
        json!({"status": "running", "by": "  "}),
    );
    assert_eq!(code, 422, "{body}");
    let (code, body) = put(
        "/v1/apps/vms/db/override",
        json!({"status": "not-existed", "by": "bob"}),
    );
    assert_eq!(
        code, 422,
        "only the cluster can say an app does not exist: {body}"
    );
    assert_eq!(server.get("/v1/overrides").1["overrides"], json!([]));

    // A person marks db-1 offline: it no longer counts, and says why.
    let stream = Stream::open(&server, "", None);
    let (code, body) = put(
        "/v1/apps/vms/db/instances/db-1/override",
        json!({"status": "offline", "by": "bob", "reason": "disk errors"}),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["change"]["event"], "set");
    let app = server.app_until("vms/db", "db-1 forced offline", PATIENCE, |v| {
        object(v, "VirtualMachine", "db-1")["stage"] == "offline"
    });
    assert_eq!(app["stable"], "degraded", "{app}");
    assert_eq!(app["ready_replicas"], 1);
    let forced = object(&app, "VirtualMachine", "db-1");
    assert_eq!(forced["forced"]["by"], "bob");
    assert_eq!(forced["forced"]["status"], "offline");
    assert!(
        forced["message"]
            .as_str()
            .unwrap()
            .contains("forced by bob: disk errors")
    );
    let told = stream.until("the override's event", |m| m.event == "override");
    assert_eq!(told.data["data"]["instance"], "db-1", "{:?}", told.data);
    assert_eq!(told.data["data"]["by"], "bob");

    // The whole app forced, for a second: it wins over everything, then
    // lapses by itself and is audited as expired.
    let (code, body) = put(
        "/v1/apps/vms/db/override",
        json!({"status": "stopped", "by": "alice", "reason": "maintenance", "expires-in-s": 1}),
    );
    assert_eq!(code, 200, "{body}");
    let app = server.app_until("vms/db", "the app forced stopped", PATIENCE, |v| {
        v["stable"] == "stopped"
    });
    assert_eq!(
        app["display"]["text"], "Stopped — forced by alice: maintenance",
        "{app}"
    );
    assert_eq!(app["forced"]["by"], "alice");
    server.app_until("vms/db", "the app override expired", PATIENCE, |v| {
        v["stable"] == "degraded" && v["forced"].is_null()
    });
    let audited = || {
        let history = server.get("/v1/apps/vms/db/overrides/history").1;
        let events: Vec<String> = history["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["event"].as_str().unwrap().to_string())
            .collect();
        events
    };
    let waited = wait_until(PATIENCE, || audited() == ["expired", "set", "set"]);
    assert!(waited.is_some(), "{:?}", audited());

    // What is in force survives a restart of the host.
    drop(server);
    let server = start_host(&cluster, data.path(), &[]);
    let app = server.app_until(
        "vms/db",
        "db-1 still forced after a restart",
        PATIENCE,
        |v| object(v, "VirtualMachine", "db-1")["stage"] == "offline",
    );
    assert_eq!(app["ready_replicas"], 1);

    // Lifted by hand: automation's verdict is back, and the audit says who.
    let (code, body) = server.send(
        "DELETE",
        "/v1/apps/vms/db/instances/db-1/override?by=bob&reason=disk%20replaced",
        None,
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["change"]["event"], "cleared");
    server.app_until("vms/db", "db-1 ready again", PATIENCE, |v| {
        v["stable"] == "running" && object(v, "VirtualMachine", "db-1")["stage"] == "ready"
    });
    let (code, body) = server.send(
        "DELETE",
        "/v1/apps/vms/db/instances/db-1/override?by=bob",
        None,
    );
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (404, Some("no-override")),
        "{body}"
    );
    let history = server.get("/v1/apps/vms/db/overrides/history?limit=1").1;
    assert_eq!(history["changes"][0]["event"], "cleared");
    assert_eq!(history["changes"][0]["by"], "bob");
    assert_eq!(history["changes"][0]["reason"], "disk replaced");
    assert!(
        wait_until(PATIENCE, || server.get("/v1/overrides").1["overrides"]
            == json!([]))
        .is_some()
    );
}

/// The simulator playing KubeVirt (its controller on), with two ready
/// nodes, a pool `vms/db` of two VMs and a halted VM `vms/solo`.
fn played_cluster() -> Cluster {
    let cluster = Cluster::start_with(verdict_sim::Options {
        controller: Some(std::time::Duration::from_millis(200)),
        kubevirt: true,
        ..verdict_sim::Options::default()
    });
    cluster.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}));
    cluster.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vms"}}));
    cluster.apply(json!({
        "apiVersion": "pool.kubevirt.io/v1alpha1", "kind": "VirtualMachinePool",
        "metadata": {"name": "db", "namespace": "vms", "labels": {"app.kubernetes.io/instance": "db"}},
        "spec": {"replicas": 2, "virtualMachineTemplate": {
            "metadata": {"labels": {"app.kubernetes.io/instance": "db"}},
            "spec": {"runStrategy": "Always",
                     "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "db"}}, "spec": {}}}}}
    }));
    cluster.apply(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "solo", "namespace": "vms", "labels": {"app.kubernetes.io/instance": "solo"}},
        "spec": {"runStrategy": "Halted",
                 "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "solo"}}, "spec": {}}}
    }));
    cluster
}

/// Ask for a task; its id.
pub fn ask(server: &crate::serve::Server, app: &str, action: &str, params: Value) -> String {
    let body = json!({"app": app, "action": action, "params": params, "requested-by": "test"});
    let (code, task) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
    assert_eq!(code, 201, "{action} {app}: {task}");
    task["id"].as_str().unwrap().to_string()
}

/// Wait until a task has finished; the task.
fn finished(server: &crate::serve::Server, id: &str) -> Value {
    finished_within(server, id, PATIENCE)
}

/// Wait, for at most `limit`, until a task has finished; the task.
pub fn finished_within(
    server: &crate::serve::Server,
    id: &str,
    limit: std::time::Duration,
) -> Value {
    let mut last = Value::Null;
    let waited = wait_until(limit, || {
        last = server.get(&format!("/v1/tasks/{id}")).1;
        ["succeeded", "failed", "cancelled"].contains(&last["phase"].as_str().unwrap_or(""))
    });
    assert!(waited.is_some(), "task {id} never finished: {last}");
    last
}

#[test]
fn tasks_start_stop_restart_scale_and_migrate_virtual_machines() {
    let cluster = played_cluster();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--execute-tasks"]);
    server.app_until("vms/db", "the pool's two VMs ready", PATIENCE, |v| {
        v["stable"] == "running" && v["ready_replicas"] == 2
    });

    // Scale the pool: a third VM, started and counted.
    let task = finished(
        &server,
        &ask(&server, "vms/db", "scale", json!({"replicas": 3})),
    );
    assert_eq!(task["phase"], "succeeded", "{task}");
    let app = server.app_until("vms/db", "three ready", PATIENCE, |v| {
        v["ready_replicas"] == 3
    });
    assert_eq!(app["expected_replicas"], 3);

    // Stop: nothing runs and the app is stopped; start brings back the
    // three it had.
    let task = finished(&server, &ask(&server, "vms/db", "stop", json!({})));
    assert_eq!(task["phase"], "succeeded", "{task}");
    server.app_until("vms/db", "stopped", PATIENCE, |v| v["stable"] == "stopped");
    let task = finished(&server, &ask(&server, "vms/db", "start", json!({})));
    assert_eq!(task["phase"], "succeeded", "{task}");
    server.app_until("vms/db", "three ready again", PATIENCE, |v| {
        v["stable"] == "running" && v["ready_replicas"] == 3
    });

    // Restart: every instance is replaced by a new one, ready.
    let task = finished(&server, &ask(&server, "vms/db", "restart", json!({})));
    assert_eq!(task["phase"], "succeeded", "{task}");
    assert!(task["message"].as_str().unwrap().contains("3/3"), "{task}");

    // Migrate db-0's instance: it runs on the other node afterwards.
    let node_of = |app: &Value| {
        app["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["kind"] == "VirtualMachineInstance" && o["name"] == "db-0")
            .map(|o| o["node"].clone())
            .unwrap_or(Value::Null)
    };
    let before = node_of(&server.get("/v1/apps/vms/db").1);
    assert!(before.is_string(), "db-0 runs somewhere");
    let task = finished(
        &server,
        &ask(&server, "vms/db", "migrate", json!({"instance": "db-0"})),
    );
    assert_eq!(task["phase"], "succeeded", "{task}");
    server.app_until("vms/db", "db-0 on the other node", PATIENCE, |v| {
        node_of(v).is_string() && node_of(v) != before
    });

    // Admission refuses a migration of a VM the app does not have.
    let body = json!({"app": "vms/db", "action": "migrate", "params": {"instance": "nope"}});
    let (code, answer) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
    assert_eq!(code, 403, "{answer}");

    // A lone VM: started through its run strategy, then stopped again;
    // scaling it fails, saying why.
    server.app_until("vms/solo", "solo stopped", PATIENCE, |v| {
        v["stable"] == "stopped"
    });
    let task = finished(&server, &ask(&server, "vms/solo", "start", json!({})));
    assert_eq!(task["phase"], "succeeded", "{task}");
    server.app_until("vms/solo", "solo running", PATIENCE, |v| {
        v["stable"] == "running" && v["ready_replicas"] == 1
    });
    let task = finished(
        &server,
        &ask(&server, "vms/solo", "scale", json!({"replicas": 2})),
    );
    assert_eq!(task["phase"], "failed", "{task}");
    assert!(
        task["message"]
            .as_str()
            .unwrap()
            .contains("VirtualMachinePool"),
        "{task}"
    );
    let task = finished(&server, &ask(&server, "vms/solo", "stop", json!({})));
    assert_eq!(task["phase"], "succeeded", "{task}");
    server.app_until("vms/solo", "solo stopped again", PATIENCE, |v| {
        v["stable"] == "stopped"
    });
}

/// The instance of `vm` in the app's view: its node, when it has one.
fn instance_node(server: &crate::serve::Server, app: &str, vm: &str) -> Option<String> {
    let view = server.get(&format!("/v1/apps/{app}")).1;
    view["objects"].as_array()?.iter().find_map(|o| {
        (o["kind"] == "VirtualMachineInstance" && o["name"] == vm)
            .then(|| o["node"].as_str().map(String::from))
            .flatten()
    })
}

/// Three more nodes (so that one lost is no storm), and the host with the
/// failover tests' short clocks, more failover settings, enforcing.
fn failover_host(
    cluster: &Cluster,
    data: &std::path::Path,
    settings: &str,
) -> crate::serve::Server {
    for n in ["n3", "n4", "n5"] {
        cluster.apply(crate::failover::node(n));
    }
    let config = data.join("verdict.toml");
    std::fs::write(&config, format!("{}{settings}\n", crate::failover::CONFIG)).unwrap();
    start_host(
        cluster,
        data,
        &["--config", config.to_str().unwrap(), "--failover-enforce"],
    )
}

#[test]
fn a_lost_nodes_instances_go_unknown_then_are_repaired_elsewhere_with_the_brakes_and_audit() {
    use crate::failover::{decision_until, done, lose, send, state_of};
    let cluster = played_cluster();
    // A VM whose disk only one node may write: its repair waits for a person.
    cluster.apply(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vault", "namespace": "vms", "labels": {"app.kubernetes.io/instance": "vault"}},
        "spec": {"runStrategy": "Always",
                 "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "vault"}},
                              "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "vault-data"}}]}}}
    }));
    let data = tempfile::tempdir().unwrap();
    let server = failover_host(&cluster, data.path(), "");
    server.app_until("vms/db", "the pool's two VMs ready", PATIENCE, |v| {
        v["stable"] == "running" && v["ready_replicas"] == 2
    });
    server.app_until("vms/vault", "vault ready", PATIENCE, |v| {
        v["stable"] == "running"
    });
    // Each kind is watched apart: wait until every instance's node is seen.
    let placed = wait_until(PATIENCE, || {
        instance_node(&server, "vms/vault", "vault").is_some()
            && ["db-0", "db-1"]
                .iter()
                .all(|vm| instance_node(&server, "vms/db", vm).is_some())
    });
    assert!(placed.is_some(), "the instances were never all placed");
    let lost = instance_node(&server, "vms/vault", "vault").expect("vault runs on a node");
    // db's instances on the same node go with it.
    let db_on_lost: Vec<String> = ["db-0", "db-1"]
        .into_iter()
        .filter(|vm| instance_node(&server, "vms/db", vm).as_deref() == Some(lost.as_str()))
        .map(String::from)
        .collect();
    lose(&cluster, &lost);

    // First unknown, seed 002's short outage.
    let app = server.app_until("vms/vault", "vault unknown", PATIENCE, |v| {
        object(v, "VirtualMachine", "vault")["stage"] == "unknown"
    });
    assert_eq!(
        object(&app, "VirtualMachine", "vault")["status"],
        "unknown",
        "{app}"
    );

    // Offline: vault's repair waits for a person; db's instances, which
    // hold no such disk, are repaired at once and run elsewhere.
    let repair_vault = "repair:VirtualMachineInstance/vms/vault";
    decision_until(&server, &lost, "offline, vault held", |d| {
        d["health"] == "offline"
            && state_of(d, repair_vault).as_deref() == Some("awaiting-approval")
    });
    for vm in &db_on_lost {
        let key = format!("repair:VirtualMachineInstance/vms/{vm}");
        decision_until(&server, &lost, "db's instance repaired", |d| done(d, &key));
        server.app_until(
            "vms/db",
            "db's instance back on another node",
            PATIENCE,
            |v| {
                let node = object(v, "VirtualMachineInstance", vm)["node"].clone();
                node.is_string() && node != lost.as_str() && v["ready_replicas"] == 2
            },
        );
    }
    assert_eq!(
        instance_node(&server, "vms/vault", "vault").as_deref(),
        Some(lost.as_str())
    );

    // Approved, vault is repaired: the node is fenced, the instance runs
    // elsewhere, and the audit says who approved.
    let (code, approved) = send(
        &server,
        "POST",
        &format!("/v1/failover/nodes/{lost}/approve"),
        json!({"action": repair_vault, "by": "ana", "reason": "the node is powered off"}),
    );
    assert_eq!(code, 200, "{approved}");
    decision_until(&server, &lost, "vault repaired", |d| done(d, repair_vault));
    server.app_until("vms/vault", "vault back elsewhere", PATIENCE, |v| {
        let node = object(v, "VirtualMachineInstance", "vault")["node"].clone();
        v["stable"] == "running" && node.is_string() && node != lost.as_str()
    });
    let nodes = verdict_sim::resources::find("", "v1", "nodes").unwrap();
    let fenced = cluster.sim().store().get(nodes, "", &lost).unwrap();
    assert!(
        fenced["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/out-of-service"),
        "{fenced}"
    );
    let history = server
        .get(&format!("/v1/failover/history?node={lost}&limit=1000"))
        .1;
    let records = history["records"].as_array().unwrap();
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "approval" && r["by"] == "ana")
    );
    assert!(
        records
            .iter()
            .any(|r| r["inputs"]["exclusive-instances"] == 1),
        "the audit counts the instance with an exclusive disk"
    );
    let tasks = server.get("/v1/tasks").1;
    let repairs: Vec<&Value> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["requested-by"] == "verdict-failover" && t["params"]["failover"]["action"] == "repair"
        })
        .collect();
    assert_eq!(repairs.len(), db_on_lost.len() + 1, "{repairs:#?}");
    assert!(
        repairs.iter().all(|t| t["phase"] == "succeeded"),
        "{repairs:#?}"
    );
}

#[test]
fn with_scale_down_a_lost_nodes_pool_members_are_given_up_on_approval() {
    use crate::failover::{decision_until, done, lose, send, state_of};
    let cluster = played_cluster();
    let data = tempfile::tempdir().unwrap();
    let server = failover_host(&cluster, data.path(), "remedy = \"scale-down\"");
    server.app_until("vms/db", "the pool's two VMs ready", PATIENCE, |v| {
        v["stable"] == "running" && v["ready_replicas"] == 2
    });
    let placed = wait_until(PATIENCE, || {
        ["db-0", "db-1"]
            .iter()
            .all(|vm| instance_node(&server, "vms/db", vm).is_some())
    });
    assert!(placed.is_some(), "the instances were never all placed");
    let lost = instance_node(&server, "vms/db", "db-1").expect("db-1 runs on a node");
    // The pool gives up its members on the lost node (db-1, and db-0 when
    // it runs there too).
    let members = ["db-0", "db-1"]
        .into_iter()
        .filter(|vm| instance_node(&server, "vms/db", vm).as_deref() == Some(lost.as_str()))
        .count();
    let left = 2 - members;
    lose(&cluster, &lost);
    let rescale = &format!("rescale:VirtualMachinePool/vms/db={left}");
    decision_until(&server, &lost, "the pool's shrinking held", |d| {
        d["health"] == "offline" && state_of(d, rescale).as_deref() == Some("awaiting-approval")
    });
    let (code, approved) = send(
        &server,
        "POST",
        &format!("/v1/failover/nodes/{lost}/approve"),
        json!({"action": rescale, "by": "ana"}),
    );
    assert_eq!(code, 200, "{approved}");
    decision_until(&server, &lost, "the pool shrunk", |d| done(d, rescale));
    let pools = verdict_sim::resources::find_among(
        &cluster.sim().store().resources(),
        "pool.kubevirt.io",
        "v1alpha1",
        "virtualmachinepools",
    )
    .unwrap();
    let pool = cluster.sim().store().get(pools, "vms", "db").unwrap();
    assert_eq!(pool["spec"]["replicas"], left, "{pool}");
}
