//! The event stream: every verdict change, task change and plugin load or
//! rejection as a typed event with an increasing id, kept in a bounded
//! replay buffer and fanned out to subscribers. Publishing never waits for
//! a subscriber: one that falls behind is told to re-list (`resync`).
//!
//! Ids do not repeat across restarts: a process's first id is its start
//! time in microseconds since the Unix epoch (below 2^53, so that
//! JavaScript reads it exactly), and it counts up from there. A client that
//! resumes with an id this process never issued — from a previous run,
//! older than the buffer, or from the future — is told to resync.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

/// One event as the stream carries it.
#[derive(Debug, Clone)]
pub struct Event {
    /// Increases by one per event, from the process's first id.
    pub id: u64,
    /// What changed.
    pub kind: Kind,
    /// The app it concerns (`namespace/name`), for filtering.
    pub app: Option<String>,
    /// The cluster it happened in, on a fleet's stream (`verdict fleet`).
    pub cluster: Option<Box<str>>,
    /// When it was published.
    pub at: crate::time::Timestamp,
    /// The event as JSON (its id, type, time, app and data), written once
    /// when it is published: every subscriber sends the same text, and the
    /// replay buffer holds text, a third of what the parsed data takes.
    pub json: Box<str>,
}

/// How many events are kept for clients that reconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// Events kept for event-stream clients that reconnect with
    /// `Last-Event-ID`.
    #[arg(long = "event-buffer", value_name = "N", default_value = "10000", value_parser = crate::settings::positive)]
    pub buffer: usize,
    /// The most memory the kept events may take, in MiB: the oldest go
    /// first when they would take more (a fleet's members' events are
    /// bounded in bytes, not only in number).
    #[arg(long = "event-buffer-mib", value_name = "MIB", default_value = "64", value_parser = crate::settings::mib)]
    pub buffer_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// What an event is about; its SSE event type and the JSON's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// An application's verdict changed.
    Verdict,
    /// A task record changed.
    Task,
    /// A plugin was loaded, rejected or unloaded.
    Plugin,
    /// Failover decided, acted or was overridden.
    Failover,
    /// A person forced a status on an app or instance, or lifted it.
    Override,
    /// A VM-hosted app's delivery: an instance entered a stage or finished
    /// a list, a person acted on a rollout.
    Delivery,
    /// A fleet's member cluster was reached, lost or resynced.
    Cluster,
}

impl Kind {
    /// The name clients see.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Verdict => "verdict",
            Kind::Task => "task",
            Kind::Plugin => "plugin",
            Kind::Failover => "failover",
            Kind::Override => "override",
            Kind::Delivery => "delivery",
            Kind::Cluster => "cluster",
        }
    }
}

/// What [`Event::json`] holds.
#[derive(Serialize)]
struct Wire<'a> {
    id: u64,
    #[serde(rename = "type")]
    kind: Kind,
    /// When it was published, RFC 3339.
    at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    app: Option<&'a str>,
    data: &'a Value,
}

impl Event {
    pub fn namespace(&self) -> Option<&str> {
        self.app
            .as_deref()
            .and_then(|a| a.split_once('/'))
            .map(|(ns, _)| ns)
    }
}

/// Every event, in id order, for one consumer ([`Events::tap`]).
#[derive(Debug)]
pub struct Tap {
    pub receiver: mpsc::Receiver<Arc<Event>>,
    dropped: Arc<AtomicU64>,
}

impl Tap {
    /// Events this tap's full queue could not take, since it was made.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Live events, and the buffered ones a subscriber asked to replay.
pub(crate) type Subscription = (
    broadcast::Receiver<Arc<Event>>,
    Result<Vec<Arc<Event>>, Gone>,
);

/// Why a replay cannot be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone {
    /// The oldest id the buffer still holds.
    pub oldest: u64,
}

/// The largest first id: 2^53 - 2^32, so that ids stay exact in
/// JavaScript for billions of events.
const MAX_FIRST_ID: u64 = (1 << 53) - (1 << 32);

#[derive(Debug)]
struct Inner {
    /// The first id of this process.
    first: u64,
    next: u64,
    buffer: VecDeque<Arc<Event>>,
    /// The text the buffer holds, in bytes.
    bytes: usize,
    /// Consumers that must see every event (the history, the Kubernetes
    /// Events), each with a bounded queue and a count of drops of its own.
    taps: Vec<(mpsc::Sender<Arc<Event>>, Arc<AtomicU64>)>,
}

/// The text kept for replay unless told otherwise ([`Events::bounded_to`]).
const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// The host's events.
#[derive(Debug)]
pub struct Events {
    inner: Mutex<Inner>,
    capacity: usize,
    /// The most text the buffer holds, in bytes.
    max_bytes: usize,
    live: broadcast::Sender<Arc<Event>>,
}

impl Events {
    /// Keep the last `capacity` events for replay; ids start at the time
    /// of this call.
    pub fn new(capacity: usize) -> Self {
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Self::starting_at(micros.clamp(1, MAX_FIRST_ID), capacity)
    }

    /// Ids from `first`.
    pub(crate) fn starting_at(first: u64, capacity: usize) -> Self {
        let (live, _) = broadcast::channel(1024);
        Self {
            inner: Mutex::new(Inner {
                first,
                next: first,
                buffer: VecDeque::with_capacity(capacity.min(4096)),
                bytes: 0,
                taps: Vec::new(),
            }),
            capacity: capacity.max(1),
            max_bytes: DEFAULT_MAX_BYTES,
            live,
        }
    }

    /// Keep at most `bytes` of events' text for replay.
    pub fn bounded_to(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes.max(1);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publish an event; returns its id.
    pub(crate) fn publish(&self, kind: Kind, app: Option<String>, data: Value) -> u64 {
        self.publish_in(None, kind, app, &data)
    }

    /// Publish an event of a cluster (a fleet's member); returns its id.
    pub(crate) fn publish_in(
        &self,
        cluster: Option<&str>,
        kind: Kind,
        app: Option<String>,
        data: &Value,
    ) -> u64 {
        let mut inner = self.lock();
        let at = crate::time::now();
        let wire = Wire {
            id: inner.next,
            kind,
            at: crate::time::rfc3339(at),
            cluster,
            app: app.as_deref(),
            data,
        };
        let json = serde_json::to_string(&wire).unwrap_or_default().into();
        let event = Arc::new(Event {
            id: inner.next,
            kind,
            app,
            cluster: cluster.map(Box::from),
            at,
            json,
        });
        inner.next = inner.next.saturating_add(1);
        inner.bytes += event.json.len();
        inner.buffer.push_back(Arc::clone(&event));
        // The oldest go first, past either bound (the newest is always
        // kept: it is bounded by its source).
        while inner.buffer.len() > 1
            && (inner.buffer.len() > self.capacity || inner.bytes > self.max_bytes)
        {
            if let Some(old) = inner.buffer.pop_front() {
                inner.bytes -= old.json.len();
            }
        }
        // Under the lock, so that the live order is the id order. No
        // subscriber is not an error.
        let _ = self.live.send(Arc::clone(&event));
        inner
            .taps
            .retain(|(tap, dropped)| match tap.try_send(Arc::clone(&event)) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
        event.id
    }

    /// Every event from now on, in id order, into a queue of `capacity`
    /// events; when the queue is full, events are dropped for this tap
    /// alone (counted by [`Tap::dropped`]) rather than held up.
    pub fn tap(&self, capacity: usize) -> Tap {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        self.lock().taps.push((sender, Arc::clone(&dropped)));
        Tap { receiver, dropped }
    }

    /// Subscribe to live events, and the buffered events after `last` (all
    /// of them without `last`), or `Gone` when some after `last` were
    /// dropped from the buffer or `last` is not an id this process issued.
    pub(crate) fn subscribe(&self, last: Option<u64>) -> Subscription {
        let inner = self.lock();
        let receiver = self.live.subscribe();
        let oldest = inner.buffer.front().map_or(inner.next, |e| e.id);
        let replay = match last {
            None => Ok(Vec::new()),
            // Before this process (`first - 1` is where a client that has
            // seen nothing yet of it stands), or not issued yet.
            Some(last) if last < inner.first.saturating_sub(1) || last >= inner.next => {
                Err(Gone { oldest })
            }
            Some(last) if last.saturating_add(1) < oldest => Err(Gone { oldest }),
            Some(last) => Ok(inner
                .buffer
                .iter()
                .filter(|e| e.id > last)
                .cloned()
                .collect()),
        };
        (receiver, replay)
    }

    /// The id the next event will have.
    pub(crate) fn next_id(&self) -> u64 {
        self.lock().next
    }

    /// Events published by this process.
    pub fn published(&self) -> u64 {
        let inner = self.lock();
        inner.next - inner.first
    }

    /// Open streams.
    pub(crate) fn subscribers(&self) -> usize {
        self.live.receiver_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_another_run_or_not_issued_are_gone() {
        let before = Events::new(8);
        before.publish(Kind::Task, None, Value::Null);
        let last_of_before = before.next_id() - 1;
        let events = Events::new(8);
        assert!(
            events.next_id() > last_of_before,
            "ids do not repeat across runs"
        );
        // Nothing published yet: the id just before this run's first is
        // where a fresh client stands.
        assert!(events.subscribe(Some(events.next_id() - 1)).1.is_ok());
        for n in 0..3 {
            events.publish(Kind::Task, None, serde_json::json!(n));
        }
        for id in [1, 5, last_of_before, events.next_id(), u64::MAX] {
            assert!(events.subscribe(Some(id)).1.is_err(), "{id}");
        }
        let ok = events.subscribe(Some(events.next_id() - 2)).1.unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(events.published(), 3);
    }

    #[test]
    fn the_buffer_is_bounded_in_bytes_too() {
        let events = Events::starting_at(1, 1000).bounded_to(4096);
        let big = serde_json::json!({"text": "x".repeat(1000)});
        for _ in 0..20 {
            events.publish(Kind::Verdict, None, big.clone());
        }
        let inner = events.lock();
        assert!(inner.bytes <= 4096, "{} bytes kept", inner.bytes);
        assert!(
            inner.buffer.len() >= 3 && inner.buffer.len() < 5,
            "{}",
            inner.buffer.len()
        );
        assert_eq!(inner.buffer.back().map(|e| e.id), Some(20));
    }

    #[test]
    fn replay_after_an_id_and_gone_past_the_buffer() {
        let events = Events::starting_at(1, 3);
        for n in 0..5 {
            events.publish(Kind::Task, None, serde_json::json!(n));
        }
        let (_, replay) = events.subscribe(Some(3));
        let ids: Vec<u64> = replay.unwrap().iter().map(|e| e.id).collect();
        assert_eq!(ids, [4, 5]);
        let (_, replay) = events.subscribe(Some(2));
        assert_eq!(replay.unwrap().len(), 3, "3, 4, 5 are held");
        let (_, replay) = events.subscribe(Some(1));
        assert_eq!(replay.unwrap_err(), Gone { oldest: 3 });
        let (mut live, _) = events.subscribe(None);
        events.publish(Kind::Plugin, None, Value::Null);
        assert_eq!(live.try_recv().unwrap().id, 6);
    }

    #[test]
    fn a_tap_sees_every_event_until_it_is_full() {
        let events = Events::starting_at(1, 2);
        let mut tap = events.tap(3);
        let other = events.tap(8);
        for n in 0..5 {
            events.publish(Kind::Task, None, serde_json::json!(n));
        }
        let ids: Vec<u64> = std::iter::from_fn(|| tap.receiver.try_recv().ok())
            .map(|e| e.id)
            .collect();
        assert_eq!(
            ids,
            [1, 2, 3],
            "past the replay buffer, up to its own bound"
        );
        assert_eq!(tap.dropped(), 2);
        assert_eq!(other.dropped(), 0, "each tap counts its own drops");
        let dropped = Arc::clone(&tap.dropped);
        drop(tap);
        events.publish(Kind::Task, None, Value::Null);
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            2,
            "a closed tap is let go, not counted"
        );
        assert_eq!(other.receiver.len(), 6);
    }

    #[test]
    fn an_event_is_written_once_as_the_stream_sends_it() {
        let events = Events::starting_at(7, 3);
        events.publish(
            Kind::Verdict,
            Some("shop/web".into()),
            serde_json::json!({"ok": 1}),
        );
        let (_, replay) = events.subscribe(Some(6));
        let event = &replay.unwrap()[0];
        let sent: Value = serde_json::from_str(&event.json).unwrap();
        assert_eq!(sent["id"], 7);
        assert_eq!(sent["type"], "verdict");
        assert_eq!(sent["app"], "shop/web");
        assert_eq!(sent["data"], serde_json::json!({"ok": 1}));
        assert!(sent["at"].as_str().unwrap().ends_with('Z'));
        assert_eq!(event.namespace(), Some("shop"));
    }
}
