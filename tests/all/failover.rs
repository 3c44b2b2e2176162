//! Failover scenarios against the simulator, through the real binary: the
//! default failover policy with short clocks (grace 1.5 s, offline after
//! 4 s, a returning node trusted after 5 s), the host's brakes, overrides
//! and approvals over HTTP, dry run and enforcement, and the audit records.

use std::path::Path;

use serde_json::{Value, json};

use crate::events::Stream;
use crate::live::{Cluster, PATIENCE, start_host};
use crate::serve::Server;
use crate::support::wait_until;

/// The failover policy's clocks and the host's brakes, short for tests.
pub const CONFIG: &str = r#"
[failover]
every-ms = 100
max-retries = 2
backoff-ms = 300
trust-after-ms = 600000

[settings.failover]
grace-ms = 1500
offline-after-ms = 4000
stabilize-ms = 5000
"#;

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

pub fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "a"}},
        "status": {"conditions": [{"type": "Ready", "status": "True",
            "lastHeartbeatTime": now(), "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    })
}

/// A running, ready pod on a node, owned as `owner` (`ReplicaSet web-abc`,
/// `StatefulSet db`, …) and grouped into the app `app`.
fn pod(name: &str, node: &str, owner: (&str, &str), app: &str) -> Value {
    let mut labels = json!({"app.kubernetes.io/instance": app});
    if owner.0 == "ReplicaSet" {
        labels["pod-template-hash"] = json!("abc");
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner.0, "name": owner.1, "uid": "u", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "img:1"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{"name": "main", "image": "img:1", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
    })
}

/// Five ready nodes; `shop/web` (a Deployment) with pods on n1 and n2,
/// `shop/db` (a StatefulSet) with pods on n1 and n2.
pub fn cluster() -> Cluster {
    let cluster = Cluster::start();
    for n in ["n1", "n2", "n3", "n4", "n5"] {
        cluster.apply(node(n));
    }
    cluster.apply(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "shop", "labels": {"app.kubernetes.io/instance": "db"}},
        "spec": {"replicas": 2},
        "status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2}
    }));
    cluster.apply(pod("web-2", "n2", ("ReplicaSet", "web-abc"), "web"));
    cluster.apply(pod("db-0", "n1", ("StatefulSet", "db"), "db"));
    cluster.apply(pod("db-1", "n2", ("StatefulSet", "db"), "db"));
    cluster
}

fn nodes() -> &'static verdict_sim::resources::Resource {
    verdict_sim::resources::find("", "v1", "nodes").unwrap()
}

fn pods() -> &'static verdict_sim::resources::Resource {
    verdict_sim::resources::find("", "v1", "pods").unwrap()
}

/// The node stops posting its status, as a lost kubelet does.
pub fn lose(cluster: &Cluster, name: &str) {
    set_ready(cluster, name, "Unknown");
}

fn restore(cluster: &Cluster, name: &str) {
    set_ready(cluster, name, "True");
}

fn set_ready(cluster: &Cluster, name: &str, status: &str) {
    let at = now();
    cluster
        .sim()
        .store()
        .patch(
            nodes(),
            "",
            name,
            &json!({"status": {"conditions": [{"type": "Ready", "status": status,
                "lastHeartbeatTime": at, "lastTransitionTime": at}]}}),
        )
        .unwrap();
}

fn sim_node(cluster: &Cluster, name: &str) -> Value {
    cluster.sim().store().get(nodes(), "", name).unwrap()
}

pub fn pod_exists(cluster: &Cluster, name: &str) -> bool {
    cluster.sim().store().get(pods(), "shop", name).is_ok()
}

fn host(cluster: &Cluster, data: &Path, extra: &[&str]) -> Server {
    host_with(cluster, data, extra, "")
}

/// The host, with more settings of the failover policy.
fn host_with(cluster: &Cluster, data: &Path, extra: &[&str], settings: &str) -> Server {
    let config = data.join("verdict.toml");
    std::fs::write(&config, format!("{CONFIG}{settings}\n")).unwrap();
    let mut flags = vec!["--config", config.to_str().unwrap()];
    flags.extend_from_slice(extra);
    let server = start_host(cluster, data, &flags);
    decision_until(&server, "n5", "every node judged", |d| {
        d["health"] == "healthy"
    });
    server
}

/// Wait until the decision on `node` satisfies `check`; panics with the
/// last answer when it never does.
pub fn decision_until(
    server: &Server,
    node: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let took = wait_until(PATIENCE, || {
        last = server.get("/v1/failover").1;
        decision(&last, node).is_some_and(|d| check(&d))
    });
    assert!(
        took.is_some(),
        "{what}: never happened; last answer {last:#}"
    );
    decision(&last, node).unwrap()
}

fn decision(answer: &Value, node: &str) -> Option<Value> {
    answer["nodes"]
        .as_array()?
        .iter()
        .find(|d| d["node"] == node)
        .cloned()
}

fn action<'a>(decision: &'a Value, key: &str) -> Option<&'a Value> {
    decision["actions"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
}

pub fn state_of(decision: &Value, key: &str) -> Option<String> {
    action(decision, key).and_then(|a| a["state"].as_str().map(String::from))
}

/// Whether an action on the node was done: shown done, or among what was
/// taken after the policy stopped proposing it.
pub fn done(decision: &Value, key: &str) -> bool {
    state_of(decision, key).as_deref() == Some("done")
        || decision["taken"][key]["outcome"] == "done"
}

pub fn failover_tasks(server: &Server) -> Vec<Value> {
    server.get("/v1/tasks").1["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["requested-by"] == "verdict-failover")
        .cloned()
        .collect()
}

fn history(server: &Server, node: &str) -> Vec<Value> {
    let (code, answer) = server.get(&format!("/v1/failover/history?node={node}&limit=1000"));
    assert_eq!(code, 200, "{answer}");
    answer["records"].as_array().unwrap().clone()
}

pub fn send(server: &Server, method: &str, path: &str, body: Value) -> (u16, Value) {
    server.send(method, path, Some(&body.to_string()))
}

pub const EVICT_WEB: &str = "evict:Deployment/shop/web";
pub const RELEASE_DB: &str = "release:StatefulSet/shop/db";

#[test]
fn a_short_outage_is_waited_out_without_action() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &["--failover-enforce"]);
    let stream = Stream::open(&server, "", None);
    lose(&cluster, "n2");
    let suspect = decision_until(&server, "n2", "suspect", |d| d["health"] == "suspect");
    // The change is an event on the stream too.
    let event = stream.until("a failover event", |m| {
        m.event == "failover" && m.data["data"]["node"]["node"] == "n2"
    });
    assert_eq!(event.data["data"]["node"]["health"], "suspect");
    assert_eq!(suspect["rule"], "grace-period");
    assert_eq!(state_of(&suspect, "wait").as_deref(), Some("waiting"));
    restore(&cluster, "n2");
    let back = decision_until(&server, "n2", "healthy again", |d| d["health"] == "healthy");
    assert_eq!(back["actions"], json!([]), "{back}");

    // Nothing was done: not cordoned, no pod moved, no task.
    assert!(sim_node(&cluster, "n2")["spec"]["unschedulable"].is_null());
    assert!(pod_exists(&cluster, "web-2") && pod_exists(&cluster, "db-1"));
    assert!(failover_tasks(&server).is_empty());
    let records = history(&server, "n2");
    let healths: Vec<&Value> = records.iter().rev().map(|r| &r["health"]).collect();
    assert_eq!(
        healths,
        [&json!("healthy"), &json!("suspect"), &json!("healthy")]
    );
}

#[test]
fn a_long_outage_moves_stateless_pods_and_releases_stateful_ones_on_approval() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &["--failover-enforce"]);
    lose(&cluster, "n2");

    // Past the grace period: unknown, cordoned, the stateless pods evicted
    // through a task the app shows; the stateful pods stay.
    let unknown = decision_until(&server, "n2", "evicted", |d| done(d, EVICT_WEB));
    assert!(
        done(&unknown, "cordon") && done(&unknown, "mark-unknown"),
        "{unknown}"
    );
    assert_eq!(sim_node(&cluster, "n2")["spec"]["unschedulable"], true);
    assert!(!pod_exists(&cluster, "web-2"), "web-2 was evicted");
    assert!(pod_exists(&cluster, "db-1"), "db-1 waits for approval");
    let tasks = failover_tasks(&server);
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    assert_eq!(tasks[0]["app"], "shop/web");
    assert_eq!(tasks[0]["action"], "update");
    assert_eq!(tasks[0]["phase"], "succeeded");
    assert_eq!(tasks[0]["params"]["failover"]["node"], "n2");

    // Offline: the release of db waits for a person.
    let offline = decision_until(&server, "n2", "offline", |d| {
        d["health"] == "offline" && state_of(d, RELEASE_DB).as_deref() == Some("awaiting-approval")
    });
    assert_eq!(offline["rule"], "offline-after-timeout");
    assert_eq!(
        action(&offline, RELEASE_DB).unwrap()["needs-approval"],
        true
    );
    assert_eq!(
        state_of(&offline, "request-replacement").as_deref(),
        Some("done")
    );
    assert!(pod_exists(&cluster, "db-1"));

    // Approval: who is required; then the node is fenced and db-1 released.
    let path = "/v1/failover/nodes/n2/approve";
    let (code, error) = send(
        &server,
        "POST",
        path,
        json!({"action": RELEASE_DB, "by": " "}),
    );
    assert_eq!(code, 422, "{error}");
    let (code, error) = send(
        &server,
        "POST",
        path,
        json!({"action": "cordon", "by": "ana"}),
    );
    assert_eq!(code, 409, "{error}");
    let (code, error) = send(
        &server,
        "POST",
        path,
        json!({"action": "evict:Deployment/shop/nope", "by": "ana"}),
    );
    assert_eq!(code, 404, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains(RELEASE_DB),
        "{error}"
    );
    let (code, approved) = send(
        &server,
        "POST",
        path,
        json!({"action": RELEASE_DB, "by": "ana", "reason": "n2 is powered off"}),
    );
    assert_eq!(code, 200, "{approved}");
    let released = decision_until(&server, "n2", "released", |d| done(d, RELEASE_DB));
    assert_eq!(released["taken"][RELEASE_DB]["attempts"], 1, "{released}");
    assert!(!pod_exists(&cluster, "db-1"), "db-1 was released");
    assert!(pod_exists(&cluster, "db-0"), "db-0 on n1 is untouched");
    let taints = sim_node(&cluster, "n2")["spec"]["taints"].clone();
    assert!(
        taints
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/out-of-service" && t["effect"] == "NoExecute"),
        "{taints}"
    );
    // Every decision has its audit record, with the inputs and the rule.
    let records = history(&server, "n2");
    let decisions: Vec<&Value> = records.iter().filter(|r| r["kind"] == "decision").collect();
    assert!(
        decisions.iter().any(|r| r["rule"] == "unknown-after-grace"
            && r["actions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a["key"] == "cordon" && a["state"] == "done")),
        "{decisions:#?}"
    );
    assert!(
        decisions
            .iter()
            .all(|r| r["rule"].is_string() && r["inputs"]["ready"].is_string())
    );
    for rule in [
        "grace-period",
        "unknown-after-grace",
        "offline-after-timeout",
    ] {
        assert!(
            decisions.iter().any(|r| r["rule"] == rule),
            "no record of {rule}"
        );
    }
    let approval = records.iter().find(|r| r["kind"] == "approval").unwrap();
    assert_eq!(approval["by"], "ana");
    assert!(records.iter().any(|r| r["inputs"]["stateful-pods"] == 1));
}

#[test]
fn three_of_five_nodes_down_is_a_storm() {
    let cluster = cluster();
    cluster.apply(pod("web-3", "n3", ("ReplicaSet", "web-abc"), "web"));
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &["--failover-enforce"]);
    for n in ["n2", "n3", "n4"] {
        lose(&cluster, n);
    }
    let held = decision_until(&server, "n3", "storm", |d| {
        d["health"] == "unknown" && action(d, "cordon").is_some_and(|a| a["brake"] == "storm")
    });
    assert_eq!(action(&held, EVICT_WEB).unwrap()["brake"], "storm");
    assert_eq!(state_of(&held, "mark-unknown").as_deref(), Some("done"));
    let answer = server.get("/v1/failover").1;
    assert_eq!(answer["brakes"]["storm"], true, "{answer}");
    assert_eq!(answer["brakes"]["unhealthy"], 3);
    assert!(!answer["brakes"]["held"].as_array().unwrap().is_empty());
    for n in ["n2", "n3", "n4"] {
        assert!(
            sim_node(&cluster, n)["spec"]["unschedulable"].is_null(),
            "{n} cordoned in a storm"
        );
    }
    assert!(pod_exists(&cluster, "web-2") && pod_exists(&cluster, "web-3"));
    let metrics = reqwest::blocking::get(format!("{}/metrics", server.base))
        .unwrap()
        .text()
        .unwrap();
    assert!(metrics.contains("verdict_failover_storm 1"), "{metrics}");
    assert!(
        metrics.contains("verdict_failover_held_actions{status=\"storm\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("verdict_failover_nodes{status=\"unknown\"} 3"),
        "{metrics}"
    );
    let records = history(&server, "n3");
    assert!(
        records.iter().any(|r| r["brakes"] == json!(["storm"])),
        "{records:#?}"
    );

    // One node back: 2 of 5 is within the cap, and the others are acted on.
    restore(&cluster, "n4");
    decision_until(&server, "n3", "acted on after the storm", |d| {
        done(d, EVICT_WEB)
    });
    assert_eq!(sim_node(&cluster, "n3")["spec"]["unschedulable"], true);
    assert!(!pod_exists(&cluster, "web-3"));
}

#[test]
fn a_flapping_node_is_acted_on_once() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &["--failover-enforce"]);
    lose(&cluster, "n2");
    decision_until(&server, "n2", "first outage acted on", |d| {
        done(d, EVICT_WEB)
    });
    restore(&cluster, "n2");
    decision_until(&server, "n2", "recovering", |d| d["health"] == "recovering");

    // Pods land on the node again, and it goes down again.
    cluster.apply(pod("web-4", "n2", ("ReplicaSet", "web-abc"), "web"));
    cluster.apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "shop", "labels": {"app.kubernetes.io/instance": "api"}},
        "spec": {"replicas": 1},
        "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1}
    }));
    let mut api = pod("api-1", "n2", ("ReplicaSet", "api-abc"), "api");
    api["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("api");
    cluster.apply(api);
    lose(&cluster, "n2");
    let second = decision_until(&server, "n2", "second outage", |d| {
        d["health"] == "unknown" && action(d, "evict:Deployment/shop/api").is_some()
    });
    // What was done stays done; what is new is held: the node flaps.
    assert_eq!(state_of(&second, "cordon").as_deref(), Some("done"));
    assert!(done(&second, EVICT_WEB), "{second}");
    let api_evict = action(&second, "evict:Deployment/shop/api").unwrap();
    assert_eq!(api_evict["brake"], "flapping", "{second}");
    assert!(pod_exists(&cluster, "web-4") && pod_exists(&cluster, "api-1"));
    assert_eq!(failover_tasks(&server).len(), 1, "one eviction, once");
}

#[test]
fn overrides_win_over_the_policy() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let mut server = host(&cluster, data.path(), &["--failover-enforce"]);
    let path = |n: &str| format!("/v1/failover/overrides/{n}");

    // Bad requests are refused, saying why.
    let (code, e) = server.send("PUT", &path("n2"), Some("{not json"));
    assert_eq!(code, 400, "{e}");
    let (code, e) = send(
        &server,
        "PUT",
        &path("n2"),
        json!({"kind": "gone", "by": "ana"}),
    );
    assert_eq!(code, 422, "{e}");
    let (code, e) = send(&server, "PUT", &path("n2"), json!({"kind": "offline"}));
    assert_eq!(code, 422, "{e}");
    let (code, e) = send(
        &server,
        "PUT",
        &path("n9"),
        json!({"kind": "offline", "by": "ana"}),
    );
    assert_eq!(code, 404, "{e}");
    let (code, e) = send(
        &server,
        "PUT",
        &path("n2"),
        json!({"kind": "offline", "by": "ana", "expires-at": "2020-01-01T00:00:00Z"}),
    );
    assert_eq!(code, 422, "{e}");
    let (code, e) = server.send("DELETE", &format!("{}?by=ana", path("n2")), None);
    assert_eq!(code, 404, "{e}");

    // Offline on a ready node acts at once.
    let (code, set) = send(
        &server,
        "PUT",
        &path("n2"),
        json!({"kind": "offline", "by": "ana", "reason": "disk failing", "expires-in-s": 3600}),
    );
    assert_eq!(code, 200, "{set}");
    let forced = decision_until(&server, "n2", "forced offline", |d| {
        d["health"] == "offline" && done(d, EVICT_WEB)
    });
    assert_eq!(forced["override"]["by"], "ana");
    assert_eq!(forced["rule"], "override-offline");
    assert_eq!(
        state_of(&forced, RELEASE_DB).as_deref(),
        Some("awaiting-approval")
    );
    assert!(!pod_exists(&cluster, "web-2"));

    // Healthy on a lost node: no action, whatever the node reports.
    let (code, _) = send(
        &server,
        "PUT",
        &path("n3"),
        json!({"kind": "healthy", "by": "bo", "reason": "known network blip"}),
    );
    assert_eq!(code, 200);
    cluster.apply(pod("web-3", "n3", ("ReplicaSet", "web-abc"), "web"));
    lose(&cluster, "n3");
    let confirmed = decision_until(&server, "n3", "confirmed healthy", |d| {
        d["health"] == "healthy" && d["override"]["kind"] == "healthy"
    });
    assert_eq!(confirmed["actions"], json!([]));

    // A pause holds every action, and is shown.
    let (code, _) = send(
        &server,
        "PUT",
        &path("n4"),
        json!({"kind": "pause", "by": "cy"}),
    );
    assert_eq!(code, 200);
    cluster.apply(pod("web-5", "n4", ("ReplicaSet", "web-abc"), "web"));
    lose(&cluster, "n4");
    let paused = decision_until(&server, "n4", "paused", |d| {
        d["override"]["kind"] == "pause"
    });
    assert!(
        paused["actions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["state"] != "done"),
        "{paused}"
    );

    // Lifting the healthy override lets the policy act on n3 (with n4
    // back, two nodes are down: no storm).
    restore(&cluster, "n4");
    let (code, _) = server.send("DELETE", &format!("{}?by=bo", path("n3")), None);
    assert_eq!(code, 200);
    decision_until(&server, "n3", "acted on without the override", |d| {
        d["override"].is_null() && done(d, EVICT_WEB)
    });
    assert!(!pod_exists(&cluster, "web-3"));

    // Overrides, what was done and the audit survive a restart: nothing is
    // done twice.
    let tasks = failover_tasks(&server).len();
    server.kill();
    let server = host(&cluster, data.path(), &["--failover-enforce"]);
    let n2 = decision_until(&server, "n2", "n2 judged again", |d| {
        d["health"] == "offline"
    });
    assert!(done(&n2, EVICT_WEB) && done(&n2, "cordon"), "{n2}");
    assert_eq!(failover_tasks(&server).len(), tasks);
    let answer = server.get("/v1/failover").1;
    let kept: Vec<&Value> = answer["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["node"])
        .collect();
    assert_eq!(kept, [&json!("n2"), &json!("n4")], "{answer}");
    let records = history(&server, "n3");
    let kinds: Vec<&str> = records.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"override") && kinds.contains(&"override-cleared"),
        "{kinds:?}"
    );
}

#[test]
fn a_dry_run_shows_the_actions_and_performs_none() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &[]);
    assert_eq!(server.get("/v1/failover").1["mode"], "dry-run");
    lose(&cluster, "n2");
    let offline = decision_until(&server, "n2", "offline", |d| d["health"] == "offline");
    for key in ["cordon", EVICT_WEB, "request-replacement"] {
        assert_eq!(
            state_of(&offline, key).as_deref(),
            Some("dry-run"),
            "{key}: {offline}"
        );
    }
    assert_eq!(
        state_of(&offline, RELEASE_DB).as_deref(),
        Some("awaiting-approval")
    );
    let (code, _) = send(
        &server,
        "POST",
        "/v1/failover/nodes/n2/approve",
        json!({"action": RELEASE_DB, "by": "ana"}),
    );
    assert_eq!(code, 200);
    let (code, again) = send(
        &server,
        "POST",
        "/v1/failover/nodes/n2/approve",
        json!({"action": RELEASE_DB, "by": "bo"}),
    );
    assert_eq!(code, 409, "approved twice: {again}");
    decision_until(&server, "n2", "release would be done", |d| {
        state_of(d, RELEASE_DB).as_deref() == Some("dry-run")
    });
    assert!(sim_node(&cluster, "n2")["spec"]["unschedulable"].is_null());
    assert!(sim_node(&cluster, "n2")["spec"]["taints"].is_null());
    assert!(pod_exists(&cluster, "web-2") && pod_exists(&cluster, "db-1"));
    assert!(failover_tasks(&server).is_empty());

    // An override with an expiry runs out by itself, on the record.
    let (code, _) = send(
        &server,
        "PUT",
        "/v1/failover/overrides/n3",
        json!({"kind": "pause", "by": "cy", "expires-in-s": 1}),
    );
    assert_eq!(code, 200);
    let ran_out = wait_until(PATIENCE, || {
        history(&server, "n3")
            .iter()
            .any(|r| r["kind"] == "override-expired")
    });
    assert!(ran_out.is_some(), "{:#?}", history(&server, "n3"));
    assert_eq!(server.get("/v1/failover").1["overrides"], json!([]));

    // Each decision was recorded, the last one with every action's state.
    let records = history(&server, "n2");
    assert!(records.len() >= 4, "{records:#?}");
    assert_eq!(
        records[0]["actions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["state"] == "dry-run")
            .count(),
        4
    );
}

#[test]
fn a_disruption_budget_holds_an_eviction_and_retries_are_limited() {
    let cluster = cluster();
    cluster.apply(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app.kubernetes.io/instance": "web"}}}
    }));
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &["--failover-enforce"]);
    lose(&cluster, "n2");
    let spent = decision_until(&server, "n2", "retry limit", |d| {
        action(d, EVICT_WEB).is_some_and(|a| a["brake"] == "retry-limit")
    });
    let evict = action(&spent, EVICT_WEB).unwrap();
    assert_eq!(evict["attempts"], 2);
    assert!(
        evict["detail"]
            .as_str()
            .unwrap()
            .contains("disruption budget"),
        "{evict}"
    );
    assert!(pod_exists(&cluster, "web-2"));
    let tasks = failover_tasks(&server);
    assert_eq!(tasks.len(), 2, "{tasks:#?}");
    assert!(tasks.iter().all(|t| t["phase"] == "failed"));
}

#[test]
fn the_scale_down_remedy_shrinks_a_stateful_workload_on_approval() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host_with(
        &cluster,
        data.path(),
        &["--failover-enforce"],
        "remedy = 'scale-down'",
    );
    lose(&cluster, "n2");
    let scale = "scale:StatefulSet/shop/db=1";
    let offline = decision_until(&server, "n2", "offline", |d| {
        d["health"] == "offline" && action(d, scale).is_some()
    });
    assert_eq!(
        state_of(&offline, scale).as_deref(),
        Some("awaiting-approval")
    );
    assert!(action(&offline, RELEASE_DB).is_none(), "{offline}");
    assert!(
        action(&offline, "request-replacement").is_none(),
        "{offline}"
    );
    let (code, _) = send(
        &server,
        "POST",
        "/v1/failover/nodes/n2/approve",
        json!({"action": scale, "by": "ana"}),
    );
    assert_eq!(code, 200);
    decision_until(&server, "n2", "scaling", |d| {
        state_of(d, scale).as_deref() == Some("in-flight")
    });
    let statefulsets = verdict_sim::resources::find("apps", "v1", "statefulsets").unwrap();
    let patched = wait_until(PATIENCE, || {
        let db = cluster
            .sim()
            .store()
            .get(statefulsets, "shop", "db")
            .unwrap();
        db["spec"]["replicas"] == 1
    });
    assert!(patched.is_some(), "the StatefulSet was not scaled");
    // The app shows the task at work.
    let mut app = Value::Null;
    let seen = wait_until(PATIENCE, || {
        app = server.get("/v1/apps/shop/db").1;
        app["transitional"]["status"] == "scaling"
    });
    assert!(seen.is_some(), "{app:#}");
    let tasks = failover_tasks(&server);
    assert_eq!(tasks[0]["action"], "scale");
    assert_eq!(tasks[0]["params"]["replicas"], 1);
}

#[test]
fn without_a_failover_policy_nothing_is_done_and_the_answer_says_why() {
    let cluster = cluster();
    let plugins = crate::support::plugin_folder(&["status", "admission"]);
    let data = tempfile::tempdir().unwrap();
    let url = cluster.sim().url();
    let server = Server::start_with(
        plugins.path(),
        data.path(),
        &["--cluster-url", &url, "--failover-enforce"],
    );
    lose(&cluster, "n2");
    let mut answer = Value::Null;
    let said = wait_until(PATIENCE, || {
        answer = server.get("/v1/failover").1;
        answer["error"].is_string()
    });
    assert!(said.is_some(), "{answer:#}");
    assert!(
        answer["error"].as_str().unwrap().contains("failover"),
        "{answer:#}"
    );
    assert_eq!(answer["nodes"], json!([]));
    assert!(sim_node(&cluster, "n2")["spec"]["unschedulable"].is_null());
    // The rest of the host serves on.
    assert_eq!(server.get("/v1/apps/shop/web").0, 200);

    // The policy arrives, and failover starts.
    crate::support::install_by_rename(
        &plugins.path().join("failover.wasm"),
        &std::fs::read(crate::support::default_plugin("failover")).unwrap(),
    );
    decision_until(&server, "n2", "judged once the policy is there", |d| {
        d["health"] != "healthy"
    });
    assert!(server.get("/v1/failover").1["error"].is_null());
}

#[test]
fn numbers_from_outside_are_range_checked() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &[]);
    let path = "/v1/failover/overrides/n1";
    // An expiry whose milliseconds overflow is refused, not a dead reply.
    let (code, error) = send(
        &server,
        "PUT",
        path,
        json!({"kind": "pause", "by": "x", "expires-in-s": 9_223_372_036_854_775u64}),
    );
    assert_eq!(code, 422, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expires-in-s must be from 1 to"),
        "{error}"
    );
    let (code, error) = send(
        &server,
        "PUT",
        path,
        json!({"kind": "pause", "by": "x", "expires-in-s": u64::MAX}),
    );
    assert_eq!(code, 422, "{error}");
    // Ten years is taken.
    let (code, set) = send(
        &server,
        "PUT",
        path,
        json!({"kind": "pause", "by": "x", "expires-in-s": 10 * 365 * 24 * 3600}),
    );
    assert_eq!(code, 200, "{set}");
    // A paging bound past the 63-bit sequence numbers is refused (it
    // wrapped to a negative number, and answered nothing).
    let (code, all) = server.get("/v1/failover/history?node=n1");
    assert_eq!(code, 200);
    assert!(!all["records"].as_array().unwrap().is_empty());
    let (code, past) = server.get("/v1/failover/history?node=n1&before=9223372036854775808");
    assert_eq!(code, 422, "{past}");
    assert_eq!(past["error"]["field"], "before");
    // The largest bound answers what no bound does; the loop may add a
    // record of its own in between, so they are compared while none comes.
    let (mut all, mut last) = (Value::Null, Value::Null);
    let same = wait_until(PATIENCE, || {
        all = server.get("/v1/failover/history?node=n1").1;
        last = server
            .get("/v1/failover/history?node=n1&before=9223372036854775807")
            .1;
        let again = server.get("/v1/failover/history?node=n1").1;
        all == again && last["records"] == all["records"]
    });
    assert!(
        same.is_some(),
        "before the largest bound: {last}\nunbounded: {all}"
    );
    // A page is 1 to 1000 records, as the document says.
    for limit in ["0", "1001"] {
        let (code, error) = server.get(&format!("/v1/failover/history?limit={limit}"));
        assert_eq!(code, 422, "{limit}: {error}");
        assert_eq!(error["error"]["field"], "limit");
    }
    assert_eq!(server.get("/v1/failover/history?limit=1000").0, 200);
    assert_eq!(server.get("/healthz").0, 200);
}

#[test]
fn override_expiries_and_names_are_bounded() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &[]);
    let path = "/v1/failover/overrides/n1";
    let refused = |body: Value, says: &str| {
        let (code, error) = send(&server, "PUT", path, body.clone());
        assert_eq!(code, 422, "{body}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    };
    // No time at all is not an expiry in the past.
    refused(
        json!({"kind": "pause", "by": "x", "expires-in-s": 0}),
        "expires-in-s must be from 1 to",
    );
    // A date is held to the same ten years as a duration.
    refused(
        json!({"kind": "pause", "by": "x", "expires-at": "2999-01-01T00:00:00Z"}),
        "more than ten years away",
    );
    refused(
        json!({"kind": "pause", "by": "x", "expires-at": "2001-01-01T00:00:00Z"}),
        "in the past",
    );
    // Who and why are bounded like a task's fields.
    refused(
        json!({"kind": "pause", "by": "x".repeat(257)}),
        "by is 257 characters long; at most 256",
    );
    refused(
        json!({"kind": "pause", "by": "x", "reason": "y".repeat(4097)}),
        "reason is 4097 characters long",
    );
    refused(
        json!({"kind": "pause", "by": "  "}),
        "by must say who decides",
    );
    let (code, set) = send(
        &server,
        "PUT",
        path,
        json!({"kind": "pause", "by": "x".repeat(256), "reason": "y".repeat(4096)}),
    );
    assert_eq!(code, 200, "{set}");
    let (code, error) = server.send("DELETE", &format!("{path}?by={}", "z".repeat(300)), None);
    assert_eq!(code, 422, "{error}");
    assert_eq!(server.get("/v1/failover").0, 200);
}

#[test]
fn a_reason_that_only_counts_the_seconds_is_no_new_record() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = host(&cluster, data.path(), &[]);
    // n3 carries nothing: it goes offline and stays so, its actions (dry
    // run) settled within a second or two.
    lose(&cluster, "n3");
    let mut reason =
        decision_until(&server, "n3", "offline", |d| d["health"] == "offline")["reason"].clone();
    // The reason counts the seconds the node has been out of contact.
    let mut next_count = || {
        let seen = reason.clone();
        reason =
            decision_until(&server, "n3", "a new count", |d| d["reason"] != seen)["reason"].clone();
    };
    next_count();
    next_count();
    let settled = history(&server, "n3");
    next_count();
    next_count();
    let later = history(&server, "n3");
    assert_eq!(
        later.len(),
        settled.len(),
        "new records while only the count of seconds changed: {later:#?}"
    );
    assert_eq!(later[0]["health"], "offline");
}

/// A failover input of `n` nodes in every state the default policy tells
/// apart: ready, briefly and long out of contact, cordoned and tainted,
/// with pods and VM instances on the troubled ones, previous decisions of
/// every health and action, and overrides.
fn mixed_input(n: usize, now: i64) -> verdict::wit::failover::FailoverInput {
    use verdict::wit::failover::{
        Action, FailoverInput, InstancePlacement, InstanceRef, NodeDecision, NodeHealth, Override,
        OverrideKind, Placement, ProposedAction, ScaleRequest, SetRef, WorkloadRef,
    };
    use verdict::wit::types::{
        Condition, ConditionStatus, KeyValue, Node, Owner, Resources, Taint, WorkloadKind,
    };
    let name = |i: usize| format!("node-{i:04}");
    let minutes = |m: i64| now - m * 60_000;
    let nodes: Vec<Node> = (0..n)
        .map(|i| {
            let (ready, heartbeat) = match i % 5 {
                0 => (ConditionStatus::Unknown, minutes(30)),
                1 => (ConditionStatus::Unknown, now - 5_000),
                2 => (ConditionStatus::False, minutes(2)),
                _ => (ConditionStatus::True, now - 2_000),
            };
            Node {
                name: name(i),
                ready,
                ready_since: Some(minutes(40)),
                last_heartbeat: Some(heartbeat),
                unschedulable: i % 7 == 0,
                taints: (i % 3 == 0)
                    .then(|| Taint {
                        key: "node.kubernetes.io/unreachable".into(),
                        value: None,
                        effect: "NoExecute".into(),
                        added_at: Some(minutes(20)),
                    })
                    .into_iter()
                    .collect(),
                conditions: vec![Condition {
                    kind: "Ready".into(),
                    status: ready,
                    reason: Some("NodeStatusUnknown".into()),
                    message: Some("Kubelet stopped posting node status.".into()),
                    last_transition: Some(minutes(40)),
                }],
                labels: vec![KeyValue {
                    key: "topology.kubernetes.io/zone".into(),
                    value: format!("zone-{}", i % 3),
                }],
                address: Some(format!("10.0.{}.{}", i / 250, i % 250)),
                allocatable: Resources {
                    cpu_millis: Some(4000),
                    memory_bytes: Some(16 << 30),
                },
            }
        })
        .collect();
    let troubled = || (0..n).filter(|i| i % 5 < 3);
    let placements: Vec<Placement> = troubled()
        .flat_map(|i| {
            [
                (WorkloadKind::Deployment, false),
                (WorkloadKind::StatefulSet, true),
            ]
            .map(|(kind, stateful)| Placement {
                namespace: "shop".into(),
                pod: format!("{}-{i}", if stateful { "db" } else { "web" }),
                node: name(i),
                workload: Some(WorkloadRef {
                    kind,
                    namespace: "shop".into(),
                    name: if stateful { "db" } else { "web" }.into(),
                }),
                stateful,
                workload_replicas: Some(3),
            })
        })
        .collect();
    let instances: Vec<InstancePlacement> = troubled()
        .map(|i| InstancePlacement {
            namespace: "vms".into(),
            name: format!("vm-{i}"),
            node: name(i),
            owner: Some(Owner {
                kind: "VirtualMachine".into(),
                name: format!("vm-{i}"),
            }),
            set: (i % 2 == 0).then(|| SetRef {
                namespace: "vms".into(),
                kind: "VirtualMachinePool".into(),
                name: "pool".into(),
                replicas: 4,
            }),
            exclusive_disk: i % 4 == 0,
        })
        .collect();
    let workload = WorkloadRef {
        kind: WorkloadKind::StatefulSet,
        namespace: "shop".into(),
        name: "db".into(),
    };
    let actions = [
        Action::Wait(now + 1_000),
        Action::MarkUnknown,
        Action::Cordon,
        Action::Uncordon,
        Action::Evict(workload.clone()),
        Action::Release(workload.clone()),
        Action::RequestReplacement,
        Action::Scale(ScaleRequest {
            workload,
            replicas: 2,
        }),
        Action::Repair(InstanceRef {
            namespace: "vms".into(),
            name: "vm-0".into(),
        }),
        Action::Rescale(SetRef {
            namespace: "vms".into(),
            kind: "VirtualMachinePool".into(),
            name: "pool".into(),
            replicas: 3,
        }),
        Action::Notify("look at the rack".into()),
    ];
    let healths = [
        NodeHealth::Healthy,
        NodeHealth::Suspect,
        NodeHealth::Unknown,
        NodeHealth::Offline,
        NodeHealth::Recovering,
    ];
    let previous: Vec<NodeDecision> = (0..n)
        .filter(|i| i % 2 == 0)
        .map(|i| NodeDecision {
            node: name(i),
            health: healths[i % healths.len()],
            since: minutes(25),
            reason: "as judged before".into(),
            rule: "earlier".into(),
            actions: vec![ProposedAction {
                action: actions[i % actions.len()].clone(),
                reason: "proposed before".into(),
                needs_approval: i % 4 == 0,
            }],
        })
        .collect();
    let overrides = vec![
        Override {
            node: name(3),
            kind: OverrideKind::Offline,
            by: "alice".into(),
            reason: "the rack is being replaced".into(),
            at: minutes(1),
            expires_at: Some(now + 600_000),
        },
        Override {
            node: name(5),
            kind: OverrideKind::Pause,
            by: "bob".into(),
            reason: "hands off".into(),
            at: minutes(1),
            expires_at: None,
        },
    ];
    FailoverInput {
        nodes,
        placements,
        instances,
        previous,
        overrides,
    }
}

#[test]
fn the_encoded_input_is_decided_as_the_typed_one_is() {
    // The default failover policy takes its input encoded
    // (`failover-encoded`): every node crosses every second. The typed call
    // gives the same decisions, for nodes in every state with every kind
    // of previous action, override, pod and instance.
    use verdict::plugins::World;
    let fixture = crate::support::Fixture::new();
    fixture.install("failover", &crate::support::default_plugin("failover"));
    fixture.registry.reload();
    let slot = fixture.registry.policy(World::Failover).unwrap();
    assert!(
        slot.call(|v| Ok(v.info().encoded_batches)).unwrap().value,
        "the default failover policy takes its input encoded"
    );
    let now = 1_790_000_000_000;
    let input = mixed_input(200, now);
    let encoded = slot
        .call(|v| v.decide(&v.context(now), &input))
        .unwrap()
        .value;
    let typed = slot
        .call(|v| v.decide_typed(&v.context(now), &input))
        .unwrap()
        .value;
    assert_eq!(encoded.len(), 200);
    assert_eq!(encoded, typed);
    let acted_on = encoded.iter().filter(|d| !d.actions.is_empty()).count();
    assert!(acted_on > 20, "{acted_on} nodes with actions: {encoded:?}");
}
