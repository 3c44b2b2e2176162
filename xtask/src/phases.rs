//! How long each phase of `cargo xtask test` took, and how busy the
//! machine's cores were meanwhile (whatever kept them busy: a phase running
//! beside shares them), printed as a table when the run ends (passed or
//! not), so that every run's log says where its time went and whether it
//! was waiting or computing.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Each phase: its name, its time, and the cores' busy share then.
static PHASES: Mutex<Vec<(String, Duration, Option<f64>)>> = Mutex::new(Vec::new());

/// The machine's CPU time so far from `/proc/stat`, in ticks: busy and
/// all.
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    busy_and_all(stat.lines().next()?)
}

/// `cpu  user nice system idle iowait irq softirq steal …`: idle and
/// iowait are not busy.
fn busy_and_all(line: &str) -> Option<(u64, u64)> {
    let fields: Vec<u64> = line
        .strip_prefix("cpu ")?
        .split_whitespace()
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let all: u64 = fields.iter().sum();
    let idle = fields.get(3)? + fields.get(4)?;
    Some((all - idle, all))
}

/// Run `phase`, noting how long it took under `name`.
pub fn timed<T>(name: &str, phase: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let before = cpu_ticks();
    let outcome = phase();
    let busy = match (before, cpu_ticks()) {
        (Some((b0, a0)), Some((b1, a1))) if a1 > a0 => Some((b1 - b0) as f64 / (a1 - a0) as f64),
        _ => None,
    };
    push(name, started.elapsed(), busy);
    outcome
}

fn push(name: &str, took: Duration, busy: Option<f64>) {
    PHASES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((name.to_string(), took, busy));
}

/// The table of the phases noted so far, with the whole run's time.
pub fn table(total: Duration) -> String {
    let phases = PHASES.lock().unwrap_or_else(|e| e.into_inner());
    let width = phases
        .iter()
        .map(|(n, _, _)| n.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut out = String::new();
    for (name, took, busy) in phases.iter() {
        let busy = busy.map_or(String::new(), |b| {
            format!("   cores {:>3.0} % busy", b * 100.0)
        });
        out.push_str(&format!(
            "  {name:<width$}  {:>7.1} s{busy}\n",
            took.as_secs_f64()
        ));
    }
    out.push_str(&format!(
        "  {:<width$}  {:>7.1} s\n",
        "total",
        total.as_secs_f64()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cores_busy_share_leaves_idle_and_iowait_out() {
        // user 30, nice 0, system 10, idle 50, iowait 10, irq 0, softirq 0,
        // steal 0, then guest fields that are in user already.
        assert_eq!(
            busy_and_all("cpu  30 0 10 50 10 0 0 0 7 7"),
            Some((40, 100))
        );
        assert_eq!(busy_and_all("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(busy_and_all("cpu  a b"), None);
    }

    #[test]
    fn the_table_lists_each_phase_and_the_total() {
        timed("a phase", || ());
        push("another", Duration::from_millis(1500), Some(0.5));
        let table = table(Duration::from_secs(90));
        assert!(
            table.contains("another") && table.contains("1.5 s   cores  50 % busy"),
            "{table}"
        );
        assert!(
            table.lines().any(|l| l.trim_start().starts_with("a phase")),
            "{table}"
        );
        assert!(
            table.lines().last().unwrap().contains("total") && table.contains("90.0 s"),
            "{table}"
        );
    }
}
