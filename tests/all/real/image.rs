//! verdict's image (`cargo xtask image`'s assembly of the tests' binary),
//! pushed to a real registry, pulled by digest and run by podman exactly as
//! the chart's pod spec says: its image reference, arguments and
//! environment (`$(VAR)` expanded as the kubelet does), its user and group,
//! a read-only root file system without capabilities or privilege
//! escalation, its memory limit, its volumes (the data folder an empty
//! directory of the pod's group, the serving certificate from the Secret
//! the chart made) and the ServiceAccount's token and CA where the kubelet
//! puts them, with `KUBERNETES_SERVICE_HOST`/`PORT` naming the real API
//! server. It follows the cluster with those in-cluster credentials, leads
//! on the chart's Lease, answers its probes over the chart's TLS, is called
//! by the API server as the chart's webhook, and ends on SIGTERM within
//! the pod's grace period.
//!
//! The one difference from a pod: podman runs it in the machine's network
//! namespace (the only one that reaches the loopback API server here), so
//! the pod's own IP is 127.0.0.1 and its port a free one.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use verdict_testcluster::Cluster;

use super::{PATIENCE, deployment, shared, unique};
use crate::delivery::Registry;
use crate::support::wait_until;

/// The image to test and the runc podman runs it with, from `cargo xtask
/// test`; `None`, said loudly, where it had none — a failure when
/// `VERDICT_REQUIRE_IMAGE` is set, as in CI.
fn image(test: &str) -> Option<(String, String)> {
    match (
        std::env::var("VERDICT_TEST_IMAGE"),
        std::env::var("VERDICT_TEST_IMAGE_RUNC"),
    ) {
        (Ok(image), Ok(runc)) => Some((image, runc)),
        _ => {
            let message = format!(
                "IMAGE TEST NOT RUN: {test} needs the image and podman (`cargo xtask test` builds one and finds podman)"
            );
            crate::support::skipped(&message, Some("VERDICT_REQUIRE_IMAGE"));
            None
        }
    }
}

/// `program ARGS`, which must succeed; its standard output.
fn must(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The container, removed (and its image) when the test ends.
struct Container {
    name: String,
    image: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", "--time", "0", &self.name])
            .output();
        let _ = Command::new("podman")
            .args(["rmi", "--force", &self.image])
            .output();
    }
}

/// The chart's webhook configurations are cluster-wide: removed when the
/// test ends.
struct Webhooks<'a>(&'a Cluster, String);

impl Drop for Webhooks<'_> {
    fn drop(&mut self) {
        for kind in [
            "validatingwebhookconfiguration",
            "mutatingwebhookconfiguration",
        ] {
            let _ = self
                .0
                .kubectl_run(&["delete", kind, &self.1, "--ignore-not-found"], None);
        }
    }
}

/// `$(NAME)` in `text` replaced by the environment's value, as the kubelet
/// expands a container's arguments.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = text.to_string();
    for (name, value) in env {
        out = out.replace(&format!("$({name})"), value);
    }
    out
}

/// A Secret's data written as the files of its volume.
fn secret_volume(cluster: &Cluster, namespace: &str, name: &str, dir: &Path) {
    use base64::Engine as _;
    let secret: Value = serde_json::from_str(
        &cluster
            .kubectl_run(
                &["get", "secret", name, "-n", namespace, "-o", "json"],
                None,
            )
            .unwrap(),
    )
    .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    for (key, value) in secret["data"].as_object().unwrap() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap())
            .unwrap();
        let file = dir.join(key);
        std::fs::write(&file, bytes).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

#[test]
fn the_image_runs_as_the_chart_runs_it() {
    let test = "the_image_runs_as_the_chart_runs_it";
    let Some((layout, runc)) = image(test) else {
        return;
    };
    let Some(cluster) = shared(test) else {
        return;
    };
    let Some(registry) = Registry::start(test) else {
        return;
    };

    // Pushed, and its digest.
    let dir = tempfile::tempdir().unwrap();
    let digest_file = dir.path().join("digest");
    let repository = registry.reference("verdict");
    must(
        "skopeo",
        &[
            "copy",
            "--dest-tls-verify=false",
            "--digestfile",
            digest_file.to_str().unwrap(),
            &layout,
            &format!("docker://{repository}:test"),
        ],
    );
    let digest = std::fs::read_to_string(&digest_file).unwrap();
    assert!(digest.starts_with("sha256:"), "{digest}");

    // The chart, installed with that image by digest, its webhooks calling
    // the host where podman runs it, trusted by the chart's own CA.
    let release = unique("img");
    let namespace = release.clone();
    let fullname = format!("{release}-verdict");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        format!(
            "image:\n  repository: {repository}\n  digest: {digest}\n\
             tls:\n  ipAddresses: [127.0.0.1]\n\
             webhooks:\n  url: https://127.0.0.1:{port}/v1/admission/review\n  failurePolicy: Fail\n  \
             namespaceSelector:\n    matchExpressions:\n      - {{key: verdict.dev/image-test, operator: In, values: [\"{release}\"]}}\n"
        ),
    )
    .unwrap();
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart/verdict");
    let rendered = cluster
        .binaries()
        .helm_template(
            &chart,
            &release,
            &namespace,
            &["--include-crds", "--values", values.to_str().unwrap()],
        )
        .unwrap();
    cluster.create_namespace(&namespace, &[]).unwrap();
    let _webhooks = Webhooks(cluster, fullname.clone());
    cluster.apply(&rendered).unwrap();

    // The chart's pod spec.
    let pod = serde_yaml_ng::Deserializer::from_str(&rendered)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|o| o["kind"] == "Deployment")
        .expect("the chart renders a Deployment")["spec"]["template"]["spec"]
        .clone();
    let container = &pod["containers"][0];
    let reference = container["image"].as_str().unwrap().to_string();
    assert_eq!(reference, format!("{repository}@{digest}"));
    let user = pod["securityContext"]["runAsUser"].as_u64().unwrap();
    let group = pod["securityContext"]["runAsGroup"].as_u64().unwrap();
    let fs_group = pod["securityContext"]["fsGroup"].as_u64().unwrap();
    let security = &container["securityContext"];
    let container_port = container["ports"][0]["containerPort"].as_u64().unwrap();
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);

    // The kubelet's part: the environment, the volumes, the account.
    let pod_name = format!("{fullname}-podman");
    let mut env = BTreeMap::new();
    for variable in container["env"].as_array().unwrap() {
        let name = variable["name"].as_str().unwrap().to_string();
        let value = match variable["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("metadata.name") => pod_name.clone(),
            Some("status.podIP") => "127.0.0.1".to_string(),
            Some(other) => panic!("a field the test does not give: {other}"),
            None => variable["value"].as_str().unwrap().to_string(),
        };
        env.insert(name, value);
    }
    let server = cluster.server();
    let (host, api_port) = server
        .trim_start_matches("https://")
        .rsplit_once(':')
        .expect("the API server's host:port");
    env.insert("KUBERNETES_SERVICE_HOST".into(), host.into());
    env.insert("KUBERNETES_SERVICE_PORT".into(), api_port.into());

    let mut run = vec![
        "--runtime".to_string(),
        runc,
        "run".into(),
        "--detach".into(),
        "--pull".into(),
        "never".into(),
        "--name".into(),
        pod_name.clone(),
        "--network".into(),
        "host".into(),
        // The limits these machines let a container have.
        "--ulimit".into(),
        "nofile=1024:1024".into(),
        "--ulimit".into(),
        "nproc=1024:1024".into(),
        "--user".into(),
        format!("{user}:{group}"),
        "--group-add".into(),
        fs_group.to_string(),
    ];
    if security["readOnlyRootFilesystem"] == true {
        run.push("--read-only".into());
    }
    if security["allowPrivilegeEscalation"] == false {
        run.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    for capability in security["capabilities"]["drop"].as_array().unwrap() {
        run.extend([
            "--cap-drop".into(),
            capability.as_str().unwrap().to_lowercase(),
        ]);
    }
    if let Some(memory) = container["resources"]["limits"]["memory"].as_str() {
        let mebibytes = memory.strip_suffix("Mi").expect("a limit in Mi");
        run.extend(["--memory".into(), format!("{mebibytes}m")]);
    }
    for (name, value) in &env {
        run.extend(["--env".into(), format!("{name}={value}")]);
    }
    let volumes = pod["volumes"].as_array().unwrap();
    for mount in container["volumeMounts"].as_array().unwrap() {
        let name = mount["name"].as_str().unwrap();
        let volume = volumes.iter().find(|v| v["name"] == name).unwrap();
        let path = mount["mountPath"].as_str().unwrap();
        let host = dir.path().join("volumes").join(name);
        if volume.get("emptyDir").is_some() {
            // An empty directory of the pod's group, as fsGroup makes it.
            std::fs::create_dir_all(&host).unwrap();
            std::os::unix::fs::chown(&host, Some(0), Some(fs_group as u32)).unwrap();
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o2770)).unwrap();
        } else if let Some(secret) = volume["secret"]["secretName"].as_str() {
            secret_volume(cluster, &namespace, secret, &host);
        } else {
            panic!("a volume the test does not make: {volume}");
        }
        let read_only = if mount["readOnly"] == true { ":ro" } else { "" };
        run.extend([
            "--volume".into(),
            format!("{}:{path}{read_only}", host.display()),
        ]);
    }
    let account = dir.path().join("serviceaccount");
    std::fs::create_dir_all(&account).unwrap();
    let token = cluster
        .kubectl_run(
            &[
                "create",
                "token",
                pod["serviceAccountName"].as_str().unwrap(),
                "-n",
                &namespace,
                "--duration=1h",
            ],
            None,
        )
        .unwrap();
    std::fs::write(account.join("token"), token.trim()).unwrap();
    std::fs::copy(cluster.pki().ca(), account.join("ca.crt")).unwrap();
    std::fs::write(account.join("namespace"), &namespace).unwrap();
    for file in ["token", "ca.crt", "namespace"] {
        std::fs::set_permissions(account.join(file), std::fs::Permissions::from_mode(0o644))
            .unwrap();
    }
    run.extend([
        "--volume".into(),
        format!(
            "{}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
            account.display()
        ),
    ]);
    run.push(reference.clone());
    for arg in container["args"].as_array().unwrap() {
        let arg = arg.as_str().unwrap().replace(
            &format!("0.0.0.0:{container_port}"),
            &format!("127.0.0.1:{port}"),
        );
        let arg = expand(&arg, &env).replace(
            &format!("127.0.0.1:{container_port}"),
            &format!("127.0.0.1:{port}"),
        );
        run.push(arg);
    }

    // Pulled by digest from the registry: its own user is the chart's,
    // and it has no shell.
    must("podman", &["pull", "--tls-verify=false", &reference]);
    let _container = Container {
        name: pod_name.clone(),
        image: reference.clone(),
    };
    let configured = must(
        "podman",
        &[
            "image",
            "inspect",
            "--format",
            "{{.Config.User}}",
            &reference,
        ],
    );
    assert_eq!(configured.trim(), format!("{user}:{group}"));
    let shell = Command::new("podman")
        .args(["--runtime", &run[1], "run", "--rm", "--pull", "never"])
        .args(["--network", "host", "--ulimit", "nofile=1024:1024"])
        .args(["--ulimit", "nproc=1024:1024", "--entrypoint", "/bin/sh"])
        .args([&reference, "-c", "true"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&shell.stderr);
    assert!(
        !shell.status.success() && said.contains("/bin/sh"),
        "the image has a shell: {said}"
    );

    // Run.
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    must("podman", &run);
    let logs = || {
        let output = Command::new("podman")
            .args(["logs", &pod_name])
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };

    // Its probes, over the chart's TLS (the chart's CA trusted, the
    // certificate naming 127.0.0.1).
    let mut ca = Vec::new();
    secret_volume(
        cluster,
        &namespace,
        &format!("{fullname}-tls"),
        &dir.path().join("ca"),
    );
    ca.extend(std::fs::read(dir.path().join("ca").join("ca.crt")).unwrap());
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let base = format!("https://127.0.0.1:{port}");
    let get = |path: &str| -> (u16, Value) {
        match client.get(format!("{base}{path}")).send() {
            Ok(response) => (
                response.status().as_u16(),
                response.json().unwrap_or(Value::Null),
            ),
            Err(_) => (0, Value::Null),
        }
    };
    for probe in ["/healthz", "/readyz"] {
        assert!(
            wait_until(PATIENCE, || get(probe).0 == 200).is_some(),
            "{probe} never answered 200 ({:?}); the container printed:\n{}",
            get(probe),
            logs()
        );
    }

    // It follows the cluster with the in-cluster credentials…
    let apps = unique("img-apps");
    cluster.create_namespace(&apps, &[]).unwrap();
    cluster
        .apply(&deployment(&apps, "web", 1, "0s").to_string())
        .unwrap();
    let mut last = Value::Null;
    let running = wait_until(PATIENCE, || {
        last = get(&format!("/v1/apps/{apps}/web")).1;
        last["stable"] == "running"
    });
    assert!(
        running.is_some(),
        "{apps}/web never running: {last}; the container printed:\n{}",
        logs()
    );
    // …and leads, on the chart's Lease, as the pod.
    let holder = wait_until(PATIENCE, || {
        cluster
            .kubectl_run(
                &[
                    "get",
                    "lease",
                    &fullname,
                    "-n",
                    &namespace,
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                ],
                None,
            )
            .is_ok_and(|h| h == pod_name)
    });
    assert!(
        holder.is_some(),
        "never held the chart's Lease; the container printed:\n{}",
        logs()
    );

    // The API server calls it as the chart's webhook, over TLS.
    let prod = unique("img-prod");
    cluster
        .create_namespace(
            &prod,
            &[
                ("verdict.dev/environment", "production"),
                ("verdict.dev/image-test", &release),
            ],
        )
        .unwrap();
    let bare = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bare", "namespace": prod},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
    })
    .to_string();
    let mut refusal = String::new();
    let refused = wait_until(PATIENCE, || match cluster.apply(&bare) {
        Err(error) => {
            refusal = error.to_string();
            refusal.contains("denied the request")
        }
        Ok(_) => {
            let _ = cluster.kubectl_run(
                &["delete", "pod", "bare", "-n", &prod, "--wait=false"],
                None,
            );
            false
        }
    });
    assert!(
        refused.is_some(),
        "the webhook never refused a pod without limits: {refusal}; the container printed:\n{}",
        logs()
    );
    assert!(
        refusal.contains(r#"admission webhook "validate.verdict.dev" denied the request"#)
            && refusal.contains("container app has no CPU and memory limits"),
        "{refusal}"
    );

    // SIGTERM: it ends, cleanly, within the pod's grace period.
    let started = Instant::now();
    must("podman", &["stop", "--time", &grace.to_string(), &pod_name]);
    let took = started.elapsed();
    let code = must(
        "podman",
        &["inspect", "--format", "{{.State.ExitCode}}", &pod_name],
    );
    assert_eq!(
        code.trim(),
        "0",
        "it did not end cleanly on SIGTERM; it printed:\n{}",
        logs()
    );
    assert!(
        took < Duration::from_secs(grace),
        "it took {took:?} of a {grace}s grace period"
    );
}
