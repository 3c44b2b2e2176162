//! `GET /metrics`: the Prometheus text format, with the apps, pods, tasks,
//! plugin calls and their latency, watches, HTTP requests and event-stream
//! clients of the running host.

use serde_json::json;

use crate::live::{Cluster, PATIENCE, start_host};
use crate::support::wait_until;

/// The value of the sample whose name and labels start with `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

#[test]
fn metrics_describe_the_running_host() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &[]);
    assert!(wait_until(PATIENCE, || server.get("/v1/apps/shop/web").0 == 200).is_some());
    let (code, _) = server.send(
        "POST",
        "/v1/tasks",
        Some(&json!({"app": "shop/web", "action": "restart"}).to_string()),
    );
    assert_eq!(code, 201);
    let response = reqwest::blocking::get(format!("{}/metrics", server.base)).unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = response.text().unwrap();

    // Every sample line is `name{labels} value`, every family typed.
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (_, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        assert!(value.parse::<f64>().is_ok(), "{line}");
        assert!(line.starts_with("verdict_"), "{line}");
    }
    assert!(text.contains("# TYPE verdict_policy_call_seconds histogram"));
    assert!(text.contains("# TYPE verdict_derivation_seconds histogram"));
    assert!(text.trim_end().ends_with("# EOF"));

    assert_eq!(
        sample(&text, r#"verdict_apps{status="running"}"#),
        Some(1.0),
        "{text}"
    );
    assert!(
        sample(&text, r#"verdict_pods{status="running-healthy"}"#).unwrap_or(0.0) >= 1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"verdict_tasks{status="pending"}"#),
        Some(1.0)
    );
    assert!(sample(&text, r#"verdict_plugin_calls_total{plugin="status""#).unwrap() >= 1.0);
    assert!(sample(&text, r#"verdict_plugin_calls_total{plugin="admission""#).unwrap() >= 1.0);
    assert!(
        sample(
            &text,
            r#"verdict_policy_call_seconds_count{policy="default-status""#
        )
        .unwrap()
            >= 1.0
    );
    // The first derivation takes every app.
    assert!(
        sample(
            &text,
            r#"verdict_derivation_seconds_count{scope="every-app"}"#
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "verdict_plugin_reloads_total"),
        Some(4.0),
        "four default plugins"
    );
    assert!(sample(&text, r#"verdict_watch_events_total{kind="pods"}"#).unwrap() >= 1.0);
    assert_eq!(
        sample(&text, r#"verdict_watch_healthy{kind="pods"}"#),
        Some(1.0)
    );
    assert!(
        sample(&text, r#"verdict_http_requests_total{route="/v1/apps/{namespace}/{name}",method="GET",code="200"}"#).unwrap() >= 1.0,
        "{text}"
    );
    assert!(
        sample(
            &text,
            r#"verdict_http_requests_total{route="/v1/tasks",method="POST",code="201"}"#
        )
        .is_some()
    );
    assert_eq!(sample(&text, "verdict_event_stream_clients"), Some(0.0));
}

#[test]
fn a_host_near_its_memory_limit_says_so_in_readyz_and_metrics() {
    // A limit the host cannot fit in: it still serves, and says so.
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--host-memory-limit-mib", "8"]);
    let near = wait_until(PATIENCE, || {
        let (code, readyz) = server.get("/readyz");
        code == 200 && readyz["memory"]["near_limit"] == true
    });
    assert!(near.is_some(), "{}", server.get("/readyz").1);
    let (code, readyz) = server.get("/readyz");
    assert_eq!(code, 200, "near its limit, the host still serves: {readyz}");
    let memory = &readyz["memory"];
    assert_eq!(memory["limit_mib"], 8, "{memory}");
    assert!(memory["resident_mib"].as_u64() > Some(8), "{memory}");
    let message = memory["message"].as_str().unwrap();
    assert!(
        message.contains("of the 8 MiB limit") && message.contains("resources.limits.memory"),
        "{message}"
    );
    let text = reqwest::blocking::get(format!("{}/metrics", server.base))
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(
        sample(&text, "verdict_memory_limit_bytes"),
        Some(8.0 * 1024.0 * 1024.0)
    );
    let resident = sample(&text, "verdict_memory_resident_bytes").unwrap();
    assert!(resident > 8.0 * 1024.0 * 1024.0);
    // The binary's allocator (jemalloc) says what of it is the heap (a
    // host whose plugins come from the code cache has little of it).
    let allocated = sample(&text, "verdict_memory_allocated_bytes").unwrap();
    assert!(
        allocated > 0.0 && allocated < resident,
        "{allocated} of {resident}"
    );
    assert!(memory["allocated_mib"].as_u64() > Some(0), "{memory}");

    // With room to spare, nothing is said.
    let data = tempfile::tempdir().unwrap();
    let roomy = start_host(
        &cluster,
        data.path(),
        &["--host-memory-limit-mib", "100000"],
    );
    let read = wait_until(PATIENCE, || {
        roomy.get("/readyz").1["memory"]["resident_mib"].as_u64() > Some(0)
    });
    assert!(read.is_some(), "{}", roomy.get("/readyz").1);
    let memory = roomy.get("/readyz").1["memory"].clone();
    assert_eq!(
        (memory["near_limit"].clone(), memory["message"].clone()),
        (json!(false), json!(null)),
        "{memory}"
    );
}

/// The sum of every sample of `family` (all its label sets).
fn total(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn lease(node: &str, renewed: &str) -> serde_json::Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renewed}
    })
}

#[test]
fn node_leases_are_listed_and_one_unchanged_derives_nothing() {
    let cluster = Cluster::start();
    cluster.apply(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-node-lease"}}),
    );
    cluster.apply(lease("n1", "2026-01-01T00:00:10.000000Z"));
    // A node that is not ready, with a pod of the app, and whose Lease
    // stopped: the same Lease listed again is no news about it.
    cluster.apply(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }));
    cluster.apply(lease("n2", "2026-01-01T00:00:05.000000Z"));
    let mut pod = crate::live::pod("web-2", None);
    pod["spec"]["nodeName"] = json!("n2");
    cluster.apply(pod);
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--lease-poll-ms", "100"]);
    let heartbeat = || {
        server.get("/v1/nodes").1["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|n| n["name"] == "n1").cloned())
            .and_then(|n| n["last_heartbeat"].as_str().map(String::from))
            .unwrap_or_default()
    };
    let first = wait_until(PATIENCE, || heartbeat().starts_with("2026-01-01T00:00:10"));
    assert!(first.is_some(), "the Lease's renewal: {}", heartbeat());
    cluster.apply(lease("n1", "2026-01-01T00:00:20.000000Z"));
    let renewed = wait_until(PATIENCE, || heartbeat().starts_with("2026-01-01T00:00:20"));
    assert!(
        renewed.is_some(),
        "the Lease renewed again: {}",
        heartbeat()
    );

    // Lists go on; a ready node's renewal 10 s after the last, and lists
    // that find nothing new (the silent node's Lease among them), derive
    // nothing.
    let metrics = || {
        reqwest::blocking::get(format!("{}/metrics", server.base))
            .unwrap()
            .text()
            .unwrap()
    };
    let lists = |text: &str| {
        sample(text, r#"verdict_watch_lists_total{kind="node-leases"}"#).unwrap_or(0.0)
    };
    let before = metrics();
    let mut later = String::new();
    let listed = wait_until(PATIENCE, || {
        later = metrics();
        lists(&later) >= lists(&before) + 5.0
    });
    assert!(
        listed.is_some(),
        "the Leases are listed again and again: {later}"
    );
    assert_eq!(
        total(&later, "verdict_derivation_seconds_count"),
        total(&before, "verdict_derivation_seconds_count"),
        "{later}"
    );
    assert_eq!(
        sample(&later, r#"verdict_watch_healthy{kind="node-leases"}"#),
        Some(1.0)
    );
}
