//! `verdict fleet` following the verdicts of several clusters (each a
//! host on a simulator): every cluster's apps in one view, changes on the
//! fleet's stream with their cluster, a lost cluster's apps `unknown`
//! within the bound while the others go on, its return resynced, tasks
//! sent to the cluster they name and refused for one that is lost; and
//! members that answer garbage, trickle or flood cost the others nothing.

use std::process::Command;

use serde_json::{Value, json};

use crate::events::Stream;
use crate::live::{Cluster, PATIENCE, deployment, pod, start_host};
use crate::serve::Server;
use crate::support::wait_until;

/// The fleet's bound on silence in these tests.
pub const UNKNOWN_AFTER_MS: u64 = 2_000;

/// `verdict fleet` following `members` (`NAME=URL`).
pub fn start_fleet(members: &[(&str, &str)], extra: &[&str]) -> Server {
    Server::start_command(fleet_command(members, extra))
}

/// `verdict fleet` following `members`, with more flags.
fn fleet_command(members: &[(&str, &str)], extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
    command.args([
        "fleet",
        "--listen",
        "127.0.0.1:0",
        "--unknown-after-ms",
        &UNKNOWN_AFTER_MS.to_string(),
        "--member-backoff-max-ms",
        "1000",
    ]);
    for (name, url) in members {
        command.arg("--member").arg(format!("{name}={url}"));
    }
    command.args(extra);
    command
}

/// The fleet's view of one app of one cluster.
fn fleet_app(fleet: &Server, cluster: &str) -> Value {
    let (code, body) = fleet.get(&format!("/v1/fleet/apps?cluster={cluster}"));
    assert_eq!(code, 200, "{body}");
    body["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["namespace"] == "shop" && a["name"] == "web")
        .cloned()
        .unwrap_or(Value::Null)
}

/// Wait until the fleet's view of `cluster`'s `shop/web` satisfies `check`.
fn until(fleet: &Server, cluster: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let took = wait_until(PATIENCE, || {
        last = fleet_app(fleet, cluster);
        check(&last)
    });
    assert!(took.is_some(), "{what}: never; last {last}");
    last
}

fn cluster_view(fleet: &Server, name: &str) -> Value {
    let (_, body) = fleet.get("/v1/fleet/clusters");
    body["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

/// A free address on 127.0.0.1, for a host that must come back where it
/// was.
pub fn free_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// A host following `cluster`, listening at `listen`, once it has judged
/// `shop/web`.
fn start_host_at(cluster: &Cluster, data: &std::path::Path, listen: &str) -> Server {
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
    command
        .args([
            "serve",
            "--listen",
            listen,
            "--cluster-url",
            &cluster.sim().url(),
        ])
        .arg("--plugins")
        .arg(plugins)
        .arg("--data-dir")
        .arg(data);
    let server = Server::start_command(command);
    let judged = wait_until(PATIENCE, || server.get("/v1/apps/shop/web").0 == 200);
    assert!(judged.is_some(), "shop/web never judged");
    server
}

#[test]
fn a_fleet_shows_every_cluster_and_a_lost_one_as_unknown_until_it_returns() {
    let east_cluster = Cluster::start();
    let west_cluster = Cluster::start();
    let (east_data, west_data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let east_listen = free_address();
    let mut east = start_host_at(&east_cluster, east_data.path(), &east_listen);
    let west = start_host(&west_cluster, west_data.path(), &[]);
    let fleet = start_fleet(&[("east", &east.base), ("west", &west.base)], &[]);

    for cluster in ["east", "west"] {
        until(&fleet, cluster, "the fleet shows the cluster's app", |a| {
            a["stable"] == "running" && a["cluster"] == cluster
        });
        let view = cluster_view(&fleet, cluster);
        assert_eq!(view["reach"], "live", "{view}");
        assert_eq!(view["version"], env!("CARGO_PKG_VERSION"), "{view}");
    }
    let events = Stream::open_at(
        &format!("{}/v1/fleet/events?cluster=west", fleet.base),
        None,
    );

    // West's app breaks: the fleet shows it, and its stream says so with
    // the cluster; east's stays as it was.
    west_cluster.apply(deployment(1, 0));
    west_cluster.apply(pod("web-1", Some("CrashLoopBackOff")));
    until(&fleet, "west", "west's broken app shown", |a| {
        a["stable"] != "running" && a["stable"] != "unknown"
    });
    let event = events.until("west's verdict on the fleet's stream", |m| {
        m.event == "verdict" && m.data["data"]["stable"] != "running"
    });
    assert_eq!(event.data["cluster"], "west", "{}", event.data);
    assert_eq!(event.data["app"], "shop/web");
    assert_eq!(fleet_app(&fleet, "east")["stable"], "running");

    // The whole verdict, and its history, through its cluster.
    let (code, app) = fleet.get("/v1/fleet/apps/west/shop/web");
    assert_eq!(code, 200, "{app}");
    assert_eq!(app["cluster"], "west");
    assert!(app["groups"].is_array(), "{app}");
    let (code, history) = fleet.get("/v1/fleet/apps/west/shop/web/history?limit=5");
    assert_eq!(code, 200, "{history}");
    assert!(history["entries"].is_array(), "{history}");
    let (code, missing) = fleet.get("/v1/fleet/apps/north/shop/web");
    assert_eq!(
        (code, missing["error"]["code"].as_str()),
        (404, Some("no-such-cluster"))
    );

    // East is lost: within the bound its app is unknown, with what was
    // last known and its age; west goes on.
    east.kill();
    let lost = until(&fleet, "east", "east's app unknown", |a| {
        a["stable"] == "unknown"
    });
    assert_eq!(lost["last_known"]["stable"], "running", "{lost}");
    assert!(
        lost["last_known_age_ms"].as_u64().unwrap() >= UNKNOWN_AFTER_MS,
        "{lost}"
    );
    assert_eq!(lost["display"]["status"], "unknown");
    assert_eq!(cluster_view(&fleet, "east")["reach"], "lost");
    let (_, unknown) = fleet.get("/v1/fleet/apps?status=unknown");
    let clusters: Vec<&Value> = unknown["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["cluster"])
        .collect();
    assert_eq!(clusters, [&json!("east")], "{unknown}");
    west_cluster.apply(deployment(1, 1));
    west_cluster.apply(pod("web-1", None));
    until(&fleet, "west", "west's app back while east is lost", |a| {
        a["stable"] == "running"
    });

    // A task for the lost cluster is refused, never queued; one for west
    // runs on west alone.
    let ask = |body: Value| fleet.send("POST", "/v1/fleet/tasks", Some(&body.to_string()));
    let (code, refused) =
        ask(json!({"app": "shop/web", "action": "restart", "cluster_id": "east"}));
    assert_eq!(code, 503, "{refused}");
    assert_eq!(refused["error"]["code"], "cluster-unreachable");
    let (code, task) = ask(json!({"app": "shop/web", "action": "restart", "cluster_id": "west"}));
    assert_eq!(code, 201, "{task}");
    assert_eq!(task["cluster"], "west");
    let id = task["id"].as_str().unwrap();
    assert_eq!(west.get(&format!("/v1/tasks/{id}")).0, 200);
    let (code, through) = fleet.get(&format!("/v1/fleet/tasks/west/{id}"));
    assert_eq!((code, &through["id"]), (200, &json!(id)), "{through}");
    let (code, unnamed) = ask(json!({"app": "shop/web", "action": "restart"}));
    assert_eq!(code, 422, "{unnamed}");

    // East returns where it was: resynced, its app known again.
    let east_again = start_host_at(&east_cluster, east_data.path(), &east_listen);
    until(&fleet, "east", "east's app known again", |a| {
        a["stable"] == "running"
    });
    let view = cluster_view(&fleet, "east");
    assert_eq!(view["reach"], "live", "{view}");
    assert!(view["syncs"].as_u64().unwrap() >= 2, "{view}");

    // Availability per cluster and across the fleet; the metrics by cluster.
    let (code, availability) = fleet.get("/v1/fleet/availability?window=1h");
    assert_eq!(code, 200, "{availability}");
    assert!(
        availability["clusters"]["west"]["apps"].as_u64().unwrap() >= 1,
        "{availability}"
    );
    assert!(
        availability["fleet"]["apps"].as_u64().unwrap() >= 2,
        "{availability}"
    );
    let metrics = reqwest::blocking::get(format!("{}/metrics", fleet.base))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains(
            r#"verdict_app_status{cluster="west",namespace="shop",app="web",status="running"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"verdict_fleet_member_up{cluster="east"} 1"#),
        "{metrics}"
    );
    drop(east_again);
}

/// A member that misbehaves, served on a port of its own.
mod hostile {
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::response::Response;
    use axum::routing::get;
    use futures_util::StreamExt;

    /// What a member does wrong.
    #[derive(Clone, Copy)]
    pub enum Kind {
        /// Answers that are not verdict's.
        Garbage,
        /// A stream that sends a byte now and then, never a whole line.
        Trickle,
        /// A list of apps of 100 MB.
        Huge,
        /// 10 000 apps, and a quiet stream with heartbeats.
        Many,
        /// No apps listed, then a new app's verdict on its stream every
        /// millisecond, without end.
        Flood,
        /// Events that say they are another member's (`"cluster":
        /// "good"`), and events of a megabyte each.
        Spoof,
        /// An error answer whose text moves the terminal and forges a log
        /// line.
        Escapes,
    }

    fn stream(body: Body) -> Response {
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap()
    }

    fn verdict_of(namespace: &str, name: &str) -> serde_json::Value {
        serde_json::json!({
            "namespace": namespace, "name": name,
            "stable": "running", "stable_reason": "every replica is ready",
            "transitional": null,
            "display": {"status": "running", "text": "running", "severity": "info", "progress": null},
            "ready_replicas": 1, "expected_replicas": 1, "groups": []
        })
    }

    fn apps(kind: Kind) -> Response {
        match kind {
            Kind::Flood | Kind::Spoof => Response::new(Body::from(r#"{"apps": []}"#)),
            Kind::Escapes => Response::builder()
                .status(500)
                .header("content-type", "application/json")
                .body(Body::from(
                    "{\"error\": {\"message\": \"broken\\u001b[2J\\u001b]0;owned\\u0007\\n2026-01-01T00:00:00Z  INFO verdict: FORGED LOG LINE\"}}",
                ))
                .unwrap(),
            Kind::Garbage => Response::new(Body::from("<html>not verdict</html>")),
            Kind::Trickle => Response::new(Body::from(r#"{"apps": []}"#)),
            Kind::Huge => {
                let chunk = bytes::Bytes::from(vec![b' '; 1024 * 1024]);
                let chunks = futures_util::stream::iter(
                    std::iter::once(bytes::Bytes::from_static(b"{\"apps\": ["))
                        .chain(std::iter::repeat_n(chunk, 100)),
                )
                .map(Ok::<_, std::convert::Infallible>);
                Response::new(Body::from_stream(chunks))
            }
            Kind::Many => {
                let apps: Vec<serde_json::Value> = (0..10_000)
                    .map(|i| {
                        serde_json::json!({
                            "namespace": format!("ns-{}", i % 100), "name": format!("app-{i}"),
                            "stable": "running", "stable_reason": "every replica is ready",
                            "transitional": null,
                            "display": {"status": "running", "text": "running", "severity": "info", "progress": null},
                            "ready_replicas": 1, "expected_replicas": 1, "groups": []
                        })
                    })
                    .collect();
                Response::new(Body::from(serde_json::json!({ "apps": apps }).to_string()))
            }
        }
    }

    fn events(kind: Kind) -> Response {
        let ticks = |every: Duration, text: &'static [u8]| {
            futures_util::stream::unfold((), move |()| async move {
                tokio::time::sleep(every).await;
                Some((
                    Ok::<_, std::convert::Infallible>(bytes::Bytes::from_static(text)),
                    (),
                ))
            })
        };
        match kind {
            Kind::Garbage => stream(Body::from_stream(ticks(
                Duration::from_millis(50),
                b"event: verdict\ndata: {\"data\": 42}\n\n",
            ))),
            Kind::Trickle => stream(Body::from_stream(ticks(Duration::from_millis(200), b"x"))),
            Kind::Huge | Kind::Many | Kind::Escapes => stream(Body::from_stream(ticks(
                Duration::from_millis(300),
                b": heartbeat\n\n",
            ))),
            Kind::Flood => {
                let apps = futures_util::stream::iter(0u64..).then(|i| async move {
                    if i % 64 == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    let data = serde_json::json!({"app": format!("flood/app-{i}"),
                        "data": verdict_of("flood", &format!("app-{i}"))});
                    Ok::<_, std::convert::Infallible>(bytes::Bytes::from(format!(
                        "event: verdict\nid: {}\ndata: {data}\n\n",
                        i + 1
                    )))
                });
                stream(Body::from_stream(apps))
            }
            Kind::Spoof => {
                let events = futures_util::stream::iter(0u64..).then(|i| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let mut verdict = verdict_of("shop", "spoofed");
                    verdict["cluster"] = "good".into();
                    verdict["padding"] = "x".repeat(if i % 2 == 0 { 1000 } else { 1_000_000 }).into();
                    let data = serde_json::json!({"app": "shop/spoofed", "cluster": "good", "data": verdict});
                    Ok::<_, std::convert::Infallible>(bytes::Bytes::from(format!(
                        "event: verdict\nid: {}\ndata: {data}\n\n",
                        i + 1
                    )))
                });
                stream(Body::from_stream(events))
            }
        }
    }

    /// Serve a misbehaving member on 127.0.0.1; its base URL. The server
    /// runs on the runtime given, until it is dropped.
    pub fn serve(runtime: &tokio::runtime::Runtime, kind: Kind) -> String {
        let router = Router::new()
            .route("/v1/apps", get(move || async move { apps(kind) }))
            .route("/v1/events", get(move || async move { events(kind) }))
            .route("/healthz", get(|| async { "{\"status\": \"ok\"}" }));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, router).await });
        base
    }
}

#[test]
fn members_that_answer_garbage_trickle_or_flood_cost_the_others_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let garbage = hostile::serve(&runtime, hostile::Kind::Garbage);
    let trickle = hostile::serve(&runtime, hostile::Kind::Trickle);
    let huge = hostile::serve(&runtime, hostile::Kind::Huge);
    let many = hostile::serve(&runtime, hostile::Kind::Many);
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let good = start_host(&cluster, data.path(), &[]);
    let fleet = start_fleet(
        &[
            ("garbage", &garbage),
            ("trickle", &trickle),
            ("huge", &huge),
            ("many", &many),
            ("good", &good.base),
            ("nowhere", "http://127.0.0.1:9"),
        ],
        &["--member-answer-max-mib", "16"],
    );
    until(&fleet, "good", "the good member's app", |a| {
        a["stable"] == "running"
    });
    let took = wait_until(PATIENCE, || cluster_view(&fleet, "many")["apps"] == 10_000);
    assert!(took.is_some(), "{}", cluster_view(&fleet, "many"));
    assert_eq!(cluster_view(&fleet, "many")["reach"], "live");

    // The good member's changes come through while the others misbehave.
    cluster.apply(deployment(1, 0));
    cluster.apply(pod("web-1", Some("CrashLoopBackOff")));
    until(&fleet, "good", "the good member's change", |a| {
        a["stable"] != "running"
    });

    // Each bad member says what is wrong with it, and none is live.
    for (name, says) in [
        ("garbage", "not verdict's"),
        ("huge", "larger than"),
        ("nowhere", ""),
    ] {
        let took = wait_until(PATIENCE, || {
            let view = cluster_view(&fleet, name);
            view["reach"] != "live"
                && view["last_error"]
                    .as_str()
                    .is_some_and(|e| e.contains(says))
        });
        assert!(took.is_some(), "{name}: {}", cluster_view(&fleet, name));
    }
    // The trickle is cut off once it has said nothing whole for the bound
    // (its listing answers, so it is live again after each new start, and
    // cut off again).
    let took = wait_until(PATIENCE, || {
        cluster_view(&fleet, "trickle")["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("said nothing whole"))
    });
    assert!(took.is_some(), "{}", cluster_view(&fleet, "trickle"));

    // The fleet kept its memory: the 100 MB answer was refused, not held.
    let (resident, _) = crate::support::memory(fleet.pid());
    assert!(resident < 200.0, "the fleet holds {resident} MiB");
    assert_eq!(fleet.get("/readyz").0, 200);
    assert_eq!(fleet.get("/v1/fleet/clusters").0, 200);
    drop(runtime);
}

#[test]
fn members_that_flood_spoof_or_escape_are_cut_off_or_escaped_and_the_others_are_served() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let flood = hostile::serve(&runtime, hostile::Kind::Flood);
    let spoof = hostile::serve(&runtime, hostile::Kind::Spoof);
    let escapes = hostile::serve(&runtime, hostile::Kind::Escapes);
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let good = start_host(&cluster, data.path(), &[]);
    let log = data.path().join("fleet.log");
    let command = fleet_command(
        &[
            ("flood", &flood),
            ("spoof", &spoof),
            ("escapes", &escapes),
            ("good", &good.base),
        ],
        &[
            "--member-apps-max",
            "2000",
            "--event-buffer-mib",
            "8",
            "--member-event-max-kib",
            "2048",
        ],
    );
    let fleet = Server::start_logging(command, "info", &log);
    until(&fleet, "good", "the good member's app", |a| {
        a["stable"] == "running"
    });

    // The flood is cut off at its bound, saying why; it never holds more.
    let took = wait_until(PATIENCE, || {
        cluster_view(&fleet, "flood")["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("cut off") && e.contains("--member-apps-max"))
    });
    assert!(took.is_some(), "{}", cluster_view(&fleet, "flood"));
    assert!(cluster_view(&fleet, "flood")["apps"].as_u64().unwrap() <= 2000);

    // The spoofer's events are its own: nothing appears in good's row.
    let took = wait_until(PATIENCE, || {
        cluster_view(&fleet, "spoof")["events"]
            .as_u64()
            .unwrap_or(0)
            >= 20
    });
    assert!(took.is_some(), "{}", cluster_view(&fleet, "spoof"));
    let (_, good_apps) = fleet.get("/v1/fleet/apps?cluster=good");
    assert!(
        good_apps["apps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["name"] != "spoofed"),
        "{good_apps}"
    );
    let (_, spoofed) = fleet.get("/v1/fleet/apps?cluster=spoof");
    assert!(
        spoofed["apps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "spoofed" && a["cluster"] == "spoof"),
        "{spoofed}"
    );

    // The escaping member's words are in the log escaped, on its own line.
    let took = wait_until(PATIENCE, || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("FORGED LOG LINE")
    });
    assert!(took.is_some());
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        !logged.contains('\u{1b}') && !logged.contains('\u{7}'),
        "a raw escape in the log"
    );
    assert!(
        logged
            .lines()
            .all(|l| !l.starts_with("2026-01-01T00:00:00Z")),
        "a forged line: {logged}"
    );
    assert!(
        logged.contains("\\u{1b}[2J") && logged.contains("\\n2026-01-01T00:00:00Z"),
        "{logged}"
    );

    // Within its bounds: the flood's apps, the megabyte events' replay.
    let (resident, _) = crate::support::memory(fleet.pid());
    assert!(resident < 200.0, "the fleet holds {resident} MiB");
    cluster.apply(deployment(1, 0));
    cluster.apply(pod("web-1", Some("CrashLoopBackOff")));
    until(&fleet, "good", "the good member's change", |a| {
        a["stable"] != "running"
    });
    drop(runtime);
}

#[test]
fn a_member_whose_verdict_serves_another_cluster_is_a_mismatch_and_is_sent_nothing() {
    let (east_cluster, west_cluster) = (Cluster::start(), Cluster::start());
    let (east_data, west_data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let east = start_host(&east_cluster, east_data.path(), &["--cluster-id", "east"]);
    let west = start_host(&west_cluster, west_data.path(), &["--cluster-id", "west"]);
    assert_eq!(
        west.get("/v1/cluster").1,
        json!({"id": "west", "source": "flag"})
    );
    assert_eq!(west.get("/healthz").1["cluster_id"], "west");
    // `east` configured at west's URL (a mistake, or a spoof): its source
    // says it is cluster `east`; west's verdict says it serves `west`.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fleet.toml");
    std::fs::write(
        &config,
        format!(
            "[[fleet.members]]\nname = \"east\"\nurl = \"{}\"\ncluster-id = \"east\"\n\n\
             [[fleet.members]]\nname = \"west\"\nurl = \"{}\"\ncluster-id = \"west\"\n",
            west.base, west.base
        ),
    )
    .unwrap();
    let fleet = start_fleet(&[], &["--config", config.to_str().unwrap()]);
    let took = wait_until(PATIENCE, || {
        cluster_view(&fleet, "east")["reach"] == "mismatch"
    });
    let view = cluster_view(&fleet, "east");
    assert!(took.is_some(), "{view}");
    assert_eq!(
        (view["cluster_id"].as_str(), view["apps"].as_u64()),
        (Some("west"), Some(0)),
        "{view}"
    );
    until(&fleet, "west", "west's app", |a| a["stable"] == "running");
    // A task for east is refused by the fleet, and never reaches west.
    let restart = |cluster: &str| {
        json!({"app": "shop/web", "action": "restart", "cluster_id": cluster}).to_string()
    };
    let (code, refused) = fleet.send("POST", "/v1/fleet/tasks", Some(&restart("east")));
    assert_eq!(code, 503, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("serves cluster `west`"),
        "{refused}"
    );
    assert!(
        west.get("/v1/tasks").1["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // One for west goes with west's id, which west's verdict checks.
    let (code, task) = fleet.send("POST", "/v1/fleet/tasks", Some(&restart("west")));
    assert_eq!(code, 201, "{task}");
    assert_eq!(task["params"]["cluster-id"], "west", "{task}");
    // Sent directly, a task for another cluster is refused by the member.
    let direct = json!({"app": "shop/web", "action": "restart", "params": {"cluster_id": "east"}});
    let (code, refused) = west.send("POST", "/v1/tasks", Some(&direct.to_string()));
    assert_eq!(code, 422, "{refused}");
    drop(east);
}

#[test]
fn a_tasks_secret_material_sent_through_the_fleet_shows_nowhere_in_the_fleet() {
    use base64::Engine as _;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let member_log = data.path().join("member.log");
    let member = {
        let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
        let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--cluster-id",
                "west",
                "--plugins",
            ])
            .arg(plugins)
            .arg("--data-dir")
            .arg(data.path())
            .args(["--cluster-url", &cluster.sim().url()]);
        Server::start_logging(command, "debug,hyper=info,h2=info", &member_log)
    };
    let fleet_log = data.path().join("fleet.log");
    let fleet = Server::start_logging(
        fleet_command(&[("west", &member.base)], &[]),
        "debug,hyper=info,h2=info",
        &fleet_log,
    );
    until(&fleet, "west", "west's app", |a| a["stable"] == "running");
    let events = Stream::open_at(
        &format!("{}/v1/fleet/events?cluster=west", fleet.base),
        None,
    );
    let canary = format!("Qv8{}Jx", std::process::id());
    let secrets = [
        b64(&format!("LICENSE-{canary}")),
        format!("KEY-{canary}"),
        format!("PASSWORD-{canary}"),
        b64(&format!("robot:AUTH-{canary}")),
    ];
    let body = json!({"app": "newshop/web", "action": "create", "cluster_id": "west", "params": {
        "image": "web:1", "license": secrets[0],
        "certificate": {"cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "key": format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", secrets[1])},
        "image_pull_secrets": [
            {"registry": "registry.example:5000", "username": "puller", "password": secrets[2]},
            {"registry": "other.example", "auth": secrets[3]}]}});
    let (code, answer) = fleet.send("POST", "/v1/fleet/tasks", Some(&body.to_string()));
    assert_eq!(code, 201, "{answer}");
    assert_eq!(
        answer["params"]["license"]["redacted"], "license",
        "{answer}"
    );
    let id = answer["id"].as_str().unwrap().to_string();
    let streamed = events.until("the task on the fleet's stream", |m| {
        m.event == "task" && m.data.to_string().contains(&id)
    });
    let (_, through) = fleet.get(&format!("/v1/fleet/tasks/west/{id}"));
    let logs = [
        std::fs::read_to_string(&fleet_log).unwrap(),
        std::fs::read_to_string(&member_log).unwrap(),
    ];
    assert!(
        logs.iter().all(|l| l.contains("DEBUG")),
        "the logs are at debug level"
    );
    for (surface, text) in [
        ("the fleet's answer", answer.to_string()),
        ("the fleet's stream", streamed.data.to_string()),
        ("the task through the fleet", through.to_string()),
        ("the fleet's log", logs[0].clone()),
        ("the member's log", logs[1].clone()),
    ] {
        assert!(!text.contains(&canary), "the canary in {surface}");
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()), "{secret} in {surface}");
        }
    }
}
