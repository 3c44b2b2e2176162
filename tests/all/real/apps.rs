//! Seed 000's tasks carried out whole on the real API server: a create from
//! the seed's JSON (snake_case, every field) in a namespace that does not
//! exist makes the namespace, StatefulSet (its claims bound by the
//! controller manager to volumes of the test's class), Service, Secrets
//! and ConfigMaps, applied server-side by verdict; the app goes from
//! `not-existed` through `creating` to `running`; an update of image and
//! env rolls it and expands its claims; stop and start keep them; a delete
//! takes it back to `not-existed`, the namespace gone. A quota too small
//! fails the deploy naming it; raised, the same create completes.

use serde_json::{Value, json};

use super::{follow, shared, unique, until, until_kubectl};
use crate::apps::{carried_out as run, finished};

const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

fn get(cluster: &verdict_testcluster::Cluster, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend(["-o", "json"]);
    let text = cluster.kubectl_run(&all, None).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// How long a deleted namespace may take to go (see its use).
const NAMESPACE_GONE: std::time::Duration = std::time::Duration::from_secs(240);

#[test]
fn a_create_from_the_seeds_task_makes_the_whole_app_and_a_delete_takes_it_back_on_the_real_api_server()
 {
    let Some(cluster) = shared(
        "a_create_from_the_seeds_task_makes_the_whole_app_and_a_delete_takes_it_back_on_the_real_api_server",
    ) else {
        return;
    };
    let ns = unique("real-newshop");
    let class = unique("real-fast");
    // Volumes of the test's own class, which the controller manager binds
    // the claims to (no provisioner runs here).
    let mut documents = format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: {class}}}\n\
         provisioner: kubernetes.io/no-provisioner\nallowVolumeExpansion: true\n"
    );
    for i in 0..2 {
        documents.push_str(&format!(
            "---\napiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {class}-{i}}}\n\
             spec: {{capacity: {{storage: 50Gi}}, accessModes: [ReadWriteOnce], storageClassName: {class},\n\
             persistentVolumeReclaimPolicy: Retain, hostPath: {{path: /tmp/{class}-{i}}}}}\n"
        ));
    }
    cluster.apply(&documents).unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = follow(&cluster.kubeconfig(), data.path(), &["--execute-tasks"]);
    let app = format!("{ns}/web");
    // Each bad field is refused, named, before anything is made.
    let bad = [
        (
            json!({"storage_class_size": "10Gx"}),
            "params.storage-class-size",
        ),
        (
            json!({"storage_class_name": "no-such-class"}),
            "params.storage-class-name",
        ),
        (
            json!({"image_pull_secrets": [{"username": "u", "password": "p"}]}),
            "params.image-pull-secrets[0].registry",
        ),
        (json!({"env": {"BAD NAME": "x"}}), "params.env.BAD NAME"),
    ];
    for (params, field) in bad {
        let body = json!({"app": app, "action": "create", "params": {
            "image": "nginx:1.27", "storage_class_name": class, "storage_class_size": "10Gi"}});
        let mut body = body;
        for (k, v) in params.as_object().unwrap() {
            body["params"][k] = v.clone();
        }
        let (code, refused) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
        assert_eq!(
            (code, refused["error"]["field"].as_str()),
            (422, Some(field)),
            "{params}: {refused}"
        );
    }
    let long = format!("{}/web", "n".repeat(64));
    let (code, refused) = server.send(
        "POST",
        "/v1/tasks",
        Some(
            &json!({"app": long, "action": "create", "params": {"image": "nginx:1.27"}})
                .to_string(),
        ),
    );
    assert_eq!(
        (code, refused["error"]["field"].as_str()),
        (422, Some("app")),
        "{refused}"
    );
    assert!(
        cluster
            .kubectl_run(&["get", "namespace", &ns], None)
            .is_err(),
        "nothing was made"
    );
    let (code, before) = server.get(&format!("/v1/apps/{app}"));
    assert!(
        code == 404 || before["stable"] == "not-existed",
        "{code} {before}"
    );

    let body = json!({"app": app, "action": "create", "requested-by": "seed", "params": {
        "namespace": ns, "image": "nginx:1.27", "replicas": 2,
        "storage_class_name": class, "storage_class_size": "10Gi",
        "labels": {"team": "shop"}, "env": {"MODE": "prod"},
        "license": "TElDRU5TRS0x",
        "certificate": {"cert": CERT, "key": KEY},
        "log_type": "stdout", "log_config": {"level": "info"},
        "metric_config": {"port": "9090"},
        "resource_limit": {"cpu": "100m", "memory": "64Mi"},
        "network_config": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "target_port": 8080}]},
        "image_pull_secrets": [{"registry": "registry.example:5000", "username": "puller", "password": "s3cret"}],
    }});
    let (code, task) = server.send("POST", "/v1/tasks", Some(&body.to_string()));
    assert_eq!(code, 201, "{task}");
    until(&server, &app, "the app creating", |v| {
        v["transitional"]["status"] == "creating"
    });
    let created = finished(&server, &task);
    assert_eq!(created["phase"], "succeeded", "{created}");

    let namespace = get(cluster, &["namespace", &ns]);
    assert_eq!(
        namespace["metadata"]["labels"]["verdict.dev/made-for"],
        "web"
    );
    let set = get(
        cluster,
        &["statefulset", "web", "-n", &ns, "--show-managed-fields"],
    );
    let managers: Vec<&str> = set["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["operation"] == "Apply")
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["verdict"], "applied server-side by verdict");
    assert_eq!(
        set["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"],
        class.as_str()
    );
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["env"], json!([{"name": "MODE", "value": "prod"}]));
    assert_eq!(
        container["resources"]["limits"],
        json!({"cpu": "100m", "memory": "64Mi"})
    );
    assert_eq!(
        set["spec"]["template"]["spec"]["imagePullSecrets"],
        json!([{"name": "web-pull-0"}])
    );
    assert_eq!(
        set["spec"]["template"]["metadata"]["labels"]["team"],
        "shop"
    );
    let secrets = get(
        cluster,
        &[
            "secrets",
            "-n",
            &ns,
            "-l",
            "app.kubernetes.io/managed-by=verdict",
        ],
    );
    let mut kinds: Vec<(String, String)> = secrets["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap().to_string(),
                s["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            ("web-license".to_string(), "Opaque".to_string()),
            ("web-pull-0".into(), "kubernetes.io/dockerconfigjson".into()),
            ("web-tls".into(), "kubernetes.io/tls".into()),
        ]
    );
    let service = get(cluster, &["service", "web", "-n", &ns]);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(
        get(cluster, &["configmap", "web-logging", "-n", &ns])["data"]["type"],
        "stdout"
    );
    let printed = cluster
        .kubectl_run(
            &[
                "get",
                "statefulset,service,secret,configmap,pvc",
                "-n",
                &ns,
                "-l",
                "app.kubernetes.io/instance=web",
            ],
            None,
        )
        .unwrap();
    eprintln!("what the create made:\n{printed}");
    until(&server, &app, "the app running", |v| {
        v["stable"] == "running"
    });

    // Update of image and env: the pods roll; the claims grow.
    let updated = run(
        &server,
        json!({"app": app, "action": "update",
        "params": {"image": "nginx:1.28", "env": {"MODE": "canary"}, "storage_class_size": "20Gi"}}),
    );
    assert_eq!(updated["phase"], "succeeded", "{updated}");
    until_kubectl(
        cluster,
        &[
            "get",
            "pods",
            "-n",
            &ns,
            "-o",
            "jsonpath={.items[*].spec.containers[0].image}",
        ],
        "every pod on the new image",
        |out| {
            out.split_whitespace().count() == 2 && out.split_whitespace().all(|i| i == "nginx:1.28")
        },
    );
    let claims = get(cluster, &["pvc", "-n", &ns]);
    for claim in claims["items"].as_array().unwrap() {
        assert_eq!(
            claim["spec"]["resources"]["requests"]["storage"], "20Gi",
            "{claim}"
        );
    }

    // Stop and start keep the claims.
    assert_eq!(
        run(&server, json!({"app": app, "action": "stop"}))["phase"],
        "succeeded"
    );
    assert_eq!(
        get(cluster, &["pvc", "-n", &ns])["items"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        run(&server, json!({"app": app, "action": "start"}))["phase"],
        "succeeded"
    );

    // Delete, the claims too: the namespace goes, and the app reads not-existed.
    let deleted = run(
        &server,
        json!({"app": app, "action": "delete", "params": {"delete_storage": true}}),
    );
    assert_eq!(deleted["phase"], "succeeded", "{deleted}");
    // The app is not-existed once its namespace is gone: after KWOK has
    // confirmed each pod's deletion, the claims' protection is lifted and
    // the namespace controller has swept every kind — minutes, not seconds,
    // while other tests' control planes and builds share the 2 cores.
    server.app_until(&app, "the app not-existed", NAMESPACE_GONE, |v| {
        v["stable"] == "not-existed"
    });
    let gone = cluster.kubectl_run(&["get", "namespace", &ns], None);
    assert!(gone.is_err(), "the namespace is still there: {gone:?}");
}

#[test]
fn a_quota_too_small_fails_the_deploy_and_a_retry_completes_on_the_real_api_server() {
    let Some(cluster) =
        shared("a_quota_too_small_fails_the_deploy_and_a_retry_completes_on_the_real_api_server")
    else {
        return;
    };
    let ns = unique("real-tight");
    cluster.create_namespace(&ns, &[]).unwrap();
    // The quota, once the controller manager has counted it.
    let quota = |cpu: &str| {
        cluster
            .apply(&format!(
                "apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: small, namespace: {ns}}}\nspec: {{hard: {{requests.cpu: '{cpu}'}}}}\n"
            ))
            .unwrap();
        let args = [
            "get",
            "resourcequota",
            "small",
            "-n",
            &ns,
            "-o",
            "jsonpath={.status.hard}",
        ];
        until_kubectl(cluster, &args, "the quota counted", |out| {
            out.contains(&format!("\"{cpu}\""))
        });
    };
    quota("100m");
    let data = tempfile::tempdir().unwrap();
    let server = follow(&cluster.kubeconfig(), data.path(), &["--execute-tasks"]);
    // The cluster's id is its kube-system namespace's UID: a task for
    // another cluster is refused.
    let uid = super::cluster_uid(cluster);
    let elsewhere = json!({"app": format!("{ns}/api"), "action": "create",
        "params": {"image": "api:1", "cluster_id": "another-cluster"}});
    let (code, body) = server.send("POST", "/v1/tasks", Some(&elsewhere.to_string()));
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("serves cluster `{uid}`")),
        "{body}"
    );
    let body = json!({"app": format!("{ns}/api"), "action": "create", "params": {
        "image": "api:1", "replicas": 2, "license": "TElDRU5TRQ==", "cluster_id": uid,
        "resource_limit": {"cpu": "500m", "memory": "64Mi"}}});
    let failed = run(&server, body.clone());
    assert_eq!(failed["phase"], "failed", "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(message.starts_with("step `deploy` failed"), "{message}");
    assert!(
        message.contains(&format!("ResourceQuota {ns}/small")),
        "{message}"
    );
    assert!(
        message.contains(&format!("made so far: Secret {ns}/api-license")),
        "{message}"
    );

    quota("2");
    let done = run(&server, body);
    assert_eq!(done["phase"], "succeeded", "{done}");

    // An object the API server refuses (a node port another Service holds)
    // fails its step naming the object and the server's reason, and says
    // what was made before it.
    let port = 30000 + std::process::id() % 2700;
    let front = |name: &str| {
        json!({"app": format!("{ns}/{name}"), "action": "create", "params": {
        "image": "front:1", "resource_limit": {"cpu": "10m", "memory": "16Mi"},
        "network_config": {"type": "NodePort", "ports": [{"port": 80, "node_port": port}]}}})
    };
    assert_eq!(run(&server, front("front"))["phase"], "succeeded");
    let refused = run(&server, front("again"));
    assert_eq!(refused["phase"], "failed", "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("step `open-traffic` failed: Service {ns}/again:")),
        "{message}"
    );
    assert!(
        message.contains("provided port is already allocated"),
        "{message}"
    );
    assert!(
        message.contains(&format!("made so far: Deployment {ns}/again")),
        "{message}"
    );
}
