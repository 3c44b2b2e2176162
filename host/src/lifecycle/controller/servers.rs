//! One instance as the set's reconcile reads it (its Server, machine,
//! node and what people asked), and its Server's status as its controller
//! alone writes it: recorded on the version read, put back when someone
//! else wrote it, released when its clean-up ran.

use super::*;

/// An instance's node as the lifecycle policy sees it: a node within its
/// grace period is waited out; one out of contact, or back but not yet
/// trusted, is unknown.
pub(super) fn node_health(health: Option<Health>) -> NodeHealth {
    match health {
        None | Some(Health::Healthy | Health::Suspect) => NodeHealth::Healthy,
        Some(Health::Unknown | Health::Recovering) => NodeHealth::Unknown,
        Some(Health::Offline) => NodeHealth::Offline,
    }
}

/// One instance of a set, as read: its Server and its machine.
pub(super) struct Read {
    pub(super) name: String,
    /// The set names it offline, or failover marked it lost in a set that
    /// scales down on a lost instance: drained, it goes.
    pub(super) named_offline: bool,
    /// Failover marked it lost, in a set that scales down on a lost
    /// instance: drained, its machine goes and its Server stays, offline,
    /// out of the set's count, until a person deletes it.
    pub(super) lost: bool,
    /// The Server's UID: part of every step's key.
    pub(super) uid: String,
    pub(super) resource_version: String,
    pub(super) generation: Option<i64>,
    /// The store shows it as it was before this controller's last write:
    /// it is not moved on until the store has that write.
    pub(super) stale: bool,
    /// The status this leader wrote last, when the store shows another:
    /// someone else wrote it, and it is put back.
    pub(super) overwritten: Option<Arc<ServerStatus>>,
    pub(super) recorded: Result<Recorded, String>,
    /// The Server as read.
    pub(super) server: Arc<ServerResource>,
    pub(super) state: InstanceState,
    pub(super) created: Timestamp,
    /// Whether its Server is being deleted.
    pub(super) deleted: bool,
    /// Its VirtualMachine, when there is one.
    pub(super) machine: Option<MachineRead>,
    /// Its node is `Ready` as failover last saw it (a node within its
    /// grace is not): the rollout counts the instance unavailable at once.
    pub(super) node_ready: bool,
    /// The stage a person forced (through the Server's spec, or a retry
    /// of a list left behind) that it has not entered yet.
    pub(super) forced: Option<Forced>,
}

impl Read {
    /// What the instance should have, as its Server's spec says it: the
    /// target the set's controller wrote, and whether it may leave service
    /// for it now. One on its way out keeps what it has (its clean-up or
    /// its drain runs); one whose target the set has not written yet waits.
    pub(super) fn target(&self) -> Option<model::TargetState> {
        if rollout::leaving(&self.state) {
            return Some(model::TargetState {
                environment: self.state.environment.clone(),
                code: self.state.code.clone(),
                may_disrupt: true,
                released: true,
            });
        }
        let spec = &self.server.spec;
        Some(model::TargetState {
            environment: spec
                .environment
                .iter()
                .map(|p| model::Package {
                    name: p.name.clone(),
                    version: p.version.clone(),
                })
                .collect(),
            code: spec.code.clone(),
            may_disrupt: spec.may_disrupt?,
            released: spec.released.unwrap_or(false),
        })
    }
}

/// An instance's VirtualMachine, as read.
pub(super) struct MachineRead {
    /// The version read.
    pub(super) version: Option<String>,
    pub(super) finalizers: Vec<String>,
    pub(super) deleted: bool,
    /// Its printable status.
    pub(super) printable: Option<String>,
}

/// The stage a person forced on an instance that has not entered it yet:
/// the request in its Server's spec not taken yet, else a retry of a list
/// left behind, made after the instance entered its stage.
pub(super) fn forced(recorded: &Recorded) -> Option<Forced> {
    if let Some(force) = recorded.force_pending() {
        return Some(Forced {
            stage: force.stage,
            who: format!("forced by {}", force.who()),
            force: Some(force.clone()),
        });
    }
    let since = recorded.since.unwrap_or(0);
    // A retry of a list that is still the instance's runs that list on
    // (see `Controller::step`); one of a list left behind enters its stage
    // again.
    recorded
        .retry
        .as_ref()
        .filter(|r| r.at > since && r.list.is_none())
        .and_then(|r| {
            Some(Forced {
                stage: r.stage?,
                who: format!("retried by {}", r.who()),
                force: None,
            })
        })
}

/// A stage a person forced on an instance: by whom, and the request in the
/// Server's spec that asked for it (none for a retry).
pub(super) struct Forced {
    pub(super) stage: Stage,
    pub(super) who: String,
    pub(super) force: Option<instance::Force>,
}

/// A status this leader wrote: the term it was written in, the resource
/// version the write gave, and the status as JSON text.
pub(super) struct Written {
    term: u64,
    version: Option<String>,
    status: Box<[u8]>,
}

/// The leader that writes a Server's status, as the status says it
/// (`replica/term`): the chart's admission policy lets a status be written
/// only in the term the Lease holds, so that a deposed leader's late write
/// is refused by the API server itself.
pub(super) fn writer(leadership: &Leadership) -> Option<String> {
    leadership
        .acting()
        .map(|term| format!("{}/{}", term.holder, term.term))
}

/// Whether two statuses differ in nothing but their writer.
pub(super) fn same_but_writer(a: &ServerStatus, b: &ServerStatus) -> bool {
    ServerStatus {
        writer: b.writer.clone(),
        ..a.clone()
    } == *b
}

/// The conditions of a status keep the time they last changed, when they
/// hold what they held before.
pub(super) fn keep_transitions(previous: Option<&ServerStatus>, next: &mut ServerStatus) {
    let Some(previous) = previous else { return };
    for condition in &mut next.conditions {
        if let Some(old) = previous
            .conditions
            .iter()
            .find(|o| o.type_ == condition.type_ && o.status == condition.status)
        {
            condition.last_transition_time = old.last_transition_time.clone();
        }
    }
}

/// How the Servers' statuses are written: by their controller's field
/// manager.
pub(super) fn status_params() -> PostParams {
    PostParams {
        field_manager: Some(STATUS_MANAGER.into()),
        ..PostParams::default()
    }
}

/// Who last wrote a Server's status other than its controller, as the API
/// server's field managers say (none where it keeps none).
pub(super) fn status_writer(server: &ObjectMeta) -> Option<String> {
    server
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .filter(|f| f.manager.as_deref() != Some(STATUS_MANAGER))
        .max_by_key(|f| f.time.as_ref().map(|t| t.0))
        .and_then(|f| f.manager.as_deref())
        .map(crate::text::printable)
}

/// What differs between two statuses, field by field, in words (a few
/// fields; texts shortened).
pub(super) fn changes(ours: &Value, theirs: &Value) -> String {
    let short = |value: &Value| {
        let text = match value {
            Value::Null => "nothing".to_string(),
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let text = crate::text::printable(&text);
        match text.chars().count() > 40 {
            true => format!("{}…", text.chars().take(40).collect::<String>()),
            false => text,
        }
    };
    let keys: std::collections::BTreeSet<&String> = ours
        .as_object()
        .into_iter()
        .chain(theirs.as_object())
        .flat_map(|o| o.keys())
        .collect();
    let changed: Vec<String> = keys
        .into_iter()
        .filter(|k| ours.get(*k) != theirs.get(*k))
        .map(|k| {
            let (was, is) = (
                ours.get(k).unwrap_or(&Value::Null),
                theirs.get(k).unwrap_or(&Value::Null),
            );
            match (was, is) {
                (Value::Object(_) | Value::Array(_), _)
                | (_, Value::Object(_) | Value::Array(_)) => {
                    format!("{k} changed")
                }
                _ => format!("{k} {} → {}", short(was), short(is)),
            }
        })
        .collect();
    match changed.len() {
        0 => "nothing it reads changed".into(),
        n if n > 6 => format!("{}, and {} more", changed[..6].join(", "), n - 6),
        _ => changed.join(", "),
    }
}

impl Controller {
    /// The instances of a set, as the stores have them: each Server with
    /// what it records, its machine, the node its instance runs on (an
    /// instance whose node is not known is not judged on a healthy one)
    /// and what people forced.
    pub(super) fn read_machines(
        &self,
        set: &VmReplicaSet,
        scope: &Scope,
        health: &BTreeMap<String, Health>,
    ) -> Result<Vec<Read>, Unread> {
        let listed = scope.servers.of_set(&set.namespace, &set.name)?;
        listed
            .iter()
            .map(|server| self.read_server(set, scope, server, health))
            .collect()
    }

    /// One instance of a set, as the stores have it: its Server with what
    /// it records, its machine, the node its instance runs on and what
    /// people forced.
    pub(super) fn read_server(
        &self,
        set: &VmReplicaSet,
        scope: &Scope,
        server: &Arc<ServerResource>,
        health: &BTreeMap<String, Health>,
    ) -> Result<Read, Unread> {
        let term = self.leadership.acting().map(|t| t.term);
        scope.machines.check()?;
        scope.instances.check()?;
        let node_of = |name: &str| -> Option<String> {
            let vmi = scope
                .instances
                .store
                .get(&scope.instances.reference(&set.namespace, name))?;
            Some(vmi.data["status"]["nodeName"].as_str()?.to_string())
        };
        let name = server.metadata.name.clone().unwrap_or_default();
        let recorded = Recorded::of_server(server);
        let vm = scope
            .machines
            .store
            .get(&scope.machines.reference(&set.namespace, &name));
        let vm_value = vm
            .as_ref()
            .map(|vm| serde_json::to_value(&**vm).unwrap_or_default());
        let machine = vm_value.as_ref().map_or(
            crate::wit::lifecycle::Machine::Starting,
            instance::machine_of,
        );
        let node = vm.as_ref().and_then(|_| node_of(&name));
        // A machine said to run with no instance placed on a node
        // (its status not yet caught up with a fenced or new
        // instance) is starting: nothing runs on it yet.
        let machine = match (machine, &node) {
            (crate::wit::lifecycle::Machine::Running, None) => {
                crate::wit::lifecycle::Machine::Starting
            }
            (machine, _) => machine,
        };
        let node_seen = node.as_ref().and_then(|n| health.get(n)).copied();
        let at_rest = recorded.clone().unwrap_or_default();
        let forced = forced(&at_rest);
        // A person's `offline` holds while it is in force: the
        // policy sees the instance taken offline, as one the set
        // names, and no rule brings it back.
        let held_offline = at_rest.held_offline();
        let lost = set.lost == crate::lifecycle::resources::Lost::ScaleDown
            && server
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(crate::observe::resources::kubevirt::LOST));
        let named_offline = set.offline.contains(&name) || lost;
        let deleted = server.metadata.deletion_timestamp.is_some();
        let machine_read = vm.as_ref().map(|vm| MachineRead {
            version: vm.metadata.resource_version.clone(),
            finalizers: vm.metadata.finalizers.clone().unwrap_or_default(),
            deleted: vm.metadata.deletion_timestamp.is_some(),
            printable: vm.data["status"]["printableStatus"]
                .as_str()
                .map(String::from),
        });
        let state = InstanceState {
            namespace: set.namespace.clone(),
            name: name.clone(),
            set: set.name.clone(),
            stage: at_rest.stage,
            since: at_rest.since.unwrap_or(0),
            machine,
            node: node.clone(),
            node_health: node_health(node_seen),
            environment: at_rest.environment.clone(),
            code: at_rest.code.clone(),
            lists: at_rest.all_lists(),
            // Its Server deleted, or its machine deleted by hand
            // (not one let go of as lost).
            deleting: deleted || (!lost && machine_read.as_ref().is_some_and(|m| m.deleted)),
            take_offline: named_offline || held_offline,
            forced: forced.as_ref().map(|f| f.stage),
        };
        let stale = {
            let mut written = lock(&self.written);
            let key = format!("{}/{name}", set.namespace);
            let stale = written.get(&key).is_some_and(|replaced| {
                server
                    .metadata
                    .resource_version
                    .as_ref()
                    .is_some_and(|v| replaced.contains(v))
            });
            if !stale {
                written.remove(&key);
            }
            stale
        };
        let overwritten = (!stale)
            .then(|| {
                let ours = lock(&self.ours);
                let written = ours
                    .get(&format!("{}/{name}", set.namespace))
                    .filter(|w| Some(w.term) == term)?;
                // The store shows that very write: nothing to compare.
                if written.version.is_some() && written.version == server.metadata.resource_version
                {
                    return None;
                }
                let present = serde_json::to_vec(&server.status).ok()?;
                (*written.status != *present)
                    .then(|| serde_json::from_slice::<ServerStatus>(&written.status).ok())
                    .flatten()
            })
            .flatten()
            .map(Arc::new);
        Ok(Read {
            name,
            overwritten,
            named_offline,
            lost,
            uid: server.metadata.uid.clone().unwrap_or_default(),
            resource_version: server.metadata.resource_version.clone().unwrap_or_default(),
            generation: server.metadata.generation,
            stale,
            recorded,
            server: Arc::clone(server),
            state,
            created: server
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_millisecond())
                .unwrap_or(0),
            deleted,
            machine: machine_read,
            node_ready: matches!(node_seen, None | Some(Health::Healthy)),
            forced,
        })
    }
    /// Write what an instance records in its Server's status, on the
    /// version it was read at: a compare-and-swap, which a change since
    /// fails.
    pub(super) async fn record(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
        recorded: &Recorded,
    ) -> Result<(), kube::Error> {
        let observed = instance::Observed {
            machine: machine.machine.as_ref().and_then(|m| m.printable.clone()),
            // What the store shows of its machine; none while it shows none.
            machine_state: machine.machine.as_ref().map(|_| machine.state.machine),
            node: machine.state.node.clone(),
            ready: rollout::in_service(recorded.stage)
                && machine.state.machine == crate::wit::lifecycle::Machine::Running
                && machine.state.node_health == NodeHealth::Healthy
                && machine.node_ready,
            step_key: recorded
                .list
                .as_ref()
                .map(|l| l.key(&set.namespace, &machine.name, &machine.uid)),
            generation: machine.generation,
            writer: writer(&self.leadership),
        };
        let previous = machine.server.status.as_ref();
        let conditions = crate::lifecycle::resources::server_conditions(
            recorded,
            (
                machine.state.machine == crate::wit::lifecycle::Machine::Running,
                machine.state.node_health == NodeHealth::Healthy && machine.node_ready,
            ),
            machine.generation.unwrap_or(0),
            now(),
        );
        let mut status = recorded.status(&observed, conditions);
        keep_transitions(previous, &mut status);
        // Written only when something but its writer changed: a new
        // leader does not write every Server again to sign it.
        if previous.is_some_and(|p| same_but_writer(p, &status)) {
            return Ok(());
        }
        self.log_finished(set, machine, &recorded.finished).await;
        let mut server = (*machine.server).clone();
        server.status = Some(status);
        let written = Api::<ServerResource>::namespaced(self.writer.clone(), &set.namespace)
            .replace_status(&machine.name, &status_params(), &server)
            .await?;
        self.wrote(&set.namespace, &machine.name, &machine.resource_version);
        self.keep_ours(&set.namespace, &machine.name, &written);
        Ok(())
    }

    /// Keep the lists an instance finished in the task log, before the
    /// status that sums them up is written. A log that cannot be written
    /// is said, and the delivery goes on: the Server's summary stays.
    async fn log_finished(&self, set: &VmReplicaSet, machine: &Read, finished: &[LogEntry]) {
        let Some(history) = &self.history else { return };
        let rows = finished
            .iter()
            .filter_map(|entry| {
                Some(crate::history::tasklog::ListRow {
                    namespace: set.namespace.clone(),
                    server: machine.name.clone(),
                    uid: machine.uid.clone(),
                    number: entry.number,
                    finished: entry.finished.unwrap_or(entry.started),
                    entry: serde_json::to_string(entry).ok()?,
                })
            })
            .collect();
        if let Err(error) = history.log_lists(rows).await {
            tracing::warn!(
                namespace = set.namespace,
                instance = machine.name,
                %error,
                "VM delivery: finished lists were not kept in the task log (the Server sums them up)"
            );
        }
    }

    /// Put back each status someone other than this leader wrote since it
    /// wrote its own (a status is its controller's alone: a person forces a
    /// stage through the Server's spec), saying so in a warning and an
    /// Event; whether any was.
    pub(super) async fn put_back(
        &self,
        set: &VmReplicaSet,
        read: &[Read],
    ) -> Result<bool, kube::Error> {
        let mut any = false;
        for machine in read {
            let Some(ours) = &machine.overwritten else {
                continue;
            };
            let by = status_writer(&machine.server.metadata)
                .unwrap_or_else(|| "someone other than its controller".into());
            let value =
                |status: Option<&ServerStatus>| serde_json::to_value(status).unwrap_or_default();
            let changed = changes(&value(Some(ours)), &value(machine.server.status.as_ref()));
            let mut server = (*machine.server).clone();
            server.status = Some((**ours).clone());
            let written = Api::<ServerResource>::namespaced(self.writer.clone(), &set.namespace)
                .replace_status(&machine.name, &status_params(), &server)
                .await?;
            self.wrote(&set.namespace, &machine.name, &machine.resource_version);
            self.keep_ours(&set.namespace, &machine.name, &written);
            tracing::warn!(
                namespace = set.namespace,
                instance = machine.name,
                by,
                changed,
                "VM delivery: a Server's status written by someone else is put back"
            );
            self.tell(
                set,
                json!({"instance": machine.name, "event": "status-restored", "by": by, "changed": changed}),
            );
            any = true;
        }
        Ok(any)
    }

    /// Keep the status of a Server this leader wrote, as the API server
    /// took it.
    pub(super) fn keep_ours(&self, namespace: &str, name: &str, written: &ServerResource) {
        let Some(term) = self.leadership.acting().map(|t| t.term) else {
            return;
        };
        let Ok(text) = serde_json::to_vec(&written.status) else {
            return;
        };
        lock(&self.ours).insert(
            format!("{namespace}/{name}"),
            Written {
                term,
                version: written.metadata.resource_version.clone(),
                status: text.into(),
            },
        );
    }

    /// Keep that a write replaced the Server `name` at `version`.
    pub(super) fn wrote(&self, namespace: &str, name: &str, version: &str) {
        lock(&self.written)
            .entry(format!("{namespace}/{name}"))
            .or_default()
            .push(version.to_string());
    }

    /// Let an instance's machine go: deleted, and its clean-up finalizer
    /// released (the instance's clean-up ran, or it was lost and drained).
    pub(super) async fn let_machine_go(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
    ) -> Result<(), kube::Error> {
        if let Some(vm) = &machine.machine {
            return self
                .let_go_of(
                    &machines(),
                    (&set.namespace, &machine.name, vm.version.as_deref()),
                    (vm.deleted, &vm.finalizers),
                )
                .await;
        }
        // None in the store: one made that the store has not shown yet is
        // looked up (listed by name: what the delivery may read), and let
        // go when it is this Server's — never left behind, held by its
        // finalizer, when its Server goes.
        let api =
            Api::<DynamicObject>::namespaced_with(self.reader.clone(), &set.namespace, &machines());
        let named =
            kube::api::ListParams::default().fields(&format!("metadata.name={}", machine.name));
        let Some(vm) = api.list(&named).await?.items.into_iter().next() else {
            return Ok(());
        };
        let ours = vm
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "Server" && o.uid == machine.uid);
        if !ours {
            return Ok(());
        }
        self.let_go_of(
            &machines(),
            (
                &set.namespace,
                &machine.name,
                vm.metadata.resource_version.as_deref(),
            ),
            (
                vm.metadata.deletion_timestamp.is_some(),
                vm.metadata.finalizers.as_deref().unwrap_or_default(),
            ),
        )
        .await
    }

    /// Delete an object (unless it is being deleted) and release its
    /// clean-up finalizer (when it holds it), on the version read or the
    /// one the deletion gave (a compare-and-swap: finalizers someone added
    /// meanwhile are not dropped); one gone already is done.
    pub(super) async fn let_go_of(
        &self,
        resource: &ApiResource,
        (namespace, name, version): (&str, &str, Option<&str>),
        (deleted, finalizers): (bool, &[String]),
    ) -> Result<(), kube::Error> {
        let mut version = version.map(String::from);
        if !deleted {
            let api =
                Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, resource);
            match api.delete(name, &DeleteParams::default()).await {
                // Held by a finalizer: going, at this version.
                Ok(answer) => match answer.left() {
                    Some(going) => version = going.metadata.resource_version,
                    None => return Ok(()),
                },
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                Err(error) => return Err(error),
            }
        }
        if finalizers.iter().any(|f| f == instance::FINALIZER) {
            gone_is_done(
                self.patch_metadata(
                    resource,
                    namespace,
                    name,
                    json!({ "resourceVersion": version, "finalizers": without(finalizers) }),
                )
                .await,
            )?;
        }
        Ok(())
    }

    /// An instance cleaned up: its machine goes (its Server's finalizer is
    /// released next, by the Server's controller), and nothing of it is
    /// kept.
    pub(super) async fn release(
        &self,
        set: &VmReplicaSet,
        machine: &Read,
    ) -> Result<(), kube::Error> {
        tracing::info!(
            namespace = set.namespace,
            instance = machine.name,
            "VM delivery: cleaned up; the machine and its Server go"
        );
        self.let_machine_go(set, machine).await?;
        // Gone: nothing of it to wait for.
        let key = format!("{}/{}", set.namespace, machine.name);
        lock(&self.written).remove(&key);
        lock(&self.ours).remove(&key);
        lock(&self.planned).remove(&key);
        lock(&self.refused).remove(&key);
        Ok(())
    }
}
