//! A full data folder, on a real filesystem that runs out of space (a
//! small tmpfs mounted for the test): every write a client is told
//! succeeded is on disk, and every write that is not is answered with the
//! store's 503 — failover overrides as well as tasks — and nothing of it
//! comes back after a kill.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::failover::{cluster, decision_until, send};
use crate::live::start_host;
use crate::serve::Server;

/// A tmpfs of `mib` MiB mounted on a temporary folder, unmounted when
/// dropped; `None` (said loudly) where this user may not mount one.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(mib: u32) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            crate::support::skipped(
                "FULL-DISK TEST SKIPPED: mounting a tmpfs needs root, and this user may not",
                None,
            );
            return None;
        }
        Some(Self { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fill what is left with one file, which [`Filler::free`] takes away.
    pub fn fill(&self) -> Filler {
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        loop {
            match file.write_all(&block) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        // The last partial block, byte by byte.
        while file.write_all(&[0]).is_ok() {}
        let _ = file.sync_all();
        Filler(path)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

pub struct Filler(PathBuf);

impl Filler {
    pub fn free(self) {
        std::fs::remove_file(&self.0).unwrap();
    }
}

#[test]
fn a_full_disk_answers_503_and_keeps_only_what_it_acknowledged() {
    let Some(disk) = Tmpfs::mount(96) else {
        return;
    };
    let cluster = cluster();
    let data = disk.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let start = |data: &Path| {
        let config = data.join("verdict.toml");
        std::fs::write(&config, crate::failover::CONFIG).unwrap();
        let server = start_host(&cluster, data, &["--config", config.to_str().unwrap()]);
        decision_until(&server, "n5", "every node judged", |d| {
            d["health"] == "healthy"
        });
        server
    };
    let overrides = |server: &Server| {
        let (code, view) = server.get("/v1/failover");
        assert_eq!(code, 200, "{view}");
        view["overrides"].clone()
    };
    let mut server = start(&data);
    let path = |n: &str| format!("/v1/failover/overrides/{n}");

    let filler = disk.fill();
    let (code, refused) = send(
        &server,
        "PUT",
        &path("n2"),
        json!({"kind": "offline", "by": "ana", "reason": "disk failing", "expires-in-s": 3600}),
    );
    assert_eq!(
        code, 503,
        "an override not saved is not acknowledged: {refused}"
    );
    assert_eq!(refused["error"]["code"], "store-failed", "{refused}");
    let (code, task) = send(
        &server,
        "POST",
        "/v1/tasks",
        json!({"app": "shop/web", "action": "restart"}),
    );
    assert_eq!(code, 503, "{task}");
    // What was refused is not served either.
    let served = overrides(&server);
    assert!(
        !served.to_string().contains("disk failing"),
        "a refused override is served: {served}"
    );
    let decision = decision_until(&server, "n2", "n2 judged", |_| true);
    assert!(decision["override"].is_null(), "{decision}");

    // With room again, the same request is saved, and survives a kill;
    // the refused one does not come back.
    filler.free();
    let (code, set) = send(
        &server,
        "PUT",
        &path("n3"),
        json!({"kind": "pause", "by": "ana", "reason": "maintenance", "expires-in-s": 3600}),
    );
    assert_eq!(code, 200, "{set}");
    server.kill();
    let server = start(&data);
    let kept = overrides(&server);
    assert!(kept.to_string().contains("maintenance"), "{kept}");
    assert!(!kept.to_string().contains("disk failing"), "{kept}");
}

#[test]
fn a_full_disk_stops_the_history_not_the_verdicts_and_loses_none_of_it() {
    use crate::live::{Cluster, deployment, pod};
    let Some(disk) = Tmpfs::mount(64) else {
        return;
    };
    let cluster = Cluster::start();
    let data = disk.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let server = start_host(&cluster, &data, &[]);
    server.app_until("shop/web", "running", crate::live::PATIENCE, |v| {
        v["stable"] == "running"
    });
    let ready = || server.get("/readyz").1;
    assert!(
        crate::support::wait_until(crate::live::PATIENCE, || ready()["history"]["ok"] == true)
            .is_some(),
        "{}",
        ready()
    );

    // The disk fills; the app crash-loops: its verdict is served, the
    // history says it cannot be written, on its routes and in /readyz.
    let filler = disk.fill();
    cluster.apply(deployment(1, 0));
    cluster.apply(pod("web-1", Some("CrashLoopBackOff")));
    server.app_until("shop/web", "panic", crate::live::PATIENCE, |v| {
        v["stable"] == "panic"
    });
    let failing =
        crate::support::wait_until(crate::live::PATIENCE, || ready()["history"]["ok"] == false);
    let said = ready();
    assert!(failing.is_some(), "{said}");
    assert!(
        said["history"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("full")),
        "{said}"
    );
    let (code, body) = server.get("/v1/apps/shop/web/history");
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["error"]["code"], "history-unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("wait in memory")),
        "{body}"
    );

    // Room again: what waited is written, the panic among it.
    filler.free();
    let written =
        crate::support::wait_until(crate::live::PATIENCE, || ready()["history"]["ok"] == true);
    assert!(written.is_some(), "{}", ready());
    let (code, page) = server.get("/v1/apps/shop/web/history");
    assert_eq!(code, 200, "{page}");
    assert_eq!(page["entries"][0]["status"], "panic", "{page}");
}
