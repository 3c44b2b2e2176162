//! The default status policy: a thin WIT wrapper over the rules in
//! `rules.rs` (seed 000 for applications, seed 001 for pods and containers).
//! The rule table, with its precedence, is in this crate's README.

wit_bindgen::generate!({
    world: "status-policy-encoded",
    path: "../../wit",
    // The encoded batches are postcard's encoding of these types.
    additional_derives: [serde::Serialize, serde::Deserialize],
    // Custom status plugins build on these rules: they depend on this crate
    // without its `export` feature and export their own implementation with
    // `verdict_status::export!(Mine with_types_in verdict_status)`.
    pub_export_macro: true,
});

use exports::verdict::policy::settings::Guest as SettingsGuest;
use exports::verdict::policy::status::{AppInput, Guest};
use exports::verdict::policy::status_encoded::Guest as EncodedGuest;
use verdict::policy::types::{AppVerdict, Context, PluginInfo};

/// The types the rules are written against.
mod bindings {
    pub use crate::exports::verdict::policy::status::AppInput;
    pub use crate::verdict::policy::types::*;
}

mod rules;

#[cfg(all(target_arch = "wasm32", feature = "export"))]
mod arena;

#[cfg(all(target_arch = "wasm32", feature = "export"))]
#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena::new();

use rules::{SETTINGS_SCHEMA, Settings, evaluate_app};

struct DefaultStatus;

impl Guest for DefaultStatus {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "default-status".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description:
                "Application, pod and container status from the cluster state and in-flight tasks."
                    .into(),
            settings_schema: Some(SETTINGS_SCHEMA.into()),
        }
    }

    fn evaluate(ctx: Context, input: AppInput) -> Result<AppVerdict, String> {
        let settings = Settings::parse(&ctx.settings);
        Ok(evaluate_app(&settings, ctx.now, &input))
    }

    fn evaluate_batch(ctx: Context, inputs: Vec<AppInput>) -> Vec<Result<AppVerdict, String>> {
        let settings = Settings::parse(&ctx.settings);
        inputs
            .iter()
            .map(|input| Ok(evaluate_app(&settings, ctx.now, input)))
            .collect()
    }
}

#[cfg(feature = "export")]
export!(DefaultStatus);

/// The default rules' verdict on one application, for plugins that build
/// on them.
pub fn default_rules(ctx: &Context, input: &AppInput) -> AppVerdict {
    evaluate_app(&Settings::parse(&ctx.settings), ctx.now, input)
}

impl EncodedGuest for DefaultStatus {
    fn evaluate_batch_encoded(ctx: Context, inputs: Vec<u8>) -> Result<Vec<u8>, String> {
        let settings = Settings::parse(&ctx.settings);
        evaluate_encoded(&inputs, |input| Ok(evaluate_app(&settings, ctx.now, input)))
    }
}

impl SettingsGuest for DefaultStatus {
    fn validate(settings: String) -> Result<(), String> {
        verdict_settings::check(SETTINGS_SCHEMA, &settings)
    }
}

/// `status-encoded.evaluate-batch-encoded` over any rules: decode the
/// batch, judge each app with `judge`, encode the answers. Plugins built on
/// these rules implement the encoded export with it in one line.
pub fn evaluate_encoded(
    inputs: &[u8],
    judge: impl Fn(&AppInput) -> Result<AppVerdict, String>,
) -> Result<Vec<u8>, String> {
    let inputs: Vec<AppInput> =
        postcard::from_bytes(inputs).map_err(|e| format!("the inputs do not decode: {e}"))?;
    let answers: Vec<Result<AppVerdict, String>> = inputs.iter().map(judge).collect();
    postcard::to_allocvec(&answers).map_err(|e| format!("the answers do not encode: {e}"))
}
