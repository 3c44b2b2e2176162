//! `GET /v1/replicas`: the host's replicas — which leads, since when, and
//! the policy versions each serves.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{ApiError, AppState};
use crate::leader::{Replica, Standing};

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_replicas))
}

/// The replicas, and where the one answering stands.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
struct Replicas {
    /// The replica that answered.
    this: Standing,
    /// Every replica with a recent heartbeat (this one alone without
    /// leader election).
    replicas: Vec<Replica>,
}

#[utoipa::path(get, path = "/v1/replicas", tag = "replicas", responses(
    (status = 200, description = "The replicas, the leader marked", body = Replicas),
    (status = 503, description = "The replicas' heartbeats could not be read from the API server"),
))]
/// The replicas serving this API: each one's name, whether it leads and
/// since when, when it started and was last seen, and the policy versions
/// it serves (`plugin: name@version (sha256 prefix)`).
async fn list_replicas(State(state): State<AppState>) -> Result<Json<Replicas>, ApiError> {
    let this = state.leadership.standing();
    let replicas = match &state.members {
        Some(members) => members.list().await.map_err(|error| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "replicas-unavailable",
                format!("the replicas' heartbeats could not be read: {error}"),
            )
        })?,
        None => vec![Replica {
            name: this.replica.clone(),
            leader: this.leader,
            leader_since: this.since,
            started_at: None,
            seen_at: Some(crate::time::now()),
            policies: state.registry.serving(),
            url: None,
            this: true,
        }],
    };
    Ok(Json(Replicas { this, replicas }))
}
