//! `/healthz` (the process serves) and `/readyz` (the status policy is
//! loaded and every watch works).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "The process serves")))]
async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
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
