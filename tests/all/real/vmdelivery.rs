//! Seed 002's delivery resources on the real API server: the chart's
//! `VMReplicaSet` and `VMDeployment` CRDs are served, fill in their
//! defaults, refuse what cannot be carried out (no instance allowed out of
//! ready when there is no surge, a step both a pause and a count, a
//! deployment naming no set), and print like a Deployment in `kubectl get`.

use serde_json::{Value, json};

use super::tasks::install_crd;
use super::vms::Kube;
use super::{PATIENCE, follow, shared, unique};
use crate::support::wait_until;

/// The chart's VMReplicaSet, VMDeployment and Server CRDs, served.
pub(super) fn install_delivery_crds(cluster: &verdict_testcluster::Cluster) {
    install_crd(
        cluster,
        "vmreplicaset-crd.yaml",
        "vmreplicasets.verdict.dev",
    );
    install_crd(
        cluster,
        "vmdeployment-crd.yaml",
        "vmdeployments.verdict.dev",
    );
    install_crd(cluster, "server-crd.yaml", "servers.verdict.dev");
}

fn object(kind: &str, ns: &str, name: &str, spec: &Value) -> String {
    json!({
        "apiVersion": "verdict.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
    .to_string()
}

/// Each of `broken` (a field of `valid`'s spec set to a value) is refused
/// by the server with a message that holds the words given.
fn refused_each(
    cluster: &verdict_testcluster::Cluster,
    kind: &str,
    ns: &str,
    valid: &Value,
    broken: &[(&str, Value, &str)],
) {
    for (field, value, message) in broken {
        let mut spec = valid.clone();
        spec[*field] = value.clone();
        let refused = cluster
            .apply(&object(kind, ns, "broken", &spec))
            .expect_err(&format!("a {kind} with {field} = {value} was accepted"));
        let text = refused.to_string();
        assert!(text.contains(message), "{kind} {field} = {value}: {text}");
    }
}

#[test]
fn the_vm_delivery_crds_are_served_and_validated_by_the_real_api_server() {
    let Some(cluster) =
        shared("the_vm_delivery_crds_are_served_and_validated_by_the_real_api_server")
    else {
        return;
    };
    install_delivery_crds(cluster);
    let ns = &unique("real-vm-delivery");
    cluster.create_namespace(ns, &[]).unwrap();

    let set = json!({
        "replicas": 3,
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
        },
        "environment": [{"name": "jdk", "version": "17.0.9"}, {"name": "agent", "version": "4.1"}],
        "rollout": {"maxUnavailable": "50%"},
    });
    let no_surge = "maxUnavailable may be 0 only with a maxSurge";
    let not_a_share = "maxUnavailable must be a count of at least 0, or a share from 0% to 100%";
    refused_each(
        cluster,
        "VMReplicaSet",
        ns,
        &set,
        &[
            ("rollout", json!({"maxUnavailable": 0}), no_surge),
            ("rollout", json!({"maxUnavailable": "0%"}), no_surge),
            ("rollout", json!({"maxUnavailable": "150%"}), not_a_share),
            (
                "rollout",
                json!({"maxUnavailable": 0, "maxSurge": "0%"}),
                no_surge,
            ),
            (
                "rollout",
                json!({"maxSurge": -1}),
                "maxSurge must be a count of at least 0",
            ),
            (
                "environment",
                json!([{"name": "jdk"}]),
                "spec.environment[0].version: Required value",
            ),
            (
                "environment",
                json!([{"name": "jdk", "version": "17"}, {"name": "jdk", "version": "21"}]),
                "Duplicate value",
            ),
            ("lostInstance", json!("reboot"), "Unsupported value"),
            (
                "replicas",
                json!(-1),
                "should be greater than or equal to 0",
            ),
        ],
    );
    let mut without_template = set.clone();
    without_template.as_object_mut().unwrap().remove("template");
    let refused = cluster
        .apply(&object("VMReplicaSet", ns, "broken", &without_template))
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("spec.template: Required value"),
        "{refused}"
    );

    let deployment = json!({
        "replicaSet": "web",
        "code": {"artifact": "oci://registry.example/shop/web", "version": "2.4.0"},
        "steps": [
            {"instances": 1}, {"pause": {}}, {"instances": "50%"},
            {"pause": {"duration": "10m"}}, {"instances": "100%"},
        ],
    });
    let either = "a step is either instances or a pause, not both and not neither";
    refused_each(
        cluster,
        "VMDeployment",
        ns,
        &deployment,
        &[
            ("steps", json!([{"instances": 1, "pause": {}}]), either),
            ("steps", json!([{}]), either),
            (
                "steps",
                json!([{"instances": 0}]),
                "instances must be at least 1, or a share from 1% to 100%",
            ),
            (
                "steps",
                json!([{"pause": {"duration": "ten minutes"}}]),
                "should match",
            ),
            ("replicaSet", json!(""), "spec.replicaSet: Invalid value"),
            (
                "code",
                json!({"artifact": "oci://registry.example/shop/web"}),
                "spec.code.version: Required value",
            ),
        ],
    );

    // The valid ones are taken, with their defaults filled in.
    cluster
        .apply(&object("VMReplicaSet", ns, "web", &set))
        .unwrap();
    cluster
        .apply(&object("VMDeployment", ns, "web", &deployment))
        .unwrap();
    let stored: Value = serde_json::from_str(
        &cluster
            .kubectl_run(
                &["get", "vmreplicaset", "web", "-n", ns, "-o", "json"],
                None,
            )
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stored["spec"]["rollout"]["order"], "name");
    assert_eq!(stored["spec"]["lostInstance"], "repair");
    assert_eq!(stored["spec"]["paused"], false);
    let stored: Value = serde_json::from_str(
        &cluster
            .kubectl_run(&["get", "vmdeploy", "web", "-n", ns, "-o", "json"], None)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stored["spec"]["progressDeadlineSeconds"], 600);

    // The statuses the leader writes are kept whole by the server (a field
    // its schema lacked would be pruned, and a rollout's progress lost).
    let read = verdict::lifecycle::deployment::VmDeployment::read(&stored).unwrap();
    let (spec, progress) = read.rollout(1_767_225_600_000);
    let plan = verdict::lifecycle::rollout::Plan {
        targets: Default::default(),
        progress: verdict::lifecycle::rollout::Progress {
            step: 1,
            promoted: true,
            ..progress
        },
        phase: verdict::lifecycle::rollout::Phase::Progressing,
        waiting: "step 2: waiting for a person to approve".into(),
        ready: 2,
        up_to_date: 1,
        available: 1,
        past_deadline: false,
    };
    let rows = vec![verdict::lifecycle::crd::SetInstance {
        name: Some("web-0".into()),
        stage: Some("serving".into()),
        environment: vec!["jdk=17".into()],
        code: Some("2.4.0".into()),
        since: Some("2026-01-01T00:00:00Z".into()),
        ..Default::default()
    }];
    let status =
        serde_json::to_value(read.status(&spec, &plan, 1, &rows, 1_767_225_600_000)).unwrap();
    let kept = status_written(cluster, ns, "vmdeploy", &status);
    assert_eq!(kept["status"], status, "the server changed the status");
    let again = verdict::lifecycle::deployment::VmDeployment::read(&kept).unwrap();
    assert_eq!((again.progress.step, again.progress.promoted), (1, true));
    assert_eq!(again.status_code.as_deref(), Some("2.4.0"));

    // So is the set's, nulls left out as the server leaves them out; and
    // `kubectl scale` goes through the set's scale subresource, whose
    // selector is its instances' label.
    let stored_set: Value = serde_json::from_str(
        &cluster
            .kubectl_run(&["get", "vmrs", "web", "-n", ns, "-o", "json"], None)
            .unwrap(),
    )
    .unwrap();
    let set_read = verdict::lifecycle::resources::VmReplicaSet::read(&stored_set).unwrap();
    let set_status =
        serde_json::to_value(set_read.status(&plan, rows, (None, &[]), 1_767_225_600_000)).unwrap();
    let kept = status_written(cluster, ns, "vmrs", &set_status);
    assert_eq!(
        kept["status"], set_status,
        "the server changed the set's status"
    );
    cluster
        .kubectl_run(&["scale", "vmrs", "web", "-n", ns, "--replicas=3"], None)
        .unwrap();
    let scale: Value = serde_json::from_str(
        &cluster
            .kubectl_run(
                &[
                    "get",
                    "--raw",
                    &format!("/apis/verdict.dev/v1alpha1/namespaces/{ns}/vmreplicasets/web/scale"),
                ],
                None,
            )
            .unwrap(),
    )
    .unwrap();
    assert_eq!(scale["spec"]["replicas"], 3, "{scale}");
    assert_eq!(
        scale["status"]["selector"], "verdict.dev/vmreplicaset=web",
        "{scale}"
    );

    // `kubectl get` reads like `kubectl get deploy`.
    let table = cluster
        .kubectl_run(&["get", "vmreplicasets,vmdeployments", "-n", ns], None)
        .unwrap();
    let headers: Vec<Vec<&str>> = table
        .lines()
        .filter(|line| line.starts_with("NAME"))
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        headers,
        [
            vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
            vec!["NAME", "SET", "CODE", "STEP", "PHASE", "UP-TO-DATE", "AGE"],
        ],
        "{table}"
    );
    assert!(
        table.contains("vmreplicaset.verdict.dev/web")
            && table.contains("vmdeployment.verdict.dev/web")
            && table.contains("2.4.0"),
        "{table}"
    );
}

/// `status` written as the status of the `web` object of `resource` in
/// `ns`, and the object read back.
fn status_written(
    cluster: &verdict_testcluster::Cluster,
    ns: &str,
    resource: &str,
    status: &Value,
) -> Value {
    let patch = json!({ "status": status }).to_string();
    let patching = [
        "patch",
        resource,
        "web",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ];
    cluster.kubectl_run(&patching, None).unwrap();
    let read = ["get", resource, "web", "-n", ns, "-o", "json"];
    serde_json::from_str(&cluster.kubectl_run(&read, None).unwrap()).unwrap()
}

/// The set `web`'s objects of `resource` (`servers.verdict.dev`, …), as
/// `kubectl` lists them (none when it fails).
fn set_objects(kube: &Kube, resource: &str) -> Vec<Value> {
    let listed: Value = serde_json::from_str(&kube.run(&[
        "get",
        resource,
        "-l",
        "verdict.dev/vmreplicaset=web",
        "-o",
        "json",
    ]))
    .unwrap_or_default();
    listed["items"].as_array().cloned().unwrap_or_default()
}

/// The set `web`'s VMs.
fn set_vms(kube: &Kube) -> Vec<Value> {
    set_objects(kube, "virtualmachines.kubevirt.io")
}

/// The set `web`'s Servers.
fn set_servers(kube: &Kube) -> Vec<Value> {
    set_objects(kube, "servers.verdict.dev")
}

/// The first node, by name, that a new instance may be placed on: ready,
/// schedulable and untainted (a test's own nodes are tainted; a lost one
/// is tainted by the node lifecycle controller and fenced by failover).
fn schedulable_node(kube: &Kube) -> Option<String> {
    let nodes: Value =
        serde_json::from_str(&kube.run(&["get", "nodes", "-o", "json"])).unwrap_or_default();
    let mut names: Vec<String> = nodes["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|node| {
            let ready = node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let tainted = node["spec"]["taints"]
                .as_array()
                .is_some_and(|t| !t.is_empty());
            ready && !tainted && node["spec"]["unschedulable"] != true
        })
        .filter_map(|node| node["metadata"]["name"].as_str().map(String::from))
        .collect();
    names.sort();
    names.into_iter().next()
}

/// Play KubeVirt for the set's VMs until dropped: each VM of the set asked
/// to run and without an instance (new, or its instance deleted) gets a
/// running one on a schedulable node, as virt-controller would.
pub(super) struct Player {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Player {
    /// `cluster`: the shared control plane, or a test's own in an `Arc`.
    pub(super) fn start<C>(cluster: C, ns: &str) -> Self
    where
        C: std::ops::Deref<Target = verdict_testcluster::Cluster> + Send + 'static,
    {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = std::sync::Arc::clone(&stop);
        let ns = ns.to_string();
        let thread = std::thread::spawn(move || {
            let kube = Kube {
                cluster: &cluster,
                ns: ns.clone(),
            };
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                let vms = set_vms(&kube);
                let running = kube.run(&[
                    "get",
                    "virtualmachineinstances.kubevirt.io",
                    "-o",
                    "jsonpath={.items[*].metadata.name}",
                ]);
                let running: Vec<&str> = running.split_whitespace().collect();
                let mut node = None;
                for vm in &vms {
                    let name = vm["metadata"]["name"].as_str().unwrap_or_default();
                    if vm["metadata"]["deletionTimestamp"].is_null()
                        && vm["spec"]["runStrategy"] != "Halted"
                        && !running.contains(&name)
                    {
                        if node.is_none() {
                            node = schedulable_node(&kube);
                        }
                        if let Some(node) = &node {
                            kube.start_instance(name, node);
                        }
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Player {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The Job template of the environment's step: a pod on a KWOK node,
/// which KWOK completes as a Job's pod.
pub const INSTALL_JOB: &str = "apiVersion: batch/v1
kind: Job
metadata:
  labels: {app.kubernetes.io/component: installer}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {type: kwok}
      containers:
      - name: install
        image: registry.example/installer:1
";

/// A configuration in `data` whose environment step is carried out by a
/// Job of the cluster's ([`INSTALL_JOB`], written beside it: its pod run
/// by KWOK, completed by the Job controller) and every other step (the
/// default machine's and `smoke-test`) by the endpoint `url`.
pub(super) fn job_and_endpoint_config(data: &std::path::Path, url: &str) -> std::path::PathBuf {
    std::fs::write(data.join("install.yaml"), INSTALL_JOB).unwrap();
    let mut text: String = crate::vmdelivery::STEPS
        .iter()
        .chain(&["smoke-test"])
        .filter(|step| **step != "install-environment")
        .map(|step| format!("[hooks.{step}]\nurl = \"{url}\"\n"))
        .collect();
    text.push_str("[hooks.install-environment]\njob = \"install.yaml\"\n");
    let config = data.join("verdict.toml");
    std::fs::write(&config, text).unwrap();
    config
}

#[test]
fn a_set_is_delivered_and_its_gray_release_approved_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, deployment, set};
    let test = "a_set_is_delivered_and_its_gray_release_approved_on_the_real_api_server";
    let Some(cluster) = shared(test) else {
        return;
    };
    super::vms::install_kubevirt(cluster);
    install_delivery_crds(cluster);
    let ns = &unique("real-delivering");
    cluster.create_namespace(ns, &[]).unwrap();
    let kube = Kube {
        cluster,
        ns: ns.clone(),
    };
    let _player = Player::start(cluster, ns);

    let hooks = HookServer::start(|_| (200, DONE.into()));
    let data = tempfile::tempdir().unwrap();
    let config = job_and_endpoint_config(data.path(), &hooks.url);
    // A plugin folder of its own: the lifecycle policy is swapped in it
    // mid-rollout.
    let folder = crate::support::plugin_folder(&["status", "failover", "admission", "lifecycle"]);
    let kubeconfig = cluster.kubeconfig();
    let server = delivering_host(folder.path(), data.path(), &kubeconfig, &config, ns);
    apply_in(
        cluster,
        ns,
        set(3, json!([{"name": "jdk", "version": "21"}])),
    );
    apply_in(cluster, ns, deployment("1.0", json!([])));
    let codes = || stages_of_set(&kube);
    let all_serve = |code: &str| {
        let all = codes();
        all.len() == 3
            && all
                .iter()
                .all(|(_, stage, c)| stage == "serving" && c == code)
    };
    let path = format!("/v1/vm-delivery/{ns}/web");
    let rollout = || server.get(&path).1["rollout"].clone();
    assert!(
        wait_until(PATIENCE * 3, || all_serve("1.0")
            && rollout()["phase"] == "Completed")
        .is_some(),
        "1.0 never delivered: {:?} {:#}",
        codes(),
        rollout()
    );
    // `kubectl get servers` says where every instance is.
    let ready = wait_until(PATIENCE, || {
        let table = kube.run(&["get", "servers.verdict.dev"]);
        table.lines().count() == 4 && table.lines().skip(1).all(|l| l.contains("true"))
    });
    let table = kube.run(&["get", "servers.verdict.dev"]);
    assert!(ready.is_some(), "{table}");
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "SET",
            "STAGE",
            "SINCE",
            "ENVIRONMENT",
            "CODE",
            "NODE",
            "READY",
            "AGE"
        ],
        "{table}"
    );
    for line in table.lines().skip(1) {
        let row: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (row[1], row[2], row[4], row[5], row[7]),
            ("web", "serving", "jdk=21", "1.0", "true"),
            "{table}"
        );
    }
    for (name, _, _) in codes() {
        // Attached in gray release and again in full once 1.0 was
        // released, or in full at once.
        let steps = hooks.steps_of(&name);
        assert_eq!(
            steps[..3],
            ["deploy-code", "health-check", "bind-monitoring"],
            "{name}: {steps:?}"
        );
        assert!(
            (4..=5).contains(&steps.len())
                && steps[3..].iter().all(|s| s == "attach-load-balancer"),
            "{name}: {steps:?}"
        );
        // One Job installed its environment, and completed.
        let jobs: Value = serde_json::from_str(&kube.run(&[
            "get",
            "jobs",
            "-l",
            &format!("verdict.dev/instance={name},verdict.dev/step=install-environment"),
            "-o",
            "json",
        ]))
        .unwrap();
        let jobs = jobs["items"].as_array().unwrap();
        assert_eq!(jobs.len(), 1, "{name}: {jobs:#?}");
        let complete = jobs[0]["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Complete" && c["status"] == "True");
        assert!(complete, "{name}: {:#}", jobs[0]["status"]);
        let env = &jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"];
        assert!(
            env.to_string()
                .contains(r#"{"name":"VERDICT_INSTANCE","value":"#),
            "{env}"
        );
    }

    // 2.0 by a gray release: one instance, then a gate a person approves.
    let spec = json!({"spec": deployment("2.0", json!([{"instances": 1}, {"pause": {}}, {"instances": "100%"}]))["spec"]});
    kube.run(&[
        "patch",
        "vmdeployments.verdict.dev",
        "web",
        "--type=merge",
        "-p",
        &spec.to_string(),
    ]);
    assert!(
        wait_until(PATIENCE * 2, || rollout()["at-gate"] == true).is_some(),
        "never at the gate: {:#}",
        rollout()
    );
    let first: Vec<String> = codes()
        .into_iter()
        .filter(|(_, _, c)| c == "2.0")
        .map(|(name, _, _)| name)
        .collect();
    assert_eq!(first.len(), 1, "{:?}", codes());
    // A new lifecycle policy while the rollout waits: the example that
    // smoke-tests each deploy, served without a restart.
    let smoke = std::fs::read(crate::support::example_plugin("smoke-test")).unwrap();
    crate::support::install_by_rename(&folder.path().join("lifecycle.wasm"), &smoke);
    let swapped = wait_until(PATIENCE, || {
        server.get("/v1/plugins").1["plugins"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "lifecycle" && p["current"]["name"] == "smoke-test")
    });
    assert!(swapped.is_some(), "{:#}", server.get("/v1/plugins").1);
    // The status the leader keeps, as the real server kept it.
    let status = kube.get("vmdeployments.verdict.dev", "web")["status"].clone();
    assert_eq!(
        (status["stepIndex"].as_u64(), status["stableCode"].as_str()),
        (Some(1), Some("1.0")),
        "{status:#}"
    );
    let (code, body) = server.send(
        "POST",
        &format!("{path}/approve"),
        Some(&json!({"by": "ana", "why": "the canary is healthy"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    // The request is an annotation a person could have written too.
    let annotations =
        kube.get("vmdeployments.verdict.dev", "web")["metadata"]["annotations"].clone();
    assert!(
        annotations["verdict.dev/approve"]
            .as_str()
            .unwrap()
            .contains("\"by\":\"ana\"")
    );
    assert!(
        wait_until(PATIENCE * 3, || all_serve("2.0")
            && rollout()["phase"] == "Completed")
        .is_some(),
        "2.0 never delivered: {:?} {:#}",
        codes(),
        rollout()
    );
    // Deployed under the new policy, the others were smoke-tested; the
    // first, deployed before it, was not.
    for (name, _, _) in codes() {
        let smoke_tests = hooks
            .steps_of(&name)
            .iter()
            .filter(|s| *s == "smoke-test")
            .count();
        let expected = usize::from(!first.contains(&name));
        assert_eq!(smoke_tests, expected, "{name}: {:?}", hooks.steps_of(&name));
    }
    let status = kube.get("vmdeployments.verdict.dev", "web")["status"].clone();
    assert_eq!(status["actions"][0]["by"], "ana", "{status:#}");
    assert_eq!(status["approvedBy"], "ana", "{status:#}");

    // A new environment rolls one instance at a time (maxUnavailable 1):
    // at no moment seen are two out of service.
    let patch = json!({"spec": {"environment": [{"name": "jdk", "version": "25"}], "rollout": {"maxUnavailable": 1}}});
    kube.run(&[
        "patch",
        "vmreplicasets.verdict.dev",
        "web",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
    let environments = || -> Vec<String> {
        set_servers(&kube)
            .iter()
            .map(|vm| {
                vm["status"]["environmentText"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let mut most_out = 0;
    let rolled = wait_until(PATIENCE * 4, || {
        let out = codes()
            .iter()
            .filter(|(_, stage, _)| {
                let stage = stage.trim_end_matches(" (a list runs)");
                !matches!(stage, "ready" | "gray-release" | "serving")
            })
            .count();
        most_out = most_out.max(out);
        all_serve("2.0") && environments().iter().all(|e| e == "jdk=25")
    });
    assert!(
        rolled.is_some(),
        "the environment never rolled: {:?} {:?}",
        codes(),
        environments()
    );
    assert_eq!(
        most_out, 1,
        "{most_out} instances were out of service at once"
    );

    // A deleted instance is held by its clean-up, then goes; the set makes
    // another.
    kube.run(&[
        "delete",
        "virtualmachines.kubevirt.io",
        "web-2",
        "--wait=false",
    ]);
    let cleaned = wait_until(PATIENCE * 2, || {
        hooks.steps_of("web-2").ends_with(&[
            "detach-load-balancer".into(),
            "pause-monitoring".into(),
            "delete-machine".into(),
        ])
    });
    assert!(cleaned.is_some(), "{:?}", hooks.steps_of("web-2"));
    assert!(
        wait_until(PATIENCE * 3, || all_serve("2.0")).is_some(),
        "never three again: {:?}",
        codes()
    );
}

#[test]
fn a_failed_step_is_forced_past_and_an_aborted_rollout_goes_back_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, deployment, set};
    use std::sync::{Arc, Mutex};
    let test =
        "a_failed_step_is_forced_past_and_an_aborted_rollout_goes_back_on_the_real_api_server";
    let Some(cluster) = shared(test) else {
        return;
    };
    super::vms::install_kubevirt(cluster);
    install_delivery_crds(cluster);
    let ns = &unique("real-failing");
    cluster.create_namespace(ns, &[]).unwrap();
    let kube = Kube {
        cluster,
        ns: ns.clone(),
    };
    let _player = Player::start(cluster, ns);
    // 2.0's deploy fails until the cause is fixed.
    let fail = Arc::new(Mutex::new(true));
    let failing = Arc::clone(&fail);
    let hooks = HookServer::start(move |call| {
        if call["step"] == "deploy-code"
            && call["params"]["version"] == "2.0"
            && *failing.lock().unwrap()
        {
            return (200, r#"{"status":"failed","message":"disk full"}"#.into());
        }
        (200, DONE.into())
    });
    let data = tempfile::tempdir().unwrap();
    let config = job_and_endpoint_config(data.path(), &hooks.url);
    let server = follow(
        &cluster.kubeconfig(),
        data.path(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--vm-delivery",
            "--vm-delivery-namespace",
            ns,
        ],
    );
    let in_ns = |mut object: Value| {
        object["metadata"]["namespace"] = json!(ns);
        object.to_string()
    };
    cluster
        .apply(&in_ns(set(2, json!([{"name": "jdk", "version": "21"}]))))
        .unwrap();
    cluster.apply(&in_ns(deployment("1.0", json!([])))).unwrap();
    let path = format!("/v1/vm-delivery/{ns}/web");
    let view = || server.get(&path).1;
    let serving = |code: &str| {
        let instances = view()["instances"].as_array().cloned().unwrap_or_default();
        instances.len() == 2
            && instances
                .iter()
                .all(|i| i["stage"] == "serving" && i["code"] == code && i["lock"].is_null())
    };
    assert!(
        wait_until(PATIENCE * 3, || serving("1.0")).is_some(),
        "1.0 never delivered: {:#}",
        view()
    );

    // 2.0 fails on its first instance: the rollout is degraded, saying
    // which, and the status the real server keeps says so too.
    let spec = json!({"spec": deployment("2.0", json!([{"instances": 1}, {"pause": {}}]))["spec"]});
    kube.run(&[
        "patch",
        "vmdeployments.verdict.dev",
        "web",
        "--type=merge",
        "-p",
        &spec.to_string(),
    ]);
    let degraded = wait_until(PATIENCE * 2, || view()["rollout"]["phase"] == "Degraded");
    assert!(degraded.is_some(), "never degraded: {:#}", view());
    let failed: Vec<String> = view()["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["stage"] == "failed")
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(failed.len(), 1, "{:#}", view());
    let conditions = kube.get("vmdeployments.verdict.dev", "web")["status"]["conditions"].clone();
    assert!(
        conditions.to_string().contains(&failed[0]),
        "{conditions:#}"
    );

    // The operator fixed the cause and forces the stage: the machine goes
    // on from there, and the rollout waits at its gate.
    *fail.lock().unwrap() = false;
    let (code, body) = server.send(
        "POST",
        &format!("{path}/instances/{}/force", failed[0]),
        Some(&json!({"stage": "deploying", "by": "bob", "why": "disk freed"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    let at_gate = wait_until(PATIENCE * 2, || view()["rollout"]["at-gate"] == true);
    assert!(at_gate.is_some(), "never at the gate: {:#}", view());

    // Aborted at the gate: the instance that got 2.0 goes back to 1.0.
    let (code, body) = server.send(
        "POST",
        &format!("{path}/abort"),
        Some(&json!({"by": "bob", "why": "latency"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    assert!(
        wait_until(PATIENCE * 3, || serving("1.0")
            && view()["rollout"]["phase"] == "Aborted")
        .is_some(),
        "never back: {:#}",
        view()
    );
    let deployed: Vec<String> = hooks
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c["instance"]["name"] == failed[0].as_str() && c["step"] == "deploy-code")
        .map(|c| {
            c["params"]["version"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(deployed, ["1.0", "2.0", "2.0", "1.0"]);
    let status = kube.get("vmdeployments.verdict.dev", "web")["status"].clone();
    assert_eq!(status["phase"], "Aborted", "{status:#}");
}

#[test]
fn a_leader_killed_mid_rollout_hands_over_and_no_step_runs_twice_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, set};
    use std::sync::{Arc, Mutex};
    let test =
        "a_leader_killed_mid_rollout_hands_over_and_no_step_runs_twice_on_the_real_api_server";
    let Some(cluster) = shared(test) else {
        return;
    };
    super::vms::install_kubevirt(cluster);
    install_delivery_crds(cluster);
    super::tasks::install_task_crd(cluster);
    let ns = &unique("real-handover");
    cluster.create_namespace(ns, &[]).unwrap();
    let kube = Kube {
        cluster,
        ns: ns.clone(),
    };
    let _player = Player::start(cluster, ns);
    // Each step runs a while: asked first, it is under way; asked again by
    // the same key, it is done.
    let seen = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let answered = Arc::clone(&seen);
    let hooks = HookServer::start(move |call| {
        match answered.lock().unwrap().insert(call["key"].to_string()) {
            true => (
                200,
                r#"{"status":"running","progress":50,"retryAfterSeconds":1}"#.into(),
            ),
            false => (200, DONE.into()),
        }
    });
    let data = tempfile::tempdir().unwrap();
    let config = job_and_endpoint_config(data.path(), &hooks.url);
    let kubeconfig = cluster.kubeconfig();
    let mut group = crate::replicas::Group::start(
        &super::plugins(),
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        ns,
        2,
        &[
            "--config",
            config.to_str().unwrap(),
            "--vm-delivery",
            "--vm-delivery-namespace",
            ns,
        ],
    );
    let first = group.leader();
    let mut in_ns = set(3, json!([{"name": "jdk", "version": "21"}]));
    in_ns["metadata"]["namespace"] = json!(ns);
    cluster.apply(&in_ns.to_string()).unwrap();
    let annotations = || -> Vec<Value> {
        set_servers(&kube)
            .iter()
            .map(|vm| vm["status"].clone())
            .collect()
    };
    // Killed while its lists run: a lock held and a step under way.
    let under_way = wait_until(PATIENCE * 3, || {
        annotations()
            .iter()
            .any(|a| a["stage"] == "ready" && a["lock"].is_string())
    });
    assert!(under_way.is_some(), "{:#?}", annotations());
    group.kill(first);
    let next = group.leader();
    assert_ne!(next, first);
    let serving = wait_until(PATIENCE * 4, || {
        let all = annotations();
        all.len() == 3
            && all
                .iter()
                .all(|a| a["stage"] == "serving" && a["lock"].is_null())
    });
    assert!(serving.is_some(), "{:#?}", annotations());
    // Every step of every instance ran once, by one key, across the
    // handover; the environment by one Job each.
    for name in ["web-0", "web-1", "web-2"] {
        assert_eq!(
            hooks.steps_of(name),
            ["health-check", "bind-monitoring", "attach-load-balancer"],
            "{name}"
        );
        let jobs = kube.run(&[
            "get",
            "jobs",
            "-l",
            &format!("verdict.dev/instance={name}"),
            "-o",
            "name",
        ]);
        assert_eq!(jobs.lines().count(), 1, "{name}: {jobs}");
    }
}

#[test]
fn an_instance_lost_with_its_node_is_repaired_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, set};
    let test = "an_instance_lost_with_its_node_is_repaired_on_the_real_api_server";
    // A control plane of the test's own: failover acts on every lost node
    // of the cluster it watches.
    let dir = tempfile::tempdir().unwrap();
    let Some(cluster) = super::private(
        test,
        dir.path(),
        verdict_testcluster::Options {
            nodes: 3,
            node_grace: std::time::Duration::from_secs(10),
            ..verdict_testcluster::Options::default()
        },
    ) else {
        return;
    };
    let cluster = std::sync::Arc::new(cluster);
    super::vms::install_kubevirt(&cluster);
    install_delivery_crds(&cluster);
    super::tasks::install_task_crd(&cluster);
    let ns = "shop";
    cluster.create_namespace(ns, &[]).unwrap();
    let kube = Kube {
        cluster: &cluster,
        ns: ns.to_string(),
    };
    let _player = Player::start(std::sync::Arc::clone(&cluster), ns);
    let hooks = HookServer::start(|_| (200, DONE.into()));
    let data = tempfile::tempdir().unwrap();
    let config = job_and_endpoint_config(data.path(), &hooks.url);
    // Failover's clocks short and its repairs carried out.
    let failover =
        crate::failover::CONFIG.replacen("[failover]\n", "[failover]\nenforce = true\n", 1);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{failover}\n{text}")).unwrap();
    let server = follow(
        &cluster.kubeconfig(),
        data.path(),
        &["--config", config.to_str().unwrap(), "--vm-delivery"],
    );
    cluster
        .apply(&set(1, json!([{"name": "jdk", "version": "21"}])).to_string())
        .unwrap();
    let node_of = || -> Option<String> {
        let vmi = kube.cluster.kubectl_run(
            &[
                "-n",
                ns,
                "get",
                "virtualmachineinstances.kubevirt.io",
                "web-0",
                "-o",
                "jsonpath={.status.nodeName}",
            ],
            None,
        );
        vmi.ok().filter(|node| !node.is_empty())
    };
    let serving = || {
        set_servers(&kube).iter().any(|vm| {
            let a = &vm["status"];
            a["stage"] == "serving" && a["lock"].is_null()
        })
    };
    assert!(
        wait_until(PATIENCE * 3, serving).is_some(),
        "never serving: {:#?}",
        set_servers(&kube)
    );
    let lost = node_of().expect("web-0 runs on a node");

    // Its node's kubelet stops: the node lifecycle controller marks it
    // Unknown; failover judges it lost, fences it and deletes the
    // instance there; KubeVirt starts it on another node, where it goes
    // through the whole machine again.
    cluster.stop_kubelet(&lost).unwrap();
    let repaired = wait_until(PATIENCE * 4, || {
        node_of().is_some_and(|node| node != lost) && serving()
    });
    assert!(
        repaired.is_some(),
        "never repaired: {:#?} on {:?}; failover: {:#}",
        set_servers(&kube),
        node_of(),
        server.get("/v1/failover").1
    );
    let (_, log) = server.get(&format!(
        "/v1/vm-delivery/{ns}/web/instances/web-0/log?limit=1000"
    ));
    let stages: Vec<&str> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    let lost_at = stages.iter().position(|s| *s == "unknown");
    assert!(
        lost_at.is_some_and(|at| stages[at..].ends_with(&["initializing", "ready", "serving"]))
            && !stages.contains(&"failed"),
        "{stages:?}"
    );
    // Let go of when lost; its environment installed again, by a second
    // Job, on the new machine.
    let steps = hooks.steps_of("web-0");
    assert!(
        steps.ends_with(&[
            "detach-load-balancer".into(),
            "pause-monitoring".into(),
            "health-check".into(),
            "bind-monitoring".into(),
            "attach-load-balancer".into(),
        ]),
        "{steps:?}"
    );
    let jobs = kube.run(&[
        "get",
        "jobs",
        "-l",
        "verdict.dev/instance=web-0,verdict.dev/step=install-environment",
        "-o",
        "name",
    ]);
    assert_eq!(jobs.lines().count(), 2, "{jobs}");
    // The lost node is fenced, and the repair's task says what it did.
    let taints = kube.run(&["get", "node", &lost, "-o", "jsonpath={.spec.taints[*].key}"]);
    assert!(
        taints.contains("node.kubernetes.io/out-of-service"),
        "{taints}"
    );
    let (_, failover) = server.get("/v1/failover");
    let taken = failover["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["node"] == lost.as_str())
        .map(|n| n["taken"].clone())
        .unwrap_or_default();
    assert!(
        taken
            .to_string()
            .contains("repair:VirtualMachineInstance/shop/web-0"),
        "{failover:#}"
    );
}

/// A namespace of its own for one delivery test on the shared control
/// plane: KubeVirt's and the delivery's CRDs served, KubeVirt played in
/// it until dropped.
pub(super) struct Namespace {
    /// `kubectl` in it.
    pub kube: Kube<'static>,
    _player: Player,
}

impl Namespace {
    pub(super) fn new(cluster: &'static verdict_testcluster::Cluster, name: &str) -> Self {
        super::vms::install_kubevirt(cluster);
        install_delivery_crds(cluster);
        let ns = unique(name);
        cluster.create_namespace(&ns, &[]).unwrap();
        let player = Player::start(cluster, &ns);
        Self {
            kube: Kube { cluster, ns },
            _player: player,
        }
    }
}

/// A configuration in `data` whose every step hook (the default
/// machine's) is the endpoint `url`.
pub(super) fn endpoint_config(data: &std::path::Path, url: &str) -> std::path::PathBuf {
    let config = data.join("verdict.toml");
    let text: String = crate::vmdelivery::STEPS
        .iter()
        .map(|step| format!("[hooks.{step}]\nurl = \"{url}\"\n"))
        .collect();
    std::fs::write(&config, text).unwrap();
    config
}

/// Each instance of the set `web`: its name, stage (" (a list runs)" after it
/// while its lock is held: not there yet) and code.
fn stages_of_set(kube: &Kube) -> Vec<(String, String, String)> {
    set_servers(kube)
        .iter()
        .map(|vm| {
            let a = &vm["status"];
            let text = |key: &str| a[key].as_str().unwrap_or_default().to_string();
            let stage = match a["lock"].is_string() {
                true => format!("{} (a list runs)", text("stage")),
                false => text("stage"),
            };
            let name = vm["metadata"]["name"].as_str().unwrap_or_default();
            (name.to_string(), stage, text("code"))
        })
        .collect()
}

/// `verdict serve` as `kubeconfig` with the policies of `plugins` and the
/// configuration `config`, carrying out the delivery of `ns` only (the
/// shared control plane holds other tests' sets).
fn delivering_host(
    plugins: &std::path::Path,
    data: &std::path::Path,
    kubeconfig: &std::path::Path,
    config: &std::path::Path,
    ns: &str,
) -> crate::serve::Server {
    crate::serve::Server::start_with(
        plugins,
        data,
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--vm-delivery",
            "--vm-delivery-namespace",
            ns,
        ],
    )
}

/// `object` made in the namespace `ns`.
fn apply_in(cluster: &verdict_testcluster::Cluster, ns: &str, mut object: Value) {
    object["metadata"]["namespace"] = json!(ns);
    cluster.apply(&object.to_string()).unwrap();
}

/// The default plugins' folder.
fn default_plugins() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins")
}

/// An identity of `ns` for a host whose permissions a test can take away:
/// everything on every group the host uses, and verdict.dev's resources by
/// a ClusterRole of their own, `<ns>-delivery`, which [`delivery_rules`]
/// writes. Its kubeconfig is written to `path`.
fn identity_with_delivery_rules(
    cluster: &verdict_testcluster::Cluster,
    ns: &str,
    path: &std::path::Path,
) {
    let account = "verdict-held";
    let groups = [
        "",
        "apps",
        "batch",
        "coordination.k8s.io",
        "kubevirt.io",
        "pool.kubevirt.io",
        "cdi.kubevirt.io",
        "events.k8s.io",
        "policy",
        "apiextensions.k8s.io",
        "metrics.k8s.io",
        "admissionregistration.k8s.io",
        "authorization.k8s.io",
        "authentication.k8s.io",
        "discovery.k8s.io",
        "storage.k8s.io",
        "networking.k8s.io",
    ];
    let binding = |role: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        })
        .to_string()
    };
    cluster
        .apply(
            &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": ns}})
            .to_string(),
        )
        .unwrap();
    cluster
        .apply(
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": format!("{ns}-all")},
                "rules": [
                    {"apiGroups": groups, "resources": ["*"], "verbs": ["*"]},
                    {"nonResourceURLs": ["*"], "verbs": ["get"]},
                ],
            })
            .to_string(),
        )
        .unwrap();
    cluster.apply(&binding(&format!("{ns}-all"))).unwrap();
    delivery_rules(cluster, ns, true);
    cluster.apply(&binding(&format!("{ns}-delivery"))).unwrap();
    cluster
        .service_account_kubeconfig(ns, account, path)
        .unwrap();
}

/// The `<ns>-delivery` ClusterRole: every verb on verdict.dev's resources,
/// `list` of VMDeployments only when `may_list`.
fn delivery_rules(cluster: &verdict_testcluster::Cluster, ns: &str, may_list: bool) {
    let mut deployment_verbs = vec!["get", "watch", "patch", "update"];
    if may_list {
        deployment_verbs.push("list");
    }
    cluster
        .apply(
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": format!("{ns}-delivery")},
                "rules": [
                    {"apiGroups": ["verdict.dev"],
                     "resources": ["vmreplicasets", "vmreplicasets/status", "vmdeployments/status",
                                   "servers", "servers/status",
                                   "tasks", "tasks/status", "policies", "policies/status"],
                     "verbs": ["*"]},
                    {"apiGroups": ["verdict.dev"], "resources": ["vmdeployments"],
                     "verbs": deployment_verbs},
                ],
            })
            .to_string(),
        )
        .unwrap();
}

#[test]
fn a_gate_holds_while_the_deployments_cannot_be_read_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, deployment, set};
    let test = "a_gate_holds_while_the_deployments_cannot_be_read_on_the_real_api_server";
    let Some(cluster) = shared(test) else {
        return;
    };
    let namespace = Namespace::new(cluster, "real-held");
    let (kube, ns) = (&namespace.kube, &namespace.kube.ns);
    let hooks = HookServer::start(|_| (200, DONE.into()));
    let data = tempfile::tempdir().unwrap();
    let config = endpoint_config(data.path(), &hooks.url);
    let kubeconfig = data.path().join("held.kubeconfig");
    identity_with_delivery_rules(cluster, ns, &kubeconfig);
    let plugins = default_plugins();
    let first = delivering_host(&plugins, data.path(), &kubeconfig, &config, ns);
    let server = &first;
    apply_in(
        cluster,
        ns,
        set(3, json!([{"name": "jdk", "version": "21"}])),
    );
    apply_in(cluster, ns, deployment("1.0", json!([])));
    let stages = || stages_of_set(kube);
    let count = |stage: &str, code: &str| {
        stages()
            .iter()
            .filter(|(_, s, c)| s == stage && c == code)
            .count()
    };
    let path = format!("/v1/vm-delivery/{ns}/web");
    let rollout = || server.get(&path).1["rollout"].clone();
    assert!(
        wait_until(PATIENCE * 3, || count("serving", "1.0") == 3
            && rollout()["phase"] == "Completed")
        .is_some(),
        "1.0 never delivered: {:?} {:#}",
        stages(),
        rollout()
    );
    let spec = json!({"spec": deployment("2.0", json!([{"instances": 1}, {"pause": {}}, {"instances": "100%"}]))["spec"]});
    kube.run(&[
        "patch",
        "vmdeployments.verdict.dev",
        "web",
        "--type=merge",
        "-p",
        &spec.to_string(),
    ]);
    assert!(
        wait_until(PATIENCE * 2, || rollout()["at-gate"] == true
            && count("gray-release", "2.0") == 1)
        .is_some(),
        "never at the gate: {:?} {:#}",
        stages(),
        rollout()
    );
    let (canary, _, _) = stages()
        .into_iter()
        .find(|(_, s, _)| s == "gray-release")
        .unwrap();
    // The canary's calls since the gate: whether its code was released to
    // the load balancer in full.
    let calls_of_canary = || -> Vec<Value> {
        hooks
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c["instance"]["name"] == canary.as_str())
            .cloned()
            .collect()
    };
    let before = calls_of_canary().len();
    let attached_in_full = || {
        calls_of_canary()[before..]
            .iter()
            .any(|c| c["step"] == "attach-load-balancer" && c["params"]["weight"] == 100)
    };

    // The host, started again, may no longer list VMDeployments (a watch
    // that runs goes on when a permission is taken away; a new one cannot
    // start): it holds, and says so.
    drop(first);
    delivery_rules(cluster, ns, false);
    let second = delivering_host(&plugins, data.path(), &kubeconfig, &config, ns);
    let server = &second;
    let rollout = || server.get(&path).1["rollout"].clone();
    let held_total = || {
        let text = reqwest::blocking::get(format!("{}/metrics", server.base))
            .and_then(|r| r.text())
            .unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("verdict_vm_delivery_held_total "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let held = wait_until(PATIENCE, || held_total() >= 3);
    assert!(held.is_some(), "never held: {}", held_total());
    let set_status = kube.get("vmreplicasets.verdict.dev", "web")["status"].clone();
    let degraded = set_status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Degraded")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&degraded["status"], &degraded["reason"]),
        (&json!("True"), &json!("Unread")),
        "{set_status:#}"
    );
    assert!(
        degraded["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the VMDeployments could not be read"),
        "{degraded:#}"
    );
    // Held for three reconciles at least: the canary is where it was, no
    // step was asked of it, and nothing else moved.
    assert_eq!(count("gray-release", "2.0"), 1, "{:?}", stages());
    assert_eq!(count("serving", "1.0"), 2, "{:?}", stages());
    assert_eq!(
        calls_of_canary().len(),
        before,
        "a step was asked of the held canary: {:?}",
        hooks.steps_of(&canary)
    );

    // The permission back: still at the gate until a person approves.
    delivery_rules(cluster, ns, true);
    assert!(
        wait_until(PATIENCE, || rollout()["at-gate"] == true).is_some(),
        "{:#}",
        rollout()
    );
    assert_eq!(count("gray-release", "2.0"), 1, "{:?}", stages());
    let (code, body) = server.send(
        "POST",
        &format!("{path}/approve"),
        Some(&json!({"by": "ana"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    assert!(
        wait_until(PATIENCE * 3, || count("serving", "2.0") == 3
            && rollout()["phase"] == "Completed")
        .is_some(),
        "2.0 never delivered: {:?} {:#}",
        stages(),
        rollout()
    );
    assert!(attached_in_full(), "{:?}", hooks.steps_of(&canary));
}

#[test]
fn a_lone_host_started_again_resumes_its_running_steps_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, set};
    let test = "a_lone_host_started_again_resumes_its_running_steps_on_the_real_api_server";
    let Some(cluster) = shared(test) else {
        return;
    };
    let namespace = Namespace::new(cluster, "real-lone");
    let (kube, ns) = (&namespace.kube, &namespace.kube.ns);
    // Installs run until the test lets them finish.
    let finish = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let finishing = std::sync::Arc::clone(&finish);
    let hooks = HookServer::start(move |call| {
        let done = call["step"] != "install-environment"
            || finishing.load(std::sync::atomic::Ordering::SeqCst);
        match done {
            true => (200, DONE.into()),
            false => (
                200,
                r#"{"status":"running","progress":10,"retryAfterSeconds":1}"#.into(),
            ),
        }
    });
    let data = tempfile::tempdir().unwrap();
    let config = endpoint_config(data.path(), &hooks.url);
    let kubeconfig = cluster.kubeconfig();
    let plugins = default_plugins();
    let mut first = delivering_host(&plugins, data.path(), &kubeconfig, &config, ns);
    apply_in(
        cluster,
        ns,
        set(2, json!([{"name": "jdk", "version": "21"}])),
    );
    let stages = || -> Vec<String> {
        stages_of_set(kube)
            .into_iter()
            .map(|(_, stage, _)| stage)
            .collect()
    };
    let installing = wait_until(PATIENCE * 2, || {
        stages() == ["initializing (a list runs)", "initializing (a list runs)"]
    });
    assert!(installing.is_some(), "{:?}", stages());
    first.kill();

    // Started again: another process, another name, no election.
    let second_data = tempfile::tempdir().unwrap();
    let _second = delivering_host(&plugins, second_data.path(), &kubeconfig, &config, ns);
    finish.store(true, std::sync::atomic::Ordering::SeqCst);
    let serving = wait_until(PATIENCE * 3, || stages() == ["serving", "serving"]);
    assert!(
        serving.is_some(),
        "the host started again did not take up the installs: {:?}",
        stages()
    );
    for vm in set_servers(kube) {
        let name = vm["metadata"]["name"].as_str().unwrap_or_default();
        let keys: std::collections::BTreeSet<String> = hooks
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c["instance"]["name"] == name && c["step"] == "install-environment")
            .map(|c| c["key"].to_string())
            .collect();
        assert_eq!(
            keys.len(),
            1,
            "{name}: one install, asked by one key: {keys:?}"
        );
    }
}

#[test]
fn a_deleted_set_lets_go_of_its_instances_after_their_clean_up_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, set};
    let test = "a_deleted_set_lets_go_of_its_instances_after_their_clean_up_on_the_real_api_server";
    let Some(cluster) = shared(test) else {
        return;
    };
    let namespace = Namespace::new(cluster, "real-let-go");
    let (kube, ns) = (&namespace.kube, &namespace.kube.ns);
    let hooks = HookServer::start(|_| (200, DONE.into()));
    let data = tempfile::tempdir().unwrap();
    let config = endpoint_config(data.path(), &hooks.url);
    let kubeconfig = cluster.kubeconfig();
    let _server = delivering_host(&default_plugins(), data.path(), &kubeconfig, &config, ns);
    apply_in(
        cluster,
        ns,
        set(2, json!([{"name": "jdk", "version": "21"}])),
    );
    let serving = || {
        let vms = set_servers(kube);
        vms.len() == 2
            && vms.iter().all(|vm| {
                let a = &vm["status"];
                a["stage"] == "serving" && a.get("lock").is_none()
            })
    };
    assert!(
        wait_until(PATIENCE * 3, serving).is_some(),
        "{:#?}",
        set_servers(kube)
    );
    // As a person deletes it, without waiting.
    kube.run(&["delete", "vmreplicasets.verdict.dev", "web", "--wait=false"]);
    let gone = wait_until(PATIENCE * 3, || {
        set_servers(kube).is_empty()
            && set_vms(kube).is_empty()
            && kube
                .run(&[
                    "get",
                    "vmreplicasets.verdict.dev",
                    "--ignore-not-found",
                    "-o",
                    "name",
                ])
                .trim()
                .is_empty()
    });
    assert!(
        gone.is_some(),
        "left behind: {:#?}",
        set_servers(kube)
            .iter()
            .map(|vm| vm["metadata"].clone())
            .collect::<Vec<_>>()
    );
    for name in ["web-0", "web-1"] {
        assert!(
            hooks.steps_of(name).ends_with(&[
                "detach-load-balancer".into(),
                "pause-monitoring".into(),
                "delete-machine".into()
            ]),
            "{name}: {:?}",
            hooks.steps_of(name)
        );
    }
}

/// A write the API server refuses (here an admission policy that refuses
/// every status update of one Server that would lock it) is said where a person
/// looks: the set's `Degraded` condition names the instance and the
/// refusal, and a warning Event on the set tells it; the rest of the set
/// goes on, and so does the instance once the policy is gone.
#[test]
fn a_write_the_api_server_refuses_is_said_on_the_set_and_as_an_event_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, set};
    let test =
        "a_write_the_api_server_refuses_is_said_on_the_set_and_as_an_event_on_the_real_api_server";
    let Some(cluster) = shared(test) else {
        return;
    };
    let namespace = Namespace::new(cluster, "real-refused");
    let (kube, ns) = (&namespace.kube, &namespace.kube.ns);
    let policy = format!("{ns}-no-lock");
    cluster
        .apply(
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": policy},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {"resourceRules": [{
                        "apiGroups": ["verdict.dev"], "apiVersions": ["*"],
                        "operations": ["UPDATE"], "resources": ["servers/status"],
                    }]},
                    "validations": [{
                        "expression": "!(object.metadata.name == 'web-0' && has(object.status) && has(object.status.lock))",
                        "message": "web-0 may not be locked",
                    }],
                },
            })
            .to_string(),
        )
        .unwrap();
    cluster
        .apply(
            &json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": policy},
                "spec": {
                    "policyName": policy,
                    "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
                },
            })
            .to_string(),
        )
        .unwrap();
    let hooks = HookServer::start(|_| (200, DONE.into()));
    let data = tempfile::tempdir().unwrap();
    let config = endpoint_config(data.path(), &hooks.url);
    let _host = delivering_host(
        &default_plugins(),
        data.path(),
        &cluster.kubeconfig(),
        &config,
        ns,
    );
    apply_in(
        cluster,
        ns,
        set(2, json!([{"name": "jdk", "version": "21"}])),
    );
    let degraded = || crate::vmdelivery::degraded_of(&kube.get("vmreplicasets.verdict.dev", "web"));
    let said = wait_until(PATIENCE * 3, || {
        let message = degraded();
        message.contains("web-0: the API server refused a write")
            && message.contains("web-0 may not be locked")
    });
    assert!(said.is_some(), "{}", degraded());
    let warned = wait_until(PATIENCE, || {
        let events: Value =
            serde_json::from_str(&kube.run(&["get", "events.events.k8s.io", "-o", "json"]))
                .unwrap();
        events["items"].as_array().into_iter().flatten().any(|e| {
            e["type"] == "Warning"
                && e["reason"] == "WriteRefused"
                && e["regarding"]["kind"] == "VMReplicaSet"
                && e["related"]["name"] == "web-0"
        })
    });
    assert!(
        warned.is_some(),
        "{}",
        kube.run(&["get", "events.events.k8s.io"])
    );
    // The other instance went on meanwhile; the policy gone, web-0 too.
    let others = wait_until(PATIENCE * 3, || {
        stages_of_set(kube)
            .iter()
            .any(|(name, stage, _)| name == "web-1" && stage == "serving")
    });
    assert!(others.is_some(), "{:?}", stages_of_set(kube));
    cluster
        .kubectl_run(
            &[
                "delete",
                "validatingadmissionpolicybinding",
                &policy,
                "--ignore-not-found",
            ],
            None,
        )
        .unwrap();
    cluster
        .kubectl_run(
            &[
                "delete",
                "validatingadmissionpolicy",
                &policy,
                "--ignore-not-found",
            ],
            None,
        )
        .unwrap();
    let serving = wait_until(PATIENCE * 4, || {
        stages_of_set(kube)
            .iter()
            .all(|(_, stage, _)| stage == "serving")
            && degraded().is_empty()
    });
    assert!(
        serving.is_some(),
        "{:?} {}",
        stages_of_set(kube),
        degraded()
    );
}

/// The status of the Server `name` of `ns` as the API server has it now
/// (null while there is none).
fn server_status(cluster: &verdict_testcluster::Cluster, ns: &str, name: &str) -> Value {
    cluster
        .kubectl_run(
            &["-n", ns, "get", "servers.verdict.dev", name, "-o", "json"],
            None,
        )
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .map(|server| server["status"].clone())
        .unwrap_or(Value::Null)
}

/// One of the chart's admission policies (its name ending in `suffix`:
/// `-force`, `-fencing`), rendered with these `helm template` switches as
/// the release `ns` in `ns`, bound to the namespace `ns` only (the shared
/// control plane holds other tests' Servers).
fn chart_policy(
    cluster: &verdict_testcluster::Cluster,
    ns: &str,
    suffix: &str,
    switches: &[&str],
) -> String {
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart/verdict");
    let rendered = cluster
        .binaries()
        .helm_template(&chart, ns, ns, switches)
        .unwrap();
    let documents: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&rendered)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|o| {
            o["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(suffix))
        })
        .map(|mut o| {
            if o["kind"] == "ValidatingAdmissionPolicyBinding" {
                o["spec"]["matchResources"] = json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}});
            }
            o
        })
        .collect();
    assert_eq!(documents.len(), 2, "{rendered}");
    documents
        .iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// On the real API server: a Server's status written by a person (a
/// `kubectl patch --subresource=status` mid-deploy, whatever webhooks are
/// up) is put back by its controller, which names the writer by the
/// server's field managers in a warning Event; a stage is forced through
/// the Server's spec, and the chart's ValidatingAdmissionPolicy — enforced
/// by the API server itself — refuses a request that names someone else
/// as asking, and one into service by a user outside the groups that vouch.
#[test]
fn a_hand_written_status_is_put_back_and_the_api_server_decides_who_forces_a_stage() {
    use crate::vmdelivery::{DONE, HookServer, deployment, set};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let test = "a_hand_written_status_is_put_back_and_the_api_server_decides_who_forces_a_stage";
    let Some(cluster) = shared(test) else {
        return;
    };
    let namespace = Namespace::new(cluster, "real-forced");
    let (kube, ns) = (&namespace.kube, namespace.kube.ns.clone());
    cluster
        .apply(&chart_policy(
            cluster,
            &ns,
            "-force",
            &[
                "--set",
                "host.vmDelivery=true",
                "--set",
                "host.kubevirt=true",
                "--set",
                "webhooks.enabled=false",
                "--set",
                "host.force.inServiceGroups={vouchers}",
            ],
        ))
        .unwrap();
    // The safe rate, the rollout's to give (the host here writes as the
    // test control plane's admin).
    cluster
        .apply(&chart_policy(
            cluster,
            &ns,
            "-target",
            &[
                "--set",
                "host.vmDelivery=true",
                "--set",
                "webhooks.enabled=false",
                "--set",
                "host.username=admin",
            ],
        ))
        .unwrap();
    // People who may write Servers, as RBAC allows them.
    cluster
        .apply(
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "server-writers", "namespace": ns},
                "rules": [{"apiGroups": ["verdict.dev"], "resources": ["servers", "servers/status"],
                           "verbs": ["get", "list", "create", "patch", "update"]}],
            })
            .to_string(),
        )
        .unwrap();
    cluster
        .apply(
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "server-writers", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "server-writers"},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ana"},
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"},
                ],
            })
            .to_string(),
        )
        .unwrap();
    let hold = Arc::new(AtomicBool::new(true));
    let holding = Arc::clone(&hold);
    let hooks = HookServer::start(move |call| {
        if call["step"] == "deploy-code" && holding.load(Ordering::SeqCst) {
            return (200, r#"{"status":"running","retryAfterSeconds":1}"#.into());
        }
        (200, DONE.into())
    });
    let data = tempfile::tempdir().unwrap();
    let config = endpoint_config(data.path(), &hooks.url);
    let _host = delivering_host(
        &default_plugins(),
        data.path(),
        &cluster.kubeconfig(),
        &config,
        &ns,
    );
    apply_in(
        cluster,
        &ns,
        set(1, json!([{"name": "jdk", "version": "21"}])),
    );
    apply_in(cluster, &ns, deployment("1.0", json!([])));
    let status = || server_status(cluster, &ns, "web-0");
    let deploying = wait_until(PATIENCE * 4, || {
        status()["stage"] == "deploying"
            && hooks.steps_of("web-0").contains(&"deploy-code".to_string())
    });
    assert!(deploying.is_some(), "{:#}", status());

    // mallory writes the status: serving, ready.
    let as_user = |user: &str, groups: &[&str], args: &[&str]| {
        let mut all = vec!["-n", ns.as_str(), "--as", user];
        for group in groups {
            all.extend(["--as-group", group]);
        }
        all.extend_from_slice(args);
        cluster.kubectl_run(&all, None)
    };
    as_user(
        "mallory",
        &[],
        &[
            "patch",
            "servers.verdict.dev",
            "web-0",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"stage":"serving","ready":true}}"#,
        ],
    )
    .unwrap();
    let put_back = wait_until(PATIENCE * 2, || {
        let now = status();
        now["stage"] == "deploying" && now["ready"] == false
    });
    assert!(put_back.is_some(), "never put back: {:#}", status());
    let said = wait_until(PATIENCE, || {
        let events: Value =
            serde_json::from_str(&kube.run(&["get", "events.events.k8s.io", "-o", "json"]))
                .unwrap();
        events["items"].as_array().into_iter().flatten().any(|e| {
            e["type"] == "Warning"
                && e["reason"] == "StatusRestored"
                && e["note"].as_str().is_some_and(|n| {
                    n.contains("web-0")
                        && n.contains("kubectl")
                        && n.contains("stage deploying → serving")
                })
        })
    });
    assert!(
        said.is_some(),
        "{}",
        kube.run(&["get", "events.events.k8s.io"])
    );
    assert!(
        !hooks
            .steps_of("web-0")
            .contains(&"attach-load-balancer".to_string()),
        "{:?}",
        hooks.steps_of("web-0")
    );

    // A force naming someone else as asking, and one into service by a
    // user who does not vouch: both refused by the API server.
    let force = |by: &str, stage: &str| {
        json!({"spec": {"force": {"stage": stage, "by": by, "why": "deployed by hand"}}})
            .to_string()
    };
    let patch_spec = |user: &str, groups: &[&str], body: &str| {
        as_user(
            user,
            groups,
            &[
                "patch",
                "servers.verdict.dev",
                "web-0",
                "--type=merge",
                "-p",
                body,
            ],
        )
    };
    let refused = patch_spec("ana", &["vouchers"], &force("bob", "serving"))
        .expect_err("a force by someone else was accepted");
    assert!(
        refused
            .to_string()
            .contains("spec.force.by must name who asks: ana, not bob"),
        "{refused}"
    );
    let refused = patch_spec("ana", &[], &force("ana", "serving"))
        .expect_err("a force into service by someone who does not vouch was accepted");
    assert!(
        refused.to_string().contains("only members of vouchers"),
        "{refused}"
    );
    let refused = patch_spec("ana", &["vouchers"], &force("ana", "-5"))
        .expect_err("a stage that is none of the machine's was accepted");
    assert!(
        refused.to_string().contains("spec.force.stage"),
        "{refused}"
    );
    assert_eq!(status()["stage"], "deploying", "{:#}", status());
    // The safe rate is the rollout's to give: a Server made by hand that
    // may leave service at once, or has its code released, is refused;
    // the rollout's own writes of both pass (web-0 is deploying).
    for (field, says) in [
        (
            "mayDisrupt",
            "spec.mayDisrupt is given by the rollout of its set",
        ),
        (
            "released",
            "spec.released is given by the rollout of its set",
        ),
    ] {
        let intruder = json!({
            "apiVersion": "verdict.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": "intruder", "namespace": ns},
            "spec": {"replicaSet": "web", "environment": [], field: true},
        });
        let refused = cluster
            .kubectl_run(
                &["-n", &ns, "--as", "ana", "create", "-f", "-"],
                Some(&intruder.to_string()),
            )
            .expect_err("a Server made by hand with the rollout's word was accepted");
        assert!(refused.to_string().contains(says), "{refused}");
    }
    let spec = cluster
        .kubectl_run(
            &[
                "-n",
                &ns,
                "get",
                "servers.verdict.dev",
                "web-0",
                "-o",
                "jsonpath={.spec.mayDisrupt}",
            ],
            None,
        )
        .unwrap();
    assert_eq!(spec.trim(), "true", "the rollout's word is written");

    // By one who vouches: taken, the checks before any traffic.
    patch_spec("ana", &["vouchers"], &force("ana", "serving")).unwrap();
    let entered = wait_until(PATIENCE * 3, || {
        let now = status();
        now["stage"] == "serving" && now["list"]["outcome"] == "succeeded"
    });
    assert!(entered.is_some(), "{:#}", status());
    let now = status();
    assert_eq!(now["forced"]["request"]["by"], "ana", "{now:#}");
    assert_eq!(
        crate::vmdelivery::list_tasks(&now),
        ["health-check", "bind-monitoring", "attach-load-balancer"]
    );
    hold.store(false, Ordering::SeqCst);
    for policy in [
        format!("{ns}-verdict-force"),
        format!("{ns}-verdict-target"),
    ] {
        cluster
            .kubectl_run(
                &[
                    "delete",
                    &format!("validatingadmissionpolicybinding/{policy}"),
                    &format!("validatingadmissionpolicy/{policy}"),
                    "--ignore-not-found",
                ],
                None,
            )
            .unwrap();
    }
}

/// Fencing on the real API server: with the chart's admission policy, a
/// Server's status is written only in the term the Lease holds. A leader
/// stopped (SIGSTOP) past its lease is replaced; the new leader writes in
/// its own term; a write in the old term — one that left before its writer
/// knew it was deposed — is refused by the API server itself; and the old
/// leader, resumed, writes nothing.
#[test]
fn a_deposed_leaders_late_status_write_is_refused_on_the_real_api_server() {
    use crate::vmdelivery::{DONE, HookServer, set};
    let test = "a_deposed_leaders_late_status_write_is_refused_on_the_real_api_server";
    let Some(cluster) = shared(test) else {
        return;
    };
    super::tasks::install_task_crd(cluster);
    let namespace = Namespace::new(cluster, "real-fenced");
    let (kube, ns) = (&namespace.kube, namespace.kube.ns.clone());
    let lease = format!("{ns}-verdict");
    cluster
        .apply(&chart_policy(
            cluster,
            &ns,
            "-fencing",
            &[
                "--set",
                "host.vmDelivery=true",
                "--set",
                "host.kubevirt=true",
                "--set",
                "webhooks.enabled=false",
            ],
        ))
        .unwrap();
    let hooks = HookServer::start(|_| (200, DONE.into()));
    let data = tempfile::tempdir().unwrap();
    let config = endpoint_config(data.path(), &hooks.url);
    let kubeconfig = cluster.kubeconfig();
    let group = crate::replicas::Group::start(
        &super::plugins(),
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &ns,
        2,
        &[
            "--config",
            config.to_str().unwrap(),
            "--vm-delivery",
            "--vm-delivery-namespace",
            &ns,
            "--lease-name",
            &lease,
        ],
    );
    let first = group.leader();
    let other = group.other(first);
    apply_in(
        cluster,
        &ns,
        set(1, json!([{"name": "jdk", "version": "21"}])),
    );
    let status = || server_status(cluster, &ns, "web-0");
    let by_first = format!("{}/", group.names[first]);
    let serving = wait_until(PATIENCE * 4, || {
        let now = status();
        now["stage"] == "serving"
            && now["lock"].is_null()
            && now["writer"]
                .as_str()
                .is_some_and(|w| w.starts_with(&by_first))
    });
    assert!(serving.is_some(), "{:#}", status());
    let old_writer = status()["writer"].as_str().unwrap().to_string();

    // Stopped past its lease: the other replica takes over.
    let pid = group.server(first).pid().to_string();
    let signal = |which: &str| {
        let sent = std::process::Command::new("kill")
            .args([which, &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill {which} {pid}");
    };
    signal("-STOP");
    let leads = |i: usize| group.server(i).get("/readyz").1["leader"] == true;
    let taken = wait_until(PATIENCE, || leads(other));
    if taken.is_none() {
        signal("-CONT");
    }
    assert!(taken.is_some(), "{} never took over", group.names[other]);

    // The new leader writes in its own term.
    apply_in(
        cluster,
        &ns,
        set(1, json!([{"name": "jdk", "version": "25"}])),
    );
    let by_other = format!("{}/", group.names[other]);
    let moved = wait_until(PATIENCE * 4, || {
        let now = status();
        now["stage"] == "serving"
            && now["environmentText"] == "jdk=25"
            && now["lock"].is_null()
            && now["writer"]
                .as_str()
                .is_some_and(|w| w.starts_with(&by_other))
    });
    if moved.is_none() {
        signal("-CONT");
    }
    assert!(moved.is_some(), "{:#}", status());

    // A write in the old term is refused by the API server.
    let late = json!({"status": {"writer": old_writer, "stage": "failed"}}).to_string();
    let refused = kube.cluster.kubectl_run(
        &[
            "-n",
            &ns,
            "patch",
            "servers.verdict.dev",
            "web-0",
            "--subresource=status",
            "--type=merge",
            "-p",
            &late,
        ],
        None,
    );
    signal("-CONT");
    let refused = refused.expect_err("a write in a deposed leader's term was taken");
    assert!(
        refused
            .to_string()
            .contains("written by the leader in the term the Lease holds"),
        "{refused}"
    );

    // Resumed, the first leads no more and none of its writes land.
    let deposed = wait_until(PATIENCE, || {
        group.server(first).get("/readyz").1["leader"] == false
    });
    assert!(deposed.is_some(), "the resumed replica still says it leads");
    let now = status();
    assert!(
        now["writer"]
            .as_str()
            .is_some_and(|w| w.starts_with(&by_other))
            && now["stage"] == "serving",
        "{now:#}"
    );
}
