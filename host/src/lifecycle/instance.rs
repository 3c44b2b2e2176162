//! An instance as its `Server` carries it (seed 002's per-instance
//! object): in its status, its stage and since when, the environment and
//! code it has, the lock a controller holds on it, the task list it is in
//! ([`super::lists`]) and its last lists summed up (the whole task log is
//! in the history's database); in its spec, a stage a person forces; in
//! its annotations, what else people asked of it. `kubectl get server -o
//! yaml` shows them, and a restart or a leader handover reads them back and
//! loses nothing.

use std::collections::BTreeMap;

use super::crd::{
    Condition, ForceSpec, ForceTaken, Lenient, PackageSpec, ServerResource, ServerStatus,
};
use super::lists::{CurrentList, ListOutcome, LogEntry};
use super::model::{Package, TaskList};
use super::requests::{self, Request};
use crate::time::{Timestamp, parse_time, rfc3339};
use crate::wit::WitName;
use crate::wit::lifecycle::{Machine, Stage};

/// The annotation of a `VirtualMachine` naming the `Server` it is the
/// machine of.
pub const SERVER: &str = "verdict.dev/server";
/// The annotations on which a VM carried its instance before instances had
/// Servers (stage, since, environment, code, lock, list, lists): read once,
/// when its set takes it over, into its new Server's status.
pub const LEGACY: [&str; 7] = [
    "verdict.dev/stage",
    "verdict.dev/since",
    "verdict.dev/environment",
    "verdict.dev/code",
    "verdict.dev/lock",
    "verdict.dev/list",
    "verdict.dev/lists",
];

/// The Server status a VM's legacy annotations record (none when it has
/// none of them), or what does not read.
pub fn legacy_status(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<serde_json::Value>, String> {
    if !LEGACY.iter().any(|key| annotations.contains_key(*key)) {
        return Ok(None);
    }
    let get = |key: &str| {
        annotations
            .get(&format!("verdict.dev/{key}"))
            .map(String::as_str)
    };
    let json = |key: &str| {
        get(key)
            .map(|text| {
                serde_json::from_str::<serde_json::Value>(text)
                    .map_err(|e| format!("verdict.dev/{key} does not read: {e}"))
            })
            .transpose()
    };
    let environment: Vec<Package> = get("environment")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, version) = pair
                .split_once('=')
                .ok_or_else(|| format!("verdict.dev/environment: `{pair}` is not name=version"))?;
            Ok(Package {
                name: name.trim().into(),
                version: version.trim().into(),
            })
        })
        .collect::<Result<_, String>>()?;
    let status = serde_json::json!({
        "stage": get("stage").map(str::trim),
        "since": get("since"),
        "environment": environment,
        "code": get("code"),
        "list": json("list")?,
        "lists": json("lists")?,
    });
    // What it says reads as a Server's status says it, or it is not taken.
    let recorded = Recorded::read(&serde_json::json!({ "status": status }))?;
    Ok(Some(
        serde_json::to_value(recorded.status(&Observed::default(), Vec::new()))
            .map_err(|e| e.to_string())?,
    ))
}

/// The label naming the `VMReplicaSet` an instance belongs to.
pub const SET_LABEL: &str = "verdict.dev/vmreplicaset";
/// The finalizer that holds an instance until its clean-up ran.
pub const FINALIZER: &str = "verdict.dev/cleanup";

/// Finished lists summed up on the instance's Server (without their steps:
/// the whole task log is in the history's database).
pub const SUMMED_UP: usize = 5;
/// A controller's hold on an instance: who and in which leader term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub holder: String,
    pub term: u64,
}

impl Lock {
    fn read(text: &str) -> Result<Self, String> {
        let (holder, term) = text
            .rsplit_once('/')
            .ok_or_else(|| format!("status.lock `{text}` is not holder/term"))?;
        let term = term
            .parse()
            .map_err(|_| format!("status.lock `{text}`: the term is not a number"))?;
        if holder.is_empty() {
            return Err(format!("status.lock `{text}` names no holder"));
        }
        Ok(Self {
            holder: holder.into(),
            term,
        })
    }

    fn write(&self) -> String {
        format!("{}/{}", self.holder, self.term)
    }
}

/// Whether `term` may take an instance locked by `lock`: when it is free,
/// already its own, held from an older term (a leader that is gone; the
/// newer one takes its lists over), or `term` is a host's that acts alone
/// (the one that held it can only be its own earlier process).
pub fn may_take(lock: Option<&Lock>, term: &crate::leader::Term) -> bool {
    match lock {
        None => true,
        Some(_) if term.alone => true,
        Some(lock) => lock.holder == term.holder || lock.term < term.term,
    }
}

/// What an instance's Server records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    pub stage: Option<Stage>,
    pub since: Option<Timestamp>,
    pub environment: Vec<Package>,
    pub code: Option<String>,
    pub lock: Option<Lock>,
    pub list: Option<CurrentList>,
    /// The last finished lists summed up (no steps), newest first.
    pub lists: Vec<LogEntry>,
    /// The lists finished since the Server was read, whole: the task log
    /// keeps them before the status that sums them up is written.
    pub finished: Vec<LogEntry>,
    /// A person's request to run a failed list again.
    pub retry: Option<Request>,
    /// A person's request to skip the step in progress, or to approve the
    /// list that waits.
    pub skip: Option<Request>,
    pub approve: Option<Request>,
    /// The stage a person forces through the Server's spec, while the
    /// request is there.
    pub force: Option<Force>,
    /// The last forced stage the controller took, and what came of it.
    pub forced: Option<ForceTaken>,
}

/// A person's forced stage, as the Server's spec asks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Force {
    pub stage: Stage,
    pub request: ForceSpec,
}

impl Force {
    /// Who asks and why, as a log line says it.
    pub fn who(&self) -> String {
        requests::who(
            &self.request.by,
            self.request.why.as_deref().unwrap_or_default(),
        )
    }
}

impl Recorded {
    /// The forced stage asked and not taken yet: a request the status has
    /// not taken is new (one made again with another time or reason is
    /// another request).
    pub fn force_pending(&self) -> Option<&Force> {
        self.force
            .as_ref()
            .filter(|f| self.forced.as_ref().is_none_or(|t| t.request != f.request))
    }

    /// Whether a person holds the instance offline: a forced `offline`
    /// stays in force while the request stays in the spec.
    pub fn held_offline(&self) -> bool {
        self.force
            .as_ref()
            .is_some_and(|f| f.stage == Stage::Offline)
    }

    /// Keep that the forced stage `force` was taken: entered, or refused
    /// for `refused`.
    pub fn take_force(&mut self, force: &Force, refused: Option<&str>, now: Timestamp) {
        self.forced = Some(ForceTaken {
            request: force.request.clone(),
            taken_at: Some(rfc3339(now)),
            entered: refused.is_none(),
            message: refused.map(String::from),
        });
    }
}

/// An environment as `name=version` pairs, comma-separated.
pub fn environment_text(packages: &[Package]) -> String {
    packages
        .iter()
        .map(|p| format!("{}={}", p.name, p.version))
        .collect::<Vec<_>>()
        .join(",")
}

/// What a Server's status says of its machine, beside what it records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The VirtualMachine's printable status.
    pub machine: Option<String>,
    /// The machine as the lifecycle policy sees it.
    pub machine_state: Option<Machine>,
    pub node: Option<String>,
    /// In service, its machine ready and its node healthy.
    pub ready: bool,
    /// The key of the step in progress.
    pub step_key: Option<String>,
    /// The Server's generation the status was written from.
    pub generation: Option<i64>,
    /// The leader that writes it, `replica/term`.
    pub writer: Option<String>,
}

impl Recorded {
    /// Read a Server as JSON: its status, its forced stage and people's
    /// requests in its annotations. What does not read is named, so that a
    /// hand-made edit is reported rather than guessed at.
    pub fn read(server: &serde_json::Value) -> Result<Self, String> {
        let status: Option<ServerStatus> = Some(&server["status"])
            .filter(|v| !v.is_null())
            .map(|value| {
                serde_path_to_error::deserialize(value)
                    .map_err(|e| format!("status.{} does not read: {}", e.path(), e.inner()))
            })
            .transpose()?;
        let force: Option<ForceSpec> = Some(&server["spec"]["force"])
            .filter(|v| !v.is_null())
            .map(|value| {
                serde_json::from_value(value.clone())
                    .map_err(|e| format!("spec.force does not read: {e}"))
            })
            .transpose()?;
        Self::of(status.as_ref(), force.as_ref(), &annotations_of(server))
    }

    /// Read a Server.
    pub fn of_server(server: &ServerResource) -> Result<Self, String> {
        let annotations = server.metadata.annotations.clone().unwrap_or_default();
        Self::of(
            server.status.as_ref(),
            server.spec.force.as_ref(),
            &annotations,
        )
    }

    /// What a Server's status, forced stage and annotations record.
    fn of(
        status: Option<&ServerStatus>,
        force: Option<&ForceSpec>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let empty = ServerStatus::default();
        let status = status.unwrap_or(&empty);
        fn text(field: &Option<String>) -> Option<&str> {
            field.as_deref().map(str::trim)
        }
        let stage = text(&status.stage)
            .map(|text| {
                Stage::from_wit_name(text).ok_or_else(|| {
                    format!(
                        "status.stage `{text}` is none of {}",
                        Stage::NAMES.join(", ")
                    )
                })
            })
            .transpose()?;
        let since = text(&status.since)
            .map(|text| parse_time(text).map_err(|e| format!("status.since: {e}")))
            .transpose()?;
        let list = status
            .list
            .as_ref()
            .map(|l| {
                l.read()
                    .cloned()
                    .map_err(|e| format!("status.list does not read: {e}"))
            })
            .transpose()?;
        let mut lists: Vec<LogEntry> = status
            .lists
            .as_ref()
            .map(|l| {
                l.read()
                    .cloned()
                    .map_err(|e| format!("status.lists does not read: {e}"))
            })
            .transpose()?
            .unwrap_or_default();
        // Lists kept whole on the Server (as they were before the task log
        // had a database): whole to the log, summed up on the Server.
        let finished: Vec<LogEntry> = lists
            .iter()
            .filter(|l| !l.steps.is_empty())
            .cloned()
            .collect();
        if !finished.is_empty() || lists.len() > SUMMED_UP {
            lists = lists
                .iter()
                .take(SUMMED_UP)
                .map(LogEntry::summed_up)
                .collect();
        }
        let environment = status
            .environment
            .iter()
            .map(|p| Package {
                name: p.name.clone(),
                version: p.version.clone(),
            })
            .collect();
        let force = force
            .map(|request| {
                let stage = Stage::from_wit_name(request.stage.trim()).ok_or_else(|| {
                    format!(
                        "spec.force.stage `{}` is none of {}",
                        request.stage,
                        Stage::NAMES.join(", ")
                    )
                })?;
                Ok::<_, String>(Force {
                    stage,
                    request: request.clone(),
                })
            })
            .transpose()?;
        Ok(Self {
            stage,
            since,
            environment,
            code: text(&status.code)
                .filter(|c| !c.is_empty())
                .map(String::from),
            lock: text(&status.lock).map(Lock::read).transpose()?,
            list,
            lists,
            finished,
            retry: Request::read(annotations, requests::RETRY)?,
            skip: Request::read(annotations, requests::SKIP)?,
            approve: Request::read(annotations, requests::APPROVE)?,
            force,
            forced: status.forced.clone(),
        })
    }

    /// The Server's status that records it, with what is observed of its
    /// machine and its conditions.
    pub fn status(&self, observed: &Observed, conditions: Vec<Condition>) -> ServerStatus {
        let environment_text = environment_text(&self.environment);
        ServerStatus {
            observed_generation: observed.generation,
            stage: self.stage.map(|s| s.wit_name().to_string()),
            since: self.since.map(rfc3339),
            environment: self
                .environment
                .iter()
                .map(|p| PackageSpec {
                    name: p.name.clone(),
                    version: p.version.clone(),
                })
                .collect(),
            environment_text: Some(environment_text).filter(|t| !t.is_empty()),
            code: self.code.clone(),
            lock: self.lock.as_ref().map(Lock::write),
            list: self.list.clone().map(Lenient::Read),
            step: self.list.as_ref().and_then(|l| {
                let task = l.current()?;
                Some(format!("{} (attempt {})", task.name, l.attempt + 1))
            }),
            step_key: self
                .list
                .as_ref()
                .and_then(|l| l.current())
                .and(observed.step_key.clone()),
            lists: Some(self.lists.clone())
                .filter(|l| !l.is_empty())
                .map(Lenient::Read),
            forced: self.forced.clone(),
            writer: observed.writer.clone(),
            machine: observed.machine.clone(),
            machine_state: observed.machine_state.map(|m| m.wit_name().to_string()),
            node: observed.node.clone(),
            ready: Some(observed.ready),
            conditions,
        }
    }

    /// Enter a stage with its list, at `now`.
    pub fn enter(&mut self, list: CurrentList, now: Timestamp) {
        self.finish_list();
        self.stage = Some(list.stage);
        self.since = Some(now);
        self.list = Some(list);
        self.settle();
    }

    /// The list in progress, when it has finished: its effect on what the
    /// instance has (when it succeeded) and its place in the finished
    /// lists.
    pub fn settle(&mut self) {
        let Some(list) = &self.list else { return };
        if list.outcome == ListOutcome::Succeeded {
            if let Some(environment) = &list.environment {
                self.environment = environment.clone();
            }
            if let Some(code) = &list.code {
                self.code = Some(code.clone());
            }
        }
    }

    /// Move the finished list in progress to the finished ones: whole to
    /// the task log, summed up on the Server.
    fn finish_list(&mut self) {
        if let Some(list) = self.list.take() {
            let entry = list.entry();
            self.lists.insert(0, entry.summed_up());
            self.lists.truncate(SUMMED_UP);
            self.finished.push(entry);
        }
    }

    /// The lists as the policy sees them: the one in progress first.
    pub fn all_lists(&self) -> Vec<TaskList> {
        self.list
            .iter()
            .map(CurrentList::view)
            .chain(self.lists.iter().map(LogEntry::view))
            .collect()
    }

    /// The number of the last list entered.
    pub fn last_number(&self) -> u64 {
        self.list.as_ref().map_or(0, |l| l.number)
    }
}

/// An object's annotations (those with text values).
pub fn annotations_of(object: &serde_json::Value) -> BTreeMap<String, String> {
    object["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// The machine of a `VirtualMachine` object, by its status.
pub fn machine_of(vm: &serde_json::Value) -> Machine {
    let ready = vm["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| c["status"] == "True");
    machine(vm["status"]["printableStatus"].as_str(), ready)
}

/// The machine of a `VirtualMachine` by its printable status and `Ready`
/// condition (none: the VM does not exist).
pub fn machine(phase: Option<&str>, ready: Option<bool>) -> Machine {
    match phase {
        None => Machine::Starting,
        Some("Running") => match ready {
            Some(true) => Machine::Running,
            _ => Machine::NotReady,
        },
        Some("Stopped" | "Stopping" | "Paused" | "Terminating") => Machine::Stopped,
        Some(
            "CrashLoopBackOff"
            | "ErrorUnschedulable"
            | "ErrImagePull"
            | "ImagePullBackOff"
            | "ErrorPvcNotFound"
            | "ErrorDataVolumeNotFound"
            | "DataVolumeError"
            | "Unknown",
        ) => Machine::Failed,
        Some(_) => Machine::Starting,
    }
}

#[cfg(test)]
mod tests;
