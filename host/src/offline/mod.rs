//! Offline tools for policy authors: `verdict eval` runs the status policy on
//! objects from files, `verdict test` runs policy test cases (of every
//! world), `verdict bench` measures a status policy, `verdict policy`
//! pushes, pulls and inspects policies in OCI registries, `verdict diff`
//! compares two status policies over the same objects, `verdict new` and
//! `verdict build` make and build policy projects; `verdict crds` prints the
//! custom resources' definitions. None needs a cluster or a running host.

pub mod bench;
pub mod crds;
pub mod diff;
pub mod eval;
pub mod policy;
pub mod project;
pub mod test;

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::plugins::Limits;
use crate::plugins::{CallError, Registry, Runtime, Slot, Version, World, builtin};

/// Which status plugin to use.
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// Folder of plugin components [default: `target/plugins` where it
    /// exists, else the default policies built into this binary].
    #[arg(long, env = "VERDICT_PLUGINS", value_name = "DIR")]
    pub plugins: Option<PathBuf>,

    /// The plugin to use, by file name without `.wasm` [default: the one
    /// serving the status world].
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,

    /// Folder for the compiled-code cache [default: `code-cache` in the
    /// user's cache folder, `~/.cache/verdict`].
    #[arg(long = "cache-dir", env = "VERDICT_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// The limits of each call (a Python policy needs more memory than the
    /// default).
    #[command(flatten)]
    pub limits: Limits,
}

/// The offline commands' compiled-code cache: the folder given, else
/// `code-cache` in the user's cache folder — never the project's folder.
pub(crate) fn code_cache(dir: Option<&std::path::Path>) -> PathBuf {
    dir.map_or_else(
        || verdict_policy_build::cache_home().join("code-cache"),
        std::path::Path::to_path_buf,
    )
}

/// The policy's own check of `settings` (`settings.validate`), in words
/// for the command's output: what the policy said when it refuses them.
pub(crate) fn checked_settings(
    version: &Version,
    settings: &str,
) -> std::result::Result<(), String> {
    version.check_settings(settings).map_err(|e| match e {
        CallError::Refused(words) => {
            format!(
                "settings refused by the policy {}: {words}",
                version.info().name
            )
        }
        other => format!(
            "the settings check of the policy {} failed: {other}",
            version.info().name
        ),
    })
}

impl PolicyArgs {
    /// Load the plugin folder and pick the status plugin. A plugin that was
    /// asked for by name and did not load is an error with the reason.
    pub fn status_policy(&self) -> Result<Arc<Slot>> {
        self.policy(Some(World::Status))
    }

    /// Load the plugin folder and pick the plugin named by `--policy` (of
    /// `world`, when given), else the one serving `world` (the status
    /// world when none is given).
    pub fn policy(&self, world: Option<World>) -> Result<Arc<Slot>> {
        self.load()?.pick(self.policy.as_deref(), world)
    }

    /// Load the plugin folder: the one named, else `target/plugins` where
    /// it exists, else the default policies the binary carries (as `verdict
    /// serve` does, so that an installed binary judges alone).
    pub fn load(&self) -> Result<PluginFolder> {
        let dir = match &self.plugins {
            Some(dir) if !dir.is_dir() => {
                return Err(Error::Invalid(format!(
                    "plugin folder {} does not exist (build it with `cargo xtask plugins`)",
                    dir.display()
                )));
            }
            Some(dir) => Some(dir.clone()),
            None => builtin::default_folder(),
        };
        if dir.is_none() && builtin::files().is_empty() {
            return Err(Error::Invalid(
                "no plugin folder (--plugins DIR), and this binary carries no default \
                 policies (build them with `cargo xtask plugins` before the binary)"
                    .into(),
            ));
        }
        let runtime = Runtime::new(&code_cache(self.cache_dir.as_deref()), self.limits)?;
        let registry = Registry::new(Arc::new(runtime), dir.clone(), Default::default())
            .with_builtin(dir.is_none());
        let rejected = registry
            .reload()
            .rejected
            .into_iter()
            .map(|r| (r.plugin, r.error))
            .collect();
        Ok(PluginFolder {
            registry,
            rejected,
            folder: dir.unwrap_or_else(|| PathBuf::from(builtin::FOLDER)),
        })
    }
}

/// A plugin folder, loaded.
pub struct PluginFolder {
    registry: Registry,
    /// The plugins that did not load, with why.
    rejected: Vec<(String, String)>,
    folder: PathBuf,
}

impl PluginFolder {
    /// The plugin named `name` (of `world`, when given), else the one
    /// serving `world` (the status world when none is given). A plugin
    /// asked for by name that did not load is an error with the reason.
    pub fn pick(&self, name: Option<&str>, world: Option<World>) -> Result<Arc<Slot>> {
        let slot = match name {
            Some(name) => {
                if let Some((_, error)) = self.rejected.iter().find(|(p, _)| p == name) {
                    return Err(Error::Invalid(format!(
                        "plugin {name} did not load: {error}"
                    )));
                }
                self.registry.get(name).ok_or_else(|| {
                    Error::Invalid(format!("no plugin {name} in {}", self.folder.display()))
                })?
            }
            None => self
                .registry
                .policy(world.unwrap_or(World::Status))
                .map_err(Error::input(self.folder.display().to_string()))?,
        };
        match slot.current() {
            Some(version) if world.is_none_or(|w| w == version.world()) => Ok(slot),
            Some(version) => Err(Error::Invalid(format!(
                "plugin {} implements {}, not {}",
                slot.name(),
                version.world(),
                world.unwrap_or(World::Status)
            ))),
            None => Err(Error::Invalid(format!(
                "plugin {} is not loaded",
                slot.name()
            ))),
        }
    }
}
