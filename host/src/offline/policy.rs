//! `verdict policy push | pull | inspect`: policies as OCI artifacts in a
//! registry (see [`crate::delivery::oci`] for the layout).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::delivery::DeliveryError;
use crate::delivery::oci::{self, Registries};
use crate::error::{Error, Result};
use crate::plugins::{Limits, Runtime, Version};

/// What to do with a policy artifact.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum PolicyCommand {
    /// Push a built component to a registry, after checking it is a policy
    /// (its world, name and version go on the artifact as annotations);
    /// prints the reference pinned to the pushed digest.
    Push {
        /// The component (`target/plugins/status.wasm`).
        file: PathBuf,
        /// Where to push it: `registry/repository:tag`.
        reference: String,
        #[command(flatten)]
        registries: Registries,
        /// Folder for the compiled-code cache [default: `code-cache` in the
        /// user's cache folder, `~/.cache/verdict`].
        #[arg(long = "cache-dir", env = "VERDICT_CACHE_DIR", value_name = "DIR")]
        cache_dir: Option<PathBuf>,
    },
    /// Pull a policy (by digest, or a tag resolved to its digest), every
    /// digest checked; prints the pinned reference.
    Pull {
        reference: String,
        /// Where to write the component: a new path, or a regular file
        /// replaced whole (its mode kept) once every check passed.
        #[arg(long, short, value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        registries: Registries,
    },
    /// Sign an artifact (a tag resolved to its digest) in cosign's format,
    /// with an unencrypted PKCS#8 PEM ECDSA P-256 private key; hosts with
    /// `--verify-key` of its public key accept it.
    Sign {
        reference: String,
        /// The private key.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        #[command(flatten)]
        registries: Registries,
    },
    /// Show what an artifact holds: its digest, layers and annotations, as
    /// JSON.
    Inspect {
        reference: String,
        #[command(flatten)]
        registries: Registries,
    },
}

/// Run a policy command; what it prints.
pub fn run(command: &PolicyCommand) -> Result<String> {
    let runtime = tokio::runtime::Runtime::new().map_err(Error::AsyncRuntime)?;
    match command {
        PolicyCommand::Push {
            file,
            reference,
            registries,
            cache_dir,
        } => {
            let component = std::fs::read(file).map_err(Error::io(file))?;
            let engine = Runtime::new(&super::code_cache(cache_dir.as_deref()), Limits::default())?;
            let info = Version::examine(&Arc::new(engine), &component)
                .map_err(|e| Error::Invalid(format!("{} is not a policy: {e}", file.display())))?;
            let pinned = runtime.block_on(oci::push(registries, reference, &component, &info))?;
            Ok(format!(
                "pushed {} {}@{} ({}) as {pinned}\n",
                info.world,
                info.name,
                info.version,
                file.display()
            ))
        }
        PolicyCommand::Pull {
            reference,
            output,
            registries,
        } => {
            let pulled = pull_to(&runtime, registries, reference, output)?;
            Ok(format!(
                "pulled {} to {}\n",
                pulled.pinned,
                output.display()
            ))
        }
        PolicyCommand::Sign {
            reference,
            key,
            registries,
        } => {
            let (pinned, signature) = runtime.block_on(oci::sign(registries, reference, key))?;
            Ok(format!("signed {pinned} as {signature}\n"))
        }
        PolicyCommand::Inspect {
            reference,
            registries,
        } => {
            let inspection = runtime.block_on(oci::inspect(registries, reference))?;
            Ok(serde_json::to_string_pretty(&inspection).unwrap_or_default() + "\n")
        }
    }
}

/// Pull a policy into `output`: the component streamed into a temporary
/// file beside it, synced, and renamed over it once every check passed.
/// Anything but a regular file or a new path (a symlink, a device, a
/// folder) is refused untouched.
fn pull_to(
    runtime: &tokio::runtime::Runtime,
    registries: &Registries,
    reference: &str,
    output: &Path,
) -> Result<oci::Pulled> {
    let refused = |message: String| DeliveryError::Output {
        path: Some(output.to_path_buf()),
        message,
    };
    match std::fs::symlink_metadata(output) {
        Ok(m) if m.file_type().is_file() => {}
        Ok(m) => {
            let what = if m.file_type().is_symlink() {
                "a symbolic link"
            } else if m.is_dir() {
                "a folder"
            } else {
                "not a regular file (a device, a FIFO or a socket)"
            };
            return Err(refused(format!(
                "is {what}: a policy is written only to a regular file or a new path"
            ))
            .into());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(refused(e.to_string()).into()),
    }
    let io = |e: std::io::Error| refused(e.to_string());
    let mut file =
        tempfile::NamedTempFile::new_in(crate::storage::folder_of(output)).map_err(io)?;
    let pulled = runtime
        .block_on(oci::pull(registries, reference, &mut file))
        .map_err(|e| match e {
            DeliveryError::Output {
                path: None,
                message,
            } => refused(message),
            other => other,
        })?;
    crate::storage::persist(file, output).map_err(io)?;
    Ok(pulled)
}
