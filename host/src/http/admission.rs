//! `/v1/admission/review`: the Kubernetes admission webhook.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{ApiError, AppState};

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(admission_review))
}

#[utoipa::path(post, path = "/v1/admission/review", tag = "admission", request_body(content = Object, description = "An admission.k8s.io/v1 AdmissionReview"), responses((status = 200, description = "The AdmissionReview with its response", body = Object), (status = 400, description = "Not an AdmissionReview")))]
/// The Kubernetes admission webhook (validating and mutating).
async fn admission_review(
    State(state): State<AppState>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let mut review = state
        .admission
        .review(&bytes)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid-review", e.to_string()))?;
    // An operator's edit of a delivered instance's stage: the answer
    // carries the stage the lifecycle policy gives.
    if let Some(delivery) = &state.delivery
        && review["response"]["allowed"] == true
        && let Ok((_, request)) = crate::admission::read_review(&bytes)
        && let Some(ops) = delivery.next_stage(&state.registry, &request).await
    {
        add_patch(&mut review, ops);
    }
    Ok(Json(review).into_response())
}

/// Append JSON Patch operations to a review's answer (its patch is base64
/// text, as the API server reads it).
fn add_patch(review: &mut serde_json::Value, ops: Vec<serde_json::Value>) {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    let response = &mut review["response"];
    let mut all: Vec<serde_json::Value> = response["patch"]
        .as_str()
        .and_then(|p| engine.decode(p).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    all.extend(ops);
    response["patch"] =
        serde_json::Value::String(engine.encode(serde_json::to_vec(&all).unwrap_or_default()));
    response["patchType"] = serde_json::Value::String("JSONPatch".into());
}
