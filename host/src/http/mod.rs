//! The HTTP surface, the host's outer edge: versioned JSON under `/v1`,
//! `/healthz` and `/readyz`, the event stream, `/metrics`, the dashboard and
//! the OpenAPI document. Errors are JSON (`{"error": {"code", "message"}}`)
//! with the right status; internals never leak into them. Nothing else in
//! the host imports from here.
//!
//! - [`AppState`] and [`router`] (here): what the handlers share, and the
//!   route table with its layers;
//! - `error`: [`ApiError`], with a `From` for each domain error;
//! - `json`: the JSON body extractor, whose rejection is an [`ApiError`];
//! - `middleware`: request size bounds, request counting, the log's
//!   classifier;
//! - `openapi`: the document's own parts;
//! - one file of handlers per resource: `health`, `apps`, `plugins`,
//!   `tasks`, `admission`, `failover`, `events`, `metrics`, `replicas`,
//!   `policies`, `delivery`, `history`;
//! - [`access`], [`connections`], [`tls`]: tokens and origins, connection
//!   bounds, HTTPS.

pub mod access;
mod admission;
mod apps;
pub mod connections;
mod delivery;
mod error;
mod events;
mod failover;
mod fleet;
mod health;
mod history;
mod json;
pub mod metrics;
mod middleware;
mod openapi;
mod overrides;
mod plugins;
mod policies;
mod replicas;
mod tasks;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

pub use error::ApiError;
pub(crate) use fleet::{FleetState, fleet_router};

use crate::admission::Admission;
use crate::events::Events;
use crate::failover::Failover;
use crate::plugins::Registry;
use crate::tasks::Tasks;
use crate::verdicts::live::Live;

/// The HTTP server's settings.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// The address to listen on.
    #[arg(long = "listen", value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// The largest request body taken, in KiB (larger bodies get a `413`).
    #[arg(long = "body-limit-kib", value_name = "KIB", default_value = "1024", value_parser = crate::settings::kib)]
    pub body_limit: usize,
    /// How long a request may take to be answered, in milliseconds (then a
    /// `408`; event streams are not cut).
    #[arg(long = "request-timeout-ms", value_name = "MS", default_value = "30000", value_parser = crate::settings::positive_millis)]
    pub request_timeout: Duration,
    /// How long a connection may take to send a request head, or stay
    /// silent when new or idle between requests, in milliseconds; then it
    /// is closed (event streams are answers, not idle).
    #[arg(long = "header-timeout-ms", value_name = "MS", default_value = "10000", value_parser = crate::settings::positive_millis)]
    pub header_timeout: Duration,
    /// Connections served at once; one more is closed at once.
    #[arg(long = "max-connections", value_name = "N", default_value = "4096", value_parser = crate::settings::positive)]
    pub max_connections: usize,
    /// How often an idle event stream gets a heartbeat comment, in
    /// milliseconds.
    #[arg(long = "heartbeat-ms", value_name = "MS", default_value = "15000", value_parser = crate::settings::positive_millis)]
    pub heartbeat: Duration,
    /// Serve HTTPS with this PEM certificate chain, reloaded when it
    /// changes; needs --tls-key (without both: plain HTTP).
    #[arg(long = "tls-cert", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long = "tls-key", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// A file of bearer tokens that may read, one a line (`#` comments);
    /// with any, reads need a token (in the file also `read-tokens = [...]`).
    #[arg(long = "read-tokens-file", value_name = "FILE")]
    pub read_tokens_file: Option<std::path::PathBuf>,
    /// A file of bearer tokens that may read and write, one a line; with
    /// any token configured, changes need one of these (in the file also
    /// `write-tokens = [...]`; with no token at all, everything is open).
    #[arg(long = "write-tokens-file", value_name = "FILE")]
    pub write_tokens_file: Option<std::path::PathBuf>,
    /// A name this server is reached by, beyond its addresses and
    /// `localhost` (a Service's DNS name, an Ingress host); repeat for more,
    /// or separate them with commas.
    /// A request for any other name is refused, so that a page on a name
    /// rebound to this server's address cannot use it.
    #[arg(long = "allowed-host", value_name = "NAME", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Apps given series of their own in `/metrics` (status, since when,
    /// changes, time in each status), the first by namespace and name; 0
    /// for none. Bounds the series a large cluster makes.
    #[arg(long = "app-metrics-max", value_name = "N", default_value = "10000")]
    pub app_series: usize,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// What the handlers share.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub registry: Arc<Registry>,
    /// `None` when the host follows no cluster.
    pub live: Option<Live>,
    pub tasks: Arc<Tasks>,
    pub admission: Admission,
    pub events: Arc<Events>,
    /// `None` when the host follows no cluster.
    pub failover: Option<Arc<Failover>>,
    /// How often an idle event stream gets a heartbeat.
    pub heartbeat: Duration,
    pub tokens: Arc<access::Tokens>,
    /// The names this server is reached by.
    pub hosts: Arc<access::Hosts>,
    pub metrics: Arc<metrics::Metrics>,
    /// The largest request body taken.
    pub body_limit: usize,
    /// How long a request may take to be answered.
    pub request_timeout: Duration,
    /// Turns true when the host shuts down: event streams end then.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Whether this replica leads.
    pub leadership: Arc<crate::leader::Leadership>,
    /// The replicas' heartbeats, with leader election.
    pub members: Option<Arc<crate::leader::Members>>,
    /// The shadows' comparisons.
    pub shadows: Arc<crate::shadow::Shadows>,
    /// The Policy objects' controller, with the Kubernetes task store.
    pub policies: Option<Arc<crate::delivery::policies::Policies>>,
    /// The VM delivery's sets, instances and people's requests; `None`
    /// when the host follows no cluster.
    pub delivery: Option<Arc<crate::lifecycle::service::Service>>,
    /// The process's memory beside its limit.
    pub memory: Arc<crate::memory::Budget>,
    /// The verdicts' history.
    pub history: Arc<crate::history::History>,
}

impl AppState {
    /// The live verdicts, or a 404 when the host follows no cluster.
    fn live(&self) -> Result<&Live, ApiError> {
        self.live.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no-cluster",
                "the host follows no cluster (--cluster-url, --kubeconfig)",
            )
        })
    }

    /// Failover, or a 404 when the host follows no cluster.
    fn failover(&self) -> Result<&Arc<Failover>, ApiError> {
        self.live()?;
        self.failover.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no-cluster",
                "failover needs a cluster (--cluster-url, --kubeconfig)",
            )
        })
    }
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

/// The router, without a socket: tests call it directly. Every request gets
/// an `x-request-id` (kept when the client sent one) that its log lines
/// carry, a body limit and a time limit; tokens are checked when
/// configured.
pub(crate) fn router(state: AppState) -> Router {
    let (router, mut api) = utoipa_axum::router::OpenApiRouter::<AppState>::new()
        .merge(health::routes())
        .merge(apps::routes())
        .merge(plugins::routes())
        .merge(tasks::routes())
        .merge(admission::routes())
        .merge(failover::routes())
        .merge(overrides::routes())
        .merge(
            history::routes().route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                history::from_leader,
            )),
        )
        .merge(events::routes())
        .merge(metrics::routes())
        .merge(replicas::routes())
        .merge(policies::routes())
        .merge(delivery::routes())
        .merge(
            delivery::log_routes().route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                history::from_leader,
            )),
        )
        .split_for_parts();
    openapi::describe(&mut api);
    let router = router
        .route("/", get(dashboard))
        .route(CHART_JS, get(chart_js))
        .route("/openapi.json", document(&api))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.metrics),
            middleware::count_request,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone());
    edge(
        router,
        Arc::clone(&state.tokens),
        Arc::clone(&state.hosts),
        state.body_limit,
        state.request_timeout,
    )
}

/// The layers every request passes, innermost first: the token check,
/// the origin and host checks, the body limit and the time limit, JSON
/// for the errors of those, the request's span, its id.
fn edge(
    router: Router,
    tokens: Arc<access::Tokens>,
    hosts: Arc<access::Hosts>,
    body_limit: usize,
    request_timeout: Duration,
) -> Router {
    use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
    let request_id = axum::http::HeaderName::from_static("x-request-id");
    let trace = tower_http::trace::TraceLayer::new(middleware::NotReadyIsAnAnswer).make_span_with(
        |request: &axum::http::Request<axum::body::Body>| {
            let id = request
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            tracing::info_span!("request", method = %request.method(), path = %request.uri().path(), request_id = %id)
        },
    );
    router
        .layer(axum::middleware::from_fn_with_state(tokens, access::guard))
        .layer(axum::middleware::from_fn(access::same_origin))
        .layer(axum::middleware::from_fn_with_state(
            hosts,
            access::known_host,
        ))
        .layer(axum::middleware::from_fn(middleware::request_size))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(tower_http::limit::RequestBodyLimitLayer::new(body_limit))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
        .layer(axum::middleware::map_response(error::json_errors))
        .layer(trace)
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}

/// `GET /openapi.json`: the document, written once.
fn document<S: Clone + Send + Sync + 'static>(
    api: &utoipa::openapi::OpenApi,
) -> axum::routing::MethodRouter<S> {
    let document = Arc::new(api.to_pretty_json().unwrap_or_default());
    get(move || {
        let document = Arc::clone(&document);
        async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                document.as_str().to_owned(),
            )
        }
    })
}

/// The dashboard: one page, no build step; it reads the API and the event
/// stream like any other client.
async fn dashboard() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("dashboard.html"))
}

/// Where the dashboard's charting library (Chart.js, vendored in
/// `vendor/` with its licence) is served; its version is in the path, so
/// that a browser may keep it for good.
pub(crate) const CHART_JS: &str = "/assets/chart-4.5.1.umd.min.js";

async fn chart_js() -> impl axum::response::IntoResponse {
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/javascript"),
            (
                axum::http::header::CACHE_CONTROL,
                "public, max-age=31536000, immutable",
            ),
        ],
        include_str!("vendor/chart.umd.min.js"),
    )
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
