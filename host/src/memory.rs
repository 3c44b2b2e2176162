//! The process's memory beside its limit: resident memory read from
//! `/proc`, the limit from the container's cgroup (or configuration), and
//! a watch that says — in the log and in `/readyz` — when the host nears
//! its limit, so that it is not killed for it without a word.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

/// The memory limit, when it is not the cgroup's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// The memory the host may use, in MiB; by default its container's
    /// limit (the cgroup's `memory.max`), none outside a container. Past
    /// 90 % of it the log and `/readyz` say so.
    #[arg(long = "host-memory-limit-mib", value_name = "MIB", value_parser = crate::settings::positive)]
    pub limit_mib: Option<usize>,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// The share of the limit past which the host is near it.
const NEAR: f64 = 0.9;

const MIB: u64 = 1024 * 1024;

/// A reading of the process's memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Reading {
    /// Resident memory, in MiB.
    pub resident_mib: u64,
    /// The most it has been resident, in MiB.
    pub peak_mib: u64,
    /// The limit, in MiB, when there is one.
    pub limit_mib: Option<u64>,
    /// What the allocator has handed out and not had back, in MiB, when
    /// it says (jemalloc): the rest of `resident_mib` is pages it keeps
    /// for later, its own books, and what is not the heap (code, stacks).
    pub allocated_mib: Option<u64>,
    /// Past 90 % of the limit.
    pub near_limit: bool,
    /// What to do about it, when near.
    pub message: Option<String>,
}

/// Resident memory and its peak, in bytes (`VmRSS`, `VmHWM`).
pub fn resident() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Whether the process's allocator is jemalloc, whose statistics are then
/// read too.
static JEMALLOC: AtomicBool = AtomicBool::new(false);

/// Say that the process's allocator is jemalloc (the binary's, which the
/// library does not choose), and have it give freed memory back to the
/// system on a thread of its own: without it, pages freed after a burst
/// (a watch's full list, a delivery of thousands of instances) are given
/// back only as the process allocates again, and a host at rest stays as
/// large as its busiest moment made it.
pub fn allocator_is_jemalloc() {
    JEMALLOC.store(true, Ordering::Relaxed);
    #[cfg(feature = "jemalloc")]
    {
        let _ = tikv_jemalloc_ctl::max_background_threads::write(1);
        if let Err(error) = tikv_jemalloc_ctl::background_thread::write(true) {
            tracing::debug!(%error, "jemalloc gives freed memory back as the host allocates only");
        }
    }
}

/// The bytes the allocator has handed out and not had back, when it is
/// jemalloc.
pub fn allocated() -> Option<u64> {
    if !JEMALLOC.load(Ordering::Relaxed) {
        return None;
    }
    #[cfg(feature = "jemalloc")]
    {
        // Its statistics are cached until the epoch moves.
        tikv_jemalloc_ctl::epoch::advance().ok()?;
        tikv_jemalloc_ctl::stats::allocated::read()
            .ok()
            .map(|b| b as u64)
    }
    #[cfg(not(feature = "jemalloc"))]
    None
}

/// The memory limit of the cgroup at `root` (`/sys/fs/cgroup`): cgroup v2's
/// `memory.max`, else v1's `memory/memory.limit_in_bytes`; none when
/// unlimited (`max`, or v1's huge number).
pub fn cgroup_limit(root: &Path) -> Option<u64> {
    let read = |file: &str| std::fs::read_to_string(root.join(file)).ok();
    let text = read("memory.max").or_else(|| read("memory/memory.limit_in_bytes"))?;
    let bytes: u64 = text.trim().parse().ok()?;
    // v1 says "unlimited" with a number near the largest page-aligned i64.
    (bytes < 1 << 60).then_some(bytes)
}

/// The process's memory, read now and then, and whether it nears its
/// limit.
#[derive(Debug)]
pub struct Budget {
    limit: Option<u64>,
    last: Mutex<Reading>,
}

impl Budget {
    /// A budget of `settings`' limit, or the cgroup's.
    pub fn new(settings: &Settings) -> Self {
        let limit = match settings.limit_mib {
            Some(mib) => Some(mib as u64 * MIB),
            None => cgroup_limit(Path::new("/sys/fs/cgroup")),
        };
        Self::with_limit(limit)
    }

    /// A budget of `limit` bytes (none: no limit).
    pub fn with_limit(limit: Option<u64>) -> Self {
        Self {
            limit,
            last: Mutex::new(Reading {
                limit_mib: limit.map(|l| l / MIB),
                ..Reading::default()
            }),
        }
    }

    /// The last reading.
    pub fn last(&self) -> Reading {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Take a reading of `resident` and `peak` bytes; the log says when the
    /// host comes near its limit and when it is back below.
    pub fn record(&self, resident: u64, peak: u64) -> Reading {
        let near = self
            .limit
            .is_some_and(|limit| resident as f64 >= limit as f64 * NEAR);
        let message = match (near, self.limit) {
            (true, Some(limit)) => Some(format!(
                "resident memory is {} MiB, {:.0} % of the {} MiB limit: the host may be killed for \
                 lack of memory; give it more (the chart's resources.limits.memory, or --host-memory-limit-mib \
                 where the limit is not the container's)",
                resident / MIB,
                resident as f64 / limit as f64 * 100.0,
                limit / MIB
            )),
            _ => None,
        };
        let reading = Reading {
            resident_mib: resident / MIB,
            peak_mib: peak / MIB,
            limit_mib: self.limit.map(|l| l / MIB),
            allocated_mib: allocated().map(|b| b / MIB),
            near_limit: near,
            message,
        };
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (last.near_limit, near) {
            (false, true) => {
                tracing::error!(
                    resident_mib = reading.resident_mib,
                    limit_mib = reading.limit_mib,
                    "{}",
                    reading.message.as_deref().unwrap_or_default()
                );
            }
            (true, false) => tracing::info!(
                resident_mib = reading.resident_mib,
                limit_mib = reading.limit_mib,
                "resident memory is back below 90 % of the limit"
            ),
            _ => {}
        }
        *last = reading.clone();
        reading
    }

    /// Read the process's memory every `every`, until the task is aborted.
    pub async fn watch(self: std::sync::Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if let Some((resident, peak)) = resident() {
                self.record(resident, peak);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_the_limit_is_said_once_and_back_below_too() {
        let budget = Budget::with_limit(Some(100 * MIB));
        let below = budget.record(80 * MIB, 80 * MIB);
        assert!(!below.near_limit && below.message.is_none(), "{below:?}");
        let near = budget.record(95 * MIB, 95 * MIB);
        assert!(near.near_limit, "{near:?}");
        let message = near.message.unwrap();
        assert!(
            message.contains("95 MiB") && message.contains("100 MiB limit"),
            "{message}"
        );
        assert_eq!(budget.last().limit_mib, Some(100));
        assert!(!budget.record(50 * MIB, 95 * MIB).near_limit);
        assert_eq!(budget.last().peak_mib, 95);
        // Without a limit, never near one.
        let unlimited = Budget::with_limit(None);
        assert!(!unlimited.record(u64::MAX / 2, u64::MAX / 2).near_limit);
    }

    #[test]
    fn the_cgroup_limit_is_read_from_v2_or_v1_and_unlimited_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_limit(dir.path()), None);
        std::fs::create_dir(dir.path().join("memory")).unwrap();
        std::fs::write(
            dir.path().join("memory/memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        assert_eq!(cgroup_limit(dir.path()), None, "v1's unlimited");
        std::fs::write(
            dir.path().join("memory/memory.limit_in_bytes"),
            "536870912\n",
        )
        .unwrap();
        assert_eq!(cgroup_limit(dir.path()), Some(512 * MIB));
        std::fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_limit(dir.path()), None, "v2's unlimited");
        std::fs::write(dir.path().join("memory.max"), "314572800\n").unwrap();
        assert_eq!(cgroup_limit(dir.path()), Some(300 * MIB));
    }

    #[test]
    fn this_process_has_resident_memory() {
        let (resident, peak) = resident().unwrap();
        assert!(resident > 0 && peak >= resident, "{resident} {peak}");
    }
}
