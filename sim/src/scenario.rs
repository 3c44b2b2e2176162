//! Scenario files: a timeline of changes the simulator plays, for demos and
//! tests. A scenario starts from its `objects`, then applies each step at its
//! time (`5s`, `1m30s`), and with `loop-every` starts over.
//!
//! ```yaml
//! loop-every: 60s
//! objects:
//!   - {apiVersion: v1, kind: Namespace, metadata: {name: shop}}
//! steps:
//!   - at: 5s
//!     apply:
//!       - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: shop}, spec: {replicas: 3}}
//!   - at: 20s
//!     delete:
//!       - {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: shop}}
//!   - at: 25s
//!     scale: {workload: shop/web, replicas: 3}
//!   - at: 30s
//!     node-lost: n2
//!   - at: 35s
//!     crash-loop: shop/api
//! ```
//!
//! Besides whole objects, a step speaks of what happens in a cluster:
//! `scale` a workload, `update` its image, a workload's first pod starts to
//! `crash-loop` or `recover`s, a node stops heartbeating (`node-lost`) or
//! comes back (`node-back`). With the simulator's controller running, pods
//! of templated workloads follow. `tasks` are user actions for the host
//! playing the scenario (the simulator itself ignores them).
//!
//! Times in objects may be written relative to when they are applied —
//! `@now`, `@now-2m`, `@now+1h` — so that a crash loop's last termination
//! and restart times are as recent as a real one's on every loop.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::store::{Store, StoreError};
use crate::{apply, resources, text};

/// A timeline of changes.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Scenario {
    /// Start over this long after the start; once when absent.
    #[serde(default, with = "duration_text")]
    pub loop_every: Option<Duration>,
    /// The state at the start (of each loop).
    #[serde(default)]
    pub objects: Vec<Value>,
    #[serde(default)]
    pub steps: Vec<Step>,
}

/// Changes at one moment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Time since the start of the loop.
    #[serde(with = "duration_text_required")]
    pub at: Duration,
    /// Objects to create or replace.
    #[serde(default)]
    pub apply: Vec<Value>,
    /// Objects to delete (apiVersion, kind, namespace and name suffice).
    #[serde(default)]
    pub delete: Vec<Value>,
    /// Set a workload's replica count.
    #[serde(default)]
    pub scale: Option<Scale>,
    /// Change the image of a workload's first container (a rollout).
    #[serde(default)]
    pub update: Option<Update>,
    /// `namespace/workload`: its first pod's containers crash-loop.
    #[serde(default, rename = "crash-loop")]
    pub crash_loop: Option<String>,
    /// `namespace/workload`: its crash-looping pods run again.
    #[serde(default)]
    pub recover: Option<String>,
    /// A node stops heartbeating: its Ready condition turns Unknown and it is
    /// tainted unreachable.
    #[serde(default, rename = "node-lost")]
    pub node_lost: Option<String>,
    /// A lost node is back and ready.
    #[serde(default, rename = "node-back")]
    pub node_back: Option<String>,
    /// User actions for the host playing the scenario, as `POST /v1/tasks`
    /// bodies.
    #[serde(default)]
    pub tasks: Vec<Value>,
}

/// `scale: {workload: shop/web, replicas: 3}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scale {
    pub workload: String,
    pub replicas: u64,
}

/// `update: {workload: shop/web, image: registry.example/web:1.1}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Update {
    pub workload: String,
    pub image: String,
}

mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| humantime::parse_duration(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

mod duration_text_required {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

impl Scenario {
    /// Parse a scenario from YAML (or JSON) text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let scenario: Scenario = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        let mut last = Duration::ZERO;
        for (i, step) in scenario.steps.iter().enumerate() {
            if step.at < last {
                return Err(format!(
                    "steps[{i}]: at {:?} comes before the step above it",
                    step.at
                ));
            }
            last = step.at;
        }
        if let Some(every) = scenario.loop_every
            && every <= last
        {
            return Err(format!(
                "loop-every must come after the last step ({last:?})"
            ));
        }
        Ok(scenario)
    }

    /// Replace `@sim` at the start of any text of the scenario by the
    /// simulator's URL (health URLs of the demo point at the simulator).
    pub fn bind(&mut self, base_url: &str) {
        fn walk(value: &mut Value, base: &str) {
            match value {
                Value::String(text) => {
                    if let Some(rest) = text.strip_prefix("@sim") {
                        *text = format!("{base}{rest}");
                    }
                }
                Value::Array(items) => items.iter_mut().for_each(|v| walk(v, base)),
                Value::Object(map) => map.values_mut().for_each(|v| walk(v, base)),
                _ => {}
            }
        }
        for object in &mut self.objects {
            walk(object, base_url);
        }
        for step in &mut self.steps {
            step.apply.iter_mut().for_each(|o| walk(o, base_url));
        }
    }

    /// Bring the store to the scenario's start: objects of the built-in
    /// kinds not in it go (definitions and custom objects, such as stored
    /// tasks, stay), its objects are applied.
    pub fn reset(&self, store: &Store) -> Result<(), StoreError> {
        let wanted: Vec<(String, String, String, String)> =
            self.objects.iter().map(|o| identity(store, o)).collect();
        let built_in = resources::RESOURCES
            .iter()
            .filter(|r| r.kind != "CustomResourceDefinition");
        for resource in built_in {
            let (items, _) = store.list(resource, None);
            // Pods of the controller go with their workloads.
            let owned =
                |item: &Value| item["metadata"]["labels"][crate::controller::OWNER].is_string();
            for item in items {
                if !wanted.contains(&identity(store, &item)) && !owned(&item) {
                    let namespace = text(&item, "/metadata/namespace");
                    let name = text(&item, "/metadata/name");
                    // A namespace deleted earlier in this pass took it along.
                    let _ = store.delete(resource, &namespace, &name);
                }
            }
        }
        for object in &self.objects {
            apply(store, at_now(object, SystemTime::now()))?;
        }
        Ok(())
    }

    /// Apply one step.
    pub fn play(&self, store: &Store, step: &Step) -> Result<(), StoreError> {
        for object in &step.apply {
            apply(store, at_now(object, SystemTime::now()))?;
        }
        for object in &step.delete {
            let (api_version, kind, namespace, name) = identity(store, object);
            let resource = store.by_kind(&api_version, &kind).ok_or_else(|| {
                StoreError::bad_request(format!("no resource serves {api_version} {kind}"))
            })?;
            match store.delete(resource, &namespace, &name) {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(scale) = &step.scale {
            let (resource, namespace, name) = workload(store, &scale.workload)?;
            store.patch(
                resource,
                &namespace,
                &name,
                &json!({"spec": {"replicas": scale.replicas}}),
            )?;
        }
        if let Some(update) = &step.update {
            let (resource, namespace, name) = workload(store, &update.workload)?;
            let mut object = store.get(resource, &namespace, &name)?;
            let image = object
                .pointer_mut("/spec/template/spec/containers/0/image")
                .ok_or_else(|| {
                    StoreError::bad_request(format!(
                        "{} has no container template",
                        update.workload
                    ))
                })?;
            *image = json!(update.image);
            store.patch(
                resource,
                &namespace,
                &name,
                &json!({"spec": object["spec"].take()}),
            )?;
        }
        if let Some(target) = &step.crash_loop {
            let pods = pods_of(store, target)?;
            let pod = pods
                .first()
                .ok_or_else(|| StoreError::bad_request(format!("{target} has no pod")))?;
            set_containers(store, pod, false)?;
        }
        if let Some(target) = &step.recover {
            for pod in pods_of(store, target)? {
                let looping = pod.pointer("/status/containerStatuses/0/state/waiting/reason")
                    == Some(&json!("CrashLoopBackOff"));
                if looping {
                    set_containers(store, &pod, true)?;
                }
            }
        }
        if let Some(node) = &step.node_lost {
            set_node(store, node, false)?;
        }
        if let Some(node) = &step.node_back {
            set_node(store, node, true)?;
        }
        Ok(())
    }

    /// Play the scenario on a store until the task is aborted (or, without
    /// `loop-every`, until the last step).
    pub async fn run(self, store: Arc<Store>) {
        loop {
            let started = tokio::time::Instant::now();
            if let Err(error) = self.reset(&store) {
                tracing::error!(%error, "scenario: the starting objects do not apply");
                return;
            }
            for step in &self.steps {
                tokio::time::sleep_until(started + step.at).await;
                if let Err(error) = self.play(&store, step) {
                    tracing::warn!(%error, at = ?step.at, "scenario: a step did not apply");
                }
            }
            match self.loop_every {
                Some(every) => tokio::time::sleep_until(started + every).await,
                None => return,
            }
        }
    }
}

/// The Deployment or StatefulSet named `namespace/name`.
fn workload(
    store: &Store,
    id: &str,
) -> Result<(&'static resources::Resource, String, String), StoreError> {
    let (namespace, name) = id
        .split_once('/')
        .ok_or_else(|| StoreError::bad_request(format!("workload `{id}` is not namespace/name")))?;
    for plural in ["deployments", "statefulsets"] {
        let resource = resources::find("apps", "v1", plural).expect("a built-in resource");
        if store.get(resource, namespace, name).is_ok() {
            return Ok((resource, namespace.to_string(), name.to_string()));
        }
    }
    Err(StoreError::bad_request(format!(
        "no Deployment or StatefulSet {id}"
    )))
}

/// The pods of `namespace/name`: owned by that workload through the
/// controller, or labelled `app.kubernetes.io/instance: name`; by name.
fn pods_of(store: &Store, id: &str) -> Result<Vec<Value>, StoreError> {
    let (namespace, name) = id
        .split_once('/')
        .ok_or_else(|| StoreError::bad_request(format!("`{id}` is not namespace/name")))?;
    let pods = resources::find("", "v1", "pods").expect("a built-in resource");
    let (mut items, _) = store.list(pods, Some(namespace));
    items.retain(|p| {
        let labels = &p["metadata"]["labels"];
        labels["app.kubernetes.io/instance"] == name
            || labels[crate::controller::OWNER]
                .as_str()
                .is_some_and(|o| o.split_once('.').is_some_and(|(_, n)| n == name))
    });
    items.sort_by_key(|p| text(p, "/metadata/name"));
    Ok(items)
}

/// `object` with each `@now`, `@now-5m` or `@now+1h` text (a duration as
/// humantime reads it) replaced by that time after `now`, in RFC 3339.
fn at_now(object: &Value, now: SystemTime) -> Value {
    fn time(text: &str, now: SystemTime) -> Option<String> {
        let rest = text.strip_prefix("@now")?;
        let at = match rest.chars().next() {
            None => now,
            Some('-') => now.checked_sub(humantime::parse_duration(&rest[1..]).ok()?)?,
            Some('+') => now.checked_add(humantime::parse_duration(&rest[1..]).ok()?)?,
            Some(_) => return None,
        };
        Some(humantime::format_rfc3339_seconds(at).to_string())
    }
    fn walk(value: &mut Value, now: SystemTime) {
        match value {
            Value::String(text) => {
                if let Some(at) = time(text, now) {
                    *text = at;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, now)),
            Value::Object(map) => map.values_mut().for_each(|v| walk(v, now)),
            _ => {}
        }
    }
    let mut object = object.clone();
    walk(&mut object, now);
    object
}

/// A pod's containers running and ready, or crash-looping.
fn set_containers(store: &Store, pod: &Value, running: bool) -> Result<(), StoreError> {
    let pods = resources::find("", "v1", "pods").expect("a built-in resource");
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let statuses: Vec<Value> = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let mut c = c.clone();
            let restarts = c["restartCount"].as_u64().unwrap_or(0);
            if running {
                c["state"] = json!({"running": {"startedAt": now}});
            } else {
                c["state"] = json!({"waiting": {"reason": "CrashLoopBackOff",
                    "message": "back-off 40s restarting failed container"}});
                c["lastState"] =
                    json!({"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now}});
                c["restartCount"] = json!(restarts + 4);
            }
            c["ready"] = json!(running);
            c
        })
        .collect();
    let status = json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": if running { "True" } else { "False" }, "lastTransitionTime": now}],
        "containerStatuses": statuses,
    });
    store.patch(
        pods,
        &text(pod, "/metadata/namespace"),
        &text(pod, "/metadata/name"),
        &json!({"status": status}),
    )?;
    Ok(())
}

/// A node heartbeating and ready, or lost.
fn set_node(store: &Store, name: &str, ready: bool) -> Result<(), StoreError> {
    let nodes = resources::find("", "v1", "nodes").expect("a built-in resource");
    let mut node = store.get(nodes, "", name)?;
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let condition = if ready {
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
               "message": "kubelet is posting ready status", "lastTransitionTime": now, "lastHeartbeatTime": now})
    } else {
        json!({"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
               "message": "Kubelet stopped posting node status.", "lastTransitionTime": now})
    };
    let mut conditions: Vec<Value> = node["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Ready");
    conditions.push(condition);
    node["status"]["conditions"] = json!(conditions);
    let mut taints: Vec<Value> = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    taints.retain(|t| t["key"] != "node.kubernetes.io/unreachable");
    if !ready {
        taints.push(json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now}));
    }
    node["spec"]["taints"] = json!(taints);
    store.patch(
        nodes,
        "",
        name,
        &json!({"spec": node["spec"].take(), "status": node["status"].take()}),
    )?;
    Ok(())
}

fn identity(store: &Store, object: &Value) -> (String, String, String, String) {
    let mut namespace = text(object, "/metadata/namespace");
    let (api_version, kind) = (text(object, "/apiVersion"), text(object, "/kind"));
    if namespace.is_empty()
        && store
            .by_kind(&api_version, &kind)
            .is_some_and(|r| r.namespaced)
    {
        namespace = "default".into();
    }
    (api_version, kind, namespace, text(object, "/metadata/name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_relative_to_now_are_written_when_applied() {
        let now = humantime::parse_rfc3339("2026-12-01T12:00:00Z").unwrap();
        let object = json!({"status": {"containerStatuses": [{
            "lastState": {"terminated": {"finishedAt": "@now-2m"}},
            "state": {"running": {"startedAt": "@now"}},
            "note": "@nowhere", "later": "@now+1h", "bad": "@now-soon"
        }]}});
        let written = at_now(&object, now);
        let c = &written["status"]["containerStatuses"][0];
        assert_eq!(
            c["lastState"]["terminated"]["finishedAt"],
            "2026-12-01T11:58:00Z"
        );
        assert_eq!(c["state"]["running"]["startedAt"], "2026-12-01T12:00:00Z");
        assert_eq!(c["later"], "2026-12-01T13:00:00Z");
        assert_eq!(
            (&c["note"], &c["bad"]),
            (&json!("@nowhere"), &json!("@now-soon"))
        );
    }

    const SCENARIO: &str = "
loop-every: 10s
objects:
  - {apiVersion: v1, kind: Namespace, metadata: {name: shop}}
  - {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: shop}, status: {phase: Pending}}
steps:
  - at: 1s
    apply:
      - {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: shop}, status: {phase: Running}}
      - {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: shop}}
  - at: 2s
    delete:
      - {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: shop}}
";

    #[test]
    fn steps_apply_and_a_reset_returns_to_the_start() {
        let scenario = Scenario::parse(SCENARIO).unwrap();
        let store = Store::new(100);
        let pods = resources::find("", "v1", "pods").unwrap();
        scenario.reset(&store).unwrap();
        scenario.play(&store, &scenario.steps[0]).unwrap();
        assert_eq!(
            store.get(pods, "shop", "a").unwrap()["status"]["phase"],
            "Running"
        );
        scenario.play(&store, &scenario.steps[1]).unwrap();
        assert_eq!(store.list(pods, None).0.len(), 1);
        scenario.reset(&store).unwrap();
        let (items, _) = store.list(pods, None);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["status"]["phase"], "Pending");
    }

    #[test]
    fn the_demo_plays_through_and_loops_back() {
        let demo = Scenario::parse(crate::DEMO).unwrap();
        assert!(demo.loop_every.is_some());
        // The demo's simulator serves KubeVirt's kinds.
        let store = Store::new(1000);
        for crd in crate::kubevirt::crds() {
            apply(&store, crd).unwrap();
        }
        demo.reset(&store).unwrap();
        let pods = resources::find("", "v1", "pods").unwrap();
        let at_start = store.list(pods, None).0.len();
        for step in &demo.steps {
            demo.play(&store, step).unwrap();
        }
        demo.reset(&store).unwrap();
        assert_eq!(store.list(pods, None).0.len(), at_start);
    }

    #[test]
    fn a_bad_timeline_is_refused_with_the_reason() {
        let backwards = "steps:\n  - at: 5s\n  - at: 2s\n";
        assert!(Scenario::parse(backwards).unwrap_err().contains("steps[1]"));
        let short = "loop-every: 1s\nsteps:\n  - at: 5s\n";
        assert!(Scenario::parse(short).unwrap_err().contains("loop-every"));
        assert!(Scenario::parse("steps:\n  - at: soon\n").is_err());
    }
}
