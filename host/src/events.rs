//! The event stream: every verdict change, task change and plugin load or
//! rejection as a typed event with an increasing id, kept in a bounded
//! replay buffer and fanned out to subscribers. Publishing never waits for
//! a subscriber: one that falls behind is told to re-list (`resync`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

/// One event as the stream carries it.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Increases by one per event, from 1.
    pub id: u64,
    /// `verdict`, `task`, `plugin` or `resync`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// When it was published, RFC 3339.
    pub at: String,
    /// The app it concerns (`namespace/name`), for filtering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    pub data: Value,
}

impl Event {
    pub fn namespace(&self) -> Option<&str> {
        self.app
            .as_deref()
            .and_then(|a| a.split_once('/'))
            .map(|(ns, _)| ns)
    }
}

/// Live events, and the buffered ones a subscriber asked to replay.
pub type Subscription = (
    broadcast::Receiver<Arc<Event>>,
    Result<Vec<Arc<Event>>, Gone>,
);

/// Why a replay cannot be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone {
    /// The oldest id the buffer still holds.
    pub oldest: u64,
}

#[derive(Debug)]
struct Inner {
    next: u64,
    buffer: VecDeque<Arc<Event>>,
}

/// The host's events.
#[derive(Debug)]
pub struct Events {
    inner: Mutex<Inner>,
    capacity: usize,
    live: broadcast::Sender<Arc<Event>>,
}

impl Events {
    /// Keep the last `capacity` events for replay.
    pub fn new(capacity: usize) -> Self {
        let (live, _) = broadcast::channel(1024);
        Self {
            inner: Mutex::new(Inner {
                next: 1,
                buffer: VecDeque::with_capacity(capacity.min(4096)),
            }),
            capacity: capacity.max(1),
            live,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publish an event; returns its id.
    pub fn publish(&self, kind: &'static str, app: Option<String>, data: Value) -> u64 {
        let mut inner = self.lock();
        let event = Arc::new(Event {
            id: inner.next,
            kind,
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            app,
            data,
        });
        inner.next += 1;
        if inner.buffer.len() == self.capacity {
            inner.buffer.pop_front();
        }
        inner.buffer.push_back(Arc::clone(&event));
        // Under the lock, so that the live order is the id order. No
        // subscriber is not an error.
        let _ = self.live.send(Arc::clone(&event));
        event.id
    }

    /// Subscribe to live events, and the buffered events after `last` (all
    /// of them without `last`), or `Gone` when some after `last` were
    /// dropped from the buffer.
    pub fn subscribe(&self, last: Option<u64>) -> Subscription {
        let inner = self.lock();
        let receiver = self.live.subscribe();
        let oldest = inner.buffer.front().map_or(inner.next, |e| e.id);
        let replay = match last {
            None => Ok(Vec::new()),
            Some(last) if last + 1 < oldest => Err(Gone { oldest }),
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
    pub fn next_id(&self) -> u64 {
        self.lock().next
    }

    /// Open streams.
    pub fn subscribers(&self) -> usize {
        self.live.receiver_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_after_an_id_and_gone_past_the_buffer() {
        let events = Events::new(3);
        for n in 0..5 {
            events.publish("task", None, serde_json::json!(n));
        }
        let (_, replay) = events.subscribe(Some(3));
        let ids: Vec<u64> = replay.unwrap().iter().map(|e| e.id).collect();
        assert_eq!(ids, [4, 5]);
        let (_, replay) = events.subscribe(Some(2));
        assert_eq!(replay.unwrap().len(), 3, "3, 4, 5 are held");
        let (_, replay) = events.subscribe(Some(1));
        assert_eq!(replay.unwrap_err(), Gone { oldest: 3 });
        let (mut live, _) = events.subscribe(None);
        events.publish("plugin", None, Value::Null);
        assert_eq!(live.try_recv().unwrap().id, 6);
    }
}
