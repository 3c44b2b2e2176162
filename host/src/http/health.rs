//! `/healthz` (the process serves) and `/readyz` (the status policy is
//! loaded — and the lifecycle policy where VM delivery runs — and every
//! watch works).

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
        .routes(routes!(cluster))
}

/// How long `/healthz` waits to learn which cluster this is (once: then it
/// is kept) before it answers without.
const IDENTITY_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Which cluster this host serves, when it has one and can tell.
async fn identity(state: &AppState) -> Option<Result<crate::admission::Identity, String>> {
    let cluster = state.admission.cluster.as_ref()?;
    Some(
        tokio::time::timeout(IDENTITY_WITHIN, cluster.identity())
            .await
            .unwrap_or_else(|_| Err("the API server did not say in time".into())),
    )
}

#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "The process serves; `cluster_id` says which cluster it serves, when it can tell")))]
async fn healthz(State(state): State<AppState>) -> Json<Value> {
    let mut answer = json!({ "status": "ok", "version": env!("CARGO_PKG_VERSION") });
    if let Some(Ok(identity)) = identity(&state).await {
        answer["cluster_id"] = json!(identity.id);
    }
    Json(answer)
}

#[utoipa::path(get, path = "/v1/cluster", tag = "health", responses((status = 200, description = "Which cluster this host serves (its id, as tasks name it) and how it knows", body = crate::admission::Identity), (status = 404, description = "This host follows no cluster"), (status = 503, description = "Which cluster this is could not be read")))]
/// Which cluster this host serves: `--cluster-id`, else the `kube-system`
/// namespace's UID, else SIG Multicluster's `ClusterProperty`
/// `cluster.clusterset.k8s.io`. A fleet checks it against what its source
/// says of the member, and routes nothing to a member that differs.
async fn cluster(State(state): State<AppState>) -> Response {
    match identity(&state).await {
        Some(Ok(identity)) => Json(identity).into_response(),
        Some(Err(why)) => {
            super::error::ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "cluster-unavailable", why)
                .into_response()
        }
        None => super::error::ApiError::new(
            StatusCode::NOT_FOUND,
            "no-cluster",
            "this host follows no cluster",
        )
        .into_response(),
    }
}

#[utoipa::path(get, path = "/readyz", tag = "health", responses((status = 200, description = "Ready: the status policy (and, on a replica that carries out VM delivery, the lifecycle policy) is loaded and every watch works"), (status = 503, description = "Not ready; the body says which part is not")))]
/// Ready when the status policy is loaded and, with a cluster, every watch
/// has synced and works; not while the host shuts down. Whether this
/// replica leads is said (`leader`), and holds nothing back: every replica
/// serves. A configured kind the server does not serve holds
/// nothing back: it is listed under `unserved` and watched once served.
/// `memory` is the process's resident memory beside its limit, with what to
/// do when it nears it. `history` says whether the history is written, and
/// why not (it holds nothing back: the verdicts are served without it).
async fn readyz(State(state): State<AppState>) -> Response {
    let policy = state.registry.policy(crate::plugins::World::Status).is_ok();
    let watches = state.live.as_ref().map(|l| l.observed.health.kinds());
    let watching = state
        .live
        .as_ref()
        .is_none_or(|l| l.observed.health.ready());
    let stopping = *state.stopping.borrow();
    // A replica that carries out VM delivery is not ready without a
    // lifecycle policy: nothing would move, nothing be cleaned up.
    let lifecycle = state
        .delivery
        .as_ref()
        .is_some_and(|d| d.counts.is_some())
        .then(|| {
            state
                .registry
                .policy(crate::plugins::World::Lifecycle)
                .is_ok()
        });
    let ready = policy && watching && !stopping && lifecycle != Some(false);
    let standing = state.leadership.standing();
    let apps = state.live.as_ref().map(|l| l.verdicts.count());
    let derive_error = state.live.as_ref().and_then(|l| {
        l.verdicts
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    });
    // The configured kinds: those not served (yet), since when, and how
    // many objects of each served one are held.
    let unserved = state.live.as_ref().map(|l| {
        l.observed
            .health
            .unserved()
            .into_iter()
            .map(|(resource, since)| (resource, crate::time::rfc3339(crate::time::millis(since))))
            .collect::<std::collections::BTreeMap<_, _>>()
    });
    let objects = state.live.as_ref().map(|l| {
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for (resource, _, _) in l.observed.read().objects.keys() {
            *counts.entry(resource.clone()).or_default() += 1;
        }
        counts
    });
    let body = json!({
        "ready": ready, "status_policy": policy, "lifecycle_policy": lifecycle,
        "watches": watches,
        "apps": apps, "derive_error": derive_error,
        "unserved": unserved, "objects": objects,
        "stopping": stopping,
        "memory": state.memory.last(),
        "history": (!state.history.is_off()).then(|| state.history.health()),
        "replica": standing.replica,
        "leader": state.leadership.acting().is_some(),
        "leadership": standing,
    });
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body)).into_response()
}
