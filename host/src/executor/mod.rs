//! A task executor: carries out admitted tasks on the cluster through the
//! Kubernetes API and reports their progress from what the host observes,
//! so that a task's verdict moves from `starting 0%` to `running`. On with
//! the demo cluster (`--execute-tasks` elsewhere).
//!
//! What each action does to the app's Deployment or StatefulSet:
//! `start` sets its replicas (the request's `replicas`, else what it had
//! before it was stopped, else 1); `stop` sets them to 0, remembering the
//! count; `scale` sets `replicas`; `restart` stamps the pod template, as
//! `kubectl rollout restart` does. `create`, `update` (of an app verdict
//! made) and `delete` carry out the whole app, step by step ([`apps`],
//! rendered by [`render`]); an `update` of an app verdict did not make sets
//! its first container's `image`. An `update` that names `params.failover` (asked
//! for by failover) instead moves a workload's pods off a node: `evict`
//! through the Eviction API (a disruption budget that refuses fails the
//! task, saying so), or `release`: the node is tainted out of service and
//! the pods are force-deleted. A task whose app does not get there within
//! the timeout fails, saying how far it got.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::failover::{BoxFuture, NodeActions, OUT_OF_SERVICE};
use crate::leader::{Leadership, Term};
use crate::observe::cluster::Observed;
use crate::tasks::TaskError;
use crate::tasks::model::{StepReport, TaskPatch};
use crate::tasks::{Task, Tasks};
use crate::time::now;
use crate::wit::types::{self, TaskAction as Action, TaskPhase as Phase};

mod apps;
mod render;
mod vms;

/// The annotation that remembers the replica count of a stopped workload.
pub(crate) const REPLICAS_BEFORE_STOP: &str = "verdict.dev/replicas-before-stop";

/// Steps that wait for the cluster; the steps before them are done once
/// the change is made, the steps after once the wait is over.
const WAITING_STEPS: [&str; 2] = ["health-check", "delete"];

/// Pods of one workload to take off one node: a failover task (an
/// `update` whose `params.failover` names them).
#[derive(Debug, Clone, serde::Deserialize)]
struct Move {
    /// `evict` (through the Eviction API, honouring disruption budgets) or
    /// `release` (taint the node out of service, then force-delete).
    action: String,
    node: String,
    workload: crate::failover::model::Workload,
}

impl Move {
    fn of(task: &Task) -> Option<Self> {
        if task.action != Action::Update {
            return None;
        }
        serde_json::from_value(task.params.get("failover")?.clone()).ok()
    }
}

/// What a running task waits for.
#[derive(Debug, Clone)]
struct Job {
    /// Ready pods wanted, and pods at most (`None`: any).
    replicas: u32,
    /// Only pods created at or after this count (restart, update).
    pods_since: Option<types::Timestamp>,
    /// Only pods running this image count.
    image: Option<String>,
    /// The pods there were at the start (stop, delete, move).
    initial: u32,
    started: types::Timestamp,
    /// Pods to take off a node.
    moving: Option<Move>,
    /// What a task on virtual machines waits for.
    machines: Option<vms::Wait>,
    /// A task on a whole app (create, update, delete), step by step.
    app: Option<apps::AppJob>,
    /// What an adoption recorded (it is done once made).
    adopted: Option<String>,
}

/// Whether users' tasks are carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// Carry out admitted tasks on the cluster — scale, restart, and
    /// create, update and delete whole apps (seed 000's Task), reporting
    /// progress (always on with the demo cluster; failover's own tasks are
    /// carried out whenever it enforces).
    #[arg(long = "execute-tasks")]
    pub execute_tasks: bool,
}

/// Failover's node actions, written to the cluster.
#[derive(Debug, Clone)]
pub(crate) struct Nodes {
    api: Api<Node>,
}

impl Nodes {
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client),
        }
    }
}

impl NodeActions for Nodes {
    fn cordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            self.api
                .patch(
                    node,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"unschedulable": true}})),
                )
                .await
                .map(drop)
        })
    }

    fn uncordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let current = self.api.get(node).await?;
            let taints: Vec<Value> = current
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.key != OUT_OF_SERVICE)
                .map(|t| serde_json::to_value(t).unwrap_or_default())
                .collect();
            self.api
                .patch(
                    node,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"unschedulable": false, "taints": taints}})),
                )
                .await
                .map(drop)
        })
    }
}

pub(crate) struct Executor {
    /// Writes only while this replica leads ([`Leadership::fenced`]).
    client: kube::Client,
    leadership: Arc<Leadership>,
    tasks: Arc<Tasks>,
    observed: Arc<Observed>,
    timeout: Duration,
    /// Only failover's tasks (users' tasks are carried out elsewhere, or
    /// not at all).
    failover_only: bool,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

fn millis(d: Duration) -> types::Timestamp {
    d.as_millis() as types::Timestamp
}

impl Executor {
    pub fn new(
        client: kube::Client,
        leadership: Arc<Leadership>,
        tasks: Arc<Tasks>,
        observed: Arc<Observed>,
    ) -> Self {
        Self {
            client: leadership.fenced(client),
            leadership,
            tasks,
            observed,
            timeout: Duration::from_secs(120),
            failover_only: false,
        }
    }

    /// Carry out only the tasks failover asks for.
    pub(crate) fn failover_only(mut self, only: bool) -> Self {
        self.failover_only = only;
        self
    }

    /// Carry out tasks, while this replica leads, until aborted. A new
    /// term takes each open task over first, so that the previous leader
    /// can write none of them any more, and begins it again (each change
    /// is idempotent).
    pub async fn run(self) {
        let mut jobs: BTreeMap<String, Job> = BTreeMap::new();
        let mut term: Option<Term> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(acting) = self.leadership.acting() else {
                jobs.clear();
                term = None;
                continue;
            };
            if term.as_ref() != Some(&acting) {
                jobs.clear();
                term = Some(acting.clone());
            }
            let mut open = self.tasks.executable();
            if self.failover_only {
                open.retain(|t| t.params.contains_key("failover"));
            }
            let mut claimed = Vec::with_capacity(open.len());
            for task in open {
                if task.actor.as_ref() == Some(&acting) {
                    claimed.push(task);
                    continue;
                }
                match self.tasks.claim(&task.id, &acting).await {
                    Ok(task) => claimed.push(task),
                    Err(error) => {
                        tracing::debug!(task = %task.id, %error, "a task could not be taken over");
                    }
                }
            }
            let open = claimed;
            for task in &open {
                if let Err(message) = self.advance(task, &mut jobs).await {
                    jobs.remove(&task.id);
                    let patch = TaskPatch {
                        phase: Some(Phase::Failed),
                        message: Some(message),
                        ..TaskPatch::default()
                    };
                    self.report(task, &patch).await;
                }
            }
            // Jobs of tasks that finished or were cancelled are over.
            jobs.retain(|id, _| open.iter().any(|t| &t.id == id));
        }
    }

    /// Store a report on a task under the term that took it over, while
    /// that term still acts.
    async fn report(&self, task: &Task, patch: &TaskPatch) {
        let (Some(actor), Some(acting)) = (&task.actor, self.leadership.acting()) else {
            return;
        };
        if *actor != acting {
            return;
        }
        match self.tasks.patch_as(&task.id, patch, actor).await {
            Ok(_) => {}
            // The store could not take it (the API server refused or was
            // away): said loudly, and said again on the next round.
            Err(error @ TaskError::Store(_)) => {
                tracing::warn!(task = %task.id, %error, "a task report could not be stored");
            }
            // A task cancelled meanwhile, or written by another replica.
            Err(error) => {
                tracing::debug!(task = %task.id, %error, "a task report was refused");
            }
        }
    }

    /// Start a pending task, or report on a running one.
    async fn advance(&self, task: &Task, jobs: &mut BTreeMap<String, Job>) -> Result<(), String> {
        let (namespace, name) = task.app.split_once('/').unwrap_or(("", &task.app));
        if let Some(job) = jobs.get_mut(&task.id)
            && let Some(app) = job.app.as_mut()
        {
            let started = job.started;
            return self
                .advance_app(task, (namespace, name), app, started)
                .await;
        }
        let job = match jobs.get(&task.id) {
            // The change is made but its report did not land (the store
            // refused the write): say again that the task is under way, so
            // that it can finish.
            Some(_) if task.phase == Phase::Pending => {
                self.report(task, &under_way(task)).await;
                return Ok(());
            }
            Some(job) => job.clone(),
            None => {
                // A pending task, or a running one this process has not
                // seen (a restart): make the change (it is idempotent) and
                // wait for it.
                let job = self.begin(task, namespace, name).await?;
                if job.app.is_some() {
                    if task.steps.is_empty() && task.phase == Phase::Pending {
                        let patch = TaskPatch {
                            phase: Some(Phase::Running),
                            message: Some(format!("{} under way", task.action_name())),
                            ..TaskPatch::default()
                        };
                        self.report(task, &patch).await;
                    }
                    jobs.insert(task.id.clone(), job);
                    return Ok(());
                }
                jobs.insert(task.id.clone(), job.clone());
                self.report(task, &under_way(task)).await;
                return Ok(());
            }
        };
        if let Some(wait) = &job.machines {
            let key = (namespace.to_string(), name.to_string());
            if let Some(failure) = wait.failure(&self.observed.read(), &key) {
                return Err(failure);
            }
        }
        let (done, progress, status) = self.progress(task, namespace, name, &job);
        if done {
            let patch = TaskPatch {
                phase: Some(Phase::Succeeded),
                message: Some(status),
                steps: succeeded_from_here(task, None),
                ..TaskPatch::default()
            };
            self.report(task, &patch).await;
            return Ok(());
        }
        if now() - job.started > millis(self.timeout) {
            return Err(format!(
                "did not finish within {} s: {status}",
                self.timeout.as_secs()
            ));
        }
        let waiting = task
            .steps
            .iter()
            .find(|s| WAITING_STEPS.contains(&s.name.as_str()));
        if task.progress != progress || waiting.is_some_and(|s| s.phase == Phase::Pending) {
            let patch = TaskPatch {
                progress: Some(progress),
                message: Some(status),
                steps: waiting
                    .filter(|s| s.phase == Phase::Pending)
                    .map(|s| {
                        vec![StepReport {
                            name: s.name.clone(),
                            phase: Phase::Running,
                            message: None,
                        }]
                    })
                    .unwrap_or_default(),
                ..TaskPatch::default()
            };
            self.report(task, &patch).await;
        }
        Ok(())
    }

    /// The app's workload as observed: kind and name, replicas wanted and
    /// the annotations.
    fn workload(&self, namespace: &str, name: &str) -> Option<(types::Workload, u32)> {
        let key = (namespace.to_string(), name.to_string());
        let input = self.observed.read().inputs_for([&key], now()).pop()?;
        let pods = input
            .app
            .pods
            .iter()
            .filter(|p| p.deleting_since.is_none())
            .count() as u32;
        input.app.workloads.into_iter().next().map(|w| (w, pods))
    }

    /// Make the change a task asks for.
    async fn begin(&self, task: &Task, namespace: &str, name: &str) -> Result<Job, String> {
        let param = |key: &str| task.params.get(key);
        let replicas_param = param("replicas").and_then(Value::as_u64).map(|r| r as u32);
        let started = now();
        let mut job = Job {
            replicas: 0,
            pods_since: None,
            image: None,
            initial: 0,
            started,
            moving: None,
            machines: None,
            app: None,
            adopted: None,
        };
        if task.action == Action::Adopt {
            job.adopted = Some(self.adopt(task, namespace, name).await?);
            return Ok(job);
        }
        if let Some(moving) = Move::of(task) {
            return self.begin_move(moving, job).await;
        }
        let fail = |e: kube::Error| format!("the Kubernetes API refused the change: {e}");
        if task.action == Action::Create {
            job.app = self.app_job(task, namespace, name).await?;
            return Ok(job);
        }
        let key = (namespace.to_string(), name.to_string());
        // A migration and failover's repair of an instance are about the
        // app's virtual machines even when it has a workload too.
        let repair = task
            .params
            .get("failover")
            .is_some_and(|f| f["action"] == "repair");
        if task.action == Action::Migrate || repair || self.workload(namespace, name).is_none() {
            let machines = vms::Machines::of(&self.observed.read(), &key);
            if !machines.is_empty() {
                return self.begin_machines(task, &key, machines, job).await;
            }
        }
        if matches!(task.action, Action::Update | Action::Delete)
            && let Some(app) = self.app_job(task, namespace, name).await?
            && (task.action == Action::Delete || !task.params.contains_key("failover"))
        {
            job.app = Some(app);
            return Ok(job);
        }
        if task.action == Action::Migrate {
            return Err(format!(
                "migrate moves virtual machines; {namespace}/{name} has none"
            ));
        }
        let (workload, pods) = self.workload(namespace, name).ok_or_else(|| {
            format!(
                "no Deployment, StatefulSet or virtual machine of {namespace}/{name} is observed"
            )
        })?;
        let annotation = |key: &str| {
            workload
                .annotations
                .iter()
                .find(|kv| kv.key == key)
                .map(|kv| kv.value.clone())
        };
        job.initial = pods;
        job.replicas = workload.desired_replicas;
        let patch = match task.action {
            Action::Start => {
                job.replicas = replicas_param
                    .or_else(|| annotation(REPLICAS_BEFORE_STOP).and_then(|r| r.parse().ok()))
                    .unwrap_or(1)
                    .max(1);
                json!({"spec": {"replicas": job.replicas}})
            }
            Action::Stop => {
                let before = if workload.desired_replicas > 0 {
                    workload.desired_replicas.to_string()
                } else {
                    annotation(REPLICAS_BEFORE_STOP).unwrap_or_else(|| "1".into())
                };
                job.replicas = 0;
                json!({"metadata": {"annotations": {REPLICAS_BEFORE_STOP: before}}, "spec": {"replicas": 0}})
            }
            Action::Scale => {
                job.replicas = replicas_param.ok_or("params.replicas is required")?;
                json!({"spec": {"replicas": job.replicas}})
            }
            Action::Restart => {
                // The stamp is the task's own time, so that making the
                // change again (after this process restarted) changes
                // nothing; pods count from that second on.
                let at = crate::time::rfc3339(task.created_at);
                job.pods_since = Some(task.created_at - task.created_at.rem_euclid(1000));
                json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": at}}}}})
            }
            Action::Update => {
                // An app verdict did not make has no record of what it was
                // made from: only its image and replicas are changed (the
                // day-2 update), and a task asking more is refused rather
                // than half done.
                let more: Vec<&str> = crate::tasks::spec::FIELDS
                    .iter()
                    .copied()
                    .filter(|f| !crate::admission::DAY_TWO.contains(f))
                    .filter(|f| task.params.contains_key(*f))
                    .collect();
                if !more.is_empty() {
                    return Err(format!(
                        "{namespace}/{name} was not made by verdict: an update sets its image and replicas only, not {}",
                        more.join(", ")
                    ));
                }
                let image = param("image").and_then(Value::as_str);
                if image.is_none() && replicas_param.is_none() {
                    return Err("params.image or params.replicas is required: an app verdict did not make is updated by its image and replicas only".into());
                }
                let mut patch = json!({});
                if let Some(replicas) = replicas_param {
                    job.replicas = replicas;
                    patch["spec"]["replicas"] = json!(replicas);
                }
                if let Some(image) = image {
                    job.image = Some(image.to_string());
                    let object = self.get(&workload).await.map_err(fail)?;
                    // The first container's image; the others as they are
                    // (a merge patch replaces the list whole).
                    let mut containers = object
                        .pointer("/spec/template/spec/containers")
                        .cloned()
                        .unwrap_or_default();
                    let Some(first) = containers.get_mut(0) else {
                        return Err(format!(
                            "{} {namespace}/{} has no container to set the image of",
                            crate::observe::workload_kind(workload.kind),
                            workload.name
                        ));
                    };
                    first["image"] = json!(image);
                    patch["spec"]["template"]["spec"]["containers"] = containers;
                }
                patch
            }
            Action::Create | Action::Migrate | Action::Delete | Action::Adopt => {
                unreachable!("handled above")
            }
        };
        match self
            .patch_workload(workload.kind, namespace, &workload.name, &patch)
            .await
        {
            Some(patched) => patched.map_err(fail)?,
            None => return Err(format!("a {:?} cannot be changed by tasks", workload.kind)),
        }
        Ok(job)
    }

    /// A day-2 merge patch of a Deployment or StatefulSet; `None` for a
    /// kind tasks do not change.
    async fn patch_workload(
        &self,
        kind: types::WorkloadKind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Option<Result<(), kube::Error>> {
        let patch = Patch::Merge(patch);
        Some(match kind {
            types::WorkloadKind::StatefulSet => self
                .statefulsets(namespace)
                .patch(name, &day_two(), &patch)
                .await
                .map(drop),
            types::WorkloadKind::Deployment => self
                .deployments(namespace)
                .patch(name, &day_two(), &patch)
                .await
                .map(drop),
            _ => return None,
        })
    }

    /// Record on the app's workloads (or its virtual machines and their
    /// sets) that a person handed them to verdict: who, and when. What
    /// verdict made needs no adoption and is left as it is.
    async fn adopt(&self, task: &Task, namespace: &str, name: &str) -> Result<String, String> {
        use crate::tasks::ownership::{ADOPTED_AT, ADOPTED_BY, Owner};
        let key = (namespace.to_string(), name.to_string());
        let by = task
            .requested_by
            .clone()
            .filter(|by| crate::tasks::model::names_someone(by))
            .unwrap_or_else(|| "anonymous".into());
        // Each object: its kind (the workload's, when it is one), name and
        // owner.
        let mut objects: Vec<(String, Option<types::WorkloadKind>, String, Owner)> = Vec::new();
        {
            let snapshot = self.observed.read();
            if let Some(input) = snapshot.inputs_for([&key], now()).pop() {
                for w in &input.app.workloads {
                    let owner = Owner::of_observed(name, &w.labels, &w.annotations);
                    let kind = crate::observe::workload_kind(w.kind).to_string();
                    objects.push((kind, Some(w.kind), w.name.clone(), owner));
                }
            }
            let machines = vms::Machines::of(&snapshot, &key);
            for (kind, object) in machines.adoptable() {
                if let Some(o) = snapshot.object_named(&kind, namespace, &object) {
                    let owner = Owner::of_observed(name, &o.labels, &o.annotations);
                    objects.push((kind, None, object, owner));
                }
            }
        }
        if objects.is_empty() {
            return Err(format!(
                "{namespace}/{name} has no Deployment, StatefulSet or virtual machine to adopt"
            ));
        }
        let at = crate::time::rfc3339(task.created_at);
        let patch = json!({"metadata": {"annotations": {ADOPTED_BY: by, ADOPTED_AT: at}}});
        let mut said = Vec::new();
        for (kind, workload, object, owner) in objects {
            if owner == Owner::Made {
                continue;
            }
            match workload {
                Some(workload) => {
                    match self.patch_workload(workload, namespace, &object, &patch).await {
                        Some(patched) => patched.map_err(|e| {
                            format!("{kind} {namespace}/{object}: the Kubernetes API refused the adoption: {e}")
                        })?,
                        // A DaemonSet: no task changes it.
                        None => continue,
                    }
                }
                None => self.merge(namespace, &kind, &object, patch.clone()).await?,
            }
            said.push(format!("{kind} {namespace}/{object}"));
        }
        Ok(if said.is_empty() {
            "verdict made the app: nothing to adopt".into()
        } else {
            format!("adopted by {by}: {}", said.join(", "))
        })
    }

    /// The pods of a move's workload still on its node.
    fn pods_on_node(&self, m: &Move) -> Vec<String> {
        let snapshot = self.observed.read();
        snapshot
            .pods
            .values()
            .filter(|p| {
                p.namespace() == m.workload.namespace
                    && p.node() == Some(m.node.as_str())
                    && p.deleting_since().is_none()
                    && p.owner() == Some((&m.workload.kind, &m.workload.name))
            })
            .map(|p| p.name().to_string())
            .collect()
    }

    /// Take a workload's pods off a node: evict them, or fence the node and
    /// release them.
    async fn begin_move(&self, m: Move, mut job: Job) -> Result<Job, String> {
        let pods = self.pods_on_node(&m);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &m.workload.namespace);
        let refused = |pod: &str, e: kube::Error| match e {
            kube::Error::Api(status) if status.code == 429 => {
                format!("the disruption budget keeps pod {pod}: {}", status.message)
            }
            e => format!("the Kubernetes API refused to move pod {pod}: {e}"),
        };
        match m.action.as_str() {
            "evict" => {
                for pod in &pods {
                    match api.evict(pod, &EvictParams::default()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Err(e) => return Err(refused(pod, e)),
                    }
                }
            }
            "release" => {
                self.fence(&m.node).await?;
                let force = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                };
                for pod in &pods {
                    match api.delete(pod, &force).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 404 => {}
                        Err(e) => return Err(refused(pod, e)),
                    }
                }
            }
            other => {
                return Err(format!(
                    "params.failover.action `{other}` is not evict or release"
                ));
            }
        }
        job.initial = pods.len() as u32;
        job.moving = Some(m);
        Ok(job)
    }

    /// Taint a node `node.kubernetes.io/out-of-service:NoExecute`, so that
    /// Kubernetes treats it as shut down (once is enough).
    async fn fence(&self, node: &str) -> Result<(), String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let fail = |e: kube::Error| format!("could not fence node {node}: {e}");
        let current = nodes.get(node).await.map_err(fail)?;
        let mut taints = current.spec.and_then(|s| s.taints).unwrap_or_default();
        if taints.iter().any(|t| t.key == OUT_OF_SERVICE) {
            return Ok(());
        }
        taints.push(Taint {
            key: OUT_OF_SERVICE.into(),
            value: Some("nodeshutdown".into()),
            effect: "NoExecute".into(),
            time_added: None,
        });
        nodes
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": taints}})),
            )
            .await
            .map(drop)
            .map_err(fail)
    }

    fn deployments(&self, namespace: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn statefulsets(&self, namespace: &str) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn get(&self, workload: &types::Workload) -> Result<Value, kube::Error> {
        let object = match workload.kind {
            types::WorkloadKind::StatefulSet => serde_json::to_value(
                self.statefulsets(&workload.namespace)
                    .get(&workload.name)
                    .await?,
            ),
            _ => serde_json::to_value(
                self.deployments(&workload.namespace)
                    .get(&workload.name)
                    .await?,
            ),
        };
        Ok(object.unwrap_or_default())
    }

    /// Whether the job is done, its progress in percent, and what to say.
    fn progress(&self, task: &Task, namespace: &str, name: &str, job: &Job) -> (bool, u8, String) {
        let percent = |part: u32, whole: u32| {
            (part.min(whole) * 100)
                .checked_div(whole)
                .map_or(100, |p| p as u8)
        };
        if let Some(said) = &job.adopted {
            return (true, 100, said.clone());
        }
        if let Some(wait) = &job.machines {
            let key = (namespace.to_string(), name.to_string());
            return wait.progress(&self.observed.read(), &key);
        }
        if let Some(m) = &job.moving {
            let left = self.pods_on_node(m).len() as u32;
            return (
                left == 0,
                percent(job.initial.saturating_sub(left), job.initial),
                format!("{left} of {} pods left on node {}", job.initial, m.node),
            );
        }
        let key = (namespace.to_string(), name.to_string());
        let Some(input) = self.observed.read().inputs_for([&key], now()).pop() else {
            return (false, 0, "waiting for the app to be observed".into());
        };
        let pods = &input.app.pods;
        let ready = |p: &&types::Pod| {
            p.phase == types::PodPhase::Running
                && p.deleting_since.is_none()
                && !p.containers.is_empty()
                && p.containers.iter().all(|c| c.ready)
        };
        let counts = |p: &&types::Pod| {
            job.pods_since
                .is_none_or(|since| p.created_at.is_some_and(|c| c >= since))
                && job
                    .image
                    .as_ref()
                    .is_none_or(|image| p.containers.first().is_some_and(|c| &c.image == image))
        };
        let live = pods.iter().filter(|p| p.deleting_since.is_none()).count() as u32;
        let fresh_ready = pods.iter().filter(ready).filter(counts).count() as u32;
        match task.action {
            Action::Stop | Action::Delete => {
                let gone = job.initial.saturating_sub(live);
                let workload_gone = task.action != Action::Delete || input.app.workloads.is_empty();
                (
                    live == 0 && workload_gone,
                    percent(gone, job.initial),
                    format!("{live} of {} pods left", job.initial),
                )
            }
            _ => {
                let done = fresh_ready >= job.replicas && live == job.replicas;
                // Old pods still going: not quite there.
                let progress = percent(fresh_ready, job.replicas).min(if done { 100 } else { 99 });
                (
                    done,
                    progress,
                    format!("{fresh_ready}/{} ready", job.replicas),
                )
            }
        }
    }
}

/// How to delete an object of the app `namespace/app`, read just now as
/// `meta`, when it is verdict's (made or handed to it): with preconditions
/// on its UID and resource version, so that one changed or replaced since
/// is not deleted. Someone else's is an error naming it (`what`) and how to
/// hand it over.
pub(crate) fn deleting_as_read(
    meta: kube::api::ObjectMeta,
    (namespace, app): (&str, &str),
    what: &str,
) -> Result<DeleteParams, String> {
    use crate::tasks::ownership::{Owner, not_verdicts};
    let owner = Owner::of_meta(app, meta.labels.as_ref(), meta.annotations.as_ref());
    if !owner.is_verdicts() {
        return Err(not_verdicts(what, &owner, &format!("{namespace}/{app}")));
    }
    Ok(DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: meta.uid,
            resource_version: meta.resource_version,
        }),
        ..DeleteParams::background()
    })
}

/// A day-2 change's patch parameters: under verdict's field manager, so
/// that what verdict set itself (replicas, a restart's stamp) is told from
/// what others set when the app is applied again.
pub(crate) fn day_two() -> PatchParams {
    PatchParams {
        field_manager: Some(apps::FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// With a plan, the first report moves the plan (and so the task) on; a
/// plan whose first step waits gets that step started.
/// The report that a task's change is made: the steps up to the first that
/// waits for the cluster are done.
fn under_way(task: &Task) -> TaskPatch {
    let steps = task
        .steps
        .iter()
        .take_while(|s| !WAITING_STEPS.contains(&s.name.as_str()))
        .map(|s| StepReport {
            name: s.name.clone(),
            phase: Phase::Succeeded,
            message: None,
        })
        .collect();
    TaskPatch {
        phase: task.steps.is_empty().then_some(Phase::Running),
        steps: steps_or_first(steps, task),
        message: Some(format!("{} under way", task.action_name())),
        ..TaskPatch::default()
    }
}

/// Every step of the task's plan not yet done, reported done (`said`: the
/// step to say a message on, and the message).
fn succeeded_from_here(task: &Task, said: Option<(&str, &str)>) -> Vec<StepReport> {
    task.steps
        .iter()
        .filter(|s| s.phase != Phase::Succeeded)
        .map(|s| StepReport {
            name: s.name.clone(),
            phase: Phase::Succeeded,
            message: said
                .filter(|(step, _)| *step == s.name)
                .map(|(_, message)| message.to_string()),
        })
        .collect()
}

fn steps_or_first(steps: Vec<StepReport>, task: &Task) -> Vec<StepReport> {
    if !steps.is_empty() || task.steps.is_empty() {
        return steps;
    }
    vec![StepReport {
        name: task.steps[0].name.clone(),
        phase: Phase::Running,
        message: None,
    }]
}
