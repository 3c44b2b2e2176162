//! JSON request bodies as extractors: a handler takes `JsonBody<T>` (or
//! `JsonOrEmpty<T>`, where an empty body means `{}`) and gets a `T`, or the
//! client gets an [`ApiError`]: a body that is not JSON is a 400, a JSON body
//! of the wrong shape (not an object, a field of the wrong type) a 422 that
//! names the field at fault.

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

/// A JSON value in which no object has a key twice: serde_json would keep
/// the last (`"action":"restart","action":"delete"` a delete), which a
/// client that sent both may not mean, and a check of the first may not see.
struct Unique(Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "the key `{key}` appears twice in one object"
                )));
            }
            let Unique(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
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
    let Unique(value) = serde_json::from_slice(text).map_err(|e| {
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
    // Every body is an object: serde would take a struct from an array of
    // its fields in order, which no client means.
    if !value.is_object() {
        return Err(ApiError::invalid(
            "body",
            "body: the body must be a JSON object",
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Decision {
        by: Option<String>,
        reason: Option<String>,
    }

    fn read(body: &str, empty_ok: bool) -> Result<Decision, ApiError> {
        parse(&Bytes::from(body.to_string()), empty_ok)
    }

    #[test]
    fn a_key_given_twice_is_refused_naming_it() {
        for body in [
            r#"{"by": "ana", "by": "bob"}"#,
            r#"{"reason": {"why": 1, "why": 2}}"#,
            r#"{"reason": [{"by": 1, "by": 1}]}"#,
        ] {
            let error = read(body, false).unwrap_err();
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(error.code, "invalid-json", "{body}");
            assert!(error.message.contains("appears twice"), "{}", error.message);
        }
        let error = read(r#"{"by": "ana", "by": "bob"}"#, false).unwrap_err();
        assert!(error.message.contains("`by`"), "{}", error.message);
        // The same key in two objects is no duplicate.
        assert!(read(r#"{"by": "ana", "reason": "x"}"#, false).is_ok());
    }

    #[test]
    fn only_an_object_is_a_body_and_an_optional_one_may_be_left_out() {
        assert!(read(r#"{"by": "ana"}"#, false).is_ok());
        assert!(read("", true).is_ok());
        assert!(read("null", true).is_ok());
        for (body, status) in [
            ("[null, null]", StatusCode::UNPROCESSABLE_ENTITY),
            (r#"["ana", "why"]"#, StatusCode::UNPROCESSABLE_ENTITY),
            ("3", StatusCode::UNPROCESSABLE_ENTITY),
            ("null", StatusCode::UNPROCESSABLE_ENTITY),
            ("{", StatusCode::BAD_REQUEST),
        ] {
            let error = read(body, false).unwrap_err();
            assert_eq!(error.status, status, "{body}");
        }
        assert_eq!(
            read("[null, null]", true).unwrap_err().field.as_deref(),
            Some("body")
        );
    }
}
