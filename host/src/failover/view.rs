//! Failover as served: the decisions with their actions, the brakes in
//! force and the overrides; counts for `/metrics`; the audit history.

use std::sync::Arc;

use serde::Serialize;

use super::model::Health;

use super::{
    BTreeMap, Failover, FailoverError, NodeReport, Override, Record, State, StorageError, brakes,
    now, rfc3339,
};

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

/// Whether failover acts or only says what it would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Enforce,
    DryRun,
}

/// The decision on every node, the brakes in force and the overrides.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct FailoverView {
    pub mode: Mode,
    /// When the policy last judged the nodes (RFC 3339).
    pub evaluated_at: Option<String>,
    /// The failover policy that judged them, `name@version`.
    pub policy: Option<String>,
    /// Why the last evaluation failed, when it did.
    pub error: Option<String>,
    pub brakes: Brakes,
    /// Each node's health, since when and why, with its proposed actions
    /// and their states.
    pub nodes: Vec<NodeReport>,
    /// The overrides in force.
    pub overrides: Vec<Override>,
}

/// The brakes on failover's actions, with what they count now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Brakes {
    /// More nodes are unhealthy than `max-unhealthy` allows: failover only
    /// waits and notifies.
    pub storm: bool,
    pub nodes: usize,
    pub unhealthy: usize,
    /// A number of nodes or a share (`40%`).
    pub max_unhealthy: String,
    pub in_flight: usize,
    pub max_in_flight: usize,
    pub started_in_window: usize,
    pub max_actions: usize,
    pub window_s: u64,
    pub max_retries: u32,
    pub flap_count: usize,
    pub flap_window_s: u64,
    /// Whether the node watch works (without it nothing is done).
    pub observing: bool,
    pub maintenance: Vec<brakes::Maintenance>,
    /// The actions a brake holds back.
    pub held: Vec<HeldAction>,
}

/// An action a brake holds back.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct HeldAction {
    pub node: String,
    pub action: String,
    pub brake: Option<String>,
    pub why: Option<String>,
}

impl Failover {
    /// The latest evaluation's counts.
    pub fn counts(&self) -> Counts {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Each node's health, as the latest evaluation judged it.
    pub fn health(&self) -> Arc<BTreeMap<String, Health>> {
        Arc::clone(
            &self
                .health
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The current decisions, the brakes in force and the overrides.
    pub async fn view(&self) -> FailoverView {
        let inner = self.inner.lock().await;
        let latest = &inner.latest;
        let gauges = &latest.gauges;
        let config = &self.config;
        let held = latest
            .reports
            .values()
            .flat_map(|r| {
                r.actions
                    .iter()
                    .filter(|a| a.state == State::Held)
                    .map(|a| HeldAction {
                        node: r.node.clone(),
                        action: a.key.clone(),
                        brake: a.brake.clone(),
                        why: a.detail.clone(),
                    })
            })
            .collect();
        let at = now();
        FailoverView {
            mode: if config.enforce {
                Mode::Enforce
            } else {
                Mode::DryRun
            },
            evaluated_at: latest.at.map(rfc3339),
            policy: latest.policy.clone(),
            error: latest.error.clone(),
            brakes: Brakes {
                storm: gauges.storm(config),
                nodes: gauges.nodes,
                unhealthy: gauges.unhealthy,
                max_unhealthy: config.max_unhealthy.to_string(),
                in_flight: gauges.in_flight,
                max_in_flight: config.max_in_flight,
                started_in_window: gauges.started,
                max_actions: config.max_actions,
                window_s: config.window_ms / 1000,
                max_retries: config.max_retries,
                flap_count: config.flap_count,
                flap_window_s: config.flap_window_ms / 1000,
                observing: gauges.observing,
                maintenance: config.maintenance.clone(),
                held,
            },
            nodes: latest.reports.values().cloned().collect(),
            overrides: inner
                .memory
                .overrides
                .values()
                .filter(|o| o.active(at))
                .cloned()
                .collect(),
        }
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
