//! Commands run to completion under a timeout, probes that answer or not,
//! and Debian packages installed when missing.

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use wait_timeout::ChildExt;

/// How long a probe (`--version` and the like) may take.
pub const PROBE: Duration = Duration::from_secs(30);
/// How long an install (apt, npm, pip) may take.
pub const INSTALL: Duration = Duration::from_secs(20 * 60);
/// How long a build may take.
pub const BUILD: Duration = Duration::from_secs(40 * 60);

/// Run a command to completion within `limit`, failing on a non-zero exit.
pub fn run(command: &mut Command, limit: Duration) -> Result<()> {
    let shown = format!("{command:?}");
    let mut child = command
        .spawn()
        .with_context(|| format!("could not start {shown}"))?;
    match child.wait_timeout(limit)? {
        Some(status) if status.success() => Ok(()),
        Some(status) => bail!("{shown} failed with {status}"),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{shown} did not finish within {}s", limit.as_secs())
        }
    }
}

/// Run a probe and return its standard output, or `None` when it fails, is
/// missing, or does not answer within [`PROBE`].
pub fn probe(program: &str, args: &[&str]) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let status = match child.wait_timeout(PROBE).ok()? {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut out).ok()?;
    status.success().then_some(out)
}

/// `apt-get` with `args`, unattended.
fn apt_get(args: &[&str]) -> Result<()> {
    run(
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null()),
        INSTALL,
    )
}

/// Refresh Debian's package lists.
pub fn apt_update() -> Result<()> {
    apt_get(&["update", "-qq"])
}

/// Install Debian packages (after refreshing the package lists).
pub fn apt_install(packages: &[&str]) -> Result<()> {
    if probe("apt-get", &["--version"]).is_none() {
        bail!(
            "{} missing, and no apt-get to install it",
            packages.join(", ")
        );
    }
    apt_update()?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend_from_slice(packages);
    apt_get(&args)
}

/// `files` (name and contents: a `package.json`, its `package-lock.json`
/// …) written into `dir` and `npm ci` run there, for `what` — unless the
/// same files were installed there before (a stamp of their contents).
/// Node.js and npm are installed from Debian first when missing.
pub fn npm_install(dir: &std::path::Path, files: &[(&str, &str)], what: &str) -> Result<()> {
    let stamp = dir.join("installed");
    let wanted: String = files.iter().map(|(_, contents)| *contents).collect();
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(());
    }
    if probe("npm", &["--version"]).is_none() {
        eprintln!("{what} needs Node.js and npm; installing Debian's");
        apt_install(&["nodejs", "npm"])
            .with_context(|| format!("{what} needs Node.js and npm on the PATH"))?;
    }
    eprintln!("installing {what} into {}", dir.display());
    std::fs::create_dir_all(dir)?;
    for (name, contents) in files {
        std::fs::write(dir.join(name), contents)?;
    }
    run(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(dir),
        INSTALL,
    )
    .with_context(|| format!("installing {what} from npm (npm ci in {})", dir.display()))?;
    std::fs::write(&stamp, wanted)?;
    Ok(())
}

/// Write `bytes` to `path` through a file beside it and a rename, so that a
/// host watching the folder never reads half a file.
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("an output path without a file name")?;
    let partial = path.with_file_name(format!(".{name}.partial"));
    std::fs::write(&partial, bytes).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))
}
