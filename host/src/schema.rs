//! JSON schemas of custom resources' fields that their Rust types cannot
//! say by themselves (`#[schemars(schema_with = "…")]`).

use schemars::{Schema, SchemaGenerator, json_schema};

use crate::wit::WitName;

/// An object of any fields, kept as it is by the API server (a task's
/// parameters, a policy's settings, KubeVirt's VM spec).
pub fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// An enumeration by WIT name: a string, one of its names
/// (`#[schemars(schema_with = "wit_names::<T>")]`).
pub fn wit_names<T: WitName>(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": T::NAMES })
}
