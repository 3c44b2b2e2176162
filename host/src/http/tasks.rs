//! `/v1/tasks`: task records — listed in pages, asked for (and admitted),
//! reported on, approved, rejected and cancelled.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::json::{JsonBody, JsonOrEmpty};
use super::{ApiError, AppState, MAX_PAGE, page_limit};
use crate::tasks::model::{Decision, NewTask, TaskPatch};
use crate::tasks::{Filter, Task, TaskError};
use crate::wit::WitName;

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_tasks, create_task))
        .routes(routes!(get_task, patch_task))
        .routes(routes!(approve_task))
        .routes(routes!(reject_task))
        .routes(routes!(cancel_task))
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
            crate::wit::types::TaskPhase::from_wit_name(text).ok_or_else(|| {
                let known = <crate::wit::types::TaskPhase as WitName>::NAMES;
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

#[utoipa::path(post, path = "/v1/tasks", tag = "tasks", request_body = NewTask, responses((status = 201, description = "Admitted", body = Task), (status = 202, description = "Held for approval", body = Task), (status = 403, description = "Denied, with the reason (by the policy, or `protected-namespace`)"), (status = 409, description = "`not-verdicts`: it would delete, or change beyond its image and replicas, what verdict neither made nor was handed (adopt it first)"), (status = 422, description = "A bad field, named"), (status = 503, description = "The admission policy failed and the failure mode is closed")))]
async fn create_task(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<NewTask>,
) -> Result<Response, ApiError> {
    let task = state.admission.ask(&state.tasks, request).await?;
    let code = if task.phase == crate::wit::types::TaskPhase::AwaitingApproval {
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
    JsonBody(patch): JsonBody<TaskPatch>,
) -> Result<Json<Task>, ApiError> {
    Ok(Json(state.tasks.patch(&id, &patch).await?))
}

#[utoipa::path(post, path = "/v1/tasks/{id}/approve", tag = "tasks", params(("id" = String, Path)), request_body = Option<Decision>, responses((status = 200, body = Task), (status = 409, description = "Not awaiting approval")))]
async fn approve_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonOrEmpty(decision): JsonOrEmpty<Decision>,
) -> Result<Json<Task>, ApiError> {
    Ok(Json(state.tasks.review(&id, true, &decision).await?))
}

#[utoipa::path(post, path = "/v1/tasks/{id}/reject", tag = "tasks", params(("id" = String, Path)), request_body = Option<Decision>, responses((status = 200, body = Task), (status = 409, description = "Not awaiting approval")))]
async fn reject_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonOrEmpty(decision): JsonOrEmpty<Decision>,
) -> Result<Json<Task>, ApiError> {
    Ok(Json(state.tasks.review(&id, false, &decision).await?))
}

#[utoipa::path(post, path = "/v1/tasks/{id}/cancel", tag = "tasks", params(("id" = String, Path)), request_body = Option<Decision>, responses((status = 200, body = Task), (status = 409, description = "Already finished")))]
async fn cancel_task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonOrEmpty(decision): JsonOrEmpty<Decision>,
) -> Result<Json<Task>, ApiError> {
    Ok(Json(state.tasks.cancel(&id, &decision).await?))
}
