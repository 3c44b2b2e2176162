//! Step hooks carried out by Kubernetes Jobs: a hook named with `job =
//! "install.yaml"` makes, for each step, a `batch/v1` Job from that
//! template in the instance's namespace, and the step goes as the Job goes
//! (`Complete`: done; `Failed`: failed, with the Job's reason).
//!
//! Every container of the template gets the step in its environment:
//!
//! | variable | value |
//! |---|---|
//! | `VERDICT_STEP_KEY` | the step's key (`shop/web-0/<machine uid>/3/1`), the same for every ask of one step |
//! | `VERDICT_NAMESPACE`, `VERDICT_INSTANCE`, `VERDICT_SET` | the instance |
//! | `VERDICT_STAGE`, `VERDICT_STEP` | the stage entered and the step's name |
//! | `VERDICT_PARAMS` | the step's parameters, as JSON |
//!
//! The Job's name is made from the step's key, so a step asked again —
//! after a restart or a leader handover — finds its Job instead of making a
//! second one: each step runs once. Finished Jobs are left for the
//! template's `ttlSecondsAfterFinished` (or a person) to remove.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::hooks::{StepCall, StepOutcome};

/// How long a running Job is waited before it is looked at again.
const RECHECK: Duration = Duration::from_secs(2);

/// A Job template, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct JobTemplate {
    job: Job,
}

impl JobTemplate {
    /// Read a template (YAML or JSON): a `batch/v1` Job with at least one
    /// container.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("the Job template {} cannot be read: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("the Job template {}: {e}", path.display()))
    }

    /// A template from its text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value: Value = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        let kind = (
            value["apiVersion"].as_str().unwrap_or_default(),
            value["kind"].as_str().unwrap_or_default(),
        );
        if kind != ("batch/v1", "Job") {
            let shown = |text: &str| match text.is_empty() {
                true => "?".to_string(),
                false => text.to_string(),
            };
            return Err(format!(
                "is a {}/{}, not a batch/v1 Job",
                shown(kind.0),
                shown(kind.1)
            ));
        }
        let job: Job = serde_json::from_value(value).map_err(|e| e.to_string())?;
        let containers = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map_or(0, |s| s.containers.len());
        if containers == 0 {
            return Err("spec.template.spec.containers is empty".into());
        }
        Ok(Self { job })
    }

    /// The Job of one step: the template, named for the step's key, in the
    /// instance's namespace, owned by the instance's Server (it goes with
    /// it), labelled, with the step and the leader that asks (its term) in
    /// every container's environment.
    pub fn job_for(&self, call: &StepCall<'_>) -> Job {
        let mut job = self.job.clone();
        job.metadata.name = Some(job_name(call.key, call.step));
        job.metadata.generate_name = None;
        job.metadata.namespace = Some(call.instance.namespace.clone());
        job.metadata.resource_version = None;
        job.metadata.uid = None;
        job.status = None;
        if !call.instance.uid.is_empty() {
            job.metadata.owner_references = Some(vec![OwnerReference {
                api_version: super::resources::API_VERSION.into(),
                kind: "Server".into(),
                name: call.instance.name.clone(),
                uid: call.instance.uid.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }]);
        }
        let labels = job.metadata.labels.get_or_insert_default();
        labels.insert("app.kubernetes.io/managed-by".into(), "verdict".into());
        labels.insert("verdict.dev/instance".into(), call.instance.name.clone());
        labels.insert("verdict.dev/vmreplicaset".into(), call.instance.set.clone());
        labels.insert("verdict.dev/step".into(), label_value(call.step));
        job.metadata
            .annotations
            .get_or_insert_default()
            .insert("verdict.dev/step-key".into(), call.key.to_string());
        let env = [
            ("VERDICT_STEP_KEY", call.key.to_string()),
            ("VERDICT_NAMESPACE", call.instance.namespace.clone()),
            ("VERDICT_INSTANCE", call.instance.name.clone()),
            ("VERDICT_SET", call.instance.set.clone()),
            ("VERDICT_STAGE", call.stage.to_string()),
            ("VERDICT_STEP", call.step.to_string()),
            ("VERDICT_PARAMS", call.params.to_string()),
            ("VERDICT_LEADER", call.leader.holder.clone()),
            ("VERDICT_TERM", call.leader.term.to_string()),
        ];
        if let Some(pod) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
            for container in &mut pod.containers {
                let vars = container.env.get_or_insert_default();
                vars.retain(|v| !env.iter().any(|(name, _)| v.name == *name));
                vars.extend(env.iter().map(|(name, value)| EnvVar {
                    name: name.to_string(),
                    value: Some(value.clone()),
                    value_from: None,
                }));
            }
        }
        job
    }
}

/// The name of a step's Job: `verdict-` and the step (cut), then a digest
/// of the step's key — a DNS label of at most 63 characters, the same for
/// every ask of the step.
pub fn job_name(key: &str, step: &str) -> String {
    let digest = hex::encode(&Sha256::digest(key.as_bytes())[..6]);
    let step: String = step
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c,
            false => '-',
        })
        .take(40)
        .collect();
    let step = step.trim_matches('-');
    match step.is_empty() {
        true => format!("verdict-{digest}"),
        false => format!("verdict-{step}-{digest}"),
    }
}

/// A step name as a label value (at most 63 characters of what labels
/// take).
fn label_value(step: &str) -> String {
    let value: String = step
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || "-_.".contains(c) {
            true => c,
            false => '-',
        })
        .take(63)
        .collect();
    value
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// Ask how the step's Job goes, making it when there is none yet. An
/// error is a call that could not be made (the API server refused or could
/// not be reached); a Job that failed is a failed step.
pub async fn ask(
    client: &kube::Client,
    template: &JobTemplate,
    call: &StepCall<'_>,
) -> Result<StepOutcome, String> {
    let api: Api<Job> = Api::namespaced(client.clone(), &call.instance.namespace);
    let name = job_name(call.key, call.step);
    let existing = api
        .get_opt(&name)
        .await
        .map_err(|e| format!("reading Job {name}: {}", say(&e)))?;
    let job = match existing {
        Some(job) => job,
        None => match api
            .create(&PostParams::default(), &template.job_for(call))
            .await
        {
            Ok(_) => {
                return Ok(StepOutcome::Running {
                    message: format!("Job {name} made"),
                    progress: None,
                    retry_after: RECHECK,
                });
            }
            // Made by an earlier ask whose answer was lost.
            Err(kube::Error::Api(status)) if status.code == 409 => api
                .get(&name)
                .await
                .map_err(|e| format!("reading Job {name}: {}", say(&e)))?,
            Err(e) => return Err(format!("making Job {name}: {}", say(&e))),
        },
    };
    Ok(outcome(&name, &job))
}

/// How a step goes by its Job's conditions and counts.
pub fn outcome(name: &str, job: &Job) -> StepOutcome {
    let status = job.status.clone().unwrap_or_default();
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == kind && c.status == "True")
    };
    if condition("Complete").is_some() {
        return StepOutcome::Done {
            message: format!("Job {name} completed"),
        };
    }
    if let Some(failed) = condition("Failed") {
        let why = [failed.reason.as_deref(), failed.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        return StepOutcome::Failed {
            message: match why.is_empty() {
                true => format!("Job {name} failed"),
                false => format!("Job {name} failed: {why}"),
            },
        };
    }
    StepOutcome::Running {
        message: format!(
            "Job {name}: {} active, {} succeeded, {} failed",
            status.active.unwrap_or(0),
            status.succeeded.unwrap_or(0),
            status.failed.unwrap_or(0)
        ),
        progress: None,
        retry_after: RECHECK,
    }
}

/// A Kubernetes client error in a few words.
fn say(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::hooks::InstanceRef;

    const TEMPLATE: &str = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: ignored\n  labels: {team: shop}\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: step\n        image: registry.example/steps:1\n        env: [{name: VERDICT_STEP, value: stale}, {name: KEEP, value: \"1\"}]\n";

    #[test]
    fn a_steps_job_is_the_template_named_for_its_key_with_the_step_in_its_environment() {
        let template = JobTemplate::parse(TEMPLATE).unwrap();
        let instance = InstanceRef {
            namespace: "shop".into(),
            name: "web-0".into(),
            set: "web".into(),
            uid: "5f0c1c2e-4d1a-4b8e-9c3f-2a1b0c9d8e7f".into(),
        };
        let params = serde_json::json!({"version": "2.0"});
        let call = StepCall {
            key: "shop/web-0/u-1/3/1",
            attempt: 4,
            leader: &crate::leader::Term::elected("verdict-a", 4),
            instance: &instance,
            stage: "deploying",
            step: "deploy-code",
            params: &params,
        };
        let job = template.job_for(&call);
        let name = job.metadata.name.clone().unwrap();
        assert_eq!(name, job_name("shop/web-0/u-1/3/1", "deploy-code"));
        assert!(name.starts_with("verdict-deploy-code-"), "{name}");
        assert_eq!(job.metadata.namespace.as_deref(), Some("shop"));
        let labels = job.metadata.labels.clone().unwrap();
        assert_eq!(labels["team"], "shop");
        assert_eq!(labels["verdict.dev/instance"], "web-0");
        assert_eq!(labels["verdict.dev/step"], "deploy-code");
        let env: Vec<(String, String)> = job.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|v| (v.name, v.value.unwrap_or_default()))
            .collect();
        let get = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("KEEP"), Some("1"));
        assert_eq!(get("VERDICT_STEP"), Some("deploy-code"));
        assert_eq!(env.iter().filter(|(n, _)| n == "VERDICT_STEP").count(), 1);
        assert_eq!(get("VERDICT_PARAMS"), Some(r#"{"version":"2.0"}"#));
        assert_eq!(get("VERDICT_STEP_KEY"), Some("shop/web-0/u-1/3/1"));
        // The leader that asks, and its term, as an HTTP hook is told.
        assert_eq!(get("VERDICT_LEADER"), Some("verdict-a"));
        assert_eq!(get("VERDICT_TERM"), Some("4"));
        // Owned by its Server: it goes with it.
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Server", "web-0", "5f0c1c2e-4d1a-4b8e-9c3f-2a1b0c9d8e7f")
        );
        assert_eq!(owner.controller, Some(true));
        // Another list's step is another Job; the same step, the same one.
        assert_ne!(name, job_name("shop/web-0/4/1", "deploy-code"));
        assert_eq!(name, job_name("shop/web-0/u-1/3/1", "deploy-code"));
    }

    #[test]
    fn job_names_are_dns_labels_whatever_the_step_is_called() {
        for step in ["Deploy Code!", &"x".repeat(200), "---", "ünïcode"] {
            let name = job_name("k", step);
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
            assert!(!name.ends_with('-') && !name.contains("--"), "{name}");
        }
    }

    #[test]
    fn a_template_that_is_not_a_job_is_refused_saying_why() {
        for (text, says) in [
            (
                "apiVersion: v1\nkind: Pod\n",
                "is a v1/Pod, not a batch/v1 Job",
            ),
            (
                "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      containers: []\n",
                "containers is empty",
            ),
            ("apiVersion: batch/v1\nkind: Job\nspec: [", "did not find"),
            ("{", "did not find expected node content"),
        ] {
            let error = JobTemplate::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn a_jobs_conditions_say_how_its_step_goes() {
        let job = |status: Value| -> Job {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "j"}, "status": status}))
                .unwrap()
        };
        assert!(matches!(
            outcome(
                "j",
                &job(serde_json::json!({"conditions": [{"type": "Complete", "status": "True"}]}))
            ),
            StepOutcome::Done { .. }
        ));
        let failed = outcome(
            "j",
            &job(
                serde_json::json!({"conditions": [{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}),
            ),
        );
        assert_eq!(
            failed,
            StepOutcome::Failed {
                message: "Job j failed: BackoffLimitExceeded: Job has reached the specified backoff limit".into()
            }
        );
        let running = outcome("j", &job(serde_json::json!({"active": 1})));
        assert!(
            matches!(&running, StepOutcome::Running { message, .. } if message == "Job j: 1 active, 0 succeeded, 0 failed"),
            "{running:?}"
        );
    }
}
