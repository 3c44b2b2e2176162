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

use crate::plugins::{PluginStatus, Registry, ReloadReport};

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    pub registry: Arc<Registry>,
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
        .route("/v1/plugins", get(list_plugins))
        .route("/v1/plugins/reload", post(reload_plugins))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
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
