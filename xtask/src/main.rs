//! The project's task runner, `cargo xtask VERB`: one place for the verbs a
//! developer and CI use (build the plugins, run the demo, lint, test, bench).
//!
//! Building plugins needs a Rust standard library for `wasm32-unknown-unknown`.
//! Where rustup has that target installed, the ordinary build is used. Where
//! it does not (and cannot be downloaded), the standard library is built from
//! source with Debian's `rustc-web`, `rust-web-src` and `lld-22`, which are
//! installed when missing. Every probe and install runs under a timeout.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

mod features;
mod image;
mod krew;
mod layers;
mod linted;
mod phases;
mod real_demo;

use anyhow::{Context, Result, bail};
use verdict_policy_build::process::{BUILD, INSTALL, apt_install, probe, run};
use verdict_policy_build::rust;

const HELP: &str = "\
usage: cargo xtask VERB

verbs:
  plugins   build every plugin crate into a component:
            target/plugins/<name>.wasm (the default policies),
            target/test-plugins/<name>.wasm (plugins the tests use) and
            target/example-plugins/<name>.wasm (examples/); and the
            JavaScript and Python policies of examples/ and
            plugins/testing/ (their policy.toml), installing the pinned
            componentize-js (npm) and componentize-py (PyPI) where
            `verdict build` keeps them ($VERDICT_TOOLS, else
            ~/.cache/verdict/tools; `plugins --rust`: the Rust crates only)
  demo      build the plugins and run `verdict serve --demo` with them: the
            host on the built-in demo cluster; `demo --real` plays the demo
            on the real control plane (`cluster up`), KWOK running the pods
  build     the default policies and the verdict binary in the dev profile
            — the test build's, so after the tests it compiles nothing —
            and its path (`build --release`: the release profile)
  run       `run -- ARGS`: the verdict binary of `build`, run with ARGS
            (`cargo xtask run -- serve --kubeconfig FILE`)
  image     verdict's OCI image, without a container daemon: the release
            binary (stripped) and the default policies on an empty base
            with only the libraries it loads and the CA certificates (from
            Debian's packages), run as user 65532; written as an OCI layout
            in target/image/oci, tagged with the version, its layer
            compressed with zstd (umoci, GNU tar and zstd, installed when
            missing). `image --dev`: the dev profile's
            binary; `image --push REGISTRY/REPOSITORY [--insecure]`: pushed
            with skopeo (`--insecure`: plain HTTP), and the chart values
            that pull it by digest printed
  krew      the kubectl plugin packaged for krew: the release binary as
            kubectl-verdict in target/krew/kubectl-verdict-linux-amd64.tar.gz
            and deploy/krew/verdict.yaml filled in as target/krew/verdict.yaml
            (`krew --url BASE`: where the archive will be served;
            `--dev`: the dev profile's binary)
  crds      write the chart's CustomResourceDefinitions
            (deploy/chart/verdict/crds/) from the resources' Rust types
            (`verdict crds`); a unit test fails while they differ
  lint      cargo fmt --check, the host's layer order (a module uses only
            those above it in host/src/lib.rs's list), the build without
            the demo cluster, and clippy with warnings denied
  test      plugins, formatting and the layer order, the example policies'
            and the settings check's unit tests, then every target of the
            workspace built through clippy's driver (a warning fails it),
            every test of the workspace, and a short run of each fuzzer
            (on the build without the demo cluster) (what CI runs;
            installs Debian's chromium and chromium-driver for the
            dashboard test when missing; builds the control plane with Go
            and runs the real-server suite against it, or says loudly that
            it skipped it where no Go 1.26 is on the PATH; installs the
            pinned schemathesis with pip and fuzzes the HTTP API with it)
  cluster   a real control plane on loopback (kube-apiserver, controller
            manager, scheduler, etcd, KWOK; built from testcluster/ with Go):
              cluster build          build its programs into target/cluster/bin
              cluster up [--nodes N] start it (3 fake nodes by default) and
                                     write target/cluster/kubeconfig (an
                                     admin) and verdict.kubeconfig (verdict's
                                     ServiceAccount, the chart's roles with
                                     tasks, failover and VM delivery on)
              cluster status         say whether it runs, and where
              cluster down           stop it
  fuzz      the coverage-guided fuzzers of fuzz/ (libFuzzer, the coverage
            on the workspace's own crates): object files, task bodies,
            AdmissionReviews and status plugins' encoded answers, 5 minutes
            each by default
            (`fuzz --time SECONDS`, `fuzz TARGET…` for some of them;
            `fuzz --smoke` is the test command's short run); what they
            find is saved under target/fuzz-artifacts/
  bench     plugins, then the benchmarks in the release profile: the plugin
            runtime, the status rules native / Wasm / Lua (BENCHMARKS.md),
            a cluster of 100 000 pods followed through the simulator,
            failover judging 5 000 nodes, admission latency, and HTTP load
            with wrk (installed when
            missing) (`bench --quick` for a short run; `bench --smoke` for
            the policy and failover benchmarks' short runs in the dev
            profile, as CI does;
            `bench --soak [--minutes N]`: the demo left running for 30
            minutes, memory at the start, middle and end; `bench
            --handover [--rounds N]`: three replicas, the leader stopped by
            SIGTERM and SIGKILL, the time until another leads — on the
            control plane of `cluster up` when it runs, else the simulator;
            `bench --languages`: the restart-budget rule in Rust,
            JavaScript and Python side by side, by `verdict bench`;
            `bench --only NAME [ARGS]`: one benchmark (`policies`,
            `failover` …) with its arguments;
            `bench --scale [--pods N] [--nodes N] [--keep] [--fill] [--quick]`:
            150 000 pods on 500 KWOK nodes of a real control plane of its
            own, verdict's time to every verdict, memory, CPU and a relist
            — `--keep` leaves the filled cluster up for the next run,
            `--fill` only fills it and leaves it up,
            `--quick` is 2 000 pods in the dev profile, as CI runs it);
            `bench --fleet [--members N] [--apps N] [--quick]`: verdict
            fleet following 100 members × 1 000 apps (members served by
            the benchmark): memory, change latency, a member's loss;
            `bench --delivery [--sets N] [--edits N] [--quick]`: 1 000
            VMReplicaSets × 10 instances delivered on a real control plane
            of its own — the time to deliver, requests at rest, a set's
            edit to its first hook call, a rollout beside a hanging hook
            (`--quick`: 20 sets in the dev profile)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verb = args.first().map(String::as_str).unwrap_or("help");
    let rest = &args[args.len().min(1)..];
    let outcome = match verb {
        // `plugins --rust`: the Rust crates only (an image build needs no
        // Node.js or Python).
        "plugins" if rest.iter().any(|a| a == "--rust") => build_rust_plugins().map(|_| ()),
        "plugins" => build_plugins().map(|_| ()),
        "demo" => build_rust_plugins().and_then(|_| demo(rest)),
        "build" => build_verdict(!rest.iter().any(|a| a == "--release")).map(|binary| {
            println!("{}", binary.display());
        }),
        "run" => build_rust_plugins().and_then(|_| run_verdict(rest)),
        "lint" => lint(),
        "crds" => crds(),
        "test" => {
            let started = Instant::now();
            // The Go programs the tests use build beside the Rust builds:
            // on a cold machine each is minutes, and neither keeps both
            // cores busy all the time.
            let go = std::thread::spawn(|| phases::timed("Go tools (beside)", go_tools));
            let outcome = phases::timed("plugins", build_plugins)
                .and_then(|_| phases::timed("lint", lint_sources))
                .and_then(|()| test(go))
                .and_then(|()| phases::timed("fuzz smoke", || fuzz(&["--smoke".to_string()])));
            eprintln!(
                "xtask test: where the time went\n{}",
                phases::table(started.elapsed())
            );
            outcome
        }
        "bench" => build_plugins().and_then(|_| bench(rest)),
        "cluster" => cluster(rest),
        "image" => image_command(rest),
        "krew" => krew_command(rest),
        "fuzz" => fuzz(rest),
        "help" | "-h" | "--help" => {
            print!("{HELP}");
            Ok(())
        }
        other => {
            eprint!("unknown verb `{other}`\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask {verb}: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    // `cargo run` names the manifest's folder at run time; the one compiled
    // in is only the fallback, since a binary built for one clone counts as
    // fresh in another clone sharing its target folder.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Where cargo puts build output: `CARGO_TARGET_DIR` when set (CI points it
/// at a cache outside the clone), else the workspace's `target/`.
fn cargo_target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Where the guest crates are built for wasm32: the plugins', the
/// examples' and the projects tests' (`tests/all/projects.rs`) alike.
fn wasm_target_dir() -> PathBuf {
    cargo_target_dir().join("wasm32")
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    // `cargo run` gives this program its package's variables. A build
    // script that watches them (ring's does) would take a cargo started
    // here for other than one started from a shell and build everything
    // above it again: the demo after the tests, or `cargo build`, would
    // compile it all twice.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(
                key,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            )
        {
            command.env_remove(key);
        }
    }
    command
}

/// The OCI registry the policy delivery tests push to and pull from:
/// Debian's `docker-registry` (the CNCF distribution registry), installed
/// when missing. The tests start their own on 127.0.0.1.
fn ensure_registry() -> Result<()> {
    if probe("docker-registry", &["--version"]).is_some() {
        return Ok(());
    }
    eprintln!("xtask: installing Debian's docker-registry for the policy delivery tests");
    apt_install(&["docker-registry"])?;
    if probe("docker-registry", &["--version"]).is_none() {
        bail!("docker-registry is still missing after installing it");
    }
    Ok(())
}

/// The browser the dashboard test drives: Debian's Chromium and its
/// WebDriver, installed when missing.
fn ensure_browser() -> Result<()> {
    let present = |program: &str| probe(program, &["--version"]).is_some();
    if present("chromium") && present("chromedriver") {
        return Ok(());
    }
    eprintln!("xtask: installing Debian's chromium and chromium-driver for the dashboard test");
    apt_install(&["chromium", "chromium-driver"])?;
    if !(present("chromium") && present("chromedriver")) {
        bail!("chromium or chromedriver is still missing after installing them");
    }
    Ok(())
}

/// schemathesis, at the versions `tests/schemathesis/requirements.txt` pins,
/// in a virtual environment under the target folder (made again only when
/// the pins or the Python change); the path of its `st` program.
fn ensure_schemathesis() -> Result<PathBuf> {
    let requirements = root().join("tests/schemathesis/requirements.txt");
    let pins = std::fs::read_to_string(&requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let python = probe("python3", &["--version"])
        .context("the test command runs schemathesis, and python3 is not on the PATH")?;
    let venv = cargo_target_dir().join("schemathesis");
    let st = venv.join("bin/st");
    let stamp = venv.join("installed");
    let wanted = format!("{python}\n{pins}");
    if st.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(st);
    }
    eprintln!(
        "xtask: installing schemathesis ({python}) into {}",
        venv.display()
    );
    if venv.exists() {
        std::fs::remove_dir_all(&venv)?;
    }
    let make = |venv: &Path| {
        run(
            Command::new("python3").arg("-m").arg("venv").arg(venv),
            INSTALL,
        )
    };
    if make(&venv).is_err() {
        // Debian's Python keeps venv in a package of its own.
        apt_install(&["python3-venv"])?;
        make(&venv)?;
    }
    run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements),
        INSTALL,
    )
    .context("installing schemathesis from PyPI")?;
    std::fs::write(&stamp, wanted)?;
    Ok(st)
}

/// Grafana's dashboard schema (`@grafana/schema`, its TypeScript types)
/// and the TypeScript compiler, at the versions `tests/grafana/package-lock.json`
/// pins, installed by `npm ci` under the target folder (again only when the
/// pins change): the chart's dashboard test compiles the dashboard as a
/// typed `Dashboard` with them. The folder holding `node_modules`.
fn ensure_grafana_schema() -> Result<PathBuf> {
    let pins = root().join("tests/grafana");
    let read = |name: &str| {
        std::fs::read_to_string(pins.join(name))
            .with_context(|| format!("reading tests/grafana/{name}"))
    };
    let (package, lock) = (read("package.json")?, read("package-lock.json")?);
    let dir = cargo_target_dir().join("tools/grafana-schema");
    verdict_policy_build::process::npm_install(
        &dir,
        &[("package.json", &package), ("package-lock.json", &lock)],
        "Grafana's dashboard schema",
    )?;
    Ok(dir)
}

/// Prometheus' `promtool` (checks and unit-tests the chart's alert rules
/// and the Grafana dashboard's queries): Debian's, taken out of its
/// `prometheus` package into the target folder without installing the
/// package (no service, no user made); `None` where there is no apt-get
/// (the tests that need it say so loudly).
fn ensure_promtool() -> Result<Option<PathBuf>> {
    let dir = cargo_target_dir().join("tools/promtool/debian");
    let promtool = dir.join("usr/bin/promtool");
    if promtool.is_file() {
        return Ok(Some(promtool));
    }
    if probe("apt-get", &["--version"]).is_none() {
        return Ok(None);
    }
    eprintln!("xtask: taking promtool out of Debian's prometheus package");
    let download = tempfile::tempdir()?;
    let fetch = || {
        run(
            Command::new("apt-get")
                .args(["download", "-qq", "prometheus"])
                .stdin(Stdio::null())
                .current_dir(download.path()),
            INSTALL,
        )
    };
    if fetch().is_err() {
        // A fresh machine's package lists may be missing or stale.
        verdict_policy_build::process::apt_update()?;
        fetch().context("downloading Debian's prometheus package")?;
    }
    let package = std::fs::read_dir(download.path())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("apt-get download left no package")?;
    let unpacked = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::create_dir_all(&unpacked)?;
    run(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(&package)
            .arg(&unpacked),
        INSTALL,
    )
    .context("unpacking Debian's prometheus package")?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&unpacked, &dir)?;
    if !promtool.is_file() {
        bail!("Debian's prometheus package holds no usr/bin/promtool");
    }
    Ok(Some(promtool))
}

/// Where a built guest crate's component goes under `target/`: `plugins`
/// for the default policies, `test-plugins` for `plugins/testing/*`,
/// `example-plugins` for `examples/*`.
fn output_of(dir: &Path) -> &'static str {
    if dir.parent().is_some_and(|p| p.ends_with("testing")) {
        "test-plugins"
    } else if dir.parent().is_some_and(|p| p.ends_with("examples")) {
        "example-plugins"
    } else {
        "plugins"
    }
}

/// Build every guest crate and encode it as a component, then the
/// policies in JavaScript and Python of `examples/` and `plugins/testing/`
/// (installing their pinned tools under the target folder). Returns the paths of the components written.
fn build_plugins() -> Result<Vec<PathBuf>> {
    // The two are independent, and the other languages' tools (Wizer
    // snapshotting an interpreter) keep one core busy while cargo's build
    // has stretches that do not: side by side.
    let (rust, others) = std::thread::scope(|scope| {
        let others = scope.spawn(build_other_languages);
        let rust = build_rust_plugins();
        let others = others.join().unwrap_or_else(|_| {
            Err(anyhow::anyhow!(
                "building the other languages' policies panicked"
            ))
        });
        (rust, others)
    });
    let mut written = rust?;
    written.extend(others?);
    Ok(written)
}

/// Build every guest crate of `plugins/` and `examples/` and encode it as a
/// component.
fn build_rust_plugins() -> Result<Vec<PathBuf>> {
    let root = root();
    let wasm_target_dir = wasm_target_dir();
    remove_earlier_wasm_folders(&cargo_target_dir());
    let toolchain = rust::Toolchain::choose()?;
    let mut written = Vec::new();
    // Two workspaces: the plugins, and the examples that build on them. One
    // folder for both (the standard library and the common crates built
    // once); each one's modules are encoded before the next builds.
    for workspace in [root.join("plugins"), root.join("examples")] {
        let modules = toolchain.build(&workspace, &wasm_target_dir)?;
        for krate in rust::cdylibs(&workspace)? {
            let file = krate
                .dir
                .file_name()
                .and_then(OsStr::to_str)
                .unwrap_or_default()
                .to_string();
            let out = root
                .join("target")
                .join(output_of(&krate.dir))
                .join(format!("{file}.wasm"));
            rust::encode(&modules, &krate.lib, &out)?;
            written.push(out);
        }
    }
    Ok(written)
}

/// The folders the guest crates were built in before they shared
/// [`wasm_target_dir`] (about a gigabyte in a warm target folder): nothing
/// reads them any more.
fn remove_earlier_wasm_folders(target: &Path) {
    for earlier in [target.join("wasm"), target.join("projects-wasm")] {
        if earlier.is_dir() {
            match std::fs::remove_dir_all(&earlier) {
                Ok(()) => eprintln!("xtask: removed {}, no longer used", earlier.display()),
                Err(error) => eprintln!(
                    "xtask: could not remove {}, no longer used: {error}",
                    earlier.display()
                ),
            }
        }
    }
}

/// Build the JavaScript and Python policies of `examples/` and
/// `plugins/testing/` (their `policy.toml`), installing the pinned tools
/// under the target folder; each only when its sources changed.
fn build_other_languages() -> Result<Vec<PathBuf>> {
    let root = root();
    let mut written = Vec::new();
    // The tools `verdict build` uses too: installed once for both.
    let tools = verdict_policy_build::Tools::new(verdict_policy_build::Tools::default_dir());
    // The same sources give the same component from one run to the next
    // (what the tests compiled of it before is used again).
    let cache = verdict_policy_build::BuildCache::user();
    let folders = [
        (root.join("examples"), "example-plugins"),
        (root.join("plugins/testing"), "test-plugins"),
    ];
    for (folder, output) in folders {
        for project in std::fs::read_dir(&folder)? {
            let dir = project?.path();
            let Ok(manifest) = verdict_policy_build::Manifest::read(&dir) else {
                continue;
            };
            if manifest.language == verdict_policy_build::Language::Rust {
                continue;
            }
            let out = root
                .join("target")
                .join(output)
                .join(format!("{}.wasm", manifest.name));
            let inputs = [dir.clone(), dir.join(&manifest.wit), tools.dir.clone()];
            if up_to_date(&out, &inputs) {
                written.push(out);
                continue;
            }
            let started = Instant::now();
            let built = verdict_policy_build::build(
                &dir,
                &root.join("target").join(output),
                &tools,
                Some(&cache),
            )?;
            let out = built.path;
            eprintln!(
                "xtask: {} ({} KiB, {} in {:.1}s)",
                out.strip_prefix(&root).unwrap_or(&out).display(),
                std::fs::metadata(&out)?.len() / 1024,
                if built.cached {
                    "from the build cache"
                } else {
                    "built"
                },
                started.elapsed().as_secs_f64()
            );
            written.push(out);
        }
    }
    Ok(written)
}

/// Whether `out` is newer than every file under `inputs` (a component
/// built by another tool is built again only when its sources change).
fn up_to_date(out: &Path, inputs: &[PathBuf]) -> bool {
    fn newest(path: &Path, depth: usize) -> Option<std::time::SystemTime> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_dir() {
            return meta.modified().ok();
        }
        if depth == 0 {
            return None;
        }
        std::fs::read_dir(path)
            .ok()?
            .flatten()
            .filter(|e| e.file_name() != "node_modules" && e.file_name() != "__pycache__")
            .filter_map(|e| newest(&e.path(), depth - 1))
            .max()
    }
    let Some(built) = std::fs::metadata(out).and_then(|m| m.modified()).ok() else {
        return false;
    };
    inputs
        .iter()
        .filter_map(|input| newest(input, 3))
        .all(|changed| changed < built)
}

fn demo(rest: &[String]) -> Result<()> {
    if rest.iter().any(|a| a == "--real") {
        let up = cluster_dir().join("up");
        if verdict_testcluster::status(&up)?.is_none() {
            cluster(&["up".to_string()])?;
        }
        let cluster = verdict_testcluster::Cluster::attach(&up)?;
        let mut serve = linted::cargo();
        serve
            .args(["run", "--package", "verdict", "--"])
            .current_dir(root());
        return real_demo::run(&cluster, &root().join("target").join("plugins"), serve);
    }
    let mut serve = linted::cargo();
    serve
        .args(["run", "--package", "verdict", "--", "serve", "--demo"])
        .args(rest)
        .current_dir(root());
    let status = serve.status()?;
    if !status.success() {
        bail!("verdict serve exited with {status}");
    }
    Ok(())
}

/// `cargo xtask run -- ARGS`: verdict in the dev profile (the test
/// build's), run with ARGS in the folder it was asked from (its paths are
/// the caller's).
fn run_verdict(rest: &[String]) -> Result<()> {
    let args = match rest.first().map(String::as_str) {
        Some("--") => &rest[1..],
        _ => rest,
    };
    let status = linted::cargo()
        .arg("run")
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .args(["--package", "verdict", "--"])
        .args(args)
        .status()?;
    if !status.success() {
        bail!("verdict exited with {status}");
    }
    Ok(())
}

/// The default policies (Rust) and the verdict binary, in the release
/// profile or (`dev`) the dev one; the binary's path.
fn build_verdict(dev: bool) -> Result<PathBuf> {
    build_rust_plugins()?;
    // The dev profile's is the test build's (and lints as it compiles).
    let mut build = if dev { linted::cargo() } else { cargo() };
    build
        .args(["build", "--locked", "--package", "verdict"])
        .current_dir(root());
    if !dev {
        build.arg("--release");
    }
    run(&mut build, BUILD).context("building verdict")?;
    Ok(cargo_target_dir()
        .join(if dev { "debug" } else { "release" })
        .join("verdict"))
}

/// `cargo xtask krew --url BASE [--dev]`.
fn krew_command(rest: &[String]) -> Result<()> {
    let mut dev = false;
    let mut url = None;
    let mut args = rest.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dev" => dev = true,
            "--url" => url = Some(args.next().context("--url needs the archive's base URL")?),
            other => {
                bail!("unknown argument `{other}`\nusage: cargo xtask krew --url BASE [--dev]")
            }
        }
    }
    let url = url.context("usage: cargo xtask krew --url BASE [--dev]")?;
    let binary = build_verdict(dev)?;
    let package = krew::package(&root(), &binary, &root().join("target").join("krew"), url)?;
    println!(
        "{}\n{}\n  try it: kubectl krew install --manifest={} --archive={}",
        package.archive.display(),
        package.manifest.display(),
        package.manifest.display(),
        package.archive.display()
    );
    Ok(())
}

/// The krew package of the tests' binary, installed by krew itself and
/// run; said loudly and skipped where no Go builds krew — an error instead
/// when `VERDICT_REQUIRE_REAL_CLUSTER` is set (CI, where Go is required).
fn test_krew() -> Result<()> {
    if verdict_testcluster::go_available().is_none() {
        let line = "xtask test: NO GO 1.26 ON THE PATH: THE KREW PACKAGE CHECK IS SKIPPED";
        if std::env::var_os("VERDICT_REQUIRE_REAL_CLUSTER").is_some() {
            bail!("{line}, and VERDICT_REQUIRE_REAL_CLUSTER is set");
        }
        eprintln!("{line}");
        return Ok(());
    }
    let out = cargo_target_dir().join("test-krew");
    let package = krew::package(
        &root(),
        &cargo_target_dir().join("debug").join("verdict"),
        &out,
        "https://verdict.invalid/releases",
    )?;
    krew::check(
        &package,
        &cargo_target_dir().join("tools").join("krew"),
        &out,
    )
    .context("the krew package")
}

/// `cargo xtask image [--dev] [--push REPOSITORY [--insecure]]`.
fn image_command(rest: &[String]) -> Result<()> {
    let mut dev = false;
    let mut push = None;
    let mut insecure = false;
    let mut args = rest.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dev" => dev = true,
            "--insecure" => insecure = true,
            "--push" => push = Some(args.next().context("--push needs a REGISTRY/REPOSITORY")?),
            other => bail!(
                "unknown argument `{other}`\nusage: cargo xtask image [--dev] [--push REGISTRY/REPOSITORY [--insecure]]"
            ),
        }
    }
    image::ensure_tools()?;
    let binary = build_verdict(dev)?;
    let version = env!("CARGO_PKG_VERSION");
    let built = image::assemble(
        &root(),
        &binary,
        &root().join("target").join("plugins"),
        &root().join("target").join("image"),
        version,
        19,
    )?;
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    println!(
        "{} ({}:{version}): {}\n  {:.1} MiB compressed, {:.1} MiB unpacked\n  run it:  podman run --rm {} --help",
        built.reference(),
        image::NAME,
        built.digest,
        mib(built.compressed),
        mib(built.uncompressed),
        built.reference(),
    );
    let Some(repository) = push else {
        return Ok(());
    };
    if probe("skopeo", &["--version"]).is_none() {
        apt_install(&["skopeo"])?;
    }
    let digest_file = root().join("target").join("image").join("pushed.digest");
    let destination = format!("docker://{repository}:{version}");
    let mut copy = Command::new("skopeo");
    copy.args(["copy", "--digestfile"])
        .arg(&digest_file)
        .arg(built.reference())
        .arg(&destination);
    if insecure {
        copy.arg("--dest-tls-verify=false");
    }
    run(&mut copy, INSTALL).with_context(|| format!("pushing to {destination}"))?;
    let digest = std::fs::read_to_string(&digest_file)?;
    println!(
        "pushed {repository}@{digest}\n  helm install verdict deploy/chart/verdict --set image.repository={repository} --set image.digest={digest}"
    );
    Ok(())
}

/// rustfmt and clippy, added with rustup when they are missing (a new
/// machine's toolchain may lack them), or an error that says so.
fn ensure_lint_tools() -> Result<()> {
    let present = |tool: &str| {
        cargo()
            .args([tool, "--version"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if present("fmt") && present("clippy") {
        return Ok(());
    }
    eprintln!("xtask: adding rustfmt and clippy with rustup");
    let added = run(
        Command::new("rustup").args(["component", "add", "rustfmt", "clippy"]),
        INSTALL,
    );
    if present("fmt") && present("clippy") {
        return Ok(());
    }
    bail!(
        "the test command checks formatting and lints with rustfmt and clippy, and they are missing \
         (rustup component add rustfmt clippy: {})",
        added
            .err()
            .map_or_else(|| "did not add them".to_string(), |e| format!("{e:#}"))
    )
}

/// The chart's CRDs, written by `verdict crds` from the Rust types.
fn crds() -> Result<()> {
    let folder = root().join("deploy/chart/verdict/crds");
    run(
        linted::cargo()
            .args(["run", "--quiet", "-p", "verdict", "--", "crds", "--out"])
            .arg(&folder)
            .current_dir(root()),
        BUILD,
    )
}

/// Everything the test command checks of the sources but the compiler's
/// lints: formatting, the host's layer order, and the features the demo
/// shares with the test build. (The test command's build lints, through
/// clippy's driver: [`linted`].)
fn lint_sources() -> Result<()> {
    ensure_lint_tools()?;
    let root = root();
    for dir in [
        root.clone(),
        root.join("plugins"),
        root.join("examples"),
        root.join("fuzz"),
    ] {
        run(
            cargo().args(["fmt", "--all", "--check"]).current_dir(&dir),
            BUILD,
        )
        .with_context(|| {
            format!(
                "formatting differs: run `cargo fmt --all` in {}",
                dir.display()
            )
        })?;
    }
    let violations = layers::check(&root.join("host/src"))?;
    if !violations.is_empty() {
        for v in &violations {
            eprintln!(
                "host/src/{}:{}: `{}` uses `crate::{}`, a layer below it",
                v.file.display(),
                v.line,
                v.module,
                v.uses
            );
        }
        bail!(
            "{} uses of a lower layer: a module may use only those above it in host/src/lib.rs's order",
            violations.len()
        );
    }
    features::check(&root)
}

/// `cargo xtask lint`: the sources' checks, the build without the demo
/// cluster, and `cargo clippy` with warnings denied — on their own, in
/// check mode, quicker than the test command's build that lints as it
/// compiles.
fn lint() -> Result<()> {
    lint_sources()?;
    let root = root();
    // The production build without the demo cluster must keep compiling.
    run(
        cargo()
            .args([
                "check",
                "-p",
                "verdict",
                "--no-default-features",
                "--features",
                "jemalloc",
            ])
            .current_dir(&root),
        BUILD,
    )
    .context(
        "the build without the demo cluster (`--no-default-features --features jemalloc`) fails",
    )?;
    run(
        cargo()
            .args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])
            .current_dir(&root),
        BUILD,
    )
}

/// The Go programs the test command uses, built (or found built) under
/// the target folder; `None` each where Go is missing.
struct GoTools {
    control_plane: Option<verdict_testcluster::Binaries>,
}

fn go_tools() -> Result<GoTools> {
    if verdict_testcluster::go_available().is_none() {
        return Ok(GoTools {
            control_plane: None,
        });
    }
    let control_plane = verdict_testcluster::Binaries::build(&cargo_target_dir())?;
    krew::krew(&cargo_target_dir().join("tools").join("krew"))?;
    Ok(GoTools {
        control_plane: Some(control_plane),
    })
}

fn test(go: std::thread::JoinHandle<Result<GoTools>>) -> Result<()> {
    let (schemathesis, promtool, grafana_schema) = phases::timed("tools", || -> Result<_> {
        ensure_browser()?;
        ensure_registry()?;
        Ok((
            ensure_schemathesis()?,
            ensure_promtool()?,
            ensure_grafana_schema()?,
        ))
    })?;
    // The example policies' own unit tests, natively (the Rust SDK's
    // builders and the default rules as a library).
    phases::timed("examples' unit tests", || {
        run(
            cargo()
                .args(["test", "--quiet"])
                .arg("--target-dir")
                .arg(cargo_target_dir().join("examples-native"))
                .current_dir(root().join("examples")),
            BUILD,
        )
    })
    .context("the example policies' unit tests")?;
    // The settings check the default plugins and the SDK share, natively
    // (the plugin crates themselves link only as components).
    phases::timed("settings' unit tests", || {
        run(
            cargo()
                .args(["test", "--quiet", "-p", "verdict-settings"])
                .arg("--target-dir")
                .arg(cargo_target_dir().join("plugins-native"))
                .current_dir(root().join("plugins")),
            BUILD,
        )
    })
    .context("the settings check's unit tests")?;
    // The build first: the image test runs the image of the binary the
    // tests use. Every target of the workspace, the benchmarks and the fuzz
    // targets among them, is compiled and linted by clippy's driver here
    // (the tests' run below needs only some of them).
    linted::clippy_driver().context(
        "clippy's driver is missing, and the test build lints through it (rustup component add clippy)",
    )?;
    phases::timed("test build", || {
        linted::build(
            linted::cargo()
                .args(["test", "--workspace", "--all-targets", "--no-run"])
                .current_dir(root()),
            &cargo_target_dir().join("test-build.json"),
            BUILD * 3 / 2,
        )
    })
    .context("building the tests")?;
    let image = phases::timed("image", test_image)?;
    // The Go programs are waited for only now: on a cold machine they build
    // beside the plugins and the test build.
    let go = phases::timed("waiting for the Go tools", || go.join())
        .map_err(|_| anyhow::anyhow!("building the Go tools panicked"))??;
    // The real-server suite's control plane: started once for the whole
    // run, stopped when the run ends.
    let real = phases::timed("control plane", || real_cluster(go.control_plane))?;
    phases::timed("krew", test_krew)?;
    let mut command = linted::cargo();
    command
        .args(["test", "--workspace", "--no-fail-fast"])
        .env("VERDICT_SCHEMATHESIS", schemathesis)
        .env("VERDICT_GRAFANA_SCHEMA", grafana_schema)
        .current_dir(root());
    // The suite waits on processes, the control plane and the browser more
    // than it computes: one test more than there are cores keeps them busy
    // (on two cores, 7 minutes instead of 10). A thread count given wins.
    if std::env::var_os("RUST_TEST_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        command.env("RUST_TEST_THREADS", (cores + 1).to_string());
    }
    if let Some((image, runc)) = &image {
        command
            .env("VERDICT_TEST_IMAGE", image.reference())
            .env("VERDICT_TEST_IMAGE_RUNC", runc);
    }
    if let Some(promtool) = &promtool {
        command.env("VERDICT_PROMTOOL", promtool);
    }
    if let Some(cluster) = &real {
        command
            .env("VERDICT_TEST_CLUSTER", cluster.dir())
            .env("VERDICT_TESTCLUSTER_BIN", &cluster.binaries().dir);
    }
    // The build and every test: on a cold machine the build alone can take
    // a good part of an ordinary build's limit.
    let outcome = phases::timed("tests", || run(&mut command, BUILD * 3 / 2));
    drop(real);
    outcome
}

/// The image of the tests' own binary (the dev profile's, the same
/// assembly as `cargo xtask image`) and the runc podman runs it with;
/// `None`, said in one loud line, where podman cannot run containers here —
/// an error instead when `VERDICT_REQUIRE_IMAGE` is set (CI).
fn test_image() -> Result<Option<(image::Image, String)>> {
    let built = image::assemble(
        &root(),
        &cargo_target_dir().join("debug").join("verdict"),
        &root().join("target").join("plugins"),
        &cargo_target_dir().join("test-image"),
        env!("CARGO_PKG_VERSION"),
        3,
    )
    .context("assembling the test image")?;
    match image::container_runtime(&built) {
        Ok(runc) => Ok(Some((built, runc))),
        Err(error) => {
            let line = format!(
                "xtask test: PODMAN CANNOT RUN CONTAINERS HERE: THE IMAGE TEST IS SKIPPED ({error:#})"
            );
            if std::env::var_os("VERDICT_REQUIRE_IMAGE").is_some() {
                bail!("{line}, and VERDICT_REQUIRE_IMAGE is set");
            }
            eprintln!("{line}");
            Ok(None)
        }
    }
}

/// Start the real-server suite's shared control plane from its built
/// binaries; `None`, said in one loud line, where there are none (no Go
/// 1.26 on the PATH) — an error instead when `VERDICT_REQUIRE_REAL_CLUSTER` is set (CI).
fn real_cluster(
    bin: Option<verdict_testcluster::Binaries>,
) -> Result<Option<verdict_testcluster::Cluster>> {
    use verdict_testcluster as testcluster;
    let Some(bin) = bin else {
        let line = "xtask test: NO GO 1.26 ON THE PATH: THE REAL-SERVER SUITE (kube-apiserver, KWOK) IS SKIPPED";
        if std::env::var_os("VERDICT_REQUIRE_REAL_CLUSTER").is_some() {
            bail!("{line}, and VERDICT_REQUIRE_REAL_CLUSTER is set");
        }
        eprintln!("{line}");
        return Ok(None);
    };
    let dir = cluster_dir().join("test");
    // A run that was killed may have left its control plane running.
    testcluster::stop_detached(&dir)?;
    let cluster = testcluster::Cluster::start(&bin, &dir, testcluster::Options::default())
        .context("starting the real-server suite's control plane")?;
    cluster.write_state()?;
    eprintln!(
        "xtask test: the real-server suite's control plane is up at {}",
        cluster.server()
    );
    Ok(Some(cluster))
}

/// The fuzz targets of `fuzz/`, each with the folders of examples it
/// starts from.
const FUZZ_TARGETS: [(&str, &[&str]); 4] = [
    ("objects", &["plugins/status/tests/fixtures"]),
    ("task_bodies", &[]),
    ("admission_reviews", &["tests/all/reviews"]),
    ("encoded_answers", &[]),
];

/// libFuzzer's coverage instrumentation, given to rustc for the
/// workspace's own crates only (cargo-fuzz's flags without a sanitizer):
/// the dependencies are the test build's, compiled once for both.
const FUZZ_FLAGS: &str = "--cfg fuzzing -Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares";

/// The rustc wrapper (cargo's `RUSTC_WORKSPACE_WRAPPER`) that adds
/// [`FUZZ_FLAGS`] to each of the workspace's crates but build scripts and
/// procedural macros, which run in the build and link no fuzzer. Its
/// folder is named by its text, so that a change of the flags builds
/// again (cargo keeps the wrapper's path in its fingerprints).
fn fuzz_wrapper() -> Result<PathBuf> {
    let script = format!(
        "#!/bin/sh\n\
         # rustc for the fuzz targets: the workspace's crates with libFuzzer's coverage\n\
         rustc=\"$1\"; shift\n\
         for arg in \"$@\"; do\n\
         \x20 case \"$arg\" in build_script_build|proc-macro|-vV|--print*) exec \"$rustc\" \"$@\" ;; esac\n\
         done\n\
         exec \"$rustc\" \"$@\" {FUZZ_FLAGS}\n"
    );
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(script.as_bytes()));
    let path = cargo_target_dir()
        .join("fuzz-wrapper")
        .join(&digest[..16])
        .join("rustc");
    if !path.is_file() {
        std::fs::create_dir_all(path.parent().unwrap_or(&path))?;
        verdict_policy_build::process::write_atomically(&path, script.as_bytes())?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(path)
}

/// Build the fuzz targets (`fuzz/`, a member of the workspace) with the
/// coverage instrumentation of [`fuzz_wrapper`]; each target's program.
/// They link the host without the demo cluster (`fuzz/Cargo.toml`): this
/// build is also the test command's check that the production build
/// without it compiles, without a warning.
fn build_fuzzers() -> Result<Vec<(String, PathBuf)>> {
    let mut command = cargo();
    command
        .args(["build", "--package", "verdict-fuzz", "--bins"])
        .env("RUSTC_WORKSPACE_WRAPPER", fuzz_wrapper()?)
        .current_dir(root());
    let programs = linted::build(
        &mut command,
        &cargo_target_dir().join("fuzz-build.json"),
        BUILD,
    )
    .context("the fuzz targets do not build")?;
    Ok(programs
        .into_iter()
        .filter_map(|(name, program)| {
            name.strip_prefix("fuzz-")
                .map(|target| (target.to_string(), program))
        })
        .collect())
}

/// Run the fuzz targets (all, or those named) for `--time` seconds each
/// (`--smoke`: 20), in the dev profile so that overflow checks are on.
/// Each keeps its corpus under the target folder between runs; as many run
/// at once as there are cores.
fn fuzz(rest: &[String]) -> Result<()> {
    let mut seconds = 300;
    let mut wanted = Vec::new();
    let mut args = rest.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--smoke" => seconds = 20,
            "--time" => {
                seconds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .context("--time takes a number of seconds")?;
            }
            name => {
                if !FUZZ_TARGETS.iter().any(|(t, _)| *t == name) {
                    let known: Vec<&str> = FUZZ_TARGETS.iter().map(|(t, _)| *t).collect();
                    bail!("no fuzz target `{name}`; there are {}", known.join(", "));
                }
                wanted.push(name.to_string());
            }
        }
    }
    let programs = build_fuzzers()?;
    let target = cargo_target_dir();
    let chosen: Vec<(&str, &[&str], PathBuf)> = FUZZ_TARGETS
        .into_iter()
        .filter(|(name, _)| wanted.is_empty() || wanted.iter().any(|w| w == name))
        .map(|(name, seeds)| {
            let program = programs
                .iter()
                .find(|(built, _)| built == name)
                .map(|(_, program)| program.clone())
                .with_context(|| format!("the build made no program for the {name} fuzz target"))?;
            Ok((name, seeds, program))
        })
        .collect::<Result<_>>()?;
    // A fuzzer keeps one core busy: as many run at once as there are cores,
    // each for its whole time.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for batch in chosen.chunks(cores) {
        let outcomes: Vec<Result<()>> = std::thread::scope(|scope| {
            let running: Vec<_> = batch
                .iter()
                .map(|(name, seeds, program)| {
                    let target = &target;
                    scope.spawn(move || -> Result<()> {
                        let corpus = target.join("fuzz-corpus").join(name);
                        let artifacts = target.join("fuzz-artifacts").join(name);
                        std::fs::create_dir_all(&corpus)?;
                        std::fs::create_dir_all(&artifacts)?;
                        let mut command = Command::new(program);
                        command
                            .arg(&corpus)
                            .args(seeds.iter().map(|s| root().join(s)))
                            .arg(format!("-max_total_time={seconds}"))
                            .args(["-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1"])
                            .arg(format!("-artifact_prefix={}/", artifacts.display()));
                        eprintln!("xtask: fuzzing {name} for {seconds} s");
                        run(&mut command, BUILD).with_context(|| {
                            format!(
                                "the {name} fuzzer found a failing input; it is in {}",
                                artifacts.display()
                            )
                        })
                    })
                })
                .collect();
            running
                .into_iter()
                .map(|r| {
                    r.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a fuzzer panicked")))
                })
                .collect()
        });
        for outcome in outcomes {
            outcome?;
        }
    }
    Ok(())
}

/// The benchmark `bench` on a real control plane of its own, with the
/// arguments but `flag`.
fn on_a_control_plane(bench: &str, flag: &str, rest: &[String]) -> Result<()> {
    build_plugins()?;
    verdict_testcluster::Binaries::build(&cargo_target_dir())?;
    let quick = rest.iter().any(|a| a == "--quick");
    let mut command = if quick { linted::cargo() } else { cargo() };
    command.args(["bench", "--package", "verdict", "--bench", bench]);
    if quick {
        command.args(["--profile", "dev"]);
    }
    command
        .arg("--")
        .args(rest.iter().filter(|a| *a != flag))
        .env(
            "VERDICT_TESTCLUSTER_BIN",
            verdict_testcluster::Binaries::folder(&cargo_target_dir()),
        )
        .current_dir(root());
    run(&mut command, Duration::from_secs(6 * 3600))
}

fn bench(rest: &[String]) -> Result<()> {
    // `--smoke`: the policy benchmark's short run in the dev profile (the
    // test build's artifacts), so that CI keeps it working without a
    // release build; its figures mean nothing.
    // The failover benchmark's short run (500 nodes) goes with it.
    if rest.iter().any(|a| a == "--smoke") {
        for bench in ["policies", "failover"] {
            run(
                linted::cargo()
                    .args([
                        "bench",
                        "--profile",
                        "dev",
                        "--package",
                        "verdict",
                        "--bench",
                        bench,
                        "--",
                        "--quick",
                    ])
                    .current_dir(root()),
                BUILD,
            )?;
        }
        return Ok(());
    }
    // `--languages`: the restart-budget rule in Rust, JavaScript and
    // Python, measured side by side.
    if rest.iter().any(|a| a == "--languages") {
        build_plugins()?;
        let quick: Vec<&str> = rest
            .iter()
            .any(|a| a == "--quick")
            .then_some("--quick")
            .into_iter()
            .collect();
        return run(
            cargo()
                .args([
                    "bench",
                    "--package",
                    "verdict",
                    "--bench",
                    "languages",
                    "--",
                ])
                .args(quick)
                .current_dir(root()),
            BUILD,
        );
    }
    // `--soak`: the demo left running for 30 minutes, its memory read.
    if rest.iter().any(|a| a == "--soak") {
        let minutes: Vec<&String> = rest
            .iter()
            .skip_while(|a| *a != "--minutes")
            .take(2)
            .collect();
        return run(
            cargo()
                .args(["bench", "--package", "verdict", "--bench", "soak", "--"])
                .args(minutes)
                .current_dir(root()),
            Duration::from_secs(24 * 3600),
        );
    }
    // `--scale`: the largest clusters on a real control plane of the
    // benchmark's own (built with Go), filled with pods made directly;
    // `--delivery`: seed 002's delivery of 1 000 sets × 10 instances on
    // one (`--quick`: 20 sets). Both in the test build's profile with
    // `--quick`, the short runs CI keeps.
    for (flag, bench) in [("--scale", "scale"), ("--delivery", "delivery")] {
        if rest.iter().any(|a| a == flag) {
            return on_a_control_plane(bench, flag, rest);
        }
    }
    // `--fleet`: `verdict fleet` following 100 members × 1 000 apps
    // (`--quick`: 10 × 100, in the test build's profile).
    if rest.iter().any(|a| a == "--fleet") {
        let quick = rest.iter().any(|a| a == "--quick");
        let mut command = if quick { linted::cargo() } else { cargo() };
        command.args(["bench", "--package", "verdict", "--bench", "fleet"]);
        if quick {
            command.args(["--profile", "dev"]);
        }
        return run(
            command
                .arg("--")
                .args(rest.iter().filter(|a| *a != "--fleet"))
                .current_dir(root()),
            Duration::from_secs(3600),
        );
    }
    // `--handover`: leader handovers among three replicas, on the local
    // control plane when `cluster up` runs.
    if rest.iter().any(|a| a == "--handover") {
        let rounds: Vec<&String> = rest
            .iter()
            .skip_while(|a| *a != "--rounds")
            .take(2)
            .collect();
        let cluster = root().join("target/cluster");
        let mut real = Vec::new();
        if cluster.join("up").exists() {
            real.extend([
                "--kubeconfig".to_string(),
                cluster.join("kubeconfig").display().to_string(),
                "--kubectl".to_string(),
                cluster.join("bin/kubectl").display().to_string(),
            ]);
        }
        return run(
            cargo()
                .args(["bench", "--package", "verdict", "--bench", "handover", "--"])
                .args(rounds)
                .args(real)
                .current_dir(root()),
            Duration::from_secs(3600),
        );
    }
    // The HTTP benchmark drives load with wrk (Debian's package).
    if Command::new("wrk").arg("--version").output().is_err() {
        eprintln!("xtask: installing wrk for the HTTP benchmark");
        if let Err(error) = apt_install(&["wrk"]) {
            eprintln!("xtask: wrk could not be installed ({error}); the HTTP benchmark says so");
        }
    }
    // `--only NAME`: one benchmark, with the other arguments, built as the
    // others are (a plain `cargo bench` sees another environment and
    // rebuilds the release tree).
    if let Some(name) = rest.iter().skip_while(|a| *a != "--only").nth(1) {
        let others: Vec<&String> = rest
            .iter()
            .enumerate()
            .filter(|(i, a)| *a != "--only" && (*i == 0 || rest[i - 1] != "--only"))
            .map(|(_, a)| a)
            .collect();
        return run(
            cargo()
                .args(["bench", "--package", "verdict", "--bench", name, "--"])
                .args(others)
                .current_dir(root()),
            Duration::from_secs(6 * 3600),
        );
    }
    run(
        cargo()
            .args([
                "bench",
                "--package",
                "verdict",
                "--bench",
                "runtime",
                "--bench",
                "policies",
                "--bench",
                "cluster",
                "--bench",
                "admission",
                "--bench",
                "http",
                "--bench",
                "failover",
                "--",
            ])
            .args(rest)
            .current_dir(root()),
        BUILD,
    )
}

/// The chart's `Task` CRD, ServiceAccount and roles (every switch on) in
/// `verdict-system`, and a kubeconfig at `path` that acts as that account.
fn install_service_account(cluster: &verdict_testcluster::Cluster, path: &Path) -> Result<()> {
    const NAMESPACE: &str = "verdict-system";
    cluster.create_namespace(NAMESPACE, &[])?;
    let chart = root().join("deploy/chart/verdict");
    let rendered = cluster.binaries().helm_template(
        &chart,
        "verdict",
        NAMESPACE,
        &[
            "--set",
            "host.executeTasks=true",
            "--set",
            "host.failoverEnforce=true",
            "--set",
            "host.vmDelivery=true",
            "--show-only",
            "templates/serviceaccount.yaml",
            "--show-only",
            "templates/rbac.yaml",
        ],
    )?;
    cluster.apply(&rendered)?;
    let crds = chart.join("crds");
    cluster.kubectl_run(&["apply", "-f", &crds.to_string_lossy()], None)?;
    cluster.kubectl_run(
        &[
            "wait",
            "--for=condition=Established",
            "crd/tasks.verdict.dev",
            "--timeout=60s",
        ],
        None,
    )?;
    cluster.service_account_kubeconfig(NAMESPACE, "verdict", path)
}

/// Where `cluster up` keeps its control plane: `target/cluster`.
fn cluster_dir() -> PathBuf {
    cargo_target_dir().join("cluster")
}

/// What `cargo xtask cluster` is asked: its verb and, for `up`, the
/// nodes; `None` for help. Anything else is an error that shows the usage,
/// before anything starts.
fn cluster_command(rest: &[String]) -> Result<Option<(&str, usize)>> {
    const USAGE: &str = "usage: cargo xtask cluster build | up [--nodes N] | status | down";
    if rest
        .iter()
        .any(|a| matches!(a.as_str(), "-h" | "--help" | "help"))
    {
        return Ok(None);
    }
    let verb = rest.first().map(String::as_str).unwrap_or_default();
    let mut nodes = 3;
    match (verb, &rest[rest.len().min(1)..]) {
        ("build" | "status" | "down", []) => {}
        ("up", []) => {}
        ("up", [flag, n]) if flag == "--nodes" => {
            nodes = n
                .parse()
                .with_context(|| format!("--nodes needs a number, not `{n}`\n{USAGE}"))?;
        }
        _ => bail!(
            "`cluster {}` is not a command of it\n{USAGE}",
            rest.join(" ")
        ),
    }
    Ok(Some((verb, nodes)))
}

fn cluster(rest: &[String]) -> Result<()> {
    use verdict_testcluster as testcluster;
    let dir = cluster_dir();
    let up = dir.join("up");
    let Some((verb, nodes)) = cluster_command(rest)? else {
        let start = HELP.find("  cluster ").unwrap_or(0);
        let end = HELP[start..]
            .find("\n  fuzz")
            .map_or(HELP.len(), |e| start + e);
        println!("{}", &HELP[start..end]);
        return Ok(());
    };
    match Some(verb) {
        Some("build") => {
            testcluster::Binaries::build(&cargo_target_dir())?;
        }
        Some("up") => {
            if let Some(state) = testcluster::status(&up)? {
                println!(
                    "the control plane is already up at {} (kubeconfig {})",
                    state.server,
                    up.join("kubeconfig").display()
                );
                return Ok(());
            }
            let bin = testcluster::Binaries::build(&cargo_target_dir())?;
            let cluster = testcluster::Cluster::start(
                &bin,
                &up,
                testcluster::Options {
                    nodes,
                    ..Default::default()
                },
            )?;
            let kubeconfig = dir.join("kubeconfig");
            std::fs::copy(cluster.kubeconfig(), &kubeconfig)?;
            let account = dir.join("verdict.kubeconfig");
            install_service_account(&cluster, &account)?;
            let version = cluster.kubectl_run(&["version"], None)?;
            let state = cluster.detach()?;
            println!(
                "control plane up at {} with {nodes} KWOK nodes\n{version}\nkubeconfig: {} (an admin)\n            {} (verdict's ServiceAccount, with the chart's roles)\n\n  verdict serve --kubeconfig {}\n  {} --kubeconfig {} get nodes\n\nstop it with `cargo xtask cluster down`",
                state.server,
                kubeconfig.display(),
                account.display(),
                kubeconfig.display(),
                bin.path("kubectl").display(),
                kubeconfig.display(),
            );
        }
        Some("status") => match testcluster::status(&up)? {
            Some(state) => println!(
                "up at {} ({} nodes); kubeconfig {}; processes {:?}",
                state.server,
                state.nodes,
                dir.join("kubeconfig").display(),
                state.pids
            ),
            None => println!("down"),
        },
        Some("down") => {
            if testcluster::stop_detached(&up)? {
                println!("control plane stopped");
            } else {
                println!("no control plane was up");
            }
            let _ = std::fs::remove_file(dir.join("kubeconfig"));
            let _ = std::fs::remove_file(dir.join("verdict.kubeconfig"));
        }
        _ => unreachable!("cluster_command knows the verbs"),
    }
    Ok(())
}

#[cfg(test)]
mod cluster_tests {
    use super::cluster_command;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn help_is_asked_before_anything_starts_and_a_stray_argument_is_refused() {
        assert_eq!(cluster_command(&args("up --help")).unwrap(), None);
        assert_eq!(cluster_command(&args("-h")).unwrap(), None);
        assert_eq!(cluster_command(&args("up")).unwrap(), Some(("up", 3)));
        assert_eq!(
            cluster_command(&args("up --nodes 5")).unwrap(),
            Some(("up", 5))
        );
        assert_eq!(cluster_command(&args("down")).unwrap(), Some(("down", 3)));
        for bad in [
            "",
            "up --nodes",
            "up --nodes x",
            "up now",
            "start",
            "down now",
        ] {
            let refused = cluster_command(&args(bad)).unwrap_err().to_string();
            assert!(
                refused.contains("usage: cargo xtask cluster"),
                "{bad}: {refused}"
            );
        }
    }
}
