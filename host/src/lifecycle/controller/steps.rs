//! One instance moved on by one step: a person's retry, skip or approval,
//! the step's hook asked, a list superseded, a forced stage, or the
//! lifecycle policy asked for the next stage and its list.

use super::*;

/// The call of a list's step in progress: its key, attempt and leader,
/// the instance, the stage and the step with its parameters.
fn call_of(
    set: &VmReplicaSet,
    machine: &Read,
    (list, task): (&CurrentList, &model::Task),
    term: &Term,
) -> OwnedCall {
    OwnedCall {
        key: list.key(&set.namespace, &machine.name, &machine.uid),
        attempt: list.attempt + 1,
        leader: term.clone(),
        instance: InstanceRef {
            namespace: set.namespace.clone(),
            name: machine.name.clone(),
            set: set.name.clone(),
            uid: machine.uid.clone(),
        },
        stage: list.stage.wit_name().to_string(),
        step: task.name.clone(),
        params: task.params.clone(),
    }
}

/// Whether a deleted instance's clean-up list ran to its end: its machine
/// goes, and its Server's finalizer is released.
pub(super) fn cleaned_up(machine: &Read, recorded: &Recorded) -> bool {
    machine.state.deleting
        && recorded.stage == Some(Stage::Deleting)
        && recorded
            .list
            .as_ref()
            .is_some_and(|l| l.outcome == ListOutcome::Succeeded)
}

impl Controller {
    /// Move a running list on: a person's skip or approval of it, the
    /// list superseded by a newer target before its last step, or the
    /// hook of its step asked (its answer taken on a later reconcile, the
    /// controller woken for it).
    async fn run_list(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        mut recorded: Recorded,
        (target, term): (&model::TargetState, &Term),
        at: Timestamp,
    ) -> Result<(), kube::Error> {
        let (skip, approve) = (recorded.skip.clone(), recorded.approve.clone());
        let list = recorded.list.as_mut().expect("a running list");
        // A person's word on the list in progress.
        if let Some(skip) = skip.filter(|r| {
            r.list == Some(list.number) && r.step == Some(list.step + 1) && r.at >= list.started
        }) {
            let task = list.current().map(|t| t.name.clone());
            list.skip(&skip.who(), at);
            self.tell(
                set,
                json!({"instance": machine.name, "event": "skipped", "list": list.number,
                "task": task, "by": skip.by, "why": skip.why}),
            );
            return self.moved_on(set, machine, recorded, term).await;
        }
        if list.awaiting_approval() {
            if let Some(approve) = approve.filter(|r| r.list == Some(list.number)) {
                list.approved_by = Some(approve.who());
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "approved", "list": list.number,
                    "by": approve.by, "why": approve.why}),
                );
                return self.moved_on(set, machine, recorded, term).await;
            }
            return Ok(());
        }
        if list.next_at > at {
            return Ok(());
        }
        let Some(task) = list.current().cloned() else {
            return Ok(());
        };
        // The target changed while the steps before the last one ran:
        // its last step (what it delivers) is not started for a target
        // no longer wanted, and the next list is the newest target's.
        let key = list.key(&set.namespace, &machine.name, &machine.uid);
        if !self.calls.under_way(&key)
            && list.superseded_by(&target.environment, target.code.as_deref())
        {
            let why = match &target.code {
                Some(code) => format!(
                    "before its last step, the target is now {} with code {code}",
                    model::versions(&target.environment)
                ),
                None => format!(
                    "before its last step, the target is now {}",
                    model::versions(&target.environment)
                ),
            };
            list.supersede(&why, at);
            self.tell(
                set,
                json!({"instance": machine.name, "event": "superseded", "list": list.number,
                "task": task.name, "why": why}),
            );
            return self.moved_on(set, machine, recorded, term).await;
        }
        // The call is made in the term the lock names, by a replica
        // that still acts in it.
        if self
            .leadership
            .acting()
            .is_none_or(|acting| acting != *term)
        {
            return Ok(());
        }
        // The hook is asked by a task of its own; its answer is taken
        // on a later reconcile (the controller is woken for it), so
        // that a slow hook holds no other step.
        let call = call_of(set, machine, (list, &task), term);
        let outcome = match self.calls.ask(call, &self.writer) {
            Asked::Answered(outcome) => outcome,
            Asked::UnderWay | Asked::Full => return Ok(()),
        };
        list.attempt += 1;
        let failed = matches!(outcome, crate::lifecycle::hooks::StepOutcome::Failed { .. });
        {
            let mut hooks = lock(&self.counts.hooks);
            let counted = hooks.entry(task.name.clone()).or_insert((0, 0));
            counted.0 += 1;
            counted.1 += u64::from(failed);
        }
        list.advance(outcome, now());
        if list.outcome != ListOutcome::Running {
            self.tell(
                set,
                json!({"instance": machine.name, "event": "finished", "list": list.number,
                "stage": list.stage.wit_name(), "outcome": list.outcome.name(),
                "task": list.entry().task, "message": list.message}),
            );
        }
        // The answer goes once it is recorded; a record not taken takes
        // it again.
        let recorded = self.moved_on(set, machine, recorded, term).await;
        if recorded.is_ok() {
            self.calls.taken(&key);
        }
        recorded
    }

    /// A person's retry or skip of the list that failed, while it is the
    /// instance's list still (a clean-up the policy holds on its failed
    /// step): it runs on from where it stopped. Whether one was taken.
    fn people_on_failed(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        recorded: &mut Recorded,
        at: Timestamp,
    ) -> bool {
        if machine.state.forced.is_none()
            && let Some(list) = recorded
                .list
                .as_mut()
                .filter(|l| l.outcome == ListOutcome::Failed)
        {
            let failed_at = list.finished.unwrap_or(list.started);
            let about = |r: &&crate::lifecycle::requests::Request| {
                r.list == Some(list.number) && r.at >= failed_at
            };
            let retry = recorded.retry.as_ref().filter(about).cloned();
            let skip = recorded
                .skip
                .as_ref()
                .filter(about)
                .filter(|r| r.step == Some(list.step + 1))
                .cloned();
            // The later of the two, when a person asked both.
            match (retry, skip) {
                (Some(retry), skip) if skip.as_ref().is_none_or(|s| s.at <= retry.at) => {
                    list.resume(&retry.who(), at);
                    self.tell(
                    set,
                    json!({"instance": machine.name, "event": "retried", "list": list.number,
                    "task": list.current().map(|t| t.name.clone()), "by": retry.by, "why": retry.why}),
                );
                    return true;
                }
                (_, Some(skip)) => {
                    let task = list.tasks.get(list.step).map(|t| t.name.clone());
                    list.skip_failed(&skip.who(), at);
                    self.tell(
                        set,
                        json!({"instance": machine.name, "event": "skipped", "list": list.number,
                    "task": task, "by": skip.by, "why": skip.why}),
                    );
                    return true;
                }
                _ => {}
            }
        }
        false
    }

    /// What comes before a forced stage is entered: on a deleted
    /// instance it is refused (its clean-up runs; whether it was refused, to
    /// be recorded), and the list in progress ends, superseded by it.
    fn forced_first(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        recorded: &mut Recorded,
        at: Timestamp,
    ) -> bool {
        if let Some(forced) = &machine.forced {
            // A deleted instance runs its clean-up, whatever is forced.
            if let Some(force) = forced
                .force
                .as_ref()
                .filter(|f| machine.state.deleting && f.stage != Stage::Deleting)
            {
                let why =
                    "the instance is deleted: its clean-up runs, and no other stage is entered";
                recorded.take_force(force, Some(why), at);
                self.tell(
                set,
                json!({"instance": machine.name, "event": "force-refused", "stage": force.stage.wit_name(), "by": force.request.by, "why": why}),
            );
                return true;
            }
            // The list in progress ends: a person's stage supersedes it.
            if let Some(list) = recorded
                .list
                .as_mut()
                .filter(|l| l.outcome == ListOutcome::Running)
            {
                list.supersede(
                    &format!("{} set the stage {}", forced.who, forced.stage.wit_name()),
                    at,
                );
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "superseded", "list": list.number,
                "task": list.current().map(|t| t.name.clone()), "why": list.message}),
                );
            }
        }
        false
    }

    /// Move one instance on by one step.
    pub(super) async fn step(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        mut recorded: Recorded,
        target: &model::TargetState,
        term: &Term,
        at: Timestamp,
    ) -> Result<(), kube::Error> {
        if !instance::may_take(recorded.lock.as_ref(), term) {
            return Ok(());
        }
        if self.people_on_failed(set, machine, &mut recorded, at) {
            return self.moved_on(set, machine, recorded, term).await;
        }
        let running = recorded
            .list
            .as_ref()
            .is_some_and(|l| l.outcome == ListOutcome::Running);
        // A forced stage is entered even while a list runs — once the step
        // whose hook is asked has answered, so that its answer is recorded
        // and the list ends with an outcome.
        let under_way = recorded.list.as_ref().is_some_and(|l| {
            self.calls
                .under_way(&l.key(&set.namespace, &machine.name, &machine.uid))
        });
        if running && (machine.state.forced.is_none() || under_way) {
            return self
                .run_list(set, machine, recorded, (target, term), at)
                .await;
        }
        if self.forced_first(set, machine, &mut recorded, at) {
            return self.moved_on(set, machine, recorded, term).await;
        }
        // A finished clean-up is its Server controller's to end.
        if cleaned_up(machine, &recorded) {
            return Ok(());
        }
        let Ok(slot) = self.registry.policy(World::Lifecycle) else {
            return Ok(());
        };
        let input = model::input(&machine.state, target);
        let answer = slot.call(|version| version.next(&version.context(at), &input));
        let decision = match answer {
            Ok(answer) => Next::from_wit(&answer.value),
            Err(error) => {
                tracing::warn!(instance = machine.name, %error, "the lifecycle policy could not decide");
                return Ok(());
            }
        };
        let Some(mut list) = CurrentList::entered(recorded.last_number(), &decision, at) else {
            // The policy refuses a person's stage: the request is taken,
            // refused with the policy's words.
            if let Some((forced, force)) = machine
                .forced
                .as_ref()
                .and_then(|f| Some((f, f.force.as_ref()?)))
            {
                let why = format!(
                    "the lifecycle policy does not enter it: {}",
                    decision.reason()
                );
                recorded.take_force(force, Some(&why), at);
                self.tell(
                    set,
                    json!({"instance": machine.name, "event": "force-refused", "stage": forced.stage.wit_name(), "by": force.request.by, "why": why}),
                );
                return self.moved_on(set, machine, recorded, term).await;
            }
            // At rest: its status follows what is observed of its machine
            // (its node, once it runs again on one).
            return self.record(set, machine, &recorded).await;
        };
        let force = machine.forced.as_ref().and_then(|f| f.force.clone());
        if let Some(forced) = &machine.forced {
            let who = &forced.who;
            list.reason = format!("{} ({who})", list.reason);
            self.tell(
                set,
                json!({"instance": machine.name, "event": "forced", "stage": list.stage.wit_name(), "by": who}),
            );
            // A person who forces an instance into service vouches that it
            // has what it should (the list that failed to give it, done by
            // hand): once the forced list succeeds it has the target, and
            // the rollout goes on instead of taking it back to the list
            // that failed.
            if rollout::in_service(Some(list.stage)) {
                list.environment = Some(target.environment.clone());
                if target.code.is_some() {
                    list.code = target.code.clone();
                }
            }
        }
        // Where its machine runs, or last ran (a machine fenced with its
        // node has none): what a repair is said to have moved it from.
        list.node = machine
            .state
            .node
            .clone()
            .or_else(|| recorded.list.as_ref().and_then(|l| l.node.clone()));
        // Back from offline: said to be repaired only when it moved.
        if recorded.stage == Some(Stage::Offline) && list.stage != Stage::Offline {
            let before = recorded.list.as_ref().and_then(|l| l.node.as_deref());
            match (before, list.node.as_deref()) {
                (Some(was), Some(is)) if was != is => {
                    list.reason = format!("{} (repaired: moved from {was} to {is})", list.reason);
                }
                (Some(was), Some(_)) => {
                    list.reason = format!("{} (its node {was} is back)", list.reason);
                }
                _ => {}
            }
        }
        self.tell(set, json!({"instance": machine.name, "event": "entered", "list": list.number,
            "stage": list.stage.wit_name(), "tasks": list.tasks.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            "needs-approval": list.needs_approval, "reason": list.reason}));
        tracing::info!(
            namespace = set.namespace,
            instance = machine.name,
            stage = list.stage.wit_name(),
            tasks = list.tasks.len(),
            "VM delivery: {}",
            list.reason
        );
        let done = list.outcome != ListOutcome::Running;
        recorded.enter(list, at);
        if let Some(force) = &force {
            recorded.take_force(force, None, at);
        }
        recorded.lock = (!done).then(|| Lock {
            holder: term.holder.clone(),
            term: term.term,
        });
        self.record(set, machine, &recorded).await?;
        // Its first step's hook is asked at once, not on the reconcile the
        // store's showing of this write brings: the same call, by its key,
        // that reconcile takes the answer of.
        if let Some(list) = recorded.list.as_ref().filter(|l| {
            l.outcome == ListOutcome::Running && !l.awaiting_approval() && l.next_at <= now()
        }) && let Some(task) = list.current()
            && self
                .leadership
                .acting()
                .is_some_and(|acting| acting == *term)
        {
            self.calls
                .ask(call_of(set, machine, (list, task), term), &self.writer);
        }
        Ok(())
    }

    /// Record an instance whose list moved on: what a finished list gave
    /// it, and the lock kept while the list runs.
    pub(super) async fn moved_on(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        mut recorded: Recorded,
        term: &Term,
    ) -> Result<(), kube::Error> {
        recorded.settle();
        let done = recorded
            .list
            .as_ref()
            .is_some_and(|l| l.outcome != ListOutcome::Running);
        recorded.lock = (!done).then(|| Lock {
            holder: term.holder.clone(),
            term: term.term,
        });
        self.record(set, machine, &recorded).await
    }
}
