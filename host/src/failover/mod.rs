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

mod act;
pub mod brakes;
mod evaluate;
mod input;
pub mod journal;
pub mod model;
mod requests;
mod view;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify};

use crate::admission::Admission;
use crate::events::Events;
use crate::leader::Leadership;
use crate::observe::cluster::Observed;
use crate::plugins::{Registry, World};
use crate::storage::StorageError;
use crate::tasks::Tasks;
use crate::tasks::model::NewTask;
use crate::time::{now, rfc3339};
use crate::wit::{failover as wit, types};
pub use act::{BoxFuture, NodeActions};
pub use brakes::FailoverConfig;
use brakes::{Candidate, Gauges};
pub(crate) use input::placed;
use journal::{Journal, Memory};
use model::{
    Action, ActionReport, Approval, Attempt, Decided, Health, NodeReport, Outcome, Override,
    OverrideKind, Record, State,
};
pub use requests::{ApprovalRequest, MAX_OVERRIDE_S, OverrideRequest};
pub use view::{Brakes, Counts, FailoverView, HeldAction, Mode};

/// Who failover's tasks are requested by.
pub(crate) const REQUESTER: &str = "verdict-failover";

/// The taint that tells Kubernetes a node is down for good, so that the
/// pods of stateful workloads may be released elsewhere.
pub(crate) const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

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
    /// Only the leading replica acts.
    leadership: Arc<Leadership>,
    /// Where people's decisions are shared with the other replicas.
    shared: std::sync::OnceLock<Arc<crate::shared::Shared>>,
    /// The failover world's shadows, asked the same questions.
    shadows: std::sync::OnceLock<Arc<crate::shadow::Shadows>>,
    journal: Journal,
    inner: Mutex<Inner>,
    wake: Notify,
    /// The latest evaluation's counts, for `/metrics`.
    counts: std::sync::Mutex<Counts>,
    /// Each node's health as the latest evaluation judged it, read without
    /// waiting for an evaluation under way (the delivery asks it on every
    /// reconcile of every instance).
    health: std::sync::RwLock<Arc<BTreeMap<String, Health>>>,
    /// How long each judgement of every node took, for `/metrics`.
    evaluations: Histogram,
}

impl std::fmt::Debug for Failover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failover")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
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
        leadership: Arc<Leadership>,
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
            leadership,
            shared: std::sync::OnceLock::new(),
            shadows: std::sync::OnceLock::new(),
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
            health: std::sync::RwLock::default(),
            // 50 ms, the budget of a judgement of 5 000 nodes, is a bound.
            evaluations: Histogram::new(crate::verdicts::live::WORK_BUCKETS),
        })
    }

    pub fn config(&self) -> &FailoverConfig {
        &self.config
    }

    /// The time of each judgement of every node: the policy's input, its
    /// call, the brakes and the saved state.
    pub(crate) fn evaluation_seconds(&self) -> Histogram {
        self.evaluations.clone()
    }

    /// Ask the failover world's shadows the active policy's questions.
    pub fn shadow_with(&self, shadows: Arc<crate::shadow::Shadows>) {
        let _ = self.shadows.set(shadows);
    }

    /// Judge the nodes every `every-ms`, and at once after an override or
    /// approval, until aborted.
    pub async fn run(self: Arc<Self>) {
        let every = Duration::from_millis(self.config.every_ms.max(10));
        loop {
            let started = std::time::Instant::now();
            self.evaluate(now()).await;
            self.evaluations.observe(started.elapsed().as_secs_f64());
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = self.wake.notified() => {}
            }
        }
    }
}
