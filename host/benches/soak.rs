//! Soak benchmark: the demo (`verdict serve --demo`, the default policies,
//! the simulator playing its looping scenario) left to run with no client
//! for 30 minutes, its memory and CPU time read every 10 seconds. It
//! reports resident memory at the start, the middle and the end, and the
//! growth over the second half, where a host that holds steady shows none.
//!
//! Run with `cargo xtask bench --soak` (release profile); `--minutes N`
//! for another length.

use std::path::Path;
use std::time::{Duration, Instant};

// The tests' helpers: starting the binary, reading its memory.
#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let minutes: u64 = args
        .iter()
        .position(|a| a == "--minutes")
        .and_then(|i| args.get(i + 1))
        .and_then(|m| m.parse().ok())
        .unwrap_or(30);
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let data = tempfile::tempdir().unwrap();
    let (child, base) = support::spawn_verdict(&plugins, data.path(), &["--demo"], "warn");
    let mut child = support::KillOnDrop(child);
    let pid = child.0.id();
    println!("soak: the demo for {minutes} min, no clients; memory every 10 s ({base})");

    let length = Duration::from_secs(minutes * 60);
    let started = Instant::now();
    let mut samples: Vec<(Duration, f64, Duration)> = Vec::new();
    loop {
        let at = started.elapsed();
        let (rss, _) = support::memory(pid);
        samples.push((at, rss, support::cpu_time(pid)));
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("the host exited during the soak: {status}");
        }
        if at >= length {
            break;
        }
        std::thread::sleep(Duration::from_secs(10).min(length - at));
    }
    let (_, hwm) = support::memory(pid);
    let at = |fraction: f64| {
        let wanted = length.mul_f64(fraction);
        *samples
            .iter()
            .min_by_key(|(t, _, _)| t.abs_diff(wanted))
            .expect("samples were taken")
    };
    println!("  time      resident   CPU time");
    for fraction in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let (t, rss, cpu) = at(fraction);
        println!(
            "  {:>4.1} min  {:>6.1} MiB  {:>6.1} s",
            t.as_secs_f64() / 60.0,
            rss,
            cpu.as_secs_f64()
        );
    }
    let (middle, end) = (at(0.5), at(1.0));
    let hours = (end.0 - middle.0).as_secs_f64() / 3600.0;
    println!(
        "soak: resident {:.1} MiB at the start, {:.1} MiB in the middle, {:.1} MiB at the end \
         (peak {:.1} MiB); second half {:+.1} MiB/h; CPU {:.1}% of one core",
        samples[0].1,
        middle.1,
        end.1,
        hwm,
        (end.1 - middle.1) / hours.max(f64::EPSILON),
        100.0 * end.2.as_secs_f64() / end.0.as_secs_f64().max(f64::EPSILON)
    );
}
