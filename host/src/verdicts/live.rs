//! Live verdicts: the deriver turns the observed cluster into verdicts through
//! the status policy whenever something changes, a policy is swapped, or a
//! verdict's `recheck-after` comes due; the store keeps the latest verdict of
//! every application for the HTTP API.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::view::AppView;
use crate::events::{Events, Kind};
use crate::observe::cluster::Observed;
use crate::observe::{AppKey, Around, Snapshot};
use crate::overrides::Overrides;
use crate::plugins::{CallError, Registry, World};
use crate::shadow::Shadows;
use crate::tasks::Tasks;
use crate::time::millis;
use crate::wit::WitName;

/// How many there are of each status, by its WIT name.
pub(crate) type StatusCounts = Vec<(&'static str, i64)>;
use crate::wit::types;

/// The live side of the host: the observed cluster and its verdicts.
#[derive(Debug, Clone)]
pub struct Live {
    pub observed: Arc<Observed>,
    pub verdicts: Arc<Verdicts>,
    /// What people forced on apps and their instances.
    pub overrides: Arc<Overrides>,
    pub stale_after: Duration,
}

/// The latest verdict of one application.
#[derive(Debug, Clone)]
pub struct LiveVerdict {
    /// The verdict as the policy gave it; its JSON view is made when asked
    /// for, so that only one form is kept.
    pub verdict: types::AppVerdict,
    /// When the policy asked to be asked again.
    pub recheck_after: Option<types::Timestamp>,
    /// When the observations it was derived from were last known current.
    pub observed_at: SystemTime,
    /// When the serving version failed and the one before it answered:
    /// which answered, and why.
    pub fallback: Option<Fallback>,
    /// The version of the status policy that gave it (`name@version`).
    pub policy: Arc<str>,
    /// Since when it holds its stable status, and how it got there.
    pub tally: Tally,
}

/// The stable statuses, as many as the WIT names.
const STABLE: usize = <types::StableStatus as WitName>::NAMES.len();

/// An app's stable statuses over this process's life: since when it holds
/// the one in force, how many times it changed, and the milliseconds spent
/// in each before (by its place in the WIT enum) — what `/metrics` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub since: crate::time::Timestamp,
    pub transitions: u32,
    pub ms_in: [i64; STABLE],
}

impl Tally {
    fn new(now: crate::time::Timestamp) -> Self {
        Self {
            since: now,
            transitions: 0,
            ms_in: [0; STABLE],
        }
    }

    /// After a verdict of `to` replaced one of `from` at `now`.
    fn then(
        self,
        from: types::StableStatus,
        to: types::StableStatus,
        now: crate::time::Timestamp,
    ) -> Self {
        if from == to {
            return self;
        }
        let mut ms_in = self.ms_in;
        ms_in[from as usize] += (now - self.since).max(0);
        Self {
            since: now,
            transitions: self.transitions.saturating_add(1),
            ms_in,
        }
    }

    /// Milliseconds spent in each stable status until `now`, the one in
    /// force (`current`) included.
    pub fn ms_until(
        &self,
        current: types::StableStatus,
        now: crate::time::Timestamp,
    ) -> [i64; STABLE] {
        let mut ms = self.ms_in;
        ms[current as usize] += (now - self.since).max(0);
        ms
    }
}

/// A verdict the serving version of the policy did not give: the version
/// before it did.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Fallback {
    /// The version that answered (`name@version`).
    pub answered_by: String,
    /// Why the serving version did not.
    pub because: String,
}

/// The bounds of the host's histograms of a round of work (a derivation,
/// a failover judgement of every node), in seconds: 0.5 ms to 2.5 s.
pub(crate) const WORK_BUCKETS: [f64; 12] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Which apps a derivation took: `every-app` (at start, after a policy
/// swap, a full list or a due recheck) or `changed` (those whose
/// observations changed since the last).
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct DerivationLabels {
    scope: String,
}

/// How long derivations take, from the apps' inputs to their verdicts
/// stored, by scope (`/metrics`).
pub type DerivationSeconds = prometheus_client::metrics::family::Family<
    DerivationLabels,
    prometheus_client::metrics::histogram::Histogram,
    fn() -> prometheus_client::metrics::histogram::Histogram,
>;

fn derivation_histogram() -> prometheus_client::metrics::histogram::Histogram {
    prometheus_client::metrics::histogram::Histogram::new(WORK_BUCKETS)
}

/// Observes a derivation's time into its histogram when dropped, however
/// the derivation ends.
struct Timed<'v> {
    seconds: &'v DerivationSeconds,
    full: bool,
    started: Instant,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        let scope = if self.full { "every-app" } else { "changed" };
        self.seconds
            .get_or_create(&DerivationLabels {
                scope: scope.to_string(),
            })
            .observe(self.started.elapsed().as_secs_f64());
    }
}

/// The latest verdicts, and the applications ever seen.
#[derive(Debug)]
pub struct Verdicts {
    apps: RwLock<BTreeMap<(String, String), LiveVerdict>>,
    /// Applications seen once stay known, so that a deleted namespace shows
    /// as `not-existed` rather than vanishing.
    known: Mutex<BTreeSet<AppKey>>,
    /// The policy's last failure, if its last evaluation failed.
    pub last_error: Mutex<Option<String>>,
    /// Threads a derivation evaluates batches on; 0 for one per core.
    threads: usize,
    /// How long derivations take.
    derivations: DerivationSeconds,
}

impl Default for Verdicts {
    fn default() -> Self {
        Self {
            apps: RwLock::default(),
            known: Mutex::default(),
            last_error: Mutex::default(),
            threads: 0,
            derivations: DerivationSeconds::new_with_constructor(derivation_histogram),
        }
    }
}

impl Verdicts {
    /// Up to when the verdicts are current, given how long the
    /// observations are (`observed_until`): while the status policy fails,
    /// nothing is derived again, so no verdict is newer than its own
    /// evaluation and it ages — then turns stale — like one whose cluster
    /// cannot be watched.
    pub(crate) fn current_until(&self, observed_until: SystemTime) -> SystemTime {
        let failing = self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some();
        if failing {
            SystemTime::UNIX_EPOCH
        } else {
            observed_until
        }
    }

    /// How long derivations take, by scope, for a metrics registry.
    pub(crate) fn derivation_seconds(&self) -> DerivationSeconds {
        self.derivations.clone()
    }

    /// Verdicts derived on at most `threads` threads (0: one per core).
    pub(crate) fn with_threads(threads: usize) -> Self {
        Self {
            threads,
            ..Self::default()
        }
    }

    pub fn all(&self) -> Vec<LiveVerdict> {
        self.apps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// How many apps are in each stable status, and how many pods in each
    /// status, counted in place (a scrape of a large cluster's metrics
    /// copies no verdict and looks nothing up by name).
    pub(crate) fn status_counts(&self) -> (StatusCounts, StatusCounts) {
        // Counted by the statuses' places in their WIT enums.
        fn count(counts: &mut StatusCounts, place: usize, name: &'static str) {
            if counts.len() <= place {
                counts.resize(place + 1, ("", 0));
            }
            counts[place] = (name, counts[place].1 + 1);
        }
        let (mut apps, mut pods) = (Vec::new(), Vec::new());
        for v in self
            .apps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
        {
            count(
                &mut apps,
                v.verdict.stable as usize,
                v.verdict.stable.wit_name(),
            );
            for group in &v.verdict.groups {
                count(&mut pods, group.status as usize, group.status.wit_name());
            }
        }
        let seen =
            |counts: Vec<(&'static str, i64)>| counts.into_iter().filter(|(_, n)| *n > 0).collect();
        (seen(apps), seen(pods))
    }

    /// The first `limit` apps (by namespace and name) with their stable
    /// status and tally, and how many more there are.
    pub(crate) fn tallies(
        &self,
        limit: usize,
    ) -> (Vec<(AppKey, types::StableStatus, Tally)>, usize) {
        let apps = self
            .apps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let first = apps
            .iter()
            .take(limit)
            .map(|(key, v)| (key.clone(), v.verdict.stable, v.tally))
            .collect();
        (first, apps.len().saturating_sub(limit))
    }

    /// The earliest time a verdict asked to be evaluated again.
    pub(crate) fn next_recheck(&self) -> Option<SystemTime> {
        self.apps
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .filter_map(|v| v.recheck_after)
            .min()
            .map(|at| SystemTime::UNIX_EPOCH + Duration::from_millis(at.max(0) as u64))
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

/// What the host holds beside the cluster that goes into each app's input:
/// its tasks, and the overrides in force on it; and the shadows asked the
/// same questions.
#[derive(Clone, Default)]
pub struct Beside {
    pub tasks: Option<Arc<Tasks>>,
    pub overrides: Option<Arc<Overrides>>,
    pub shadows: Option<Arc<Shadows>>,
}

/// Derive verdicts once: of every application when `full` (or when a
/// full list arrived), else only of the applications that changed since
/// the last derivation. Each app's input carries its tasks and overrides.
/// Inputs are
/// built and evaluated a batch at a time, so that neither a copy of the
/// whole cluster nor a long lock is held, and batches are evaluated on
/// every core at once (each with an instance of the policy of its own).
/// Returns when the next time-based rule comes due.
pub fn derive(
    observed: &Observed,
    registry: &Registry,
    verdicts: &Verdicts,
    beside: &Beside,
    events: Option<&Events>,
    full: bool,
) -> Option<SystemTime> {
    let tasks = beside.tasks.as_deref();
    let dirty = observed.take_dirty();
    let full = full || dirty.all || verdicts.count() == 0;
    let now = SystemTime::now();
    let observed_at = observed.health.observed_until();
    // Apps named by tasks exist even when nothing of them is in the cluster.
    let task_apps = tasks.map(Tasks::apps).unwrap_or_default();
    let keys: BTreeSet<AppKey> = {
        let snapshot = observed.read();
        let known = verdicts
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let others = || known.iter().chain(&task_apps);
        if full {
            let mut keys: BTreeSet<AppKey> = snapshot.app_keys().cloned().collect();
            for key in others() {
                if !keys.contains(key) {
                    keys.insert(key.clone());
                }
            }
            keys
        } else {
            let mut keys = dirty.apps;
            for namespace in &dirty.namespaces {
                keys.extend(snapshot.apps_in_namespace(namespace));
                keys.extend(others().filter(|(ns, _)| ns == namespace).cloned());
            }
            for node in &dirty.nodes {
                keys.extend(snapshot.apps_on_node(node));
            }
            keys
        }
    };
    if keys.is_empty() && !full {
        return verdicts.next_recheck();
    }
    let _timed = Timed {
        seconds: &verdicts.derivations,
        full,
        started: Instant::now(),
    };
    let failed = |error: String| {
        *verdicts
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error);
        // Nothing was derived: the next round starts over from everything.
        observed.mark_all();
    };
    let slot = match registry.policy(World::Status) {
        Ok(slot) => slot,
        Err(error) => {
            failed(error.to_string());
            return None;
        }
    };
    let keys: Vec<AppKey> = keys.into_iter().collect();
    // One batch: its inputs built from the snapshot (under the lock only
    // while they are copied), then evaluated.
    let around = |key: &AppKey| Around {
        tasks: tasks.map(|t| t.for_app(key)).unwrap_or_default(),
        overrides: beside
            .overrides
            .as_ref()
            .map(|o| o.in_force(key, millis(now)))
            .unwrap_or_default(),
    };
    // The status world's shadows, asked the same questions.
    let shadow_slots = match &beside.shadows {
        Some(_) => registry.shadows(World::Status),
        None => Vec::new(),
    };
    // One batch's typed inputs, from a snapshot.
    let typed = |snapshot: &Snapshot, batch: &[AppKey]| {
        let mut inputs = snapshot.inputs_for(batch, millis(now));
        for input in &mut inputs {
            input.app.observed_at = millis(observed_at);
            let key = (input.app.id.namespace.clone(), input.app.id.name.clone());
            let Around { tasks, overrides } = around(&key);
            input.tasks = tasks;
            input.overrides = overrides;
        }
        inputs
    };
    // One batch: evaluated from inputs built from the snapshot, or, for a
    // plugin that takes its batches encoded, from the snapshot encoded
    // directly (no copy of the observations). The snapshot is read-locked
    // only while the batch is copied or encoded. With shadows, both are
    // made from one snapshot first, so that the shadows' questions are the
    // active plugin's.
    let evaluate_batch = |batch: &[AppKey]| -> Result<Vec<(AppKey, LiveVerdict)>, String> {
        let (encoded, shadow_inputs) = if shadow_slots.is_empty() {
            (None, None)
        } else {
            let snapshot = observed.read();
            let mut encoded = Vec::new();
            let encoded = snapshot
                .encode_inputs(batch, millis(observed_at), around, &mut encoded)
                .ok()
                .map(|()| encoded);
            (encoded, Some(typed(&snapshot, batch)))
        };
        let answer = slot.call(|version| {
            let ctx = version.context(millis(now));
            if version.info().encoded_batches {
                match &encoded {
                    Some(encoded) => version.evaluate_encoded(&ctx, encoded, batch),
                    None => crate::wit::with_buffer(|buffer| {
                        observed
                            .read()
                            .encode_inputs(batch, millis(observed_at), around, buffer)
                            .map_err(|e| CallError::undecodable("encoding the inputs")(e.into()))?;
                        version.evaluate_encoded(&ctx, buffer, batch)
                    }),
                }
            } else {
                let inputs = match &shadow_inputs {
                    Some(inputs) => inputs.clone(),
                    None => typed(&observed.read(), batch),
                };
                version.evaluate_batch(&ctx, &inputs)
            }
        });
        let answer = answer.map_err(|e| e.to_string())?;
        let against = crate::shadow::named(&answer.version);
        let fallback = answer.fell_back.then(|| Fallback {
            answered_by: format!(
                "{}@{}",
                answer.version.info().name,
                answer.version.info().version
            ),
            because: answer.failure.clone().unwrap_or_default(),
        });
        let policy: Arc<str> = format!(
            "{}@{}",
            answer.version.info().name,
            answer.version.info().version
        )
        .into();
        let results = answer.value;
        let mut derived = Vec::with_capacity(batch.len());
        for (key, result) in batch.iter().zip(results) {
            match result {
                Ok(verdict) => derived.push((
                    key.clone(),
                    LiveVerdict {
                        recheck_after: verdict.recheck_after,
                        verdict,
                        observed_at,
                        fallback: fallback.clone(),
                        policy: Arc::clone(&policy),
                        tally: Tally::new(millis(now)),
                    },
                )),
                Err(refusal) => {
                    tracing::warn!(app = %format!("{}/{}", key.0, key.1), %refusal, "the status policy refused an app");
                }
            }
        }
        if let (Some(shadows), Some(inputs)) = (&beside.shadows, shadow_inputs) {
            let active = derived
                .iter()
                .map(|((ns, name), live)| {
                    let verdict = serde_json::to_value(&live.verdict).unwrap_or_default();
                    (format!("{ns}/{name}"), verdict)
                })
                .collect();
            let job = crate::shadow::status_job(
                shadow_slots.clone(),
                inputs,
                active,
                against,
                millis(now),
            );
            shadows.offer(&shadow_slots, job);
        }
        Ok(derived)
    };
    let batches: Vec<&[AppKey]> = keys.chunks(super::BATCH).collect();
    let mut fresh = BTreeMap::new();
    let mut error = None;
    // Each batch's verdicts are stored as it finishes, so that no more than
    // a batch per core is held besides them.
    evaluate_in_parallel(
        &batches,
        verdicts.threads,
        evaluate_batch,
        |batch| match batch {
            Ok(derived) => fresh.extend(derived),
            Err(e) => error = Some(e),
        },
    );
    if let Some(error) = error {
        tracing::warn!(%error, "status evaluation failed; keeping the previous verdicts");
        failed(error);
        return None;
    }
    *verdicts
        .last_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    {
        let mut known = verdicts
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for key in fresh.keys() {
            if !known.contains(key) {
                known.insert(key.clone());
            }
        }
    }
    let mut replaced = None;
    let changed: Vec<(AppView, Arc<str>)> = {
        let mut apps = verdicts
            .apps
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // One look at each app's verdict before: its tally goes on, and
        // whether a person would see a change (not the recheck time alone).
        let mut changed = Vec::new();
        for (key, new) in &mut fresh {
            let old = apps.get(key);
            if let Some(old) = old {
                new.tally = old
                    .tally
                    .then(old.verdict.stable, new.verdict.stable, millis(now));
            }
            if events.is_some() && old.is_none_or(|o| !same_but_recheck(&o.verdict, &new.verdict)) {
                changed.push((AppView::from(&new.verdict), Arc::clone(&new.policy)));
            }
        }
        if full {
            replaced = Some(std::mem::replace(&mut *apps, fresh));
        } else {
            apps.extend(fresh);
        }
        changed
    };
    // The verdicts a full derivation replaced are freed after the lock is
    // released, so that readers do not wait for thousands of frees, and on
    // a thread of their own, so that neither does the next derivation.
    if let Some(replaced) = replaced {
        free_elsewhere(replaced);
    }
    if let Some(events) = events {
        for (view, policy) in changed {
            let app = format!("{}/{}", view.namespace, view.name);
            let mut data = serde_json::to_value(&view).unwrap_or_default();
            data["policy"] = serde_json::Value::from(&*policy);
            events.publish(Kind::Verdict, Some(app), data);
        }
    }
    verdicts.next_recheck()
}

/// Run `f` over every batch, on `threads` threads (0: one per core; each
/// takes the next batch left), handing each answer to `take` on this thread
/// as it comes.
fn evaluate_in_parallel<T: Send>(
    batches: &[&[AppKey]],
    threads: usize,
    f: impl Fn(&[AppKey]) -> T + Sync,
    mut take: impl FnMut(T),
) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let workers = match threads {
        0 => cores,
        n => n,
    }
    .min(batches.len());
    if workers <= 1 {
        batches.iter().for_each(|b| take(f(b)));
        return;
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let (sender, answers) = std::sync::mpsc::sync_channel(workers);
        for _ in 0..workers {
            let sender = sender.clone();
            let (next, f) = (&next, &f);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(batch) = batches.get(i) else { break };
                    if sender.send(f(batch)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        for answer in answers {
            take(answer);
        }
    });
}

/// Drop `value` on a short-lived thread of its own. Should no thread
/// start, the closure holding it is dropped here, and `value` with it.
fn free_elsewhere<T: Send + 'static>(value: T) {
    let spawned = std::thread::Builder::new()
        .name("verdict-free".into())
        .spawn(move || drop(value));
    if let Err(error) = spawned {
        tracing::debug!(%error, "no thread to free replaced verdicts on: freed in place");
    }
}

/// Whether two verdicts show a person the same (they may differ in when to
/// ask again).
fn same_but_recheck(a: &types::AppVerdict, b: &types::AppVerdict) -> bool {
    a.app == b.app
        && a.stable == b.stable
        && a.stable_reason == b.stable_reason
        && a.transitional == b.transitional
        && a.display == b.display
        && a.ready_replicas == b.ready_replicas
        && a.expected_replicas == b.expected_replicas
        && a.groups == b.groups
        && a.objects == b.objects
        && a.forced == b.forced
}

/// How long derivation waits for every watch's first list before it
/// derives from what it has.
const FIRST_LISTS: Duration = Duration::from_secs(30);

/// Derive on every change (only what changed), and everything on a policy
/// swap or when a recheck comes due, until aborted.
pub(crate) async fn derive_forever(
    observed: Arc<Observed>,
    registry: Arc<Registry>,
    verdicts: Arc<Verdicts>,
    beside: Beside,
    events: Option<Arc<Events>>,
) {
    let mut recheck: Option<SystemTime> = None;
    let mut full = true;
    let started = Instant::now();
    loop {
        let wait = recheck
            .and_then(|at| at.duration_since(SystemTime::now()).ok())
            .unwrap_or(Duration::from_secs(3600));
        let due = tokio::time::sleep_until((Instant::now() + wait).into());
        // Until every watch has had its first list (or for a while, when
        // one cannot), nothing is derived: an app judged by half of the
        // cluster would be judged wrongly (its pods seen, its namespace not
        // yet: "not existed"), and admission would act on that.
        let waiting = !observed.health.synced_all() && started.elapsed() < FIRST_LISTS;
        let first_lists = tokio::time::sleep(Duration::from_millis(100));
        tokio::select! {
            () = observed.changed.notified() => {}
            () = registry.swapped().notified() => full = true,
            () = due, if recheck.is_some() => full = true,
            () = first_lists, if waiting => {}
        }
        if !observed.health.synced_all() && started.elapsed() < FIRST_LISTS {
            full = true;
            continue;
        }
        let (o, r, v, b, e) = (
            Arc::clone(&observed),
            Arc::clone(&registry),
            Arc::clone(&verdicts),
            beside.clone(),
            events.clone(),
        );
        recheck = tokio::task::spawn_blocking(move || derive(&o, &r, &v, &b, e.as_deref(), full))
            .await
            .unwrap_or(None);
        full = false;
    }
}

/// What the API says of one application, with the age of its observations.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AppStatus {
    #[serde(flatten)]
    pub view: AppView,
    pub observed_at: String,
    pub observation_age_ms: u64,
    /// The observations are older than the configured bound: the cluster
    /// could not be watched, or the status policy could not derive the
    /// verdict again, and this may no longer be the truth.
    pub stale: bool,
    /// Set when the serving version of the status policy failed on this
    /// app and the version before it gave this verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// The version of the status policy that gave it (`name@version`).
    pub policy: String,
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
            view: AppView::from(&self.verdict),
            observed_at: humantime::format_rfc3339_millis(observed_at).to_string(),
            observation_age_ms: age.as_millis() as u64,
            stale: age > stale_after,
            fallback: self.fallback.clone(),
            policy: self.policy.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running app's verdict, as a status policy would give it.
    fn running(name: &str) -> types::AppVerdict {
        types::AppVerdict {
            app: types::AppId {
                namespace: "shop".into(),
                name: name.into(),
            },
            stable: types::StableStatus::Running,
            stable_reason: "every replica is ready".into(),
            transitional: None,
            display: types::Display {
                status: "running".into(),
                text: "Running".into(),
                severity: types::Severity::Ok,
                progress: None,
            },
            ready_replicas: 2,
            expected_replicas: 2,
            groups: Vec::new(),
            objects: Vec::new(),
            forced: None,
            recheck_after: None,
        }
    }

    fn live(verdict: types::AppVerdict, observed_at: SystemTime) -> LiveVerdict {
        LiveVerdict {
            recheck_after: verdict.recheck_after,
            verdict,
            observed_at,
            fallback: None,
            policy: "status@1.0.0".into(),
            tally: Tally::new(0),
        }
    }

    #[test]
    fn a_tally_counts_changes_and_the_time_in_each_status() {
        use types::StableStatus::{Degraded, Running};
        let tally = Tally::new(1_000);
        assert_eq!(tally.then(Running, Running, 5_000), tally, "no change");
        let degraded = tally.then(Running, Degraded, 5_000);
        assert_eq!((degraded.since, degraded.transitions), (5_000, 1));
        let back = degraded.then(Degraded, Running, 6_500);
        let ms = back.ms_until(Running, 10_000);
        assert_eq!(ms[Running as usize], 4_000 + 3_500);
        assert_eq!(ms[Degraded as usize], 1_500);
        assert_eq!(back.transitions, 2);
    }

    #[test]
    fn a_new_recheck_time_alone_is_no_change_to_publish() {
        let before = running("web");
        let rechecked = types::AppVerdict {
            recheck_after: Some(1_780_000_000_000),
            ..running("web")
        };
        assert!(same_but_recheck(&before, &rechecked));
        let degraded = types::AppVerdict {
            stable: types::StableStatus::Degraded,
            ..running("web")
        };
        assert!(!same_but_recheck(&before, &degraded));
        let fewer = types::AppVerdict {
            ready_replicas: 1,
            ..running("web")
        };
        assert!(!same_but_recheck(&before, &fewer));
    }

    #[test]
    fn a_verdict_turns_stale_when_its_observations_age_past_the_bound() {
        let now = SystemTime::now();
        let bound = Duration::from_secs(30);
        let old = live(running("web"), now - Duration::from_secs(120));
        // The watches stopped two minutes ago too: stale.
        let status = old.status(bound, now - Duration::from_secs(120));
        assert!(status.stale);
        assert!(status.observation_age_ms >= 120_000);
        // The watches work: the observations are current, whenever the
        // verdict was last evaluated.
        let status = old.status(bound, now);
        assert!(!status.stale);
        assert!(status.observation_age_ms < 30_000);
    }

    #[test]
    fn while_the_policy_fails_no_verdict_is_current() {
        let verdicts = Verdicts::default();
        let now = SystemTime::now();
        assert_eq!(verdicts.current_until(now), now);
        *verdicts.last_error.lock().unwrap() = Some("plugin status failed".into());
        assert_eq!(verdicts.current_until(now), SystemTime::UNIX_EPOCH);
    }

    #[test]
    fn replaced_verdicts_are_freed_on_a_thread_of_their_own() {
        struct Noted(std::sync::mpsc::Sender<Option<String>>);
        impl Drop for Noted {
            fn drop(&mut self) {
                let name = std::thread::current().name().map(str::to_owned);
                let _ = self.0.send(name);
            }
        }
        let (sender, freed) = std::sync::mpsc::channel();
        free_elsewhere(Noted(sender));
        let on = freed
            .recv_timeout(Duration::from_secs(10))
            .expect("freed within 10 s");
        assert_eq!(on.as_deref(), Some("verdict-free"));
    }

    #[test]
    fn every_batch_is_evaluated_once_on_any_number_of_threads() {
        let keys: Vec<AppKey> = (0..10)
            .map(|i| ("shop".to_string(), format!("app-{i}")))
            .collect();
        let batches: Vec<&[AppKey]> = keys.chunks(3).collect();
        for threads in [0, 1, 2, 8] {
            let mut seen = Vec::new();
            evaluate_in_parallel(&batches, threads, <[AppKey]>::to_vec, |batch| {
                seen.extend(batch)
            });
            seen.sort();
            assert_eq!(seen, keys, "{threads} threads");
        }
    }
}
