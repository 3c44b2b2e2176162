//! Verdicts: status evaluation of grouped applications through the status
//! policy, and their JSON form ([`view`]).

pub mod live;
pub mod view;

use crate::plugins::{PolicyError, Slot};
use crate::wit::{status, types};

/// How verdicts are derived and when they are stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// Verdicts are stale when the cluster could not be watched, or the
    /// status policy could not derive them again, for this long, in
    /// milliseconds.
    #[arg(long = "stale-after-ms", value_name = "MS", default_value = "30000", value_parser = crate::settings::millis)]
    pub stale_after: std::time::Duration,
    /// Threads that evaluate verdicts when many apps are derived at once
    /// (0: one per core; fewer leave cores to the rest).
    #[arg(long = "derive-threads", value_name = "N", default_value = "0")]
    pub derive_threads: usize,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// Applications per call of the status policy: large enough to amortise the
/// call, small enough that one call's input and output stay far below the
/// per-call memory and output limits.
pub const BATCH: usize = 64;

/// Evaluate applications through the status policy, in batches of
/// [`BATCH`]. `settings` overrides the plugin's configured settings when
/// given.
pub fn evaluate(
    slot: &Slot,
    inputs: &[status::AppInput],
    now: types::Timestamp,
    settings: Option<&str>,
) -> Result<Vec<Result<types::AppVerdict, String>>, PolicyError> {
    let mut verdicts = Vec::with_capacity(inputs.len());
    for batch in inputs.chunks(BATCH) {
        let answer = slot
            .call(|version| version.evaluate_batch(&version.context_with(now, settings), batch))?;
        verdicts.extend(answer.value);
    }
    Ok(verdicts)
}
