//! Whose an object is. verdict changes and deletes, beyond the day-2
//! actions any watched app gets (start, stop, restart, scale, a new image),
//! only what it made for an app — every such object carries the app's
//! label and `app.kubernetes.io/managed-by: verdict` — or what a person
//! handed it with an `adopt` task, which records the adoption on the object
//! (`verdict.dev/adopted-by`, `verdict.dev/adopted-at`).

use std::collections::BTreeMap;

use super::spec::{INSTANCE, MANAGED_BY};
use crate::wit::types::KeyValue;

/// The annotation that says who handed an object to verdict.
pub const ADOPTED_BY: &str = "verdict.dev/adopted-by";
/// The annotation that says when (RFC 3339).
pub const ADOPTED_AT: &str = "verdict.dev/adopted-at";

/// Whose an object is, as far as verdict is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// verdict made it for this app.
    Made,
    /// A person handed it to verdict (the adoption's author).
    Adopted(String),
    /// Someone else's: verdict may not change or delete it beyond the
    /// day-2 actions. `manager` names who made it, when its labels say.
    Other { manager: Option<String> },
}

impl Owner {
    /// Whether verdict may change or delete the object as its own.
    pub fn is_verdicts(&self) -> bool {
        !matches!(self, Owner::Other { .. })
    }

    /// Whose an object of app `app` is, from its labels and annotations.
    pub fn of(
        app: &str,
        label: impl Fn(&str) -> Option<String>,
        annotation: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let manager = label(MANAGED_BY);
        if manager.as_deref() == Some("verdict") && label(INSTANCE).as_deref() == Some(app) {
            return Owner::Made;
        }
        if let Some(by) = annotation(ADOPTED_BY).filter(|by| !by.is_empty()) {
            return Owner::Adopted(by);
        }
        // A managed-by label of verdict for another app is not this app's.
        Owner::Other { manager }
    }

    /// Whose an object is, from its metadata's maps.
    pub fn of_meta(
        app: &str,
        labels: Option<&BTreeMap<String, String>>,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Self {
        Self::of(
            app,
            |key| labels.and_then(|l| l.get(key)).cloned(),
            |key| annotations.and_then(|a| a.get(key)).cloned(),
        )
    }

    /// Whose an observed object is, from its key-value lists.
    pub fn of_observed(app: &str, labels: &[KeyValue], annotations: &[KeyValue]) -> Self {
        let find = |list: &[KeyValue], key: &str| {
            list.iter()
                .find(|kv| kv.key == key)
                .map(|kv| kv.value.clone())
        };
        Self::of(app, |key| find(labels, key), |key| find(annotations, key))
    }
}

/// What a person is told of an object that is not verdict's: whose it is
/// and how to hand it over. `what` is `Kind namespace/name`; `app` is
/// `namespace/name`.
pub fn not_verdicts(what: &str, owner: &Owner, app: &str) -> String {
    let made_by = match owner {
        Owner::Other {
            manager: Some(manager),
        } => format!(" (its app.kubernetes.io/managed-by is `{manager}`)"),
        _ => String::new(),
    };
    format!(
        "{what} was not made by verdict{made_by}; verdict deletes and changes beyond image and replicas only what it made or was handed: adopt it first with a task {{\"app\": \"{app}\", \"action\": \"adopt\"}}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Owner {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let (labels, annotations) = (map(labels), map(annotations));
        Owner::of_meta("web", Some(&labels), Some(&annotations))
    }

    #[test]
    fn made_means_both_labels_for_this_app() {
        assert_eq!(
            owner(&[(MANAGED_BY, "verdict"), (INSTANCE, "web")], &[]),
            Owner::Made
        );
        assert_eq!(
            owner(&[(MANAGED_BY, "verdict"), (INSTANCE, "api")], &[]),
            Owner::Other {
                manager: Some("verdict".into())
            },
            "made for another app"
        );
        assert_eq!(
            owner(&[(INSTANCE, "web")], &[]),
            Owner::Other { manager: None },
            "the app's label alone is not verdict's"
        );
        assert_eq!(
            owner(&[(MANAGED_BY, "Helm"), (INSTANCE, "web")], &[]),
            Owner::Other {
                manager: Some("Helm".into())
            }
        );
    }

    #[test]
    fn an_adoption_is_recorded_by_its_author() {
        assert_eq!(
            owner(&[(MANAGED_BY, "Helm")], &[(ADOPTED_BY, "ana")]),
            Owner::Adopted("ana".into())
        );
        assert!(!owner(&[], &[(ADOPTED_BY, "")]).is_verdicts());
        assert!(
            !owner(&[(ADOPTED_BY, "ana")], &[]).is_verdicts(),
            "a label is not an adoption"
        );
    }

    #[test]
    fn the_refusal_says_how_to_adopt() {
        let text = not_verdicts(
            "Deployment legacy/web",
            &Owner::Other {
                manager: Some("Helm".into()),
            },
            "legacy/web",
        );
        assert!(text.starts_with("Deployment legacy/web was not made by verdict"));
        assert!(text.contains("`Helm`") && text.contains("\"action\": \"adopt\""));
    }
}
