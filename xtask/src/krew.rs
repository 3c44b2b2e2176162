//! `cargo xtask krew`: the kubectl plugin packaged for krew — an archive
//! holding the binary as `kubectl-verdict`, and the manifest of
//! `deploy/krew/verdict.yaml` with the archive's address and sha256 filled
//! in — and the check `cargo xtask test` makes of it: krew itself (built
//! from its Go module) installs the archive by the manifest into a folder
//! of its own, and the installed plugin runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use verdict_policy_build::process::{BUILD, run};

/// krew's module, as its releases tag it.
const KREW: &str = "sigs.k8s.io/krew/cmd/krew@v0.4.3";

/// The archive and the manifest written into `out`.
pub struct Package {
    pub archive: PathBuf,
    pub manifest: PathBuf,
}

/// Package `binary` (stripped) for krew in `out`, the manifest naming the
/// archive at `url/kubectl-verdict-linux-amd64.tar.gz`.
pub fn package(root: &Path, binary: &Path, out: &Path, url: &str) -> Result<Package> {
    use sha2::Digest as _;
    let stage = out.join("stage");
    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    std::fs::create_dir_all(&stage)?;
    crate::image::strip(binary, &stage.join("kubectl-verdict"))?;
    let archive = out.join("kubectl-verdict-linux-amd64.tar.gz");
    run(
        Command::new("tar")
            .args([
                "--sort=name",
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "-czf",
            ])
            .arg(&archive)
            .arg("-C")
            .arg(&stage)
            .arg("kubectl-verdict"),
        BUILD,
    )
    .context("archiving the plugin")?;
    let sha256 = hex::encode(sha2::Sha256::digest(std::fs::read(&archive)?));
    let template = std::fs::read_to_string(root.join("deploy/krew/verdict.yaml"))?;
    let manifest = out.join("verdict.yaml");
    std::fs::write(
        &manifest,
        template
            .replace("@VERSION@", env!("CARGO_PKG_VERSION"))
            .replace("@URL@", url.trim_end_matches('/'))
            .replace("@SHA256@", &sha256),
    )?;
    Ok(Package { archive, manifest })
}

/// krew, built from its Go module into `bin` when it is not there.
pub fn krew(bin: &Path) -> Result<PathBuf> {
    let program = bin.join("krew");
    if program.exists() {
        return Ok(program);
    }
    std::fs::create_dir_all(bin)?;
    run(
        Command::new("go")
            .args(["install", KREW])
            .env("GOBIN", bin)
            .env("CGO_ENABLED", "0"),
        BUILD,
    )
    .context("building krew")?;
    Ok(program)
}

/// Install the package with krew into a folder of its own and run the
/// installed plugin: `Err` says what failed.
pub fn check(package: &Package, tools: &Path, scratch: &Path) -> Result<()> {
    let krew = krew(tools)?;
    let root = scratch.join("krew-root");
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    let output = Command::new(&krew)
        .arg("install")
        .arg(format!("--manifest={}", package.manifest.display()))
        .arg(format!("--archive={}", package.archive.display()))
        .env("KREW_ROOT", &root)
        .stdin(std::process::Stdio::null())
        .output()
        .context("krew")?;
    if !output.status.success() {
        bail!(
            "krew install refused the package: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let installed = root.join("bin").join("kubectl-verdict");
    let output = Command::new(&installed)
        .arg("--help")
        .output()
        .with_context(|| format!("running {}", installed.display()))?;
    let help = String::from_utf8_lossy(&output.stdout);
    if !output.status.success()
        || !help.contains("Usage: kubectl verdict")
        || !help.contains("rollout")
    {
        bail!("the plugin krew installed does not run as kubectl verdict: {help}");
    }
    Ok(())
}
