//! The kubectl plugin against the real API server: with `--server` it
//! reads a host that follows the cluster; through the API server's service
//! proxy (its default) it names verdict's Service and port, the API server
//! answers for it — that the Service has no endpoints where it has none —
//! and a user whose role lacks `services/proxy` is refused, told which
//! permission it lacks. On a control plane whose cluster network leads to
//! 127.0.0.1 (an egress selector, as konnectivity), the plugin and a fleet
//! (its members named by an Argo CD cluster Secret and by a ClusterProfile's
//! access provider) reach a live verdict through the service proxy.

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

/// An HTTP CONNECT proxy on the Unix socket `path`, as konnectivity serves
/// a control plane: every tunnel it is asked for goes to `to` on
/// 127.0.0.1, whatever endpoint the API server dialled.
fn cluster_network(path: &std::path::Path, to: std::net::SocketAddr) {
    use std::io::{BufRead as _, BufReader, Write as _};
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                // The CONNECT line and its headers, to the blank line.
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" || line == "\n" {
                        break;
                    }
                    line.clear();
                }
                let Ok(upstream) = std::net::TcpStream::connect(to) else {
                    return;
                };
                let mut client = stream;
                let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let mut up_read = upstream.try_clone().unwrap();
                let mut client_write = client.try_clone().unwrap();
                let back = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut up_read, &mut client_write);
                    let _ = client_write.shutdown(std::net::Shutdown::Both);
                });
                let mut up_write = upstream;
                let _ = std::io::copy(&mut reader, &mut up_write);
                let _ = up_write.shutdown(std::net::Shutdown::Both);
                let _ = back.join();
            });
        }
    });
}

/// The plugin reaches a live verdict through the API server's service
/// proxy: verdict listens on 127.0.0.1, stood for in the cluster by a pod
/// behind its Service; the API server reaches the pod's address through
/// its cluster network (an egress selector's HTTP CONNECT over a Unix
/// socket, as a control plane reaches its nodes through konnectivity),
/// which leads to verdict.
#[test]
fn the_kubectl_plugin_reaches_a_live_verdict_through_the_service_proxy() {
    let test = "the_kubectl_plugin_reaches_a_live_verdict_through_the_service_proxy";
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cluster-network.sock");
    let Some(cluster) = super::private(
        test,
        &dir.path().join("control-plane"),
        verdict_testcluster::Options {
            nodes: 1,
            cluster_egress: Some(socket.clone()),
            ..verdict_testcluster::Options::default()
        },
    ) else {
        return;
    };
    let ns = unique("proxied");
    cluster.create_namespace(&ns, &[]).unwrap();
    cluster
        .apply(&deployment(&ns, "web", 1, "0s").to_string())
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = follow(&cluster.kubeconfig(), data.path(), &[]);
    let port = server
        .base
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u16>()
        .unwrap();
    cluster_network(&socket, std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    // verdict as the cluster sees it: a pod (KWOK gives it a pod address)
    // behind a Service; the API server proxies only to pods' addresses.
    cluster
        .apply(&deployment(&ns, "verdict", 1, "0s").to_string())
        .unwrap();
    cluster
        .apply(
            &json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "verdict", "namespace": ns},
                "spec": {"selector": {"app.kubernetes.io/instance": "verdict"},
                    "ports": [{"name": "http", "port": 8080, "targetPort": 8080}]}})
            .to_string(),
        )
        .unwrap();
    let plugin_dir = tempfile::tempdir().unwrap();
    let named = plugin_dir.path().join("kubectl-verdict");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_verdict"), &named).unwrap();
    let mut last = String::new();
    let listed = wait_until(super::PATIENCE, || {
        let output = std::process::Command::new(&named)
            .args(["--service", &format!("{ns}/verdict"), "--kubeconfig"])
            .arg(cluster.kubeconfig())
            .args(["apps", "-n", &ns])
            .output()
            .unwrap();
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output.status.success()
            && last
                .lines()
                .any(|l| l.starts_with("web ") && l.contains("running"))
    });
    assert!(listed.is_some(), "{last}");

    // A fleet reaches the same verdict the same way, as a member named by
    // an Argo CD cluster Secret (its token and CA) and by a ClusterProfile
    // (its access provider's credential plugin): both live, the app theirs.
    let Some(crd) = super::fleet::cluster_profile_crd(test) else {
        return;
    };
    cluster.apply(&crd).unwrap();
    let super::fleet::ProxyAccess {
        token,
        providers,
        ca,
    } = super::fleet::proxy_access(&cluster, &ns, plugin_dir.path());
    let uid = super::cluster_uid(&cluster);
    cluster
        .apply(
            &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "argo-proxied", "namespace": ns,
                    "labels": {"argocd.argoproj.io/secret-type": "cluster"},
                    "annotations": {"verdict.dev/service": format!("{ns}/verdict"), "verdict.dev/cluster-id": uid}},
                "stringData": {"name": "argo-proxied", "server": cluster.server(),
                    "config": json!({"bearerToken": &token, "tlsClientConfig": {"caData": ca}}).to_string()}})
            .to_string(),
        )
        .unwrap();
    super::fleet::profile(
        &cluster,
        &ns,
        "profiled",
        json!({
            "properties": [
                {"name": "clusterset.k8s.io/cluster-id", "value": uid},
                {"name": "verdict.dev/service", "value": format!("{ns}/verdict")},
            ],
            "accessProviders": [{"name": "token-plugin",
                "cluster": {"server": cluster.server(), "certificate-authority-data": ca}}],
        }),
    );
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_verdict"));
    command
        .args(["fleet", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(cluster.kubeconfig())
        .args(["--argocd-namespace", &ns])
        .args(["--cluster-profiles", "--cluster-profile-namespace", &ns])
        .arg("--clusterprofile-provider-file")
        .arg(&providers);
    let fleet = crate::serve::Server::start_command(command);
    for member in ["argo-proxied", uid.as_str()] {
        let mut last = serde_json::Value::Null;
        let live = wait_until(super::PATIENCE, || {
            last = fleet
                .get(&format!("/v1/fleet/apps?cluster={member}&namespace={ns}"))
                .1;
            last["apps"].as_array().is_some_and(|apps| {
                apps.iter()
                    .any(|a| a["name"] == "web" && a["stable"] == "running")
            })
        });
        assert!(
            live.is_some(),
            "{member}: {last}; {}",
            fleet.get("/v1/fleet/clusters").1
        );
    }
}
