//! The fleet's HTTP front (`verdict fleet`): its clusters, every cluster's
//! apps, one app's verdict and history through its cluster, availability
//! per cluster and across the fleet, the event stream with a `cluster`
//! field, tasks sent to the cluster a task names, `/metrics` and the
//! dashboard. Every replica serves it all: nothing here writes but the
//! tasks, and those are the member's to carry out.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::json::JsonBody;
use super::{ApiError, access, metrics};
use crate::fleet::follow::{Answer, CallError};
use crate::fleet::members::segment;
use crate::fleet::{ClusterView, Filter, Fleet, FleetApp, Member};

/// What the fleet's handlers share.
#[derive(Debug, Clone)]
pub(crate) struct FleetState {
    pub fleet: Arc<Fleet>,
    pub tokens: Arc<access::Tokens>,
    pub hosts: Arc<access::Hosts>,
    pub metrics: Arc<metrics::Metrics>,
    pub body_limit: usize,
    pub request_timeout: Duration,
    pub heartbeat: Duration,
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// The largest answer of a member's passed on (an app's verdict, its
/// history, a task).
const PASSED_ON_MAX: usize = 8 * 1024 * 1024;

/// The fleet's router, without a socket.
pub(crate) fn fleet_router(state: FleetState) -> Router {
    let (router, api) = OpenApiRouter::<FleetState>::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(clusters))
        .routes(routes!(apps))
        .routes(routes!(app))
        .routes(routes!(app_history))
        .routes(routes!(availability))
        .routes(routes!(events))
        .routes(routes!(post_task))
        .routes(routes!(get_task))
        .routes(routes!(decide_task))
        .routes(routes!(metrics_text))
        .split_for_parts();
    let router = router
        .route("/", get(dashboard))
        .route("/openapi.json", super::document(&api))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.metrics),
            super::middleware::count_request,
        ))
        .fallback(super::not_found)
        .method_not_allowed_fallback(super::method_not_allowed)
        .with_state(state.clone());
    super::edge(
        router,
        state.tokens,
        state.hosts,
        state.body_limit,
        state.request_timeout,
    )
}

async fn dashboard() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("fleet.html"))
}

#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "The process serves")))]
async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}))
}

#[utoipa::path(get, path = "/readyz", tag = "health", responses((status = 200, description = "The fleet serves: its members by reach"), (status = 503, description = "Shutting down")))]
/// Ready while not shutting down: a lost member is shown lost, it does not
/// hold the fleet back.
async fn readyz(State(state): State<FleetState>) -> Response {
    let stopping = *state.stopping.borrow();
    let mut reach: BTreeMap<&str, usize> = BTreeMap::new();
    for cluster in state.fleet.clusters() {
        *reach.entry(cluster.reach).or_default() += 1;
    }
    let code = if stopping {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (
        code,
        Json(json!({"ready": !stopping, "stopping": stopping, "members": reach})),
    )
        .into_response()
}

#[derive(Serialize, utoipa::ToSchema)]
struct ClusterList {
    clusters: Vec<ClusterView>,
}

#[utoipa::path(get, path = "/v1/fleet/clusters", tag = "fleet", responses((status = 200, description = "Each member cluster: reach, last seen, version, its apps by status", body = ClusterList)))]
async fn clusters(State(state): State<FleetState>) -> Json<ClusterList> {
    Json(ClusterList {
        clusters: state.fleet.clusters(),
    })
}

#[derive(Debug, Deserialize)]
struct AppQuery {
    cluster: Option<String>,
    namespace: Option<String>,
    status: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct FleetAppList {
    apps: Vec<FleetApp>,
}

#[utoipa::path(get, path = "/v1/fleet/apps", tag = "fleet", params(("cluster" = Option<String>, Query), ("namespace" = Option<String>, Query), ("status" = Option<String>, Query, description = "A stable or displayed status; `unknown` for the apps of clusters not heard from")), responses((status = 200, description = "Every member's apps, each with its cluster", body = FleetAppList), (status = 404, description = "No such cluster")))]
async fn apps(
    State(state): State<FleetState>,
    Query(query): Query<AppQuery>,
) -> Result<Json<FleetAppList>, ApiError> {
    if let Some(cluster) = &query.cluster {
        member(&state, cluster)?;
    }
    Ok(Json(FleetAppList {
        apps: state.fleet.apps(&Filter {
            cluster: query.cluster,
            namespace: query.namespace,
            status: query.status,
        }),
    }))
}

/// A member by name, or a 404.
fn member(state: &FleetState, cluster: &str) -> Result<Arc<Member>, ApiError> {
    state.fleet.member(cluster).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no-such-cluster",
            format!("no cluster `{cluster}` is a member of this fleet"),
        )
    })
}

impl From<CallError> for ApiError {
    fn from(error: CallError) -> Self {
        match &error {
            CallError::Unreachable { .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "cluster-unreachable",
                error.to_string(),
            ),
            CallError::Failed { .. } => {
                ApiError::new(StatusCode::BAD_GATEWAY, "cluster-failed", error.to_string())
            }
        }
    }
}

/// A member's answer passed on, with its status; a JSON object gets the
/// cluster's name.
fn passed_on(cluster: &str, answer: Answer) -> Response {
    let status = answer.status;
    match serde_json::from_slice::<Value>(&answer.body) {
        Ok(Value::Object(mut object)) => {
            object.insert("cluster".into(), cluster.into());
            (status, Json(Value::Object(object))).into_response()
        }
        Ok(other) => (status, Json(other)).into_response(),
        Err(_) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "cluster-failed",
            format!("cluster {cluster}'s verdict answered {status} with no JSON"),
        )
        .into_response(),
    }
}

/// Ask a member and pass its answer on.
async fn ask(
    state: &FleetState,
    cluster: &str,
    method: Method,
    path: String,
    body: Option<Vec<u8>>,
) -> Result<Response, ApiError> {
    let member = member(state, cluster)?;
    let answer = member.call(method, &path, body, PASSED_ON_MAX).await?;
    Ok(passed_on(cluster, answer))
}

/// A query passed on as it came.
fn with_query(path: String, query: Option<&str>) -> String {
    match query {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path,
    }
}

#[utoipa::path(get, path = "/v1/fleet/apps/{cluster}/{namespace}/{name}", tag = "fleet", params(("cluster" = String, Path), ("namespace" = String, Path), ("name" = String, Path)), responses((status = 200, description = "The app's verdict, from its cluster"), (status = 404, description = "No such cluster, or no such app in it"), (status = 502, description = "Its cluster's verdict failed to answer"), (status = 503, description = "Its cluster is unreachable")))]
async fn app(
    State(state): State<FleetState>,
    Path((cluster, namespace, name)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let path = format!("/v1/apps/{}/{}", segment(&namespace), segment(&name));
    ask(&state, &cluster, Method::GET, path, None).await
}

#[utoipa::path(get, path = "/v1/fleet/apps/{cluster}/{namespace}/{name}/history", tag = "fleet", params(("cluster" = String, Path), ("namespace" = String, Path), ("name" = String, Path)), responses((status = 200, description = "The app's history, from its cluster (the query is its cluster's: since, until, limit, continue)"), (status = 503, description = "Its cluster is unreachable")))]
async fn app_history(
    State(state): State<FleetState>,
    Path((cluster, namespace, name)): Path<(String, String, String)>,
    uri: axum::http::Uri,
) -> Result<Response, ApiError> {
    let path = format!(
        "/v1/apps/{}/{}/history",
        segment(&namespace),
        segment(&name)
    );
    ask(
        &state,
        &cluster,
        Method::GET,
        with_query(path, uri.query()),
        None,
    )
    .await
}

#[utoipa::path(get, path = "/v1/fleet/availability", tag = "fleet", params(("window" = Option<String>, Query), ("until" = Option<String>, Query)), responses((status = 200, description = "Each live cluster's availability over the window, and the fleet's together (app-milliseconds); the clusters left out, and why")))]
async fn availability(State(state): State<FleetState>, uri: axum::http::Uri) -> Json<Value> {
    let path = with_query("/v1/availability".into(), uri.query());
    let members = state.fleet.members();
    let asked = members.iter().map(|member| {
        let path = path.clone();
        async move {
            let answer = member.call(Method::GET, &path, None, PASSED_ON_MAX).await;
            (member.name.to_string(), answer)
        }
    });
    let mut clusters = serde_json::Map::new();
    let mut left_out = serde_json::Map::new();
    let mut total = Total::default();
    for (name, answer) in futures_util::future::join_all(asked).await {
        match answer {
            Ok(answer) if answer.status.is_success() => {
                match serde_json::from_slice::<Value>(&answer.body) {
                    Ok(value) => {
                        total.add(&value);
                        clusters.insert(name, value);
                    }
                    Err(e) => {
                        left_out.insert(name, format!("its answer is not JSON: {e}").into());
                    }
                }
            }
            Ok(answer) => {
                left_out.insert(name, format!("answered {}", answer.status).into());
            }
            Err(error) => {
                left_out.insert(name, error.to_string().into());
            }
        }
    }
    Json(json!({"clusters": clusters, "fleet": total.view(), "left_out": left_out}))
}

/// Availability added up across clusters.
#[derive(Debug, Default)]
struct Total {
    window_ms: i64,
    apps: u64,
    statuses: BTreeMap<String, i64>,
    before_ms: i64,
    unobserved_ms: i64,
    incidents: u64,
    recovered: u64,
    recovery_ms: i64,
    longest_recovery_ms: Option<i64>,
    from: Option<String>,
    to: Option<String>,
}

impl Total {
    fn add(&mut self, v: &Value) {
        let int = |k: &str| v[k].as_i64().unwrap_or(0);
        self.window_ms = self.window_ms.max(int("window_ms"));
        self.apps += v["apps"].as_u64().unwrap_or(0);
        for (status, ms) in v["statuses"].as_object().into_iter().flatten() {
            *self.statuses.entry(status.clone()).or_default() += ms.as_i64().unwrap_or(0);
        }
        self.before_ms += int("before_ms");
        self.unobserved_ms += int("unobserved_ms");
        self.incidents += v["incidents"].as_u64().unwrap_or(0);
        let recovered = v["recovered"].as_u64().unwrap_or(0);
        self.recovered += recovered;
        self.recovery_ms += int("mean_recovery_ms") * recovered as i64;
        if let Some(longest) = v["longest_recovery_ms"].as_i64() {
            self.longest_recovery_ms = Some(self.longest_recovery_ms.unwrap_or(0).max(longest));
        }
        self.from = self
            .from
            .take()
            .or_else(|| v["from"].as_str().map(str::to_string));
        self.to = self
            .to
            .take()
            .or_else(|| v["to"].as_str().map(str::to_string));
    }

    fn view(&self) -> Value {
        let observed: i64 = self.statuses.values().sum();
        let running = self.statuses.get("running").copied().unwrap_or(0);
        json!({
            "from": self.from, "to": self.to,
            "window_ms": self.window_ms,
            "apps": self.apps,
            "statuses": self.statuses,
            "before_ms": self.before_ms,
            "unobserved_ms": self.unobserved_ms,
            "running_share": (observed > 0).then(|| running as f64 / observed as f64),
            "incidents": self.incidents,
            "recovered": self.recovered,
            "mean_recovery_ms": (self.recovered > 0).then(|| self.recovery_ms / self.recovered as i64),
            "longest_recovery_ms": self.longest_recovery_ms,
        })
    }
}

#[derive(Debug, Deserialize)]
struct EventQuery {
    cluster: Option<String>,
    /// `namespace/name`, with `cluster`.
    app: Option<String>,
    #[serde(rename = "last-event-id")]
    last_event_id: Option<u64>,
    #[serde(rename = "heartbeat-ms")]
    heartbeat_ms: Option<u64>,
}

#[utoipa::path(get, path = "/v1/fleet/events", tag = "fleet", params(("cluster" = Option<String>, Query), ("app" = Option<String>, Query, description = "namespace/name"), ("last-event-id" = Option<u64>, Query), ("heartbeat-ms" = Option<u64>, Query, minimum = 500, maximum = 600000)), responses((status = 200, description = "Server-Sent Events of every member (verdict, task, override, failover, delivery, plugin), each with its `cluster`, and `cluster` events when a member is reached, lost or synced", content_type = "text/event-stream")))]
async fn events(
    State(state): State<FleetState>,
    Query(query): Query<EventQuery>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let last = super::events::last_event_id(&headers, query.last_event_id)?;
    let heartbeat = super::events::heartbeat(query.heartbeat_ms, state.heartbeat)?;
    let wanted = move |event: &crate::events::Event| {
        query
            .cluster
            .as_deref()
            .is_none_or(|c| event.cluster.as_deref() == Some(c))
            && query
                .app
                .as_deref()
                .is_none_or(|a| event.app.as_deref() == Some(a))
    };
    Ok(super::events::stream(
        Arc::clone(&state.fleet.events),
        last,
        wanted,
        heartbeat,
        state.stopping.clone(),
    ))
}

#[utoipa::path(post, path = "/v1/fleet/tasks", tag = "fleet", request_body(content = Object, description = "A task as `POST /v1/tasks` takes it, with the cluster it is for: `cluster_id` (seed 000's), `cluster`, or `params.cluster_id`"), responses((status = 201, description = "The cluster's answer, with `cluster`"), (status = 404, description = "No such cluster"), (status = 422, description = "No cluster named"), (status = 503, description = "The cluster is unreachable: the task is refused, not queued")))]
/// A task sent to the cluster it names, whose admission and executor take
/// it as their own. A cluster not heard from is not sent it: the task is
/// refused with that reason.
async fn post_task(
    State(state): State<FleetState>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Response, ApiError> {
    let (cluster, mut task) = routed(body)?;
    // The cluster's id goes with the task, for its verdict to check as it
    // checks a task sent to it directly: a member reached at another
    // cluster's verdict refuses it.
    let id = member(&state, &cluster)?.task_cluster_id();
    if let (Some(id), Value::Object(task)) = (id, &mut task) {
        let params = task
            .entry("params")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(params) = params {
            params.insert("cluster-id".into(), Value::String(id));
        }
    }
    let bytes = serde_json::to_vec(&task).unwrap_or_default();
    ask(
        &state,
        &cluster,
        Method::POST,
        "/v1/tasks".into(),
        Some(bytes),
    )
    .await
}

/// The cluster a task names, and the task as its cluster takes it (the
/// cluster's own verdict serves only its cluster: the name is the fleet's
/// to route by).
fn routed(body: Value) -> Result<(String, Value), ApiError> {
    let Value::Object(mut task) = body else {
        return Err(ApiError::invalid("body", "a task is a JSON object"));
    };
    let mut named = Vec::new();
    for key in ["cluster_id", "cluster"] {
        if let Some(v) = task.remove(key) {
            named.push((key.to_string(), v));
        }
    }
    if let Some(Value::Object(params)) = task.get_mut("params") {
        for key in ["cluster_id", "cluster-id"] {
            if let Some(v) = params.remove(key) {
                named.push((format!("params.{key}"), v));
            }
        }
    }
    let mut names = named.iter().map(|(key, value)| match value.as_str() {
        Some(name) => Ok(name.to_string()),
        None => Err(ApiError::invalid(
            key,
            format!("{key}: a cluster's name is text"),
        )),
    });
    let Some(first) = names.next().transpose()? else {
        return Err(ApiError::invalid(
            "cluster_id",
            "cluster_id: the task names no cluster (`cluster_id`, `cluster` or `params.cluster_id`)",
        ));
    };
    for other in names {
        let other = other?;
        if other != first {
            return Err(ApiError::invalid(
                "cluster_id",
                format!("cluster_id: the task names two clusters, `{first}` and `{other}`"),
            ));
        }
    }
    Ok((first, Value::Object(task)))
}

#[utoipa::path(get, path = "/v1/fleet/tasks/{cluster}/{id}", tag = "fleet", params(("cluster" = String, Path), ("id" = String, Path)), responses((status = 200, description = "The task, from its cluster"), (status = 503, description = "The cluster is unreachable")))]
async fn get_task(
    State(state): State<FleetState>,
    Path((cluster, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let path = format!("/v1/tasks/{}", segment(&id));
    ask(&state, &cluster, Method::GET, path, None).await
}

#[utoipa::path(post, path = "/v1/fleet/tasks/{cluster}/{id}/{decision}", tag = "fleet", params(("cluster" = String, Path), ("id" = String, Path), ("decision" = String, Path, description = "approve, reject or cancel")), responses((status = 200, description = "The task, from its cluster"), (status = 404, description = "No such cluster or decision"), (status = 503, description = "The cluster is unreachable")))]
async fn decide_task(
    State(state): State<FleetState>,
    Path((cluster, id, decision)): Path<(String, String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    if !["approve", "reject", "cancel"].contains(&decision.as_str()) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not-found",
            format!("no decision `{decision}`: approve, reject or cancel"),
        ));
    }
    let path = format!("/v1/tasks/{}/{decision}", segment(&id));
    let body = (!body.is_empty()).then(|| body.to_vec());
    ask(&state, &cluster, Method::POST, path, body).await
}

#[utoipa::path(get, path = "/metrics", tag = "metrics", responses((status = 200, description = "Prometheus text format: the members, and each app's status with its `cluster`", content_type = "text/plain")))]
async fn metrics_text(State(state): State<FleetState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_names_one_cluster() {
        let (cluster, task) = routed(json!({
            "action": "restart", "app": "shop/web", "cluster_id": "east",
            "params": {"cluster_id": "east", "image": "web:2"}
        }))
        .unwrap();
        assert_eq!(cluster, "east");
        assert_eq!(
            task,
            json!({"action": "restart", "app": "shop/web", "params": {"image": "web:2"}})
        );
        let (cluster, _) =
            routed(json!({"action": "start", "app": "a/b", "cluster": "west"})).unwrap();
        assert_eq!(cluster, "west");
        for bad in [
            json!({"action": "start", "app": "a/b"}),
            json!({"action": "start", "cluster_id": 7}),
            json!({"cluster_id": "east", "params": {"cluster_id": "west"}}),
            json!([1]),
        ] {
            assert!(routed(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn availability_adds_up_across_clusters() {
        let mut total = Total::default();
        total.add(&json!({"window_ms": 1000, "apps": 2, "statuses": {"running": 1500, "degraded": 500},
            "before_ms": 0, "unobserved_ms": 0, "incidents": 1, "recovered": 1, "mean_recovery_ms": 500, "longest_recovery_ms": 500}));
        total.add(&json!({"window_ms": 1000, "apps": 1, "statuses": {"running": 1000},
            "before_ms": 0, "unobserved_ms": 0, "incidents": 2, "recovered": 1, "mean_recovery_ms": 100, "longest_recovery_ms": 100}));
        let view = total.view();
        assert_eq!(view["apps"], 3);
        assert_eq!(view["statuses"]["running"], 2500);
        assert_eq!(view["running_share"], 2500.0 / 3000.0);
        assert_eq!(view["incidents"], 3);
        assert_eq!(view["mean_recovery_ms"], 300);
        assert_eq!(view["longest_recovery_ms"], 500);
    }
}
