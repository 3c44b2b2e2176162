//! The HTTP surface: versioned JSON under `/v1`, and `/healthz`. Errors are
//! JSON (`{"error": {"code", "message"}}`) with the right status; internals
//! never leak into them.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::admission::Admission;
use crate::observe::cluster::Observed;
use crate::plugins::{PluginStatus, Registry, ReloadReport};
use crate::tasks::model::{Decision, NewTask, TaskPatch};
use crate::tasks::{Denial, Filter, Refusal, Task, TaskError, Tasks};
use crate::verdicts::live::{AppStatus, Verdicts};
use crate::verdicts::view::WitName;

/// The live side of the host: the observed cluster and its verdicts.
#[derive(Debug, Clone)]
pub struct Live {
    pub observed: Arc<Observed>,
    pub verdicts: Arc<Verdicts>,
    pub stale_after: std::time::Duration,
}

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    pub registry: Arc<Registry>,
    /// `None` when the host follows no cluster.
    pub live: Option<Live>,
    pub tasks: Arc<Tasks>,
    pub admission: Admission,
    pub events: Arc<crate::events::Events>,
    /// `None` when the host follows no cluster.
    pub failover: Option<Arc<crate::failover::Failover>>,
    /// How often an idle event stream gets a heartbeat.
    pub heartbeat: std::time::Duration,
    pub tokens: Arc<crate::access::Tokens>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The largest request body taken.
    pub body_limit: usize,
    /// How long a request may take to be answered.
    pub request_timeout: std::time::Duration,
    /// Turns true when the host shuts down: event streams end then.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// An error answered as JSON.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The request field at fault, when one is.
    pub field: Option<String>,
    /// More members of the error object.
    pub details: serde_json::Map<String, Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            details: serde_json::Map::new(),
        }
    }

    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", message);
        error.field = Some(field.into());
        error
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = self.details;
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.into());
        if let Some(field) = self.field {
            error.insert("field".into(), field.into());
        }
        (self.status, Json(json!({ "error": error }))).into_response()
    }
}

impl From<TaskError> for ApiError {
    fn from(error: TaskError) -> Self {
        match error {
            TaskError::Refused(Refusal::Invalid { field, message }) => {
                ApiError::invalid(field.clone(), format!("{field}: {message}"))
            }
            TaskError::Refused(Refusal::Conflict(message)) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", message)
            }
            TaskError::Denied(Denial::Denied {
                reason,
                warnings,
                policy,
            }) => {
                let mut error = ApiError::new(StatusCode::FORBIDDEN, "denied", reason);
                error.details.insert("warnings".into(), json!(warnings));
                error.details.insert("policy".into(), json!(policy));
                error
            }
            TaskError::Denied(Denial::Unavailable(message)) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "admission-unavailable",
                message,
            ),
            TaskError::NotFound(id) => ApiError::new(
                StatusCode::NOT_FOUND,
                "no-such-task",
                format!("no task {id}"),
            ),
            // The detail (a database path, an API server's answer) goes to
            // the log, under the request's id; the client gets the id.
            TaskError::Store(error) => {
                tracing::error!(%error, "task store failed");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store-failed",
                    "the task store failed; the server's log has the detail under this request's id",
                )
            }
        }
    }
}

/// A JSON body: not JSON is a 400, a wrong field a 422 naming it. An empty
/// body reads as `{}` where `empty_ok`.
fn body<T: DeserializeOwned>(bytes: &Bytes, empty_ok: bool) -> Result<T, ApiError> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) && empty_ok {
        b"{}"
    } else {
        bytes
    };
    // Syntax first, so that a body that is not JSON is told apart from a
    // JSON body of the wrong shape.
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-json",
            format!("the body is not JSON: {e}"),
        )
    })?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.inner();
        let path = e.path().to_string();
        let field = if path == "." {
            // serde names a missing or unknown field only in its message.
            let message = inner.to_string();
            message
                .split('`')
                .nth(1)
                .map_or_else(|| "body".to_string(), str::to_string)
        } else {
            path
        };
        ApiError::invalid(field.clone(), format!("{field}: {inner}"))
    })
}

/// Errors the HTTP layers answer themselves (a body over the limit, a
/// request past its time, a query or path that does not parse, a method
/// not allowed) in the same JSON form as every other error.
async fn json_errors(response: Response) -> Response {
    let json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let status = response.status();
    if !json
        && (status.is_client_error() || status.is_server_error())
        && !matches!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
        )
    {
        // The extractors' rejections: a line of text that says what is wrong.
        let text = axum::body::to_bytes(response.into_body(), 16 * 1024)
            .await
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
        let code = match status {
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "invalid-request",
            StatusCode::NOT_FOUND => "not-found",
            StatusCode::METHOD_NOT_ALLOWED => "method-not-allowed",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported-media-type",
            _ => "error",
        };
        let message = if text.is_empty() {
            status.canonical_reason().unwrap_or("error").to_string()
        } else {
            text
        };
        return ApiError::new(status, code, message).into_response();
    }
    match status {
        StatusCode::PAYLOAD_TOO_LARGE if !json => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "the request body is over the limit (--body-limit-kib)",
        )
        .into_response(),
        StatusCode::REQUEST_TIMEOUT if !json => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "the request was not answered in time (--request-timeout-ms)",
        )
        .into_response(),
        _ => response,
    }
}

/// Which answers the request log counts as failures (logged as errors):
/// server errors, except `/readyz` saying 503 — a host that is not ready
/// yet (starting, a watch broken) answers so by design.
#[derive(Debug, Clone, Copy)]
struct NotReadyIsAnAnswer;

/// The classifier of one request.
#[derive(Debug, Clone, Copy)]
enum Classify {
    ServerErrors,
    Readiness,
}

impl tower_http::classify::MakeClassifier for NotReadyIsAnAnswer {
    type Classifier = Classify;
    type FailureClass = tower_http::classify::ServerErrorsFailureClass;
    type ClassifyEos =
        tower_http::classify::NeverClassifyEos<tower_http::classify::ServerErrorsFailureClass>;

    fn make_classifier<B>(&self, request: &axum::http::Request<B>) -> Classify {
        if request.uri().path() == "/readyz" {
            Classify::Readiness
        } else {
            Classify::ServerErrors
        }
    }
}

impl tower_http::classify::ClassifyResponse for Classify {
    type FailureClass = tower_http::classify::ServerErrorsFailureClass;
    type ClassifyEos =
        tower_http::classify::NeverClassifyEos<tower_http::classify::ServerErrorsFailureClass>;

    fn classify_response<B>(
        self,
        response: &axum::http::Response<B>,
    ) -> tower_http::classify::ClassifiedResponse<Self::FailureClass, Self::ClassifyEos> {
        use tower_http::classify::ClassifiedResponse;
        let not_ready = response.status() == StatusCode::SERVICE_UNAVAILABLE;
        match self {
            Classify::Readiness if not_ready => ClassifiedResponse::Ready(Ok(())),
            _ => tower_http::classify::ServerErrorsAsFailures::new().classify_response(response),
        }
    }

    fn classify_error<E: std::fmt::Display + 'static>(self, error: &E) -> Self::FailureClass {
        tower_http::classify::ServerErrorsAsFailures::new().classify_error(error)
    }
}

/// The document's own parts: verdict's name, version and licence (not the
/// generator's), the bearer tokens, and the error answers every operation
/// can give (a request that does not parse, a change refused by the
/// access rules).
fn describe(api: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::security::{
        HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
    };
    use utoipa::openapi::{ContentBuilder, LicenseBuilder, ResponseBuilder};
    api.info.title = "verdict".into();
    api.info.version = env!("CARGO_PKG_VERSION").into();
    api.info.description =
        Some("Hot-swappable WebAssembly policies over a Kubernetes cluster.".into());
    api.info.contact = None;
    api.info.license = Some(
        LicenseBuilder::new()
            .name("Apache-2.0")
            .identifier(Some("Apache-2.0"))
            .build(),
    );
    let components = api.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "A read or write token (--read-tokens-file, --write-tokens-file); none is needed when no token is configured",
                ))
                .build(),
        ),
    );
    // Tokens are optional: without any configured, everything is open.
    api.security = Some(vec![
        SecurityRequirement::default(),
        SecurityRequirement::new("bearer", Vec::<String>::new()),
    ]);
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("ApiErrorBody")))
                    .build(),
            )
            .build()
    };
    components.schemas.insert(
        "ApiErrorBody".into(),
        utoipa::openapi::RefOr::T(error_schema()),
    );
    components.schemas.insert(
        "AdmissionReview".into(),
        utoipa::openapi::RefOr::T(admission_review_schema()),
    );
    if let Some(body) = api
        .paths
        .paths
        .get_mut("/v1/admission/review")
        .and_then(|item| item.post.as_mut())
        .and_then(|operation| operation.request_body.as_mut())
    {
        body.required = Some(utoipa::openapi::Required::True);
        body.content.insert(
            "application/json".into(),
            ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name(
                    "AdmissionReview",
                )))
                .build(),
        );
    }
    // Any 64-bit id is taken (one never issued gets a `resync`), not only
    // the 63 bits the generator's `int64` would say.
    if let Some(parameter) = api
        .paths
        .paths
        .get_mut("/v1/events")
        .and_then(|item| item.get.as_mut())
        .and_then(|operation| operation.parameters.as_mut())
        .and_then(|parameters| parameters.iter_mut().find(|p| p.name == "last-event-id"))
    {
        parameter.schema =
            serde_json::from_value(json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}))
                .ok();
    }
    for (path, item) in api.paths.paths.iter_mut() {
        let named = path.contains('{');
        for operation in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
        {
            let with_body = operation.request_body.is_some();
            let responses = &mut operation.responses.responses;
            for (code, description, applies) in [
                (
                    "400",
                    "The request does not parse (query, path, header or body)",
                    true,
                ),
                ("401", "A token is needed", true),
                (
                    "403",
                    "The token does not allow it, or a change came from another origin",
                    true,
                ),
                ("404", "Nothing of that name", named),
                ("415", "The body is not JSON", with_body),
                ("414", "The URI is longer than 8 KiB", true),
                ("422", "A field is out of bounds or unknown, named", true),
                ("431", "The header fields are larger than 64 KiB", true),
            ] {
                if applies {
                    responses
                        .entry(code.into())
                        .or_insert_with(|| error(description).into());
                }
            }
        }
    }
}

/// What the webhook takes: an `admission.k8s.io` AdmissionReview with a
/// request, in the parts the host reads (the API server sends more).
fn admission_review_schema() -> utoipa::openapi::schema::Schema {
    let text = json!({"type": "string"});
    let optional = json!({"type": ["string", "null"]});
    let names = json!({
        "type": ["object", "null"],
        "additionalProperties": {"type": "string"},
    });
    let object = json!({
        "type": ["object", "null"],
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "name": optional,
                    "namespace": optional,
                    "labels": names,
                    "annotations": names,
                },
            },
        },
    });
    let triple = |last: &str| {
        json!({
            "type": "object",
            "required": ["group", "version", last],
            "properties": {"group": text, "version": text, last: text},
        })
    };
    let schema = json!({
        "type": "object",
        "required": ["apiVersion", "kind", "request"],
        "properties": {
            "apiVersion": {"type": "string", "enum": ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]},
            "kind": {"type": "string", "enum": ["AdmissionReview"]},
            "request": {
                "type": "object",
                "required": ["uid", "kind", "resource", "operation", "userInfo"],
                "properties": {
                    "uid": text,
                    "kind": triple("kind"),
                    "resource": triple("resource"),
                    "subResource": optional,
                    "name": text,
                    "namespace": optional,
                    "operation": {"type": "string", "enum": ["CREATE", "UPDATE", "DELETE", "CONNECT"]},
                    "userInfo": {
                        "type": "object",
                        "properties": {
                            "username": optional,
                            "uid": optional,
                            "groups": {"type": ["array", "null"], "items": text},
                        },
                    },
                    "object": object,
                    "oldObject": object,
                    "dryRun": {"type": "boolean"},
                },
            },
        },
    });
    serde_json::from_value(schema).expect("the AdmissionReview schema is a schema")
}

/// The JSON error document every error answer is.
fn error_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let text = || ObjectBuilder::new().schema_type(Type::String);
    ObjectBuilder::new()
        .property(
            "error",
            ObjectBuilder::new()
                .property(
                    "code",
                    text().description(Some("What kind of error, for programs")),
                )
                .property(
                    "message",
                    text().description(Some("What went wrong, for people")),
                )
                .property(
                    "field",
                    text().description(Some("The request field at fault, when one is")),
                )
                .required("code")
                .required("message"),
        )
        .required("error")
        .into()
}

/// The longest URI taken, in bytes.
const MAX_URI: usize = 8 * 1024;
/// The most bytes of header fields taken (names and values).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Refuse, with the JSON error, a URI or header fields longer than the
/// host takes. (Far longer ones, past what the HTTP parser buffers, are
/// refused by it before they get here, with no body.)
async fn request_size(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let uri = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if uri > MAX_URI {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri-too-long",
            format!("the URI is {uri} bytes long; at most {MAX_URI}"),
        )
        .into_response();
    }
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers > MAX_HEADER_BYTES {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            format!("the header fields are {headers} bytes; at most {MAX_HEADER_BYTES}"),
        )
        .into_response();
    }
    next.run(request).await
}

/// The router, without a socket: tests call it directly. Every request gets
/// an `x-request-id` (kept when the client sent one) that its log lines
/// carry, a body limit and a time limit; tokens are checked when
/// configured.
pub fn router(state: AppState) -> Router {
    use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
    let request_id = axum::http::HeaderName::from_static("x-request-id");
    let trace = tower_http::trace::TraceLayer::new(NotReadyIsAnAnswer).make_span_with(
        |request: &axum::http::Request<axum::body::Body>| {
            let id = request
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            tracing::info_span!("request", method = %request.method(), path = %request.uri().path(), request_id = %id)
        },
    );
    use utoipa_axum::routes;
    let (router, mut api) = utoipa_axum::router::OpenApiRouter::<AppState>::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(list_apps))
        .routes(routes!(get_app))
        .routes(routes!(list_nodes))
        .routes(routes!(list_plugins))
        .routes(routes!(reload_plugins))
        .routes(routes!(list_tasks, create_task))
        .routes(routes!(get_task, patch_task))
        .routes(routes!(approve_task))
        .routes(routes!(reject_task))
        .routes(routes!(cancel_task))
        .routes(routes!(admission_review))
        .routes(routes!(get_failover))
        .routes(routes!(failover_history))
        .routes(routes!(put_override, delete_override))
        .routes(routes!(approve_action))
        .routes(routes!(event_stream))
        .routes(routes!(metrics))
        .split_for_parts();
    describe(&mut api);
    let document = Arc::new(api.to_pretty_json().unwrap_or_default());
    router
        .route("/", get(dashboard))
        .route(
            "/openapi.json",
            get(move || {
                let document = Arc::clone(&document);
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        document.as_str().to_owned(),
                    )
                }
            }),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.metrics),
            count_request,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone())
        // Innermost first: the token check, the body limit and the time
        // limit, JSON for the errors of those, the request's span, its id.
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.tokens),
            crate::access::guard,
        ))
        .layer(axum::middleware::from_fn(crate::access::same_origin))
        .layer(axum::middleware::from_fn(request_size))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            state.body_limit,
        ))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            state.request_timeout,
        ))
        .layer(axum::middleware::map_response(json_errors))
        .layer(trace)
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}

#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "The process serves")))]
async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

fn live(state: &AppState) -> Result<&Live, ApiError> {
    state.live.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no-cluster",
            "the host follows no cluster (--cluster-url, --kubeconfig)",
        )
    })
}

fn failover(state: &AppState) -> Result<&Arc<crate::failover::Failover>, ApiError> {
    live(state)?;
    state.failover.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no-cluster",
            "failover needs a cluster (--cluster-url, --kubeconfig)",
        )
    })
}

impl From<crate::failover::FailoverError> for ApiError {
    fn from(error: crate::failover::FailoverError) -> Self {
        use crate::failover::FailoverError as E;
        match error {
            E::NotFound(code, m) => ApiError::new(StatusCode::NOT_FOUND, code, m),
            E::Invalid(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", m),
            E::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            E::Store(m) => {
                tracing::error!(error = %m, "failover store failed");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store-failed", m)
            }
        }
    }
}

#[utoipa::path(get, path = "/v1/failover", tag = "failover", responses((status = 200, description = "The decision on every node (health, since, reason, rule, override, and each proposed action with its state: waiting, done, dry-run, in-flight, awaiting-approval, held by a named brake, failed), the brakes in force and the overrides", body = Object), (status = 404, description = "No cluster")))]
async fn get_failover(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(failover(&state)?.view().await))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    node: Option<String>,
    before: Option<u64>,
    limit: Option<usize>,
}

/// The longest page of a list.
const MAX_PAGE: usize = 1000;

/// A list's `limit`: `default` when absent, refused outside 1 to
/// [`MAX_PAGE`] as the document says.
fn page_limit(limit: Option<usize>, default: usize) -> Result<usize, ApiError> {
    match limit {
        None => Ok(default),
        Some(n @ 1..=MAX_PAGE) => Ok(n),
        Some(n) => Err(ApiError::invalid(
            "limit",
            format!("limit: {n} is not from 1 to {MAX_PAGE}"),
        )),
    }
}

#[utoipa::path(get, path = "/v1/failover/history", tag = "failover", params(("node" = Option<String>, Query), ("before" = Option<u64>, Query, maximum = 9_223_372_036_854_775_807_u64, description = "Records before this sequence number (paging)"), ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "At most this many, 100 by default")), responses((status = 200, description = "Audit records, newest first: each decision change with the inputs that mattered, the rule and the brakes that fired; overrides and approvals with who", body = Object)))]
async fn failover_history(
    State(state): State<AppState>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(query.limit, 100)?;
    // Sequence numbers are 63-bit, as the document says.
    if query.before.is_some_and(|b| i64::try_from(b).is_err()) {
        return Err(ApiError::invalid(
            "before",
            format!("before: at most {}", i64::MAX),
        ));
    }
    let records = failover(&state)?
        .history(query.node.as_deref(), query.before, limit)
        .await?;
    Ok(Json(json!({ "records": records })))
}

#[utoipa::path(put, path = "/v1/failover/overrides/{node}", tag = "failover", params(("node" = String, Path)), request_body = crate::failover::OverrideRequest, responses((status = 200, description = "The override in force", body = Object), (status = 404, description = "No such node"), (status = 422, description = "A bad field, named")))]
async fn put_override(
    State(state): State<AppState>,
    Path(node): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let failover = failover(&state)?;
    let request: crate::failover::OverrideRequest = body(&bytes, false)?;
    let set = failover.set_override(&node, request).await?;
    Ok(Json(json!({ "override": set })))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ByQuery {
    by: Option<String>,
}

#[utoipa::path(delete, path = "/v1/failover/overrides/{node}", tag = "failover", params(("node" = String, Path), ("by" = String, Query, min_length = 1, max_length = 256, pattern = r"\S", description = "Who lifts it")), responses((status = 200, description = "The override lifted", body = Object), (status = 404, description = "No override on the node")))]
async fn delete_override(
    State(state): State<AppState>,
    Path(node): Path<String>,
    Query(query): Query<ByQuery>,
) -> Result<Json<Value>, ApiError> {
    let failover = failover(&state)?;
    let by = query.by.unwrap_or_default();
    let lifted = failover.clear_override(&node, &by).await?;
    Ok(Json(json!({ "lifted": lifted })))
}

#[utoipa::path(post, path = "/v1/failover/nodes/{node}/approve", tag = "failover", params(("node" = String, Path)), request_body = crate::failover::ApprovalRequest, responses((status = 200, description = "The approval", body = Object), (status = 404, description = "No such decision or action"), (status = 409, description = "The action needs no approval, or has one")))]
async fn approve_action(
    State(state): State<AppState>,
    Path(node): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let failover = failover(&state)?;
    let request: crate::failover::ApprovalRequest = body(&bytes, false)?;
    let approval = failover.approve(&node, request).await?;
    Ok(Json(json!({ "approval": approval })))
}

#[utoipa::path(get, path = "/readyz", tag = "health", responses((status = 200, description = "Ready: the status policy is loaded and every watch works"), (status = 503, description = "Not ready; the body says which part is not")))]
/// Ready when the status policy is loaded and, with a cluster, every watch
/// has synced and works.
async fn readyz(State(state): State<AppState>) -> Response {
    let policy = state.registry.policy(crate::plugins::World::Status).is_ok();
    let watches = state.live.as_ref().map(|l| l.observed.health.kinds());
    let watching = state
        .live
        .as_ref()
        .is_none_or(|l| l.observed.health.ready());
    let ready = policy && watching;
    let apps = state.live.as_ref().map(|l| l.verdicts.count());
    let derive_error = state.live.as_ref().and_then(|l| {
        l.verdicts
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    });
    let body = json!({
        "ready": ready, "status_policy": policy, "watches": watches,
        "apps": apps, "derive_error": derive_error,
    });
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body)).into_response()
}

#[derive(Debug, serde::Deserialize)]
struct AppFilter {
    namespace: Option<String>,
    /// A stable status (`panic`) or a displayed one (`starting`).
    status: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct AppList {
    apps: Vec<AppStatus>,
}

#[utoipa::path(get, path = "/v1/apps", tag = "apps", params(("namespace" = Option<String>, Query, description = "Only this namespace"), ("status" = Option<String>, Query, description = "Only this stable or displayed status")), responses((status = 200, description = "Every application's verdict", body = AppList), (status = 404, description = "The host follows no cluster")))]
async fn list_apps(
    State(state): State<AppState>,
    Query(filter): Query<AppFilter>,
) -> Result<Json<AppList>, ApiError> {
    let live = live(&state)?;
    let until = live
        .verdicts
        .current_until(live.observed.health.observed_until());
    let apps =
        live.verdicts
            .all()
            .into_iter()
            .filter(|v| {
                filter
                    .namespace
                    .as_ref()
                    .is_none_or(|n| &v.verdict.app.namespace == n)
            })
            .filter(|v| {
                filter.status.as_ref().is_none_or(|s| {
                    v.verdict.stable.wit_name() == s || &v.verdict.display.status == s
                })
            })
            .map(|v| v.status(live.stale_after, until))
            .collect();
    Ok(Json(AppList { apps }))
}

#[utoipa::path(get, path = "/v1/apps/{namespace}/{name}", tag = "apps", params(("namespace" = String, Path), ("name" = String, Path)), responses((status = 200, description = "The application's verdict with its pods and the age of its observations", body = AppStatus), (status = 404, description = "No such application")))]
async fn get_app(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<AppStatus>, ApiError> {
    let live = live(&state)?;
    let until = live
        .verdicts
        .current_until(live.observed.health.observed_until());
    live.verdicts
        .get(&namespace, &name)
        .map(|v| Json(v.status(live.stale_after, until)))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no-such-app",
                format!("no app {namespace}/{name} is known"),
            )
        })
}

#[utoipa::path(get, path = "/v1/nodes", tag = "apps", responses((status = 200, description = "The observed nodes", body = Object)))]
async fn list_nodes(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let live = live(&state)?;
    let nodes: Vec<Value> = live
        .observed
        .read()
        .nodes
        .values()
        .map(|n| {
            json!({
                "name": n.name,
                "ready": match n.ready {
                    crate::plugins::bindings::types::ConditionStatus::True => "True",
                    crate::plugins::bindings::types::ConditionStatus::False => "False",
                    crate::plugins::bindings::types::ConditionStatus::Unknown => "Unknown",
                },
                "ready_since": n.ready_since.map(crate::time::rfc3339),
                "last_heartbeat": n.last_heartbeat.map(crate::time::rfc3339),
                "unschedulable": n.unschedulable,
                "taints": n.taints.iter().map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect})).collect::<Vec<_>>(),
                "address": n.address,
            })
        })
        .collect();
    Ok(Json(json!({ "nodes": nodes })))
}

#[derive(Serialize)]
struct PluginList {
    dir: Option<String>,
    plugins: Vec<PluginStatus>,
}

#[utoipa::path(get, path = "/v1/plugins", tag = "plugins", responses((status = 200, description = "Every plugin with its versions, last error and counts", body = Object)))]
async fn list_plugins(State(state): State<AppState>) -> Json<PluginList> {
    Json(PluginList {
        dir: state.registry.dir().map(|d| d.display().to_string()),
        plugins: state.registry.statuses(),
    })
}

#[utoipa::path(post, path = "/v1/plugins/reload", tag = "plugins", responses((status = 200, description = "What the reload loaded, rejected, unloaded and left", body = Object), (status = 409, description = "No plugin folder")))]
async fn reload_plugins(State(state): State<AppState>) -> Result<Json<ReloadReport>, ApiError> {
    if state.registry.dir().is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no-plugin-folder",
            "the host runs without a plugin folder (--plugins)",
        ));
    }
    let registry = Arc::clone(&state.registry);
    // Compiling is CPU work: keep it off the request workers.
    let report = tokio::task::spawn_blocking(move || registry.reload())
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "reload-failed",
                "the reload did not complete",
            )
        })?;
    Ok(Json(report))
}

#[derive(Debug, serde::Deserialize)]
struct TaskQuery {
    app: Option<String>,
    phase: Option<String>,
    /// At most this many, [`MAX_PAGE`] by default.
    limit: Option<usize>,
    /// Where the previous page ended (its `continue`).
    #[serde(rename = "continue")]
    after: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct TaskList {
    tasks: Vec<Task>,
    /// Present when more tasks follow: pass it as `continue` for the next
    /// page.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    after: Option<String>,
}

/// Where a page ends: the last task's creation time and id (the order of
/// the list), opaque to clients.
fn page_mark(task: &Task) -> String {
    format!("{}.{}", task.created_at, task.id)
}

#[utoipa::path(get, path = "/v1/tasks", tag = "tasks", params(("app" = Option<String>, Query, pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", min_length = 3, max_length = 127, description = "namespace/name"), ("phase" = Option<crate::tasks::model::PhaseName>, Query), ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "At most this many, 1000 by default"), ("continue" = Option<String>, Query, pattern = r"^([0-9]{1,18}\.[0-9a-f-]{1,64})?$", description = "The previous page's `continue` (empty: the first page)")), responses((status = 200, description = "Tasks, newest first", body = TaskList), (status = 422, description = "A bad filter, named")))]
async fn list_tasks(
    State(state): State<AppState>,
    Query(query): Query<TaskQuery>,
) -> Result<Json<TaskList>, ApiError> {
    let app = match &query.app {
        Some(text) => {
            let id = crate::tasks::model::parse_app(text).map_err(TaskError::from)?;
            Some((id.namespace, id.name))
        }
        None => None,
    };
    let phase = match &query.phase {
        Some(text) => Some(
            crate::plugins::bindings::types::TaskPhase::from_wit_name(text).ok_or_else(|| {
                let known = <crate::plugins::bindings::types::TaskPhase as WitName>::NAMES;
                ApiError::invalid(
                    "phase",
                    format!(
                        "phase: unknown phase `{text}`, expected one of: {}",
                        known.join(", ")
                    ),
                )
            })?,
        ),
        None => None,
    };
    let limit = page_limit(query.limit, MAX_PAGE)?;
    let mut tasks = state.tasks.list(&Filter { app, phase });
    if let Some(after) = query.after.as_deref().filter(|a| !a.is_empty()) {
        let (at, id) = after
            .split_once('.')
            .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id)))
            .ok_or_else(|| {
                ApiError::invalid("continue", "continue: not a mark this server gave")
            })?;
        // Newest first: what follows the mark is older, or as old with a
        // smaller id.
        tasks.retain(|t| (t.created_at, t.id.as_str()) < (at, id));
    }
    let after = (tasks.len() > limit).then(|| page_mark(&tasks[limit - 1]));
    tasks.truncate(limit);
    Ok(Json(TaskList { tasks, after }))
}

#[utoipa::path(post, path = "/v1/tasks", tag = "tasks", request_body = NewTask, responses((status = 201, description = "Admitted", body = Task), (status = 202, description = "Held for approval", body = Task), (status = 403, description = "Denied, with the reason"), (status = 422, description = "A bad field, named"), (status = 503, description = "The admission policy failed and the failure mode is closed")))]
async fn create_task(State(state): State<AppState>, bytes: Bytes) -> Result<Response, ApiError> {
    let request: NewTask = body(&bytes, false)?;
    let admission = state.admission.clone();
    let task = state
        .tasks
        .create(request.clone(), async move |tasks| {
            admission.admit_task(&request, tasks).await
        })
        .await?;
    let code = if task.phase == crate::plugins::bindings::types::TaskPhase::AwaitingApproval {
        StatusCode::ACCEPTED
    } else {
        StatusCode::CREATED
    };
    Ok((code, Json(task)).into_response())
}

#[utoipa::path(get, path = "/v1/tasks/{id}", tag = "tasks", params(("id" = String, Path)), responses((status = 200, body = Task), (status = 404, description = "No such task")))]
async fn get_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Task>, ApiError> {
    state
        .tasks
        .get(&id)
        .map(Json)
        .ok_or_else(|| TaskError::NotFound(id).into())
}

#[utoipa::path(patch, path = "/v1/tasks/{id}", tag = "tasks", params(("id" = String, Path)), request_body = TaskPatch, responses((status = 200, body = Task), (status = 409, description = "An illegal transition, and why"), (status = 422, description = "A bad field, named")))]
async fn patch_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Task>, ApiError> {
    let patch: TaskPatch = body(&bytes, false)?;
    Ok(Json(state.tasks.patch(&id, &patch).await?))
}

#[utoipa::path(post, path = "/v1/tasks/{id}/approve", tag = "tasks", params(("id" = String, Path)), request_body = Decision, responses((status = 200, body = Task), (status = 409, description = "Not awaiting approval")))]
async fn approve_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Task>, ApiError> {
    let decision: Decision = body(&bytes, true)?;
    Ok(Json(state.tasks.review(&id, true, &decision).await?))
}

#[utoipa::path(post, path = "/v1/tasks/{id}/reject", tag = "tasks", params(("id" = String, Path)), request_body = Decision, responses((status = 200, body = Task), (status = 409, description = "Not awaiting approval")))]
async fn reject_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Task>, ApiError> {
    let decision: Decision = body(&bytes, true)?;
    Ok(Json(state.tasks.review(&id, false, &decision).await?))
}

#[utoipa::path(post, path = "/v1/tasks/{id}/cancel", tag = "tasks", params(("id" = String, Path)), request_body = Decision, responses((status = 200, body = Task), (status = 409, description = "Already finished")))]
async fn cancel_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Task>, ApiError> {
    let decision: Decision = body(&bytes, true)?;
    Ok(Json(state.tasks.cancel(&id, &decision).await?))
}

#[utoipa::path(post, path = "/v1/admission/review", tag = "admission", request_body(content = Object, description = "An admission.k8s.io/v1 AdmissionReview"), responses((status = 200, description = "The AdmissionReview with its response", body = Object), (status = 400, description = "Not an AdmissionReview")))]
/// The Kubernetes admission webhook (validating and mutating).
async fn admission_review(
    State(state): State<AppState>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let review = state
        .admission
        .review(&bytes)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid-review", e.0))?;
    Ok(Json(review).into_response())
}

#[derive(Debug, serde::Deserialize)]
struct EventFilter {
    namespace: Option<String>,
    /// `namespace/name`.
    app: Option<String>,
    /// For clients that cannot set the `Last-Event-ID` header.
    #[serde(rename = "last-event-id")]
    last_event_id: Option<u64>,
}

/// One event in Server-Sent Events form: its id, type, and JSON data.
fn sse(event: &crate::events::Event) -> axum::response::sse::Event {
    axum::response::sse::Event::default()
        .id(event.id.to_string())
        .event(event.kind)
        .data(&*event.json)
}

/// How long a client whose stream ended at shutdown waits to reconnect.
const RECONNECT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Tell a client to re-list: what it missed is no longer held. The
/// `resync` event's id is the last one issued, so that a client that
/// reconnects after it resumes from the present.
fn resync(reason: String, next: u64) -> axum::response::sse::Event {
    axum::response::sse::Event::default()
        .event("resync")
        .id(next.saturating_sub(1).to_string())
        .data(json!({"type": "resync", "reason": reason, "next-id": next}).to_string())
}

#[utoipa::path(get, path = "/v1/events", tag = "events", params(("namespace" = Option<String>, Query), ("app" = Option<String>, Query, pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", min_length = 3, max_length = 127, description = "namespace/name"), ("last-event-id" = Option<u64>, Query, description = "Replay after this id (or the Last-Event-ID header)")), responses((status = 200, description = "Server-Sent Events: verdict, task, plugin and resync events", content_type = "text/event-stream")))]
/// `GET /v1/events`: every verdict, task and plugin change as Server-Sent
/// Events, from after `Last-Event-ID` when the buffer still holds it (else
/// a `resync` first), filtered by namespace or app, with heartbeats. A
/// client that cannot keep up is sent `resync` and goes on from the present.
async fn event_stream(
    State(state): State<AppState>,
    Query(filter): Query<EventFilter>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    use axum::response::sse::{KeepAlive, Sse};
    use futures_util::StreamExt;
    use tokio_stream::wrappers::BroadcastStream;
    use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

    let last = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    let mut error = ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid-header",
                        "Last-Event-ID must be an event id (a whole number)",
                    );
                    error.field = Some("Last-Event-ID".into());
                    error
                })?,
        ),
        None => filter.last_event_id,
    };
    if let Some(app) = &filter.app {
        crate::tasks::model::parse_app(app).map_err(TaskError::from)?;
    }
    let wanted = move |event: &crate::events::Event| match (&filter.app, &filter.namespace) {
        (Some(app), _) => event.app.as_deref() == Some(app.as_str()),
        (None, Some(namespace)) => event.namespace() == Some(namespace.as_str()),
        (None, None) => true,
    };
    let events = Arc::clone(&state.events);
    let (live, replay) = events.subscribe(last);
    let (first, mut after) = match replay {
        Ok(missed) => {
            let after = missed.last().map_or(last.unwrap_or(0), |e| e.id);
            let first: Vec<_> = missed
                .iter()
                .filter(|e| wanted(e))
                .map(|e| sse(e))
                .collect();
            (first, after)
        }
        Err(gone) => (
            vec![resync(
                match last {
                    Some(last) if last >= gone.oldest => {
                        format!("event {last} was not issued by this server")
                    }
                    _ => format!("events before {} are no longer held", gone.oldest),
                },
                events.next_id(),
            )],
            0,
        ),
    };
    let live = BroadcastStream::new(live).filter_map(move |received| {
        let item = match received {
            Ok(event) if event.id > after && wanted(&event) => {
                after = event.id;
                Some(sse(&event))
            }
            Ok(_) => None,
            Err(BroadcastStreamRecvError::Lagged(missed)) => Some(resync(
                format!("the stream fell {missed} events behind"),
                events.next_id(),
            )),
        };
        std::future::ready(item.map(Ok::<_, std::convert::Infallible>))
    });
    // On shutdown the stream ends with a last event that tells the client
    // when to reconnect (to another replica, or this one restarted).
    let mut stopping = state.stopping.clone();
    let stopped = async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    let farewell = futures_util::stream::once(async {
        Ok(axum::response::sse::Event::default()
            .event("shutdown")
            .retry(RECONNECT_AFTER)
            .data(json!({"type": "shutdown", "reason": "the server is shutting down"}).to_string()))
    });
    let stream = futures_util::stream::iter(first.into_iter().map(Ok))
        .chain(live)
        .take_until(stopped)
        .chain(farewell);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(state.heartbeat).text("heartbeat"))
        .into_response())
}

/// Count each answered request of a route.
async fn count_request(
    State(metrics): State<Arc<crate::metrics::Metrics>>,
    route: axum::extract::MatchedPath,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().to_string();
    let response = next.run(request).await;
    metrics.request(route.as_str(), &method, response.status().as_u16());
    response
}

#[utoipa::path(get, path = "/metrics", tag = "metrics", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(&state),
    )
        .into_response()
}

/// The dashboard: one page, no build step; it reads the API and the event
/// stream like any other client.
async fn dashboard() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("dashboard.html"))
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not-found", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "this route does not take that method",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::store::StoreError;

    #[test]
    fn a_store_failure_reaches_the_client_without_its_detail() {
        let detail = "/var/lib/verdict/tasks.db: disk I/O error";
        let error = ApiError::from(TaskError::Store(StoreError::Failed(detail.into())));
        assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(error.code, "store-failed");
        assert!(!error.message.contains("/var/lib"), "{}", error.message);
        assert!(error.message.contains("request's id"), "{}", error.message);
    }
}
