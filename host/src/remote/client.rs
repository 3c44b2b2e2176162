//! One client to reach a verdict from a terminal — the kubectl plugin and
//! `verdict history` — directly at a URL or behind its Service through the
//! API server's service proxy. It is the fleet's own connection to its
//! members ([`crate::fleet::follow::Conn`]), run to completion: the same
//! bounds (answers of 64 MiB here), timeouts, Service lookup and reading of
//! errors (in the words of whoever refused: verdict's, the API server's),
//! every text a server sends escaped before it is shown, and a 403 blamed
//! on RBAC only when the API server says the user lacks the right.

use axum::http::Method;
use serde_json::Value;

use super::kubectl::Target;
use crate::error::{Error, Result};
use crate::fleet::follow::{Conn, connect_to};
use crate::fleet::members::Access;
use crate::text::printable;

/// A verdict, reached.
pub(crate) struct Client {
    runtime: tokio::runtime::Runtime,
    conn: Conn,
    /// Where it is, for people: its URL, or its Service.
    label: String,
    /// `NAMESPACE/NAME` of its Service, when it is reached behind it.
    service: Option<String>,
    /// The kubeconfig's user, when there is one.
    user: Option<String>,
}

impl Client {
    /// To verdict at `url`, with a bearer token.
    pub(crate) fn direct(url: &str, token: Option<String>) -> Result<Self> {
        let access = Access::at_url(url, token.as_deref());
        Self::reach(
            access,
            &kube::config::KubeConfigOptions::default(),
            url.trim_end_matches('/'),
            None,
        )
    }

    /// To verdict as `target` says: at `--server`, else behind its
    /// Service through the API server of the kubeconfig.
    pub(crate) fn new(target: &Target) -> Result<Self> {
        if let Some(url) = &target.server {
            let mut client = Self::direct(url, target.token.clone())?;
            client.user = kubeconfig_user(target);
            return Ok(client);
        }
        let service = target
            .service
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
            .map(|(ns, name)| (ns.to_string(), name.to_string()))
            .ok_or_else(|| Error::Config {
                key: "service",
                message: format!("`{}` is not `namespace/name`", target.service),
            })?;
        let kubeconfig = match &target.kubeconfig {
            Some(path) => kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("{}: {e}", path.display())),
            None => kube::config::Kubeconfig::read().map_err(|e| e.to_string()),
        }
        .map_err(|message| Error::Config {
            key: "kubeconfig",
            message,
        })?;
        let options = kube::config::KubeConfigOptions {
            context: target.context.clone(),
            ..Default::default()
        };
        let mut client = Self::reach(
            Access::behind_service(kubeconfig, service),
            &options,
            &target.service,
            Some(target.service.clone()),
        )?;
        client.user = kubeconfig_user(target);
        Ok(client)
    }

    fn reach(
        access: Access,
        options: &kube::config::KubeConfigOptions,
        label: &str,
        service: Option<String>,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::AsyncRuntime)?;
        let conn = runtime
            .block_on(connect_to(&access, options))
            .map_err(|message| remote(label, format!("cannot be reached: {message}")))?;
        Ok(Self {
            runtime,
            conn,
            label: label.to_string(),
            service,
            user: None,
        })
    }

    /// The namespace commands default to: the kubeconfig context's
    /// (`default` with `--server`).
    pub(crate) fn namespace(&self) -> &str {
        if self.service.is_some() {
            self.conn.namespace()
        } else {
            "default"
        }
    }

    /// Who asks, by default: the kubeconfig's user.
    pub(crate) fn user(&self) -> Option<String> {
        self.user.clone()
    }

    /// A request to verdict: its JSON answer, or the error it answered.
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let method = Method::from_bytes(method.as_bytes()).expect("a method of this module");
        let body = body.map(|b| b.to_string().into_bytes());
        let answer = self
            .runtime
            .block_on(self.conn.send(method.clone(), path, body, MAX_ANSWER, &[]))
            .map_err(|message| remote(&self.label, format!("cannot be reached: {message}")))?;
        let code = answer.status.as_u16();
        if !answer.status.is_success() {
            let mut message = crate::text::error_text(&answer.body);
            if code == 403 && self.lacks_proxy_access(method.as_str()) {
                message.push_str(
                    " (the plugin reaches verdict through services/proxy: your role needs `get` and `create` on it)",
                );
            }
            return Err(remote(&self.label, format!("{code}: {message}")));
        }
        serde_json::from_slice(&answer.body)
            .map_err(|e| remote(&self.label, format!("answered {code} with no JSON: {e}")))
    }

    pub(crate) fn get(&self, path: &str) -> Result<Value> {
        self.call("GET", path, None)
    }

    /// Whether the API server says the user may not reach verdict's
    /// Service through its proxy with `method` (a SelfSubjectAccessReview):
    /// only then is a 403 blamed on RBAC. A review that cannot be made
    /// says nothing.
    fn lacks_proxy_access(&self, method: &str) -> bool {
        let Some(service) = &self.service else {
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
        let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(self.conn.client().clone());
        self.runtime
            .block_on(api.create(&kube::api::PostParams::default(), &review))
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| !s.allowed)
    }
}

/// The largest answer the plugin reads: past it, an error, not a
/// terminal (or memory) filled by a server that never stops.
const MAX_ANSWER: usize = 64 << 20;

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
