//! Policies delivered by `Policy` objects on the real API server: the
//! chart's CRD is served with its columns and its status subresource, and a
//! Policy edited with kubectl reaches three replicas with no failed read.

use serde_json::json;
use verdict_testcluster::Cluster;

use super::{PATIENCE, plugins, shared, unique, until_kubectl};
use crate::delivery::{Registry, push};
use crate::replicas::{Group, Readers};
use crate::support::{default_plugin, example_plugin, wait_until};

fn apply_policy(cluster: &Cluster, namespace: &str, source: &str) {
    let policy = json!({
        "apiVersion": "verdict.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": "delivered", "namespace": namespace},
        "spec": {"world": "status", "source": source},
    });
    cluster.apply(&policy.to_string()).unwrap();
}

#[test]
fn a_policy_edited_on_the_real_api_server_reaches_three_replicas() {
    let test = "a_policy_edited_on_the_real_api_server_reaches_three_replicas";
    let Some(cluster) = shared(test) else {
        return;
    };
    let Some(registry) = Registry::start(test) else {
        return;
    };
    super::tasks::install_task_crd(cluster);
    super::tasks::install_crd(cluster, "policy-crd.yaml", "policies.verdict.dev");
    let namespace = unique("real-delivery");
    cluster.create_namespace(&namespace, &[]).unwrap();
    let data = tempfile::tempdir().unwrap();
    let v1 = push(
        &registry,
        &default_plugin("status"),
        &registry.reference("p/status:v1"),
        data.path(),
    );
    let v2 = push(
        &registry,
        &example_plugin("restart-budget"),
        &registry.reference("p/status:v2"),
        data.path(),
    );
    let digest = |pinned: &str| pinned.rsplit('@').next().unwrap().to_string();

    // The server's schema refuses a Policy of no known world.
    let refused = cluster.apply(
        &json!({
            "apiVersion": "verdict.dev/v1alpha1", "kind": "Policy",
            "metadata": {"name": "weather", "namespace": namespace},
            "spec": {"world": "weather", "source": v1},
        })
        .to_string(),
    );
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("Unsupported value")
    );

    let kubeconfig = cluster.kubeconfig();
    let group = Group::start(
        &plugins(),
        &["--kubeconfig", kubeconfig.to_str().unwrap()],
        &namespace,
        3,
        &["--insecure-registry", &registry.address],
    );
    apply_policy(cluster, &namespace, &v1);
    let row = |digest: &str| {
        until_kubectl(
            cluster,
            &["get", "policies", "-n", &namespace, "--no-headers"],
            "every replica serving the digest",
            |s| s.contains(&format!("delivered   status   active   {digest}   3/3")),
        )
    };
    row(&digest(&v1));

    // Edited with kubectl under read load: every replica serves the new
    // digest, and no read failed.
    let bases = group.alive().map(|(_, s)| s.base.clone()).collect();
    let readers = Readers::start(bases, "/v1/apps");
    apply_policy(cluster, &namespace, &v2);
    row(&digest(&v2));
    let served = wait_until(PATIENCE, || {
        group.alive().all(|(_, s)| {
            s.get("/v1/plugins").1["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| {
                    p["name"] == "delivered"
                        && p["active"] == true
                        && p["current"]["name"] == "restart-budget"
                })
        })
    });
    assert!(served.is_some());
    let (made, failures) = readers.finish();
    assert!(made > 20, "only {made} reads");
    assert!(failures.is_empty(), "{failures:#?}");
}
