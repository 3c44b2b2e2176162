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
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::hooks::{Asked, Calls, Hooks, InstanceRef, OwnedCall};
use super::instance::{self, CurrentList, ListOutcome, Lock, Recorded};
use super::model::{self, InstanceState, Next};
use super::resources::{
    VmDeployment, VmReplicaSet, deployments, instance_name, instances, machines, servers, sets,
};
use super::rollout::{self, Member};
use super::watched::{STATUS_MANAGER, Unread, Watched};
use crate::events::{Events, Kind};
use crate::failover::Failover;
use crate::failover::model::Health;
use crate::leader::{Leadership, Term};
use crate::plugins::{Registry, World};
use crate::time::{Timestamp, now};
use crate::wit::WitName;
use crate::wit::lifecycle::{NodeHealth, Stage};

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
    events: Arc<Events>,
    /// What the last reconcile found, for metrics and the HTTP routes.
    pub counts: Arc<Counts>,
    /// The Kubernetes Events of what it does, when it writes them.
    announcer: Option<Arc<super::announce::Announcer>>,
    /// The last failure said of each instance (`namespace/name`) that
    /// could not be moved on: one that lasts is said once.
    said: std::sync::Mutex<BTreeMap<String, String>>,
    /// Each instance's Server (`namespace/name`) written since the store
    /// last showed it, with the resource versions the writes replaced:
    /// while the store still shows one of them, the instance is not moved
    /// on (what it shows is already past), and the watch brings the new
    /// one.
    written: std::sync::Mutex<BTreeMap<String, Vec<String>>>,
    /// The Servers each set (`namespace/set`) made that its store has not
    /// shown yet, with when: the set makes no other until it has (else a
    /// store behind its writes would have it make one again and again),
    /// or until [`MADE_EXPECTED`] has passed.
    made: std::sync::Mutex<BTreeMap<String, BTreeMap<String, Timestamp>>>,
    /// The status this leader last wrote on each Server (`namespace/name`),
    /// as the API server took it, with the term it wrote it in: a status
    /// the store shows otherwise in the same term was written by someone
    /// else, and is put back.
    /// Kept as JSON text, a fraction of its size as a value.
    ours: std::sync::Mutex<BTreeMap<String, Written>>,
    /// Each object's reconciles failed in a row (`Kind/namespace/name`):
    /// the next try waits the longer.
    failures: std::sync::Mutex<BTreeMap<String, u32>>,
}

/// How long a set waits for the store to show a Server it made.
const MADE_EXPECTED: i64 = 30_000;

/// What the controller counts: instances by stage and rollouts by phase
/// at each set's last reconcile, hook calls and failures by step since the
/// start.
#[derive(Debug, Default)]
pub struct Counts {
    /// What each set's last reconcile found, by `namespace/name`.
    by_set: std::sync::Mutex<BTreeMap<String, Found>>,
    /// Per step: calls, and calls that failed the step.
    pub hooks: std::sync::Mutex<BTreeMap<String, (u64, u64)>>,
    /// Reconciles held because what they govern could not be read.
    pub unread: std::sync::atomic::AtomicU64,
}

impl Counts {
    /// Instances by stage.
    pub fn stages(&self) -> BTreeMap<String, u64> {
        let mut stages = BTreeMap::new();
        for stage in lock(&self.by_set).values().flat_map(|f| &f.stages) {
            *stages.entry(stage.clone()).or_insert(0) += 1;
        }
        stages
    }

    /// Rollouts by phase.
    pub fn phases(&self) -> BTreeMap<String, u64> {
        let mut phases = BTreeMap::new();
        for phase in lock(&self.by_set).values().filter_map(|f| f.phase.as_ref()) {
            *phases.entry(phase.clone()).or_insert(0) += 1;
        }
        phases
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

/// One instance of a set, as read: its Server and its machine.
struct Read {
    name: String,
    /// The set names it offline, or failover marked it lost in a set that
    /// scales down on a lost instance: drained, it goes.
    named_offline: bool,
    /// Failover marked it lost, in a set that scales down on a lost
    /// instance: drained, its machine goes and its Server stays, offline,
    /// out of the set's count, until a person deletes it.
    lost: bool,
    /// The Server's UID: part of every step's key.
    uid: String,
    resource_version: String,
    generation: Option<i64>,
    /// The store shows it as it was before this controller's last write:
    /// it is not moved on until the store has that write.
    stale: bool,
    /// The status this leader wrote last, when the store shows another:
    /// someone else wrote it, and it is put back.
    overwritten: Option<Arc<Value>>,
    recorded: Result<Recorded, String>,
    /// The Server as read.
    server: Arc<DynamicObject>,
    state: InstanceState,
    created: Timestamp,
    /// The Server's finalizers, and whether it is being deleted.
    finalizers: Vec<String>,
    deleted: bool,
    /// Its VirtualMachine, when there is one.
    machine: Option<MachineRead>,
    /// Its node is `Ready` as failover last saw it (a node within its
    /// grace is not): the rollout counts the instance unavailable at once.
    node_ready: bool,
    /// The stage a person forced (through the Server's spec, or a retry
    /// of a list left behind) that it has not entered yet.
    forced: Option<Forced>,
}

/// An instance's VirtualMachine, as read.
struct MachineRead {
    /// The version read.
    version: Option<String>,
    finalizers: Vec<String>,
    deleted: bool,
    /// Its printable status.
    printable: Option<String>,
}

/// The stage a person forced on an instance that has not entered it yet:
/// the request in its Server's spec not taken yet, else a retry of a list
/// left behind, made after the instance entered its stage.
fn forced(recorded: &Recorded) -> Option<Forced> {
    if let Some(force) = recorded.force_pending() {
        return Some(Forced {
            stage: force.stage,
            who: format!("forced by {}", force.who()),
            force: Some(force.clone()),
        });
    }
    let since = recorded.since.unwrap_or(0);
    // A retry of a list that is still the instance's runs that list on
    // (see `Controller::step`); one of a list left behind enters its stage
    // again.
    recorded
        .retry
        .as_ref()
        .filter(|r| r.at > since && r.list.is_none())
        .and_then(|r| {
            Some(Forced {
                stage: r.stage?,
                who: format!("retried by {}", r.who()),
                force: None,
            })
        })
}

/// A stage a person forced on an instance: by whom, and the request in the
/// Server's spec that asked for it (none for a retry).
struct Forced {
    stage: Stage,
    who: String,
    force: Option<instance::Force>,
}

impl Controller {
    pub fn new(
        reader: kube::Client,
        leadership: Arc<Leadership>,
        registry: Arc<Registry>,
        failover: Option<Arc<Failover>>,
        events: Arc<Events>,
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
            events,
            counts: Arc::default(),
            announcer: None,
            said: std::sync::Mutex::default(),
            written: std::sync::Mutex::default(),
            made: std::sync::Mutex::default(),
            ours: std::sync::Mutex::default(),
            failures: std::sync::Mutex::default(),
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

    /// Follow the sets, deployments, machines and instances of the
    /// namespaces carried out, and reconcile each as it changes, while this
    /// replica leads, until the process ends. Every replica keeps the
    /// stores warm; only the leader acts.
    pub async fn run(self: Arc<Self>, mut stopping: tokio::sync::watch::Receiver<bool>) {
        tracing::info!(
            every_ms = self.every.as_millis() as u64,
            hooks = ?self.calls.hooks().names().collect::<Vec<_>>(),
            "VM delivery: following VMReplicaSets and VMDeployments"
        );
        let scopes: Vec<Option<String>> = match self.namespaces.is_empty() {
            true => vec![None],
            false => self.namespaces.iter().cloned().map(Some).collect(),
        };
        let mut running = tokio::task::JoinSet::new();
        for namespace in scopes {
            running.spawn(Arc::clone(&self).run_scope(namespace));
        }
        running.spawn(Arc::clone(&self).say_missing_policy());
        tokio::select! {
            () = async {
                while let Some(ended) = running.join_next().await {
                    if let Err(error) = ended {
                        tracing::error!(%error, "VM delivery: a namespace's controllers ended");
                    }
                }
            } => {}
            _ = stopping.wait_for(|stop| *stop) => {}
        }
        // The host stops: the controllers end here, and are waited for, so
        // that none is still starting a reconcile when the runtime shuts
        // down (a task the closed runtime refuses is a panic in
        // kube-runtime).
        running.shutdown().await;
    }

    /// Say when no lifecycle policy is loaded, and when one is again.
    async fn say_missing_policy(self: Arc<Self>) {
        let mut said = false;
        let mut tap = self.events.tap(64);
        loop {
            let missing = self.registry.policy(World::Lifecycle).is_err();
            if missing && !said {
                tracing::warn!("VM delivery: {NO_POLICY}");
            }
            said = missing;
            // Asked again when a plugin changes.
            loop {
                match tap.receiver.recv().await {
                    Some(event) if event.kind == Kind::Plugin => break,
                    Some(_) => {}
                    None => return,
                }
            }
        }
    }

    /// The controllers of one namespace (of all, for `None`): the sets',
    /// the deployments' and the machines' whose set is gone, each over the
    /// stores of what it reads, each object reconciled on its own.
    async fn run_scope(self: Arc<Self>, namespace: Option<String>) {
        let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel::<Changed>();
        let api = |resource: &ApiResource| match &namespace {
            Some(namespace) => {
                Api::<DynamicObject>::namespaced_with(self.reader.clone(), namespace, resource)
            }
            None => Api::<DynamicObject>::all_with(self.reader.clone(), resource),
        };
        let watch = |resource: ApiResource, what: &'static str, which: Which| {
            let changed = changed.clone();
            Watched::start(
                api(&resource),
                &resource,
                what,
                Box::new(move |object| {
                    let _ = changed.send((which, object.cloned()));
                }),
            )
        };
        let scope = Arc::new(Scope {
            namespace: namespace.clone(),
            sets: watch(sets(), "VMReplicaSets", Which::Set),
            deployments: watch(deployments(), "VMDeployments", Which::Deployment),
            servers: watch(servers(), "Servers", Which::Server),
            machines: watch(machines(), "VirtualMachines", Which::Machine),
            instances: watch(instances(), "VirtualMachineInstances", Which::Instance),
        });
        let (to_sets, for_sets) = tokio::sync::mpsc::unbounded_channel();
        let (to_deployments, for_deployments) = tokio::sync::mpsc::unbounded_channel();
        let (to_servers, for_servers) = tokio::sync::mpsc::unbounded_channel();
        let (to_machines, for_machines) = tokio::sync::mpsc::unbounded_channel();
        // What changed, to the objects whose reconcile it concerns.
        let routed = Arc::clone(&scope);
        let route = Route {
            sets: to_sets.clone(),
            deployments: to_deployments,
            servers: to_servers,
            machines: to_machines,
        };
        // Both helpers end with this scope (they hold its watches).
        let mut helpers = tokio::task::JoinSet::new();
        helpers.spawn(async move {
            while let Some((which, object)) = changes.recv().await {
                route.changed(&routed, which, object.as_ref());
            }
        });
        // A hook's answer is taken as soon as it comes.
        let mut answered = self.calls.answered();
        let answers = Arc::clone(&scope);
        helpers.spawn(async move {
            loop {
                match answered.recv().await {
                    Ok(instance) => {
                        if answers.covers(&instance.namespace) {
                            let _ = to_sets
                                .send(answers.sets.reference(&instance.namespace, &instance.set));
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        for set in answers.sets.store.state() {
                            let _ = to_sets.send(reference_of(&answers.sets, &set));
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });

        let context = Arc::new(Context {
            controller: Arc::clone(&self),
            scope: Arc::clone(&scope),
        });
        let sets_controller = over(&scope.sets, for_sets)
            .reconcile_all_on(self.wakes())
            .run(reconcile_set, on_error(Which::Set), Arc::clone(&context))
            .for_each(settled(Which::Set, &self));
        let deployments_controller = over(&scope.deployments, for_deployments)
            .reconcile_all_on(self.wakes())
            .run(
                reconcile_deployment,
                on_error(Which::Deployment),
                Arc::clone(&context),
            )
            .for_each(settled(Which::Deployment, &self));
        let servers_controller = over(&scope.servers, for_servers)
            .run(
                reconcile_server,
                on_error(Which::Server),
                Arc::clone(&context),
            )
            .for_each(settled(Which::Server, &self));
        let machines_controller = over(&scope.machines, for_machines)
            .run(reconcile_machine, on_error(Which::Machine), context)
            .for_each(settled(Which::Machine, &self));
        tokio::join!(
            sets_controller,
            deployments_controller,
            servers_controller,
            machines_controller
        );
    }

    /// What asks every object of a kind to be reconciled again: this
    /// replica taking the lead, failover's judgement of the nodes, a
    /// plugin loaded or unloaded.
    fn wakes(&self) -> impl futures_util::Stream<Item = ()> + Send + 'static {
        let leading = tokio_stream::wrappers::WatchStream::new(self.leadership.subscribe())
            .filter_map(|standing| std::future::ready(standing.leader.then_some(())));
        let tap = self.events.tap(256);
        let told = tokio_stream::wrappers::ReceiverStream::new(tap.receiver).filter_map(|event| {
            std::future::ready(matches!(event.kind, Kind::Failover | Kind::Plugin).then_some(()))
        });
        futures_util::stream::select(leading, told)
    }

    async fn reconcile_set(
        &self,
        set_object: &DynamicObject,
        scope: &Scope,
        term: &Term,
    ) -> Result<Found, Failed> {
        let at = now();
        let value = serde_json::to_value(set_object).unwrap_or_default();
        let object = &value;
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        // What the set depends on is read, or it is held where it is, and
        // says so.
        if let Err(unread) = scope
            .deployments
            .check()
            .and(scope.servers.check())
            .and(scope.machines.check())
            .and(scope.instances.check())
        {
            let status = super::resources::held(object, &unread.to_string(), at);
            self.write_status(&sets(), namespace, name, object, status)
                .await?;
            return Err(unread.into());
        }
        let targeting = scope.deployments_of(namespace, name)?;
        let deployment = targeting.first();
        // The nodes' health, as failover judges them.
        let health = match &self.failover {
            Some(failover) => failover.health().await,
            None => BTreeMap::new(),
        };
        let health = &health;
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
            self.take_over(&set, scope).await?;
            let read = self.read_machines(&set, scope, health)?;
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
                return Ok(Found {
                    gone: true,
                    ..Found::default()
                });
            }
            if self.put_back(&set, &read).await? {
                return Ok(Found::moving());
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
            self.adopt(&set, scope).await?;
        }
        // Take over the VMs it made before instances had Servers.
        self.take_over(&set, scope).await?;
        let mut read = self.read_machines(&set, scope, health)?;
        // Until the store shows the Servers the set made, it waits.
        {
            let mut made = lock(&self.made);
            let key = format!("{namespace}/{}", set.name);
            let expected = made.entry(key.clone()).or_default();
            expected.retain(|name, when| {
                at - *when < MADE_EXPECTED && !read.iter().any(|m| &m.name == name)
            });
            let waiting = !expected.is_empty();
            if !waiting {
                made.remove(&key);
            }
            if waiting {
                return Ok(Found {
                    stages: stages(&read),
                    ..Found::moving()
                });
            }
        }
        // What the set may do depends on every instance as it is now: while
        // the store shows one from before this controller's last write to
        // it, the set waits for the watch to bring the write.
        if read.iter().any(|m| m.stale) {
            return Ok(Found {
                stages: stages(&read),
                ..Found::moving()
            });
        }
        if self.put_back(&set, &read).await? {
            return Ok(Found {
                stages: stages(&read),
                ..Found::moving()
            });
        }

        // Make the machines the set is short of, or let go of one it has
        // too many of; an instance named offline goes once it is drained.
        // Those named offline count no more: the set runs `replicas` less
        // them, and never gives their names to new instances.
        let staying: Vec<&Read> = read
            .iter()
            .filter(|m| !m.state.deleting && !m.state.take_offline)
            .collect();
        // While a change rolls out over instances that had something
        // before it, up to `maxSurge` more, made with the change.
        let code = deployment.and_then(|d| d["spec"]["code"]["version"].as_str());
        let changing = staying
            .iter()
            .filter(|m| !m.state.environment.is_empty() || m.state.code.is_some())
            .filter(|m| {
                m.state.environment != set.spec.environment
                    || code.is_some_and(|c| m.state.code.as_deref() != Some(c))
            })
            .count();
        // Those lost in a set that scales down on a lost instance count no
        // more either.
        let lost = read
            .iter()
            .filter(|m| m.lost && !set.offline.contains(&m.name))
            .count();
        let wanted = set.wanted().saturating_sub(lost)
            + match changing {
                0 => 0,
                n => set.spec.max_surge.beyond(set.wanted()).min(n),
            };
        let drained = read.iter().find(|m| {
            m.named_offline
                && (!m.lost || m.machine.as_ref().is_some_and(|vm| !vm.deleted))
                && !m.state.deleting
                && m.state.stage == Some(Stage::Offline)
                && m.recorded.as_ref().is_ok_and(|r| {
                    r.list
                        .as_ref()
                        .is_some_and(|l| l.outcome == ListOutcome::Succeeded)
                })
        });
        // One too many: an instance out of service for good goes at once;
        // otherwise the newest (a surge made for a change), once every
        // other is in service at rest — a set never runs fewer available
        // than it wants to let one go, nor deletes an instance it has just
        // updated.
        let extra = (staying.len() > wanted)
            .then(|| staying.iter().max_by_key(|m| rank_to_remove(m)))
            .flatten()
            .filter(|worst| {
                rank_to_remove(worst).0 > 0
                    || staying
                        .iter()
                        .filter(|m| m.name != worst.name)
                        .all(|m| at_rest_in_service(m))
            });
        if let Some(machine) = drained.filter(|m| m.lost) {
            self.let_machine_go(&set, machine).await?;
            tracing::info!(
                namespace,
                set = set.name,
                instance = machine.name,
                "VM delivery: the lost instance is drained; its machine goes, its Server stays offline"
            );
            self.tell(
                &set,
                json!({"instance": machine.name, "event": "removed", "reason": "lost, and drained: the set is smaller by it"}),
            );
            return Ok(Found::moving());
        }
        if let Some(machine) = drained.or(extra.copied()) {
            let why = match machine.named_offline {
                true => "named offline and drained",
                false => "the set has more instances than it wants",
            };
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &servers())
                .delete(&machine.name, &DeleteParams::default())
                .await?;
            tracing::info!(
                namespace,
                set = set.name,
                instance = machine.name,
                "VM delivery: the instance goes ({why}); its clean-up holds its Server"
            );
            self.tell(
                &set,
                json!({"instance": machine.name, "event": "removed", "reason": why}),
            );
            // Looked at again once the store has it going.
            return Ok(Found::moving());
        } else if staying.len() < wanted {
            // No name of an instance, of a machine of the set's, or of one
            // named offline.
            let machines = scope.machines.filtered(|vm| {
                vm.metadata.namespace.as_deref() == Some(namespace)
                    && set_of(vm) == Some(set.name.as_str())
            })?;
            let names: Vec<String> = read
                .iter()
                .map(|m| m.name.clone())
                .chain(machines.iter().filter_map(|vm| vm.metadata.name.clone()))
                .chain(set.offline.iter().cloned())
                .collect();
            let name = instance_name(&set.name, names.iter().map(String::as_str));
            let server = set.server(&name, &set.spec.environment, None);
            let api =
                Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &servers());
            let server: DynamicObject =
                serde_json::from_value(server).map_err(kube::Error::SerdeError)?;
            match api.create(&PostParams::default(), &server).await {
                Ok(mut made) => {
                    lock(&self.made)
                        .entry(format!("{namespace}/{}", set.name))
                        .or_default()
                        .insert(name.clone(), at);
                    // It applies for a machine.
                    made.data["status"] = json!({
                        "stage": Stage::Requested.wit_name(),
                        "since": crate::time::rfc3339(at),
                        "writer": writer(&self.leadership),
                    });
                    let written = api.replace_status(&name, &status_params(), &made).await?;
                    self.keep_ours(namespace, &name, &written);
                    let uid = made.metadata.uid.clone().unwrap_or_default();
                    self.make_machine(&set, &name, &uid).await?;
                    tracing::info!(
                        namespace,
                        set = set.name,
                        instance = name,
                        "VM delivery: a Server is made, and its machine requested"
                    );
                    self.tell(&set, json!({"instance": name, "event": "made"}));
                }
                // Made already: the store has not seen it yet.
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(error.into()),
            }
            // Looked at again once the store has it.
            return Ok(Found::moving());
        }
        // A Server whose machine is not made yet has it made; one whose
        // machine was seen and is gone without its clean-up (deleted with
        // its finalizer taken off) goes through its clean-up, and the set
        // replaces it.
        let mut machines_made = false;
        // A machine deleted by hand takes its Server with it: the
        // instance goes through its clean-up, and the set replaces it.
        for server in read
            .iter()
            .filter(|m| !m.deleted && !m.lost && m.machine.as_ref().is_some_and(|vm| vm.deleted))
        {
            gone_is_done(
                Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &servers())
                    .delete(&server.name, &DeleteParams::default())
                    .await
                    .map(drop),
            )?;
            machines_made = true;
        }
        for server in read
            .iter()
            .filter(|m| m.machine.is_none() && !m.state.deleting && !m.lost)
        {
            // Seen before (its status recorded its machine) and not in the
            // store now: gone, since the store only moves on. Never seen: not
            // made yet, or made and not in the store yet (made again, the
            // API server says it exists).
            let seen = server.server.data["status"]["machineState"].is_string();
            if !seen {
                self.make_machine(&set, &server.name, &server.uid).await?;
            } else {
                tracing::warn!(
                    namespace,
                    set = set.name,
                    instance = server.name,
                    "VM delivery: the instance's machine is gone; its Server goes through its clean-up"
                );
                gone_is_done(
                    Api::<DynamicObject>::namespaced_with(
                        self.writer.clone(),
                        namespace,
                        &servers(),
                    )
                    .delete(&server.name, &DeleteParams::default())
                    .await
                    .map(drop),
                )?;
                self.tell(
                    &set,
                    json!({"instance": server.name, "event": "removed", "reason": "its machine is gone"}),
                );
            }
            machines_made = true;
        }
        if machines_made {
            return Ok(Found::moving());
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
                    stages: stages(&read),
                    phase: Some("Degraded".into()),
                    ..Found::default()
                });
            }
        };
        let rollout = deployment.as_ref().map(|d| d.rollout(at));
        let members: Vec<Member<'_>> = read
            .iter()
            .map(|m| Member {
                state: &m.state,
                created: m.created,
                node_ready: m.node_ready,
            })
            .collect();
        let plan = rollout::plan(
            &set.spec,
            rollout.as_ref().map(|(spec, progress)| (spec, progress)),
            &members,
            at,
        );

        // Each Server's spec says what the plan gives it, written before
        // the instance moves on (on the version the write gives).
        for machine in read.iter_mut().filter(|m| !m.stale && !m.state.deleting) {
            let Some(target) = plan.targets.get(&machine.name) else {
                continue;
            };
            let spec = super::resources::server_spec(
                &set.name,
                &target.environment,
                target.code.as_deref(),
            );
            // The target only: what else the spec has (a person's forced
            // stage) is not the rollout's.
            let before = &machine.server.data["spec"];
            let target = ["replicaSet", "environment", "code"];
            if target.iter().all(|k| before.get(*k) == spec.get(*k)) {
                continue;
            }
            let mut patch = spec;
            if patch.get("code").is_none() {
                patch["code"] = Value::Null;
            }
            let patched =
                Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &servers())
                    .patch(
                        &machine.name,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({
                            "metadata": {"resourceVersion": machine.resource_version},
                            "spec": patch,
                        })),
                    )
                    .await?;
            self.wrote(namespace, &machine.name, &machine.resource_version);
            machine.resource_version = patched
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default();
            machine.generation = patched.metadata.generation;
            machine.server = Arc::new(patched);
        }

        // The instances move on side by side (each its own Server, its own
        // lock, its own hook calls), a few at a time: a slow hook holds
        // only its instance.
        let movable: Vec<(&Read, Recorded, model::TargetState)> = read
            .iter()
            .filter(|machine| !machine.stale)
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
        let (failed_cleanups, cleaning) = cleanups(&read);
        problems.extend(failed_cleanups);
        let problem = (!problems.is_empty()).then(|| problems.join("; "));
        let status = set.status(&plan, rows, (problem.as_deref(), &cleaning), at);
        self.write_status(&sets(), namespace, name, object, status)
            .await?;
        // Looked at again soon while a list runs or the rollout moves.
        let moving = read.iter().any(|m| {
            m.stale
                || m.recorded.as_ref().is_ok_and(|r| {
                    r.list
                        .as_ref()
                        .is_some_and(|l| l.outcome == ListOutcome::Running)
                })
        }) || matches!(
            plan.phase,
            rollout::Phase::Progressing | rollout::Phase::Paused
        );
        let found = Found {
            stages: stages(&read),
            phase: deployment.as_ref().map(|_| format!("{:?}", plan.phase)),
            moving,
            gone: false,
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
        if read.iter().any(|m| !m.state.deleting) {
            let api = Api::<DynamicObject>::namespaced_with(
                self.writer.clone(),
                &set.namespace,
                &servers(),
            );
            for machine in read.iter().filter(|m| !m.state.deleting) {
                gone_is_done(
                    api.delete(&machine.name, &DeleteParams::default())
                        .await
                        .map(drop),
                )?;
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "removed", "reason": "its set is deleted"}),
                );
            }
            // Cleaned up once the store has them going.
            return Ok(Found::moving());
        }
        let mut steps = futures_util::stream::FuturesUnordered::new();
        for machine in read.iter().filter(|m| !m.stale) {
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
            stages: stages(&read),
            moving: true,
            ..Found::default()
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

    /// Adopt the VMs of the set's namespace that its selector names and
    /// no controller owns: a Server is made for each (its stage none: the
    /// lifecycle policy takes it from where its machine is), which then
    /// owns it.
    async fn adopt(&self, set: &VmReplicaSet, scope: &Scope) -> Result<(), Failed> {
        let named = |vm: &DynamicObject| {
            let labels = vm.metadata.labels.clone().unwrap_or_default();
            vm.metadata.namespace.as_deref() == Some(set.namespace.as_str())
                && !labels.contains_key(instance::SET_LABEL)
                && set.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        };
        let vms =
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), &set.namespace, &machines());
        for vm in scope.machines.filtered(named)? {
            let value = serde_json::to_value(&*vm).unwrap_or_default();
            let name = vm.metadata.name.clone().unwrap_or_default();
            if !super::resources::adoptable(&value) {
                continue;
            }
            let uid = match self.server_for(set, scope, &name).await? {
                ServerFor::Has(uid) => uid,
                ServerFor::Made(made) => made.metadata.uid.unwrap_or_default(),
                ServerFor::Not => continue,
            };
            let Some(metadata) = set.adoption(&value, Some(&uid)) else {
                continue;
            };
            vms.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "metadata": metadata })),
            )
            .await?;
            tracing::info!(
                namespace = set.namespace,
                set = set.name,
                instance = name,
                "VM delivery: an existing VM is adopted; its Server is made"
            );
            self.tell(set, json!({"instance": name, "event": "adopted"}));
        }
        Ok(())
    }

    /// Take over the VMs the set owns itself, made before instances had
    /// Servers: a Server is made for each, its status what the VM's
    /// annotations recorded (a list in progress runs on), and the Server
    /// owns the VM from then on; one being deleted has its Server deleted
    /// too, so that its clean-up runs. A VM whose annotations do not read is
    /// left as it is, and said once.
    async fn take_over(&self, set: &VmReplicaSet, scope: &Scope) -> Result<(), Failed> {
        let legacy = |vm: &DynamicObject| {
            vm.metadata.namespace.as_deref() == Some(set.namespace.as_str())
                && set_of(vm) == Some(set.name.as_str())
                && vm
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.controller == Some(true) && o.kind == "VMReplicaSet")
        };
        let servers_api =
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), &set.namespace, &servers());
        for vm in scope.machines.filtered(legacy)? {
            let name = vm.metadata.name.clone().unwrap_or_default();
            let annotations = vm.metadata.annotations.clone().unwrap_or_default();
            let status = match instance::legacy_status(&annotations) {
                Ok(status) => status,
                Err(problem) => {
                    let key = format!("take-over/{}/{name}", set.namespace);
                    let mut said = lock(&self.said);
                    if said.get(&key) != Some(&problem) {
                        tracing::warn!(
                            namespace = set.namespace,
                            instance = name,
                            problem,
                            "VM delivery: a VM made before Servers does not read; it is not taken over"
                        );
                        said.insert(key, problem);
                    }
                    continue;
                }
            };
            let uid = match self.server_for(set, scope, &name).await? {
                ServerFor::Has(uid) => uid,
                ServerFor::Not => continue,
                ServerFor::Made(mut made) => {
                    if let Some(status) = status {
                        made.data["status"] = pruned(status);
                        made.data["status"]["writer"] = json!(writer(&self.leadership));
                        *made = servers_api
                            .replace_status(&name, &PostParams::default(), &made)
                            .await?;
                    }
                    if vm.metadata.deletion_timestamp.is_some() {
                        servers_api.delete(&name, &DeleteParams::default()).await?;
                    }
                    made.metadata.uid.unwrap_or_default()
                }
            };
            let mut owners: Vec<Value> = vm
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|o| !(o.controller == Some(true) && o.kind == "VMReplicaSet"))
                .map(|o| serde_json::to_value(o).unwrap_or_default())
                .collect();
            owners.push(super::resources::server_owner(&name, &uid));
            let mut pointer: serde_json::Map<String, Value> = instance::LEGACY
                .iter()
                .map(|key| (key.to_string(), Value::Null))
                .collect();
            pointer.insert(instance::SERVER.into(), json!(name));
            self.patch_metadata(
                &machines(),
                &set.namespace,
                &name,
                json!({
                    "resourceVersion": vm.metadata.resource_version,
                    "ownerReferences": owners,
                    "annotations": pointer,
                }),
            )
            .await?;
            tracing::info!(
                namespace = set.namespace,
                set = set.name,
                instance = name,
                "VM delivery: a VM made before Servers is taken over by its Server"
            );
        }
        Ok(())
    }

    /// The Server of the set's that a VM named `name` is to have: the one
    /// the store shows, or one made now for it; none when another set's
    /// goes by that name, or when one was made meanwhile (taken once the
    /// store has it).
    async fn server_for(
        &self,
        set: &VmReplicaSet,
        scope: &Scope,
        name: &str,
    ) -> Result<ServerFor, Failed> {
        match scope.servers.get(&set.namespace, name)? {
            Some(server) if set_of(&server) == Some(set.name.as_str()) => Ok(ServerFor::Has(
                server.metadata.uid.clone().unwrap_or_default(),
            )),
            Some(_) => Ok(ServerFor::Not),
            None => {
                let server: DynamicObject =
                    serde_json::from_value(set.server(name, &set.spec.environment, None))
                        .map_err(kube::Error::SerdeError)?;
                match Api::<DynamicObject>::namespaced_with(
                    self.writer.clone(),
                    &set.namespace,
                    &servers(),
                )
                .create(&PostParams::default(), &server)
                .await
                {
                    Ok(made) => Ok(ServerFor::Made(Box::new(made))),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(ServerFor::Not),
                    Err(error) => Err(error.into()),
                }
            }
        }
    }

    /// Make the VirtualMachine of the Server `name` (of UID `uid`).
    async fn make_machine(
        &self,
        set: &VmReplicaSet,
        name: &str,
        uid: &str,
    ) -> Result<(), kube::Error> {
        let machine: DynamicObject =
            serde_json::from_value(set.machine(name, uid)).map_err(kube::Error::SerdeError)?;
        match Api::<DynamicObject>::namespaced_with(
            self.writer.clone(),
            &set.namespace,
            &machines(),
        )
        .create(&PostParams::default(), &machine)
        .await
        {
            Ok(_) => Ok(()),
            // Made already: the store has not seen it yet.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The instances of a set, as the stores have them: each Server with
    /// what it records, its machine, the node its instance runs on (an
    /// instance whose node is not known is not judged on a healthy one)
    /// and what people forced.
    fn read_machines(
        &self,
        set: &VmReplicaSet,
        scope: &Scope,
        health: &BTreeMap<String, Health>,
    ) -> Result<Vec<Read>, Unread> {
        let term = self.leadership.acting().map(|t| t.term);
        let listed = scope.servers.filtered(|server| {
            server.metadata.namespace.as_deref() == Some(set.namespace.as_str())
                && set_of(server) == Some(set.name.as_str())
        })?;
        scope.machines.check()?;
        scope.instances.check()?;
        let node_of = |name: &str| -> Option<String> {
            let vmi = scope
                .instances
                .store
                .get(&scope.instances.reference(&set.namespace, name))?;
            Some(vmi.data["status"]["nodeName"].as_str()?.to_string())
        };
        Ok(listed
            .iter()
            .map(|server| {
                let value = serde_json::to_value(&**server).unwrap_or_default();
                let name = server.metadata.name.clone().unwrap_or_default();
                let recorded = Recorded::read(&value);
                let vm = scope
                    .machines
                    .store
                    .get(&scope.machines.reference(&set.namespace, &name));
                let vm_value = vm
                    .as_ref()
                    .map(|vm| serde_json::to_value(&**vm).unwrap_or_default());
                let machine = vm_value.as_ref().map_or(
                    crate::wit::lifecycle::Machine::Starting,
                    instance::machine_of,
                );
                let node = vm.as_ref().and_then(|_| node_of(&name));
                let node_seen = node.as_ref().and_then(|n| health.get(n)).copied();
                let at_rest = recorded.clone().unwrap_or_default();
                let forced = forced(&at_rest);
                // A person's `offline` holds while it is in force: the
                // policy sees the instance taken offline, as one the set
                // names, and no rule brings it back.
                let held_offline = at_rest.held_offline();
                let lost =
                    set.lost == super::resources::Lost::ScaleDown
                        && server.metadata.annotations.as_ref().is_some_and(|a| {
                            a.contains_key(crate::observe::resources::kubevirt::LOST)
                        });
                let named_offline = set.offline.contains(&name) || lost;
                let deleted = server.metadata.deletion_timestamp.is_some();
                let machine_read = vm.as_ref().map(|vm| MachineRead {
                    version: vm.metadata.resource_version.clone(),
                    finalizers: vm.metadata.finalizers.clone().unwrap_or_default(),
                    deleted: vm.metadata.deletion_timestamp.is_some(),
                    printable: vm.data["status"]["printableStatus"]
                        .as_str()
                        .map(String::from),
                });
                let state = InstanceState {
                    namespace: set.namespace.clone(),
                    name: name.clone(),
                    set: set.name.clone(),
                    stage: at_rest.stage,
                    since: at_rest.since.unwrap_or(0),
                    machine,
                    node: node.clone(),
                    node_health: node_health(node_seen),
                    environment: at_rest.environment.clone(),
                    code: at_rest.code.clone(),
                    lists: at_rest.all_lists(),
                    // Its Server deleted, or its machine deleted by hand
                    // (not one let go of as lost).
                    deleting: deleted
                        || (!lost && machine_read.as_ref().is_some_and(|m| m.deleted)),
                    take_offline: named_offline || held_offline,
                    forced: forced.as_ref().map(|f| f.stage),
                };
                let stale = {
                    let mut written = lock(&self.written);
                    let key = format!("{}/{name}", set.namespace);
                    let stale = written.get(&key).is_some_and(|replaced| {
                        server
                            .metadata
                            .resource_version
                            .as_ref()
                            .is_some_and(|v| replaced.contains(v))
                    });
                    if !stale {
                        written.remove(&key);
                    }
                    stale
                };
                let overwritten = (!stale)
                    .then(|| {
                        let ours = lock(&self.ours);
                        let (written_in, ours) = ours.get(&format!("{}/{name}", set.namespace))?;
                        let present = serde_json::to_vec(&server.data["status"]).ok()?;
                        (Some(*written_in) == term && **ours != *present)
                            .then(|| serde_json::from_slice::<Value>(ours).ok())
                            .flatten()
                    })
                    .flatten()
                    .map(Arc::new);
                Read {
                    name,
                    overwritten,
                    named_offline,
                    lost,
                    uid: server.metadata.uid.clone().unwrap_or_default(),
                    resource_version: server.metadata.resource_version.clone().unwrap_or_default(),
                    generation: server.metadata.generation,
                    stale,
                    recorded,
                    server: Arc::clone(server),
                    state,
                    created: server
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.as_millisecond())
                        .unwrap_or(0),
                    finalizers: server.metadata.finalizers.clone().unwrap_or_default(),
                    deleted,
                    machine: machine_read,
                    node_ready: matches!(node_seen, None | Some(Health::Healthy)),
                    forced,
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
                .filter(|l| l.outcome == ListOutcome::Failed)
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
            .is_some_and(|l| l.outcome == ListOutcome::Running);
        // A forced stage is entered even while a list runs — once the step
        // whose hook is asked has answered, so that its answer is recorded
        // and the list ends with an outcome.
        let under_way = recorded.list.as_ref().is_some_and(|l| {
            self.calls
                .under_way(&l.key(&set.namespace, &machine.name, &machine.uid))
        });
        if running && (machine.state.forced.is_none() || under_way) {
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
                        "before its last step, the target is now {} with code {code}",
                        model::versions(&target.environment)
                    ),
                    None => format!(
                        "before its last step, the target is now {}",
                        model::versions(&target.environment)
                    ),
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
                key: key.clone(),
                attempt: list.attempt + 1,
                leader: term.clone(),
                instance: InstanceRef {
                    namespace: set.namespace.clone(),
                    name: machine.name.clone(),
                    set: set.name.clone(),
                    uid: machine.uid.clone(),
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
            if list.outcome != ListOutcome::Running {
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "finished", "list": list.number,
                    "stage": list.stage.wit_name(), "outcome": list.outcome.name(),
                    "task": list.entry().task, "message": list.message}),
                );
            }
            // The answer goes once it is recorded; a record not taken takes
            // it again.
            let recorded = self.moved_on(set, machine, recorded, term).await;
            if recorded.is_ok() {
                self.calls.taken(&key);
            }
            return recorded;
        }
        if let Some(forced) = &machine.forced {
            // A deleted instance runs its clean-up, whatever is forced.
            if let Some(force) = forced
                .force
                .as_ref()
                .filter(|f| machine.state.deleting && f.stage != Stage::Deleting)
            {
                let why =
                    "the instance is deleted: its clean-up runs, and no other stage is entered";
                recorded.take_force(force, Some(why), at);
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "force-refused", "stage": force.stage.wit_name(), "by": force.request.by, "why": why}),
                );
                return self.moved_on(set, machine, recorded, term).await;
            }
            // The list in progress ends: a person's stage supersedes it.
            if let Some(list) = recorded
                .list
                .as_mut()
                .filter(|l| l.outcome == ListOutcome::Running)
            {
                list.supersede(
                    &format!("{} set the stage {}", forced.who, forced.stage.wit_name()),
                    at,
                );
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "superseded", "list": list.number,
                    "task": list.current().map(|t| t.name.clone()), "why": list.message}),
                );
            }
        }
        // A finished clean-up lets the machine go.
        if machine.state.deleting
            && recorded.stage == Some(Stage::Deleting)
            && recorded
                .list
                .as_ref()
                .is_some_and(|l| l.outcome == ListOutcome::Succeeded)
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
            // The policy refuses a person's stage: the request is taken,
            // refused with the policy's words.
            if let Some((forced, force)) = machine
                .forced
                .as_ref()
                .and_then(|f| Some((f, f.force.as_ref()?)))
            {
                let why = format!(
                    "the lifecycle policy does not enter it: {}",
                    decision.reason()
                );
                recorded.take_force(force, Some(&why), at);
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "force-refused", "stage": forced.stage.wit_name(), "by": force.request.by, "why": why}),
                );
                return self.moved_on(set, machine, recorded, term).await;
            }
            // At rest: its status follows what is observed of its machine
            // (its node, once it runs again on one).
            return self.record(set, machine, &recorded).await;
        };
        let force = machine.forced.as_ref().and_then(|f| f.force.clone());
        if let Some(forced) = &machine.forced {
            let who = &forced.who;
            list.reason = format!("{} ({who})", list.reason);
            self.tell(
                set,
                json!({"instance": machine.name, "event": "forced", "stage": list.stage.wit_name(), "by": who}),
            );
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
        list.node = machine.state.node.clone();
        // Back from offline: said to be repaired only when it moved.
        if recorded.stage == Some(Stage::Offline) && list.stage != Stage::Offline {
            let before = recorded.list.as_ref().and_then(|l| l.node.as_deref());
            match (before, list.node.as_deref()) {
                (Some(was), Some(is)) if was != is => {
                    list.reason = format!("{} (repaired: moved from {was} to {is})", list.reason);
                }
                (Some(was), Some(_)) => {
                    list.reason = format!("{} (its node {was} is back)", list.reason);
                }
                _ => {}
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
        let done = list.outcome != ListOutcome::Running;
        recorded.enter(list, at);
        if let Some(force) = &force {
            recorded.take_force(force, None, at);
        }
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
            .is_some_and(|l| l.outcome != ListOutcome::Running);
        recorded.lock = (!done).then(|| Lock {
            holder: term.holder.clone(),
            term: term.term,
        });
        self.record(set, machine, &recorded).await
    }

    /// Write what an instance records in its Server's status, on the
    /// version it was read at: a compare-and-swap, which a change since
    /// fails.
    async fn record(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        recorded: &Recorded,
    ) -> Result<(), kube::Error> {
        let observed = instance::Observed {
            machine: machine.machine.as_ref().and_then(|m| m.printable.clone()),
            // What the store shows of its machine; none while it shows none.
            machine_state: machine.machine.as_ref().map(|_| machine.state.machine),
            node: machine.state.node.clone(),
            ready: rollout::in_service(recorded.stage)
                && machine.state.machine == crate::wit::lifecycle::Machine::Running
                && machine.state.node_health == NodeHealth::Healthy
                && machine.node_ready,
            step_key: recorded
                .list
                .as_ref()
                .map(|l| l.key(&set.namespace, &machine.name, &machine.uid)),
            generation: machine.generation,
            writer: writer(&self.leadership),
        };
        let previous = &machine.server.data["status"];
        let conditions = super::resources::server_conditions(
            recorded,
            (
                machine.state.machine == crate::wit::lifecycle::Machine::Running,
                machine.state.node_health == NodeHealth::Healthy && machine.node_ready,
            ),
            machine.generation.unwrap_or(0),
            now(),
        );
        let mut status = pruned(recorded.status(&observed, &conditions));
        super::resources::keep_transitions(previous, &mut status);
        // Written only when something but its writer changed: a new
        // leader does not write every Server again to sign it.
        if same_but_writer(previous, &status) {
            return Ok(());
        }
        let mut server = (*machine.server).clone();
        server.data["status"] = status;
        let written =
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), &set.namespace, &servers())
                .replace_status(&machine.name, &status_params(), &server)
                .await?;
        self.wrote(&set.namespace, &machine.name, &machine.resource_version);
        self.keep_ours(&set.namespace, &machine.name, &written);
        Ok(())
    }

    /// Put back each status someone other than this leader wrote since it
    /// wrote its own (a status is its controller's alone: a person forces a
    /// stage through the Server's spec), saying so in a warning and an
    /// Event; whether any was.
    async fn put_back(&self, set: &VmReplicaSet, read: &[Read]) -> Result<bool, kube::Error> {
        let mut any = false;
        for machine in read {
            let Some(ours) = &machine.overwritten else {
                continue;
            };
            let present = &machine.server.data["status"];
            let by = status_writer(&machine.server)
                .unwrap_or_else(|| "someone other than its controller".into());
            let changed = changes(ours, present);
            let mut server = (*machine.server).clone();
            server.data["status"] = (**ours).clone();
            let written = Api::<DynamicObject>::namespaced_with(
                self.writer.clone(),
                &set.namespace,
                &servers(),
            )
            .replace_status(&machine.name, &status_params(), &server)
            .await?;
            self.wrote(&set.namespace, &machine.name, &machine.resource_version);
            self.keep_ours(&set.namespace, &machine.name, &written);
            tracing::warn!(
                namespace = set.namespace,
                instance = machine.name,
                by,
                changed,
                "VM delivery: a Server's status written by someone else is put back"
            );
            self.tell(
                set,
                json!({"instance": machine.name, "event": "status-restored", "by": by, "changed": changed}),
            );
            any = true;
        }
        Ok(any)
    }

    /// Keep the status of a Server this leader wrote, as the API server
    /// took it.
    fn keep_ours(&self, namespace: &str, name: &str, written: &DynamicObject) {
        let Some(term) = self.leadership.acting().map(|t| t.term) else {
            return;
        };
        let Ok(text) = serde_json::to_vec(&written.data["status"]) else {
            return;
        };
        lock(&self.ours).insert(format!("{namespace}/{name}"), (term, text.into()));
    }

    /// Keep that a write replaced the Server `name` at `version`.
    fn wrote(&self, namespace: &str, name: &str, version: &str) {
        lock(&self.written)
            .entry(format!("{namespace}/{name}"))
            .or_default()
            .push(version.to_string());
    }

    /// Let an instance's machine go: deleted, and its clean-up finalizer
    /// released (the instance's clean-up ran, or it was lost and drained).
    async fn let_machine_go(&self, set: &VmReplicaSet, machine: &Read) -> Result<(), kube::Error> {
        let Some(vm) = &machine.machine else {
            return Ok(());
        };
        self.let_go_of(
            &machines(),
            (&set.namespace, &machine.name, vm.version.as_deref()),
            (vm.deleted, &vm.finalizers),
        )
        .await
    }

    /// Delete an object (unless it is being deleted) and release its
    /// clean-up finalizer (when it holds it), on the version read or the
    /// one the deletion gave (a compare-and-swap: finalizers someone added
    /// meanwhile are not dropped); one gone already is done.
    async fn let_go_of(
        &self,
        resource: &ApiResource,
        (namespace, name, version): (&str, &str, Option<&str>),
        (deleted, finalizers): (bool, &[String]),
    ) -> Result<(), kube::Error> {
        let mut version = version.map(String::from);
        if !deleted {
            let api =
                Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, resource);
            match api.delete(name, &DeleteParams::default()).await {
                // Held by a finalizer: going, at this version.
                Ok(answer) => match answer.left() {
                    Some(going) => version = going.metadata.resource_version,
                    None => return Ok(()),
                },
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                Err(error) => return Err(error),
            }
        }
        if finalizers.iter().any(|f| f == instance::FINALIZER) {
            gone_is_done(
                self.patch_metadata(
                    resource,
                    namespace,
                    name,
                    json!({ "resourceVersion": version, "finalizers": without(finalizers) }),
                )
                .await,
            )?;
        }
        Ok(())
    }

    /// Release the clean-up finalizers: the machine goes, then its Server.
    async fn release(&self, set: &VmReplicaSet, machine: &Read) -> Result<(), kube::Error> {
        tracing::info!(
            namespace = set.namespace,
            instance = machine.name,
            "VM delivery: cleaned up; the machine and its Server go"
        );
        self.let_machine_go(set, machine).await?;
        self.let_go_of(
            &servers(),
            (
                &set.namespace,
                &machine.name,
                Some(machine.resource_version.as_str()),
            ),
            (machine.deleted, &machine.finalizers),
        )
        .await?;
        // Gone: nothing of it to wait for.
        let key = format!("{}/{}", set.namespace, machine.name);
        lock(&self.written).remove(&key);
        lock(&self.ours).remove(&key);
        Ok(())
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

/// The Server a VM is to have.
enum ServerFor {
    /// The store shows it, of this UID.
    Has(String),
    /// Made now.
    Made(Box<DynamicObject>),
    /// None of this set's.
    Not,
}

/// A status written: the term it was written in, and the status as JSON
/// text.
type Written = (u64, Box<[u8]>);

/// The leader that writes a Server's status, as the status says it
/// (`replica/term`): the chart's admission policy lets a status be written
/// only in the term the Lease holds, so that a deposed leader's late write
/// is refused by the API server itself.
fn writer(leadership: &Leadership) -> Option<String> {
    leadership
        .acting()
        .map(|term| format!("{}/{}", term.holder, term.term))
}

/// Whether two statuses differ in nothing but their writer.
fn same_but_writer(a: &Value, b: &Value) -> bool {
    let fields = |status: &Value| {
        status
            .as_object()
            .map(|o| o.iter().filter(|(k, _)| *k != "writer").count())
    };
    match (a.as_object(), b.as_object()) {
        (Some(a_fields), Some(b_fields)) => {
            fields(a) == fields(b)
                && a_fields
                    .iter()
                    .filter(|(k, _)| *k != "writer")
                    .all(|(k, v)| b_fields.get(k) == Some(v))
        }
        _ => a == b,
    }
}

/// How the Servers' statuses are written: by their controller's field
/// manager.
fn status_params() -> PostParams {
    PostParams {
        field_manager: Some(STATUS_MANAGER.into()),
        ..PostParams::default()
    }
}

/// Who last wrote a Server's status other than its controller, as the API
/// server's field managers say (none where it keeps none).
fn status_writer(server: &DynamicObject) -> Option<String> {
    server
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .filter(|f| f.manager.as_deref() != Some(STATUS_MANAGER))
        .max_by_key(|f| f.time.as_ref().map(|t| t.0))
        .and_then(|f| f.manager.as_deref())
        .map(crate::text::printable)
}

/// What differs between two statuses, field by field, in words (a few
/// fields; texts shortened).
fn changes(ours: &Value, theirs: &Value) -> String {
    let short = |value: &Value| {
        let text = match value {
            Value::Null => "nothing".to_string(),
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let text = crate::text::printable(&text);
        match text.chars().count() > 40 {
            true => format!("{}…", text.chars().take(40).collect::<String>()),
            false => text,
        }
    };
    let keys: std::collections::BTreeSet<&String> = ours
        .as_object()
        .into_iter()
        .chain(theirs.as_object())
        .flat_map(|o| o.keys())
        .collect();
    let changed: Vec<String> = keys
        .into_iter()
        .filter(|k| ours.get(*k) != theirs.get(*k))
        .map(|k| {
            let (was, is) = (
                ours.get(k).unwrap_or(&Value::Null),
                theirs.get(k).unwrap_or(&Value::Null),
            );
            match (was, is) {
                (Value::Object(_) | Value::Array(_), _)
                | (_, Value::Object(_) | Value::Array(_)) => {
                    format!("{k} changed")
                }
                _ => format!("{k} {} → {}", short(was), short(is)),
            }
        })
        .collect();
    match changed.len() {
        0 => "nothing it reads changed".into(),
        n if n > 6 => format!("{}, and {} more", changed[..6].join(", "), n - 6),
        _ => changed.join(", "),
    }
}

/// Finalizers without the clean-up's.
fn without(finalizers: &[String]) -> Vec<String> {
    finalizers
        .iter()
        .filter(|f| f.as_str() != instance::FINALIZER)
        .cloned()
        .collect()
}

/// A deletion or a write of an object that is gone already: done.
fn gone_is_done(result: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        other => other,
    }
}

/// Which instance a set lets go of first when it has too many: one out of
/// service for good before any other (lost, failed, out of contact, not
/// yet made); among the rest — in service, or on their way there — the
/// newest (a surge made for a change goes first, as the docs say).
fn rank_to_remove(machine: &Read) -> (u8, Timestamp, String) {
    let badness = match machine.state.stage {
        Some(Stage::Offline) => 4,
        Some(Stage::Failed) => 3,
        Some(Stage::Unknown) => 2,
        None | Some(Stage::Requested) => 1,
        Some(
            Stage::Initializing
            | Stage::Deploying
            | Stage::Ready
            | Stage::GrayRelease
            | Stage::Serving
            | Stage::Deleting,
        ) => 0,
    };
    (badness, machine.created, machine.name.clone())
}

/// Whether an instance is in service with no list running, its machine
/// running on a Ready node.
fn at_rest_in_service(machine: &Read) -> bool {
    rollout::in_service(machine.state.stage)
        && machine.state.machine == crate::wit::lifecycle::Machine::Running
        && machine.node_ready
        && machine.recorded.as_ref().is_ok_and(|r| {
            r.list
                .as_ref()
                .is_none_or(|l| l.outcome != ListOutcome::Running)
        })
}

/// What one reconcile of a set found, for the counts and for when it is
/// looked at again.
#[derive(Debug, Default)]
struct Found {
    /// Each instance's stage.
    stages: Vec<String>,
    /// The deployment's phase, when one targets the set.
    phase: Option<String>,
    /// A list runs, the rollout moves or a machine was made or let go:
    /// looked at again soon.
    moving: bool,
    /// The set is gone: not looked at again.
    gone: bool,
}

impl Found {
    /// A reconcile that changed what the stores will show: looked at again
    /// soon.
    fn moving() -> Self {
        Self {
            moving: true,
            ..Self::default()
        }
    }
}

/// The clean-ups of a set's deleted instances: those that failed, in
/// words that name the instance and the step (a person retries or skips
/// it), and those under way, with the step each is at.
fn cleanups(read: &[Read]) -> (Vec<String>, Vec<String>) {
    let mut failed = Vec::new();
    let mut running = Vec::new();
    for machine in read.iter().filter(|m| m.state.deleting) {
        let list = machine
            .recorded
            .as_ref()
            .ok()
            .and_then(|r| r.list.as_ref())
            .filter(|l| l.stage == Stage::Deleting);
        let Some(list) = list else {
            running.push(format!("{} (its clean-up starts)", machine.name));
            continue;
        };
        let task = list.entry().task.unwrap_or_default();
        match list.outcome {
            ListOutcome::Failed => failed.push(format!(
                "the clean-up of {} failed at {task}: {} (a person retries or skips the step)",
                machine.name,
                crate::text::printable(&list.message)
            )),
            ListOutcome::Running => running.push(format!(
                "{} at {task} (attempt {})",
                machine.name,
                list.attempt + 1
            )),
            _ => {}
        }
    }
    (failed, running)
}

/// Each machine's stage, for the counts.
fn stages(read: &[Read]) -> Vec<String> {
    read.iter()
        .map(|m| m.state.stage.map_or("none", |s| s.wit_name()).to_string())
        .collect()
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

/// Which watched resource changed.
#[derive(Debug, Clone, Copy)]
enum Which {
    Set,
    Deployment,
    Server,
    Machine,
    Instance,
}

/// A change, as the stores tell it: the object applied or deleted, or
/// none for a new list of every object.
type Changed = (Which, Option<DynamicObject>);

/// The resources of one namespace (or of all), watched.
struct Scope {
    /// The namespace; all for `None`.
    namespace: Option<String>,
    sets: Watched,
    deployments: Watched,
    servers: Watched,
    machines: Watched,
    instances: Watched,
}

impl Scope {
    fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == namespace)
    }

    /// The deployments that target the set `set` of `namespace`, the one
    /// that delivers first: of two, the older (and of two made in the
    /// same second, the one delivering already).
    fn deployments_of(&self, namespace: &str, set: &str) -> Result<Vec<Value>, Unread> {
        let mut found: Vec<Value> = self
            .deployments
            .filtered(|d| {
                d.metadata.namespace.as_deref() == Some(namespace)
                    && d.data["spec"]["replicaSet"] == set
            })?
            .iter()
            .map(|d| serde_json::to_value(&**d).unwrap_or_default())
            .collect();
        found.sort_by_key(|d| {
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
        Ok(found)
    }
}

/// Where a change goes: to the reconcile of each object it concerns.
struct Route {
    sets: Sender<ObjectRef<DynamicObject>>,
    deployments: Sender<ObjectRef<DynamicObject>>,
    servers: Sender<ObjectRef<DynamicObject>>,
    machines: Sender<ObjectRef<DynamicObject>>,
}

impl Route {
    fn changed(&self, scope: &Scope, which: Which, object: Option<&DynamicObject>) {
        let Some(object) = object else {
            // A new list: everything it may concern.
            let every = |watched: &Watched, to: &Sender<ObjectRef<DynamicObject>>| {
                for object in watched.store.state() {
                    let _ = to.send(reference_of(watched, &object));
                }
            };
            every(&scope.sets, &self.sets);
            every(&scope.deployments, &self.deployments);
            every(&scope.servers, &self.servers);
            every(&scope.machines, &self.machines);
            return;
        };
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let name = object.metadata.name.as_deref().unwrap_or_default();
        match which {
            Which::Set => {
                self.set(scope, namespace, name);
                // Its Servers, which may have lost their set.
                for server in scope.servers.store.state_filter(|m| {
                    m.metadata.namespace.as_deref() == Some(namespace) && set_of(m) == Some(name)
                }) {
                    let _ = self.servers.send(reference_of(&scope.servers, &server));
                }
            }
            // Its set, and every deployment that targets it (itself among
            // them), whose standing it may change.
            Which::Deployment => {
                let set = object.data["spec"]["replicaSet"]
                    .as_str()
                    .unwrap_or_default();
                self.set(scope, namespace, set);
            }
            Which::Server => {
                let _ = self.servers.send(reference_of(&scope.servers, object));
                // Its machine, which may have lost its Server.
                let _ = self
                    .machines
                    .send(scope.machines.reference(namespace, name));
                if let Some(set) = set_of(object) {
                    let _ = self.sets.send(scope.sets.reference(namespace, set));
                }
            }
            Which::Machine => {
                let _ = self.machines.send(reference_of(&scope.machines, object));
                match set_of(object) {
                    Some(set) => {
                        let _ = self.sets.send(scope.sets.reference(namespace, set));
                    }
                    // One no set has yet: the sets that may adopt it.
                    None => {
                        for set in scope
                            .sets
                            .store
                            .state_filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
                        {
                            let _ = self.sets.send(reference_of(&scope.sets, &set));
                        }
                    }
                }
            }
            Which::Instance => {
                // Its machine's set.
                if let Some(machine) = scope
                    .machines
                    .store
                    .get(&scope.machines.reference(namespace, name))
                    && let Some(set) = set_of(&machine)
                {
                    let _ = self.sets.send(scope.sets.reference(namespace, set));
                }
            }
        }
    }

    /// The reconcile of the set `name` of `namespace`, and of the
    /// deployments that target it.
    fn set(&self, scope: &Scope, namespace: &str, name: &str) {
        let _ = self.sets.send(scope.sets.reference(namespace, name));
        for deployment in scope.deployments.store.state_filter(|d| {
            d.metadata.namespace.as_deref() == Some(namespace)
                && d.data["spec"]["replicaSet"] == name
        }) {
            let _ = self
                .deployments
                .send(reference_of(&scope.deployments, &deployment));
        }
    }
}

type Sender<T> = tokio::sync::mpsc::UnboundedSender<T>;

/// The set a machine belongs to, by its label.
fn set_of(machine: &DynamicObject) -> Option<&str> {
    machine
        .metadata
        .labels
        .as_ref()?
        .get(instance::SET_LABEL)
        .map(String::as_str)
}

/// A reference to a watched object.
fn reference_of(watched: &Watched, object: &DynamicObject) -> ObjectRef<DynamicObject> {
    watched.reference(
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// A controller over a watched store, reconciling the objects it is sent.
fn over(
    watched: &Watched,
    triggers: tokio::sync::mpsc::UnboundedReceiver<ObjectRef<DynamicObject>>,
) -> kube::runtime::Controller<DynamicObject> {
    kube::runtime::Controller::for_stream_with(
        futures_util::stream::pending(),
        watched.store.clone(),
        watched.resource.clone(),
    )
    .reconcile_on(tokio_stream::wrappers::UnboundedReceiverStream::new(
        triggers,
    ))
}

/// What a reconcile works with.
struct Context {
    controller: Arc<Controller>,
    scope: Arc<Scope>,
}

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
enum Failed {
    /// What it governs could not be read: held.
    #[error(transparent)]
    Unread(#[from] Unread),
    /// The API server did not take a write, or was not reached.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// How long a replica that does not act waits to look again (it is woken
/// when it takes the lead).
const NOT_ACTING: Duration = Duration::from_secs(5);

/// The longest a reconcile that keeps failing waits to try again.
const AFTER_FAILURE: Duration = Duration::from_secs(120);

/// How long a set at rest waits to be looked at again, when nothing it
/// depends on changes before.
const AT_REST: Duration = Duration::from_secs(30);

async fn reconcile_set(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
) -> Result<Action, Failed> {
    let Context { controller, scope } = &*context;
    let Some(term) = controller.leadership.acting() else {
        return Ok(Action::requeue(NOT_ACTING));
    };
    let key = key_of(&object);
    let found = controller.reconcile_set(&object, scope, &term).await?;
    let again = match (found.moving, found.gone) {
        (_, true) => {
            lock(&controller.counts.by_set).remove(&key);
            return Ok(Action::await_change());
        }
        (true, false) => controller.every,
        (false, false) => AT_REST,
    };
    lock(&controller.counts.by_set).insert(key, found);
    Ok(Action::requeue(again))
}

/// A deployment that cannot be carried out says why in its status: one
/// that does not read, that names no set of its namespace, or whose set
/// another deployment targets already. The status of one that is carried
/// out is its set's reconcile's to write.
async fn reconcile_deployment(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
) -> Result<Action, Failed> {
    let Context { controller, scope } = &*context;
    if controller.leadership.acting().is_none() {
        return Ok(Action::requeue(NOT_ACTING));
    }
    let d = serde_json::to_value(&*object).unwrap_or_default();
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
    let targeting = scope.deployments_of(namespace, set)?;
    let first = targeting.first().map(|f| {
        f["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    let problem = match VmDeployment::read(&d) {
        Err(problem) => problem,
        Ok(_) if scope.sets.get(namespace, set)?.is_none() => {
            // The store may be behind the API server (a set made just
            // before its deployment): a set not in it is looked up before
            // the deployment is said to name none. Found, its own
            // reconcile writes the deployment's status.
            let api = Api::<DynamicObject>::namespaced_with(
                controller.reader.clone(),
                namespace,
                &sets(),
            );
            if api.get_opt(set).await?.is_some() {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            format!("no VMReplicaSet {set} in namespace {namespace}")
        }
        Ok(_) if first.as_deref() != Some(name) => format!(
            "VMDeployment {} targets VMReplicaSet {set} already",
            first.unwrap_or_default()
        ),
        Ok(_) => return Ok(Action::await_change()),
    };
    let status = super::resources::cannot_proceed(&d, &problem, now());
    controller
        .write_status(&deployments(), namespace, name, &d, status)
        .await?;
    Ok(Action::await_change())
}

/// A Server whose set is gone without letting go of it (deleted before
/// it held their clean-up, or its finalizer taken off by hand): being
/// deleted — by the garbage collector, or by hand — it is cleaned up and
/// let go. One not being deleted is left alone: the garbage collector
/// deletes what its set owned.
async fn reconcile_server(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
) -> Result<Action, Failed> {
    let Context { controller, scope } = &*context;
    let Some(term) = controller.leadership.acting() else {
        return Ok(Action::requeue(NOT_ACTING));
    };
    let held = object
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == instance::FINALIZER);
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let (Some(set), true, true) = (
        set_of(&object),
        held,
        object.metadata.deletion_timestamp.is_some(),
    ) else {
        return Ok(Action::await_change());
    };
    // A set not read is not a set gone.
    if scope.sets.get(&namespace, set)?.is_some() {
        return Ok(Action::await_change());
    }
    let owner = object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "VMReplicaSet")
        .map(|o| o.uid.clone())
        .unwrap_or_default();
    let set = VmReplicaSet::named(&namespace, set, &owner);
    let name = object.metadata.name.clone().unwrap_or_default();
    let going: Vec<Read> = controller
        .read_machines(&set, scope, &BTreeMap::new())?
        .into_iter()
        .filter(|m| m.name == name && m.state.deleting)
        .collect();
    controller.let_go(&set, going, &term, now()).await?;
    Ok(Action::requeue(controller.every))
}

/// A machine held by the clean-up finalizer whose Server is gone (its
/// clean-up ran, or the Server was taken away by hand): being deleted, it
/// is let go — there is no clean-up left to hold it for.
async fn reconcile_machine(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
) -> Result<Action, Failed> {
    let Context { controller, scope } = &*context;
    if controller.leadership.acting().is_none() {
        return Ok(Action::requeue(NOT_ACTING));
    }
    let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    let of_a_server = object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Server");
    // (One its set owns, made before Servers, is its set's to take over.)
    if !finalizers.iter().any(|f| f == instance::FINALIZER)
        || !of_a_server
        || object.metadata.deletion_timestamp.is_none()
        // A Server not read is not a Server gone.
        || scope.servers.get(&namespace, &name)?.is_some()
    {
        return Ok(Action::await_change());
    }
    let kept: Vec<&String> = finalizers
        .iter()
        .filter(|f| f.as_str() != instance::FINALIZER)
        .collect();
    gone_is_done(
        controller
            .patch_metadata(
                &machines(),
                &namespace,
                &name,
                json!({ "resourceVersion": object.metadata.resource_version, "finalizers": kept }),
            )
            .await,
    )?;
    tracing::info!(
        namespace,
        instance = name,
        "VM delivery: a machine whose Server is gone is let go"
    );
    Ok(Action::await_change())
}

/// A reconcile that failed is tried again in a while; a failure that
/// lasts is said once, and its end when it ends.
/// What a controller does with each reconcile's result: one that
/// succeeded clears its object's failures in a row.
fn settled<E>(
    which: Which,
    controller: &Arc<Controller>,
) -> impl FnMut(Result<(ObjectRef<DynamicObject>, Action), E>) -> std::future::Ready<()> + use<E> {
    let controller = Arc::clone(controller);
    move |result| {
        if let Ok((object, _)) = result {
            let key = format!(
                "{which:?}/{}/{}",
                object.namespace.as_deref().unwrap_or_default(),
                object.name
            );
            lock(&controller.failures).remove(&key);
        }
        std::future::ready(())
    }
}

/// How long a reconcile that failed `n` times in a row waits to try
/// again: a second, doubling, to [`AFTER_FAILURE`].
fn after_failures(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(16)).min(AFTER_FAILURE)
}

/// A reconcile of a `which` that failed is tried again after a wait that
/// grows with its failures in a row; a failure that lasts is said once,
/// and its end when it ends.
fn on_error(
    which: Which,
) -> impl Fn(Arc<DynamicObject>, &Failed, Arc<Context>) -> Action + Send + Sync + 'static {
    move |object, failed, context| failed_again(which, &object, failed, &context)
}

fn failed_again(
    which: Which,
    object: &DynamicObject,
    failed: &Failed,
    context: &Context,
) -> Action {
    let controller = &context.controller;
    // A write on a version the store showed before a change it has not
    // brought yet: looked at again once it has.
    if let Failed::Kube(kube::Error::Api(status)) = failed
        && status.code == 409
    {
        return Action::requeue(controller.every);
    }
    if matches!(failed, Failed::Unread(_)) {
        controller
            .counts
            .unread
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let key = format!("{which:?}/{}", key_of(object));
    let failures = {
        let mut all = lock(&controller.failures);
        let n = all.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let text = failed.to_string();
    let mut said = lock(&controller.said);
    if said.get(&key) != Some(&text) {
        tracing::warn!(
            object = key,
            error = text,
            "VM delivery: held; asking again in a while"
        );
        said.insert(key, text);
    }
    // What could not be read is looked at again within the time a watch
    // takes to be trusted again (a watch back with a new list wakes it at
    // once).
    let wait = match failed {
        Failed::Unread(_) => after_failures(failures).min(UNREAD_AT_MOST),
        Failed::Kube(_) => after_failures(failures),
    };
    Action::requeue(wait)
}

/// The longest a reconcile held by what could not be read waits to look
/// again.
const UNREAD_AT_MOST: Duration = Duration::from_secs(10);

/// `namespace/name` of an object.
fn key_of(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_that_differs_only_by_its_writer_is_not_written_again() {
        let by_a = json!({"stage": "serving", "writer": "a/1"});
        assert!(same_but_writer(
            &by_a,
            &json!({"stage": "serving", "writer": "b/2"})
        ));
        assert!(same_but_writer(&by_a, &json!({"stage": "serving"})));
        assert!(!same_but_writer(
            &by_a,
            &json!({"stage": "ready", "writer": "a/1"})
        ));
        assert!(!same_but_writer(
            &by_a,
            &json!({"stage": "serving", "ready": true})
        ));
    }

    #[test]
    fn a_reconcile_that_keeps_failing_waits_longer_each_time() {
        let waits: Vec<u64> = (1..=9).map(|n| after_failures(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 120, 120]);
        assert_eq!(after_failures(u32::MAX), AFTER_FAILURE);
    }

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
}
