//! Safe-rate rollouts: what each instance of a `VMReplicaSet` should have,
//! and whether it may be taken out of service now.
//!
//! An environment change of the set and a code change of its `VMDeployment`
//! share one budget: at most `maxUnavailable` of the set's instances out of
//! service (not `ready`, `gray-release` or `serving`) at a time, counting
//! those already out. With `maxSurge`, the set runs that many more
//! instances while a change rolls out (each made with the change): each
//! available beyond those wanted lets one more be taken out, so that
//! `maxUnavailable: 0` rolls out without ever running fewer than wanted. The deployment's code goes out by its steps: a step
//! of instances gives the new code to that many more (taken in the set's
//! order) and is done when they are back in service with it; `pause: {}`
//! waits for a person's approval, a timed pause for its time; past the last
//! step (or once promoted) the new code is released to every instance. A
//! failed instance stops the rollout (`Degraded`); an aborted one takes the
//! instances that got the new code back to the code released before.
//!
//! Everything here is a pure function of the set, the deployment and the
//! instances, so that a restart or another leader plans the same.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::model::{InstanceState, Package, TargetState};
use crate::time::Timestamp;
use crate::wit::lifecycle::{Machine, NodeHealth, Outcome, Stage};

/// A number of instances, or a share of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    Count(u32),
    /// 1 to 100.
    Percent(u8),
}

impl Share {
    /// `1`, `3`, `25%` (the int-or-string of the resources).
    pub fn parse(value: &serde_json::Value) -> Result<Self, String> {
        match value {
            serde_json::Value::Number(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n >= 1)
                .map(Share::Count)
                .ok_or_else(|| format!("{n} is not a count of at least 1")),
            serde_json::Value::String(text) => text
                .strip_suffix('%')
                .and_then(|p| p.parse::<u8>().ok())
                .filter(|p| (1..=100).contains(p))
                .map(Share::Percent)
                .ok_or_else(|| format!("`{text}` is not a share from 1% to 100%")),
            other => Err(format!("{other} is neither a count nor a share")),
        }
    }

    /// How many of `total` instances, rounded up (a step's instances).
    fn at_least(self, total: usize) -> usize {
        match self {
            Share::Count(n) => (n as usize).min(total),
            Share::Percent(p) => (total * p as usize).div_ceil(100),
        }
    }

    /// `0`, `1`, `3`, `0%`, `25%`: a count or share that may be none (a
    /// surge, or the most unavailable beside a surge).
    pub fn parse_or_none(value: &serde_json::Value) -> Result<Self, String> {
        match value {
            serde_json::Value::Number(n) if n.as_u64() == Some(0) => Ok(Share::Count(0)),
            serde_json::Value::String(text) if text == "0%" => Ok(Share::Percent(0)),
            other => Share::parse(other).map_err(|e| e.replace("at least 1", "at least 0")),
        }
    }

    /// Whether it is none of any number.
    pub fn is_none(self) -> bool {
        matches!(self, Share::Count(0) | Share::Percent(0))
    }

    /// How many of `total` instances, rounded down but at least one unless
    /// it is none (the most unavailable at once).
    pub fn at_most(self, total: usize) -> usize {
        match self {
            Share::Count(n) => n as usize,
            Share::Percent(0) => 0,
            Share::Percent(p) => (total * p as usize / 100).max(1),
        }
    }

    /// How many more than `total` instances, rounded up (a surge).
    pub fn beyond(self, total: usize) -> usize {
        match self {
            Share::Count(n) => n as usize,
            Share::Percent(p) => (total * p as usize).div_ceil(100),
        }
    }
}

/// The order a rollout takes instances in (`spec.rollout.order` of a set,
/// by these names in kebab case).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    #[default]
    Name,
    OldestFirst,
    NewestFirst,
}

/// What the set asks of its instances.
#[derive(Debug, Clone)]
pub struct SetSpec {
    pub environment: Vec<Package>,
    pub max_unavailable: Share,
    /// How many instances beyond those it wants the set may run while a
    /// change rolls out, so that it loses no capacity.
    pub max_surge: Share,
    pub order: Order,
    /// No instance is taken out of service while paused.
    pub paused: bool,
    /// How many instances the set wants (its replicas less those named
    /// offline); none: as many as it has.
    pub desired: Option<usize>,
}

/// One step of a gray release.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Instances(Share),
    /// Until a person approves (`None`), or for a while.
    Pause(Option<Duration>),
}

/// Where a deployment's rollout is, as its status keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// The step it is at (`steps.len()` when past the last).
    pub step: usize,
    /// When that step began.
    pub since: Timestamp,
    /// When the rollout began.
    pub started: Timestamp,
    /// A person approved the gate at `step`.
    pub approved: bool,
    /// A person skipped the remaining steps.
    pub promoted: bool,
    /// A person took the instances back to the code before.
    pub aborted: bool,
}

/// What a deployment asks of the set's instances.
#[derive(Debug, Clone)]
pub struct DeploymentSpec {
    /// The new code's version.
    pub code: String,
    /// The version released before, when there was one.
    pub previous: Option<String>,
    /// The steps; none is one step of every instance.
    pub steps: Vec<Step>,
    pub paused: bool,
    pub progress_deadline: Duration,
}

/// One instance with when it was made (for the order).
#[derive(Debug, Clone)]
pub struct Member<'a> {
    pub state: &'a InstanceState,
    pub created: Timestamp,
    /// Its node is `Ready` as observed now. The lifecycle policy waits a
    /// node out within failover's grace (it sees it healthy); the rollout
    /// counts it unavailable at once.
    pub node_ready: bool,
}

/// A rollout's phase, as the deployment's status says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    Progressing,
    Paused,
    Completed,
    Degraded,
    Aborted,
}

/// The plan of one reconcile: each instance's target, and the rollout's
/// progress.
#[derive(Debug, Clone)]
pub struct Plan {
    pub targets: BTreeMap<String, TargetState>,
    /// The deployment's progress after this plan (a step may be done).
    pub progress: Progress,
    pub phase: Phase,
    /// What the rollout waits for, for a person.
    pub waiting: String,
    /// Instances in service (`ready`, `gray-release`, `serving`).
    pub ready: usize,
    /// Instances with the set's environment and the deployment's code.
    pub up_to_date: usize,
    /// Instances available, as observed (see [`available`]).
    pub available: usize,
    /// The rollout has been on its step past the deadline.
    pub past_deadline: bool,
}

/// Whether an instance in `stage` is in service.
pub fn in_service(stage: Option<Stage>) -> bool {
    matches!(
        stage,
        Some(Stage::Ready | Stage::GrayRelease | Stage::Serving)
    )
}

/// Whether an instance is available, as observed: in service, its machine
/// running and ready, its node healthy and `Ready` now.
pub fn available(member: &Member<'_>) -> bool {
    let state = member.state;
    member.node_ready
        && in_service(state.stage)
        && state.machine == Machine::Running
        && state.node_health == NodeHealth::Healthy
}

/// The step an instance's last failed list failed at, when one did.
pub fn failed_step(state: &InstanceState) -> Option<&str> {
    state
        .lists
        .iter()
        .find(|l| l.outcome == Outcome::Failed)
        .and_then(|l| l.task.as_deref())
}

/// An instance by name, with the step its last failed list failed at
/// (`web-1 at install-environment`).
pub fn with_step(state: &InstanceState) -> String {
    match failed_step(state) {
        Some(task) => format!("{} at {task}", state.name),
        None => state.name.clone(),
    }
}

/// Whether an instance is on its way out and no longer counts.
pub fn leaving(state: &InstanceState) -> bool {
    state.deleting
        || state.take_offline
        || matches!(state.stage, Some(Stage::Offline | Stage::Deleting))
}

/// Plan one reconcile of a set (and its deployment, when one targets it)
/// at `now`.
pub fn plan(
    set: &SetSpec,
    deployment: Option<(&DeploymentSpec, &Progress)>,
    members: &[Member<'_>],
    now: Timestamp,
) -> Plan {
    let mut ordered: Vec<&Member<'_>> = members.iter().filter(|m| !leaving(m.state)).collect();
    match set.order {
        Order::Name => ordered.sort_by(|a, b| a.state.name.cmp(&b.state.name)),
        Order::OldestFirst => ordered.sort_by_key(|m| (m.created, m.state.name.clone())),
        Order::NewestFirst => ordered.sort_by_key(|m| (Reverse(m.created), m.state.name.clone())),
    }
    let total = ordered.len();
    let ready = ordered.iter().filter(|m| in_service(m.state.stage)).count();

    // The code each instance should run, and the rollout's progress.
    let (codes, rollout) = match deployment {
        None => (vec![None; total], None),
        Some((spec, progress)) => {
            let (codes, rollout) = codes(spec, progress, &ordered, now);
            (codes, Some(rollout))
        }
    };

    // The budget of instances unavailable at once, and how many are, as
    // observed: those the set wants less those available — the lost, the
    // failed, the out of service and the missing among them. A rollout
    // takes an available instance out only within it.
    let desired = set.desired.unwrap_or(total);
    let budget = set.max_unavailable.at_most(desired);
    // An available instance may be taken out while the others available
    // stay above `desired - budget` (with a surge, more are available than
    // desired, and as many more may go).
    let floor = desired.saturating_sub(budget);
    let available_now = ordered.iter().filter(|m| available(m)).count();
    let mut available_left = available_now;
    let code_held = rollout
        .as_ref()
        .is_some_and(|r| matches!(r.phase, Phase::Degraded | Phase::Paused));
    let mut targets = BTreeMap::new();
    let mut up_to_date = 0;
    for (member, code) in ordered.iter().zip(&codes) {
        let state = member.state;
        let environment_changes = state.environment != set.environment;
        let code_changes = code
            .as_ref()
            .is_some_and(|c| state.code.as_ref() != Some(c));
        if !environment_changes && !code_changes {
            up_to_date += 1;
        }
        // An instance already out of service may go on; one in service may
        // leave it while the budget allows and nothing holds the change.
        let held = set.paused || (code_changes && !environment_changes && code_held);
        let may_disrupt = if !in_service(state.stage) {
            true
        } else if !(environment_changes || code_changes) || held {
            false
        } else if !member.node_ready {
            // Its node not Ready: counted out, and not changed — nothing
            // is installed on a machine that may not be reached (failover
            // decides what to do about the node).
            false
        } else if !available(member) {
            // Unavailable already (its machine not ready, its node not
            // healthy): counted among those out, it may move while those
            // are within the budget — more than that unavailable, nothing
            // moves on the strength of what may be a misreading.
            available_left >= floor
        } else if available_left > floor {
            available_left -= 1;
            true
        } else {
            false
        };
        let released = match (deployment, code) {
            (Some((spec, _)), Some(code)) => {
                code != &spec.code || rollout.as_ref().is_some_and(|r| r.released)
            }
            // A deployment targets the set and no code is released to this
            // instance yet (the first rollout has not reached it): it takes
            // no traffic.
            (Some(_), None) => false,
            (None, _) => true,
        };
        targets.insert(
            state.name.clone(),
            TargetState {
                environment: set.environment.clone(),
                code: code.clone(),
                may_disrupt,
                released,
            },
        );
    }
    // The leaving instances keep what they have.
    for member in members.iter().filter(|m| leaving(m.state)) {
        targets.insert(
            member.state.name.clone(),
            TargetState {
                environment: member.state.environment.clone(),
                code: member.state.code.clone(),
                may_disrupt: true,
                released: true,
            },
        );
    }
    let (progress, phase, waiting, past_deadline) = match rollout {
        Some(r) => (r.progress, r.phase, r.waiting, r.past_deadline),
        None => {
            let waiting = match (set.paused, up_to_date == total) {
                (true, _) => "paused".to_string(),
                (false, true) => String::new(),
                (false, false) => format!(
                    "{} of {total} instances have the environment; at most {budget} out of service at once",
                    up_to_date
                ),
            };
            let phase = match (set.paused, up_to_date == total && ready == total) {
                (true, _) => Phase::Paused,
                (false, true) => Phase::Completed,
                (false, false) => Phase::Progressing,
            };
            (Progress::default(), phase, waiting, false)
        }
    };
    Plan {
        targets,
        progress,
        phase,
        waiting,
        ready,
        up_to_date,
        available: available_now,
        past_deadline,
    }
}

/// A deployment's rollout, as this reconcile finds it.
struct Rollout {
    progress: Progress,
    phase: Phase,
    waiting: String,
    /// The new code is released to every instance.
    released: bool,
    past_deadline: bool,
}

/// How many instances the steps before and at `step` give the new code.
fn covered(steps: &[Step], step: usize, total: usize) -> usize {
    steps
        .iter()
        .take(step + 1)
        .filter_map(|s| match s {
            Step::Instances(share) => Some(share.at_least(total)),
            Step::Pause(_) => None,
        })
        .max()
        .unwrap_or(0)
}

/// An aborted rollout: every instance goes back to the code released
/// before (none held where it is, when none was).
fn aborted(
    old: Option<String>,
    progress: &Progress,
    ordered: &[&Member<'_>],
) -> (Vec<Option<String>>, Rollout) {
    let total = ordered.len();
    let back = ordered
        .iter()
        .filter(|m| m.state.code == old && in_service(m.state.stage))
        .count();
    let waiting = match (&old, back == total) {
        (None, _) => {
            "aborted: no code was released before; the new code is held where it is".to_string()
        }
        (Some(old), true) => format!("aborted: every instance is back on {old}"),
        (Some(old), false) => format!("aborted: {back} of {total} instances back on {old}"),
    };
    let rollout = Rollout {
        progress: progress.clone(),
        phase: Phase::Aborted,
        waiting,
        released: false,
        past_deadline: false,
    };
    (vec![old; total], rollout)
}

/// The code each instance (in the rollout's order) gets at the rollout's
/// step, the steps done passed, and where the rollout is.
fn codes(
    spec: &DeploymentSpec,
    progress: &Progress,
    ordered: &[&Member<'_>],
    now: Timestamp,
) -> (Vec<Option<String>>, Rollout) {
    let total = ordered.len();
    let steps: Vec<Step> = match spec.steps.is_empty() {
        true => vec![Step::Instances(Share::Percent(100))],
        false => spec.steps.clone(),
    };
    // The code released before; none on a deployment's first rollout,
    // whose instances beyond its step get no code (and take no traffic)
    // until the rollout reaches them.
    let old = spec.previous.clone();
    let has_new = |m: &Member<'_>| m.state.code.as_deref() == Some(spec.code.as_str());
    let done_with_new = |m: &Member<'_>| has_new(m) && in_service(m.state.stage);

    if progress.aborted {
        return aborted(old, progress, ordered);
    }

    let mut progress = progress.clone();
    // Advance through the steps that are done.
    let mut waiting = String::new();
    loop {
        if progress.promoted {
            progress.step = steps.len();
        }
        if progress.step >= steps.len() {
            break;
        }
        match &steps[progress.step] {
            Step::Instances(_) if total == 0 => {
                // A step of instances is not done by a set that has none
                // yet: the gate after it would be passed unseen.
                waiting = format!("step {}: the set has no instances yet", progress.step + 1);
                break;
            }
            Step::Instances(_) => {
                let want = covered(&steps, progress.step, total);
                let done = ordered
                    .iter()
                    .take(want)
                    .filter(|m| done_with_new(m))
                    .count();
                if done < want {
                    waiting = format!(
                        "step {}: {done} of {want} instances ready with {}",
                        progress.step + 1,
                        spec.code
                    );
                    break;
                }
            }
            Step::Pause(None) => {
                if !progress.approved {
                    waiting = format!(
                        "step {}: waiting for a person to approve",
                        progress.step + 1
                    );
                    break;
                }
            }
            Step::Pause(Some(duration)) => {
                let until = progress.since.saturating_add(duration.as_millis() as i64);
                if now < until && !progress.approved {
                    waiting = format!(
                        "step {}: paused until {}",
                        progress.step + 1,
                        crate::time::rfc3339(until)
                    );
                    break;
                }
            }
        }
        progress.step += 1;
        progress.since = now;
        progress.approved = false;
    }
    let last = progress.step >= steps.len();
    let want = match last {
        true => total,
        false => covered(&steps, progress.step, total),
    };
    let codes: Vec<Option<String>> = ordered
        .iter()
        .enumerate()
        .map(|(i, _)| match i < want {
            true => Some(spec.code.clone()),
            false => old.clone(),
        })
        .collect();
    let failed: Vec<String> = ordered
        .iter()
        .zip(&codes)
        .filter(|(m, code)| {
            m.state.stage == Some(Stage::Failed) && code.as_deref() == Some(spec.code.as_str())
        })
        .map(|(m, _)| with_step(m.state))
        .collect();
    let all_done = ordered.iter().all(|m| done_with_new(m));
    let (phase, waiting) = if !failed.is_empty() {
        (
            Phase::Degraded,
            format!(
                "stopped: {} failed (retry, abort, or set its stage)",
                failed.join(", ")
            ),
        )
    } else if spec.paused {
        (Phase::Paused, "paused".to_string())
    } else if last && all_done {
        (Phase::Completed, String::new())
    } else if last {
        let done = ordered.iter().filter(|m| done_with_new(m)).count();
        (
            Phase::Progressing,
            format!(
                "released: {done} of {total} instances ready with {}",
                spec.code
            ),
        )
    } else {
        (Phase::Progressing, waiting)
    };
    let waiting_on_person = matches!(steps.get(progress.step), Some(Step::Pause(None)));
    let past_deadline = phase == Phase::Progressing
        && !waiting_on_person
        && now.saturating_sub(progress.since) > spec.progress_deadline.as_millis() as i64;
    let rollout = Rollout {
        progress,
        phase,
        waiting,
        released: last,
        past_deadline,
    };
    (codes, rollout)
}

#[cfg(test)]
mod tests;
