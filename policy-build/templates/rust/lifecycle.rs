//! {{name}}: a lifecycle policy. A running machine gets the set's
//! environment, then the deployment's code, then serves once its health
//! check passes; a new environment or code takes a serving instance back
//! when the rollout lets it; a failed task waits for a person, and the stage
//! a person sets is where it goes on from.

use verdict_policy::lifecycle::{
    Decision, LifecycleInput, Machine, Outcome, Stage, Task, Transition,
};
use verdict_policy::prelude::*;
use verdict_policy::serde_json;

/// The settings (`ctx.settings`), each with its default; a key this type
/// does not name is refused before the policy serves.
#[derive(serde::Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
struct Settings {
    /// Whether an instance is health-checked before it serves.
    health_check: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self { health_check: true }
    }
}

fn task(name: &str, params: serde_json::Value) -> Task {
    Task {
        name: name.into(),
        params: params.to_string(),
    }
}

fn go(stage: Stage, tasks: Vec<Task>, reason: &str) -> Decision {
    Decision::Move(Transition {
        stage,
        tasks,
        environment: None,
        code: None,
        needs_approval: false,
        reason: reason.into(),
    })
}

pub struct Policy;

impl LifecyclePolicy for Policy {
    fn describe() -> PluginInfo {
        info(
            "{{name}}",
            env!("CARGO_PKG_VERSION"),
            "Environment, then code, then serving after a health check; a failed task waits for a person.",
        )
    }

    fn validate_settings(settings: &str) -> Result<(), String> {
        check_settings::<Settings>(settings)
    }

    fn next(ctx: &Context, input: &LifecycleInput) -> Result<Decision, String> {
        let settings: Settings = settings(ctx)?;
        let (i, t) = (&input.instance, &input.target);
        if let Some(stage) = i.forced {
            return Ok(go(stage, vec![], "an operator set the stage"));
        }
        let last = i.lists.first().filter(|l| Some(l.stage) == i.stage);
        match last.map(|l| l.outcome) {
            Some(Outcome::Running) => return Ok(Decision::Stay("a task runs".into())),
            Some(Outcome::Failed) if i.stage != Some(Stage::Failed) => {
                return Ok(go(Stage::Failed, vec![], "a task failed: a person decides"));
            }
            _ => {}
        }
        let packages: Vec<serde_json::Value> = t
            .environment
            .iter()
            .map(|p| serde_json::json!({"name": p.name, "version": p.version}))
            .collect();
        let initialize = || {
            Decision::Move(Transition {
                stage: Stage::Initializing,
                tasks: vec![task(
                    "install-environment",
                    serde_json::json!({ "packages": packages }),
                )],
                environment: Some(t.environment.clone()),
                code: None,
                needs_approval: false,
                reason: "install the environment".into(),
            })
        };
        let serve = || {
            let check = match settings.health_check {
                true => vec![task("health-check", serde_json::json!({}))],
                false => vec![],
            };
            go(Stage::Serving, check, "environment and code in place")
        };
        Ok(match i.stage {
            None | Some(Stage::Requested) => match i.machine {
                Machine::Running => initialize(),
                _ if i.stage.is_none() => go(Stage::Requested, vec![], "a machine is requested"),
                _ => Decision::Stay("waiting for the machine".into()),
            },
            Some(Stage::Initializing) => match &t.code {
                Some(code) => Decision::Move(Transition {
                    stage: Stage::Deploying,
                    tasks: vec![task("deploy-code", serde_json::json!({ "version": code }))],
                    environment: None,
                    code: Some(code.clone()),
                    needs_approval: false,
                    reason: "deploy the code".into(),
                }),
                None => serve(),
            },
            Some(Stage::Deploying) => serve(),
            Some(Stage::Serving) => {
                let changed =
                    i.environment != t.environment || (t.code.is_some() && i.code != t.code);
                match (changed, t.may_disrupt) {
                    (true, true) => initialize(),
                    (true, false) => Decision::Stay("a change waits for its turn".into()),
                    (false, _) => Decision::Stay("serving".into()),
                }
            }
            Some(_) => Decision::Stay("a person decides".into()),
        })
    }
}

verdict_policy::lifecycle_policy!(Policy);
