//! verdict follows what the real API server serves: workloads and pods
//! created through it and run by KWOK, a crash loop, a scale-up, a lost
//! node, a deleted namespace, and a watch across a kill and restart of the
//! API server.

use verdict_testcluster::Options;

use super::{
    PATIENCE, deployment, follow, own_node, pinned, private, remove_node, shared, unique, until,
};
use crate::support::wait_until;

#[test]
fn verdicts_follow_workloads_run_by_the_real_control_plane() {
    let Some(cluster) = shared("verdicts_follow_workloads_run_by_the_real_control_plane") else {
        return;
    };
    let ns = &unique("real-follow");
    let node = &unique("follow");
    own_node(cluster, node);
    cluster.create_namespace(ns, &[]).unwrap();
    cluster
        .apply(&pinned(deployment(ns, "web", 1, "8s"), node).to_string())
        .unwrap();
    // A StatefulSet and a DaemonSet are followed too.
    cluster
        .apply(
            &serde_json::json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": ns, "labels": {"app.kubernetes.io/instance": "db"}},
                "spec": {"replicas": 2, "serviceName": "db",
                    "selector": {"matchLabels": {"app.kubernetes.io/instance": "db"}},
                    "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "db"}},
                        "spec": {"containers": [{"name": "db", "image": "db:1"}]}}},
            })
            .to_string(),
        )
        .unwrap();
    cluster
        .apply(
            &serde_json::json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "agent", "namespace": ns, "labels": {"app.kubernetes.io/instance": "agent"}},
                "spec": {"selector": {"matchLabels": {"app.kubernetes.io/instance": "agent"}},
                    "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "agent"}},
                        "spec": {"containers": [{"name": "agent", "image": "agent:1"}]}}},
            })
            .to_string(),
        )
        .unwrap();

    let data = tempfile::tempdir().unwrap();
    let server = follow(&cluster.kubeconfig(), data.path(), &[]);
    assert!(
        wait_until(PATIENCE, || server.get("/readyz").0 == 200).is_some(),
        "never ready: {}",
        server.get("/readyz").1
    );
    let web = format!("{ns}/web");
    let running = until(&server, &web, "running", |v| v["stable"] == "running");
    assert_eq!(running["ready_replicas"], 1);
    assert_eq!(running["groups"][0]["node"], node.as_str());
    let db = until(&server, &format!("{ns}/db"), "db running", |v| {
        v["stable"] == "running"
    });
    assert_eq!(db["expected_replicas"], 2);
    // The DaemonSet runs one pod on every node that takes it (the test's
    // own node is tainted against it).
    until(&server, &format!("{ns}/agent"), "agent running", |v| {
        v["stable"] == "running" && v["ready_replicas"].as_u64() >= Some(1)
    });

    // A node's heartbeat is its kubelet's Lease, renewed every few
    // seconds; the node's Ready condition is posted only every few minutes.
    let heartbeat = |server: &crate::serve::Server| {
        server.get("/v1/nodes").1["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == node.as_str())
            .and_then(|n| n["last_heartbeat"].as_str().map(String::from))
    };
    let condition = cluster
        .kubectl_run(
            &[
                "get",
                "node",
                node,
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}"#,
            ],
            None,
        )
        .unwrap();
    let renewed = wait_until(PATIENCE, || {
        heartbeat(&server).is_some_and(|h| h.get(..19) > condition.get(..19))
    });
    assert!(
        renewed.is_some(),
        "the heartbeat never passed the Ready condition's {condition}: {:?}",
        heartbeat(&server)
    );

    // Scale up: new pods take 8 s to start, so the app is degraded first.
    cluster
        .kubectl_run(
            &["scale", "deployment", "web", "-n", ns, "--replicas=3"],
            None,
        )
        .unwrap();
    let degraded = until(&server, &web, "degraded", |v| {
        v["stable"] == "degraded" && v["expected_replicas"] == 3
    });
    assert!(degraded["ready_replicas"].as_u64() < Some(3), "{degraded}");
    let scaled = until(&server, &web, "running at 3", |v| {
        v["stable"] == "running" && v["ready_replicas"] == 3
    });
    assert_eq!(scaled["groups"].as_array().unwrap().len(), 3);

    // The pods start crash-looping (KWOK's kubelet reports it so).
    cluster
        .chaos(ns, "app.kubernetes.io/instance=web", Some("crash-loop"))
        .unwrap();
    let panic = until(&server, &web, "panic", |v| {
        v["stable"] == "panic"
            && v["groups"]
                .as_array()
                .is_some_and(|g| g.iter().all(|g| g["reason"] == "CrashLoopBackOff"))
    });
    assert_eq!(panic["groups"][0]["instances"][0]["restart_count"], 5);
    cluster
        .chaos(ns, "app.kubernetes.io/instance=web", None)
        .unwrap();
    until(&server, &web, "running after the crash loop", |v| {
        v["stable"] == "running"
    });

    // The node's kubelet stops: the node lifecycle controller marks the
    // node Unknown and its pods not ready.
    cluster.stop_kubelet(node).unwrap();
    let lost = until(&server, &web, "pods on a lost node", |v| {
        v["groups"]
            .as_array()
            .is_some_and(|g| !g.is_empty() && g.iter().all(|g| g["status"] == "unknown"))
    });
    assert_eq!(lost["groups"][0]["reason"], "NodeUnreachable");
    let nodes = server.get("/v1/nodes").1;
    let ours = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node.as_str())
        .unwrap()
        .clone();
    assert_eq!(ours["ready"], "Unknown", "{ours}");
    cluster.start_kubelet(node).unwrap();
    until(&server, &web, "pods back with their node", |v| {
        v["stable"] == "running"
            && v["groups"].as_array().is_some_and(|g| {
                g.iter().all(|g| {
                    g["status"]
                        .as_str()
                        .is_some_and(|s| s.starts_with("running-"))
                })
            })
    });

    // The namespace goes: the app has not existed since.
    cluster
        .kubectl_run(&["delete", "namespace", ns, "--wait=false"], None)
        .unwrap();
    let gone = until(&server, &web, "not-existed", |v| {
        v["stable"] == "not-existed"
    });
    assert!(gone["groups"].as_array().unwrap().is_empty(), "{gone}");
    remove_node(cluster, node);
}

#[test]
fn a_watch_across_an_api_server_restart_loses_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut cluster) = private(
        "a_watch_across_an_api_server_restart_loses_no_update",
        dir.path(),
        Options {
            nodes: 1,
            ..Options::default()
        },
    ) else {
        return;
    };
    cluster.create_namespace("shop", &[]).unwrap();
    cluster
        .apply(&deployment("shop", "web", 1, "0s").to_string())
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = follow(
        &cluster.kubeconfig(),
        data.path(),
        &["--stale-after-ms", "500"],
    );
    until(&server, "shop/web", "running", |v| {
        v["stable"] == "running" && v["stale"] == false
    });

    cluster.kill_apiserver().unwrap();
    assert!(
        wait_until(PATIENCE, || server.get("/readyz").0 == 503).is_some(),
        "still ready without an API server: {}",
        server.get("/readyz").1
    );
    let stale = until(&server, "shop/web", "stale", |v| v["stale"] == true);
    assert_eq!(
        stale["stable"], "running",
        "the last verdict stays, marked stale"
    );
    let readyz = server.get("/readyz").1;
    assert_eq!(readyz["ready"], false, "{readyz}");

    // The API server returns (same etcd); a change made at once is seen.
    cluster.start_apiserver().unwrap();
    cluster
        .kubectl_run(
            &["scale", "deployment", "web", "-n", "shop", "--replicas=2"],
            None,
        )
        .unwrap();
    let fresh = until(&server, "shop/web", "fresh, scaled", |v| {
        v["stale"] == false && v["expected_replicas"] == 2 && v["stable"] == "running"
    });
    assert!(fresh["observation_age_ms"].as_u64().unwrap() < 500);
    assert!(wait_until(PATIENCE, || server.get("/readyz").0 == 200).is_some());

    // Killed again; the workload is deleted as soon as the API server is
    // back, while verdict's watches are still broken (they resume with a
    // version the new server's cache does not know: 410 Gone, a new list).
    cluster.kill_apiserver().unwrap();
    assert!(wait_until(PATIENCE, || server.get("/readyz").0 == 503).is_some());
    cluster.start_apiserver().unwrap();
    cluster
        .kubectl_run(&["delete", "deployment", "web", "-n", "shop"], None)
        .unwrap();
    let deleted = until(&server, "shop/web", "the deletion seen", |v| {
        v["stable"] == "stopped"
    });
    assert_eq!(
        deleted["stable_reason"],
        "no Deployment or StatefulSet exists"
    );
    assert!(
        deleted["groups"].as_array().unwrap().is_empty(),
        "{deleted}"
    );
}
