//! Several replicas on the real API server: the Lease election, SIGTERM
//! and SIGKILL handovers, one task admitted of two asked at once, a leader
//! cut off from the API server that stops acting before another may take
//! over, and a deposed leader's late write refused by the Task store.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use verdict::leader::{Leadership, Term};
use verdict::tasks::kube::KubeStore;
use verdict::tasks::model::{NewTask, TaskPatch};
use verdict::tasks::{Admitted, Store, Tasks};
use verdict_testcluster::Cluster;

use super::tasks::install_task_crd;
use super::{PATIENCE, deployment, plugins, shared, unique};
use crate::replicas::{Group, ask, finished, handovers, race_admissions};
use crate::support::wait_until;

/// A namespace for the tasks and Lease, and one for the apps, with
/// Deployments of `apps` in it.
fn namespaces(cluster: &Cluster, test: &str, apps: &[&str]) -> (String, String) {
    install_task_crd(cluster);
    let (tasks_ns, app_ns) = (unique(&format!("{test}-t")), unique(&format!("{test}-a")));
    cluster.create_namespace(&tasks_ns, &[]).unwrap();
    cluster.create_namespace(&app_ns, &[]).unwrap();
    for app in apps {
        cluster
            .apply(&deployment(&app_ns, app, 1, "0s").to_string())
            .unwrap();
    }
    (tasks_ns, app_ns)
}

/// A Deployment's `metadata.generation`: one more for each change of its
/// spec.
fn generation(cluster: &Cluster, namespace: &str, name: &str) -> u64 {
    cluster
        .kubectl_run(
            &[
                "get",
                "deployment",
                name,
                "-n",
                namespace,
                "-o",
                "jsonpath={.metadata.generation}",
            ],
            None,
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn replicas_on_the_real_api_server_elect_one_leader_and_hand_over_once() {
    let test = "replicas_on_the_real_api_server_elect_one_leader_and_hand_over_once";
    let Some(cluster) = shared(test) else {
        return;
    };
    let (tasks_ns, app_ns) = namespaces(cluster, "real-replicas", &["web", "api"]);
    let kubeconfig = cluster.kubeconfig();
    let mut group = Group::start(
        &plugins(),
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &tasks_ns,
        3,
        &["--execute-tasks"],
    );
    let first = group.leader();
    // The Lease names the leader.
    let holder = cluster
        .kubectl_run(
            &[
                "get",
                "lease",
                "verdict-leader",
                "-n",
                &tasks_ns,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
            None,
        )
        .unwrap();
    assert_eq!(holder, group.names[first]);
    let listed = group.server(group.other(first)).get("/v1/replicas").1;
    assert_eq!(listed["replicas"].as_array().unwrap().len(), 3, "{listed}");

    // The restart around the first handover is carried out once: the
    // Deployment's spec changes once.
    let before = generation(cluster, &app_ns, "api");
    handovers(
        &mut group,
        &format!("{app_ns}/api"),
        &format!("{app_ns}/web"),
        Duration::from_secs(5),
    );
    assert_eq!(generation(cluster, &app_ns, "api"), before + 1);
}

#[test]
fn two_replicas_on_the_real_api_server_asked_at_once_admit_one_task() {
    let test = "two_replicas_on_the_real_api_server_asked_at_once_admit_one_task";
    let Some(cluster) = shared(test) else {
        return;
    };
    let names: Vec<String> = (0..6).map(|i| format!("app{i}")).collect();
    let apps: Vec<&str> = names.iter().map(String::as_str).collect();
    let (tasks_ns, app_ns) = namespaces(cluster, "real-race", &apps);
    let kubeconfig = cluster.kubeconfig();
    let group = Group::start(
        &plugins(),
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &tasks_ns,
        2,
        &[],
    );
    let apps: Vec<String> = names.iter().map(|a| format!("{app_ns}/{a}")).collect();
    race_admissions(&group, &apps);
}

/// A TCP proxy to the API server that can be cut: open connections are
/// shut and new ones closed at once, as a network partition does.
struct Proxy {
    addr: String,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let upstream = upstream.to_string();
        let (cutting, opened) = (Arc::clone(&cut), Arc::clone(&open));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cutting.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                {
                    let mut open = opened.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let mut buffer = [0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buffer) {
                            if n == 0 || to.write_all(&buffer[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Self { addr, cut, open }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// The cluster's kubeconfig, pointed at `proxy`.
fn proxied_kubeconfig(cluster: &Cluster, proxy: &Proxy, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(cluster.kubeconfig()).unwrap();
    let upstream = cluster.server();
    let text = text.replace(&upstream, &format!("https://{}", proxy.addr));
    let path = dir.join(format!("kubeconfig-{}", proxy.addr.replace(':', "-")));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_leader_cut_off_from_the_api_server_stops_acting_before_another_takes_over() {
    let test = "a_leader_cut_off_from_the_api_server_stops_acting_before_another_takes_over";
    let Some(cluster) = shared(test) else {
        return;
    };
    let (tasks_ns, app_ns) = namespaces(cluster, "real-partition", &["web"]);
    let upstream = cluster.server().trim_start_matches("https://").to_string();
    let configs = tempfile::tempdir().unwrap();
    // Each replica reaches the API server through a proxy of its own.
    let proxies: Vec<Proxy> = (0..3).map(|_| Proxy::start(&upstream)).collect();
    let kubeconfigs: Vec<String> = proxies
        .iter()
        .map(|p| {
            proxied_kubeconfig(cluster, p, configs.path())
                .to_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let clusters = kubeconfigs
        .iter()
        .map(|k| vec!["--kubeconfig", k.as_str()])
        .collect();
    let group = Group::start_each(&plugins(), clusters, &tasks_ns, &["--execute-tasks"]);
    let leader = group.leader();

    // Cut the leader off: it stops acting within the renew deadline, and
    // before another replica may take the Lease (its duration after the
    // last renewal).
    let cut = Instant::now();
    proxies[leader].cut();
    let mut stopped_at = None;
    let mut taken_at = None;
    let observed = wait_until(PATIENCE, || {
        if stopped_at.is_none() && group.server(leader).get("/readyz").1["leader"] == false {
            stopped_at = Some(cut.elapsed());
        }
        if taken_at.is_none()
            && group
                .alive()
                .any(|(i, s)| i != leader && s.get("/readyz").1["leader"] == true)
        {
            taken_at = Some(cut.elapsed());
        }
        stopped_at.is_some() && taken_at.is_some()
    });
    assert!(
        observed.is_some(),
        "stopped {stopped_at:?}, taken {taken_at:?}"
    );
    let (stopped_at, taken_at) = (stopped_at.unwrap(), taken_at.unwrap());
    assert!(
        stopped_at < taken_at,
        "the cut-off leader stopped at {stopped_at:?}, another took over at {taken_at:?}"
    );
    assert!(
        stopped_at <= Duration::from_millis(2500),
        "stopped only after {stopped_at:?}"
    );
    // The cut-off replica still answers reads from what it holds.
    assert_eq!(group.server(leader).get("/v1/apps").0, 200);

    // A task asked meanwhile is carried out once, by the new leader; when
    // the old one is back, it only follows.
    let new = group.leaders()[0];
    let app = format!("{app_ns}/web");
    let before = generation(cluster, &app_ns, "web");
    let (code, task) = ask(group.server(new), &app, "restart", json!({}));
    assert_eq!(code, 201, "{task}");
    let done = finished(group.server(new), task["id"].as_str().unwrap());
    assert_eq!(done["phase"], "succeeded", "{done}");
    assert_eq!(done["actor"]["holder"], group.names[new].as_str(), "{done}");
    proxies[leader].heal();
    let follows = wait_until(PATIENCE, || {
        let standing = group.server(leader).get("/readyz").1;
        standing["leadership"]["holder"] == group.names[new].as_str() && standing["leader"] == false
    });
    assert!(
        follows.is_some(),
        "{}",
        group.server(leader).get("/readyz").1
    );
    assert_eq!(generation(cluster, &app_ns, "web"), before + 1);
}

/// A client of the cluster's admin.
async fn client(cluster: &Cluster) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(cluster.kubeconfig()).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// The Task store in `namespace`, as a replica holds it.
async fn store(cluster: &Cluster, namespace: &str) -> Store {
    Store::Kube(Box::new(KubeStore::new(client(cluster).await, namespace)))
}

fn allowed() -> Admitted {
    Admitted {
        approval: None,
        defaults: serde_json::Map::new(),
        warnings: Vec::new(),
        plan: Vec::new(),
        policy: None,
        failure: None,
    }
}

#[test]
fn a_deposed_leaders_late_write_to_a_task_is_refused() {
    let test = "a_deposed_leaders_late_write_to_a_task_is_refused";
    let Some(cluster) = shared(test) else {
        return;
    };
    let (tasks_ns, _) = namespaces(cluster, "real-fencing", &[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let old = Term::elected("a", 4);
    let new = Term::elected("b", 5);
    let request: NewTask =
        serde_json::from_value(json!({"app": "shop/web", "action": "restart"})).unwrap();
    let progress = TaskPatch {
        progress: Some(10),
        ..TaskPatch::default()
    };
    runtime.block_on(async {
        // Replica A asks for the task and acts on it in term 4.
        let a_store = store(cluster, &tasks_ns).await;
        let a = Arc::new(Tasks::open(a_store.clone(), 100, None, None).await.unwrap());
        let task = a
            .create(request, |_| async { Ok(allowed()) })
            .await
            .unwrap();
        a.claim(&task.id, &old).await.unwrap();
        // Replica B leads in term 5 and takes the task over.
        let b = Tasks::open(store(cluster, &tasks_ns).await, 100, None, None)
            .await
            .unwrap();
        let taken = b.claim(&task.id, &new).await.unwrap();
        assert_eq!(taken.actor, Some(new.clone()));

        // A has not seen that: its write, on the revision it knows, is
        // refused by the API server's compare-and-swap.
        let stale = a.patch_as(&task.id, &progress, &old).await.unwrap_err();
        assert!(stale.to_string().contains("changed meanwhile"), "{stale}");
        // A has seen it (following the store): its write under the earlier
        // term is refused by the term on the record.
        let Store::Kube(kube_store) = a_store else {
            unreachable!()
        };
        let following = tokio::spawn(kube_store.follow(Arc::clone(&a)));
        let seen = tokio::time::timeout(PATIENCE, async {
            while a.get(&task.id).and_then(|t| t.actor) != Some(new.clone()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(seen.is_ok(), "A never saw B's claim");
        let deposed = a.patch_as(&task.id, &progress, &old).await.unwrap_err();
        assert!(
            deposed.to_string().contains("written by b in term 5"),
            "{deposed}"
        );
        following.abort();
        // The record is as the new leader left it, and its writes go on.
        let stored = store(cluster, &tasks_ns)
            .await
            .of_app("shop/web")
            .await
            .unwrap();
        assert_eq!(stored[0].actor, Some(new.clone()));
        assert_eq!(stored[0].progress, 0);
        let moved = b.patch_as(&task.id, &progress, &new).await.unwrap();
        assert_eq!(moved.progress, 10);
    });
}

#[test]
fn a_fenced_client_writes_only_while_its_replica_leads() {
    let test = "a_fenced_client_writes_only_while_its_replica_leads";
    let Some(cluster) = shared(test) else {
        return;
    };
    let namespace = unique("real-fenced");
    cluster.create_namespace(&namespace, &[]).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = client(cluster).await;
        let map = |name: &str| -> k8s_openapi::api::core::v1::ConfigMap {
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
        };
        let follower = Leadership::elected("follower").fenced(client.clone());
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(follower, &namespace);
        // Reads pass; writes are refused before they leave the process.
        assert!(api.list(&Default::default()).await.is_ok());
        let refused = api
            .create(&Default::default(), &map("no"))
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("does not lead"), "{refused}");
        let solo = Leadership::solo("alone").fenced(client.clone());
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(solo, &namespace);
        api.create(&Default::default(), &map("yes")).await.unwrap();
        let stored =
            kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, &namespace);
        assert!(stored.get_opt("no").await.unwrap().is_none());
        assert!(stored.get_opt("yes").await.unwrap().is_some());
    });
}
