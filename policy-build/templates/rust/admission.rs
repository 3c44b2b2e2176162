//! {{name}}: an admission policy. Deleting an application in a namespace
//! labelled `environment=production` is denied; scaling above
//! `max-replicas` (default 10) waits for a person's approval; the rest is
//! allowed. AdmissionReviews are all allowed.

use verdict_policy::admission::{AdmissionInput, Decision, TaskAdmission};
use verdict_policy::prelude::*;

/// The settings (`ctx.settings`), each with its default; a key this type
/// does not name is refused before the policy serves.
#[derive(serde::Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
struct Settings {
    max_replicas: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self { max_replicas: 10 }
    }
}

pub struct Policy;

impl AdmissionPolicy for Policy {
    fn describe() -> PluginInfo {
        info(
            "{{name}}",
            env!("CARGO_PKG_VERSION"),
            "No deletes in production; large scale-ups need approval.",
        )
    }

    fn validate_settings(settings: &str) -> Result<(), String> {
        check_settings::<Settings>(settings)
    }

    fn admit_task(ctx: &Context, input: &AdmissionInput) -> Result<TaskAdmission, String> {
        let settings: Settings = settings(ctx)?;
        let production = input.app.as_ref().is_some_and(|app| {
            app.namespace_labels
                .iter()
                .any(|l| l.key == "environment" && l.value == "production")
        });
        // The app fields of the request's params, typed (seed 000's Task).
        let replicas = u64::from(input.request.spec.replicas.unwrap_or(0));
        let decision = match input.request.action {
            TaskAction::Delete if production => {
                Decision::Deny("applications in production are not deleted".into())
            }
            TaskAction::Scale if replicas > settings.max_replicas => Decision::RequireApproval(
                format!("{replicas} replicas is over {}", settings.max_replicas),
            ),
            _ => Decision::Allow,
        };
        Ok(TaskAdmission {
            decision,
            defaults: "{}".into(),
            warnings: Vec::new(),
            plan: Vec::new(),
        })
    }
}

verdict_policy::admission_policy!(Policy);
