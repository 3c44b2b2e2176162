//! What the failover policy is asked: every node, the pods on the nodes
//! that may need a decision, the previous decisions and the overrides in
//! force; and the call itself, off the async threads.

use super::{Arc, Decided, Failover, Health, Memory, Override, World, types, wit};
use crate::observe::Snapshot;
use crate::observe::resources::{Generic, kubevirt};

impl Failover {
    /// The policy's input: every node, the pods on the nodes that may need
    /// a decision about their pods (not ready, overridden, or not healthy
    /// last time), the previous decisions and the overrides in force.
    pub(super) fn input(&self, memory: &Memory, at: types::Timestamp) -> wit::FailoverInput {
        let snapshot = self.observed.read();
        let nodes: Vec<types::Node> = snapshot.nodes.values().cloned().collect();
        let watched: Vec<&str> = nodes
            .iter()
            .filter(|n| {
                n.ready != types::ConditionStatus::True
                    || memory.overrides.contains_key(&n.name)
                    || memory
                        .previous
                        .get(&n.name)
                        .is_some_and(|d| d.health != Health::Healthy)
            })
            .map(|n| n.name.as_str())
            .collect();
        // With every node ready and nothing overridden (the usual case), no
        // pod needs looking at.
        let (placements, instances) = placed(&snapshot, &watched);
        wit::FailoverInput {
            nodes,
            placements,
            instances,
            previous: memory.previous.values().map(Decided::to_wit).collect(),
            overrides: memory
                .overrides
                .values()
                .filter(|o| o.active(at))
                .map(Override::to_wit)
                .collect(),
        }
    }

    /// Ask the failover policy, off the async threads.
    pub(super) async fn decide(
        &self,
        input: Arc<wit::FailoverInput>,
        at: types::Timestamp,
    ) -> Result<(Vec<wit::NodeDecision>, String), String> {
        let registry = Arc::clone(&self.registry);
        let shadows = self.shadows.get().cloned();
        tokio::task::spawn_blocking(move || {
            let slot = registry
                .policy(World::Failover)
                .map_err(|e| e.to_string())?;
            let answer = slot
                .call(|version| version.decide(&version.context(at), &input))
                .map_err(|e| e.to_string())?;
            let info = answer.version.info();
            let policy = format!("{}@{}", info.name, info.version);
            let slots = registry.shadows(World::Failover);
            if let Some(shadows) = shadows.filter(|_| !slots.is_empty()) {
                let by_node =
                    |decisions: &[wit::NodeDecision]| -> Vec<(String, serde_json::Value)> {
                        decisions
                            .iter()
                            .map(|d| (d.node.clone(), serde_json::to_value(d).unwrap_or_default()))
                            .collect()
                    };
                let active = by_node(&answer.value).into_iter().collect();
                let job = crate::shadow::job(
                    slots.clone(),
                    policy.clone(),
                    at,
                    active,
                    move |version, ctx| Ok(by_node(&version.decide(ctx, &input)?)),
                );
                shadows.offer(&slots, job);
            }
            Ok((answer.value, policy))
        })
        .await
        .unwrap_or_else(|e| Err(format!("the failover call panicked: {e}")))
    }
}

/// The pods and VM instances on the `watched` nodes (none watched: none
/// looked at), in the order of their names.
pub(crate) fn placed(
    snapshot: &Snapshot,
    watched: &[&str],
) -> (Vec<wit::Placement>, Vec<wit::InstancePlacement>) {
    let mut placements: Vec<wit::Placement> = watched
        .iter()
        .flat_map(|node| snapshot.pods_on_node(node).map(move |p| (*node, p)))
        .filter(|(_, p)| p.deleting_since().is_none())
        .map(|(node, p)| {
            let workload = p.owner().and_then(|(kind, name)| {
                Some(wit::WorkloadRef {
                    kind: crate::observe::workload_kind_named(kind)?,
                    namespace: p.namespace().to_string(),
                    name: name.to_string(),
                })
            });
            let workload_replicas = workload.as_ref().and_then(|w| {
                snapshot
                    .workload(w.kind, &w.namespace, &w.name)
                    .map(|w| w.desired_replicas)
            });
            wit::Placement {
                namespace: p.namespace().to_string(),
                pod: p.name().to_string(),
                node: node.to_string(),
                stateful: p.owner().is_some_and(|(kind, _)| kind == "StatefulSet"),
                workload,
                workload_replicas,
            }
        })
        .collect();
    placements.sort_by(|a, b| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)));
    let instances = if watched.is_empty() {
        Vec::new()
    } else {
        instances_on(snapshot, watched)
    };
    (placements, instances)
}

/// The instances of virtual machines on the watched nodes, with what
/// starts them again, their pool or replica set, and whether a disk of
/// theirs may be written from one node only.
fn instances_on(snapshot: &Snapshot, watched: &[&str]) -> Vec<wit::InstancePlacement> {
    let set_of = |o: &Generic| -> Option<wit::SetRef> {
        let (kind, name) = o.owner.as_ref()?;
        let set = if kubevirt::SETS.contains(&kind.as_str()) {
            snapshot.object_named(kind, &o.namespace, name)?
        } else if kind == kubevirt::VM {
            let vm = snapshot.object_named(kind, &o.namespace, name)?;
            let (kind, name) = vm
                .owner
                .as_ref()
                .filter(|(k, _)| kubevirt::SETS.contains(&k.as_str()))?;
            snapshot.object_named(kind, &o.namespace, name)?
        } else {
            return None;
        };
        Some(wit::SetRef {
            namespace: set.namespace.clone(),
            kind: set.kind.clone(),
            name: set.name.clone(),
            replicas: set.spec_value()["replicas"].as_u64().unwrap_or(1) as u32,
        })
    };
    snapshot
        .objects
        .values()
        .filter(|o| o.kind == kubevirt::VMI && o.deleting_since.is_none())
        .filter_map(|o| {
            let node = o.node.as_deref().filter(|n| watched.contains(n))?;
            let claims = o.spec_value()["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v.get("persistentVolumeClaim").is_some() || v.get("dataVolume").is_some());
            let migratable = o
                .conditions
                .iter()
                .any(|c| c.kind == "LiveMigratable" && c.status == types::ConditionStatus::True);
            Some(wit::InstancePlacement {
                namespace: o.namespace.clone(),
                name: o.name.clone(),
                node: node.to_string(),
                owner: o.owner.as_ref().map(|(kind, name)| types::Owner {
                    kind: kind.clone(),
                    name: name.clone(),
                }),
                set: set_of(o),
                exclusive_disk: claims && !migratable,
            })
        })
        .collect()
}
