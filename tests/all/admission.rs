//! The Kubernetes admission webhook with the default policy, on review
//! bodies as the API server sends them; a policy that traps or spins
//! answered by the failure mode without hanging; and HTTPS with a
//! certificate replaced while serving.

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE, start_host};
use crate::serve::Server;
use crate::support::{default_plugin, review, test_plugin, wait_until};

/// The response of a review, checking the envelope the API server needs.
fn answer(server: &Server, body: &str, uid: &str) -> Value {
    let (code, review) = server.send("POST", "/v1/admission/review", Some(body));
    assert_eq!(code, 200, "{review}");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(review["response"]["uid"], uid, "{review}");
    review["response"].clone()
}

const POD_UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";
const DEPLOYMENT_UID: &str = "c3f1d6a2-8e4b-4f7a-9b1d-2a6e5c0d9f11";

#[test]
fn the_webhook_answers_reviews_by_the_default_policy() {
    let cluster = Cluster::start();
    cluster.apply(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "prod", "labels": {"verdict.dev/environment": "production"}}
    }));
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &[]);
    // The host must have seen the production namespace's labels.
    assert!(
        wait_until(PATIENCE, || server.get("/readyz").0 == 200).is_some(),
        "never ready"
    );

    // A pod with an unpinned image: allowed, with a warning.
    let pod = answer(&server, &review("pod-create.json", "shop"), POD_UID);
    assert_eq!(pod["allowed"], true, "{pod}");
    assert!(
        pod["warnings"][0]
            .as_str()
            .unwrap()
            .contains("ealen/echo-server"),
        "{pod}"
    );
    assert!(pod.get("patch").is_none(), "a pod is not patched: {pod}");

    // A Deployment without the app label: allowed and labelled.
    let shop = answer(
        &server,
        &review("deployment-create.json", "shop"),
        DEPLOYMENT_UID,
    );
    assert_eq!(shop["allowed"], true, "{shop}");
    assert_eq!(shop["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(shop["patch"].as_str().unwrap())
        .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/metadata/labels", "value": {"app.kubernetes.io/instance": "api"}}])
    );

    // The same Deployment in production, without limits: refused.
    let prod = answer(
        &server,
        &review("deployment-create.json", "prod"),
        DEPLOYMENT_UID,
    );
    assert_eq!(prod["allowed"], false, "{prod}");
    assert_eq!(prod["status"]["code"], 403);
    let message = prod["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("container api") && message.contains("limits"),
        "{message}"
    );

    // With limits it passes.
    let mut limited: Value =
        serde_json::from_str(&review("deployment-create.json", "prod")).unwrap();
    limited["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] =
        json!({"cpu": "500m", "memory": "256Mi"});
    let prod = answer(&server, &limited.to_string(), DEPLOYMENT_UID);
    assert_eq!(prod["allowed"], true, "{prod}");

    // What is not a review is a 400 saying why.
    for (body, says) in [
        ("{not json", "not JSON"),
        (
            r#"{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}"#,
            "no request",
        ),
        (
            r#"{"kind": "Pod", "apiVersion": "v1", "request": null}"#,
            "not AdmissionReview",
        ),
        (
            r#"{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": 7}}"#,
            "request",
        ),
    ] {
        let (code, error) = server.send("POST", "/v1/admission/review", Some(body));
        assert_eq!(code, 400, "{body}: {error}");
        assert_eq!(error["error"]["code"], "invalid-review");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{body}: {message}");
    }
}

/// A host whose admission policy is the `gate` test plugin.
fn gated(cluster: &Cluster, mode: &str) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    gated_with(cluster, &["--admission-failure", mode])
}

/// A host whose admission policy is the test plugin `gate`, which
/// misbehaves on request, with calls limited to 200 ms and more flags.
fn gated_with(cluster: &Cluster, extra: &[&str]) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(default_plugin("status"), plugins.path().join("status.wasm")).unwrap();
    std::fs::copy(test_plugin("gate"), plugins.path().join("admission.wasm")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let url = cluster.sim().url();
    let mut flags = vec!["--cluster-url", url.as_str(), "--call-timeout-ms", "200"];
    flags.extend_from_slice(extra);
    let server = Server::start_with(plugins.path(), data.path(), &flags);
    (server, plugins, data)
}

#[test]
fn a_failing_policy_answers_by_the_failure_mode() {
    let cluster = Cluster::start();
    let (closed, _p1, _d1) = gated(&cluster, "closed");
    let (open, _p2, _d2) = gated(&cluster, "open");
    let mut pod: Value = serde_json::from_str(&review("pod-create.json", "shop")).unwrap();
    for way in ["trap", "spin"] {
        let task = json!({"app": "shop/web", "action": "restart", "params": {"x-misbehave": way}});
        let started = Instant::now();
        let (code, error) = closed.send("POST", "/v1/tasks", Some(&task.to_string()));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{way} hung the request"
        );
        assert_eq!(code, 503, "{way}: {error}");
        assert_eq!(error["error"]["code"], "admission-unavailable");

        let (code, task) = open.send("POST", "/v1/tasks", Some(&task.to_string()));
        assert_eq!(code, 201, "{way}: {task}");
        assert!(
            task["admission"]["failure"]
                .as_str()
                .unwrap()
                .contains(if way == "spin" { "time" } else { "trap" }),
            "{task}"
        );
        assert!(
            task["admission"]["warnings"][0]
                .as_str()
                .unwrap()
                .contains("without policy")
        );
        if way == "trap" {
            let failure = task["admission"]["failure"].as_str().unwrap();
            assert!(failure.contains("trapped: wasm `unreachable`"), "{failure}");
            assert!(!failure.contains('\n'), "one line: {failure}");
        }
        let (code, _) = open.send(
            "POST",
            &format!("/v1/tasks/{}/cancel", task["id"].as_str().unwrap()),
            Some("{}"),
        );
        assert_eq!(code, 200);

        pod["request"]["object"]["metadata"]["annotations"] = json!({"verdict.dev/misbehave": way});
        let refused = answer(&closed, &pod.to_string(), POD_UID);
        assert_eq!(refused["allowed"], false, "{refused}");
        assert_eq!(refused["status"]["code"], 503);
        let allowed = answer(&open, &pod.to_string(), POD_UID);
        assert_eq!(allowed["allowed"], true, "{allowed}");
        assert!(
            allowed["warnings"][0]
                .as_str()
                .unwrap()
                .contains("without policy")
        );
    }
    // A well-behaved request still passes, and the failures were counted.
    let (code, task) = closed.send(
        "POST",
        "/v1/tasks",
        Some(r#"{"app": "shop/web", "action": "restart"}"#),
    );
    assert_eq!(code, 201, "{task}");
    let plugins = closed.get("/v1/plugins").1;
    let gate = plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "admission")
        .unwrap();
    assert!(gate["errors"].as_u64().unwrap() >= 4, "{gate}");
    assert!(gate["timeouts"].as_u64().unwrap() >= 2, "{gate}");
}

#[test]
fn a_flood_of_slow_reviews_is_shed_by_the_failure_mode_and_others_still_pass() {
    let cluster = Cluster::start();
    // One call at once, a short wait for room: twenty spinning reviews
    // cannot all be answered by the policy in time.
    let (server, _plugins, _data) = gated_with(
        &cluster,
        &[
            "--admission-concurrency",
            "1",
            "--admission-queue-ms",
            "300",
        ],
    );
    let mut pod: Value = serde_json::from_str(&review("pod-create.json", "shop")).unwrap();
    pod["request"]["object"]["metadata"]["annotations"] = json!({"verdict.dev/misbehave": "spin"});
    let spinning = pod.to_string();
    let flood: Vec<_> = (0..20)
        .map(|_| {
            let (base, body) = (server.base.clone(), spinning.clone());
            std::thread::spawn(move || -> Value {
                reqwest::blocking::Client::new()
                    .post(format!("{base}/v1/admission/review"))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .unwrap()
                    .json()
                    .unwrap()
            })
        })
        .collect();
    let answers: Vec<Value> = flood.into_iter().map(|t| t.join().unwrap()).collect();
    // Every one answered, by the failure mode (closed): cut off at the
    // call limit, or shed for want of room, saying so.
    for answer in &answers {
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        assert_eq!(answer["response"]["status"]["code"], 503, "{answer}");
    }
    let shed = answers
        .iter()
        .filter(|a| {
            a["response"]["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("busy") && m.contains("shed"))
        })
        .count();
    assert!(shed > 0, "none was shed: {answers:#?}");
    assert!(shed < answers.len(), "the policy answered none itself");
    // With room again, a well-behaved review is the policy's to answer.
    let fine = answer(&server, &review("pod-create.json", "shop"), POD_UID);
    assert_eq!(fine["allowed"], true, "{fine}");
}

fn certificate(path: &Path, names: &[&str]) -> reqwest::Certificate {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let issued = rcgen::generate_simple_self_signed(names).unwrap();
    let cert = issued.cert.pem();
    let partial = path.join("partial");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join("tls.crt"), &cert).unwrap();
    std::fs::write(partial.join("tls.key"), issued.signing_key.serialize_pem()).unwrap();
    // The key first: a reload between the two renames fails and keeps the
    // old pair; the second rename's event loads the new one.
    std::fs::rename(partial.join("tls.key"), path.join("tls.key")).unwrap();
    std::fs::rename(partial.join("tls.crt"), path.join("tls.crt")).unwrap();
    reqwest::Certificate::from_pem(cert.as_bytes()).unwrap()
}

fn trusting(cert: reqwest::Certificate) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(cert)
        // Every request its own connection, so that each sees the
        // certificate serving at that moment.
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[test]
fn https_serves_and_a_replaced_certificate_is_picked_up() {
    let tls = tempfile::tempdir().unwrap();
    let first = certificate(tls.path(), &["127.0.0.1", "localhost"]);
    let data = tempfile::tempdir().unwrap();
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let cert = tls.path().join("tls.crt");
    let key = tls.path().join("tls.key");
    let server = Server::start_with(
        &plugins,
        data.path(),
        &[
            "--demo",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let healthz = format!("{}/healthz", server.base);
    let old_client = trusting(first);
    let response = old_client.get(&healthz).send().unwrap();
    assert_eq!(response.status(), 200);
    // Plain HTTP is not served on the TLS port.
    let plain = reqwest::blocking::get(healthz.replace("https://", "http://"));
    assert!(plain.map(|r| !r.status().is_success()).unwrap_or(true));

    let second = certificate(tls.path(), &["127.0.0.1", "localhost"]);
    let new_client = trusting(second);
    let switched = wait_until(PATIENCE, || {
        new_client
            .get(&healthz)
            .send()
            .is_ok_and(|r| r.status() == 200)
    });
    assert!(switched.is_some(), "the new certificate never served");
    // The old certificate is no longer what the server presents.
    assert!(old_client.get(&healthz).send().is_err());
}
