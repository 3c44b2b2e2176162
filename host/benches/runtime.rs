//! Benchmark of the plugin runtime: compile time of each default plugin (and
//! its load from the code cache), the cost of a trivial call, the per-item
//! cost of a batch call, and the time from a plugin file's replacement to the
//! new version serving.
//!
//! Run with `cargo xtask bench` (release profile); `--quick` for a short run.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use verdict::plugins::Limits;
use verdict::plugins::{CodeSource, Registry, Runtime, World, watch};
use verdict::wit::status;

// The tests' helpers: where the built components are, and inputs.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

use support::{app_input as app, default_plugin, test_plugin};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

fn registry_over(dir: &Path, cache: &Path) -> Arc<Registry> {
    let runtime = Runtime::new(cache, Limits::default()).unwrap();
    Arc::new(Registry::new(
        Arc::new(runtime),
        Some(dir.to_path_buf()),
        Default::default(),
    ))
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 2 } else { 5 };
    let calls = if quick { 2_000 } else { 50_000 };
    let swaps = if quick { 3 } else { 10 };

    println!(
        "verdict runtime benchmark ({} mode)",
        if quick { "quick" } else { "full" }
    );
    println!();

    // Compile each default plugin in a fresh cache, then load it from the
    // cache, `rounds` times; medians.
    println!("| plugin | compile (cold) | load from cache | ratio |");
    println!("|---|---|---|---|");
    for name in ["status", "failover", "admission"] {
        let mut cold = Vec::new();
        let mut cached = Vec::new();
        for _ in 0..rounds {
            let plugins = tempfile::tempdir().unwrap();
            let cache = tempfile::tempdir().unwrap();
            std::fs::copy(
                default_plugin(name),
                plugins.path().join(format!("{name}.wasm")),
            )
            .unwrap();
            for (samples, expect) in [
                (&mut cold, CodeSource::Compiled),
                (&mut cached, CodeSource::Cache),
            ] {
                let registry = registry_over(plugins.path(), cache.path());
                let report = registry.reload();
                let loaded = &report.loaded[0].info;
                assert_eq!(loaded.code, expect);
                samples.push(Duration::from_secs_f64(loaded.compile_ms / 1e3));
            }
        }
        let (cold, cached) = (median(cold), median(cached));
        println!(
            "| {name} | {} | {} | {:.0}× |",
            ms(cold),
            ms(cached),
            cold.as_secs_f64() / cached.as_secs_f64()
        );
    }
    println!();

    // Trivial calls: an application with nothing in it, through the
    // registry as the host calls it (slot lookup, pooled instance, deadline,
    // output checks).
    let plugins = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::copy(default_plugin("status"), plugins.path().join("status.wasm")).unwrap();
    let registry = registry_over(plugins.path(), cache.path());
    registry.reload();
    let input = app("web");
    let slot = registry.policy(World::Status).unwrap();
    for _ in 0..100 {
        slot.call(|v| v.evaluate(&v.context(0), &input)).unwrap();
    }
    let started = Instant::now();
    for _ in 0..calls {
        slot.call(|v| v.evaluate(&v.context(0), &input)).unwrap();
    }
    let single = started.elapsed() / calls;

    let batch: Vec<status::AppInput> = (0..100).map(|i| app(&format!("app-{i}"))).collect();
    let batches = (calls / 100).max(10);
    let started = Instant::now();
    for _ in 0..batches {
        slot.call(|v| v.evaluate_batch(&v.context(0), &batch))
            .unwrap();
    }
    let per_item = started.elapsed() / (batches * 100);
    println!("| call | cost |");
    println!("|---|---|");
    println!("| evaluate, one empty app | {} |", us(single));
    println!("| evaluate-batch of 100, per app | {} |", us(per_item));
    println!();

    // Reload latency: replace the file by rename (as editors and build tools
    // save) and time until the new version serves, with the folder watched.
    let plugins = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let target = plugins.path().join("status.wasm");
    std::fs::copy(test_plugin("stamp-a"), &target).unwrap();
    let registry = registry_over(plugins.path(), cache.path());
    registry.reload();
    let debounce = Duration::from_millis(150);
    let _watcher = watch(Arc::clone(&registry), plugins.path(), debounce).unwrap();
    let mut latencies = Vec::new();
    for i in 0..swaps {
        let stamp = ["b", "c", "a"][i % 3];
        let bytes = std::fs::read(test_plugin(&format!("stamp-{stamp}"))).unwrap();
        // A new version is new code: measure with compilation, not a cache hit.
        for entry in std::fs::read_dir(cache.path()).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        let partial = plugins.path().join(".status.wasm.partial");
        std::fs::write(&partial, &bytes).unwrap();
        let written = Instant::now();
        std::fs::rename(&partial, &target).unwrap();
        loop {
            let serving = registry
                .get("status")
                .and_then(|s| s.current())
                .map(|v| v.info().version.clone());
            if serving.as_deref() == Some(stamp) {
                break;
            }
            assert!(
                written.elapsed() < Duration::from_secs(30),
                "swap to {stamp} never happened"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        latencies.push(written.elapsed());
    }
    let worst = *latencies.iter().max().unwrap();
    println!("| reload | time |");
    println!("|---|---|");
    println!(
        "| file renamed → new version serving, median of {swaps} | {} |",
        ms(median(latencies))
    );
    println!("| … slowest | {} |", ms(worst));
    println!("| … of which debounce window | {} |", ms(debounce));
}
