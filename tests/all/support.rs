//! Helpers shared by the tests: where the built components are, a host
//! registry over a temporary plugin folder, inputs, and bounded waits.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use verdict::plugins::Limits;
use verdict::plugins::{Registry, Runtime};
use verdict::wit::{status, types};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate is in the workspace")
        .to_path_buf()
}

fn component(folder: &str, name: &str) -> PathBuf {
    let path = workspace()
        .join("target")
        .join(folder)
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask plugins` first",
        path.display()
    );
    path
}

/// A default policy component (`status`, `failover`, `admission`).
pub fn default_plugin(name: &str) -> PathBuf {
    component("plugins", name)
}

/// A plugin folder of its own holding the default plugins named.
pub fn plugin_folder(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        std::fs::copy(
            default_plugin(name),
            dir.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    dir
}

/// An example plugin component (see `examples/`).
pub fn example_plugin(name: &str) -> PathBuf {
    component("example-plugins", name)
}

/// A test plugin component (see `plugins/testing/`).
pub fn test_plugin(name: &str) -> PathBuf {
    component("test-plugins", name)
}

/// Code cache shared by tests that do not look at compilation (in-process
/// registries, the hosts they start, the offline commands), so that each
/// component is compiled once rather than once per test: under the target
/// folder (`CARGO_TARGET_DIR`, else the workspace's `target/`), kept
/// between runs as a user's is. Entries are written whole or not at all, so
/// tests running at once share it safely.
pub fn shared_cache() -> PathBuf {
    target_dir().join("test-code-cache")
}

/// Where cargo builds: `CARGO_TARGET_DIR`, else the workspace's `target/`
/// (as `cargo xtask` has it; the pinned tools are installed under it).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// The setting that names the compiled-code cache, for `serve` and the
/// offline commands alike.
pub const CACHE_VARIABLE: &str = "VERDICT_CACHE_DIR";

/// Limits small enough that misbehaving plugins hit them fast.
pub fn test_limits() -> Limits {
    Limits {
        call_timeout: Duration::from_millis(200),
        memory_bytes: 32 << 20,
        output_bytes: 256 << 10,
    }
}

/// A plugin folder in a temporary directory and a registry over it.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub registry: Arc<Registry>,
}

impl Fixture {
    pub fn new() -> Self {
        Self::with_cache(&shared_cache())
    }

    pub fn with_cache(cache: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(cache, test_limits()).unwrap();
        let registry = Arc::new(Registry::new(
            Arc::new(runtime),
            Some(dir.path().to_path_buf()),
            Default::default(),
        ));
        Self { dir, registry }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.wasm"))
    }

    /// Copy a component into the folder as `name.wasm`, atomically.
    pub fn install(&self, name: &str, from: &Path) {
        install_by_rename(&self.path(name), &std::fs::read(from).unwrap());
    }
}

/// Write `bytes` beside `path` and rename them over it, as editors save.
pub fn install_by_rename(path: &Path, bytes: &[u8]) {
    let partial = path.with_file_name(format!(
        ".{}.partial",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&partial, bytes).unwrap();
    std::fs::rename(&partial, path).unwrap();
}

pub const NOW: types::Timestamp = 1_780_000_000_000;

/// An application with a namespace and nothing in it, named `name`.
pub fn app_input(name: &str) -> status::AppInput {
    status::AppInput {
        app: types::App {
            id: types::AppId {
                namespace: "shop".into(),
                name: name.into(),
            },
            namespace_exists: true,
            namespace_labels: Vec::new(),
            expected_replicas: None,
            workloads: Vec::new(),
            pods: Vec::new(),
            objects: Vec::new(),
            probe: None,
            observed_at: NOW,
        },
        tasks: Vec::new(),
        nodes: Vec::new(),
        overrides: Vec::new(),
    }
}

/// The longest pause between two checks of [`wait_until`], but after a
/// check that itself took longer.
const LONGEST_PAUSE: Duration = Duration::from_millis(25);

/// The longest pause after a slow check ([`wait_until`]).
const LONGEST_PAUSE_AFTER_A_SLOW_CHECK: Duration = Duration::from_millis(250);

/// Wait until `condition` holds, for at most `limit`. Returns how long it
/// took, or `None` when it never held.
///
/// It checks again after 2 ms, then after pauses half as long again each
/// time, up to [`LONGEST_PAUSE`]: what follows soon is seen soon, and a
/// long wait does not spend the cores the hosts and the other tests run
/// on (most conditions are an HTTP request to a host, or a `kubectl`).
/// A check that takes longer than that (a `kubectl` run is a tenth of a
/// second of CPU) is followed by a pause as long as itself, up to
/// [`LONGEST_PAUSE_AFTER_A_SLOW_CHECK`]: a waiting test spends at most
/// half of a core on its checks.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        let checked = Instant::now();
        if condition() {
            return Some(started.elapsed());
        }
        let check = checked.elapsed();
        let waited = started.elapsed();
        if waited > limit {
            return None;
        }
        let this_pause = pause.max(check.min(LONGEST_PAUSE_AFTER_A_SLOW_CHECK));
        // The last check falls at the limit, not a pause after it.
        std::thread::sleep(this_pause.min(limit - waited + Duration::from_millis(1)));
        pause = (pause * 3 / 2).min(LONGEST_PAUSE);
    }
}

/// A process killed when this is dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `verdict serve` on a free port with a plugin folder, a data folder
/// and more flags, logging at `log`; the process and where it listens.
pub fn spawn_verdict(plugins: &Path, data: &Path, extra: &[&str], log: &str) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
    command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .arg("--plugins")
        .arg(plugins)
        .arg("--data-dir")
        .arg(data)
        .args(extra);
    spawn_serving(command, log)
}

/// Start `verdict serve` as `command` says; the process and the base URL
/// it says it listens on (its first line).
pub fn spawn_serving(command: Command, log: &str) -> (Child, String) {
    spawn_serving_to(command, log, Stdio::inherit())
}

/// [`spawn_serving`], its log written to `stderr`.
pub fn spawn_serving_to(mut command: Command, log: &str, stderr: Stdio) -> (Child, String) {
    // The shared code cache, unless the test names one (or removes the
    // setting, to use the data folder's).
    if !command.get_envs().any(|(key, _)| key == CACHE_VARIABLE) {
        command.env(CACHE_VARIABLE, shared_cache());
    }
    let mut child = command
        .env("VERDICT_LOG", log)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The first line verdict writes; a wrapper's (a profiler's) before
        // it are passed over.
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0)
            && !line.starts_with("verdict listening on ")
            && !line.trim().is_empty()
            && std::env::var_os("VERDICT_BENCH_PROFILER").is_some()
        {
            line.clear();
        }
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("verdict did not say where it listens");
    let base = line
        .trim()
        .strip_prefix("verdict listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    (child, base)
}

/// An `AdmissionReview` body of `tests/all/reviews/` for a namespace.
pub fn review(name: &str, namespace: &str) -> String {
    let path = workspace().join("tests/all/reviews").join(name);
    std::fs::read_to_string(path)
        .unwrap()
        .replace("NAMESPACE", namespace)
}

/// Resident and peak resident memory of a process, in MiB (Linux); for the
/// benchmarks, which share these helpers.
#[allow(dead_code)]
pub fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time a process has used (user and system), from `/proc` (Linux);
/// for the benchmarks.
#[allow(dead_code)]
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the line, in clock ticks (100 a second).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// A `kube` client acting as the kubeconfig at `path` says; for the
/// benchmarks on a real control plane.
#[allow(dead_code)]
pub async fn kube_client(path: &Path) -> kube::Client {
    let config = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Say that a suite did not run, in one loud line written to the test
/// process's own standard error — outside the test's captured output, so
/// that it shows in every run, passing or not — and fail instead where CI
/// asks every suite to run: `VERDICT_REQUIRE_ALL`, or the suite's own
/// `require` variable (`VERDICT_REQUIRE_REAL_CLUSTER`, …).
pub fn skipped(notice: &str, require: Option<&str>) {
    use std::io::Write as _;
    for variable in std::iter::once("VERDICT_REQUIRE_ALL").chain(require) {
        if std::env::var_os(variable).is_some() {
            panic!("{notice}, and {variable} is set");
        }
    }
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{notice}");
}
