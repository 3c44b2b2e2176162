//! Where a fleet's members come from, and how each one's verdict is
//! reached.
//!
//! - the configuration: `[[fleet.members]]` (or `--member NAME=URL`), a
//!   verdict's URL with an optional token and CA;
//! - SIG Multicluster's `ClusterProfile`s (`multicluster.x-k8s.io/v1alpha1`,
//!   KEP-4322) in the cluster the fleet runs in: the cluster's name is its
//!   `clusterset.k8s.io/cluster-id` property (else the profile's name); its
//!   verdict is at the URL of its `verdict.dev/url` property, or behind its
//!   API server's service proxy, reached as one of its access providers
//!   with that provider's credential plugin (KEP-5339's provider file);
//! - Argo CD's cluster Secrets (`argocd.argoproj.io/secret-type: cluster`):
//!   the cluster's `name`, `server` and `config` (a bearer token, client
//!   certificates, an exec provider), verdict behind the service proxy.
//!
//! Every way ends as a kubeconfig — a server, its TLS, the credentials —
//! and `kube`'s client reaches the member with it (exec plugins, token
//! refresh and TLS are kube's), plus the Service when verdict is behind
//! the API server.

use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Fleet, Settings, StaticMember, check_name};

/// Who named a member; a name two sources give is kept by the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Static,
    ClusterProfiles,
    ArgoCd,
}

/// A member as its source describes it.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub origin: String,
    pub(crate) access: Access,
    /// The cluster id the source says the member has.
    pub expected_id: Option<String>,
}

/// How a member's verdict is reached.
#[derive(Clone)]
pub(crate) struct Access {
    pub way: Way,
    /// What `way` holds, hashed: a changed credential or address follows
    /// the member anew.
    fingerprint: [u8; 32],
}

#[derive(Clone)]
pub(crate) enum Way {
    /// A kubeconfig of one cluster and user; verdict at its server, or
    /// behind the service proxy when `service` is set.
    Kubeconfig {
        kubeconfig: Box<kube::config::Kubeconfig>,
        service: Option<(String, String)>,
        /// The path verdict is under at the server (a URL's path).
        path: String,
        described: String,
    },
    /// The cluster the fleet runs in (Argo CD's `in-cluster`), verdict
    /// behind its service proxy.
    InCluster { service: (String, String) },
    /// It cannot be reached as described; why.
    Unreachable(String),
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The kubeconfig holds credentials: only where it points shows.
        f.write_str(&self.describe())
    }
}

impl Access {
    fn new(way: Way, identity: &str) -> Self {
        Self {
            way,
            fingerprint: Sha256::digest(identity.as_bytes()).into(),
        }
    }

    /// A verdict at `server` (its path kept), reached with `user`, or
    /// behind the API server at `server` when `service` is set.
    fn kubeconfig(cluster: Value, user: Value, service: Option<(String, String)>) -> Self {
        // A verdict under a path (`https://host/east`): the server is the
        // origin, the path goes before each request's.
        let mut cluster = cluster;
        let mut path = String::new();
        if service.is_none()
            && let Some(url) = cluster["server"].as_str()
            && let Ok(uri) = url.parse::<axum::http::Uri>()
            && let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority())
        {
            path = uri.path().trim_end_matches('/').to_string();
            cluster["server"] = format!("{scheme}://{authority}").into();
        }
        let origin = cluster["server"].as_str().unwrap_or_default().to_string();
        let document = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "member", "cluster": cluster}],
            "users": [{"name": "member", "user": user}],
            "contexts": [{"name": "member", "context": {"cluster": "member", "user": "member"}}],
            "current-context": "member",
        });
        let described = match &service {
            Some((namespace, name)) => format!("{origin} service {namespace}/{name}"),
            None => format!("{origin}{path}"),
        };
        let identity = format!("{document}{service:?}{path}");
        match serde_json::from_value::<kube::config::Kubeconfig>(document) {
            Ok(kubeconfig) => Self::new(
                Way::Kubeconfig {
                    kubeconfig: Box::new(kubeconfig),
                    service,
                    path,
                    described,
                },
                &identity,
            ),
            Err(error) => {
                Self::unreachable(format!("its credentials do not make a kubeconfig: {error}"))
            }
        }
    }

    /// A verdict at `url`, with a bearer token.
    pub(crate) fn at_url(url: &str, token: Option<&str>) -> Self {
        Self::kubeconfig(
            json!({"server": url}),
            token.map_or_else(|| json!({}), |t| json!({"token": t})),
            None,
        )
    }

    /// A verdict behind its Service `service` (`namespace`, `name`),
    /// through the API server of `kubeconfig`, as its current context's
    /// user.
    pub(crate) fn behind_service(
        kubeconfig: kube::config::Kubeconfig,
        service: (String, String),
    ) -> Self {
        let described = format!("service {}/{}", service.0, service.1);
        let identity = format!("{kubeconfig:?}{service:?}");
        Self::new(
            Way::Kubeconfig {
                kubeconfig: Box::new(kubeconfig),
                service: Some(service),
                path: String::new(),
                described,
            },
            &identity,
        )
    }

    fn unreachable(why: String) -> Self {
        let identity = why.clone();
        Self::new(Way::Unreachable(why), &identity)
    }

    /// Where it points, for people.
    pub fn describe(&self) -> String {
        match &self.way {
            Way::Kubeconfig { described, .. } => described.clone(),
            Way::InCluster { service } => format!("in-cluster service {}/{}", service.0, service.1),
            Way::Unreachable(why) => format!("unreachable: {why}"),
        }
    }

    pub fn same_as(&self, other: &Access) -> bool {
        self.fingerprint == other.fingerprint
    }
}

/// `NAMESPACE/NAME` of a Service.
fn service(text: &str) -> Option<(String, String)> {
    text.split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .map(|(ns, name)| (ns.to_string(), name.to_string()))
}

/// A token read from a file, trimmed.
fn token(path: &std::path::Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The members of the configuration.
pub fn configured(members: &[StaticMember], settings: &Settings) -> Result<Vec<Spec>, String> {
    let default_token = settings
        .member_token_file
        .as_deref()
        .map(token)
        .transpose()?;
    let mut seen = std::collections::BTreeSet::new();
    members
        .iter()
        .chain(&settings.members)
        .map(|member| {
            check_name(&member.name)?;
            if !seen.insert(member.name.clone()) {
                return Err(format!("member `{}` is named twice", member.name));
            }
            let url = url_of(&member.url).map_err(|e| format!("member `{}`: {e}", member.name))?;
            let token = match &member.token_file {
                Some(path) => Some(token(path)?),
                None => default_token.clone(),
            };
            let mut cluster = json!({"server": url});
            if let Some(ca) = &member.ca_file {
                let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
                cluster["certificate-authority-data"] = base64_text(&pem).into();
            }
            let user = token.map_or_else(|| json!({}), |t| json!({"token": t}));
            Ok(Spec {
                name: member.name.clone(),
                origin: "static".into(),
                access: Access::kubeconfig(cluster, user, None),
                expected_id: member.cluster_id.clone(),
            })
        })
        .collect()
}

/// A member's URL: `http` or `https`, with a host, without a query.
fn url_of(text: &str) -> Result<String, String> {
    let uri: axum::http::Uri = text
        .parse()
        .map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) if uri.query().is_none() => {
            Ok(text.trim_end_matches('/').to_string())
        }
        _ => Err(format!(
            "`{text}` is not an http(s) URL with a host and no query"
        )),
    }
}

fn base64_text(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// KEP-5339's provider file: the credential plugin of each access provider.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Providers {
    #[serde(default)]
    providers: Vec<Provider>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Provider {
    name: String,
    exec_config: Value,
}

impl Providers {
    pub fn read(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The property of a profile that names the cluster.
pub const CLUSTER_ID: &str = "clusterset.k8s.io/cluster-id";
/// SIG Multicluster's property of a cluster's id in its clusterset
/// (KEP-2149), as a profile may carry it.
pub const CLUSTER_PROPERTY: &str = "cluster.clusterset.k8s.io";
/// An Argo CD cluster Secret's annotation of the cluster's id, as its
/// verdict says it (`/v1/cluster`).
pub const VERDICT_CLUSTER_ID: &str = "verdict.dev/cluster-id";
/// A profile's property with its verdict's URL.
pub const VERDICT_URL: &str = "verdict.dev/url";
/// A profile's property (or an Argo CD Secret's annotation) naming its
/// verdict's Service, `NAMESPACE/NAME`.
pub const VERDICT_SERVICE: &str = "verdict.dev/service";

/// A `ClusterProfile` as a member.
pub fn from_profile(
    profile: &DynamicObject,
    providers: &Providers,
    settings: &Settings,
    token: Option<&str>,
) -> Result<Spec, String> {
    let name = profile.metadata.name.clone().unwrap_or_default();
    let namespace = profile.metadata.namespace.clone().unwrap_or_default();
    let origin = format!("ClusterProfile {namespace}/{name}");
    let status = &profile.data["status"];
    let property = |key: &str| {
        status["properties"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == key)
            .and_then(|p| p["value"].as_str())
            .map(str::to_string)
    };
    let cluster = property(CLUSTER_ID).unwrap_or_else(|| name.clone());
    check_name(&cluster).map_err(|e| format!("{origin}: {e}"))?;
    let access = if let Some(url) = property(VERDICT_URL) {
        match url_of(&url) {
            Ok(url) => Access::kubeconfig(
                json!({"server": url}),
                token.map_or_else(|| json!({}), |t| json!({"token": t})),
                None,
            ),
            Err(e) => Access::unreachable(format!("its {VERDICT_URL} property: {e}")),
        }
    } else {
        let service_text =
            property(VERDICT_SERVICE).unwrap_or_else(|| settings.member_service.clone());
        let offered: Vec<&Value> = ["accessProviders", "credentialProviders"]
            .iter()
            .flat_map(|key| status[key].as_array().into_iter().flatten())
            .collect();
        let chosen = offered.iter().find_map(|offer| {
            providers
                .providers
                .iter()
                .find(|p| offer["name"] == p.name.as_str())
                .map(|p| (*offer, p))
        });
        match (service(&service_text), chosen) {
            (None, _) => Access::unreachable(format!("`{service_text}` is not NAMESPACE/NAME")),
            (Some(_), None) if offered.is_empty() => {
                Access::unreachable("the profile offers no access provider".into())
            }
            (Some(_), None) => Access::unreachable(format!(
                "none of its access providers ({}) is configured (--clusterprofile-provider-file)",
                offered
                    .iter()
                    .filter_map(|o| o["name"].as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            (Some(service), Some((offer, provider))) => {
                let mut exec = provider.exec_config.clone();
                if exec.get("interactiveMode").is_none() {
                    exec["interactiveMode"] = "Never".into();
                }
                Access::kubeconfig(
                    offer["cluster"].clone(),
                    json!({"exec": exec}),
                    Some(service),
                )
            }
        }
    };
    Ok(Spec {
        name: cluster,
        origin,
        access,
        expected_id: property(CLUSTER_ID).or_else(|| property(CLUSTER_PROPERTY)),
    })
}

/// The server Argo CD names the cluster it runs in.
const ARGOCD_IN_CLUSTER: &str = "https://kubernetes.default.svc";

/// An Argo CD cluster Secret as a member.
pub fn from_argocd_secret(secret: &Secret, settings: &Settings) -> Result<Spec, String> {
    let data = secret.data.clone().unwrap_or_default();
    let text = |key: &str| {
        data.get(key)
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
    };
    let secret_name = secret.metadata.name.clone().unwrap_or_default();
    let origin = format!(
        "Argo CD Secret {}/{secret_name}",
        secret.metadata.namespace.clone().unwrap_or_default()
    );
    let name = text("name")
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| secret_name.clone());
    check_name(&name).map_err(|e| format!("{origin}: {e}"))?;
    let server = text("server").unwrap_or_default();
    let service_text = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(VERDICT_SERVICE))
        .cloned()
        .unwrap_or_else(|| settings.member_service.clone());
    let expected_id = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(VERDICT_CLUSTER_ID))
        .cloned();
    let Some(service) = service(&service_text) else {
        return Ok(Spec {
            name,
            origin,
            access: Access::unreachable(format!("`{service_text}` is not NAMESPACE/NAME")),
            expected_id,
        });
    };
    let config: Value = match text("config").filter(|c| !c.is_empty()) {
        Some(config) => match serde_json::from_str(&config) {
            Ok(config) => config,
            Err(e) => {
                return Ok(Spec {
                    name,
                    origin,
                    access: Access::unreachable(format!("its `config` is not JSON: {e}")),
                    expected_id,
                });
            }
        },
        None => json!({}),
    };
    let access = argocd_access(&server, &config, service);
    Ok(Spec {
        name,
        origin,
        access,
        expected_id,
    })
}

fn argocd_access(server: &str, config: &Value, service: (String, String)) -> Access {
    let has_credentials = [
        "bearerToken",
        "username",
        "execProviderConfig",
        "awsAuthConfig",
    ]
    .iter()
    .any(|k| !config[k].is_null())
        || !config["tlsClientConfig"]["certData"].is_null();
    if server.trim_end_matches('/') == ARGOCD_IN_CLUSTER && !has_credentials {
        let identity = format!("in-cluster {service:?}");
        return Access::new(Way::InCluster { service }, &identity);
    }
    if server.is_empty() {
        return Access::unreachable("the Secret names no `server`".into());
    }
    if !config["awsAuthConfig"].is_null() {
        return Access::unreachable(
            "Argo CD's awsAuthConfig is not supported; give the cluster an execProviderConfig"
                .into(),
        );
    }
    let tls = &config["tlsClientConfig"];
    let mut cluster = json!({"server": server});
    let copy = |to: &mut Value, key: &str, from: &Value| {
        if let Some(v) = from.as_str().filter(|v| !v.is_empty()) {
            to[key] = v.into();
        }
    };
    copy(&mut cluster, "certificate-authority-data", &tls["caData"]);
    copy(&mut cluster, "tls-server-name", &tls["serverName"]);
    if tls["insecure"] == true {
        cluster["insecure-skip-tls-verify"] = true.into();
    }
    let mut user = json!({});
    copy(&mut user, "token", &config["bearerToken"]);
    copy(&mut user, "username", &config["username"]);
    copy(&mut user, "password", &config["password"]);
    copy(&mut user, "client-certificate-data", &tls["certData"]);
    copy(&mut user, "client-key-data", &tls["keyData"]);
    let exec = &config["execProviderConfig"];
    if exec.is_object() {
        // Argo CD gives the plugin's environment as a map; a kubeconfig as
        // a list of names and values.
        let env: Vec<Value> = exec["env"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        user["exec"] = json!({
            "apiVersion": exec["apiVersion"],
            "command": exec["command"],
            "args": exec["args"].as_array().cloned().unwrap_or_default(),
            "env": env,
            "interactiveMode": "Never",
        });
    }
    Access::kubeconfig(cluster, user, Some(service))
}

/// The `ClusterProfile` kind.
fn profile_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "multicluster.x-k8s.io",
        "v1alpha1",
        "ClusterProfile",
    ))
}

/// Follow the cluster's `ClusterProfile`s: each change of the list
/// replaces the profiles' members. A failed list or watch keeps the
/// members as they were (a read that failed is not an empty list).
pub fn follow_profiles(
    fleet: &Arc<Fleet>,
    client: kube::Client,
    providers: Providers,
) -> tokio::task::JoinHandle<()> {
    let settings = fleet.settings.clone();
    let resource = profile_resource();
    let api: Api<DynamicObject> = match &settings.profile_namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let mut config = watcher::Config::default();
    if let Some(selector) = &settings.profile_selector {
        config = config.labels(selector);
    }
    let token = settings
        .member_token_file
        .as_deref()
        .and_then(|p| token(p).ok());
    let writer = reflector::store::Writer::new(resource);
    follow_list(
        fleet,
        Source::ClusterProfiles,
        writer,
        watcher(api, config),
        move |profile| from_profile(profile, &providers, &settings, token.as_deref()),
    )
}

/// Follow Argo CD's cluster Secrets in `namespace`, as
/// [`follow_profiles`] follows profiles.
pub fn follow_argocd(
    fleet: &Arc<Fleet>,
    client: kube::Client,
    namespace: &str,
) -> tokio::task::JoinHandle<()> {
    let settings = fleet.settings.clone();
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().labels("argocd.argoproj.io/secret-type=cluster");
    follow_list(
        fleet,
        Source::ArgoCd,
        reflector::store::Writer::default(),
        watcher(api, config),
        move |secret| from_argocd_secret(secret, &settings),
    )
}

/// Watch a kind into a store; after the first whole list and on each
/// change, the members its objects make replace the source's. Errors of
/// the watch (it retries with backoff) change nothing.
fn follow_list<K>(
    fleet: &Arc<Fleet>,
    source: Source,
    writer: reflector::store::Writer<K>,
    watch: impl futures_util::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    member_of: impl Fn(&K) -> Result<Spec, String> + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let fleet = Arc::downgrade(fleet);
    let store = writer.as_reader();
    let stream = reflector(writer, watch.default_backoff());
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => listed = true,
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(?source, %error, "members could not be watched; kept as they were");
                    continue;
                }
            }
            if !listed {
                continue;
            }
            let Some(fleet) = fleet.upgrade() else {
                return;
            };
            let specs = store
                .state()
                .iter()
                .filter_map(|object| {
                    member_of(object)
                        .map_err(
                            |error| tracing::warn!(?source, %error, "an object is not a member"),
                        )
                        .ok()
                })
                .collect();
            fleet.set_members(source, specs);
        }
    })
}

/// The path of a Service's proxy on its API server, from the Service:
/// `https:` when verdict serves HTTPS behind it (its port is named
/// `https` or is 443).
pub fn service_proxy_prefix(namespace: &str, name: &str, service: &Value) -> String {
    let port = &service["spec"]["ports"][0];
    let port_name = port["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map_or_else(|| port["port"].to_string(), str::to_string);
    let https = port_name == "https" || port["port"] == 443;
    format!(
        "/api/v1/namespaces/{}/services/{}{}:{}/proxy",
        segment(namespace),
        if https { "https:" } else { "" },
        segment(name),
        segment(&port_name)
    )
}

/// A path segment, escaped.
pub fn segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_profile_names_its_cluster_by_its_cluster_id() {
        let settings = Settings::default();
        let providers: Providers = serde_json::from_value(json!({"providers": [
            {"name": "token", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/token"}}
        ]}))
        .unwrap();
        let p = profile(json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": "east", "namespace": "fleet"},
            "spec": {"clusterManager": {"name": "test"}},
            "status": {
                "properties": [{"name": CLUSTER_ID, "value": "5b1a-east"}],
                "accessProviders": [
                    {"name": "other", "cluster": {"server": "https://10.0.0.1"}},
                    {"name": "token", "cluster": {"server": "https://10.0.0.2:6443"}}
                ]
            }
        }));
        let spec = from_profile(&p, &providers, &settings, None).unwrap();
        assert_eq!(spec.name, "5b1a-east");
        assert_eq!(spec.origin, "ClusterProfile fleet/east");
        match &spec.access.way {
            Way::Kubeconfig {
                kubeconfig,
                service,
                ..
            } => {
                assert_eq!(service.as_ref().unwrap().1, "verdict");
                let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
                assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.2:6443"));
                let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
                assert_eq!(
                    user.exec.as_ref().unwrap().command.as_deref(),
                    Some("/bin/token")
                );
            }
            _ => panic!("{:?}", spec.access),
        }
        // No provider of the profile's is configured: a member that says why.
        let spec = from_profile(&p, &Providers::default(), &settings, None).unwrap();
        assert!(
            spec.access
                .describe()
                .contains("none of its access providers (other, token)"),
            "{:?}",
            spec.access
        );
        // A URL property: straight there.
        let mut with_url = p.clone();
        with_url.data["status"]["properties"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": VERDICT_URL, "value": "http://127.0.0.1:9/"}));
        let spec = from_profile(&with_url, &Providers::default(), &settings, Some("t")).unwrap();
        assert_eq!(spec.access.describe(), "http://127.0.0.1:9");
        assert!(
            !spec.access.same_as(
                &from_profile(&with_url, &Providers::default(), &settings, Some("u"))
                    .unwrap()
                    .access
            ),
            "another token is another access"
        );
        // Without a cluster id: the profile's name; a bad one is refused.
        let mut unnamed = p.clone();
        unnamed.data["status"]["properties"] = json!([]);
        assert_eq!(
            from_profile(&unnamed, &providers, &settings, None)
                .unwrap()
                .name,
            "east"
        );
        let mut bad = p;
        bad.data["status"]["properties"] = json!([{"name": CLUSTER_ID, "value": "a/b"}]);
        assert!(from_profile(&bad, &providers, &settings, None).is_err());
    }

    fn secret(data: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("cluster-east".into()),
                namespace: Some("argocd".into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            k8s_openapi::ByteString(v.as_bytes().to_vec()),
                        )
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn an_argocd_secret_is_a_kubeconfig() {
        let settings = Settings::default();
        let spec = from_argocd_secret(
            &secret(&[
                ("name", "east"),
                ("server", "https://east.example:6443"),
                (
                    "config",
                    r#"{"bearerToken":"abc","tlsClientConfig":{"insecure":false,"caData":"Q0E="}}"#,
                ),
            ]),
            &settings,
        )
        .unwrap();
        assert_eq!(spec.name, "east");
        match &spec.access.way {
            Way::Kubeconfig { kubeconfig, .. } => {
                let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
                assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0E="));
                let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
                assert!(user.token.is_some());
            }
            _ => panic!("{:?}", spec.access),
        }
        let inside = from_argocd_secret(
            &secret(&[
                ("name", "in-cluster"),
                ("server", "https://kubernetes.default.svc"),
            ]),
            &settings,
        )
        .unwrap();
        assert!(matches!(inside.access.way, Way::InCluster { .. }));
        let aws = from_argocd_secret(
            &secret(&[
                ("server", "https://x"),
                ("config", r#"{"awsAuthConfig":{"clusterName":"x"}}"#),
            ]),
            &settings,
        )
        .unwrap();
        assert_eq!(
            aws.name, "cluster-east",
            "the Secret's name without a `name`"
        );
        assert!(aws.access.describe().contains("awsAuthConfig"));
        let garbage = from_argocd_secret(
            &secret(&[("server", "https://x"), ("config", "{")]),
            &settings,
        )
        .unwrap();
        assert!(garbage.access.describe().contains("not JSON"));
    }

    #[test]
    fn static_members_are_checked() {
        let settings = Settings::default();
        let member = |name: &str, url: &str| StaticMember {
            name: name.into(),
            url: url.into(),
            token_file: None,
            ca_file: None,
            cluster_id: None,
        };
        let specs = configured(&[member("east", "http://127.0.0.1:1/")], &settings).unwrap();
        assert_eq!(specs[0].access.describe(), "http://127.0.0.1:1");
        for (m, says) in [
            (member("east", "ftp://x"), "not an http(s) URL"),
            (member("a b", "http://x"), "not a cluster name"),
            (member("east", "http://x?q=1"), "no query"),
        ] {
            let error = configured(&[m], &settings).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
        let twice = configured(
            &[member("e", "http://a"), member("e", "http://b")],
            &settings,
        );
        assert!(twice.unwrap_err().contains("named twice"));
    }

    #[test]
    fn a_service_proxy_path_says_https_where_verdict_serves_it() {
        let https = json!({"spec": {"ports": [{"name": "https", "port": 443}]}});
        assert_eq!(
            service_proxy_prefix("verdict-system", "verdict", &https),
            "/api/v1/namespaces/verdict-system/services/https:verdict:https/proxy"
        );
        let http = json!({"spec": {"ports": [{"port": 8080}]}});
        assert_eq!(
            service_proxy_prefix("v", "verdict", &http),
            "/api/v1/namespaces/v/services/verdict:8080/proxy"
        );
    }
}
