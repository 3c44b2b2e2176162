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
//! Everything else is the default rules' verdict, reused as a library.

use verdict_status::exports::verdict::policy::status::{AppInput, Guest};
use verdict_status::verdict::policy::types::{
    AppVerdict, ContainerKind, Context, Display, KeyValue, PluginInfo, Severity, StableStatus,
};

const MAINTENANCE_LABEL: &str = "example.dev/maintenance";

struct RestartBudget;

impl Guest for RestartBudget {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "restart-budget".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "The default rules, plus a restart budget and a maintenance display.".into(),
            settings_schema: Some(
                r#"{"type":"object","properties":{"max-restarts":{"type":"integer","minimum":0},"budget-window-ms":{"type":"integer","minimum":0}}}"#.into(),
            ),
        }
    }

    fn evaluate(ctx: Context, input: AppInput) -> Result<AppVerdict, String> {
        Ok(judge(&ctx, &input))
    }

    fn evaluate_batch(ctx: Context, inputs: Vec<AppInput>) -> Vec<Result<AppVerdict, String>> {
        inputs.iter().map(|input| Ok(judge(&ctx, input))).collect()
    }
}

// Batches can also come in encoded (faster across the boundary): the same
// judgement through the default plugin's helper.
impl verdict_status::exports::verdict::policy::status_encoded::Guest for RestartBudget {
    fn evaluate_batch_encoded(ctx: Context, inputs: Vec<u8>) -> Result<Vec<u8>, String> {
        verdict_status::evaluate_encoded(&inputs, |input| Ok(judge(&ctx, input)))
    }
}

verdict_status::export!(RestartBudget with_types_in verdict_status);

fn setting(ctx: &Context, key: &str, default: i64) -> i64 {
    serde_json::from_str::<serde_json::Value>(&ctx.settings)
        .ok()
        .and_then(|v| v.get(key).and_then(serde_json::Value::as_i64))
        .unwrap_or(default)
}

fn labelled(labels: &[KeyValue]) -> bool {
    labels
        .iter()
        .any(|l| l.key == MAINTENANCE_LABEL && l.value == "true")
}

fn judge(ctx: &Context, input: &AppInput) -> AppVerdict {
    let mut verdict = verdict_status::default_rules(ctx, input);
    let max_restarts = setting(ctx, "max-restarts", 3);
    let window = setting(ctx, "budget-window-ms", 3_600_000);

    if verdict.stable == StableStatus::Running {
        let over_budget = input.app.pods.iter().find_map(|pod| {
            pod.containers
                .iter()
                .find(|c| {
                    c.kind == ContainerKind::Main
                        && i64::from(c.restart_count) > max_restarts
                        && c.last_state
                            .as_ref()
                            .and_then(|t| t.finished_at)
                            .is_some_and(|at| ctx.now - at < window)
                })
                .map(|c| (pod, c))
        });
        if let Some((pod, c)) = over_budget {
            verdict.stable = StableStatus::Degraded;
            verdict.stable_reason = format!(
                "container {} of pod {} restarted {} times, over the budget of {max_restarts}",
                c.name, pod.name, c.restart_count
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
    }

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
    verdict
}
