//! `/v1/apps` and `/v1/nodes`: the applications' verdicts and the observed
//! nodes.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{ApiError, AppState};
use crate::observe::Snapshot;
use crate::verdicts::live::AppStatus;
use crate::verdicts::view::ObjectView;
use crate::wit::WitName;

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_apps))
        .routes(routes!(get_app))
        .routes(routes!(list_nodes))
}

#[derive(Debug, serde::Deserialize)]
struct AppFilter {
    namespace: Option<String>,
    /// A stable status (`panic`) or a displayed one (`starting`).
    status: Option<String>,
}

/// The statuses apps are listed by: a stable status or a transition (a
/// policy's own displayed status, such as `maintenance`, is taken too while
/// an app shows it).
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "kebab-case")]
#[allow(dead_code)]
enum StatusName {
    Running,
    Degraded,
    Stopped,
    Panic,
    NotExisted,
    Creating,
    Starting,
    Stopping,
    Restarting,
    Updating,
    Scaling,
    Deleting,
    Migrating,
}

#[derive(Serialize, utoipa::ToSchema)]
struct AppList {
    apps: Vec<AppStatus>,
}

#[utoipa::path(get, path = "/v1/apps", tag = "apps", params(("namespace" = Option<String>, Query, description = "Only this namespace"), ("status" = Option<StatusName>, Query, description = "Only this stable or displayed status")), responses((status = 200, description = "Every application's verdict", body = AppList), (status = 404, description = "The host follows no cluster"), (status = 422, description = "An unknown status, named")))]
async fn list_apps(
    State(state): State<AppState>,
    Query(filter): Query<AppFilter>,
) -> Result<Json<AppList>, ApiError> {
    let live = state.live()?;
    let until = live
        .verdicts
        .current_until(live.observed.health.observed_until());
    let snapshot = live.observed.read();
    let apps =
        live.verdicts
            .all()
            .into_iter()
            .filter(|v| {
                filter
                    .namespace
                    .as_ref()
                    .is_none_or(|n| &v.verdict.app.namespace == n)
            })
            .filter(|v| {
                filter.status.as_ref().is_none_or(|s| {
                    v.verdict.stable.wit_name() == s || &v.verdict.display.status == s
                })
            })
            .map(|v| with_objects(v.status(live.stale_after, until), &snapshot))
            .collect();
    if let Some(status) = &filter.status {
        known_status(status, || live.verdicts.all())?;
    }
    Ok(Json(AppList { apps }))
}

#[utoipa::path(get, path = "/v1/apps/{namespace}/{name}", tag = "apps", params(("namespace" = String, Path), ("name" = String, Path)), responses((status = 200, description = "The application's verdict with its pods and the age of its observations", body = AppStatus), (status = 404, description = "No such application")))]
async fn get_app(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Result<Json<AppStatus>, ApiError> {
    let live = state.live()?;
    let until = live
        .verdicts
        .current_until(live.observed.health.observed_until());
    let snapshot = live.observed.read();
    live.verdicts
        .get(&namespace, &name)
        .map(|v| Json(with_objects(v.status(live.stale_after, until), &snapshot)))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no-such-app",
                format!("no app {namespace}/{name} is known"),
            )
        })
}

/// A status filter names a stable status, a transition, or a displayed
/// status a policy serves now (a policy may display its own, such as
/// `maintenance`); anything else is a typo, said as one.
fn known_status(
    status: &str,
    verdicts: impl FnOnce() -> Vec<crate::verdicts::live::LiveVerdict>,
) -> Result<(), ApiError> {
    use crate::wit::types::{StableStatus, Transition};
    if StableStatus::NAMES.contains(&status)
        || Transition::NAMES.contains(&status)
        || verdicts()
            .iter()
            .any(|v| v.verdict.display.status == status)
    {
        return Ok(());
    }
    Err(ApiError::invalid(
        "status",
        format!(
            "status: unknown status `{status}`, expected one of: {}, {}, or a status a policy displays now",
            StableStatus::NAMES.join(", "),
            Transition::NAMES.join(", ")
        ),
    ))
}

/// An app's status with what was observed of its objects of the
/// configured kinds (those its policy did not judge too).
fn with_objects(mut status: AppStatus, snapshot: &Snapshot) -> AppStatus {
    let key = (status.view.namespace.clone(), status.view.name.clone());
    for observed in snapshot.objects_of(&key) {
        let judged = status
            .view
            .objects
            .iter_mut()
            .find(|v| v.kind == observed.kind && v.name == observed.name);
        match judged {
            Some(view) => view.observed(observed),
            None => {
                let mut view = ObjectView {
                    kind: observed.kind.clone(),
                    name: observed.name.clone(),
                    ..ObjectView::default()
                };
                view.observed(observed);
                status.view.objects.push(view);
            }
        }
    }
    status
}

/// One observed node.
#[derive(Serialize, utoipa::ToSchema)]
struct NodeView {
    name: String,
    /// The `Ready` condition: `True`, `False` or `Unknown`.
    ready: &'static str,
    /// When `ready` last changed (RFC 3339).
    ready_since: Option<String>,
    /// The kubelet's last heartbeat (RFC 3339).
    last_heartbeat: Option<String>,
    /// Cordoned.
    unschedulable: bool,
    taints: Vec<TaintView>,
    address: Option<String>,
}

/// A taint of a node.
#[derive(Serialize, utoipa::ToSchema)]
struct TaintView {
    key: String,
    value: Option<String>,
    effect: String,
}

#[derive(Serialize, utoipa::ToSchema)]
struct NodeList {
    nodes: Vec<NodeView>,
}

#[utoipa::path(get, path = "/v1/nodes", tag = "apps", responses((status = 200, description = "The observed nodes", body = NodeList)))]
async fn list_nodes(State(state): State<AppState>) -> Result<Json<NodeList>, ApiError> {
    let live = state.live()?;
    let nodes = live
        .observed
        .read()
        .nodes
        .values()
        .map(|n| NodeView {
            name: n.name.clone(),
            ready: n.ready.kubernetes_name(),
            ready_since: n.ready_since.map(crate::time::rfc3339),
            last_heartbeat: n.last_heartbeat.map(crate::time::rfc3339),
            unschedulable: n.unschedulable,
            taints: n
                .taints
                .iter()
                .map(|t| TaintView {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect(),
            address: n.address.clone(),
        })
        .collect();
    Ok(Json(NodeList { nodes }))
}
