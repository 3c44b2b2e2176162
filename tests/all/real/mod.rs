//! verdict against a real Kubernetes control plane (`testcluster/`):
//! kube-apiserver, the controller manager, the scheduler, etcd and KWOK,
//! built from their Go modules. Where the simulator and the real server
//! disagree, these tests are the judge.
//!
//! `cargo xtask test` builds the control plane, starts one shared instance
//! for these tests (`VERDICT_TEST_CLUSTER`: its folder) and says where its
//! programs are (`VERDICT_TESTCLUSTER_BIN`), for tests that need a control
//! plane of their own. Without them — no Go on the machine — each test says
//! in one loud line that it did not run, unless `VERDICT_REQUIRE_REAL_CLUSTER`
//! is set, when it fails.
//!
//! Tests share the cluster by working in namespaces of their own (the
//! KubeVirt CRDs one test installs serve everyone's); a test
//! that loses a node uses a node of its own, tainted so that no other
//! test's pods land on it.

mod apps;
mod chart;
mod delivery;
mod fleet;
mod follow;
mod image;
mod kubectl;
mod ownership;
mod replicas;
mod tasks;
mod vmdelivery;
mod vms;
mod webhook;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use verdict_testcluster::{Binaries, Cluster, Options};

use crate::serve::Server;
use crate::support::wait_until;

/// Bound on every wait for the cluster or a verdict to change. Generous:
/// the real control plane shares two cores with the other tests.
pub const PATIENCE: Duration = Duration::from_secs(60);

fn skip<T>(test: &str) -> Option<T> {
    let message = format!(
        "REAL-SERVER TEST NOT RUN: {test} needs the control plane (run `cargo xtask test` with Go 1.26 or newer)"
    );
    crate::support::skipped(&message, Some("VERDICT_REQUIRE_REAL_CLUSTER"));
    None
}

/// The shared control plane, or `None` (said loudly) when there is none.
pub fn shared(test: &str) -> Option<&'static Cluster> {
    static SHARED: OnceLock<Option<Cluster>> = OnceLock::new();
    let cluster = SHARED.get_or_init(|| {
        let dir = std::env::var_os("VERDICT_TEST_CLUSTER")?;
        Some(Cluster::attach(Path::new(&dir)).expect("the shared control plane is running"))
    });
    match cluster {
        Some(cluster) => Some(cluster),
        None => skip(test),
    }
}

/// A control plane of the test's own, in `dir`, stopped when dropped.
pub fn private(test: &str, dir: &Path, options: Options) -> Option<Cluster> {
    let Some(bin) = std::env::var_os("VERDICT_TESTCLUSTER_BIN") else {
        return skip(test);
    };
    let bin = Binaries::at(Path::new(&bin)).unwrap();
    Some(Cluster::start(&bin, dir, options).unwrap())
}

/// The `kubectl` built with the control plane (the same release as the
/// API server), for tests that call `kubectl` against the simulator too;
/// `None`, said loudly, where it was not built.
pub fn kubectl(test: &str) -> Option<PathBuf> {
    match std::env::var_os("VERDICT_TESTCLUSTER_BIN") {
        Some(bin) => Some(Path::new(&bin).join("kubectl")),
        None => skip(test),
    }
}

/// The default plugins.
pub fn plugins() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins")
}

/// `verdict serve` following the cluster with `kubeconfig`, with more
/// flags.
pub fn follow(kubeconfig: &Path, data: &Path, extra: &[&str]) -> Server {
    let mut flags = vec!["--kubeconfig", kubeconfig.to_str().unwrap()];
    flags.extend_from_slice(extra);
    Server::start_with(&plugins(), data, &flags)
}

/// The cluster's id as verdict takes it without `--cluster-id`: its
/// `kube-system` namespace's UID.
pub fn cluster_uid(cluster: &Cluster) -> String {
    cluster
        .kubectl_run(
            &[
                "get",
                "namespace",
                "kube-system",
                "-o",
                "jsonpath={.metadata.uid}",
            ],
            None,
        )
        .unwrap()
}

/// Wait until the app's verdict satisfies `check`; panics with the last
/// verdict seen when it never does.
pub fn until(server: &Server, app: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    server.app_until(app, what, PATIENCE, check)
}

/// Wait until `kubectl ARGS` prints what `check` accepts; its last output.
pub fn until_kubectl(
    cluster: &Cluster,
    args: &[&str],
    what: &str,
    check: impl Fn(&str) -> bool,
) -> String {
    let mut last = String::new();
    let took = wait_until(PATIENCE, || {
        last = cluster
            .kubectl_run(args, None)
            .unwrap_or_else(|e| e.to_string());
        check(&last)
    });
    assert!(
        took.is_some(),
        "{what}: never happened; kubectl printed {last}"
    );
    last
}

/// A Deployment of `replicas` pods labelled as app `name`, whose pods take
/// `ready_after` to become ready (KWOK's pod-ready stage), on nodes
/// labelled `node` when one is named (tolerating that node's taint).
pub fn deployment(namespace: &str, name: &str, replicas: u32, ready_after: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace,
            "labels": {"app.kubernetes.io/instance": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {
                "metadata": {
                    "labels": {"app.kubernetes.io/instance": name},
                    "annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": ready_after},
                },
                "spec": {"containers": [{"name": name, "image": format!("{name}:1"),
                    "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]},
            },
        },
    })
}

/// Pin a workload's pods to a test's own node (see [`own_node`]).
pub fn pinned(mut workload: Value, node: &str) -> Value {
    let spec = &mut workload["spec"]["template"]["spec"];
    spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    spec["tolerations"] = json!([{"key": "verdict.dev/test", "operator": "Equal", "value": node, "effect": "NoSchedule"}]);
    workload
}

/// A node of the test's own, tainted so that only pods that tolerate it
/// land there.
pub fn own_node(cluster: &Cluster, name: &str) {
    cluster.add_node(name).unwrap();
    cluster
        .kubectl_run(
            &[
                "taint",
                "node",
                name,
                &format!("verdict.dev/test={name}:NoSchedule"),
                "--overwrite",
            ],
            None,
        )
        .unwrap();
    until_kubectl(
        cluster,
        &[
            "get",
            "node",
            name,
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
        ],
        "the test's node ready",
        |s| s == "True",
    );
}

/// Delete a node of the test's own (at the end of a test).
pub fn remove_node(cluster: &Cluster, name: &str) {
    let _ = cluster.kubectl_run(&["delete", "node", name, "--wait=false"], None);
}

/// A name of this test run's own (namespaces, nodes): runs against one
/// long-lived control plane do not meet each other's objects.
pub fn unique(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}
