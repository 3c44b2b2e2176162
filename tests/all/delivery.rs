//! Policy delivery: policies pushed to and pulled from a real OCI registry
//! (Debian's `docker-registry`, the CNCF distribution registry, started on
//! 127.0.0.1 by the test), every digest checked.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{KillOnDrop, default_plugin, wait_until};

/// A registry of the test's own, on a free port of 127.0.0.1, storing in a
/// temporary folder.
pub struct Registry {
    pub address: String,
    process: Option<KillOnDrop>,
    config: PathBuf,
    _storage: tempfile::TempDir,
}

impl Registry {
    /// A registry, or `None` (said loudly) where `docker-registry` is not
    /// installed — a failure when `VERDICT_REQUIRE_REAL_CLUSTER` is set, as
    /// in CI (`cargo xtask test` installs it).
    pub fn start(test: &str) -> Option<Self> {
        if Command::new("docker-registry")
            .arg("--version")
            .output()
            .is_err()
        {
            let message = format!(
                "REGISTRY TEST NOT RUN: {test} needs Debian's docker-registry (`cargo xtask test` installs it)"
            );
            crate::support::skipped(&message, Some("VERDICT_REQUIRE_REAL_CLUSTER"));
            return None;
        }
        let storage = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        let mut registry = Self {
            address,
            process: None,
            config,
            _storage: storage,
        };
        registry.resume();
        Some(registry)
    }

    /// Start (again) serving what it holds.
    pub fn resume(&mut self) {
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.process = Some(KillOnDrop(child));
        let url = format!("http://{}/v2/", self.address);
        let up = wait_until(Duration::from_secs(30), || {
            reqwest::blocking::get(&url).is_ok_and(|r| r.status().is_success())
        });
        assert!(up.is_some(), "the registry never answered on {url}");
    }

    /// Stop it, as a registry that is down.
    pub fn stop(&mut self) {
        self.process = None;
    }

    /// A reference in this registry.
    pub fn reference(&self, repository: &str) -> String {
        format!("{}/{repository}", self.address)
    }

    /// `verdict ARGS` reaching this registry over plain HTTP.
    pub fn verdict(&self, args: &[&str], data: &Path) -> (bool, String, String) {
        let mut args = args.to_vec();
        args.extend(["--insecure-registry", self.address.as_str()]);
        verdict(&args, data)
    }
}

/// `verdict ARGS`; its status, standard output and standard error.
pub fn verdict(args: &[&str], data: &Path) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(args)
        .env("VERDICT_CACHE_DIR", data)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn policies_are_pushed_pulled_by_digest_and_inspected() {
    let Some(registry) = Registry::start("policies_are_pushed_pulled_by_digest_and_inspected")
    else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let status = default_plugin("status");
    let tagged = registry.reference("policies/status:v1");

    // Push: checked to be a policy, annotated, pinned to its digest.
    let (ok, out, err) = registry.verdict(
        &["policy", "push", status.to_str().unwrap(), tagged.as_str()],
        data.path(),
    );
    assert!(ok, "{err}");
    let pinned = out.trim().rsplit(" as ").next().unwrap().to_string();
    assert!(
        pinned.starts_with(&format!("{}/policies/status@sha256:", registry.address)),
        "{out}"
    );
    assert!(
        out.starts_with("pushed status-policy default-status@"),
        "{out}"
    );

    // Inspect: the layout and annotations.
    let (ok, out, err) = registry.verdict(&["policy", "inspect", tagged.as_str()], data.path());
    assert!(ok, "{err}");
    let inspection: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(inspection["reference"], pinned.as_str());
    assert_eq!(
        inspection["config-media-type"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(inspection["layers"][0]["media-type"], "application/wasm");
    let annotations = &inspection["annotations"];
    assert_eq!(annotations["dev.verdict.policy.world"], "status-policy");
    assert_eq!(
        annotations["dev.verdict.policy.wit"],
        "verdict:policy@0.4.0"
    );
    assert_eq!(
        annotations["org.opencontainers.image.title"],
        "default-status"
    );

    // Pull by digest: the same bytes.
    let output = data.path().join("pulled.wasm");
    let (ok, out, err) = registry.verdict(
        &[
            "policy",
            "pull",
            pinned.as_str(),
            "--output",
            output.to_str().unwrap(),
        ],
        data.path(),
    );
    assert!(ok, "{err}");
    assert!(out.contains(&pinned), "{out}");
    assert_eq!(
        std::fs::read(&output).unwrap(),
        std::fs::read(&status).unwrap()
    );

    // A digest that is not the artifact's is refused, and nothing is
    // written.
    let wrong = format!(
        "{}@sha256:{}",
        registry.reference("policies/status"),
        "0".repeat(64)
    );
    let refused_output = data.path().join("refused.wasm");
    let (ok, _, err) = registry.verdict(
        &[
            "policy",
            "pull",
            wrong.as_str(),
            "--output",
            refused_output.to_str().unwrap(),
        ],
        data.path(),
    );
    assert!(!ok);
    assert!(err.contains("verdict: "), "{err}");
    assert!(!refused_output.exists());

    // What is not a policy is not pushed.
    let garbage = data.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not a component").unwrap();
    let (ok, _, err) = registry.verdict(
        &["policy", "push", garbage.to_str().unwrap(), tagged.as_str()],
        data.path(),
    );
    assert!(!ok);
    assert!(err.contains("is not a policy"), "{err}");
}

/// The Policy CRD served by the simulator, as the chart's `crds/` does.
fn define_policies(cluster: &crate::live::Cluster) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart/verdict/crds/policy-crd.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let object: serde_json::Value = serde::Deserialize::deserialize(document).unwrap();
        cluster.apply(object);
    }
}

/// `n` replicas following `cluster` (which is made to serve Tasks and
/// Policies), reaching `registry` when there is one, with more flags.
pub fn replicas(
    cluster: &crate::live::Cluster,
    registry: Option<&Registry>,
    n: usize,
    extra: &[&str],
) -> crate::replicas::Group {
    crate::tasks::define_tasks(cluster);
    define_policies(cluster);
    let url = cluster.sim().url();
    let mut flags = extra.to_vec();
    if let Some(registry) = registry {
        flags.extend(["--insecure-registry", registry.address.as_str()]);
    }
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    crate::replicas::Group::start(
        &plugins,
        &["--cluster-url", &url],
        "verdict-system",
        n,
        &flags,
    )
}

/// A Policy in shadow mode for `world`.
pub fn shadow_policy(name: &str, world: &str, source: &str) -> serde_json::Value {
    let mut shadow = policy(name, source);
    shadow["spec"]["world"] = serde_json::json!(world);
    shadow["spec"]["mode"] = serde_json::json!("shadow");
    shadow
}

/// Push a component; the pinned reference.
pub fn push(registry: &Registry, component: &Path, reference: &str, data: &Path) -> String {
    let (ok, out, err) = registry.verdict(
        &["policy", "push", component.to_str().unwrap(), reference],
        data,
    );
    assert!(ok, "{err}");
    out.trim().rsplit(" as ").next().unwrap().to_string()
}

pub fn policy(name: &str, source: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "verdict.dev/v1alpha1", "kind": "Policy",
        "metadata": {"name": name, "namespace": "verdict-system"},
        "spec": {"world": "status", "source": source},
    })
}

/// The digest a replica serves a delivered plugin at, from `/v1/plugins`.
pub fn serving(server: &crate::serve::Server, name: &str) -> Option<String> {
    let plugins = server.get("/v1/plugins").1;
    plugins["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name && p["active"] == true)
        .and_then(|p| p["delivered"]["digest"].as_str().map(String::from))
}

#[test]
fn a_policy_object_reaches_every_replica_without_a_failed_read() {
    let Some(mut registry) =
        Registry::start("a_policy_object_reaches_every_replica_without_a_failed_read")
    else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let v1 = push(
        &registry,
        &default_plugin("status"),
        &registry.reference("p/status:v1"),
        data.path(),
    );
    let v2 = push(
        &registry,
        &crate::support::example_plugin("restart-budget"),
        &registry.reference("p/status:v2"),
        data.path(),
    );
    let v3 = push(
        &registry,
        &crate::support::test_plugin("stamp-a"),
        &registry.reference("p/status:v3"),
        data.path(),
    );
    let digest = |pinned: &str| pinned.rsplit('@').next().unwrap().to_string();

    let cluster = crate::live::Cluster::start();
    let group = replicas(&cluster, Some(&registry), 3, &[]);
    let status_of = || {
        let store = cluster.sim().store();
        let policies = store.find("verdict.dev", "v1alpha1", "policies").unwrap();
        store
            .get(policies, "verdict-system", "delivered")
            .map(|p| p["status"].clone())
            .unwrap_or_default()
    };
    let everywhere = |digest: &str| {
        wait_until(crate::live::PATIENCE, || {
            group
                .alive()
                .all(|(_, s)| serving(s, "delivered").as_deref() == Some(digest))
        })
    };

    // A Policy by tag: resolved to its digest, served by every replica,
    // which each say so; the leader sums it up.
    cluster.apply(policy("delivered", &registry.reference("p/status:v1")));
    assert!(
        everywhere(&digest(&v1)).is_some(),
        "{:?}",
        group
            .alive()
            .map(|(_, s)| serving(s, "delivered"))
            .collect::<Vec<_>>()
    );
    let summed = wait_until(crate::live::PATIENCE, || status_of()["ready"] == "3/3");
    assert!(summed.is_some(), "{}", status_of());
    let status = status_of();
    assert_eq!(status["digest"], digest(&v1).as_str(), "{status}");
    assert_eq!(
        status["resolved"]["reference"],
        v1.as_str(),
        "the tag pinned once: {status}"
    );
    for name in &group.names {
        assert_eq!(
            status["replicas"][name]["digest"],
            digest(&v1).as_str(),
            "{status}"
        );
    }

    // Edited to another version under read load: every replica swaps, no
    // read fails.
    let bases = group.alive().map(|(_, s)| s.base.clone()).collect();
    let readers = crate::replicas::Readers::start(bases, "/v1/apps");
    cluster.apply(policy("delivered", &v2));
    assert!(everywhere(&digest(&v2)).is_some(), "{}", status_of());
    let (made, failures) = readers.finish();
    assert!(made > 20, "only {made} reads");
    assert!(failures.is_empty(), "{failures:#?}");

    // The registry goes down: a new version cannot be fetched, each replica
    // says why, and the last good one keeps serving; back up, the new one
    // serves.
    registry.stop();
    cluster.apply(policy("delivered", &v3));
    let said = wait_until(crate::live::PATIENCE, || {
        let status = status_of();
        group.names.iter().all(|n| {
            status["replicas"][n]["error"]
                .as_str()
                .is_some_and(|e| !e.is_empty())
        })
    });
    assert!(said.is_some(), "{}", status_of());
    assert!(
        group
            .alive()
            .all(|(_, s)| serving(s, "delivered").as_deref() == Some(digest(&v2).as_str()))
    );
    registry.resume();
    assert!(everywhere(&digest(&v3)).is_some(), "{}", status_of());

    // Deleted: unloaded everywhere; the plugin folder's status policy
    // serves again.
    cluster
        .sim()
        .store()
        .delete(
            cluster
                .sim()
                .store()
                .find("verdict.dev", "v1alpha1", "policies")
                .unwrap(),
            "verdict-system",
            "delivered",
        )
        .unwrap();
    let gone = wait_until(crate::live::PATIENCE, || {
        group.alive().all(|(_, s)| {
            s.get("/v1/plugins").1["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["name"] != "delivered")
        })
    });
    assert!(gone.is_some());
}

/// A Deployment of one running pod, the Deployment labelled as in
/// maintenance (which the restart-budget example displays as
/// `Maintenance`, and the default rules do not).
pub fn in_maintenance(cluster: &crate::live::Cluster, name: &str) {
    cluster.apply(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop",
            "labels": {"app.kubernetes.io/instance": name, "example.dev/maintenance": "true"}},
        "spec": {"replicas": 1},
        "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1}
    }));
    cluster.apply(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-1"), "namespace": "shop",
            "labels": {"app.kubernetes.io/instance": name, "pod-template-hash": "abc"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-abc"), "uid": "u2", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "img:1"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{"name": "main", "image": "img:1", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
    }));
}

#[test]
fn a_shadow_differs_where_it_should_and_is_promoted_and_rolled_back() {
    let Some(registry) =
        Registry::start("a_shadow_differs_where_it_should_and_is_promoted_and_rolled_back")
    else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let candidate = push(
        &registry,
        &crate::support::example_plugin("restart-budget"),
        &registry.reference("p/candidate:1"),
        data.path(),
    );
    let cluster = crate::live::Cluster::start();
    in_maintenance(&cluster, "quiet");
    let group = replicas(&cluster, Some(&registry), 2, &[]);
    cluster.apply(shadow_policy("candidate", "status", &candidate));

    // The shadow answers the same questions as the folder's status policy;
    // it differs on the app in maintenance alone, in its display.
    let (a, b) = (group.server(0), group.server(1));
    let mut report = serde_json::Value::Null;
    let differs = wait_until(crate::live::PATIENCE, || {
        report = a.get("/v1/policies/candidate/shadow").1;
        report["by-subject"]["shop/quiet"].as_u64() > Some(0)
            && report["compared"].as_u64() > Some(1)
    });
    assert!(differs.is_some(), "{report}");
    let subjects: Vec<&String> = report["by-subject"].as_object().unwrap().keys().collect();
    assert_eq!(subjects, ["shop/quiet"], "{report}");
    assert!(report["by-field"]["display"].as_u64() > Some(0), "{report}");
    assert_eq!(report["failed"], false);
    assert!(
        report["against"]
            .as_str()
            .unwrap()
            .starts_with("default-status@"),
        "{report}"
    );
    let example = report["examples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["field"] == "display")
        .unwrap();
    assert_eq!(example["shadow"]["text"], "Maintenance", "{example}");
    let metrics = reqwest::blocking::get(format!("{}/metrics", a.base))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains(r#"verdict_shadow_differences_total{plugin="candidate",field="display"}"#),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("shadow"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Its answers are never used.
    assert_ne!(
        a.get("/v1/apps/shop/quiet").1["display"]["status"],
        "Maintenance"
    );

    // Refused: promoting what is not a Policy, or without a reason.
    let promote = |server: &crate::serve::Server, name: &str, body: serde_json::Value| {
        server.send(
            "POST",
            &format!("/v1/policies/{name}/promote"),
            Some(&body.to_string()),
        )
    };
    assert_eq!(
        promote(b, "nope", serde_json::json!({"by": "ana", "reason": "x"})).0,
        404
    );
    assert_eq!(
        promote(
            b,
            "candidate",
            serde_json::json!({"by": "ana", "reason": " "})
        )
        .0,
        422
    );

    // Promoted on one replica: active on both; the app in maintenance shows
    // it.
    let (code, body) = promote(
        b,
        "candidate",
        serde_json::json!({"by": "ana", "reason": "only differs where intended"}),
    );
    assert_eq!(code, 200, "{body}");
    for server in [a, b] {
        server.app_until(
            "shop/quiet",
            "the promoted policy's display",
            crate::live::PATIENCE,
            |v| v["display"]["text"] == "Maintenance",
        );
    }
    let (code, again) = promote(
        a,
        "candidate",
        serde_json::json!({"by": "ana", "reason": "again"}),
    );
    assert_eq!(code, 409, "{again}");

    // Rolled back: the folder's policy serves again everywhere.
    let (code, body) = b.send(
        "POST",
        "/v1/policies/candidate/rollback",
        Some(&serde_json::json!({"by": "ana", "reason": "too early"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");
    for server in [a, b] {
        server.app_until(
            "shop/quiet",
            "the folder's policy again",
            crate::live::PATIENCE,
            |v| v["display"]["text"] != "Maintenance",
        );
    }
}

/// An ECDSA P-256 key pair made with openssl: the private key (PKCS#8
/// PEM) and the public key (PEM).
fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let made = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ])
        .arg(&private)
        .status()
        .unwrap();
    assert!(made.success());
    let made = Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&private)
        .arg("-out")
        .arg(&public)
        .status()
        .unwrap();
    assert!(made.success());
    (private, public)
}

#[test]
fn a_configured_key_admits_only_artifacts_it_signed() {
    let Some(registry) = Registry::start("a_configured_key_admits_only_artifacts_it_signed") else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let (private, public) = key_pair(data.path(), "team");
    let (_, other_public) = key_pair(data.path(), "other");
    let signed = push(
        &registry,
        &default_plugin("status"),
        &registry.reference("p/signed:1"),
        data.path(),
    );
    let unsigned = push(
        &registry,
        &default_plugin("admission"),
        &registry.reference("p/unsigned:1"),
        data.path(),
    );

    // Signed by tag: the signature sits beside the digest the tag names.
    let tag = registry.reference("p/signed:1");
    let (ok, out, err) = registry.verdict(
        &[
            "policy",
            "sign",
            tag.as_str(),
            "--key",
            private.to_str().unwrap(),
        ],
        data.path(),
    );
    assert!(ok, "{err}");
    assert!(out.contains(&signed), "{out}");
    let digest_hex = signed.rsplit("sha256:").next().unwrap();
    assert!(
        out.contains(&format!("p/signed:sha256-{digest_hex}.sig")),
        "{out}"
    );

    let pull = |reference: &str, key: &Path| {
        let output = data.path().join("pulled.wasm");
        let _ = std::fs::remove_file(&output);
        let (ok, _, err) = registry.verdict(
            &[
                "policy",
                "pull",
                reference,
                "--output",
                output.to_str().unwrap(),
                "--verify-key",
                key.to_str().unwrap(),
            ],
            data.path(),
        );
        (ok, output.exists(), err)
    };
    // The team's key admits what it signed.
    let (ok, written, err) = pull(&signed, &public);
    assert!(ok && written, "{err}");
    // Another key does not; an unsigned artifact is refused; nothing is
    // written either way.
    let (ok, written, err) = pull(&signed, &other_public);
    assert!(!ok && !written);
    assert!(
        err.contains("carries no valid signature") && err.contains("not the key's"),
        "{err}"
    );
    let (ok, written, err) = pull(&unsigned, &public);
    assert!(!ok && !written);
    assert!(err.contains("carries no valid signature"), "{err}");
}

#[test]
fn a_shadow_that_keeps_failing_is_marked_failed_and_promoted_only_by_force() {
    let Some(registry) =
        Registry::start("a_shadow_that_keeps_failing_is_marked_failed_and_promoted_only_by_force")
    else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    // stamp-a traps on an app named `trap`.
    let unruly = push(
        &registry,
        &crate::support::test_plugin("stamp-a"),
        &registry.reference("p/unruly:1"),
        data.path(),
    );
    let cluster = crate::live::Cluster::start();
    in_maintenance(&cluster, "trap");
    let group = replicas(&cluster, Some(&registry), 1, &["--shadow-min-calls", "3"]);
    let server = group.server(0);
    cluster.apply(shadow_policy("unruly", "status", &unruly));

    // Each change of the trapping app is a question the shadow fails.
    let report = || server.get("/v1/policies/unruly/shadow").1;
    for round in 0..5 {
        let calls = report()["calls"].as_u64().unwrap_or(0);
        cluster.apply(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "trap-1", "namespace": "shop",
                "labels": {"app.kubernetes.io/instance": "trap", "pod-template-hash": "abc"},
                "annotations": {"round": round.to_string()},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trap-abc", "uid": "u2", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "img:1"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "main", "image": "img:1", "imageID": "", "ready": true, "restartCount": round,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}
        }));
        let asked = wait_until(crate::live::PATIENCE, || {
            report()["calls"].as_u64().unwrap_or(0) > calls
        });
        assert!(asked.is_some(), "round {round}: {}", report());
    }
    let failed = report();
    assert_eq!(failed["failed"], true, "{failed}");
    assert!(failed["errors"].as_u64() >= Some(3), "{failed}");
    assert!(
        failed["last-error"].as_str().unwrap().contains("trap"),
        "{failed}"
    );
    // The verdicts are the folder's policy's, whatever the shadow does.
    assert_eq!(server.get("/v1/apps/shop/trap").0, 200);

    let promote = |force: bool| {
        server.send(
            "POST",
            "/v1/policies/unruly/promote",
            Some(&serde_json::json!({"by": "ana", "reason": "try", "force": force}).to_string()),
        )
    };
    let (code, body) = promote(false);
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failed"),
        "{body}"
    );
    let (code, body) = promote(true);
    assert_eq!(code, 200, "{body}");
}

/// An HTTP server on 127.0.0.1 answering every GET with `body`.
pub fn serve_bytes(body: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: application/wasm\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    format!("http://{address}/status.wasm")
}

#[test]
fn a_url_source_serves_only_bytes_of_its_sha256() {
    let component = std::fs::read(crate::support::example_plugin("restart-budget")).unwrap();
    let sha256 = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(&component))
    };
    let url = serve_bytes(component);
    let cluster = crate::live::Cluster::start();
    let group = replicas(&cluster, None, 1, &[]);
    let server = group.server(0);
    let status_of = || {
        let store = cluster.sim().store();
        let policies = store.find("verdict.dev", "v1alpha1", "policies").unwrap();
        store
            .get(policies, "verdict-system", "by-url")
            .map(|p| p["status"].clone())
            .unwrap_or_default()
    };
    let mut wrong = policy("by-url", &url);
    wrong["spec"]["sha256"] = serde_json::json!("0".repeat(64));
    cluster.apply(wrong);
    let refused = wait_until(crate::live::PATIENCE, || {
        status_of()["replicas"]["replica-0"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused"))
    });
    assert!(refused.is_some(), "{}", status_of());
    assert!(serving(server, "by-url").is_none());

    let mut right = policy("by-url", &url);
    right["spec"]["sha256"] = serde_json::json!(sha256);
    cluster.apply(right);
    let served = wait_until(crate::live::PATIENCE, || {
        serving(server, "by-url").as_deref() == Some(format!("sha256:{sha256}").as_str())
    });
    assert!(served.is_some(), "{}", status_of());
}

#[test]
fn an_admission_shadow_is_asked_the_task_requests_the_active_policy_answers() {
    let Some(registry) =
        Registry::start("an_admission_shadow_is_asked_the_task_requests_the_active_policy_answers")
    else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let same = push(
        &registry,
        &default_plugin("admission"),
        &registry.reference("p/admission:1"),
        data.path(),
    );
    let cluster = crate::live::Cluster::start();
    let group = replicas(&cluster, Some(&registry), 1, &[]);
    let server = group.server(0);
    cluster.apply(shadow_policy("admission-next", "admission", &same));
    let loaded = wait_until(crate::live::PATIENCE, || {
        server.get("/v1/policies").1["policies"]
            .as_array()
            .is_some_and(|p| {
                p.iter()
                    .any(|p| p["name"] == "admission-next" && p["mode"] == "shadow")
            })
    });
    assert!(loaded.is_some(), "{}", server.get("/v1/policies").1);

    let (code, task) = crate::replicas::ask(server, "shop/web", "restart", serde_json::json!({}));
    assert_eq!(code, 201, "{task}");
    let mut report = serde_json::Value::Null;
    let compared = wait_until(crate::live::PATIENCE, || {
        report = server.get("/v1/policies/admission-next/shadow").1;
        report["compared"].as_u64() >= Some(1)
    });
    assert!(compared.is_some(), "{report}");
    // The same policy answers the same: no difference.
    assert_eq!(report["differing"], 0, "{report}");
    assert!(
        report["against"]
            .as_str()
            .unwrap()
            .starts_with("default-admission@"),
        "{report}"
    );
    // The active policy decided: the task is the folder's policy's.
    assert!(
        task["admission"]["policy"]
            .as_str()
            .unwrap()
            .starts_with("default-admission@")
    );
}

#[test]
fn a_failover_shadow_is_asked_the_nodes_the_active_policy_judges() {
    let Some(registry) =
        Registry::start("a_failover_shadow_is_asked_the_nodes_the_active_policy_judges")
    else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let same = push(
        &registry,
        &default_plugin("failover"),
        &registry.reference("p/failover:1"),
        data.path(),
    );
    let cluster = crate::live::Cluster::start();
    let group = replicas(&cluster, Some(&registry), 1, &[]);
    let server = group.server(0);
    cluster.apply(shadow_policy("failover-next", "failover", &same));
    // Failover judges the nodes on its own clock: the shadow is asked too,
    // node by node, and the same policy answers the same.
    let mut report = serde_json::Value::Null;
    let compared = wait_until(crate::live::PATIENCE, || {
        report = server.get("/v1/policies/failover-next/shadow").1;
        report["compared"].as_u64() >= Some(2)
    });
    assert!(compared.is_some(), "{report}");
    assert_eq!(report["differing"], 0, "{report}");
    assert!(
        report["against"]
            .as_str()
            .unwrap()
            .starts_with("default-failover@"),
        "{report}"
    );
}
