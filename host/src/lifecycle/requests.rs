//! What people ask of a delivery, carried as annotations on the resource it
//! is about, so that any replica takes the request (over HTTP, or a person
//! with `kubectl annotate`) and the leader carries it out on its next
//! reconcile: on a `VMDeployment` approve the gate it waits at, promote
//! (skip the remaining steps) or abort (back to the code released before);
//! on an instance's `VirtualMachine` retry its failed list, skip the step in
//! progress, approve a list that waits for a person.
//!
//! A request names what it is about (the code and step, the list and step,
//! the stage), so that it applies once: a request about a step or a list
//! that has passed changes nothing. Each keeps who asked, why and when,
//! and stays on the resource as its record.

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;
use crate::wit::lifecycle::Stage;

/// A deployment's gate approved.
pub const APPROVE: &str = "verdict.dev/approve";
/// A deployment's remaining steps skipped.
pub const PROMOTE: &str = "verdict.dev/promote";
/// A deployment's rollout aborted.
pub const ABORT: &str = "verdict.dev/abort";
/// A deployment rolled back to a released revision (a record of who asked:
/// the change itself is to its spec).
pub const ROLLBACK: &str = "verdict.dev/rollback";
/// An instance's failed list run again.
pub const RETRY: &str = "verdict.dev/retry";
/// An instance's step in progress skipped.
pub const SKIP: &str = "verdict.dev/skip";

/// One person's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Request {
    pub by: String,
    #[serde(default)]
    pub why: String,
    /// When it was made, RFC 3339.
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// The deployment's code it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The deployment's revision it is about (its code and steps); a
    /// request without one is about any revision of its code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The deployment's step (from 0), or the list's step (from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<usize>,
    /// The instance's list it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<u64>,
    /// The stage a retry enters again.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::wit::wit_name_opt"
    )]
    #[schema(value_type = Option<String>)]
    pub stage: Option<Stage>,
}

impl Request {
    /// A request by `by` for `why`, at `at`, about nothing yet.
    pub fn new(by: &str, why: &str, at: Timestamp) -> Self {
        Self {
            by: by.into(),
            why: why.into(),
            at,
            code: None,
            revision: None,
            step: None,
            list: None,
            stage: None,
        }
    }

    /// Read the request kept under `key`, when there is one; one that does
    /// not read is named.
    pub fn read(
        annotations: &std::collections::BTreeMap<String, String>,
        key: &str,
    ) -> Result<Option<Self>, String> {
        annotations
            .get(key)
            .map(|text| serde_json::from_str(text).map_err(|e| format!("{key} does not read: {e}")))
            .transpose()
    }

    /// As an annotation's value.
    pub fn write(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Who and why, as a log line says it.
    pub fn who(&self) -> String {
        who(&self.by, &self.why)
    }
}

/// Who asked and why, as a log line says it: `by`, or `by: why`.
pub fn who(by: &str, why: &str) -> String {
    match why.is_empty() {
        true => by.to_string(),
        false => format!("{by}: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_request_reads_back_and_a_bad_one_is_named() {
        let mut request = Request::new("alice", "canary looks fine", 1_767_225_600_000);
        request.code = Some("2.0".into());
        request.step = Some(1);
        let annotations = BTreeMap::from([(APPROVE.to_string(), request.write())]);
        assert_eq!(
            Request::read(&annotations, APPROVE).unwrap(),
            Some(request.clone())
        );
        assert_eq!(request.who(), "alice: canary looks fine");
        assert_eq!(Request::read(&annotations, ABORT).unwrap(), None);
        let bad = BTreeMap::from([(ABORT.to_string(), "{\"by\": 3}".to_string())]);
        assert!(
            Request::read(&bad, ABORT)
                .unwrap_err()
                .starts_with("verdict.dev/abort does not read")
        );
    }
}
