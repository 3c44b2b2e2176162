//! The Helm chart on the real API server, and verdict acting with its
//! ServiceAccount: the chart renders, passes the server's dry run and is
//! applied; verdict runs outside the cluster with the ServiceAccount's
//! token (there is no container runtime here), carries out tasks and
//! enforces failover on a node whose kubelet stops — evicting through the
//! real Eviction API, held by a PodDisruptionBudget until it is lifted —
//! and every request it made is compared with the chart's roles: nothing
//! it needs is missing, nothing granted goes unused, and a request outside
//! the role is refused.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use verdict_testcluster::{Cluster, Options};

use super::{PATIENCE, deployment, follow, own_node, pinned, private, until_kubectl};
use crate::serve::Server;
use crate::support::wait_until;

const RELEASE: &str = "vc";
const NAMESPACE: &str = "verdict-system";
const ACCOUNT: &str = "vc-verdict";

/// Failover's clocks and brakes, short for the test.
const CONFIG: &str = r#"
[failover]
every-ms = 200
max-retries = 20
backoff-ms = 1000
max-unhealthy = "100%"
trust-after-ms = 600000

[settings.failover]
grace-ms = 1000
offline-after-ms = 6000
stabilize-ms = 5000
"#;

fn render(cluster: &Cluster, sets: &[&str]) -> String {
    let mut args = vec![];
    for set in sets {
        args.extend(["--set", set]);
    }
    render_with(cluster.binaries(), &args)
}

/// The chart rendered with its CRDs and these `helm template` arguments.
fn render_with(binaries: &verdict_testcluster::Binaries, more: &[&str]) -> String {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart/verdict");
    let mut args = vec!["--include-crds"];
    args.extend_from_slice(more);
    binaries
        .helm_template(&chart, RELEASE, NAMESPACE, &args)
        .unwrap()
}

/// (verb, API group, resource[/subresource]) of every rule of the chart's
/// ClusterRole and Role.
fn granted(rendered: &str) -> BTreeSet<(String, String, String)> {
    let mut granted = BTreeSet::new();
    for document in serde_yaml_ng::Deserializer::from_str(rendered) {
        let object: Value = serde::Deserialize::deserialize(document).unwrap();
        if !matches!(object["kind"].as_str(), Some("ClusterRole" | "Role")) {
            continue;
        }
        for rule in object["rules"].as_array().unwrap() {
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        granted.insert((
                            verb.as_str().unwrap().to_string(),
                            group.as_str().unwrap().to_string(),
                            resource.as_str().unwrap().to_string(),
                        ));
                    }
                }
            }
        }
    }
    granted
}

/// (verb, API group, resource[/subresource]) of every resource request the
/// ServiceAccount made, by the API server's audit log, and those refused.
fn used(cluster: &Cluster) -> (BTreeSet<(String, String, String)>, Vec<String>) {
    let user = format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}");
    let log = std::fs::read_to_string(cluster.audit_log()).unwrap();
    let mut used = BTreeSet::new();
    let mut refused = Vec::new();
    for line in log.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        if event["user"]["username"] != user.as_str() || event["objectRef"].is_null() {
            continue;
        }
        let reference = &event["objectRef"];
        let mut resource = reference["resource"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(sub) = reference["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let key = (
            event["verb"].as_str().unwrap().to_string(),
            reference["apiGroup"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            resource,
        );
        if event["responseStatus"]["code"] == 403 {
            refused.push(format!("{key:?} {}", event["requestURI"]));
        }
        // A server-side apply that made its object was authorized as a
        // create too.
        if key.0 == "patch" && event["responseStatus"]["code"] == 201 {
            used.insert(("create".into(), key.1.clone(), key.2.clone()));
        }
        used.insert(key);
    }
    (used, refused)
}

fn task(server: &Server, body: Value) -> String {
    let (code, created) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
    assert_eq!(code, 201, "{body}: {created}");
    let id = created["id"].as_str().unwrap().to_string();
    let mut last = Value::Null;
    let finished = wait_until(PATIENCE, || {
        last = server.get(&format!("/v1/tasks/{id}")).1;
        matches!(
            last["phase"].as_str(),
            Some("succeeded" | "failed" | "cancelled")
        )
    });
    assert!(finished.is_some(), "{body} never finished: {last}");
    assert_eq!(last["phase"], "succeeded", "{body}: {last}");
    id
}

fn decision(server: &Server, node: &str) -> Value {
    let answer = server.get("/v1/failover").1;
    answer["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|d| d["node"] == node).cloned())
        .unwrap_or(Value::Null)
}

fn action<'a>(decision: &'a Value, key: &str) -> Option<&'a Value> {
    decision["actions"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
}

fn done(decision: &Value, key: &str) -> bool {
    action(decision, key).is_some_and(|a| a["state"] == "done")
        || decision["taken"][key]["outcome"] == "done"
}

fn decision_until(
    server: &Server,
    node: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let took = wait_until(PATIENCE * 2, || {
        last = decision(server, node);
        check(&last)
    });
    assert!(
        took.is_some(),
        "{what}: never happened; last decision {last:#}"
    );
    last
}

#[test]
fn the_chart_installs_and_verdict_acts_with_exactly_its_role() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cluster) = private(
        "the_chart_installs_and_verdict_acts_with_exactly_its_role",
        dir.path(),
        Options {
            nodes: 2,
            node_grace: Duration::from_secs(10),
            ..Options::default()
        },
    ) else {
        return;
    };

    // The chart: the server's dry run, then for real.
    cluster.create_namespace(NAMESPACE, &[]).unwrap();
    let rendered = render(
        &cluster,
        &[
            "host.executeTasks=true",
            "host.failoverEnforce=true",
            // No KubeVirt here: its rules would go unused.
            "host.kubevirt=false",
            "webhooks.enabled=false",
        ],
    );
    let dry = cluster
        .kubectl_run(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered))
        .unwrap();
    assert!(
        dry.contains("deployment.apps/vc-verdict created (server dry run)"),
        "{dry}"
    );
    cluster.apply(&rendered).unwrap();
    // Its Deployment is valid and schedulable: KWOK runs its pod.
    until_kubectl(
        &cluster,
        &[
            "get",
            "deployment",
            ACCOUNT,
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.status.availableReplicas}",
        ],
        "the chart's Deployment available",
        |s| s == "3",
    );

    // verdict outside the cluster, as the chart's ServiceAccount.
    let account_config = dir.path().join("verdict.kubeconfig");
    cluster
        .service_account_kubeconfig(NAMESPACE, ACCOUNT, &account_config)
        .unwrap();

    // What verdict will act on: a node of the test's own with a stateless
    // Deployment (held by a PodDisruptionBudget) and a StatefulSet on it.
    let node = "fo";
    own_node(&cluster, node);
    cluster.create_namespace("apps", &[]).unwrap();
    cluster
        .apply(&pinned(deployment("apps", "web", 2, "0s"), node).to_string())
        .unwrap();
    let mut db = pinned(deployment("apps", "db", 1, "0s"), node);
    db["kind"] = json!("StatefulSet");
    db["spec"]["serviceName"] = json!("db");
    cluster.apply(&db.to_string()).unwrap();
    cluster
        .apply(
            &json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "namespace": "apps"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app.kubernetes.io/instance": "web"}}},
            })
            .to_string(),
        )
        .unwrap();
    let mut cache = deployment("apps", "cache", 1, "0s");
    cache["kind"] = json!("StatefulSet");
    cache["spec"]["serviceName"] = json!("cache");
    cluster.apply(&cache.to_string()).unwrap();

    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("verdict.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let server = follow(
        &account_config,
        data.path(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--task-store",
            "kubernetes",
            "--tasks-namespace",
            NAMESPACE,
            "--task-history",
            "1",
            "--execute-tasks",
            "--failover-enforce",
            "--metrics-interval-ms",
            "500",
            "--leader-election",
            "--replica-name",
            "outside",
            "--lease-name",
            "vc-verdict-test",
        ],
    );
    assert!(
        wait_until(PATIENCE, || server.get("/readyz").0 == 200).is_some(),
        "not ready as the chart's ServiceAccount: {}",
        server.get("/readyz").1
    );
    for app in ["apps/web", "apps/db", "apps/cache"] {
        super::until(&server, app, "running", |v| v["stable"] == "running");
    }

    // Tasks carried out on the cluster.
    task(
        &server,
        json!({"app": "apps/api", "action": "create", "params": {"image": "api:1", "replicas": 1}}),
    );
    task(
        &server,
        json!({"app": "apps/api", "action": "scale", "params": {"replicas": 2}}),
    );
    task(
        &server,
        json!({"app": "apps/api", "action": "update", "params": {"image": "api:2"}}),
    );
    task(&server, json!({"app": "apps/api", "action": "restart"}));
    task(&server, json!({"app": "apps/api", "action": "stop"}));
    task(&server, json!({"app": "apps/api", "action": "start"}));
    task(&server, json!({"app": "apps/api", "action": "delete"}));
    task(
        &server,
        json!({"app": "apps/cache", "action": "scale", "params": {"replicas": 2}}),
    );
    task(
        &server,
        json!({"app": "apps/cache", "action": "update", "params": {"image": "cache:2"}}),
    );
    // Not made by verdict: handed to it first.
    task(
        &server,
        json!({"app": "apps/cache", "action": "adopt", "requested-by": "ops"}),
    );
    task(&server, json!({"app": "apps/cache", "action": "delete"}));
    // A whole app from seed 000's Task in a namespace verdict makes, with
    // storage (a volume of the test's class), a license, configuration and
    // a Service; its claims grown; deleted with its claims and namespace.
    cluster
        .apply(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: local}\n\
             provisioner: kubernetes.io/no-provisioner\nallowVolumeExpansion: true\n---\n\
             apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: local-0}\n\
             spec: {capacity: {storage: 5Gi}, accessModes: [ReadWriteOnce], storageClassName: local,\n\
             persistentVolumeReclaimPolicy: Retain, hostPath: {path: /tmp/local-0}}\n",
        )
        .unwrap();
    task(
        &server,
        json!({"app": "made/store", "action": "create", "params": {
            "image": "store:1", "replicas": 1, "storage_class_name": "local", "storage_class_size": "1Gi",
            "license": "TElDRU5TRQ==", "log_config": {"level": "info"}, "network_config": {"port": 80}}}),
    );
    task(
        &server,
        json!({"app": "made/store", "action": "update", "params": {"storage_class_size": "2Gi"}}),
    );
    task(
        &server,
        json!({"app": "made/store", "action": "delete", "params": {"delete_storage": true}}),
    );
    let namespace = cluster.kubectl_run(&["get", "namespace", "made"], None);
    assert!(
        namespace.is_err(),
        "the namespace verdict made is gone: {namespace:?}"
    );
    let image = cluster.kubectl_run(&["get", "deployment", "api", "-n", "apps"], None);
    assert!(image.is_err(), "apps/api was deleted: {image:?}");
    // What verdict saw of apps/api, where people look: its Events on the
    // Deployment (a status met again counts into the Event it wrote).
    until_kubectl(
        &cluster,
        &["events", "-n", "apps", "--for", "deployment/api"],
        "verdict's Events on apps/api",
        |s| s.contains("Stopped") && s.contains("→ stopped") && s.contains("Running"),
    );
    // Finished tasks beyond the history bound are deleted from the store.
    let kept = cluster
        .kubectl_run(
            &[
                "get",
                "tasks",
                "-n",
                NAMESPACE,
                "-l",
                "verdict.dev/app-name=api",
                "-o",
                "name",
            ],
            None,
        )
        .unwrap();
    assert_eq!(kept.lines().count(), 1, "{kept}");

    // The node's kubelet stops: cordoned, and the eviction is held by the
    // disruption budget…
    cluster.stop_kubelet(node).unwrap();
    let evict = "evict:Deployment/apps/web";
    let held = decision_until(&server, node, "eviction refused by the budget", |d| {
        done(d, "cordon")
            && action(d, evict).is_some_and(|a| {
                a["detail"]
                    .as_str()
                    .is_some_and(|t| t.contains("disruption budget"))
            })
    });
    assert_eq!(held["health"], "unknown", "{held}");
    until_kubectl(
        &cluster,
        &["get", "node", node, "-o", "jsonpath={.spec.unschedulable}"],
        "the node cordoned",
        |s| s == "true",
    );
    let pods = cluster
        .kubectl_run(
            &[
                "get",
                "pods",
                "-n",
                "apps",
                "-l",
                "app.kubernetes.io/instance=web",
                "-o",
                "name",
            ],
            None,
        )
        .unwrap();
    assert_eq!(
        pods.lines().count(),
        2,
        "no pod of web was evicted yet: {pods}"
    );
    // …until the budget is lifted; then the pods are evicted.
    cluster
        .kubectl_run(&["delete", "pdb", "web", "-n", "apps"], None)
        .unwrap();
    decision_until(&server, node, "evicted", |d| done(d, evict));

    // Offline: the StatefulSet's pod is released once a person approves.
    let release = "release:StatefulSet/apps/db";
    decision_until(&server, node, "release awaiting approval", |d| {
        action(d, release).is_some_and(|a| a["state"] == "awaiting-approval")
    });
    let (code, approved) = server.send(
        "POST",
        &format!("/v1/failover/nodes/{node}/approve"),
        Some(&json!({"action": release, "by": "ana", "reason": "fo is powered off"}).to_string()),
    );
    assert_eq!(code, 200, "{approved}");
    decision_until(&server, node, "released", |d| done(d, release));
    let taints = cluster
        .kubectl_run(
            &["get", "node", node, "-o", "jsonpath={.spec.taints[*].key}"],
            None,
        )
        .unwrap();
    assert!(
        taints.contains("node.kubernetes.io/out-of-service"),
        "{taints}"
    );

    // A Policy whose registry cannot be reached: the replica says so in
    // its status.
    cluster
        .apply(
            &json!({
                "apiVersion": "verdict.dev/v1alpha1", "kind": "Policy",
                "metadata": {"name": "unreachable", "namespace": NAMESPACE},
                "spec": {"world": "status", "mode": "shadow",
                    "source": format!("127.0.0.1:1/none@sha256:{}", "0".repeat(64))},
            })
            .to_string(),
        )
        .unwrap();
    until_kubectl(
        &cluster,
        &[
            "get",
            "policy",
            "unreachable",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.status.replicas.outside.error} {.status.ready}",
        ],
        "the Policy's status says why it is not served",
        |s| s.contains("127.0.0.1:1") && s.ends_with(" 0/1"),
    );

    // Promoted by a person: the Policy is edited (and served by none, as
    // its source cannot be reached: the plugin folder's still serves).
    let (code, body) = server.send(
        "POST",
        "/v1/policies/unreachable/promote",
        Some(&json!({"by": "ana", "reason": "checked"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    until_kubectl(
        &cluster,
        &[
            "get",
            "policy",
            "unreachable",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.spec.mode} {.metadata.annotations.verdict\\.dev/promoted-by}",
        ],
        "the Policy promoted",
        |s| s == "active ana",
    );

    // A status forced and lifted: shared with other replicas through a
    // ConfigMap, written twice.
    let (code, body) = server.send(
        "PUT",
        "/v1/apps/apps/web/override",
        Some(&json!({"status": "stopped", "by": "ana", "reason": "maintenance"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    let (code, body) = server.send("DELETE", "/v1/apps/apps/web/override?by=ana", None);
    assert_eq!(code, 200, "{body}");
    until_kubectl(
        &cluster,
        &[
            "get",
            "configmaps",
            "-n",
            NAMESPACE,
            "-l",
            "verdict.dev/shared=status-override",
            "-o",
            "jsonpath={.items[0].data.change}",
        ],
        "the lifting shared",
        |s| s.contains("\"cleared\""),
    );

    // Every request verdict made was allowed, and it used every grant (the
    // Leases' deletion is on shutdown). The replicas are listed.
    let (code, replicas) = server.get("/v1/replicas");
    assert_eq!(code, 200, "{replicas}");
    assert_eq!(replicas["replicas"][0]["name"], "outside", "{replicas}");
    let mut server = server;
    server.terminate();
    assert!(
        wait_until(PATIENCE, || server.exited().is_some()).is_some(),
        "verdict did not exit on SIGTERM"
    );
    let granted = granted(&rendered);
    let (used, refused) = used(&cluster);
    assert!(
        refused.is_empty(),
        "requests the chart's role refused: {refused:#?}"
    );
    let missing: Vec<_> = used.difference(&granted).collect();
    let unused: Vec<_> = granted.difference(&used).collect();
    assert!(
        missing.is_empty() && unused.is_empty(),
        "used but not granted: {missing:?}\ngranted but never used: {unused:?}"
    );

    // A request outside the role is refused.
    let mut as_account = std::process::Command::new(cluster.binaries().path("kubectl"));
    as_account.arg("--kubeconfig").arg(&account_config).args([
        "get",
        "serviceaccounts",
        "-n",
        NAMESPACE,
    ]);
    let refused = verdict_testcluster::run_with_input(&mut as_account, None).unwrap_err();
    assert!(refused.to_string().contains("Forbidden"), "{refused}");
}

#[test]
fn the_chart_grants_the_vm_delivery_exactly_what_it_uses() {
    use crate::vmdelivery::{DONE, HookServer, deployment, set};
    let dir = tempfile::tempdir().unwrap();
    let Some(cluster) = private(
        "the_chart_grants_the_vm_delivery_exactly_what_it_uses",
        dir.path(),
        Options {
            nodes: 2,
            node_grace: Duration::from_secs(10),
            ..Options::default()
        },
    ) else {
        return;
    };
    let cluster = std::sync::Arc::new(cluster);
    super::vms::install_kubevirt(&cluster);
    cluster.create_namespace(NAMESPACE, &[]).unwrap();
    let template = dir.path().join("install.yaml");
    std::fs::write(&template, super::vmdelivery::INSTALL_JOB).unwrap();
    let hooks = HookServer::start(|_| (200, DONE.into()));
    let data = tempfile::tempdir().unwrap();
    let config_path = super::vmdelivery::job_and_endpoint_config(data.path(), &hooks.url);
    let template_file = format!("host.jobTemplates.install\\.yaml={}", template.display());
    let config_file = format!("host.configFile={}", config_path.display());
    let switches = [
        "--set",
        "host.kubevirt=true",
        "--set",
        "webhooks.enabled=false",
    ];
    let base = render_with(cluster.binaries(), &switches);
    let mut delivering = switches.to_vec();
    delivering.extend([
        "--set",
        "host.vmDelivery=true",
        "--set-file",
        template_file.as_str(),
        "--set-file",
        config_file.as_str(),
    ]);
    let rendered = render_with(cluster.binaries(), &delivering);
    assert!(
        rendered.contains("install.yaml: |"),
        "the template is kept beside the configuration"
    );
    cluster.apply(&rendered).unwrap();
    super::vmdelivery::install_delivery_crds(&cluster);
    let account_config = dir.path().join("verdict.kubeconfig");
    cluster
        .service_account_kubeconfig(NAMESPACE, ACCOUNT, &account_config)
        .unwrap();

    let ns = "apps";
    cluster.create_namespace(ns, &[]).unwrap();
    let _player = super::vmdelivery::Player::start(std::sync::Arc::clone(&cluster), ns);
    let server = follow(
        &account_config,
        data.path(),
        &[
            "--config",
            config_path.to_str().unwrap(),
            "--vm-delivery",
            "--task-store",
            "kubernetes",
            "--tasks-namespace",
            NAMESPACE,
            "--leader-election",
            "--replica-name",
            "outside",
            "--lease-name",
            "vc-verdict-test",
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
    let serving = |code: &str, n: usize| {
        let (status, view) = server.get(&path);
        let instances = view["instances"].as_array().cloned().unwrap_or_default();
        status == 200
            && instances.len() == n
            && instances
                .iter()
                .all(|i| i["stage"] == "serving" && i["code"] == code && i["lock"].is_null())
    };
    assert!(
        wait_until(PATIENCE * 4, || serving("1.0", 2)).is_some(),
        "1.0 never delivered as the chart's ServiceAccount: {:#}",
        server.get(&path).1
    );

    // A gray release's gate, approved through verdict.
    let spec = json!({"spec": deployment("2.0", json!([{"instances": 1}, {"pause": {}}, {"instances": "100%"}]))["spec"]});
    cluster
        .kubectl_run(
            &[
                "patch",
                "vmdeployments.verdict.dev",
                "web",
                "-n",
                ns,
                "--type=merge",
                "-p",
                &spec.to_string(),
            ],
            None,
        )
        .unwrap();
    let at_gate = wait_until(PATIENCE * 2, || {
        server.get(&path).1["rollout"]["at-gate"] == true
    });
    assert!(at_gate.is_some(), "{:#}", server.get(&path).1);
    let (code, body) = server.send(
        "POST",
        &format!("{path}/approve"),
        Some(&json!({"by": "ana", "why": "fine"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    assert!(
        wait_until(PATIENCE * 3, || serving("2.0", 2)).is_some(),
        "2.0 never delivered: {:#}",
        server.get(&path).1
    );
    let (code, log) = server.get(&format!("{path}/instances/web-0/log"));
    assert_eq!(code, 200, "{log}");

    // An instance named offline: drained, its VM deleted.
    cluster
        .kubectl_run(
            &[
                "patch",
                "vmreplicasets.verdict.dev",
                "web",
                "-n",
                ns,
                "--type=merge",
                "-p",
                r#"{"spec":{"offline":["web-1"]}}"#,
            ],
            None,
        )
        .unwrap();
    assert!(
        wait_until(PATIENCE * 3, || serving("2.0", 1)).is_some(),
        "web-1 never taken offline: {:#}",
        server.get(&path).1
    );

    // Every request was allowed, and every grant the delivery adds to the
    // chart's role was used.
    let mut server = server;
    server.terminate();
    assert!(
        wait_until(PATIENCE, || server.exited().is_some()).is_some(),
        "verdict did not exit on SIGTERM"
    );
    let (used, refused) = used(&cluster);
    assert!(
        refused.is_empty(),
        "requests the chart's role refused: {refused:#?}"
    );
    let added: BTreeSet<_> = granted(&rendered)
        .difference(&granted(&base))
        .cloned()
        .collect();
    assert!(
        added.contains(&("create".into(), "batch".into(), "jobs".into())),
        "{added:?}"
    );
    let unused: Vec<_> = added.difference(&used).collect();
    assert!(
        unused.is_empty(),
        "granted for the delivery but never used: {unused:?}"
    );
}

/// The chart's PrometheusRule, rendered, as Prometheus' rule file (JSON,
/// which promtool reads as YAML).
fn alert_rules(binaries: &verdict_testcluster::Binaries) -> Value {
    let rendered = render_with(binaries, &["--set", "metrics.prometheusRule.enabled=true"]);
    serde_yaml_ng::Deserializer::from_str(&rendered)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("a PrometheusRule")["spec"]
        .clone()
}

#[test]
fn the_charts_alerts_are_valid_rules_that_fire_when_they_should() {
    let test = "the_charts_alerts_are_valid_rules_that_fire_when_they_should";
    let (Some(bin), Some(promtool)) = (
        std::env::var_os("VERDICT_TESTCLUSTER_BIN"),
        std::env::var_os("VERDICT_PROMTOOL"),
    ) else {
        // helm comes with Go, promtool from Debian (`cargo xtask test`).
        super::skip::<()>(test);
        return;
    };
    let binaries = verdict_testcluster::Binaries::at(Path::new(&bin)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, alert_rules(&binaries).to_string()).unwrap();
    let promtool = |args: &[&str]| {
        let mut command = std::process::Command::new(&promtool);
        command.args(args).current_dir(dir.path());
        verdict_testcluster::run_with_input(&mut command, None)
    };
    let checked = promtool(&["check", "rules", "rules.yaml"]);
    assert!(checked.is_ok(), "{checked:?}");

    // Two replicas report the same app: one alert, by its labels. An app
    // in panic for five minutes pages, one that recovers within them does
    // not; an app running half of its time warns; a history not written
    // for ten minutes warns.
    let panic = |app: &str| {
        json!({"summary": format!("shop/{app} is in panic"),
            "description": format!("Its pods are failing (crash loops, image pulls) for 5m; GET /v1/apps/shop/{app}/history says since when and why.")})
    };
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": "verdict_app_status{namespace=\"shop\",app=\"api\",status=\"panic\",pod=\"verdict-0\"}", "values": "1x30"},
                {"series": "verdict_app_status{namespace=\"shop\",app=\"api\",status=\"panic\",pod=\"verdict-1\"}", "values": "1x30"},
                {"series": "verdict_app_status{namespace=\"shop\",app=\"web\",status=\"panic\",pod=\"verdict-0\"}", "values": "1 1 1 0x27"},
                {"series": "verdict_app_status_seconds_total{namespace=\"shop\",app=\"web\",status=\"running\",pod=\"verdict-0\"}", "values": "0+30x30"},
                {"series": "verdict_app_status_seconds_total{namespace=\"shop\",app=\"web\",status=\"degraded\",pod=\"verdict-0\"}", "values": "0+30x30"},
                {"series": "verdict_app_status_seconds_total{namespace=\"shop\",app=\"cart\",status=\"running\",pod=\"verdict-0\"}", "values": "0+60x30"},
                {"series": "verdict_history_ok{pod=\"verdict-0\"}", "values": "0x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "VerdictAppPanic", "exp_alerts": []},
                {"eval_time": "6m", "alertname": "VerdictAppPanic", "exp_alerts": [
                    {"exp_labels": {"severity": "critical", "namespace": "shop", "app": "api"},
                     "exp_annotations": panic("api")}]},
                {"eval_time": "25m", "alertname": "VerdictAppAvailabilityLow", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "namespace": "shop", "app": "web"},
                     "exp_annotations": {"summary": "shop/web ran less than 0.99 of the last day",
                        "description": "GET /v1/apps/shop/web/availability?window=1d has the incidents and times to recover."}}]},
                {"eval_time": "5m", "alertname": "VerdictHistoryNotWritten", "exp_alerts": []},
                {"eval_time": "12m", "alertname": "VerdictHistoryNotWritten", "exp_alerts": [
                    {"exp_labels": {"severity": "warning", "pod": "verdict-0"},
                     "exp_annotations": {"summary": "verdict cannot write its history on verdict-0",
                        "description": "Its /readyz says why (a full disk, a damaged history.db); the verdicts are served meanwhile."}}]},
            ],
        }],
    });
    std::fs::write(dir.path().join("tests.yaml"), tests.to_string()).unwrap();
    let tested = promtool(&["test", "rules", "tests.yaml"]);
    assert!(tested.is_ok(), "{tested:?}");
}

/// `helm template` of the chart as a newcomer first runs it, with no
/// flags: it renders (helm assumes an old Kubernetes then; the version is
/// checked only where the chart talks to a cluster). The webhooks given a
/// URL and a CA bundle of the user's own make no certificate; given a URL
/// alone, they trust the chart's own CA, whose certificate names the
/// addresses asked for. The image is pulled by digest when one is given.
#[test]
fn helm_template_renders_the_chart_without_flags() {
    let test = "helm_template_renders_the_chart_without_flags";
    let Some(bin) = std::env::var_os("VERDICT_TESTCLUSTER_BIN") else {
        super::skip::<()>(test);
        return;
    };
    let helm = Path::new(&bin).join("helm");
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart/verdict");
    let template = |args: &[&str]| -> Vec<Value> {
        let mut command = std::process::Command::new(&helm);
        command.args(["template", "vc"]).arg(&chart).args(args);
        let rendered = verdict_testcluster::run_with_input(&mut command, None)
            .unwrap_or_else(|e| panic!("helm template {args:?}: {e}"));
        serde_yaml_ng::Deserializer::from_str(&rendered)
            .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
            .filter(|o| !o.is_null())
            .collect()
    };
    let kinds = |objects: &[Value]| -> Vec<String> {
        objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let image = |objects: &[Value]| -> String {
        objects.iter().find(|o| o["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"]
            ["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string()
    };

    let plain = template(&[]);
    for kind in [
        "Deployment",
        "Secret",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        assert!(
            kinds(&plain).iter().any(|k| k == kind),
            "{kind}: {:?}",
            kinds(&plain)
        );
    }
    // The chart's default image is the one `cargo xtask image` names.
    assert_eq!(
        image(&plain),
        format!("verdict:{}", env!("CARGO_PKG_VERSION"))
    );

    let own = template(&[
        "--set",
        "webhooks.url=https://verdict.example:8443/v1/admission/review",
        "--set",
        "webhooks.caBundle=Zm9v",
        "--set",
        "tls.secretName=mine",
        "--set",
        "image.digest=sha256:0123",
    ]);
    assert!(
        !kinds(&own).iter().any(|k| k == "Secret"),
        "{:?}",
        kinds(&own)
    );
    let webhook = own
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .unwrap();
    assert_eq!(webhook["webhooks"][0]["clientConfig"]["caBundle"], "Zm9v");
    let deployment = own.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].to_string();
    assert!(volumes.contains(r#""secretName":"mine""#), "{volumes}");
    assert_eq!(image(&own), "verdict@sha256:0123");

    let outside = template(&[
        "--set",
        "webhooks.url=https://127.0.0.1:8443/v1/admission/review",
        "--set",
        "tls.ipAddresses={127.0.0.1}",
    ]);
    let secret = outside.iter().find(|o| o["kind"] == "Secret").unwrap();
    let webhook = outside
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .unwrap();
    assert_eq!(
        webhook["webhooks"][0]["clientConfig"]["caBundle"], secret["data"]["ca.crt"],
        "the webhooks trust the chart's own CA"
    );
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["tls.crt"].as_str().unwrap())
        .unwrap();
    let mut openssl = std::process::Command::new("openssl");
    openssl.args(["x509", "-noout", "-ext", "subjectAltName"]);
    let names =
        verdict_testcluster::run_with_input(&mut openssl, Some(&String::from_utf8(pem).unwrap()))
            .unwrap();
    assert!(
        names.contains("IP Address:127.0.0.1") && names.contains("DNS:vc-verdict.default.svc"),
        "{names:?}"
    );
}

/// The chart's Grafana dashboard: a ConfigMap for Grafana's sidecar whose
/// JSON is a dashboard (uid, title, a Prometheus data source variable,
/// panels that do not overlap), every query of which parses (promtool) and
/// names only metrics a running host serves.
#[test]
fn the_charts_grafana_dashboard_queries_what_verdict_serves() {
    let test = "the_charts_grafana_dashboard_queries_what_verdict_serves";
    let (Some(bin), Some(promtool)) = (
        std::env::var_os("VERDICT_TESTCLUSTER_BIN"),
        std::env::var_os("VERDICT_PROMTOOL"),
    ) else {
        super::skip::<()>(test);
        return;
    };
    let binaries = verdict_testcluster::Binaries::at(Path::new(&bin)).unwrap();
    let rendered = render_with(
        &binaries,
        &["--set", "metrics.grafanaDashboard.enabled=true"],
    );
    let config_map = serde_yaml_ng::Deserializer::from_str(&rendered)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "vc-verdict-dashboard")
        .expect("the dashboard's ConfigMap");
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value =
        serde_json::from_str(config_map["data"]["verdict.json"].as_str().unwrap()).unwrap();
    assert_eq!(dashboard["uid"], "verdict-overview");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    assert_eq!(dashboard["templating"]["list"][0]["type"], "datasource");
    let panels = dashboard["panels"].as_array().unwrap();

    // Panels on the grid, none over another.
    let mut cells = BTreeSet::new();
    for panel in panels {
        let grid = &panel["gridPos"];
        let (x, y, w, h) = (
            grid["x"].as_u64().unwrap(),
            grid["y"].as_u64().unwrap(),
            grid["w"].as_u64().unwrap(),
            grid["h"].as_u64().unwrap(),
        );
        assert!(x + w <= 24, "{panel}");
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(
                    cells.insert((cx, cy)),
                    "panels overlap at {cx},{cy}: {panel}"
                );
            }
        }
    }

    // Every query: a rule promtool accepts, naming metrics the host serves.
    let exprs: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 12, "{exprs:?}");
    let dir = tempfile::tempdir().unwrap();
    let rules = json!({"groups": [{"name": "dashboard", "rules": exprs.iter().enumerate()
        .map(|(i, e)| json!({"record": format!("dashboard:query{i}"), "expr": e})).collect::<Vec<_>>()}]});
    std::fs::write(dir.path().join("rules.yaml"), rules.to_string()).unwrap();
    let mut check = std::process::Command::new(&promtool);
    check
        .args(["check", "rules", "rules.yaml"])
        .current_dir(dir.path());
    let checked = verdict_testcluster::run_with_input(&mut check, None);
    assert!(checked.is_ok(), "{checked:?}");

    let plugins = crate::support::plugin_folder(&["status", "admission", "failover", "lifecycle"]);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(plugins.path(), data.path(), &["--demo"]);
    let text = reqwest::blocking::get(format!("{}/metrics", server.base))
        .unwrap()
        .text()
        .unwrap();
    let mut served = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (name, kind) = (words.next().unwrap(), words.next().unwrap());
            served.insert(name.to_string());
            match kind {
                "counter" => {
                    served.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for part in ["bucket", "sum", "count"] {
                        served.insert(format!("{name}_{part}"));
                    }
                }
                _ => {}
            }
        }
    }
    for expr in &exprs {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("verdict_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                served.contains(&name),
                "{name} (in {expr}) is not served: {served:?}"
            );
            rest = &rest[at + name.len()..];
        }
    }
}

/// The chart's Grafana dashboard is a dashboard by Grafana's own schema:
/// compiled as a typed `Dashboard` of `@grafana/schema` (the types Grafana
/// generates from it) by the TypeScript compiler, which refuses a field the
/// schema does not know, one it requires missing, or a value of the wrong
/// type. A panel with a misspelt field is refused, so the check can fail.
/// Needs no control plane: `cargo xtask test` installs the pinned schema
/// (`tests/grafana`) and names it in `VERDICT_GRAFANA_SCHEMA`.
#[test]
fn the_charts_grafana_dashboard_is_a_dashboard_by_grafanas_schema() {
    let Some(schema) = std::env::var_os("VERDICT_GRAFANA_SCHEMA") else {
        crate::support::skipped(
            "GRAFANA'S DASHBOARD SCHEMA IS NOT INSTALLED (VERDICT_GRAFANA_SCHEMA is unset): the \
             dashboard's schema check is skipped; `cargo xtask test` installs it and runs it",
            None,
        );
        return;
    };
    let schema = Path::new(&schema);
    let check = |dashboard: &Value| -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(schema.join("node_modules"), dir.path().join("node_modules"))
            .unwrap();
        std::fs::write(
            dir.path().join("dashboard.ts"),
            format!(
                "import type {{ Dashboard }} from \"@grafana/schema\";\n\
                 export const dashboard: Dashboard = {dashboard:#};\n"
            ),
        )
        .unwrap();
        let config = json!({
            "compilerOptions": {"strict": true, "noEmit": true, "module": "nodenext",
                "moduleResolution": "nodenext", "target": "es2022", "skipLibCheck": true},
            "files": ["dashboard.ts"],
        });
        std::fs::write(dir.path().join("tsconfig.json"), config.to_string()).unwrap();
        let out = std::process::Command::new(schema.join("node_modules/.bin/tsc"))
            .args(["-p", "."])
            .current_dir(dir.path())
            .output()
            .expect("the TypeScript compiler runs");
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/chart/verdict/dashboards/verdict.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    if let Err(errors) = check(&dashboard) {
        panic!(
            "{} is not a dashboard by Grafana's schema:\n{errors}",
            file.display()
        );
    }

    let mut misspelt = dashboard.clone();
    let panel = misspelt["panels"][1].as_object_mut().unwrap();
    let title = panel.remove("title").expect("the second panel has a title");
    panel.insert("titel".into(), title);
    let refused = check(&misspelt).expect_err("a panel's misspelt field is refused");
    assert!(refused.contains("titel"), "{refused}");
}
