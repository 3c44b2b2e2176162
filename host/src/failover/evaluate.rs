//! One evaluation: the policy's decisions, overrides over them, the brakes
//! on the actions they propose, the state machine of each action (waiting,
//! awaiting approval, held, in flight, done, failed) and the audit records
//! of every change.

use std::collections::HashMap;

use super::act::Refused;
use super::{
    Action, ActionReport, Arc, Attempt, BTreeMap, Candidate, Counts, Decided, Failover,
    FailoverConfig, Gauges, Health, Inner, Memory, NodeReport, Outcome, Override, OverrideKind,
    Record, State, Value, brakes, json, model, rfc3339, types, wit,
};
use crate::events::Kind;

impl Failover {
    pub(super) fn record(inner: &mut Inner, mut record: Record) {
        record.seq = inner.next_seq;
        inner.next_seq += 1;
        inner.pending.push(record);
    }

    /// One evaluation: decide, apply overrides and brakes, act, record.
    pub async fn evaluate(&self, at: types::Timestamp) {
        // Until the nodes are listed, an empty cluster is no news: judging
        // it would forget the previous decisions and their clocks.
        if !self.observed.health.synced("nodes") {
            return;
        }
        let mut inner = self.inner.lock().await;
        let inner = &mut *inner;

        // Overrides that ran out.
        let expired: Vec<Override> = inner
            .memory
            .overrides
            .values()
            .filter(|o| !o.active(at))
            .cloned()
            .collect();
        for o in expired {
            inner.memory.overrides.remove(&o.node);
            Self::record(
                inner,
                Record {
                    kind: "override-expired".into(),
                    reason: format!("the {:?} override by {} ran out", o.kind, o.by).to_lowercase(),
                    by: Some(o.by.clone()),
                    ..blank(&o.node, at)
                },
            );
        }

        let input = Arc::new(self.input(&inner.memory, at));
        let nodes = &input.nodes;
        // Looked up by name, not searched: 5 000 nodes are judged every
        // second.
        let node_named: HashMap<&str, &types::Node> =
            nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let (decisions, policy) = match self.decide(Arc::clone(&input), at).await {
            Ok(answer) => answer,
            Err(error) => {
                if inner.latest.error.as_deref() != Some(error.as_str()) {
                    tracing::warn!(%error, "the failover policy could not decide; nothing is done until it can");
                    self.events.publish(
                        Kind::Failover,
                        None,
                        json!({"event": "policy-failed", "error": error}),
                    );
                }
                inner.latest.error = Some(error);
                inner.latest.at = Some(at);
                self.save(inner).await;
                return;
            }
        };
        inner.latest.error = None;
        inner.latest.policy = Some(policy);

        // Tasks under way: did they finish?
        for attempts in inner.memory.ledger.values_mut() {
            for attempt in attempts.values_mut() {
                self.follow_task(attempt, at);
            }
        }
        brakes::recent_flaps(&mut inner.memory.flaps, &self.config, at);
        let window_start = at - self.config.window_ms as types::Timestamp;
        inner.memory.started.retain(|t| *t >= window_start);

        // Nodes that are gone take what was kept about them along.
        let known = |name: &String| node_named.contains_key(name.as_str());
        inner.memory.ledger.retain(|name, _| known(name));
        inner.memory.approvals.retain(|name, _| known(name));
        inner.memory.flaps.retain(|name, _| known(name));
        let decided: Vec<Decided> = decisions.iter().map(Decided::from_wit).collect();
        let mut gauges = Gauges {
            now: at,
            nodes: nodes.len(),
            unhealthy: decided.iter().filter(|d| d.health.unhealthy()).count(),
            in_flight: inner
                .memory
                .ledger
                .values()
                .flat_map(BTreeMap::values)
                .filter(|a| a.outcome == Outcome::InFlight)
                .count(),
            started: inner.memory.started.len(),
            observing: self.observed.health.healthy("nodes"),
        };

        let mut reports = BTreeMap::new();
        for decision in &decided {
            let node = node_named.get(decision.node.as_str());
            let labels = node.map(|n| n.labels.as_slice()).unwrap_or_default();
            let overridden = inner
                .memory
                .overrides
                .get(&decision.node)
                .filter(|o| o.active(at))
                .cloned();
            let mut report = overridden_report(decision, overridden);
            let before = inner.latest.reports.get(&report.node).map(|r| r.health);
            let was_down = before
                .or_else(|| inner.memory.previous.get(&report.node).map(|d| d.health))
                .is_some_and(Health::unhealthy);
            if report.health.unhealthy() && !was_down {
                inner
                    .memory
                    .flaps
                    .entry(report.node.clone())
                    .or_default()
                    .push(at);
            }
            // Trusted again: what was done is forgotten, so that a new
            // outage is acted on afresh.
            if report.health == Health::Healthy
                && at - report.since >= self.config.trust_after_ms as types::Timestamp
            {
                inner.memory.ledger.remove(&report.node);
                inner.memory.approvals.remove(&report.node);
            }
            let paused = report
                .overridden
                .as_ref()
                .is_some_and(|o| o.kind == OverrideKind::Pause);
            let flaps = inner.memory.flaps.get(&report.node).map_or(0, Vec::len);
            for action in &mut report.actions {
                let attempt = inner
                    .memory
                    .ledger
                    .get(&report.node)
                    .and_then(|l| l.get(&action.key))
                    .cloned();
                action.approval = inner
                    .memory
                    .approvals
                    .get(&report.node)
                    .and_then(|a| a.get(&action.key))
                    .cloned();
                let facts = Facts {
                    node: &report.node,
                    labels,
                    paused,
                    flaps,
                };
                let next = self.settle(&facts, action, attempt, &mut gauges).await;
                if let Some(attempt) = next {
                    toggle(&mut inner.memory, &report.node, &action.action);
                    inner
                        .memory
                        .ledger
                        .entry(report.node.clone())
                        .or_default()
                        .insert(action.key.clone(), attempt);
                }
            }
            report.taken = inner
                .memory
                .ledger
                .get(&report.node)
                .cloned()
                .unwrap_or_default();
            reports.insert(report.node.clone(), report);
        }
        inner.memory.started.extend(std::iter::repeat_n(
            at,
            gauges.started.saturating_sub(inner.memory.started.len()),
        ));

        // Records and events for what changed.
        let mut on_nodes: HashMap<&str, (Vec<&wit::Placement>, Vec<&wit::InstancePlacement>)> =
            HashMap::new();
        for p in &input.placements {
            on_nodes.entry(p.node.as_str()).or_default().0.push(p);
        }
        for i in &input.instances {
            on_nodes.entry(i.node.as_str()).or_default().1.push(i);
        }
        let nothing = (Vec::new(), Vec::new());
        for report in reports.values() {
            let old = inner.latest.reports.get(&report.node);
            if old.is_some_and(|old| old.decides_as(report)) {
                continue;
            }
            let node = node_named.get(report.node.as_str()).copied();
            let (on_node, instances) = on_nodes.get(report.node.as_str()).unwrap_or(&nothing);
            let brakes: Vec<String> = report
                .actions
                .iter()
                .filter_map(|a| a.brake.clone())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let record = Record {
                kind: "decision".into(),
                health: Some(report.health),
                previous_health: old.map(|o| o.health),
                rule: Some(report.rule.clone()),
                reason: report.reason.clone(),
                inputs: inputs(
                    node,
                    (on_node, instances),
                    report.overridden.as_ref(),
                    &gauges,
                    &self.config,
                ),
                actions: report.actions.clone(),
                brakes,
                by: report.overridden.as_ref().map(|o| o.by.clone()),
                ..blank(&report.node, at)
            };
            Self::record(inner, record);
            self.events.publish(
                Kind::Failover,
                None,
                json!({"event": "decision", "node": report}),
            );
        }
        let mut counts = Counts {
            storm: gauges.storm(&self.config),
            ..Counts::default()
        };
        for report in reports.values() {
            *counts.health.entry(report.health.name()).or_default() += 1;
            for action in &report.actions {
                match action.state {
                    State::Held => {
                        let brake = action.brake.clone().unwrap_or_default();
                        *counts.held.entry(brake).or_default() += 1;
                    }
                    State::AwaitingApproval => counts.awaiting_approval += 1,
                    _ => {}
                }
            }
        }
        *self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = counts;
        inner.memory.previous = decided.into_iter().map(|d| (d.node.clone(), d)).collect();
        *self
            .health
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(
            reports
                .iter()
                .map(|(node, report)| (node.clone(), report.health))
                .collect(),
        );
        inner.latest.reports = reports;
        inner.latest.at = Some(at);
        inner.latest.gauges = gauges;
        self.save(inner).await;
    }

    /// Update an action under way from its task.
    pub(super) fn follow_task(&self, attempt: &mut Attempt, at: types::Timestamp) {
        if attempt.outcome != Outcome::InFlight {
            return;
        }
        let Some(id) = &attempt.task else { return };
        let phase = self.tasks.get(id).map(|t| (t.phase, t.message));
        match phase {
            Some((types::TaskPhase::Succeeded, _)) => attempt.outcome = Outcome::Done,
            Some((types::TaskPhase::Failed | types::TaskPhase::Cancelled, message)) => {
                attempt.outcome = Outcome::Failed;
                attempt.error = Some(format!(
                    "task {id} did not succeed: {}",
                    message.unwrap_or_else(|| "no message".into())
                ));
                attempt.retry_at = Some(brakes::retry_at(&self.config, at, attempt.attempts));
            }
            Some(_) => {}
            None => {
                attempt.outcome = Outcome::Failed;
                attempt.error = Some(format!("task {id} is gone"));
                attempt.retry_at = Some(brakes::retry_at(&self.config, at, attempt.attempts));
            }
        }
    }

    /// Give one action its state: carry it out when nothing holds it back.
    /// Returns the new ledger entry when something was done (or would be).
    pub(super) async fn settle(
        &self,
        facts: &Facts<'_>,
        action: &mut ActionReport,
        attempt: Option<Attempt>,
        gauges: &mut Gauges,
    ) -> Option<Attempt> {
        let node = facts.node;
        if let Some(a) = &attempt {
            action.attempts = a.attempts;
            action.task.clone_from(&a.task);
        }
        match gate(&self.config, gauges, facts, action, attempt.as_ref()) {
            Gate::Go => {}
            Gate::Stays { state, detail } => {
                action.state = state;
                action.detail = Some(detail);
                return None;
            }
            Gate::Held { brake, why } => {
                action.state = State::Held;
                action.brake = Some(brake);
                action.detail = Some(why);
                return None;
            }
            Gate::AwaitingApproval { how } => {
                action.state = State::AwaitingApproval;
                action.detail = Some(how);
                return None;
            }
        }
        let enforced = self.config.enforce
            && !matches!(action.action, Action::Notify { .. } | Action::MarkUnknown);
        let actor = self.leadership.acting();
        if enforced && actor.is_none() {
            let standing = self.leadership.standing();
            action.state = State::Standby;
            action.detail = Some(match standing.holder {
                Some(holder) => format!("carried out by the leader, {holder}"),
                None => "carried out by the leader, once one is elected".into(),
            });
            return None;
        }
        let attempts = attempt.as_ref().map_or(0, |a| a.attempts) + 1;
        let mut next = Attempt {
            outcome: Outcome::Done,
            attempts,
            at: gauges.now,
            retry_at: None,
            task: None,
            error: None,
            actor: actor.filter(|_| enforced),
        };
        let disruptive = action.action.disruptive();
        if disruptive {
            gauges.started += 1;
        }
        if !self.config.enforce
            && !matches!(action.action, Action::Notify { .. } | Action::MarkUnknown)
        {
            next.outcome = Outcome::DryRun;
            action.state = State::DryRun;
            action.detail = Some("would be done now (dry run)".into());
            return Some(next);
        }
        match self.act(node, &action.action).await {
            // Admission said not now (another task of the app is under
            // way, a policy rule): held, and asked again next time; no
            // attempt is spent.
            Err(Refused::Admission(reason)) => {
                if disruptive {
                    gauges.started -= 1;
                }
                action.state = State::Held;
                action.brake = Some("admission".into());
                action.detail = Some(reason);
                return None;
            }
            Ok(None) => {
                action.state = State::Done;
                action.detail = Some(format!("done at {}", rfc3339(gauges.now)));
            }
            Ok(Some(task)) => {
                next.outcome = Outcome::InFlight;
                next.task = Some(task.clone());
                action.state = State::InFlight;
                action.detail = Some(format!("task {task} under way"));
                action.task = Some(task);
                gauges.in_flight += 1;
            }
            Err(Refused::Failed(error)) => {
                tracing::warn!(node, action = %action.key, %error, "a failover action failed");
                next.outcome = Outcome::Failed;
                next.retry_at = Some(brakes::retry_at(&self.config, gauges.now, attempts));
                action.state = State::Failed;
                action.detail = Some(error.clone());
                next.error = Some(error);
            }
        }
        action.attempts = attempts;
        Some(next)
    }
}

/// What becomes of an action this evaluation, before anything is done
/// about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gate {
    /// It stays as it is: waiting, or done, dry-run done or under way.
    Stays { state: State, detail: String },
    /// A brake holds it back.
    Held { brake: String, why: String },
    /// A person must approve it first; `how` says how.
    AwaitingApproval { how: String },
    /// It may be carried out now: a new attempt.
    Go,
}

/// The state machine's guard: an action waits for its time, keeps the
/// outcome of its last attempt unless that failed, passes the brakes, and
/// has a person's approval where it needs one — in that order.
pub(super) fn gate(
    config: &FailoverConfig,
    gauges: &Gauges,
    facts: &Facts<'_>,
    action: &ActionReport,
    attempt: Option<&Attempt>,
) -> Gate {
    if let Action::Wait { until } = action.action {
        return Gate::Stays {
            state: State::Waiting,
            detail: format!("until {}", rfc3339(until)),
        };
    }
    if let Some(a) = attempt {
        let (state, detail) = match a.outcome {
            Outcome::Done => (State::Done, format!("done at {}", rfc3339(a.at))),
            Outcome::DryRun => (
                State::DryRun,
                format!("would have been done at {} (dry run)", rfc3339(a.at)),
            ),
            Outcome::InFlight => (
                State::InFlight,
                format!("under way since {}", rfc3339(a.at)),
            ),
            Outcome::Failed => (State::Failed, String::new()),
        };
        if state != State::Failed {
            return Gate::Stays { state, detail };
        }
    }
    let candidate = Candidate {
        node: facts.node,
        labels: facts.labels,
        disruptive: action.action.disruptive(),
        paused: facts.paused,
        flaps: facts.flaps,
        attempt,
    };
    if let Some(held) = brakes::check(config, gauges, &candidate) {
        return Gate::Held {
            brake: held.brake.into(),
            why: held.why,
        };
    }
    if action.needs_approval && action.approval.is_none() {
        return Gate::AwaitingApproval {
            how: format!(
                "approve with POST /v1/failover/nodes/{}/approve {{\"action\": \"{}\", \"by\": …}}",
                facts.node, action.key
            ),
        };
    }
    Gate::Go
}

/// What the brakes need to know of a node.
pub(super) struct Facts<'a> {
    node: &'a str,
    labels: &'a [types::KeyValue],
    paused: bool,
    flaps: usize,
}

/// A record with only its node and time.
pub(super) fn blank(node: &str, at: types::Timestamp) -> Record {
    Record {
        seq: 0,
        at,
        node: node.to_string(),
        kind: String::new(),
        health: None,
        previous_health: None,
        rule: None,
        reason: String::new(),
        inputs: Value::Null,
        actions: Vec::new(),
        brakes: Vec::new(),
        by: None,
    }
}

/// Cordoning undoes an uncordon and the other way round: once one is done,
/// the other may be done again.
pub(super) fn toggle(memory: &mut Memory, node: &str, action: &Action) {
    let opposite = match action {
        Action::Cordon => "uncordon",
        Action::Uncordon => "cordon",
        _ => return,
    };
    if let Some(ledger) = memory.ledger.get_mut(node) {
        ledger.remove(opposite);
    }
}

/// The decision as the host serves it: overrides win over the policy.
pub(super) fn overridden_report(decision: &Decided, overridden: Option<Override>) -> NodeReport {
    let mut health = decision.health;
    let mut reason = decision.reason.clone();
    let mut actions: Vec<&model::Proposed> = decision.actions.iter().collect();
    if let Some(o) = &overridden {
        match o.kind {
            OverrideKind::Healthy => {
                if health != Health::Healthy {
                    reason = format!(
                        "confirmed healthy by {} ({}); the policy said: {reason}",
                        o.by, o.reason
                    );
                }
                health = Health::Healthy;
                actions.retain(|a| matches!(a.action, Action::Uncordon | Action::Notify { .. }));
            }
            OverrideKind::Offline => {
                if health != Health::Offline {
                    reason = format!(
                        "forced offline by {} ({}); the policy said: {reason}",
                        o.by, o.reason
                    );
                }
                health = Health::Offline;
            }
            OverrideKind::Pause => {}
        }
    }
    NodeReport {
        node: decision.node.clone(),
        health,
        since: decision.since,
        reason,
        rule: decision.rule.clone(),
        overridden,
        actions: actions
            .into_iter()
            .map(|p| ActionReport {
                key: p.action.key(),
                action: p.action.clone(),
                reason: p.reason.clone(),
                needs_approval: p.needs_approval,
                state: State::Waiting,
                brake: None,
                detail: None,
                approval: None,
                task: None,
                attempts: 0,
            })
            .collect(),
        taken: BTreeMap::new(),
    }
}

/// What a decision rested on, for its audit record.
pub(super) fn inputs(
    node: Option<&types::Node>,
    (on_node, instances): (&[&wit::Placement], &[&wit::InstancePlacement]),
    overridden: Option<&Override>,
    gauges: &Gauges,
    config: &FailoverConfig,
) -> Value {
    let ready = node.map(|n| n.ready.kubernetes_name());
    json!({
        "ready": ready,
        "ready-since": node.and_then(|n| n.ready_since).map(rfc3339),
        "last-heartbeat": node.and_then(|n| n.last_heartbeat).map(rfc3339),
        "unschedulable": node.map(|n| n.unschedulable),
        "taints": node.map(|n| n.taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect::<Vec<_>>()),
        "pods": on_node.len(),
        "stateful-pods": on_node.iter().filter(|p| p.stateful).count(),
        "instances": instances.len(),
        "exclusive-instances": instances.iter().filter(|i| i.exclusive_disk).count(),
        "override": overridden,
        "unhealthy-nodes": format!("{} of {} (cap {})", gauges.unhealthy, gauges.nodes, config.max_unhealthy),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::model::Approval;
    const NOW: types::Timestamp = 1_780_000_000_000;

    impl ActionReport {
        /// An action as the policy proposes it, with no state yet.
        fn fixture(action: Action) -> Self {
            Self {
                key: "cordon".into(),
                action,
                reason: "the node is gone".into(),
                needs_approval: false,
                state: State::Waiting,
                brake: None,
                detail: None,
                approval: None,
                task: None,
                attempts: 0,
            }
        }

        fn needing_approval(mut self) -> Self {
            self.needs_approval = true;
            self
        }

        fn approved(mut self) -> Self {
            self.approval = Some(Approval {
                by: "dana".into(),
                reason: None,
                at: NOW,
            });
            self
        }
    }

    impl Attempt {
        /// The last attempt at an action, ended as `outcome`.
        fn fixture(outcome: Outcome) -> Self {
            Self {
                outcome,
                attempts: 1,
                at: NOW - 60_000,
                retry_at: None,
                task: None,
                error: None,
                actor: None,
            }
        }

        fn failed(mut self, attempts: u32, retry_at: types::Timestamp) -> Self {
            self.outcome = Outcome::Failed;
            self.attempts = attempts;
            self.retry_at = Some(retry_at);
            self.error = Some("the API server said no".into());
            self
        }
    }

    /// Three nodes, one unhealthy, the watch working.
    fn calm() -> Gauges {
        Gauges {
            now: NOW,
            nodes: 3,
            unhealthy: 1,
            in_flight: 0,
            started: 0,
            observing: true,
        }
    }

    fn facts() -> Facts<'static> {
        Facts {
            node: "n1",
            labels: &[],
            paused: false,
            flaps: 0,
        }
    }

    fn gate_of(action: &ActionReport, attempt: Option<&Attempt>, gauges: &Gauges) -> Gate {
        gate(
            &FailoverConfig::default(),
            gauges,
            &facts(),
            action,
            attempt,
        )
    }

    #[test]
    fn a_wait_waits_for_its_time() {
        let wait = ActionReport::fixture(Action::Wait { until: NOW + 5_000 });
        assert_eq!(
            gate_of(&wait, None, &calm()),
            Gate::Stays {
                state: State::Waiting,
                detail: format!("until {}", rfc3339(NOW + 5_000)),
            }
        );
    }

    #[test]
    fn an_attempt_that_did_not_fail_keeps_its_outcome_and_a_failed_one_goes_on() {
        let cordon = ActionReport::fixture(Action::Cordon);
        for (outcome, state) in [
            (Outcome::Done, State::Done),
            (Outcome::DryRun, State::DryRun),
            (Outcome::InFlight, State::InFlight),
        ] {
            let attempt = Attempt::fixture(outcome);
            match gate_of(&cordon, Some(&attempt), &calm()) {
                Gate::Stays { state: got, .. } => assert_eq!(got, state, "{outcome:?}"),
                other => panic!("{outcome:?}: {other:?}"),
            }
        }
        // Failed, its backoff over: tried again.
        let failed = Attempt::fixture(Outcome::Failed).failed(1, NOW - 1);
        assert_eq!(gate_of(&cordon, Some(&failed), &calm()), Gate::Go);
        // Failed, within its backoff: held by it.
        let backing_off = Attempt::fixture(Outcome::Failed).failed(1, NOW + 10_000);
        match gate_of(&cordon, Some(&backing_off), &calm()) {
            Gate::Held { brake, why } => {
                assert_eq!(brake, "backoff");
                assert!(why.contains("the API server said no"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // Failed as often as allowed: given up on.
        let spent = Attempt::fixture(Outcome::Failed).failed(3, NOW - 1);
        assert!(matches!(
            gate_of(&cordon, Some(&spent), &calm()),
            Gate::Held { brake, .. } if brake == "retry-limit"
        ));
    }

    #[test]
    fn the_brakes_hold_before_a_person_is_asked() {
        let cordon = ActionReport::fixture(Action::Cordon).needing_approval();
        let storm = Gauges {
            unhealthy: 2,
            ..calm()
        };
        assert!(matches!(
            gate_of(&cordon, None, &storm),
            Gate::Held { brake, .. } if brake == "storm"
        ));
        let blind = Gauges {
            observing: false,
            ..calm()
        };
        assert!(matches!(
            gate_of(&cordon, None, &blind),
            Gate::Held { brake, .. } if brake == "stale-observations"
        ));
        // What does not disrupt passes a storm.
        let notify = ActionReport::fixture(Action::Notify {
            text: "n1 is gone".into(),
        });
        assert_eq!(gate_of(&notify, None, &storm), Gate::Go);
    }

    #[test]
    fn approval_is_asked_for_then_taken() {
        let cordon = ActionReport::fixture(Action::Cordon).needing_approval();
        match gate_of(&cordon, None, &calm()) {
            Gate::AwaitingApproval { how } => {
                assert!(
                    how.contains("/v1/failover/nodes/n1/approve") && how.contains("cordon"),
                    "{how}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(gate_of(&cordon.approved(), None, &calm()), Gate::Go);
    }

    #[test]
    fn a_paused_node_holds_everything() {
        let notify = ActionReport::fixture(Action::Notify { text: "x".into() });
        let paused = Facts {
            paused: true,
            ..facts()
        };
        let held = gate(&FailoverConfig::default(), &calm(), &paused, &notify, None);
        assert!(matches!(held, Gate::Held { brake, .. } if brake == "paused"));
    }
}
