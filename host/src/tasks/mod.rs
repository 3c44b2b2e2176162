//! Task records: the actions users ask for (create, start, stop, restart,
//! update, scale, delete) with their phase, progress and plan; admitted by
//! the admission policy, kept in a [`Store`], served from memory.
//!
//! - [`model`]: the record and its life cycle rules;
//! - [`store`]: the storage backends ([`sqlite`], [`kube`]);
//! - [`record`]: the file form `verdict eval` and policy tests read;
//! - [`ownership`]: whose an object is — verdict's own, handed to it,
//!   or someone else's;
//! - [`spec`]: what a task that makes or changes a whole app asks for
//!   (seed 000's `Task`), checked field by field.

pub mod kube;
pub mod model;
pub mod ownership;
pub mod record;
pub mod sealed;
pub mod spec;
pub mod sqlite;
pub mod store;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};

use crate::events::Kind;
use crate::observe::AppKey;
use crate::observe::cluster::Observed;
use crate::time::now;
use crate::wit::types;
use model::{Decision, NewTask, TaskPatch};
pub use model::{Refusal, Task};
pub use record::{TaskRecord, parse_app};
pub use store::{Store, StoreError};

/// Where task records are kept, and how many.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// Where task records are kept: `sqlite`, a file in the data folder
    /// (`tasks.db`), or `kubernetes`, `Task` objects in the cluster, shared
    /// by replicas.
    #[arg(long = "task-store", value_name = "STORE", default_value = "sqlite")]
    pub store: StoreKind,
    /// The namespace of `Task` objects, with the kubernetes task store.
    #[arg(
        long = "tasks-namespace",
        value_name = "NAMESPACE",
        default_value = "verdict-system"
    )]
    pub namespace: String,
    /// Finished tasks kept per app.
    #[arg(long = "task-history", value_name = "N", default_value = "100")]
    pub finished_kept: usize,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// Where task records are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// A SQLite file in the data folder.
    Sqlite,
    /// `Task` custom resources through the Kubernetes API.
    Kubernetes,
}

/// What admission let through.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The reason a person must approve the task first, if one must.
    pub approval: Option<String>,
    /// Parameters filled in under the request's own.
    pub defaults: Map<String, Value>,
    pub warnings: Vec<String>,
    /// The plan's steps: name and description.
    pub plan: Vec<(String, String)>,
    /// `name@version` of the policy that decided.
    pub policy: Option<String>,
    /// Why the policy could not decide, when the failure mode let the task
    /// through anyway.
    pub failure: Option<String>,
}

/// Why admission did not let a task through.
#[derive(Debug, Clone)]
pub enum Denial {
    /// The policy said no.
    Denied {
        reason: String,
        warnings: Vec<String>,
        policy: Option<String>,
    },
    /// The policy could not decide (why is the source) and the failure
    /// mode is closed.
    Unavailable(Arc<dyn std::error::Error + Send + Sync>),
    /// The policy allowed it, but it would change or delete what verdict
    /// neither made nor was handed: names each object and how to adopt.
    NotVerdicts(String),
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Denial::Denied { reason, .. } | Denial::NotVerdicts(reason) => f.write_str(reason),
            Denial::Unavailable(why) => write!(
                f,
                "the admission policy could not decide ({why}); tasks are refused until it can"
            ),
        }
    }
}

/// Why a task operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("denied: {0}")]
    Denied(Denial),
    #[error("no task {0}")]
    NotFound(String),
    #[error(transparent)]
    Store(StoreError),
    /// What the task asks could not be checked against the cluster (the
    /// API server did not answer): refused, never let through unchecked.
    #[error("{0}")]
    Unverified(String),
}

impl From<StoreError> for TaskError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(id) => TaskError::NotFound(id),
            StoreError::Conflict(m) | StoreError::Taken(m) => {
                TaskError::Refused(Refusal::Conflict(m))
            }
            other => TaskError::Store(other),
        }
    }
}

/// Whether a task's params name secret material (in its redacted form).
fn task_has_material(task: &Task) -> bool {
    fn has(value: &Value) -> bool {
        match value {
            Value::Object(map) => map.contains_key("redacted") || map.values().any(has),
            Value::Array(items) => items.iter().any(has),
            _ => false,
        }
    }
    task.params.values().any(has)
}

/// How many times a task is admitted again after another replica stored
/// one for the same app meanwhile.
const ADMISSION_ROUNDS: usize = 8;

/// Applications without a workload or pod that may have tasks at once.
pub const MAX_APPS_WITHOUT_WORKLOAD: usize = 1000;

/// Which tasks a listing wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub app: Option<AppKey>,
    pub phase: Option<types::TaskPhase>,
}

/// The tasks: in memory for reading, in the store for keeping.
#[derive(Debug)]
pub struct Tasks {
    store: Store,
    /// Every task, by app and then id (ids sort by creation time).
    by_app: RwLock<BTreeMap<AppKey, BTreeMap<String, Task>>>,
    /// One write at a time: admission sees every task admitted before it.
    writes: tokio::sync::Mutex<()>,
    /// Finished tasks kept per app.
    history: usize,
    /// Where a task change marks its app for re-derivation.
    observed: Option<Arc<Observed>>,
    /// Where task changes are published.
    events: Option<Arc<crate::events::Events>>,
    /// The applications other records keep (overrides in force), counted
    /// against the same bound as those kept by their tasks.
    kept_elsewhere: std::sync::OnceLock<KeptElsewhere>,
    /// Tasks' secret material with the SQLite store (one replica), by task
    /// id, until the task finishes; the Kubernetes store keeps it in a
    /// Secret beside the task. Never in a record.
    material: std::sync::Mutex<BTreeMap<String, sealed::Material>>,
}

/// The applications another record keeps known, whether or not they exist.
pub struct KeptElsewhere(pub Box<dyn Fn() -> BTreeSet<AppKey> + Send + Sync>);

impl std::fmt::Debug for KeptElsewhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeptElsewhere")
    }
}

fn app_key(app: &str) -> AppKey {
    match app.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (String::new(), app.to_string()),
    }
}

impl Tasks {
    /// Load every stored task.
    pub async fn open(
        store: Store,
        history: usize,
        observed: Option<Arc<Observed>>,
        events: Option<Arc<crate::events::Events>>,
    ) -> Result<Self, StoreError> {
        let mut tasks = Self {
            store,
            by_app: RwLock::default(),
            writes: tokio::sync::Mutex::new(()),
            history,
            observed,
            events: None,
            kept_elsewhere: std::sync::OnceLock::new(),
            material: std::sync::Mutex::default(),
        };
        let loaded = tasks.store.load().await?;
        tracing::info!(
            store = tasks.store.kind(),
            tasks = loaded.len(),
            "tasks loaded"
        );
        for task in loaded {
            tasks.remember(task);
        }
        // Loading is not news; changes from now on are.
        tasks.events = events;
        Ok(tasks)
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<AppKey, BTreeMap<String, Task>>> {
        self.by_app
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keep a task in memory (when it is not older than what is there) and
    /// mark its app for re-derivation. Returns whether it was newer.
    pub(crate) fn remember(&self, task: Task) -> bool {
        let key = app_key(&task.app);
        {
            let mut by_app = self
                .by_app
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let tasks = by_app.entry(key.clone()).or_default();
            if tasks
                .get(&task.id)
                .is_some_and(|t| t.revision >= task.revision)
            {
                return false;
            }
            if let Some(events) = &self.events {
                events.publish(
                    Kind::Task,
                    Some(task.app.clone()),
                    serde_json::to_value(&task).unwrap_or_default(),
                );
            }
            tasks.insert(task.id.clone(), task);
        }
        self.touched(key);
        true
    }

    /// Drop a task from memory (deleted elsewhere).
    pub(crate) fn forget(&self, id: &str) {
        let mut by_app = self
            .by_app
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = by_app
            .iter_mut()
            .find_map(|(key, tasks)| tasks.remove(id).map(|_| key.clone()));
        if let Some(key) = &key
            && by_app.get(key).is_some_and(BTreeMap::is_empty)
        {
            by_app.remove(key);
        }
        drop(by_app);
        if let Some(key) = key {
            self.touched(key);
        }
    }

    fn touched(&self, key: AppKey) {
        if let Some(observed) = &self.observed {
            observed.mark_apps(vec![key]);
            observed.changed.notify_one();
        }
    }

    pub fn get(&self, id: &str) -> Option<Task> {
        self.read()
            .values()
            .find_map(|tasks| tasks.get(id).cloned())
    }

    /// Tasks matching a filter, newest first.
    pub fn list(&self, filter: &Filter) -> Vec<Task> {
        let by_app = self.read();
        let mut tasks: Vec<Task> = by_app
            .iter()
            .filter(|(key, _)| filter.app.as_ref().is_none_or(|app| app == *key))
            .flat_map(|(_, tasks)| tasks.values())
            .filter(|t| filter.phase.is_none_or(|p| p == t.phase))
            .cloned()
            .collect();
        tasks.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        tasks
    }

    /// The tasks an executor carries on (pending or running), oldest first,
    /// without copying the finished history.
    pub(crate) fn executable(&self) -> Vec<Task> {
        let mut tasks: Vec<Task> = self
            .read()
            .values()
            .flat_map(BTreeMap::values)
            .filter(|t| {
                matches!(
                    t.phase,
                    types::TaskPhase::Pending | types::TaskPhase::Running
                )
            })
            .cloned()
            .collect();
        tasks.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        tasks
    }

    /// How many tasks there are in each phase.
    pub(crate) fn count_by_phase(&self) -> BTreeMap<&'static str, usize> {
        use crate::wit::WitName;
        let mut counts = BTreeMap::new();
        for task in self.read().values().flat_map(BTreeMap::values) {
            *counts.entry(task.phase.wit_name()).or_default() += 1;
        }
        counts
    }

    /// An app's tasks as policies see them, newest first.
    pub(crate) fn for_app(&self, key: &AppKey) -> Vec<types::Task> {
        self.read()
            .get(key)
            .map(|tasks| tasks.values().rev().map(Task::to_wit).collect())
            .unwrap_or_default()
    }

    /// The apps tasks name.
    pub fn apps(&self) -> Vec<AppKey> {
        self.read()
            .iter()
            .filter(|(_, tasks)| !tasks.is_empty())
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Admit and store a new task. `admit` sees the app's tasks (newest
    /// first) and decides.
    ///
    /// Admission is serialised per app through the store: the new task
    /// takes the next place in its app's sequence, and the Kubernetes
    /// store creates its object under a name of that place, which only
    /// one replica can. A replica that admitted on a view without a task
    /// another replica stored meanwhile is refused by the API server; it
    /// reads the app's tasks afresh and admits again, seeing that task.
    pub async fn create<F>(
        &self,
        request: NewTask,
        admit: impl Fn(Vec<types::Task>) -> F,
    ) -> Result<Task, TaskError>
    where
        F: Future<Output = Result<Admitted, Denial>>,
    {
        let key = model::parse_app(&request.app)?;
        request.check_sizes()?;
        let key = (key.namespace, key.name);
        let _write = self.writes.lock().await;
        self.make_room_for(&key).await?;
        for _ in 0..ADMISSION_ROUNDS {
            let sequence = self.last_sequence(&key) + 1;
            let admitted = admit(self.for_app(&key)).await.map_err(TaskError::Denied)?;
            let mut request = request.clone();
            for (name, value) in admitted.defaults {
                request.params.entry(name).or_insert(value);
            }
            let admission = model::Admission {
                decision: if admitted.approval.is_some() {
                    "require-approval".into()
                } else {
                    "allow".into()
                },
                reason: admitted.approval,
                warnings: admitted.warnings,
                policy: admitted.policy,
                failure: admitted.failure,
            };
            let material = std::mem::take(&mut request.material);
            let mut task = Task::new(request, admission, admitted.plan, now());
            task.sequence = sequence;
            match self.store.insert(&task).await {
                Ok(()) => {
                    if let Err(error) = self.keep_material(&task, material).await {
                        // Nothing to carry the task out with: it fails now,
                        // saying why, rather than later without its secrets.
                        tracing::warn!(task = %task.id, %error, "a task's secret material could not be kept");
                        let failed = TaskPatch {
                            phase: Some(types::TaskPhase::Failed),
                            message: Some(format!(
                                "its secret material could not be kept: {error}"
                            )),
                            ..TaskPatch::default()
                        };
                        self.remember(task.clone());
                        drop(_write);
                        let task = self.change(&task.id, |t| t.apply(&failed, now())).await?;
                        return Ok(task);
                    }
                    self.remember(task.clone());
                    return Ok(task);
                }
                Err(StoreError::Taken(why)) => {
                    tracing::debug!(app = %task.app, %why, "admitted on a stale view; reading the app's tasks again");
                    for stored in self.store.of_app(&task.app).await? {
                        self.remember(stored);
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(TaskError::Refused(Refusal::Conflict(format!(
            "tasks for {} are being asked for on other replicas at the same moment; ask again",
            request.app
        ))))
    }

    /// The highest place in an app's task sequence known.
    fn last_sequence(&self, key: &AppKey) -> u64 {
        self.read()
            .get(key)
            .and_then(|tasks| tasks.values().map(|t| t.sequence).max())
            .unwrap_or(0)
    }

    /// Count the applications `kept` names (those with overrides in force)
    /// against [`MAX_APPS_WITHOUT_WORKLOAD`] too.
    pub fn count_kept_elsewhere(&self, kept: KeptElsewhere) {
        let _ = self.kept_elsewhere.set(kept);
    }

    /// Keep at most [`MAX_APPS_WITHOUT_WORKLOAD`] applications that have
    /// tasks or overrides but no workload or pod (names that exist nowhere,
    /// deleted applications' histories): before a task for one more, the
    /// finished tasks of the one idle the longest are removed; when none is
    /// idle (every such application has a task in flight or is kept by its
    /// overrides), the task is refused. Each is kept with its records and
    /// verdict, so names must not grow them without bound. An application
    /// with tasks or overrides already, or with a workload, always has room.
    async fn make_room_for(&self, key: &AppKey) -> Result<(), TaskError> {
        let elsewhere = self
            .kept_elsewhere
            .get()
            .map(|kept| (kept.0)())
            .unwrap_or_default();
        let (without, idlest) = {
            let by_app = self.read();
            if by_app.get(key).is_some_and(|tasks| !tasks.is_empty()) || elsewhere.contains(key) {
                return Ok(());
            }
            let snapshot = self.observed.as_ref().map(|o| o.read());
            let observed = |key: &AppKey| snapshot.as_ref().is_some_and(|s| s.has_app(key));
            if observed(key) {
                return Ok(());
            }
            let by_tasks: Vec<(&AppKey, &BTreeMap<String, Task>)> = by_app
                .iter()
                .filter(|(key, tasks)| !tasks.is_empty() && !observed(key))
                .collect();
            let by_overrides = elsewhere
                .iter()
                .filter(|key| !observed(key) && by_app.get(*key).is_none_or(|t| t.is_empty()))
                .count();
            let without = by_tasks.len() + by_overrides;
            if without < MAX_APPS_WITHOUT_WORKLOAD {
                return Ok(());
            }
            let idlest = by_tasks
                .iter()
                .filter(|(key, tasks)| {
                    !elsewhere.contains(*key) && tasks.values().all(|t| model::finished(t.phase))
                })
                .min_by_key(|(_, tasks)| tasks.values().map(|t| t.updated_at).max())
                .map(|(key, tasks)| ((*key).clone(), tasks.keys().cloned().collect::<Vec<_>>()));
            (without, idlest)
        };
        let Some((idle, ids)) = idlest else {
            return Err(TaskError::Denied(Denial::Denied {
                reason: format!(
                    "{without} applications with no workload are kept, the most kept (each has a task in \
                     flight or an override in force); a task for {}/{} must wait for a task to finish \
                     or an override on a deleted app to be lifted",
                    key.0, key.1
                ),
                warnings: Vec::new(),
                policy: None,
            }));
        };
        self.store.delete(ids).await?;
        self.by_app
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&idle);
        self.touched(idle);
        Ok(())
    }

    /// Change a task by `change`, store it over its revision, and apply
    /// retention when it finished.
    async fn change(
        &self,
        id: &str,
        change: impl FnOnce(&mut Task) -> Result<(), Refusal>,
    ) -> Result<Task, TaskError> {
        let _write = self.writes.lock().await;
        let mut task = self
            .get(id)
            .ok_or_else(|| TaskError::NotFound(id.to_string()))?;
        change(&mut task)?;
        self.store.update(&task).await?;
        self.remember(task.clone());
        if model::finished(task.phase) {
            // However it ended (carried out, failed, cancelled, rejected),
            // its secret material is done with.
            self.drop_material(&task).await;
            self.retain(&app_key(&task.app)).await;
        }
        Ok(task)
    }

    /// Forget an app's oldest finished tasks beyond the history setting.
    async fn retain(&self, key: &AppKey) {
        let expired: Vec<String> = {
            let by_app = self.read();
            let Some(tasks) = by_app.get(key) else {
                return;
            };
            let finished: Vec<&Task> = tasks
                .values()
                .filter(|t| model::finished(t.phase))
                .collect();
            let excess = finished.len().saturating_sub(self.history);
            finished
                .into_iter()
                .take(excess)
                .map(|t| t.id.clone())
                .collect()
        };
        if expired.is_empty() {
            return;
        }
        match self.store.delete(expired.clone()).await {
            Ok(()) => {
                for id in &expired {
                    self.forget(id);
                }
            }
            Err(error) => tracing::warn!(%error, "could not prune task history; kept"),
        }
    }

    /// An executor's report.
    pub async fn patch(&self, id: &str, patch: &TaskPatch) -> Result<Task, TaskError> {
        self.change(id, |task| task.apply(patch, now())).await
    }

    /// The leader's report, under its term: refused when a later term has
    /// taken the task over.
    pub async fn patch_as(
        &self,
        id: &str,
        patch: &TaskPatch,
        actor: &crate::leader::Term,
    ) -> Result<Task, TaskError> {
        self.change(id, |task| {
            task.act_as(actor)?;
            task.apply(patch, now())
        })
        .await
    }

    async fn keep_material(
        &self,
        task: &Task,
        material: sealed::Material,
    ) -> Result<(), StoreError> {
        if material.is_empty() {
            return Ok(());
        }
        match &self.store {
            Store::Kube(store) => store.keep_material(task, &material).await,
            Store::Sqlite(_) => {
                self.materials().insert(task.id.clone(), material);
                Ok(())
            }
        }
    }

    fn materials(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, sealed::Material>> {
        self.material
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A task's secret material, where it is kept: for the executor only,
    /// on its way into the app's Secrets.
    pub(crate) async fn material(&self, id: &str) -> Result<sealed::Material, StoreError> {
        match &self.store {
            Store::Kube(store) => Ok(store.material(id).await?.unwrap_or_default()),
            Store::Sqlite(_) => Ok(self.materials().get(id).cloned().unwrap_or_default()),
        }
    }

    /// Forget a finished task's secret material.
    async fn drop_material(&self, task: &Task) {
        if !task_has_material(task) {
            return;
        }
        match &self.store {
            Store::Kube(store) => {
                if let Err(error) = store.drop_material(&task.id).await {
                    tracing::warn!(task = %task.id, %error, "a finished task's secret material could not be deleted (its Task object owns it)");
                }
            }
            Store::Sqlite(_) => {
                self.materials().remove(&task.id);
            }
        }
    }

    /// Take a task over for a new term before acting on it: from then on
    /// the previous leader's writes to it are refused.
    pub async fn claim(&self, id: &str, actor: &crate::leader::Term) -> Result<Task, TaskError> {
        self.change(id, |task| {
            if model::finished(task.phase) {
                return Err(Refusal::Conflict(format!(
                    "the task has {}",
                    crate::wit::WitName::wit_name(&task.phase)
                )));
            }
            task.act_as(actor)?;
            task.revision += 1;
            task.updated_at = now().max(task.updated_at);
            Ok(())
        })
        .await
    }

    /// A person approves or rejects a held task.
    pub async fn review(
        &self,
        id: &str,
        approved: bool,
        decision: &Decision,
    ) -> Result<Task, TaskError> {
        self.change(id, |task| task.review(approved, decision, now()))
            .await
    }

    pub async fn cancel(&self, id: &str, decision: &Decision) -> Result<Task, TaskError> {
        self.change(id, |task| task.cancel(decision, now())).await
    }
}
