//! Each change of an app's status as a Kubernetes Event (`events.k8s.io/v1`)
//! on its workload — or its object of a configured kind when it has no
//! workload — so that `kubectl describe` and `kubectl events` show what
//! verdict saw, with the cause when something caused it and the policy
//! version that judged it.
//!
//! Every replica follows the changes (through a tap of its own, so that
//! one that takes over knows each app's last status); only the one that
//! acts writes them, through the fenced client. As Kubernetes' own
//! recorder does, the same event on the same object within six minutes
//! becomes one series with a count (kube's [`Recorder`]), and each app may
//! spend a burst of [`BURST`] events, then one per [`REFILL`]: a crash loop
//! is a handful of Events, not one per restart. A slow API server never
//! holds up the tap: past [`QUEUE`] waiting Events, new ones are dropped
//! and counted.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder as KubeRecorder, Reporter};
use tokio::sync::mpsc;

use super::record::Recorder;
use super::store::{Held, Seen};
use crate::events::{Kind, Tap};
use crate::leader::Leadership;
use crate::verdicts::live::Live;

/// The reporting controller the Events name.
pub const CONTROLLER: &str = "verdict";
/// Events an app may write at once…
pub const BURST: u32 = 25;
/// …and the time each further one waits for (Kubernetes' recorder: 25,
/// then one every five minutes, per object).
pub const REFILL: Duration = Duration::from_secs(300);
/// Events waiting to be written.
pub const QUEUE: usize = 1024;
/// The longest note the API takes, in bytes.
const NOTE_MAX: usize = 1024;

/// How often a failure to write Events is said in the log.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What the Events did since the start, for `/metrics`.
#[derive(Debug, Default)]
pub struct Counts {
    /// Written (created, or counted into their series).
    pub written: AtomicU64,
    /// Refused by the API server, or not sent for want of a connection.
    pub failed: AtomicU64,
    /// Past an app's burst.
    pub limited: AtomicU64,
    /// Past the queue's bound.
    pub dropped: AtomicU64,
    /// Of apps with neither a workload nor an object to refer to.
    pub unreferenced: AtomicU64,
}

/// One Event to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Announcement {
    pub type_: EventType,
    pub reason: String,
    pub note: String,
    pub regarding: ObjectReference,
}

/// `crash-loop` → `CrashLoop`.
fn pascal(text: &str) -> String {
    text.split(['-', '_', ' '])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

/// How a status reads in a note: `degraded`, `running (starting)`.
fn shown(held: &Held) -> String {
    match &held.transitional {
        Some(t) => format!("{} ({t})", held.status),
        None => held.status.clone(),
    }
}

/// The Event for an app's change from `before` to what `now` holds.
fn announcement(before: &Held, now: &Seen, regarding: ObjectReference) -> Announcement {
    let held = &now.held;
    let reason = pascal(held.transitional.as_deref().unwrap_or(&held.status));
    let warning = held.transitional.is_none() && ["degraded", "panic"].contains(&&*held.status);
    let mut note = format!("{} → {}", shown(before), shown(held));
    if !now.reason.is_empty() {
        note = format!("{note}: {}", now.reason);
    }
    if let Some(cause) = &now.cause {
        note = format!("{note} (after {} {})", cause.kind, cause.id);
    }
    if let Some(policy) = &now.policy {
        note = format!("{note}; judged by {policy}");
    }
    if note.len() > NOTE_MAX {
        let mut end = NOTE_MAX - '…'.len_utf8();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push('…');
    }
    Announcement {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason,
        note,
        regarding,
    }
}

/// An app's allowance of Events: [`BURST`] at most, one more per
/// [`REFILL`].
#[derive(Debug, Clone, Copy)]
struct Allowance {
    tokens: u32,
    since: Instant,
}

impl Allowance {
    fn full(now: Instant) -> Self {
        Self {
            tokens: BURST,
            since: now,
        }
    }

    /// Spend one, when there is one.
    fn spend(&mut self, now: Instant) -> bool {
        let earned = now.duration_since(self.since).as_secs() / REFILL.as_secs();
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(BURST);
            self.since += REFILL * earned.min(BURST);
            if self.tokens == BURST {
                self.since = now;
            }
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// What the follower remembers: each app's last status and allowance.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    recorder: Recorder,
    last: HashMap<(String, String), Held>,
    allowances: HashMap<(String, String), Allowance>,
}

impl Changes {
    /// The app's change this event makes, as (app, status before, what it
    /// holds now), when it is one: the first verdict of an app is none
    /// (a restarted host does not announce every app again).
    pub fn see(&mut self, event: &crate::events::Event) -> Option<((String, String), Held, Seen)> {
        if event.kind != Kind::Verdict {
            // Marks, remembered as causes of the changes that follow.
            self.recorder.mark(event);
            return None;
        }
        let seen = self
            .recorder
            .seen(event, |_, _| Vec::new())
            .into_iter()
            .find(|s| s.subject.kind.is_empty())?;
        let app = (seen.subject.namespace.clone(), seen.subject.app.clone());
        let before = self.last.insert(app.clone(), seen.held.clone())?;
        // The displayed text alone changing is no change of status.
        let changed =
            (before.status != seen.held.status) || (before.transitional != seen.held.transitional);
        changed.then_some((app, before, seen))
    }

    /// Forget what is too old to matter at `at`: marks that can no longer
    /// cause a change, allowances full again.
    fn forget(&mut self, at: crate::time::Timestamp, now: Instant) {
        self.recorder.forget_before(at);
        self.allowances
            .retain(|_, a| now.duration_since(a.since) < REFILL * BURST);
    }

    /// Whether the app may write one more Event now.
    pub fn allowed(&mut self, app: &(String, String), now: Instant) -> bool {
        self.allowances
            .entry(app.clone())
            .or_insert_with(|| Allowance::full(now))
            .spend(now)
    }
}

/// The Events of apps' status changes.
#[derive(Debug, Default)]
pub struct Announcer {
    pub counts: Counts,
}

impl Announcer {
    /// Follow the tap until it closes, writing Events while this replica
    /// acts; `client` is the fenced client, `replica` this replica's name.
    pub async fn run(
        self: Arc<Self>,
        mut tap: Tap,
        live: Live,
        leadership: Arc<Leadership>,
        client: kube::Client,
    ) {
        let reporter = Reporter {
            controller: CONTROLLER.into(),
            instance: Some(leadership.standing().replica),
        };
        let (queue, mut waiting) = mpsc::channel::<Announcement>(QUEUE);
        let writer = {
            let this = Arc::clone(&self);
            let recorder = KubeRecorder::new(client, reporter);
            tokio::spawn(async move {
                // A failure is a warning, at most one a minute with the
                // count since the last (the metric counts every one).
                let mut warned: Option<Instant> = None;
                let mut unsaid = 0u64;
                while let Some(a) = waiting.recv().await {
                    let event = KubeEvent {
                        type_: a.type_,
                        reason: a.reason,
                        note: Some(a.note),
                        action: "Judge".into(),
                        secondary: None,
                    };
                    match recorder.publish(&event, &a.regarding).await {
                        Ok(()) => this.counts.written.fetch_add(1, Ordering::Relaxed),
                        Err(error) => {
                            unsaid += 1;
                            if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                                tracing::warn!(
                                    %error,
                                    failed = unsaid,
                                    "Kubernetes Events were not written (verdict_kube_events_total counts them)"
                                );
                                warned = Some(Instant::now());
                                unsaid = 0;
                            }
                            this.counts.failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            })
        };
        let mut changes = Changes::default();
        let mut batch = Vec::new();
        while tap.receiver.recv_many(&mut batch, 1024).await > 0 {
            let now = Instant::now();
            let acting = leadership.acting().is_some();
            let mut due = Vec::new();
            for event in batch.drain(..) {
                let Some((app, before, seen)) = changes.see(&event) else {
                    continue;
                };
                if !acting {
                    continue;
                }
                if !changes.allowed(&app, now) {
                    self.counts.limited.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                due.push((app, before, seen));
            }
            changes.forget(crate::time::now(), now);
            if due.is_empty() {
                continue;
            }
            let announcements: Vec<Option<Announcement>> = {
                let snapshot = live.observed.read();
                due.iter()
                    .map(|(app, before, seen)| {
                        let regarding = snapshot.regarding(app)?;
                        Some(announcement(before, seen, regarding))
                    })
                    .collect()
            };
            for announcement in announcements {
                let Some(announcement) = announcement else {
                    self.counts.unreferenced.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if queue.try_send(announcement).is_err() {
                    self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        drop(queue);
        let _ = writer.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Events;
    use serde_json::json;

    fn verdict(stable: &str, transitional: Option<(&str, &str)>) -> serde_json::Value {
        json!({
            "namespace": "shop", "name": "web", "stable": stable,
            "stable_reason": format!("web is {stable}"),
            "transitional": transitional.map(|(status, task)| json!({"status": status, "task": task})),
            "display": {"status": stable, "text": stable},
            "policy": "default-status@1.2.0",
        })
    }

    fn reference() -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            namespace: Some("shop".into()),
            name: Some("web".into()),
            uid: Some("u-1".into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn a_change_is_announced_and_a_first_sight_or_a_repeat_is_not() {
        let events = Events::starting_at(1, 64);
        let mut tap = events.tap(64);
        let mut changes = Changes::default();
        let app = Some("shop/web".to_string());
        for (stable, transitional) in [
            ("running", None),
            ("running", None),
            ("running", Some(("stopping", "t-1"))),
            ("stopped", None),
            ("degraded", None),
        ] {
            events.publish(Kind::Verdict, app.clone(), verdict(stable, transitional));
        }
        let mut seen = Vec::new();
        while let Ok(event) = tap.receiver.try_recv() {
            if let Some((_, before, now)) = changes.see(&event) {
                seen.push(announcement(&before, &now, reference()));
            }
        }
        let said: Vec<(&str, &str)> = seen.iter().map(|a| (&*a.reason, &*a.note)).collect();
        assert_eq!(
            said,
            [
                (
                    "Stopping",
                    "running → running (stopping): web is running (after task t-1); \
                     judged by default-status@1.2.0"
                ),
                (
                    "Stopped",
                    "running (stopping) → stopped: web is stopped; judged by default-status@1.2.0"
                ),
                (
                    "Degraded",
                    "stopped → degraded: web is degraded; judged by default-status@1.2.0"
                ),
            ]
        );
        let types: Vec<EventType> = seen.iter().map(|a| a.type_).collect();
        assert_eq!(
            types,
            [EventType::Normal, EventType::Normal, EventType::Warning]
        );
    }

    #[test]
    fn an_app_spends_a_burst_then_one_per_refill() {
        let mut changes = Changes::default();
        let app = ("shop".to_string(), "web".to_string());
        let start = Instant::now();
        let allowed = (0..BURST + 5)
            .filter(|_| changes.allowed(&app, start))
            .count();
        assert_eq!(allowed, BURST as usize);
        assert!(!changes.allowed(&app, start + REFILL / 2));
        assert!(changes.allowed(&app, start + REFILL));
        assert!(!changes.allowed(&app, start + REFILL + REFILL / 2));
        let other = ("shop".to_string(), "api".to_string());
        assert!(changes.allowed(&other, start), "each app has its own");
        // Long quiet: the allowance is full again, and forgotten.
        let later = start + REFILL * (BURST + 1);
        changes.forget(crate::time::now(), later);
        assert!(changes.allowances.is_empty());
        let allowed = (0..BURST + 5)
            .filter(|_| changes.allowed(&app, later))
            .count();
        assert_eq!(allowed, BURST as usize);
    }

    #[test]
    fn a_long_note_is_cut_at_the_apis_bound_on_a_character() {
        let events = Events::starting_at(1, 8);
        let mut tap = events.tap(8);
        let mut long = verdict("running", None);
        events.publish(Kind::Verdict, Some("shop/web".into()), long.clone());
        long["stable"] = json!("degraded");
        long["stable_reason"] = json!("é".repeat(800));
        events.publish(Kind::Verdict, Some("shop/web".into()), long);
        let mut changes = Changes::default();
        let mut found = None;
        while let Ok(event) = tap.receiver.try_recv() {
            if let Some((_, before, now)) = changes.see(&event) {
                found = Some(announcement(&before, &now, reference()));
            }
        }
        let note = found.expect("a change").note;
        assert!(note.len() <= NOTE_MAX, "{}", note.len());
        assert!(note.ends_with('…'));
    }

    #[test]
    fn names_read_as_kubernetes_reasons() {
        assert_eq!(pascal("crash-loop"), "CrashLoop");
        assert_eq!(pascal("running"), "Running");
        assert_eq!(pascal("not-existed"), "NotExisted");
    }
}
