//! The default admission policy: one mutating task in flight per
//! application, protected applications cannot be deleted, stopping or
//! deleting in a production namespace waits for a person (seed 002's human
//! decision point), and task parameters are checked. Kubernetes admission
//! reviews are allowed, with a warning for images without a pinned tag.

wit_bindgen::generate!({
    world: "admission-policy",
    path: "../../wit",
});

use exports::verdict::policy::admission::{
    AdmissionInput, Decision, Guest, PlanStep, ReviewResponse, TaskAdmission,
};
use serde_json::Value;
use verdict::policy::types::{Context, KeyValue, PluginInfo, TaskAction, TaskPhase};

struct Settings {
    max_replicas: u64,
    /// Namespace label that marks production: `key=value`.
    production_label: (String, String),
    /// Label (on the namespace or a workload) that protects from deletion.
    protected_label: String,
}

impl Settings {
    fn parse(text: &str) -> Self {
        let value: Value = serde_json::from_str(text).unwrap_or_default();
        let text_of = |key: &str, default: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or(default)
                .to_string()
        };
        let production = text_of("production-label", "verdict.dev/environment=production");
        let (k, v) = production.split_once('=').unwrap_or((&production, "true"));
        Self {
            max_replicas: value
                .get("max-replicas")
                .and_then(Value::as_u64)
                .unwrap_or(100),
            production_label: (k.to_string(), v.to_string()),
            protected_label: text_of("protected-label", "verdict.dev/protected"),
        }
    }
}

struct DefaultAdmission;

impl Guest for DefaultAdmission {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "default-admission".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "One task in flight per app, protected apps, approval in production, parameter checks.".into(),
            settings_schema: Some(
                r#"{"type":"object","properties":{"max-replicas":{"type":"integer","minimum":0},"production-label":{"type":"string"},"protected-label":{"type":"string"}}}"#.into(),
            ),
        }
    }

    fn admit_task(ctx: Context, input: AdmissionInput) -> Result<TaskAdmission, String> {
        let settings = Settings::parse(&ctx.settings);
        let params: Value = serde_json::from_str(&input.request.params)
            .map_err(|e| format!("params are not JSON: {e}"))?;
        let mut warnings = Vec::new();
        let decision = decide(&settings, &input, &params, &mut warnings);
        Ok(TaskAdmission {
            decision,
            defaults: defaults_for(input.request.action).to_string(),
            warnings,
            plan: plan_for(input.request.action),
        })
    }

    fn review(_ctx: Context, request: String) -> Result<ReviewResponse, String> {
        let request: Value =
            serde_json::from_str(&request).map_err(|e| format!("request is not JSON: {e}"))?;
        let mut warnings = Vec::new();
        let containers = request
            .pointer("/object/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for c in containers {
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            let tag = image
                .rsplit_once(':')
                .map(|(_, t)| t)
                .filter(|t| !t.contains('/'));
            if !image.contains('@') && matches!(tag, None | Some("latest")) {
                warnings.push(format!("image {image} is not pinned to a tag or digest"));
            }
        }
        Ok(ReviewResponse {
            allowed: true,
            code: None,
            message: None,
            patch: None,
            warnings,
        })
    }
}

export!(DefaultAdmission);

fn has_label(labels: &[KeyValue], key: &str, value: Option<&str>) -> bool {
    labels
        .iter()
        .any(|l| l.key == key && value.is_none_or(|v| l.value == v))
}

fn decide(
    settings: &Settings,
    input: &AdmissionInput,
    params: &Value,
    warnings: &mut Vec<String>,
) -> Decision {
    let request = &input.request;
    if let Some(busy) = input.tasks.iter().find(|t| {
        matches!(
            t.phase,
            TaskPhase::Pending | TaskPhase::AwaitingApproval | TaskPhase::Running
        )
    }) {
        return Decision::Deny(
            format!(
                "task {} ({:?}) is still in flight for this app; wait for it or cancel it",
                busy.id, busy.action
            )
            .to_lowercase(),
        );
    }

    match request.action {
        TaskAction::Create | TaskAction::Update => {
            if params
                .get("image")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Decision::Deny("params.image is required for create and update".into());
            }
        }
        TaskAction::Scale => {
            if params.get("replicas").is_none() {
                return Decision::Deny("params.replicas is required for scale".into());
            }
        }
        _ => {}
    }
    if let Some(replicas) = params.get("replicas") {
        match replicas.as_u64() {
            Some(n) if n <= settings.max_replicas => {}
            _ => {
                return Decision::Deny(format!(
                    "params.replicas must be a whole number from 0 to {}",
                    settings.max_replicas
                ));
            }
        }
    }

    let (namespace_labels, workload_labels): (&[KeyValue], Vec<&KeyValue>) = match &input.app {
        Some(app) => (
            &app.namespace_labels,
            app.workloads.iter().flat_map(|w| w.labels.iter()).collect(),
        ),
        None => (&[], Vec::new()),
    };
    let protected = has_label(namespace_labels, &settings.protected_label, Some("true"))
        || workload_labels
            .iter()
            .any(|l| l.key == settings.protected_label && l.value == "true");
    if request.action == TaskAction::Delete && protected {
        return Decision::Deny(format!(
            "the app is protected ({}=true); remove the label to delete it",
            settings.protected_label
        ));
    }
    let (key, value) = &settings.production_label;
    if matches!(request.action, TaskAction::Delete | TaskAction::Stop)
        && has_label(namespace_labels, key, Some(value))
    {
        return Decision::RequireApproval(
            format!(
                "{:?} in a production namespace ({key}={value}) needs a person's approval",
                request.action
            )
            .to_lowercase(),
        );
    }
    if input.app.as_ref().is_some_and(|a| !a.namespace_exists)
        && request.action != TaskAction::Create
    {
        warnings.push(format!(
            "namespace {} does not exist yet",
            request.app.namespace
        ));
    }
    Decision::Allow
}

fn defaults_for(action: TaskAction) -> Value {
    match action {
        TaskAction::Create => serde_json::json!({ "replicas": 1 }),
        _ => serde_json::json!({}),
    }
}

fn plan_for(action: TaskAction) -> Vec<PlanStep> {
    let step = |name: &str, description: &str| PlanStep {
        name: name.into(),
        description: description.into(),
    };
    match action {
        TaskAction::Create => vec![
            step(
                "prepare-environment",
                "namespace, storage and configuration",
            ),
            step("deploy", "create the workload"),
            step(
                "health-check",
                "wait until replicas are ready and the health check passes",
            ),
            step("open-traffic", "route traffic to the app"),
        ],
        TaskAction::Update => vec![
            step("deploy", "roll out the new version"),
            step("health-check", "wait until the new replicas are ready"),
        ],
        TaskAction::Delete => vec![
            step("close-traffic", "stop routing traffic to the app"),
            step("delete", "delete the workload and its resources"),
        ],
        _ => Vec::new(),
    }
}
