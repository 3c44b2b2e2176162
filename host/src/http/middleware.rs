//! The layers around the handlers: request size bounds, a count of each
//! answered request, and which answers the request log counts as failures.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use super::metrics::Metrics;

/// Which answers the request log counts as failures (logged as errors):
/// server errors, except `/readyz` saying 503 — a host that is not ready
/// yet (starting, a watch broken) answers so by design — and a fleet's
/// 502 and 503 for a member cluster (unreachable, or failing): that
/// cluster's state, said to the asker, and logged by the fleet once.
#[derive(Debug, Clone, Copy)]
pub(super) struct NotReadyIsAnAnswer;

/// The classifier of one request.
#[derive(Debug, Clone, Copy)]
pub(super) enum Classify {
    ServerErrors,
    /// A 503 or 502 that says how something stands (readiness, a member).
    Standing,
}

impl tower_http::classify::MakeClassifier for NotReadyIsAnAnswer {
    type Classifier = Classify;
    type FailureClass = tower_http::classify::ServerErrorsFailureClass;
    type ClassifyEos =
        tower_http::classify::NeverClassifyEos<tower_http::classify::ServerErrorsFailureClass>;

    fn make_classifier<B>(&self, request: &axum::http::Request<B>) -> Classify {
        let path = request.uri().path();
        if path == "/readyz" || path.starts_with("/v1/fleet/") {
            Classify::Standing
        } else {
            Classify::ServerErrors
        }
    }
}

impl tower_http::classify::ClassifyResponse for Classify {
    type FailureClass = tower_http::classify::ServerErrorsFailureClass;
    type ClassifyEos =
        tower_http::classify::NeverClassifyEos<tower_http::classify::ServerErrorsFailureClass>;

    fn classify_response<B>(
        self,
        response: &axum::http::Response<B>,
    ) -> tower_http::classify::ClassifiedResponse<Self::FailureClass, Self::ClassifyEos> {
        use tower_http::classify::ClassifiedResponse;
        let not_ready = matches!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY
        );
        match self {
            Classify::Standing if not_ready => ClassifiedResponse::Ready(Ok(())),
            _ => tower_http::classify::ServerErrorsAsFailures::new().classify_response(response),
        }
    }

    fn classify_error<E: std::fmt::Display + 'static>(self, error: &E) -> Self::FailureClass {
        tower_http::classify::ServerErrorsAsFailures::new().classify_error(error)
    }
}

/// The longest URI taken, in bytes.
const MAX_URI: usize = 8 * 1024;
/// The most bytes of header fields taken (names and values).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Refuse, with the JSON error, a URI or header fields longer than the
/// host takes. (Far longer ones, past what the HTTP parser buffers, are
/// refused by it before they get here, with no body.)
pub(super) async fn request_size(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let uri = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if uri > MAX_URI {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri-too-long",
            format!("the URI is {uri} bytes long; at most {MAX_URI}"),
        )
        .into_response();
    }
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers > MAX_HEADER_BYTES {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            format!("the header fields are {headers} bytes; at most {MAX_HEADER_BYTES}"),
        )
        .into_response();
    }
    next.run(request).await
}

/// Count each answered request of a route.
pub(super) async fn count_request(
    State(metrics): State<Arc<Metrics>>,
    route: axum::extract::MatchedPath,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().to_string();
    let response = next.run(request).await;
    metrics.request(route.as_str(), &method, response.status().as_u16());
    response
}
