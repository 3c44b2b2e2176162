//! The default failover policy (seed 002): a short outage waits, a longer one
//! marks the node unknown and moves its stateless pods, an unrecoverable node
//! goes offline and its stateful pods are released only with a person's
//! approval; a node that returns must stay healthy a while before it is
//! trusted again. Manual overrides rank above every rule.
//!
//! For an offline node the `remedy` setting picks the repair: `replace`
//! (the default) asks for a replacement node and releases the stateful
//! pods to run elsewhere; `scale-down` instead shrinks each stateful
//! workload by its members on the node, so the rest carry on without them.
//! Both need a person's approval for what touches stateful workloads.
//!
//! The instances of virtual machines on an offline node (seed 002) are
//! repaired — the node fenced, the instance deleted so that its VM or
//! replica set starts it elsewhere — or, with `scale-down`, their pool or
//! replica set is shrunk by its members on the node. A repair waits for a
//! person when the instance holds a disk only one node may write (it must
//! never run twice); an instance nothing starts again is only reported.

wit_bindgen::generate!({
    world: "failover-policy-encoded",
    path: "../../wit",
    // The encoded input and answer are postcard's encoding of these types.
    additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
});

use exports::verdict::policy::failover::{
    Action, FailoverInput, Guest, InstancePlacement, InstanceRef, NodeDecision, NodeHealth,
    Override, OverrideKind, Placement, ProposedAction, ScaleRequest, SetRef,
};
use std::collections::HashMap;

use verdict::policy::types::{ConditionStatus, Context, Node, PluginInfo, Timestamp, WorkloadKind};

struct Settings {
    /// How long a node may be out of contact before anything is done.
    grace_ms: i64,
    /// How long before an unreachable node is judged offline.
    offline_after_ms: i64,
    /// How long a returning node stays `recovering`.
    stabilize_ms: i64,
    /// What to do for an offline node's stateful workloads.
    remedy: Remedy,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Remedy {
    /// A replacement node, and the stateful pods released elsewhere.
    Replace,
    /// The stateful workloads shrunk by their members on the node.
    ScaleDown,
}

impl Settings {
    fn parse(text: &str) -> Self {
        let value: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        let ms = |key: &str, default: i64| {
            value
                .get(key)
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(default)
        };
        Self {
            grace_ms: ms("grace-ms", 40_000),
            offline_after_ms: ms("offline-after-ms", 5 * 60_000),
            stabilize_ms: ms("stabilize-ms", 2 * 60_000),
            remedy: match value.get("remedy").and_then(serde_json::Value::as_str) {
                Some("scale-down") => Remedy::ScaleDown,
                _ => Remedy::Replace,
            },
        }
    }
}

const SETTINGS_SCHEMA: &str = r#"{"type":"object","additionalProperties":false,"properties":{"grace-ms":{"type":"integer","minimum":0},"offline-after-ms":{"type":"integer","minimum":0},"stabilize-ms":{"type":"integer","minimum":0},"remedy":{"enum":["replace","scale-down"]}}}"#;

struct DefaultFailover;

impl exports::verdict::policy::settings::Guest for DefaultFailover {
    fn validate(settings: String) -> Result<(), String> {
        verdict_settings::check(SETTINGS_SCHEMA, &settings)
    }
}

impl Guest for DefaultFailover {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "default-failover".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Node health with a grace period, stateless eviction and fenced release of stateful pods.".into(),
            settings_schema: Some(SETTINGS_SCHEMA.into()),
        }
    }

    fn decide(ctx: Context, input: FailoverInput) -> Result<Vec<NodeDecision>, String> {
        let settings = Settings::parse(&ctx.settings);
        let by_node = ByNode::of(&input);
        Ok(input
            .nodes
            .iter()
            .map(|node| decide_node(&settings, ctx.now, node, &by_node))
            .collect())
    }
}

impl exports::verdict::policy::failover_encoded::Guest for DefaultFailover {
    fn decide_encoded(ctx: Context, input: Vec<u8>) -> Result<Vec<u8>, String> {
        let input: FailoverInput =
            postcard::from_bytes(&input).map_err(|e| format!("the input does not decode: {e}"))?;
        let decisions = <Self as Guest>::decide(ctx, input)?;
        postcard::to_allocvec(&decisions).map_err(|e| format!("the decisions do not encode: {e}"))
    }
}

export!(DefaultFailover);

/// The input by node, looked up once per node instead of searched (a
/// cluster of 5 000 nodes is judged every second).
struct ByNode<'a> {
    previous: HashMap<&'a str, &'a NodeDecision>,
    pods: HashMap<&'a str, Vec<&'a Placement>>,
    instances: HashMap<&'a str, Vec<&'a InstancePlacement>>,
    overrides: HashMap<&'a str, Vec<&'a Override>>,
}

impl<'a> ByNode<'a> {
    fn of(input: &'a FailoverInput) -> Self {
        Self {
            previous: input
                .previous
                .iter()
                .map(|d| (d.node.as_str(), d))
                .collect(),
            pods: grouped(&input.placements, |p| &p.node),
            instances: grouped(&input.instances, |i| &i.node),
            overrides: grouped(&input.overrides, |o| &o.node),
        }
    }

    /// The override in force on `node`: the latest of those not run out.
    fn active_override(&self, now: Timestamp, node: &str) -> Option<&'a Override> {
        self.overrides
            .get(node)?
            .iter()
            .filter(|o| o.expires_at.is_none_or(|e| e > now))
            .max_by_key(|o| o.at)
            .copied()
    }
}

/// `items` grouped by the node each names.
fn grouped<'a, T>(
    items: &'a [T],
    node: impl Fn(&'a T) -> &'a String,
) -> HashMap<&'a str, Vec<&'a T>> {
    let mut by_node: HashMap<&str, Vec<&T>> = HashMap::new();
    for item in items {
        by_node.entry(node(item).as_str()).or_default().push(item);
    }
    by_node
}

fn decide_node(
    settings: &Settings,
    now: Timestamp,
    node: &Node,
    input: &ByNode<'_>,
) -> NodeDecision {
    let name = node.name.as_str();
    let previous = input.previous.get(name).copied();
    let on_node = OnNode {
        pods: input.pods.get(name).map_or(&[], Vec::as_slice),
        instances: input.instances.get(name).map_or(&[], Vec::as_slice),
    };
    let mut decision = by_rules(settings, now, node, previous, &on_node);

    if let Some(o) = input.active_override(now, name) {
        let by = format!("override by {}: {}", o.by, o.reason);
        match o.kind {
            OverrideKind::Healthy => {
                decision = NodeDecision {
                    node: node.name.clone(),
                    health: NodeHealth::Healthy,
                    since: o.at,
                    reason: by,
                    rule: "override-healthy".into(),
                    actions: Vec::new(),
                };
            }
            OverrideKind::Offline => {
                decision = offline(settings, node, o.at, by, "override-offline", &on_node);
            }
            OverrideKind::Pause => {
                decision.reason = format!("{}; actions paused ({by})", decision.reason);
                decision.rule = "override-pause".into();
                decision.actions.clear();
            }
        }
    }
    decision
}

/// What runs on one node: pods, and instances of virtual machines.
struct OnNode<'a> {
    pods: &'a [&'a Placement],
    instances: &'a [&'a InstancePlacement],
}

fn by_rules(
    settings: &Settings,
    now: Timestamp,
    node: &Node,
    previous: Option<&NodeDecision>,
    on_node: &OnNode<'_>,
) -> NodeDecision {
    let since = node.ready_since.or(node.last_heartbeat).unwrap_or(now);
    if node.ready == ConditionStatus::True {
        let was_down = previous.is_some_and(|p| {
            matches!(
                p.health,
                NodeHealth::Unknown | NodeHealth::Offline | NodeHealth::Recovering
            )
        });
        if was_down && now - since < settings.stabilize_ms {
            let trusted_at = since + settings.stabilize_ms;
            return NodeDecision {
                node: node.name.clone(),
                health: NodeHealth::Recovering,
                since,
                reason: "ready again after an outage; not trusted until it stays ready".into(),
                rule: "recovering".into(),
                actions: vec![ProposedAction {
                    action: Action::Wait(trusted_at),
                    reason: "stabilisation period".into(),
                    needs_approval: false,
                }],
            };
        }
        let mut actions = Vec::new();
        if node.unschedulable && previous.is_some_and(|p| p.health == NodeHealth::Recovering) {
            actions.push(ProposedAction {
                action: Action::Uncordon,
                reason: "node is trusted again".into(),
                needs_approval: false,
            });
        }
        return NodeDecision {
            node: node.name.clone(),
            health: NodeHealth::Healthy,
            since,
            reason: "ready".into(),
            rule: "ready".into(),
            actions,
        };
    }

    // Not ready, or out of contact. The clock starts when that began, or when
    // an earlier evaluation first saw it, whichever is earlier.
    let down_since = previous
        .filter(|p| p.health != NodeHealth::Healthy && p.health != NodeHealth::Recovering)
        .map_or(since, |p| p.since.min(since));
    let down_for = now - down_since;
    let what = match node.ready {
        ConditionStatus::Unknown => "out of contact",
        _ => "not ready",
    };
    if down_for < settings.grace_ms {
        return NodeDecision {
            node: node.name.clone(),
            health: NodeHealth::Suspect,
            since: down_since,
            reason: format!("{what} for {}s, within the grace period", down_for / 1000),
            rule: "grace-period".into(),
            actions: vec![ProposedAction {
                action: Action::Wait(down_since + settings.grace_ms),
                reason: "short outages are waited out".into(),
                needs_approval: false,
            }],
        };
    }
    if down_for < settings.offline_after_ms {
        let mut actions = vec![
            ProposedAction {
                action: Action::MarkUnknown,
                reason: format!("{what} past the grace period"),
                needs_approval: false,
            },
            ProposedAction {
                action: Action::Cordon,
                reason: "keep new pods off an unreliable node".into(),
                needs_approval: false,
            },
        ];
        actions.extend(evictions(on_node.pods));
        actions.push(ProposedAction {
            action: Action::Wait(down_since + settings.offline_after_ms),
            reason: "judged offline if it does not return by then".into(),
            needs_approval: false,
        });
        return NodeDecision {
            node: node.name.clone(),
            health: NodeHealth::Unknown,
            since: down_since,
            reason: format!("{what} for {}s", down_for / 1000),
            rule: "unknown-after-grace".into(),
            actions,
        };
    }
    offline(
        settings,
        node,
        down_since,
        format!("{what} for {}s: judged offline", down_for / 1000),
        "offline-after-timeout",
        on_node,
    )
}

fn offline(
    settings: &Settings,
    node: &Node,
    since: Timestamp,
    reason: String,
    rule: &str,
    on_node: &OnNode<'_>,
) -> NodeDecision {
    let mut actions = vec![ProposedAction {
        action: Action::Cordon,
        reason: "the node is offline".into(),
        needs_approval: false,
    }];
    actions.extend(evictions(on_node.pods));
    actions.extend(instance_repairs(settings, on_node.instances));
    let on_node = on_node.pods;
    for workload in distinct_workloads(on_node, true) {
        let members = on_node
            .iter()
            .filter(|p| p.workload.as_ref() == Some(&workload))
            .count() as u32;
        let replicas = on_node
            .iter()
            .find(|p| p.workload.as_ref() == Some(&workload))
            .and_then(|p| p.workload_replicas);
        match (settings.remedy, replicas) {
            (Remedy::ScaleDown, Some(replicas)) => actions.push(ProposedAction {
                action: Action::Scale(ScaleRequest {
                    workload,
                    replicas: replicas.saturating_sub(members),
                }),
                reason: format!(
                    "run without the {members} member(s) on the offline node instead of replacing it"
                ),
                needs_approval: true,
            }),
            _ => actions.push(ProposedAction {
                action: Action::Release(workload),
                reason:
                    "a partitioned node may still run these pods: fence it before releasing them"
                        .into(),
                needs_approval: true,
            }),
        }
    }
    if settings.remedy == Remedy::Replace {
        actions.push(ProposedAction {
            action: Action::RequestReplacement,
            reason: "restore capacity".into(),
            needs_approval: false,
        });
    }
    actions.push(ProposedAction {
        action: Action::Notify(format!("node {} is offline", node.name)),
        reason: "operators decide on repair".into(),
        needs_approval: false,
    });
    NodeDecision {
        node: node.name.clone(),
        health: NodeHealth::Offline,
        since,
        reason,
        rule: rule.into(),
        actions,
    }
}

/// For the instances of virtual machines on an offline node: a repair of
/// each (a person approves it when a disk of the instance may be written
/// from one node only), or with `scale-down` a smaller pool or replica set.
fn instance_repairs(settings: &Settings, instances: &[&InstancePlacement]) -> Vec<ProposedAction> {
    let mut actions = Vec::new();
    let mut shrunk: Vec<&SetRef> = Vec::new();
    for i in instances {
        match (&i.set, settings.remedy) {
            (Some(set), Remedy::ScaleDown) => {
                if shrunk.iter().any(|s| s.kind == set.kind && s.name == set.name) {
                    continue;
                }
                shrunk.push(set);
                let members = instances
                    .iter()
                    .filter(|j| j.set.as_ref().is_some_and(|s| s.kind == set.kind && s.name == set.name))
                    .count() as u32;
                actions.push(ProposedAction {
                    action: Action::Rescale(SetRef {
                        replicas: set.replicas.saturating_sub(members),
                        ..set.clone()
                    }),
                    reason: format!(
                        "run {} without its {members} instance(s) on the offline node",
                        set.name
                    ),
                    needs_approval: true,
                });
            }
            _ if i.owner.is_some() => actions.push(ProposedAction {
                action: Action::Repair(InstanceRef {
                    namespace: i.namespace.clone(),
                    name: i.name.clone(),
                }),
                reason: if i.exclusive_disk {
                    "its disk may be written from one node only: fence the node before it starts elsewhere".into()
                } else {
                    "fence the node and start the instance on a healthy one".into()
                },
                needs_approval: i.exclusive_disk,
            }),
            _ => actions.push(ProposedAction {
                action: Action::Notify(format!(
                    "instance {}/{} on the offline node has no VM or replica set to start it again",
                    i.namespace, i.name
                )),
                reason: "operators decide what to do with it".into(),
                needs_approval: false,
            }),
        }
    }
    actions
}

/// Evict the pods of each stateless workload on the node.
fn evictions(on_node: &[&Placement]) -> impl Iterator<Item = ProposedAction> {
    distinct_workloads(on_node, false)
        .into_iter()
        .map(|workload| ProposedAction {
            action: Action::Evict(workload),
            reason: "stateless pods are moved to healthy nodes".into(),
            needs_approval: false,
        })
}

fn distinct_workloads(
    on_node: &[&Placement],
    stateful: bool,
) -> Vec<exports::verdict::policy::failover::WorkloadRef> {
    let mut seen: Vec<exports::verdict::policy::failover::WorkloadRef> = Vec::new();
    for p in on_node.iter().filter(|p| p.stateful == stateful) {
        // A DaemonSet's pod belongs on its node: moving it does nothing.
        if let Some(w) = p
            .workload
            .as_ref()
            .filter(|w| w.kind != WorkloadKind::DaemonSet)
        {
            if !seen.contains(w) {
                seen.push(w.clone());
            }
        }
    }
    seen
}
