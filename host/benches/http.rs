//! Load benchmark of the HTTP front, on loopback against the `verdict`
//! binary following a simulated cluster: `GET /v1/apps/{namespace}/{name}` requests
//! per second and latency under `wrk`, and the event stream's fan-out — how
//! long one change takes to reach each of 1 000 connected clients.
//!
//! Run with `cargo xtask bench` (release profile, installs `wrk` when
//! missing); `--quick` for a short run.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

// The tests' helpers: starting the binary.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// `wrk` against one URL: requests per second, and the latency
/// distribution's lines.
fn wrk(url: &str, seconds: u64) -> Option<(f64, String, String)> {
    let output = Command::new("wrk")
        .args(["-t2", "-c64", &format!("-d{seconds}s"), "--latency", url])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())?;
    let percentile = |p: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(p))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
            .unwrap_or_else(|| "?".into())
    };
    Some((rps, percentile("50%"), percentile("99%")))
}

/// One event-stream client: connect, then report when each `task` event
/// arrives.
async fn client(
    addr: String,
    ready: Arc<tokio::sync::Barrier>,
    arrivals: tokio::sync::mpsc::UnboundedSender<Instant>,
) {
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /v1/events?app=shop/web HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    // Headers first.
    while let Ok(Some(line)) = lines.next_line().await {
        if line.is_empty() {
            break;
        }
    }
    ready.wait().await;
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim_end().ends_with("event: task") && arrivals.send(Instant::now()).is_err() {
            return;
        }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let seconds = if quick { 2 } else { 10 };
    let clients = if quick { 100 } else { 1000 };
    let rounds = if quick { 3 } else { 10 };

    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let simulator = runtime
        .block_on(verdict_sim::Simulator::start(
            verdict_sim::Options::default(),
        ))
        .unwrap();
    for object in [
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app.kubernetes.io/instance": "web"}},
            "spec": {"replicas": 1},
            "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1}
        }),
    ] {
        simulator.apply(object).unwrap();
    }
    let data = tempfile::tempdir().unwrap();
    let (child, base) = support::spawn_verdict(
        &workspace.join("target/plugins"),
        data.path(),
        &["--cluster-url", &simulator.url()],
        "error",
    );
    let _host = support::KillOnDrop(child);
    let http = reqwest::blocking::Client::new();
    let app = format!("{base}/v1/apps/shop/web");
    support::wait_until(Duration::from_secs(60), || {
        http.get(&app).send().is_ok_and(|r| r.status() == 200)
    })
    .expect("the demo's apps never showed");

    println!(
        "verdict HTTP benchmark ({} mode)",
        if quick { "quick" } else { "full" }
    );
    println!();
    println!("| measure | figure | budget |");
    println!("|---|---|---|");
    match wrk(&app, seconds) {
        Some((rps, p50, p99)) => {
            println!(
                "| `GET /v1/apps/shop/web`, wrk 2 threads × 64 connections, {seconds} s | {rps:.0} requests/s | ≥ 20 000 |"
            );
            println!("| … latency p50 / p99 | {p50} / {p99} | p99 ≤ 5 ms |");
        }
        None => println!(
            "| `GET /v1/apps/shop/web` | wrk is not installed (`cargo xtask bench` installs it) | ≥ 20 000/s |"
        ),
    }

    // Fan-out: every client connected, then one change at a time.
    let addr = base.strip_prefix("http://").unwrap().to_string();
    let ready = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let (tx, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..clients {
        runtime.spawn(client(addr.clone(), Arc::clone(&ready), tx.clone()));
    }
    drop(tx);
    runtime.block_on(ready.wait());
    let mut delays = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let task: serde_json::Value = http
            .post(format!("{base}/v1/tasks"))
            .json(&serde_json::json!({"app": "shop/web", "action": "restart", "requested-by": "bench"}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let id = task["id"].as_str().expect("a task").to_string();
        let mut got = 0;
        runtime.block_on(async {
            while got < clients {
                let at = tokio::time::timeout(Duration::from_secs(30), arrivals.recv())
                    .await
                    .expect("every client gets the event within 30 s")
                    .expect("the clients stay connected");
                delays.push(at - started);
                got += 1;
            }
        });
        // The cancellation is an event too: wait it out before the next round.
        http.post(format!("{base}/v1/tasks/{id}/cancel"))
            .json(&serde_json::json!({"by": "bench"}))
            .send()
            .unwrap();
        runtime.block_on(async {
            for _ in 0..clients {
                let _ = tokio::time::timeout(Duration::from_secs(30), arrivals.recv()).await;
            }
        });
    }
    delays.sort();
    let at = |p: f64| delays[((delays.len() - 1) as f64 * p) as usize];
    println!(
        "| event to all {clients} stream clients ({rounds} changes), p50 / p99 / last | {} / {} / {} | — |",
        ms(at(0.5)),
        ms(at(0.99)),
        ms(at(1.0))
    );
}
