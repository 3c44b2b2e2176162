//! {{name}}: a failover policy. A node whose `Ready` condition is not true
//! is `suspect` for `grace-ms` (default one minute) — wait — and `unknown`
//! after it, with a person told; a ready node is healthy.

use verdict_policy::failover::{Action, FailoverInput, NodeDecision, NodeHealth, ProposedAction};
use verdict_policy::prelude::*;

/// The settings (`ctx.settings`), each with its default; a key this type
/// does not name is refused before the policy serves.
#[derive(serde::Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
struct Settings {
    grace_ms: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Self { grace_ms: 60_000 }
    }
}

pub struct Policy;

impl FailoverPolicy for Policy {
    fn describe() -> PluginInfo {
        info(
            "{{name}}",
            env!("CARGO_PKG_VERSION"),
            "A node not ready past a grace period is unknown, and a person is told.",
        )
    }

    fn validate_settings(settings: &str) -> Result<(), String> {
        check_settings::<Settings>(settings)
    }

    fn decide(ctx: &Context, input: &FailoverInput) -> Result<Vec<NodeDecision>, String> {
        let settings: Settings = settings(ctx)?;
        Ok(input
            .nodes
            .iter()
            .map(|node| {
                let since = node.ready_since.unwrap_or(ctx.now);
                let decide = |health, rule: &str, reason: String, actions| NodeDecision {
                    node: node.name.clone(),
                    health,
                    since,
                    reason,
                    rule: rule.into(),
                    actions,
                };
                if node.ready == ConditionStatus::True {
                    return decide(NodeHealth::Healthy, "ready", "the node is ready".into(), vec![]);
                }
                let until = since + settings.grace_ms;
                if ctx.now < until {
                    let wait = ProposedAction {
                        action: Action::Wait(until),
                        reason: "within the grace period".into(),
                        needs_approval: false,
                    };
                    return decide(NodeHealth::Suspect, "grace", "not ready, within the grace period".into(), vec![wait]);
                }
                let tell = ProposedAction {
                    action: Action::Notify(format!("node {} is not ready", node.name)),
                    reason: "not ready past the grace period".into(),
                    needs_approval: false,
                };
                decide(NodeHealth::Unknown, "not-ready", "not ready past the grace period".into(), vec![tell])
            })
            .collect())
    }
}

verdict_policy::failover_policy!(Policy);
