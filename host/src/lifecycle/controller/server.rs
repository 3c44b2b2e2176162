//! The Server's controller: each instance reconciles itself, as Cluster
//! API's Machine does — its set read (or, for a clean-up whose set is gone,
//! known by name), what is observed of its machine and node, a status
//! someone else wrote put back, its machine made, then a person's request,
//! the step's hook or the lifecycle policy, and one write of its status.
//! What it should have and whether it may leave service for it now are
//! what its spec says: the set's controller writes them, at the set's safe
//! rate. A deleted instance runs its clean-up here, and lets its machine
//! and itself go when the clean-up is done.

use super::*;

/// How long an instance at rest waits to be looked at again when nothing
/// it depends on changes before (its Server, machine, instance, set, the
/// nodes' health or a plugin).
pub(super) const SERVER_AT_REST: Duration = Duration::from_secs(300);

/// How many instances are moved on at once: a slow write holds only its
/// own instance.
pub(super) const SERVERS_AT_ONCE: u16 = 32;

/// What one reconcile of an instance came to.
pub(super) enum Reconciled {
    /// Looked at again as the action says.
    Wait(Action),
    /// Its clean-up ran to its end and its machine is gone: its Server's
    /// finalizer is released.
    CleanedUp,
}

/// A Server reconciled through kube-runtime's finalizer helper: one that
/// lacks the clean-up finalizer gets it first; a deleted one runs its
/// clean-up, and the finalizer is released (a patch that tests it is still
/// where it was read) only once the clean-up ran to its end and its machine
/// is gone.
pub(super) async fn reconcile_server(
    object: Arc<ServerResource>,
    context: Arc<Context>,
) -> Result<Action, Failed> {
    use kube::runtime::finalizer::{Error, Event, finalizer};
    let controller = &context.controller;
    let Some(term) = controller.leadership.acting() else {
        return Ok(Action::requeue(NOT_ACTING));
    };
    let api = Api::<ServerResource>::namespaced(
        controller.writer.clone(),
        object.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let reconciled = finalizer(&api, instance::FINALIZER, object, |event| async {
        let (server, cleaning) = match event {
            Event::Apply(server) => (server, false),
            Event::Cleanup(server) => (server, true),
        };
        match controller
            .reconcile_instance(&server, &context, &term)
            .await?
        {
            Reconciled::CleanedUp => Ok(Action::await_change()),
            Reconciled::Wait(action) if !cleaning => Ok(action),
            Reconciled::Wait(_) => Err(Failed::CleaningUp),
        }
    })
    .await;
    reconciled.map_err(|error| match error {
        Error::ApplyFailed(failed) | Error::CleanupFailed(failed) => failed,
        Error::AddFinalizer(error) | Error::RemoveFinalizer(error) => Failed::Kube(error),
        other => Failed::Finalizer(other.to_string()),
    })
}

/// Whether a Server is being deleted and holds its clean-up.
fn cleaning_up(server: &ServerResource) -> bool {
    server.metadata.deletion_timestamp.is_some()
        && server
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == instance::FINALIZER)
}

impl Controller {
    /// The set an instance belongs to, as it reads. For an instance whose
    /// clean-up runs, a set gone (deleted before it held their clean-up,
    /// or its finalizer taken off by hand) or one that does not read is
    /// known by name: nothing is made of it. None for any other instance
    /// without a set that reads: its set's status says why, or the garbage
    /// collector deletes what its set owned.
    fn set_of_server(
        &self,
        server: &ServerResource,
        scope: &Scope,
    ) -> Result<Option<VmReplicaSet>, Unread> {
        let namespace = server.metadata.namespace.as_deref().unwrap_or_default();
        let Some(name) = set_of(server) else {
            return Ok(None);
        };
        // A set not read is not a set gone.
        let read = scope
            .sets
            .get(namespace, name)?
            .map(|set| VmReplicaSet::read(&serde_json::to_value(&*set).unwrap_or_default()));
        Ok(match read {
            Some(Ok(set)) => Some(set),
            _ if cleaning_up(server) => {
                let owner = server
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.kind == "VMReplicaSet")
                    .map(|o| o.uid.clone())
                    .unwrap_or_default();
                Some(VmReplicaSet::named(namespace, name, &owner))
            }
            _ => None,
        })
    }

    /// The nodes' health, as failover judges them.
    pub(super) fn health(&self) -> Arc<BTreeMap<String, Health>> {
        match &self.failover {
            Some(failover) => failover.health(),
            None => Arc::default(),
        }
    }

    /// One instance reconciled: read, its status put back when someone
    /// else wrote it, its machine made, then moved on by one step; a
    /// deleted one's clean-up ended when it ran to its end.
    async fn reconcile_instance(
        &self,
        server: &Arc<ServerResource>,
        context: &Context,
        term: &Term,
    ) -> Result<Reconciled, Failed> {
        let at = now();
        let scope = &*context.scope;
        let Some(set) = self.set_of_server(server, scope)? else {
            // Deleted with no set it was made by: nothing to clean up.
            return Ok(match server.metadata.deletion_timestamp {
                Some(_) if set_of(&**server).is_none() => Reconciled::CleanedUp,
                _ => Reconciled::Wait(Action::await_change()),
            });
        };
        let health = self.health();
        let read = self.read_server(&set, scope, server, &health)?;
        // Shown as it was before this controller's last write: the store
        // brings the write, and with it the next reconcile.
        if read.stale {
            return Ok(Reconciled::Wait(Action::requeue(self.every)));
        }
        if self.put_back(&set, std::slice::from_ref(&read)).await?
            || self
                .mend_machines(&set, std::slice::from_ref(&read))
                .await?
        {
            return Ok(Reconciled::Wait(Action::requeue(self.every)));
        }
        // A status that does not read is said on its set; a target not
        // planned at this generation is the set's controller's to write.
        let (Ok(recorded), Some(target)) = (read.recorded.clone(), read.target()) else {
            return Ok(Reconciled::Wait(Action::await_change()));
        };
        // The set's controller wakes it once it keeps the write as
        // planned; looked at again soon all the same, should that wake be
        // lost with a reconcile of the set that failed after the write.
        if !rollout::leaving(&read.state) && !self.is_planned(&read) {
            return Ok(Reconciled::Wait(Action::requeue(self.every)));
        }
        // A clean-up that ran to its end lets the machine go; the Server
        // goes next.
        if steps::cleaned_up(&read, &recorded) && instance::may_take(recorded.lock.as_ref(), term) {
            self.release(&set, &read).await?;
            return Ok(Reconciled::CleanedUp);
        }
        let moving = read.state.deleting
            || recorded
                .list
                .as_ref()
                .is_some_and(|l| l.outcome == ListOutcome::Running);
        let stepped = self.step(&set, &read, recorded, &target, term, at).await;
        self.refused(&set, &read.name, stepped.as_ref().err(), context);
        stepped?;
        Ok(Reconciled::Wait(Action::requeue(match moving {
            true => self.every,
            false => SERVER_AT_REST,
        })))
    }

    /// Keep what the API server refused of an instance's last step (said on
    /// its set, and as an Event, when it is new), or that it refuses no
    /// more; its set is looked at again when that changes.
    fn refused(
        &self,
        set: &VmReplicaSet,
        name: &str,
        error: Option<&kube::Error>,
        context: &Context,
    ) {
        let key = format!("{}/{name}", set.namespace);
        let message = error.and_then(refusal);
        let changed = {
            let mut refused = lock(&self.refused);
            let changed = refused.get(&key) != message.as_ref();
            match &message {
                Some(message) => refused.insert(key, message.clone()),
                None => refused.remove(&key),
            };
            changed
        };
        if !changed {
            return;
        }
        if let Some(message) = &message {
            self.tell(
                set,
                json!({"instance": name, "event": "refused", "message": message}),
            );
        }
        let _ = context
            .sets
            .send(context.scope.sets.reference(&set.namespace, &set.name));
    }

    /// Whether an instance's spec holds its set's plan as this leader made
    /// it, at the generation read.
    fn is_planned(&self, read: &Read) -> bool {
        let key = format!("{}/{}", read.state.namespace, read.name);
        read.generation.is_some() && lock(&self.planned).get(&key) == read.generation.as_ref()
    }

    /// What the API server refuses of a set's instances' last steps, by
    /// instance.
    pub(super) fn refusals(&self, set: &VmReplicaSet, read: &[Read]) -> Vec<String> {
        let refused = lock(&self.refused);
        read.iter()
            .filter_map(|m| {
                let message = refused.get(&format!("{}/{}", set.namespace, m.name))?;
                Some(format!("{}: {message}", m.name))
            })
            .collect()
    }
}
