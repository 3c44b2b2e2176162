//! Whole applications, step by step (seed 000's create, update and
//! delete): the app's objects rendered from the task ([`super::render`])
//! and applied with server-side apply under the field manager `verdict`.
//!
//! A create prepares the environment (the namespace when missing, the
//! Secrets and ConfigMaps), deploys the workload (after checking that the
//! namespace's ResourceQuotas leave room for it), waits for its rollout and
//! the app's own health check, then opens traffic (the Service). An update
//! re-applies the app as it was made with the fields the task gives in
//! their place, expanding the volume claims when the size grows. A delete
//! closes traffic, deletes what verdict made (the claims too when the task
//! asks `delete-storage`), waits for the pods to go and removes the
//! namespace when verdict made it and nothing else lives there.
//!
//! Each act is idempotent: a task taken over after a restart begins again
//! at its first step not done. A failing act fails its step, naming the
//! object and the API server's reason, and the task's message lists what
//! was made before it.

use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, PersistentVolumeClaim, Pod, ResourceQuota, Secret, Service,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube_quantity::ParsedQuantity;
use serde_json::{Value, json};

use super::render::{self, MADE_FOR, Object, Served};
use super::{Executor, millis};
use crate::tasks::Task;
use crate::tasks::model::{StepReport, TaskPatch};
use crate::tasks::ownership::Owner;
use crate::tasks::sealed::SealedFields as _;
use crate::tasks::spec::{AppSpec, INSTANCE, MANAGED_BY};
use crate::time::now;
use crate::wit::types::{self, TaskAction as Action, TaskPhase as Phase};

/// The field manager of everything verdict applies.
pub(crate) const FIELD_MANAGER: &str = "verdict";

/// One act of a task on a whole app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Act {
    /// The namespace when missing, Secrets, ConfigMaps.
    Prepare,
    /// The workload (and the claims' new size).
    Deploy,
    /// Until the rollout is done and the app's health check passes.
    Wait,
    /// The Service.
    Traffic,
    /// The Service deleted.
    CloseTraffic,
    /// The workload and what was made for it deleted.
    Remove,
    /// Until the pods are gone; then the namespace, when verdict made it
    /// and nothing else is in it.
    Gone,
}

impl Act {
    /// The step of the plan this act carries out.
    fn step(self) -> &'static str {
        match self {
            Act::Prepare => "prepare-environment",
            Act::Deploy => "deploy",
            Act::Wait => "health-check",
            Act::Traffic => "open-traffic",
            Act::CloseTraffic => "close-traffic",
            Act::Remove | Act::Gone => "delete",
        }
    }

    fn of(action: Action) -> Vec<Act> {
        match action {
            Action::Create => vec![Act::Prepare, Act::Deploy, Act::Wait, Act::Traffic],
            Action::Update => vec![Act::Prepare, Act::Deploy, Act::Wait, Act::Traffic],
            Action::Delete => vec![Act::CloseTraffic, Act::Remove, Act::Gone],
            _ => Vec::new(),
        }
    }
}

/// A task on a whole app, under way.
#[derive(Debug, Clone)]
pub(super) struct AppJob {
    acts: Vec<Act>,
    at: usize,
    spec: AppSpec,
    /// How many replicas it should run.
    replicas: u32,
    /// What this task made or changed so far, `Kind namespace/name`.
    made: Vec<String>,
    /// The workload's generation as applied.
    generation: Option<i64>,
    /// When the current wait began.
    waiting_since: Option<types::Timestamp>,
    /// The workload as it was observed at the start (delete).
    workload: Option<types::Workload>,
    /// The namespace is being deleted (delete).
    removing_namespace: bool,
    /// How many objects of the namespace were already being deleted at
    /// the last look, waited for before it is (delete).
    leaving: usize,
}

/// Whether a StatefulSet's claim templates ask less storage than the spec.
fn template_smaller(templates: Option<&Value>, spec: &AppSpec) -> bool {
    let Some(wanted) = spec
        .storage_class_size
        .as_deref()
        .and_then(|s| ParsedQuantity::try_from(s).ok())
    else {
        return false;
    };
    templates
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/spec/resources/requests/storage")?.as_str())
        .filter_map(|s| ParsedQuantity::try_from(s).ok())
        .any(|now| now < wanted)
}

/// The fields a server-side apply conflicted on, and whose they are.
#[derive(Debug, Default)]
struct Conflicts {
    /// Field manager → the fields (`.spec.replicas`).
    by_manager: std::collections::BTreeMap<String, Vec<String>>,
    /// The API server's message, when it named no cause.
    message: String,
}

impl Conflicts {
    fn of(status: &kube::core::Status) -> Self {
        let mut conflicts = Conflicts {
            message: status.message.clone(),
            ..Conflicts::default()
        };
        let causes = status.details.iter().flat_map(|d| d.causes.iter());
        for cause in causes.filter(|c| c.reason == "FieldManagerConflict") {
            // `conflict with "kubectl-edit" using apps/v1`
            let manager = cause
                .message
                .split('"')
                .nth(1)
                .unwrap_or(&cause.message)
                .to_string();
            conflicts
                .by_manager
                .entry(manager)
                .or_default()
                .push(cause.field.clone());
        }
        conflicts
    }

    /// Whether every conflicting field is one verdict itself set.
    fn only_verdicts(&self) -> bool {
        !self.by_manager.is_empty() && self.by_manager.keys().all(|m| m == FIELD_MANAGER)
    }
}

impl std::fmt::Display for Conflicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.by_manager.is_empty() {
            return write!(f, "{}", self.message);
        }
        let each: Vec<String> = self
            .by_manager
            .iter()
            .map(|(manager, fields)| format!("field manager `{manager}` set {}", fields.join(", ")))
            .collect();
        write!(
            f,
            "conflicts with what others set: {}; verdict does not take fields over (change them back, or ask for the values they have)",
            each.join("; ")
        )
    }
}

/// The API server's reason for refusing, without the client's wrapping.
fn reason(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// What an act did (`verb`: applied, deleted) as its step says it
/// (`none` when nothing).
fn summary(verb: &str, said: &[String], none: &str) -> String {
    if said.is_empty() {
        none.to_string()
    } else {
        format!("{verb} {}", said.join(", "))
    }
}

fn report_through(
    task: &Task,
    name: &str,
    phase: Phase,
    message: Option<String>,
) -> Vec<StepReport> {
    let Some(at) = task.steps.iter().position(|s| s.name == name) else {
        return Vec::new();
    };
    let mut reports: Vec<StepReport> = task.steps[..at]
        .iter()
        .filter(|s| s.phase != Phase::Succeeded)
        .map(|s| StepReport {
            name: s.name.clone(),
            phase: Phase::Succeeded,
            message: None,
        })
        .collect();
    if task.steps[at].phase != Phase::Succeeded {
        reports.push(StepReport {
            name: name.to_string(),
            phase,
            message,
        });
    }
    reports
}

impl Executor {
    /// What the cluster serves of the kinds an app may use beyond the
    /// built-in ones.
    async fn served(&self) -> Served {
        let find = |group: &str, version: &str, kind: &str| {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let client = self.client.clone();
            async move {
                kube::discovery::oneshot::pinned_kind(&client, &gvk)
                    .await
                    .ok()
                    .map(|(resource, _)| resource)
            }
        };
        Served {
            certificate: find("cert-manager.io", "v1", "Certificate").await,
            service_monitor: find("monitoring.coreos.com", "v1", "ServiceMonitor").await,
        }
    }

    /// A task on a whole app, when it is one: a create; an update of an app
    /// verdict made (its workload keeps what it was made from); a delete.
    pub(super) async fn app_job(
        &self,
        task: &Task,
        namespace: &str,
        name: &str,
    ) -> Result<Option<AppJob>, String> {
        let mut given = AppSpec::of(&task.params).map_err(|e| e.to_string())?;
        // The secret material the task gives, from where it is kept.
        let material = self
            .tasks
            .material(&task.id)
            .await
            .map_err(|e| format!("the task's secret material could not be read: {e}"))?;
        let missing = given.unseal(&material);
        if !missing.is_empty() {
            return Err(format!(
                "the secret material of params.{} is not kept any more (the host that took the task restarted before it was used); ask again",
                missing.join(", params.")
            ));
        }
        let observed = self.workload(namespace, name).map(|(w, _)| w);
        let kept = match &observed {
            Some(w) => AppSpec::kept(&w.annotations)?,
            None => None,
        };
        let (spec, replicas) = match task.action {
            Action::Create => {
                let replicas = given.replicas.unwrap_or(1);
                (given.clone(), replicas)
            }
            Action::Update => {
                let Some(kept) = kept else { return Ok(None) };
                let mut spec = kept.merged(&task.params).map_err(|e| e.to_string())?;
                spec.unseal(&material);
                // What it runs now, unless the task says otherwise (a
                // scale since it was made is kept).
                let replicas = given
                    .replicas
                    .or(observed.as_ref().map(|w| w.desired_replicas))
                    .or(spec.replicas)
                    .unwrap_or(1);
                (spec, replicas)
            }
            Action::Delete => (given, 0),
            _ => return Ok(None),
        };
        let acts = Act::of(task.action);
        // Taken over (a restart): begin at the first step not done.
        let at = acts
            .iter()
            .take_while(|act| {
                task.steps
                    .iter()
                    .any(|s| s.name == act.step() && s.phase == Phase::Succeeded)
            })
            .count()
            .min(acts.len().saturating_sub(1));
        Ok(Some(AppJob {
            acts,
            at,
            spec,
            replicas,
            made: Vec::new(),
            generation: None,
            waiting_since: None,
            workload: observed,
            removing_namespace: false,
            leaving: 0,
        }))
    }

    /// Carry a task on a whole app on as far as it goes now: acts that
    /// write run one after another; a wait reports its progress and
    /// returns.
    pub(super) async fn advance_app(
        &self,
        task: &Task,
        (namespace, name): (&str, &str),
        job: &mut AppJob,
        started: types::Timestamp,
    ) -> Result<(), String> {
        while let Some(&act) = job.acts.get(job.at) {
            let step = act.step();
            let outcome = match act {
                Act::Prepare => self.prepare(namespace, name, job).await.map(Some),
                Act::Deploy => self.deploy(namespace, name, job).await.map(Some),
                Act::Traffic => self.open_traffic(namespace, name, job).await.map(Some),
                Act::CloseTraffic => self.close_traffic(namespace, name, job).await.map(Some),
                Act::Remove => self.remove_app(namespace, name, job).await.map(Some),
                Act::Wait => self.rolled_out(namespace, name, job),
                Act::Gone => self.gone(namespace, name, job).await,
            };
            match outcome {
                Ok(Some(message)) => {
                    job.at += 1;
                    job.waiting_since = None;
                    let last = job.at == job.acts.len();
                    // The delete step spans two acts: done with the second.
                    let spans = act == Act::Remove;
                    let patch = TaskPatch {
                        steps: report_through(
                            task,
                            step,
                            if spans {
                                Phase::Running
                            } else {
                                Phase::Succeeded
                            },
                            Some(message.clone()),
                        ),
                        message: Some(message.clone()),
                        ..TaskPatch::default()
                    };
                    if !last {
                        self.report(task, &patch).await;
                        continue;
                    }
                    let patch = TaskPatch {
                        phase: Some(Phase::Succeeded),
                        steps: super::succeeded_from_here(task, Some((step, &message))),
                        ..patch
                    };
                    self.report(task, &patch).await;
                    return Ok(());
                }
                Ok(None) => {
                    let since = *job.waiting_since.get_or_insert(now());
                    let (progress, status) = self.waiting(namespace, name, job);
                    if now() - since.max(started) > millis(self.timeout) {
                        return Err(self
                            .failed(
                                task,
                                step,
                                job,
                                format!(
                                    "did not finish within {} s: {status}",
                                    self.timeout.as_secs()
                                ),
                            )
                            .await);
                    }
                    let running = task
                        .steps
                        .iter()
                        .any(|s| s.name == step && s.phase == Phase::Running);
                    if task.progress != progress
                        || !running
                        || task.message.as_deref() != Some(&status)
                    {
                        let patch = TaskPatch {
                            progress: Some(progress),
                            message: Some(status),
                            steps: if running {
                                Vec::new()
                            } else {
                                report_through(task, step, Phase::Running, None)
                            },
                            ..TaskPatch::default()
                        };
                        self.report(task, &patch).await;
                    }
                    return Ok(());
                }
                Err(message) => return Err(self.failed(task, step, job, message).await),
            }
        }
        Ok(())
    }

    /// Fail a step, saying what was made before it; the message for the
    /// task.
    async fn failed(&self, task: &Task, step: &str, job: &AppJob, message: String) -> String {
        let message = if job.made.is_empty() {
            message
        } else {
            format!("{message}; made so far: {}", job.made.join(", "))
        };
        let steps = report_through(task, step, Phase::Failed, Some(message.clone()));
        if !steps.is_empty() {
            let patch = TaskPatch {
                steps,
                ..TaskPatch::default()
            };
            self.report(task, &patch).await;
        }
        message
    }

    /// The app as the job has it, with the kinds the cluster serves now.
    async fn rendered(
        &self,
        (namespace, name): (&str, &str),
        job: &AppJob,
        claims: Option<Value>,
    ) -> Result<render::Rendered, String> {
        let served = self.served().await;
        render::render((namespace, name), &job.spec, job.replicas, claims, &served)
    }

    fn api_of(&self, object: &Object) -> Api<DynamicObject> {
        match object.namespace() {
            Some(ns) if object.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &object.resource)
            }
            _ => Api::all_with(self.client.clone(), &object.resource),
        }
    }

    /// Apply an object server-side under verdict's field manager, without
    /// taking fields from anyone else: a conflict with another manager
    /// fails, naming it and the fields. Fields verdict's own day-2 patches
    /// set (a scale, a restart's stamp) are verdict's to apply again.
    async fn apply(&self, object: &Object) -> Result<Value, String> {
        let api = self.api_of(object);
        let applied = |params: PatchParams| {
            let api = api.clone();
            async move {
                api.patch(object.name(), &params, &Patch::Apply(&object.body))
                    .await
                    .map(|o| serde_json::to_value(o).unwrap_or_default())
            }
        };
        match applied(PatchParams::apply(FIELD_MANAGER)).await {
            Ok(value) => Ok(value),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let conflicts = Conflicts::of(&status);
                if conflicts.only_verdicts() {
                    return applied(PatchParams::apply(FIELD_MANAGER).force())
                        .await
                        .map_err(|e| format!("{}: {}", object.what(), reason(&e)));
                }
                Err(format!("{}: {conflicts}", object.what()))
            }
            Err(e) => Err(format!("{}: {}", object.what(), reason(&e))),
        }
    }

    /// Refuse to make or change an app over objects that exist already and
    /// are not verdict's: every one of the rendered objects is read, and
    /// each that someone else made is named; nothing is changed.
    async fn check_ours(&self, name: &str, rendered: &render::Rendered) -> Result<(), String> {
        let objects = rendered
            .environment
            .iter()
            .chain(std::iter::once(&rendered.workload))
            .chain(&rendered.traffic);
        let mut theirs = Vec::new();
        for object in objects {
            let found = match self.api_of(object).get_opt(object.name()).await {
                Ok(found) => found,
                // A kind the cluster stopped serving: nothing of it exists.
                Err(e) if not_found(&e) => None,
                Err(e) => {
                    return Err(format!(
                        "{} could not be read: {}",
                        object.what(),
                        reason(&e)
                    ));
                }
            };
            let Some(found) = found else { continue };
            let meta = &found.metadata;
            let owner = Owner::of_meta(name, meta.labels.as_ref(), meta.annotations.as_ref());
            if !owner.is_verdicts() {
                let managers: Vec<String> = meta
                    .managed_fields
                    .iter()
                    .flatten()
                    .filter_map(|m| m.manager.clone())
                    .filter(|m| m != FIELD_MANAGER)
                    .collect();
                let by = match (&owner, managers.is_empty()) {
                    (
                        Owner::Other {
                            manager: Some(label),
                        },
                        _,
                    ) => format!(" (managed by `{label}`)"),
                    (_, false) => format!(" (field managers: {})", managers.join(", ")),
                    _ => String::new(),
                };
                theirs.push(format!("{}{by}", object.what()));
            }
        }
        if theirs.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} exist{} already and {} not verdict's; verdict makes an app only over what it made or was handed (adopt it, rename it, or remove it first)",
            theirs.join(", "),
            if theirs.len() == 1 { "s" } else { "" },
            if theirs.len() == 1 { "is" } else { "are" },
        ))
    }

    async fn prepare(
        &self,
        namespace: &str,
        name: &str,
        job: &mut AppJob,
    ) -> Result<String, String> {
        let rendered = self.rendered((namespace, name), job, None).await?;
        self.check_ours(name, &rendered).await?;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let mut said = Vec::new();
        match namespaces.get(namespace).await {
            Ok(_) => {}
            Err(e) if not_found(&e) => {
                self.apply(&rendered.namespace).await?;
                job.made.push(rendered.namespace.what());
                said.push(rendered.namespace.what());
            }
            Err(e) => return Err(format!("Namespace {namespace}: {}", reason(&e))),
        }
        said.extend(self.apply_all(&rendered.environment, job).await?);
        Ok(summary("applied", &said, "nothing to prepare"))
    }

    /// Apply objects in order, each kept among what the task made; what
    /// was applied.
    async fn apply_all(&self, objects: &[Object], job: &mut AppJob) -> Result<Vec<String>, String> {
        let mut said = Vec::new();
        for object in objects {
            self.apply(object).await?;
            job.made.push(object.what());
            said.push(object.what());
        }
        Ok(said)
    }

    async fn deploy(
        &self,
        namespace: &str,
        name: &str,
        job: &mut AppJob,
    ) -> Result<String, String> {
        let existing = if job.spec.has_storage() {
            self.statefulsets(namespace)
                .get_opt(name)
                .await
                .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default()))
        } else {
            self.deployments(namespace)
                .get_opt(name)
                .await
                .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default()))
        }
        .map_err(|e| format!("the workload {namespace}/{name}: {}", reason(&e)))?;
        // A StatefulSet's claim templates cannot change: an existing one's
        // are applied as they are, and its claims are expanded instead;
        // when they grow, the StatefulSet is made again with the new size
        // (deleted orphaning its pods and claims, as `kubectl` users do),
        // so that replicas added later claim the new size too.
        let mut claims = existing
            .as_ref()
            .and_then(|s| s.pointer("/spec/volumeClaimTemplates"))
            .cloned();
        let mut said = Vec::new();
        if let Some(set) = existing.as_ref().filter(|_| job.spec.has_storage()) {
            said.extend(self.expand_claims(namespace, name, &job.spec).await?);
            if template_smaller(claims.as_ref(), &job.spec) {
                self.replace_orphaning(namespace, name, set).await?;
                claims = None;
                said.push(format!(
                    "made StatefulSet {namespace}/{name} again with claims of {}",
                    job.spec.storage_class_size.as_deref().unwrap_or_default()
                ));
            }
        }
        let rendered = self.rendered((namespace, name), job, claims).await?;
        if existing.is_none() {
            self.check_quotas(namespace, &rendered.workload, job.replicas)
                .await?;
        }
        let applied = self.apply(&rendered.workload).await?;
        job.generation = applied
            .pointer("/metadata/generation")
            .and_then(Value::as_i64);
        job.made.push(rendered.workload.what());
        said.insert(0, format!("applied {}", rendered.workload.what()));
        Ok(said.join("; "))
    }

    /// Delete the app's StatefulSet leaving its pods and claims, as read
    /// (`set`: preconditions on its UID and version), and wait for it to
    /// go, so that it can be made again with other claim templates.
    async fn replace_orphaning(
        &self,
        namespace: &str,
        name: &str,
        set: &Value,
    ) -> Result<(), String> {
        let api = self.statefulsets(namespace);
        let what = format!("StatefulSet {namespace}/{name}");
        let mut params = DeleteParams::orphan();
        params.preconditions = Some(kube::api::Preconditions {
            uid: set
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(String::from),
            resource_version: set
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
        });
        match api.delete(name, &params).await {
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(format!("{what} could not be made again: {}", reason(&e))),
        }
        // The garbage collector lets go of its pods first: a moment.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut pause = std::time::Duration::from_millis(20);
        loop {
            match api.get_opt(name).await {
                Ok(None) => return Ok(()),
                Ok(Some(_)) if tokio::time::Instant::now() < deadline => {}
                Ok(Some(_)) => {
                    return Err(format!(
                        "{what} is still being deleted after 30 s (orphaning its pods); asked again, the task goes on"
                    ));
                }
                Err(e) => return Err(format!("{what}: {}", reason(&e))),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
    }

    /// Whether the namespace's ResourceQuotas leave room for the app's
    /// pods: a create that would exceed one fails here, naming it, rather
    /// than leave a workload whose pods are refused.
    async fn check_quotas(
        &self,
        namespace: &str,
        workload: &Object,
        replicas: u32,
    ) -> Result<(), String> {
        let quotas: Api<ResourceQuota> = Api::namespaced(self.client.clone(), namespace);
        let list = quotas.list(&ListParams::default()).await.map_err(|e| {
            format!(
                "the ResourceQuotas of {namespace} could not be read: {}",
                reason(&e)
            )
        })?;
        let container = workload
            .body
            .pointer("/spec/template/spec/containers/0/resources")
            .cloned()
            .unwrap_or(json!({}));
        let amount = |part: &str, resource: &str| -> Option<ParsedQuantity> {
            let text = container
                .pointer(&format!("/{part}/{resource}"))
                .or_else(|| container.pointer(&format!("/limits/{resource}")))?
                .as_str()?;
            ParsedQuantity::try_from(text).ok()
        };
        let kind_count = format!("count/{}.apps", workload.resource.plural);
        for quota in list.items {
            let quota_name = quota.metadata.name.clone().unwrap_or_default();
            let status = quota.status.unwrap_or_default();
            let hard = status
                .hard
                .or(quota.spec.and_then(|s| s.hard))
                .unwrap_or_default();
            let used = status.used.unwrap_or_default();
            for (resource, limit) in &hard {
                let per_pod = match resource.as_str() {
                    "requests.cpu" | "cpu" => amount("requests", "cpu"),
                    "requests.memory" | "memory" => amount("requests", "memory"),
                    "limits.cpu" => amount("limits", "cpu"),
                    "limits.memory" => amount("limits", "memory"),
                    "pods" | "count/pods" => ParsedQuantity::try_from("1").ok(),
                    other if other == kind_count => {
                        // One workload, whatever its replicas.
                        let Ok(limit) = ParsedQuantity::try_from(limit.0.as_str()) else {
                            continue;
                        };
                        let used = used
                            .get(resource)
                            .and_then(|u| ParsedQuantity::try_from(u.0.as_str()).ok())
                            .unwrap_or_default();
                        if used.clone() + ParsedQuantity::try_from("1").unwrap_or_default() > limit
                        {
                            return Err(format!(
                                "{}: ResourceQuota {namespace}/{quota_name} leaves no room: {resource} used {used} of {limit}",
                                workload.what(),
                            ));
                        }
                        continue;
                    }
                    _ => continue,
                };
                let (Some(per_pod), Ok(limit)) =
                    (per_pod, ParsedQuantity::try_from(limit.0.as_str()))
                else {
                    // A quota on what the pods do not say: the API server
                    // refuses pods without it; say so now.
                    if resource.contains("cpu") || resource.contains("memory") {
                        return Err(format!(
                            "{}: ResourceQuota {namespace}/{quota_name} limits {resource}, which the app's resource-limit does not give",
                            workload.what()
                        ));
                    }
                    continue;
                };
                let used = used
                    .get(resource)
                    .and_then(|u| ParsedQuantity::try_from(u.0.as_str()).ok())
                    .unwrap_or_default();
                let wanted = per_pod.clone() * replicas;
                if used.clone() + wanted.clone() > limit {
                    return Err(format!(
                        "{}: ResourceQuota {namespace}/{quota_name} is exceeded: {resource} {replicas} × {per_pod} = {wanted} more than the {used} used, limited to {limit}",
                        workload.what()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Expand the app's claims to the spec's size (the class allows it:
    /// admission checked).
    async fn expand_claims(
        &self,
        namespace: &str,
        name: &str,
        spec: &AppSpec,
    ) -> Result<Vec<String>, String> {
        let Some(size) = &spec.storage_class_size else {
            return Ok(Vec::new());
        };
        let Ok(wanted) = ParsedQuantity::try_from(size.as_str()) else {
            return Ok(Vec::new());
        };
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let list = claims
            .list(&ListParams::default().labels(&format!("{INSTANCE}={name}")))
            .await
            .map_err(|e| {
                format!(
                    "the claims of {namespace}/{name} could not be read: {}",
                    reason(&e)
                )
            })?;
        let mut said = Vec::new();
        for claim in list.items {
            let claim_name = claim.metadata.name.clone().unwrap_or_default();
            let now = claim
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .and_then(|q| ParsedQuantity::try_from(q.0.as_str()).ok());
            if now.is_some_and(|now| now >= wanted) {
                continue;
            }
            claims
                .patch(
                    &claim_name,
                    &super::day_two(),
                    &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": size}}}})),
                )
                .await
                .map_err(|e| {
                    format!(
                        "PersistentVolumeClaim {namespace}/{claim_name}: {}",
                        reason(&e)
                    )
                })?;
            said.push(format!(
                "expanded PersistentVolumeClaim {namespace}/{claim_name} to {size}"
            ));
        }
        Ok(said)
    }

    async fn open_traffic(
        &self,
        namespace: &str,
        name: &str,
        job: &mut AppJob,
    ) -> Result<String, String> {
        let rendered = self.rendered((namespace, name), job, None).await?;
        let said = self.apply_all(&rendered.traffic, job).await?;
        Ok(summary("applied", &said, "no network-config: no Service"))
    }

    /// Delete what verdict made for the app of one kind; returns what.
    async fn delete_made(
        &self,
        namespace: &str,
        name: &str,
        resource: &ApiResource,
    ) -> Result<Vec<String>, String> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, resource);
        let list = match api
            .list(&ListParams::default().labels(&render::made_selector(name)))
            .await
        {
            Ok(list) => list,
            Err(e) if not_found(&e) => return Ok(Vec::new()),
            Err(e) => {
                return Err(format!(
                    "the {} of {namespace}/{name} could not be read: {}",
                    resource.plural,
                    reason(&e)
                ));
            }
        };
        let mut said = Vec::new();
        for object in list.items {
            let object_name = object.metadata.name.unwrap_or_default();
            match api.delete(&object_name, &DeleteParams::background()).await {
                Ok(_) => said.push(format!("{} {namespace}/{object_name}", resource.kind)),
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(format!(
                        "{} {namespace}/{object_name}: {}",
                        resource.kind,
                        reason(&e)
                    ));
                }
            }
        }
        Ok(said)
    }

    async fn close_traffic(
        &self,
        namespace: &str,
        name: &str,
        _job: &mut AppJob,
    ) -> Result<String, String> {
        let served = self.served().await;
        let mut said = self
            .delete_made(namespace, name, &ApiResource::erase::<Service>(&()))
            .await?;
        if let Some(monitor) = &served.service_monitor {
            said.extend(self.delete_made(namespace, name, monitor).await?);
        }
        Ok(summary("deleted", &said, "no Service"))
    }

    async fn remove_app(
        &self,
        namespace: &str,
        name: &str,
        job: &mut AppJob,
    ) -> Result<String, String> {
        let mut said = Vec::new();
        // Read again, now: deleted only if it is verdict's, and only as it
        // was read (a change meanwhile fails the precondition); one gone
        // already leaves what was made for it to delete.
        let workload = match &job.workload {
            Some(workload) => self
                .deletable_workload(namespace, name, workload)
                .await?
                .map(|params| (workload, params)),
            None => None,
        };
        if let Some((workload, params)) = workload {
            let deleted = match workload.kind {
                types::WorkloadKind::StatefulSet => self
                    .statefulsets(namespace)
                    .delete(&workload.name, &params)
                    .await
                    .map(drop),
                types::WorkloadKind::Deployment => self
                    .deployments(namespace)
                    .delete(&workload.name, &params)
                    .await
                    .map(drop),
                other => return Err(format!("a {other:?} cannot be deleted by tasks")),
            };
            match deleted {
                Ok(()) => said.push(format!(
                    "{} {namespace}/{}",
                    crate::observe::workload_kind(workload.kind),
                    workload.name
                )),
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(format!(
                        "{} {namespace}/{}: {}",
                        crate::observe::workload_kind(workload.kind),
                        workload.name,
                        reason(&e)
                    ));
                }
            }
        }
        let served = self.served().await;
        let mut kinds = vec![
            ApiResource::erase::<Secret>(&()),
            ApiResource::erase::<ConfigMap>(&()),
        ];
        kinds.extend(served.certificate);
        // Claims made from the StatefulSet's template carry its labels:
        // the app's and verdict's.
        if job.spec.delete_storage {
            kinds.push(ApiResource::erase::<PersistentVolumeClaim>(&()));
        }
        for kind in &kinds {
            said.extend(self.delete_made(namespace, name, kind).await?);
        }
        Ok(summary("deleted", &said, "nothing to delete"))
    }

    /// How to delete the app's workload, when it is verdict's (made or
    /// handed to it), read as it is now: with preconditions on its UID and
    /// resource version, so that an object changed or replaced since is
    /// not deleted. `None`: it is gone already. Someone else's is an error
    /// naming it.
    async fn deletable_workload(
        &self,
        namespace: &str,
        name: &str,
        workload: &types::Workload,
    ) -> Result<Option<DeleteParams>, String> {
        let what = format!(
            "{} {namespace}/{}",
            crate::observe::workload_kind(workload.kind),
            workload.name
        );
        let meta = match workload.kind {
            types::WorkloadKind::StatefulSet => self
                .statefulsets(namespace)
                .get_opt(&workload.name)
                .await
                .map(|o| o.map(|o| o.metadata)),
            types::WorkloadKind::Deployment => self
                .deployments(namespace)
                .get_opt(&workload.name)
                .await
                .map(|o| o.map(|o| o.metadata)),
            other => return Err(format!("a {other:?} cannot be deleted by tasks")),
        }
        .map_err(|e| format!("{what}: {}", reason(&e)))?;
        meta.map(|meta| super::deleting_as_read(meta, (namespace, name), &what))
            .transpose()
    }

    /// Whether the app is gone: its pods and workload, then the namespace
    /// when verdict made it for this app and nothing else lives there.
    async fn gone(
        &self,
        namespace: &str,
        name: &str,
        job: &mut AppJob,
    ) -> Result<Option<String>, String> {
        let key = (namespace.to_string(), name.to_string());
        let input = self.observed.read().inputs_for([&key], now()).pop();
        if job.removing_namespace {
            return Ok(input
                .is_none_or(|i| !i.app.namespace_exists)
                .then(|| format!("deleted; namespace {namespace} deleted too")));
        }
        if let Some(input) = &input {
            let live = input
                .app
                .pods
                .iter()
                .filter(|p| p.deleting_since.is_none())
                .count();
            if live > 0 || !input.app.workloads.is_empty() || !input.app.pods.is_empty() {
                return Ok(None);
            }
        }
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let ns = match namespaces.get_opt(namespace).await {
            Ok(Some(ns)) => ns,
            Ok(None) => return Ok(Some("deleted".into())),
            Err(e) => return Err(format!("Namespace {namespace}: {}", reason(&e))),
        };
        let labels = ns.metadata.labels.unwrap_or_default();
        let ours = labels.get(MADE_FOR).map(String::as_str) == Some(name)
            && labels.get(MANAGED_BY).map(String::as_str) == Some("verdict");
        if !ours {
            return Ok(Some("deleted".into()));
        }
        let (others, leaving) = self.others_in(namespace).await?;
        if !others.is_empty() {
            return Ok(Some(format!(
                "deleted; namespace {namespace} (made for the app) is kept: it holds {}",
                others.join(", ")
            )));
        }
        // What is already being deleted (the claims, until their protection
        // is lifted once no pod uses them) is waited for, not taken for
        // something the namespace holds.
        job.leaving = leaving;
        if leaving > 0 {
            return Ok(None);
        }
        match namespaces
            .delete(namespace, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(format!("Namespace {namespace}: {}", reason(&e))),
        }
        job.removing_namespace = true;
        Ok(None)
    }

    /// What lives in a namespace besides what Kubernetes puts in every one,
    /// and how many more are already being deleted.
    async fn others_in(&self, namespace: &str) -> Result<(Vec<String>, usize), String> {
        use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
        let kinds = [
            ApiResource::erase::<Pod>(&()),
            ApiResource::erase::<Deployment>(&()),
            ApiResource::erase::<StatefulSet>(&()),
            ApiResource::erase::<Service>(&()),
            ApiResource::erase::<PersistentVolumeClaim>(&()),
            ApiResource::erase::<ConfigMap>(&()),
            ApiResource::erase::<Secret>(&()),
        ];
        let (mut others, mut leaving) = (Vec::new(), 0);
        for kind in &kinds {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, kind);
            let list = api
                .list(&ListParams::default().limit(5))
                .await
                .map_err(|e| {
                    format!(
                        "what namespace {namespace} holds could not be read: {}",
                        reason(&e)
                    )
                })?;
            // What Kubernetes puts in every namespace is not the app's.
            let kubernetes = |o: &DynamicObject| {
                o.metadata.name.as_deref() == Some("kube-root-ca.crt")
                    || o.data["type"] == "kubernetes.io/service-account-token"
            };
            for object in list.items.iter().filter(|o| !kubernetes(o)) {
                if object.metadata.deletion_timestamp.is_some() {
                    leaving += 1;
                } else if let Some(name) = &object.metadata.name {
                    others.push(format!("{} {name}", kind.kind));
                }
            }
        }
        Ok((others, leaving))
    }

    /// Whether the workload has rolled out as applied: its controller saw
    /// the change, every replica is updated and ready, no old one is left,
    /// and the app's own health check (when it has one) passes.
    fn rolled_out(
        &self,
        namespace: &str,
        name: &str,
        job: &AppJob,
    ) -> Result<Option<String>, String> {
        let (done, _, status) = self.rollout(namespace, name, job);
        Ok(done.then_some(status))
    }

    fn waiting(&self, namespace: &str, name: &str, job: &AppJob) -> (u8, String) {
        match job.acts.get(job.at) {
            Some(Act::Gone) => {
                let key = (namespace.to_string(), name.to_string());
                let left = self
                    .observed
                    .read()
                    .inputs_for([&key], now())
                    .pop()
                    .map_or(0, |i| i.app.pods.len());
                if job.removing_namespace {
                    (90, format!("waiting for namespace {namespace} to go"))
                } else if left > 0 {
                    (0, format!("{left} pods left"))
                } else if job.leaving > 0 {
                    (
                        70,
                        format!(
                            "0 pods left; waiting for {} object{} of namespace {namespace} being deleted",
                            job.leaving,
                            if job.leaving == 1 { "" } else { "s" }
                        ),
                    )
                } else {
                    (50, "0 pods left".to_string())
                }
            }
            _ => {
                let (_, progress, status) = self.rollout(namespace, name, job);
                (progress, status)
            }
        }
    }

    fn rollout(&self, namespace: &str, name: &str, job: &AppJob) -> (bool, u8, String) {
        let key = (namespace.to_string(), name.to_string());
        let Some(input) = self.observed.read().inputs_for([&key], now()).pop() else {
            return (false, 0, "waiting for the app to be observed".into());
        };
        let Some(workload) = input.app.workloads.iter().find(|w| w.name == name) else {
            return (false, 0, "waiting for the workload to be observed".into());
        };
        if job
            .generation
            .is_some_and(|g| workload.observed_generation < g)
        {
            return (false, 0, "waiting for the workload's controller".into());
        }
        let want = job.replicas;
        let updated = workload.updated_replicas.min(want);
        let ready = workload.ready_replicas.min(want);
        let percent = (updated.min(ready) * 100)
            .checked_div(want)
            .map_or(100, |p| p as u8);
        let mut status = format!("{ready}/{want} ready, {updated}/{want} updated");
        let rolled = workload.updated_replicas >= want
            && workload.ready_replicas >= want
            && workload.current_replicas <= want;
        let healthy = match (&job.spec.health_url, &input.app.probe) {
            (None, _) => true,
            (Some(_), Some(probe)) => {
                let ok = probe.outcome == types::ProbeOutcome::Ok;
                status.push_str(if ok {
                    "; the app's health check passes"
                } else {
                    "; the app's health check does not pass yet"
                });
                ok
            }
            (Some(_), None) => {
                status.push_str("; waiting for the app's health check");
                false
            }
        };
        let done = rolled && healthy;
        (done, if done { 100 } else { percent.min(99) }, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict(causes: &[(&str, &str)]) -> kube::core::Status {
        serde_json::from_value(json!({
            "code": 409, "message": "Apply failed with conflicts",
            "details": {"causes": causes.iter().map(|(manager, field)| json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with \"{manager}\" using apps/v1"),
                "field": field,
            })).collect::<Vec<_>>()},
        }))
        .unwrap()
    }

    #[test]
    fn a_conflict_names_each_manager_and_its_fields() {
        let conflicts = Conflicts::of(&conflict(&[
            (
                "kubectl-edit",
                ".spec.template.spec.containers[name=\"web\"].env",
            ),
            ("kubectl-edit", ".spec.replicas"),
            ("helm", ".metadata.labels.team"),
        ]));
        assert!(!conflicts.only_verdicts());
        let text = conflicts.to_string();
        assert!(
            text.contains("field manager `kubectl-edit` set .spec.template")
                && text.contains(".spec.replicas")
                && text.contains("field manager `helm` set .metadata.labels.team"),
            "{text}"
        );
        assert!(Conflicts::of(&conflict(&[(FIELD_MANAGER, ".spec.replicas")])).only_verdicts());
        let without_causes = Conflicts::of(&conflict(&[]));
        assert!(
            !without_causes.only_verdicts(),
            "an unexplained conflict is not taken over"
        );
        assert_eq!(without_causes.to_string(), "Apply failed with conflicts");
    }

    #[test]
    fn claims_that_grow_make_the_set_again() {
        let spec = AppSpec {
            storage_class_size: Some("20Gi".into()),
            ..AppSpec::default()
        };
        let templates =
            |size: &str| json!([{"spec": {"resources": {"requests": {"storage": size}}}}]);
        assert!(template_smaller(Some(&templates("10Gi")), &spec));
        assert!(!template_smaller(Some(&templates("20Gi")), &spec));
        assert!(!template_smaller(None, &spec));
    }
}
