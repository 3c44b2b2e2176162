//! The default lifecycle policy: seed 002's state machine of an instance of
//! a VM-hosted application.
//!
//! A machine is requested; once it runs, the instance is `initializing`
//! (the environment is installed), then `deploying` (the code), then `ready`
//! (the health check passes and monitoring is bound), then in `gray-release`
//! (a share of the traffic) until its code is released, then `serving`. A
//! change of the environment or of the code takes a serving instance back
//! through `initializing` or `deploying` when the rollout's safe rate lets
//! it. A short outage of its node makes it `unknown` (load balancer and
//! monitoring let go) and it goes through `initializing` again when the
//! node returns; a node judged offline, or an operator's word, takes it
//! `offline`; deletion runs the clean-up list. A failed task makes it
//! `failed`: operators are told, and the stage a person sets is where the
//! machine goes on from. An operator's forced stage ranks above every rule.
//!
//! Settings: `load-balancer` and `monitoring` (whether those tasks are in
//! the lists; both on by default), `gray-weight` (the traffic share of an
//! instance in gray release, percent; 10 by default).
//!
//! A lifecycle policy can build on this machine: depend on this crate with
//! `default-features = false` (without the `export` of the default plugin),
//! call [`decide`], change what it answers, and export the policy with
//! `verdict_lifecycle::export!(Mine with_types_in verdict_lifecycle)`.

// The bindings' own paths name this crate as its dependents do.
extern crate self as verdict_lifecycle;

wit_bindgen::generate!({
    world: "lifecycle-policy",
    path: "../../wit",
    additional_derives: [PartialEq],
    pub_export_macro: true,
    default_bindings_module: "verdict_lifecycle",
});

use exports::verdict::policy::lifecycle::{
    Decision, Guest, Instance, LifecycleInput, Machine, NodeHealth, Outcome, Package, Stage,
    Target, Task, Transition,
};
use verdict::policy::types::{Context, PluginInfo};

/// The JSON Schema of the default machine's settings.
pub const SETTINGS_SCHEMA: &str = r#"{"type":"object","additionalProperties":false,"properties":{"load-balancer":{"type":"boolean"},"monitoring":{"type":"boolean"},"gray-weight":{"type":"integer","minimum":1,"maximum":100}}}"#;

struct Settings {
    load_balancer: bool,
    monitoring: bool,
    gray_weight: u64,
}

impl Settings {
    fn parse(text: &str) -> Self {
        let value: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        let flag = |key: &str| value.get(key).and_then(serde_json::Value::as_bool);
        Self {
            load_balancer: flag("load-balancer").unwrap_or(true),
            monitoring: flag("monitoring").unwrap_or(true),
            gray_weight: value
                .get("gray-weight")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(10),
        }
    }
}

/// The default machine's decision for an instance, with the policy's
/// settings (`ctx.settings`).
pub fn decide(ctx: &Context, input: &LifecycleInput) -> Decision {
    let settings = Settings::parse(&ctx.settings);
    Rules::new(&settings, &input.instance, &input.target).decide()
}

/// Check settings against the default machine's schema.
pub fn validate(settings: &str) -> Result<(), String> {
    verdict_settings::check(SETTINGS_SCHEMA, settings)
}

/// The default lifecycle policy, as the plugin exports it.
pub struct DefaultLifecycle;

impl exports::verdict::policy::settings::Guest for DefaultLifecycle {
    fn validate(settings: String) -> Result<(), String> {
        validate(&settings)
    }
}

impl Guest for DefaultLifecycle {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "default-lifecycle".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Seed 002's instance machine: requested, initializing, deploying, ready, gray release, serving; unknown, offline, deleting, failed.".into(),
            settings_schema: Some(SETTINGS_SCHEMA.into()),
        }
    }

    fn next(ctx: Context, input: LifecycleInput) -> Result<Decision, String> {
        Ok(decide(&ctx, &input))
    }
}

#[cfg(feature = "export")]
export!(DefaultLifecycle);

/// One decision: the instance, its target and the lists they call for.
struct Rules<'a> {
    lists: Lists<'a>,
    instance: &'a Instance,
    target: &'a Target,
}

/// The task list of each stage, as the settings shape them.
struct Lists<'a> {
    settings: &'a Settings,
}

fn task(name: &str, params: serde_json::Value) -> Task {
    Task {
        name: name.into(),
        params: params.to_string(),
    }
}

impl Lists<'_> {
    /// Let go of the load balancer and monitoring: before the instance is
    /// changed, lost or cleaned up.
    /// What an instance leaving `from` lets go of: the load balancer when
    /// it took traffic, monitoring when it was bound.
    fn release(&self, from: Option<Stage>) -> Vec<Task> {
        let mut tasks = Vec::new();
        if self.settings.load_balancer && attached(from) {
            tasks.push(task("detach-load-balancer", serde_json::json!({})));
        }
        if self.settings.monitoring && monitored(from) {
            tasks.push(task("pause-monitoring", serde_json::json!({})));
        }
        tasks
    }

    fn install(&self, packages: &[Package]) -> Task {
        let packages: Vec<serde_json::Value> = packages
            .iter()
            .map(|p| serde_json::json!({"name": p.name, "version": p.version}))
            .collect();
        task(
            "install-environment",
            serde_json::json!({ "packages": packages }),
        )
    }

    fn deploy(&self, version: &str) -> Task {
        task("deploy-code", serde_json::json!({ "version": version }))
    }

    fn ready(&self) -> Vec<Task> {
        let mut tasks = vec![task("health-check", serde_json::json!({}))];
        if self.settings.monitoring {
            tasks.push(task("bind-monitoring", serde_json::json!({})));
        }
        tasks
    }

    fn traffic(&self, weight: u64) -> Vec<Task> {
        match self.settings.load_balancer {
            true => vec![task(
                "attach-load-balancer",
                serde_json::json!({ "weight": weight }),
            )],
            false => Vec::new(),
        }
    }

    fn clean_up(&self, from: Option<Stage>) -> Vec<Task> {
        let mut tasks = self.release(from);
        tasks.push(task("delete-machine", serde_json::json!({})));
        tasks
    }
}

/// Whether an instance in `stage` takes (or, failed on its way, may take)
/// traffic through the load balancer: a failed instance may have failed
/// before it was let go of, so leaving `failed` lets go of the load
/// balancer too — a machine is never deleted while it may still be in it.
fn attached(stage: Option<Stage>) -> bool {
    matches!(
        stage,
        Some(Stage::GrayRelease | Stage::Serving | Stage::Failed)
    )
}

/// Whether an instance in `stage` is (or, failed on its way, may be)
/// watched by monitoring, which is bound on entering `ready`.
fn monitored(stage: Option<Stage>) -> bool {
    matches!(
        stage,
        Some(Stage::Ready | Stage::GrayRelease | Stage::Serving | Stage::Failed)
    )
}

fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Requested => "requested",
        Stage::Initializing => "initializing",
        Stage::Deploying => "deploying",
        Stage::Ready => "ready",
        Stage::GrayRelease => "gray-release",
        Stage::Serving => "serving",
        Stage::Unknown => "unknown",
        Stage::Offline => "offline",
        Stage::Deleting => "deleting",
        Stage::Failed => "failed",
    }
}

fn versions(packages: &[Package]) -> String {
    let named: Vec<String> = packages
        .iter()
        .map(|p| format!("{} {}", p.name, p.version))
        .collect();
    match named.is_empty() {
        true => "no packages".into(),
        false => named.join(", "),
    }
}

fn stay(why: impl Into<String>) -> Decision {
    Decision::Stay(why.into())
}

impl<'a> Rules<'a> {
    fn new(settings: &'a Settings, instance: &'a Instance, target: &'a Target) -> Self {
        Self {
            lists: Lists { settings },
            instance,
            target,
        }
    }

    fn go(&self, stage: Stage, tasks: Vec<Task>, reason: impl Into<String>) -> Decision {
        Decision::Move(Transition {
            stage,
            tasks,
            environment: None,
            code: None,
            needs_approval: false,
            reason: reason.into(),
        })
    }

    /// Into `initializing`: the target environment installed.
    fn initialize(&self, mut tasks: Vec<Task>, reason: String) -> Decision {
        tasks.push(self.lists.install(&self.target.environment));
        Decision::Move(Transition {
            stage: Stage::Initializing,
            tasks,
            environment: Some(self.target.environment.clone()),
            code: None,
            needs_approval: false,
            reason,
        })
    }

    /// Into `deploying` with the target code, or straight to `ready` when
    /// no deployment names any.
    fn deploy(&self, mut tasks: Vec<Task>, reason: String) -> Decision {
        let Some(code) = &self.target.code else {
            return self.go(Stage::Ready, self.lists.ready(), reason);
        };
        tasks.push(self.lists.deploy(code));
        Decision::Move(Transition {
            stage: Stage::Deploying,
            tasks,
            environment: None,
            code: Some(code.clone()),
            needs_approval: false,
            reason,
        })
    }

    /// The list entered on a stage forced by an operator: what takes the
    /// instance there from where it is, never a jump past a step — out of
    /// service, the load balancer is detached and monitoring paused first;
    /// into service from before `ready`, the health check and monitoring
    /// come before any traffic (the person vouches for what failed to be
    /// installed or deployed, not for the checks).
    fn forced(&self, stage: Stage) -> Decision {
        let from = self.instance.stage;
        let reason = format!("an operator set the stage {}", stage_name(stage));
        let checked = matches!(
            from,
            Some(Stage::Ready | Stage::GrayRelease | Stage::Serving)
        );
        // Into `ready` or beyond: the checks unless it had them, and
        // monitoring bound unless it is.
        let readied = |mut tasks: Vec<Task>| {
            if !checked {
                tasks.push(task("health-check", serde_json::json!({})));
            }
            if self.lists.settings.monitoring && !monitored(from) {
                tasks.push(task("bind-monitoring", serde_json::json!({})));
            }
            tasks
        };
        match stage {
            Stage::Initializing => self.initialize(self.lists.release(from), reason),
            Stage::Deploying => self.deploy(self.lists.release(from), reason),
            Stage::Ready => {
                // Out of the load balancer, monitoring kept.
                let mut tasks = Vec::new();
                if self.lists.settings.load_balancer && attached(from) {
                    tasks.push(task("detach-load-balancer", serde_json::json!({})));
                }
                self.go(stage, readied(tasks), reason)
            }
            Stage::GrayRelease => {
                let mut tasks = readied(Vec::new());
                tasks.extend(self.lists.traffic(self.lists.settings.gray_weight));
                self.go(stage, tasks, reason)
            }
            Stage::Serving => {
                let mut tasks = readied(Vec::new());
                tasks.extend(self.lists.traffic(100));
                self.go(stage, tasks, reason)
            }
            Stage::Requested | Stage::Unknown | Stage::Offline => {
                self.go(stage, self.lists.release(from), reason)
            }
            Stage::Deleting => self.go(stage, self.lists.clean_up(from), reason),
            Stage::Failed => self.go(stage, Vec::new(), reason),
        }
    }

    fn decide(&self) -> Decision {
        let i = self.instance;
        let t = self.target;
        let stage = i.stage;
        let from = stage;
        let last = i.lists.first().filter(|l| Some(l.stage) == stage);

        // A person's word ranks above every rule.
        if let Some(forced) = i.forced {
            return self.forced(forced);
        }
        // A list runs to its end before anything else is decided, except
        // that deletion waits for nothing.
        if let Some(list) = last.filter(|l| l.outcome == Outcome::Running) {
            if !(i.deleting && stage != Some(Stage::Deleting)) {
                return stay(format!(
                    "{} of the {} list is running{}",
                    list.task.as_deref().unwrap_or("a task"),
                    stage_name(list.stage),
                    match list.message.is_empty() {
                        true => String::new(),
                        false => format!(": {}", list.message),
                    }
                ));
            }
        }
        if i.deleting {
            return match (stage, last.map(|l| l.outcome)) {
                (Some(Stage::Deleting), Some(Outcome::Succeeded)) => {
                    stay("cleaned up: the machine may go")
                }
                (Some(Stage::Deleting), Some(Outcome::Failed)) => stay(format!(
                    "the clean-up is held at {}: {} (a person may skip it)",
                    last.and_then(|l| l.task.as_deref()).unwrap_or("a task"),
                    last.map(|l| l.message.as_str()).unwrap_or_default()
                )),
                (Some(Stage::Deleting), _) => stay("cleaning up"),
                _ => self.go(
                    Stage::Deleting,
                    self.lists.clean_up(from),
                    "the instance is deleted: clean up first",
                ),
            };
        }
        if let Some(list) = last.filter(|l| l.outcome == Outcome::Failed) {
            if stage != Some(Stage::Failed) {
                return self.go(
                    Stage::Failed,
                    Vec::new(),
                    format!(
                        "{} of the {} list failed: {}; operators are told, and a person sets the stage to go on from",
                        list.task.as_deref().unwrap_or("a task"),
                        stage_name(list.stage),
                        list.message
                    ),
                );
            }
        }
        if stage == Some(Stage::Failed) {
            return stay("a task failed: fix the cause, then set the stage to go on from");
        }
        if stage == Some(Stage::Offline) {
            // Lost with its node and repaired (its machine started again
            // on a healthy node): a new machine, through the whole flow.
            if !i.take_offline
                && i.node_health == NodeHealth::Healthy
                && i.machine == Machine::Running
            {
                return self.initialize(
                    Vec::new(),
                    "back from offline: its machine runs on a healthy node, so it goes through the whole machine".into(),
                );
            }
            return stay("offline");
        }
        if i.take_offline || i.node_health == NodeHealth::Offline {
            let why = match i.take_offline {
                true => "an operator takes it offline".to_string(),
                false => format!(
                    "its node {} is judged offline",
                    i.node.as_deref().unwrap_or_default()
                ),
            };
            return self.go(Stage::Offline, self.lists.release(from), why);
        }
        let running = i.machine == Machine::Running;
        if stage == Some(Stage::Unknown) {
            return match (i.node_health, running) {
                (NodeHealth::Healthy, true) => self.initialize(
                    Vec::new(),
                    "back from an outage: the environment is checked again".into(),
                ),
                _ => stay("waiting for the instance to come back"),
            };
        }
        let in_service = matches!(
            stage,
            Some(
                Stage::Initializing
                    | Stage::Deploying
                    | Stage::Ready
                    | Stage::GrayRelease
                    | Stage::Serving
            )
        );
        if in_service && (i.node_health == NodeHealth::Unknown || !running) {
            let why = match i.node_health {
                NodeHealth::Unknown => format!(
                    "its node {} is out of contact",
                    i.node.as_deref().unwrap_or_default()
                ),
                _ => "its machine is not running".to_string(),
            };
            return self.go(Stage::Unknown, self.lists.release(from), why);
        }
        match stage {
            None | Some(Stage::Requested) => match (running, stage) {
                (true, _) => self.initialize(
                    Vec::new(),
                    format!("the machine runs: install {}", versions(&t.environment)),
                ),
                (false, None) => self.go(Stage::Requested, Vec::new(), "a machine is requested"),
                (false, Some(_)) => stay("waiting for the machine to run"),
            },
            Some(Stage::Initializing) => match i.environment == t.environment {
                // The environment changed while it was installed.
                false => self.initialize(
                    Vec::new(),
                    format!(
                        "the environment changed: install {}",
                        versions(&t.environment)
                    ),
                ),
                true => self.deploy(Vec::new(), "the environment is installed".into()),
            },
            Some(Stage::Deploying) => match (&t.code, &i.code) {
                (Some(want), have) if have.as_ref() != Some(want) => self.deploy(
                    Vec::new(),
                    format!("the code changed to {want} while it deployed"),
                ),
                _ => self.go(Stage::Ready, self.lists.ready(), "the code is deployed"),
            },
            Some(Stage::Ready | Stage::GrayRelease | Stage::Serving) => self.in_service(stage),
            Some(Stage::Unknown | Stage::Offline | Stage::Failed | Stage::Deleting) => {
                stay("nothing to do")
            }
        }
    }

    /// An instance in service: a changed environment or code takes it back
    /// when the rollout lets it; else on towards serving.
    fn in_service(&self, stage: Option<Stage>) -> Decision {
        let i = self.instance;
        let t = self.target;
        let from = stage;
        if i.environment != t.environment {
            return match t.may_disrupt {
                true => self.initialize(
                    self.lists.release(from),
                    format!("the environment changes to {}", versions(&t.environment)),
                ),
                false => stay(format!(
                    "the environment {} waits for its turn (the rollout's safe rate)",
                    versions(&t.environment)
                )),
            };
        }
        if let Some(want) = t
            .code
            .as_ref()
            .filter(|want| i.code.as_ref() != Some(*want))
        {
            return match t.may_disrupt {
                true => self.deploy(
                    self.lists.release(from),
                    format!("the code changes to {want}"),
                ),
                false => stay(format!(
                    "the code {want} waits for its turn (the rollout's step)"
                )),
            };
        }
        match (stage, t.released) {
            // A deployment's first rollout has not reached it: no code to
            // take traffic with.
            (Some(Stage::Ready), false) if t.code.is_none() && i.code.is_none() => {
                stay("ready: waiting for the rollout to bring its code")
            }
            (Some(Stage::Ready), false) => self.go(
                Stage::GrayRelease,
                self.lists.traffic(self.lists.settings.gray_weight),
                "ready: a share of the traffic for the gray release",
            ),
            (Some(Stage::Ready | Stage::GrayRelease), true) => self.go(
                Stage::Serving,
                self.lists.traffic(100),
                "released: the full share of the traffic",
            ),
            (Some(Stage::GrayRelease), false) => {
                stay("in gray release: waiting for the rollout to release the code")
            }
            _ => stay("serving"),
        }
    }
}
