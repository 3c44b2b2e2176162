//! [`ApiError`]: every error answer, as JSON, with a `From` for each domain
//! error. Internal failures reach clients as a generic text; their detail
//! goes to the log under the request's id.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::failover::FailoverError;
use crate::overrides::OverrideError;
use crate::tasks::{Denial, Refusal, TaskError};

/// An error answered as JSON.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The request field at fault, when one is.
    pub field: Option<String>,
    /// More members of the error object.
    pub details: serde_json::Map<String, Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            field: None,
            details: serde_json::Map::new(),
        }
    }

    /// A part of the host failed (`what`): the client is told so and
    /// pointed at the log by its request id; the error, with its sources,
    /// goes to the log (a database path, an API server's answer stay out of
    /// the answer).
    pub(super) fn internal(what: &str, error: &dyn std::error::Error) -> Self {
        tracing::error!(error = %error, "{what} failed");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store-failed",
            format!("{what} failed; the server's log has the detail under this request's id"),
        )
    }

    pub(super) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", message);
        error.field = Some(field.into());
        error
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = self.details;
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.into());
        if let Some(field) = self.field {
            error.insert("field".into(), field.into());
        }
        (self.status, Json(json!({ "error": error }))).into_response()
    }
}

/// The Kubernetes names in a request's path, checked before they reach the
/// API server or a store: a namespace is a DNS label, any other name a DNS
/// subdomain. `.` and `..`, which would walk the API server's paths, are
/// neither; what cannot be a name is not found.
pub(super) fn kube_names(names: &[(&str, &str)]) -> Result<(), ApiError> {
    for (what, name) in names {
        let label = |part: &str| {
            (1..=63).contains(&part.len())
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        };
        let valid = if *what == "namespace" {
            label(name)
        } else {
            name.len() <= 253 && name.split('.').all(label)
        };
        if !valid {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not-found",
                format!("no {what} `{name}`: it is not a Kubernetes name"),
            ));
        }
    }
    Ok(())
}

/// A body that could not be read: over the limit, or cut off.
impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> Self {
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => body_too_large(),
            status => ApiError::new(status, "invalid-request", rejection.body_text()),
        }
    }
}

/// The answer to a body over the limit.
fn body_too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body-too-large",
        "the request body is over the limit (--body-limit-kib)",
    )
}

impl From<TaskError> for ApiError {
    fn from(error: TaskError) -> Self {
        match error {
            TaskError::Refused(Refusal::Invalid { field, message }) => {
                ApiError::invalid(field.clone(), format!("{field}: {message}"))
            }
            TaskError::Refused(Refusal::Conflict(message)) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", message)
            }
            TaskError::Denied(Denial::NotVerdicts(message)) => {
                ApiError::new(StatusCode::CONFLICT, "not-verdicts", message)
            }
            TaskError::Refused(Refusal::Protected(message)) => {
                ApiError::new(StatusCode::FORBIDDEN, "protected-namespace", message)
            }
            TaskError::Denied(Denial::Denied {
                reason,
                warnings,
                policy,
            }) => {
                let mut error = ApiError::new(StatusCode::FORBIDDEN, "denied", reason);
                error.details.insert("warnings".into(), json!(warnings));
                error.details.insert("policy".into(), json!(policy));
                error
            }
            TaskError::Denied(denial @ Denial::Unavailable(_)) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "admission-unavailable",
                denial.to_string(),
            ),
            TaskError::NotFound(id) => ApiError::new(
                StatusCode::NOT_FOUND,
                "no-such-task",
                format!("no task {id}"),
            ),
            // The detail (a database path, an API server's answer) goes to
            // the log, under the request's id; the client gets the id.
            TaskError::Store(error) => ApiError::internal("the task store", &error),
            TaskError::Unverified(message) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "cluster-unavailable",
                message,
            ),
        }
    }
}

impl From<FailoverError> for ApiError {
    fn from(error: FailoverError) -> Self {
        use FailoverError as E;
        match error {
            E::NotFound(code, m) => ApiError::new(StatusCode::NOT_FOUND, code, m),
            E::Invalid(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", m),
            E::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            E::Storage(error) => ApiError::internal("the failover state", &error),
        }
    }
}

impl From<crate::delivery::policies::ChangeError> for ApiError {
    fn from(error: crate::delivery::policies::ChangeError) -> Self {
        use crate::delivery::policies::ChangeError as E;
        match error {
            E::NotFound(name) => ApiError::new(
                StatusCode::NOT_FOUND,
                "no-such-policy",
                format!("no Policy {name}"),
            ),
            E::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            E::Invalid(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", m),
            E::Kube(error) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "cluster-unavailable",
                format!("the Kubernetes API: {error}"),
            ),
        }
    }
}

impl From<crate::lifecycle::service::ServiceError> for ApiError {
    fn from(error: crate::lifecycle::service::ServiceError) -> Self {
        use crate::lifecycle::service::ServiceError as E;
        match error {
            E::NotFound(code, m) => ApiError::new(StatusCode::NOT_FOUND, code, m),
            E::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            E::Changed => ApiError::new(StatusCode::CONFLICT, "conflict", E::Changed.to_string()),
            E::Invalid(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", m),
            E::Api(error) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "cluster-unavailable",
                format!("the Kubernetes API: {error}"),
            ),
        }
    }
}

impl From<OverrideError> for ApiError {
    fn from(error: OverrideError) -> Self {
        match error {
            OverrideError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, "no-override", m),
            OverrideError::Invalid(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-field", m)
            }
            OverrideError::Storage(error) => ApiError::internal("the overrides", &error),
        }
    }
}

impl From<crate::history::HistoryError> for ApiError {
    fn from(error: crate::history::HistoryError) -> Self {
        use crate::history::HistoryError as E;
        match error {
            E::Off => ApiError::new(StatusCode::NOT_FOUND, "history-off", error.to_string()),
            E::Unavailable(detail) => {
                tracing::error!(error = %detail, "the history cannot be read");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "history-unavailable",
                    "the history cannot be opened; /readyz and the server's log say why",
                )
            }
            E::Unwritten(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "history-unavailable",
                format!("{error} (the disk may be full); /readyz says why"),
            ),
            E::Storage(error) => ApiError::internal("the history", &error),
        }
    }
}

/// Errors the HTTP layers answer themselves (a body over the limit, a
/// request past its time, a query or path that does not parse, a method
/// not allowed) in the same JSON form as every other error.
pub(super) async fn json_errors(response: Response) -> Response {
    let json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let status = response.status();
    if !json
        && (status.is_client_error() || status.is_server_error())
        && !matches!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
        )
    {
        // The extractors' rejections: a line of text that says what is wrong.
        let text = axum::body::to_bytes(response.into_body(), 16 * 1024)
            .await
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
        let code = match status {
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "invalid-request",
            StatusCode::NOT_FOUND => "not-found",
            StatusCode::METHOD_NOT_ALLOWED => "method-not-allowed",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported-media-type",
            _ => "error",
        };
        let message = if text.is_empty() {
            status.canonical_reason().unwrap_or("error").to_string()
        } else {
            text
        };
        return ApiError::new(status, code, message).into_response();
    }
    match status {
        StatusCode::PAYLOAD_TOO_LARGE if !json => body_too_large().into_response(),
        StatusCode::REQUEST_TIMEOUT if !json => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "the request was not answered in time (--request-timeout-ms)",
        )
        .into_response(),
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageError;
    use crate::tasks::store::StoreError;

    #[test]
    fn a_store_failure_reaches_the_client_without_its_detail() {
        let detail = StorageError::Folder {
            path: "/var/lib/verdict".into(),
            source: std::io::Error::other("disk I/O error"),
        };
        let error = ApiError::from(TaskError::Store(StoreError::Storage(detail)));
        assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(error.code, "store-failed");
        assert!(!error.message.contains("/var/lib"), "{}", error.message);
        assert!(error.message.contains("request's id"), "{}", error.message);
    }
}
