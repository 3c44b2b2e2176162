//! The HTTP side of the simulator: discovery, list (with label and field
//! selectors), watch streams, get, create, replace, merge patch and delete,
//! the Eviction API,
//! with Kubernetes `Status` errors.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use crate::resources::{self, Resource};
use crate::selector::Selector;
use crate::store::{Event, Part, Store, StoreError};
use crate::table;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct Shared {
    pub store: Arc<Store>,
    /// Changing this ends every open watch (a broken connection).
    pub cut: watch::Receiver<u64>,
    pub server: String,
    pub bookmark_every: Duration,
    /// Whether streaming lists are served ([`crate::Options`]).
    pub streaming_lists: bool,
    /// A kind whose watches' first events are held back ([`crate::Options`]).
    pub slow_list: Option<(&'static str, Duration)>,
    /// Streaming lists refused so far.
    pub refused: Arc<std::sync::atomic::AtomicU64>,
}

pub fn router(shared: Shared) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Params {
    watch: Option<String>,
    resource_version: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    allow_watch_bookmarks: Option<bool>,
    /// A streaming list: the current objects as `ADDED` events, then a
    /// bookmark that says they are all there.
    send_initial_events: Option<bool>,
    timeout_seconds: Option<u64>,
    limit: Option<usize>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error(e: &StoreError) -> Response {
    json_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::BAD_REQUEST),
        &e.status(),
    )
}

/// What a path names.
enum Target {
    Discovery(Value),
    Collection {
        resource: &'static Resource,
        namespace: Option<String>,
    },
    Item {
        resource: &'static Resource,
        namespace: String,
        name: String,
        part: Part,
    },
    /// `{plural}/{name}/scale` of a custom resource that has one.
    Scale {
        resource: &'static Resource,
        namespace: String,
        name: String,
    },
    /// `pods/{name}/eviction`: the Eviction API.
    Eviction {
        namespace: String,
        name: String,
    },
}

fn resolve(path: &str, server: &str, store: &Store) -> Result<Target, StoreError> {
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let not_found = || StoreError {
        code: 404,
        reason: "NotFound",
        message: format!("the server could not find the requested resource ({path})"),
    };
    let (group, version, rest): (&str, &str, &[&str]) = match parts.as_slice() {
        ["version"] => return Ok(Target::Discovery(resources::version())),
        ["openapi", "v3"] => {
            return Ok(Target::Discovery(crate::openapi::index(
                &store.resources(),
                store.version(),
            )));
        }
        ["openapi", "v3", "api", version] => {
            return crate::openapi::document(&store.resources(), "", version)
                .map(Target::Discovery)
                .ok_or_else(not_found);
        }
        ["openapi", "v3", "apis", group, version] => {
            return crate::openapi::document(&store.resources(), group, version)
                .map(Target::Discovery)
                .ok_or_else(not_found);
        }
        ["api"] => return Ok(Target::Discovery(resources::core_versions(server))),
        ["apis"] => return Ok(Target::Discovery(resources::groups(&store.resources()))),
        ["api", version, rest @ ..] => ("", version, rest),
        ["apis", group, version, rest @ ..] => (group, version, rest),
        _ => return Err(not_found()),
    };
    let find = |plural: &str| store.find(group, version, plural).ok_or_else(not_found);
    Ok(match rest {
        [] => Target::Discovery(
            resources::resource_list(&store.resources(), group, version).ok_or_else(not_found)?,
        ),
        [plural] => Target::Collection {
            resource: find(plural)?,
            namespace: None,
        },
        ["namespaces", namespace, plural] => Target::Collection {
            resource: find(plural)?,
            namespace: Some(namespace.to_string()),
        },
        ["namespaces", namespace, "pods", name, "eviction"] if group.is_empty() => {
            Target::Eviction {
                namespace: namespace.to_string(),
                name: name.to_string(),
            }
        }
        ["namespaces", namespace, plural, name] => Target::Item {
            resource: find(plural)?,
            namespace: namespace.to_string(),
            name: name.to_string(),
            part: Part::Object,
        },
        ["namespaces", namespace, plural, name, "scale"] if find(plural)?.scale.is_some() => {
            Target::Scale {
                resource: find(plural)?,
                namespace: namespace.to_string(),
                name: name.to_string(),
            }
        }
        ["namespaces", namespace, plural, name, "status"] => Target::Item {
            resource: find(plural)?,
            namespace: namespace.to_string(),
            name: name.to_string(),
            part: Part::Status,
        },
        [plural, name] => Target::Item {
            resource: find(plural)?,
            namespace: String::new(),
            name: name.to_string(),
            part: Part::Object,
        },
        [plural, name, "status"] => Target::Item {
            resource: find(plural)?,
            namespace: String::new(),
            name: name.to_string(),
            part: Part::Status,
        },
        _ => return Err(not_found()),
    })
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(rest) = uri.path().strip_prefix("/demo/health/") {
        return demo_health(&shared.store, rest);
    }
    let target = match resolve(uri.path(), &shared.server, &shared.store) {
        Ok(target) => target,
        Err(e) => return error(&e),
    };
    // The simulator speaks JSON: a protobuf body is refused as the API
    // server refuses a media type it does not decode, and clients that
    // can (client-go) send JSON again.
    let sent = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !body.is_empty() && sent.starts_with("application/vnd.kubernetes.protobuf") {
        return error(&StoreError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body is {sent}: this server decodes JSON only (application/json; \
                 `kubectl apply -f` and `kubectl create -f` send it)"
            ),
        });
    }
    let store = &shared.store;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let parse_body = || -> Result<Value, StoreError> {
        serde_json::from_slice(&body)
            .map_err(|e| StoreError::bad_request(format!("the body is not JSON: {e}")))
    };
    let outcome: Result<(StatusCode, Value), StoreError> = match (target, method) {
        (Target::Discovery(doc), Method::GET) => Ok((StatusCode::OK, doc)),
        (
            Target::Collection {
                resource,
                namespace,
            },
            Method::GET,
        ) => {
            let selector = match Selector::parse(
                params.label_selector.as_deref(),
                params.field_selector.as_deref(),
            ) {
                Ok(selector) => selector,
                Err(e) => return error(&StoreError::bad_request(e)),
            };
            if matches!(params.watch.as_deref(), Some("true" | "1")) {
                return watch_stream(
                    &shared,
                    resource,
                    namespace,
                    selector,
                    &params,
                    table::wanted(&accept),
                );
            }
            // Pages of `limit` items, continued after the last key returned.
            // Every page reports the version of the first: a watch from it
            // replays whatever changed while the pages were read, so nothing
            // is lost (the token is `version/namespace/name`).
            let (first_rv, after) = match params.continue_token.as_deref().filter(|t| !t.is_empty())
            {
                None => (None, None),
                Some(token) => {
                    let mut parts = token.splitn(3, '/');
                    match (
                        parts.next().and_then(|v| v.parse::<u64>().ok()),
                        parts.next(),
                        parts.next(),
                    ) {
                        (Some(rv), Some(ns), Some(name)) => {
                            (Some(rv), Some((ns.to_string(), name.to_string())))
                        }
                        _ => {
                            return error(&StoreError::bad_request(format!(
                                "invalid continue token {token}"
                            )));
                        }
                    }
                }
            };
            let limit = params.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
            let (items, next, current) =
                store.list_page(resource, namespace.as_deref(), after, limit, |o| {
                    selector.matches(o)
                });
            let rv = first_rv.unwrap_or(current);
            if table::wanted(&accept) {
                let columns = table::printer_columns(store, resource);
                return json_response(
                    StatusCode::OK,
                    &table::table(resource, &columns, &items, rv),
                );
            }
            let mut metadata = json!({ "resourceVersion": rv.to_string() });
            if let Some((ns, name)) = next {
                metadata["continue"] = json!(format!("{rv}/{ns}/{name}"));
            }
            Ok((
                StatusCode::OK,
                json!({
                    "kind": format!("{}List", resource.kind), "apiVersion": resource.api_version(),
                    "metadata": metadata, "items": items,
                }),
            ))
        }
        (
            Target::Collection {
                resource,
                namespace,
            },
            Method::POST,
        ) => parse_body().and_then(|mut object| {
            let namespace = namespace.unwrap_or_default();
            // A status that is a subresource is not set by a create.
            if resource.status_subresource
                && let Some(fields) = object.as_object_mut()
            {
                fields.remove("status");
            }
            store
                .create(resource, &namespace, object)
                .map(|o| (StatusCode::CREATED, o))
        }),
        (
            Target::Item {
                resource,
                namespace,
                name,
                ..
            },
            Method::GET,
        ) => store.get(resource, &namespace, &name).map(|o| {
            if table::wanted(&accept) {
                (
                    StatusCode::OK,
                    table::table(
                        resource,
                        &table::printer_columns(store, resource),
                        std::slice::from_ref(&o),
                        store.version(),
                    ),
                )
            } else {
                (StatusCode::OK, o)
            }
        }),
        (
            Target::Item {
                resource,
                namespace,
                name,
                part,
            },
            Method::PUT,
        ) => parse_body()
            .and_then(|object| store.write(resource, &namespace, &name, object, part))
            .map(|o| (StatusCode::OK, o)),
        (
            Target::Item {
                resource,
                namespace,
                name,
                part,
            },
            Method::PATCH,
        ) => {
            let kind = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            // Strategic merge patches of these kinds' fields behave as merge
            // patches for what the simulator is used for.
            if kind.starts_with("application/json-patch+json") {
                parse_body()
                    .and_then(|body| {
                        serde_json::from_value::<json_patch::Patch>(body).map_err(|error| {
                            StoreError::bad_request(format!("not a JSON patch: {error}"))
                        })
                    })
                    .and_then(|patch| {
                        store.json_patch_part(resource, &namespace, &name, &patch, part)
                    })
                    .map(|o| (StatusCode::OK, o))
            } else if kind.starts_with("application/apply-patch") {
                // Server-side apply, as far as the simulator goes: the
                // object made when missing, else the applied fields merged
                // in (fields a manager stops applying are not removed).
                parse_body().and_then(|body| match store.get(resource, &namespace, &name) {
                    Err(e) if e.code == 404 && part == Part::Object => store
                        .create(resource, &namespace, body)
                        .map(|o| (StatusCode::CREATED, o)),
                    Err(e) => Err(e),
                    Ok(_) => store
                        .patch_part(resource, &namespace, &name, &body, part)
                        .map(|o| (StatusCode::OK, o)),
                })
            } else {
                parse_body()
                    .and_then(|patch| store.patch_part(resource, &namespace, &name, &patch, part))
                    .map(|o| (StatusCode::OK, o))
            }
        }
        (
            Target::Item {
                resource,
                namespace,
                name,
                ..
            },
            Method::DELETE,
        ) => store
            .delete(resource, &namespace, &name)
            .map(|o| (StatusCode::OK, o)),
        (
            Target::Scale {
                resource,
                namespace,
                name,
            },
            Method::GET,
        ) => store
            .get(resource, &namespace, &name)
            .map(|o| (StatusCode::OK, crate::scale::of(resource, &o))),
        (
            Target::Scale {
                resource,
                namespace,
                name,
            },
            Method::PUT | Method::PATCH,
        ) => parse_body()
            .and_then(|body| crate::scale::write(store, resource, &namespace, &name, &body))
            .map(|o| (StatusCode::OK, o)),
        (Target::Eviction { namespace, name }, Method::POST) => {
            crate::eviction::evict(store, &namespace, &name)
                .map(|status| (StatusCode::CREATED, status))
        }
        (_, method) => Err(StoreError {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!("{method} is not supported here"),
        }),
    };
    match outcome {
        Ok((code, body)) => json_response(code, &body),
        Err(e) => error(&e),
    }
}

/// The annotation a scenario sets on a workload to make its demo health
/// endpoint fail.
pub const DEMO_HEALTH: &str = "verdict.dev/demo-health";

/// `/demo/health/{namespace}/{name}`: a health endpoint for the demo's apps,
/// failing (503) while the workload `name` is annotated
/// `verdict.dev/demo-health: failing`, else answering 200.
fn demo_health(store: &Store, rest: &str) -> Response {
    let Some((namespace, name)) = rest.split_once('/') else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let workload = ["deployments", "statefulsets", "daemonsets"]
        .iter()
        .filter_map(|plural| resources::find("apps", "v1", plural))
        .find_map(|r| store.get(r, namespace, name).ok());
    match workload {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(w)
            if w.pointer(&format!(
                "/metadata/annotations/{}",
                DEMO_HEALTH.replace('/', "~1")
            ))
            .and_then(Value::as_str)
                == Some("failing") =>
        {
            (StatusCode::SERVICE_UNAVAILABLE, "failing").into_response()
        }
        Some(_) => (StatusCode::OK, "ok").into_response(),
    }
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({ "type": kind, "object": object }).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn visible(
    event: &Event,
    resource: &Resource,
    namespace: Option<&str>,
    selector: &Selector,
) -> bool {
    event.resource == resource
        && namespace.is_none_or(|n| n == event.namespace)
        && selector.matches(&event.object)
}

/// A watch: replay from the asked version (or the current state), then live
/// events, bookmarks when asked, until the timeout or a cut.
fn watch_stream(
    shared: &Shared,
    resource: &'static Resource,
    namespace: Option<String>,
    selector: Selector,
    params: &Params,
    as_table: bool,
) -> Response {
    // kubectl watches in tables too: each event then carries a one-row table.
    let columns = table::printer_columns(&shared.store, resource);
    let render = move |kind: &str, object: &Value, rv: u64| {
        if as_table {
            line(
                kind,
                &table::table(resource, &columns, std::slice::from_ref(object), rv),
            )
        } else {
            line(kind, object)
        }
    };
    if params.send_initial_events == Some(true) && !shared.streaming_lists {
        shared
            .refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let refused = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422,
            "reason": "Invalid",
            "message": "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        });
        return json_response(StatusCode::UNPROCESSABLE_ENTITY, &refused);
    }
    let store = Arc::clone(&shared.store);
    // Subscribe before reading, so that nothing falls between the two.
    let mut live = store.subscribe();
    let mut first: Vec<Bytes> = Vec::new();
    let mut last = 0;
    // A version the log no longer holds ends the watch after its error.
    let mut gone = false;
    match params
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty() && *v != "0")
    {
        None => {
            let (items, rv) = store.list(resource, namespace.as_deref());
            first.extend(
                items
                    .iter()
                    .filter(|o| selector.matches(o))
                    .map(|o| render("ADDED", o, rv)),
            );
            last = rv;
            if params.send_initial_events == Some(true) {
                let end = json!({
                    "kind": resource.kind, "apiVersion": resource.api_version(),
                    "metadata": {"resourceVersion": rv.to_string(),
                        "annotations": {"k8s.io/initial-events-end": "true"}},
                });
                first.push(line("BOOKMARK", &end));
            }
        }
        Some(text) => match text.parse::<u64>() {
            Err(_) => {
                return error(&StoreError::bad_request(format!(
                    "invalid resourceVersion {text}"
                )));
            }
            Ok(since) => match store.since(since) {
                Ok(events) => {
                    last = since;
                    for event in events {
                        last = event.rv;
                        if visible(&event, resource, namespace.as_deref(), &selector) {
                            first.push(render(event.kind.as_str(), &event.object, event.rv));
                        }
                    }
                }
                Err(expired) => {
                    first.push(line("ERROR", &expired.status()));
                    gone = true;
                }
            },
        },
    }
    let bookmarks = params.allow_watch_bookmarks.unwrap_or(false);
    let timeout = params.timeout_seconds.map(Duration::from_secs);
    let bookmark_every = shared.bookmark_every;
    let mut cut = shared.cut.clone();
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let hold = shared
        .slow_list
        .filter(|(plural, _)| *plural == resource.plural)
        .map(|(_, hold)| hold);
    tokio::spawn(async move {
        if let Some(hold) = hold {
            tokio::time::sleep(hold).await;
        }
        for bytes in first {
            if tx.send(bytes).await.is_err() {
                return;
            }
        }
        if gone {
            return;
        }
        let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(3600)));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(bookmark_every);
        tick.tick().await;
        let _ = cut.borrow_and_update();
        loop {
            tokio::select! {
                received = live.recv() => match received {
                    Ok(event) => {
                        if event.rv <= last {
                            continue;
                        }
                        last = event.rv;
                        if visible(&event, resource, namespace.as_deref(), &selector)
                            && tx.send(render(event.kind.as_str(), &event.object, event.rv)).await.is_err()
                        {
                            return;
                        }
                    }
                    // A watcher that fell behind is cut off; it resumes from
                    // its last version and the log replays what it missed.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    let object = json!({
                        "kind": resource.kind, "apiVersion": resource.api_version(),
                        "metadata": { "resourceVersion": store.version().to_string() },
                    });
                    if tx.send(line("BOOKMARK", &object)).await.is_err() {
                        return;
                    }
                }
                _ = &mut deadline => return,
                _ = cut.changed() => return,
            }
        }
    });
    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<Bytes, Infallible>));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
