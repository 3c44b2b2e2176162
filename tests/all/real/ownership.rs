//! verdict respects what is not its own, on the real API server: a delete
//! of a Deployment a person made is refused and deletes nothing until the
//! app is adopted; a create over a person's Secret and ConfigMap fails at
//! its first step naming both and changes neither; no app is made in a
//! protected namespace; and a task's secret material — licence, TLS key,
//! registry password and `auth` — is found in the app's Secrets and in
//! none of the answers, the event stream, the task store's files or the
//! host's log at debug level.

use std::io::{Read as _, Write as _};
use std::process::Command;

use serde_json::{Value, json};

use super::{shared, unique, until_kubectl};
use crate::apps::{carried_out as run, finished};
use crate::serve::Server;

#[test]
fn a_delete_of_a_persons_deployment_is_refused_until_it_is_adopted_on_the_real_api_server() {
    let Some(cluster) = shared(
        "a_delete_of_a_persons_deployment_is_refused_until_it_is_adopted_on_the_real_api_server",
    ) else {
        return;
    };
    let ns = unique("real-legacy");
    cluster.create_namespace(&ns, &[]).unwrap();
    cluster
        .kubectl_run(
            &[
                "create",
                "deployment",
                "web",
                "--image=web:1",
                "--replicas=1",
                "-n",
                &ns,
            ],
            None,
        )
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = super::follow(&cluster.kubeconfig(), data.path(), &["--execute-tasks"]);
    let app = format!("{ns}/web");
    super::until(&server, &app, "the app observed", |v| {
        v["stable"].is_string()
    });

    // Refused, naming the workload and how to adopt it; nothing deleted.
    let delete = json!({"app": app, "action": "delete", "params": {}});
    let (code, refused) = server.send("POST", "/v1/tasks", Some(&delete.to_string()));
    assert_eq!(
        (code, refused["error"]["code"].as_str()),
        (409, Some("not-verdicts")),
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("Deployment {ns}/web was not made by verdict")),
        "{message}"
    );
    assert!(message.contains("\"action\": \"adopt\""), "{message}");
    // An update beyond image and replicas likewise.
    let update = json!({"app": app, "action": "update", "params": {"env": {"A": "1"}}});
    let (code, refused) = server.send("POST", "/v1/tasks", Some(&update.to_string()));
    assert_eq!(code, 409, "{refused}");
    // The day-2 update of its image and replicas is taken.
    let day_two = run(
        &server,
        json!({"app": app, "action": "update", "params": {"image": "web:2", "replicas": 2}}),
    );
    assert_eq!(day_two["phase"], "succeeded", "{day_two}");
    let image = cluster
        .kubectl_run(
            &[
                "get",
                "deployment",
                "web",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image} {.spec.replicas}",
            ],
            None,
        )
        .unwrap();
    assert_eq!(image, "web:2 2");

    // Adopted, the same delete is carried out.
    let adopted = run(
        &server,
        json!({"app": app, "action": "adopt", "requested-by": "ana"}),
    );
    assert_eq!(adopted["phase"], "succeeded", "{adopted}");
    let by = cluster
        .kubectl_run(
            &[
                "get",
                "deployment",
                "web",
                "-n",
                &ns,
                "-o",
                "jsonpath={.metadata.annotations.verdict\\.dev/adopted-by}",
            ],
            None,
        )
        .unwrap();
    assert_eq!(by, "ana");
    let deleted = run(&server, delete);
    assert_eq!(deleted["phase"], "succeeded", "{deleted}");
    until_kubectl(
        cluster,
        &["get", "deployments", "-n", &ns, "-o", "name"],
        "the adopted Deployment deleted",
        |out| out.trim().is_empty(),
    );
}

#[test]
fn a_create_over_a_persons_objects_changes_nothing_and_names_them_on_the_real_api_server() {
    let Some(cluster) = shared(
        "a_create_over_a_persons_objects_changes_nothing_and_names_them_on_the_real_api_server",
    ) else {
        return;
    };
    let ns = unique("real-owned");
    cluster.create_namespace(&ns, &[]).unwrap();
    cluster
        .apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: web-license, namespace: {ns}}}\nstringData: {{license: mine}}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: web-logging, namespace: {ns}}}\ndata: {{level: debug}}\n"
        ))
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = super::follow(&cluster.kubeconfig(), data.path(), &["--execute-tasks"]);
    let app = format!("{ns}/web");
    let failed = run(
        &server,
        json!({"app": app, "action": "create", "params": {
            "image": "web:1", "license": "TElDRU5TRQ==", "log_config": {"level": "info"}}}),
    );
    assert_eq!(failed["phase"], "failed", "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.starts_with("step `prepare-environment` failed"),
        "{message}"
    );
    for named in [
        format!("Secret {ns}/web-license"),
        format!("ConfigMap {ns}/web-logging"),
    ] {
        assert!(message.contains(&named), "{named}: {message}");
    }
    let secret = cluster
        .kubectl_run(
            &["get", "secret", "web-license", "-n", &ns, "-o", "json"],
            None,
        )
        .unwrap();
    let secret: Value = serde_json::from_str(&secret).unwrap();
    assert_eq!(
        secret["data"]["license"], "bWluZQ==",
        "the person's data is as it was"
    );
    assert!(secret["metadata"]["labels"].is_null(), "{secret}");
    let map = cluster
        .kubectl_run(
            &["get", "configmap", "web-logging", "-n", &ns, "-o", "json"],
            None,
        )
        .unwrap();
    let map: Value = serde_json::from_str(&map).unwrap();
    assert_eq!(map["data"], json!({"level": "debug"}));
    let workloads = cluster
        .kubectl_run(&["get", "deployments", "-n", &ns, "-o", "name"], None)
        .unwrap();
    assert!(workloads.trim().is_empty(), "nothing made: {workloads}");

    // No app is made in a protected namespace.
    let (code, refused) = server.send(
        "POST",
        "/v1/tasks",
        Some(
            &json!({"app": "kube-system/web", "action": "create", "params": {"image": "web:1"}})
                .to_string(),
        ),
    );
    assert_eq!(
        (code, refused["error"]["code"].as_str()),
        (403, Some("protected-namespace")),
        "{refused}"
    );
}

#[test]
fn a_tasks_secret_material_is_in_the_apps_secrets_and_nowhere_else_on_the_real_api_server() {
    let Some(cluster) = shared(
        "a_tasks_secret_material_is_in_the_apps_secrets_and_nowhere_else_on_the_real_api_server",
    ) else {
        return;
    };
    use base64::Engine as _;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let ns = unique("real-canary");
    // A token found nowhere else (the namespace holds the process id too).
    let canary = format!("Zq7{}Wk", std::process::id());
    let license = b64(&format!("LICENSE-{canary}"));
    let key = format!("-----BEGIN PRIVATE KEY-----\nKEY-{canary}\n-----END PRIVATE KEY-----\n");
    let password = format!("PASSWORD-{canary}");
    let auth = b64(&format!("robot:AUTH-{canary}"));
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("verdict.log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--plugins"])
        .arg(super::plugins())
        .arg("--data-dir")
        .arg(data.path())
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .arg("--execute-tasks");
    let server = Server::start_logging(command, "debug,kube_client=info,hyper=info,h2=info", &log);
    // The event stream, read while the task runs, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let events = {
        let address = server.base.trim_start_matches("http://").to_string();
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut stream = std::net::TcpStream::connect(&address).unwrap();
            write!(
                stream,
                "GET /v1/events HTTP/1.1\r\nhost: {address}\r\naccept: text/event-stream\r\n\r\n"
            )
            .unwrap();
            stream
                .set_read_timeout(Some(std::time::Duration::from_millis(200)))
                .unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
            let mut body = Vec::new();
            let mut chunk = [0u8; 65536];
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && std::time::Instant::now() < deadline
            {
                match stream.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => body.extend_from_slice(&chunk[..n]),
                    Err(_) => {}
                }
            }
            String::from_utf8_lossy(&body).into_owned()
        })
    };
    let body = json!({"app": format!("{ns}/web"), "action": "create", "params": {
        "image": "web:1", "license": license,
        "certificate": {"cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "key": key},
        "image_pull_secrets": [
            {"registry": "registry.example:5000", "username": "puller", "password": password},
            {"registry": "other.example", "auth": auth}]}});
    let (code, answer) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
    assert_eq!(code, 201, "{answer}");
    let done = finished(&server, &answer);
    assert_eq!(done["phase"], "succeeded", "{done}");
    assert_eq!(
        answer["params"]["license"]["redacted"], "license",
        "the answer shows the redacted form: {answer}"
    );
    let list = server.get("/v1/tasks").1;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let streamed = events.join().unwrap();
    // Every file the host wrote (the task store, the history, the journals,
    // the compiled policies), the log aside.
    let files = written(data.path(), &log);
    assert!(
        files.iter().any(|f| f.ends_with("tasks.db"))
            && files.iter().any(|f| f.ends_with("history.db")),
        "{files:?}"
    );
    let store: Vec<u8> = files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap())
        .collect();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("DEBUG"), "the log is at debug level");
    for secret in [
        &license,
        &format!("KEY-{canary}"),
        &password,
        &auth,
        &canary,
    ] {
        for (surface, text) in [
            ("the POST answer", answer.to_string()),
            ("the finished task", done.to_string()),
            ("the task list", list.to_string()),
            ("the event stream", streamed.clone()),
            (
                "the host's files (the task store, the history)",
                String::from_utf8_lossy(&store).into_owned(),
            ),
            ("the log", logged.clone()),
        ] {
            assert!(!text.contains(secret.as_str()), "{secret} in {surface}");
        }
    }
    let id = answer["id"].as_str().unwrap();
    assert!(
        streamed.contains(id),
        "the stream carried the task: {streamed:.500}"
    );
    // Every file the host writes is its own alone.
    use std::os::unix::fs::PermissionsExt as _;
    for file in &files {
        let mode = std::fs::metadata(file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", file.display());
    }
    // The material is in the app's Secrets.
    let secret = |name: &str, key: &str| secret_in(cluster, &ns, name, key);
    assert_eq!(
        secret("web-license", "license"),
        format!("LICENSE-{canary}")
    );
    assert!(secret("web-tls", "tls\\.key").contains(&format!("KEY-{canary}")));
    assert!(secret("web-pull-0", "\\.dockerconfigjson").contains(&password));
    assert!(secret("web-pull-1", "\\.dockerconfigjson").contains(&auth));

    // With the Kubernetes task store, the Task object shows the redacted
    // form, and the material's own Secret goes when the task finishes.
    super::tasks::install_task_crd(cluster);
    let store = unique("real-canary-tasks");
    cluster.create_namespace(&store, &[]).unwrap();
    let kept = tempfile::tempdir().unwrap();
    let server = super::follow(
        &cluster.kubeconfig(),
        kept.path(),
        &[
            "--execute-tasks",
            "--task-store",
            "kubernetes",
            "--tasks-namespace",
            &store,
        ],
    );
    let mut body = body;
    body["app"] = json!(format!("{ns}/api"));
    let (code, answer) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
    assert_eq!(code, 201, "{answer}");
    let done = finished(&server, &answer);
    assert_eq!(done["phase"], "succeeded", "{done}");
    let objects = cluster
        .kubectl_run(
            &[
                "get",
                "tasks.verdict.dev,secrets",
                "-n",
                &store,
                "-o",
                "json",
            ],
            None,
        )
        .unwrap();
    for secret in [
        &license,
        &format!("KEY-{canary}"),
        &password,
        &auth,
        &canary,
    ] {
        assert!(
            !objects.contains(secret.as_str()),
            "{secret} in the Task objects"
        );
    }
    let objects: Value = serde_json::from_str(&objects).unwrap();
    let kinds: Vec<&str> = objects["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"Task"), "{kinds:?}");
    until_kubectl(
        cluster,
        &["get", "secrets", "-n", &store, "-o", "name"],
        "the task's material deleted once it finished",
        |out| !out.contains("-material"),
    );
    assert_eq!(
        secret_in(cluster, &ns, "api-license", "license"),
        format!("LICENSE-{canary}")
    );
}

fn secret_in(cluster: &verdict_testcluster::Cluster, ns: &str, name: &str, key: &str) -> String {
    use base64::Engine as _;
    let value = cluster
        .kubectl_run(
            &[
                "get",
                "secret",
                name,
                "-n",
                ns,
                "-o",
                &format!("jsonpath={{.data.{key}}}"),
            ],
            None,
        )
        .unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(value)
            .unwrap(),
    )
    .unwrap()
}

/// Every file below `dir` but `except`.
fn written(dir: &std::path::Path, except: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path != except {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn a_task_whose_secret_material_cannot_be_kept_fails_saying_so_on_the_real_api_server() {
    let Some(cluster) = shared(
        "a_task_whose_secret_material_cannot_be_kept_fails_saying_so_on_the_real_api_server",
    ) else {
        return;
    };
    super::tasks::install_task_crd(cluster);
    let store = unique("real-nosecrets");
    cluster.create_namespace(&store, &[]).unwrap();
    // A host that may keep Task objects and read the cluster, but not make
    // Secrets.
    cluster
        .apply(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: tasker, namespace: {store}}}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: tasker, namespace: {store}}}\n\
             rules: [{{apiGroups: [verdict.dev], resources: [tasks], verbs: [get, list, watch, create, update, delete]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: tasker, namespace: {store}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tasker}}\n\
             subjects: [{{kind: ServiceAccount, name: tasker, namespace: {store}}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {store}-view}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}}\n\
             subjects: [{{kind: ServiceAccount, name: tasker, namespace: {store}}}]\n"
        ))
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let kubeconfig = data.path().join("tasker.kubeconfig");
    cluster
        .service_account_kubeconfig(&store, "tasker", &kubeconfig)
        .unwrap();
    let server = super::follow(
        &kubeconfig,
        data.path(),
        &["--task-store", "kubernetes", "--tasks-namespace", &store],
    );
    let body = json!({"app": format!("{store}-app/web"), "action": "create",
        "params": {"image": "web:1", "license": "TElDRU5TRQ=="}});
    let (code, task) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
    assert_eq!(code, 201, "{task}");
    assert_eq!(task["phase"], "failed", "{task}");
    let message = task["message"].as_str().unwrap();
    assert!(
        message.starts_with("its secret material could not be kept")
            && message.contains("forbidden"),
        "{message}"
    );
    assert!(!task.to_string().contains("TElDRU5TRQ"), "{task}");
    let _ = cluster.kubectl_run(
        &["delete", "clusterrolebinding", &format!("{store}-view")],
        None,
    );
}
