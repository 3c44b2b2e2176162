//! An example of a lifecycle policy a team writes on top of the default
//! machine: once an instance's code is deployed, a `smoke-test` step runs
//! before the instance goes on to its health check, with the version just
//! deployed as its parameter. A step hook named `smoke-test` in the host's
//! configuration carries it out; a smoke test that fails makes the instance
//! `failed`, as any failed step does, and the rollout stops there.
//!
//! Everything else is the default machine's decision, and its settings are
//! the default's.

use verdict_lifecycle::exports::verdict::policy::lifecycle::{
    Decision, Guest, LifecycleInput, Stage, Task,
};
use verdict_lifecycle::exports::verdict::policy::settings;
use verdict_lifecycle::verdict::policy::types::{Context, PluginInfo};

/// The step added after each `deploy-code`.
pub const SMOKE_TEST: &str = "smoke-test";

pub struct SmokeTested;

impl settings::Guest for SmokeTested {
    fn validate(settings: String) -> Result<(), String> {
        verdict_lifecycle::validate(&settings)
    }
}

impl Guest for SmokeTested {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "smoke-test".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "The default machine, with a smoke test of each code deploy.".into(),
            settings_schema: Some(verdict_lifecycle::SETTINGS_SCHEMA.into()),
        }
    }

    fn next(ctx: Context, input: LifecycleInput) -> Result<Decision, String> {
        Ok(with_smoke_test(verdict_lifecycle::decide(&ctx, &input)))
    }
}

/// The default decision, a smoke test added after the code is deployed.
pub fn with_smoke_test(decision: Decision) -> Decision {
    let Decision::Move(mut transition) = decision else {
        return decision;
    };
    if transition.stage == Stage::Deploying
        && let Some(at) = transition
            .tasks
            .iter()
            .position(|t| t.name == "deploy-code")
    {
        let params = serde_json::json!({ "version": transition.code }).to_string();
        transition.tasks.insert(
            at + 1,
            Task {
                name: SMOKE_TEST.into(),
                params,
            },
        );
        transition.reason = format!("{}; then a smoke test", transition.reason);
    }
    Decision::Move(transition)
}

// Exported where it runs: a component's export names are not symbols a
// native library may carry (its unit tests build it natively).
#[cfg(target_arch = "wasm32")]
verdict_lifecycle::export!(SmokeTested with_types_in verdict_lifecycle);

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_lifecycle::exports::verdict::policy::lifecycle::Transition;

    fn moving(stage: Stage, tasks: &[&str]) -> Decision {
        Decision::Move(Transition {
            stage,
            tasks: tasks
                .iter()
                .map(|name| Task {
                    name: name.to_string(),
                    params: "{}".into(),
                })
                .collect(),
            environment: None,
            code: Some("2.0".into()),
            needs_approval: false,
            reason: "new code".into(),
        })
    }

    fn names(decision: &Decision) -> Vec<String> {
        match decision {
            Decision::Move(t) => t.tasks.iter().map(|t| t.name.clone()).collect(),
            Decision::Stay(_) => Vec::new(),
        }
    }

    #[test]
    fn a_deploy_is_followed_by_its_smoke_test_and_nothing_else_changes() {
        let deployed = with_smoke_test(moving(
            Stage::Deploying,
            &["pause-monitoring", "deploy-code"],
        ));
        assert_eq!(
            names(&deployed),
            ["pause-monitoring", "deploy-code", "smoke-test"]
        );
        let Decision::Move(t) = &deployed else {
            unreachable!()
        };
        assert_eq!(t.tasks[2].params, r#"{"version":"2.0"}"#);
        let ready = with_smoke_test(moving(Stage::Ready, &["health-check"]));
        assert_eq!(names(&ready), ["health-check"]);
        let stay = with_smoke_test(Decision::Stay("waiting".into()));
        assert_eq!(stay, Decision::Stay("waiting".into()));
    }
}
