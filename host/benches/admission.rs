//! Benchmark of admission: the latency of an `AdmissionReview` answered by
//! the default admission policy, in-process (the host's admission path, no
//! HTTP) and over loopback HTTP against the `verdict` binary; of task
//! creation over HTTP (admission plus a synced SQLite write); and of
//! well-behaved reviews beside a flood of slow ones (the test policy `gate`,
//! which spins until its call limit on objects annotated
//! `verdict.dev/misbehave: spin`), with the calls at
//! once bounded and shed past the queue deadline, and without a bound.
//!
//! Run with `cargo xtask bench` (release profile); `--quick` for a short run.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use verdict::admission::Admission;
use verdict::admission::FailureMode;
use verdict::plugins::Limits;
use verdict::plugins::{Registry, Runtime};
use verdict::tasks::model::NewTask;

// The tests' helpers: starting the binary, review bodies.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

use support::{review, spawn_verdict};

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn row(what: &str, samples: &mut [Duration]) {
    let p50 = percentile(samples, 0.5);
    let p99 = percentile(samples, 0.99);
    let max = percentile(samples, 1.0);
    println!(
        "| {what} | {} | {} | {} | {} | {} |",
        samples.len(),
        us(p50),
        us(p99),
        us(max),
        if p99 <= Duration::from_millis(5) {
            "met"
        } else {
            "missed"
        }
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--flood`: the flood's figures alone, at full size.
    if std::env::args().any(|a| a == "--flood") {
        flood(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."), false);
        return;
    }
    let calls = if quick { 300 } else { 5_000 };
    let tasks = if quick { 50 } else { 500 };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let plugins = workspace.join("target/plugins");
    println!(
        "verdict admission benchmark ({} mode)",
        if quick { "quick" } else { "full" }
    );
    println!();
    println!("| path | requests | p50 | p99 | slowest | p99 ≤ 5 ms |");
    println!("|---|---|---|---|---|---|");

    let bodies = [
        ("Pod", review("pod-create.json", "shop")),
        ("Deployment", review("deployment-create.json", "shop")),
    ];

    // In-process: the host's admission path over the default policy.
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(cache.path(), Limits::default()).unwrap();
    let registry = Arc::new(Registry::new(
        Arc::new(runtime),
        Some(plugins.clone()),
        Default::default(),
    ));
    registry.reload();
    let admission = Admission {
        shadows: None,
        registry,
        failure: FailureMode::Closed,
        live: None,
        gate: verdict::admission::Gate::new(&Default::default()),
        cluster: None,
        health_url_allow: Vec::new().into(),
    };
    let tokio = tokio::runtime::Runtime::new().unwrap();
    for (kind, body) in &bodies {
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let started = Instant::now();
            let answer = tokio.block_on(admission.review(body.as_bytes())).unwrap();
            samples.push(started.elapsed());
            assert_eq!(answer["response"]["allowed"], true);
        }
        row(&format!("review of a {kind}, in-process"), &mut samples);
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let request: NewTask = serde_json::from_value(
            json!({"app": "shop/web", "action": "restart", "requested-by": "bench"}),
        )
        .unwrap();
        let started = Instant::now();
        let admitted = tokio.block_on(admission.admit_task(&request, Vec::new()));
        samples.push(started.elapsed());
        assert!(admitted.is_ok());
    }
    row("task admission, in-process", &mut samples);

    // Over loopback HTTP: the binary on the demo cluster, one keep-alive
    // connection, requests one after another.
    let data = tempfile::tempdir().unwrap();
    let (child, base) = spawn_verdict(&plugins, data.path(), &["--demo"], "error");
    let _host = support::KillOnDrop(child);
    let client = reqwest::blocking::Client::new();
    let post = |path: &str, body: String| -> (u16, Value) {
        let response = client
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        (response.status().as_u16(), response.json().unwrap())
    };
    for (kind, body) in &bodies {
        // Warm the connection and the instance pool.
        for _ in 0..20 {
            post("/v1/admission/review", body.clone());
        }
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let started = Instant::now();
            let (code, answer) = post("/v1/admission/review", body.clone());
            samples.push(started.elapsed());
            assert_eq!(code, 200, "{answer}");
        }
        row(&format!("review of a {kind}, HTTP"), &mut samples);
    }
    let mut samples = Vec::with_capacity(tasks);
    for n in 0..tasks {
        let body = json!({"app": format!("bench/new-{n}"), "action": "create", "params": {"image": "bench:1"}});
        let started = Instant::now();
        let (code, answer) = post("/v1/tasks", body.to_string());
        samples.push(started.elapsed());
        assert_eq!(code, 201, "{answer}");
    }
    row(
        "task creation (admission + synced SQLite write), HTTP",
        &mut samples,
    );

    drop(_host);
    flood(&workspace, quick);
}

/// Well-behaved reviews sent one after another while `spinning` slow ones
/// are in flight at once, against the binary with `flags`; the normal
/// reviews' latencies, how many were shed, and how long the flood took.
fn beside_a_flood(
    workspace: &Path,
    flags: &[&str],
    spinning: usize,
    normal: usize,
) -> (Vec<Duration>, usize, Duration) {
    let plugins = tempfile::tempdir().unwrap();
    for name in ["status", "failover"] {
        std::fs::copy(
            workspace.join(format!("target/plugins/{name}.wasm")),
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    std::fs::copy(
        workspace.join("target/test-plugins/gate.wasm"),
        plugins.path().join("admission.wasm"),
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut all = vec!["--demo"];
    all.extend_from_slice(flags);
    let (child, base) = spawn_verdict(plugins.path(), data.path(), &all, "error");
    let _host = support::KillOnDrop(child);
    let fine = review("pod-create.json", "shop");
    let slow = {
        let mut pod: Value = serde_json::from_str(&fine).unwrap();
        pod["request"]["object"]["metadata"]["annotations"] =
            json!({"verdict.dev/misbehave": "spin"});
        pod.to_string()
    };
    let post = |client: &reqwest::blocking::Client, body: &str| -> Value {
        client
            .post(format!("{base}/v1/admission/review"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    for _ in 0..20 {
        post(&client, &fine);
    }
    let started = Instant::now();
    let flood: Vec<_> = (0..spinning)
        .map(|_| {
            let (slow, base) = (slow.clone(), base.clone());
            std::thread::spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(Duration::from_secs(300))
                    .build()
                    .unwrap()
                    .post(format!("{base}/v1/admission/review"))
                    .header("content-type", "application/json")
                    .body(slow)
                    .send()
                    .map(drop)
            })
        })
        .collect();
    // Let the flood arrive before the first well-behaved review.
    std::thread::sleep(Duration::from_millis(200));
    let mut samples = Vec::with_capacity(normal);
    let mut shed = 0;
    for _ in 0..normal {
        let sent = Instant::now();
        let answer = post(&client, &fine);
        samples.push(sent.elapsed());
        if answer["response"]["allowed"] != true {
            shed += 1;
        }
    }
    for request in flood {
        let _ = request.join();
    }
    (samples, shed, started.elapsed())
}

fn flood(workspace: &Path, quick: bool) {
    let (spinning, normal) = if quick { (100, 20) } else { (400, 50) };
    let secs = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    println!();
    println!(
        "Well-behaved reviews beside {spinning} slow ones at once (each spins until the 100 ms call limit); the API server's webhook timeout is 10 s:"
    );
    println!();
    println!(
        "| calls at once | normal reviews | p50 | p99 | slowest | shed (failure mode's answer) | flood drained in |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (what, flags) in [
        (
            "unbounded (512, no queue deadline)",
            &[
                "--admission-concurrency",
                "512",
                "--admission-queue-ms",
                "600000",
            ][..],
        ),
        ("bounded (one per core, 2 s queue: the defaults)", &[][..]),
    ] {
        let (mut samples, shed, took) = beside_a_flood(workspace, flags, spinning, normal);
        println!(
            "| {what} | {} | {} | {} | {} | {shed} | {} |",
            samples.len(),
            secs(percentile(&mut samples, 0.5)),
            secs(percentile(&mut samples, 0.99)),
            secs(percentile(&mut samples, 1.0)),
            secs(took),
        );
    }
}
