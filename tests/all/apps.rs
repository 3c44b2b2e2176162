//! Seed 000's tasks carried out whole, on the simulator: a create from the
//! seed's Task (snake_case, every field) makes the namespace, Secrets,
//! ConfigMaps, StatefulSet with its claims and Service, step by step; an
//! update rolls it and expands its claims; stop and start keep the claims;
//! a delete takes it back to `not-existed`. Bad fields are refused before
//! anything is made; a quota too small fails the deploy step naming it,
//! and the same create asked again, the quota raised, completes.

use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE, start_host};
use crate::serve::Server;
use crate::support::wait_until;

const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

/// A simulator with a controller, storage classes and `kube-system`.
fn cluster() -> Cluster {
    let cluster = Cluster::start_with(verdict_sim::Options {
        controller: Some(std::time::Duration::from_millis(100)),
        ..verdict_sim::Options::default()
    });
    for (name, expands) in [("fast", true), ("fixed", false)] {
        cluster.apply(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name}, "provisioner": "sim.verdict.dev/volumes",
            "allowVolumeExpansion": expands,
        }));
    }
    cluster.apply(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}),
    );
    cluster
}

fn get(cluster: &Cluster, group: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
    let resource = cluster.sim().store().find(group, "v1", plural).unwrap();
    cluster.sim().store().get(resource, namespace, name).ok()
}

fn list(cluster: &Cluster, plural: &str, namespace: &str) -> Vec<Value> {
    let resource = verdict_sim::resources::find("", "v1", plural).unwrap();
    cluster.sim().store().list(resource, Some(namespace)).0
}

pub fn ask(server: &Server, body: Value) -> (u16, Value) {
    server.send("POST", "/v1/tasks", Some(&body.to_string()))
}

/// Wait until a task finishes; its last state.
pub fn finished(server: &Server, task: &Value) -> Value {
    let id = task["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {task}"));
    let mut last = Value::Null;
    let done = wait_until(PATIENCE * 3, || {
        last = server.get(&format!("/v1/tasks/{id}")).1;
        ["succeeded", "failed", "cancelled"].contains(&last["phase"].as_str().unwrap_or_default())
    });
    assert!(done.is_some(), "task never finished: {last}");
    last
}

/// Ask for a task (admitted), and wait until it finishes; its last state.
pub fn carried_out(server: &Server, body: Value) -> Value {
    let (code, task) = ask(server, body);
    assert_eq!(code, 201, "{task}");
    finished(server, &task)
}

fn run(server: &Server, body: Value) -> Value {
    let done = carried_out(server, body);
    assert_eq!(done["phase"], "succeeded", "{done}");
    done
}

fn seed_create() -> Value {
    json!({"app": "newshop/web", "action": "create", "requested-by": "seed", "params": {
        "namespace": "newshop", "image": "nginx:1.27", "replicas": 2,
        "storage_class_name": "fast", "storage_class_size": "10Gi",
        "labels": {"team": "shop"}, "env": {"MODE": "prod", "GREETING": "hello"},
        "license": "TElDRU5TRS0x",
        "certificate": {"cert": CERT, "key": KEY},
        "log_type": "stdout", "log_config": {"level": "info"},
        "metric_config": {"port": "9090", "path": "/metrics"},
        "resource_limit": {"cpu": "500m", "memory": "256Mi", "requests": {"cpu": "100m", "memory": "128Mi"}},
        "network_config": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "target_port": 8080}]},
        "image_pull_secrets": [{"registry": "registry.example:5000", "username": "puller", "password": "s3cret"}],
    }})
}

#[test]
fn a_create_from_the_seeds_task_makes_the_whole_app_and_a_delete_takes_it_back() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(
        &cluster,
        data.path(),
        // The simulator stands in for the app's health endpoint.
        &[
            "--execute-tasks",
            "--probe-interval-ms",
            "200",
            "--health-url-allow",
            "127.0.0.1",
        ],
    );
    let (code, verdict) = server.get("/v1/apps/newshop/web");
    assert!(
        code == 404 || verdict["stable"] == "not-existed",
        "{code} {verdict}"
    );

    // The app's own health check: the simulator's endpoint for it.
    let mut create = seed_create();
    let health = format!("{}/demo/health/newshop/web", cluster.sim().url());
    create["params"]["health_url"] = json!(health);
    let created = run(&server, create);
    // Kept in the API's spelling.
    assert_eq!(created["params"]["storage-class-size"], "10Gi", "{created}");
    assert!(created["params"].get("storage_class_size").is_none());
    let steps: Vec<(&str, &str)> = created["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["phase"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [
            ("prepare-environment", "succeeded"),
            ("deploy", "succeeded"),
            ("health-check", "succeeded"),
            ("open-traffic", "succeeded")
        ]
    );
    let prepared = created["steps"][0]["message"].as_str().unwrap();
    assert!(
        prepared.contains("Namespace newshop") && prepared.contains("Secret newshop/web-license"),
        "{prepared}"
    );

    let ns = get(&cluster, "", "namespaces", "", "newshop").expect("the namespace is made");
    assert_eq!(ns["metadata"]["labels"]["verdict.dev/made-for"], "web");
    assert_eq!(
        ns["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "verdict"
    );
    let set = get(&cluster, "apps", "statefulsets", "newshop", "web")
        .expect("a StatefulSet, since it keeps data");
    assert_eq!(set["spec"]["replicas"], 2);
    assert_eq!(set["metadata"]["labels"]["team"], "shop");
    assert_eq!(
        set["metadata"]["annotations"]["verdict.dev/health-url"],
        health.as_str()
    );
    let checked = created["steps"][2]["message"].as_str().unwrap();
    assert!(
        checked.ends_with("the app's health check passes"),
        "{checked}"
    );
    let claim = &set["spec"]["volumeClaimTemplates"][0]["spec"];
    assert_eq!(claim["storageClassName"], "fast");
    assert_eq!(claim["resources"]["requests"]["storage"], "10Gi");
    let pod = &set["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "nginx:1.27");
    assert_eq!(
        container["env"],
        json!([{"name": "GREETING", "value": "hello"}, {"name": "MODE", "value": "prod"}])
    );
    assert_eq!(
        container["resources"]["limits"],
        json!({"cpu": "500m", "memory": "256Mi"})
    );
    assert_eq!(
        container["resources"]["requests"],
        json!({"cpu": "100m", "memory": "128Mi"})
    );
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "web-pull-0"}]));
    assert_eq!(
        set["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"],
        "9090"
    );
    let secret = |name: &str| {
        get(&cluster, "", "secrets", "newshop", name).unwrap_or_else(|| panic!("no Secret {name}"))
    };
    assert_eq!(secret("web-license")["data"]["license"], "TElDRU5TRS0x");
    assert_eq!(secret("web-tls")["type"], "kubernetes.io/tls");
    assert_eq!(
        secret("web-pull-0")["type"],
        "kubernetes.io/dockerconfigjson"
    );
    let logging = get(&cluster, "", "configmaps", "newshop", "web-logging").unwrap();
    assert_eq!(logging["data"], json!({"level": "info", "type": "stdout"}));
    let service =
        get(&cluster, "", "services", "newshop", "web").expect("open-traffic made the Service");
    assert_eq!(
        service["spec"]["selector"],
        json!({"app.kubernetes.io/instance": "web"})
    );
    let ports: Vec<&Value> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["port"])
        .collect();
    assert_eq!(ports, [&json!(80), &json!(9090)]);
    assert_eq!(
        list(&cluster, "persistentvolumeclaims", "newshop").len(),
        2,
        "a claim per pod"
    );
    server.app_until("newshop/web", "web running", PATIENCE, |v| {
        v["stable"] == "running"
    });

    // An update of image and env rolls it; a larger size expands the claims.
    run(
        &server,
        json!({"app": "newshop/web", "action": "update",
        "params": {"image": "nginx:1.28", "env": {"MODE": "canary"}, "storage_class_size": "20Gi"}}),
    );
    let set = get(&cluster, "apps", "statefulsets", "newshop", "web").unwrap();
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.28");
    assert_eq!(
        container["env"],
        json!([{"name": "MODE", "value": "canary"}])
    );
    assert_eq!(
        container["resources"]["limits"]["cpu"], "500m",
        "what the update does not give is kept"
    );
    assert_eq!(
        set["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"], "20Gi",
        "the StatefulSet is made again with the new size: replicas added later claim it"
    );
    let pods = list(&cluster, "pods", "newshop");
    assert!(
        pods.iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.28"),
        "every pod rolled"
    );
    for claim in list(&cluster, "persistentvolumeclaims", "newshop") {
        assert_eq!(
            claim["spec"]["resources"]["requests"]["storage"], "20Gi",
            "{claim}"
        );
    }

    // A replica added after the expansion claims the new size too.
    run(
        &server,
        json!({"app": "newshop/web", "action": "scale", "params": {"replicas": 3}}),
    );
    let claims = list(&cluster, "persistentvolumeclaims", "newshop");
    assert_eq!(claims.len(), 3);
    for claim in &claims {
        assert_eq!(
            claim["spec"]["resources"]["requests"]["storage"], "20Gi",
            "{claim}"
        );
    }

    // Stop and start keep the claims.
    run(&server, json!({"app": "newshop/web", "action": "stop"}));
    assert_eq!(list(&cluster, "persistentvolumeclaims", "newshop").len(), 3);
    run(&server, json!({"app": "newshop/web", "action": "start"}));
    assert_eq!(list(&cluster, "persistentvolumeclaims", "newshop").len(), 3);

    // Delete: everything made goes, the namespace with it — after what is
    // still being deleted there. A claim held by a finalizer (as the API
    // server's pvc-protection holds one while a pod uses it) is waited
    // for, not taken for something else the namespace holds.
    let claims = cluster
        .sim()
        .store()
        .find("", "v1", "persistentvolumeclaims")
        .unwrap();
    let held = list(&cluster, "persistentvolumeclaims", "newshop")[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let hold = |finalizers: Value| {
        cluster
            .sim()
            .store()
            .patch(
                claims,
                "newshop",
                &held,
                &json!({"metadata": {"finalizers": finalizers}}),
            )
            .unwrap();
    };
    hold(json!(["example.com/hold"]));
    let (code, task) = ask(
        &server,
        json!({"app": "newshop/web", "action": "delete", "params": {"delete_storage": true}}),
    );
    assert_eq!(code, 201, "{task}");
    let id = task["id"].as_str().unwrap();
    let mut seen = Value::Null;
    let waiting = wait_until(PATIENCE, || {
        seen = server.get(&format!("/v1/tasks/{id}")).1;
        seen["message"]
            .as_str()
            .is_some_and(|m| m.contains("waiting for 1 object of namespace newshop being deleted"))
    });
    assert!(
        waiting.is_some(),
        "the delete never said what it waits for: {seen}"
    );
    assert_eq!(seen["phase"], "running", "{seen}");
    assert!(
        get(&cluster, "", "namespaces", "", "newshop").is_some(),
        "the namespace is kept while the claim is going"
    );
    hold(Value::Null);
    let deleted = finished(&server, &task);
    assert_eq!(deleted["phase"], "succeeded", "{deleted}");
    assert!(
        deleted["message"]
            .as_str()
            .unwrap()
            .contains("namespace newshop deleted"),
        "{deleted}"
    );
    assert!(get(&cluster, "", "namespaces", "", "newshop").is_none());
    server.app_until("newshop/web", "web not-existed", PATIENCE, |v| {
        v["stable"] == "not-existed"
    });
}

#[test]
fn bad_fields_are_refused_naming_them_before_anything_is_made() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(
        &cluster,
        data.path(),
        &["--execute-tasks", "--cluster-id", "east-1"],
    );
    let with = |params: Value| {
        let mut body = seed_create();
        for (k, v) in params.as_object().unwrap() {
            body["params"][k] = v.clone();
        }
        body
    };
    let cases = [
        (
            json!({"storage_class_size": "10Gx"}),
            "params.storage-class-size",
        ),
        (
            json!({"storage_class_name": "nope"}),
            "params.storage-class-name",
        ),
        (
            json!({"image_pull_secrets": [{"username": "u", "password": "p"}]}),
            "params.image-pull-secrets[0].registry",
        ),
        (json!({"env": {"BAD NAME": "x"}}), "params.env.BAD NAME"),
        (json!({"cluster_id": "west-2"}), "params.cluster-id"),
        (
            json!({"resource_limit": {"cpu": "lots"}}),
            "params.resource-limit.limits.cpu",
        ),
        (
            json!({"certificate": {"issuer": "letsencrypt"}}),
            "params.certificate.issuer",
        ),
        // A typo is named, never dropped: an app without storage would be
        // made otherwise.
        (
            json!({"storage_clas_size": "10Gi"}),
            "params.storage_clas_size",
        ),
        (json!({"hostNetwork": true}), "params.hostNetwork"),
        (
            json!({"labels": {"kubernetes.io/hostname": "n1"}}),
            "params.labels.kubernetes.io/hostname",
        ),
        (
            json!({"health_url": "http://169.254.169.254/latest/meta-data/"}),
            "params.health-url",
        ),
        (
            json!({"image_pull_secrets": [{"registry": "r.example", "auth": "bm9jb2xvbg=="}]}),
            "params.image-pull-secrets[0].auth",
        ),
    ];
    for (params, field) in cases {
        let (code, body) = ask(&server, with(params.clone()));
        assert_eq!(code, 422, "{params}: {body}");
        assert_eq!(body["error"]["field"], field, "{params}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{body}"
        );
    }
    let mut long = seed_create();
    long["app"] = json!(format!("{}/web", "n".repeat(64)));
    long["params"]["namespace"] = long["app"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .into();
    let (code, body) = ask(&server, long);
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["error"]["field"], "app", "{body}");
    assert!(
        get(&cluster, "", "namespaces", "", "newshop").is_none(),
        "nothing was made"
    );
    let (_, tasks) = server.get("/v1/tasks?app=newshop/web");
    assert_eq!(tasks["tasks"], json!([]), "nothing was kept");

    // The cluster's own id is taken.
    let (code, task) = ask(&server, with(json!({"cluster_id": "east-1"})));
    assert_eq!(code, 201, "{task}");
    assert_eq!(finished(&server, &task)["phase"], "succeeded");
    // A class that does not expand is named when an update grows a claim.
    let (code, body) = ask(
        &server,
        json!({"app": "newshop/web", "action": "update", "params": {"storage-class-size": "5Gi"}}),
    );
    assert_eq!(
        (code, body["error"]["field"].as_str()),
        (422, Some("params.storage-class-size")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shrink"),
        "{body}"
    );
    let fixed = json!({"app": "newshop/db", "action": "create",
        "params": {"image": "db:1", "storage-class-name": "fixed", "storage-class-size": "1Gi"}});
    let (code, task) = ask(&server, fixed);
    assert_eq!(code, 201, "{task}");
    assert_eq!(finished(&server, &task)["phase"], "succeeded");
    let (code, body) = ask(
        &server,
        json!({"app": "newshop/db", "action": "update", "params": {"storage-class-size": "2Gi"}}),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("StorageClass `fixed` does not allow volume expansion"),
        "{body}"
    );

    // An app verdict did not make keeps no record of what it was made from:
    // an update of more than its image and replicas is refused, naming the
    // workload and how to hand it over, and changes nothing.
    let (code, refused) = ask(
        &server,
        json!({"app": "shop/web", "action": "update", "params": {"image": "web:2", "env": {"A": "1"}}}),
    );
    assert_eq!(
        (code, refused["error"]["code"].as_str()),
        (409, Some("not-verdicts")),
        "{refused}"
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Deployment shop/web was not made by verdict")
            && message.contains("adopt"),
        "{message}"
    );
    let web = get(&cluster, "apps", "deployments", "shop", "web").unwrap();
    assert!(web["spec"].get("template").is_none(), "unchanged: {web}");

    // A workload whose template has no container: its image update fails,
    // saying so.
    cluster.apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "empty", "namespace": "shop", "labels": {"app.kubernetes.io/instance": "empty"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/instance": "empty"}},
                 "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "empty"}}, "spec": {"containers": []}}}}));
    server.app_until("shop/empty", "the empty app observed", PATIENCE, |v| {
        v["stable"].is_string()
    });
    let (code, task) = ask(
        &server,
        json!({"app": "shop/empty", "action": "update", "params": {"image": "web:2"}}),
    );
    assert_eq!(code, 201, "{task}");
    let failed = finished(&server, &task);
    assert_eq!(failed["phase"], "failed", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("Deployment shop/empty has no container to set the image of"),
        "{failed}"
    );
    // No app is made in a protected namespace.
    let (code, refused) = ask(
        &server,
        json!({"app": "kube-system/web", "action": "create", "params": {"image": "web:1"}}),
    );
    assert_eq!(
        (code, refused["error"]["code"].as_str()),
        (403, Some("protected-namespace")),
        "{refused}"
    );
}

#[test]
fn a_quota_too_small_fails_the_deploy_naming_it_and_a_retry_completes() {
    let cluster = cluster();
    cluster.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tight"}}));
    let quota = |cpu: &str| {
        json!({
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "small", "namespace": "tight"},
            "spec": {"hard": {"requests.cpu": cpu}}, "status": {"hard": {"requests.cpu": cpu}, "used": {"requests.cpu": "0"}},
        })
    };
    cluster.apply(quota("100m"));
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--execute-tasks"]);
    let body = json!({"app": "tight/api", "action": "create", "params": {
        "image": "api:1", "replicas": 2, "license": "TElDRU5TRQ==",
        "resource_limit": {"cpu": "500m", "memory": "64Mi"}}});
    let (code, task) = ask(&server, body.clone());
    assert_eq!(code, 201, "{task}");
    let failed = finished(&server, &task);
    assert_eq!(failed["phase"], "failed", "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(message.starts_with("step `deploy` failed"), "{message}");
    assert!(message.contains("ResourceQuota tight/small"), "{message}");
    assert!(
        message.contains("made so far: Secret tight/api-license"),
        "{message}"
    );
    assert!(
        get(&cluster, "apps", "deployments", "tight", "api").is_none(),
        "no workload left"
    );

    cluster.apply(quota("2"));
    let done = run(&server, body);
    assert_eq!(done["progress"], 100);
    assert!(get(&cluster, "apps", "deployments", "tight", "api").is_some());
    // The namespace was there before: a delete leaves it.
    let deleted = run(&server, json!({"app": "tight/api", "action": "delete"}));
    assert!(
        get(&cluster, "", "namespaces", "", "tight").is_some(),
        "{deleted}"
    );
    assert!(
        get(&cluster, "", "secrets", "tight", "api-license").is_none(),
        "what was made is gone"
    );
    server.app_until("tight/api", "api stopped", PATIENCE, |v| {
        v["stable"] == "stopped"
    });
}

/// A definition the simulator serves from then on, as an API server does.
fn define(cluster: &Cluster, group: &str, kind: &str, plural: &str) {
    cluster.apply(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }));
}

#[test]
fn where_cert_manager_and_the_prometheus_operator_are_served_their_kinds_are_made() {
    let cluster = cluster();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--execute-tasks"]);
    let body = json!({"app": "newshop/web", "action": "create", "params": {
        "image": "web:1", "certificate": {"issuer": "ca", "issuer_kind": "ClusterIssuer", "dns_names": ["web.example"]},
        "metric_config": {"port": "9090", "path": "/metrics", "interval": "30s"}}});
    // Not served: issuance is refused, naming the field.
    let (code, refused) = ask(&server, body.clone());
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["error"]["field"], "params.certificate.issuer",
        "{refused}"
    );

    define(&cluster, "cert-manager.io", "Certificate", "certificates");
    define(
        &cluster,
        "monitoring.coreos.com",
        "ServiceMonitor",
        "servicemonitors",
    );
    let mut done = Value::Null;
    let served = wait_until(PATIENCE, || {
        let (code, task) = ask(&server, body.clone());
        if code != 201 {
            return false;
        }
        done = finished(&server, &task);
        true
    });
    assert!(served.is_some(), "the definitions were never served");
    assert_eq!(done["phase"], "succeeded", "{done}");
    let certificate = get(
        &cluster,
        "cert-manager.io",
        "certificates",
        "newshop",
        "web",
    )
    .expect("a Certificate");
    assert_eq!(certificate["spec"]["secretName"], "web-tls");
    assert_eq!(
        certificate["spec"]["issuerRef"],
        json!({"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    );
    assert_eq!(certificate["spec"]["dnsNames"], json!(["web.example"]));
    let monitor = get(
        &cluster,
        "monitoring.coreos.com",
        "servicemonitors",
        "newshop",
        "web",
    )
    .expect("a ServiceMonitor");
    assert_eq!(
        monitor["spec"]["endpoints"],
        json!([{"port": "metrics", "path": "/metrics", "interval": "30s"}])
    );
    let service =
        get(&cluster, "", "services", "newshop", "web").expect("the Service its monitor selects");
    assert_eq!(service["spec"]["ports"][0]["name"], "metrics");

    // A delete takes them too.
    run(&server, json!({"app": "newshop/web", "action": "delete"}));
    assert!(
        get(
            &cluster,
            "cert-manager.io",
            "certificates",
            "newshop",
            "web"
        )
        .is_none()
    );
    assert!(
        get(
            &cluster,
            "monitoring.coreos.com",
            "servicemonitors",
            "newshop",
            "web"
        )
        .is_none()
    );
}
