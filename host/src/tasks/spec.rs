//! What a task that makes or changes a whole application asks for: seed
//! 000's `Task` (namespace, cluster, image, replicas, storage, labels, env,
//! license, certificate, logging, metrics, resource limits, network, image
//! pull secrets) and the app's own health check, read from a task's
//! `params` under the API's kebab-case names and the seed's snake_case
//! names alike, and checked field by field before anything is made.
//!
//! A request's params are written in one spelling ([`normalize`]): the
//! record, the policies and the executor see kebab-case only.

use std::collections::BTreeMap;

use base64::Engine;
use kube_quantity::ParsedQuantity;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::model::Refusal;
use super::sealed::{self, Sealed, SealedFields, SealedRef};

/// The fields of seed 000's `Task` (and verdict's own) that `params` may
/// carry, in the API's spelling.
pub const FIELDS: &[&str] = &[
    "namespace",
    "cluster-id",
    "image",
    "replicas",
    "storage-class-name",
    "storage-class-size",
    "labels",
    "env",
    "license",
    "certificate",
    "log-type",
    "log-config",
    "metric-config",
    "resource-limit",
    "network-config",
    "image-pull-secrets",
    "health-url",
    "delete-storage",
];

/// The parameters of other actions: the instance a migrate moves, the
/// pods or instance failover's own tasks move.
pub const OTHER_PARAMS: &[&str] = &["instance", "failover"];

/// Refuse a parameter no action reads, naming it and the nearest known
/// name (a typo such as `storage_clas_size` would otherwise make an app
/// without what it asked). Parameters for policies alone begin with `x-`.
pub fn known_params(params: &Map<String, Value>) -> Result<(), Refusal> {
    for key in params.keys() {
        if key.starts_with("x-")
            || FIELDS.contains(&key.as_str())
            || OTHER_PARAMS.contains(&key.as_str())
        {
            continue;
        }
        let kebab_key = kebab(key);
        let nearest = FIELDS
            .iter()
            .chain(OTHER_PARAMS)
            .min_by_key(|known| distance(&kebab_key, known))
            .filter(|known| distance(&kebab_key, known) <= known.len() / 3 + 1);
        let hint = match nearest {
            Some(known) => format!("; did you mean `{known}`?"),
            None => String::new(),
        };
        return Err(invalid(
            format!("params.{key}"),
            format!(
                "is not a parameter of any action{hint} (parameters only for policies begin with `x-`)"
            ),
        ));
    }
    Ok(())
}

/// The edit distance of two names (Levenshtein).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            let next = (row[j + 1] + 1).min(row[j] + 1).min(previous + cost);
            previous = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Label prefixes kept for Kubernetes and verdict (and their subdomains).
pub const RESERVED_PREFIXES: &[&str] = &["kubernetes.io", "k8s.io", "verdict.dev"];

/// The label on everything verdict makes for an app (`verdict`).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The label that names the app an object belongs to.
pub const INSTANCE: &str = "app.kubernetes.io/instance";

/// The annotation of an app's workload that keeps what it was made from
/// (without secret material), so that an update changes only what it
/// gives.
pub const SPEC: &str = "verdict.dev/app-spec";
/// The label of a namespace verdict made, naming the app it made it for.
pub const MADE_FOR: &str = "verdict.dev/made-for";

/// The most replicas a task may ask for (a policy may ask for fewer).
pub const MAX_REPLICAS: u32 = 10_000;
/// The most image pull secrets.
pub const MAX_PULL_SECRETS: usize = 16;
/// The most ports of the app's Service.
pub const MAX_PORTS: usize = 32;
/// The most entries of each map (labels, env, log and metric config).
pub const MAX_ENTRIES: usize = 256;

/// An application as a task describes it. Each field is optional: a
/// create gives what it needs, an update what it changes.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, rename_all = "kebab-case")]
pub struct AppSpec {
    /// The app's namespace: made when missing. When given, the same as the
    /// namespace of `app`.
    #[schema(max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    pub namespace: Option<String>,
    /// The cluster the task is for (seed 000's `cluster_id`); a host
    /// refuses a task for another cluster than its own.
    #[schema(max_length = 253)]
    pub cluster_id: Option<String>,
    /// The container image.
    #[schema(min_length = 1, max_length = 1024, example = "nginx:1.27")]
    pub image: Option<String>,
    #[schema(maximum = 10000)]
    pub replicas: Option<u32>,
    /// With storage the app is a StatefulSet with a volume claim template
    /// of this class and size (mounted at `/data`); without, a Deployment.
    #[schema(max_length = 253, example = "fast")]
    pub storage_class_name: Option<String>,
    /// A Kubernetes quantity (`10Gi`). A larger size on update expands the
    /// claims where the class allows it.
    #[schema(max_length = 64, example = "10Gi")]
    pub storage_class_size: Option<String>,
    /// Labels of the workload and its pods (at most 256, as every map).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Environment variables of the app's container.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The license file, base64 (seed 000's `[]byte`): a Secret mounted at
    /// `/etc/verdict/license`. Secret material: shown everywhere else in
    /// its redacted form (`{redacted, bytes, sha256}`).
    #[schema(value_type = Option<String>, max_length = 65536)]
    pub license: Option<Sealed<sealed::License>>,
    pub certificate: Option<Certificate>,
    /// How the app logs (`stdout`, `file`, …): kept in the app's logging
    /// ConfigMap and the `verdict.dev/log-type` annotation of its pods.
    #[schema(max_length = 63)]
    pub log_type: Option<String>,
    /// The logging ConfigMap's entries (mounted at `/etc/verdict/logging`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub log_config: BTreeMap<String, String>,
    /// The metrics ConfigMap's entries (mounted at `/etc/verdict/metrics`);
    /// `port`, `path` and `scheme` become Prometheus' scrape annotations
    /// (and a ServiceMonitor where that kind is served).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metric_config: BTreeMap<String, String>,
    pub resource_limit: Option<ResourceLimit>,
    pub network_config: Option<NetworkConfig>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 16)]
    pub image_pull_secrets: Vec<ImagePullSecret>,
    /// The app's own health check (seed 000's business endpoint): the
    /// `verdict.dev/health-url` annotation of its workload.
    #[schema(max_length = 2048, example = "http://web.shop.svc:8080/healthz")]
    pub health_url: Option<String>,
    /// A delete removes the app's volume claims too.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub delete_storage: bool,
}

/// A TLS certificate for the app: given (`cert` and `key`, PEM), kept as a
/// `kubernetes.io/tls` Secret, or issued by cert-manager (`issuer`) where
/// its `Certificate` kind is served. Mounted at `mount-path`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct Certificate {
    #[schema(max_length = 16384)]
    pub cert: Option<String>,
    /// The private key (secret material, shown redacted).
    #[schema(value_type = Option<String>, max_length = 16384)]
    pub key: Option<Sealed<sealed::TlsKey>>,
    #[schema(max_length = 16384)]
    pub ca: Option<String>,
    /// The cert-manager issuer that issues it.
    #[schema(max_length = 253)]
    pub issuer: Option<String>,
    /// `Issuer` (the default) or `ClusterIssuer`.
    pub issuer_kind: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 16)]
    pub dns_names: Vec<String>,
    /// Where the pod sees it (`/etc/verdict/tls` by default).
    #[schema(max_length = 1024)]
    pub mount_path: Option<String>,
}

/// The container's resources: `cpu` and `memory` are limits (shorthand
/// for `limits`); requests default to the limits, as Kubernetes does.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct ResourceLimit {
    #[schema(example = "500m")]
    pub cpu: Option<String>,
    #[schema(example = "512Mi")]
    pub memory: Option<String>,
    pub limits: Option<Resources>,
    pub requests: Option<Resources>,
}

/// CPU and memory quantities.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct Resources {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

impl ResourceLimit {
    /// The limits, the shorthand's under `limits`' own.
    pub fn limits(&self) -> Resources {
        let given = self.limits.clone().unwrap_or_default();
        Resources {
            cpu: given.cpu.or_else(|| self.cpu.clone()),
            memory: given.memory.or_else(|| self.memory.clone()),
        }
    }

    pub fn requests(&self) -> Resources {
        self.requests.clone().unwrap_or_default()
    }
}

/// The app's Service: its type and ports (`port` is shorthand for one
/// port of that number).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct NetworkConfig {
    /// `ClusterIP` (the default), `NodePort` or `LoadBalancer`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    #[schema(minimum = 1, maximum = 65535)]
    pub port: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 32)]
    pub ports: Vec<Port>,
}

/// One port of the app's Service.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Port {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 15)]
    pub name: Option<String>,
    #[schema(minimum = 1, maximum = 65535)]
    pub port: u32,
    /// The container's port (the same as `port` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 65535)]
    pub target_port: Option<u32>,
    /// `TCP` (the default), `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 30000, maximum = 32767)]
    pub node_port: Option<u32>,
}

impl NetworkConfig {
    /// Every port, the shorthand's first.
    pub fn all_ports(&self) -> Vec<Port> {
        let shorthand = self.port.map(|port| Port {
            port,
            ..Port::default()
        });
        shorthand.into_iter().chain(self.ports.clone()).collect()
    }
}

/// A registry's credentials as a `kubernetes.io/dockerconfigjson` Secret,
/// or (`name` alone) a Secret that exists already.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct ImagePullSecret {
    #[schema(max_length = 253)]
    pub name: Option<String>,
    #[schema(max_length = 253, example = "registry.example:5000")]
    pub registry: Option<String>,
    #[schema(max_length = 256)]
    pub username: Option<String>,
    /// Secret material, shown redacted: at most 4096 characters, no
    /// control characters.
    #[schema(value_type = Option<String>, max_length = 4096)]
    pub password: Option<Sealed<sealed::Password>>,
    /// `username:password`, base64, as Docker's configuration keeps it
    /// (secret material, shown redacted).
    #[schema(value_type = Option<String>, max_length = 8192)]
    pub auth: Option<Sealed<sealed::Auth>>,
    #[schema(max_length = 256)]
    pub email: Option<String>,
}

impl ImagePullSecret {
    /// Whether it carries credentials (and so is a Secret to make).
    pub fn has_credentials(&self) -> bool {
        self.username.is_some() || self.password.is_some() || self.auth.is_some()
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Refusal {
    Refusal::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// The kebab-case name of a snake_case key.
fn kebab(key: &str) -> String {
    key.replace('_', "-")
}

/// Write every key of an object in kebab-case; a key given in both
/// spellings is refused.
fn kebab_keys(field: &str, object: &mut Map<String, Value>) -> Result<(), Refusal> {
    let snake: Vec<String> = object.keys().filter(|k| k.contains('_')).cloned().collect();
    for key in snake {
        let to = kebab(&key);
        if object.contains_key(&to) {
            return Err(invalid(
                format!("{field}{to}"),
                format!("is given twice, as `{to}` and as `{key}`"),
            ));
        }
        if let Some(value) = object.remove(&key) {
            object.insert(to, value);
        }
    }
    Ok(())
}

/// Write the app fields of `params` (and the keys inside the structured
/// ones) in kebab-case, so that a request in the seed's snake_case JSON is
/// kept as one in the API's. Keys that are not app fields are left as
/// they are; the keys of maps (labels, env, configs) are the user's.
pub fn normalize(params: &mut Map<String, Value>) -> Result<(), Refusal> {
    let snake: Vec<String> = params
        .keys()
        .filter(|k| k.contains('_') && FIELDS.contains(&kebab(k).as_str()))
        .cloned()
        .collect();
    for key in snake {
        let to = kebab(&key);
        if params.contains_key(&to) {
            return Err(invalid(
                format!("params.{to}"),
                format!("is given twice, as `{to}` and as `{key}`"),
            ));
        }
        if let Some(value) = params.remove(&key) {
            params.insert(to, value);
        }
    }
    for field in ["certificate", "resource-limit", "network-config"] {
        if let Some(Value::Object(object)) = params.get_mut(field) {
            kebab_keys(&format!("params.{field}."), object)?;
            for inner in ["limits", "requests"] {
                if let Some(Value::Object(o)) = object.get_mut(inner) {
                    kebab_keys(&format!("params.{field}.{inner}."), o)?;
                }
            }
            if let Some(Value::Array(ports)) = object.get_mut("ports") {
                for (i, port) in ports.iter_mut().enumerate() {
                    if let Value::Object(o) = port {
                        kebab_keys(&format!("params.{field}.ports[{i}]."), o)?;
                    }
                }
            }
        }
    }
    if let Some(Value::Array(secrets)) = params.get_mut("image-pull-secrets") {
        for (i, secret) in secrets.iter_mut().enumerate() {
            if let Value::Object(o) = secret {
                kebab_keys(&format!("params.image-pull-secrets[{i}]."), o)?;
            }
        }
    }
    Ok(())
}

impl AppSpec {
    /// The app fields of (normalized) params, each of its type; a field of
    /// the wrong shape is refused, naming it.
    pub fn of(params: &Map<String, Value>) -> Result<Self, Refusal> {
        let fields: Map<String, Value> = params
            .iter()
            .filter(|(k, _)| FIELDS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        serde_path_to_error::deserialize(Value::Object(fields)).map_err(|e| {
            let path = e.path().to_string();
            invalid(
                format!("params.{path}"),
                e.into_inner().to_string().replace("`", "'"),
            )
        })
    }

    /// The spec an app's workload keeps (its [`SPEC`] annotation), when it
    /// has one; one that does not read is an error.
    pub fn kept(annotations: &[crate::wit::types::KeyValue]) -> Result<Option<Self>, String> {
        annotations
            .iter()
            .find(|kv| kv.key == SPEC)
            .map(|kv| {
                serde_json::from_str(&kv.value)
                    .map_err(|e| format!("the workload's {SPEC} annotation does not read: {e}"))
            })
            .transpose()
    }

    /// Whether the app keeps data (a StatefulSet with volume claims).
    pub fn has_storage(&self) -> bool {
        self.storage_class_size.is_some()
    }

    /// Every field within Kubernetes' rules and verdict's bounds; the
    /// first that is not is named. `namespace` is the app's.
    pub fn check(&self, namespace: &str) -> Result<(), Refusal> {
        if let Some(given) = &self.namespace
            && given != namespace
        {
            return Err(invalid(
                "params.namespace",
                format!("`{given}` is not the app's namespace `{namespace}`"),
            ));
        }
        if let Some(id) = &self.cluster_id {
            bounded_text("params.cluster-id", id, 253)?;
        }
        if let Some(image) = &self.image {
            check_image(image)?;
        }
        if let Some(replicas) = self.replicas
            && replicas > MAX_REPLICAS
        {
            return Err(invalid(
                "params.replicas",
                format!("{replicas} is over {MAX_REPLICAS}"),
            ));
        }
        if let Some(class) = &self.storage_class_name {
            subdomain("params.storage-class-name", class)?;
            if self.storage_class_size.is_none() {
                return Err(invalid(
                    "params.storage-class-size",
                    "is required with storage-class-name (how much to claim)",
                ));
            }
        }
        if let Some(size) = &self.storage_class_size {
            let parsed = quantity("params.storage-class-size", size)?;
            if parsed <= ParsedQuantity::try_from("0").unwrap_or_default() {
                return Err(invalid(
                    "params.storage-class-size",
                    format!("`{size}` is not more than nothing"),
                ));
            }
        }
        entries("params.labels", &self.labels)?;
        for (key, value) in &self.labels {
            label_key(&format!("params.labels.{key}"), key)?;
            if [INSTANCE, MANAGED_BY].contains(&key.as_str()) {
                return Err(invalid(
                    format!("params.labels.{key}"),
                    "is set by verdict (the app it belongs to, who made it)",
                ));
            }
            // `app.kubernetes.io/` is Kubernetes' recommended labels', for
            // apps to set.
            if let Some((prefix, _)) = key.split_once('/')
                && prefix != "app.kubernetes.io"
                && RESERVED_PREFIXES
                    .iter()
                    .any(|r| prefix == *r || prefix.ends_with(&format!(".{r}")))
            {
                return Err(invalid(
                    format!("params.labels.{key}"),
                    format!(
                        "has a reserved prefix ({}): those labels are Kubernetes' and verdict's own",
                        RESERVED_PREFIXES.join(", ")
                    ),
                ));
            }
            label_value(&format!("params.labels.{key}"), value)?;
        }
        entries("params.env", &self.env)?;
        for name in self.env.keys() {
            env_name(&format!("params.env.{name}"), name)?;
        }
        if let Some(license) = self.license.as_ref().and_then(Sealed::material) {
            base64::engine::general_purpose::STANDARD
                .decode(license)
                .map_err(|e| {
                    invalid(
                        "params.license",
                        format!("is not base64 (seed 000's []byte as JSON): {e}"),
                    )
                })?;
        }
        if let Some(certificate) = &self.certificate {
            certificate.check()?;
        }
        if let Some(log_type) = &self.log_type {
            label_value("params.log-type", log_type)?;
        }
        for (field, map) in [
            ("params.log-config", &self.log_config),
            ("params.metric-config", &self.metric_config),
        ] {
            entries(field, map)?;
            for key in map.keys() {
                config_key(&format!("{field}.{key}"), key)?;
            }
        }
        if let Some(port) = self.metric_config.get("port") {
            match port.parse::<u32>() {
                Ok(1..=65535) => {}
                _ => {
                    return Err(invalid(
                        "params.metric-config.port",
                        format!("`{port}` is not a port (1 to 65535)"),
                    ));
                }
            }
        }
        if let Some(path) = self.metric_config.get("path")
            && !path.starts_with('/')
        {
            return Err(invalid(
                "params.metric-config.path",
                format!("`{path}` does not start with `/`"),
            ));
        }
        if let Some(limits) = &self.resource_limit {
            limits.check()?;
        }
        if let Some(network) = &self.network_config {
            network.check()?;
        }
        if self.image_pull_secrets.len() > MAX_PULL_SECRETS {
            return Err(invalid(
                "params.image-pull-secrets",
                format!(
                    "{} secrets; at most {MAX_PULL_SECRETS}",
                    self.image_pull_secrets.len()
                ),
            ));
        }
        for (i, secret) in self.image_pull_secrets.iter().enumerate() {
            secret.check(&format!("params.image-pull-secrets[{i}]"))?;
        }
        if let Some(url) = &self.health_url {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| invalid("params.health-url", format!("`{url}` is not a URL: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") || url.len() > 2048 {
                return Err(invalid(
                    "params.health-url",
                    "is an http or https URL of at most 2048 characters",
                ));
            }
        }
        Ok(())
    }

    /// The app's own health check reaches the app only: its Service by
    /// name (`NAME`, `NAME.NAMESPACE`, `NAME.NAMESPACE.svc…`) or a pod's
    /// address — never loopback, link-local (cloud metadata), unspecified
    /// or multicast addresses, and no other namespace's names, which the
    /// host would otherwise request for whoever asks.
    /// `allowed`: hosts it may name besides (`--health-url-allow`).
    pub fn check_health_url(
        &self,
        namespace: &str,
        name: &str,
        allowed: &[String],
    ) -> Result<(), Refusal> {
        let Some(url) = &self.health_url else {
            return Ok(());
        };
        let field = "params.health-url";
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| invalid(field, format!("`{url}` is not a URL: {e}")))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(invalid(
                field,
                "holds credentials; the health check takes none",
            ));
        }
        if parsed
            .host_str()
            .is_some_and(|host| allowed.iter().any(|a| a.eq_ignore_ascii_case(host)))
        {
            return Ok(());
        }
        let refused = |why: &str| {
            invalid(
                field,
                format!(
                    "reaches {why}; it may reach the app's own Service ({name}.{namespace}.svc) or its pods only"
                ),
            )
        };
        match parsed.host() {
            Some(url::Host::Ipv4(ip)) => {
                if ip.is_loopback()
                    || ip.is_link_local()
                    || ip.is_unspecified()
                    || ip.is_multicast()
                    || ip.is_broadcast()
                {
                    return Err(refused(&format!(
                        "{ip}, a loopback, link-local or unspecified address"
                    )));
                }
            }
            Some(url::Host::Ipv6(ip)) => {
                let link_local = (ip.segments()[0] & 0xffc0) == 0xfe80;
                let mapped = ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_link_local());
                if ip.is_loopback()
                    || ip.is_unspecified()
                    || ip.is_multicast()
                    || link_local
                    || mapped
                {
                    return Err(refused(&format!(
                        "{ip}, a loopback, link-local or unspecified address"
                    )));
                }
            }
            Some(url::Host::Domain(host)) => {
                let host = host.trim_end_matches('.').to_ascii_lowercase();
                let parts: Vec<&str> = host.split('.').collect();
                let own = parts.first() == Some(&name)
                    && match parts.get(1) {
                        None => true,
                        Some(ns) => {
                            *ns == namespace && parts.get(2).is_none_or(|svc| *svc == "svc")
                        }
                    };
                if !own {
                    return Err(refused(&format!(
                        "`{host}`, which is not the app's Service"
                    )));
                }
            }
            None => return Err(invalid(field, format!("`{url}` has no host"))),
        }
        Ok(())
    }

    /// This spec with the fields of `change` that it gives in their place
    /// (a field given replaces that field, maps included).
    pub fn merged(&self, change: &Map<String, Value>) -> Result<Self, Refusal> {
        let mut base = match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        for (key, value) in change {
            if FIELDS.contains(&key.as_str()) && key != "delete-storage" {
                base.insert(key.clone(), value.clone());
            }
        }
        Self::of(&base)
    }

    /// The spec as the workload's annotation keeps it: without secret
    /// material (the licence, the certificate, its key and CA, registry
    /// credentials are in their Secrets; a certificate's PEM is kept as an
    /// empty text, meaning "in its Secret").
    pub fn redacted(&self) -> Self {
        let mut spec = self.clone();
        spec.seal();
        if let Some(c) = &mut spec.certificate {
            for field in [&mut c.cert, &mut c.ca] {
                if field.is_some() {
                    *field = Some(String::new());
                }
            }
        }
        spec.delete_storage = false;
        spec
    }
}

impl SealedFields for AppSpec {
    fn each_sealed(&mut self, visit: &mut dyn FnMut(&str, SealedRef<'_>)) {
        if let Some(license) = &mut self.license {
            visit("license", SealedRef::License(license));
        }
        if let Some(key) = self.certificate.as_mut().and_then(|c| c.key.as_mut()) {
            visit("certificate.key", SealedRef::TlsKey(key));
        }
        for (i, pull) in self.image_pull_secrets.iter_mut().enumerate() {
            if let Some(password) = &mut pull.password {
                visit(
                    &format!("image-pull-secrets.{i}.password"),
                    SealedRef::Password(password),
                );
            }
            if let Some(auth) = &mut pull.auth {
                visit(
                    &format!("image-pull-secrets.{i}.auth"),
                    SealedRef::Auth(auth),
                );
            }
        }
    }
}

impl AppSpec {
    /// The spec as admission policies see it: typed, without secret
    /// material (a license's size, whether a certificate or a registry's
    /// credentials are given).
    pub fn to_wit(&self) -> crate::wit::admission::AppSpec {
        use crate::wit::admission as w;
        use crate::wit::types::KeyValue;
        let pairs = |map: &BTreeMap<String, String>| -> Vec<KeyValue> {
            map.iter()
                .map(|(key, value)| KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect()
        };
        let resources = |r: Resources| w::Resources {
            cpu: r.cpu,
            memory: r.memory,
        };
        w::AppSpec {
            namespace: self.namespace.clone(),
            cluster_id: self.cluster_id.clone(),
            image: self.image.clone(),
            replicas: self.replicas,
            storage_class_name: self.storage_class_name.clone(),
            storage_class_size: self.storage_class_size.clone(),
            labels: pairs(&self.labels),
            env: pairs(&self.env),
            license_bytes: self.license.as_ref().map(|l| match l.material() {
                Some(text) => base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_or(0, |bytes| bytes.len() as u32),
                None => 0,
            }),
            certificate: self.certificate.as_ref().map(|c| w::CertificateSpec {
                given: c.cert.is_some() || c.key.is_some(),
                issuer: c.issuer.clone(),
                issuer_kind: c.issuer_kind.clone(),
                dns_names: c.dns_names.clone(),
                mount_path: c.mount_path.clone(),
            }),
            log_type: self.log_type.clone(),
            log_config: pairs(&self.log_config),
            metric_config: pairs(&self.metric_config),
            resource_limit: self.resource_limit.as_ref().map(|r| w::ResourceLimit {
                limits: resources(r.limits()),
                requests: resources(r.requests()),
            }),
            network_config: self.network_config.as_ref().map(|n| w::NetworkConfig {
                service_type: n.kind.clone(),
                ports: n
                    .all_ports()
                    .into_iter()
                    .map(|p| w::ServicePort {
                        name: p.name,
                        port: p.port,
                        target_port: p.target_port,
                        protocol: p.protocol,
                        node_port: p.node_port,
                    })
                    .collect(),
            }),
            image_pull_secrets: self
                .image_pull_secrets
                .iter()
                .map(|p| w::ImagePullSecret {
                    name: p.name.clone(),
                    registry: p.registry.clone(),
                    username: p.username.clone(),
                    has_credentials: p.has_credentials(),
                })
                .collect(),
            health_url: self.health_url.clone(),
            delete_storage: self.delete_storage,
        }
    }
}

impl Certificate {
    fn check(&self) -> Result<(), Refusal> {
        let given = self.cert.is_some() || self.key.is_some();
        match (given, &self.issuer) {
            (false, None) => {
                return Err(invalid(
                    "params.certificate",
                    "gives `cert` and `key` (PEM), or an `issuer` to issue it",
                ));
            }
            (true, Some(_)) => {
                return Err(invalid(
                    "params.certificate",
                    "gives either `cert` and `key` or an `issuer`, not both",
                ));
            }
            _ => {}
        }
        if given {
            let key = self
                .key
                .as_ref()
                .map(|k| k.material().unwrap_or_default().to_string());
            for (field, value, marker) in [
                ("cert", &self.cert, "CERTIFICATE"),
                ("key", &key, "PRIVATE KEY"),
            ] {
                match value {
                    // An empty text is one kept in its Secret already.
                    Some(pem) if pem.is_empty() || pem.contains(&format!("{marker}-----")) => {}
                    Some(_) => {
                        return Err(invalid(
                            format!("params.certificate.{field}"),
                            format!("is not PEM (no `{marker}` block)"),
                        ));
                    }
                    None => {
                        return Err(invalid(
                            format!("params.certificate.{field}"),
                            "is required with a given certificate",
                        ));
                    }
                }
            }
        }
        if let Some(issuer) = &self.issuer {
            subdomain("params.certificate.issuer", issuer)?;
        }
        if let Some(kind) = &self.issuer_kind
            && !["Issuer", "ClusterIssuer"].contains(&kind.as_str())
        {
            return Err(invalid(
                "params.certificate.issuer-kind",
                format!("`{kind}` is not Issuer or ClusterIssuer"),
            ));
        }
        for (i, name) in self.dns_names.iter().enumerate() {
            bounded_text(&format!("params.certificate.dns-names[{i}]"), name, 253)?;
        }
        if let Some(path) = &self.mount_path {
            mount_path("params.certificate.mount-path", path)?;
        }
        Ok(())
    }
}

impl ResourceLimit {
    fn check(&self) -> Result<(), Refusal> {
        let field = "params.resource-limit";
        if self.limits.is_some() && (self.cpu.is_some() || self.memory.is_some()) {
            return Err(invalid(
                field,
                "gives `cpu` and `memory` (the limits) or `limits`, not both",
            ));
        }
        let (limits, requests) = (self.limits(), self.requests());
        for (part, resources) in [("limits", &limits), ("requests", &requests)] {
            for (name, value) in [("cpu", &resources.cpu), ("memory", &resources.memory)] {
                if let Some(value) = value {
                    quantity(&format!("{field}.{part}.{name}"), value)?;
                }
            }
        }
        for (name, limit, request) in [
            ("cpu", &limits.cpu, &requests.cpu),
            ("memory", &limits.memory, &requests.memory),
        ] {
            if let (Some(limit), Some(request)) = (limit, request) {
                let (l, r) = (
                    ParsedQuantity::try_from(limit.as_str()),
                    ParsedQuantity::try_from(request.as_str()),
                );
                if let (Ok(l), Ok(r)) = (l, r)
                    && r > l
                {
                    return Err(invalid(
                        format!("{field}.requests.{name}"),
                        format!("{request} is more than the limit {limit}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl NetworkConfig {
    fn check(&self) -> Result<(), Refusal> {
        let field = "params.network-config";
        if let Some(kind) = &self.kind
            && !["ClusterIP", "NodePort", "LoadBalancer"].contains(&kind.as_str())
        {
            return Err(invalid(
                format!("{field}.type"),
                format!("`{kind}` is not ClusterIP, NodePort or LoadBalancer"),
            ));
        }
        let ports = self.all_ports();
        if ports.len() > MAX_PORTS {
            return Err(invalid(
                format!("{field}.ports"),
                format!("{} ports; at most {MAX_PORTS}", ports.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, port) in self.ports.iter().enumerate() {
            let at = format!("{field}.ports[{i}]");
            for (name, value) in [("port", Some(port.port)), ("target-port", port.target_port)] {
                if let Some(value) = value
                    && !(1..=65535).contains(&value)
                {
                    return Err(invalid(
                        format!("{at}.{name}"),
                        format!("{value} is not a port (1 to 65535)"),
                    ));
                }
            }
            if let Some(name) = &port.name {
                if name.len() > 15 {
                    return Err(invalid(
                        format!("{at}.name"),
                        format!("`{name}` is longer than 15 characters"),
                    ));
                }
                dns_label(&format!("{at}.name"), name)?;
            }
            if let Some(protocol) = &port.protocol
                && !["TCP", "UDP", "SCTP"].contains(&protocol.as_str())
            {
                return Err(invalid(
                    format!("{at}.protocol"),
                    format!("`{protocol}` is not TCP, UDP or SCTP"),
                ));
            }
            if let Some(node_port) = port.node_port {
                if !(30000..=32767).contains(&node_port) {
                    return Err(invalid(
                        format!("{at}.node-port"),
                        format!("{node_port} is not in 30000-32767"),
                    ));
                }
                if !matches!(self.kind.as_deref(), Some("NodePort" | "LoadBalancer")) {
                    return Err(invalid(
                        format!("{at}.node-port"),
                        "needs type NodePort or LoadBalancer",
                    ));
                }
            }
        }
        if let Some(port) = self.port
            && !(1..=65535).contains(&port)
        {
            return Err(invalid(
                format!("{field}.port"),
                format!("{port} is not a port (1 to 65535)"),
            ));
        }
        for (i, port) in ports.iter().enumerate() {
            let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".into());
            if !seen.insert((port.port, protocol)) {
                return Err(invalid(
                    format!("{field}.ports"),
                    format!("port {} is given twice (the {i}th)", port.port),
                ));
            }
        }
        if ports.len() > 1
            && let Some(i) = ports.iter().position(|p| p.name.is_none())
        {
            return Err(invalid(
                format!("{field}.ports"),
                format!(
                    "a Service of several ports names each; port {} has no name",
                    ports[i].port
                ),
            ));
        }
        Ok(())
    }
}

impl ImagePullSecret {
    fn check(&self, field: &str) -> Result<(), Refusal> {
        if let Some(name) = &self.name {
            subdomain(&format!("{field}.name"), name)?;
        }
        if self.has_credentials() {
            match &self.registry {
                None => {
                    return Err(invalid(
                        format!("{field}.registry"),
                        "is required with credentials (which registry they are for)",
                    ));
                }
                Some(registry)
                    if registry.trim().is_empty() || registry.contains(char::is_whitespace) =>
                {
                    return Err(invalid(
                        format!("{field}.registry"),
                        format!("`{registry}` is not a registry host"),
                    ));
                }
                // Credentials belong in `username` and `password`: a
                // registry written with them would show them wherever the
                // registry is shown.
                Some(registry) if registry_has_credentials(registry) => {
                    return Err(invalid(
                        format!("{field}.registry"),
                        "holds credentials (`user:password@`); give them as `username` and `password`",
                    ));
                }
                Some(_) => {}
            }
            if self.auth.is_none() && (self.username.is_none() || self.password.is_none()) {
                return Err(invalid(field, "gives `username` and `password`, or `auth`"));
            }
            if let Some(username) = &self.username {
                bounded_text(&format!("{field}.username"), username, 256)?;
            }
            if let Some(password) = self.password.as_ref().and_then(Sealed::material) {
                credential(&format!("{field}.password"), password, 4096)?;
            }
            if let Some(auth) = self.auth.as_ref().and_then(Sealed::material) {
                let at = format!("{field}.auth");
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| invalid(&at, "is not base64 of `user:password` text"))?;
                let Some((user, password)) = decoded.split_once(':') else {
                    return Err(invalid(&at, "does not decode to `user:password`"));
                };
                if user.is_empty() {
                    return Err(invalid(&at, "decodes to a password without a user"));
                }
                credential(&at, password, 4096)?;
                if auth.len() > 8192 {
                    return Err(invalid(&at, "is longer than 8192 characters"));
                }
            }
        } else if self.name.is_none() {
            return Err(invalid(
                field,
                "names a Secret, or gives a registry's credentials",
            ));
        } else if self.registry.is_some() {
            return Err(invalid(
                field,
                "gives a registry without credentials (`username` and `password`, or `auth`)",
            ));
        }
        Ok(())
    }
}

/// Whether a registry's text carries credentials (`user:password@host`,
/// `https://user@host`).
fn registry_has_credentials(registry: &str) -> bool {
    let host_part = registry
        .split_once("://")
        .map_or(registry, |(_, rest)| rest);
    host_part
        .split('/')
        .next()
        .unwrap_or_default()
        .contains('@')
}

/// A password: 1 to `max` characters, none a control character (a NUL, a
/// newline, an escape). Never echoed: the refusal says what is wrong only.
fn credential(field: &str, text: &str, max: usize) -> Result<(), Refusal> {
    if text.is_empty() || text.chars().count() > max {
        return Err(invalid(field, format!("is 1 to {max} characters")));
    }
    if text.chars().any(char::is_control) {
        return Err(invalid(field, "has a control character"));
    }
    Ok(())
}

/// A Kubernetes quantity, or the field refused naming it.
pub fn quantity(field: &str, text: &str) -> Result<ParsedQuantity, Refusal> {
    let refused = || {
        invalid(
            field,
            format!("`{text}` is not a Kubernetes quantity (such as 500m, 10Gi, 1.5)"),
        )
    };
    // The parser reads what it can; a quantity is the whole text: a
    // number (no sign: none of these may be negative), then a suffix.
    const SUFFIXES: [&str; 16] = [
        "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    let (number, suffix) = text.split_at(
        text.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(text.len()),
    );
    let number = number.strip_prefix('+').unwrap_or(number);
    let number_ok = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.chars().all(|c| c.is_ascii_digit() || c == '.');
    let exponent = suffix
        .strip_prefix(['e', 'E'])
        .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_digit()));
    if text.len() > 64 || !number_ok || !(SUFFIXES.contains(&suffix) || exponent) {
        return Err(refused());
    }
    ParsedQuantity::try_from(text).map_err(|_| refused())
}

fn bounded_text(field: &str, text: &str, max: usize) -> Result<(), Refusal> {
    if text.is_empty() || text.chars().count() > max {
        return Err(invalid(field, format!("is 1 to {max} characters")));
    }
    if text.chars().any(char::is_control) {
        return Err(invalid(field, "has a control character"));
    }
    Ok(())
}

fn check_image(image: &str) -> Result<(), Refusal> {
    if image.is_empty()
        || image.len() > 1024
        || image.chars().any(|c| c.is_whitespace() || c.is_control())
        || image != image.trim_matches('/')
    {
        return Err(invalid(
            "params.image",
            format!("`{image}` is not an image reference"),
        ));
    }
    Ok(())
}

fn entries(field: &str, map: &BTreeMap<String, String>) -> Result<(), Refusal> {
    if map.len() > MAX_ENTRIES {
        return Err(invalid(
            field,
            format!("{} entries; at most {MAX_ENTRIES}", map.len()),
        ));
    }
    Ok(())
}

fn alphanumeric_ends(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && text
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric())
}

/// A DNS label (RFC 1123), as Kubernetes names many things.
fn dns_label(field: &str, name: &str) -> Result<(), Refusal> {
    let valid = name.len() <= 63
        && alphanumeric_ends(name)
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        return Err(invalid(
            field,
            format!("`{name}` is not a DNS label (lower-case letters, digits and `-`, at most 63)"),
        ));
    }
    Ok(())
}

/// A DNS subdomain (RFC 1123), as Kubernetes names most objects.
fn subdomain(field: &str, name: &str) -> Result<(), Refusal> {
    let valid = name.len() <= 253
        && name.split('.').all(|part| {
            alphanumeric_ends(part)
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
    if !valid {
        return Err(invalid(
            field,
            format!(
                "`{name}` is not a Kubernetes name (lower-case letters, digits, `-` and `.`, at most 253)"
            ),
        ));
    }
    Ok(())
}

/// A label's key: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 letters, digits, `-`, `_` and `.`.
fn label_key(field: &str, key: &str) -> Result<(), Refusal> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        subdomain(field, prefix).map_err(|_| {
            invalid(
                field,
                format!("the prefix of `{key}` is not a DNS subdomain"),
            )
        })?;
    }
    if !label_text(name) {
        return Err(invalid(
            field,
            format!(
                "`{key}` is not a label key (letters, digits, `-`, `_` and `.`, at most 63, after an optional prefix and `/`)"
            ),
        ));
    }
    Ok(())
}

/// A label's name or value: 1 to 63 letters, digits, `-`, `_` and `.`,
/// beginning and ending with a letter or digit.
fn label_text(text: &str) -> bool {
    text.len() <= 63
        && alphanumeric_ends(text)
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A label's value: empty, or at most 63 letters, digits, `-`, `_` and `.`
/// that begin and end with a letter or digit.
fn label_value(field: &str, value: &str) -> Result<(), Refusal> {
    if !value.is_empty() && !label_text(value) {
        return Err(invalid(
            field,
            format!(
                "`{value}` is not a label value (letters, digits, `-`, `_` and `.`, at most 63)"
            ),
        ));
    }
    Ok(())
}

/// An environment variable's name as Kubernetes takes it: printable ASCII
/// without `=`, not beginning with a digit — verdict keeps to the portable
/// `[-._a-zA-Z][-._a-zA-Z0-9]*`.
fn env_name(field: &str, name: &str) -> Result<(), Refusal> {
    let valid = !name.is_empty()
        && name.len() <= 256
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        return Err(invalid(
            field,
            format!(
                "`{name}` is not an environment variable name (letters, digits, `-`, `_` and `.`, not beginning with a digit)"
            ),
        ));
    }
    Ok(())
}

/// A ConfigMap's key.
fn config_key(field: &str, key: &str) -> Result<(), Refusal> {
    let valid = !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid {
        return Err(invalid(
            field,
            format!("`{key}` is not a configuration key (letters, digits, `-`, `_` and `.`)"),
        ));
    }
    Ok(())
}

fn mount_path(field: &str, path: &str) -> Result<(), Refusal> {
    if !path.starts_with('/')
        || path.len() > 1024
        || path.split('/').any(|p| p == "..")
        || path.chars().any(|c| c.is_control() || c == ':')
    {
        return Err(invalid(
            field,
            format!("`{path}` is not an absolute path without `..`"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(params: Value) -> Result<AppSpec, Refusal> {
        let Value::Object(mut params) = params else {
            panic!("params are an object")
        };
        normalize(&mut params)?;
        let spec = AppSpec::of(&params)?;
        spec.check("newshop")?;
        Ok(spec)
    }

    fn refused_field(params: Value) -> String {
        match spec(params) {
            Err(Refusal::Invalid { field, .. }) => field,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn the_seeds_snake_case_reads_as_kebab_case() {
        let seed = json!({
            "namespace": "newshop", "cluster_id": "c1", "image": "nginx:1.27", "replicas": 2,
            "storage_class_name": "fast", "storage_class_size": "10Gi",
            "labels": {"team": "shop"}, "env": {"MODE": "prod", "log_level": "info"},
            "license": "TElDRU5TRQ==",
            "certificate": {"cert": "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----",
                            "key": "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----",
                            "mount_path": "/tls"},
            "log_type": "stdout", "log_config": {"level": "info"},
            "metric_config": {"port": "9090", "path": "/metrics"},
            "resource_limit": {"cpu": "500m", "memory": "512Mi", "requests": {"cpu": "100m"}},
            "network_config": {"type": "NodePort", "ports": [{"name": "http", "port": 80, "target_port": 8080}]},
            "image_pull_secrets": [{"registry": "r.example", "username": "u", "password": "p"}],
            "health_url": "http://web.newshop:8080/healthz",
        });
        let spec = spec(seed).expect("the seed's Task reads");
        assert_eq!(spec.storage_class_size.as_deref(), Some("10Gi"));
        assert_eq!(spec.cluster_id.as_deref(), Some("c1"));
        assert_eq!(spec.env["log_level"], "info", "the env's own keys are kept");
        assert_eq!(
            spec.certificate.unwrap().mount_path.as_deref(),
            Some("/tls")
        );
        assert_eq!(
            spec.network_config.unwrap().ports[0].target_port,
            Some(8080)
        );
        assert_eq!(
            spec.resource_limit.unwrap().requests().cpu.as_deref(),
            Some("100m")
        );
    }

    #[test]
    fn a_field_in_both_spellings_is_refused() {
        assert_eq!(
            refused_field(
                json!({"image": "a:1", "storage_class_size": "1Gi", "storage-class-size": "2Gi"})
            ),
            "params.storage-class-size"
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (
                json!({"storage-class-name": "fast", "storage-class-size": "10Gx"}),
                "params.storage-class-size",
            ),
            (
                json!({"storage-class-size": "0"}),
                "params.storage-class-size",
            ),
            (
                json!({"storage-class-name": "Fast_Class", "storage-class-size": "1Gi"}),
                "params.storage-class-name",
            ),
            (
                json!({"storage-class-name": "fast"}),
                "params.storage-class-size",
            ),
            (json!({"env": {"1BAD": "x"}}), "params.env.1BAD"),
            (json!({"env": {"A=B": "x"}}), "params.env.A=B"),
            (
                json!({"image-pull-secrets": [{"username": "u", "password": "p"}]}),
                "params.image-pull-secrets[0].registry",
            ),
            (
                json!({"image-pull-secrets": [{}]}),
                "params.image-pull-secrets[0]",
            ),
            (json!({"namespace": "other"}), "params.namespace"),
            (
                json!({"resource-limit": {"cpu": "lots"}}),
                "params.resource-limit.limits.cpu",
            ),
            (
                json!({"resource-limit": {"cpu": "1", "requests": {"cpu": "2"}}}),
                "params.resource-limit.requests.cpu",
            ),
            (
                json!({"resource-limit": {"gpu": "1"}}),
                "params.resource-limit.gpu",
            ),
            (json!({"license": "not base64!"}), "params.license"),
            (
                json!({"labels": {"app.kubernetes.io/instance": "x"}}),
                "params.labels.app.kubernetes.io/instance",
            ),
            (json!({"labels": {"team": "a b"}}), "params.labels.team"),
            (
                json!({"labels": {"kubernetes.io/hostname": "x"}}),
                "params.labels.kubernetes.io/hostname",
            ),
            (
                json!({"labels": {"node.k8s.io/pool": "x"}}),
                "params.labels.node.k8s.io/pool",
            ),
            (
                json!({"labels": {"verdict.dev/adopted-by": "x"}}),
                "params.labels.verdict.dev/adopted-by",
            ),
            (
                json!({"image-pull-secrets": [{"registry": "u:p@r.example", "username": "u", "password": "p"}]}),
                "params.image-pull-secrets[0].registry",
            ),
            (
                json!({"image-pull-secrets": [{"registry": "r.example", "auth": "bm90LWEtcGFpcg=="}]}),
                "params.image-pull-secrets[0].auth",
            ),
            (
                json!({"image-pull-secrets": [{"registry": "r.example", "auth": "not base64!"}]}),
                "params.image-pull-secrets[0].auth",
            ),
            (
                json!({"image-pull-secrets": [{"registry": "r.example", "username": "u", "password": "a\u{0}b"}]}),
                "params.image-pull-secrets[0].password",
            ),
            (
                json!({"network-config": {"type": "Ingress"}}),
                "params.network-config.type",
            ),
            (
                json!({"network-config": {"ports": [{"port": 70000}]}}),
                "params.network-config.ports[0].port",
            ),
            (
                json!({"network-config": {"ports": [{"port": 80}, {"port": 81}]}}),
                "params.network-config.ports",
            ),
            (
                json!({"metric-config": {"port": "x"}}),
                "params.metric-config.port",
            ),
            (json!({"certificate": {}}), "params.certificate"),
            (
                json!({"certificate": {"cert": "x", "key": "y"}}),
                "params.certificate.cert",
            ),
            (json!({"health-url": "ftp://x"}), "params.health-url"),
            (json!({"replicas": "two"}), "params.replicas"),
            (json!({"replicas": 20000}), "params.replicas"),
            (json!({"image": "bad image"}), "params.image"),
        ];
        for (params, field) in cases {
            assert_eq!(refused_field(params.clone()), field, "{params}");
        }
    }

    #[test]
    fn an_unknown_parameter_is_named_with_the_nearest_known_one() {
        let Value::Object(mut params) =
            json!({"image": "a:1", "storage_clas_size": "1Gi", "x-team-note": "kept"})
        else {
            unreachable!()
        };
        normalize(&mut params).unwrap();
        match known_params(&params) {
            Err(Refusal::Invalid { field, message }) => {
                assert_eq!(field, "params.storage_clas_size");
                assert!(message.contains("`storage-class-size`"), "{message}");
            }
            other => panic!("not refused: {other:?}"),
        }
        params.remove("storage_clas_size");
        assert!(
            known_params(&params).is_ok(),
            "x- parameters are the policies'"
        );
        let Value::Object(params) = json!({"hostNetwork": true}) else {
            unreachable!()
        };
        assert!(known_params(&params).is_err());
    }

    #[test]
    fn a_long_password_is_refused_without_echoing_it() {
        let long = "p".repeat(20_000);
        let refused = spec(
            json!({"image-pull-secrets": [{"registry": "r", "username": "u", "password": long}]}),
        );
        let Err(Refusal::Invalid { message, .. }) = refused else {
            panic!("not refused")
        };
        assert!(!message.contains("ppp"), "{message}");
        assert!(spec(json!({"labels": {"app.kubernetes.io/part-of": "shop"}})).is_ok());
    }

    #[test]
    fn a_health_check_reaches_the_app_only() {
        let check = |url: &str, allowed: &[String]| {
            AppSpec {
                health_url: Some(url.into()),
                ..AppSpec::default()
            }
            .check_health_url("shop", "web", allowed)
        };
        for good in [
            "http://web:8080/healthz",
            "http://web.shop/healthz",
            "https://web.shop.svc.cluster.local/healthz",
            "http://10.1.2.3:8080/ready",
        ] {
            assert!(check(good, &[]).is_ok(), "{good}");
        }
        for bad in [
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:8080/",
            "http://localhost/",
            "http://[::1]/",
            "http://[fe80::1]/",
            "http://0.0.0.0/",
            "http://db.other/healthz",
            "http://web.other.svc/healthz",
            "http://user:pw@web/healthz",
        ] {
            assert!(check(bad, &[]).is_err(), "{bad}");
        }
        assert!(check("http://127.0.0.1:8080/", &["127.0.0.1".into()]).is_ok());
    }

    #[test]
    fn quantities_are_whole_quantities() {
        for good in ["10Gi", "500m", "1.5", "1e3", "128974848", "129M", "0.1"] {
            assert!(quantity("q", good).is_ok(), "{good}");
        }
        for bad in ["10Gx", "Gi", "", "1 Gi", "10gi", "-", "1.2.3"] {
            assert!(quantity("q", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_update_replaces_the_fields_it_gives_and_keeps_the_rest() {
        let created =
            spec(json!({"image": "a:1", "env": {"A": "1", "B": "2"}, "replicas": 2})).unwrap();
        let Value::Object(change) = json!({"image": "a:2", "env": {"A": "3"}, "note": "x"}) else {
            unreachable!()
        };
        let updated = created.merged(&change).unwrap();
        assert_eq!(updated.image.as_deref(), Some("a:2"));
        assert_eq!(updated.env.len(), 1);
        assert_eq!(updated.replicas, Some(2));
    }

    #[test]
    fn the_kept_spec_has_no_secret_material() {
        let full = spec(json!({"license": "TElDRU5TRQ==",
            "image-pull-secrets": [{"registry": "r", "username": "u", "password": "hunter2"}]}))
        .unwrap();
        let text = serde_json::to_string(&full.redacted()).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("TElDRU5TRQ"),
            "{text}"
        );
        assert!(
            text.contains("\"license\":{\"redacted\":\"license\""),
            "a license is known to be kept: {text}"
        );
        let text = serde_json::to_string(&full).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("TElDRU5TRQ"),
            "the spec itself serialises redacted: {text}"
        );
    }
}
