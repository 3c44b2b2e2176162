//! `/v1/vm-delivery`: seed 002's delivery of environment and code to
//! VM-hosted apps — the `VMReplicaSet`s with their rollouts, one set with
//! every instance, an instance's task log — and people's actions: approve
//! the gate a rollout waits at, promote, abort, retry the failed
//! instances; retry, skip the step in progress of, or approve one
//! instance. Each action is written on the resource it is about, with who
//! and why, and carried out by the leader.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::kube_names;
use super::json::JsonBody;
use super::{ApiError, AppState, page_limit};
use crate::lifecycle::service::{
    ActionRequest, InstanceAction, LogPage, Requested, RolloutAction, Service, SetSummary, SetView,
};

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_sets))
        .routes(routes!(get_set))
        .routes(routes!(act_on_rollout))
        .routes(routes!(act_on_instance))
}

/// The task log's route: on a follower, the leader's answer (the leader
/// keeps the log).
pub(super) fn log_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(instance_log))
}

impl AppState {
    fn delivery(&self) -> Result<&Service, ApiError> {
        self.delivery.as_deref().ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "no-cluster",
                "the delivery needs a cluster (--cluster-url, --kubeconfig)",
            )
        })
    }
}

#[derive(Serialize, utoipa::ToSchema)]
struct SetList {
    sets: Vec<SetSummary>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceQuery {
    namespace: Option<String>,
}

#[utoipa::path(get, path = "/v1/vm-delivery", tag = "vm-delivery", params(("namespace" = Option<String>, Query, description = "Only this namespace")), responses((status = 200, description = "Every VMReplicaSet with its instances wanted and in service, its environment, why it waits, and the rollout of the VMDeployment that targets it (code, step, phase, whether it waits at a gate, what people did)", body = SetList), (status = 404, description = "No cluster"), (status = 503, description = "The API server could not be asked")))]
async fn list_sets(
    State(state): State<AppState>,
    Query(query): Query<NamespaceQuery>,
) -> Result<Json<SetList>, ApiError> {
    let sets = state.delivery()?.sets(query.namespace.as_deref()).await?;
    Ok(Json(SetList { sets }))
}

#[utoipa::path(get, path = "/v1/vm-delivery/{namespace}/{set}", tag = "vm-delivery", params(("namespace" = String, Path), ("set" = String, Path)), responses((status = 200, description = "The set, its rollout and statuses, and each instance: stage and since when, environment and code, lock, machine, the list in progress with its finished steps", body = SetView), (status = 404, description = "No such set, or no cluster"), (status = 503, description = "The API server could not be asked")))]
async fn get_set(
    State(state): State<AppState>,
    Path((namespace, set)): Path<(String, String)>,
) -> Result<Json<SetView>, ApiError> {
    kube_names(&[("namespace", &namespace), ("set", &set)])?;
    Ok(Json(state.delivery()?.set(&namespace, &set).await?))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    before: Option<u64>,
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/vm-delivery/{namespace}/{set}/instances/{instance}/log", tag = "vm-delivery", params(("namespace" = String, Path), ("set" = String, Path), ("instance" = String, Path), ("before" = Option<u64>, Query, description = "Lists numbered below this (paging)"), ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "At most this many, 20 by default")), responses((status = 200, description = "The instance's task lists, newest first: stage, why, when, outcome, and every finished step with its result, attempts, time and message (from the leader's task log; a list it does not hold as its Server sums it up, without steps, `summed-up` saying why)", body = LogPage), (status = 404, description = "No such set or instance, or no cluster"), (status = 409, description = "The instance's annotations do not read"), (status = 503, description = "The API server could not be asked")))]
async fn instance_log(
    State(state): State<AppState>,
    Path((namespace, set, instance)): Path<(String, String, String)>,
    Query(query): Query<LogQuery>,
) -> Result<Json<LogPage>, ApiError> {
    kube_names(&[
        ("namespace", &namespace),
        ("set", &set),
        ("instance", &instance),
    ])?;
    let limit = page_limit(query.limit, 20)?;
    let page = state
        .delivery()?
        .log(
            &state.history,
            (&namespace, &set, &instance),
            query.before,
            limit,
        )
        .await?;
    Ok(Json(page))
}

#[derive(Debug, Clone, Copy, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
enum RolloutVerb {
    Approve,
    Promote,
    Abort,
    Retry,
    Rollback,
}

#[utoipa::path(post, path = "/v1/vm-delivery/{namespace}/{set}/{action}", tag = "vm-delivery", params(("namespace" = String, Path), ("set" = String, Path), ("action" = String, Path, pattern = "^(approve|promote|abort|retry|rollback)$", description = "approve the gate the rollout waits at; promote (skip the remaining steps); abort (the instances that got the new code go back to the code released before); retry (every failed instance runs its failed list again); rollback (the deployment's code goes back to a released revision of its status.history, `revision` in the body, by default the last one before the code it has)")), request_body = ActionRequest, responses((status = 200, description = "The request, written with who and why on the VMDeployment (or the failed instances) for the leader to carry out", body = Requested), (status = 404, description = "No such set, no VMDeployment targets it, or no such released revision"), (status = 409, description = "The rollout is not in a state the action fits (no gate to approve, completed, nothing to go back to, no failed instance), or changed while the request was made"), (status = 422, description = "A bad field, named"), (status = 503, description = "The API server could not be asked")))]
async fn act_on_rollout(
    State(state): State<AppState>,
    Path((namespace, set, action)): Path<(String, String, RolloutVerb)>,
    JsonBody(request): JsonBody<ActionRequest>,
) -> Result<Json<Requested>, ApiError> {
    kube_names(&[("namespace", &namespace), ("set", &set)])?;
    let action = match action {
        RolloutVerb::Approve => RolloutAction::Approve,
        RolloutVerb::Promote => RolloutAction::Promote,
        RolloutVerb::Abort => RolloutAction::Abort,
        RolloutVerb::Retry => RolloutAction::Retry,
        RolloutVerb::Rollback => RolloutAction::Rollback,
    };
    let requested = state
        .delivery()?
        .act_on_rollout((&namespace, &set), action, &request)
        .await?;
    Ok(Json(requested))
}

#[derive(Debug, Clone, Copy, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
enum InstanceVerb {
    Retry,
    Skip,
    Approve,
    Force,
    Lift,
}

#[utoipa::path(post, path = "/v1/vm-delivery/{namespace}/{set}/instances/{instance}/{action}", tag = "vm-delivery", params(("namespace" = String, Path), ("set" = String, Path), ("instance" = String, Path), ("action" = String, Path, pattern = "^(retry|skip|approve|force|lift)$", description = "retry (its failed list runs again); skip (the step in progress counts as done: a stuck clean-up step); approve (its list that waits for a person runs); force (`stage` in the body: the instance goes on from that stage, the lifecycle policy's list for it run from where it is; a forced `offline` holds until lifted); lift (the forced stage is taken out of the Server's spec)")), request_body = ActionRequest, responses((status = 200, description = "The request, written with who and why on the instance's Server (an annotation, or for force and lift its spec) for the leader to carry out", body = Requested), (status = 404, description = "No such set or instance"), (status = 409, description = "The instance is not in a state the action fits, or changed while the request was made"), (status = 422, description = "A bad field, named"), (status = 503, description = "The API server could not be asked")))]
async fn act_on_instance(
    State(state): State<AppState>,
    Path((namespace, set, instance, action)): Path<(String, String, String, InstanceVerb)>,
    JsonBody(request): JsonBody<ActionRequest>,
) -> Result<Json<Requested>, ApiError> {
    kube_names(&[
        ("namespace", &namespace),
        ("set", &set),
        ("instance", &instance),
    ])?;
    let action = match action {
        InstanceVerb::Retry => InstanceAction::Retry,
        InstanceVerb::Skip => InstanceAction::Skip,
        InstanceVerb::Approve => InstanceAction::Approve,
        InstanceVerb::Force => InstanceAction::Force,
        InstanceVerb::Lift => InstanceAction::Lift,
    };
    let requested = state
        .delivery()?
        .act_on_instance((&namespace, &set, &instance), action, &request)
        .await?;
    Ok(Json(requested))
}
