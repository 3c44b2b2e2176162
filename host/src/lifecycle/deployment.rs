//! A `VMDeployment` read and written: its code, its revision, its steps
//! (counts, shares, pauses) and the rollout's progress kept in its status;
//! people's approvals, promotions and aborts on it; the status it gets.

use std::time::Duration;

use serde_json::Value;

use super::crd::{
    self, ActionName, Condition, ConditionType, DeploymentInstance, Released, RolloutPhase,
    SetInstance, VmDeploymentStatus,
};
use super::requests::{self, Request};
use super::resources::{identity, typed, typed_field};
use super::rollout::{DeploymentSpec, Phase, Plan, Progress, Share, Step};
use crate::time::{Timestamp, parse_time, rfc3339};

/// A deployment's revision: a digest of its code's version and artifact
/// and its steps, 12 hex digits.
fn revision(code: &str, artifact: &str, steps: &[Step]) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{code}\n{artifact}\n{steps:?}").as_bytes());
    hex::encode(&digest[..6])
}

/// The longest pause a gray release takes: a year.
const LONGEST_PAUSE: Duration = Duration::from_secs(366 * 24 * 3600);

/// `30s`, `10m`, `2h`, at most a year.
pub fn duration(text: &str) -> Result<Duration, String> {
    let not = || {
        format!(
            "`{}` is not a duration such as 30s, 10m or 2h",
            crate::text::printable(text)
        )
    };
    let (number, unit) = text.split_at(text.len().saturating_sub(1));
    let n: u64 = number.parse().map_err(|_| not())?;
    let seconds = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        _ => return Err(not()),
    };
    match seconds.map(Duration::from_secs) {
        Some(pause) if pause <= LONGEST_PAUSE => Ok(pause),
        _ => Err(format!(
            "`{text}` is longer than a year: a pause waits at most 366 days"
        )),
    }
}

/// A `VMDeployment`, read, with its rollout's progress from its status.
#[derive(Debug, Clone)]
pub struct VmDeployment {
    pub namespace: String,
    pub name: String,
    pub generation: i64,
    /// The `VMReplicaSet` it deploys to.
    pub set: String,
    pub artifact: String,
    pub spec: DeploymentSpec,
    /// What a rollout delivers, in one word: a digest of the code (version
    /// and artifact) and the steps. A new revision is a new rollout, which
    /// no approval of an earlier one carries into.
    pub revision: String,
    pub progress: Progress,
    /// The version its status is about.
    pub status_code: Option<String>,
    /// The revision its status is about (a new one starts a new rollout).
    pub status_revision: Option<String>,
    pub status_phase: Option<RolloutPhase>,
    /// What people asked of it (approve, promote, abort).
    pub requests: DeploymentRequests,
    /// The people's actions its status keeps, newest last.
    pub actions: Vec<crd::Action>,
    /// The revisions released in full, oldest first, the last
    /// [`KEPT_RELEASES`] (`status.history`).
    pub history: Vec<Released>,
}

/// What people asked of a deployment, from its annotations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentRequests {
    pub approve: Option<Request>,
    pub promote: Option<Request>,
    pub abort: Option<Request>,
}

impl DeploymentRequests {
    fn read(object: &Value) -> Result<Self, String> {
        let annotations = super::instance::annotations_of(object);
        Ok(Self {
            approve: Request::read(&annotations, requests::APPROVE)?,
            promote: Request::read(&annotations, requests::PROMOTE)?,
            abort: Request::read(&annotations, requests::ABORT)?,
        })
    }

    /// Whether `request` is about the rollout of `code` at `revision` that
    /// started at `started`: made for that code after the rollout started,
    /// and, when it names a revision (the HTTP API's do), for this one.
    fn is_about(request: &Request, code: &str, revision: &str, started: Timestamp) -> bool {
        request.code.as_deref() == Some(code)
            && request.at >= started
            && request.revision.as_deref().is_none_or(|r| r == revision)
    }

    /// The requests about the rollout of `code` at `revision` that started
    /// at `started`, each with its action's name.
    fn about<'a>(
        &'a self,
        code: &'a str,
        revision: &'a str,
        started: Timestamp,
    ) -> impl Iterator<Item = (&'static str, &'a Request)> + 'a {
        [
            ("approve", &self.approve),
            ("promote", &self.promote),
            ("abort", &self.abort),
        ]
        .into_iter()
        .filter_map(move |(action, request)| {
            request
                .as_ref()
                .filter(|r| Self::is_about(r, code, revision, started))
                .map(|r| (action, r))
        })
    }
}

/// How many people's actions a deployment's status keeps.
const KEPT_ACTIONS: usize = 20;
/// How many released revisions a deployment's status keeps (its history,
/// which `rollback` goes back to).
pub const KEPT_RELEASES: usize = 10;

impl VmDeployment {
    /// Read a `VMDeployment` object.
    pub fn read(object: &Value) -> Result<Self, String> {
        let (namespace, name, _, generation) = identity(object);
        let spec: crd::VmDeploymentSpec = typed(object)?;
        let set = Some(spec.replica_set)
            .filter(|s| !s.is_empty())
            .ok_or("spec.replicaSet names no VMReplicaSet")?;
        let code = Some(spec.code.version)
            .filter(|s| !s.is_empty())
            .ok_or("spec.code.version is missing")?;
        let artifact = spec.code.artifact;
        let mut steps = Vec::new();
        for (i, step) in spec.steps.iter().enumerate() {
            let at = |e: String| format!("spec.steps[{i}]: {e}");
            steps.push(match (&step.instances, &step.pause) {
                (Some(share), None) => Step::Instances(Share::parse(share).map_err(at)?),
                (None, Some(pause)) => Step::Pause(
                    pause
                        .duration
                        .as_deref()
                        .map(duration)
                        .transpose()
                        .map_err(at)?,
                ),
                _ => return Err(at("a step is either instances or a pause".into())),
            });
        }
        let deadline = spec.progress_deadline_seconds;
        let revision = revision(&code, &artifact, &steps);
        // Its status, the rollout's memory, read into its type: one that
        // does not read holds the set and says which field.
        let status: VmDeploymentStatus = typed_field(object, "status")?;
        let time = |t: &Option<String>| t.as_deref().and_then(|t| parse_time(t).ok());
        let step = status.step_index.unwrap_or(0);
        let progress = Progress {
            step: step as usize,
            since: time(&status.step_started_at).unwrap_or(0),
            started: time(&status.started_at).unwrap_or(0),
            // An approval is of one step of one revision: kept for a later
            // revision (or, from before revisions were kept, for none), it
            // approves nothing.
            approved: status.approved_step == Some(i64::from(step))
                && status.approved_revision.as_deref() == Some(revision.as_str()),
            promoted: status.promoted.unwrap_or(false),
            aborted: status.aborted.unwrap_or(false),
        };
        Ok(Self {
            namespace,
            name,
            generation,
            set,
            artifact,
            spec: DeploymentSpec {
                // What an abort goes back to: the newest revision released
                // in full with other code (the history), else the status's
                // stable code.
                previous: status
                    .history
                    .iter()
                    .rev()
                    .filter_map(|r| r.code.as_deref())
                    .find(|c| *c != code)
                    .map(String::from)
                    .or_else(|| status.stable_code.clone()),
                code,
                steps,
                paused: spec.paused,
                progress_deadline: Duration::from_secs(deadline),
            },
            revision,
            progress,
            status_code: status.code,
            status_revision: status.revision,
            status_phase: status.phase,
            requests: DeploymentRequests::read(object)?,
            actions: status.actions,
            history: status.history,
        })
    }

    /// The rollout to carry on at `now`: the one in its status, or a new
    /// one when the code changed — its step back to the first, and the
    /// code released before it the last one that completed.
    pub fn rollout(&self, now: Timestamp) -> (DeploymentSpec, Progress) {
        let mut spec = self.spec.clone();
        // The rollout in the status goes on while it is of this revision
        // (a status written before revisions were kept: of this code).
        let same = match &self.status_revision {
            Some(revision) => *revision == self.revision,
            None => self.status_code.as_deref() == Some(spec.code.as_str()),
        };
        match &self.status_code {
            Some(code) if same => {
                let mut progress = self.progress.clone();
                if progress.since == 0 {
                    progress.since = now;
                }
                if progress.started == 0 {
                    progress.started = progress.since;
                }
                // What people asked of this rollout.
                for (action, request) in self.requests.about(code, &self.revision, progress.started)
                {
                    match action {
                        "approve" => progress.approved |= request.step == Some(progress.step),
                        "promote" => progress.promoted = true,
                        _ => progress.aborted = true,
                    }
                }
                (spec, progress)
            }
            previous => {
                // The code of a completed rollout is what was released; an
                // unfinished one leaves the one released before it.
                if self.status_phase == Some(RolloutPhase::Completed) {
                    spec.previous = previous.clone().or(spec.previous);
                }
                let progress = Progress {
                    since: now,
                    started: now,
                    ..Progress::default()
                };
                (spec, progress)
            }
        }
    }

    /// The status of the rollout planned, at `now`; `rows` are the set's
    /// instances as its status shows them.
    pub fn status(
        &self,
        spec: &DeploymentSpec,
        plan: &Plan,
        updated: usize,
        rows: &[SetInstance],
        now: Timestamp,
    ) -> VmDeploymentStatus {
        let steps = spec.steps.len().max(1);
        let degraded = plan.phase == Phase::Degraded;
        let waiting_on_person = plan.waiting.contains("approve");
        let condition = |kind, on, reason, message: &str| {
            Condition::new(kind, on, reason, message, self.generation, now)
        };
        let conditions = vec![
            condition(
                ConditionType::Ready,
                plan.phase == Phase::Completed,
                phase_reason(plan.phase),
                &plan.waiting,
            ),
            condition(
                ConditionType::Progressing,
                plan.phase == Phase::Progressing && !plan.past_deadline,
                match plan.past_deadline {
                    true => "ProgressDeadlineExceeded",
                    false => phase_reason(plan.phase),
                },
                &match plan.past_deadline {
                    true => format!(
                        "no progress within {}s: {}",
                        spec.progress_deadline.as_secs(),
                        plan.waiting
                    ),
                    false => plan.waiting.clone(),
                },
            ),
            condition(
                ConditionType::Paused,
                plan.phase == Phase::Paused || waiting_on_person,
                match waiting_on_person {
                    true => "WaitingForApproval",
                    false => phase_reason(plan.phase),
                },
                &plan.waiting,
            ),
            condition(
                ConditionType::Degraded,
                degraded,
                phase_reason(plan.phase),
                &plan.waiting,
            ),
        ];
        let count = |n: usize| Some(u32::try_from(n).unwrap_or(u32::MAX));
        let approval = self.requests.approve.as_ref().filter(|r| {
            DeploymentRequests::is_about(r, &spec.code, &self.revision, plan.progress.started)
        });
        VmDeploymentStatus {
            observed_generation: Some(self.generation),
            phase: Some(match plan.phase {
                Phase::Progressing => RolloutPhase::Progressing,
                Phase::Paused => RolloutPhase::Paused,
                Phase::Completed => RolloutPhase::Completed,
                Phase::Degraded => RolloutPhase::Degraded,
                Phase::Aborted => RolloutPhase::Aborted,
            }),
            step: Some(format!("{}/{steps}", (plan.progress.step + 1).min(steps))),
            waiting: Some(plan.waiting.clone()),
            updated_instances: count(updated),
            ready_instances: count(plan.ready),
            code: Some(spec.code.clone()),
            revision: Some(self.revision.clone()),
            // No code released before: no field.
            stable_code: match plan.phase {
                Phase::Completed => Some(spec.code.clone()),
                _ => spec.previous.clone(),
            },
            step_index: u32::try_from(plan.progress.step).ok(),
            step_started_at: Some(rfc3339(plan.progress.since)),
            started_at: Some(rfc3339(plan.progress.started)),
            promoted: Some(plan.progress.promoted),
            aborted: Some(plan.progress.aborted),
            approved_step: approval
                .and_then(|a| a.step)
                .and_then(|s| i64::try_from(s).ok()),
            approved_revision: approval.map(|_| self.revision.clone()),
            approved_by: approval.map(|a| a.by.clone()),
            approved_reason: approval.map(|a| a.why.clone()),
            actions: self.actions_kept(&spec.code, plan.progress.started),
            history: self.history_kept(spec, plan.phase, now),
            instances: rows
                .iter()
                .map(|r| DeploymentInstance {
                    name: r.name.clone(),
                    stage: r.stage.clone(),
                    code: r.code.clone(),
                    task: r.task.clone(),
                })
                .collect(),
            conditions,
        }
    }
}

impl VmDeployment {
    /// The released revisions the status keeps: those it kept, and this
    /// one once its rollout completed (a revision released again moves to
    /// the end).
    fn history_kept(&self, spec: &DeploymentSpec, phase: Phase, now: Timestamp) -> Vec<Released> {
        let mut history = self.history.clone();
        let last = history.last().and_then(|r| r.revision.as_deref());
        if phase == Phase::Completed && last != Some(self.revision.as_str()) {
            history.retain(|r| r.revision.as_deref() != Some(self.revision.as_str()));
            history.push(Released {
                revision: Some(self.revision.clone()),
                code: Some(spec.code.clone()),
                artifact: Some(self.artifact.clone()),
                released_at: Some(rfc3339(now)),
            });
        }
        let excess = history.len().saturating_sub(KEPT_RELEASES);
        history.drain(..excess);
        history
    }

    /// The actions the status keeps: those it kept, and each request about
    /// this rollout not among them yet (the audit of who approved,
    /// promoted or aborted, when and why).
    fn actions_kept(&self, code: &str, started: Timestamp) -> Vec<crd::Action> {
        let mut actions = self.actions.clone();
        for (action, request) in self.requests.about(code, &self.revision, started) {
            let at = rfc3339(request.at);
            let name = match action {
                "approve" => ActionName::Approve,
                "promote" => ActionName::Promote,
                _ => ActionName::Abort,
            };
            let kept = actions
                .iter()
                .any(|a| a.action == Some(name) && a.at.as_deref() == Some(at.as_str()));
            if !kept {
                actions.push(crd::Action {
                    action: Some(name),
                    code: Some(code.to_string()),
                    step: request.step.and_then(|s| i64::try_from(s).ok()),
                    by: Some(request.by.clone()),
                    why: Some(request.why.clone()),
                    at: Some(at),
                });
            }
        }
        let excess = actions.len().saturating_sub(KEPT_ACTIONS);
        actions.drain(..excess);
        actions
    }
}

fn phase_reason(phase: Phase) -> &'static str {
    match phase {
        Phase::Progressing => "Progressing",
        Phase::Paused => "Paused",
        Phase::Completed => "Completed",
        Phase::Degraded => "TaskFailed",
        Phase::Aborted => "Aborted",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::resources::tests::{set_object, template};
    use crate::lifecycle::resources::{API_VERSION, VmReplicaSet, keep_transitions};
    use serde_json::json;
    use std::collections::BTreeMap;

    fn deployment(status: Value) -> Value {
        json!({
            "apiVersion": API_VERSION, "kind": "VMDeployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": 2},
            "spec": {
                "replicaSet": "web",
                "code": {"artifact": "registry.example/web", "version": "1.1"},
                "steps": [{"instances": 1}, {"pause": {}}, {"instances": "50%"}, {"pause": {"duration": "10m"}}],
                "progressDeadlineSeconds": 300,
            },
            "status": status,
        })
    }

    /// An abort goes back to the newest code released in full, as the
    /// history keeps it, whatever the stable code of the status says.
    #[test]
    fn the_code_an_abort_goes_back_to_is_the_newest_released_other_code() {
        let previous = |status: Value| {
            VmDeployment::read(&deployment(status))
                .unwrap()
                .spec
                .previous
        };
        let history = json!([
            {"revision": "a", "code": "0.9"},
            {"revision": "b", "code": "1.0"},
            {"revision": "c", "code": "1.1"},
        ]);
        assert_eq!(
            previous(json!({"code": "1.1", "stableCode": "0.1", "history": history})),
            Some("1.0".into())
        );
        assert_eq!(
            previous(json!({"code": "1.1", "stableCode": "1.0"})),
            Some("1.0".into())
        );
        assert_eq!(
            previous(json!({"history": [{"revision": "c", "code": "1.1"}]})),
            None
        );
    }

    #[test]
    fn a_deployment_reads_its_steps_and_its_progress() {
        let at_gate = |approved_revision: &str| {
            VmDeployment::read(&deployment(json!({
                "code": "1.1", "stableCode": "1.0", "stepIndex": 1,
                "stepStartedAt": "2026-01-01T00:00:00Z", "approvedStep": 1,
                "approvedRevision": approved_revision,
            })))
            .unwrap()
        };
        let revision = at_gate("").revision;
        assert_eq!(revision.len(), 12, "{revision}");
        // An approval of the step of another revision (or of none named)
        // approves nothing.
        assert!(!at_gate("").progress.approved);
        assert!(!at_gate("0123456789ab").progress.approved);
        let read = at_gate(&revision);
        assert_eq!(read.set, "web");
        assert_eq!(
            read.spec.steps,
            [
                Step::Instances(Share::Count(1)),
                Step::Pause(None),
                Step::Instances(Share::Percent(50)),
                Step::Pause(Some(Duration::from_secs(600))),
            ]
        );
        assert_eq!(read.spec.progress_deadline, Duration::from_secs(300));
        assert_eq!(read.spec.previous.as_deref(), Some("1.0"));
        assert_eq!((read.progress.step, read.progress.approved), (1, true));
        // The same code carries its rollout on.
        let (spec, progress) = read.rollout(5);
        assert_eq!((spec.previous.as_deref(), progress.step), (Some("1.0"), 1));

        // A new version starts over; the last completed one is the stable one.
        let completed = VmDeployment::read(&deployment(json!({
            "code": "1.0", "phase": "Completed", "stableCode": "0.9", "stepIndex": 4,
        })))
        .unwrap();
        let (spec, progress) = completed.rollout(7);
        assert_eq!(
            (spec.previous.as_deref(), progress.step, progress.since),
            (Some("1.0"), 0, 7)
        );
        // Replacing an unfinished rollout keeps the one released before it.
        let unfinished = VmDeployment::read(&deployment(json!({
            "code": "1.0", "phase": "Progressing", "stableCode": "0.9", "stepIndex": 2,
        })))
        .unwrap();
        let (spec, progress) = unfinished.rollout(7);
        assert_eq!((spec.previous.as_deref(), progress.step), (Some("0.9"), 0));
    }

    #[test]
    fn a_new_revision_is_a_new_rollout_whose_status_keeps_no_earlier_approval() {
        let read = |steps: Value, status: Value| {
            let mut object = deployment(status);
            object["spec"]["steps"] = steps;
            VmDeployment::read(&object).unwrap()
        };
        let gated = json!([{"instances": 1}, {"pause": {}}]);
        let first = read(gated.clone(), Value::Null);
        // Approved at its gate.
        let approved = read(
            gated.clone(),
            json!({"code": "1.1", "revision": first.revision, "stepIndex": 1,
                "startedAt": "2026-01-01T00:00:00Z", "stepStartedAt": "2026-01-01T00:00:00Z",
                "approvedStep": 1, "approvedRevision": first.revision}),
        );
        assert!(approved.rollout(1).1.approved);
        // The same code with other steps: another revision, a new rollout
        // from its first step, and no approval.
        let other = read(
            json!([{"instances": 2}, {"pause": {}}]),
            json!({"code": "1.1", "revision": first.revision, "stepIndex": 1,
                "approvedStep": 1, "approvedRevision": first.revision}),
        );
        assert_ne!(other.revision, first.revision);
        let (_, progress) = other.rollout(1);
        assert_eq!((progress.step, progress.approved), (0, false));
    }

    #[test]
    fn people_approve_promote_and_abort_a_rollout_through_its_annotations() {
        let at_gate = json!({"code": "1.1", "stableCode": "1.0", "stepIndex": 1,
            "stepStartedAt": "2026-01-01T00:10:00Z", "startedAt": "2026-01-01T00:00:00Z"});
        let with = |key: &str, request: &Request| {
            let mut object = deployment(at_gate.clone());
            object["metadata"]["annotations"] = json!({ key: request.write() });
            VmDeployment::read(&object).unwrap()
        };
        let started = parse_time("2026-01-01T00:00:00Z").unwrap();
        let mut approval = Request::new("alice", "canary is fine", started + 700_000);
        approval.code = Some("1.1".into());
        approval.step = Some(1);
        let read = with(requests::APPROVE, &approval);
        let (_, progress) = read.rollout(started + 800_000);
        assert!(
            progress.approved,
            "the gate the rollout waits at is approved"
        );
        let plan = Plan {
            targets: BTreeMap::new(),
            progress: progress.clone(),
            phase: Phase::Progressing,
            waiting: String::new(),
            ready: 3,
            up_to_date: 1,
            available: 1,
            past_deadline: false,
        };
        let status =
            serde_json::to_value(read.status(&read.spec, &plan, 1, &[], started + 800_000))
                .unwrap();
        assert_eq!(
            (
                &status["approvedStep"],
                &status["approvedBy"],
                &status["approvedReason"]
            ),
            (&json!(1), &json!("alice"), &json!("canary is fine"))
        );
        assert_eq!(status["actions"][0]["action"], "approve");
        assert_eq!(status["actions"][0]["by"], "alice");
        // Written again, the action is kept once.
        let mut again = deployment(status.clone());
        again["metadata"]["annotations"] = json!({ requests::APPROVE: approval.write() });
        let again = VmDeployment::read(&again).unwrap();
        let status = again.status(&again.spec, &plan, 1, &[], started + 900_000);
        assert_eq!(status.actions.len(), 1);

        // An approval of another step, another code, or made before this
        // rollout started, approves nothing.
        let changes: [&dyn Fn(&mut Request); 3] = [
            &|r| r.step = Some(3),
            &|r| r.code = Some("1.0".into()),
            &|r| r.at = started - 1,
        ];
        for change in changes {
            let mut stale = approval.clone();
            change(&mut stale);
            let (_, progress) = with(requests::APPROVE, &stale).rollout(started + 800_000);
            assert!(!progress.approved, "{stale:?}");
        }
        let (_, progress) = with(requests::PROMOTE, &approval).rollout(started + 800_000);
        assert!(progress.promoted && !progress.aborted);
        let (_, progress) = with(requests::ABORT, &approval).rollout(started + 800_000);
        assert!(progress.aborted && !progress.promoted);
        // A request that does not read is named.
        let mut bad = deployment(at_gate.clone());
        bad["metadata"]["annotations"] = json!({ requests::ABORT: "yes" });
        assert!(
            VmDeployment::read(&bad)
                .unwrap_err()
                .starts_with("verdict.dev/abort does not read")
        );
    }

    #[test]
    fn a_deployment_that_cannot_be_carried_out_says_why() {
        let refused = |change: &dyn Fn(&mut Value)| {
            let mut object = deployment(Value::Null);
            change(&mut object);
            VmDeployment::read(&object).unwrap_err()
        };
        assert_eq!(
            refused(&|o| o["spec"]["replicaSet"] = json!("")),
            "spec.replicaSet names no VMReplicaSet"
        );
        assert_eq!(
            refused(&|o| o["spec"]["steps"] = json!([{"instances": 1, "pause": {}}])),
            "spec.steps[0]: a step is either instances or a pause"
        );
        assert!(
            refused(&|o| o["spec"]["steps"] = json!([{"pause": {"duration": "soon"}}]))
                .starts_with("spec.steps[0]: `soon` is not a duration")
        );
        assert!(
            refused(&|o| o["spec"]["code"] = json!({"artifact": "x"}))
                .starts_with("spec.code: missing field `version`")
        );
    }

    #[test]
    fn statuses_say_where_a_rollout_is_and_keep_their_transition_times() {
        let read = VmDeployment::read(&deployment(Value::Null)).unwrap();
        let (spec, progress) = read.rollout(1_000);
        let plan = Plan {
            targets: BTreeMap::new(),
            progress: Progress {
                step: 1,
                ..progress
            },
            phase: Phase::Progressing,
            waiting: "step 2: waiting for a person to approve".into(),
            ready: 3,
            up_to_date: 1,
            available: 1,
            past_deadline: false,
        };
        let status = serde_json::to_value(read.status(&spec, &plan, 1, &[], 2_000)).unwrap();
        assert_eq!(status["step"], "2/4");
        assert_eq!(status["phase"], "Progressing");
        assert_eq!(status["code"], "1.1");
        assert_eq!(status["stepIndex"], 1);
        let paused = &status["conditions"][2];
        assert_eq!(paused["observedGeneration"], status["observedGeneration"]);
        assert_eq!(
            (
                paused["type"].as_str(),
                paused["status"].as_str(),
                paused["reason"].as_str()
            ),
            (Some("Paused"), Some("True"), Some("WaitingForApproval"))
        );

        let mut later = serde_json::to_value(read.status(&spec, &plan, 1, &[], 9_000)).unwrap();
        keep_transitions(&status, &mut later);
        assert_eq!(
            later["conditions"][2]["lastTransitionTime"],
            status["conditions"][2]["lastTransitionTime"]
        );

        let set = VmReplicaSet::read(&set_object(json!({"replicas": 2, "template": template()})))
            .unwrap();
        let row = |name: &str, stage: &str, task: Option<&str>| SetInstance {
            name: Some(name.into()),
            stage: Some(stage.into()),
            task: task.map(String::from),
            ..SetInstance::default()
        };
        let rows = vec![
            row("web-0", "serving", None),
            row("web-1", "failed", Some("install-environment")),
        ];
        let status =
            serde_json::to_value(set.status(&plan, rows.clone(), (None, &[]), 2_000)).unwrap();
        assert_eq!(status["ready"], "3/2");
        assert_eq!(status["availableReplicas"], 1);
        // Degraded names the instance and the step it failed at.
        assert_eq!(
            status["waiting"],
            "failed: web-1 at install-environment (a person decides)"
        );
        let condition = |status: &Value, kind: &str| {
            status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == kind)
                .cloned()
                .unwrap()
        };
        assert_eq!(condition(&status, "Degraded")["status"], "True");
        // Every condition says which generation it was set from.
        assert!(
            status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["observedGeneration"] == status["observedGeneration"]),
            "{status:#}"
        );
        // One of two available, with one allowed out: available.
        let available = condition(&status, "Available");
        assert_eq!(
            (available["status"].as_str(), available["message"].as_str()),
            (
                Some("True"),
                Some("1 of 2 instances available; at least 1 wanted")
            )
        );
        let none = Plan {
            available: 0,
            ..plan.clone()
        };
        let status = set.status(&none, rows.clone(), (None, &[]), 2_000);
        let value = serde_json::to_value(&status).unwrap();
        assert_eq!(condition(&value, "Available")["reason"], "NotAvailable");

        // Deleted: which instances hold it, and where.
        let deleting = serde_json::to_value(set.deleting_status(status, rows, 3_000)).unwrap();
        assert_eq!(
            condition(&deleting, "Deleting")["message"],
            "cleaning up 2 instance(s): web-0, web-1 at install-environment"
        );
        assert_eq!(condition(&deleting, "Degraded")["status"], "True");
    }
}
