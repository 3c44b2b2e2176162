//! What the delivery does, as Kubernetes Events on the set it does it for
//! (and, of an instance, on its Server too):
//! an instance's list entered and how it ended (a failed one a warning,
//! naming its step), an instance made, removed or adopted, a person's
//! retry, skip or approval, a list superseded, a write the API server
//! refused; and on a deployment, a person's approval, promotion or abort
//! of its rollout. `kubectl describe vmrs web`, `kubectl describe server
//! web-0` and `kubectl events` tell it.
//!
//! Events are written by a task of their own from a bounded queue, through
//! kube's recorder (a repeat becomes one series with a count); a full queue
//! or a refused Event loses the Event, with a warning, never the
//! delivery's work.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;
use tokio::sync::mpsc;

use super::resources::{API_VERSION, VmReplicaSet};

/// The controller's name on its Events.
const CONTROLLER: &str = "verdict-vm-delivery";
/// Events waiting to be written at most; more are dropped and counted.
const QUEUE: usize = 1024;
/// The longest note an Event carries (the API server's bound is 1 kB).
const NOTE: usize = 1000;

/// The Event writer of the delivery.
#[derive(Debug)]
pub struct Announcer {
    queue: mpsc::Sender<(ObjectReference, Event)>,
}

impl Announcer {
    /// Start the writer on `client` (the leader's fenced client), as the
    /// replica `replica`.
    pub fn start(client: kube::Client, replica: String) -> Arc<Self> {
        let (queue, mut waiting) = mpsc::channel::<(ObjectReference, Event)>(QUEUE);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: CONTROLLER.into(),
                instance: Some(replica),
            },
        );
        tokio::spawn(async move {
            while let Some((regarding, event)) = waiting.recv().await {
                if let Err(error) = recorder.publish(&event, &regarding).await {
                    tracing::warn!(%error, reason = event.reason, "VM delivery: a Kubernetes Event was not written");
                }
            }
        });
        Arc::new(Self { queue })
    }

    /// Announce a person's action on the rollout of a deployment (`action`
    /// as its status keeps it: `action`, `code`, `step`, `by`, `why`).
    pub fn announce_rollout(&self, namespace: &str, deployment: &str, action: &Value) {
        let text = |key: &str| action[key].as_str().unwrap_or_default();
        let (reason, what) = match text("action") {
            "approve" => ("RolloutApproved", "approved the gate of"),
            "promote" => ("RolloutPromoted", "promoted"),
            "abort" => ("RolloutAborted", "aborted"),
            _ => return,
        };
        let mut note = format!("{} {what} the rollout of {}", text("by"), text("code"));
        if !text("why").is_empty() {
            note.push_str(&format!(": {}", text("why")));
        }
        let event = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(cut(note)),
            action: "Deliver".into(),
            secondary: None,
        };
        self.send(
            reference(API_VERSION, "VMDeployment", namespace, deployment),
            event,
        );
    }

    /// Announce what happened to `set` (`data` as the event stream has
    /// it), when it is something an Event tells.
    pub fn announce(&self, set: &VmReplicaSet, data: &Value) {
        let Some(mut event) = event_of(data) else {
            return;
        };
        let regarding = ObjectReference {
            uid: (!set.uid.is_empty()).then(|| set.uid.clone()),
            ..reference(API_VERSION, "VMReplicaSet", &set.namespace, &set.name)
        };
        // The instance's Server as the Event's related object: the
        // recorder counts repeats of one reason about one instance into a
        // series, and keeps those of different instances apart. The
        // Server has the Event too, its set related.
        if let Some(instance) = data["instance"].as_str().filter(|i| !i.is_empty()) {
            let server = reference(API_VERSION, "Server", &set.namespace, instance);
            event.secondary = Some(server.clone());
            let on_server = Event {
                type_: event.type_,
                reason: event.reason.clone(),
                note: event.note.clone(),
                action: event.action.clone(),
                secondary: Some(regarding.clone()),
            };
            self.send(server, on_server);
        }
        self.send(regarding, event);
    }

    /// Queue an Event for the writer; with the queue full it is lost, and
    /// the log says so.
    fn send(&self, regarding: ObjectReference, event: Event) {
        if self.queue.try_send((regarding, event)).is_err() {
            tracing::warn!("VM delivery: the Kubernetes Events queue is full; an Event is lost");
        }
    }
}

/// An object by its API version, kind, namespace and name.
fn reference(api_version: &str, kind: &str, namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..ObjectReference::default()
    }
}

/// The Event of one thing the delivery did, as the event stream has it;
/// none for what an Event does not tell.
pub fn event_of(data: &Value) -> Option<Event> {
    let text = |key: &str| data[key].as_str().unwrap_or_default();
    let instance = text("instance");
    let by = match (text("by"), text("why")) {
        ("", _) => String::new(),
        (by, "") => format!(" by {by}"),
        (by, why) => format!(" by {by}: {why}"),
    };
    let at = match text("task") {
        "" => String::new(),
        task => format!(" at {task}"),
    };
    let (type_, reason, note) = match text("event") {
        "entered" => {
            let tasks: Vec<&str> = data["tasks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let why = match text("reason") {
                "" => String::new(),
                reason => format!(" ({reason})"),
            };
            (
                EventType::Normal,
                "ListStarted",
                format!(
                    "{instance} entered {}{why}: {}",
                    text("stage"),
                    match tasks.is_empty() {
                        true => "no tasks".to_string(),
                        false => tasks.join(", "),
                    }
                ),
            )
        }
        "finished" if text("outcome") == "failed" => (
            EventType::Warning,
            "ListFailed",
            format!(
                "{instance}: {} failed{at}: {}",
                text("stage"),
                text("message")
            ),
        ),
        "finished" => (
            EventType::Normal,
            "ListSucceeded",
            format!("{instance}: {} done", text("stage")),
        ),
        "forced" => (
            EventType::Normal,
            "StageForced",
            format!(
                "{instance} enters {} as a person asked ({})",
                text("stage"),
                text("by")
            ),
        ),
        "force-refused" => (
            EventType::Warning,
            "ForceRefused",
            format!(
                "{instance}: the stage {} {} asked is not entered: {}",
                text("stage"),
                text("by"),
                text("why")
            ),
        ),
        "status-restored" => (
            EventType::Warning,
            "StatusRestored",
            format!(
                "{instance}: its status was written by {} and is put back (a status is its controller's alone; a person forces a stage through spec.force): {}",
                text("by"),
                text("changed")
            ),
        ),
        "removed" => (
            EventType::Normal,
            "InstanceRemoved",
            format!("{instance} goes: {}", text("reason")),
        ),
        "adopted" => (
            EventType::Normal,
            "InstanceAdopted",
            format!("{instance}, an existing VM, is adopted"),
        ),
        "made" => (
            EventType::Normal,
            "InstanceRequested",
            format!("a machine is requested for {instance}"),
        ),
        "retried" => (
            EventType::Normal,
            "ListRetried",
            format!("{instance}: its list retried{at}{by}"),
        ),
        "skipped" => (
            EventType::Normal,
            "StepSkipped",
            format!("{instance}: a step skipped{at}{by}"),
        ),
        "approved" => (
            EventType::Normal,
            "ListApproved",
            format!("{instance}: its list approved{by}"),
        ),
        "superseded" => (
            EventType::Normal,
            "ListSuperseded",
            format!("{instance}: its list superseded{at}: {}", text("why")),
        ),
        "refused" => (
            EventType::Warning,
            "WriteRefused",
            format!("{instance}: {}", text("message")),
        ),
        _ => return None,
    };
    let note = cut(note);
    // The stage as the action: the recorder counts repeats of an action
    // into one series, and a list of another stage is another action.
    let action = match text("stage") {
        "" => "Deliver".to_string(),
        stage => format!("Deliver/{stage}"),
    };
    Some(Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action,
        secondary: None,
    })
}

/// A note cut to what the API server takes, on a character boundary.
fn cut(mut note: String) -> String {
    if note.len() > NOTE {
        let mut end = NOTE;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_the_delivery_does_reads_as_events_naming_instance_and_step() {
        let failed = event_of(&json!({"instance": "web-1", "event": "finished",
            "stage": "initializing", "outcome": "failed", "task": "install-environment",
            "message": "the hook timed out"}))
        .unwrap();
        assert_eq!(failed.type_, EventType::Warning);
        assert_eq!(failed.reason, "ListFailed");
        assert_eq!(
            failed.note.as_deref(),
            Some("web-1: initializing failed at install-environment: the hook timed out")
        );
        let skipped = event_of(&json!({"instance": "web-1", "event": "skipped",
            "task": "delete-machine", "by": "dave", "why": "gone"}))
        .unwrap();
        assert_eq!(
            (skipped.type_, skipped.note.as_deref()),
            (
                EventType::Normal,
                Some("web-1: a step skipped at delete-machine by dave: gone")
            )
        );
        let entered = event_of(&json!({"instance": "web-0", "event": "entered",
            "stage": "deploying", "tasks": ["deploy-code", "health-check"],
            "reason": "the code changed"}))
        .unwrap();
        assert_eq!(
            entered.note.as_deref(),
            Some("web-0 entered deploying (the code changed): deploy-code, health-check")
        );
        assert_eq!(entered.action, "Deliver/deploying");
        // A request is the HTTP API's; it is no Event of the set's.
        assert!(event_of(&json!({"event": "requested"})).is_none());
        // A long message is cut to what the API server takes.
        let long = event_of(&json!({"instance": "web-1", "event": "refused",
            "message": "é".repeat(2000)}))
        .unwrap();
        assert!(long.note.unwrap().len() <= NOTE);
    }
}
