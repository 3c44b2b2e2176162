//! Rust policies: a crate built for `wasm32-unknown-unknown` and its core
//! module encoded as a component.
//!
//! Where rustup has the wasm32 target installed, the ordinary build is used.
//! Where it does not (and cannot download it), the standard library is built
//! from source with Debian's `rustc-web`, `rust-web-src` and `lld-22`,
//! installed when missing.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::process::{BUILD, apt_install, probe, run, write_atomically};

pub const WASM_TARGET: &str = "wasm32-unknown-unknown";
const DEBIAN_PACKAGES: [&str; 3] = ["rustc-web", "rust-web-src", "lld-22"];
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_RUST_SRC: &str = "/usr/lib/rustlib/src/rust/library";

/// How the wasm32 standard library is obtained.
#[derive(Debug, Clone)]
pub enum Toolchain {
    /// rustup's own target.
    Rustup,
    /// Debian's rustc with the standard library built from source.
    Debian { wasm_ld: PathBuf },
}

fn find_wasm_ld() -> Option<PathBuf> {
    let mut candidates = vec![
        PathBuf::from("/usr/bin/wasm-ld"),
        PathBuf::from("/usr/bin/wasm-ld-22"),
    ];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        let mut llvm: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(OsStr::to_str)
                    .is_some_and(|n| n.starts_with("llvm-"))
            })
            .map(|p| p.join("bin/wasm-ld"))
            .collect();
        llvm.sort();
        candidates.extend(llvm.into_iter().rev());
    }
    candidates.into_iter().find(|p| p.is_file())
}

fn debian_ready() -> Option<Toolchain> {
    let is_debian_rustc = probe(DEBIAN_RUSTC, &["--version"])?.contains("rustc");
    (is_debian_rustc && Path::new(DEBIAN_RUST_SRC).is_dir())
        .then(find_wasm_ld)
        .flatten()
        .map(|wasm_ld| Toolchain::Debian { wasm_ld })
}

impl Toolchain {
    /// rustup's wasm32 target when installed, else Debian's packages
    /// (installed when missing).
    pub fn choose() -> Result<Self> {
        let installed = probe("rustup", &["target", "list", "--installed"]).unwrap_or_default();
        if installed.lines().any(|l| l.trim() == WASM_TARGET) {
            return Ok(Toolchain::Rustup);
        }
        if let Some(toolchain) = debian_ready() {
            return Ok(toolchain);
        }
        eprintln!(
            "rustup has no {WASM_TARGET} target; installing Debian's {} to build its standard library",
            DEBIAN_PACKAGES.join(", ")
        );
        apt_install(&DEBIAN_PACKAGES).with_context(|| {
            format!("no {WASM_TARGET} standard library: run `rustup target add {WASM_TARGET}`")
        })?;
        debian_ready().context(
            "Debian's Rust packages were installed but rustc, its library source or wasm-ld is still missing",
        )
    }

    /// Build every crate of `workspace` for wasm32 in release into
    /// `target_dir`; the folder of the core modules built. Workspaces may
    /// share `target_dir` (and so their dependencies' builds and the
    /// standard library's) when each one's modules are read before the next
    /// builds.
    pub fn build(&self, workspace: &Path, target_dir: &Path) -> Result<PathBuf> {
        let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        build
            .args(["build", "--release", "--target", WASM_TARGET])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(workspace)
            .stdin(Stdio::null());
        if let Toolchain::Debian { wasm_ld } = self {
            build
                .args(["-Zbuild-std=std,panic_abort"])
                .env("RUSTC_BOOTSTRAP", "1")
                .env("RUSTC", DEBIAN_RUSTC)
                .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", wasm_ld);
        }
        // A rustup toolchain file or override must not pick another compiler
        // for the guest build than the one chosen above, nor a wrapper made
        // for the host's compiler (clippy's driver is rustup's rustc) wrap it.
        build
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("RUSTC_WRAPPER")
            .env_remove("RUSTC_WORKSPACE_WRAPPER");
        // A path package's cdylib is otherwise written to `deps/` without a
        // hash in its name, so two workspaces sharing `target_dir` (a policy
        // that builds on the default rules as a library, without their
        // export) overwrite each other's and each build then compiles both
        // again. This is cargo's switch for the same problem in the standard
        // library's build: every file hashed; the final `<lib>.wasm` keeps
        // its plain name.
        build.env("__CARGO_DEFAULT_LIB_METADATA", "verdict");
        let started = Instant::now();
        run(&mut build, BUILD)
            .with_context(|| format!("building the crates of {}", workspace.display()))?;
        eprintln!(
            "{} built in {:.1}s",
            workspace.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(target_dir.join(WASM_TARGET).join("release"))
    }
}

/// A crate of a workspace that builds a `cdylib`: a policy.
#[derive(Debug, Clone)]
pub struct Crate {
    /// The crate's folder.
    pub dir: PathBuf,
    /// The library target's name: the core module's file name.
    pub lib: String,
}

/// The crates of `workspace` that build a `cdylib`, by folder name.
pub fn cdylibs(workspace: &Path) -> Result<Vec<Crate>> {
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(workspace)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running cargo metadata in {}", workspace.display()))?;
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).with_context(|| {
            format!(
                "cargo metadata in {} did not answer JSON",
                workspace.display()
            )
        })?;
    let mut found = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
        let dir = manifest.parent().context("manifest without a folder")?;
        let lib = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
            })
            .and_then(|t| t["name"].as_str());
        let Some(lib) = lib else { continue };
        found.push(Crate {
            dir: dir.to_path_buf(),
            lib: lib.replace('-', "_"),
        });
    }
    found.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(found)
}

/// Encode the core module `modules/<lib>.wasm` as a component at `out`.
pub fn encode(modules: &Path, lib: &str, out: &Path) -> Result<()> {
    let module_path = modules.join(format!("{lib}.wasm"));
    let module = std::fs::read(&module_path)
        .with_context(|| format!("reading {}", module_path.display()))?;
    let started = Instant::now();
    let component = wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|e| e.validate(true).encode())
        .with_context(|| format!("encoding {} as a component", module_path.display()))?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The same component is left as it is: the host's build embeds the
    // default ones and builds again when their files change.
    if std::fs::read(out).is_ok_and(|old| old == component) {
        return Ok(());
    }
    write_atomically(out, &component)?;
    // It takes the time of the module it is made from, so that the same
    // module encoded again where the component was removed (a clean
    // checkout) is not newer than what was built from it before.
    let made = std::fs::metadata(&module_path).and_then(|m| m.modified());
    if let Err(error) = made.and_then(|time| {
        std::fs::File::options()
            .write(true)
            .open(out)?
            .set_modified(time)
    }) {
        eprintln!("{}: its time is left as written: {error}", out.display());
    }
    eprintln!(
        "{} ({} KiB, encoded in {:.1} ms)",
        out.display(),
        component.len() / 1024,
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    /// The time of a file.
    fn time_of(path: &Path) -> SystemTime {
        std::fs::metadata(path).unwrap().modified().unwrap()
    }

    /// A file's time set to `seconds` after the epoch; that time.
    fn set_time(path: &Path, seconds: u64) -> SystemTime {
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(time).unwrap();
        time
    }

    #[test]
    fn a_component_takes_the_time_of_its_module_and_is_left_alone_when_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let (module, out) = (dir.path().join("m.wasm"), dir.path().join("out/m.wasm"));
        // The smallest module: no imports, no exports.
        std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
        let built = set_time(&module, 1_000_000_000);
        encode(dir.path(), "m", &out).unwrap();
        assert!(std::fs::read(&out).unwrap().starts_with(b"\0asm"));
        assert_eq!(time_of(&out), built);
        // Removed and encoded again (a clean checkout): the same time, so
        // nothing built from it counts it as changed.
        std::fs::remove_file(&out).unwrap();
        encode(dir.path(), "m", &out).unwrap();
        assert_eq!(time_of(&out), built);
        // The same bytes already there are not written again.
        let touched = set_time(&out, 1_500_000_000);
        encode(dir.path(), "m", &out).unwrap();
        assert_eq!(time_of(&out), touched);
    }
}
