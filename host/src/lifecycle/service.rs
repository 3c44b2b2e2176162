//! What the HTTP routes ask of the delivery, on any replica: the sets with
//! their deployments and instances, each instance's task log, and people's
//! requests — approve, promote, abort a rollout; retry, skip a step,
//! approve a list of an instance — written as annotations on the resource
//! they are about ([`super::requests`]) for the leader to carry out.
//!
//! Everything is read from the API server when asked, so that every
//! replica answers the same; a request is written on the resource version
//! it was checked against, so that a request about a state that changed
//! meanwhile is refused rather than applied to another.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::controller::Counts;
use super::instance::{self, Recorded};
use super::lists::{ListOutcome, LogEntry};
use super::model::Package;
use super::requests::{self, Request};
use super::resources::{deployments, servers, sets};
use crate::events::{Events, Kind};
use crate::history::History;
use crate::time::{now, rfc3339};
use crate::wit::WitName;
use crate::wit::lifecycle::{Outcome, Stage};

/// What went wrong with a question or a request.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No such set, deployment or instance (its code names which).
    #[error("{1}")]
    NotFound(&'static str, String),
    /// The request does not fit the state (no gate to approve, no failed
    /// list to retry), or the state changed while it was made.
    #[error("{0}")]
    Conflict(String),
    /// The resource changed between its read and the request's write (the
    /// controller wrote its status meanwhile): the request is made again
    /// on what it is now, a few times, before this is said.
    #[error("the resource changed while the request was made; look again and repeat it")]
    Changed,
    #[error("{0}")]
    Invalid(String),
    /// The API server could not be asked (its message kept for the log).
    #[error("the API server could not be asked: {0}")]
    Api(#[source] kube::Error),
}

/// How many times a request is made on a resource that keeps changing
/// under it.
const TRIES_WHEN_CHANGED: usize = 5;

/// `act`, made again on what the resource is now while it changed between
/// its read and its write.
async fn again_if_changed<T, F>(act: impl Fn() -> F) -> Result<T, ServiceError>
where
    F: Future<Output = Result<T, ServiceError>>,
{
    let mut tries = 1;
    loop {
        match act().await {
            Err(ServiceError::Changed) if tries < TRIES_WHEN_CHANGED => tries += 1,
            done => return done,
        }
    }
}

fn api_error(error: kube::Error) -> ServiceError {
    match &error {
        kube::Error::Api(status) if status.code == 409 => ServiceError::Changed,
        kube::Error::Api(status) if status.code == 404 => {
            ServiceError::NotFound("not-served", status.message.clone())
        }
        _ => ServiceError::Api(error),
    }
}

/// A rollout, in a set's summary.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RolloutSummary {
    /// The `VMDeployment`'s name.
    pub name: String,
    pub code: String,
    /// The code released before this rollout, that an abort goes back to.
    pub stable_code: Option<String>,
    /// `Progressing`, `Paused`, `Completed`, `Degraded`, `Aborted`.
    pub phase: Option<String>,
    /// The step, as index/count.
    pub step: Option<String>,
    pub step_index: Option<u64>,
    /// Why it waits, when it does.
    pub waiting: Option<String>,
    /// It waits for a person to approve its gate.
    pub at_gate: bool,
    pub updated_instances: Option<u64>,
    /// What people did to it, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub actions: Vec<Value>,
}

/// A `VMReplicaSet`, summed up.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SetSummary {
    pub namespace: String,
    pub name: String,
    pub replicas: u64,
    /// Instances in service of those wanted, `ready/replicas`.
    pub ready: Option<String>,
    pub environment: Vec<Package>,
    /// Why the set waits, when it does.
    pub waiting: Option<String>,
    /// The rollout of the `VMDeployment` that targets the set.
    pub rollout: Option<RolloutSummary>,
}

/// One instance of a set, as its `VirtualMachine` carries it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct InstanceView {
    pub name: String,
    pub stage: Option<String>,
    /// Since when, RFC 3339.
    pub since: Option<String>,
    pub environment: Vec<Package>,
    pub code: Option<String>,
    /// The controller holding it, `holder/term`.
    pub lock: Option<String>,
    /// KubeVirt's status of the machine.
    pub machine: Option<String>,
    /// Being deleted (held by its clean-up until it is done).
    pub deleting: bool,
    /// The list in progress (or the last one entered).
    pub list: Option<LogEntry>,
    /// The step in progress reports this much done, percent.
    pub progress: Option<u8>,
    /// The list waits for a person to approve it.
    pub awaiting_approval: bool,
    /// Its annotations do not read (a person's typo), in words.
    pub problem: Option<String>,
}

/// A set with its rollout and every instance.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct SetView {
    #[serde(flatten)]
    pub summary: SetSummary,
    /// The set's status, as the leader wrote it.
    #[schema(value_type = Object)]
    pub status: Value,
    /// The deployment's status, as the leader wrote it.
    #[schema(value_type = Option<Object>)]
    pub rollout_status: Option<Value>,
    pub instances: Vec<InstanceView>,
}

/// A page of an instance's task log, newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LogPage {
    pub entries: Vec<LogEntry>,
    /// Ask with `before` set to this for the next page; none on the last.
    pub next_before: Option<u64>,
    /// Why lists show without their steps, when some do: the task log
    /// could not be read, or did not keep them (the Server sums up its
    /// last few lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summed_up: Option<String>,
}

mod actions;

pub use actions::{ActionRequest, InstanceAction, Requested, RolloutAction};

/// The delivery as the HTTP routes see it.
pub struct Service {
    client: kube::Client,
    events: Arc<Events>,
    /// The controller's counts, on a replica that runs it.
    pub counts: Option<Arc<Counts>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").finish_non_exhaustive()
    }
}

/// Whether `name` can name a Kubernetes object or namespace (a DNS
/// subdomain): anything else names nothing, and is not sent to the API
/// server.
fn kubernetes_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The names of a path, each a Kubernetes name, or a 404 naming `what`.
fn named(names: &[&str], what: &str) -> Result<(), ServiceError> {
    match names.iter().all(|n| kubernetes_name(n)) {
        true => Ok(()),
        false => Err(ServiceError::NotFound(
            "not-found",
            format!("no {what} of that name (not a Kubernetes name)"),
        )),
    }
}

fn text(value: &Value, pointer: &str) -> Option<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(String::from)
}

fn summary(set: &Value, deployment: Option<&Value>) -> SetSummary {
    SetSummary {
        namespace: text(set, "/metadata/namespace").unwrap_or_default(),
        name: text(set, "/metadata/name").unwrap_or_default(),
        replicas: set["spec"]["replicas"].as_u64().unwrap_or(0),
        ready: text(set, "/status/ready"),
        environment: serde_json::from_value(set["spec"]["environment"].clone()).unwrap_or_default(),
        waiting: text(set, "/status/waiting").filter(|w| !w.is_empty()),
        rollout: deployment.map(|d| {
            let status = &d["status"];
            let wanted = text(d, "/spec/code/version").unwrap_or_default();
            // A status from before the deployment's last change is about
            // the release before: its step is shown beside its own code,
            // and the new release as what it waits for.
            let behind = matches!(
                (status["observedGeneration"].as_i64(), d["metadata"]["generation"].as_i64()),
                (Some(seen), Some(now)) if seen < now
            );
            let (code, waiting) = match (behind, text(status, "/code")) {
                (true, Some(code)) => (
                    code,
                    Some(format!(
                        "code {wanted} is asked: its release starts once the controller has seen it"
                    )),
                ),
                _ => (wanted, text(status, "/waiting").filter(|w| !w.is_empty())),
            };
            RolloutSummary {
                name: text(d, "/metadata/name").unwrap_or_default(),
                code,
                stable_code: text(status, "/stableCode"),
                phase: text(status, "/phase"),
                step: text(status, "/step"),
                step_index: status["stepIndex"].as_u64(),
                waiting,
                at_gate: at_gate(status),
                updated_instances: status["updatedInstances"].as_u64(),
                actions: status["actions"].as_array().cloned().unwrap_or_default(),
            }
        }),
    }
}

/// Whether a deployment's status says it waits for a person.
fn at_gate(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"] == "Paused" && c["status"] == "True" && c["reason"] == "WaitingForApproval"
        })
}

fn instance_view(server: &Value) -> InstanceView {
    let name = text(server, "/metadata/name").unwrap_or_default();
    let recorded = Recorded::read(server);
    let at_rest = recorded.clone().unwrap_or_default();
    InstanceView {
        name,
        stage: at_rest.stage.map(|s| s.wit_name().to_string()),
        since: at_rest.since.map(rfc3339),
        environment: at_rest.environment.clone(),
        code: at_rest.code.clone(),
        lock: text(server, "/status/lock"),
        machine: text(server, "/status/machine"),
        deleting: !server["metadata"]["deletionTimestamp"].is_null(),
        list: at_rest.list.as_ref().map(|l| l.entry()),
        progress: at_rest.list.as_ref().and_then(|l| l.progress),
        awaiting_approval: at_rest.list.as_ref().is_some_and(|l| l.awaiting_approval()),
        problem: recorded.err(),
    }
}

impl Service {
    pub fn new(client: kube::Client, events: Arc<Events>, counts: Option<Arc<Counts>>) -> Self {
        Self {
            client,
            events,
            counts,
        }
    }

    async fn list(
        &self,
        resource: &kube::core::ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<Vec<Value>, ServiceError> {
        let api = match namespace {
            Some(namespace) => {
                Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, resource)
            }
            None => Api::<DynamicObject>::all_with(self.client.clone(), resource),
        };
        let listed = match api.list(params).await {
            Ok(listed) => listed,
            // The kind is not served (its CRD not installed): none of it.
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Vec::new()),
            Err(error) => return Err(api_error(error)),
        };
        Ok(listed
            .items
            .iter()
            .map(|o| serde_json::to_value(o).unwrap_or_default())
            .collect())
    }

    async fn get(
        &self,
        resource: &kube::core::ApiResource,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, ServiceError> {
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, resource);
        let object = api.get_opt(name).await.map_err(api_error)?;
        Ok(object.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }

    /// The deployment of `namespace` that targets `set`.
    async fn deployment_of(
        &self,
        namespace: &str,
        set: &str,
    ) -> Result<Option<Value>, ServiceError> {
        let all = self
            .list(&deployments(), Some(namespace), &ListParams::default())
            .await?;
        Ok(all.into_iter().find(|d| d["spec"]["replicaSet"] == set))
    }

    /// Every set (of `namespace`, when given), with its rollout.
    pub async fn sets(&self, namespace: Option<&str>) -> Result<Vec<SetSummary>, ServiceError> {
        // A namespace no Kubernetes name could be has none.
        if namespace.is_some_and(|n| !kubernetes_name(n)) {
            return Ok(Vec::new());
        }
        let sets = self
            .list(&sets(), namespace, &ListParams::default())
            .await?;
        let deployments = self
            .list(&deployments(), namespace, &ListParams::default())
            .await?;
        Ok(sets
            .iter()
            .map(|set| {
                let deployment = deployments.iter().find(|d| {
                    d["metadata"]["namespace"] == set["metadata"]["namespace"]
                        && d["spec"]["replicaSet"] == set["metadata"]["name"]
                });
                summary(set, deployment)
            })
            .collect())
    }

    async fn set_object(&self, namespace: &str, name: &str) -> Result<Value, ServiceError> {
        named(&[namespace, name], "VMReplicaSet")?;
        self.get(&sets(), namespace, name).await?.ok_or_else(|| {
            ServiceError::NotFound("no-such-set", format!("no VMReplicaSet {namespace}/{name}"))
        })
    }

    async fn members(&self, namespace: &str, set: &str) -> Result<Vec<Value>, ServiceError> {
        let params = ListParams::default().labels(&format!("{}={set}", instance::SET_LABEL));
        let mut members = self.list(&servers(), Some(namespace), &params).await?;
        members.sort_by_key(|vm| text(vm, "/metadata/name"));
        Ok(members)
    }

    /// One set with its rollout and its instances.
    pub async fn set(&self, namespace: &str, name: &str) -> Result<SetView, ServiceError> {
        let set = self.set_object(namespace, name).await?;
        let deployment = self.deployment_of(namespace, name).await?;
        let members = self.members(namespace, name).await?;
        Ok(SetView {
            summary: summary(&set, deployment.as_ref()),
            status: set["status"].clone(),
            rollout_status: deployment.map(|d| d["status"].clone()),
            instances: members.iter().map(instance_view).collect(),
        })
    }

    async fn member(&self, namespace: &str, set: &str, name: &str) -> Result<Value, ServiceError> {
        self.set_object(namespace, set).await?;
        named(&[name], "instance")?;
        self.get(&servers(), namespace, name)
            .await?
            .filter(|server| server["metadata"]["labels"][instance::SET_LABEL] == set)
            .ok_or_else(|| {
                ServiceError::NotFound(
                    "no-such-instance",
                    format!("no instance {name} in VMReplicaSet {namespace}/{set}"),
                )
            })
    }

    /// A page of an instance's task log, newest first: the lists numbered
    /// below `before`, at most `limit` — the list in progress from its
    /// Server, the finished ones whole from `history`'s task log, and those
    /// the log lacks as its Server sums them up.
    pub async fn log(
        &self,
        history: &Arc<History>,
        (namespace, set, name): (&str, &str, &str),
        before: Option<u64>,
        limit: usize,
    ) -> Result<LogPage, ServiceError> {
        let server = self.member(namespace, set, name).await?;
        let recorded = Recorded::read(&server).map_err(|problem| {
            ServiceError::Conflict(format!("the instance's Server does not read: {problem}"))
        })?;
        let uid = text(&server, "/metadata/uid").unwrap_or_default();
        let reading = Arc::clone(history);
        let key = (namespace.to_string(), name.to_string());
        let logged = tokio::task::spawn_blocking(move || {
            reading.task_log((&key.0, &key.1, &uid), before, limit + 1)
        })
        .await
        .map_err(|e| ServiceError::Conflict(format!("the task log: {e}")))?;
        let mut summed_up = None;
        let logged: Vec<LogEntry> = match logged {
            Ok(rows) => rows
                .iter()
                .filter_map(|row| serde_json::from_str(row).ok())
                .collect(),
            Err(error) => {
                summed_up = Some(format!("finished lists are summed up: {error}"));
                Vec::new()
            }
        };
        // The Server's summaries first (whether summed up), the log's
        // whole lists over them, the list in progress over both.
        let mut all: BTreeMap<u64, (LogEntry, bool)> = BTreeMap::new();
        let whole = recorded.finished.iter().cloned().chain(logged);
        for (entry, summary) in (recorded.lists.iter().cloned().map(|e| (e, true)))
            .chain(whole.map(|e| (e, false)))
            .chain(recorded.list.iter().map(|l| (l.entry(), false)))
        {
            all.insert(entry.number, (entry, summary));
        }
        let all: Vec<(LogEntry, bool)> = all
            .into_values()
            .rev()
            .filter(|(e, _)| before.is_none_or(|b| e.number < b))
            .collect();
        let more = all.len() > limit;
        let page: Vec<(LogEntry, bool)> = all.into_iter().take(limit).collect();
        let next_before = page.last().filter(|_| more).map(|(e, _)| e.number);
        let any_summary = page.iter().any(|(_, summary)| *summary);
        let entries: Vec<LogEntry> = page.into_iter().map(|(e, _)| e).collect();
        if summed_up.is_none() && any_summary {
            summed_up = Some(
                "lists without steps are summed up by the Server: the task log does not keep them (kept by the replica that led then, or past its retention)".into(),
            );
        }
        Ok(LogPage {
            entries,
            next_before,
            summed_up,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_shows_its_step_beside_the_code_the_step_is_of() {
        let set =
            json!({"metadata": {"namespace": "shop", "name": "web"}, "spec": {"replicas": 3}});
        let deployment = |generation: i64| {
            json!({
                "metadata": {"name": "web", "generation": generation},
                "spec": {"code": {"version": "2.0"}},
                "status": {"observedGeneration": 2, "code": "1.0", "step": "1/2", "stepIndex": 1,
                           "phase": "Paused", "waiting": "at the gate"},
            })
        };
        // Seen by the controller: the new code and its own step.
        let seen = summary(&set, Some(&deployment(2))).rollout.unwrap();
        assert_eq!(
            (seen.code.as_str(), seen.step.as_deref()),
            ("2.0", Some("1/2"))
        );
        assert_eq!(seen.waiting.as_deref(), Some("at the gate"));
        // Changed since: the step is the old release's, shown with its code.
        let behind = summary(&set, Some(&deployment(3))).rollout.unwrap();
        assert_eq!(
            (behind.code.as_str(), behind.step.as_deref()),
            ("1.0", Some("1/2"))
        );
        assert!(
            behind
                .waiting
                .as_deref()
                .is_some_and(|w| w.contains("code 2.0 is asked")),
            "{:?}",
            behind.waiting
        );
    }
}
