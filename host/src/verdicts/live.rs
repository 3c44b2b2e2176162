//! Live verdicts: the deriver turns the observed cluster into verdicts through
//! the status policy whenever something changes, a policy is swapped, or a
//! verdict's `recheck-after` comes due; the store keeps the latest verdict of
//! every application for the HTTP API.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::view::AppView;
use crate::observe::Grouping;
use crate::observe::cluster::Observed;
use crate::plugins::bindings::types;
use crate::plugins::{Registry, World};

fn millis(time: SystemTime) -> types::Timestamp {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as types::Timestamp)
}

/// The latest verdict of one application.
#[derive(Debug, Clone)]
pub struct LiveVerdict {
    pub view: AppView,
    /// When the observations it was derived from were last known current.
    pub observed_at: SystemTime,
    pub evaluated_at: SystemTime,
}

/// The latest verdicts, and the applications ever seen.
#[derive(Debug, Default)]
pub struct Verdicts {
    apps: RwLock<BTreeMap<(String, String), LiveVerdict>>,
    /// Applications seen once stay known, so that a deleted namespace shows
    /// as `not-existed` rather than vanishing.
    known: Mutex<BTreeSet<(String, String)>>,
    /// The policy's last failure, if its last evaluation failed.
    pub last_error: Mutex<Option<String>>,
    /// Evaluations done, for tests and metrics.
    pub rounds: std::sync::atomic::AtomicU64,
}

impl Verdicts {
    pub fn all(&self) -> Vec<LiveVerdict> {
        self.apps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// How many applications have a verdict.
    pub fn count(&self) -> usize {
        self.apps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<LiveVerdict> {
        self.apps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

/// Derive every application's verdict once. Returns when the next
/// time-based rule comes due, if any.
pub fn derive(
    observed: &Observed,
    registry: &Registry,
    verdicts: &Verdicts,
    grouping: &Grouping,
) -> Option<SystemTime> {
    let now = SystemTime::now();
    let observed_at = observed.health.observed_until();
    let known: Vec<types::AppId> = verdicts
        .known
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .map(|(namespace, name)| types::AppId {
            namespace: namespace.clone(),
            name: name.clone(),
        })
        .collect();
    let mut inputs = observed.snapshot().apps(grouping, &[], &known, millis(now));
    for input in &mut inputs {
        input.app.observed_at = millis(observed_at);
    }
    let slot = match registry.policy(World::Status) {
        Ok(slot) => slot,
        Err(error) => {
            *verdicts
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error.to_string());
            return None;
        }
    };
    let results = match super::evaluate(&slot, &inputs, millis(now), None) {
        Ok(results) => results,
        Err(error) => {
            tracing::warn!(%error, "status evaluation failed; keeping the previous verdicts");
            *verdicts
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error.to_string());
            return None;
        }
    };
    *verdicts
        .last_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    let mut next: Option<types::Timestamp> = None;
    let mut fresh = BTreeMap::new();
    for (input, result) in inputs.iter().zip(results) {
        let key = (input.app.id.namespace.clone(), input.app.id.name.clone());
        match result {
            Ok(verdict) => {
                if let Some(at) = verdict.recheck_after {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
                fresh.insert(
                    key,
                    LiveVerdict {
                        view: AppView::from(&verdict),
                        observed_at,
                        evaluated_at: now,
                    },
                );
            }
            Err(refusal) => {
                tracing::warn!(app = %format!("{}/{}", key.0, key.1), %refusal, "the status policy refused an app")
            }
        }
    }
    verdicts
        .known
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .extend(fresh.keys().cloned());
    *verdicts
        .apps
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
    verdicts
        .rounds
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    next.map(|at| SystemTime::UNIX_EPOCH + Duration::from_millis(at.max(0) as u64))
}

/// Derive on every change, policy swap and recheck time, until aborted.
pub async fn derive_forever(
    observed: Arc<Observed>,
    registry: Arc<Registry>,
    verdicts: Arc<Verdicts>,
    grouping: Grouping,
) {
    let mut recheck: Option<SystemTime> = None;
    loop {
        let wait = recheck
            .and_then(|at| at.duration_since(SystemTime::now()).ok())
            .unwrap_or(Duration::from_secs(3600));
        let due = tokio::time::sleep_until((Instant::now() + wait).into());
        tokio::select! {
            () = observed.changed.notified() => {}
            () = registry.swapped().notified() => {}
            () = due, if recheck.is_some() => {}
        }
        let (o, r, v, g) = (
            Arc::clone(&observed),
            Arc::clone(&registry),
            Arc::clone(&verdicts),
            grouping.clone(),
        );
        recheck = tokio::task::spawn_blocking(move || derive(&o, &r, &v, &g))
            .await
            .unwrap_or(None);
    }
}

/// What the API says of one application, with the age of its observations.
#[derive(Debug, Clone, Serialize)]
pub struct AppStatus {
    #[serde(flatten)]
    pub view: AppView,
    pub observed_at: String,
    pub observation_age_ms: u64,
    /// The observations are older than the configured bound: the cluster
    /// could not be watched, and this may no longer be the truth.
    pub stale: bool,
}

impl LiveVerdict {
    pub fn status(&self, stale_after: Duration, observed_until: SystemTime) -> AppStatus {
        // While the watches work, observations are current whatever the
        // time of the last evaluation.
        let observed_at = self.observed_at.max(observed_until);
        let age = SystemTime::now()
            .duration_since(observed_at)
            .unwrap_or_default();
        AppStatus {
            view: self.view.clone(),
            observed_at: humantime::format_rfc3339_millis(observed_at).to_string(),
            observation_age_ms: age.as_millis() as u64,
            stale: age > stale_after,
        }
    }
}
