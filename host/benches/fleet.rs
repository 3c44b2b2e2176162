//! Benchmark of `verdict fleet` following many members: 100 members of
//! 1 000 apps each by default (`--members N`, `--apps N`; `--quick`: 10 ×
//! 100). The members are servers of the benchmark speaking verdict's API —
//! `/v1/apps` with each app's whole verdict (two pods of one container
//! each, about 1.3 KB of JSON), `/v1/events` as verdict writes it, with the
//! heartbeats the fleet asks for — not verdicts on simulators: a hundred
//! hosts would not fit this machine beside the fleet, and what is measured
//! is the fleet. Reports:
//!
//! - the time from the fleet's start until every member is listed and
//!   live, and the fleet's memory then;
//! - an app's change, published by its member, to the fleet's event
//!   stream: p50, p99 and the longest, over `--changes N` changes
//!   (2 000; 200 quick) at `--rate N` a second (200), spread over the
//!   members; and the fleet's memory after them (resident and peak);
//! - one member gone silent (its stream open, nothing more on it, its
//!   listing refused): the time until the fleet shows its apps `unknown`,
//!   against the bound (`--unknown-after-ms`: 30 s; 3 s quick), and that
//!   the others stay live.
//!
//! Run with `cargo xtask bench --fleet` (release; `--quick` in the dev
//! profile).

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

// The tests' helpers: starting the binary, reading its memory.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

fn flag(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
}

/// One member of the benchmark's.
struct Member {
    /// `/v1/apps`, written once.
    listing: Arc<str>,
    /// Its stream's events, as SSE text.
    events: tokio::sync::broadcast::Sender<Arc<str>>,
    next_id: AtomicU64,
    /// Gone silent: streams send nothing more, listings are refused.
    silent: AtomicBool,
}

/// An app's verdict as verdict serves it.
fn verdict(namespace: &str, name: &str, stable: &str, text: &str) -> Value {
    let pod = |i: usize| {
        json!({"name": format!("{name}-5d8f7c9b4-{i:05}"), "node": format!("node-{}", i % 7),
            "status": stable, "reason": "every container is ready", "message": null,
            "instances": [{"name": "app", "app_instance": true, "status": stable,
                "reason": null, "message": null, "restart_count": 0}]})
    };
    json!({"namespace": namespace, "name": name, "stable": stable,
        "stable_reason": "2 of 2 replicas are ready", "transitional": null,
        "display": {"status": stable, "text": text, "severity": "info", "progress": null},
        "ready_replicas": 2, "expected_replicas": 2, "recheck_after": null,
        "groups": [pod(1), pod(2)],
        "observed_at": "2026-12-06T10:00:00.000Z", "observation_age_ms": 12, "stale": false,
        "policy": "status@1.0.0"})
}

fn app_name(i: u64) -> (String, String) {
    (format!("ns-{:02}", i % 20), format!("app-{i:05}"))
}

impl Member {
    fn new(apps: u64) -> Self {
        let listing: Vec<Value> = (0..apps)
            .map(|i| {
                let (ns, name) = app_name(i);
                verdict(&ns, &name, "running", "running")
            })
            .collect();
        Self {
            listing: json!({ "apps": listing }).to_string().into(),
            events: tokio::sync::broadcast::channel(4096).0,
            next_id: AtomicU64::new(1),
            silent: AtomicBool::new(false),
        }
    }

    /// Publish a change of app `i`, its text carrying `marker`.
    fn change(&self, i: u64, marker: u64) {
        let (ns, name) = app_name(i);
        let stable = if marker.is_multiple_of(2) {
            "degraded"
        } else {
            "running"
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let data = json!({"id": id, "type": "verdict", "at": "2026-12-06T10:00:00.000Z",
            "app": format!("{ns}/{name}"),
            "data": verdict(&ns, &name, stable, &format!("change {marker}"))});
        let _ = self
            .events
            .send(format!("id: {id}\nevent: verdict\ndata: {data}\n\n").into());
    }
}

#[derive(serde::Deserialize)]
struct EventQuery {
    #[serde(rename = "heartbeat-ms")]
    heartbeat_ms: Option<u64>,
}

async fn listing(State(member): State<Arc<Member>>) -> Response {
    if member.silent.load(Ordering::Relaxed) {
        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "gone").into_response();
    }
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        member.listing.to_string(),
    )
        .into_response()
}

async fn events(State(member): State<Arc<Member>>, Query(query): Query<EventQuery>) -> Response {
    let every = Duration::from_millis(query.heartbeat_ms.unwrap_or(15_000));
    let receiver = member.events.subscribe();
    let stream = futures_util::stream::unfold(
        (receiver, tokio::time::interval(every), member),
        |(mut receiver, mut ticks, member)| async move {
            loop {
                if member.silent.load(Ordering::Relaxed) {
                    // Open, and silent for good: as a partition looks.
                    std::future::pending::<()>().await;
                }
                let text: Arc<str> = tokio::select! {
                    received = receiver.recv() => match received {
                        Ok(text) => text,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => "event: resync\ndata: {}\n\n".into(),
                        Err(_) => return None,
                    },
                    _ = ticks.tick() => ": heartbeat\n\n".into(),
                };
                if member.silent.load(Ordering::Relaxed) {
                    continue;
                }
                return Some((
                    Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text.to_string())),
                    (receiver, ticks, member),
                ));
            }
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Serve a member; its base URL.
fn serve(runtime: &tokio::runtime::Runtime, member: Arc<Member>) -> String {
    let router = Router::new()
        .route("/v1/apps", get(listing))
        .route("/v1/events", get(events))
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok", "version": "bench"})) }),
        )
        .with_state(member);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(async move { axum::serve(listener, router).await });
    base
}

fn read(base: &str, path: &str) -> Value {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .get(format!("{base}{path}"))
        .send()
        .and_then(|r| r.json())
        .unwrap_or(Value::Null)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let members = flag("--members").unwrap_or(if quick { 10 } else { 100 });
    let apps = flag("--apps").unwrap_or(if quick { 100 } else { 1_000 });
    let changes = flag("--changes").unwrap_or(if quick { 200 } else { 2_000 });
    let rate = flag("--rate").unwrap_or(200).max(1);
    let unknown_after = flag("--unknown-after-ms").unwrap_or(if quick { 3_000 } else { 30_000 });

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let made = Instant::now();
    let fleet_members: Vec<(Arc<Member>, String)> = (0..members)
        .map(|_| {
            let member = Arc::new(Member::new(apps));
            let base = serve(&runtime, Arc::clone(&member));
            (member, base)
        })
        .collect();
    println!(
        "fleet benchmark: {members} members × {apps} apps ({:.1} MB of listings, made in {:.1} s)",
        fleet_members
            .iter()
            .map(|(m, _)| m.listing.len())
            .sum::<usize>() as f64
            / 1e6,
        made.elapsed().as_secs_f64()
    );

    let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
    command.args([
        "fleet",
        "--listen",
        "127.0.0.1:0",
        "--unknown-after-ms",
        &unknown_after.to_string(),
    ]);
    for (i, (_, base)) in fleet_members.iter().enumerate() {
        command.arg("--member").arg(format!("m{i:03}={base}"));
    }
    let started = Instant::now();
    let (child, base) = support::spawn_serving(command, "warn");
    let fleet = support::KillOnDrop(child);
    let pid = fleet.0.id();
    let all_live = || {
        let clusters = read(&base, "/v1/fleet/clusters");
        let list = clusters["clusters"].as_array().cloned().unwrap_or_default();
        list.len() as u64 == members
            && list
                .iter()
                .all(|c| c["reach"] == "live" && c["apps"] == apps)
    };
    support::wait_until(Duration::from_secs(600), all_live).expect("every member listed and live");
    let (resident, _) = support::memory(pid);
    println!(
        "every member listed and live: {:.2} s after the start ({} apps); fleet resident {resident:.1} MiB",
        (started.elapsed()).as_secs_f64(),
        members * apps
    );

    // Changes, each to the fleet's stream.
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..changes).map(|_| AtomicU64::new(0)).collect());
    let clock = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel::<(u64, Duration)>();
    let stream_url = format!("{base}/v1/fleet/events");
    std::thread::spawn(move || {
        let response = reqwest::blocking::Client::builder()
            .timeout(None)
            .build()
            .unwrap()
            .get(stream_url)
            .send()
            .unwrap();
        for line in BufReader::new(response).lines() {
            let Ok(line) = line else { return };
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let Ok(event) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            let marker = event["data"]["display"]["text"]
                .as_str()
                .and_then(|t| t.strip_prefix("change "))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(marker) = marker
                && tx.send((marker, clock.elapsed())).is_err()
            {
                return;
            }
        }
    });
    // The stream is open once the fleet's subscribers count it; a first
    // change that arrives says so.
    let probe = changes; // a marker outside the measured ones
    let opened = support::wait_until(Duration::from_secs(30), || {
        fleet_members[0].0.change(0, probe);
        rx.recv_timeout(Duration::from_millis(200))
            .is_ok_and(|(m, _)| m == probe)
    });
    assert!(
        opened.is_some(),
        "the fleet's stream never carried a change"
    );
    let every = Duration::from_secs_f64(1.0 / rate as f64);
    let sending = Instant::now();
    for n in 0..changes {
        let due = sending + every * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (member, _) = &fleet_members[(n % members) as usize];
        sent[n as usize].store(clock.elapsed().as_nanos() as u64, Ordering::Relaxed);
        member.change((n * 7919) % apps, n);
    }
    let mut latencies = Vec::with_capacity(changes as usize);
    let deadline = Instant::now() + Duration::from_secs(60);
    while (latencies.len() as u64) < changes && Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_secs(1)) {
            Ok((marker, at)) if marker < changes => {
                let sent_at = Duration::from_nanos(sent[marker as usize].load(Ordering::Relaxed));
                latencies.push(at.saturating_sub(sent_at));
            }
            _ => {}
        }
    }
    latencies.sort();
    let (resident, peak) = support::memory(pid);
    println!(
        "{} of {changes} changes on the fleet's stream at {rate}/s: p50 {}, p99 {}, longest {}; fleet resident {resident:.1} MiB, peak {peak:.1} MiB, CPU {:.1} s",
        latencies.len(),
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 99.0)),
        ms(latencies.last().copied().unwrap_or_default()),
        support::cpu_time(pid).as_secs_f64()
    );

    // One member goes silent.
    let lost_at = Instant::now();
    fleet_members[0].0.silent.store(true, Ordering::Relaxed);
    let shown = support::wait_until(Duration::from_millis(unknown_after * 3), || {
        let unknown = read(&base, "/v1/fleet/apps?cluster=m000&status=unknown");
        unknown["apps"]
            .as_array()
            .is_some_and(|a| a.len() as u64 == apps)
    })
    .map(|_| lost_at.elapsed());
    let others_live = read(&base, "/v1/fleet/clusters")["clusters"]
        .as_array()
        .map_or(0, |c| c.iter().filter(|c| c["reach"] == "live").count());
    match shown {
        Some(after) => println!(
            "a member gone silent: its {apps} apps shown unknown after {:.2} s (bound {:.1} s); {others_live} of {} others live",
            after.as_secs_f64(),
            unknown_after as f64 / 1000.0,
            members - 1
        ),
        None => println!("a member gone silent: its apps were never shown unknown"),
    }
    drop(fleet);
}
