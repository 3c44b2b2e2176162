//! The requests this process makes of the Kubernetes API server, counted
//! by verb, for `/metrics`: a watch is one request for as long as it runs,
//! and a controller at rest makes none beyond its watches.

use std::collections::BTreeMap;
use std::sync::Mutex;

use axum::http::{Method, Request};

/// The requests made so far, by verb.
static MADE: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// The requests made so far by this process, by verb (`get`, `list`,
/// `watch`, `create`, `update`, `patch`, `delete`).
pub fn made() -> BTreeMap<&'static str, u64> {
    MADE.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// `client`, each of its requests counted.
pub fn counted(client: kube::Client) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let client = client.clone();
        async move {
            *MADE
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(verb(&request))
                .or_insert(0) += 1;
            client.send(request).await
        }
    });
    kube::Client::new(service, namespace)
}

/// A request's verb, as the API server's audit names it.
fn verb<B>(request: &Request<B>) -> &'static str {
    let query = request.uri().query().unwrap_or_default();
    let watching = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1");
    match *request.method() {
        Method::GET if watching => "watch",
        // A collection's path ends in its resource's plural: an even
        // number of segments after the group and version (`/api/v1/pods`,
        // `/api/v1/namespaces/x/pods`; `/apis/g/v1/…` one more).
        Method::GET => {
            let segments = request
                .uri()
                .path()
                .split('/')
                .filter(|s| !s.is_empty())
                .count();
            let collection = match request.uri().path().starts_with("/apis/") {
                true => segments % 2 == 0,
                false => segments % 2 == 1,
            };
            match collection {
                true => "list",
                false => "get",
            }
        }
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_counted_by_the_verb_the_api_server_sees() {
        let of = |method: Method, uri: &str| {
            verb(&Request::builder().method(method).uri(uri).body(()).unwrap())
        };
        assert_eq!(of(Method::GET, "/api/v1/pods"), "list");
        assert_eq!(of(Method::GET, "/api/v1/namespaces/x/pods"), "list");
        assert_eq!(of(Method::GET, "/api/v1/namespaces/x/pods/p"), "get");
        assert_eq!(of(Method::GET, "/api/v1/nodes/n"), "get");
        assert_eq!(
            of(Method::GET, "/apis/kubevirt.io/v1/virtualmachines"),
            "list"
        );
        assert_eq!(
            of(
                Method::GET,
                "/apis/kubevirt.io/v1/namespaces/x/virtualmachines"
            ),
            "list"
        );
        assert_eq!(
            of(
                Method::GET,
                "/apis/kubevirt.io/v1/namespaces/x/virtualmachines/vm"
            ),
            "get"
        );
        assert_eq!(
            of(
                Method::GET,
                "/apis/verdict.dev/v1alpha1/namespaces/x/vmreplicasets?watch=true&resourceVersion=4"
            ),
            "watch"
        );
        assert_eq!(
            of(Method::PATCH, "/api/v1/namespaces/x/pods/p/status"),
            "patch"
        );
        assert_eq!(of(Method::POST, "/api/v1/namespaces/x/pods"), "create");
        assert_eq!(of(Method::DELETE, "/api/v1/namespaces/x/pods/p"), "delete");
    }
}
