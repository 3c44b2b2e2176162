//! The plugin runtime: compiles, validates, hot-swaps and calls policy
//! components under limits.
//!
//! Data flows: a file in the plugin folder → [`Registry::reload`] compiles it
//! (or reads its code from the cache) in the [`Runtime`] → a validated
//! [`Version`] is swapped into its [`registry::Slot`] → callers take the slot
//! of a [`World`] and call the version serving it.

pub mod builtin;
mod error;
mod metrics;
mod registry;
mod runtime;
mod sandbox;
mod ticker;
mod validate;
mod version;
mod watch;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

pub use error::{CallError, LoadError, PolicyError};
pub use metrics::{CallHistograms, CallSeconds};
pub use registry::{
    Answer, Delivered, Demoted, Demotion, ErrorRecord, Mode, PluginStatus, Registry, Rejected,
    ReloadReport, Slot,
};
pub use runtime::{CodeSource, Limits, Override, Runtime, is_component};
pub use version::{PACKAGE_VERSION, Version, VersionInfo, checked_answers, decode_answers};
pub use watch::watch;

/// The plugin folder, how it is watched, and the limits of each call.
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// The folder of plugin components, watched for changes; without one
    /// the host serves the default policies the binary carries [default:
    /// target/plugins when it exists].
    #[arg(long = "plugins", value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Without a plugin folder, serve no policy (only delivered ones)
    /// rather than the default policies the binary carries.
    #[arg(long = "no-builtin-policies")]
    pub no_builtin_policies: bool,
    /// How long the plugin folder must be quiet before a change is loaded,
    /// in milliseconds.
    #[arg(long = "reload-debounce-ms", value_name = "MS", default_value = "150", value_parser = crate::settings::millis)]
    pub reload_debounce: Duration,
    /// The plugin of the folder that serves the status world, by name (its
    /// file without `.wasm`) [default: `status`, else the only one that
    /// implements the world].
    #[arg(long = "status-policy", value_name = "NAME")]
    pub status_policy: Option<String>,
    /// The plugin that serves the failover world [default: `failover`].
    #[arg(long = "failover-policy", value_name = "NAME")]
    pub failover_policy: Option<String>,
    /// The plugin that serves the admission world [default: `admission`].
    #[arg(long = "admission-policy", value_name = "NAME")]
    pub admission_policy: Option<String>,
    /// The plugin that serves the lifecycle world [default: `lifecycle`].
    #[arg(long = "lifecycle-policy", value_name = "NAME")]
    pub lifecycle_policy: Option<String>,
    /// The share of its calls a new version may fail (traps, timeouts,
    /// limits, malformed answers) before the version it replaced is put
    /// back in its place (0 to 1).
    #[arg(long = "demote-error-rate", value_name = "SHARE", default_value = "0.5", value_parser = crate::settings::share)]
    pub demote_error_rate: f64,
    /// The calls a new version makes before its share of failures counts.
    #[arg(long = "demote-min-calls", value_name = "N", default_value = "20", value_parser = crate::settings::positive)]
    pub demote_min_calls: usize,
    #[command(flatten)]
    pub limits: Limits,
}

impl Settings {
    /// When a failing version is demoted.
    pub fn demotion(&self) -> Demotion {
        Demotion {
            max_error_rate: self.demote_error_rate,
            min_calls: self.demote_min_calls as u64,
        }
    }

    /// The plugin chosen to serve each world, where one is named.
    pub fn chosen(&self) -> std::collections::BTreeMap<World, String> {
        [
            (World::Status, &self.status_policy),
            (World::Failover, &self.failover_policy),
            (World::Admission, &self.admission_policy),
            (World::Lifecycle, &self.lifecycle_policy),
        ]
        .into_iter()
        .filter_map(|(world, name)| Some((world, name.clone()?)))
        .collect()
    }
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// The four kinds of policy a plugin can implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
pub enum World {
    #[serde(rename = "status-policy")]
    Status,
    #[serde(rename = "failover-policy")]
    Failover,
    #[serde(rename = "admission-policy")]
    Admission,
    #[serde(rename = "lifecycle-policy")]
    Lifecycle,
}

impl World {
    pub(crate) const ALL: [World; 4] = [
        World::Status,
        World::Failover,
        World::Admission,
        World::Lifecycle,
    ];

    /// The world's name in the WIT package.
    pub fn name(self) -> &'static str {
        match self {
            World::Status => "status-policy",
            World::Failover => "failover-policy",
            World::Admission => "admission-policy",
            World::Lifecycle => "lifecycle-policy",
        }
    }

    /// The interface a component of this world exports.
    pub(crate) fn export_name(self) -> &'static str {
        match self {
            World::Status => "verdict:policy/status@0.4.0",
            World::Failover => "verdict:policy/failover@0.4.0",
            World::Admission => "verdict:policy/admission@0.4.0",
            World::Lifecycle => "verdict:policy/lifecycle@0.4.0",
        }
    }

    /// The file name (without `.wasm`) that serves this world by default.
    pub(crate) fn file_stem(self) -> &'static str {
        match self {
            World::Status => "status",
            World::Failover => "failover",
            World::Admission => "admission",
            World::Lifecycle => "lifecycle",
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
