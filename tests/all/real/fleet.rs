//! `verdict fleet` over three real control planes (the shared one and two
//! of the test's own), each with its own verdict, found through
//! `ClusterProfile`s — the CRD installed from SIG Multicluster's module —
//! in one of the test's own (the hub; the shared one, which other tests
//! use at the same time, gets no CRD): every cluster's apps in one view; one cluster's API
//! server and verdict stopped, its apps `unknown` within the bound while
//! another keeps changing; restarted, resynced; a task for one cluster
//! through the fleet runs there alone; and a profile reached through its
//! access provider's credential plugin and the API server's service proxy.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use verdict_testcluster::{Cluster, Options};

use super::{PATIENCE, deployment, plugins, private, shared, skip, unique, until_kubectl};
use crate::fleet::free_address;
use crate::serve::Server;
use crate::support::wait_until;

/// SIG Multicluster's cluster inventory module, whose CRD is installed.
const INVENTORY: &str = "sigs.k8s.io/cluster-inventory-api@v0.1.0";

/// The `ClusterProfile` CRD from the module (downloaded by Go).
pub(super) fn cluster_profile_crd(test: &str) -> Option<String> {
    verdict_testcluster::go_available().or_else(|| skip(test))?;
    let folder = tempfile::tempdir().unwrap();
    let output = Command::new("go")
        .args(["mod", "download", "-json", INVENTORY])
        .current_dir(folder.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "go mod download {INVENTORY}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let module: Value = serde_json::from_slice(&output.stdout).unwrap();
    let dir = PathBuf::from(module["Dir"].as_str().unwrap());
    Some(
        std::fs::read_to_string(
            dir.join("config/crd/bases/multicluster.x-k8s.io_clusterprofiles.yaml"),
        )
        .unwrap(),
    )
}

/// `verdict serve` following the cluster of `kubeconfig`, at `listen`.
/// verdict serving the cluster of `kubeconfig`, which it says is
/// `cluster_id`.
fn host_at(kubeconfig: &Path, data: &Path, listen: &str, cluster_id: &str) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
    command
        .args(["serve", "--listen", listen, "--kubeconfig"])
        .arg(kubeconfig)
        .arg("--plugins")
        .arg(plugins())
        .arg("--data-dir")
        .arg(data)
        .args(["--cluster-id", cluster_id, "--execute-tasks"]);
    Server::start_command(command)
}

/// The fleet's view of `namespace/web` in `cluster`.
fn web(fleet: &Server, cluster: &str, namespace: &str) -> Value {
    let (_, body) = fleet.get(&format!(
        "/v1/fleet/apps?cluster={cluster}&namespace={namespace}"
    ));
    body["apps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["name"] == "web")
        .cloned()
        .unwrap_or(Value::Null)
}

fn until_web(fleet: &Server, cluster: &str, ns: &str, what: &str, check: impl Fn(&Value) -> bool) {
    let mut last = Value::Null;
    let took = wait_until(PATIENCE, || {
        last = web(fleet, cluster, ns);
        check(&last)
    });
    assert!(
        took.is_some(),
        "{what}: never; last {last}; clusters {}",
        fleet.get("/v1/fleet/clusters").1
    );
}

fn member(fleet: &Server, name: &str) -> Value {
    fleet.get("/v1/fleet/clusters").1["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

/// A profile in the hub with its status (the status subresource, as a
/// cluster manager writes it).
/// What a fleet reaches a cluster's verdict with through its API server's
/// service proxy: a ServiceAccount `fleet` in `ns` that may `get` and
/// `create` on services and services/proxy there, its token, an access
/// provider file (KEP-5339) whose credential plugin (written in `files`)
/// hands that token over as `token-plugin`, and the cluster's CA (base64).
pub(super) struct ProxyAccess {
    pub token: String,
    pub providers: PathBuf,
    pub ca: String,
}

pub(super) fn proxy_access(cluster: &Cluster, ns: &str, files: &Path) -> ProxyAccess {
    cluster
        .apply(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: fleet, namespace: {ns}}}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: fleet, namespace: {ns}}}\n\
             rules: [{{apiGroups: [\"\"], resources: [services, services/proxy], verbs: [get, create]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: fleet, namespace: {ns}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: fleet}}\n\
             subjects: [{{kind: ServiceAccount, name: fleet, namespace: {ns}}}]\n"
        ))
        .unwrap();
    let token = cluster
        .kubectl_run(&["create", "token", "fleet", "-n", ns], None)
        .unwrap()
        .trim()
        .to_string();
    let plugin = files.join("token-plugin");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\necho '{}'\n",
            json!({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                "status": {"token": token}})
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let providers = files.join("providers.json");
    std::fs::write(
        &providers,
        json!({"providers": [{"name": "token-plugin", "execConfig": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": plugin}}]})
        .to_string(),
    )
    .unwrap();
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD
        .encode(std::fs::read(cluster.pki().ca()).unwrap());
    ProxyAccess {
        token,
        providers,
        ca,
    }
}

pub(super) fn profile(hub: &Cluster, ns: &str, name: &str, status: Value) {
    hub.apply(
        &json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": name, "namespace": ns,
                "labels": {"x-k8s.io/cluster-manager": "verdict-test"}},
            "spec": {"displayName": name, "clusterManager": {"name": "verdict-test"}}})
        .to_string(),
    )
    .unwrap();
    let mut status = status;
    status["conditions"] = json!([]);
    hub.kubectl_run(
        &[
            "patch",
            "clusterprofile",
            name,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({ "status": status }).to_string(),
        ],
        None,
    )
    .unwrap();
}

#[test]
fn a_fleet_follows_three_real_clusters_found_by_their_profiles() {
    let test = "a_fleet_follows_three_real_clusters_found_by_their_profiles";
    let Some(a) = shared(test) else {
        return;
    };
    let Some(crd) = cluster_profile_crd(test) else {
        return;
    };
    let (b_dir, c_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let one_node = Options {
        nodes: 1,
        ..Options::default()
    };
    let Some(b) = private(test, b_dir.path(), one_node.clone()) else {
        return;
    };
    let Some(mut c) = private(test, c_dir.path(), one_node) else {
        return;
    };
    // B is the hub too: the inventory lives there.
    let hub = &b;
    let ns = unique("fleet");
    for cluster in [a, &b, &c] {
        cluster.create_namespace(&ns, &[]).unwrap();
        cluster
            .apply(&deployment(&ns, "web", 1, "0s").to_string())
            .unwrap();
    }
    let datas: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let addresses: Vec<String> = (0..3).map(|_| free_address()).collect();
    let a_host = host_at(&a.kubeconfig(), datas[0].path(), &addresses[0], "cluster-a");
    let b_host = host_at(&b.kubeconfig(), datas[1].path(), &addresses[1], "cluster-b");
    let mut c_host = host_at(&c.kubeconfig(), datas[2].path(), &addresses[2], "cluster-c");

    // The inventory: the CRD from SIG Multicluster's module, a profile per
    // cluster naming it and where its verdict is.
    hub.apply(&crd).unwrap();
    until_kubectl(
        hub,
        &[
            "get",
            "crd",
            "clusterprofiles.multicluster.x-k8s.io",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Established")].status}"#,
        ],
        "the ClusterProfile CRD established",
        |s| s == "True",
    );
    for (name, host) in [("a", &a_host), ("b", &b_host), ("c", &c_host)] {
        profile(
            hub,
            &ns,
            name,
            json!({"properties": [
                {"name": "clusterset.k8s.io/cluster-id", "value": format!("cluster-{name}")},
                {"name": "verdict.dev/url", "value": host.base},
            ]}),
        );
    }
    // A profile that names cluster E but points at A's verdict (a mistake,
    // or a spoof): A says it serves cluster-a, so E is shown `mismatch`
    // and nothing is sent to it.
    profile(
        hub,
        &ns,
        "e",
        json!({"properties": [
            {"name": "clusterset.k8s.io/cluster-id", "value": "cluster-e"},
            {"name": "verdict.dev/url", "value": a_host.base},
        ]}),
    );
    // A fourth profile of cluster B, reached as its access provider says:
    // the credential plugin's token, B's API server, verdict's Service
    // there (which has no endpoints: a host outside the cluster on
    // loopback cannot be one, so the API server says so).
    b.apply(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: verdict, namespace: {ns}}}\n\
         spec: {{selector: {{app: verdict-elsewhere}}, ports: [{{name: http, port: 8080}}]}}\n"
    ))
    .unwrap();
    let files = tempfile::tempdir().unwrap();
    let ProxyAccess {
        token,
        providers,
        ca,
    } = proxy_access(&b, &ns, files.path());
    profile(
        hub,
        &ns,
        "d",
        json!({
            "properties": [
                {"name": "clusterset.k8s.io/cluster-id", "value": "cluster-d"},
                {"name": "verdict.dev/service", "value": format!("{ns}/verdict")},
            ],
            "accessProviders": [{"name": "token-plugin",
                "cluster": {"server": b.server(), "certificate-authority-data": ca}}],
        }),
    );

    // An Argo CD cluster Secret of B on the hub: B's API server with the
    // fleet's token, verdict behind its Service there (with no endpoints,
    // as for D), its id as its annotation says.
    hub.apply(
        &json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cluster-f", "namespace": ns,
                "labels": {"argocd.argoproj.io/secret-type": "cluster"},
                "annotations": {"verdict.dev/service": format!("{ns}/verdict"), "verdict.dev/cluster-id": "cluster-f"}},
            "stringData": {"name": "cluster-f", "server": b.server(),
                "config": json!({"bearerToken": &token, "tlsClientConfig": {"caData": ca}}).to_string()}})
        .to_string(),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
    command
        .args(["fleet", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(hub.kubeconfig())
        .args(["--cluster-profiles", "--cluster-profile-namespace", &ns])
        .args(["--argocd-namespace", &ns])
        .arg("--clusterprofile-provider-file")
        .arg(&providers)
        .args([
            "--unknown-after-ms",
            "5000",
            "--member-backoff-max-ms",
            "2000",
        ]);
    let fleet = Server::start_command(command);

    // Every cluster's app, in one view.
    for cluster in ["cluster-a", "cluster-b", "cluster-c"] {
        until_web(
            &fleet,
            cluster,
            &ns,
            "the cluster's app in the fleet",
            |a| a["stable"] == "running",
        );
    }
    // The profile reached through its provider: B's API server answered,
    // with the plugin's token, for the Service.
    let took = wait_until(PATIENCE, || {
        member(&fleet, "cluster-d")["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(r#"no endpoints available for service "verdict""#))
    });
    assert!(took.is_some(), "{}", member(&fleet, "cluster-d"));
    // The Argo CD Secret's member, reached with its credentials the same
    // way: B's API server answered for the Service.
    let took = wait_until(PATIENCE, || {
        member(&fleet, "cluster-f")["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(r#"no endpoints available for service "verdict""#))
    });
    let f = member(&fleet, "cluster-f");
    assert!(took.is_some(), "{f}");
    assert_eq!(f["expected_cluster_id"], "cluster-f", "{f}");
    assert!(
        f["origin"].as_str().unwrap().starts_with("Argo CD Secret"),
        "{f}"
    );
    let took = wait_until(PATIENCE, || {
        member(&fleet, "cluster-e")["reach"] == "mismatch"
    });
    let e = member(&fleet, "cluster-e");
    assert!(took.is_some(), "{e}");
    assert_eq!(
        (e["cluster_id"].as_str(), e["apps"].as_u64()),
        (Some("cluster-a"), Some(0)),
        "{e}"
    );
    assert!(
        e["last_error"]
            .as_str()
            .unwrap()
            .contains("serves cluster `cluster-a`, not `cluster-e`"),
        "{e}"
    );
    let restart_e =
        json!({"app": format!("{ns}/web"), "action": "restart", "cluster_id": "cluster-e"});
    let (code, refused) = fleet.send("POST", "/v1/fleet/tasks", Some(&restart_e.to_string()));
    assert_eq!(code, 503, "{refused}");
    assert_eq!(
        a_host.get("/v1/tasks").1["tasks"].as_array().unwrap().len(),
        0,
        "nothing reached A"
    );

    // C's API server and verdict stop: its app is unknown within the
    // bound, while B's goes on changing.
    c_host.kill();
    c.kill_apiserver().unwrap();
    b.apply(&deployment(&ns, "web", 2, "0s").to_string())
        .unwrap();
    until_web(&fleet, "cluster-c", &ns, "C's app unknown", |a| {
        a["stable"] == "unknown" && a["last_known"]["stable"] == "running"
    });
    until_web(
        &fleet,
        "cluster-b",
        &ns,
        "B's change while C is lost",
        |a| a["expected_replicas"] == 2 && a["stable"] == "running",
    );
    assert_eq!(member(&fleet, "cluster-c")["reach"], "lost");

    // A task for B through the fleet runs on B alone; one for C is refused.
    let body = |cluster: &str| {
        json!({"app": format!("{ns}/web"), "action": "restart", "cluster_id": cluster}).to_string()
    };
    let (code, refused) = fleet.send("POST", "/v1/fleet/tasks", Some(&body("cluster-c")));
    assert_eq!(code, 503, "{refused}");
    let (code, task) = fleet.send("POST", "/v1/fleet/tasks", Some(&body("cluster-b")));
    assert_eq!(code, 201, "{task}");
    assert_eq!(task["cluster"], "cluster-b");
    let id = task["id"].as_str().unwrap();
    assert_eq!(b_host.get(&format!("/v1/tasks/{id}")).0, 200);
    assert_eq!(a_host.get(&format!("/v1/tasks/{id}")).0, 404);
    // A create through the fleet is carried out on its cluster: the app
    // made and running on B, and on no other.
    let create = json!({"app": format!("{ns}/made"), "action": "create", "cluster_id": "cluster-b",
        "params": {"image": "made:1"}});
    let (code, task) = fleet.send("POST", "/v1/fleet/tasks", Some(&create.to_string()));
    assert_eq!(code, 201, "{task}");
    assert_eq!(task["params"]["cluster-id"], "cluster-b", "{task}");
    let id = task["id"].as_str().unwrap().to_string();
    let mut last = Value::Null;
    let done = wait_until(PATIENCE, || {
        last = fleet.get(&format!("/v1/fleet/tasks/cluster-b/{id}")).1;
        last["phase"] == "succeeded"
    });
    assert!(done.is_some(), "{last}");
    let running = wait_until(PATIENCE, || {
        fleet
            .get(&format!("/v1/fleet/apps?cluster=cluster-b&namespace={ns}"))
            .1["apps"]
            .as_array()
            .is_some_and(|apps| {
                apps.iter()
                    .any(|a| a["name"] == "made" && a["stable"] == "running")
            })
    });
    assert!(running.is_some(), "the made app never ran on B");
    let made = |cluster: &Cluster| {
        cluster
            .kubectl_run(&["get", "deployments", "-n", &ns, "-o", "name"], None)
            .unwrap()
    };
    assert!(made(&b).contains("deployment.apps/made"), "{}", made(&b));
    assert!(!made(a).contains("made"), "{}", made(a));

    // C returns: resynced.
    c.start_apiserver().unwrap();
    let _c_again = host_at(&c.kubeconfig(), datas[2].path(), &addresses[2], "cluster-c");
    until_web(&fleet, "cluster-c", &ns, "C's app known again", |a| {
        a["stable"] == "running"
    });

    // A profile deleted: its member leaves the fleet.
    hub.kubectl_run(&["delete", "clusterprofile", "d", "-n", &ns], None)
        .unwrap();
    let took = wait_until(PATIENCE, || member(&fleet, "cluster-d").is_null());
    assert!(took.is_some(), "{}", fleet.get("/v1/fleet/clusters").1);
    let _ = a.kubectl_run(&["delete", "namespace", &ns, "--wait=false"], None);
}
