//! The task record the host keeps and serves, and the rules of its life
//! cycle: which phase may follow which, how step reports move a task and
//! its progress, approval, rejection and cancellation.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::schema::{any_object, wit_names};
use crate::wit::types::{self, TaskAction as Action, TaskPhase as Phase};
use crate::wit::{WitName, wit_name};

/// Times as RFC 3339 text on the wire, milliseconds since the epoch inside.
pub mod time {
    use crate::wit::types::Timestamp;

    pub fn serialize<S: serde::Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::time::rfc3339(*t))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
        crate::time::parse_time(&text).map_err(serde::de::Error::custom)
    }

    /// An optional time, `null` when absent.
    pub mod optional {
        use crate::wit::types::Timestamp;

        pub fn serialize<S: serde::Serializer>(
            t: &Option<Timestamp>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => super::serialize(t, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Timestamp>, D::Error> {
            let text = <Option<std::borrow::Cow<'de, str>> as serde::Deserialize>::deserialize(d)?;
            text.map(|t| crate::time::parse_time(&t).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}

/// One step of a task's plan.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub struct Step {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(with = "wit_name")]
    #[schema(value_type = PhaseName, example = "running")]
    #[schemars(schema_with = "wit_names::<Phase>")]
    pub phase: Phase,
    #[serde(default)]
    pub message: Option<String>,
}

/// What admission said when the task was created.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub struct Admission {
    /// `allow` or `require-approval` (denied tasks are never stored).
    pub decision: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The policy that decided, `name@version`, when one did.
    #[serde(default)]
    pub policy: Option<String>,
    /// Why the policy could not decide, when the failure mode let the task
    /// through anyway.
    #[serde(default)]
    pub failure: Option<String>,
}

/// A person's answer to a task held for approval.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub struct Review {
    pub approved: bool,
    pub by: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub at: types::Timestamp,
}

/// A task record: one user action, with its phase, progress and plan. The
/// Kubernetes task store keeps it as the spec of a `Task` object, whose
/// CRD is generated from this type (`verdict crds`).
#[derive(
    Debug,
    Clone,
    PartialEq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    schemars::JsonSchema,
    kube::CustomResource,
)]
// Printer columns repeat their keys, which clippy takes for repeated attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "verdict.dev",
    version = "v1",
    kind = "Task",
    root = "TaskResource",
    plural = "tasks",
    singular = "task",
    shortname = "vtask",
    namespaced,
    printcolumn(name = "App", type_ = "string", json_path = ".spec.app"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".spec.phase"),
    printcolumn(name = "Progress", type_ = "integer", json_path = ".spec.progress"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    doc = "A task record: one user action on an app, with its phase, progress and plan; its spec is the record as GET /v1/tasks/{id} shows it."
)]
#[serde(rename_all = "kebab-case")]
pub struct Task {
    pub id: String,
    /// `namespace/name`.
    #[schemars(regex(pattern = "^[a-z0-9-]+/[a-z0-9-]+$"))]
    pub app: String,
    #[serde(with = "wit_name")]
    #[schema(value_type = ActionName, example = "restart")]
    #[schemars(schema_with = "wit_names::<Action>")]
    pub action: Action,
    #[schema(value_type = Object)]
    #[schemars(schema_with = "any_object")]
    pub params: Map<String, Value>,
    #[serde(default)]
    pub requested_by: Option<String>,
    #[serde(with = "wit_name")]
    #[schema(value_type = PhaseName, example = "running")]
    #[schemars(schema_with = "wit_names::<Phase>")]
    pub phase: Phase,
    #[schemars(range(max = 100))]
    pub progress: u8,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub created_at: types::Timestamp,
    #[serde(with = "time")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub updated_at: types::Timestamp,
    #[serde(default)]
    pub steps: Vec<Step>,
    pub admission: Admission,
    #[serde(default)]
    pub review: Option<Review>,
    /// Counts the task's writes; a write based on an older revision is a
    /// conflict.
    #[schemars(range(min = 1))]
    pub revision: u64,
    /// The task's place among its app's tasks (1, 2, …): the Kubernetes
    /// task store names the task's object by it, so that two replicas
    /// cannot both admit a task after the same one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sequence: u64,
    /// Who carries the task out: the leading replica and its term. A
    /// replica of an earlier term cannot write the task any more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<crate::leader::Term>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The actions a task may ask for, as the OpenAPI document lists them
/// (the WIT `task-action`).
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code)]
pub enum ActionName {
    Create,
    Start,
    Stop,
    Restart,
    Update,
    Scale,
    Delete,
    Migrate,
    Adopt,
}

/// The phases of a task, as the OpenAPI document lists them (the WIT
/// `task-phase`).
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code)]
pub enum PhaseName {
    Pending,
    AwaitingApproval,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

/// A task request as `POST /v1/tasks` takes it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NewTask {
    /// `namespace/name`, each a Kubernetes name.
    #[schema(
        pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        min_length = 3,
        max_length = 127,
        example = "shop/web"
    )]
    pub app: String,
    #[serde(with = "wit_name")]
    #[schema(value_type = ActionName, example = "restart")]
    pub action: Action,
    /// The action's parameters: for `create`, `update` and `delete`, the
    /// fields of seed 000's `Task` (under these names or the seed's
    /// snake_case ones: `storage_class_name` is `storage-class-name`);
    /// other parameters are kept for the policies.
    #[serde(default)]
    #[schema(value_type = super::spec::AppSpec)]
    pub params: Map<String, Value>,
    #[serde(default)]
    #[schema(max_length = 256)]
    pub requested_by: Option<String>,
    /// The secret material of `params`, taken out of them (which keep its
    /// redacted form) on its way to a Secret.
    #[serde(skip)]
    pub material: super::sealed::Material,
}

/// An executor's report on one step.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StepReport {
    #[schema(max_length = 256)]
    pub name: String,
    #[serde(with = "wit_name")]
    #[schema(value_type = PhaseName, example = "running")]
    pub phase: Phase,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub message: Option<String>,
}

/// An executor's progress report, as `PATCH /v1/tasks/{id}` takes it.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TaskPatch {
    #[serde(default, with = "option_phase")]
    #[schema(value_type = Option<PhaseName>, example = "running")]
    pub phase: Option<Phase>,
    /// Percent of the task, or of the running step when the task has a plan.
    #[serde(default)]
    #[schema(maximum = 100)]
    pub progress: Option<u8>,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub message: Option<String>,
    #[serde(default)]
    pub steps: Vec<StepReport>,
}

/// An absent or `null` phase leaves the phase as it is.
mod option_phase {
    use super::{Deserialize, Phase, wit_name};

    #[derive(Deserialize)]
    struct Named(#[serde(with = "wit_name")] Phase);

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Phase>, D::Error> {
        Ok(Option::<Named>::deserialize(d)?.map(|Named(phase)| phase))
    }
}

/// A person's decision or request on a task (approve, reject, cancel).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Decision {
    #[serde(default)]
    #[schema(max_length = 256)]
    pub by: Option<String>,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub reason: Option<String>,
}

/// The longest `requested-by`, `by` and step name, in characters.
pub(crate) const MAX_NAME: usize = 256;
/// The longest message or reason, in characters.
pub(crate) const MAX_TEXT: usize = 4096;
/// The largest `params` of a task, as JSON text.
pub(crate) const MAX_PARAMS: usize = 64 * 1024;

/// Refuse text longer than `max` characters, or that would show other than
/// it reads ([`reordering`]).
fn bounded(field: &str, value: Option<&str>, max: usize) -> Result<(), Refusal> {
    if let Some(c) = value.and_then(reordering) {
        return Err(invalid(field, reordering_message(c)));
    }
    match value.map_or(0, |text| text.chars().count()) {
        length if length > max => Err(invalid(
            field,
            format!("is {length} characters long; at most {max}"),
        )),
        _ => Ok(()),
    }
}

/// Whether a person's name says someone: it has a character that shows —
/// not white space, and not an invisible format character (a zero-width
/// space or joiner, a word joiner, a byte-order mark, a soft hyphen, a
/// direction mark).
pub fn names_someone(by: &str) -> bool {
    by.chars().any(|c| {
        !c.is_whitespace()
            && !c.is_control()
            && !matches!(
                c,
                '\u{ad}'
                    | '\u{61c}'
                    | '\u{180e}'
                    | '\u{200b}'..='\u{200f}'
                    | '\u{202a}'..='\u{202e}'
                    | '\u{2060}'..='\u{2064}'
                    | '\u{2066}'..='\u{206f}'
                    | '\u{feff}'
            )
    })
}

/// The bidirectional override or isolate in text a person wrote, if any
/// (U+202A–U+202E, U+2066–U+2069): it reorders what follows it wherever
/// the text is shown — a dashboard, a terminal, an Event — so that it
/// reads other than it was written.
pub fn reordering(text: &str) -> Option<char> {
    text.chars()
        .find(|c| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
}

/// What is said of a text holding `c` ([`reordering`]).
pub fn reordering_message(c: char) -> String {
    format!(
        "holds U+{:04X}, a bidirectional control that reorders the text where it is shown",
        c as u32
    )
}

impl NewTask {
    /// Every field within its bound: a request may not make the host keep
    /// (and serve, and store) whatever a client sends.
    pub fn check_sizes(&self) -> Result<(), Refusal> {
        bounded("requested-by", self.requested_by.as_deref(), MAX_NAME)?;
        let params = serde_json::to_string(&self.params).map_or(0, |p| p.len());
        if params > MAX_PARAMS {
            return Err(invalid(
                "params",
                format!("are {params} bytes as JSON; at most {MAX_PARAMS}"),
            ));
        }
        Ok(())
    }
}

impl NewTask {
    /// The app this task makes or changes, as its params describe it:
    /// written in the API's spelling (the seed's snake_case names become
    /// kebab-case) and checked field by field, the first bad one named.
    pub fn read_spec(&mut self) -> Result<super::spec::AppSpec, Refusal> {
        use super::sealed::SealedFields as _;
        let app = parse_app(&self.app)?;
        super::spec::normalize(&mut self.params)?;
        super::spec::known_params(&self.params)?;
        let mut spec = super::spec::AppSpec::of(&self.params)?;
        spec.check(&app.namespace)?;
        // The material goes beside the task; the record keeps its redacted
        // form.
        self.material = spec.material();
        spec.redact_into(&mut self.params);
        Ok(spec)
    }
}

impl Decision {
    fn check_sizes(&self) -> Result<(), Refusal> {
        bounded("by", self.by.as_deref(), MAX_NAME)?;
        bounded("reason", self.reason.as_deref(), MAX_TEXT)
    }
}

impl TaskPatch {
    fn check_sizes(&self) -> Result<(), Refusal> {
        bounded("message", self.message.as_deref(), MAX_TEXT)?;
        for (i, step) in self.steps.iter().enumerate() {
            bounded(&format!("steps[{i}].name"), Some(&step.name), MAX_NAME)?;
            bounded(
                &format!("steps[{i}].message"),
                step.message.as_deref(),
                MAX_TEXT,
            )?;
        }
        Ok(())
    }
}

/// Why a change to a task was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The request itself is wrong; names the field.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// The request does not fit the task's state.
    #[error("{0}")]
    Conflict(String),
    /// The task would make an app in a protected namespace
    /// (`--protected-namespaces`).
    #[error("{0}")]
    Protected(String),
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Refusal {
    Refusal::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// Whether a phase is final.
pub fn finished(phase: Phase) -> bool {
    matches!(phase, Phase::Succeeded | Phase::Failed | Phase::Cancelled)
}

/// Whether a task in this phase is still in flight.
pub fn in_flight(phase: Phase) -> bool {
    !finished(phase)
}

/// Whether an executor may move a task from one phase to another. Approval
/// has routes of its own; finished tasks never change.
fn check_move(from: Phase, to: Phase) -> Result<(), Refusal> {
    let allowed = match from {
        Phase::Pending => matches!(
            to,
            Phase::Pending | Phase::Running | Phase::Failed | Phase::Cancelled
        ),
        Phase::Running => !matches!(to, Phase::Pending | Phase::AwaitingApproval),
        Phase::AwaitingApproval => {
            return Err(Refusal::Conflict(
                "the task awaits approval: approve, reject or cancel it first".into(),
            ));
        }
        Phase::Succeeded | Phase::Failed | Phase::Cancelled => {
            return Err(Refusal::Conflict(format!(
                "the task has {}; a finished task does not change",
                from.wit_name()
            )));
        }
    };
    if allowed {
        Ok(())
    } else {
        Err(Refusal::Conflict(format!(
            "a task cannot go from {} to {}",
            from.wit_name(),
            to.wit_name()
        )))
    }
}

/// Check `namespace/name`: both parts DNS labels, as Kubernetes names them.
pub fn parse_app(text: &str) -> Result<types::AppId, Refusal> {
    let id = super::record::parse_app(text).map_err(|e| invalid("app", e))?;
    for (part, value) in [("namespace", &id.namespace), ("name", &id.name)] {
        let valid = value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !value.starts_with('-')
            && !value.ends_with('-');
        if !valid {
            return Err(invalid(
                "app",
                format!(
                    "{part} `{value}` is not a Kubernetes name (lower-case letters, digits and `-`, at most 63)"
                ),
            ));
        }
    }
    Ok(id)
}

impl Task {
    /// A new task as admission let it through: pending, or awaiting
    /// approval, with its plan's steps pending.
    pub fn new(
        request: NewTask,
        admission: Admission,
        plan: Vec<(String, String)>,
        now: types::Timestamp,
    ) -> Self {
        let phase = if admission.decision == "require-approval" {
            Phase::AwaitingApproval
        } else {
            Phase::Pending
        };
        Self {
            id: uuid::Uuid::now_v7().to_string(),
            app: request.app,
            action: request.action,
            params: request.params,
            requested_by: request.requested_by,
            phase,
            progress: 0,
            message: admission.reason.clone(),
            created_at: now,
            updated_at: now,
            steps: plan
                .into_iter()
                .map(|(name, description)| Step {
                    name,
                    description,
                    phase: Phase::Pending,
                    message: None,
                })
                .collect(),
            admission,
            review: None,
            revision: 1,
            sequence: 0,
            actor: None,
        }
    }

    /// Take the task over as `actor`: refused when a later term (or
    /// another holder of the same term) wrote it.
    pub fn act_as(&mut self, actor: &crate::leader::Term) -> Result<(), Refusal> {
        actor
            .may_follow(self.actor.as_ref())
            .map_err(Refusal::Conflict)?;
        self.actor = Some(actor.clone());
        Ok(())
    }

    /// The action's name, as a person reads it.
    pub(crate) fn action_name(&self) -> &'static str {
        self.action.wit_name()
    }

    /// The task as policies see it.
    pub fn to_wit(&self) -> types::Task {
        let app = super::record::parse_app(&self.app).unwrap_or(types::AppId {
            namespace: String::new(),
            name: self.app.clone(),
        });
        types::Task {
            id: self.id.clone(),
            app,
            action: self.action,
            phase: self.phase,
            progress: self.progress,
            message: self.message.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            requested_by: self.requested_by.clone(),
            params: Value::Object(self.params.clone()).to_string(),
            steps: self
                .steps
                .iter()
                .map(|s| types::TaskStep {
                    name: s.name.clone(),
                    phase: s.phase,
                    message: s.message.clone(),
                })
                .collect(),
        }
    }

    /// Apply an executor's report. On success the task is changed and its
    /// revision counted; on a refusal it is left as it was.
    pub fn apply(&mut self, patch: &TaskPatch, now: types::Timestamp) -> Result<(), Refusal> {
        patch.check_sizes()?;
        // A finished task, or one awaiting approval, takes no reports.
        check_move(self.phase, self.phase)?;
        let mut next = self.clone();
        if let Some(progress) = patch.progress
            && progress > 100
        {
            return Err(invalid("progress", format!("{progress} is over 100")));
        }
        if !patch.steps.is_empty() {
            check_move(next.phase, Phase::Running)?;
            for (i, report) in patch.steps.iter().enumerate() {
                next.report_step(i, report)?;
            }
        }
        if let Some(message) = &patch.message {
            next.message = Some(message.clone());
        }
        if let Some(to) = patch.phase {
            check_move(next.phase, to)?;
            if to == Phase::Succeeded
                && let Some(open) = next.steps.iter().find(|s| s.phase != Phase::Succeeded)
            {
                return Err(Refusal::Conflict(format!(
                    "step `{}` has not succeeded; report it before the task",
                    open.name
                )));
            }
            next.phase = to;
        }
        next.follow_steps();
        next.progress = match (next.phase, next.steps.len()) {
            (Phase::Succeeded, _) => 100,
            (_, 0) => patch.progress.unwrap_or(next.progress),
            (_, total) => {
                let done = next
                    .steps
                    .iter()
                    .filter(|s| s.phase == Phase::Succeeded)
                    .count();
                let within = if next.steps.iter().any(|s| s.phase == Phase::Running) {
                    usize::from(patch.progress.unwrap_or(0))
                } else {
                    0
                };
                ((done * 100 + within) / total).min(100) as u8
            }
        };
        if finished(next.phase) {
            next.close_steps();
        }
        next.touch(now);
        *self = next;
        Ok(())
    }

    fn report_step(&mut self, index: usize, report: &StepReport) -> Result<(), Refusal> {
        let field = |f: &str| format!("steps[{index}].{f}");
        let position = self
            .steps
            .iter()
            .position(|s| s.name == report.name)
            .ok_or_else(|| {
                let names: Vec<&str> = self.steps.iter().map(|s| s.name.as_str()).collect();
                invalid(
                    field("name"),
                    if names.is_empty() {
                        format!("the task has no plan, so no step `{}`", report.name)
                    } else {
                        format!(
                            "no step `{}` in the plan ({})",
                            report.name,
                            names.join(", ")
                        )
                    },
                )
            })?;
        if let Some(before) = self.steps[..position]
            .iter()
            .find(|s| s.phase != Phase::Succeeded)
            && report.phase != Phase::Pending
        {
            return Err(Refusal::Conflict(format!(
                "step `{}` cannot start before step `{}` has succeeded",
                report.name, before.name
            )));
        }
        let step = &mut self.steps[position];
        let allowed = match step.phase {
            Phase::Pending => !matches!(report.phase, Phase::AwaitingApproval),
            Phase::Running => !matches!(report.phase, Phase::Pending | Phase::AwaitingApproval),
            done => report.phase == done,
        };
        if !allowed {
            return Err(Refusal::Conflict(format!(
                "step `{}` cannot go from {} to {}",
                step.name,
                step.phase.wit_name(),
                report.phase.wit_name()
            )));
        }
        step.phase = report.phase;
        if report.message.is_some() {
            step.message.clone_from(&report.message);
        }
        Ok(())
    }

    /// The task's phase as its steps make it: a failed step fails the task
    /// (naming the step), a started step runs it, and all steps done
    /// complete it.
    fn follow_steps(&mut self) {
        if self.steps.is_empty() || finished(self.phase) {
            return;
        }
        if let Some(failed) = self.steps.iter().find(|s| s.phase == Phase::Failed) {
            self.phase = Phase::Failed;
            self.message = Some(match &failed.message {
                Some(m) => format!("step `{}` failed: {m}", failed.name),
                None => format!("step `{}` failed", failed.name),
            });
        } else if self.steps.iter().all(|s| s.phase == Phase::Succeeded) {
            self.phase = Phase::Succeeded;
        } else if self.steps.iter().any(|s| s.phase != Phase::Pending) {
            self.phase = Phase::Running;
        }
    }

    /// Steps not yet done when the task ends are cancelled.
    fn close_steps(&mut self) {
        for step in &mut self.steps {
            if matches!(step.phase, Phase::Pending | Phase::Running) {
                step.phase = Phase::Cancelled;
            }
        }
    }

    fn touch(&mut self, now: types::Timestamp) {
        self.updated_at = now.max(self.updated_at);
        self.revision += 1;
    }

    /// A person approves (`approved`) or rejects a task held for approval.
    pub fn review(
        &mut self,
        approved: bool,
        decision: &Decision,
        now: types::Timestamp,
    ) -> Result<(), Refusal> {
        decision.check_sizes()?;
        if self.phase != Phase::AwaitingApproval {
            return Err(Refusal::Conflict(format!(
                "the task is {}, not awaiting approval",
                self.phase.wit_name()
            )));
        }
        let by = decision
            .by
            .clone()
            .filter(|b| names_someone(b))
            .ok_or_else(|| invalid("by", "say who decides"))?;
        if approved {
            self.phase = Phase::Pending;
            self.message = Some(format!("approved by {by}"));
        } else {
            self.phase = Phase::Cancelled;
            self.message = Some(match &decision.reason {
                Some(reason) => format!("rejected by {by}: {reason}"),
                None => format!("rejected by {by}"),
            });
            self.close_steps();
        }
        self.review = Some(Review {
            approved,
            by,
            reason: decision.reason.clone(),
            at: now,
        });
        self.touch(now);
        Ok(())
    }

    /// Cancel a task that has not finished.
    pub fn cancel(&mut self, decision: &Decision, now: types::Timestamp) -> Result<(), Refusal> {
        decision.check_sizes()?;
        if finished(self.phase) {
            return Err(Refusal::Conflict(format!(
                "the task has {}; a finished task cannot be cancelled",
                self.phase.wit_name()
            )));
        }
        self.phase = Phase::Cancelled;
        let by = decision.by.as_deref().unwrap_or("someone");
        self.message = Some(match &decision.reason {
            Some(reason) => format!("cancelled by {by}: {reason}"),
            None => format!("cancelled by {by}"),
        });
        self.close_steps();
        self.touch(now);
        Ok(())
    }
}
