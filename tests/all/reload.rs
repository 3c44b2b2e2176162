//! Hot reload under load: callers never see a failure or a half-swapped
//! answer while the plugin file is replaced, broken and replaced again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use verdict::plugins::{World, watch};
use verdict::watch::{Watcher, watch_folder};

use crate::support::{Fixture, NOW, app_input, install_by_rename, test_plugin, wait_until};

/// Bound on any one wait; the figure that matters is printed.
const PATIENCE: Duration = Duration::from_secs(20);

/// A plugin folder serving `stamp-a` as `status`, watched.
fn watched_with_stamp_a() -> (Fixture, Watcher) {
    let fixture = Fixture::new();
    fixture.install("status", &test_plugin("stamp-a"));
    fixture.registry.reload();
    let watcher = watch(
        Arc::clone(&fixture.registry),
        fixture.dir.path(),
        Duration::from_millis(100),
    )
    .unwrap();
    (fixture, watcher)
}

#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    failed: AtomicU64,
    torn: AtomicU64,
}

/// Threads calling the status policy over and over, tallying failures and
/// answers that mix two versions, until finished.
struct Callers {
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Callers {
    fn start(registry: &Arc<verdict::plugins::Registry>, threads: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let workers = (0..threads)
            .map(|i| {
                let (registry, stop, tally) =
                    (Arc::clone(registry), Arc::clone(&stop), Arc::clone(&tally));
                std::thread::spawn(move || {
                    let input = app_input(&format!("app-{i}"));
                    while !stop.load(Ordering::Relaxed) {
                        tally.calls.fetch_add(1, Ordering::Relaxed);
                        let answer = registry
                            .policy(World::Status)
                            .map_err(|e| e.to_string())
                            .and_then(|slot| {
                                slot.call(|v| v.evaluate(&v.context(NOW), &input))
                                    .map_err(|e| e.to_string())
                            });
                        match answer {
                            Err(_) => {
                                tally.failed.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(answer) => {
                                // Every field a stamp plugin fills carries its
                                // stamp, which is also its version.
                                let v = &answer.value;
                                let stamp = &answer.version.info().version;
                                if &v.display.text != stamp
                                    || &v.display.status != stamp
                                    || &v.stable_reason != stamp
                                {
                                    tally.torn.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            tally,
            workers,
        }
    }

    /// Stop; calls made, failed and torn.
    fn finish(self) -> (u64, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            worker.join().unwrap();
        }
        let t = &self.tally;
        (
            t.calls.load(Ordering::Relaxed),
            t.failed.load(Ordering::Relaxed),
            t.torn.load(Ordering::Relaxed),
        )
    }
}

/// How a new file reaches the folder.
enum Write {
    Rename,
    InPlace,
}

#[test]
fn plugins_swap_under_load_without_a_failed_call() {
    let (fixture, _watcher) = watched_with_stamp_a();
    let callers = Callers::start(&fixture.registry, 4);

    let serving = |registry: &verdict::plugins::Registry| {
        registry
            .get("status")
            .and_then(|s| s.current())
            .map(|v| v.info().version.clone())
    };
    let path = fixture.path("status");
    let bytes = |name: &str| std::fs::read(test_plugin(name)).unwrap();
    let mut latencies = Vec::new();

    let steps: [(&str, Vec<u8>, Write, Option<&str>); 6] = [
        ("b by rename", bytes("stamp-b"), Write::Rename, Some("b")),
        (
            "garbage in place",
            b"not a component".to_vec(),
            Write::InPlace,
            None,
        ),
        ("c in place", bytes("stamp-c"), Write::InPlace, Some("c")),
        (
            "half of a",
            bytes("stamp-a")[..30_000].to_vec(),
            Write::InPlace,
            None,
        ),
        ("a in place", bytes("stamp-a"), Write::InPlace, Some("a")),
        ("b by rename", bytes("stamp-b"), Write::Rename, Some("b")),
    ];
    for (what, content, write, expect) in steps {
        let before = serving(&fixture.registry);
        match write {
            Write::Rename => install_by_rename(&path, &content),
            Write::InPlace => std::fs::write(&path, &content).unwrap(),
        }
        match expect {
            Some(stamp) => {
                let took = wait_until(PATIENCE, || {
                    serving(&fixture.registry).as_deref() == Some(stamp)
                })
                .unwrap_or_else(|| panic!("{what}: version {stamp} never served"));
                latencies.push(took);
                println!(
                    "{what}: serving {stamp} {:.0} ms after the write",
                    took.as_secs_f64() * 1e3
                );
            }
            None => {
                let hash = hex::encode(Sha256::digest(&content));
                let slot = fixture.registry.get("status").unwrap();
                let rejected = wait_until(PATIENCE, || {
                    fixture.registry.statuses().iter().any(|s| {
                        s.name == slot.name()
                            && s.last_error
                                .as_ref()
                                .is_some_and(|e| e.hash.as_deref() == Some(hash.as_str()))
                    })
                });
                assert!(rejected.is_some(), "{what}: never rejected");
                assert_eq!(
                    serving(&fixture.registry),
                    before,
                    "{what}: the old version must keep serving"
                );
            }
        }
    }

    let (calls, failed, torn) = callers.finish();
    println!(
        "{calls} calls, slowest swap {:.0} ms",
        latencies.iter().max().unwrap().as_secs_f64() * 1e3
    );
    assert!(calls > 100, "the callers made only {calls} calls");
    assert_eq!(failed, 0, "failed calls");
    assert_eq!(torn, 0, "answers mixing two versions");
}

#[test]
fn reading_the_folder_is_not_a_change() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.wasm"), b"one").unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    let folder = dir.path().to_path_buf();
    // As a reload does: list the folder and read every file.
    let _watcher = watch_folder(
        dir.path(),
        Duration::from_millis(50),
        "test-watch",
        move || {
            counted.fetch_add(1, Ordering::SeqCst);
            for entry in std::fs::read_dir(&folder).unwrap() {
                let _ = std::fs::read(entry.unwrap().path());
            }
        },
    )
    .unwrap();
    std::fs::write(dir.path().join("b.wasm"), b"two").unwrap();
    assert!(
        wait_until(PATIENCE, || calls.load(Ordering::SeqCst) >= 1).is_some(),
        "a new file was not noticed"
    );
    // Its own reading, and anyone else's, sets off nothing more: ten
    // debounce periods pass without another call.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::read(entry.unwrap().path()).unwrap();
    }
    let again = wait_until(Duration::from_millis(500), || {
        calls.load(Ordering::SeqCst) >= 2
    });
    assert_eq!(again, None, "reading the folder was taken for a change");
    // A change after that is still one.
    std::fs::write(dir.path().join("a.wasm"), b"three").unwrap();
    assert!(
        wait_until(PATIENCE, || calls.load(Ordering::SeqCst) >= 2).is_some(),
        "a rewritten file was not noticed"
    );
}

#[test]
fn a_deleted_file_is_unloaded_by_the_watch() {
    let (fixture, _watcher) = watched_with_stamp_a();
    std::fs::remove_file(fixture.path("status")).unwrap();
    assert!(
        wait_until(PATIENCE, || fixture.registry.policy(World::Status).is_err()).is_some(),
        "the plugin was not unloaded"
    );
}

#[test]
fn a_file_named_for_a_world_must_implement_it() {
    use crate::support::default_plugin;
    let fixture = Fixture::new();
    fixture.install("status", &default_plugin("status"));
    fixture.registry.reload();
    let serving = fixture.registry.policy(World::Status).unwrap();
    let hash = serving.current().unwrap().info().hash.clone();

    // A failover component dropped in as status.wasm is refused with the
    // reason, and the status policy keeps serving.
    fixture.install("status", &default_plugin("failover"));
    let report = fixture.registry.reload();
    assert_eq!(report.rejected.len(), 1, "{report:?}");
    let rejected = &report.rejected[0];
    assert_eq!(
        (rejected.plugin.as_str(), rejected.kind),
        ("status", "wrong-world")
    );
    assert!(rejected.still_serving);
    assert!(
        rejected
            .error
            .contains("named for the status-policy world but implements failover-policy"),
        "{}",
        rejected.error
    );
    let still = fixture.registry.policy(World::Status).unwrap();
    assert_eq!(still.current().unwrap().info().hash, hash);
    assert!(fixture.registry.policy(World::Failover).is_err());

    // Under a name of its own, the same component serves its world.
    fixture.install("my-failover", &default_plugin("failover"));
    fixture.registry.reload();
    assert!(fixture.registry.policy(World::Failover).is_ok());
}

/// A folder as the kubelet writes a ConfigMap volume: the files live in a
/// timestamped folder, `..data` links to it, and each key is a link
/// through `..data`. An update writes a new timestamped folder, points
/// `..data_tmp` at it, renames that over `..data` and removes the old one.
struct ConfigMapVolume {
    dir: std::path::PathBuf,
    generation: u32,
}

impl ConfigMapVolume {
    fn new(dir: &std::path::Path, key: &str, content: &[u8]) -> Self {
        let mut volume = Self {
            dir: dir.to_path_buf(),
            generation: 0,
        };
        volume.update(key, content);
        std::os::unix::fs::symlink(format!("..data/{key}"), dir.join(key)).unwrap();
        volume
    }

    fn update(&mut self, key: &str, content: &[u8]) {
        self.generation += 1;
        let old = std::fs::read_link(self.dir.join("..data")).ok();
        let timestamped = format!("..2026_12_01_00_00_00.{:09}", self.generation);
        std::fs::create_dir(self.dir.join(&timestamped)).unwrap();
        std::fs::write(self.dir.join(&timestamped).join(key), content).unwrap();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&timestamped, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if let Some(old) = old {
            std::fs::remove_dir_all(self.dir.join(old)).unwrap();
        }
    }
}

#[test]
fn a_configmap_volume_swap_is_noticed_under_load() {
    let fixture = Fixture::new();
    let bytes = |name: &str| std::fs::read(test_plugin(name)).unwrap();
    let mut volume = ConfigMapVolume::new(fixture.dir.path(), "status.wasm", &bytes("stamp-a"));
    fixture.registry.reload();
    let _watcher = watch(
        Arc::clone(&fixture.registry),
        fixture.dir.path(),
        Duration::from_millis(100),
    )
    .unwrap();
    let serving = |registry: &verdict::plugins::Registry| {
        registry
            .get("status")
            .and_then(|s| s.current())
            .map(|v| v.info().version.clone())
    };
    assert_eq!(serving(&fixture.registry).as_deref(), Some("a"));

    let callers = Callers::start(&fixture.registry, 3);

    // Each update of the ConfigMap, as the kubelet makes it, serves.
    for stamp in ["b", "c", "a", "b", "c", "a"] {
        volume.update("status.wasm", &bytes(&format!("stamp-{stamp}")));
        let took = wait_until(PATIENCE, || {
            serving(&fixture.registry).as_deref() == Some(stamp)
        });
        let took = took.unwrap_or_else(|| panic!("version {stamp} never served"));
        println!(
            "..data swapped to {stamp}: serving {:.0} ms later",
            took.as_secs_f64() * 1e3
        );
    }
    let (calls, failed, torn) = callers.finish();
    assert!(calls > 100, "the callers made only {calls} calls");
    assert_eq!(failed, 0, "failed calls");
    assert_eq!(torn, 0, "torn answers");
    // The timestamped folders and links are not plugins.
    let names: Vec<String> = fixture
        .registry
        .statuses()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["status"]);
}
