//! The history of the verdicts on the demo cluster: an app's changes with
//! their causes and the marks around them, availability that adds up to
//! its window, an instance's own history; the history survives a SIGKILL
//! and a restart; a history file that cannot be opened is an error of its
//! routes and a line of `/readyz`, the verdicts served on.

use std::time::Duration;

use serde_json::{Value, json};

use crate::serve::Server;
use crate::support::{plugin_folder, wait_until};

const DEFAULTS: [&str; 4] = ["status", "failover", "admission", "lifecycle"];
const PATIENCE: Duration = Duration::from_secs(60);

/// The app's history, first page.
fn history(server: &Server, app: &str, query: &str) -> Value {
    let (code, body) = server.get(&format!("/v1/apps/{app}/history{query}"));
    assert_eq!(code, 200, "{body}");
    body
}

fn entries(page: &Value) -> &Vec<Value> {
    page["entries"].as_array().unwrap()
}

/// The milliseconds of an availability answer that should add up to its
/// window (times its apps).
fn parts(a: &Value) -> i64 {
    a["statuses"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_i64().unwrap())
        .sum::<i64>()
        + a["before_ms"].as_i64().unwrap()
        + a["unobserved_ms"].as_i64().unwrap()
}

#[test]
fn the_demo_keeps_each_apps_changes_with_their_causes_and_availability_adds_up() {
    let plugins = plugin_folder(&DEFAULTS);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(plugins.path(), data.path(), &["--demo"]);

    // Every app's first verdict is an entry, judged by the serving policy.
    let mut first = Value::Null;
    let seen = wait_until(PATIENCE, || {
        first = history(&server, "shop/cart", "");
        !entries(&first).is_empty()
    });
    assert!(seen.is_some(), "no history of shop/cart: {first}");
    let newest = &entries(&first)[0];
    assert!(newest["until"].is_null(), "the newest holds now: {newest}");
    assert!(
        newest["policy"]
            .as_str()
            .is_some_and(|p| p.starts_with("default-status@")),
        "{newest}"
    );

    // A task: its transition is an entry caused by it, and its phases are
    // marks.
    let body = json!({"app": "shop/cart", "action": "restart"}).to_string();
    let (code, task) = server.send("POST", "/v1/tasks", Some(&body));
    assert!(code == 201 || code == 202, "{task}");
    let id = task["id"].as_str().unwrap().to_string();
    let mut page = Value::Null;
    let caused = wait_until(PATIENCE, || {
        page = history(&server, "shop/cart", "");
        let by_task = entries(&page)
            .iter()
            .any(|e| e["cause"]["kind"] == "task" && e["cause"]["id"] == id.as_str());
        let marked = page["marks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["kind"] == "task" && m["reference"] == id.as_str());
        by_task && marked
    });
    assert!(caused.is_some(), "the task's entry and mark: {page}");
    // Each entry ends where the newer one began.
    let all = entries(&page);
    for pair in all.windows(2) {
        assert_eq!(pair[1]["until"], pair[0]["at"], "{page}");
    }

    // The crash-looping app: its pod's own history, and availability over
    // a window that adds up.
    let mut api = Value::Null;
    let pod = wait_until(PATIENCE, || {
        api = server.get("/v1/apps/shop/api").1;
        api["groups"].as_array().is_some_and(|g| !g.is_empty())
    });
    assert!(pod.is_some(), "{api}");
    let pod = api["groups"][0]["name"].as_str().unwrap().to_string();
    let (code, instance) = server.get(&format!("/v1/apps/shop/api/instances/{pod}/history"));
    assert_eq!(code, 200, "{instance}");
    let instance_entries = entries(&instance);
    assert!(!instance_entries.is_empty(), "{instance}");
    assert!(
        instance_entries
            .iter()
            .all(|e| e["kind"] == "pod" && e["instance"] == pod.as_str()),
        "{instance}"
    );
    for scope in [
        "/v1/apps/shop/api/availability?window=1h",
        "/v1/namespaces/shop/availability?window=1h",
        "/v1/availability?window=1h",
    ] {
        let (code, a) = server.get(scope);
        assert_eq!(code, 200, "{scope}: {a}");
        let apps = a["apps"].as_i64().unwrap();
        assert!(apps >= 1, "{scope}: {a}");
        assert_eq!(
            parts(&a),
            a["window_ms"].as_i64().unwrap() * apps,
            "{scope}: {a}"
        );
        // An hour back reaches before the host started: most of it is
        // before the app was seen.
        assert!(a["before_ms"].as_i64().unwrap() > 0, "{scope}: {a}");
    }

    // Apps by status over time: from the history's start at the earliest,
    // the last moment now, each app counted once in the status it held.
    let (code, timeline) = server.get("/v1/availability/timeline?window=1h&points=10");
    assert_eq!(code, 200, "{timeline}");
    let points = timeline["points"].as_array().unwrap();
    assert_eq!(points.len(), 10, "{timeline}");
    let (_, apps) = server.get("/v1/availability?window=1h");
    let counted: u64 = points[9]["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(counted, apps["apps"].as_u64().unwrap(), "{timeline}");
    assert!(
        points[9]["counts"]["unobserved"].is_null(),
        "the run under way lasts until now: {timeline}"
    );
    assert!(
        timeline["since"].as_str().unwrap() > "2026-01-01",
        "{timeline}"
    );
    let (code, refused) = server.get("/v1/availability/timeline?points=1");
    assert_eq!(
        (code, refused["error"]["field"].as_str()),
        (422, Some("points")),
        "{refused}"
    );

    // Each app's status is a series of its own, and the history's writes
    // are counted.
    let metrics = reqwest::blocking::get(format!("{}/metrics", server.base))
        .unwrap()
        .text()
        .unwrap();
    for series in [
        "verdict_app_status{namespace=\"shop\",app=\"cart\",status=",
        "verdict_app_status_since_seconds{namespace=\"shop\",app=\"api\"}",
        "verdict_app_status_seconds_total{namespace=\"shop\",app=\"api\",status=",
        "verdict_app_transitions_total{namespace=\"shop\",app=\"cart\"}",
        "verdict_history_ok 1",
    ] {
        assert!(metrics.contains(series), "no {series} in {metrics}");
    }
    let changes = metrics
        .lines()
        .find_map(|l| l.strip_prefix("verdict_history_changes_total "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(changes.is_some_and(|n| n > 0), "{metrics}");

    // `verdict history` against the running host, for people and for
    // scripts.
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_verdict"))
            .arg("history")
            .args(args)
            .args(["--url", &server.base])
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).to_string(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    };
    let (code, table, _) = run(&["shop/cart", "--availability", "1h"]);
    assert_eq!(code, Some(0), "{table}");
    assert!(table.starts_with("SINCE") && table.contains(&id), "{table}");
    assert!(
        table.contains("availability") && table.contains("incidents"),
        "{table}"
    );
    let (code, json, _) = run(&["shop/cart", "-o", "json", "--limit", "2"]);
    assert_eq!(code, Some(0), "{json}");
    let json: Value = serde_json::from_str(&json).unwrap();
    assert!(entries(&json["history"]).len() <= 2, "{json}");
    let (code, _, error) = run(&["shop/cart", "--since", "yesterday"]);
    assert_eq!(code, Some(1), "{error}");
    assert!(error.contains("since"), "{error}");
    let (code, _, error) = run(&["cart"]);
    assert_eq!(code, Some(2), "{error}");

    // Bad parameters are named.
    for (path, field) in [
        ("/v1/apps/shop/api/availability?window=soon", "window"),
        ("/v1/apps/shop/api/availability?window=400d", "window"),
        ("/v1/apps/shop/api/history?since=yesterday", "since"),
        ("/v1/apps/shop/api/history?continue=abc", "continue"),
        ("/v1/apps/shop/api/history?continue=-1", "continue"),
        ("/v1/apps/shop/api/history?limit=0", "limit"),
    ] {
        let (code, body) = server.get(path);
        assert_eq!(code, 422, "{path}: {body}");
        assert_eq!(body["error"]["field"], field, "{path}: {body}");
    }
}

#[test]
fn pages_go_back_and_the_history_survives_a_kill() {
    let plugins = plugin_folder(&DEFAULTS);
    let data = tempfile::tempdir().unwrap();
    // No folding: every change stays an entry of its own.
    let flags = ["--demo", "--history-flap-window-ms", "0"];
    let mut server = Server::start_with(plugins.path(), data.path(), &flags);
    server.app_until("shop/web", "a verdict", PATIENCE, |v| {
        v["stable"].is_string()
    });
    // Overrides forced and lifted give shop/web entries of their own.
    for n in 0..3 {
        let body = json!({"status": "degraded", "by": "ana", "reason": format!("drill {n}")});
        let (code, set) = server.send("PUT", "/v1/apps/shop/web/override", Some(&body.to_string()));
        assert_eq!(code, 200, "{set}");
        server.app_until("shop/web", "forced", PATIENCE, |v| v["forced"].is_object());
        let (code, lifted) = server.send("DELETE", "/v1/apps/shop/web/override?by=ana", None);
        assert_eq!(code, 200, "{lifted}");
        server.app_until("shop/web", "lifted", PATIENCE, |v| v["forced"].is_null());
    }
    let mut all = Value::Null;
    let recorded = wait_until(PATIENCE, || {
        all = history(&server, "shop/web", "?limit=1000");
        entries(&all).len() >= 7
    });
    assert!(recorded.is_some(), "{all}");
    // One entry a page, followed back: the same entries, newest first.
    let mut paged = Vec::new();
    let mut next = String::new();
    loop {
        let page = history(&server, "shop/web", &format!("?limit=1&continue={next}"));
        paged.extend(entries(&page).iter().map(|e| e["at"].clone()));
        match page["continue"].as_str() {
            Some(mark) => next = mark.to_string(),
            None => break,
        }
        assert!(paged.len() <= 1000, "the pages never end");
    }
    let listed: Vec<Value> = entries(&history(&server, "shop/web", "?limit=1000"))
        .iter()
        .map(|e| e["at"].clone())
        .collect();
    // Entries newer than the first page may have come since.
    assert!(paged.len() >= entries(&all).len(), "{paged:?} {all}");
    assert_eq!(
        paged[..],
        listed[listed.len() - paged.len()..],
        "{listed:?}"
    );

    server.kill();
    let server = Server::start_with(plugins.path(), data.path(), &flags);
    let after = history(&server, "shop/web", "?limit=1000");
    let after_at: Vec<&Value> = entries(&after).iter().map(|e| &e["at"]).collect();
    for at in &listed {
        assert!(after_at.contains(&at), "{at} lost in the kill: {after}");
    }
    let overrides = after["marks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] == "override")
        .count();
    assert_eq!(overrides, 6, "each set and each lift, kept: {after}");
    let forced = entries(&after)
        .iter()
        .filter(|e| e["cause"]["kind"] == "override")
        .count();
    assert!(forced >= 3, "the forced entries name the override: {after}");
}

#[test]
fn a_history_that_cannot_be_opened_is_an_error_of_its_routes_only() {
    let plugins = plugin_folder(&DEFAULTS);
    let data = tempfile::tempdir().unwrap();
    std::fs::write(
        data.path().join("history.db"),
        b"not a database, not at all",
    )
    .unwrap();
    let server = Server::start_with(plugins.path(), data.path(), &["--demo"]);
    let (code, body) = server.get("/v1/apps/shop/cart/history");
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["error"]["code"], "history-unavailable", "{body}");
    let (code, body) = server.get("/v1/availability");
    assert_eq!(code, 503, "{body}");
    // The verdicts are served, and /readyz says what is wrong.
    server.app_until("shop/cart", "a verdict", PATIENCE, |v| {
        v["stable"].is_string()
    });
    let (_, ready) = server.get("/readyz");
    assert_eq!(ready["history"]["ok"], false, "{ready}");
    assert!(
        ready["history"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("history.db")),
        "{ready}"
    );
    // What could not be recorded is counted as lost.
    let mut metrics = String::new();
    let counted = wait_until(PATIENCE, || {
        metrics = reqwest::blocking::get(format!("{}/metrics", server.base))
            .unwrap()
            .text()
            .unwrap();
        metrics.lines().any(|l| {
            l.strip_prefix("verdict_history_lost_total ")
                .and_then(|v| v.trim().parse::<f64>().ok())
                .is_some_and(|v| v > 0.0)
        })
    });
    assert!(
        counted.is_some(),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("history"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The file is left as it was, for a person to look at.
    assert_eq!(
        std::fs::read(data.path().join("history.db")).unwrap(),
        b"not a database, not at all"
    );
    drop(server);
    // Off, its routes say so.
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(plugins.path(), data.path(), &["--demo", "--no-history"]);
    let (code, body) = server.get("/v1/apps/shop/cart/history");
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (404, Some("history-off")),
        "{body}"
    );
    assert!(!data.path().join("history.db").exists());
}

/// The Kubernetes Events (`events.k8s.io/v1`) the cluster holds in `shop`.
fn kube_events(cluster: &crate::live::Cluster) -> Vec<Value> {
    let url = format!(
        "{}/apis/events.k8s.io/v1/namespaces/shop/events",
        cluster.sim().url()
    );
    let list: Value = reqwest::blocking::get(url).unwrap().json().unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn each_status_change_is_a_kubernetes_event_on_the_apps_workload_counted_into_a_series() {
    use crate::live::{Cluster, deployment, pod, start_host};
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &[]);
    server.app_until("shop/web", "running", PATIENCE, |v| {
        v["stable"] == "running"
    });
    assert!(
        kube_events(&cluster).is_empty(),
        "a first verdict is no change"
    );
    // Only the replica that acts writes Events: changes seen before it
    // holds the Lease are no one's to announce.
    let acting = wait_until(PATIENCE, || server.get("/readyz").1["leader"] == true);
    assert!(acting.is_some(), "never led: {}", server.get("/readyz").1);

    // Into a crash loop and out of it, twice.
    for round in 1..=2 {
        cluster.apply(deployment(1, 0));
        cluster.apply(pod("web-1", Some("CrashLoopBackOff")));
        server.app_until("shop/web", "panic", PATIENCE, |v| v["stable"] == "panic");
        cluster.apply(deployment(1, 1));
        cluster.apply(pod("web-1", None));
        server.app_until("shop/web", "running", PATIENCE, |v| {
            v["stable"] == "running"
        });
        let mut events = Vec::new();
        let written = wait_until(PATIENCE, || {
            events = kube_events(&cluster);
            let count = |reason: &str| {
                events
                    .iter()
                    .find(|e| e["reason"] == reason)
                    .map(|e| e["series"]["count"].as_i64().unwrap_or(1))
            };
            count("Panic") == Some(round) && count("Running") == Some(round)
        });
        assert!(written.is_some(), "round {round}: {events:#?}");
    }
    // One series per reason (a derivation may pass through `degraded`
    // on the way), all of them verdict's.
    let events = kube_events(&cluster);
    let mut reasons: Vec<&str> = events
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    reasons.sort_unstable();
    reasons.dedup();
    assert_eq!(reasons.len(), events.len(), "{events:#?}");
    assert!(
        events.iter().all(|e| e["reportingController"] == "verdict"),
        "{events:#?}"
    );
    let deployment_uid = {
        let url = format!(
            "{}/apis/apps/v1/namespaces/shop/deployments/web",
            cluster.sim().url()
        );
        let d: Value = reqwest::blocking::get(url).unwrap().json().unwrap();
        d["metadata"]["uid"].as_str().unwrap().to_string()
    };
    let panic = events.iter().find(|e| e["reason"] == "Panic").unwrap();
    assert_eq!(panic["type"], "Warning", "{panic}");
    assert_eq!(panic["reportingController"], "verdict", "{panic}");
    assert_eq!(panic["action"], "Judge", "{panic}");
    assert_eq!(
        (
            &panic["regarding"]["kind"],
            &panic["regarding"]["name"],
            panic["regarding"]["uid"].as_str()
        ),
        (&json!("Deployment"), &json!("web"), Some(&*deployment_uid)),
        "{panic}"
    );
    let note = panic["note"].as_str().unwrap();
    assert!(
        // From running, or from degraded when the derivation saw the
        // workload's change before the pod's.
        (note.starts_with("running → panic") || note.starts_with("degraded → panic"))
            && note.contains("judged by default-status@"),
        "{note}"
    );
    let running = events.iter().find(|e| e["reason"] == "Running").unwrap();
    assert_eq!(running["type"], "Normal", "{running}");

    // Counted in /metrics: each write, a series' counts among them.
    let metrics = reqwest::blocking::get(format!("{}/metrics", server.base))
        .unwrap()
        .text()
        .unwrap();
    let written: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("verdict_kube_events_total{outcome=\"written\"} "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(written >= 4, "{metrics}");
}
