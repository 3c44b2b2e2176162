//! Crash safety of the SQLite task store: the host is killed (SIGKILL)
//! while tasks are being created and updated; after a restart every write
//! it acknowledged is there and the database is intact.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE, start_host};
use crate::support::wait_until;

/// What the host acknowledged: task id → (revision, phase).
type Acknowledged = Arc<Mutex<BTreeMap<String, (u64, String)>>>;

/// Create tasks and report on them as fast as the host answers, until the
/// host is gone or `stop` is set.
fn writer(base: String, thread: usize, acked: Acknowledged, stop: Arc<AtomicBool>) {
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()
        .unwrap();
    let send = |method: reqwest::Method, path: &str, body: Value| -> Option<(u16, Value)> {
        let response = client
            .request(method, format!("{base}{path}"))
            .json(&body)
            .send()
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().ok()?))
    };
    let record = |task: &Value| {
        acked.lock().unwrap().insert(
            task["id"].as_str().unwrap().to_string(),
            (
                task["revision"].as_u64().unwrap(),
                task["phase"].as_str().unwrap().to_string(),
            ),
        );
    };
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let app = format!("shop/crash-{thread}-{n}");
        let body = json!({"app": app, "action": "create", "params": {"image": "crash:1"}});
        let Some((201, task)) = send(reqwest::Method::POST, "/v1/tasks", body) else {
            return;
        };
        record(&task);
        let path = format!("/v1/tasks/{}", task["id"].as_str().unwrap());
        for report in [
            json!({"steps": [{"name": "prepare-environment", "phase": "running"}]}),
            json!({"steps": [{"name": "prepare-environment", "phase": "succeeded"}], "message": "prepared"}),
            json!({"phase": "failed", "message": "stopped by the test"}),
        ] {
            match send(reqwest::Method::PATCH, &path, report) {
                Some((200, task)) => record(&task),
                _ => return,
            }
        }
    }
}

#[test]
fn acknowledged_task_writes_survive_a_kill() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let mut server = start_host(&cluster, data.path(), &[]);
    let acked: Acknowledged = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|thread| {
            let (base, acked, stop) = (server.base.clone(), Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || writer(base, thread, acked, stop))
        })
        .collect();
    // Kill while the writers are busy.
    let busy = wait_until(PATIENCE, || acked.lock().unwrap().len() >= 60);
    assert!(busy.is_some(), "the writers never got going");
    server.kill();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    let server = start_host(&cluster, data.path(), &[]);
    let mut stored = BTreeMap::new();
    for task in server.get("/v1/tasks").1["tasks"].as_array().unwrap() {
        stored.insert(task["id"].as_str().unwrap().to_string(), task.clone());
    }
    for (id, (revision, phase)) in &acked {
        let task = stored
            .get(id)
            .unwrap_or_else(|| panic!("acknowledged task {id} lost"));
        let kept = task["revision"].as_u64().unwrap();
        // A write may have landed without its answer arriving; none that
        // was answered may be missing.
        assert!(
            kept >= *revision,
            "{id}: revision {kept} stored, {revision} acknowledged"
        );
        if kept == *revision {
            assert_eq!(task["phase"], phase.as_str(), "{id}");
        }
    }
    drop(server);
    let store = verdict::tasks::sqlite::SqliteStore::open(&data.path().join("tasks.db")).unwrap();
    assert_eq!(store.integrity().unwrap(), "ok");
    assert!(store.load().unwrap().len() >= acked.len());
}
