//! The controller of seed 002's delivery, on the leader only: every tick it
//! reads each `VMReplicaSet`, its `VirtualMachine`s and instances and the
//! `VMDeployment` that targets it, from the API server itself; makes the
//! machines the set is short of; plans the rollout ([`super::rollout`]);
//! and moves each instance one step — the hook of the step in progress
//! asked, or the lifecycle policy asked for the next stage and its list.
//! Every change to an instance is one patch of its annotations on the
//! resource version it was read at (a compare-and-swap: a conflict waits
//! for the next tick), and names the leader and term that hold its lock.
//! An instance's clean-up releases its finalizer last. The statuses of
//! both resources are written after.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use super::hooks::{Asked, Calls, Hooks, InstanceRef, OwnedCall};
use super::instance::{self, CurrentList, Lock, Recorded};
use super::model::{self, InstanceState, Next};
use super::resources::{
    VmDeployment, VmReplicaSet, deployments, instance_name, instances, machines, sets,
};
use super::rollout::{self, Member};
use crate::events::{Events, Kind};
use crate::failover::Failover;
use crate::failover::model::Health;
use crate::leader::{Leadership, Term};
use crate::overrides::{OverrideRecord, Overrides};
use crate::plugins::{Registry, World};
use crate::time::{Timestamp, now};
use crate::wit::WitName;
use crate::wit::lifecycle::{NodeHealth, Outcome, Stage};

/// What a set's `Degraded` condition, the log and `/readyz` say while no
/// lifecycle policy is loaded.
pub const NO_POLICY: &str = "no lifecycle policy is loaded (a lifecycle.wasm in the plugin folder): no instance moves, none is cleaned up";

/// How many instances of a set are moved on at once.
const STEPS_AT_ONCE: usize = 16;

/// The controller and what it works with.
pub struct Controller {
    /// Reads, from any replica's client.
    reader: kube::Client,
    /// Writes, through the leader's fenced client.
    writer: kube::Client,
    leadership: Arc<Leadership>,
    registry: Arc<Registry>,
    /// The nodes' health, as failover judges them.
    failover: Option<Arc<Failover>>,
    /// The step hooks, and their calls under way.
    calls: Calls,
    every: Duration,
    /// The namespaces carried out; all when empty.
    namespaces: Vec<String>,
    /// What people forced on instances.
    overrides: Arc<Overrides>,
    events: Arc<Events>,
    /// What the last reconcile found, for metrics and the HTTP routes.
    pub counts: Arc<Counts>,
    /// The Kubernetes Events of what it does, when it writes them.
    announcer: Option<Arc<super::announce::Announcer>>,
    /// The last failure said of each instance (`namespace/name`) that
    /// could not be moved on: one that lasts is said once.
    said: std::sync::Mutex<BTreeMap<String, String>>,
}

/// What the controller counts: instances by stage and rollouts by phase
/// at the last reconcile, hook calls and failures by step since the start.
#[derive(Debug, Default)]
pub struct Counts {
    pub stages: std::sync::Mutex<BTreeMap<String, u64>>,
    pub phases: std::sync::Mutex<BTreeMap<String, u64>>,
    /// Per step: calls, and calls that failed the step.
    pub hooks: std::sync::Mutex<BTreeMap<String, (u64, u64)>>,
    /// Reconciles held because what they govern could not be read.
    pub unread: std::sync::atomic::AtomicU64,
}

/// A read the controller depends on failed: the reconcile it was for is
/// held (nothing is released, deleted or started on a guess) and asked
/// again later.
#[derive(Debug, thiserror::Error)]
#[error("the {what} could not be read, so nothing they govern moves: {source}")]
pub struct Unread {
    what: &'static str,
    #[source]
    source: kube::Error,
}

impl Unread {
    fn new(what: &'static str, source: kube::Error) -> Self {
        Self { what, source }
    }
}

/// A list's objects; none when the server does not serve the resource
/// (404: its CRD is not installed, so none can exist). Every other error
/// stays an error.
fn served_or_none<T>(listed: Result<Vec<T>, kube::Error>) -> Result<Vec<T>, kube::Error> {
    match listed {
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        other => other,
    }
}

/// An instance's node as the lifecycle policy sees it: a node within its
/// grace period is waited out; one out of contact, or back but not yet
/// trusted, is unknown.
fn node_health(health: Option<Health>) -> NodeHealth {
    match health {
        None | Some(Health::Healthy | Health::Suspect) => NodeHealth::Healthy,
        Some(Health::Unknown | Health::Recovering) => NodeHealth::Unknown,
        Some(Health::Offline) => NodeHealth::Offline,
    }
}

/// Who takes an instance override back once its stage is entered.
const TAKER: &str = "verdict (VM delivery)";

/// One machine of a set, as read.
struct Read {
    name: String,
    /// The set names it offline: drained, it is deleted.
    named_offline: bool,
    /// The machine's UID: part of every step's key.
    uid: String,
    resource_version: String,
    recorded: Result<Recorded, String>,
    state: InstanceState,
    created: Timestamp,
    finalizers: Vec<String>,
    /// Who forced the stage in `state.forced`, and why.
    forced_by: Option<String>,
    /// The override that forced it, when one did.
    forced_override: Option<crate::overrides::OverrideKey>,
}

/// The stage a person forced on an instance that has not entered it yet:
/// the latest of an instance override (`PUT …/instances/{name}/override`)
/// and a retry request, made after the instance entered its stage.
fn forced(
    overrides: &[OverrideRecord],
    (namespace, name): (&str, &str),
    recorded: &Recorded,
    now: Timestamp,
) -> Option<Forced> {
    let since = recorded.since.unwrap_or(0);
    let by_override = overrides
        .iter()
        .filter(|o| {
            o.namespace == namespace
                && o.instance.as_deref() == Some(name)
                && o.in_force(now)
                && o.at > since
        })
        .filter_map(|o| {
            let stage = Stage::from_wit_name(&o.status)?;
            let who = match o.reason.is_empty() {
                true => o.by.clone(),
                false => format!("{}: {}", o.by, o.reason),
            };
            Some((o.at, stage, format!("forced by {who}"), Some(o.key())))
        });
    // A retry of a list that is still the instance's runs that list on
    // (see `Controller::step`); one of a list left behind enters its stage
    // again.
    let by_retry = recorded
        .retry
        .as_ref()
        .filter(|r| r.at > since && r.list.is_none())
        .and_then(|r| Some((r.at, r.stage?, format!("retried by {}", r.who()), None)));
    by_override
        .chain(by_retry)
        .max_by_key(|(at, ..)| *at)
        .map(|(_, stage, who, key)| Forced { stage, who, key })
}

/// A stage a person forced on an instance: by whom, and the override that
/// asked for it (none for a retry).
struct Forced {
    stage: Stage,
    who: String,
    key: Option<crate::overrides::OverrideKey>,
}

impl Controller {
    pub fn new(
        reader: kube::Client,
        leadership: Arc<Leadership>,
        registry: Arc<Registry>,
        failover: Option<Arc<Failover>>,
        (overrides, events): (Arc<Overrides>, Arc<Events>),
        (hooks, settings): (Hooks, &super::Settings),
    ) -> Self {
        let writer = leadership.fenced(reader.clone());
        Self {
            reader,
            writer,
            leadership,
            registry,
            failover,
            calls: Calls::new(hooks),
            every: settings.delivery_every,
            namespaces: settings.delivery_namespaces.clone(),
            overrides,
            events,
            counts: Arc::default(),
            announcer: None,
            said: std::sync::Mutex::default(),
        }
    }

    /// Write what the controller does as Kubernetes Events on the sets, through
    /// the leader's fenced client.
    pub fn with_events(mut self) -> Self {
        let replica = self.leadership.standing().replica;
        self.announcer = Some(super::announce::Announcer::start(
            self.writer.clone(),
            replica,
        ));
        self
    }

    /// Tell the event stream about an instance or a rollout.
    fn tell(&self, set: &VmReplicaSet, data: Value) {
        if let Some(announcer) = &self.announcer {
            announcer.announce(set, &data);
        }
        self.events.publish(
            Kind::Delivery,
            Some(format!("{}/{}", set.namespace, set.name)),
            data,
        );
    }

    /// Reconcile every tick while this replica leads, until the process
    /// ends.
    pub async fn run(self: Arc<Self>) {
        tracing::info!(
            every_ms = self.every.as_millis() as u64,
            hooks = ?self.calls.hooks().names().collect::<Vec<_>>(),
            "VM delivery: following VMReplicaSets and VMDeployments"
        );
        // The last failure said, so that one that lasts is said once and
        // its end is said too.
        let mut said: Option<String> = None;
        let mut no_policy_said = false;
        let answered = self.calls.answered();
        loop {
            let mut wait = self.every;
            if let Some(term) = self.leadership.acting() {
                let missing = self.registry.policy(World::Lifecycle).is_err();
                if missing && !no_policy_said {
                    tracing::warn!("VM delivery: {NO_POLICY}");
                }
                no_policy_said = missing;
                match self.reconcile_all(&term).await {
                    Ok(()) => {
                        if said.take().is_some() {
                            tracing::info!(
                                "VM delivery: the resources are read again; reconciling"
                            );
                        }
                    }
                    Err(error) => {
                        // Not read (their CRDs not installed, the API
                        // server away, a permission taken away): nothing
                        // moves, and it is asked again in a while.
                        self.counts
                            .unread
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let text = error.to_string();
                        if said.as_deref() != Some(text.as_str()) {
                            tracing::warn!(%error, "VM delivery: held; asking again every 5 s");
                            said = Some(text);
                        }
                        wait = wait.max(Duration::from_secs(5));
                    }
                }
            }
            // A hook's answer is taken as soon as it comes.
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = answered.notified() => {}
            }
        }
    }

    /// Every object of `resource` in the namespaces carried out.
    async fn list_all(&self, resource: &ApiResource) -> Result<Vec<DynamicObject>, kube::Error> {
        self.list_with(resource, &ListParams::default()).await
    }

    /// Every object of `resource` that `params` select, in the namespaces
    /// carried out.
    async fn list_with(
        &self,
        resource: &ApiResource,
        params: &ListParams,
    ) -> Result<Vec<DynamicObject>, kube::Error> {
        if self.namespaces.is_empty() {
            let api = Api::<DynamicObject>::all_with(self.reader.clone(), resource);
            return Ok(api.list(params).await?.items);
        }
        let mut all = Vec::new();
        for namespace in &self.namespaces {
            let api =
                Api::<DynamicObject>::namespaced_with(self.reader.clone(), namespace, resource);
            all.extend(api.list(params).await?.items);
        }
        Ok(all)
    }

    async fn reconcile_all(&self, term: &Term) -> Result<(), Unread> {
        // The deployments first: a set made before its deployment is then
        // in the sets' list, and no deployment is judged set-less because
        // the sets were listed a moment before its set was made.
        //
        // A list that fails fails the whole tick: a deployment not read is
        // not "no deployment", which would release every instance's code.
        // Only a resource the server does not serve (404: its CRD is not
        // installed) has, knowably, no objects.
        let mut all_deployments: Vec<Value> = served_or_none(self.list_all(&deployments()).await)
            .map_err(|error| Unread::new("VMDeployments", error))?
            .iter()
            .map(|d| serde_json::to_value(d).unwrap_or_default())
            .collect();
        let all_sets = self
            .list_all(&sets())
            .await
            .map_err(|error| Unread::new("VMReplicaSets", error))?;
        // Of two deployments of one set, the older delivers (and of two
        // made in the same second, the one delivering already).
        all_deployments.sort_by_key(|d| {
            let text = |p: &str| {
                d.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let idle = matches!(text("/status/phase").as_str(), "" | "Degraded");
            (
                text("/metadata/creationTimestamp"),
                idle,
                text("/metadata/name"),
            )
        });
        // The nodes' health, once a tick for every set.
        let health: BTreeMap<String, Health> = match &self.failover {
            Some(failover) => failover
                .view()
                .await
                .nodes
                .into_iter()
                .map(|report| (report.node, report.health))
                .collect(),
            None => BTreeMap::new(),
        };
        let mut stages = BTreeMap::new();
        let mut phases = BTreeMap::new();
        for set in &all_sets {
            let value = serde_json::to_value(set).unwrap_or_default();
            let namespace = set.metadata.namespace.clone().unwrap_or_default();
            let name = set.metadata.name.clone().unwrap_or_default();
            let deployment = all_deployments.iter().find(|d| {
                d["metadata"]["namespace"] == namespace.as_str()
                    && d["spec"]["replicaSet"] == name.as_str()
            });
            match self.reconcile_set(&value, deployment, &health, term).await {
                Ok(found) => {
                    for stage in found.stages {
                        *stages.entry(stage).or_insert(0) += 1;
                    }
                    if let Some(phase) = found.phase {
                        *phases.entry(phase).or_insert(0) += 1;
                    }
                }
                Err(error) => {
                    tracing::warn!(namespace, name, %error, "VM delivery: the set could not be reconciled");
                }
            }
        }
        *lock(&self.counts.stages) = stages;
        *lock(&self.counts.phases) = phases;
        self.orphans(&all_sets, term).await?;

        // A deployment that cannot be carried out says why in its status:
        // one that does not read, that names no set of its namespace, or
        // whose set another deployment targets already.
        let set_keys: Vec<(String, String)> = all_sets
            .iter()
            .map(|s| {
                let key = |v: &Option<String>| v.clone().unwrap_or_default();
                (key(&s.metadata.namespace), key(&s.metadata.name))
            })
            .collect();
        for (i, d) in all_deployments.iter().enumerate() {
            let text = |pointer: &str| {
                d.pointer(pointer)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            let (namespace, name, set) = (
                text("/metadata/namespace"),
                text("/metadata/name"),
                text("/spec/replicaSet"),
            );
            let first = all_deployments.iter().position(|o| {
                o["metadata"]["namespace"] == namespace && o["spec"]["replicaSet"] == set
            });
            let problem = match VmDeployment::read(d) {
                Err(problem) => problem,
                Ok(_) if !set_keys.contains(&(namespace.to_string(), set.to_string())) => {
                    format!("no VMReplicaSet {set} in namespace {namespace}")
                }
                Ok(_) if first != Some(i) => format!(
                    "VMDeployment {} targets VMReplicaSet {set} already",
                    first.map_or("", |f| all_deployments[f]["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default())
                ),
                Ok(_) => continue,
            };
            let status = super::resources::cannot_proceed(d, &problem, now());
            if let Err(error) = self
                .write_status(&deployments(), namespace, name, d, status)
                .await
            {
                tracing::warn!(namespace, name, %error, "VM delivery: the deployment's status could not be written");
            }
        }
        Ok(())
    }

    async fn reconcile_set(
        &self,
        object: &Value,
        deployment: Option<&Value>,
        health: &BTreeMap<String, Health>,
        term: &Term,
    ) -> Result<Found, kube::Error> {
        let at = now();
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let finalizers: Vec<String> = object["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(String::from))
            .collect();
        if object["metadata"]["deletionTimestamp"].is_string() {
            // Deleted: every instance goes through its clean-up, and the
            // set's finalizer is let go last.
            let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
            let set = VmReplicaSet::named(namespace, name, uid);
            let read = self.read_machines(&set, health).await?;
            if read.is_empty() {
                if finalizers.iter().any(|f| f == instance::FINALIZER) {
                    let kept: Vec<&String> = finalizers
                        .iter()
                        .filter(|f| f.as_str() != instance::FINALIZER)
                        .collect();
                    self.patch_metadata(
                        &sets(),
                        namespace,
                        name,
                        json!({"resourceVersion": object["metadata"]["resourceVersion"], "finalizers": kept}),
                    )
                    .await?;
                    tracing::info!(
                        namespace,
                        set = name,
                        "VM delivery: every instance is cleaned up; the set goes"
                    );
                }
                return Ok(Found::default());
            }
            // The set says which instances hold it, each at its step.
            let rows: Vec<Value> = read.iter().map(row).collect();
            let found = self.let_go(&set, read, term, at).await?;
            let set = VmReplicaSet {
                generation: object["metadata"]["generation"].as_i64().unwrap_or(0),
                ..set
            };
            let status = set.deleting_status(&object["status"], rows, at);
            self.write_status(&sets(), namespace, name, object, status)
                .await?;
            return Ok(found);
        }
        // The set holds its instances' clean-up: deleted, it lets go only
        // when each of them has been cleaned up.
        if !finalizers.iter().any(|f| f == instance::FINALIZER) {
            let mut with = finalizers.clone();
            with.push(instance::FINALIZER.into());
            self.patch_metadata(
                &sets(),
                namespace,
                name,
                json!({"resourceVersion": object["metadata"]["resourceVersion"], "finalizers": with}),
            )
            .await?;
        }
        let set = match VmReplicaSet::read(object) {
            Ok(set) => set,
            Err(problem) => {
                let status = super::resources::cannot_proceed(object, &problem, at);
                self.write_status(&sets(), namespace, name, object, status)
                    .await?;
                return Ok(Found::default());
            }
        };
        // Adopt the VMs the set's selector names that no one owns.
        if !set.selector.is_empty() {
            self.adopt(&set).await?;
        }
        let mut read = self.read_machines(&set, health).await?;

        // Make the machines the set is short of, or let go of one it has
        // too many of; an instance named offline goes once it is drained.
        // Those named offline count no more: the set runs `replicas` less
        // them, and never gives their names to new instances.
        let wanted = set.wanted();
        let staying: Vec<&Read> = read
            .iter()
            .filter(|m| !m.state.deleting && !m.state.take_offline)
            .collect();
        let drained = read.iter().find(|m| {
            m.named_offline
                && !m.state.deleting
                && m.state.stage == Some(Stage::Offline)
                && m.recorded.as_ref().is_ok_and(|r| {
                    r.list
                        .as_ref()
                        .is_some_and(|l| l.outcome == Outcome::Succeeded)
                })
        });
        let extra = (staying.len() > wanted)
            .then(|| staying.iter().max_by_key(|m| rank_to_remove(m)))
            .flatten();
        if let Some(machine) = drained.or(extra.copied()) {
            let why = match machine.named_offline {
                true => "named offline and drained",
                false => "the set has more instances than it wants",
            };
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &machines())
                .delete(&machine.name, &DeleteParams::default())
                .await?;
            tracing::info!(
                namespace,
                set = set.name,
                instance = machine.name,
                "VM delivery: the instance goes ({why}); its clean-up holds it"
            );
            self.tell(
                &set,
                json!({"instance": machine.name, "event": "removed", "reason": why}),
            );
            read = self.read_machines(&set, health).await?;
        } else if staying.len() < wanted {
            let names: Vec<String> = read
                .iter()
                .map(|m| m.name.clone())
                .chain(set.offline.iter().cloned())
                .collect();
            let name = instance_name(&set.name, names.iter().map(String::as_str));
            let machine = set.machine(&name, at);
            let api =
                Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &machines());
            let machine: DynamicObject =
                serde_json::from_value(machine).map_err(kube::Error::SerdeError)?;
            api.create(&PostParams::default(), &machine).await?;
            tracing::info!(
                namespace,
                set = set.name,
                instance = name,
                "VM delivery: a machine is requested"
            );
            self.tell(&set, json!({"instance": name, "event": "made"}));
            read = self.read_machines(&set, health).await?;
        }

        let deployment_object = deployment;
        // A deployment that targets the set but does not read holds every
        // instance where it is: read as "no deployment" it would release
        // the code of those in gray release.
        let deployment = match deployment.map(VmDeployment::read).transpose() {
            Ok(deployment) => deployment,
            Err(problem) => {
                let held = deployment_object
                    .and_then(|d| d["metadata"]["name"].as_str())
                    .unwrap_or_default();
                let problem = format!(
                    "held: the VMDeployment {held} does not read ({problem}); no instance moves until it does"
                );
                let status = super::resources::cannot_proceed(object, &problem, at);
                self.write_status(&sets(), namespace, name, object, status)
                    .await?;
                return Ok(Found {
                    stages: read
                        .iter()
                        .map(|m| m.state.stage.map_or("none", |s| s.wit_name()).to_string())
                        .collect(),
                    phase: Some("Degraded".into()),
                });
            }
        };
        let rollout = deployment.as_ref().map(|d| d.rollout(at));
        let members: Vec<Member<'_>> = read
            .iter()
            .map(|m| Member {
                state: &m.state,
                created: m.created,
            })
            .collect();
        let plan = rollout::plan(
            &set.spec,
            rollout.as_ref().map(|(spec, progress)| (spec, progress)),
            &members,
            at,
        );

        // The instances move on side by side (each its own VM, its own
        // lock, its own hook calls), a few at a time: a slow hook holds
        // only its instance.
        let movable: Vec<(&Read, Recorded, model::TargetState)> = read
            .iter()
            .filter_map(|machine| {
                let target = plan.targets.get(&machine.name).cloned()?;
                Some((machine, machine.recorded.as_ref().ok()?.clone(), target))
            })
            .collect();
        let mut steps = futures_util::stream::FuturesUnordered::new();
        let mut movable = movable.into_iter();
        let mut refused = Vec::new();
        loop {
            while steps.len() < STEPS_AT_ONCE
                && let Some((machine, recorded, target)) = movable.next()
            {
                steps.push(self.step_logged(&set, machine, recorded, target, term, at));
            }
            match steps.next().await {
                None => break,
                Some(outcome) => refused.extend(outcome),
            }
        }
        let rows: Vec<Value> = read.iter().map(row).collect();
        let deployment_rows = rows.clone();
        let problems: Vec<String> = read
            .iter()
            .filter_map(|m| {
                m.recorded
                    .as_ref()
                    .err()
                    .map(|e| format!("{}: {e}", m.name))
            })
            .collect();
        let mut problems = problems;
        problems.extend(refused);
        if self.registry.policy(World::Lifecycle).is_err() {
            problems.insert(0, NO_POLICY.to_string());
        }
        let problem = (!problems.is_empty()).then(|| problems.join("; "));
        let status = set.status(&plan, rows, problem.as_deref(), at);
        self.write_status(&sets(), namespace, name, object, status)
            .await?;
        let found = Found {
            stages: read
                .iter()
                .map(|m| m.state.stage.map_or("none", |s| s.wit_name()).to_string())
                .collect(),
            phase: deployment.as_ref().map(|_| format!("{:?}", plan.phase)),
        };
        if let (Some(d), Some((spec, _))) = (&deployment, &rollout) {
            let updated = read
                .iter()
                .filter(|m| m.state.code.as_deref() == Some(spec.code.as_str()))
                .count();
            let status = d.status(spec, &plan, updated, &deployment_rows, at);
            // A person's action the status keeps for the first time is an
            // Event on the deployment.
            if let Some(announcer) = &self.announcer {
                for action in status["actions"].as_array().into_iter().flatten() {
                    if !d.actions.contains(action) {
                        announcer.announce_rollout(namespace, &d.name, action);
                    }
                }
            }
            let object = deployment_object.cloned().unwrap_or_default();
            self.write_status(&deployments(), namespace, &d.name, &object, status)
                .await?;
        }
        Ok(found)
    }

    /// Let go of the instances of a set that is gone or going: each not
    /// deleted yet is deleted, and each moves on through its clean-up
    /// (which its finalizer holds) with what it has.
    async fn let_go(
        &self,
        set: &VmReplicaSet,
        read: Vec<Read>,
        term: &Term,
        at: Timestamp,
    ) -> Result<Found, kube::Error> {
        let mut read = read;
        if read.iter().any(|m| !m.state.deleting) {
            let api = Api::<DynamicObject>::namespaced_with(
                self.writer.clone(),
                &set.namespace,
                &machines(),
            );
            for machine in read.iter().filter(|m| !m.state.deleting) {
                match api.delete(&machine.name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => return Err(error),
                }
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "removed", "reason": "its set is deleted"}),
                );
            }
            read = self.read_machines(set, &BTreeMap::new()).await?;
        }
        let mut steps = futures_util::stream::FuturesUnordered::new();
        for machine in &read {
            let Ok(recorded) = machine.recorded.clone() else {
                continue;
            };
            let target = model::TargetState {
                environment: machine.state.environment.clone(),
                code: machine.state.code.clone(),
                may_disrupt: true,
                released: true,
            };
            steps.push(self.step_logged(set, machine, recorded, target, term, at));
        }
        while steps.next().await.is_some() {}
        Ok(Found {
            stages: read
                .iter()
                .map(|m| m.state.stage.map_or("none", |s| s.wit_name()).to_string())
                .collect(),
            phase: None,
        })
    }

    /// Merge `metadata` into an object's (a compare-and-swap when it names
    /// the resource version read).
    async fn patch_metadata(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        metadata: Value,
    ) -> Result<(), kube::Error> {
        Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, resource)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "metadata": metadata })),
            )
            .await
            .map(drop)
    }

    /// The instances whose set is gone without letting go of them (deleted
    /// before it held their clean-up, or its finalizer taken off by hand):
    /// those being deleted are cleaned up and let go. One not being
    /// deleted is left alone — the garbage collector deletes what its set
    /// owned, and what it does not own is not the controller's to delete.
    async fn orphans(&self, all_sets: &[DynamicObject], term: &Term) -> Result<(), Unread> {
        let mut by_set: BTreeMap<(String, String), String> = BTreeMap::new();
        for vm in served_or_none(
            self.list_with(
                &machines(),
                &ListParams::default().labels(instance::SET_LABEL),
            )
            .await,
        )
        .map_err(|error| Unread::new("VirtualMachines", error))?
        {
            let held = vm
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == instance::FINALIZER);
            let namespace = vm.metadata.namespace.clone().unwrap_or_default();
            let set = vm
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(instance::SET_LABEL))
                .cloned()
                .unwrap_or_default();
            let gone = !all_sets.iter().any(|s| {
                s.metadata.namespace.as_deref() == Some(namespace.as_str())
                    && s.metadata.name.as_deref() == Some(set.as_str())
            });
            if held && gone && vm.metadata.deletion_timestamp.is_some() {
                let owner = vm
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.kind == "VMReplicaSet")
                    .map(|o| o.uid.clone())
                    .unwrap_or_default();
                by_set.insert((namespace, set), owner);
            }
        }
        for ((namespace, name), uid) in by_set {
            let set = VmReplicaSet::named(&namespace, &name, &uid);
            let read = self
                .read_machines(&set, &BTreeMap::new())
                .await
                .map_err(|error| Unread::new("VirtualMachines", error))?;
            let going: Vec<Read> = read.into_iter().filter(|m| m.state.deleting).collect();
            if let Err(error) = self.let_go(&set, going, term, now()).await {
                tracing::warn!(namespace, set = name, %error, "VM delivery: the instances of a set that is gone could not be cleaned up");
            }
        }
        Ok(())
    }

    /// Adopt the VMs of the set's namespace that its selector names and
    /// no controller owns.
    async fn adopt(&self, set: &VmReplicaSet) -> Result<(), kube::Error> {
        let selector: Vec<String> = set
            .selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let selector = format!("{},!{}", selector.join(","), instance::SET_LABEL);
        let api =
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), &set.namespace, &machines());
        for vm in api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
        {
            let value = serde_json::to_value(&vm).unwrap_or_default();
            let Some(metadata) = set.adoption(&value) else {
                continue;
            };
            let name = vm.metadata.name.clone().unwrap_or_default();
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "metadata": metadata })),
            )
            .await?;
            tracing::info!(
                namespace = set.namespace,
                set = set.name,
                instance = name,
                "VM delivery: an existing VM is adopted"
            );
            self.tell(set, json!({"instance": name, "event": "adopted"}));
        }
        Ok(())
    }

    async fn read_machines(
        &self,
        set: &VmReplicaSet,
        health: &BTreeMap<String, Health>,
    ) -> Result<Vec<Read>, kube::Error> {
        let at = now();
        let overrides = self.overrides.list();
        let api =
            Api::<DynamicObject>::namespaced_with(self.reader.clone(), &set.namespace, &machines());
        let listed = api
            .list(&ListParams::default().labels(&format!("{}={}", instance::SET_LABEL, set.name)))
            .await?;
        // Which node each instance runs on: a failed list fails the set's
        // reconcile (an instance whose node is not known is not judged on
        // a healthy one).
        let vmis = served_or_none(
            Api::<DynamicObject>::namespaced_with(
                self.reader.clone(),
                &set.namespace,
                &instances(),
            )
            .list(&ListParams::default())
            .await
            .map(|l| l.items),
        )?;
        let nodes: BTreeMap<String, String> = vmis
            .iter()
            .filter_map(|vmi| {
                let value = serde_json::to_value(vmi).ok()?;
                Some((
                    vmi.metadata.name.clone()?,
                    value["status"]["nodeName"].as_str()?.to_string(),
                ))
            })
            .collect();
        Ok(listed
            .items
            .into_iter()
            .map(|vm| {
                let value = serde_json::to_value(&vm).unwrap_or_default();
                let name = vm.metadata.name.clone().unwrap_or_default();
                let recorded = Recorded::read(&instance::annotations_of(&value));
                let machine = instance::machine_of(&value);
                let at_rest = recorded.clone().unwrap_or_default();
                let forced = forced(&overrides, (&set.namespace, &name), &at_rest, at);
                // A person's `offline` holds while it is in force: the
                // policy sees the instance taken offline, as one the set
                // names, and no rule brings it back.
                let held_offline = overrides.iter().any(|o| {
                    o.namespace == set.namespace
                        && o.instance.as_deref() == Some(name.as_str())
                        && o.in_force(at)
                        && o.status == Stage::Offline.wit_name()
                });
                let named_offline = set.offline.contains(&name);
                let state = InstanceState {
                    namespace: set.namespace.clone(),
                    name: name.clone(),
                    set: set.name.clone(),
                    stage: at_rest.stage,
                    since: at_rest.since.unwrap_or(0),
                    machine,
                    node: nodes.get(&name).cloned(),
                    node_health: node_health(
                        nodes.get(&name).and_then(|node| health.get(node)).copied(),
                    ),
                    environment: at_rest.environment.clone(),
                    code: at_rest.code.clone(),
                    lists: at_rest.all_lists(),
                    deleting: vm.metadata.deletion_timestamp.is_some(),
                    take_offline: named_offline || held_offline,
                    forced: forced.as_ref().map(|f| f.stage),
                };
                Read {
                    name,
                    named_offline,
                    uid: vm.metadata.uid.clone().unwrap_or_default(),
                    resource_version: vm.metadata.resource_version.clone().unwrap_or_default(),
                    recorded,
                    state,
                    created: vm
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.as_millisecond())
                        .unwrap_or(0),
                    finalizers: vm.metadata.finalizers.clone().unwrap_or_default(),
                    forced_override: forced.as_ref().and_then(|f| f.key.clone()),
                    forced_by: forced.map(|f| f.who),
                }
            })
            .collect())
    }

    /// [`Controller::step`], its error logged.
    async fn step_logged(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        recorded: Recorded,
        target: model::TargetState,
        term: &Term,
        at: Timestamp,
    ) -> Option<String> {
        let key = format!("{}/{}", set.namespace, machine.name);
        let outcome = self.step(set, machine, recorded, &target, term, at).await;
        let mut said = lock(&self.said);
        let Err(error) = outcome else {
            said.remove(&key);
            return None;
        };
        // A failure that lasts is said once, and again when it changes.
        let text = error.to_string();
        let new = said.get(&key) != Some(&text);
        if new {
            tracing::warn!(namespace = set.namespace, instance = machine.name, %error, "VM delivery: the instance could not be moved on");
            said.insert(key, text);
        }
        drop(said);
        // A write the API server refused is said on the set, and as an
        // Event.
        let message = refusal(&error)?;
        if new {
            self.tell(
                set,
                json!({"instance": machine.name, "event": "refused", "message": message}),
            );
        }
        Some(format!("{}: {message}", machine.name))
    }

    /// Move one instance on by one step.
    async fn step(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        mut recorded: Recorded,
        target: &model::TargetState,
        term: &Term,
        at: Timestamp,
    ) -> Result<(), kube::Error> {
        if !instance::may_take(recorded.lock.as_ref(), term) {
            return Ok(());
        }
        // A person's retry or skip of the list that failed, while it is
        // the instance's list still (a clean-up the policy holds on its
        // failed step): it runs on from where it stopped.
        if machine.state.forced.is_none()
            && let Some(list) = recorded
                .list
                .as_mut()
                .filter(|l| l.outcome == Outcome::Failed)
        {
            let failed_at = list.finished.unwrap_or(list.started);
            let about = |r: &&crate::lifecycle::requests::Request| {
                r.list == Some(list.number) && r.at >= failed_at
            };
            let retry = recorded.retry.as_ref().filter(about).cloned();
            let skip = recorded
                .skip
                .as_ref()
                .filter(about)
                .filter(|r| r.step == Some(list.step + 1))
                .cloned();
            // The later of the two, when a person asked both.
            match (retry, skip) {
                (Some(retry), skip) if skip.as_ref().is_none_or(|s| s.at <= retry.at) => {
                    list.resume(&retry.who(), at);
                    self.tell(
                        set,
                        json!({"instance": machine.name, "event": "retried", "list": list.number,
                        "task": list.current().map(|t| t.name.clone()), "by": retry.by, "why": retry.why}),
                    );
                    return self.moved_on(set, machine, recorded, term).await;
                }
                (_, Some(skip)) => {
                    let task = list.tasks.get(list.step).map(|t| t.name.clone());
                    list.skip_failed(&skip.who(), at);
                    self.tell(
                        set,
                        json!({"instance": machine.name, "event": "skipped", "list": list.number,
                        "task": task, "by": skip.by, "why": skip.why}),
                    );
                    return self.moved_on(set, machine, recorded, term).await;
                }
                _ => {}
            }
        }
        let running = recorded
            .list
            .as_ref()
            .is_some_and(|l| l.outcome == Outcome::Running);
        // A forced stage is entered even while a list runs.
        if running && machine.state.forced.is_none() {
            let (skip, approve) = (recorded.skip.clone(), recorded.approve.clone());
            let list = recorded.list.as_mut().expect("a running list");
            // A person's word on the list in progress.
            if let Some(skip) = skip.filter(|r| {
                r.list == Some(list.number) && r.step == Some(list.step + 1) && r.at >= list.started
            }) {
                let task = list.current().map(|t| t.name.clone());
                list.skip(&skip.who(), at);
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "skipped", "list": list.number,
                    "task": task, "by": skip.by, "why": skip.why}),
                );
                return self.moved_on(set, machine, recorded, term).await;
            }
            if list.awaiting_approval() {
                if let Some(approve) = approve.filter(|r| r.list == Some(list.number)) {
                    list.approved_by = Some(approve.who());
                    self.tell(
                        set,
                        json!({"instance": machine.name, "event": "approved", "list": list.number,
                        "by": approve.by, "why": approve.why}),
                    );
                    return self.moved_on(set, machine, recorded, term).await;
                }
                return Ok(());
            }
            if list.next_at > at {
                return Ok(());
            }
            let Some(task) = list.current().cloned() else {
                return Ok(());
            };
            // The target changed while the steps before the last one ran:
            // its last step (what it delivers) is not started for a target
            // no longer wanted, and the next list is the newest target's.
            let key = list.key(&set.namespace, &machine.name, &machine.uid);
            if !self.calls.under_way(&key)
                && list.superseded_by(&target.environment, target.code.as_deref())
            {
                let why = match &target.code {
                    Some(code) => format!(
                        "the target is now {} with code {code}",
                        model::versions(&target.environment)
                    ),
                    None => format!("the target is now {}", model::versions(&target.environment)),
                };
                list.supersede(&why, at);
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "superseded", "list": list.number,
                    "task": task.name, "why": why}),
                );
                return self.moved_on(set, machine, recorded, term).await;
            }
            // The call is made in the term the lock names, by a replica
            // that still acts in it.
            if self
                .leadership
                .acting()
                .is_none_or(|acting| acting != *term)
            {
                return Ok(());
            }
            // The hook is asked by a task of its own; its answer is taken
            // on a later reconcile (the controller is woken for it), so
            // that a slow hook holds no other step.
            let call = OwnedCall {
                key,
                attempt: list.attempt + 1,
                leader: term.clone(),
                instance: InstanceRef {
                    namespace: set.namespace.clone(),
                    name: machine.name.clone(),
                    set: set.name.clone(),
                },
                stage: list.stage.wit_name().to_string(),
                step: task.name.clone(),
                params: task.params.clone(),
            };
            let outcome = match self.calls.ask(call, &self.writer) {
                Asked::Answered(outcome) => outcome,
                Asked::UnderWay | Asked::Full => return Ok(()),
            };
            list.attempt += 1;
            let failed = matches!(outcome, super::hooks::StepOutcome::Failed { .. });
            {
                let mut hooks = lock(&self.counts.hooks);
                let counted = hooks.entry(task.name.clone()).or_insert((0, 0));
                counted.0 += 1;
                counted.1 += u64::from(failed);
            }
            list.advance(outcome, now());
            if list.outcome != Outcome::Running {
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "finished", "list": list.number,
                    "stage": list.stage.wit_name(), "outcome": list.outcome.wit_name(),
                    "task": list.entry().task, "message": list.message}),
                );
            }
            return self.moved_on(set, machine, recorded, term).await;
        }
        // A finished clean-up lets the machine go.
        if machine.state.deleting
            && recorded.stage == Some(Stage::Deleting)
            && recorded
                .list
                .as_ref()
                .is_some_and(|l| l.outcome == Outcome::Succeeded)
        {
            return self.release(set, machine).await;
        }
        let Ok(slot) = self.registry.policy(World::Lifecycle) else {
            return Ok(());
        };
        let input = model::input(&machine.state, target);
        let answer = slot.call(|version| version.next(&version.context(at), &input));
        let decision = match answer {
            Ok(answer) => Next::from_wit(&answer.value),
            Err(error) => {
                tracing::warn!(instance = machine.name, %error, "the lifecycle policy could not decide");
                return Ok(());
            }
        };
        let Some(mut list) = CurrentList::entered(recorded.last_number(), &decision, at) else {
            return Ok(());
        };
        if let Some(who) = &machine.forced_by {
            list.reason = format!("{} ({who})", list.reason);
            self.tell(
                set,
                json!({"instance": machine.name, "event": "forced", "stage": list.stage.wit_name(), "by": who}),
            );
            // A forced stage is entered once: the override is taken, and
            // no longer shows as in force — except `offline`, which holds
            // the instance offline until a person lifts it.
            if let Some(key) = &machine.forced_override
                && list.stage != Stage::Offline
            {
                let why = format!("taken: {} entered {}", machine.name, list.stage.wit_name());
                if let Err(error) = self.overrides.clear(key, TAKER, &why, at) {
                    tracing::warn!(instance = machine.name, %error, "VM delivery: a forced stage entered, but its override could not be taken back");
                }
            }
            // A person who forces an instance into service vouches that it
            // has what it should (the list that failed to give it, done by
            // hand): once the forced list succeeds it has the target, and
            // the rollout goes on instead of taking it back to the list
            // that failed.
            if rollout::in_service(Some(list.stage)) {
                list.environment = Some(target.environment.clone());
                if target.code.is_some() {
                    list.code = target.code.clone();
                }
            }
        }
        self.tell(set, json!({"instance": machine.name, "event": "entered", "list": list.number,
            "stage": list.stage.wit_name(), "tasks": list.tasks.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            "needs-approval": list.needs_approval, "reason": list.reason}));
        tracing::info!(
            namespace = set.namespace,
            instance = machine.name,
            stage = list.stage.wit_name(),
            tasks = list.tasks.len(),
            "VM delivery: {}",
            list.reason
        );
        let done = list.outcome != Outcome::Running;
        recorded.enter(list, at);
        recorded.lock = (!done).then(|| Lock {
            holder: term.holder.clone(),
            term: term.term,
        });
        self.record(set, machine, &recorded).await
    }

    /// Record an instance whose list moved on: what a finished list gave
    /// it, and the lock kept while the list runs.
    async fn moved_on(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        mut recorded: Recorded,
        term: &Term,
    ) -> Result<(), kube::Error> {
        recorded.settle();
        let done = recorded
            .list
            .as_ref()
            .is_some_and(|l| l.outcome != Outcome::Running);
        recorded.lock = (!done).then(|| Lock {
            holder: term.holder.clone(),
            term: term.term,
        });
        self.record(set, machine, &recorded).await
    }

    /// Write what an instance records, on the version it was read at.
    async fn record(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        recorded: &Recorded,
    ) -> Result<(), kube::Error> {
        let annotations: serde_json::Map<String, Value> = recorded
            .annotations()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.map_or(Value::Null, Value::String)))
            .collect();
        self.patch_machine(set, machine, json!({ "annotations": annotations }))
            .await
    }

    /// Release the clean-up finalizer: the machine goes.
    async fn release(&self, set: &VmReplicaSet, machine: &Read) -> Result<(), kube::Error> {
        let finalizers: Vec<&String> = machine
            .finalizers
            .iter()
            .filter(|f| f.as_str() != instance::FINALIZER)
            .collect();
        tracing::info!(
            namespace = set.namespace,
            instance = machine.name,
            "VM delivery: cleaned up; the machine goes"
        );
        self.patch_machine(set, machine, json!({ "finalizers": finalizers }))
            .await
    }

    /// Merge `metadata` into a machine's, on the resource version it was
    /// read at: a compare-and-swap, which a change since fails.
    async fn patch_machine(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        mut metadata: Value,
    ) -> Result<(), kube::Error> {
        metadata["resourceVersion"] = json!(machine.resource_version);
        self.patch_metadata(&machines(), &set.namespace, &machine.name, metadata)
            .await
    }

    async fn write_status(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        object: &Value,
        mut status: Value,
    ) -> Result<(), kube::Error> {
        status = pruned(status);
        super::resources::keep_transitions(&object["status"], &mut status);
        if object["status"] == status {
            return Ok(());
        }
        let api = Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, resource);
        let written = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": replacing(&object["status"], status)})),
            )
            .await;
        let Some(refused) = written.as_ref().err().and_then(refusal) else {
            return written.map(drop);
        };
        // Refused (too large, invalid): the status says so, in a write
        // small enough to be taken.
        let problem = format!("the status could not be written: {refused}");
        let status = super::resources::degraded(object, "WriteRefused", &problem, now());
        if let Err(error) = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": replacing(&object["status"], status)})),
            )
            .await
        {
            tracing::warn!(namespace, name, %error, "VM delivery: not even the refusal could be written in the status");
        }
        written.map(drop)
    }
}

/// Which instance a set lets go of first when it has too many: one out of
/// service before one in it (lost, failed, out of contact, not yet made,
/// then on its way), the newest last made (the highest number) among
/// equals.
fn rank_to_remove(machine: &Read) -> (u8, Timestamp, String) {
    let badness = match machine.state.stage {
        Some(Stage::Offline) => 6,
        Some(Stage::Failed) => 5,
        Some(Stage::Unknown) => 4,
        None | Some(Stage::Requested) => 3,
        Some(Stage::Initializing | Stage::Deploying) => 2,
        Some(Stage::Ready | Stage::GrayRelease) => 1,
        Some(Stage::Serving | Stage::Deleting) => 0,
    };
    (badness, machine.created, machine.name.clone())
}

/// What one reconcile of a set found, for the counts.
#[derive(Debug, Default)]
struct Found {
    /// Each instance's stage.
    stages: Vec<String>,
    /// The deployment's phase, when one targets the set.
    phase: Option<String>,
}

/// What the API server said refusing a write, in words; none for an error
/// that is no refusal — a conflict (the next reconcile reads past it), a
/// missing object, a failure to reach the server.
fn refusal(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status) if !matches!(status.code, 404 | 409) => Some(format!(
            "the API server refused a write ({} {}): {}",
            status.code, status.reason, status.message
        )),
        _ => None,
    }
}

/// A counter's lock, whatever a panicking holder left.
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An instance as the set's status shows it.
fn row(machine: &Read) -> Value {
    let state = &machine.state;
    let recorded = machine.recorded.as_ref().ok();
    json!({
        "name": machine.name,
        "stage": state.stage.map(|s| s.wit_name()),
        "environment": state.environment.iter().map(|p| format!("{}={}", p.name, p.version)).collect::<Vec<_>>(),
        "code": state.code,
        // The step in progress or that its list failed at; of a failed
        // instance, the step it failed at.
        "task": recorded
            .and_then(|r| r.list.as_ref())
            .and_then(|l| l.entry().task)
            .or_else(|| match state.stage {
                Some(Stage::Failed) => rollout::failed_step(state).map(String::from),
                _ => None,
            }),
        "lockedBy": recorded.and_then(|r| r.lock.as_ref()).map(|l| l.holder.clone()),
        "since": recorded.and_then(|r| r.since).map(crate::time::rfc3339),
    })
}

/// A merge patch of a status that makes it `next` whole: each field of
/// `previous` that `next` does not have is removed (a merge patch keeps
/// what it does not name, and an approval of an earlier rollout left in
/// the status would approve the next one).
fn replacing(previous: &Value, mut next: Value) -> Value {
    if let (Some(before), Some(after)) = (previous.as_object(), next.as_object_mut()) {
        for key in before.keys() {
            if !after.contains_key(key) {
                after.insert(key.clone(), Value::Null);
            }
        }
    }
    next
}

/// A value without its nulls, as the API server keeps it.
fn pruned(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, pruned(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(pruned).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_written_again_loses_the_fields_it_no_longer_has() {
        let previous = json!({"phase": "Progressing", "approvedStep": 1, "approvedBy": "ana"});
        let next = json!({"phase": "Progressing", "stepIndex": 0});
        assert_eq!(
            replacing(&previous, next),
            json!({"phase": "Progressing", "stepIndex": 0, "approvedStep": null, "approvedBy": null})
        );
        assert_eq!(replacing(&Value::Null, json!({"a": 1})), json!({"a": 1}));
    }

    #[test]
    fn a_resource_not_served_has_no_objects_and_every_other_failure_stays_one() {
        let status = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("no", "NotFound")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(served_or_none::<()>(Err(status(404))).unwrap().is_empty());
        assert!(served_or_none::<()>(Err(status(403))).is_err());
        assert!(served_or_none::<()>(Err(status(500))).is_err());
    }
}
