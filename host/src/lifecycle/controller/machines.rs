//! Writes of the set's objects: Servers and VirtualMachines made, adopted
//! and taken over, metadata merged, statuses written whole.

use super::*;

/// The Server a VM is to have.
pub(super) enum ServerFor {
    /// The store shows it, of this UID.
    Has(String),
    /// Made now.
    Made(Box<DynamicObject>),
    /// None of this set's.
    Not,
}

/// Finalizers without the clean-up's.
pub(super) fn without(finalizers: &[String]) -> Vec<String> {
    finalizers
        .iter()
        .filter(|f| f.as_str() != instance::FINALIZER)
        .cloned()
        .collect()
}

/// A deletion or a write of an object that is gone already: done.
pub(super) fn gone_is_done(result: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        other => other,
    }
}

/// A merge patch of a status that makes it `next` whole: each field of
/// `previous` that `next` does not have is removed (a merge patch keeps
/// what it does not name, and an approval of an earlier rollout left in
/// the status would approve the next one).
pub(super) fn replacing(previous: &Value, mut next: Value) -> Value {
    if let (Some(before), Some(after)) = (previous.as_object(), next.as_object_mut()) {
        for key in before.keys() {
            if !after.contains_key(key) {
                after.insert(key.clone(), Value::Null);
            }
        }
    }
    next
}

/// A value without its nulls, as the API server keeps it.
pub(super) fn pruned(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, pruned(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(pruned).collect()),
        other => other,
    }
}

impl Controller {
    /// Merge `metadata` into an object's (a compare-and-swap when it names
    /// the resource version read).
    pub(super) async fn patch_metadata(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        metadata: Value,
    ) -> Result<(), kube::Error> {
        Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, resource)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "metadata": metadata })),
            )
            .await
            .map(drop)
    }

    /// Adopt the VMs of the set's namespace that its selector names and
    /// no controller owns: a Server is made for each (its stage none: the
    /// lifecycle policy takes it from where its machine is), which then
    /// owns it.
    pub(super) async fn adopt(&self, set: &VmReplicaSet, scope: &Scope) -> Result<(), Failed> {
        let named = |vm: &DynamicObject| {
            let labels = vm.metadata.labels.clone().unwrap_or_default();
            vm.metadata.namespace.as_deref() == Some(set.namespace.as_str())
                && !labels.contains_key(instance::SET_LABEL)
                && set.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        };
        let vms =
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), &set.namespace, &machines());
        for vm in scope.machines.filtered(named)? {
            let value = serde_json::to_value(&*vm).unwrap_or_default();
            let name = vm.metadata.name.clone().unwrap_or_default();
            if !crate::lifecycle::resources::adoptable(&value) {
                continue;
            }
            let uid = match self.server_for(set, scope, &name).await? {
                ServerFor::Has(uid) => uid,
                ServerFor::Made(made) => made.metadata.uid.unwrap_or_default(),
                ServerFor::Not => continue,
            };
            let Some(metadata) = set.adoption(&value, Some(&uid)) else {
                continue;
            };
            vms.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "metadata": metadata })),
            )
            .await?;
            tracing::info!(
                namespace = set.namespace,
                set = set.name,
                instance = name,
                "VM delivery: an existing VM is adopted; its Server is made"
            );
            self.tell(set, json!({"instance": name, "event": "adopted"}));
        }
        Ok(())
    }

    /// Take over the VMs the set owns itself, made before instances had
    /// Servers: a Server is made for each, its status what the VM's
    /// annotations recorded (a list in progress runs on), and the Server
    /// owns the VM from then on; one being deleted has its Server deleted
    /// too, so that its clean-up runs. A VM whose annotations do not read is
    /// left as it is, and said once.
    pub(super) async fn take_over(&self, set: &VmReplicaSet, scope: &Scope) -> Result<(), Failed> {
        let legacy = |vm: &Arc<DynamicObject>| {
            vm.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.kind == "VMReplicaSet")
        };
        let servers_api =
            Api::<DynamicObject>::namespaced_with(self.writer.clone(), &set.namespace, &servers());
        let of_set = scope.machines.of_set(&set.namespace, &set.name)?;
        for vm in of_set.into_iter().filter(legacy) {
            let name = vm.metadata.name.clone().unwrap_or_default();
            let annotations = vm.metadata.annotations.clone().unwrap_or_default();
            let status = match instance::legacy_status(&annotations) {
                Ok(status) => status,
                Err(problem) => {
                    let key = format!("take-over/{}/{name}", set.namespace);
                    let mut said = lock(&self.said);
                    if said.get(&key) != Some(&problem) {
                        tracing::warn!(
                            namespace = set.namespace,
                            instance = name,
                            problem,
                            "VM delivery: a VM made before Servers does not read; it is not taken over"
                        );
                        said.insert(key, problem);
                    }
                    continue;
                }
            };
            let uid = match self.server_for(set, scope, &name).await? {
                ServerFor::Has(uid) => uid,
                ServerFor::Not => continue,
                ServerFor::Made(mut made) => {
                    if let Some(status) = status {
                        made.data["status"] = pruned(status);
                        made.data["status"]["writer"] = json!(writer(&self.leadership));
                        *made = servers_api
                            .replace_status(&name, &PostParams::default(), &made)
                            .await?;
                    }
                    if vm.metadata.deletion_timestamp.is_some() {
                        servers_api.delete(&name, &DeleteParams::default()).await?;
                    }
                    made.metadata.uid.unwrap_or_default()
                }
            };
            let mut owners: Vec<Value> = vm
                .metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|o| !(o.controller == Some(true) && o.kind == "VMReplicaSet"))
                .map(|o| serde_json::to_value(o).unwrap_or_default())
                .collect();
            owners.push(crate::lifecycle::resources::server_owner(&name, &uid));
            let mut pointer: serde_json::Map<String, Value> = instance::LEGACY
                .iter()
                .map(|key| (key.to_string(), Value::Null))
                .collect();
            pointer.insert(instance::SERVER.into(), json!(name));
            self.patch_metadata(
                &machines(),
                &set.namespace,
                &name,
                json!({
                    "resourceVersion": vm.metadata.resource_version,
                    "ownerReferences": owners,
                    "annotations": pointer,
                }),
            )
            .await?;
            tracing::info!(
                namespace = set.namespace,
                set = set.name,
                instance = name,
                "VM delivery: a VM made before Servers is taken over by its Server"
            );
        }
        Ok(())
    }

    /// The Server of the set's that a VM named `name` is to have: the one
    /// the store shows, or one made now for it; none when another set's
    /// goes by that name, or when one was made meanwhile (taken once the
    /// store has it).
    pub(super) async fn server_for(
        &self,
        set: &VmReplicaSet,
        scope: &Scope,
        name: &str,
    ) -> Result<ServerFor, Failed> {
        match scope.servers.get(&set.namespace, name)? {
            Some(server) if set_of(&*server) == Some(set.name.as_str()) => Ok(ServerFor::Has(
                server.metadata.uid.clone().unwrap_or_default(),
            )),
            Some(_) => Ok(ServerFor::Not),
            None => {
                let server: DynamicObject =
                    serde_json::from_value(set.server(name, &set.spec.environment, None))
                        .map_err(kube::Error::SerdeError)?;
                match Api::<DynamicObject>::namespaced_with(
                    self.writer.clone(),
                    &set.namespace,
                    &servers(),
                )
                .create(&PostParams::default(), &server)
                .await
                {
                    Ok(made) => Ok(ServerFor::Made(Box::new(made))),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(ServerFor::Not),
                    Err(error) => Err(error.into()),
                }
            }
        }
    }

    /// Make the VirtualMachine of the Server `name` (of UID `uid`).
    pub(super) async fn make_machine(
        &self,
        set: &VmReplicaSet,
        name: &str,
        uid: &str,
    ) -> Result<(), kube::Error> {
        let machine: DynamicObject =
            serde_json::from_value(set.machine(name, uid)).map_err(kube::Error::SerdeError)?;
        match Api::<DynamicObject>::namespaced_with(
            self.writer.clone(),
            &set.namespace,
            &machines(),
        )
        .create(&PostParams::default(), &machine)
        .await
        {
            Ok(_) => Ok(()),
            // Made already: the store has not seen it yet.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(error) => Err(error),
        }
    }

    pub(super) async fn write_status(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        object: &Value,
        mut status: Value,
    ) -> Result<(), kube::Error> {
        status = pruned(status);
        crate::lifecycle::resources::keep_transitions(&object["status"], &mut status);
        if object["status"] == status {
            return Ok(());
        }
        let api = Api::<DynamicObject>::namespaced_with(self.writer.clone(), namespace, resource);
        let written = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": replacing(&object["status"], status)})),
            )
            .await;
        let Some(refused) = written.as_ref().err().and_then(refusal) else {
            return written.map(drop);
        };
        // Refused (too large, invalid): the status says so, in a write
        // small enough to be taken.
        let problem = format!("the status could not be written: {refused}");
        let status = crate::lifecycle::resources::degraded(object, "WriteRefused", &problem, now());
        if let Err(error) = api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": replacing(&object["status"], status)})),
            )
            .await
        {
            tracing::warn!(namespace, name, %error, "VM delivery: not even the refusal could be written in the status");
        }
        written.map(drop)
    }
}
