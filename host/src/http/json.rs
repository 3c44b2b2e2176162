//! JSON request bodies as extractors: a handler takes `JsonBody<T>` (or
//! `JsonOrEmpty<T>`, where an empty body means `{}`) and gets a `T`, or the
//! client gets an [`ApiError`]: a body that is not JSON is a 400, a JSON body
//! of the wrong shape a 422 that names the field at fault.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ApiError;

/// A JSON body that must be there.
#[derive(Debug)]
pub(super) struct JsonBody<T>(pub T);

/// A JSON body that may be left out (an empty body, or `null`, reads as
/// `{}`).
#[derive(Debug)]
pub(super) struct JsonOrEmpty<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state).await?;
        parse(&bytes, false).map(Self)
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonOrEmpty<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state).await?;
        parse(&bytes, true).map(Self)
    }
}

/// Read a body: not JSON is a 400, a wrong field a 422 naming it. An empty
/// body, or `null`, reads as `{}` where `empty_ok`.
fn parse<T: DeserializeOwned>(bytes: &Bytes, empty_ok: bool) -> Result<T, ApiError> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) && empty_ok {
        b"{}"
    } else {
        bytes
    };
    // Syntax first, so that a body that is not JSON is told apart from a
    // JSON body of the wrong shape.
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid-json",
            format!("the body is not JSON: {e}"),
        )
    })?;
    // Where the body may be left out, `null` leaves it out too.
    let value = match value {
        Value::Null if empty_ok => Value::Object(serde_json::Map::new()),
        value => value,
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.inner();
        let path = e.path().to_string();
        let field = if path == "." {
            // serde names a missing or unknown field only in its message.
            let message = inner.to_string();
            message
                .split('`')
                .nth(1)
                .map_or_else(|| "body".to_string(), str::to_string)
        } else {
            path
        };
        ApiError::invalid(field.clone(), format!("{field}: {inner}"))
    })
}
