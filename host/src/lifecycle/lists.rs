//! An instance's task lists: the one it is in, step by step — the step at,
//! its attempt, when to ask its hook again (so that a new leader asks the
//! same hook with the same key, [`CurrentList::key`], and no step runs
//! twice) — and a finished one as the task log keeps it, whole or summed
//! up.

use serde::{Deserialize, Serialize};

use super::hooks::StepOutcome;
use super::model::{Next, Package, Task, TaskList};
use crate::time::Timestamp;
use crate::wit::lifecycle::{Outcome, Stage};

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
    /// The node its machine ran on when it was entered (or, with none
    /// then, last ran on).
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
