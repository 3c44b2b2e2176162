//! The default status rules compiled into the host: the very file the
//! status plugin is built from (`plugins/status/src/rules.rs`), compiled
//! against the host's bindings of the same WIT types. It is what a policy
//! would cost if the sandbox cost nothing; the benchmarks compare it with
//! the component, and the tests check that both give the same verdicts.

/// The types the rules are written against.
mod bindings {
    pub use crate::wit::status::AppInput;
    pub use crate::wit::types::*;
}

#[allow(dead_code)]
#[path = "../../plugins/status/src/rules.rs"]
mod rules;

pub use rules::Settings;

use crate::wit::{status, types};

/// The default rules' verdict on one application, with the settings given
/// as the plugin takes them (a JSON object text).
pub fn evaluate(
    settings: &Settings,
    now: types::Timestamp,
    input: &status::AppInput,
) -> types::AppVerdict {
    rules::evaluate_app(settings, now, input)
}
