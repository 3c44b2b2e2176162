//! Write a verdict policy in Rust.
//!
//! A policy is a type that implements one of [`StatusPolicy`],
//! [`FailoverPolicy`], [`AdmissionPolicy`] or [`LifecyclePolicy`], exported
//! with the matching
//! macro — the WIT bindings, the batch and encoded forms of the status world
//! and the `export!` are done here once:
//!
//! ```ignore
//! use verdict_policy::prelude::*;
//!
//! struct Strict;
//!
//! impl StatusPolicy for Strict {
//!     fn describe() -> PluginInfo {
//!         info("strict", env!("CARGO_PKG_VERSION"), "The default rules, stricter.")
//!     }
//!
//!     fn evaluate(ctx: &Context, input: &AppInput) -> Result<AppVerdict, String> {
//!         let mut verdict = default_rules(ctx, input);
//!         // … change what the default rules say …
//!         Ok(verdict)
//!     }
//! }
//!
//! verdict_policy::status_policy!(Strict);
//! ```
//!
//! - [`types`]: every record of the WIT package (`wit/types.wit`), and the
//!   inputs and answers of the four worlds ([`status`], [`failover`],
//!   [`admission`], [`lifecycle`]);
//! - [`default_rules`]: the default status rules (seeds 000 and 001), the
//!   very code of the default status plugin, to build on;
//! - [`settings`]: the policy's settings (`ctx.settings`) as your own type,
//!   and [`check_settings`]: the check the host asks for before serving a
//!   policy with its settings (each trait's `validate_settings`);
//! - [`log`]: a line in the host's log;
//! - [`testing`]: builders of inputs for ordinary `cargo test`s of a rule.

#![allow(clippy::too_many_arguments)]

pub mod testing;

/// JSON, for settings and the JSON texts of the WIT (task parameters,
/// admission requests).
pub use serde_json;

#[doc(hidden)]
pub use verdict_status as __status;

/// The WIT records shared by every world.
pub mod types {
    pub use verdict_status::exports::verdict::policy::status::AppInput;
    pub use verdict_status::verdict::policy::types::*;
}

/// The status world's input.
pub mod status {
    pub use verdict_status::exports::verdict::policy::status::AppInput;
}

/// The failover world: its inputs, decisions and actions.
pub mod failover {
    pub use crate::bindings_failover::exports::verdict::policy::failover::*;
}

/// The admission world: task requests, reviews and decisions.
pub mod admission {
    pub use crate::bindings_admission::exports::verdict::policy::admission::*;
}

/// The lifecycle world: an instance of a VM-hosted app, its target, and the
/// next stage with its task list.
pub mod lifecycle {
    pub use crate::bindings_lifecycle::exports::verdict::policy::lifecycle::*;
}

// The failover, admission and lifecycle worlds are bound here without their
// `settings` export, which `bindings_settings` binds once for both: the
// cabi glue of an export is a crate-wide macro, and one crate cannot
// generate it twice. The macros below export each world's interface and
// `settings`, which together are the world.

#[doc(hidden)]
pub mod bindings_failover {
    wit_bindgen::generate!({
        inline: "
            package verdict:sdk;
            world failover-policy {
                import verdict:policy/host@0.4.0;
                export verdict:policy/failover@0.4.0;
            }
        ",
        path: "../../wit",
        world: "verdict:sdk/failover-policy",
        with: {
            "verdict:policy/types@0.4.0": verdict_status::verdict::policy::types,
            "verdict:policy/host@0.4.0": verdict_status::verdict::policy::host,
        },
        pub_export_macro: true,
        export_macro_name: "export_failover",
        default_bindings_module: "verdict_policy::bindings_failover",
    });
}

#[doc(hidden)]
pub mod bindings_admission {
    wit_bindgen::generate!({
        inline: "
            package verdict:sdk;
            world admission-policy {
                import verdict:policy/host@0.4.0;
                export verdict:policy/admission@0.4.0;
            }
        ",
        path: "../../wit",
        world: "verdict:sdk/admission-policy",
        with: {
            "verdict:policy/types@0.4.0": verdict_status::verdict::policy::types,
            "verdict:policy/host@0.4.0": verdict_status::verdict::policy::host,
        },
        pub_export_macro: true,
        export_macro_name: "export_admission",
        default_bindings_module: "verdict_policy::bindings_admission",
    });
}

#[doc(hidden)]
pub mod bindings_lifecycle {
    wit_bindgen::generate!({
        inline: "
            package verdict:sdk;
            world lifecycle-policy {
                import verdict:policy/host@0.4.0;
                export verdict:policy/lifecycle@0.4.0;
            }
        ",
        path: "../../wit",
        world: "verdict:sdk/lifecycle-policy",
        with: {
            "verdict:policy/types@0.4.0": verdict_status::verdict::policy::types,
            "verdict:policy/host@0.4.0": verdict_status::verdict::policy::host,
        },
        pub_export_macro: true,
        additional_derives: [PartialEq],
        export_macro_name: "export_lifecycle",
        default_bindings_module: "verdict_policy::bindings_lifecycle",
    });
}

#[doc(hidden)]
pub mod bindings_settings {
    wit_bindgen::generate!({
        inline: "
            package verdict:sdk;
            world settings {
                export verdict:policy/settings@0.4.0;
            }
        ",
        path: "../../wit",
        world: "verdict:sdk/settings",
        pub_export_macro: true,
        export_macro_name: "export_settings",
        default_bindings_module: "verdict_policy::bindings_settings",
    });
}

use types::{AppInput, AppVerdict, Context, LogLevel, PluginInfo};

/// What most policies need, in one `use`.
pub mod prelude {
    pub use crate::types::*;
    pub use crate::{
        AdmissionPolicy, FailoverPolicy, LifecyclePolicy, StatusPolicy, check_settings,
        default_rules, info, log, settings,
    };
}

/// A status policy: the verdict on one application.
pub trait StatusPolicy {
    /// Who this policy is (served by `/v1/plugins`).
    fn describe() -> PluginInfo;
    /// The verdict on one application at `ctx.now`. Use `ctx.now`, never a
    /// clock: the same input and `now` must give the same answer.
    fn evaluate(ctx: &Context, input: &AppInput) -> Result<AppVerdict, String>;
    /// Whether the policy can run with `settings` (a JSON text), asked
    /// before the host serves it with them; the error says what is wrong.
    /// By default they are checked against `describe()`'s settings schema
    /// ([`described_settings`]); a policy with a settings type of its own
    /// checks with [`check_settings`].
    fn validate_settings(settings: &str) -> Result<(), String> {
        described_settings(&Self::describe(), settings)
    }
}

/// A failover policy: node health and what to do about it.
pub trait FailoverPolicy {
    fn describe() -> PluginInfo;
    /// Whether the policy can run with `settings`: see
    /// [`StatusPolicy::validate_settings`].
    fn validate_settings(settings: &str) -> Result<(), String> {
        described_settings(&Self::describe(), settings)
    }
    /// One decision per node of `input.nodes`.
    fn decide(
        ctx: &Context,
        input: &failover::FailoverInput,
    ) -> Result<Vec<failover::NodeDecision>, String>;
}

/// An admission policy: user tasks and Kubernetes AdmissionReviews.
pub trait AdmissionPolicy {
    fn describe() -> PluginInfo;
    /// Whether the policy can run with `settings`: see
    /// [`StatusPolicy::validate_settings`].
    fn validate_settings(settings: &str) -> Result<(), String> {
        described_settings(&Self::describe(), settings)
    }
    /// Admit, deny or hold a task for approval.
    fn admit_task(
        ctx: &Context,
        input: &admission::AdmissionInput,
    ) -> Result<admission::TaskAdmission, String>;
    /// Answer an AdmissionReview (`input.request` is its `request` as JSON).
    /// By default every object is allowed.
    fn review(
        _ctx: &Context,
        _input: &admission::ReviewInput,
    ) -> Result<admission::ReviewResponse, String> {
        Ok(admission::ReviewResponse {
            allowed: true,
            code: None,
            message: None,
            patch: None,
            warnings: Vec::new(),
        })
    }
}

/// A lifecycle policy: the next stage of an instance of a VM-hosted app,
/// with the task list to run on entering it (seed 002's machine).
pub trait LifecyclePolicy {
    fn describe() -> PluginInfo;
    /// Whether the policy can run with `settings`: see
    /// [`StatusPolicy::validate_settings`].
    fn validate_settings(settings: &str) -> Result<(), String> {
        described_settings(&Self::describe(), settings)
    }
    /// Stay, or move on with a task list.
    fn next(
        ctx: &Context,
        input: &lifecycle::LifecycleInput,
    ) -> Result<lifecycle::Decision, String>;
}

/// The default status rules' verdict on one application, with the settings
/// of `ctx` (the default status plugin's: `restart-window-ms`,
/// `overload-ratio`, …; other keys are ignored).
pub fn default_rules(ctx: &Context, input: &AppInput) -> AppVerdict {
    verdict_status::default_rules(ctx, input)
}

/// A [`PluginInfo`] without a settings schema.
pub fn info(name: &str, version: &str, description: &str) -> PluginInfo {
    PluginInfo {
        name: name.into(),
        version: version.into(),
        description: description.into(),
        settings_schema: None,
    }
}

/// The policy's settings as `T`: `ctx.settings` (a JSON object) read with
/// serde; missing keys take `T`'s defaults when `T` says
/// `#[serde(default)]`.
pub fn settings<T: serde::de::DeserializeOwned>(ctx: &Context) -> Result<T, String> {
    serde_json::from_str(&ctx.settings).map_err(|e| format!("the settings do not read: {e}"))
}

/// `settings` checked against `info`'s settings schema (a JSON Schema:
/// `type`, `enum`, bounds, `properties`, `required`, `additionalProperties`
/// …; an object without `additionalProperties: false` takes unknown keys);
/// without a schema, any JSON object passes.
pub fn described_settings(info: &PluginInfo, settings: &str) -> Result<(), String> {
    match &info.settings_schema {
        Some(schema) => verdict_settings::check(schema, settings),
        None => verdict_settings::object(settings).map(drop),
    }
}

/// `settings` checked by reading them as `T`, the policy's own settings
/// type: with `#[serde(deny_unknown_fields)]` an unknown key is refused,
/// and a value of the wrong type is, naming the key.
pub fn check_settings<T: serde::de::DeserializeOwned>(settings: &str) -> Result<(), String> {
    serde_json::from_str::<T>(settings)
        .map(drop)
        .map_err(|e| format!("the settings do not read: {e}"))
}

/// Write a line to the host's log, tagged with the plugin's name. Outside
/// the host (a native `cargo test`) it goes to stderr.
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_arch = "wasm32")]
    verdict_status::verdict::policy::host::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{level:?}: {message}");
}

#[doc(hidden)]
pub fn __evaluate_encoded(
    inputs: &[u8],
    judge: impl Fn(&AppInput) -> Result<AppVerdict, String>,
) -> Result<Vec<u8>, String> {
    verdict_status::evaluate_encoded(inputs, judge)
}

/// Export a [`StatusPolicy`] as the component's status world, batches and
/// encoded batches included.
#[macro_export]
macro_rules! status_policy {
    ($policy:ty) => {
        #[allow(dead_code)]
        struct __VerdictStatus;

        impl $crate::__status::exports::verdict::policy::status::Guest for __VerdictStatus {
            fn describe() -> $crate::types::PluginInfo {
                <$policy as $crate::StatusPolicy>::describe()
            }

            fn evaluate(
                ctx: $crate::types::Context,
                input: $crate::types::AppInput,
            ) -> Result<$crate::types::AppVerdict, String> {
                <$policy as $crate::StatusPolicy>::evaluate(&ctx, &input)
            }

            fn evaluate_batch(
                ctx: $crate::types::Context,
                inputs: Vec<$crate::types::AppInput>,
            ) -> Vec<Result<$crate::types::AppVerdict, String>> {
                inputs
                    .iter()
                    .map(|input| <$policy as $crate::StatusPolicy>::evaluate(&ctx, input))
                    .collect()
            }
        }

        impl $crate::__status::exports::verdict::policy::settings::Guest for __VerdictStatus {
            fn validate(settings: String) -> Result<(), String> {
                <$policy as $crate::StatusPolicy>::validate_settings(&settings)
            }
        }

        impl $crate::__status::exports::verdict::policy::status_encoded::Guest for __VerdictStatus {
            fn evaluate_batch_encoded(
                ctx: $crate::types::Context,
                inputs: Vec<u8>,
            ) -> Result<Vec<u8>, String> {
                $crate::__evaluate_encoded(&inputs, |input| {
                    <$policy as $crate::StatusPolicy>::evaluate(&ctx, input)
                })
            }
        }

        // Natively (a `cargo test` of the rule) nothing is exported: the
        // export names are the component's, not a shared library's.
        #[cfg(target_arch = "wasm32")]
        $crate::__status::export!(__VerdictStatus with_types_in $crate::__status);
    };
}

/// Export a [`FailoverPolicy`] as the component's failover world.
#[macro_export]
macro_rules! failover_policy {
    ($policy:ty) => {
        #[allow(dead_code)]
        struct __VerdictFailover;

        impl $crate::failover::Guest for __VerdictFailover {
            fn describe() -> $crate::types::PluginInfo {
                <$policy as $crate::FailoverPolicy>::describe()
            }

            fn decide(
                ctx: $crate::types::Context,
                input: $crate::failover::FailoverInput,
            ) -> Result<Vec<$crate::failover::NodeDecision>, String> {
                <$policy as $crate::FailoverPolicy>::decide(&ctx, &input)
            }
        }

        impl $crate::bindings_settings::exports::verdict::policy::settings::Guest
            for __VerdictFailover
        {
            fn validate(settings: String) -> Result<(), String> {
                <$policy as $crate::FailoverPolicy>::validate_settings(&settings)
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::bindings_failover::export_failover!(
            __VerdictFailover with_types_in $crate::bindings_failover
        );
        #[cfg(target_arch = "wasm32")]
        $crate::bindings_settings::export_settings!(
            __VerdictFailover with_types_in $crate::bindings_settings
        );
    };
}

/// Export an [`AdmissionPolicy`] as the component's admission world.
#[macro_export]
macro_rules! admission_policy {
    ($policy:ty) => {
        #[allow(dead_code)]
        struct __VerdictAdmission;

        impl $crate::admission::Guest for __VerdictAdmission {
            fn describe() -> $crate::types::PluginInfo {
                <$policy as $crate::AdmissionPolicy>::describe()
            }

            fn admit_task(
                ctx: $crate::types::Context,
                input: $crate::admission::AdmissionInput,
            ) -> Result<$crate::admission::TaskAdmission, String> {
                <$policy as $crate::AdmissionPolicy>::admit_task(&ctx, &input)
            }

            fn review(
                ctx: $crate::types::Context,
                input: $crate::admission::ReviewInput,
            ) -> Result<$crate::admission::ReviewResponse, String> {
                <$policy as $crate::AdmissionPolicy>::review(&ctx, &input)
            }
        }

        impl $crate::bindings_settings::exports::verdict::policy::settings::Guest
            for __VerdictAdmission
        {
            fn validate(settings: String) -> Result<(), String> {
                <$policy as $crate::AdmissionPolicy>::validate_settings(&settings)
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::bindings_admission::export_admission!(
            __VerdictAdmission with_types_in $crate::bindings_admission
        );
        #[cfg(target_arch = "wasm32")]
        $crate::bindings_settings::export_settings!(
            __VerdictAdmission with_types_in $crate::bindings_settings
        );
    };
}

/// Export a [`LifecyclePolicy`] as the component's lifecycle world.
#[macro_export]
macro_rules! lifecycle_policy {
    ($policy:ty) => {
        #[allow(dead_code)]
        struct __VerdictLifecycle;

        impl $crate::lifecycle::Guest for __VerdictLifecycle {
            fn describe() -> $crate::types::PluginInfo {
                <$policy as $crate::LifecyclePolicy>::describe()
            }

            fn next(
                ctx: $crate::types::Context,
                input: $crate::lifecycle::LifecycleInput,
            ) -> Result<$crate::lifecycle::Decision, String> {
                <$policy as $crate::LifecyclePolicy>::next(&ctx, &input)
            }
        }

        impl $crate::bindings_settings::exports::verdict::policy::settings::Guest
            for __VerdictLifecycle
        {
            fn validate(settings: String) -> Result<(), String> {
                <$policy as $crate::LifecyclePolicy>::validate_settings(&settings)
            }
        }

        #[cfg(target_arch = "wasm32")]
        $crate::bindings_lifecycle::export_lifecycle!(
            __VerdictLifecycle with_types_in $crate::bindings_lifecycle
        );
        #[cfg(target_arch = "wasm32")]
        $crate::bindings_settings::export_settings!(
            __VerdictLifecycle with_types_in $crate::bindings_settings
        );
    };
}
