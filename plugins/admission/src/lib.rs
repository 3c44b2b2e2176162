//! The default admission policy: one mutating task in flight per
//! application, protected applications cannot be deleted, stopping or
//! deleting in a production namespace waits for a person (seed 002's human
//! decision point), and task parameters are checked: an app created in a
//! production namespace gives CPU and memory limits, a storage class
//! reserved for production is claimed only there, a LoadBalancer Service is
//! warned about. Kubernetes admission reviews are allowed, with a warning
//! for images without a pinned tag.

wit_bindgen::generate!({
    world: "admission-policy",
    path: "../../wit",
});

use exports::verdict::policy::admission::{
    AdmissionInput, Decision, Guest, PlanStep, ReviewInput, ReviewResponse, TaskAdmission,
    TaskRequest,
};
use serde_json::Value;
use verdict::policy::types::{Context, KeyValue, PluginInfo, StableStatus, TaskAction, TaskPhase};

struct Settings {
    max_replicas: u64,
    /// Namespace label that marks production: `key=value`.
    production_label: (String, String),
    /// Label (on the namespace or a workload) that protects from deletion.
    protected_label: String,
    /// The label verdict groups workloads by; reviewed workloads without it
    /// get it, set to their own name.
    app_label: String,
    /// Storage classes only apps in production namespaces may claim from.
    reserved_storage_classes: Vec<String>,
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
            app_label: text_of("app-label", "app.kubernetes.io/instance"),
            reserved_storage_classes: value
                .get("reserved-storage-classes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        }
    }
}

const SETTINGS_SCHEMA: &str = r#"{"type":"object","additionalProperties":false,"properties":{"max-replicas":{"type":"integer","minimum":0},"production-label":{"type":"string","minLength":1},"protected-label":{"type":"string","minLength":1},"app-label":{"type":"string","minLength":1},"reserved-storage-classes":{"type":"array","items":{"type":"string","minLength":1}}}}"#;

struct DefaultAdmission;

impl exports::verdict::policy::settings::Guest for DefaultAdmission {
    fn validate(settings: String) -> Result<(), String> {
        verdict_settings::check(SETTINGS_SCHEMA, &settings)
    }
}

impl Guest for DefaultAdmission {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "default-admission".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "One task in flight per app, protected apps, approval in production, parameter checks.".into(),
            settings_schema: Some(SETTINGS_SCHEMA.into()),
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
            plan: plan_for(input.request.action, moving(&input.request, &params)),
        })
    }

    fn review(ctx: Context, input: ReviewInput) -> Result<ReviewResponse, String> {
        let settings = Settings::parse(&ctx.settings);
        let request: Value = serde_json::from_str(&input.request)
            .map_err(|e| format!("request is not JSON: {e}"))?;
        Ok(review(
            &settings,
            &request,
            input.namespace_labels.as_deref(),
        ))
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
        return Decision::Deny(format!(
            "a {} task ({}) is still {} for this app; wait for it or cancel it",
            action_name(busy.action),
            busy.id,
            phase_name(busy.phase),
        ));
    }

    let deployed = input
        .app
        .as_ref()
        .is_some_and(|a| !a.workloads.is_empty() || !a.objects.is_empty());
    let gone = input
        .verdict
        .as_ref()
        .is_some_and(|v| v.stable == StableStatus::NotExisted);
    if request.action == TaskAction::Create && deployed {
        return Decision::Deny("the app exists already; update it instead".into());
    }
    if request.action != TaskAction::Create && gone {
        return Decision::Deny("the app does not exist; create it first".into());
    }
    let spec = &request.spec;
    match request.action {
        TaskAction::Create if spec.image.as_deref().is_none_or(str::is_empty) => {
            return Decision::Deny("params.image is required to create an app".into());
        }
        TaskAction::Update if !moving(request, params) && is_empty_change(spec) => {
            return Decision::Deny(
                "an update gives what it changes (image, env, replicas, resource-limit, …)".into(),
            );
        }
        TaskAction::Scale => {
            if params.get("replicas").is_none() {
                return Decision::Deny("params.replicas is required for scale".into());
            }
        }
        TaskAction::Migrate => {
            let instance = params.get("instance").and_then(Value::as_str);
            let known = input.app.as_ref().is_some_and(|a| {
                a.objects
                    .iter()
                    .any(|o| o.kind == "VirtualMachine" && Some(o.name.as_str()) == instance)
            });
            match instance {
                None | Some("") => {
                    return Decision::Deny(
                        "params.instance (the virtual machine to move) is required for migrate"
                            .into(),
                    );
                }
                Some(name) if !known => {
                    return Decision::Deny(format!("the app has no virtual machine {name}"));
                }
                Some(_) => {}
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
    let production = has_label(namespace_labels, key, Some(value));
    if matches!(request.action, TaskAction::Create | TaskAction::Update) {
        if let Some(class) = &spec.storage_class_name
            && settings.reserved_storage_classes.contains(class)
            && !production
        {
            return Decision::Deny(format!(
                "storage class {class} is reserved for production namespaces ({key}={value})"
            ));
        }
        let limited = |resource: &str| {
            spec.resource_limit
                .as_ref()
                .is_some_and(|r| match resource {
                    "cpu" => r.limits.cpu.is_some(),
                    _ => r.limits.memory.is_some(),
                })
        };
        if request.action == TaskAction::Create
            && production
            && !(limited("cpu") && limited("memory"))
        {
            return Decision::Deny(format!(
                "an app in a production namespace ({key}={value}) gives CPU and memory limits (params.resource-limit)"
            ));
        }
        if spec
            .network_config
            .as_ref()
            .is_some_and(|n| n.service_type.as_deref() == Some("LoadBalancer"))
        {
            warnings.push("a LoadBalancer Service exposes the app outside the cluster".into());
        }
    }
    if matches!(request.action, TaskAction::Delete | TaskAction::Stop)
        && has_label(namespace_labels, key, Some(value))
    {
        return Decision::RequireApproval(format!(
            "{} in a production namespace ({key}={value}) needs a person's approval",
            action_name(request.action)
        ));
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

/// Whether an update's spec changes nothing verdict applies.
fn is_empty_change(spec: &exports::verdict::policy::admission::AppSpec) -> bool {
    spec.image.is_none()
        && spec.replicas.is_none()
        && spec.storage_class_size.is_none()
        && spec.labels.is_empty()
        && spec.env.is_empty()
        && spec.license_bytes.is_none()
        && spec.certificate.is_none()
        && spec.log_type.is_none()
        && spec.log_config.is_empty()
        && spec.metric_config.is_empty()
        && spec.resource_limit.is_none()
        && spec.network_config.is_none()
        && spec.image_pull_secrets.is_empty()
        && spec.health_url.is_none()
}

fn action_name(action: TaskAction) -> &'static str {
    match action {
        TaskAction::Create => "create",
        TaskAction::Start => "start",
        TaskAction::Stop => "stop",
        TaskAction::Restart => "restart",
        TaskAction::Update => "update",
        TaskAction::Scale => "scale",
        TaskAction::Delete => "delete",
        TaskAction::Migrate => "migrate",
        TaskAction::Adopt => "adopt",
    }
}

fn phase_name(phase: TaskPhase) -> &'static str {
    match phase {
        TaskPhase::Pending => "pending",
        TaskPhase::AwaitingApproval => "awaiting approval",
        TaskPhase::Running => "running",
        TaskPhase::Succeeded => "succeeded",
        TaskPhase::Failed => "failed",
        TaskPhase::Cancelled => "cancelled",
    }
}

fn defaults_for(action: TaskAction) -> Value {
    match action {
        TaskAction::Create => serde_json::json!({ "replicas": 1 }),
        _ => serde_json::json!({}),
    }
}

/// Whether a request is an update that moves an app's pods off a node
/// (the host's failover names the node and workload in `params.failover`).
fn moving(request: &TaskRequest, params: &Value) -> bool {
    request.action == TaskAction::Update && params.get("failover").is_some_and(Value::is_object)
}

fn plan_for(action: TaskAction, moving: bool) -> Vec<PlanStep> {
    let step = |name: &str, description: &str| PlanStep {
        name: name.into(),
        description: description.into(),
    };
    if moving {
        return vec![
            step("move", "evict or release the pods on the node"),
            step(
                "health-check",
                "wait until the pods are gone from the node and run elsewhere",
            ),
        ];
    }
    match action {
        TaskAction::Create => vec![
            step(
                "prepare-environment",
                "the namespace, Secrets and ConfigMaps",
            ),
            step("deploy", "the workload and its storage"),
            step(
                "health-check",
                "wait until replicas are ready and the health check passes",
            ),
            step("open-traffic", "route traffic to the app"),
        ],
        TaskAction::Update => vec![
            step("deploy", "roll out the change"),
            step("health-check", "wait until the new replicas are ready"),
        ],
        TaskAction::Delete => vec![
            step("close-traffic", "stop routing traffic to the app"),
            step("delete", "delete the workload and its resources"),
        ],
        _ => Vec::new(),
    }
}

/// The containers of a Pod, or of the pod template of a workload.
fn containers(object: &Value) -> impl Iterator<Item = &Value> {
    let spec = match object.get("kind").and_then(Value::as_str) {
        Some("Pod") => object.get("spec"),
        _ => object.pointer("/spec/template/spec"),
    };
    spec.and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Escape a key for a JSON Pointer (RFC 6901).
/// A name as a label value: itself when it is one (63 characters at
/// most), else a readable prefix and a hash of the whole name, 63
/// characters in all, as Kubernetes tools shorten names — two long names
/// with the same prefix stay apart.
fn label_value(name: &str) -> String {
    const MAX: usize = 63;
    const HASH: usize = 10;
    if name.len() <= MAX {
        return name.to_string();
    }
    // FNV-1a, 64 bits: stable across builds and hosts.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let hash = format!("{hash:016x}");
    // A label value ends in an alphanumeric character: the prefix may not
    // end in `-`, `_` or `.` before the separator.
    let prefix: String = name.chars().take(MAX - HASH - 1).collect();
    let prefix = prefix.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{prefix}-{}", &hash[..HASH])
}

fn pointer_key(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The default review: in a production namespace a workload or pod whose
/// containers lack CPU or memory limits is refused; a Deployment or
/// StatefulSet without the app label gets it (named after itself), so that
/// verdict groups it; images that are not pinned are warned about.
fn review(
    settings: &Settings,
    request: &Value,
    namespace_labels: Option<&[KeyValue]>,
) -> ReviewResponse {
    let mut response = ReviewResponse {
        allowed: true,
        code: None,
        message: None,
        patch: None,
        warnings: Vec::new(),
    };
    let Some(object) = request.get("object").filter(|o| o.is_object()) else {
        return response;
    };
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    for c in containers(object) {
        let container = c.get("name").and_then(Value::as_str).unwrap_or_default();
        let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
        let tag = image
            .rsplit_once(':')
            .map(|(_, t)| t)
            .filter(|t| !t.contains('/'));
        if !image.contains('@') && matches!(tag, None | Some("latest")) {
            response
                .warnings
                .push(format!("image {image} is not pinned to a tag or digest"));
        }
        let (key, value) = &settings.production_label;
        let production = namespace_labels.is_some_and(|l| has_label(l, key, Some(value)));
        let limited = |resource: &str| {
            c.pointer(&format!("/resources/limits/{resource}"))
                .is_some_and(|v| !v.is_null())
        };
        if production && !(limited("cpu") && limited("memory")) {
            response.allowed = false;
            response.code = Some(403);
            response.message = Some(format!(
                "{kind} {name}: container {container} has no CPU and memory limits; \
                 a production namespace ({key}={value}) requires them"
            ));
            return response;
        }
    }
    let creating = request.get("operation").and_then(Value::as_str) == Some("CREATE");
    if creating && matches!(kind, "Deployment" | "StatefulSet") && !name.is_empty() {
        let labels = object.pointer("/metadata/labels").filter(|l| l.is_object());
        let value = label_value(name);
        let patch = match labels {
            None => serde_json::json!([{
                "op": "add", "path": "/metadata/labels",
                "value": { settings.app_label.as_str(): value },
            }]),
            Some(labels) if labels.get(&settings.app_label).is_none() => serde_json::json!([{
                "op": "add",
                "path": format!("/metadata/labels/{}", pointer_key(&settings.app_label)),
                "value": value,
            }]),
            Some(_) => Value::Null,
        };
        if !patch.is_null() {
            response.patch = Some(patch.to_string());
        }
    }
    response
}
