//! `/v1/overrides` and `/v1/apps/{namespace}/{name}/…/override`: states a
//! person forces on an application or one of its instances, lifted by hand
//! or by their expiry, every change audited.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::json::JsonBody;
use super::{ApiError, AppState, page_limit};
use crate::observe::AppKey;
use crate::observe::resources::kubevirt;
use crate::overrides::{OverrideChange, OverrideKey, OverrideRecord, Overrides, expiry};
use crate::verdicts::live::Live;

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_overrides))
        .routes(routes!(put_app_override, delete_app_override))
        .routes(routes!(put_instance_override, delete_instance_override))
        .routes(routes!(override_history))
}

/// A person's request to force a status.
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ForceRequest {
    /// For an application: `running`, `degraded`, `stopped` or `panic`; for
    /// an instance: `initializing`, `deploying`, `ready`, `gray-release`,
    /// `unknown`, `offline` or `stopped`.
    pub status: String,
    /// Who decides: not blank.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub by: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub reason: Option<String>,
    /// When it lapses, RFC 3339.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// Or: for how long, in seconds.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315_360_000)]
    pub expires_in_s: Option<u64>,
}

/// Every override stored.
#[derive(Serialize, utoipa::ToSchema)]
struct OverrideList {
    overrides: Vec<OverrideRecord>,
}

/// A change made, as audited.
#[derive(Serialize, utoipa::ToSchema)]
struct Changed {
    change: OverrideChange,
}

/// The changes to an app's overrides, newest first.
#[derive(Serialize, utoipa::ToSchema)]
struct OverrideHistory {
    changes: Vec<OverrideChange>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClearQuery {
    by: Option<String>,
    reason: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/overrides", tag = "overrides", responses((status = 200, description = "Every override in force (and any expired one not yet taken back)", body = OverrideList), (status = 404, description = "The host follows no cluster")))]
async fn list_overrides(State(state): State<AppState>) -> Result<Json<OverrideList>, ApiError> {
    let live = state.live()?;
    Ok(Json(OverrideList {
        overrides: live.overrides.list(),
    }))
}

/// The app, when the host knows it: it has a verdict or something observed.
fn known_app(live: &Live, namespace: &str, name: &str) -> Result<AppKey, ApiError> {
    let key = (namespace.to_string(), name.to_string());
    if live.verdicts.get(namespace, name).is_some() || live.observed.read().has_app(&key) {
        Ok(key)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no-such-app",
            format!("no app {namespace}/{name} is known"),
        ))
    }
}

/// The app, when something of it is in the cluster now: a status forced
/// on an app that no longer exists (or never did) would be forced on
/// nothing, and would keep a name known for ever.
fn observed_app(live: &Live, namespace: &str, name: &str) -> Result<AppKey, ApiError> {
    let key = known_app(live, namespace, name)?;
    if live.observed.read().has_app(&key) {
        Ok(key)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no-such-app",
            format!(
                "app {namespace}/{name} no longer exists (no workload, pod or object of it is observed): there is nothing to force a status on"
            ),
        ))
    }
}

/// The instance, when the app has one of that name (a virtual machine, or
/// an instance no virtual machine owns).
fn known_instance(live: &Live, app: &AppKey, instance: &str) -> Result<(), ApiError> {
    let snapshot = live.observed.read();
    let objects = snapshot.objects_of(app);
    let is_instance = objects.iter().any(|o| {
        o.name == instance
            && (o.kind == kubevirt::VM
                || o.kind == kubevirt::VMI
                    && !objects.iter().any(|vm| {
                        vm.kind == kubevirt::VM
                            && o.owner.as_ref().map(|(_, n)| n) == Some(&vm.name)
                    }))
    });
    if is_instance {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no-such-instance",
            format!(
                "app {}/{} has no instance {instance} (instances are its virtual machines)",
                app.0, app.1
            ),
        ))
    }
}

/// Store an override, off the async threads (every write is synced).
async fn force(
    overrides: Arc<Overrides>,
    key: OverrideKey,
    request: ForceRequest,
) -> Result<Json<Changed>, ApiError> {
    let at = crate::time::now();
    let expires_at = expiry(request.expires_at.as_deref(), request.expires_in_s, at)
        .map_err(|m| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", m))?;
    let record = OverrideRecord {
        namespace: key.0,
        app: key.1,
        instance: key.2,
        status: request.status,
        by: request.by.trim().to_string(),
        reason: request.reason.unwrap_or_default(),
        at,
        expires_at,
    };
    let change = tokio::task::spawn_blocking(move || overrides.set(record))
        .await
        .map_err(|e| ApiError::internal("the overrides", &e))??;
    Ok(Json(Changed { change }))
}

/// Lift an override, off the async threads.
async fn lift(
    overrides: Arc<Overrides>,
    key: OverrideKey,
    query: ClearQuery,
) -> Result<Json<Changed>, ApiError> {
    let by = query.by.unwrap_or_default();
    let reason = query.reason.unwrap_or_default();
    let change = tokio::task::spawn_blocking(move || {
        overrides.clear(&key, &by, &reason, crate::time::now())
    })
    .await
    .map_err(|e| ApiError::internal("the overrides", &e))??;
    Ok(Json(Changed { change }))
}

#[utoipa::path(put, path = "/v1/apps/{namespace}/{name}/override", tag = "overrides", params(("namespace" = String, Path), ("name" = String, Path)), request_body = ForceRequest, responses((status = 200, description = "The override set (and the one it replaced), audited", body = Changed), (status = 404, description = "No such app"), (status = 422, description = "A bad field, named")))]
async fn put_app_override(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    JsonBody(request): JsonBody<ForceRequest>,
) -> Result<Json<Changed>, ApiError> {
    let live = state.live()?;
    let (namespace, name) = observed_app(live, &namespace, &name)?;
    force(
        Arc::clone(&live.overrides),
        (namespace, name, None),
        request,
    )
    .await
}

#[utoipa::path(delete, path = "/v1/apps/{namespace}/{name}/override", tag = "overrides", params(("namespace" = String, Path), ("name" = String, Path), ("by" = String, Query, min_length = 1, max_length = 256, pattern = r"\S", description = "Who lifts it"), ("reason" = Option<String>, Query, max_length = 4096, description = "Why")), responses((status = 200, description = "The override lifted, audited", body = Changed), (status = 404, description = "No override on the app"), (status = 422, description = "A bad field, named")))]
async fn delete_app_override(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<ClearQuery>,
) -> Result<Json<Changed>, ApiError> {
    let live = state.live()?;
    lift(Arc::clone(&live.overrides), (namespace, name, None), query).await
}

#[utoipa::path(put, path = "/v1/apps/{namespace}/{name}/instances/{instance}/override", tag = "overrides", params(("namespace" = String, Path), ("name" = String, Path), ("instance" = String, Path)), request_body = ForceRequest, responses((status = 200, description = "The override set (and the one it replaced), audited", body = Changed), (status = 404, description = "No such app or instance"), (status = 422, description = "A bad field, named")))]
async fn put_instance_override(
    State(state): State<AppState>,
    Path((namespace, name, instance)): Path<(String, String, String)>,
    JsonBody(request): JsonBody<ForceRequest>,
) -> Result<Json<Changed>, ApiError> {
    let live = state.live()?;
    let app = observed_app(live, &namespace, &name)?;
    known_instance(live, &app, &instance)?;
    force(
        Arc::clone(&live.overrides),
        (app.0, app.1, Some(instance)),
        request,
    )
    .await
}

#[utoipa::path(delete, path = "/v1/apps/{namespace}/{name}/instances/{instance}/override", tag = "overrides", params(("namespace" = String, Path), ("name" = String, Path), ("instance" = String, Path), ("by" = String, Query, min_length = 1, max_length = 256, pattern = r"\S", description = "Who lifts it"), ("reason" = Option<String>, Query, max_length = 4096, description = "Why")), responses((status = 200, description = "The override lifted, audited", body = Changed), (status = 404, description = "No override on the instance"), (status = 422, description = "A bad field, named")))]
async fn delete_instance_override(
    State(state): State<AppState>,
    Path((namespace, name, instance)): Path<(String, String, String)>,
    Query(query): Query<ClearQuery>,
) -> Result<Json<Changed>, ApiError> {
    let live = state.live()?;
    lift(
        Arc::clone(&live.overrides),
        (namespace, name, Some(instance)),
        query,
    )
    .await
}

#[utoipa::path(get, path = "/v1/apps/{namespace}/{name}/overrides/history", tag = "overrides", params(("namespace" = String, Path), ("name" = String, Path), ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "At most this many, 100 by default")), responses((status = 200, description = "Every change to the app's overrides, newest first: set, cleared, expired, with who and why", body = OverrideHistory)))]
async fn override_history(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<OverrideHistory>, ApiError> {
    let live = state.live()?;
    let limit = page_limit(query.limit, 100)?;
    let overrides = Arc::clone(&live.overrides);
    let changes = tokio::task::spawn_blocking(move || overrides.history(&(namespace, name), limit))
        .await
        .map_err(|e| ApiError::internal("the overrides", &e))?
        .map_err(|e| ApiError::internal("the overrides", &e))?;
    Ok(Json(OverrideHistory { changes }))
}
