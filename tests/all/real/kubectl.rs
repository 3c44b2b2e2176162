//! The kubectl plugin against the real API server: with `--server` it
//! reads a host that follows the cluster; through the API server's service
//! proxy (its default) it names verdict's Service and port, the API server
//! answers for it — here that the Service has no endpoints, as a host
//! outside the cluster on loopback cannot be one — and a user whose role
//! lacks `services/proxy` is refused, told which permission it lacks.

use serde_json::json;

use super::{deployment, follow, shared, unique};
use crate::kubectl_plugin::plugin;
use crate::support::wait_until;

#[test]
fn the_kubectl_plugin_reaches_verdict_through_the_api_server() {
    let Some(cluster) = shared("the_kubectl_plugin_reaches_verdict_through_the_api_server") else {
        return;
    };
    let ns = unique("plugin");
    cluster.create_namespace(&ns, &[]).unwrap();
    cluster
        .apply(&deployment(&ns, "web", 1, "0s").to_string())
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = follow(&cluster.kubeconfig(), data.path(), &[]);
    let dir = tempfile::tempdir().unwrap();

    // --server: the host's view of the real cluster.
    let mut listed = String::new();
    let running = wait_until(super::PATIENCE, || {
        listed = plugin(dir.path(), &server.base, &["apps", "-n", &ns]).1;
        listed
            .lines()
            .any(|l| l.starts_with("web ") && l.contains("running"))
    });
    assert!(running.is_some(), "{listed}");

    // Through the service proxy, as the kubeconfig's user.
    cluster
        .apply(
            &json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "verdict", "namespace": ns},
                "spec": {"selector": {"app": "verdict-elsewhere"},
                    "ports": [{"name": "http", "port": 8080}]}})
            .to_string(),
        )
        .unwrap();
    let through = |kubeconfig: &std::path::Path| {
        let named = dir.path().join("kubectl-verdict");
        let output = std::process::Command::new(&named)
            .args(["--service", &format!("{ns}/verdict"), "--kubeconfig"])
            .arg(kubeconfig)
            .args(["apps", "-n", &ns])
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    // (The endpoints controller writes the Service's empty Endpoints.)
    let mut err = String::new();
    let answered = wait_until(super::PATIENCE, || {
        let (ok, said) = through(&cluster.kubeconfig());
        err = said;
        !ok && err.contains("503")
    });
    assert!(answered.is_some(), "{err}");
    assert!(
        err.contains(r#"no endpoints available for service "verdict""#),
        "{err}"
    );

    // A user who may read the Service but not proxy to it.
    cluster
        .apply(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: viewer, namespace: {ns}}}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: viewer, namespace: {ns}}}\n\
             rules: [{{apiGroups: [\"\"], resources: [services], verbs: [get]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: viewer, namespace: {ns}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: viewer}}\n\
             subjects: [{{kind: ServiceAccount, name: viewer, namespace: {ns}}}]\n"
        ))
        .unwrap();
    let viewer = dir.path().join("viewer.kubeconfig");
    cluster
        .service_account_kubeconfig(&ns, "viewer", &viewer)
        .unwrap();
    let mut last = String::new();
    let refused = wait_until(super::PATIENCE, || {
        let (ok, err) = through(&viewer);
        last = err;
        !ok && last.contains("403")
    });
    assert!(refused.is_some(), "{last}");
    assert!(
        last.contains("services/proxy") && last.contains("forbidden"),
        "{last}"
    );
    let _ = cluster.kubectl_run(&["delete", "namespace", &ns, "--wait=false"], None);
}
