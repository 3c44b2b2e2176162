//! `/v1/plugins`: the loaded plugins, and a reload on request.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{ApiError, AppState};
use crate::plugins::{PluginStatus, ReloadReport};

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_plugins))
        .routes(routes!(reload_plugins))
}

#[derive(Serialize, utoipa::ToSchema)]
struct PluginList {
    dir: Option<String>,
    plugins: Vec<PluginStatus>,
}

#[utoipa::path(get, path = "/v1/plugins", tag = "plugins", responses((status = 200, description = "Every plugin with its versions, last error and counts", body = PluginList)))]
async fn list_plugins(State(state): State<AppState>) -> Json<PluginList> {
    Json(PluginList {
        dir: state.registry.dir().map(|d| d.display().to_string()),
        plugins: state.registry.statuses(),
    })
}

#[utoipa::path(post, path = "/v1/plugins/reload", tag = "plugins", responses((status = 200, description = "What the reload loaded, rejected, unloaded and left", body = ReloadReport), (status = 409, description = "No plugin folder"), (status = 503, description = "The plugin folder cannot be read: nothing changed")))]
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
    if let Some(error) = report.folder_error {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "plugin-folder-unreadable",
            format!("{error}; what served before still serves"),
        ));
    }
    Ok(Json(report))
}
