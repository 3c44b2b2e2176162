//! Shadow evaluation: a delivered plugin in shadow mode is asked the same
//! questions as the active plugin of its world — the same inputs, at the
//! same time — on a thread of its own, off the path of every answer, and
//! its answers are only compared: per subject (an app, a task request, a
//! node) and per field, with the last examples of each difference kept.
//!
//! The shadow thread is busy at most `--shadow-cpu-share` of the time
//! (work beyond that is skipped, and counted); a shadow whose calls fail
//! more often than `--shadow-max-error-rate` (over at least 20 calls) is
//! marked failed (counted once it made `--shadow-min-calls`, 20), and is not
//! promoted unless a person insists.

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::events::{Events, Kind};
use crate::plugins::{CallError, Slot, Version, World};
use crate::time::{Timestamp, now};

/// How shadows are run.
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// The share of one core the shadow evaluation may keep busy (0 to 1);
    /// what would go beyond is skipped.
    #[arg(long = "shadow-cpu-share", value_name = "SHARE", default_value = "0.25", value_parser = crate::settings::share)]
    pub cpu_share: f64,
    /// The share of failed calls (errors and timeouts) past which a shadow
    /// is marked failed.
    #[arg(long = "shadow-max-error-rate", value_name = "SHARE", default_value = "0.05", value_parser = crate::settings::share)]
    pub max_error_rate: f64,
    /// The calls a shadow makes before its error rate counts.
    #[arg(long = "shadow-min-calls", value_name = "N", default_value = "20", value_parser = crate::settings::positive)]
    pub min_calls: usize,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// Examples kept per field.
const EXAMPLES: usize = 5;
/// Subjects counted one by one (beyond, only the totals grow).
const SUBJECTS: usize = 1000;
/// The window over which the CPU share is measured.
const WINDOW: Duration = Duration::from_secs(10);

/// One difference, as an example.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
#[schema(as = ShadowExample)]
pub struct Example {
    pub subject: String,
    pub field: String,
    #[schema(value_type = Object)]
    pub active: Value,
    #[schema(value_type = Object)]
    pub shadow: Value,
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
}

/// What a shadow did, as `GET /v1/policies/{name}/shadow` shows it.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ShadowReport {
    pub plugin: String,
    /// `name@version` of the shadow's version compared.
    pub version: String,
    /// `name@version` of the active plugin it was compared with, last.
    pub against: String,
    /// Calls made, and those that failed or ran out of time.
    pub calls: u64,
    pub errors: u64,
    pub timeouts: u64,
    /// Questions skipped to keep within the CPU share.
    pub skipped: u64,
    /// Subjects compared, and those where an answer differed.
    pub compared: u64,
    pub differing: u64,
    /// Differences by field.
    pub by_field: BTreeMap<String, u64>,
    /// Differences by subject (app, task request, node).
    pub by_subject: BTreeMap<String, u64>,
    pub examples: Vec<Example>,
    /// Failed: too many of its calls failed; not promoted unless forced.
    pub failed: bool,
    pub last_error: Option<String>,
}

#[derive(Debug, Default)]
struct Record {
    report: ShadowReport,
    examples: BTreeMap<String, VecDeque<Example>>,
}

/// The CPU the shadow thread used in the current window.
#[derive(Debug)]
struct Budget {
    since: Instant,
    busy: Duration,
}

/// Work handed to the shadow thread.
type Job = Box<dyn FnOnce(&Shadows) + Send>;

/// The shadows of this host.
pub struct Shadows {
    settings: Settings,
    records: Mutex<BTreeMap<String, Record>>,
    budget: Mutex<Budget>,
    queue: SyncSender<Job>,
    events: Option<Arc<Events>>,
}

impl std::fmt::Debug for Shadows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shadows")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `name@version` of a version.
pub fn named(version: &Version) -> String {
    format!("{}@{}", version.info().name, version.info().version)
}

impl Shadows {
    /// The shadows, with their thread.
    pub fn start(settings: Settings, events: Option<Arc<Events>>) -> Arc<Self> {
        let (queue, jobs) = sync_channel::<Job>(4);
        let shadows = Arc::new(Self {
            settings,
            records: Mutex::default(),
            budget: Mutex::new(Budget {
                since: Instant::now(),
                busy: Duration::ZERO,
            }),
            queue,
            events,
        });
        let weak = Arc::downgrade(&shadows);
        let _ = std::thread::Builder::new()
            .name("verdict-shadow".into())
            .spawn(move || {
                while let Ok(job) = jobs.recv() {
                    let Some(shadows) = weak.upgrade() else {
                        return;
                    };
                    let started = Instant::now();
                    job(&shadows);
                    let mut budget = lock(&shadows.budget);
                    budget.busy += started.elapsed();
                }
            });
        shadows
    }

    /// Whether the shadow thread is within its share now.
    fn within_budget(&self) -> bool {
        let mut budget = lock(&self.budget);
        let elapsed = budget.since.elapsed();
        if elapsed > WINDOW {
            budget.since = Instant::now();
            budget.busy = Duration::ZERO;
            return true;
        }
        budget.busy.as_secs_f64()
            <= self.settings.cpu_share * elapsed.max(Duration::from_millis(100)).as_secs_f64()
    }

    /// Hand the shadows of `slots` a question to answer on the shadow
    /// thread, when there are any and the CPU share allows; counted as
    /// skipped when it does not.
    pub fn offer(&self, slots: &[Arc<Slot>], job: impl FnOnce(&Shadows) + Send + 'static) {
        if slots.is_empty() {
            return;
        }
        let skip = |shadows: &Self| {
            let mut records = lock(&shadows.records);
            for slot in slots {
                records
                    .entry(slot.name().to_string())
                    .or_default()
                    .report
                    .skipped += 1;
            }
        };
        if !self.within_budget() {
            skip(self);
            return;
        }
        match self.queue.try_send(Box::new(job)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => skip(self),
        }
    }

    fn record(
        &self,
        slot: &Slot,
        version: &Version,
        against: &str,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, Record>> {
        let mut records = lock(&self.records);
        let record = records.entry(slot.name().to_string()).or_default();
        let name = named(version);
        if record.report.version != name {
            // A new version of the shadow: counted afresh.
            *record = Record::default();
            record.report.version = name;
        }
        record.report.plugin = slot.name().to_string();
        record.report.against = against.to_string();
        record.report.calls += 1;
        records
    }

    /// A shadow's call failed.
    pub fn failed_call(&self, slot: &Slot, version: &Version, against: &str, error: &CallError) {
        let mut records = self.record(slot, version, against);
        let report = &mut records.get_mut(slot.name()).expect("recorded").report;
        report.errors += 1;
        if matches!(error, CallError::Timeout(_)) {
            report.timeouts += 1;
        }
        report.last_error = Some(error.to_string());
        report.failed = self.failing(report);
    }

    /// Compare a shadow's answers with the active one's, subject by
    /// subject: each top-level field of the answers' JSON that differs is
    /// counted.
    pub fn compare(
        &self,
        slot: &Slot,
        version: &Version,
        against: &str,
        answers: Vec<(String, Value, Value)>,
    ) {
        let mut records = self.record(slot, version, against);
        let record = records.get_mut(slot.name()).expect("recorded");
        let at = now();
        let mut differed = false;
        for (subject, active, shadow) in answers {
            record.report.compared += 1;
            let fields = differing_fields(&active, &shadow);
            if fields.is_empty() {
                continue;
            }
            differed = true;
            record.report.differing += 1;
            if record.report.by_subject.len() < SUBJECTS
                || record.report.by_subject.contains_key(&subject)
            {
                *record.report.by_subject.entry(subject.clone()).or_default() += 1;
            }
            for field in fields {
                *record.report.by_field.entry(field.clone()).or_default() += 1;
                let examples = record.examples.entry(field.clone()).or_default();
                if examples.len() == EXAMPLES {
                    examples.pop_front();
                }
                examples.push_back(Example {
                    subject: subject.clone(),
                    active: active.get(&field).cloned().unwrap_or(Value::Null),
                    shadow: shadow.get(&field).cloned().unwrap_or(Value::Null),
                    field,
                    at,
                });
            }
        }
        record.report.failed = self.failing(&record.report);
        drop(records);
        if differed {
            self.tell(slot.name());
        }
    }

    /// Whether a shadow fails too often: past the error rate, once it made
    /// enough calls.
    fn failing(&self, report: &ShadowReport) -> bool {
        report.calls >= self.settings.min_calls as u64
            && report.errors as f64 / report.calls as f64 > self.settings.max_error_rate
    }

    /// One event per round of differences (not one per difference).
    fn tell(&self, plugin: &str) {
        if let (Some(events), Some(report)) = (&self.events, self.report(plugin)) {
            events.publish(
                Kind::Plugin,
                None,
                serde_json::json!({"event": "shadow-differences", "plugin": plugin,
                    "compared": report.compared, "differing": report.differing, "by-field": report.by_field}),
            );
        }
    }

    /// What a shadow did.
    pub fn report(&self, plugin: &str) -> Option<ShadowReport> {
        let records = lock(&self.records);
        let record = records.get(plugin)?;
        let mut report = record.report.clone();
        report.examples = record.examples.values().flatten().cloned().collect();
        report.examples.sort_by_key(|e| std::cmp::Reverse(e.at));
        Some(report)
    }

    /// Every shadow's report.
    pub fn reports(&self) -> Vec<ShadowReport> {
        let names: Vec<String> = lock(&self.records).keys().cloned().collect();
        names.iter().filter_map(|n| self.report(n)).collect()
    }

    /// Forget what a plugin did as a shadow (promoted, or gone).
    pub fn forget(&self, plugin: &str) {
        lock(&self.records).remove(plugin);
    }
}

/// The top-level fields in which two answers differ (both objects), or
/// `answer` when they are not objects and differ.
pub fn differing_fields(active: &Value, shadow: &Value) -> Vec<String> {
    match (active, shadow) {
        (Value::Object(a), Value::Object(b)) => {
            let mut fields: Vec<String> = a
                .keys()
                .chain(b.keys())
                .filter(|k| *k != "recheck_after" && a.get(*k) != b.get(*k))
                .cloned()
                .collect();
            fields.sort();
            fields.dedup();
            fields
        }
        (a, b) if a != b => vec!["answer".into()],
        _ => Vec::new(),
    }
}

/// A question for the shadows of `slots`: `ask` puts it to a version and
/// names its answers by subject (an app, a task request, a node); they are
/// compared with `active`'s, the answers of `against`.
pub fn job(
    slots: Vec<Arc<Slot>>,
    against: String,
    at: Timestamp,
    active: BTreeMap<String, Value>,
    ask: impl Fn(&Version, &crate::wit::types::Context) -> Result<Vec<(String, Value)>, CallError>
    + Send
    + 'static,
) -> impl FnOnce(&Shadows) + Send + 'static {
    move |shadows| {
        for slot in &slots {
            let Some(version) = slot.current() else {
                continue;
            };
            match ask(&version, &version.context(at)) {
                Ok(answers) => {
                    let answers = answers
                        .into_iter()
                        .filter_map(|(subject, shadow)| {
                            let active = active.get(&subject)?.clone();
                            Some((subject, active, shadow))
                        })
                        .collect();
                    shadows.compare(slot, &version, &against, answers);
                }
                Err(error) => shadows.failed_call(slot, &version, &against, &error),
            }
        }
    }
}

/// The status world's question, as the deriver asks it: the verdicts of a
/// batch of apps.
pub fn status_job(
    slots: Vec<Arc<Slot>>,
    inputs: Vec<crate::wit::status::AppInput>,
    active: BTreeMap<String, Value>,
    against: String,
    at: Timestamp,
) -> impl FnOnce(&Shadows) + Send + 'static {
    job(slots, against, at, active, move |version, ctx| {
        let results = version.evaluate_batch(ctx, &inputs)?;
        Ok(inputs
            .iter()
            .zip(results)
            .map(|(input, result)| {
                let subject = format!("{}/{}", input.app.id.namespace, input.app.id.name);
                let answer = match result {
                    Ok(verdict) => serde_json::to_value(verdict).unwrap_or_default(),
                    Err(refusal) => serde_json::json!({"refused": refusal}),
                };
                (subject, answer)
            })
            .collect())
    })
}

/// Whether `world` has shadows to ask (for callers that build inputs only
/// when there are).
pub fn wanted(slots: &[Arc<Slot>], world: World) -> bool {
    slots
        .iter()
        .any(|s| s.current().is_some_and(|v| v.world() == world))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_differ_by_their_top_level_fields() {
        let a = json!({"stable": "running", "display": {"text": "Running"}, "recheck_after": 1});
        let b = json!({"stable": "degraded", "display": {"text": "Running"}, "recheck_after": 2});
        assert_eq!(differing_fields(&a, &b), ["stable"]);
        assert_eq!(differing_fields(&a, &a), Vec::<String>::new());
        let c = json!({"stable": "running", "display": {"text": "Up"}, "extra": 1});
        assert_eq!(differing_fields(&a, &c), ["display", "extra"]);
        assert_eq!(
            differing_fields(&json!("allow"), &json!("deny")),
            ["answer"]
        );
    }

    #[test]
    fn a_share_is_from_zero_to_one() {
        use crate::settings::share;
        assert_eq!(share("0.25"), Ok(0.25));
        assert!(share("1.5").is_err());
        assert!(share("lots").is_err());
    }
}
