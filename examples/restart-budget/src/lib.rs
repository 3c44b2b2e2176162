//! An example of a status policy a team writes on top of the default rules:
//!
//! - **restart budget**: an application otherwise `running` is `degraded`
//!   while one of its containers has restarted more than `max-restarts`
//!   times (default 3) and last restarted within `budget-window-ms`
//!   (default one hour);
//! - **maintenance**: an application whose namespace or workload carries the
//!   label `example.dev/maintenance=true` displays `Maintenance` (a warning)
//!   instead of its stable status, unless one of its tasks is in flight.
//!
//! Everything else is the default rules' verdict. The same rule is written
//! in JavaScript (`examples/restart-budget-js`) and Python
//! (`examples/restart-budget-py`); all three pass `tests/cases.yaml`.

use verdict_policy::prelude::*;

const MAINTENANCE_LABEL: &str = "example.dev/maintenance";

#[derive(serde::Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct Budget {
    max_restarts: u32,
    budget_window_ms: i64,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_restarts: 3,
            budget_window_ms: 3_600_000,
        }
    }
}

pub struct RestartBudget;

impl StatusPolicy for RestartBudget {
    fn describe() -> PluginInfo {
        PluginInfo {
            settings_schema: Some(
                r#"{"type":"object","additionalProperties":false,"properties":{"max-restarts":{"type":"integer","minimum":0},"budget-window-ms":{"type":"integer","minimum":0}}}"#.into(),
            ),
            ..info(
                "restart-budget",
                env!("CARGO_PKG_VERSION"),
                "The default rules, plus a restart budget and a maintenance display.",
            )
        }
    }

    fn evaluate(ctx: &Context, input: &AppInput) -> Result<AppVerdict, String> {
        let budget: Budget = settings(ctx)?;
        let mut verdict = default_rules(ctx, input);

        let over_budget = input.app.pods.iter().find_map(|pod| {
            let restarted = |c: &&Container| {
                c.kind == ContainerKind::Main
                    && c.restart_count > budget.max_restarts
                    && c.last_state
                        .as_ref()
                        .and_then(|t| t.finished_at)
                        .is_some_and(|at| ctx.now - at < budget.budget_window_ms)
            };
            pod.containers.iter().find(restarted).map(|c| (pod, c))
        });
        if let (StableStatus::Running, Some((pod, c))) = (verdict.stable, over_budget) {
            // The rule depends on time: ask to be asked again when the
            // restart leaves the window, or the app stays degraded until
            // something else about it changes.
            let leaves = c
                .last_state
                .as_ref()
                .and_then(|t| t.finished_at)
                .unwrap_or(ctx.now)
                + budget.budget_window_ms;
            verdict.recheck_after = Some(verdict.recheck_after.map_or(leaves, |r| r.min(leaves)));
            verdict.stable = StableStatus::Degraded;
            verdict.stable_reason = format!(
                "container {} of pod {} restarted {} times, over the budget of {}",
                c.name, pod.name, c.restart_count, budget.max_restarts
            );
            if verdict.transitional.is_none() {
                verdict.display = Display {
                    status: "degraded".into(),
                    text: format!("Degraded — {}", verdict.stable_reason),
                    severity: Severity::Warning,
                    progress: None,
                };
            }
        }

        let labelled = |labels: &[KeyValue]| {
            labels
                .iter()
                .any(|l| l.key == MAINTENANCE_LABEL && l.value == "true")
        };
        let in_maintenance = labelled(&input.app.namespace_labels)
            || input.app.workloads.iter().any(|w| labelled(&w.labels));
        if in_maintenance && verdict.transitional.is_none() {
            verdict.display = Display {
                status: "maintenance".into(),
                text: "Maintenance".into(),
                severity: Severity::Warning,
                progress: None,
            };
        }
        Ok(verdict)
    }
}

verdict_policy::status_policy!(RestartBudget);

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_policy::testing::{app, container, ctx, pod, with_settings};

    const NOW: i64 = 1_800_000_000_000;

    fn restarted(times: u32, minutes_ago: i64) -> AppInput {
        let web = container("web")
            .restarts(times)
            .last_exit(1, NOW - minutes_ago * 60_000);
        app("shop", "web").pod(pod("web-1").container(web)).build()
    }

    #[test]
    fn over_the_budget_is_degraded() {
        let verdict = RestartBudget::evaluate(&ctx(NOW), &restarted(7, 20)).unwrap();
        assert_eq!(verdict.stable, StableStatus::Degraded);
        assert_eq!(verdict.display.status, "degraded");
    }

    #[test]
    fn old_restarts_and_a_larger_budget_keep_it_running() {
        let old = RestartBudget::evaluate(&ctx(NOW), &restarted(7, 120)).unwrap();
        assert_eq!(old.stable, StableStatus::Running);
        let larger = with_settings(NOW, r#"{"max-restarts": 10}"#);
        let verdict = RestartBudget::evaluate(&larger, &restarted(7, 20)).unwrap();
        assert_eq!(verdict.stable, StableStatus::Running);
    }

    #[test]
    fn maintenance_shows_through_a_running_app() {
        let input = app("shop", "web")
            .namespace_label(MAINTENANCE_LABEL, "true")
            .pod(pod("web-1").container(container("web")))
            .build();
        let verdict = RestartBudget::evaluate(&ctx(NOW), &input).unwrap();
        assert_eq!(verdict.display.text, "Maintenance");
    }
}
