//! The OpenAPI document's own parts, beyond what the handlers' annotations
//! say: verdict's name and licence, the bearer tokens, the error answers
//! every operation can give, the AdmissionReview schema.

use serde_json::json;

/// The document's own parts: verdict's name, version and licence (not the
/// generator's), the bearer tokens, and the error answers every operation
/// can give (a request that does not parse, a change refused by the
/// access rules).
pub(super) fn describe(api: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::security::{
        HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
    };
    use utoipa::openapi::{ContentBuilder, LicenseBuilder, ResponseBuilder};
    api.info.title = "verdict".into();
    api.info.version = env!("CARGO_PKG_VERSION").into();
    api.info.description =
        Some("Hot-swappable WebAssembly policies over a Kubernetes cluster.".into());
    api.info.contact = None;
    api.info.license = Some(
        LicenseBuilder::new()
            .name("Apache-2.0")
            .identifier(Some("Apache-2.0"))
            .build(),
    );
    let components = api.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "A read or write token (--read-tokens-file, --write-tokens-file); none is needed when no token is configured",
                ))
                .build(),
        ),
    );
    // Tokens are optional: without any configured, everything is open.
    api.security = Some(vec![
        SecurityRequirement::default(),
        SecurityRequirement::new("bearer", Vec::<String>::new()),
    ]);
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("ApiErrorBody")))
                    .build(),
            )
            .build()
    };
    components.schemas.insert(
        "ApiErrorBody".into(),
        utoipa::openapi::RefOr::T(error_schema()),
    );
    components.schemas.insert(
        "AdmissionReview".into(),
        utoipa::openapi::RefOr::T(admission_review_schema()),
    );
    if let Some(body) = api
        .paths
        .paths
        .get_mut("/v1/admission/review")
        .and_then(|item| item.post.as_mut())
        .and_then(|operation| operation.request_body.as_mut())
    {
        body.required = Some(utoipa::openapi::Required::True);
        body.content.insert(
            "application/json".into(),
            ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name(
                    "AdmissionReview",
                )))
                .build(),
        );
    }
    // Any 64-bit id is taken (one never issued gets a `resync`), not only
    // the 63 bits the generator's `int64` would say.
    if let Some(parameter) = api
        .paths
        .paths
        .get_mut("/v1/events")
        .and_then(|item| item.get.as_mut())
        .and_then(|operation| operation.parameters.as_mut())
        .and_then(|parameters| parameters.iter_mut().find(|p| p.name == "last-event-id"))
    {
        parameter.schema =
            serde_json::from_value(json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}))
                .ok();
    }
    for (path, item) in api.paths.paths.iter_mut() {
        let named = path.contains('{');
        for operation in [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
        {
            let with_body = operation.request_body.is_some();
            let responses = &mut operation.responses.responses;
            for (code, description, applies) in [
                (
                    "400",
                    "The request does not parse (query, path, header or body)",
                    true,
                ),
                ("401", "A token is needed", true),
                (
                    "403",
                    "The token does not allow it, or a change came from another origin",
                    true,
                ),
                ("404", "Nothing of that name", named),
                ("415", "The body is not JSON", with_body),
                ("414", "The URI is longer than 8 KiB", true),
                ("422", "A field is out of bounds or unknown, named", true),
                ("431", "The header fields are larger than 64 KiB", true),
            ] {
                if applies {
                    responses
                        .entry(code.into())
                        .or_insert_with(|| error(description).into());
                }
            }
        }
    }
}

/// What the webhook takes: an `admission.k8s.io` AdmissionReview with a
/// request, in the parts the host reads (the API server sends more).
fn admission_review_schema() -> utoipa::openapi::schema::Schema {
    let text = json!({"type": "string"});
    let optional = json!({"type": ["string", "null"]});
    let names = json!({
        "type": ["object", "null"],
        "additionalProperties": {"type": "string"},
    });
    let object = json!({
        "type": ["object", "null"],
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "name": optional,
                    "namespace": optional,
                    "labels": names,
                    "annotations": names,
                },
            },
        },
    });
    let triple = |last: &str| {
        json!({
            "type": "object",
            "required": ["group", "version", last],
            "properties": {"group": text, "version": text, last: text},
        })
    };
    let schema = json!({
        "type": "object",
        "required": ["apiVersion", "kind", "request"],
        "properties": {
            "apiVersion": {"type": "string", "enum": ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]},
            "kind": {"type": "string", "enum": ["AdmissionReview"]},
            "request": {
                "type": "object",
                "required": ["uid", "kind", "resource", "operation", "userInfo"],
                "properties": {
                    "uid": text,
                    "kind": triple("kind"),
                    "resource": triple("resource"),
                    "subResource": optional,
                    "name": text,
                    "namespace": optional,
                    "operation": {"type": "string", "enum": ["CREATE", "UPDATE", "DELETE", "CONNECT"]},
                    "userInfo": {
                        "type": "object",
                        "properties": {
                            "username": optional,
                            "uid": optional,
                            "groups": {"type": ["array", "null"], "items": text},
                        },
                    },
                    "object": object,
                    "oldObject": object,
                    "dryRun": {"type": "boolean"},
                },
            },
        },
    });
    serde_json::from_value(schema).expect("the AdmissionReview schema is a schema")
}

/// The JSON error document every error answer is.
fn error_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let text = || ObjectBuilder::new().schema_type(Type::String);
    ObjectBuilder::new()
        .property(
            "error",
            ObjectBuilder::new()
                .property(
                    "code",
                    text().description(Some("What kind of error, for programs")),
                )
                .property(
                    "message",
                    text().description(Some("What went wrong, for people")),
                )
                .property(
                    "field",
                    text().description(Some("The request field at fault, when one is")),
                )
                .required("code")
                .required("message"),
        )
        .required("error")
        .into()
}
