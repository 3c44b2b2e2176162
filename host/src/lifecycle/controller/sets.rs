//! The set's controller: its instances made, adopted, taken over or let
//! go of at the safe rate, the rollout planned and each Server's spec given
//! its target and whether it may leave service for it now (its own
//! controller moves it on), the set's and its deployment's statuses summed
//! up; a deleted set's instances deleted, each cleaned up on its own, the
//! set let go last.

use super::*;
use crate::lifecycle::crd::SetInstance;

/// A typed status as the JSON a status write takes.
fn as_json(status: &impl serde::Serialize) -> Value {
    serde_json::to_value(status).unwrap_or_default()
}

/// Which instance a set lets go of first when it has too many: one out of
/// service for good before any other (lost, failed, out of contact, not
/// yet made); among the rest — in service, or on their way there — the
/// newest (a surge made for a change goes first, as the docs say).
pub(super) fn rank_to_remove(machine: &Read) -> (u8, Timestamp, String) {
    let badness = match machine.state.stage {
        Some(Stage::Offline) => 4,
        Some(Stage::Failed) => 3,
        Some(Stage::Unknown) => 2,
        None | Some(Stage::Requested) => 1,
        Some(
            Stage::Initializing
            | Stage::Deploying
            | Stage::Ready
            | Stage::GrayRelease
            | Stage::Serving
            | Stage::Deleting,
        ) => 0,
    };
    (badness, machine.created, machine.name.clone())
}

/// Whether an instance is in service with no list running, its machine
/// running on a Ready node.
pub(super) fn at_rest_in_service(machine: &Read) -> bool {
    rollout::in_service(machine.state.stage)
        && machine.state.machine == crate::wit::lifecycle::Machine::Running
        && machine.node_ready
        && machine.recorded.as_ref().is_ok_and(|r| {
            r.list
                .as_ref()
                .is_none_or(|l| l.outcome != ListOutcome::Running)
        })
}

/// The clean-ups of a set's deleted instances: those that failed, in
/// words that name the instance and the step (a person retries or skips
/// it), and those under way, with the step each is at.
pub(super) fn cleanups(read: &[Read]) -> (Vec<String>, Vec<String>) {
    let mut failed = Vec::new();
    let mut running = Vec::new();
    for machine in read.iter().filter(|m| m.state.deleting) {
        let list = machine
            .recorded
            .as_ref()
            .ok()
            .and_then(|r| r.list.as_ref())
            .filter(|l| l.stage == Stage::Deleting);
        let Some(list) = list else {
            running.push(format!("{} (its clean-up starts)", machine.name));
            continue;
        };
        let task = list.entry().task.unwrap_or_default();
        match list.outcome {
            ListOutcome::Failed => failed.push(format!(
                "the clean-up of {} failed at {task}: {} (a person retries or skips the step)",
                machine.name,
                crate::text::printable(&list.message)
            )),
            ListOutcome::Running => running.push(format!(
                "{} at {task} (attempt {})",
                machine.name,
                list.attempt + 1
            )),
            _ => {}
        }
    }
    (failed, running)
}

/// An instance as the set's status shows it.
pub(super) fn row(machine: &Read) -> SetInstance {
    let state = &machine.state;
    let recorded = machine.recorded.as_ref().ok();
    SetInstance {
        name: Some(machine.name.clone()),
        stage: state.stage.map(|s| s.wit_name().to_string()),
        since: recorded.and_then(|r| r.since).map(crate::time::rfc3339),
        environment: state
            .environment
            .iter()
            .map(|p| format!("{}={}", p.name, p.version))
            .collect(),
        code: state.code.clone(),
        // The step in progress or that its list failed at; of a failed
        // instance, the step it failed at.
        task: recorded
            .and_then(|r| r.list.as_ref())
            .and_then(|l| l.entry().task)
            .or_else(|| match state.stage {
                Some(Stage::Failed) => rollout::failed_step(state).map(String::from),
                _ => None,
            }),
        locked_by: recorded
            .and_then(|r| r.lock.as_ref())
            .map(|l| l.holder.clone()),
    }
}

impl Controller {
    /// A deleted set: every instance goes through its clean-up, and the
    /// set's finalizer is let go last; its status says which instances
    /// hold it, each at its step.
    async fn reconcile_deleted(
        &self,
        object: &Value,
        finalizers: &[String],
        scope: &Scope,
        health: &BTreeMap<String, Health>,
        at: Timestamp,
    ) -> Result<Found, Failed> {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        // Deleted: every instance goes through its clean-up, and the
        // set's finalizer is let go last.
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
        let set = VmReplicaSet::named(namespace, name, uid);
        self.take_over(&set, scope).await?;
        let read = self.read_machines(&set, scope, health)?;
        if read.is_empty() {
            if finalizers.iter().any(|f| f == instance::FINALIZER) {
                let kept: Vec<&String> = finalizers
                    .iter()
                    .filter(|f| f.as_str() != instance::FINALIZER)
                    .collect();
                self.patch_metadata(
                    &sets(),
                    namespace,
                    name,
                    json!({"resourceVersion": object["metadata"]["resourceVersion"], "finalizers": kept}),
                )
                .await?;
                tracing::info!(
                    namespace,
                    set = name,
                    "VM delivery: every instance is cleaned up; the set goes"
                );
            }
            return Ok(Found {
                gone: true,
                ..Found::default()
            });
        }
        // The set says which instances hold it, each at its step.
        let rows: Vec<SetInstance> = read.iter().map(row).collect();
        let found = self.let_go(&set, read).await?;
        let set = VmReplicaSet {
            generation: object["metadata"]["generation"].as_i64().unwrap_or(0),
            ..set
        };
        // What the status said before, as far as it reads.
        let previous = serde_json::from_value(object["status"].clone()).unwrap_or_default();
        let status = set.deleting_status(previous, rows, at);
        self.write_status(&sets(), namespace, name, object, as_json(&status))
            .await?;
        Ok(found)
    }

    /// A Server whose machine is not made yet has it made; one whose
    /// machine was seen and is gone (deleted by hand, its finalizer taken
    /// off) goes through its clean-up, and the set replaces it. Whether
    /// any was.
    pub(super) async fn mend_machines(
        &self,
        set: &VmReplicaSet,
        read: &[Read],
    ) -> Result<bool, Failed> {
        let namespace = set.namespace.as_str();
        // A Server whose machine is not made yet has it made; one whose
        // machine was seen and is gone without its clean-up (deleted with
        // its finalizer taken off) goes through its clean-up, and the set
        // replaces it.
        let mut machines_made = false;
        // A machine deleted by hand takes its Server with it: the
        // instance goes through its clean-up, and the set replaces it.
        for server in read
            .iter()
            .filter(|m| !m.deleted && !m.lost && m.machine.as_ref().is_some_and(|vm| vm.deleted))
        {
            gone_is_done(
                Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &servers())
                    .delete(&server.name, &DeleteParams::default())
                    .await
                    .map(drop),
            )?;
            machines_made = true;
        }
        for server in read
            .iter()
            .filter(|m| m.machine.is_none() && !m.state.deleting && !m.lost)
        {
            // Seen before (its status recorded its machine) and not in the
            // store now: gone, since the store only moves on. Never seen: not
            // made yet, or made and not in the store yet (made again, the
            // API server says it exists).
            let seen = server
                .server
                .status
                .as_ref()
                .is_some_and(|s| s.machine_state.is_some());
            if !seen {
                self.make_machine(set, &server.name, &server.uid).await?;
            } else {
                tracing::warn!(
                    namespace,
                    set = set.name,
                    instance = server.name,
                    "VM delivery: the instance's machine is gone; its Server goes through its clean-up"
                );
                self.remove(set, &server.name, "its machine is gone")
                    .await?;
            }
            machines_made = true;
        }
        Ok(machines_made)
    }

    /// Make the machines the set is short of, or let go of one it has too
    /// many of; a Server whose machine is not made yet has it made, one
    /// whose machine is gone goes through its clean-up. Whether it did
    /// anything (looked at again once the stores show it).
    async fn scale(
        &self,
        set: &VmReplicaSet,
        read: &[Read],
        deployment: Option<&Value>,
        scope: &Scope,
        at: Timestamp,
    ) -> Result<bool, Failed> {
        let namespace = set.namespace.as_str();
        // Make the machines the set is short of, or let go of one it has
        // too many of; an instance named offline goes once it is drained.
        // Those named offline count no more: the set runs `replicas` less
        // them, and never gives their names to new instances.
        let staying: Vec<&Read> = read
            .iter()
            .filter(|m| !m.state.deleting && !m.state.take_offline)
            .collect();
        // While a change rolls out over instances that had something
        // before it, up to `maxSurge` more, made with the change.
        let code = deployment.and_then(|d| d["spec"]["code"]["version"].as_str());
        let changing = staying
            .iter()
            .filter(|m| !m.state.environment.is_empty() || m.state.code.is_some())
            .filter(|m| {
                m.state.environment != set.spec.environment
                    || code.is_some_and(|c| m.state.code.as_deref() != Some(c))
            })
            .count();
        // Those lost in a set that scales down on a lost instance count no
        // more either.
        let lost = read
            .iter()
            .filter(|m| m.lost && !set.offline.contains(&m.name))
            .count();
        let wanted = set.wanted().saturating_sub(lost)
            + match changing {
                0 => 0,
                n => set.spec.max_surge.beyond(set.wanted()).min(n),
            };
        let drained = read.iter().find(|m| {
            m.named_offline
                && (!m.lost || m.machine.as_ref().is_some_and(|vm| !vm.deleted))
                && !m.state.deleting
                && m.state.stage == Some(Stage::Offline)
                && m.recorded.as_ref().is_ok_and(|r| {
                    r.list
                        .as_ref()
                        .is_some_and(|l| l.outcome == ListOutcome::Succeeded)
                })
        });
        // One too many: an instance out of service for good goes at once;
        // otherwise the newest (a surge made for a change), once every
        // other is in service at rest — a set never runs fewer available
        // than it wants to let one go, nor deletes an instance it has just
        // updated.
        let extra = (staying.len() > wanted)
            .then(|| staying.iter().max_by_key(|m| rank_to_remove(m)))
            .flatten()
            .filter(|worst| {
                rank_to_remove(worst).0 > 0
                    || staying
                        .iter()
                        .filter(|m| m.name != worst.name)
                        .all(|m| at_rest_in_service(m))
            });
        if let Some(machine) = drained.filter(|m| m.lost) {
            self.let_machine_go(set, machine).await?;
            tracing::info!(
                namespace,
                set = set.name,
                instance = machine.name,
                "VM delivery: the lost instance is drained; its machine goes, its Server stays offline"
            );
            self.tell(
                set,
                json!({"instance": machine.name, "event": "removed", "reason": "lost, and drained: the set is smaller by it"}),
            );
            return Ok(true);
        }
        if let Some(machine) = drained.or(extra.copied()) {
            let why = match machine.named_offline {
                true => "named offline and drained",
                false => "the set has more instances than it wants",
            };
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, &servers())
                .delete(&machine.name, &DeleteParams::default())
                .await?;
            tracing::info!(
                namespace,
                set = set.name,
                instance = machine.name,
                "VM delivery: the instance goes ({why}); its clean-up holds its Server"
            );
            self.tell(
                set,
                json!({"instance": machine.name, "event": "removed", "reason": why}),
            );
            // Looked at again once the store has it going.
            return Ok(true);
        } else if staying.len() < wanted {
            self.make_one(set, read, scope, at).await?;
            // Looked at again once the store has it.
            return Ok(true);
        }
        Ok(false)
    }

    /// One more instance for a set short of one: its Server made (under
    /// no name of an instance, of a machine of the set's, or of one named
    /// offline), `requested`, and its machine.
    async fn make_one(
        &self,
        set: &VmReplicaSet,
        read: &[Read],
        scope: &Scope,
        at: Timestamp,
    ) -> Result<(), Failed> {
        let namespace = set.namespace.as_str();
        // No name of an instance, of a machine of the set's, or of one
        // named offline.
        let machines = scope.machines.of_set(namespace, &set.name)?;
        let names: Vec<String> = read
            .iter()
            .map(|m| m.name.clone())
            .chain(machines.iter().filter_map(|vm| vm.metadata.name.clone()))
            .chain(set.offline.iter().cloned())
            .collect();
        let name = instance_name(&set.name, names.iter().map(String::as_str));
        let server = set.server(&name, &set.spec.environment, None);
        let api = Api::<ServerResource>::namespaced(self.writer.clone(), namespace);
        let server: ServerResource =
            serde_json::from_value(server).map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &server).await {
            Ok(mut made) => {
                lock(&self.made)
                    .entry(format!("{namespace}/{}", set.name))
                    .or_default()
                    .insert(name.clone(), at);
                // It applies for a machine.
                made.status = Some(ServerStatus {
                    stage: Some(Stage::Requested.wit_name().into()),
                    since: Some(crate::time::rfc3339(at)),
                    writer: writer(&self.leadership),
                    ..ServerStatus::default()
                });
                let written = api.replace_status(&name, &status_params(), &made).await?;
                self.keep_ours(namespace, &name, &written);
                let uid = made.metadata.uid.clone().unwrap_or_default();
                self.make_machine(set, &name, &uid).await?;
                tracing::info!(
                    namespace,
                    set = set.name,
                    instance = name,
                    "VM delivery: a Server is made, and its machine requested"
                );
                self.tell(set, json!({"instance": name, "event": "made"}));
            }
            // Made already: the store has not seen it yet.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error.into()),
        }
        Ok(())
    }

    /// Each Server's spec says what the plan gives it — its target, and
    /// whether it may leave service for it now — for its own controller to
    /// move it on (on the version read: a compare-and-swap). Each Server
    /// whose spec holds the plan is kept as planned at its generation; the
    /// Servers planned anew (written, or found holding the plan by a new
    /// leader), whose own controllers are to look again.
    async fn write_targets(
        &self,
        set: &VmReplicaSet,
        read: &mut [Read],
        plan: &rollout::Plan,
    ) -> Result<Vec<String>, kube::Error> {
        let namespace = set.namespace.as_str();
        let mut planned_anew = Vec::new();
        for machine in read.iter_mut().filter(|m| !m.stale && !m.state.deleting) {
            let Some(target) = plan.targets.get(&machine.name) else {
                continue;
            };
            let mut spec = crate::lifecycle::resources::server_spec(
                &set.name,
                &target.environment,
                target.code.as_deref(),
            );
            spec["mayDisrupt"] = json!(target.may_disrupt);
            spec["released"] = json!(target.released);
            // The target only: what else the spec has (a person's forced
            // stage) is not the rollout's.
            let before = serde_json::to_value(&machine.server.spec).unwrap_or_default();
            let target = [
                "replicaSet",
                "environment",
                "code",
                "mayDisrupt",
                "released",
            ];
            if target.iter().all(|k| before.get(*k) == spec.get(*k)) {
                if self.planned(namespace, &machine.name, machine.generation) {
                    planned_anew.push(machine.name.clone());
                }
                continue;
            }
            let mut patch = spec;
            if patch.get("code").is_none() {
                patch["code"] = Value::Null;
            }
            let patched = Api::<ServerResource>::namespaced(self.writer.clone(), namespace)
                .patch(
                    &machine.name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({
                        "metadata": {"resourceVersion": machine.resource_version},
                        "spec": patch,
                    })),
                )
                .await?;
            self.wrote(namespace, &machine.name, &machine.resource_version);
            machine.resource_version = patched
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default();
            machine.generation = patched.metadata.generation;
            // Its controller may have looked at the write before it was
            // kept as planned: it looks again.
            self.planned(namespace, &machine.name, machine.generation);
            planned_anew.push(machine.name.clone());
            machine.server = Arc::new(patched);
        }
        Ok(planned_anew)
    }

    /// Keep that the Server `name`'s spec holds its set's plan at
    /// `generation`; whether it did not before.
    fn planned(&self, namespace: &str, name: &str, generation: Option<i64>) -> bool {
        let Some(generation) = generation else {
            return false;
        };
        lock(&self.planned).insert(format!("{namespace}/{name}"), generation) != Some(generation)
    }

    /// What stops a set, in words (instances whose Server does not read,
    /// writes refused, no lifecycle policy, failed clean-ups), and the
    /// clean-ups under way.
    fn problems(&self, read: &[Read], refused: Vec<String>) -> (Option<String>, Vec<String>) {
        let problems: Vec<String> = read
            .iter()
            .filter_map(|m| {
                m.recorded
                    .as_ref()
                    .err()
                    .map(|e| format!("{}: {e}", m.name))
            })
            .collect();
        let mut problems = problems;
        problems.extend(refused);
        if self.registry.policy(World::Lifecycle).is_err() {
            problems.insert(0, NO_POLICY.to_string());
        }
        let (failed_cleanups, cleaning) = cleanups(read);
        problems.extend(failed_cleanups);
        let problem = (!problems.is_empty()).then(|| problems.join("; "));
        (problem, cleaning)
    }

    /// The status of the deployment that targets a set, written; a
    /// person's action it keeps for the first time is an Event on it.
    async fn write_rollout_status(
        &self,
        (d, spec, object): (&VmDeployment, &rollout::DeploymentSpec, &Value),
        read: &[Read],
        (plan, rows): (&rollout::Plan, &[SetInstance]),
        at: Timestamp,
    ) -> Result<(), kube::Error> {
        let namespace = d.namespace.as_str();
        let updated = read
            .iter()
            .filter(|m| m.state.code.as_deref() == Some(spec.code.as_str()))
            .count();
        let status = d.status(spec, plan, updated, rows, at);
        // A person's action the status keeps for the first time is an
        // Event on the deployment.
        if let Some(announcer) = &self.announcer {
            for action in status.actions.iter().filter(|a| !d.actions.contains(a)) {
                announcer.announce_rollout(namespace, &d.name, &as_json(action));
            }
        }
        self.write_status(&deployments(), namespace, &d.name, object, as_json(&status))
            .await
    }

    /// Whether the set waits for its stores: a Server it made that the
    /// store has not shown yet (else a store behind its writes would have
    /// it make one again and again), one shown as it was before this
    /// controller's last write to it (what the set may do depends on every
    /// instance as it is now), or a status someone else wrote.
    fn waits(&self, set: &VmReplicaSet, read: &[Read], at: Timestamp) -> bool {
        {
            let mut made = lock(&self.made);
            let key = format!("{}/{}", set.namespace, set.name);
            let expected = made.entry(key.clone()).or_default();
            expected.retain(|name, when| {
                at - *when < MADE_EXPECTED && !read.iter().any(|m| &m.name == name)
            });
            if !expected.is_empty() {
                return true;
            }
            made.remove(&key);
        }
        // A status someone else wrote is put back by the Server's own
        // controller first.
        read.iter().any(|m| m.stale || m.overwritten.is_some())
    }

    /// The set holds its instances' clean-up: deleted, it lets go only
    /// when each of them has been cleaned up.
    async fn hold_clean_up(
        &self,
        object: &Value,
        finalizers: &[String],
    ) -> Result<(), kube::Error> {
        if finalizers.iter().any(|f| f == instance::FINALIZER) {
            return Ok(());
        }
        let mut with = finalizers.to_vec();
        with.push(instance::FINALIZER.into());
        self.patch_metadata(
            &sets(),
            object["metadata"]["namespace"].as_str().unwrap_or_default(),
            object["metadata"]["name"].as_str().unwrap_or_default(),
            json!({"resourceVersion": object["metadata"]["resourceVersion"], "finalizers": with}),
        )
        .await
    }

    pub(super) async fn reconcile_set(
        &self,
        set_object: &DynamicObject,
        scope: &Scope,
    ) -> Result<Found, Failed> {
        let at = now();
        let value = serde_json::to_value(set_object).unwrap_or_default();
        let object = &value;
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        // What the set depends on is read, or it is held where it is, and
        // says so.
        if let Err(unread) = scope
            .deployments
            .check()
            .and(scope.servers.check())
            .and(scope.machines.check())
            .and(scope.instances.check())
        {
            let status = crate::lifecycle::resources::held(object, &unread.to_string(), at);
            self.write_status(&sets(), namespace, name, object, status)
                .await?;
            return Err(unread.into());
        }
        let targeting = scope.deployments_of(namespace, name)?;
        let deployment = targeting.first();
        // The nodes' health, as failover judges them.
        let health = self.health();
        let health = &*health;
        let finalizers: Vec<String> = object["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(String::from))
            .collect();
        if object["metadata"]["deletionTimestamp"].is_string() {
            return self
                .reconcile_deleted(object, &finalizers, scope, health, at)
                .await;
        }
        self.hold_clean_up(object, &finalizers).await?;
        let set = match VmReplicaSet::read(object) {
            Ok(set) => set,
            Err(problem) => {
                let status = crate::lifecycle::resources::cannot_proceed(object, &problem, at);
                self.write_status(&sets(), namespace, name, object, status)
                    .await?;
                return Ok(Found::default());
            }
        };
        // Adopt the VMs the set's selector names that no one owns.
        if !set.selector.is_empty() {
            self.adopt(&set, scope).await?;
        }
        // Take over the VMs it made before instances had Servers.
        self.take_over(&set, scope).await?;
        let mut read = self.read_machines(&set, scope, health)?;
        if self.waits(&set, &read, at) {
            return Ok(Found {
                stages: stages(&read),
                ..Found::moving()
            });
        }

        if self.scale(&set, &read, deployment, scope, at).await? {
            return Ok(Found::moving());
        }

        let deployment_object = deployment;
        // A deployment that targets the set but does not read holds every
        // instance where it is: read as "no deployment" it would release
        // the code of those in gray release.
        let deployment = match deployment.map(VmDeployment::read).transpose() {
            Ok(deployment) => deployment,
            Err(problem) => {
                let held = deployment_object
                    .and_then(|d| d["metadata"]["name"].as_str())
                    .unwrap_or_default();
                let problem = format!(
                    "held: the VMDeployment {held} does not read ({problem}); no instance moves until it does"
                );
                let status = crate::lifecycle::resources::cannot_proceed(object, &problem, at);
                self.write_status(&sets(), namespace, name, object, status)
                    .await?;
                return Ok(Found {
                    stages: stages(&read),
                    phase: Some("Degraded".into()),
                    ..Found::default()
                });
            }
        };
        let rollout = deployment.as_ref().map(|d| d.rollout(at));
        let members: Vec<Member<'_>> = read
            .iter()
            .map(|m| Member {
                state: &m.state,
                created: m.created,
                node_ready: m.node_ready,
            })
            .collect();
        let plan = rollout::plan(
            &set.spec,
            rollout.as_ref().map(|(spec, progress)| (spec, progress)),
            &members,
            at,
        );

        let planned = self.write_targets(&set, &mut read, &plan).await?;

        let refused = self.refusals(&set, &read);
        let rows: Vec<SetInstance> = read.iter().map(row).collect();
        let deployment_rows = rows.clone();
        let (problem, cleaning) = self.problems(&read, refused);
        let status = set.status(&plan, rows, (problem.as_deref(), &cleaning), at);
        self.write_status(&sets(), namespace, name, object, as_json(&status))
            .await?;
        // Looked at again soon while a list runs or the rollout moves.
        let moving = read.iter().any(|m| {
            m.stale
                || m.recorded.as_ref().is_ok_and(|r| {
                    r.list
                        .as_ref()
                        .is_some_and(|l| l.outcome == ListOutcome::Running)
                })
        }) || matches!(
            plan.phase,
            rollout::Phase::Progressing | rollout::Phase::Paused
        );
        let found = Found {
            stages: stages(&read),
            phase: deployment.as_ref().map(|_| format!("{:?}", plan.phase)),
            moving,
            gone: false,
            planned,
        };
        if let (Some(d), Some((spec, _))) = (&deployment, &rollout) {
            let object = deployment_object.cloned().unwrap_or_default();
            self.write_rollout_status((d, spec, &object), &read, (&plan, &deployment_rows), at)
                .await?;
        }
        Ok(found)
    }

    /// Delete an instance's Server (one gone already is done), saying why:
    /// its clean-up holds it.
    async fn remove(&self, set: &VmReplicaSet, name: &str, why: &str) -> Result<(), kube::Error> {
        gone_is_done(
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), &set.namespace, &servers())
                .delete(name, &DeleteParams::default())
                .await
                .map(drop),
        )?;
        self.tell(
            set,
            json!({"instance": name, "event": "removed", "reason": why}),
        );
        Ok(())
    }

    /// Let go of the instances of a set that is going: each not deleted
    /// yet is deleted, and each moves on through its clean-up (which its
    /// finalizer holds) on its own Server's reconcile.
    pub(super) async fn let_go(
        &self,
        set: &VmReplicaSet,
        read: Vec<Read>,
    ) -> Result<Found, kube::Error> {
        for machine in read.iter().filter(|m| !m.state.deleting) {
            self.remove(set, &machine.name, "its set is deleted")
                .await?;
        }
        Ok(Found {
            stages: stages(&read),
            ..Found::moving()
        })
    }
}
