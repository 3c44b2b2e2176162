//! `cargo xtask image`: verdict's OCI image, assembled without a container
//! daemon. One layer on an empty base: the binary (stripped) and the
//! default policies, and only what the binary loads — the C library, the
//! loader and libgcc of the machine's Debian packages (named in the image's
//! labels) — the CA certificates, and a passwd naming the one user it runs
//! as, 65532, who owns its data folder. No shell, no package manager.
//!
//! The layer is written by GNU tar with fixed owners, order and times (the
//! commit's, or `SOURCE_DATE_EPOCH`), umoci makes the OCI layout of it,
//! and the layer is compressed with zstd, so that the same binary makes the
//! same digest.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use verdict_policy_build::process::{BUILD, PROBE, apt_install, probe, run};

/// The user the image runs as (and the chart's `runAsUser`).
pub const USER: u32 = 65532;

/// The image's name, as the chart names it by default (`image.repository`).
pub const NAME: &str = "verdict";

/// An image written as an OCI layout.
pub struct Image {
    /// The OCI layout folder.
    pub layout: PathBuf,
    /// The files of its layer, as staged.
    pub rootfs: PathBuf,
    /// The tag in the layout (the version).
    pub tag: String,
    /// The manifest's digest.
    pub digest: String,
    /// The layer, compressed (what a pull moves) and as unpacked.
    pub compressed: u64,
    pub uncompressed: u64,
}

impl Image {
    /// The image in the layout, as podman and skopeo name it.
    pub fn reference(&self) -> String {
        format!("oci:{}:{}", self.layout.display(), self.tag)
    }
}

/// umoci and GNU tar (and strip), installed from Debian when missing.
pub fn ensure_tools() -> Result<()> {
    let mut missing = Vec::new();
    if probe("umoci", &["--version"]).is_none() {
        missing.push("umoci");
    }
    if probe("strip", &["--version"]).is_none() {
        missing.push("binutils");
    }
    if probe("tar", &["--version"]).is_none_or(|v| !v.contains("GNU tar")) {
        missing.push("tar");
    }
    if !missing.is_empty() {
        eprintln!(
            "xtask image: installing Debian's {} to assemble the image",
            missing.join(", ")
        );
        apt_install(&missing)?;
    }
    if probe("umoci", &["--version"]).is_none() {
        bail!("umoci is still missing after installing it");
    }
    Ok(())
}

/// The files the image holds, staged in `rootfs`: everything but the data
/// folder, which the layer adds owned by [`USER`].
fn stage(binary: &Path, plugins: &Path, rootfs: &Path) -> Result<Vec<String>> {
    if rootfs.exists() {
        std::fs::remove_dir_all(rootfs)?;
    }
    let put = |path: &str| -> Result<PathBuf> {
        let to = rootfs.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("a file's folder"))?;
        Ok(to)
    };
    strip(binary, &put("/usr/bin/verdict")?)?;

    let mut policies = 0;
    for entry in std::fs::read_dir(plugins)
        .with_context(|| format!("the default policies in {}", plugins.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let name = path.file_name().expect("a file").to_string_lossy();
            std::fs::copy(&path, put(&format!("/usr/share/verdict/plugins/{name}"))?)?;
            policies += 1;
        }
    }
    if policies == 0 {
        bail!(
            "no policies in {} (cargo xtask plugins --rust)",
            plugins.display()
        );
    }

    // The shared objects the binary loads, at the paths the loader looks
    // for them, and the Debian packages they come from.
    let libraries = linked(binary)?;
    let mut packages = Vec::new();
    for library in &libraries {
        std::fs::copy(library, put(library)?)
            .with_context(|| format!("copying {library} into the image"))?;
        if let Some(package) = debian_package(library)
            && !packages.contains(&package)
        {
            packages.push(package);
        }
    }

    let certificates = "/etc/ssl/certs/ca-certificates.crt";
    if !Path::new(certificates).exists() {
        apt_install(&["ca-certificates"])?;
    }
    std::fs::copy(certificates, put(certificates)?)
        .context("the CA certificates (Debian's ca-certificates)")?;
    if let Some(package) = debian_package("/usr/share/ca-certificates") {
        packages.push(package);
    }

    std::fs::write(
        put("/etc/passwd")?,
        format!(
            "root:x:0:0:root:/root:/sbin/nologin\nverdict:x:{USER}:{USER}:verdict:/var/lib/verdict:/sbin/nologin\n"
        ),
    )?;
    std::fs::write(
        put("/etc/group")?,
        format!("root:x:0:\nverdict:x:{USER}:\n"),
    )?;
    std::fs::create_dir_all(rootfs.join("tmp"))?;
    Ok(packages)
}

/// `binary` without its symbols, written to `to`.
pub fn strip(binary: &Path, to: &Path) -> Result<()> {
    run(
        Command::new("strip")
            .args(["--strip-all", "-o"])
            .arg(to)
            .arg(binary),
        BUILD,
    )
    .context("stripping the binary")
}

/// The shared objects `ldd` says the binary loads (the vDSO aside).
fn linked(binary: &Path) -> Result<Vec<String>> {
    let output = Command::new("ldd")
        .arg(binary)
        .output()
        .context("ldd (Debian's libc-bin)")?;
    if !output.status.success() {
        bail!(
            "ldd {}: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let mut libraries = Vec::new();
    for line in text.lines() {
        if line.contains("not found") {
            bail!("the binary links a library that is not here: {line}");
        }
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)`, or the
        // loader's `/lib64/ld-linux-x86-64.so.2 (0x…)`.
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            libraries.push(path.to_string());
        }
    }
    if libraries.is_empty() {
        bail!("ldd named no library of {}: {text}", binary.display());
    }
    Ok(libraries)
}

/// `package=version` of the Debian package that holds `path`, where dpkg
/// knows it.
fn debian_package(path: &str) -> Option<String> {
    let owner = probe("dpkg", &["-S", path])?;
    let package = owner.split(':').next()?.trim().to_string();
    let version = probe("dpkg-query", &["-W", "-f", "${Version}", &package])?;
    Some(format!("{package}={}", version.trim()))
}

/// The time every file and the image carry: `SOURCE_DATE_EPOCH`, else the
/// commit's.
fn epoch(root: &Path) -> Result<u64> {
    if let Some(epoch) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|e| e.trim().parse().ok())
    {
        return Ok(epoch);
    }
    let output = Command::new("git")
        .args(["log", "-1", "--format=%ct"])
        .current_dir(root)
        .output()
        .context("git log, for the image's time")?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .context("the commit's time (git log -1 --format=%ct)")
}

/// The commit the image is built from, where git says.
fn revision(root: &Path) -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Seconds since the epoch as RFC 3339 (UTC), for the OCI config.
fn rfc3339(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let seconds = epoch % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// Assemble the image of `binary` and the policies in `plugins` as an OCI
/// layout in `out/oci`, tagged `version`, its layer compressed with zstd at
/// `level` (19 for the published image; the test's own is quicker).
pub fn assemble(
    root: &Path,
    binary: &Path,
    plugins: &Path,
    out: &Path,
    version: &str,
    level: u8,
) -> Result<Image> {
    ensure_tools()?;
    let rootfs = out.join("rootfs");
    let packages = stage(binary, plugins, &rootfs)?;
    let epoch = epoch(root)?;
    let created = rfc3339(epoch);

    // The layer: every file root's, in name order, at one time; then the
    // data folder, the user's.
    let layer = out.join("layer.tar");
    let tar = |extra: &[&str]| {
        let mut command = Command::new("tar");
        command
            .args([
                "--format=gnu",
                "--sort=name",
                "--numeric-owner",
                &format!("--mtime=@{epoch}"),
                "--file",
            ])
            .arg(&layer)
            .arg("-C")
            .arg(&rootfs)
            .args(extra);
        command
    };
    std::fs::create_dir_all(rootfs.join("var/lib/verdict"))?;
    run(
        &mut tar(&[
            "--create",
            "--owner=0",
            "--group=0",
            "--exclude=./var/lib/verdict",
            ".",
        ]),
        BUILD,
    )
    .context("writing the image's layer")?;
    run(
        &mut tar(&[
            "--append",
            &format!("--owner={USER}"),
            &format!("--group={USER}"),
            "--mode=0750",
            "--no-recursion",
            "./var/lib/verdict",
        ]),
        BUILD,
    )
    .context("adding the data folder to the image's layer")?;
    let uncompressed = std::fs::metadata(&layer)?.len();

    let layout = out.join("oci");
    if layout.exists() {
        std::fs::remove_dir_all(&layout)?;
    }
    let image = format!("{}:{version}", layout.display());
    let umoci = |args: &[&str]| -> Result<()> {
        run(Command::new("umoci").args(args), PROBE * 10)
            .with_context(|| format!("umoci {}", args.first().copied().unwrap_or_default()))
    };
    umoci(&["init", "--layout", &layout.to_string_lossy()])?;
    umoci(&["new", "--image", &image])?;
    umoci(&[
        "raw",
        "add-layer",
        "--image",
        &image,
        "--history.created",
        &created,
        "--history.created_by",
        "cargo xtask image",
        &layer.to_string_lossy(),
    ])?;
    let user = format!("{USER}:{USER}");
    let mut config = vec![
        "config".to_string(),
        "--image".into(),
        image.clone(),
        "--no-history".into(),
        "--created".into(),
        created.clone(),
        "--author".into(),
        "verdict".into(),
        "--config.user".into(),
        user,
        "--config.workingdir".into(),
        "/".into(),
        "--config.env".into(),
        "PATH=/usr/bin".into(),
        "--config.entrypoint".into(),
        "/usr/bin/verdict".into(),
    ];
    for arg in [
        "serve",
        "--listen=0.0.0.0:8080",
        "--plugins=/usr/share/verdict/plugins",
        "--data-dir=/var/lib/verdict",
    ] {
        config.extend(["--config.cmd".into(), arg.into()]);
    }
    config.extend(["--config.exposedports".into(), "8080/tcp".into()]);
    config.extend(["--config.volume".into(), "/var/lib/verdict".into()]);
    let mut labels = vec![
        format!("org.opencontainers.image.title={NAME}"),
        format!("org.opencontainers.image.version={version}"),
        format!("org.opencontainers.image.created={created}"),
        "org.opencontainers.image.licenses=Apache-2.0".to_string(),
        format!("dev.verdict.image.debian-packages={}", packages.join(" ")),
    ];
    if let Some(revision) = revision(root) {
        labels.push(format!("org.opencontainers.image.revision={revision}"));
    }
    for label in labels {
        config.extend(["--config.label".into(), label]);
    }
    let config: Vec<&str> = config.iter().map(String::as_str).collect();
    umoci(&config)?;
    umoci(&["gc", "--layout", &layout.to_string_lossy()])?;
    zstd_layer(&layout, version, &layer, level)?;

    let (digest, compressed) = described(&layout, version)?;
    Ok(Image {
        layout,
        rootfs,
        tag: version.to_string(),
        digest,
        compressed,
        uncompressed,
    })
}

/// A blob written into the layout: its digest and size.
fn put_blob(layout: &Path, bytes: &[u8]) -> Result<(String, u64)> {
    use sha2::Digest as _;
    let hex = hex::encode(sha2::Sha256::digest(bytes));
    std::fs::write(layout.join("blobs").join("sha256").join(&hex), bytes)?;
    Ok((format!("sha256:{hex}"), bytes.len() as u64))
}

fn blob_path(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs").join(digest.replace(':', "/"))
}

/// The layer compressed with zstd in place of umoci's gzip — at level 19 a
/// third fewer bytes to pull; every runtime of a Kubernetes the chart
/// supports reads it (containerd 1.5+, CRI-O, podman). The manifest and
/// the index are rewritten to name it; the config's `diff_ids` (of the
/// uncompressed layer) stay as they are.
fn zstd_layer(layout: &Path, tag: &str, layer: &Path, level: u8) -> Result<()> {
    if probe("zstd", &["--version"]).is_none() {
        apt_install(&["zstd"])?;
    }
    let compressed = layer.with_extension("tar.zst");
    run(
        Command::new("zstd")
            .arg(format!("-{level}"))
            .args(["-T0", "-q", "-f", "-o"])
            .arg(&compressed)
            .arg(layer),
        BUILD,
    )
    .context("compressing the layer with zstd")?;
    let (layer_digest, layer_size) = put_blob(layout, &std::fs::read(&compressed)?)?;
    std::fs::remove_file(&compressed)?;

    let index_path = layout.join("index.json");
    let mut index: serde_json::Value = serde_json::from_slice(&std::fs::read(&index_path)?)?;
    let entry = index["manifests"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .with_context(|| format!("no manifest tagged {tag} in the layout"))?;
    let old_manifest = entry["digest"].as_str().unwrap_or_default().to_string();
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_path(layout, &old_manifest))?)?;
    let layers = manifest["layers"]
        .as_array_mut()
        .context("the manifest's layers")?;
    let [only] = layers.as_mut_slice() else {
        bail!("the image has {} layers, not one", layers.len());
    };
    let old_layer = only["digest"].as_str().unwrap_or_default().to_string();
    only["mediaType"] = "application/vnd.oci.image.layer.v1.tar+zstd".into();
    only["digest"] = layer_digest.into();
    only["size"] = layer_size.into();
    let (manifest_digest, manifest_size) = put_blob(layout, &serde_json::to_vec(&manifest)?)?;
    entry["digest"] = manifest_digest.into();
    entry["size"] = manifest_size.into();
    std::fs::write(&index_path, serde_json::to_vec(&index)?)?;
    for old in [old_manifest, old_layer] {
        std::fs::remove_file(blob_path(layout, &old))?;
    }
    Ok(())
}

/// The manifest digest of `tag` in the layout, and its layers' size.
fn described(layout: &Path, tag: &str) -> Result<(String, u64)> {
    let read = |path: PathBuf| -> Result<serde_json::Value> {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(serde_json::from_str(&text)?)
    };
    let index = read(layout.join("index.json"))?;
    let manifest = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .with_context(|| format!("no manifest tagged {tag} in the layout"))?;
    let digest = manifest["digest"]
        .as_str()
        .context("the manifest's digest")?
        .to_string();
    let blob = |digest: &str| layout.join("blobs").join(digest.replace(':', "/").as_str());
    let manifest = read(blob(&digest))?;
    let compressed = manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["size"].as_u64())
        .sum();
    Ok((digest, compressed))
}

/// The runc podman runs containers with here (Debian's: crun refuses some
/// machines' hybrid cgroups), where podman can run the image's files
/// read-only, as its user, with the limits these machines allow (from the
/// staged files: nothing is left in podman's storage). `Err` says why not.
pub fn container_runtime(image: &Image) -> Result<String> {
    let mut missing = Vec::new();
    for (program, package) in [("podman", "podman"), ("skopeo", "skopeo")] {
        if probe(program, &["--version"]).is_none() {
            missing.push(package);
        }
    }
    let runc = ["/usr/sbin/runc", "/usr/bin/runc"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if runc.is_none() {
        missing.push("runc");
    }
    if !missing.is_empty() {
        eprintln!(
            "xtask test: installing Debian's {} to run the image",
            missing.join(", ")
        );
        apt_install(&missing)?;
    }
    let runc = ["/usr/sbin/runc", "/usr/bin/runc"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .context("runc is still missing after installing it")?;
    let output = Command::new("podman")
        .args(["--runtime", runc, "run", "--rm", "--network", "host"])
        .args(["--read-only", "--ulimit", "nofile=1024:1024"])
        .args(["--ulimit", "nproc=1024:1024", "--user"])
        .arg(format!("{USER}:{USER}"))
        .arg("--rootfs")
        .arg(&image.rootfs)
        .args(["/usr/bin/verdict", "--version"])
        .output()
        .context("podman")?;
    let printed = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !printed.starts_with("verdict ") {
        bail!(
            "podman could not run the image: {}{}",
            printed,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(runc.to_string())
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_515_199), "2026-12-05T23:59:59Z");
    }
}
