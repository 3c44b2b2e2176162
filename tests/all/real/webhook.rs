//! The chart's webhook configurations registered on the real API server,
//! which calls verdict over TLS: a pod without limits in a production
//! namespace is refused through `kubectl` with the policy's message, the
//! mutating patch shows on the created object, and the failure policy
//! holds when verdict is down.

use std::path::{Path, PathBuf};

use serde_json::Value;
use verdict_testcluster::Cluster;

use super::{follow, shared, unique};
use crate::support::wait_until;

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart/verdict")
}

/// Register the chart's webhooks for the namespaces labelled
/// `verdict.dev/webhook-test=<id>`, calling `url`, trusted by the
/// cluster's CA, with `failure_policy`.
fn register(
    cluster: &Cluster,
    dir: &Path,
    release: &str,
    id: &str,
    url: &str,
    failure_policy: &str,
) {
    let ca = std::fs::read(cluster.pki().ca()).unwrap();
    let values = dir.join("values.yaml");
    std::fs::write(
        &values,
        format!(
            "webhooks:\n  url: {url}\n  caBundle: {}\n  failurePolicy: {failure_policy}\n  namespaceSelector:\n    matchExpressions:\n      - {{key: verdict.dev/webhook-test, operator: In, values: [\"{id}\"]}}\n",
            base64(&ca)
        ),
    )
    .unwrap();
    let rendered = cluster
        .binaries()
        .helm_template(
            &chart(),
            release,
            release,
            &[
                "--show-only",
                "templates/webhooks.yaml",
                "--values",
                values.to_str().unwrap(),
            ],
        )
        .unwrap();
    cluster.apply(&rendered).unwrap();
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn pod(ns: &str, name: &str, limits: bool) -> String {
    let resources = if limits {
        serde_json::json!({"limits": {"cpu": "100m", "memory": "64Mi"}})
    } else {
        serde_json::json!({})
    };
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "app", "image": "app:1", "resources": resources}]},
    })
    .to_string()
}

#[test]
fn the_api_server_calls_verdicts_webhooks_over_tls() {
    let Some(cluster) = shared("the_api_server_calls_verdicts_webhooks_over_tls") else {
        return;
    };
    let id = unique("wh");
    let release = &unique("verdict-wh");
    let prod = &unique("real-wh-prod");
    cluster.create_namespace(release, &[]).unwrap();
    cluster
        .create_namespace(
            prod,
            &[
                ("verdict.dev/environment", "production"),
                ("verdict.dev/webhook-test", &id),
            ],
        )
        .unwrap();

    // verdict serves HTTPS with a certificate of the cluster's CA.
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = cluster.pki().issue_serving("verdict").unwrap();
    let (cert_path, key_path) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut server = follow(
        &cluster.kubeconfig(),
        data.path(),
        &[
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
    );
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let url = format!("{}/v1/admission/review", server.base);
    register(cluster, dir.path(), release, &id, &url, "Fail");

    // The API server asks verdict; the policy's refusal reaches kubectl.
    // (The API server picks up new webhook configurations within moments;
    // until it does, the pod is let in and deleted again.)
    let mut refusal = String::new();
    let refused = wait_until(super::PATIENCE, || {
        match cluster.apply(&pod(prod, "bare", false)) {
            Err(error) => {
                refusal = error.to_string();
                true
            }
            Ok(_) => {
                let _ = cluster
                    .kubectl_run(&["delete", "pod", "bare", "-n", prod, "--wait=false"], None);
                false
            }
        }
    });
    assert!(
        refused.is_some(),
        "a pod without limits was let into a production namespace"
    );
    assert!(
        refusal.contains(r#"admission webhook "validate.verdict.dev" denied the request"#)
            && refusal.contains("container app has no CPU and memory limits"),
        "{refusal}"
    );
    // With limits it is let in.
    cluster.apply(&pod(prod, "limited", true)).unwrap();

    // The mutating webhook labels a new Deployment for verdict's grouping.
    cluster
        .kubectl_run(
            &[
                "create",
                "deployment",
                "shop",
                "-n",
                prod,
                "--image=shop:1",
                "--replicas=0",
            ],
            None,
        )
        .expect_err("a Deployment without limits in production is refused too");
    let mut with_limits = super::deployment(prod, "shop", 0, "0s");
    with_limits["metadata"]["labels"] = serde_json::json!({"team": "a"});
    cluster.apply(&with_limits.to_string()).unwrap();
    let labels_of = |name: &str| -> Value {
        let labels = cluster
            .kubectl_run(
                &[
                    "get",
                    "deployment",
                    name,
                    "-n",
                    prod,
                    "-o",
                    "jsonpath={.metadata.labels}",
                ],
                None,
            )
            .unwrap();
        serde_json::from_str(&labels).unwrap()
    };
    let labels = labels_of("shop");
    assert_eq!(labels["app.kubernetes.io/instance"], "shop", "{labels}");
    assert_eq!(labels["team"], "a", "{labels}");
    // A name longer than a label value may be (63 characters) is labelled
    // with a readable prefix and a hash, which the API server takes.
    let long = format!("checkout-{}", "payments-service-".repeat(5))
        .trim_end_matches('-')
        .to_string();
    assert!(long.len() > 63, "{long}");
    let long_deployment = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": long, "namespace": prod},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"run": "checkout"}},
            "template": {
                "metadata": {"labels": {"run": "checkout"}},
                "spec": {"containers": [{"name": "checkout", "image": "checkout:1",
                    "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]},
            },
        },
    });
    cluster.apply(&long_deployment.to_string()).unwrap();
    let labels = labels_of(&long);
    let instance = labels["app.kubernetes.io/instance"].as_str().unwrap();
    assert!(instance.len() <= 63, "{instance}");
    assert!(
        instance.starts_with("checkout-payments-service-"),
        "{instance}"
    );

    // verdict goes down: with failurePolicy Fail the API server refuses…
    server.kill();
    let refusal = cluster
        .apply(&pod(prod, "while-down", true))
        .expect_err("a pod was let in with the webhook down and failurePolicy Fail")
        .to_string();
    assert!(
        refusal.contains("failed calling webhook") && refusal.contains("validate.verdict.dev"),
        "{refusal}"
    );
    // …and with Ignore it lets requests through.
    register(cluster, dir.path(), release, &id, &url, "Ignore");
    let admitted = wait_until(super::PATIENCE, || {
        cluster.apply(&pod(prod, "while-down", true)).is_ok()
    });
    assert!(
        admitted.is_some(),
        "failurePolicy Ignore did not let the pod in"
    );

    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let _ = cluster.kubectl_run(&["delete", kind, &format!("{release}-verdict")], None);
    }
}
