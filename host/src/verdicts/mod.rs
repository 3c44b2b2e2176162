//! Verdicts: status evaluation of grouped applications through the status
//! policy, and their JSON form ([`view`]).

pub mod live;
pub mod view;

use crate::plugins::bindings::{status, types};
use crate::plugins::{PolicyError, Slot};

/// Evaluate applications in one batch call of the status policy. `settings`
/// overrides the plugin's configured settings when given.
pub fn evaluate(
    slot: &Slot,
    inputs: &[status::AppInput],
    now: types::Timestamp,
    settings: Option<&str>,
) -> Result<Vec<Result<types::AppVerdict, String>>, PolicyError> {
    slot.call(|version| {
        let mut ctx = version.context(now);
        if let Some(settings) = settings {
            ctx.settings = settings.to_string();
        }
        version.evaluate_batch(&ctx, inputs)
    })
    .map(|answer| answer.value)
}
