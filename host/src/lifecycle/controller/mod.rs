//! The controllers of seed 002's delivery, on the leader only, in rooms,
//! in Cluster API's shape — each the only writer of what it owns:
//! what they watch and how a change reaches its reconcile ([`watching`]);
//! the set's controller — its instances made, adopted or let go of at the
//! safe rate, the rollout planned and each Server's target and leave to
//! leave service written in its spec, the set's and its deployment's
//! statuses summed up ([`sets`]); the writes of the set's objects
//! ([`machines`]); the Server's controller — each instance reconciles
//! itself on its spec's word: its machine made, its clean-up, a person's
//! request, the step's hook or the lifecycle policy ([`server`], one step
//! in [`steps`]); and one instance as read and its Server's status, which
//! its controller alone writes, put back when someone else wrote it
//! ([`servers`]). Every change to an instance is one write of its Server
//! on the version it was read at (a compare-and-swap: a conflict waits for
//! the next reconcile), and names the leader and term that hold its lock
//! and that write it. An instance's clean-up releases its finalizer last.

mod machines;
mod server;
mod servers;
mod sets;
mod steps;
mod watching;

use self::machines::*;
use self::server::*;
use self::servers::*;
use self::watching::*;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use super::crd::{ServerResource, ServerStatus};
use super::deployment::VmDeployment;
use super::hooks::{Asked, Calls, Hooks, InstanceRef, OwnedCall};
use super::instance::{self, Lock, Recorded};
use super::lists::{CurrentList, ListOutcome, LogEntry};
use super::model::{self, InstanceState, Next};
use super::resources::{
    VmReplicaSet, deployments, instance_name, instances, machines, servers, sets,
};
use super::rollout::{self, Member};
use super::watched::{Keep, Kept, STATUS_MANAGER, Unread, Watched, set_of};
use crate::events::{Events, Kind};
use crate::failover::Failover;
use crate::failover::model::Health;
use crate::leader::{Leadership, Term};
use crate::plugins::{Registry, World};
use crate::time::{Timestamp, now};
use crate::wit::WitName;
use crate::wit::lifecycle::{NodeHealth, Stage};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What a set's `Degraded` condition, the log and `/readyz` say while no
/// lifecycle policy is loaded.
pub const NO_POLICY: &str = "no lifecycle policy is loaded (a lifecycle.wasm in the plugin folder): no instance moves, none is cleaned up";

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
    /// Where the task log is kept, when it is.
    history: Option<Arc<crate::history::History>>,
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
    /// What the API server refused of each instance's (`namespace/name`)
    /// last step, said on its set until it no longer refuses.
    refused: std::sync::Mutex<BTreeMap<String, String>>,
    /// The generation of each Server (`namespace/name`) whose spec holds
    /// its set's plan as this leader's set controller made it: its own
    /// controller moves it on at that generation only (a target or a safe
    /// rate written by anyone else waits for the set's next plan).
    planned: std::sync::Mutex<BTreeMap<String, i64>>,
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
            history: None,
            said: std::sync::Mutex::default(),
            written: std::sync::Mutex::default(),
            made: std::sync::Mutex::default(),
            ours: std::sync::Mutex::default(),
            failures: std::sync::Mutex::default(),
            refused: std::sync::Mutex::default(),
            planned: std::sync::Mutex::default(),
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

    /// Keep each instance's finished lists whole in `history`'s task log
    /// (its Server sums up the last few).
    pub fn with_history(mut self, history: Arc<crate::history::History>) -> Self {
        self.history = (!history.is_off()).then_some(history);
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
    /// Its Servers planned anew without a write: their controllers look
    /// again.
    planned: Vec<String>,
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

/// `namespace/name` of an object.
fn key_of(object: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        object.namespace.as_deref().unwrap_or_default(),
        object.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_that_differs_only_by_its_writer_is_not_written_again() {
        let status = |stage: &str, writer: Option<&str>, ready: Option<bool>| ServerStatus {
            stage: Some(stage.into()),
            writer: writer.map(String::from),
            ready,
            ..ServerStatus::default()
        };
        let by_a = status("serving", Some("a/1"), None);
        assert!(same_but_writer(
            &by_a,
            &status("serving", Some("b/2"), None)
        ));
        assert!(same_but_writer(&by_a, &status("serving", None, None)));
        assert!(!same_but_writer(&by_a, &status("ready", Some("a/1"), None)));
        assert!(!same_but_writer(
            &by_a,
            &status("serving", Some("a/1"), Some(true))
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
