//! What the history takes from the event stream: each verdict event becomes
//! what its app and each of its instances hold now (an instance missing
//! from it is gone), with the cause when something caused it; tasks,
//! overrides, failover decisions, rollout steps and policy swaps become
//! marks. Nothing here runs on the derivation's thread: the events arrive
//! through a tap of their own.

use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;
use serde_json::Value;

use super::store::{Cause, GONE, Held, Mark, Seen, Subject};
use crate::events::{Event, Kind};
use crate::time::Timestamp;

/// How long after a mark a change is taken to be its effect.
const CAUSE_WINDOW_MS: Timestamp = 60_000;

#[derive(Deserialize)]
struct Verdict {
    namespace: String,
    name: String,
    stable: String,
    stable_reason: String,
    transitional: Option<Transitional>,
    display: Display,
    #[serde(default)]
    groups: Vec<Group>,
    #[serde(default)]
    objects: Vec<Object>,
    forced: Option<Forced>,
    policy: Option<String>,
}

#[derive(Deserialize)]
struct Transitional {
    status: String,
    task: String,
}

#[derive(Deserialize)]
struct Display {
    status: String,
    text: String,
}

#[derive(Deserialize)]
struct Group {
    name: String,
    node: Option<String>,
    status: String,
    reason: String,
}

#[derive(Deserialize)]
struct Object {
    kind: String,
    name: String,
    status: Option<String>,
    reason: Option<String>,
    node: Option<String>,
}

#[derive(Deserialize)]
struct Forced {
    by: String,
    reason: String,
}

/// Turns events into records, remembering the marks that may explain the
/// changes that follow them.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    /// The latest mark of each app.
    by_app: HashMap<(String, String), (Timestamp, Cause)>,
    /// Failover's latest mark of each node, and the latest policy swap.
    by_node: HashMap<String, Timestamp>,
    swapped: Option<(Timestamp, String)>,
    /// Each task's last phase, so that progress alone is no mark.
    phases: HashMap<String, String>,
}

/// An event's data (its JSON's `data`).
fn data(event: &Event) -> Value {
    serde_json::from_str::<Value>(&event.json)
        .map(|mut v| v["data"].take())
        .unwrap_or(Value::Null)
}

fn text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

impl Recorder {
    /// A mark for the event, if it is one (remembered as a possible cause).
    pub fn mark(&mut self, event: &Event) -> Option<Mark> {
        let data = data(event);
        let app = event
            .app
            .as_deref()
            .and_then(|a| a.split_once('/'))
            .map(|(ns, name)| (ns.to_string(), name.to_string()));
        let at = event.at;
        let blank = |kind: &str, reference: Option<String>, text: String| Mark {
            id: 0,
            at,
            namespace: app.as_ref().map(|a| a.0.clone()),
            app: app.as_ref().map(|a| a.1.clone()),
            kind: kind.into(),
            reference,
            node: None,
            text,
        };
        let mark = match event.kind {
            Kind::Verdict | Kind::Cluster => return None,
            Kind::Task => {
                let id = text(&data["id"])?;
                let phase = text(&data["phase"]).unwrap_or_default();
                if self.phases.get(&id) == Some(&phase) {
                    return None;
                }
                let done = ["succeeded", "failed", "cancelled"].contains(&phase.as_str());
                if done {
                    self.phases.remove(&id);
                } else {
                    self.phases.insert(id.clone(), phase.clone());
                }
                let action = text(&data["action"]).unwrap_or_default();
                let mut said = format!("{action} {phase}");
                if let Some(message) = data["message"].as_str().filter(|m| !m.is_empty()) {
                    said = format!("{said}: {message}");
                }
                blank("task", Some(id), said)
            }
            Kind::Override => {
                let status = text(&data["override"]["status"]).unwrap_or_default();
                let said = format!(
                    "{} {status} by {}: {}",
                    text(&data["event"]).unwrap_or_default(),
                    text(&data["by"]).unwrap_or_default(),
                    text(&data["reason"]).unwrap_or_default()
                );
                blank("override", text(&data["instance"]), said)
            }
            Kind::Delivery => {
                let event_name = text(&data["event"])
                    .or_else(|| text(&data["action"]))
                    .unwrap_or_default();
                let said = match text(&data["instance"]) {
                    Some(instance) => format!("{instance}: {event_name}"),
                    None => event_name,
                };
                blank("rollout", text(&data["instance"]), said)
            }
            Kind::Plugin => {
                if data["event"] != "loaded" && data["event"] != "demoted" {
                    return None;
                }
                let plugin = &data["plugin"];
                let version = format!(
                    "{}@{}",
                    text(&plugin["name"]).or_else(|| text(&plugin["plugin"]))?,
                    text(&plugin["version"]).unwrap_or_default()
                );
                self.swapped = Some((at, version.clone()));
                let said = format!("{} {version}", text(&data["event"]).unwrap_or_default());
                blank("policy", Some(version), said)
            }
            Kind::Failover => {
                let report = &data["node"];
                let node = text(&report["node"]).or_else(|| text(&data["node"]))?;
                let actions: Vec<String> = report["actions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| {
                        let key = text(&a["key"])?;
                        Some(match text(&a["state"]) {
                            Some(state) => format!("{key} ({state})"),
                            None => key,
                        })
                    })
                    .collect();
                let health = text(&report["health"]);
                let event_name = text(&data["event"]).unwrap_or_default();
                if event_name == "decision"
                    && actions.is_empty()
                    && health.as_deref() == Some("healthy")
                {
                    return None;
                }
                let mut said = format!("node {node}");
                if let Some(health) = health {
                    said = format!("{said} {health}");
                }
                if !actions.is_empty() {
                    said = format!("{said}: {}", actions.join(", "));
                } else if event_name != "decision" {
                    said = format!("{said}: {event_name}");
                }
                self.by_node.insert(node.clone(), at);
                Mark {
                    node: Some(node.clone()),
                    ..blank("failover", Some(node), said)
                }
            }
        };
        if let Some(key) = app {
            let id = mark.reference.clone().unwrap_or_else(|| mark.text.clone());
            let cause = Cause {
                kind: mark.kind.clone(),
                id,
            };
            self.by_app.insert(key, (at, cause));
        }
        Some(mark)
    }

    /// The cause of a change at `at` of an app on `nodes`: a recent mark
    /// of its own, failover acting on one of its nodes, a policy swap.
    fn cause(&self, app: &(String, String), nodes: &[&str], at: Timestamp) -> Option<Cause> {
        let recent = |when: Timestamp| at - when <= CAUSE_WINDOW_MS && when <= at + 1_000;
        if let Some((when, cause)) = self.by_app.get(app)
            && recent(*when)
        {
            return Some(cause.clone());
        }
        if let Some(node) = nodes
            .iter()
            .find(|n| self.by_node.get(**n).is_some_and(|w| recent(*w)))
        {
            return Some(Cause {
                kind: "failover".into(),
                id: (*node).to_string(),
            });
        }
        self.swapped
            .as_ref()
            .filter(|(when, _)| recent(*when))
            .map(|(_, version)| Cause {
                kind: "policy".into(),
                id: version.clone(),
            })
    }

    /// Forget marks too old to cause anything.
    pub fn forget_before(&mut self, at: Timestamp) {
        let old = at - CAUSE_WINDOW_MS;
        self.by_app.retain(|_, (when, _)| *when >= old);
        self.by_node.retain(|_, when| *when >= old);
        if self.swapped.as_ref().is_some_and(|(when, _)| *when < old) {
            self.swapped = None;
        }
    }

    /// What a verdict event says each subject of its app holds; `known`
    /// gives the instances the history holds for the app, so that those
    /// missing from the verdict are recorded as gone.
    pub fn seen(&self, event: &Event, known: impl FnOnce(&str, &str) -> Vec<Subject>) -> Vec<Seen> {
        // Straight into the fields kept: the verdict's other fields (its
        // containers, their messages) are skipped, not built.
        #[derive(Deserialize)]
        struct Envelope {
            data: Verdict,
        }
        let Ok(Envelope { data: verdict }) = serde_json::from_str::<Envelope>(&event.json) else {
            return Vec::new();
        };
        let at = event.at;
        let key = (verdict.namespace.clone(), verdict.name.clone());
        let nodes: BTreeSet<&str> = verdict
            .groups
            .iter()
            .filter_map(|g| g.node.as_deref())
            .chain(verdict.objects.iter().filter_map(|o| o.node.as_deref()))
            .collect();
        let nodes: Vec<&str> = nodes.into_iter().collect();
        let app_cause = match (&verdict.transitional, &verdict.forced) {
            (Some(t), _) => Some(Cause {
                kind: "task".into(),
                id: t.task.clone(),
            }),
            (None, Some(f)) => Some(Cause {
                kind: "override".into(),
                id: format!("{}: {}", f.by, f.reason),
            }),
            (None, None) => self.cause(&key, &nodes, at),
        };
        let subject = |kind: &str, instance: &str| Subject {
            namespace: verdict.namespace.clone(),
            app: verdict.name.clone(),
            kind: kind.into(),
            instance: instance.into(),
        };
        let mut all = vec![Seen {
            at,
            subject: subject("", ""),
            held: Held {
                status: verdict.stable.clone(),
                transitional: verdict.transitional.as_ref().map(|t| t.status.clone()),
                display: Some(verdict.display.status.clone()),
            },
            reason: if verdict.stable_reason.is_empty() {
                verdict.display.text.clone()
            } else {
                verdict.stable_reason.clone()
            },
            node: None,
            cause: app_cause.clone(),
            policy: verdict.policy.clone(),
        }];
        let instance_cause = |node: Option<&str>| {
            app_cause
                .clone()
                .or_else(|| self.cause(&key, node.as_slice(), at))
        };
        for group in &verdict.groups {
            all.push(Seen {
                at,
                subject: subject("pod", &group.name),
                held: Held {
                    status: group.status.clone(),
                    ..Held::default()
                },
                reason: group.reason.clone(),
                node: group.node.clone(),
                cause: instance_cause(group.node.as_deref()),
                policy: verdict.policy.clone(),
            });
        }
        for object in &verdict.objects {
            all.push(Seen {
                at,
                subject: subject(&object.kind, &object.name),
                held: Held {
                    status: object.status.clone().unwrap_or_else(|| "unknown".into()),
                    ..Held::default()
                },
                reason: object.reason.clone().unwrap_or_default(),
                node: object.node.clone(),
                cause: instance_cause(object.node.as_deref()),
                policy: verdict.policy.clone(),
            });
        }
        let present: BTreeSet<&Subject> = all.iter().map(|s| &s.subject).collect();
        let gone: Vec<Seen> = known(&verdict.namespace, &verdict.name)
            .into_iter()
            .filter(|s| !present.contains(s))
            .map(|subject| Seen {
                at,
                subject,
                held: Held {
                    status: GONE.into(),
                    ..Held::default()
                },
                reason: "no longer part of the app".into(),
                node: None,
                cause: app_cause.clone(),
                policy: verdict.policy.clone(),
            })
            .collect();
        all.extend(gone);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Events;

    fn events() -> (Events, tokio::sync::mpsc::Receiver<std::sync::Arc<Event>>) {
        let events = Events::starting_at(1, 16);
        let tap = events.tap(16);
        (events, tap.receiver)
    }

    fn verdict(stable: &str, pods: &[(&str, &str)]) -> Value {
        serde_json::json!({
            "namespace": "shop", "name": "web", "stable": stable, "stable_reason": "why",
            "transitional": null,
            "display": {"status": stable, "text": stable, "severity": "ok", "progress": null},
            "ready_replicas": 1, "expected_replicas": 1, "recheck_after": null,
            "groups": pods.iter().map(|(name, status)| serde_json::json!({
                "name": name, "node": "node-1", "status": status, "reason": "r",
                "message": null, "instances": []
            })).collect::<Vec<_>>(),
            "policy": "status@1.0.0",
        })
    }

    #[test]
    fn a_verdict_is_its_app_and_its_instances_and_the_missing_are_gone() {
        let (events, mut tap) = events();
        events.publish(
            Kind::Verdict,
            Some("shop/web".into()),
            verdict("running", &[("web-1", "running-healthy")]),
        );
        let event = tap.try_recv().unwrap();
        let recorder = Recorder::default();
        let old = Subject {
            kind: "pod".into(),
            instance: "web-0".into(),
            ..Subject::app("shop", "web")
        };
        let seen = recorder.seen(&event, |_, _| vec![old.clone()]);
        let said: Vec<(&str, &str)> = seen
            .iter()
            .map(|s| (s.subject.instance.as_str(), s.held.status.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                ("", "running"),
                ("web-1", "running-healthy"),
                ("web-0", GONE)
            ]
        );
        assert_eq!(seen[0].policy.as_deref(), Some("status@1.0.0"));
        assert_eq!(seen[1].node.as_deref(), Some("node-1"));
    }

    #[test]
    fn a_change_after_a_mark_names_it_as_its_cause() {
        let (events, mut tap) = events();
        let mut recorder = Recorder::default();
        events.publish(
            Kind::Failover,
            None,
            serde_json::json!({"event": "decision", "node": {
                "node": "node-1", "health": "unhealthy",
                "actions": [{"key": "cordon", "state": "done"}]}}),
        );
        let mark = recorder.mark(&tap.try_recv().unwrap()).unwrap();
        assert_eq!(mark.kind, "failover");
        assert_eq!(mark.node.as_deref(), Some("node-1"));
        assert!(mark.text.contains("cordon (done)"), "{}", mark.text);
        events.publish(
            Kind::Verdict,
            Some("shop/web".into()),
            verdict("degraded", &[("web-1", "failed")]),
        );
        let seen = recorder.seen(&tap.try_recv().unwrap(), |_, _| Vec::new());
        assert_eq!(
            seen[0].cause,
            Some(Cause {
                kind: "failover".into(),
                id: "node-1".into()
            })
        );
        // A task's progress alone is no new mark; its next phase is.
        let task = |phase: &str, progress: u8| {
            serde_json::json!({"id": "t1", "app": "shop/web", "action": "restart",
                               "phase": phase, "progress": progress})
        };
        for (phase, progress) in [("running", 10), ("running", 50), ("succeeded", 100)] {
            events.publish(Kind::Task, Some("shop/web".into()), task(phase, progress));
        }
        let marks: Vec<String> = std::iter::from_fn(|| tap.try_recv().ok())
            .filter_map(|e| recorder.mark(&e))
            .map(|m| m.text)
            .collect();
        assert_eq!(marks, ["restart running", "restart succeeded"]);
        recorder.forget_before(crate::time::now() + 2 * CAUSE_WINDOW_MS);
        assert!(recorder.by_app.is_empty() && recorder.by_node.is_empty());
    }
}
