//! An app of KubeVirt virtual machines on the real API server: the CRDs of
//! KubeVirt's kinds are installed, and the test plays KubeVirt's part by
//! writing the objects' status through the status subresource, as
//! virt-controller would. verdict shows the VM's stage, and its tasks —
//! stop, start, migrate, restart, scale — change what KubeVirt reads (a
//! run strategy, an instance, a migration, a replica set's count) through
//! the real server.

use serde_json::{Value, json};
use verdict_testcluster::Cluster;

use super::{PATIENCE, follow, shared, unique, until, until_kubectl};
use crate::support::wait_until;
use crate::vms::ask;

/// Install KubeVirt's and CDI's CRDs (the ones the simulator serves) and
/// wait until they are served: once per cluster, the tests that need them
/// waiting for the first (two applies of one CRD at once conflict).
pub(super) fn install_kubevirt(cluster: &Cluster) {
    static INSTALLED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
    if installed.contains(&cluster.kubeconfig()) {
        return;
    }
    for crd in verdict_sim::kubevirt::crds() {
        cluster.apply(&crd.to_string()).unwrap();
        let name = crd["metadata"]["name"].as_str().unwrap();
        cluster
            .kubectl_run(
                &[
                    "wait",
                    "--for=condition=Established",
                    &format!("crd/{name}"),
                    "--timeout=60s",
                ],
                None,
            )
            .unwrap();
    }
    installed.push(cluster.kubeconfig());
}

/// `kubectl` in the test's namespace.
pub(super) struct Kube<'a> {
    pub cluster: &'a Cluster,
    pub ns: String,
}

impl Kube<'_> {
    pub fn run(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.ns.as_str()];
        all.extend_from_slice(args);
        self.cluster
            .kubectl_run(&all, None)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e}"))
    }

    pub fn get(&self, resource: &str, name: &str) -> Value {
        serde_json::from_str(&self.run(&["get", resource, name, "-o", "json"])).unwrap()
    }

    fn exists(&self, resource: &str, name: &str) -> bool {
        let mut all = vec!["-n", self.ns.as_str(), "get", resource, name];
        all.push("--ignore-not-found");
        !self
            .cluster
            .kubectl_run(&all, None)
            .unwrap_or_default()
            .trim()
            .is_empty()
    }

    /// Write an object's status, as its controller does.
    fn status(&self, resource: &str, name: &str, status: Value) {
        let patch = json!({ "status": status }).to_string();
        self.run(&[
            "patch",
            resource,
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ]);
    }

    fn uid(&self, resource: &str, name: &str) -> String {
        self.get(resource, name)["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Play virt-controller starting `vm`'s instance on `node`: the VMI,
    /// owned by the VM, running and ready; the VM says so.
    pub fn start_instance(&self, vm: &str, node: &str) {
        let uid = self.uid("virtualmachines.kubevirt.io", vm);
        self.cluster
            .apply(
                &json!({
                    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                    "metadata": {"name": vm, "namespace": self.ns,
                        "labels": {"app.kubernetes.io/instance": "db"},
                        "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                            "name": vm, "uid": uid, "controller": true}]},
                    "spec": {}
                })
                .to_string(),
            )
            .unwrap();
        let ready = json!([{"type": "Ready", "status": "True"}]);
        self.status(
            "virtualmachineinstances.kubevirt.io",
            vm,
            json!({"phase": "Running", "nodeName": node, "conditions": ready}),
        );
        self.status(
            "virtualmachines.kubevirt.io",
            vm,
            json!({"printableStatus": "Running", "ready": true, "conditions": ready}),
        );
    }
}

fn finished(server: &crate::serve::Server, id: &str) -> Value {
    crate::vms::finished_within(server, id, PATIENCE)
}

/// Wait until the VM's run strategy is `strategy`.
fn run_strategy_until(cluster: &Cluster, ns: &str, strategy: &str) {
    until_kubectl(
        cluster,
        &[
            "-n",
            ns,
            "get",
            "virtualmachines.kubevirt.io",
            "db-0",
            "-o",
            "jsonpath={.spec.runStrategy}",
        ],
        &format!("the run strategy set to {strategy}"),
        |out| out == strategy,
    );
}

#[test]
fn virtual_machines_on_the_real_api_server_show_their_stage_and_take_tasks() {
    let Some(cluster) =
        shared("virtual_machines_on_the_real_api_server_show_their_stage_and_take_tasks")
    else {
        return;
    };
    install_kubevirt(cluster);
    let ns = unique("real-vms");
    cluster.create_namespace(&ns, &[]).unwrap();
    let kube = Kube {
        cluster,
        ns: ns.clone(),
    };
    cluster
        .apply(
            &json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": "db-0", "namespace": ns, "labels": {"app.kubernetes.io/instance": "db"}},
                "spec": {"runStrategy": "Always",
                         "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "db"}}, "spec": {}}}
            })
            .to_string(),
        )
        .unwrap();
    kube.start_instance("db-0", "n1");

    let data = tempfile::tempdir().unwrap();
    let server = follow(&cluster.kubeconfig(), data.path(), &["--execute-tasks"]);
    let app = format!("{ns}/db");
    // The kinds are watched apart: wait for the VM with its instance.
    let running = until(&server, &app, "the VM running on n1", |v| {
        v["stable"] == "running"
            && v["ready_replicas"] == 1
            && v["objects"].as_array().is_some_and(|o| {
                o.iter()
                    .any(|o| o["kind"] == "VirtualMachine" && o["node"] == "n1")
            })
    });
    let vm = running["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "VirtualMachine")
        .cloned()
        .unwrap();
    assert_eq!(vm["stage"], "ready", "{running}");
    assert_eq!(vm["resource"], "kubevirt.io/v1/VirtualMachine");
    assert_eq!(vm["node"], "n1", "{running}");
    // KubeVirt's short names and columns: `kubectl get vm`, `get vmi`.
    let listed = kube.run(&["get", "vm,vmi"]);
    for column in ["STATUS", "READY", "PHASE", "NODENAME", "db-0"] {
        assert!(listed.contains(column), "{listed}");
    }

    // Stop: verdict halts the VM through its run strategy; KubeVirt's part
    // (played here) takes the instance away.
    let stop = ask(&server, &app, "stop", json!({}));
    run_strategy_until(cluster, &ns, "Halted");
    kube.run(&[
        "delete",
        "virtualmachineinstances.kubevirt.io",
        "db-0",
        "--wait=true",
    ]);
    kube.status(
        "virtualmachines.kubevirt.io",
        "db-0",
        json!({"printableStatus": "Stopped", "ready": false,
               "conditions": [{"type": "Ready", "status": "False", "reason": "VMINotExists"}]}),
    );
    let task = finished(&server, &stop);
    assert_eq!(task["phase"], "succeeded", "{task}");
    until(&server, &app, "stopped", |v| v["stable"] == "stopped");

    // Start: the run strategy back to Always, the instance started again
    // (on n2 this time).
    let start = ask(&server, &app, "start", json!({}));
    run_strategy_until(cluster, &ns, "Always");
    kube.start_instance("db-0", "n2");
    let task = finished(&server, &start);
    assert_eq!(task["phase"], "succeeded", "{task}");

    // Migrate: verdict creates the migration; its completion (played) moves
    // the instance, and the task follows the migration's phase.
    let migrate = ask(&server, &app, "migrate", json!({"instance": "db-0"}));
    let mut name = String::new();
    let created = wait_until(PATIENCE, || {
        let out = cluster
            .kubectl_run(
                &[
                    "-n",
                    &ns,
                    "get",
                    "virtualmachineinstancemigrations.kubevirt.io",
                    "-o",
                    "jsonpath={.items[*].metadata.name}",
                ],
                None,
            )
            .unwrap_or_default();
        name = out.trim().to_string();
        !name.is_empty()
    });
    assert!(created.is_some(), "no migration was created");
    let migration = kube.get("virtualmachineinstancemigrations.kubevirt.io", &name);
    assert_eq!(migration["spec"]["vmiName"], "db-0", "{migration}");
    until(&server, &app, "migrating shown", |v| {
        v["transitional"]["status"] == "migrating"
    });
    kube.status(
        "virtualmachineinstances.kubevirt.io",
        "db-0",
        json!({"nodeName": "n3"}),
    );
    kube.status(
        "virtualmachineinstancemigrations.kubevirt.io",
        &name,
        json!({"phase": "Succeeded"}),
    );
    let task = finished(&server, &migrate);
    assert_eq!(task["phase"], "succeeded", "{task}");
    let moved = until(&server, &app, "the instance on n3", |v| {
        v["objects"].as_array().is_some_and(|o| {
            o.iter()
                .any(|o| o["kind"] == "VirtualMachineInstance" && o["node"] == "n3")
        })
    });
    assert_eq!(moved["stable"], "running", "{moved}");

    // Restart: verdict deletes the instance (older than the task); the VM
    // starts a new one (played). An instance made in the task's own second
    // is not known to be older than it (the API server keeps creation times
    // to the second) and is left: the restart is asked once the instance's
    // second has passed.
    let created =
        kube.get("virtualmachineinstances.kubevirt.io", "db-0")["metadata"]["creationTimestamp"]
            .as_str()
            .map(|t| humantime::parse_rfc3339(t).unwrap())
            .unwrap();
    let past = wait_until(PATIENCE, || {
        std::time::SystemTime::now()
            .duration_since(created)
            .is_ok_and(|d| d >= std::time::Duration::from_secs(1))
    });
    assert!(past.is_some());
    let restart = ask(&server, &app, "restart", json!({}));
    let gone = wait_until(PATIENCE, || {
        !kube.exists("virtualmachineinstances.kubevirt.io", "db-0")
    });
    assert!(gone.is_some(), "the instance was not deleted");
    kube.start_instance("db-0", "n1");
    let task = finished(&server, &restart);
    assert_eq!(task["phase"], "succeeded", "{task}");

    // Scale a VMI replica set: verdict sets its count; the new instance
    // (played) joins and the task completes.
    let ready = json!([{"type": "Ready", "status": "True"}]);
    cluster
        .apply(
            &json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet",
                "metadata": {"name": "web", "namespace": ns, "labels": {"app.kubernetes.io/instance": "web"}},
                "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "web"}}, "spec": {}}}
            })
            .to_string(),
        )
        .unwrap();
    let set_uid = kube.uid("virtualmachineinstancereplicasets.kubevirt.io", "web");
    let replica = |name: &str| {
        cluster
            .apply(
                &json!({
                    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                    "metadata": {"name": name, "namespace": ns,
                        "labels": {"app.kubernetes.io/instance": "web"},
                        "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet",
                            "name": "web", "uid": set_uid, "controller": true}]},
                    "spec": {}
                })
                .to_string(),
            )
            .unwrap();
        kube.status(
            "virtualmachineinstances.kubevirt.io",
            name,
            json!({"phase": "Running", "nodeName": "n1", "conditions": ready}),
        );
    };
    replica("web-a");
    kube.status(
        "virtualmachineinstancereplicasets.kubevirt.io",
        "web",
        json!({"replicas": 1, "readyReplicas": 1}),
    );
    let web = format!("{ns}/web");
    until(&server, &web, "the replica set's one instance", |v| {
        v["stable"] == "running" && v["expected_replicas"] == 1
    });
    let scale = ask(&server, &web, "scale", json!({"replicas": 2}));
    until_kubectl(
        cluster,
        &[
            "-n",
            &ns,
            "get",
            "virtualmachineinstancereplicasets.kubevirt.io",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        "the replica set scaled to 2",
        |out| out == "2",
    );
    replica("web-b");
    kube.status(
        "virtualmachineinstancereplicasets.kubevirt.io",
        "web",
        json!({"replicas": 2, "readyReplicas": 2}),
    );
    let task = finished(&server, &scale);
    assert_eq!(task["phase"], "succeeded", "{task}");
    until(&server, &web, "2/2", |v| {
        v["stable"] == "running" && v["ready_replicas"] == 2 && v["expected_replicas"] == 2
    });
    let _ = cluster.kubectl_run(&["delete", "namespace", &ns, "--wait=false"], None);
}
