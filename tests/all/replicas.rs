//! Several replicas on the simulator: one elected leader acts, every
//! replica serves, a handover (SIGTERM or SIGKILL) loses and repeats
//! nothing, and two replicas asked at once admit one task. The same
//! scenarios run on the real API server in `real::replicas`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE};
use crate::serve::Server;
use crate::support::wait_until;

/// Lease timings short for tests: the Lease lasts 2 s, a leader without a
/// renewal stops acting after 1.5 s, everyone looks every 250 ms.
pub const LEASE: [&str; 6] = [
    "--lease-duration-ms",
    "2000",
    "--lease-renew-deadline-ms",
    "1500",
    "--lease-retry-ms",
    "250",
];

/// Replicas of one installation, each with its own data folder.
pub struct Group {
    pub replicas: Vec<Option<Server>>,
    pub names: Vec<String>,
    _data: Vec<tempfile::TempDir>,
}

impl Group {
    /// `n` replicas following the cluster of `cluster` (flags), sharing
    /// tasks and the Lease in `namespace`, with more flags.
    pub fn start(
        plugins: &Path,
        cluster: &[&str],
        namespace: &str,
        n: usize,
        extra: &[&str],
    ) -> Self {
        Self::start_each(plugins, vec![cluster.to_vec(); n], namespace, extra)
    }

    /// A replica for each of `clusters` (its flags to reach the cluster),
    /// sharing tasks and the Lease in `namespace`, with more flags.
    pub fn start_each(
        plugins: &Path,
        clusters: Vec<Vec<&str>>,
        namespace: &str,
        extra: &[&str],
    ) -> Self {
        let mut replicas = Vec::new();
        let mut names = Vec::new();
        let mut data = Vec::new();
        for (i, cluster) in clusters.into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let name = format!("replica-{i}");
            let mut flags: Vec<&str> = cluster;
            flags.extend([
                "--task-store",
                "kubernetes",
                "--tasks-namespace",
                namespace,
                "--leader-election",
                "--replica-name",
                &name,
            ]);
            flags.extend(LEASE);
            flags.extend_from_slice(extra);
            replicas.push(Some(Server::start_with(plugins, dir.path(), &flags)));
            names.push(name);
            data.push(dir);
        }
        let group = Self {
            replicas,
            names,
            _data: data,
        };
        for (i, server) in group.alive() {
            assert!(
                wait_until(PATIENCE, || server.get("/readyz").0 == 200).is_some(),
                "replica {i} never ready: {}",
                server.get("/readyz").1
            );
        }
        group
    }

    pub fn alive(&self) -> impl Iterator<Item = (usize, &Server)> {
        self.replicas
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    }

    /// The replicas that say they lead now.
    pub fn leaders(&self) -> Vec<usize> {
        self.alive()
            .filter(|(_, s)| s.get("/readyz").1["leader"] == true)
            .map(|(i, _)| i)
            .collect()
    }

    /// Wait until exactly one replica leads; which, and how long it took.
    pub fn leader_within(&self, limit: Duration) -> Option<(usize, Duration)> {
        let mut leader = None;
        let took = wait_until(limit, || match self.leaders().as_slice() {
            [one] => {
                leader = Some(*one);
                true
            }
            _ => false,
        })?;
        leader.map(|l| (l, took))
    }

    pub fn leader(&self) -> usize {
        self.leader_within(PATIENCE)
            .unwrap_or_else(|| panic!("never exactly one leader: {:?}", self.leaders()))
            .0
    }

    pub fn server(&self, i: usize) -> &Server {
        self.replicas[i].as_ref().expect("a running replica")
    }

    /// A replica other than `not`.
    pub fn other(&self, not: usize) -> usize {
        self.alive().map(|(i, _)| i).find(|i| *i != not).unwrap()
    }

    /// SIGTERM a replica and wait for it to exit.
    pub fn terminate(&mut self, i: usize) {
        let mut server = self.replicas[i].take().unwrap();
        server.terminate();
        let exited = wait_until(PATIENCE, || server.exited().is_some());
        assert!(exited.is_some(), "replica {i} did not exit on SIGTERM");
    }

    /// SIGKILL a replica.
    pub fn kill(&mut self, i: usize) {
        self.replicas[i].take().unwrap().kill();
    }
}

/// Reads from every replica, over and over, until stopped: how many were
/// made and which failed.
pub struct Readers {
    stop: Arc<AtomicBool>,
    made: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<Vec<String>>>,
}

impl Readers {
    /// Read `path` from each of `bases` in a thread of its own.
    pub fn start(bases: Vec<String>, path: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicUsize::new(0));
        let threads = bases
            .into_iter()
            .map(|base| {
                let (stop, made) = (Arc::clone(&stop), Arc::clone(&made));
                let url = format!("{base}{path}");
                std::thread::spawn(move || {
                    let client = reqwest::blocking::Client::new();
                    let mut failures = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        match client.get(&url).send() {
                            Ok(r) if r.status().is_success() => {}
                            Ok(r) => failures.push(format!("{url}: {}", r.status())),
                            Err(e) => failures.push(format!("{url}: {e}")),
                        }
                        made.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    failures
                })
            })
            .collect();
        Self {
            stop,
            made,
            threads,
        }
    }

    /// Stop; the reads made and the failures.
    pub fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self
            .threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        (self.made.load(Ordering::Relaxed), failures)
    }
}

/// Ask for a task; the answer's code and body.
pub fn ask(server: &Server, app: &str, action: &str, params: Value) -> (u16, Value) {
    let body = json!({"app": app, "action": action, "params": params, "requested-by": "test"});
    server.send("POST", "/v1/tasks", Some(&body.to_string()))
}

/// Wait until a task has finished on `server`; the task.
pub fn finished(server: &Server, id: &str) -> Value {
    let mut last = Value::Null;
    let done = wait_until(PATIENCE, || {
        last = server.get(&format!("/v1/tasks/{id}")).1;
        ["succeeded", "failed", "cancelled"].contains(&last["phase"].as_str().unwrap_or_default())
    });
    assert!(done.is_some(), "task {id} never finished: {last}");
    last
}

/// Two replicas asked for a task on the same app at the same moment,
/// `rounds` times (an app each round): exactly one of each pair is
/// admitted, the other refused because the first is still pending.
pub fn race_admissions(group: &Group, apps: &[String]) {
    let alive: Vec<usize> = group.alive().map(|(i, _)| i).collect();
    let (a, b) = (alive[0], alive[1]);
    for app in apps {
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
            let asks: Vec<_> = [a, b]
                .into_iter()
                .map(|i| {
                    let (server, barrier) = (group.server(i), Arc::clone(&barrier));
                    scope.spawn(move || {
                        barrier.wait();
                        ask(server, app, "scale", json!({"replicas": 2}))
                    })
                })
                .collect();
            asks.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let admitted = answers.iter().filter(|(code, _)| *code == 201).count();
        assert_eq!(admitted, 1, "{app}: {answers:#?}");
        let refused = answers.iter().find(|(code, _)| *code != 201).unwrap();
        assert_eq!(refused.0, 403, "{app}: {answers:#?}");
        let reason = refused.1["error"]["message"].as_str().unwrap_or_default();
        assert!(reason.contains("is still"), "{app}: {reason}");
    }
}

/// A Deployment the simulator keeps ready.
fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app.kubernetes.io/instance": name}},
        "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/instance": name}},
                "spec": {"containers": [{"name": "main", "image": "img:1"}]}}}
    })
}

/// The simulator with its controller playing the workloads of `apps`.
fn sim_cluster(apps: &[&str]) -> Cluster {
    let cluster = Cluster::start_with(verdict_sim::Options {
        controller: Some(Duration::from_millis(200)),
        ..verdict_sim::Options::default()
    });
    for app in apps {
        cluster.apply(deployment(app));
    }
    crate::tasks::define_tasks(&cluster);
    cluster
}

fn plugins() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins")
}

#[test]
fn one_replica_leads_every_replica_serves_and_a_handover_repeats_nothing() {
    let cluster = sim_cluster(&["cart", "api"]);
    let url = cluster.sim().url();
    let mut group = Group::start(
        &plugins(),
        &["--cluster-url", &url],
        "verdict-system",
        3,
        &["--execute-tasks"],
    );
    let first = group.leader();

    // Every replica lists the three, agrees on the leader, and says so in
    // its metrics.
    for (i, server) in group.alive() {
        let (code, answer) = server.get("/v1/replicas");
        assert_eq!(code, 200, "{answer}");
        let listed = answer["replicas"].as_array().unwrap();
        let names: Vec<&str> = listed.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["replica-0", "replica-1", "replica-2"], "{answer}");
        let leaders: Vec<&str> = listed
            .iter()
            .filter(|r| r["leader"] == true)
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(leaders, [group.names[first].as_str()], "{answer}");
        assert!(
            listed.iter().all(|r| r["policies"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.as_str().unwrap().starts_with("status: "))),
            "{answer}"
        );
        let metrics = reqwest::blocking::get(format!("{}/metrics", server.base))
            .unwrap()
            .text()
            .unwrap();
        let expected = if i == first {
            "verdict_leader 1"
        } else {
            "verdict_leader 0"
        };
        assert!(
            metrics.contains(expected),
            "replica {i}: {}",
            metrics
                .lines()
                .filter(|l| l.contains("leader"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // A task asked on a follower is carried out by the leader, under its
    // term.
    let follower = group.other(first);
    let (code, task) = ask(group.server(follower), "shop/cart", "restart", json!({}));
    assert_eq!(code, 201, "{task}");
    let done = finished(group.server(follower), task["id"].as_str().unwrap());
    assert_eq!(done["phase"], "succeeded", "{done}");
    assert_eq!(
        done["actor"]["holder"],
        group.names[first].as_str(),
        "{done}"
    );

    handovers(&mut group, "shop/api", "shop/cart", Duration::from_secs(4));
    let tasks = group.server(group.leader()).get("/v1/tasks?app=shop/api").1;
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 1, "{tasks}");
}

/// Two handovers, as both suites run them on three replicas: a restart of
/// `restart` asked on a follower just before the leader is SIGTERMed is
/// finished by the next leader, which takes over within a second; then that
/// one is SIGKILLed, the last replica leads within `kill_bound`, and a
/// scale of `scale` is carried out under its term. Reads are answered by
/// every replica not stopped throughout. The restart task, finished.
pub fn handovers(group: &mut Group, restart: &str, scale: &str, kill_bound: Duration) -> Value {
    let first = group.leader();
    let survivors: Vec<String> = group
        .alive()
        .filter(|(i, _)| *i != first)
        .map(|(_, s)| s.base.clone())
        .collect();
    let readers = Readers::start(survivors, "/v1/apps");
    let follower = group.other(first);
    let (code, task) = ask(group.server(follower), restart, "restart", json!({}));
    assert_eq!(code, 201, "{task}");

    // SIGTERM: the leader frees the Lease; another takes it at once.
    let stopped = Instant::now();
    group.terminate(first);
    let (second, _) = group
        .leader_within(PATIENCE)
        .expect("a new leader after SIGTERM");
    let handover = stopped.elapsed();
    assert!(
        handover < Duration::from_secs(2),
        "SIGTERM handover took {handover:?}"
    );
    let restarted = finished(group.server(second), task["id"].as_str().unwrap());
    assert_eq!(restarted["phase"], "succeeded", "{restarted}");
    assert_eq!(
        restarted["actor"]["holder"],
        group.names[second].as_str(),
        "{restarted}"
    );

    // SIGKILL: nobody frees the Lease; the last replica takes it once it
    // expires, within the lease duration and a retry or two.
    let killed_base = format!("{}/", group.server(second).base);
    let killed = Instant::now();
    group.kill(second);
    let (third, _) = group
        .leader_within(PATIENCE)
        .expect("a new leader after SIGKILL");
    let handover = killed.elapsed();
    assert!(handover < kill_bound, "SIGKILL handover took {handover:?}");
    let (code, task) = ask(group.server(third), scale, "scale", json!({"replicas": 2}));
    assert_eq!(code, 201, "{task}");
    let done = finished(group.server(third), task["id"].as_str().unwrap());
    assert_eq!(done["phase"], "succeeded", "{done}");
    assert_eq!(
        done["actor"]["holder"],
        group.names[third].as_str(),
        "{done}"
    );
    assert!(done["actor"]["term"].as_u64() > Some(0), "{done}");

    let (made, failures) = readers.finish();
    assert!(made > 50, "only {made} reads");
    // Reads failed only on the replica that was SIGKILLed, once it was.
    assert!(
        failures.iter().all(|f| f.starts_with(&killed_base)),
        "{failures:#?}"
    );
    restarted
}

#[test]
fn two_replicas_asked_at_once_admit_one_task() {
    let apps: Vec<String> = (0..8).map(|i| format!("app{i}")).collect();
    let names: Vec<&str> = apps.iter().map(String::as_str).collect();
    let cluster = sim_cluster(&names);
    let url = cluster.sim().url();
    let group = Group::start(
        &plugins(),
        &["--cluster-url", &url],
        "verdict-system",
        2,
        &[],
    );
    let apps: Vec<String> = apps.iter().map(|a| format!("shop/{a}")).collect();
    race_admissions(&group, &apps);
}

/// The failover test cluster, and `n` replicas enforcing failover on it
/// with the failover tests' short clocks (their configuration file's
/// folder, held while they run).
fn enforcing_failover(n: usize) -> (Cluster, Group, tempfile::TempDir) {
    let cluster = crate::failover::cluster();
    crate::tasks::define_tasks(&cluster);
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("verdict.toml");
    std::fs::write(&file, crate::failover::CONFIG).unwrap();
    let url = cluster.sim().url();
    let group = Group::start(
        &plugins(),
        &["--cluster-url", &url, "--config", file.to_str().unwrap()],
        "verdict-system",
        n,
        &["--failover-enforce"],
    );
    (cluster, group, config)
}

#[test]
fn failover_acts_once_across_a_handover() {
    let (cluster, mut group, _config) = enforcing_failover(3);
    let first = group.leader();
    let follower = group.other(first);
    crate::failover::lose(&cluster, "n2");

    // Followers stand by; the leader asks for the eviction.
    let standing =
        crate::failover::decision_until(group.server(follower), "n2", "standing by", |d| {
            crate::failover::state_of(d, "cordon").as_deref() == Some("standby")
        });
    assert!(
        standing["actions"].to_string().contains(&format!(
            "carried out by the leader, {}",
            group.names[first]
        )),
        "{standing}"
    );
    let asked = wait_until(PATIENCE, || {
        !crate::failover::failover_tasks(group.server(follower)).is_empty()
    });
    assert!(asked.is_some(), "the leader never asked for the eviction");

    // The leader goes; its successor takes up where it was, and by the time
    // the node is judged offline (many judgements later) it has asked for
    // no second eviction: the one there is, its predecessor's, succeeded.
    group.terminate(first);
    let second = group.leader();
    let decided = crate::failover::decision_until(group.server(second), "n2", "offline", |d| {
        d["health"] == "offline"
    });
    let evictions = || -> Vec<Value> {
        crate::failover::failover_tasks(group.server(second))
            .into_iter()
            .filter(|t| t["params"]["failover"]["workload"]["name"] == "web")
            .collect()
    };
    let succeeded = wait_until(PATIENCE, || {
        evictions().iter().any(|t| t["phase"] == "succeeded")
    });
    assert!(succeeded.is_some(), "{:#?}", evictions());
    assert_eq!(evictions().len(), 1, "{:#?}", evictions());
    // Where the successor still had the eviction to carry out, it took its
    // predecessor's task over, under its own name.
    let taken = &decided["taken"][crate::failover::EVICT_WEB];
    if !taken.is_null() {
        assert_eq!(taken["task"], evictions()[0]["id"], "{decided}");
        assert_eq!(
            taken["actor"]["holder"],
            group.names[second].as_str(),
            "{decided}"
        );
    }
    assert!(!crate::failover::pod_exists(&cluster, "web-2"));
}

#[test]
fn decisions_made_on_any_replica_count_on_every_replica() {
    let (cluster, group, _config) = enforcing_failover(2);
    let leader = group.leader();
    let (on_leader, on_follower) = (group.server(leader), group.server(group.other(leader)));

    // A status forced on the follower is the status on the leader, audited
    // there too; lifted on the leader, it is lifted on the follower.
    let (code, body) = on_follower.send(
        "PUT",
        "/v1/apps/shop/web/override",
        Some(&json!({"status": "stopped", "by": "ana", "reason": "maintenance"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    let forced = on_leader.app_until("shop/web", "forced on the leader", PATIENCE, |v| {
        v["stable"] == "stopped"
    });
    assert_eq!(forced["forced"]["by"], "ana", "{forced}");
    let history = on_leader.get("/v1/apps/shop/web/overrides/history").1;
    assert_eq!(history["changes"][0]["event"], "set", "{history}");
    let (code, body) = on_leader.send(
        "DELETE",
        "/v1/apps/shop/web/override?by=ana&reason=done",
        None,
    );
    assert_eq!(code, 200, "{body}");
    on_follower.app_until("shop/web", "lifted on the follower", PATIENCE, |v| {
        v["forced"].is_null() && v["stable"] != "stopped"
    });
    assert_eq!(on_follower.get("/v1/overrides").1["overrides"], json!([]));

    // An action approved on the follower is carried out by the leader.
    crate::failover::lose(&cluster, "n2");
    let release = crate::failover::RELEASE_DB;
    for server in [on_leader, on_follower] {
        crate::failover::decision_until(server, "n2", "the release awaits approval", |d| {
            crate::failover::state_of(d, release).as_deref() == Some("awaiting-approval")
        });
    }
    let (code, body) = crate::failover::send(
        on_follower,
        "POST",
        "/v1/failover/nodes/n2/approve",
        json!({"action": release, "by": "ana", "reason": "n2 is powered off"}),
    );
    assert_eq!(code, 200, "{body}");
    let released = crate::failover::decision_until(on_leader, "n2", "released", |d| {
        crate::failover::done(d, release)
    });
    assert_eq!(
        released["taken"][release]["actor"]["holder"],
        group.names[leader].as_str(),
        "{released}"
    );
    let records = on_leader.get("/v1/failover/history?node=n2&limit=100").1;
    assert!(
        records["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "approval" && r["by"] == "ana"),
        "{records}"
    );

    // A node forced on the follower is forced on the leader.
    let (code, body) = crate::failover::send(
        on_follower,
        "PUT",
        "/v1/failover/overrides/n3",
        json!({"kind": "pause", "by": "ana", "reason": "firmware"}),
    );
    assert_eq!(code, 200, "{body}");
    crate::failover::decision_until(on_leader, "n3", "paused on the leader", |d| {
        d["override"]["kind"] == "pause" && d["override"]["by"] == "ana"
    });
}

/// An app's history as one replica answers it: who answered, and the
/// entries' start times.
fn history_on(server: &Server, app: &str) -> (String, Vec<String>) {
    let response =
        reqwest::blocking::get(format!("{}/v1/apps/{app}/history", server.base)).unwrap();
    assert_eq!(response.status(), 200);
    let by = response.headers()["x-verdict-history"]
        .to_str()
        .unwrap()
        .to_string();
    let page: Value = response.json().unwrap();
    let at = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["at"].as_str().unwrap().to_string())
        .collect();
    (by, at)
}

#[test]
fn the_history_read_on_any_replica_is_the_leaders_and_survives_its_loss() {
    let cluster = sim_cluster(&["cart"]);
    let url = cluster.sim().url();
    let mut group = Group::start(
        &plugins(),
        &["--cluster-url", &url],
        "verdict-system",
        2,
        &[],
    );
    let leader = group.leader();
    let follower = group.other(leader);
    let leader_name = group.names[leader].clone();
    let recorded = wait_until(PATIENCE, || {
        !history_on(group.server(leader), "shop/cart").1.is_empty()
    });
    assert!(recorded.is_some(), "the leader recorded nothing");
    // The follower's answer is the leader's, said so.
    let (by, entries) = history_on(group.server(follower), "shop/cart");
    assert_eq!(by, leader_name);
    assert_eq!(entries, history_on(group.server(leader), "shop/cart").1);
    let (_, replicas) = group.server(follower).get("/v1/replicas");
    assert!(
        replicas["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("http://127.0.0.1:"))),
        "each replica advertises where it listens: {replicas}"
    );

    // The leader is lost: the other takes over, with the history it
    // recorded meanwhile, and answers itself.
    group.kill(leader);
    let took = wait_until(PATIENCE, || group.leaders() == [follower]);
    assert!(took.is_some(), "no handover");
    let (by, entries) = history_on(group.server(follower), "shop/cart");
    assert_eq!(by, group.names[follower]);
    assert!(!entries.is_empty(), "the new leader kept its own record");
}
