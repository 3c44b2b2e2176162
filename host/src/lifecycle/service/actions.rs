//! People's actions on the delivery, written for the leader to carry out:
//! on a rollout (approve its gate, promote, abort, retry the failed
//! instances, roll back to a released revision) and on one instance (retry
//! its failed list, skip its step, approve its list, force a stage, lift
//! it). Each is written on the resource it is about, with who and why, on
//! the version read (a change meanwhile is read again and tried again).

use super::*;

/// A person's request: who and why.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ActionRequest {
    /// Who asks.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub by: String,
    /// Why.
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub why: Option<String>,
    /// For a skip: the task the person saw in progress (a skip of a step
    /// that has finished meanwhile is refused).
    #[serde(default)]
    #[schema(max_length = 256)]
    pub task: Option<String>,
    /// For a rollback: the released revision to go back to (of the
    /// deployment's `status.history`); the last one released before the
    /// code it has now when not given.
    #[serde(default)]
    #[schema(max_length = 64)]
    pub revision: Option<String>,
    /// For a force: the stage the instance goes on from (the lifecycle
    /// policy's list for it runs from where the instance is).
    #[serde(default)]
    #[schema(max_length = 32)]
    pub stage: Option<String>,
}

/// A request, as it was written.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Requested {
    /// `approve`, `promote`, `abort`, `retry`, `skip`.
    pub action: String,
    /// The resource it is written on, `kind/namespace/name`.
    pub on: Vec<String>,
    pub request: Request,
}

/// The rollout actions of a set's deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutAction {
    Approve,
    Promote,
    Abort,
    /// Every failed instance of the set runs its failed list again.
    Retry,
    /// The deployment's code goes back to a revision released before.
    Rollback,
}

/// The actions on one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceAction {
    Retry,
    Skip,
    Approve,
    /// A person forces a stage: a request in the Server's spec.
    Force,
    /// The forced stage is lifted: the request leaves the spec.
    Lift,
}

impl Service {
    /// Write `request` under `key` on an object, on the resource version it
    /// was read at.
    async fn write(
        &self,
        resource: &kube::core::ApiResource,
        object: &Value,
        key: &str,
        request: &Request,
    ) -> Result<String, ServiceError> {
        let namespace = text(object, "/metadata/namespace").unwrap_or_default();
        let name = text(object, "/metadata/name").unwrap_or_default();
        let patch = json!({"metadata": {
            "resourceVersion": object["metadata"]["resourceVersion"],
            "annotations": {key: request.write()},
        }});
        Api::<DynamicObject>::namespaced_with(self.client.clone(), &namespace, resource)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error)?;
        Ok(format!("{}/{namespace}/{name}", resource.kind))
    }

    /// Roll a deployment back to a revision released before: its spec's
    /// code becomes that revision's (as `kubectl rollout undo` does), and
    /// the new rollout goes by the deployment's steps. Who asked and why is
    /// kept on it (`verdict.dev/rollback`).
    async fn roll_back(
        &self,
        (namespace, set): (&str, &str),
        deployment: &Value,
        mut request: Request,
        asked: &ActionRequest,
    ) -> Result<Requested, ServiceError> {
        let history: Vec<&Value> = deployment["status"]["history"]
            .as_array()
            .into_iter()
            .flatten()
            .collect();
        let code = text(deployment, "/spec/code/version").unwrap_or_default();
        let artifact = text(deployment, "/spec/code/artifact").unwrap_or_default();
        let is_now = |r: &Value| r["code"] == code.as_str() && r["artifact"] == artifact.as_str();
        let target = match &asked.revision {
            Some(revision) => history
                .iter()
                .find(|r| r["revision"] == revision.as_str())
                .copied()
                .ok_or_else(|| {
                    let known: Vec<&str> = history
                        .iter()
                        .filter_map(|r| r["revision"].as_str())
                        .collect();
                    ServiceError::NotFound(
                        "no-such-revision",
                        format!(
                            "revision {revision} was not released (the history has {})",
                            match known.is_empty() {
                                true => "none".to_string(),
                                false => known.join(", "),
                            }
                        ),
                    )
                })?,
            None => history
                .iter()
                .rev()
                .find(|r| !is_now(r))
                .copied()
                .ok_or_else(|| {
                    ServiceError::Conflict(format!(
                        "no revision other than {code} was released: there is nothing to roll back to"
                    ))
                })?,
        };
        if is_now(target) {
            return Err(ServiceError::Conflict(format!(
                "the deployment has the code of revision {} already",
                target["revision"].as_str().unwrap_or_default()
            )));
        }
        request.code = text(target, "/code");
        request.revision = text(target, "/revision");
        let name = text(deployment, "/metadata/name").unwrap_or_default();
        let patch = json!({
            "metadata": {
                "resourceVersion": deployment["metadata"]["resourceVersion"],
                "annotations": {requests::ROLLBACK: request.write()},
            },
            "spec": {"code": {"version": target["code"], "artifact": target["artifact"]}},
        });
        Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &deployments())
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error)?;
        let requested = Requested {
            action: "rollback".into(),
            on: vec![format!("VMDeployment/{namespace}/{name}")],
            request,
        };
        self.told(namespace, set, &requested);
        Ok(requested)
    }

    fn told(&self, namespace: &str, set: &str, requested: &Requested) {
        tracing::info!(
            namespace,
            set,
            action = requested.action,
            on = ?requested.on,
            by = requested.request.by,
            why = requested.request.why,
            "VM delivery: a person's request, written for the leader"
        );
        self.events.publish(
            Kind::Delivery,
            Some(format!("{namespace}/{set}")),
            json!({"event": "requested", "action": requested.action, "on": requested.on,
                   "request": requested.request}),
        );
    }

    /// A person acts on the rollout of a set's deployment.
    pub async fn act_on_rollout(
        &self,
        (namespace, set): (&str, &str),
        action: RolloutAction,
        asked: &ActionRequest,
    ) -> Result<Requested, ServiceError> {
        again_if_changed(|| self.act_on_rollout_once((namespace, set), action, asked)).await
    }

    async fn act_on_rollout_once(
        &self,
        (namespace, set): (&str, &str),
        action: RolloutAction,
        asked: &ActionRequest,
    ) -> Result<Requested, ServiceError> {
        let mut request = person(asked)?;
        self.set_object(namespace, set).await?;
        if action == RolloutAction::Retry {
            return self.retry_all(namespace, set, request).await;
        }
        let deployment = self.deployment_of(namespace, set).await?.ok_or_else(|| {
            ServiceError::NotFound(
                "no-such-deployment",
                format!("no VMDeployment targets VMReplicaSet {namespace}/{set}"),
            )
        })?;
        if action == RolloutAction::Rollback {
            return self
                .roll_back((namespace, set), &deployment, request, asked)
                .await;
        }
        let status = &deployment["status"];
        let code = text(&deployment, "/spec/code/version").unwrap_or_default();
        if text(status, "/code").as_deref() != Some(code.as_str()) {
            return Err(ServiceError::Conflict(format!(
                "the rollout of {code} has not started yet; repeat the request when it has"
            )));
        }
        let phase = text(status, "/phase").unwrap_or_default();
        let (name, key) = match action {
            RolloutAction::Approve => {
                if !at_gate(status) {
                    return Err(ServiceError::Conflict(format!(
                        "the rollout of {code} waits at no gate ({})",
                        text(status, "/waiting")
                            .filter(|w| !w.is_empty())
                            .unwrap_or(phase)
                    )));
                }
                request.step = status["stepIndex"].as_u64().map(|s| s as usize);
                ("approve", requests::APPROVE)
            }
            RolloutAction::Promote => {
                if matches!(phase.as_str(), "Completed" | "Aborted") {
                    return Err(ServiceError::Conflict(format!(
                        "the rollout of {code} is {phase}: nothing to promote"
                    )));
                }
                ("promote", requests::PROMOTE)
            }
            RolloutAction::Abort | RolloutAction::Retry | RolloutAction::Rollback => {
                if matches!(phase.as_str(), "Completed" | "Aborted") {
                    return Err(ServiceError::Conflict(format!(
                        "the rollout of {code} is {phase}: nothing to abort"
                    )));
                }
                if text(status, "/stableCode").is_none() {
                    return Err(ServiceError::Conflict(format!(
                        "no code was released before {code}: there is nothing to go back to"
                    )));
                }
                ("abort", requests::ABORT)
            }
        };
        request.code = Some(code);
        request.revision = text(status, "/revision");
        let on = self
            .write(&deployments(), &deployment, key, &request)
            .await?;
        let requested = Requested {
            action: name.into(),
            on: vec![on],
            request,
        };
        self.told(namespace, set, &requested);
        Ok(requested)
    }

    /// Every failed instance of a set runs its failed list again.
    async fn retry_all(
        &self,
        namespace: &str,
        set: &str,
        request: Request,
    ) -> Result<Requested, ServiceError> {
        let mut on = Vec::new();
        let mut last = request.clone();
        for vm in self.members(namespace, set).await? {
            let Ok(recorded) = Recorded::read(&vm) else {
                continue;
            };
            if let Some(stage) = failed_stage(&recorded) {
                let mut request = request.clone();
                request.stage = Some(stage);
                on.push(
                    self.write(&servers(), &vm, requests::RETRY, &request)
                        .await?,
                );
                last = request;
            }
        }
        if on.is_empty() {
            return Err(ServiceError::Conflict(format!(
                "no instance of VMReplicaSet {namespace}/{set} has failed"
            )));
        }
        let requested = Requested {
            action: "retry".into(),
            on,
            request: Request {
                stage: None,
                ..last
            },
        };
        self.told(namespace, set, &requested);
        Ok(requested)
    }

    /// A person acts on one instance of a set.
    pub async fn act_on_instance(
        &self,
        (namespace, set, name): (&str, &str, &str),
        action: InstanceAction,
        asked: &ActionRequest,
    ) -> Result<Requested, ServiceError> {
        again_if_changed(|| self.act_on_instance_once((namespace, set, name), action, asked)).await
    }

    async fn act_on_instance_once(
        &self,
        (namespace, set, name): (&str, &str, &str),
        action: InstanceAction,
        asked: &ActionRequest,
    ) -> Result<Requested, ServiceError> {
        let mut request = person(asked)?;
        let vm = self.member(namespace, set, name).await?;
        let recorded = Recorded::read(&vm).map_err(|problem| {
            ServiceError::Conflict(format!("the instance's Server does not read: {problem}"))
        })?;
        let running = recorded
            .list
            .as_ref()
            .filter(|l| l.outcome == ListOutcome::Running);
        let failed = recorded
            .list
            .as_ref()
            .filter(|l| l.outcome == ListOutcome::Failed);
        let (verb, key) = match action {
            InstanceAction::Retry => {
                request.stage = Some(failed_stage(&recorded).ok_or_else(|| {
                    ServiceError::Conflict(format!("{name} has no failed list to run again"))
                })?);
                // A failed list that is the instance's still (a clean-up
                // held on its failed step) runs on from that step.
                request.list = failed.map(|l| l.number);
                ("retry", requests::RETRY)
            }
            InstanceAction::Skip => {
                let list = running
                    .filter(|l| !l.awaiting_approval())
                    .or(failed)
                    .ok_or_else(|| {
                        ServiceError::Conflict(format!(
                            "{name} runs no step to skip, and no list of it stopped at a failed step"
                        ))
                    })?;
                let task = list
                    .tasks
                    .get(list.step)
                    .map(|t| t.name.clone())
                    .unwrap_or_default();
                if let Some(seen) = &asked.task
                    && *seen != task
                {
                    return Err(ServiceError::Conflict(format!(
                        "{name} is at {task} now, not {seen}: nothing skipped"
                    )));
                }
                request.list = Some(list.number);
                request.step = Some(list.step + 1);
                ("skip", requests::SKIP)
            }
            InstanceAction::Force | InstanceAction::Lift => {
                return self.force(&vm, action, request, asked).await;
            }
            InstanceAction::Approve => {
                let list = running.filter(|l| l.awaiting_approval()).ok_or_else(|| {
                    ServiceError::Conflict(format!("{name} has no list waiting for approval"))
                })?;
                request.list = Some(list.number);
                ("approve", requests::APPROVE)
            }
        };
        let on = self.write(&servers(), &vm, key, &request).await?;
        let requested = Requested {
            action: verb.into(),
            on: vec![on],
            request,
        };
        self.told(namespace, set, &requested);
        Ok(requested)
    }
}

impl Service {
    /// Write a person's forced stage into the instance's Server's spec
    /// (`Force`), or take it out (`Lift`), on the version read.
    async fn force(
        &self,
        server: &Value,
        action: InstanceAction,
        mut request: Request,
        asked: &ActionRequest,
    ) -> Result<Requested, ServiceError> {
        let namespace = text(server, "/metadata/namespace").unwrap_or_default();
        let name = text(server, "/metadata/name").unwrap_or_default();
        let set = text(server, "/spec/replicaSet").unwrap_or_default();
        let force = match action {
            InstanceAction::Force => {
                let asked_stage = asked.stage.as_deref().unwrap_or_default();
                let stage = Stage::from_wit_name(asked_stage).ok_or_else(|| {
                    ServiceError::Invalid(format!(
                        "stage `{}` is none of {}",
                        crate::text::printable(asked_stage),
                        Stage::NAMES.join(", ")
                    ))
                })?;
                request.stage = Some(stage);
                json!({
                    "stage": stage.wit_name(),
                    "by": request.by,
                    "why": Some(&request.why).filter(|w| !w.is_empty()),
                    "at": rfc3339(request.at),
                })
            }
            _ => {
                if server["spec"]["force"].is_null() {
                    return Err(ServiceError::Conflict(format!(
                        "no stage is forced on {name}: nothing to lift"
                    )));
                }
                Value::Null
            }
        };
        let patch = json!({
            "metadata": {"resourceVersion": server["metadata"]["resourceVersion"]},
            "spec": {"force": force},
        });
        Api::<DynamicObject>::namespaced_with(self.client.clone(), &namespace, &servers())
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api_error)?;
        let requested = Requested {
            action: match action {
                InstanceAction::Force => "force",
                _ => "lift",
            }
            .into(),
            on: vec![format!("Server/{namespace}/{name}")],
            request,
        };
        self.told(&namespace, &set, &requested);
        Ok(requested)
    }
}

/// The stage of an instance's failed list, when its last list failed (the
/// policy may have moved it to `failed` since).
fn failed_stage(recorded: &Recorded) -> Option<Stage> {
    recorded
        .all_lists()
        .into_iter()
        .find(|l| !(l.stage == Stage::Failed && l.outcome == Outcome::Succeeded))
        .filter(|l| l.outcome == Outcome::Failed)
        .map(|l| l.stage)
}

/// A person's request, checked as the document says: who, with something
/// other than white space, at most 256 characters; why at most 4096.
fn person(asked: &ActionRequest) -> Result<Request, ServiceError> {
    if !crate::tasks::model::names_someone(&asked.by) {
        return Err(ServiceError::Invalid("by must say who asks".into()));
    }
    for (field, text) in [
        ("by", Some(asked.by.as_str())),
        ("why", asked.why.as_deref()),
    ] {
        if let Some(c) = text.and_then(crate::tasks::model::reordering) {
            return Err(ServiceError::Invalid(format!(
                "{field} {}",
                crate::tasks::model::reordering_message(c)
            )));
        }
    }
    for (field, text, max) in [
        ("by", Some(asked.by.as_str()), 256),
        ("why", asked.why.as_deref(), 4096),
    ] {
        let length = text.map_or(0, |t| t.chars().count());
        if length > max {
            return Err(ServiceError::Invalid(format!(
                "{field} is {length} characters long; at most {max}"
            )));
        }
    }
    Ok(Request::new(
        &asked.by,
        asked.why.as_deref().unwrap_or_default(),
        now(),
    ))
}
