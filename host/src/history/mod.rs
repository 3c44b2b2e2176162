//! The history of the verdicts: every change of an app's status and of each
//! of its instances', with its reason, its cause and the policy version
//! that judged it, the marks of what happened around them, and the runs in
//! which the cluster was observed — kept in `data-dir/history.db` with
//! retention by age and size, and read back as pages and as availability
//! over a window.
//!
//! The history follows the event stream through a tap of its own and
//! writes on a thread of its own at the lowest scheduling priority: a
//! derivation never waits for it, nor for the CPU it takes. A burst that
//! outlasts the tap's room is a gap, marked as one. A
//! history that cannot be opened or written is an error on its routes and
//! a line in `/readyz`, never a stopped host; what could not be written is
//! kept (up to a bound) and written when the database takes it again.
//!
//! - `store`: the database;
//! - `record`: events into records and marks;
//! - `availability`: time in each status, incidents and recoveries;
//! - `announce`: each app's status change as a Kubernetes Event;
//! - `tasklog`: the task log of seed 002's instances.

pub mod announce;
pub mod availability;
pub mod record;
pub mod store;
pub mod tasklog;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

pub use availability::{Availability, Timeline};
pub use store::{Cause, Mark, Page, Row, Subject};

use crate::events::{Event, Kind, Tap};
use crate::storage::StorageError;
use crate::time::Timestamp;
use crate::verdicts::live::Live;
use store::{Seen, Store};

/// How the history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// Keep no history of the verdicts (`history.db` is not opened).
    #[arg(long = "no-history")]
    pub off: bool,
    /// Days of history kept; older changes are forgotten (what holds now
    /// is kept however old).
    #[arg(long = "history-keep-days", value_name = "DAYS", default_value = "30", value_parser = crate::settings::positive)]
    pub keep_days: usize,
    /// The most the history's data may take, in MiB; past it the oldest
    /// changes go first.
    #[arg(long = "history-max-mib", value_name = "MIB", default_value = "512", value_parser = crate::settings::mib)]
    pub max_bytes: usize,
    /// A change that reverts within this many milliseconds is kept as one
    /// entry with a count (a crash loop is one entry, not thousands).
    #[arg(long = "history-flap-window-ms", value_name = "MS", default_value = "120000", value_parser = crate::settings::millis)]
    pub flap_window: Duration,
    /// Write no Kubernetes Events (`events.k8s.io/v1`) of apps' status
    /// changes on their workloads (the leader writes them otherwise).
    #[arg(long = "no-kube-events")]
    pub no_kube_events: bool,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// Why the history cannot answer.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("the history is off (--no-history)")]
    Off,
    #[error("the history cannot be read: {0}")]
    Unavailable(String),
    #[error(
        "the history cannot be written; {0} records wait in memory and are written when it can be"
    )]
    Unwritten(usize),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// How often the runs of observation are extended, and what could not be
/// written is tried again.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// How often what is past retention is forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// Events the tap holds while the recorder writes (a full derivation of the
/// largest clusters publishes 15 000 at once).
pub const TAP: usize = 32_768;
/// Records kept in memory while the database refuses them.
const PENDING: usize = 200_000;

/// The room the records and marks waiting to be written keep once written.
const KEPT_ROOM: usize = 1024;

/// What the history did, for `/readyz` and `/metrics`.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct Health {
    pub ok: bool,
    /// Why it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Changes written since the start, and those folded as flaps.
    pub changes: u64,
    pub folded: u64,
    pub marks: u64,
    /// Finished task lists of seed 002's instances written, and those
    /// that could not be.
    pub lists: u64,
    pub lists_lost: u64,
    /// Records waiting to be written.
    pub pending: usize,
    /// Records lost: the database refused them past the bound kept, the
    /// recorder fell behind the events, or (events) there is no database.
    pub lost: u64,
    /// Where the run of observation under way was last written up to
    /// (none while the cluster is not observed): it lasts until now.
    #[serde(skip)]
    observed_at: Option<Timestamp>,
}

/// The history: its store (or why there is none) and what it did.
#[derive(Debug)]
pub struct History {
    store: Result<Store, String>,
    settings: Settings,
    health: Mutex<Health>,
    /// The task log's writer, started with the first list.
    task_log: std::sync::OnceLock<Result<tasklog::Writer, String>>,
}

impl History {
    /// Open `path`; a file that cannot be opened leaves the history
    /// unavailable, said on its routes and in `/readyz`, the host serving
    /// on.
    pub fn open(path: &Path, settings: Settings) -> Self {
        let store = if settings.off {
            Err(HistoryError::Off.to_string())
        } else {
            Store::open(path).map_err(|e| e.to_string())
        };
        if let Err(error) = &store
            && !settings.off
        {
            tracing::error!(%error, "the history cannot be opened; serving without it");
        }
        let health = Health {
            ok: store.is_ok(),
            error: store.as_ref().err().cloned(),
            ..Health::default()
        };
        Self {
            store,
            settings,
            health: Mutex::new(health),
            task_log: std::sync::OnceLock::new(),
        }
    }

    pub fn is_off(&self) -> bool {
        self.settings.off
    }

    /// The store to read, unless it cannot be read — or cannot be
    /// written, when what it would answer lacks what waits in memory.
    fn store(&self) -> Result<&Store, HistoryError> {
        match &self.store {
            Ok(store) => {
                let health = self.health_mut();
                match &health.error {
                    None => Ok(store),
                    Some(_) => Err(HistoryError::Unwritten(health.pending)),
                }
            }
            Err(_) if self.settings.off => Err(HistoryError::Off),
            Err(error) => Err(HistoryError::Unavailable(error.clone())),
        }
    }

    fn health_mut(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn health(&self) -> Health {
        self.health_mut().clone()
    }

    /// A page of an app's changes (or one instance's), newest first.
    pub fn page(
        &self,
        namespace: &str,
        app: &str,
        instance: Option<&str>,
        page: &Page,
    ) -> Result<Vec<Row>, HistoryError> {
        Ok(self.store()?.page(namespace, app, instance, page)?)
    }

    /// The marks of an app and of the cluster within `[from, to)`.
    pub fn marks(
        &self,
        namespace: &str,
        app: &str,
        (from, to): (Timestamp, Timestamp),
        limit: usize,
    ) -> Result<Vec<Mark>, HistoryError> {
        Ok(self.store()?.marks(namespace, app, from, to, limit)?)
    }

    /// One app's availability over `[from, to)`.
    pub fn availability(
        &self,
        namespace: &str,
        app: &str,
        (from, to): (Timestamp, Timestamp),
    ) -> Result<Availability, HistoryError> {
        let store = self.store()?;
        let rows = store.window(namespace, app, from, to)?;
        Ok(availability::of_app(
            &rows,
            self.runs(store, from, to)?,
            from,
            to,
        ))
    }

    /// Whether the history holds anything of the app.
    pub fn knows(&self, namespace: &str, app: &str) -> Result<bool, HistoryError> {
        Ok(self.store()?.knows(namespace, app)?)
    }

    /// Every app's availability of a namespace (or the cluster) together.
    pub fn availability_of_all(
        &self,
        namespace: Option<&str>,
        (from, to): (Timestamp, Timestamp),
    ) -> Result<Availability, HistoryError> {
        let store = self.store()?;
        let runs = self.runs(store, from, to)?;
        let each = store
            .apps(namespace)?
            .into_iter()
            .map(|(ns, app)| {
                let rows = store.window(&ns, &app, from, to)?;
                Ok(availability::of_app(&rows, runs.clone(), from, to))
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok(availability::sum(&each, to - from))
    }

    /// The runs of observation that overlap `[from, to)`; the one under
    /// way lasts until now, not until its last heartbeat.
    fn runs(
        &self,
        store: &Store,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<(Timestamp, Timestamp)>, StorageError> {
        // The recorder writes a run's end to the store, then notes it in
        // its health: read in the other order, the run under way ends in
        // the store at or after the noted end, never before, even while a
        // write is between the two.
        let observed_at = self.health_mut().observed_at;
        let mut runs = store.runs(from, to)?;
        if let (Some(at), Some(last)) = (observed_at, runs.last_mut())
            && last.1 >= at
        {
            last.1 = last.1.max(crate::time::now());
        }
        Ok(runs)
    }

    /// How many apps of a namespace (or the cluster) held each status at
    /// `points` moments of `[from, to]`, from the history's first run of
    /// observation at the earliest.
    pub fn timeline(
        &self,
        namespace: Option<&str>,
        (from, to): (Timestamp, Timestamp),
        points: usize,
    ) -> Result<Timeline, HistoryError> {
        let store = self.store()?;
        // No earlier than the history itself.
        let from = match store.first_observed()? {
            Some(first) if first > from && first < to => first,
            _ => from,
        };
        let runs = self.runs(store, from, to)?;
        let rows = store
            .apps(namespace)?
            .into_iter()
            .map(|(ns, app)| store.window(&ns, &app, from, to.saturating_add(1)))
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok(availability::timeline(
            rows.iter().map(Vec::as_slice),
            runs,
            (from, to),
            points,
        ))
    }

    /// Record what the events say, until the tap closes: verdicts as
    /// changes, the rest as marks, and the runs in which `live` was
    /// current.
    pub async fn record_forever(self: Arc<Self>, mut tap: Tap, live: Live) {
        if self.store.is_err() {
            // Nothing can be recorded: every event that would have been is
            // counted as lost (`verdict_history_lost_total`), as those the
            // recorder falls behind on are.
            let mut buffer = Vec::new();
            let mut behind = 0;
            while tap.receiver.recv_many(&mut buffer, 4096).await > 0 {
                let dropped = tap.dropped();
                self.health_mut().lost += buffer.len() as u64 + dropped.saturating_sub(behind);
                behind = dropped;
                buffer.clear();
            }
            return;
        }
        let jobs = match writer() {
            Ok(jobs) => jobs,
            Err(error) => {
                let mut health = self.health_mut();
                health.ok = false;
                health.error = Some(format!("the history's writer could not start: {error}"));
                return;
            }
        };
        let mut state = Recording::default();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        let mut prune = tokio::time::interval(PRUNE_EVERY);
        let mut buffer = Vec::new();
        loop {
            let mut pruning = false;
            tokio::select! {
                n = tap.receiver.recv_many(&mut buffer, 4096) => if n == 0 { return },
                _ = heartbeat.tick() => {}
                _ = prune.tick() => pruning = true,
            }
            let batch = std::mem::take(&mut buffer);
            let current = observed_now(&live);
            let dropped = tap.dropped();
            let this = Arc::clone(&self);
            let moved = std::mem::take(&mut state);
            let (done, written) = tokio::sync::oneshot::channel();
            let job: Job = Box::new(move || {
                let mut state = moved;
                this.take(&mut state, &batch, dropped);
                this.write(&mut state, current);
                if pruning {
                    this.prune();
                }
                let _ = done.send(state);
            });
            if jobs.send(job).is_err() {
                return;
            }
            state = written.await.unwrap_or_default();
        }
    }

    /// Turn a batch of events into records and marks, waiting to be
    /// written.
    fn take(&self, state: &mut Recording, batch: &[Arc<Event>], dropped: u64) {
        let Ok(store) = &self.store else { return };
        if dropped > state.dropped {
            state.marks.push(Mark {
                id: 0,
                at: crate::time::now(),
                namespace: None,
                app: None,
                kind: "gap".into(),
                reference: None,
                node: None,
                text: format!(
                    "{} events were not recorded: the history fell behind",
                    dropped - state.dropped
                ),
            });
            self.health_mut().lost += dropped - state.dropped;
            state.dropped = dropped;
        }
        // The instances each app has after the records of this batch
        // before it, so that a second verdict of an app in one batch knows
        // the first's.
        let mut latest: std::collections::HashMap<(String, String), Vec<Subject>> =
            std::collections::HashMap::new();
        for event in batch {
            if event.kind != Kind::Verdict {
                if let Some(mark) = state.recorder.mark(event) {
                    state.marks.push(mark);
                }
                continue;
            }
            let seen = state.recorder.seen(event, |ns, app| {
                let key = (ns.to_string(), app.to_string());
                match latest.get(&key) {
                    Some(instances) => instances.clone(),
                    None => store
                        .instances(ns, app)
                        .map(|all| all.into_iter().map(|(s, _)| s).collect())
                        .unwrap_or_default(),
                }
            });
            if let Some(first) = seen.first() {
                let instances = seen
                    .iter()
                    .filter(|s| !s.subject.is_app() && s.held.status != store::GONE)
                    .map(|s| s.subject.clone())
                    .collect();
                latest.insert(
                    (first.subject.namespace.clone(), first.subject.app.clone()),
                    instances,
                );
            }
            state.seen.extend(seen);
        }
        state.recorder.forget_before(crate::time::now());
        // Past the bound, the oldest go.
        let over = (state.seen.len() + state.marks.len()).saturating_sub(PENDING);
        if over > 0 {
            let from_seen = over.min(state.seen.len());
            state.seen.drain(..from_seen);
            let from_marks = (over - from_seen).min(state.marks.len());
            state.marks.drain(..from_marks);
            self.health_mut().lost += over as u64;
        }
    }

    /// Write what waits, and extend the run of observation; a failure is
    /// kept as the history's health and tried again on the next beat.
    fn write(&self, state: &mut Recording, current: bool) {
        let Ok(store) = &self.store else { return };
        let flap_window = self.settings.flap_window.as_millis() as i64;
        let written = if state.seen.is_empty() && state.marks.is_empty() {
            Ok(store::Recorded::default())
        } else {
            store.record(&state.seen, &state.marks, flap_window)
        };
        let now = crate::time::now();
        let run = if current {
            let started = state.run.map_or(now, |(_, started)| started);
            store
                .observed(state.run.map(|(id, _)| id), started, now)
                .map(|id| Some((id, started)))
        } else {
            Ok(None)
        };
        let mut health = self.health_mut();
        match (written, run) {
            (Ok(recorded), Ok(run)) => {
                health.changes += recorded.changes as u64;
                health.folded += recorded.folded as u64;
                health.marks += state.marks.len() as u64;
                health.observed_at = run.map(|_| now);
                state.seen.clear();
                state.marks.clear();
                // What a burst grew them to is given back: a host at rest
                // keeps no room for its busiest moment.
                state.seen.shrink_to(KEPT_ROOM);
                state.marks.shrink_to(KEPT_ROOM);
                state.run = run;
                if !health.ok {
                    tracing::info!("the history is written again");
                }
                health.ok = true;
                health.error = None;
            }
            (written, run) => {
                let error = written.err().or(run.err()).map(|e| e.to_string());
                if health.ok {
                    tracing::error!(
                        error = error.as_deref().unwrap_or(""),
                        "the history cannot be written; keeping what waits and trying again"
                    );
                }
                health.ok = false;
                health.error = error;
                health.observed_at = None;
            }
        }
        health.pending = state.seen.len() + state.marks.len();
    }

    fn prune(&self) {
        let Ok(store) = &self.store else { return };
        let keep = Duration::from_secs(self.settings.keep_days as u64 * 86_400);
        let oldest = crate::time::now() - keep.as_millis() as i64;
        match store.prune(oldest, self.settings.max_bytes as u64) {
            Ok(0) => {}
            Ok(forgotten) => tracing::info!(forgotten, "history past retention forgotten"),
            Err(error) => tracing::warn!(%error, "could not forget history past retention"),
        }
    }
}

/// Work for the history's writer.
type Job = Box<dyn FnOnce() + Send>;

/// The history's writer: a thread that runs the jobs sent to it, one at a
/// time, at the lowest scheduling priority (nice 19), so that the CPU a
/// burst of changes takes to write goes to derivations first; it ends when
/// its sender is dropped.
fn writer() -> std::io::Result<std::sync::mpsc::Sender<Job>> {
    let (jobs, queue) = std::sync::mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("verdict-history".into())
        .spawn(move || {
            let thread = rustix::thread::gettid();
            if let Err(error) = rustix::process::setpriority_process(Some(thread), 19) {
                tracing::debug!(%error, "the history's writer keeps the host's priority");
            }
            for job in queue {
                job();
            }
        })?;
    Ok(jobs)
}

/// Whether the verdicts are current now: every watch works, the policy
/// derives, the observations are within the staleness bound.
fn observed_now(live: &Live) -> bool {
    let until = live
        .verdicts
        .current_until(live.observed.health.observed_until());
    live.observed.health.synced_all()
        && std::time::SystemTime::now()
            .duration_since(until)
            .unwrap_or_default()
            <= live.stale_after
}

/// The recorder's state between batches.
#[derive(Debug, Default)]
struct Recording {
    recorder: record::Recorder,
    seen: Vec<Seen>,
    marks: Vec<Mark>,
    /// The run of observation under way: its id and start.
    run: Option<(i64, Timestamp)>,
    /// The tap's drops counted so far.
    dropped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_under_way_lasts_until_now_even_while_its_end_is_being_written() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("history.db"), Settings::default());
        let store = history.store.as_ref().unwrap();
        let now = crate::time::now();
        let (started, noted, written) = (now - 60_000, now - 10_000, now - 5_000);
        store.observed(None, started, written).unwrap();
        let until_of_last = |history: &History| {
            let store = history.store.as_ref().unwrap();
            history
                .runs(store, started - 1, now + 1)
                .unwrap()
                .last()
                .unwrap()
                .1
        };
        // The recorder has written the run's new end but not yet noted it
        // in its health: the run is still the one under way.
        history.health_mut().observed_at = Some(noted);
        assert!(until_of_last(&history) >= now);
        // Noted as written.
        history.health_mut().observed_at = Some(written);
        assert!(until_of_last(&history) >= now);
        // Not observing: the run ends where it was written.
        history.health_mut().observed_at = None;
        assert_eq!(until_of_last(&history), written);
    }

    #[test]
    fn the_writer_runs_its_jobs_in_order_at_the_lowest_priority() {
        let jobs = writer().unwrap();
        let (seen, results) = std::sync::mpsc::channel();
        for job in 0..3 {
            let seen = seen.clone();
            jobs.send(Box::new(move || {
                let thread = rustix::thread::gettid();
                let priority = rustix::process::getpriority_process(Some(thread)).unwrap();
                seen.send((job, priority)).unwrap();
            }))
            .unwrap();
        }
        let got: Vec<(i32, i32)> = (0..3)
            .map(|_| results.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, [(0, 19), (1, 19), (2, 19)]);
        // This thread keeps its own.
        let own = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        assert_ne!(own, 19);
    }
}
