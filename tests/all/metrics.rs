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
    // The binary's allocator (jemalloc) says what of it is the heap.
    let allocated = sample(&text, "verdict_memory_allocated_bytes").unwrap();
    assert!(
        allocated > 1024.0 * 1024.0 && allocated < resident,
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
