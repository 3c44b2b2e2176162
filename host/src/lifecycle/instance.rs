//! An instance as its `Server` carries it (seed 002's per-instance
//! object): in its status, its stage and since when, the environment and
//! code it has, the lock a controller holds on it, the task list it is in
//! and the last lists it ran; in its annotations, what people asked of it.
//! `kubectl get server -o yaml` shows them, and a restart or a leader
//! handover reads them back and loses nothing.
//!
//! A task list runs one step at a time; the step in progress, its attempt
//! and when to ask its hook again are in the list, so that a new leader
//! asks the same hook with the same key ([`CurrentList::key`]) and no step
//! runs twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::crd::{ForceSpec, ForceTaken};
use super::hooks::StepOutcome;
use super::model::{Next, Package, Task, TaskList};
use super::requests::{self, Request};
use crate::time::{Timestamp, parse_time, rfc3339};
use crate::wit::WitName;
use crate::wit::lifecycle::{Machine, Outcome, Stage};

/// How a task list ended, or that it runs. A list superseded (a newer
/// target, or a person's stage) ended without failing: the lifecycle policy
/// sees it as succeeded, the instance has nothing new of it, and people see
/// it as superseded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ListOutcome {
    Running,
    Succeeded,
    Failed,
    Superseded,
}

impl ListOutcome {
    /// As the lifecycle policy sees it.
    pub fn wit(self) -> Outcome {
        match self {
            ListOutcome::Running => Outcome::Running,
            ListOutcome::Succeeded | ListOutcome::Superseded => Outcome::Succeeded,
            ListOutcome::Failed => Outcome::Failed,
        }
    }

    /// Its name, as the status and the log say it.
    pub fn name(self) -> &'static str {
        match self {
            ListOutcome::Running => "running",
            ListOutcome::Succeeded => "succeeded",
            ListOutcome::Failed => "failed",
            ListOutcome::Superseded => "superseded",
        }
    }
}

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
        recorded.status(&Observed::default(), &serde_json::Value::Null),
    ))
}

/// The label naming the `VMReplicaSet` an instance belongs to.
pub const SET_LABEL: &str = "verdict.dev/vmreplicaset";
/// The finalizer that holds an instance until its clean-up ran.
pub const FINALIZER: &str = "verdict.dev/cleanup";

/// Finished lists summed up on the instance's Server (without their steps:
/// the whole task log is in the history's database).
pub const SUMMED_UP: usize = 5;
/// The longest message kept of a list or a step (a hook's answer may be
/// long; the Server's status is bounded).
const KEPT_MESSAGE: usize = 300;

/// `text`, cut to at most [`KEPT_MESSAGE`] bytes on a character boundary.
fn kept(text: &str) -> String {
    let mut end = text.len().min(KEPT_MESSAGE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// How one step of a list ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StepResult {
    Done,
    Failed,
    /// A person skipped it.
    Skipped,
}

/// One finished step of a list, as the task log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StepRecord {
    pub task: String,
    pub result: StepResult,
    /// When it ended, RFC 3339.
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// How many times its hook was asked.
    pub attempts: u32,
    #[serde(default)]
    pub message: String,
}

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

/// The task list an instance is in, step by step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CurrentList {
    /// Counts the lists of this instance: part of each step's key.
    pub number: u64,
    #[serde(with = "crate::wit::wit_name")]
    pub stage: Stage,
    pub tasks: Vec<Task>,
    /// The step being carried out (`tasks.len()` once all are done).
    pub step: usize,
    /// How many times the step has been asked.
    pub attempt: u32,
    #[serde(with = "crate::time::text")]
    pub started: Timestamp,
    /// When to ask the step's hook again.
    #[serde(with = "crate::time::text")]
    pub next_at: Timestamp,
    pub outcome: ListOutcome,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub progress: Option<u8>,
    /// What the instance has once the list succeeds.
    #[serde(default)]
    pub environment: Option<Vec<Package>>,
    #[serde(default)]
    pub code: Option<String>,
    pub reason: String,
    /// Waits for a person before its first step.
    #[serde(default)]
    pub needs_approval: bool,
    #[serde(default)]
    pub approved_by: Option<String>,
    #[serde(default, with = "crate::time::text_opt")]
    pub finished: Option<Timestamp>,
    /// The steps finished so far.
    #[serde(default)]
    pub steps: Vec<StepRecord>,
    /// The node its machine ran on when it was entered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// A list as the instance's task log keeps it once it is finished (or as
/// the log shows the one in progress).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LogEntry {
    /// The list's number on its instance (0 for lists kept before lists
    /// were numbered).
    #[serde(default)]
    pub number: u64,
    #[serde(with = "crate::wit::wit_name")]
    #[schema(value_type = String)]
    pub stage: Stage,
    /// Why the policy entered it.
    #[serde(default)]
    pub reason: String,
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub started: Timestamp,
    pub outcome: ListOutcome,
    /// The task running or failed, when one is.
    #[serde(default)]
    pub task: Option<String>,
    /// What the last hook answered.
    #[serde(default)]
    pub message: String,
    #[serde(default, with = "crate::time::text_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub finished: Option<Timestamp>,
    /// Who approved it, when it waited for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// Its finished steps (none said of a list summed up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
}

impl LogEntry {
    /// The list as its Server sums it up: without its steps.
    pub fn summed_up(&self) -> Self {
        Self {
            steps: Vec::new(),
            ..self.clone()
        }
    }

    /// As the lifecycle policy sees it.
    pub fn view(&self) -> TaskList {
        TaskList {
            stage: self.stage,
            started: self.started,
            outcome: self.outcome.wit(),
            task: self.task.clone(),
            message: self.message.clone(),
            finished: self.finished,
        }
    }
}

/// What one hook call did to a list.
#[derive(Debug, Clone, PartialEq)]
pub enum Advanced {
    /// The next step is due now.
    Next,
    /// The step runs; ask again at this time.
    Later(Timestamp),
    /// The list is done (succeeded or failed).
    Finished,
}

impl CurrentList {
    /// The list a policy's move enters, numbered after `previous`; none
    /// when the policy says to stay.
    pub fn entered(previous: u64, next: &Next, now: Timestamp) -> Option<Self> {
        let Next::Move {
            stage,
            tasks,
            environment,
            code,
            needs_approval,
            reason,
        } = next
        else {
            return None;
        };
        let done = tasks.is_empty() && !needs_approval;
        Some(Self {
            number: previous + 1,
            stage: *stage,
            tasks: tasks.clone(),
            step: 0,
            attempt: 0,
            started: now,
            next_at: now,
            outcome: match done {
                true => ListOutcome::Succeeded,
                false => ListOutcome::Running,
            },
            message: String::new(),
            progress: None,
            environment: environment.clone(),
            code: code.clone(),
            reason: reason.clone(),
            needs_approval: *needs_approval,
            approved_by: None,
            finished: done.then_some(now),
            steps: Vec::new(),
            node: None,
        })
    }

    /// The key of the step in progress, the same for every call of it and
    /// never the same for two machines: `namespace/instance/machine
    /// UID/list/step` (an instance deleted and made again under its name is
    /// another machine, whose work is its own).
    pub fn key(&self, namespace: &str, instance: &str, uid: &str) -> String {
        format!(
            "{namespace}/{instance}/{uid}/{}/{}",
            self.number,
            self.step + 1
        )
    }

    /// The task of the step in progress.
    pub fn current(&self) -> Option<&Task> {
        match self.outcome {
            ListOutcome::Running => self.tasks.get(self.step),
            _ => None,
        }
    }

    /// Whether it waits for a person before anything runs.
    pub fn awaiting_approval(&self) -> bool {
        self.needs_approval && self.approved_by.is_none() && self.outcome == ListOutcome::Running
    }

    /// Take a hook's answer on the step in progress, at `now`.
    pub fn advance(&mut self, outcome: StepOutcome, now: Timestamp) -> Advanced {
        match outcome {
            StepOutcome::Done { message } => {
                self.finish_step(StepResult::Done, &message, now);
                self.message = message;
                self.next_step(now)
            }
            StepOutcome::Failed { message } => {
                self.finish_step(StepResult::Failed, &message, now);
                self.message = message;
                self.outcome = ListOutcome::Failed;
                self.finished = Some(now);
                Advanced::Finished
            }
            StepOutcome::Running {
                message,
                progress,
                retry_after,
            } => {
                self.message = message;
                self.progress = progress;
                self.next_at = now.saturating_add(retry_after.as_millis() as i64);
                Advanced::Later(self.next_at)
            }
        }
    }

    /// Keep the step in progress as finished with `result`.
    fn finish_step(&mut self, result: StepResult, message: &str, now: Timestamp) {
        if let Some(task) = self.tasks.get(self.step) {
            self.steps.push(StepRecord {
                task: task.name.clone(),
                result,
                at: now,
                attempts: self.attempt,
                message: kept(message),
            });
        }
    }

    /// A person skips the step in progress (a stuck clean-up step): it
    /// counts as done, and the log says who and why.
    pub fn skip(&mut self, who: &str, now: Timestamp) -> Advanced {
        let task = self.current().map(|t| t.name.clone()).unwrap_or_default();
        let message = format!("{task} skipped by {who}");
        self.finish_step(StepResult::Skipped, &message, now);
        self.message = message;
        self.next_step(now)
    }

    /// A person's retry of a failed list: it runs on from the step that
    /// failed (asked again under the same key, a new attempt), every step
    /// after it still to come — none is dropped.
    pub fn resume(&mut self, who: &str, now: Timestamp) {
        if self.outcome != ListOutcome::Failed {
            return;
        }
        self.outcome = ListOutcome::Running;
        self.finished = None;
        self.next_at = now;
        self.progress = None;
        self.message = format!("retried by {who}");
    }

    /// A person skips the step a failed list stopped at (a clean-up step
    /// whose hook is down for good): it counts as done, audited, and the
    /// list runs on from the step after it.
    pub fn skip_failed(&mut self, who: &str, now: Timestamp) -> Advanced {
        if self.outcome != ListOutcome::Failed {
            return Advanced::Finished;
        }
        self.outcome = ListOutcome::Running;
        self.finished = None;
        self.skip(who, now)
    }

    /// Whether the list's last step, not asked yet, would give the
    /// instance a target it should no longer have: the set's environment
    /// or the code the rollout gives it changed while the steps before it
    /// ran.
    pub fn superseded_by(&self, environment: &[Package], code: Option<&str>) -> bool {
        let last = self.outcome == ListOutcome::Running
            && self.attempt == 0
            && self.step + 1 == self.tasks.len();
        let environment_changed = self
            .environment
            .as_ref()
            .is_some_and(|e| e.as_slice() != environment);
        let code_changed = self
            .code
            .as_deref()
            .is_some_and(|c| code.is_some_and(|t| t != c));
        last && (environment_changed || code_changed)
    }

    /// End the list where it is, superseded (by a newer target before its
    /// last step, or by a person's stage): the steps it ran stay done (what
    /// it let go of is let go of), the instance has nothing new of it, and
    /// the policy's next list is the newest target's or the person's.
    pub fn supersede(&mut self, why: &str, now: Timestamp) {
        self.environment = None;
        self.code = None;
        self.outcome = ListOutcome::Superseded;
        self.finished = Some(now);
        self.progress = None;
        self.message = format!("superseded: {why}");
    }

    /// On to the step after the one just finished, or the list succeeded.
    fn next_step(&mut self, now: Timestamp) -> Advanced {
        self.progress = None;
        self.step += 1;
        self.attempt = 0;
        self.next_at = now;
        if self.step >= self.tasks.len() {
            self.outcome = ListOutcome::Succeeded;
            self.finished = Some(now);
            return Advanced::Finished;
        }
        Advanced::Next
    }

    /// The list as the task log keeps it.
    pub fn entry(&self) -> LogEntry {
        LogEntry {
            number: self.number,
            stage: self.stage,
            reason: kept(&self.reason),
            started: self.started,
            outcome: self.outcome,
            task: match self.outcome {
                ListOutcome::Succeeded => None,
                _ => self.tasks.get(self.step).map(|t| t.name.clone()),
            },
            message: kept(&self.message),
            finished: self.finished,
            approved_by: self.approved_by.clone(),
            steps: self.steps.clone(),
        }
    }

    /// The list as the policy sees it.
    pub fn view(&self) -> TaskList {
        self.entry().view()
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
    /// Read a Server: its status and people's requests in its annotations.
    /// What does not read is named, so that a hand-made edit is reported
    /// rather than guessed at.
    pub fn read(server: &serde_json::Value) -> Result<Self, String> {
        let status = &server["status"];
        let text = |field: &str| status[field].as_str().map(str::trim);
        let stage = text("stage")
            .map(|text| {
                Stage::from_wit_name(text).ok_or_else(|| {
                    format!(
                        "status.stage `{text}` is none of {}",
                        Stage::NAMES.join(", ")
                    )
                })
            })
            .transpose()?;
        let since = text("since")
            .map(|text| parse_time(text).map_err(|e| format!("status.since: {e}")))
            .transpose()?;
        let field = |name: &str| Some(&status[name]).filter(|v| !v.is_null());
        let list = field("list")
            .map(|value| {
                serde_json::from_value(value.clone())
                    .map_err(|e| format!("status.list does not read: {e}"))
            })
            .transpose()?;
        let mut lists: Vec<LogEntry> = field("lists")
            .map(|value| {
                serde_json::from_value(value.clone())
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
        let environment = field("environment")
            .map(|value| {
                serde_json::from_value(value.clone())
                    .map_err(|e| format!("status.environment does not read: {e}"))
            })
            .transpose()?
            .unwrap_or_default();
        let annotations = annotations_of(server);
        let force = Some(&server["spec"]["force"])
            .filter(|v| !v.is_null())
            .map(|value| {
                let request: ForceSpec = serde_json::from_value(value.clone())
                    .map_err(|e| format!("spec.force does not read: {e}"))?;
                let stage = Stage::from_wit_name(request.stage.trim()).ok_or_else(|| {
                    format!(
                        "spec.force.stage `{}` is none of {}",
                        request.stage,
                        Stage::NAMES.join(", ")
                    )
                })?;
                Ok::<_, String>(Force { stage, request })
            })
            .transpose()?;
        let forced = field("forced")
            .map(|value| {
                serde_json::from_value(value.clone())
                    .map_err(|e| format!("status.forced does not read: {e}"))
            })
            .transpose()?;
        Ok(Self {
            stage,
            since,
            environment,
            code: text("code").filter(|c| !c.is_empty()).map(String::from),
            lock: text("lock").map(Lock::read).transpose()?,
            list,
            lists,
            finished,
            retry: Request::read(&annotations, requests::RETRY)?,
            skip: Request::read(&annotations, requests::SKIP)?,
            approve: Request::read(&annotations, requests::APPROVE)?,
            force,
            forced,
        })
    }

    /// The Server's status that records it, with what is observed of its
    /// machine; `conditions` kept from before.
    pub fn status(&self, observed: &Observed, conditions: &serde_json::Value) -> serde_json::Value {
        let mut status = serde_json::json!({
            "stage": self.stage.map(|s| s.wit_name()),
            "since": self.since.map(rfc3339),
            "environment": self.environment,
            "environmentText": Some(environment_text(&self.environment)).filter(|t| !t.is_empty()),
            "code": self.code,
            "lock": self.lock.as_ref().map(Lock::write),
            "list": self.list,
            "step": self.list.as_ref().and_then(|l| {
                let task = l.current()?;
                Some(format!("{} (attempt {})", task.name, l.attempt + 1))
            }),
            "stepKey": self.list.as_ref().and_then(|l| l.current()).and(observed.step_key.clone()),
            "lists": self.lists,
            "forced": self.forced,
            "machine": observed.machine,
            "machineState": observed.machine_state.map(|m| m.wit_name()),
            "node": observed.node,
            "ready": observed.ready,
            "observedGeneration": observed.generation,
            "writer": observed.writer,
        });
        if conditions.as_array().is_some_and(|c| !c.is_empty()) {
            status["conditions"] = conditions.clone();
        }
        status
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
mod tests {
    use std::time::Duration;

    use super::*;

    fn task(name: &str) -> Task {
        Task {
            name: name.into(),
            params: serde_json::json!({}),
        }
    }

    fn jdk(version: &str) -> Vec<Package> {
        vec![Package {
            name: "jdk".into(),
            version: version.into(),
        }]
    }

    /// The list of a move to `stage`.
    fn moving(
        previous: u64,
        stage: Stage,
        tasks: &[&str],
        environment: Option<Vec<Package>>,
        code: Option<&str>,
        needs_approval: bool,
        now: Timestamp,
    ) -> CurrentList {
        let next = Next::Move {
            stage,
            tasks: tasks.iter().map(|name| task(name)).collect(),
            environment,
            code: code.map(String::from),
            needs_approval,
            reason: "a test".into(),
        };
        CurrentList::entered(previous, &next, now).unwrap()
    }

    fn initializing(previous: u64, now: Timestamp) -> CurrentList {
        moving(
            previous,
            Stage::Initializing,
            &["detach-load-balancer", "install-environment"],
            Some(jdk("25")),
            None,
            false,
            now,
        )
    }

    #[test]
    fn a_list_runs_step_by_step_and_its_success_is_what_the_instance_has() {
        let mut recorded = Recorded {
            stage: Some(Stage::Serving),
            environment: jdk("21"),
            code: Some("1.0".into()),
            ..Recorded::default()
        };
        recorded.enter(initializing(recorded.last_number(), 1_000), 1_000);
        let list = recorded.list.as_mut().unwrap();
        assert_eq!(list.key("shop", "web-0", "u-1"), "shop/web-0/u-1/1/1");
        assert_eq!(list.current().unwrap().name, "detach-load-balancer");
        let later = list.advance(
            StepOutcome::Running {
                message: "draining".into(),
                progress: Some(30),
                retry_after: Duration::from_secs(2),
            },
            1_500,
        );
        assert_eq!(later, Advanced::Later(3_500));
        assert_eq!(
            list.key("shop", "web-0", "u-1"),
            "shop/web-0/u-1/1/1",
            "the same step, the same key"
        );
        assert_eq!(
            list.advance(
                StepOutcome::Done {
                    message: String::new()
                },
                4_000
            ),
            Advanced::Next
        );
        assert_eq!(list.key("shop", "web-0", "u-1"), "shop/web-0/u-1/1/2");
        assert_ne!(
            list.key("shop", "web-0", "u-2"),
            list.key("shop", "web-0", "u-1"),
            "another machine under the same name, another key"
        );
        assert_eq!(
            list.advance(
                StepOutcome::Done {
                    message: "installed".into()
                },
                5_000
            ),
            Advanced::Finished
        );
        recorded.settle();
        assert_eq!(recorded.environment, jdk("25"));
        assert_eq!(recorded.code.as_deref(), Some("1.0"));
        assert_eq!(recorded.all_lists()[0].outcome, Outcome::Succeeded);

        // The next list is numbered on, and the last one is kept.
        recorded.enter(
            moving(
                recorded.last_number(),
                Stage::Deploying,
                &["deploy-code"],
                None,
                Some("1.1"),
                false,
                6_000,
            ),
            6_000,
        );
        assert_eq!(
            recorded.list.as_ref().unwrap().key("shop", "web-0", "u-1"),
            "shop/web-0/u-1/2/1"
        );
        assert_eq!(recorded.lists.len(), 1);
        assert_eq!(recorded.lists[0].stage, Stage::Initializing);
        // Summed up on the Server; whole for the task log.
        assert!(recorded.lists[0].steps.is_empty());
        assert_eq!(recorded.finished.len(), 1);
        assert_eq!(recorded.finished[0].steps.len(), 2);
        assert_eq!(recorded.finished[0].summed_up(), recorded.lists[0]);
        assert_eq!(recorded.since, Some(6_000));
        let list = recorded.list.as_mut().unwrap();
        list.advance(
            StepOutcome::Failed {
                message: "no such artifact".into(),
            },
            7_000,
        );
        recorded.settle();
        assert_eq!(
            recorded.code.as_deref(),
            Some("1.0"),
            "a failed list changes nothing"
        );
        let failed = &recorded.all_lists()[0];
        assert_eq!(
            (
                failed.outcome,
                failed.task.as_deref(),
                failed.message.as_str()
            ),
            (Outcome::Failed, Some("deploy-code"), "no such artifact")
        );
    }

    #[test]
    fn a_list_without_tasks_is_done_on_entry_and_a_stuck_step_can_be_skipped() {
        let empty = moving(0, Stage::Requested, &[], None, None, false, 5);
        assert_eq!(
            (empty.outcome, empty.finished),
            (ListOutcome::Succeeded, Some(5))
        );
        let gated = moving(0, Stage::Deleting, &[], None, None, true, 5);
        assert!(gated.awaiting_approval());

        let mut clean_up = moving(
            0,
            Stage::Deleting,
            &["detach-load-balancer", "delete-machine"],
            None,
            None,
            false,
            0,
        );
        assert!(
            CurrentList::entered(
                0,
                &Next::Stay {
                    why: "serving".into()
                },
                0
            )
            .is_none(),
            "staying enters no list"
        );
        assert_eq!(clean_up.skip("alice: stuck", 10), Advanced::Next);
        assert_eq!(
            clean_up.message,
            "detach-load-balancer skipped by alice: stuck"
        );
        assert_eq!(clean_up.current().unwrap().name, "delete-machine");
        assert_eq!(
            clean_up.advance(
                StepOutcome::Done {
                    message: "gone".into()
                },
                20
            ),
            Advanced::Finished
        );
        // The log keeps every step: how it ended, when, after how many asks.
        let entry = clean_up.entry();
        assert_eq!(
            entry
                .steps
                .iter()
                .map(|s| (s.task.as_str(), s.result, s.at, s.message.as_str()))
                .collect::<Vec<_>>(),
            [
                (
                    "detach-load-balancer",
                    StepResult::Skipped,
                    10,
                    "detach-load-balancer skipped by alice: stuck"
                ),
                ("delete-machine", StepResult::Done, 20, "gone"),
            ]
        );
        assert_eq!((entry.outcome, entry.task), (ListOutcome::Succeeded, None));
    }

    #[test]
    fn the_server_sums_up_its_last_lists_and_hands_the_whole_ones_to_the_log() {
        let mut recorded = Recorded::default();
        for n in 0..8 {
            let mut list = initializing(recorded.last_number(), n * 1_000);
            for _ in 0..2 {
                list.advance(
                    StepOutcome::Done {
                        message: "done".into(),
                    },
                    n * 1_000 + 500,
                );
            }
            recorded.enter(list, n * 1_000);
        }
        assert_eq!(recorded.lists.len(), SUMMED_UP);
        assert_eq!(
            recorded.lists.iter().map(|l| l.number).collect::<Vec<_>>(),
            [7, 6, 5, 4, 3]
        );
        assert!(recorded.lists.iter().all(|l| l.steps.is_empty()));
        assert_eq!(recorded.finished.len(), 7);
        assert!(recorded.finished.iter().all(|l| l.steps.len() == 2));
        // The status carries no steps but the list in progress's.
        let status = recorded.status(&Observed::default(), &serde_json::Value::Null);
        assert_eq!(status["lists"].as_array().unwrap().len(), SUMMED_UP);
        assert!(
            status["lists"][0]
                .get("steps")
                .is_none_or(|s| s == &serde_json::json!([]))
        );

        // A Server that kept its lists whole (30 of them) reads as lists
        // for the log and five summed up.
        let whole: Vec<LogEntry> = recorded
            .finished
            .iter()
            .rev()
            .cloned()
            .cycle()
            .take(30)
            .collect();
        let old = serde_json::json!({"status": {"lists": whole}});
        let read = Recorded::read(&old).unwrap();
        assert_eq!(read.finished.len(), 30);
        assert_eq!(read.lists.len(), SUMMED_UP);
        assert!(read.lists.iter().all(|l| l.steps.is_empty()));
        // Read again as the leader wrote it: nothing more for the log.
        let rewritten = serde_json::json!({"status": read.status(&Observed::default(), &serde_json::Value::Null)});
        assert!(Recorded::read(&rewritten).unwrap().finished.is_empty());
    }

    #[test]
    fn what_the_annotations_record_reads_back_whole() {
        let mut recorded = Recorded {
            stage: Some(Stage::Initializing),
            since: Some(1_767_225_600_000),
            environment: vec![
                Package {
                    name: "jdk".into(),
                    version: "21".into(),
                },
                Package {
                    name: "agent".into(),
                    version: "3.2".into(),
                },
            ],
            code: Some("1.0".into()),
            lock: Some(Lock {
                holder: "verdict-7c9f".into(),
                term: 4,
            }),
            list: Some(initializing(2, 1_767_225_600_000)),
            lists: Vec::new(),
            ..Recorded::default()
        };
        recorded
            .lists
            .push(initializing(1, 1_767_225_500_000).entry());
        let status = recorded.status(&Observed::default(), &serde_json::Value::Null);
        assert_eq!(status["stage"], "initializing");
        assert_eq!(status["environmentText"], "jdk=21,agent=3.2");
        assert_eq!(status["lock"], "verdict-7c9f/4");
        assert_eq!(status["step"], "detach-load-balancer (attempt 1)");
        let server = serde_json::json!({ "status": status });
        assert_eq!(Recorded::read(&server).unwrap(), recorded);

        // A hook's long answer is kept cut, on a character boundary.
        let mut list = initializing(3, 0);
        list.advance(
            StepOutcome::Failed {
                message: "é".repeat(400),
            },
            1,
        );
        let entry = list.entry();
        assert_eq!(entry.message.chars().count(), 150);
        assert_eq!(entry.steps[0].message.len(), 300);

        // Lists kept before they were numbered still read.
        let old = r#"[{"stage":"ready","started":"2026-01-01T00:00:00Z","outcome":"succeeded","task":null,"message":"","finished":"2026-01-01T00:00:01Z"}]"#;
        let old: serde_json::Value = serde_json::from_str(old).unwrap();
        let read = Recorded::read(&serde_json::json!({"status": {"lists": old}})).unwrap();
        assert_eq!(
            (read.lists[0].number, read.lists[0].stage),
            (0, Stage::Ready)
        );

        // Nothing recorded: a new or adopted machine.
        assert_eq!(
            Recorded::read(&serde_json::json!({})).unwrap(),
            Recorded::default()
        );
    }

    #[test]
    fn a_vms_legacy_annotations_become_its_servers_status() {
        let list = initializing(2, 1_767_225_600_000);
        let annotations = BTreeMap::from([
            ("verdict.dev/stage".to_string(), "initializing".to_string()),
            (
                "verdict.dev/since".to_string(),
                "2026-01-01T00:00:00Z".to_string(),
            ),
            (
                "verdict.dev/environment".to_string(),
                "jdk=21,agent=3.2".to_string(),
            ),
            ("verdict.dev/code".to_string(), "1.0".to_string()),
            ("verdict.dev/lock".to_string(), "verdict-7c9f/4".to_string()),
            (
                "verdict.dev/list".to_string(),
                serde_json::to_string(&list).unwrap(),
            ),
            ("team".to_string(), "shop".to_string()),
        ]);
        let status = legacy_status(&annotations).unwrap().unwrap();
        let read = Recorded::read(&serde_json::json!({ "status": status })).unwrap();
        assert_eq!(read.stage, Some(Stage::Initializing));
        assert_eq!(read.environment.len(), 2);
        assert_eq!(read.code.as_deref(), Some("1.0"));
        assert_eq!(
            read.list,
            Some(list),
            "the list in progress, whole: it runs on"
        );
        assert_eq!(read.lock, None, "the lock is the new leader's to take");
        // None of them: nothing to take over.
        let plain = BTreeMap::from([("team".to_string(), "shop".to_string())]);
        assert_eq!(legacy_status(&plain).unwrap(), None);
        // What does not read is named, and not taken.
        let wrong = BTreeMap::from([("verdict.dev/stage".to_string(), "redy".to_string())]);
        assert!(legacy_status(&wrong).unwrap_err().contains("redy"));
    }

    #[test]
    fn a_status_edited_wrong_by_hand_is_named() {
        let refused = |field: &str, value: serde_json::Value| {
            Recorded::read(&serde_json::json!({ "status": { field: value } })).unwrap_err()
        };
        assert!(
            refused("stage", "redy".into())
                .starts_with("status.stage `redy` is none of requested, initializing")
        );
        assert!(
            refused("environment", serde_json::json!([{"name": "jdk"}]))
                .starts_with("status.environment does not read")
        );
        assert!(refused("since", "yesterday".into()).starts_with("status.since: "));
        assert_eq!(
            refused("lock", "verdict".into()),
            "status.lock `verdict` is not holder/term"
        );
        assert_eq!(
            refused("lock", "verdict/x".into()),
            "status.lock `verdict/x`: the term is not a number"
        );
        assert!(refused("list", "{".into()).starts_with("status.list does not read"));
        // A stage written by hand with spaces reads.
        let read = Recorded::read(&serde_json::json!({"status": {"stage": " ready "}})).unwrap();
        assert_eq!(read.stage, Some(Stage::Ready));
        // People's requests are the Server's annotations.
        let asked = serde_json::json!({"metadata": {"annotations": {
            requests::RETRY: "{"
        }}});
        assert!(Recorded::read(&asked).is_err());
    }

    #[test]
    fn a_list_whose_target_changed_does_not_start_its_last_step() {
        let mut list = initializing(0, 1_000);
        // Its first step (letting go of the load balancer) is not what it
        // delivers: the list goes on to it whatever the target.
        assert!(!list.superseded_by(&jdk("26"), None));
        list.advance(
            StepOutcome::Done {
                message: String::new(),
            },
            2_000,
        );
        assert!(!list.superseded_by(&jdk("25"), None), "the same target");
        assert!(list.superseded_by(&jdk("26"), None));
        list.supersede("the target is now jdk 26", 3_000);
        assert_eq!(list.outcome, ListOutcome::Superseded);
        assert_eq!(
            list.entry().view().outcome,
            Outcome::Succeeded,
            "as the policy sees it"
        );
        assert_eq!(list.message, "superseded: the target is now jdk 26");
        let mut recorded = Recorded {
            environment: jdk("21"),
            list: Some(list),
            ..Recorded::default()
        };
        recorded.settle();
        assert_eq!(recorded.environment, jdk("21"), "nothing new was installed");
    }

    #[test]
    fn a_lock_is_taken_when_free_own_or_left_by_an_older_leader() {
        let held = Lock {
            holder: "a".into(),
            term: 3,
        };
        let elected = |holder: &str, term| crate::leader::Term::elected(holder, term);
        assert!(may_take(None, &elected("b", 1)));
        assert!(may_take(Some(&held), &elected("a", 3)));
        assert!(may_take(Some(&held), &elected("b", 4)));
        assert!(!may_take(Some(&held), &elected("b", 3)));
        assert!(!may_take(Some(&held), &elected("b", 2)));
        // A host that acts alone, started again under a new name in term
        // 0, takes over its own earlier process's lists.
        let lone = Lock {
            holder: "host-41".into(),
            term: 0,
        };
        let restarted = crate::leader::Term {
            alone: true,
            ..elected("host-97", 0)
        };
        assert!(may_take(Some(&lone), &restarted));
        assert!(!may_take(Some(&lone), &elected("host-97", 0)));
    }

    #[test]
    fn a_machine_reads_from_its_printable_status() {
        assert_eq!(machine(Some("Running"), Some(true)), Machine::Running);
        assert_eq!(machine(Some("Running"), Some(false)), Machine::NotReady);
        assert_eq!(machine(Some("Running"), None), Machine::NotReady);
        assert_eq!(machine(Some("Provisioning"), None), Machine::Starting);
        assert_eq!(machine(None, None), Machine::Starting);
        assert_eq!(machine(Some("Stopped"), None), Machine::Stopped);
        assert_eq!(machine(Some("CrashLoopBackOff"), None), Machine::Failed);
    }
}
