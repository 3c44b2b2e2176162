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
    let review = state
        .admission
        .review(&bytes)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid-review", e.to_string()))?;
    Ok(Json(review).into_response())
}
