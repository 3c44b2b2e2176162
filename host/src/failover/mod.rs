//! Failover (seed 002): the failover policy judges every node from what the
//! host observes — readiness and heartbeat, taints, the pods on it and
//! whether they are stateful — with its own previous decisions and the
//! manual overrides; the host applies overrides over whatever it says, puts
//! its brakes on the actions it proposes ([`brakes`]), asks a person where
//! an action needs approval, and carries out what passes: in a dry run only
//! says what it would do; enforcing, cordons and uncordons nodes itself and
//! moves pods or scales workloads through task records, so the app's status
//! shows the work and task admission applies. Every change of a decision is
//! an audit record and an event; all of it survives a restart ([`journal`]).

pub mod brakes;
pub mod journal;
pub mod model;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify};

use crate::admission::Admission;
use crate::events::Events;
use crate::observe::cluster::Observed;
use crate::plugins::{Registry, World};
use crate::storage::StorageError;
use crate::tasks::Tasks;
use crate::tasks::model::NewTask;
use crate::time::{now, rfc3339};
use crate::wit::{failover as wit, types};
pub use brakes::FailoverConfig;
use brakes::{Candidate, Gauges};
use journal::{Journal, Memory};
use model::{
    Action, ActionReport, Approval, Attempt, Decided, Health, NodeReport, Outcome, Override,
    OverrideKind, Record, State,
};

/// Who failover's tasks are requested by.
pub const REQUESTER: &str = "verdict-failover";

/// The taint that tells Kubernetes a node is down for good, so that the
/// pods of stateful workloads may be released elsewhere.
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// What a failover request was refused for.
#[derive(Debug, thiserror::Error)]
pub enum FailoverError {
    /// Nothing by that name: the code says what (`no-such-node`,
    /// `no-such-action`, `no-override`).
    #[error("{1}")]
    NotFound(&'static str, String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("failover state: {0}")]
    Storage(#[from] StorageError),
}

/// The node actions failover asks of the cluster. Failover decides; the
/// one actuator, the executor ([`crate::executor::Nodes`]), writes them.
pub trait NodeActions: Send + Sync + std::fmt::Debug {
    /// Mark the node unschedulable.
    fn cordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), kube::Error>>;
    /// Mark the node schedulable again and take off the out-of-service
    /// taint ([`OUT_OF_SERVICE`]).
    fn uncordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// A boxed future of a trait object's method.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The latest evaluation, as served.
#[derive(Debug, Clone, Default)]
struct Latest {
    at: Option<types::Timestamp>,
    policy: Option<String>,
    error: Option<String>,
    reports: BTreeMap<String, NodeReport>,
    /// The counts the brakes were applied with.
    gauges: Gauges,
}

#[derive(Debug)]
struct Inner {
    memory: Memory,
    saved: Memory,
    latest: Latest,
    next_seq: u64,
    /// Records not yet saved.
    pending: Vec<Record>,
}

/// The failover side of the host.
pub struct Failover {
    config: FailoverConfig,
    registry: Arc<Registry>,
    observed: Arc<Observed>,
    tasks: Arc<Tasks>,
    admission: Admission,
    events: Arc<Events>,
    /// Who writes failover's node actions to the cluster (the executor).
    nodes: Arc<dyn NodeActions>,
    journal: Journal,
    inner: Mutex<Inner>,
    wake: Notify,
    /// The latest evaluation's counts, for `/metrics`.
    counts: std::sync::Mutex<Counts>,
}

/// How the latest evaluation came out, in numbers.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Nodes by health.
    pub health: BTreeMap<&'static str, usize>,
    /// Actions held back, by brake.
    pub held: BTreeMap<String, usize>,
    pub awaiting_approval: usize,
    pub storm: bool,
}

impl std::fmt::Debug for Failover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failover")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The longest override expiry that `expires-in-s` may ask for.
pub const MAX_OVERRIDE_S: u64 = 10 * 365 * 24 * 3600;

/// A request to override a node.
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OverrideRequest {
    pub kind: OverrideKind,
    /// Who decides: not blank.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub by: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub reason: Option<String>,
    /// When it stops applying, RFC 3339.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// Or: for how long, in seconds.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315_360_000)]
    pub expires_in_s: Option<u64>,
}

/// A person's approval of an action on a node.
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ApprovalRequest {
    /// The action's key, as `/v1/failover` shows it (`release:StatefulSet/shop/db`).
    pub action: String,
    /// Who decides: not blank.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub by: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub reason: Option<String>,
}

/// Who decides and why: a name that is not blank, and text of bounded
/// length (the task records' bounds).
fn decider(by: &str, reason: Option<&str>) -> Result<(), FailoverError> {
    use crate::tasks::model::{MAX_NAME, MAX_TEXT};
    if by.trim().is_empty() {
        return Err(FailoverError::Invalid("by must say who decides".into()));
    }
    for (field, text, max) in [("by", Some(by), MAX_NAME), ("reason", reason, MAX_TEXT)] {
        let length = text.map_or(0, |t| t.chars().count());
        if length > max {
            return Err(FailoverError::Invalid(format!(
                "{field} is {length} characters long; at most {max}"
            )));
        }
    }
    Ok(())
}

impl Failover {
    /// Open the journal in the data folder and take up where it was.
    pub fn open(
        config: FailoverConfig,
        data_dir: &std::path::Path,
        parts: (
            Arc<Registry>,
            Arc<Observed>,
            Arc<Tasks>,
            Admission,
            Arc<Events>,
        ),
        nodes: Arc<dyn NodeActions>,
    ) -> Result<Self, StorageError> {
        let (registry, observed, tasks, admission, events) = parts;
        let journal = Journal::open(&data_dir.join("failover.db"), config.history)?;
        let memory = journal.memory()?;
        let next_seq = journal.next_seq()?;
        Ok(Self {
            config,
            registry,
            observed,
            tasks,
            admission,
            events,
            nodes,
            journal,
            inner: Mutex::new(Inner {
                saved: memory.clone(),
                memory,
                latest: Latest::default(),
                next_seq,
                pending: Vec::new(),
            }),
            wake: Notify::new(),
            counts: std::sync::Mutex::default(),
        })
    }

    pub fn config(&self) -> &FailoverConfig {
        &self.config
    }

    /// Judge the nodes every `every-ms`, and at once after an override or
    /// approval, until aborted.
    pub async fn run(self: Arc<Self>) {
        let every = Duration::from_millis(self.config.every_ms.max(10));
        loop {
            self.evaluate(now()).await;
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// The policy's input: every node, the pods on the nodes that may need
    /// a decision about their pods (not ready, overridden, or not healthy
    /// last time), the previous decisions and the overrides in force.
    fn input(&self, memory: &Memory, at: types::Timestamp) -> wit::FailoverInput {
        let snapshot = self.observed.read();
        let nodes: Vec<types::Node> = snapshot.nodes.values().cloned().collect();
        let watched: Vec<&str> = nodes
            .iter()
            .filter(|n| {
                n.ready != types::ConditionStatus::True
                    || memory.overrides.contains_key(&n.name)
                    || memory
                        .previous
                        .get(&n.name)
                        .is_some_and(|d| d.health != Health::Healthy)
            })
            .map(|n| n.name.as_str())
            .collect();
        // With every node ready and nothing overridden (the usual case), no
        // pod needs looking at.
        let pods = if watched.is_empty() {
            None
        } else {
            Some(snapshot.pods.values())
        };
        let placements = pods
            .into_iter()
            .flatten()
            .filter(|p| p.deleting_since.is_none())
            .filter_map(|p| {
                let node = p.node.as_deref().filter(|n| watched.contains(n))?;
                let workload = p.owner.as_ref().and_then(|o| {
                    Some(wit::WorkloadRef {
                        kind: crate::observe::workload_kind_named(&o.kind)?,
                        namespace: p.namespace.clone(),
                        name: o.name.clone(),
                    })
                });
                let workload_replicas = workload.as_ref().and_then(|w| {
                    snapshot
                        .workload(w.kind, &w.namespace, &w.name)
                        .map(|w| w.desired_replicas)
                });
                Some(wit::Placement {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    node: node.to_string(),
                    stateful: p.owner.as_ref().is_some_and(|o| o.kind == "StatefulSet"),
                    workload,
                    workload_replicas,
                })
            })
            .collect();
        wit::FailoverInput {
            nodes,
            placements,
            previous: memory.previous.values().map(Decided::to_wit).collect(),
            overrides: memory
                .overrides
                .values()
                .filter(|o| o.active(at))
                .map(Override::to_wit)
                .collect(),
        }
    }

    /// Ask the failover policy, off the async threads.
    async fn decide(
        &self,
        input: Arc<wit::FailoverInput>,
        at: types::Timestamp,
    ) -> Result<(Vec<wit::NodeDecision>, String), String> {
        let registry = Arc::clone(&self.registry);
        tokio::task::spawn_blocking(move || {
            let slot = registry
                .policy(World::Failover)
                .map_err(|e| e.to_string())?;
            let answer = slot
                .call(|version| version.decide(&version.context(at), &input))
                .map_err(|e| e.to_string())?;
            let info = answer.version.info();
            Ok((answer.value, format!("{}@{}", info.name, info.version)))
        })
        .await
        .unwrap_or_else(|e| Err(format!("the failover call panicked: {e}")))
    }

    fn record(inner: &mut Inner, mut record: Record) {
        record.seq = inner.next_seq;
        inner.next_seq += 1;
        inner.pending.push(record);
    }

    /// One evaluation: decide, apply overrides and brakes, act, record.
    pub async fn evaluate(&self, at: types::Timestamp) {
        // Until the nodes are listed, an empty cluster is no news: judging
        // it would forget the previous decisions and their clocks.
        if !self.observed.health.synced("nodes") {
            return;
        }
        let mut inner = self.inner.lock().await;
        let inner = &mut *inner;

        // Overrides that ran out.
        let expired: Vec<Override> = inner
            .memory
            .overrides
            .values()
            .filter(|o| !o.active(at))
            .cloned()
            .collect();
        for o in expired {
            inner.memory.overrides.remove(&o.node);
            Self::record(
                inner,
                Record {
                    kind: "override-expired".into(),
                    reason: format!("the {:?} override by {} ran out", o.kind, o.by).to_lowercase(),
                    by: Some(o.by.clone()),
                    ..blank(&o.node, at)
                },
            );
        }

        let input = Arc::new(self.input(&inner.memory, at));
        let (nodes, placements) = (&input.nodes, &input.placements);
        let (decisions, policy) = match self.decide(Arc::clone(&input), at).await {
            Ok(answer) => answer,
            Err(error) => {
                if inner.latest.error.as_deref() != Some(error.as_str()) {
                    tracing::warn!(%error, "the failover policy could not decide; nothing is done until it can");
                    self.events.publish(
                        "failover",
                        None,
                        json!({"event": "policy-failed", "error": error}),
                    );
                }
                inner.latest.error = Some(error);
                inner.latest.at = Some(at);
                self.save(inner).await;
                return;
            }
        };
        inner.latest.error = None;
        inner.latest.policy = Some(policy);

        // Tasks under way: did they finish?
        for attempts in inner.memory.ledger.values_mut() {
            for attempt in attempts.values_mut() {
                self.follow_task(attempt, at);
            }
        }
        brakes::recent_flaps(&mut inner.memory.flaps, &self.config, at);
        let window_start = at - self.config.window_ms as types::Timestamp;
        inner.memory.started.retain(|t| *t >= window_start);

        // Nodes that are gone take what was kept about them along.
        let known = |name: &String| nodes.iter().any(|n| &n.name == name);
        inner.memory.ledger.retain(|name, _| known(name));
        inner.memory.approvals.retain(|name, _| known(name));
        inner.memory.flaps.retain(|name, _| known(name));
        let decided: Vec<Decided> = decisions.iter().map(Decided::from_wit).collect();
        let mut gauges = Gauges {
            now: at,
            nodes: nodes.len(),
            unhealthy: decided.iter().filter(|d| d.health.unhealthy()).count(),
            in_flight: inner
                .memory
                .ledger
                .values()
                .flat_map(BTreeMap::values)
                .filter(|a| a.outcome == Outcome::InFlight)
                .count(),
            started: inner.memory.started.len(),
            observing: self.observed.health.healthy("nodes"),
        };

        let mut reports = BTreeMap::new();
        for decision in &decided {
            let node = nodes.iter().find(|n| n.name == decision.node);
            let labels = node.map(|n| n.labels.as_slice()).unwrap_or_default();
            let overridden = inner
                .memory
                .overrides
                .get(&decision.node)
                .filter(|o| o.active(at))
                .cloned();
            let mut report = overridden_report(decision, overridden);
            let before = inner.latest.reports.get(&report.node).map(|r| r.health);
            let was_down = before
                .or_else(|| inner.memory.previous.get(&report.node).map(|d| d.health))
                .is_some_and(Health::unhealthy);
            if report.health.unhealthy() && !was_down {
                inner
                    .memory
                    .flaps
                    .entry(report.node.clone())
                    .or_default()
                    .push(at);
            }
            // Trusted again: what was done is forgotten, so that a new
            // outage is acted on afresh.
            if report.health == Health::Healthy
                && at - report.since >= self.config.trust_after_ms as types::Timestamp
            {
                inner.memory.ledger.remove(&report.node);
                inner.memory.approvals.remove(&report.node);
            }
            let paused = report
                .overridden
                .as_ref()
                .is_some_and(|o| o.kind == OverrideKind::Pause);
            let flaps = inner.memory.flaps.get(&report.node).map_or(0, Vec::len);
            for action in &mut report.actions {
                let attempt = inner
                    .memory
                    .ledger
                    .get(&report.node)
                    .and_then(|l| l.get(&action.key))
                    .cloned();
                action.approval = inner
                    .memory
                    .approvals
                    .get(&report.node)
                    .and_then(|a| a.get(&action.key))
                    .cloned();
                let facts = Facts {
                    node: &report.node,
                    labels,
                    paused,
                    flaps,
                };
                let next = self.settle(&facts, action, attempt, &mut gauges).await;
                if let Some(attempt) = next {
                    toggle(&mut inner.memory, &report.node, &action.action);
                    inner
                        .memory
                        .ledger
                        .entry(report.node.clone())
                        .or_default()
                        .insert(action.key.clone(), attempt);
                }
            }
            report.taken = inner
                .memory
                .ledger
                .get(&report.node)
                .cloned()
                .unwrap_or_default();
            reports.insert(report.node.clone(), report);
        }
        inner.memory.started.extend(std::iter::repeat_n(
            at,
            gauges.started.saturating_sub(inner.memory.started.len()),
        ));

        // Records and events for what changed.
        for report in reports.values() {
            let old = inner.latest.reports.get(&report.node);
            if old == Some(report) {
                continue;
            }
            let node = nodes.iter().find(|n| n.name == report.node);
            let on_node: Vec<&wit::Placement> = placements
                .iter()
                .filter(|p| p.node == report.node)
                .collect();
            let brakes: Vec<String> = report
                .actions
                .iter()
                .filter_map(|a| a.brake.clone())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let record = Record {
                kind: "decision".into(),
                health: Some(report.health),
                previous_health: old.map(|o| o.health),
                rule: Some(report.rule.clone()),
                reason: report.reason.clone(),
                inputs: inputs(
                    node,
                    &on_node,
                    report.overridden.as_ref(),
                    &gauges,
                    &self.config,
                ),
                actions: report.actions.clone(),
                brakes,
                by: report.overridden.as_ref().map(|o| o.by.clone()),
                ..blank(&report.node, at)
            };
            Self::record(inner, record);
            self.events.publish(
                "failover",
                None,
                json!({"event": "decision", "node": report}),
            );
        }
        let mut counts = Counts {
            storm: gauges.storm(&self.config),
            ..Counts::default()
        };
        for report in reports.values() {
            *counts.health.entry(report.health.name()).or_default() += 1;
            for action in &report.actions {
                match action.state {
                    State::Held => {
                        let brake = action.brake.clone().unwrap_or_default();
                        *counts.held.entry(brake).or_default() += 1;
                    }
                    State::AwaitingApproval => counts.awaiting_approval += 1,
                    _ => {}
                }
            }
        }
        *self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = counts;
        inner.memory.previous = decided.into_iter().map(|d| (d.node.clone(), d)).collect();
        inner.latest.reports = reports;
        inner.latest.at = Some(at);
        inner.latest.gauges = gauges;
        self.save(inner).await;
    }

    /// Save what changed; a failed write is logged and tried again next
    /// time, the state kept in memory meanwhile.
    async fn save(&self, inner: &mut Inner) {
        if inner.pending.is_empty() && inner.memory == inner.saved {
            return;
        }
        let journal = self.journal.clone();
        let memory = inner.memory.clone();
        let records = std::mem::take(&mut inner.pending);
        let saving = (memory.clone(), records.clone());
        let result = tokio::task::spawn_blocking(move || journal.save(&saving.0, &saving.1))
            .await
            .unwrap_or_else(|e| Err(StorageError::Worker(e)));
        match result {
            Ok(()) => inner.saved = memory,
            Err(error) => {
                tracing::error!(%error, "could not save the failover state; retrying");
                inner.pending = records;
            }
        }
    }

    /// Update an action under way from its task.
    fn follow_task(&self, attempt: &mut Attempt, at: types::Timestamp) {
        if attempt.outcome != Outcome::InFlight {
            return;
        }
        let Some(id) = &attempt.task else { return };
        let phase = self.tasks.get(id).map(|t| (t.phase, t.message));
        match phase {
            Some((types::TaskPhase::Succeeded, _)) => attempt.outcome = Outcome::Done,
            Some((types::TaskPhase::Failed | types::TaskPhase::Cancelled, message)) => {
                attempt.outcome = Outcome::Failed;
                attempt.error = Some(format!(
                    "task {id} did not succeed: {}",
                    message.unwrap_or_else(|| "no message".into())
                ));
                attempt.retry_at = Some(brakes::retry_at(&self.config, at, attempt.attempts));
            }
            Some(_) => {}
            None => {
                attempt.outcome = Outcome::Failed;
                attempt.error = Some(format!("task {id} is gone"));
                attempt.retry_at = Some(brakes::retry_at(&self.config, at, attempt.attempts));
            }
        }
    }

    /// Give one action its state: carry it out when nothing holds it back.
    /// Returns the new ledger entry when something was done (or would be).
    async fn settle(
        &self,
        facts: &Facts<'_>,
        action: &mut ActionReport,
        attempt: Option<Attempt>,
        gauges: &mut Gauges,
    ) -> Option<Attempt> {
        let node = facts.node;
        if let Action::Wait { until } = action.action {
            action.state = State::Waiting;
            action.detail = Some(format!("until {}", rfc3339(until)));
            return None;
        }
        if let Some(a) = &attempt {
            action.attempts = a.attempts;
            action.task.clone_from(&a.task);
            let done = match a.outcome {
                Outcome::Done => Some((State::Done, format!("done at {}", rfc3339(a.at)))),
                Outcome::DryRun => Some((
                    State::DryRun,
                    format!("would have been done at {} (dry run)", rfc3339(a.at)),
                )),
                Outcome::InFlight => Some((
                    State::InFlight,
                    format!("under way since {}", rfc3339(a.at)),
                )),
                Outcome::Failed => None,
            };
            if let Some((state, detail)) = done {
                action.state = state;
                action.detail = Some(detail);
                return None;
            }
        }
        let candidate = Candidate {
            node,
            labels: facts.labels,
            disruptive: action.action.disruptive(),
            paused: facts.paused,
            flaps: facts.flaps,
            attempt: attempt.as_ref(),
        };
        if let Some(held) = brakes::check(&self.config, gauges, &candidate) {
            action.state = State::Held;
            action.brake = Some(held.brake.into());
            action.detail = Some(held.why);
            return None;
        }
        if action.needs_approval && action.approval.is_none() {
            action.state = State::AwaitingApproval;
            action.detail = Some(format!(
                "approve with POST /v1/failover/nodes/{node}/approve {{\"action\": \"{}\", \"by\": …}}",
                action.key
            ));
            return None;
        }
        let attempts = attempt.as_ref().map_or(0, |a| a.attempts) + 1;
        let mut next = Attempt {
            outcome: Outcome::Done,
            attempts,
            at: gauges.now,
            retry_at: None,
            task: None,
            error: None,
        };
        let disruptive = action.action.disruptive();
        if disruptive {
            gauges.started += 1;
        }
        if !self.config.enforce
            && !matches!(action.action, Action::Notify { .. } | Action::MarkUnknown)
        {
            next.outcome = Outcome::DryRun;
            action.state = State::DryRun;
            action.detail = Some("would be done now (dry run)".into());
            return Some(next);
        }
        match self.act(node, &action.action).await {
            // Admission said not now (another task of the app is under
            // way, a policy rule): held, and asked again next time; no
            // attempt is spent.
            Err(Refused::Admission(reason)) => {
                if disruptive {
                    gauges.started -= 1;
                }
                action.state = State::Held;
                action.brake = Some("admission".into());
                action.detail = Some(reason);
                return None;
            }
            Ok(None) => {
                action.state = State::Done;
                action.detail = Some(format!("done at {}", rfc3339(gauges.now)));
            }
            Ok(Some(task)) => {
                next.outcome = Outcome::InFlight;
                next.task = Some(task.clone());
                action.state = State::InFlight;
                action.detail = Some(format!("task {task} under way"));
                action.task = Some(task);
                gauges.in_flight += 1;
            }
            Err(Refused::Failed(error)) => {
                tracing::warn!(node, action = %action.key, %error, "a failover action failed");
                next.outcome = Outcome::Failed;
                next.retry_at = Some(brakes::retry_at(&self.config, gauges.now, attempts));
                action.state = State::Failed;
                action.detail = Some(error.clone());
                next.error = Some(error);
            }
        }
        action.attempts = attempts;
        Some(next)
    }

    /// Carry out one action: `Ok(Some(task id))` when a task carries it.
    async fn act(&self, node: &str, action: &Action) -> Result<Option<String>, Refused> {
        let refused = |e: kube::Error| Refused::Failed(format!("the Kubernetes API refused: {e}"));
        match action {
            Action::Wait { .. } => Ok(None),
            Action::MarkUnknown => Ok(None),
            Action::Notify { text } => {
                tracing::warn!(node, "{text}");
                self.events.publish(
                    "failover",
                    None,
                    json!({"event": "notify", "node": node, "text": text}),
                );
                Ok(None)
            }
            Action::RequestReplacement => {
                tracing::warn!(node, "a replacement node is requested");
                self.events.publish(
                    "failover",
                    None,
                    json!({"event": "replacement-requested", "node": node}),
                );
                Ok(None)
            }
            Action::Cordon => self
                .nodes
                .cordon(node)
                .await
                .map(|()| None)
                .map_err(refused),
            Action::Uncordon => self
                .nodes
                .uncordon(node)
                .await
                .map(|()| None)
                .map_err(refused),
            Action::Evict { workload } | Action::Release { workload } => {
                let verb = if matches!(action, Action::Evict { .. }) {
                    "evict"
                } else {
                    "release"
                };
                let params =
                    json!({"failover": {"action": verb, "node": node, "workload": workload}});
                self.task(workload, types::TaskAction::Update, params)
                    .await
                    .map(Some)
            }
            Action::Scale { workload, replicas } => {
                let params = json!({"replicas": replicas, "failover": {"action": "scale", "node": node, "workload": workload}});
                self.task(workload, types::TaskAction::Scale, params)
                    .await
                    .map(Some)
            }
        }
    }

    /// Ask for a task on the workload's app, through task admission.
    async fn task(
        &self,
        workload: &model::Workload,
        action: types::TaskAction,
        params: Value,
    ) -> Result<String, Refused> {
        let app = self
            .observed
            .read()
            .app_of_workload_named(&workload.kind, &workload.namespace, &workload.name)
            .unwrap_or_else(|| (workload.namespace.clone(), workload.name.clone()));
        let request = NewTask {
            app: format!("{}/{}", app.0, app.1),
            action,
            params: match params {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            },
            requested_by: Some(REQUESTER.into()),
        };
        self.admission
            .ask(&self.tasks, request)
            .await
            .map(|t| t.id)
            .map_err(|e| match e {
                crate::tasks::TaskError::Denied(_) => {
                    Refused::Admission(format!("task admission: {e}"))
                }
                e => Refused::Failed(format!("the task could not be made: {e}")),
            })
    }

    /// Force a node's state, or pause it.
    ///
    /// An expiry further than ten years away is refused: it is a mistake,
    /// and an unbounded one would overflow the time arithmetic.
    pub async fn set_override(
        &self,
        node: &str,
        request: OverrideRequest,
    ) -> Result<Override, FailoverError> {
        decider(&request.by, request.reason.as_deref())?;
        let at = now();
        let expires_at = match (&request.expires_at, request.expires_in_s) {
            (Some(_), Some(_)) => {
                return Err(FailoverError::Invalid(
                    "give expires-at or expires-in-s, not both".into(),
                ));
            }
            (Some(text), None) => Some(
                crate::time::parse_time(text)
                    .map_err(|e| FailoverError::Invalid(format!("expires-at: {e}")))?,
            ),
            (None, Some(s)) if (1..=MAX_OVERRIDE_S).contains(&s) => {
                Some(at + (s as types::Timestamp) * 1000)
            }
            (None, Some(_)) => {
                return Err(FailoverError::Invalid(format!(
                    "expires-in-s must be from 1 to {MAX_OVERRIDE_S} (ten years)"
                )));
            }
            (None, None) => None,
        };
        if expires_at.is_some_and(|e| e <= at) {
            return Err(FailoverError::Invalid("expires-at is in the past".into()));
        }
        if expires_at
            .is_some_and(|e| e.saturating_sub(at) > (MAX_OVERRIDE_S as types::Timestamp) * 1000)
        {
            return Err(FailoverError::Invalid(
                "expires-at is more than ten years away".into(),
            ));
        }
        if !self.observed.read().nodes.contains_key(node) {
            return Err(FailoverError::NotFound(
                "no-such-node",
                format!("no node {node} is observed"),
            ));
        }
        let o = Override {
            node: node.to_string(),
            kind: request.kind,
            by: request.by.trim().to_string(),
            reason: request.reason.unwrap_or_default(),
            at,
            expires_at,
        };
        let mut inner = self.inner.lock().await;
        inner.memory.overrides.insert(node.to_string(), o.clone());
        let record = Record {
            kind: "override".into(),
            reason: format!(
                "{} forced {}{}: {}",
                o.by,
                serde_json::to_value(o.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                o.expires_at
                    .map(|e| format!(" until {}", rfc3339(e)))
                    .unwrap_or_default(),
                o.reason
            ),
            by: Some(o.by.clone()),
            ..blank(node, at)
        };
        self.recorded(inner, record, json!({"event": "override", "override": o}))
            .await;
        Ok(o)
    }

    /// Lift a node's override.
    pub async fn clear_override(&self, node: &str, by: &str) -> Result<Override, FailoverError> {
        decider(by, None)?;
        let at = now();
        let mut inner = self.inner.lock().await;
        let o = inner.memory.overrides.remove(node).ok_or_else(|| {
            FailoverError::NotFound("no-override", format!("node {node} has no override"))
        })?;
        let record = Record {
            kind: "override-cleared".into(),
            reason: format!("{by} lifted the override set by {}", o.by),
            by: Some(by.to_string()),
            ..blank(node, at)
        };
        self.recorded(
            inner,
            record,
            json!({"event": "override-cleared", "node": node, "by": by}),
        )
        .await;
        Ok(o)
    }

    /// Keep a person's record, tell the event stream, and judge again now.
    async fn recorded(
        &self,
        mut inner: tokio::sync::MutexGuard<'_, Inner>,
        record: Record,
        event: Value,
    ) {
        Self::record(&mut inner, record);
        self.save(&mut inner).await;
        drop(inner);
        self.events.publish("failover", None, event);
        self.wake.notify_one();
    }

    /// Approve an action the latest decision on a node proposes.
    pub async fn approve(
        &self,
        node: &str,
        request: ApprovalRequest,
    ) -> Result<Approval, FailoverError> {
        decider(&request.by, request.reason.as_deref())?;
        let at = now();
        let mut inner = self.inner.lock().await;
        let report = inner.latest.reports.get(node).ok_or_else(|| {
            FailoverError::NotFound("no-such-node", format!("no decision on node {node}"))
        })?;
        let action = report
            .actions
            .iter()
            .find(|a| a.key == request.action)
            .ok_or_else(|| {
                let keys: Vec<&str> = report.actions.iter().map(|a| a.key.as_str()).collect();
                FailoverError::NotFound(
                    "no-such-action",
                    format!(
                        "the decision on node {node} proposes no `{}` (it proposes: {})",
                        request.action,
                        keys.join(", ")
                    ),
                )
            })?;
        if !action.needs_approval {
            return Err(FailoverError::Conflict(format!(
                "`{}` on node {node} needs no approval",
                request.action
            )));
        }
        let given = inner
            .memory
            .approvals
            .get(node)
            .and_then(|a| a.get(&request.action));
        if let Some(given) = given {
            return Err(FailoverError::Conflict(format!(
                "`{}` on node {node} was approved by {} already",
                request.action, given.by
            )));
        }
        let approval = Approval {
            by: request.by.trim().to_string(),
            reason: request.reason,
            at,
        };
        inner
            .memory
            .approvals
            .entry(node.to_string())
            .or_default()
            .insert(request.action.clone(), approval.clone());
        let record = Record {
            kind: "approval".into(),
            reason: format!(
                "{} approved `{}`{}",
                approval.by,
                request.action,
                approval
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            by: Some(approval.by.clone()),
            ..blank(node, at)
        };
        self.recorded(inner, record, json!({"event": "approval", "node": node, "action": request.action, "approval": approval}))
            .await;
        Ok(approval)
    }

    /// The latest evaluation's counts.
    pub fn counts(&self) -> Counts {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The current decisions, the brakes in force and the overrides.
    pub async fn view(&self) -> Value {
        let inner = self.inner.lock().await;
        let latest = &inner.latest;
        let gauges = &latest.gauges;
        let config = &self.config;
        let held: Vec<Value> = latest
            .reports
            .values()
            .flat_map(|r| {
                r.actions.iter().filter(|a| a.state == State::Held).map(
                    |a| json!({"node": r.node, "action": a.key, "brake": a.brake, "why": a.detail}),
                )
            })
            .collect();
        let at = now();
        json!({
            "mode": if config.enforce { "enforce" } else { "dry-run" },
            "evaluated-at": latest.at.map(rfc3339),
            "policy": latest.policy,
            "error": latest.error,
            "brakes": {
                "storm": gauges.storm(config),
                "nodes": gauges.nodes,
                "unhealthy": gauges.unhealthy,
                "max-unhealthy": config.max_unhealthy.to_string(),
                "in-flight": gauges.in_flight,
                "max-in-flight": config.max_in_flight,
                "started-in-window": gauges.started,
                "max-actions": config.max_actions,
                "window-s": config.window_ms / 1000,
                "max-retries": config.max_retries,
                "flap-count": config.flap_count,
                "flap-window-s": config.flap_window_ms / 1000,
                "observing": gauges.observing,
                "maintenance": config.maintenance,
                "held": held,
            },
            "nodes": latest.reports.values().collect::<Vec<_>>(),
            "overrides": inner.memory.overrides.values().filter(|o| o.active(at)).collect::<Vec<_>>(),
        })
    }

    /// Audit records, newest first.
    pub async fn history(
        &self,
        node: Option<&str>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Record>, FailoverError> {
        let journal = self.journal.clone();
        let node = node.map(String::from);
        tokio::task::spawn_blocking(move || journal.history(node.as_deref(), before, limit))
            .await
            .map_err(StorageError::Worker)?
            .map_err(FailoverError::from)
    }
}

/// Why an action was not carried out.
#[derive(Debug)]
enum Refused {
    /// Task admission did not let its task through.
    Admission(String),
    /// It was tried and failed.
    Failed(String),
}

/// What the brakes need to know of a node.
struct Facts<'a> {
    node: &'a str,
    labels: &'a [types::KeyValue],
    paused: bool,
    flaps: usize,
}

/// A record with only its node and time.
fn blank(node: &str, at: types::Timestamp) -> Record {
    Record {
        seq: 0,
        at,
        node: node.to_string(),
        kind: String::new(),
        health: None,
        previous_health: None,
        rule: None,
        reason: String::new(),
        inputs: Value::Null,
        actions: Vec::new(),
        brakes: Vec::new(),
        by: None,
    }
}

/// Cordoning undoes an uncordon and the other way round: once one is done,
/// the other may be done again.
fn toggle(memory: &mut Memory, node: &str, action: &Action) {
    let opposite = match action {
        Action::Cordon => "uncordon",
        Action::Uncordon => "cordon",
        _ => return,
    };
    if let Some(ledger) = memory.ledger.get_mut(node) {
        ledger.remove(opposite);
    }
}

/// The decision as the host serves it: overrides win over the policy.
fn overridden_report(decision: &Decided, overridden: Option<Override>) -> NodeReport {
    let mut health = decision.health;
    let mut reason = decision.reason.clone();
    let mut actions: Vec<&model::Proposed> = decision.actions.iter().collect();
    if let Some(o) = &overridden {
        match o.kind {
            OverrideKind::Healthy => {
                if health != Health::Healthy {
                    reason = format!(
                        "confirmed healthy by {} ({}); the policy said: {reason}",
                        o.by, o.reason
                    );
                }
                health = Health::Healthy;
                actions.retain(|a| matches!(a.action, Action::Uncordon | Action::Notify { .. }));
            }
            OverrideKind::Offline => {
                if health != Health::Offline {
                    reason = format!(
                        "forced offline by {} ({}); the policy said: {reason}",
                        o.by, o.reason
                    );
                }
                health = Health::Offline;
            }
            OverrideKind::Pause => {}
        }
    }
    NodeReport {
        node: decision.node.clone(),
        health,
        since: decision.since,
        reason,
        rule: decision.rule.clone(),
        overridden,
        actions: actions
            .into_iter()
            .map(|p| ActionReport {
                key: p.action.key(),
                action: p.action.clone(),
                reason: p.reason.clone(),
                needs_approval: p.needs_approval,
                state: State::Waiting,
                brake: None,
                detail: None,
                approval: None,
                task: None,
                attempts: 0,
            })
            .collect(),
        taken: BTreeMap::new(),
    }
}

/// What a decision rested on, for its audit record.
fn inputs(
    node: Option<&types::Node>,
    on_node: &[&wit::Placement],
    overridden: Option<&Override>,
    gauges: &Gauges,
    config: &FailoverConfig,
) -> Value {
    let ready = node.map(|n| match n.ready {
        types::ConditionStatus::True => "True",
        types::ConditionStatus::False => "False",
        types::ConditionStatus::Unknown => "Unknown",
    });
    json!({
        "ready": ready,
        "ready-since": node.and_then(|n| n.ready_since).map(rfc3339),
        "last-heartbeat": node.and_then(|n| n.last_heartbeat).map(rfc3339),
        "unschedulable": node.map(|n| n.unschedulable),
        "taints": node.map(|n| n.taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>()),
        "pods": on_node.len(),
        "stateful-pods": on_node.iter().filter(|p| p.stateful).count(),
        "override": overridden,
        "unhealthy-nodes": format!("{} of {} (cap {})", gauges.unhealthy, gauges.nodes, config.max_unhealthy),
    })
}
