//! `/v1/policies`: the policies delivered by `Policy` objects, the shadows'
//! comparisons with the active policies, and promotion and roll-back.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::json::JsonBody;
use super::{ApiError, AppState};
use crate::plugins::{Delivered, VersionInfo};
use crate::shadow::ShadowReport;

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_policies))
        .routes(routes!(shadow_report))
        .routes(routes!(promote))
        .routes(routes!(roll_back))
}

/// A delivered policy.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
struct PolicyView {
    name: String,
    #[serde(flatten)]
    delivered: Delivered,
    /// Whether it serves its world now.
    active: bool,
    current: Option<VersionInfo>,
    /// What it did as a shadow.
    shadow: Option<ShadowReport>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct PolicyList {
    policies: Vec<PolicyView>,
}

#[utoipa::path(get, path = "/v1/policies", tag = "policies", responses((status = 200, description = "Every delivered policy with its source, mode and, for shadows, the comparison", body = PolicyList)))]
async fn list_policies(State(state): State<AppState>) -> Json<PolicyList> {
    let policies = state
        .registry
        .statuses()
        .into_iter()
        .filter_map(|s| {
            let delivered = s.delivered?;
            Some(PolicyView {
                shadow: state.shadows.report(&s.name),
                name: s.name,
                delivered,
                active: s.active,
                current: s.current,
            })
        })
        .collect();
    Json(PolicyList { policies })
}

#[utoipa::path(get, path = "/v1/policies/{name}/shadow", tag = "policies", params(("name" = String, Path, description = "The Policy's name")), responses((status = 200, description = "What the shadow was asked, where its answers differ from the active policy's (by field and subject, with examples), its errors, and whether it failed", body = ShadowReport), (status = 404, description = "No shadow of that name has been asked anything yet")))]
async fn shadow_report(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ShadowReport>, ApiError> {
    state.shadows.report(&name).map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no-such-shadow",
            format!("no shadow {name} has been asked anything yet"),
        )
    })
}

/// A person's promotion or roll-back.
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ChangeRequest {
    /// Who decides: not blank.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub by: String,
    /// Why: not blank.
    #[schema(min_length = 1, max_length = 4096, pattern = r"\S")]
    pub reason: String,
    /// Promote a shadow that failed all the same.
    #[serde(default)]
    pub force: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
struct PolicyChanged {
    policy: String,
    /// The Policies that were active and are shadows now (promotion), or
    /// that are active again (roll-back).
    others: Vec<String>,
}

fn controller(state: &AppState) -> Result<&crate::delivery::policies::Policies, ApiError> {
    state.policies.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no-policy-objects",
            "this host follows no Policy objects (they need a cluster and --task-store kubernetes)",
        )
    })
}

#[utoipa::path(post, path = "/v1/policies/{name}/promote", tag = "policies", params(("name" = String, Path, description = "The shadow Policy's name")), request_body = ChangeRequest, responses((status = 200, description = "Promoted: every replica follows the edited Policies", body = PolicyChanged), (status = 404, description = "No such Policy"), (status = 409, description = "Active already, or a failed shadow without force"), (status = 422, description = "A bad field, named")))]
async fn promote(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<ChangeRequest>,
) -> Result<Json<PolicyChanged>, ApiError> {
    let failed = state
        .shadows
        .report(&name)
        .filter(|r| r.failed)
        .map(|r| format!("{} of {} calls failed", r.errors, r.calls));
    let others = controller(&state)?
        .promote(&name, (&request.by, &request.reason), failed, request.force)
        .await?;
    state.shadows.forget(&name);
    Ok(Json(PolicyChanged {
        policy: name,
        others,
    }))
}

#[utoipa::path(post, path = "/v1/policies/{name}/rollback", tag = "policies", params(("name" = String, Path, description = "The promoted Policy's name")), request_body = ChangeRequest, responses((status = 200, description = "Rolled back: what it replaced is active again, it a shadow", body = PolicyChanged), (status = 404, description = "No such Policy"), (status = 409, description = "It was not promoted"), (status = 422, description = "A bad field, named")))]
async fn roll_back(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<ChangeRequest>,
) -> Result<Json<PolicyChanged>, ApiError> {
    let others = controller(&state)?
        .roll_back(&name, (&request.by, &request.reason))
        .await?;
    Ok(Json(PolicyChanged {
        policy: name,
        others,
    }))
}
