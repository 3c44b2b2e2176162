//! Verdicts: status evaluation of grouped applications through the status
//! policy, and their JSON form ([`view`]).

pub mod live;
pub mod view;

use crate::plugins::{PolicyError, Slot};
use crate::wit::{status, types};

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
        let answer = slot.call(|version| {
            let mut ctx = version.context(now);
            if let Some(settings) = settings {
                ctx.settings = settings.to_string();
            }
            version.evaluate_batch(&ctx, batch)
        })?;
        verdicts.extend(answer.value);
    }
    Ok(verdicts)
}
