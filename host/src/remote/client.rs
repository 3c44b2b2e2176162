//! One client to reach a verdict from a terminal — the kubectl plugin and
//! `verdict history` — directly at a URL or behind its Service through the
//! API server's service proxy: answers bounded (64 MiB), errors in the
//! words of whoever refused (verdict's, the API server's), every text a
//! server sends escaped before it is shown, a 403 blamed on RBAC only when
//! the API server says the user lacks the right. The fleet follows its
//! members with the same bounds, error reading and escaping
//! ([`crate::text`]) over its own long-lived streams.

use std::time::Duration;

use serde_json::Value;

use super::kubectl::Target;
use super::segment;
use crate::error::{Error, Result};
use crate::text::printable;

/// How requests reach verdict.
pub(crate) enum Client {
    /// Over HTTP(S) to a URL.
    Direct {
        base: String,
        token: Option<String>,
        client: reqwest::blocking::Client,
        /// The kubeconfig's user, when there is one.
        user: Option<String>,
    },
    /// Through the API server's service proxy, as the kubeconfig's user.
    Proxy {
        runtime: tokio::runtime::Runtime,
        client: kube::Client,
        /// `/api/v1/namespaces/NS/services/[https:]NAME:PORT/proxy`.
        prefix: String,
        service: String,
        user: Option<String>,
        namespace: String,
    },
}

impl Client {
    /// To verdict at `url`, with a bearer token.
    pub(crate) fn direct(url: &str, token: Option<String>) -> Result<Self> {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| remote(url, e.to_string()))?;
        Ok(Client::Direct {
            base: url.trim_end_matches('/').to_string(),
            token,
            client,
            user: None,
        })
    }

    /// To verdict as `target` says: at `--server`, else behind its
    /// Service through the API server of the kubeconfig.
    pub(crate) fn new(target: &Target) -> Result<Self> {
        if let Some(url) = &target.server {
            let mut client = Self::direct(url, target.token.clone())?;
            if let Client::Direct { user, .. } = &mut client {
                *user = kubeconfig_user(target);
            }
            return Ok(client);
        }
        let (namespace, name) = target
            .service
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
            .ok_or_else(|| Error::Config {
                key: "service",
                message: format!("`{}` is not `namespace/name`", target.service),
            })?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::AsyncRuntime)?;
        let options = kube::config::KubeConfigOptions {
            context: target.context.clone(),
            ..Default::default()
        };
        let (client, user, context_namespace) = runtime
            .block_on(async {
                let config = match &target.kubeconfig {
                    Some(path) => {
                        let file = kube::config::Kubeconfig::read_from(path)
                            .map_err(|e| format!("{}: {e}", path.display()))?;
                        kube::Config::from_custom_kubeconfig(file, &options)
                            .await
                            .map_err(|e| e.to_string())?
                    }
                    None if target.context.is_some() => kube::Config::from_kubeconfig(&options)
                        .await
                        .map_err(|e| e.to_string())?,
                    None => kube::Config::infer().await.map_err(|e| e.to_string())?,
                };
                let mut config = config;
                // A person waits at the terminal: an answer at once, not
                // the client's retries of a 503 for minutes.
                config.default_retry = false;
                let user = kubeconfig_user(target);
                let context_namespace = config.default_namespace.clone();
                let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
                Ok::<_, String>((client, user, context_namespace))
            })
            .map_err(|message| Error::Config {
                key: "kubeconfig",
                message,
            })?;
        // The Service's port, and whether verdict serves HTTPS behind it.
        let path = format!(
            "/api/v1/namespaces/{}/services/{}",
            segment(namespace),
            segment(name)
        );
        let service: Value = runtime
            .block_on(async {
                let request = axum::http::Request::get(&path)
                    .body(Vec::new())
                    .map_err(|e| e.to_string())?;
                client.request::<Value>(request).await.map_err(|e| match e {
                    kube::Error::Api(status) => status.message.clone(),
                    other => other.to_string(),
                })
            })
            .map_err(|message| {
                remote(
                    &target.service,
                    format!("verdict's Service could not be read: {message}"),
                )
            })?;
        let prefix = crate::fleet::members::service_proxy_prefix(namespace, name, &service);
        Ok(Client::Proxy {
            runtime,
            client,
            prefix,
            service: target.service.clone(),
            user,
            namespace: context_namespace,
        })
    }

    pub(crate) fn label(&self) -> &str {
        match self {
            Client::Direct { base, .. } => base,
            Client::Proxy { service, .. } => service,
        }
    }

    /// The namespace commands default to: the kubeconfig context's.
    pub(crate) fn namespace(&self) -> &str {
        match self {
            Client::Direct { .. } => "default",
            Client::Proxy { namespace, .. } => namespace,
        }
    }

    /// Who asks, by default: the kubeconfig's user.
    pub(crate) fn user(&self) -> Option<String> {
        match self {
            Client::Proxy { user, .. } | Client::Direct { user, .. } => user.clone(),
        }
    }

    /// A request to verdict: its JSON answer, or the error it answered.
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let (code, bytes) = match self {
            Client::Direct {
                base,
                token,
                client,
                ..
            } => {
                let method = reqwest::Method::from_bytes(method.as_bytes())
                    .expect("a method of this module");
                let mut request = client.request(method, format!("{base}{path}"));
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                if let Some(body) = body {
                    request = request.json(body);
                }
                let response = request
                    .send()
                    .map_err(|e| remote(base, format!("cannot be reached: {e}")))?;
                let code = response.status().as_u16();
                let mut bytes = Vec::new();
                use std::io::Read as _;
                response
                    .take(MAX_ANSWER as u64 + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| remote(base, format!("answer cut off: {e}")))?;
                if bytes.len() > MAX_ANSWER {
                    return Err(remote(base, too_long()));
                }
                (code, bytes)
            }
            Client::Proxy {
                runtime,
                client,
                prefix,
                service,
                ..
            } => runtime
                .block_on(async {
                    let request = axum::http::Request::builder()
                        .method(method)
                        .uri(format!("{prefix}{path}"))
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(
                            body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
                        ))
                        .map_err(|e| e.to_string())?;
                    let response = client.send(request).await.map_err(|e| e.to_string())?;
                    let code = response.status().as_u16();
                    use http_body_util::BodyExt as _;
                    let bytes = http_body_util::Limited::new(response.into_body(), MAX_ANSWER)
                        .collect()
                        .await
                        .map_err(|e| {
                            if e.is::<http_body_util::LengthLimitError>() {
                                too_long()
                            } else {
                                e.to_string()
                            }
                        })?
                        .to_bytes();
                    Ok::<_, String>((code, bytes.to_vec()))
                })
                .map_err(|message| remote(service, format!("cannot be reached: {message}")))?,
        };
        if !(200..300).contains(&code) {
            let mut message = crate::text::error_text(&bytes);
            if code == 403 && self.lacks_proxy_access(method) {
                message.push_str(
                    " (the plugin reaches verdict through services/proxy: your role needs `get` and `create` on it)",
                );
            }
            return Err(remote(self.label(), format!("{code}: {message}")));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| remote(self.label(), format!("answered {code} with no JSON: {e}")))
    }

    pub(crate) fn get(&self, path: &str) -> Result<Value> {
        self.call("GET", path, None)
    }

    /// Whether the API server says the user may not reach verdict's
    /// Service through its proxy with `method` (a SelfSubjectAccessReview):
    /// only then is a 403 blamed on RBAC. A review that cannot be made
    /// says nothing.
    fn lacks_proxy_access(&self, method: &str) -> bool {
        let Client::Proxy {
            runtime,
            client,
            service,
            ..
        } = self
        else {
            return false;
        };
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let Some((namespace, name)) = service.split_once('/') else {
            return false;
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_string()),
                    verb: Some(if method == "GET" { "get" } else { "create" }.into()),
                    resource: Some("services".into()),
                    subresource: Some("proxy".into()),
                    name: Some(name.to_string()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
        runtime
            .block_on(api.create(&kube::api::PostParams::default(), &review))
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| !s.allowed)
    }
}

/// The largest answer the plugin reads: past it, an error, not a
/// terminal (or memory) filled by a server that never stops.
const MAX_ANSWER: usize = 64 << 20;

fn too_long() -> String {
    format!("the answer is over {} MiB: not read", MAX_ANSWER >> 20)
}

/// Who is asking when `--by` does not say: the kubeconfig's user, else the
/// login name (`USER`, `LOGNAME`, else the password file's name of this
/// process's user).
pub(crate) fn login_name() -> Option<String> {
    std::env::var("USER")
        .ok()
        .or_else(|| std::env::var("LOGNAME").ok())
        .filter(|n| !n.trim().is_empty())
        .or_else(|| {
            let uid = rustix::process::getuid().as_raw().to_string();
            let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
            passwd.lines().find_map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                (fields.get(2) == Some(&uid.as_str())).then(|| fields[0].to_string())
            })
        })
}

fn remote(url: &str, message: String) -> Error {
    Error::Remote {
        url: printable(url),
        message: printable(&message),
    }
}

/// The kubeconfig's user of the context in use, where it says one.
fn kubeconfig_user(target: &Target) -> Option<String> {
    let file = match &target.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path).ok()?,
        None => kube::config::Kubeconfig::read().ok()?,
    };
    let context = target
        .context
        .clone()
        .or_else(|| file.current_context.clone())?;
    file.contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .user
        .clone()
}
