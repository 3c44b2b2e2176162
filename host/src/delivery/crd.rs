//! The `Policy` resource as a Rust type: the CRD the chart installs is
//! generated from it (`verdict crds`, which `cargo xtask crds` writes).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A policy delivered to every replica of verdict from an OCI registry (by
/// digest, or a tag resolved once and pinned) or an HTTPS URL with its
/// sha256. Every replica watches Policy objects in its namespace, fetches,
/// checks and swaps the component in without a restart, and writes what it
/// serves under `status.replicas.<replica>`; the leader sums it up in
/// `status.ready` (replicas serving the digest of this generation /
/// replicas). A rollout is complete when every replica serves the new
/// digest.
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
// Printer columns repeat their keys, which clippy takes for repeated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "verdict.dev",
    version = "v1alpha1",
    kind = "Policy",
    root = "PolicyResource",
    plural = "policies",
    singular = "policy",
    shortname = "vpol",
    namespaced,
    status = "PolicyStatus",
    printcolumn(name = "World", type_ = "string", json_path = ".spec.world"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "Digest", type_ = "string", json_path = ".status.digest"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.ready"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    doc = "A policy delivered to every replica of verdict from an OCI registry or an HTTPS URL."
)]
pub struct PolicySpec {
    pub world: WorldName,
    /// An OCI reference (registry/repository@sha256:… or :tag) or an https
    /// URL.
    #[schemars(length(min = 1))]
    pub source: String,
    /// The sha256 of the component at a URL source (64 hex digits).
    #[schemars(regex(pattern = "^(sha256:)?[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
    /// The policy's settings, handed to it as JSON text.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::any_object")]
    pub settings: Option<Value>,
    #[serde(default)]
    pub mode: ModeName,
    /// The policy's own limits, over the host's (a Python policy needs more
    /// memory than a Rust one).
    pub limits: Option<Limits>,
}

/// The four worlds a policy may serve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WorldName {
    Status,
    Failover,
    Admission,
    Lifecycle,
}

/// Whether a policy decides or is only asked beside the one that does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ModeName {
    #[default]
    Active,
    Shadow,
}

/// A policy's own limits.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Limits {
    /// Deadline of one call, in milliseconds.
    #[serde(
        rename = "callTimeoutMs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub call_timeout_ms: Option<u64>,
    /// Memory one instance may grow to, in MiB.
    #[serde(
        rename = "memoryLimitMiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub memory_limit_mib: Option<u64>,
}

/// What the replicas serve of a Policy.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The digest this generation's source resolves to.
    pub digest: Option<String>,
    /// Replicas serving that digest / replicas.
    pub ready: Option<String>,
    pub observed_generation: Option<i64>,
    /// A tag resolved to its digest, once for a generation; every replica
    /// serves that digest.
    pub resolved: Option<Resolved>,
    /// What each replica serves, by the replica's name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replicas: BTreeMap<String, ReplicaStatus>,
}

/// A tag pinned to its digest for one generation.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resolved {
    pub generation: Option<i64>,
    pub reference: Option<String>,
}

/// What one replica serves of a Policy, or why it cannot.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    #[serde(default)]
    pub digest: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    pub observed_generation: Option<i64>,
    pub at: Option<String>,
}
