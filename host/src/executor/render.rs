//! A whole application rendered from what a task asks for ([`AppSpec`]):
//! its namespace, Secrets (license, certificate, image pull credentials),
//! ConfigMaps (logging, metrics), workload (a Deployment, or a StatefulSet
//! with a volume claim template when it keeps data), Service, and — where
//! their kinds are served — cert-manager's `Certificate` and the
//! Prometheus operator's `ServiceMonitor`. Every object carries the app's
//! label and `app.kubernetes.io/managed-by: verdict`, so that a delete
//! finds what was made.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kube::core::ApiResource;
use serde_json::{Map, Value, json};

use crate::tasks::spec::{AppSpec, INSTANCE, MANAGED_BY};
pub(crate) use crate::tasks::spec::{MADE_FOR, SPEC};

/// Where the pod sees its license, logging and metrics configuration.
const LICENSE_PATH: &str = "/etc/verdict/license";
const TLS_PATH: &str = "/etc/verdict/tls";
const LOGGING_PATH: &str = "/etc/verdict/logging";
const METRICS_PATH: &str = "/etc/verdict/metrics";
/// Where a StatefulSet's claim is mounted.
pub(crate) const DATA_PATH: &str = "/data";

/// cert-manager's `Certificate` and the Prometheus operator's
/// `ServiceMonitor`, when the cluster serves them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Served {
    pub certificate: Option<ApiResource>,
    pub service_monitor: Option<ApiResource>,
}

/// One object to apply: its kind's API resource and its body.
#[derive(Debug, Clone)]
pub(crate) struct Object {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub body: Value,
}

impl Object {
    fn of<K>(body: Value) -> Self
    where
        K: kube::Resource<DynamicType = ()>,
    {
        Self {
            resource: ApiResource::erase::<K>(&()),
            namespaced: body.pointer("/metadata/namespace").is_some(),
            body,
        }
    }

    pub fn name(&self) -> &str {
        self.body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.body
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }

    /// `Kind namespace/name`, as a person reads it.
    pub fn what(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{} {ns}/{}", self.resource.kind, self.name()),
            None => format!("{} {}", self.resource.kind, self.name()),
        }
    }
}

/// An application's objects, in the order the task's steps make them.
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    /// The namespace, as made when missing.
    pub namespace: Object,
    /// Secrets and ConfigMaps (and a `Certificate`), before the workload.
    pub environment: Vec<Object>,
    pub workload: Object,
    /// The Service (and a `ServiceMonitor`), once the app is healthy.
    pub traffic: Vec<Object>,
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The labels every object made for the app carries.
pub(crate) fn made_labels(name: &str) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert(INSTANCE.into(), json!(name));
    labels.insert(MANAGED_BY.into(), json!("verdict"));
    labels
}

/// The selector of what verdict made for an app.
pub(crate) fn made_selector(name: &str) -> String {
    format!("{INSTANCE}={name},{MANAGED_BY}=verdict")
}

fn meta(namespace: &str, name: &str, app: &str) -> Value {
    json!({"name": name, "namespace": namespace, "labels": made_labels(app)})
}

/// The name of the app's `i`th image pull Secret.
fn pull_secret_name(app: &str, i: usize, given: Option<&String>) -> String {
    given.cloned().unwrap_or_else(|| format!("{app}-pull-{i}"))
}

/// Render the app `namespace/name` from its spec. `replicas` is how many
/// it should run (the task's, else what it runs now); `claims`, the volume
/// claim templates of its StatefulSet when it exists (they cannot change).
pub(crate) fn render(
    (namespace, name): (&str, &str),
    spec: &AppSpec,
    replicas: u32,
    claims: Option<Value>,
    served: &Served,
) -> Result<Rendered, String> {
    let image = spec
        .image
        .as_deref()
        .ok_or("params.image is required to make the app")?;
    let mut ns_labels = made_labels(name);
    ns_labels.remove(INSTANCE);
    ns_labels.insert(MADE_FOR.into(), json!(name));
    let namespace_object = Object::of::<Namespace>(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "labels": ns_labels},
    }));
    let mut environment = Vec::new();
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    let mut mount = |volume: &str, source: Value, path: &str| {
        let mut v = json!({"name": volume});
        if let (Value::Object(v), Value::Object(source)) = (&mut v, source) {
            v.extend(source);
        }
        volumes.push(v);
        mounts.push(json!({"name": volume, "mountPath": path, "readOnly": true}));
    };
    if let Some(license) = &spec.license {
        let secret = format!("{name}-license");
        // One without its material is kept in its Secret already (an
        // update).
        if let Some(license) = license.material() {
            environment.push(Object::of::<Secret>(json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": meta(namespace, &secret, name),
                "type": "Opaque", "data": {"license": license},
            })));
        }
        mount(
            "license",
            json!({"secret": {"secretName": secret}}),
            LICENSE_PATH,
        );
    }
    if let Some(certificate) = &spec.certificate {
        let secret = format!("{name}-tls");
        match (&certificate.issuer, &certificate.cert, &certificate.key) {
            (Some(issuer), _, _) => {
                let resource = served.certificate.clone().ok_or_else(|| {
                    "params.certificate.issuer: cert-manager's Certificate (cert-manager.io/v1) is not served by this cluster".to_string()
                })?;
                let dns_names = if certificate.dns_names.is_empty() {
                    vec![format!("{name}.{namespace}.svc")]
                } else {
                    certificate.dns_names.clone()
                };
                environment.push(Object {
                    resource,
                    namespaced: true,
                    body: json!({
                        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                        "metadata": meta(namespace, name, name),
                        "spec": {
                            "secretName": secret, "dnsNames": dns_names,
                            "issuerRef": {"name": issuer, "kind": certificate.issuer_kind.as_deref().unwrap_or("Issuer"), "group": "cert-manager.io"},
                        },
                    }),
                });
            }
            (None, Some(cert), Some(key)) if !cert.is_empty() && key.material().is_some() => {
                let key = key.material().unwrap_or_default();
                let mut data = json!({"tls.crt": b64(cert), "tls.key": b64(key)});
                if let Some(ca) = certificate.ca.as_ref().filter(|ca| !ca.is_empty()) {
                    data["ca.crt"] = json!(b64(ca));
                }
                environment.push(Object::of::<Secret>(json!({
                    "apiVersion": "v1", "kind": "Secret", "metadata": meta(namespace, &secret, name),
                    "type": "kubernetes.io/tls", "data": data,
                })));
            }
            // Kept in its Secret already (an update).
            _ => {}
        }
        let path = certificate.mount_path.as_deref().unwrap_or(TLS_PATH);
        mount("tls", json!({"secret": {"secretName": secret}}), path);
    }
    let mut pull_secrets = Vec::new();
    for (i, pull) in spec.image_pull_secrets.iter().enumerate() {
        let secret = pull_secret_name(name, i, pull.name.as_ref());
        let password = pull.password.as_ref().and_then(|p| p.material());
        let auth = pull.auth.as_ref().and_then(|a| a.material());
        if pull.has_credentials() && (password.is_some() || auth.is_some()) {
            let registry = pull.registry.clone().unwrap_or_default();
            let auth = auth.map(String::from).unwrap_or_else(|| {
                b64(format!(
                    "{}:{}",
                    pull.username.as_deref().unwrap_or_default(),
                    password.unwrap_or_default()
                ))
            });
            let mut entry = json!({"auth": auth});
            for (key, value) in [
                ("username", &pull.username),
                ("password", &password.map(String::from)),
                ("email", &pull.email),
            ] {
                if let Some(value) = value {
                    entry[key] = json!(value);
                }
            }
            let config = json!({"auths": {registry: entry}}).to_string();
            environment.push(Object::of::<Secret>(json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": meta(namespace, &secret, name),
                "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64(config)},
            })));
        }
        pull_secrets.push(json!({"name": secret}));
    }
    let mut pod_annotations = Map::new();
    if spec.log_type.is_some() || !spec.log_config.is_empty() {
        let mut data: BTreeMap<String, String> = spec.log_config.clone();
        if let Some(log_type) = &spec.log_type {
            data.insert("type".into(), log_type.clone());
            pod_annotations.insert("verdict.dev/log-type".into(), json!(log_type));
        }
        let map = format!("{name}-logging");
        environment.push(Object::of::<ConfigMap>(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(namespace, &map, name), "data": data,
        })));
        mount("logging", json!({"configMap": {"name": map}}), LOGGING_PATH);
    }
    let metrics_port = spec
        .metric_config
        .get("port")
        .and_then(|p| p.parse::<u32>().ok());
    if !spec.metric_config.is_empty() {
        let map = format!("{name}-metrics");
        environment.push(Object::of::<ConfigMap>(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(namespace, &map, name),
            "data": spec.metric_config,
        })));
        mount("metrics", json!({"configMap": {"name": map}}), METRICS_PATH);
    }
    let metrics_path = spec
        .metric_config
        .get("path")
        .cloned()
        .unwrap_or_else(|| "/metrics".into());
    if let Some(port) = metrics_port {
        pod_annotations.insert("prometheus.io/scrape".into(), json!("true"));
        pod_annotations.insert("prometheus.io/port".into(), json!(port.to_string()));
        pod_annotations.insert("prometheus.io/path".into(), json!(metrics_path));
        if let Some(scheme) = spec.metric_config.get("scheme") {
            pod_annotations.insert("prometheus.io/scheme".into(), json!(scheme));
        }
    }

    // The container.
    let env: Vec<Value> = spec
        .env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    let mut resources = json!({});
    if let Some(limit) = &spec.resource_limit {
        for (part, given) in [("limits", limit.limits()), ("requests", limit.requests())] {
            for (resource, value) in [("cpu", given.cpu), ("memory", given.memory)] {
                if let Some(value) = value {
                    resources[part][resource] = json!(value);
                }
            }
        }
    }
    let network = spec.network_config.clone().unwrap_or_default();
    let mut container_ports = Vec::new();
    let mut service_ports = Vec::new();
    for port in network.all_ports() {
        let target = port.target_port.unwrap_or(port.port);
        let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".into());
        let mut container_port = json!({"containerPort": target, "protocol": protocol});
        let mut service_port =
            json!({"port": port.port, "targetPort": target, "protocol": protocol});
        if let Some(port_name) = &port.name {
            container_port["name"] = json!(port_name);
            service_port["name"] = json!(port_name);
        }
        if let Some(node_port) = port.node_port {
            service_port["nodePort"] = json!(node_port);
        }
        if !container_ports.iter().any(|p: &Value| {
            p["containerPort"] == container_port["containerPort"]
                && p["protocol"] == container_port["protocol"]
        }) {
            container_ports.push(container_port);
        }
        service_ports.push(service_port);
    }
    if let Some(port) = metrics_port {
        if !container_ports
            .iter()
            .any(|p| p["containerPort"] == json!(port))
        {
            container_ports
                .push(json!({"name": "metrics", "containerPort": port, "protocol": "TCP"}));
        }
        if !service_ports.iter().any(|p| p["name"] == "metrics") {
            // A Service of several ports names each.
            if service_ports.len() == 1 && service_ports[0].get("name").is_none() {
                service_ports[0]["name"] = json!("app");
            }
            service_ports.push(
                json!({"name": "metrics", "port": port, "targetPort": port, "protocol": "TCP"}),
            );
        }
    }
    let mut container = json!({"name": name, "image": image});
    if !env.is_empty() {
        container["env"] = json!(env);
    }
    if resources != json!({}) {
        container["resources"] = resources;
    }
    if !container_ports.is_empty() {
        container["ports"] = json!(container_ports);
    }
    if spec.has_storage() {
        mounts.push(json!({"name": "data", "mountPath": DATA_PATH}));
    }
    if !mounts.is_empty() {
        container["volumeMounts"] = json!(mounts);
    }
    let mut pod_spec = json!({"containers": [container]});
    if !volumes.is_empty() {
        pod_spec["volumes"] = json!(volumes);
    }
    if !pull_secrets.is_empty() {
        pod_spec["imagePullSecrets"] = json!(pull_secrets);
    }
    let mut pod_labels = made_labels(name);
    pod_labels.remove(MANAGED_BY);
    for (k, v) in &spec.labels {
        pod_labels.insert(k.clone(), json!(v));
    }
    let mut template = json!({"metadata": {"labels": pod_labels}, "spec": pod_spec});
    if !pod_annotations.is_empty() {
        template["metadata"]["annotations"] = Value::Object(pod_annotations);
    }
    let mut labels = made_labels(name);
    for (k, v) in &spec.labels {
        labels.insert(k.clone(), json!(v));
    }
    let kept = serde_json::to_string(&spec.redacted()).map_err(|e| e.to_string())?;
    let mut annotations = json!({SPEC: kept});
    if let Some(url) = &spec.health_url {
        annotations[crate::observe::probe::ANNOTATION] = json!(url);
    }
    let selector = json!({"matchLabels": {INSTANCE: name}});
    let workload = if spec.has_storage() {
        let claims = claims.unwrap_or_else(|| {
            let mut claim_spec = json!({
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": spec.storage_class_size}},
            });
            if let Some(class) = &spec.storage_class_name {
                claim_spec["storageClassName"] = json!(class);
            }
            json!([{"metadata": {"name": "data", "labels": made_labels(name)}, "spec": claim_spec}])
        });
        Object::of::<StatefulSet>(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": {
                "replicas": replicas, "serviceName": name, "selector": selector,
                "template": template, "volumeClaimTemplates": claims,
            },
        }))
    } else {
        Object::of::<Deployment>(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }))
    };
    let mut traffic = Vec::new();
    if !service_ports.is_empty() {
        traffic.push(Object::of::<Service>(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": meta(namespace, name, name),
            "spec": {
                "type": network.kind.as_deref().unwrap_or("ClusterIP"),
                "selector": {INSTANCE: name}, "ports": service_ports,
            },
        })));
    }
    if let (Some(_), Some(resource)) = (metrics_port, &served.service_monitor) {
        let mut endpoint = json!({"port": "metrics", "path": metrics_path});
        if let Some(interval) = spec.metric_config.get("interval") {
            endpoint["interval"] = json!(interval);
        }
        if let Some(scheme) = spec.metric_config.get("scheme") {
            endpoint["scheme"] = json!(scheme);
        }
        traffic.push(Object {
            resource: resource.clone(),
            namespaced: true,
            body: json!({
                "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": meta(namespace, name, name),
                "spec": {"selector": {"matchLabels": made_labels(name)}, "endpoints": [endpoint]},
            }),
        });
    }
    Ok(Rendered {
        namespace: namespace_object,
        environment,
        workload,
        traffic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::spec::normalize;

    fn spec(params: Value) -> AppSpec {
        let Value::Object(mut params) = params else {
            unreachable!()
        };
        normalize(&mut params).unwrap();
        let spec = AppSpec::of(&params).unwrap();
        spec.check("newshop").unwrap();
        spec
    }

    fn typed<K: serde::de::DeserializeOwned>(object: &Object) -> K {
        serde_json::from_value(object.body.clone()).unwrap_or_else(|e| {
            panic!(
                "{} is not a {}: {e}",
                object.what(),
                std::any::type_name::<K>()
            )
        })
    }

    #[test]
    fn the_seeds_task_renders_every_object() {
        let spec = spec(json!({
            "image": "nginx:1.27", "replicas": 2, "storage_class_name": "fast", "storage_class_size": "10Gi",
            "labels": {"team": "shop"}, "env": {"MODE": "prod"}, "license": "TElDRU5TRQ==",
            "certificate": {"cert": "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----",
                            "key": "-----BEGIN PRIVATE KEY-----\nB\n-----END PRIVATE KEY-----"},
            "log_type": "stdout", "log_config": {"level": "info"},
            "metric_config": {"port": "9090"},
            "resource_limit": {"cpu": "500m", "memory": "512Mi"},
            "network_config": {"type": "NodePort", "port": 80},
            "image_pull_secrets": [{"registry": "r.example", "username": "u", "password": "p"}],
            "health_url": "http://web.newshop:8080/healthz",
        }));
        let rendered = render(("newshop", "web"), &spec, 2, None, &Served::default()).unwrap();
        let set: StatefulSet = typed(&rendered.workload);
        let set_spec = set.spec.unwrap();
        assert_eq!(set_spec.replicas, Some(2));
        let claim = &set_spec.volume_claim_templates.unwrap()[0];
        let claim_spec = claim.spec.as_ref().unwrap();
        assert_eq!(claim_spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            claim_spec
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["storage"]
                .0,
            "10Gi"
        );
        let pod = set_spec.template.spec.unwrap();
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("nginx:1.27"));
        assert_eq!(container.env.as_ref().unwrap()[0].name, "MODE");
        assert_eq!(
            container
                .resources
                .as_ref()
                .unwrap()
                .limits
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "500m"
        );
        let mounts: Vec<&str> = container
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(
            mounts,
            [
                LICENSE_PATH,
                TLS_PATH,
                LOGGING_PATH,
                METRICS_PATH,
                DATA_PATH
            ]
        );
        assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "web-pull-0");
        let labels = set_spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(labels["team"], "shop");
        let annotations = set.metadata.annotations.unwrap();
        assert_eq!(
            annotations["verdict.dev/health-url"],
            "http://web.newshop:8080/healthz"
        );
        assert!(
            !annotations[SPEC].contains("TElDRU5TRQ"),
            "the kept spec has no license"
        );
        let made: Vec<String> = rendered.environment.iter().map(Object::what).collect();
        assert_eq!(
            made,
            [
                "Secret newshop/web-license",
                "Secret newshop/web-tls",
                "Secret newshop/web-pull-0",
                "ConfigMap newshop/web-logging",
                "ConfigMap newshop/web-metrics"
            ]
        );
        let tls: Secret = typed(&rendered.environment[1]);
        assert_eq!(tls.type_.as_deref(), Some("kubernetes.io/tls"));
        let pull: Secret = typed(&rendered.environment[2]);
        let config = String::from_utf8(pull.data.unwrap()[".dockerconfigjson"].0.clone()).unwrap();
        assert!(config.contains("r.example"), "{config}");
        let service: Service = typed(&rendered.traffic[0]);
        let service_spec = service.spec.unwrap();
        assert_eq!(service_spec.type_.as_deref(), Some("NodePort"));
        let ports: Vec<i32> = service_spec.ports.unwrap().iter().map(|p| p.port).collect();
        assert_eq!(ports, [80, 9090], "the app's port and the metrics port");
        let ns: Namespace = typed(&rendered.namespace);
        assert_eq!(ns.metadata.labels.unwrap()[MADE_FOR], "web");
    }

    #[test]
    fn without_storage_it_is_a_deployment_and_kept_secrets_are_not_rendered_again() {
        let full = spec(json!({"image": "a:1", "license": "TElDRU5TRQ=="}));
        let kept = full.redacted();
        let rendered = render(("newshop", "web"), &kept, 1, None, &Served::default()).unwrap();
        let _: Deployment = typed(&rendered.workload);
        assert!(
            rendered.environment.is_empty(),
            "the license is in its Secret already"
        );
        assert!(
            rendered.workload.body.to_string().contains("web-license"),
            "and still mounted"
        );
        assert!(rendered.traffic.is_empty(), "no network config, no Service");
    }

    #[test]
    fn issuance_needs_cert_manager() {
        let spec = spec(json!({"image": "a:1", "certificate": {"issuer": "letsencrypt"}}));
        let refused = render(("newshop", "web"), &spec, 1, None, &Served::default()).unwrap_err();
        assert!(refused.contains("cert-manager"), "{refused}");
    }
}
