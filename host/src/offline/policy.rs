//! `verdict policy push | pull | inspect`: policies as OCI artifacts in a
//! registry (see [`crate::delivery::oci`] for the layout).

use std::path::PathBuf;
use std::sync::Arc;

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
        /// Folder for the compiled-code cache.
        #[arg(
            long,
            env = "VERDICT_DATA_DIR",
            value_name = "DIR",
            default_value = "verdict-data"
        )]
        data_dir: PathBuf,
    },
    /// Pull a policy (by digest, or a tag resolved to its digest), every
    /// digest checked; prints the pinned reference.
    Pull {
        reference: String,
        /// Where to write the component.
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
            data_dir,
        } => {
            let component = std::fs::read(file).map_err(Error::io(file))?;
            let engine = Runtime::new(&data_dir.join("code-cache"), Limits::default())?;
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
            let pulled = runtime.block_on(oci::pull(registries, reference))?;
            crate::delivery::write_atomically(output, &pulled.component)?;
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
