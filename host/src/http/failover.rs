//! `/v1/failover`: the decision on every node, its audit history,
//! overrides, and approvals of actions.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::json::JsonBody;
use super::{ApiError, AppState, page_limit};
use crate::failover::model::{Approval, Override, Record};
use crate::failover::{ApprovalRequest, FailoverView, OverrideRequest};

/// A page of audit records.
#[derive(Serialize, utoipa::ToSchema)]
struct History {
    records: Vec<Record>,
}

/// The override now in force.
#[derive(Serialize, utoipa::ToSchema)]
struct OverrideSet {
    #[serde(rename = "override")]
    set: Override,
}

/// The override lifted.
#[derive(Serialize, utoipa::ToSchema)]
struct OverrideLifted {
    lifted: Override,
}

/// A person's approval, recorded.
#[derive(Serialize, utoipa::ToSchema)]
struct Approved {
    approval: Approval,
}

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_failover))
        .routes(routes!(failover_history))
        .routes(routes!(put_override, delete_override))
        .routes(routes!(approve_action))
}

#[utoipa::path(get, path = "/v1/failover", tag = "failover", responses((status = 200, description = "The decision on every node (health, since, reason, rule, override, and each proposed action with its state: waiting, done, dry-run, in-flight, awaiting-approval, held by a named brake, failed), the brakes in force and the overrides", body = FailoverView), (status = 404, description = "No cluster")))]
async fn get_failover(State(state): State<AppState>) -> Result<Json<FailoverView>, ApiError> {
    Ok(Json(state.failover()?.view().await))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    node: Option<String>,
    before: Option<u64>,
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/failover/history", tag = "failover", params(("node" = Option<String>, Query), ("before" = Option<u64>, Query, maximum = 9_223_372_036_854_775_807_u64, description = "Records before this sequence number (paging)"), ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "At most this many, 100 by default")), responses((status = 200, description = "Audit records, newest first: each decision change with the inputs that mattered, the rule and the brakes that fired; overrides and approvals with who", body = History)))]
async fn failover_history(
    State(state): State<AppState>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<History>, ApiError> {
    let limit = page_limit(query.limit, 100)?;
    // Sequence numbers are 63-bit, as the document says.
    if query.before.is_some_and(|b| i64::try_from(b).is_err()) {
        return Err(ApiError::invalid(
            "before",
            format!("before: at most {}", i64::MAX),
        ));
    }
    let records = state
        .failover()?
        .history(query.node.as_deref(), query.before, limit)
        .await?;
    Ok(Json(History { records }))
}

#[utoipa::path(put, path = "/v1/failover/overrides/{node}", tag = "failover", params(("node" = String, Path)), request_body = OverrideRequest, responses((status = 200, description = "The override in force", body = OverrideSet), (status = 404, description = "No such node"), (status = 422, description = "A bad field, named"), (status = 503, description = "The failover state could not be saved: nothing changed")))]
async fn put_override(
    State(state): State<AppState>,
    Path(node): Path<String>,
    JsonBody(request): JsonBody<OverrideRequest>,
) -> Result<Json<OverrideSet>, ApiError> {
    let failover = state.failover()?;
    let set = failover.set_override(&node, request).await?;
    Ok(Json(OverrideSet { set }))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ByQuery {
    by: Option<String>,
}

#[utoipa::path(delete, path = "/v1/failover/overrides/{node}", tag = "failover", params(("node" = String, Path), ("by" = String, Query, min_length = 1, max_length = 256, pattern = r"\S", description = "Who lifts it")), responses((status = 200, description = "The override lifted", body = OverrideLifted), (status = 404, description = "No override on the node"), (status = 503, description = "The failover state could not be saved: nothing changed")))]
async fn delete_override(
    State(state): State<AppState>,
    Path(node): Path<String>,
    Query(query): Query<ByQuery>,
) -> Result<Json<OverrideLifted>, ApiError> {
    let failover = state.failover()?;
    let by = query.by.unwrap_or_default();
    let lifted = failover.clear_override(&node, &by).await?;
    Ok(Json(OverrideLifted { lifted }))
}

#[utoipa::path(post, path = "/v1/failover/nodes/{node}/approve", tag = "failover", params(("node" = String, Path)), request_body = ApprovalRequest, responses((status = 200, description = "The approval", body = Approved), (status = 404, description = "No such decision or action"), (status = 409, description = "The action needs no approval, or has one"), (status = 503, description = "The failover state could not be saved: nothing changed")))]
async fn approve_action(
    State(state): State<AppState>,
    Path(node): Path<String>,
    JsonBody(request): JsonBody<ApprovalRequest>,
) -> Result<Json<Approved>, ApiError> {
    let failover = state.failover()?;
    let approval = failover.approve(&node, request).await?;
    Ok(Json(Approved { approval }))
}
