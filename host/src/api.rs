//! The HTTP surface: versioned JSON under `/v1`, and `/healthz`. Errors are
//! JSON (`{"error": {"code", "message"}}`) with the right status; internals
//! never leak into them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::json;

use crate::observe::cluster::Observed;
use crate::plugins::{PluginStatus, Registry, ReloadReport};
use crate::verdicts::live::{AppStatus, Verdicts};

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
}

/// An error answered as JSON.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, Json(body)).into_response()
    }
}

/// The router, without a socket: tests call it directly.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/apps", get(list_apps))
        .route("/v1/apps/{namespace}/{name}", get(get_app))
        .route("/v1/nodes", get(list_nodes))
        .route("/v1/plugins", get(list_plugins))
        .route("/v1/plugins/reload", post(reload_plugins))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn healthz() -> Json<serde_json::Value> {
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

#[derive(Serialize)]
struct AppList {
    apps: Vec<AppStatus>,
}

async fn list_apps(
    State(state): State<AppState>,
    axum::extract::Query(filter): axum::extract::Query<AppFilter>,
) -> Result<Json<AppList>, ApiError> {
    let live = live(&state)?;
    let until = live.observed.health.observed_until();
    let apps = live
        .verdicts
        .all()
        .into_iter()
        .filter(|v| {
            filter
                .namespace
                .as_ref()
                .is_none_or(|n| &v.view.namespace == n)
        })
        .filter(|v| {
            filter
                .status
                .as_ref()
                .is_none_or(|s| v.view.stable == s || &v.view.display.status == s)
        })
        .map(|v| v.status(live.stale_after, until))
        .collect();
    Ok(Json(AppList { apps }))
}

async fn get_app(
    State(state): State<AppState>,
    axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
) -> Result<Json<AppStatus>, ApiError> {
    let live = live(&state)?;
    let until = live.observed.health.observed_until();
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

async fn list_nodes(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let live = live(&state)?;
    let nodes: Vec<serde_json::Value> = live
        .observed
        .snapshot()
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
                "ready_since": n.ready_since.map(crate::observe::objects::rfc3339),
                "last_heartbeat": n.last_heartbeat.map(crate::observe::objects::rfc3339),
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

async fn list_plugins(State(state): State<AppState>) -> Json<PluginList> {
    Json(PluginList {
        dir: state.registry.dir().map(|d| d.display().to_string()),
        plugins: state.registry.statuses(),
    })
}

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
