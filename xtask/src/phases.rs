//! How long each phase of `cargo xtask test` took, printed as a table when
//! the run ends (passed or not), so that every run's log says where its
//! time went.

use std::sync::Mutex;
use std::time::{Duration, Instant};

static PHASES: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

/// Run `phase`, noting how long it took under `name`.
pub fn timed<T>(name: &str, phase: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let outcome = phase();
    note(name, started.elapsed());
    outcome
}

/// Note a phase's time measured elsewhere (one running beside others).
pub fn note(name: &str, took: Duration) {
    PHASES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((name.to_string(), took));
}

/// The table of the phases noted so far, with the whole run's time.
pub fn table(total: Duration) -> String {
    let phases = PHASES.lock().unwrap_or_else(|e| e.into_inner());
    let width = phases
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut out = String::new();
    for (name, took) in phases.iter() {
        out.push_str(&format!(
            "  {name:<width$}  {:>7.1} s\n",
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
    fn the_table_lists_each_phase_and_the_total() {
        timed("a phase", || ());
        note("another", Duration::from_millis(1500));
        let table = table(Duration::from_secs(90));
        assert!(
            table.contains("another") && table.contains("1.5 s"),
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
