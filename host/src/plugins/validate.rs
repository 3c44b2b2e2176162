//! Checks on what plugins return — its size and its shape — and the made-up
//! inputs of the smoke evaluation a new version must pass before it serves.

use super::error::CallError;
use crate::wit::{admission, failover, lifecycle, status, types};

/// The `now` of smoke evaluations: a fixed instant, so they are repeatable.
pub(crate) const SMOKE_NOW: types::Timestamp = 1_767_225_600_000;

/// A minimal Kubernetes admission request for the smoke evaluation.
pub(crate) const SMOKE_REVIEW: &str = r#"{"uid":"verdict-smoke","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"namespace":"verdict-smoke","operation":"CREATE","userInfo":{"username":"verdict"},"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"smoke","namespace":"verdict-smoke"},"spec":{"containers":[{"name":"main","image":"registry.example/smoke:1.0"}]}}}"#;

/// Bytes a value takes when returned across the component boundary: the
/// length of its strings and a fixed cost per item and record.
pub(crate) trait OutputSize {
    fn output_size(&self) -> usize;
}

/// A fixed cost for every value, so that a list of empty items still counts.
const ITEM: usize = 8;

impl OutputSize for String {
    fn output_size(&self) -> usize {
        self.len() + ITEM
    }
}

impl<T: OutputSize> OutputSize for Option<T> {
    fn output_size(&self) -> usize {
        self.as_ref().map_or(ITEM, OutputSize::output_size)
    }
}

impl<T: OutputSize> OutputSize for Vec<T> {
    fn output_size(&self) -> usize {
        self.iter().map(OutputSize::output_size).sum::<usize>() + ITEM
    }
}

impl<T: OutputSize, E: OutputSize> OutputSize for Result<T, E> {
    fn output_size(&self) -> usize {
        match self {
            Ok(v) => v.output_size(),
            Err(e) => e.output_size(),
        }
    }
}

/// Implements [`OutputSize`] for records by summing the listed fields; the
/// other fields are fixed-size and count as one item.
macro_rules! output_size {
    ($($ty:ty => [$($field:ident),*];)*) => {$(
        impl OutputSize for $ty {
            fn output_size(&self) -> usize {
                ITEM $(+ self.$field.output_size())*
            }
        }
    )*};
}

output_size! {
    types::PluginInfo => [name, version, description, settings_schema];
    types::AppId => [namespace, name];
    types::Display => [status, text];
    types::Transitional => [task_id];
    types::InstanceVerdict => [name, reason, message];
    types::GroupVerdict => [name, node, reason, message, instances];
    types::StatusOverride => [instance, status, by, reason];
    types::ObjectVerdict => [kind, name, node, reason, message, pods, forced];
    types::AppVerdict => [app, stable_reason, transitional, display, groups, objects, forced];
    failover::WorkloadRef => [namespace, name];
    failover::ScaleRequest => [workload];
    failover::InstanceRef => [namespace, name];
    failover::SetRef => [namespace, kind, name];
    failover::ProposedAction => [action, reason];
    failover::NodeDecision => [node, reason, rule, actions];
    admission::PlanStep => [name, description];
    admission::TaskAdmission => [decision, defaults, warnings, plan];
    admission::ReviewResponse => [message, patch, warnings];
    lifecycle::Package => [name, version];
    lifecycle::Task => [name, params];
    lifecycle::Transition => [tasks, environment, code, reason];
}

impl OutputSize for lifecycle::Decision {
    fn output_size(&self) -> usize {
        ITEM + match self {
            lifecycle::Decision::Stay(why) => why.output_size(),
            lifecycle::Decision::Move(transition) => transition.output_size(),
        }
    }
}

impl OutputSize for failover::Action {
    fn output_size(&self) -> usize {
        use failover::Action;
        ITEM + match self {
            Action::Evict(w) | Action::Release(w) => w.output_size(),
            Action::Scale(s) => s.output_size(),
            Action::Repair(i) => i.output_size(),
            Action::Rescale(s) => s.output_size(),
            Action::Notify(text) => text.output_size(),
            Action::Wait(_)
            | Action::MarkUnknown
            | Action::Cordon
            | Action::Uncordon
            | Action::RequestReplacement => 0,
        }
    }
}

impl OutputSize for admission::Decision {
    fn output_size(&self) -> usize {
        use admission::Decision;
        ITEM + match self {
            Decision::Allow => 0,
            Decision::Deny(reason) | Decision::RequireApproval(reason) => reason.output_size(),
        }
    }
}

fn malformed(message: impl Into<String>) -> CallError {
    CallError::Malformed(message.into())
}

fn percent(value: u8, field: &str) -> Result<(), CallError> {
    if value > 100 {
        return Err(malformed(format!("{field} is {value}, over 100 percent")));
    }
    Ok(())
}

pub(crate) fn plugin_info(info: &types::PluginInfo) -> Result<(), CallError> {
    if info.name.trim().is_empty() {
        return Err(malformed("describe returned an empty name"));
    }
    if info.version.trim().is_empty() {
        return Err(malformed("describe returned an empty version"));
    }
    Ok(())
}

pub(crate) fn app_verdict(
    verdict: &types::AppVerdict,
    namespace: &str,
    name: &str,
) -> Result<(), CallError> {
    if verdict.app.namespace != namespace || verdict.app.name != name {
        return Err(malformed(format!(
            "a verdict on {}/{} when asked about {namespace}/{name}",
            verdict.app.namespace, verdict.app.name
        )));
    }
    if let Some(progress) = verdict.display.progress {
        percent(progress, "display.progress")?;
    }
    if let Some(t) = &verdict.transitional {
        percent(t.progress, "transitional.progress")?;
    }
    if verdict.display.status.is_empty() {
        return Err(malformed("display.status is empty"));
    }
    Ok(())
}

pub(crate) fn node_decisions(
    decisions: &[failover::NodeDecision],
    input: &failover::FailoverInput,
) -> Result<(), CallError> {
    // Looked up, not searched: a large cluster's 5 000 nodes are judged
    // every second.
    let nodes: std::collections::HashSet<&str> =
        input.nodes.iter().map(|n| n.name.as_str()).collect();
    for decision in decisions {
        if !nodes.contains(decision.node.as_str()) {
            return Err(malformed(format!(
                "a decision on node {}, which is not in the input",
                decision.node
            )));
        }
    }
    Ok(())
}

fn json(text: &str, field: &str) -> Result<serde_json::Value, CallError> {
    serde_json::from_str(text).map_err(|e| malformed(format!("{field} is not JSON: {e}")))
}

pub(crate) fn task_admission(answer: &admission::TaskAdmission) -> Result<(), CallError> {
    if !json(&answer.defaults, "defaults")?.is_object() {
        return Err(malformed("defaults is not a JSON object"));
    }
    Ok(())
}

pub(crate) fn review_response(answer: &admission::ReviewResponse) -> Result<(), CallError> {
    if let Some(patch) = &answer.patch
        && !json(patch, "patch")?.is_array()
    {
        return Err(malformed("patch is not a JSON Patch array"));
    }
    Ok(())
}

/// The tasks of a list have names, and parameters that are JSON objects.
pub(crate) fn lifecycle_decision(decision: &lifecycle::Decision) -> Result<(), CallError> {
    let lifecycle::Decision::Move(transition) = decision else {
        return Ok(());
    };
    for (n, task) in transition.tasks.iter().enumerate() {
        if task.name.trim().is_empty() {
            return Err(malformed(format!("task {} of the list has no name", n + 1)));
        }
        if !json(&task.params, &format!("the params of task {}", task.name))?.is_object() {
            return Err(malformed(format!(
                "the params of task {} are not a JSON object",
                task.name
            )));
        }
    }
    Ok(())
}

fn smoke_app(name: &str, namespace_exists: bool) -> types::App {
    types::App {
        id: types::AppId {
            namespace: "verdict-smoke".into(),
            name: name.into(),
        },
        namespace_exists,
        namespace_labels: Vec::new(),
        expected_replicas: None,
        workloads: Vec::new(),
        pods: Vec::new(),
        objects: Vec::new(),
        probe: None,
        observed_at: SMOKE_NOW,
    }
}

pub(crate) fn smoke_status_inputs() -> Vec<status::AppInput> {
    vec![
        status::AppInput {
            app: smoke_app("verdict-smoke", true),
            tasks: Vec::new(),
            nodes: Vec::new(),
            overrides: Vec::new(),
        },
        status::AppInput {
            app: smoke_app("verdict-smoke-missing", false),
            tasks: Vec::new(),
            nodes: Vec::new(),
            overrides: Vec::new(),
        },
    ]
}

pub(crate) fn smoke_failover_input() -> failover::FailoverInput {
    failover::FailoverInput {
        nodes: vec![types::Node {
            name: "verdict-smoke".into(),
            ready: types::ConditionStatus::True,
            ready_since: Some(SMOKE_NOW - 3_600_000),
            last_heartbeat: Some(SMOKE_NOW - 10_000),
            unschedulable: false,
            taints: Vec::new(),
            conditions: Vec::new(),
            labels: Vec::new(),
            address: None,
            allocatable: types::Resources {
                cpu_millis: Some(2000),
                memory_bytes: Some(4 << 30),
            },
        }],
        placements: Vec::new(),
        instances: Vec::new(),
        previous: Vec::new(),
        overrides: Vec::new(),
    }
}

pub(crate) fn smoke_admission_input() -> admission::AdmissionInput {
    admission::AdmissionInput {
        request: admission::TaskRequest {
            app: types::AppId {
                namespace: "verdict-smoke".into(),
                name: "verdict-smoke".into(),
            },
            action: types::TaskAction::Restart,
            params: "{}".into(),
            spec: crate::tasks::spec::AppSpec::default().to_wit(),
            requested_by: Some("verdict".into()),
        },
        app: Some(smoke_app("verdict-smoke", true)),
        verdict: None,
        tasks: Vec::new(),
    }
}

pub(crate) fn smoke_lifecycle_input() -> lifecycle::LifecycleInput {
    let environment = vec![lifecycle::Package {
        name: "verdict-smoke-runtime".into(),
        version: "1.0".into(),
    }];
    lifecycle::LifecycleInput {
        instance: lifecycle::Instance {
            namespace: "verdict-smoke".into(),
            name: "verdict-smoke-0".into(),
            set: "verdict-smoke".into(),
            stage: Some(lifecycle::Stage::Serving),
            since: SMOKE_NOW - 3_600_000,
            machine: lifecycle::Machine::Running,
            node: Some("verdict-smoke".into()),
            node_health: lifecycle::NodeHealth::Healthy,
            environment: environment.clone(),
            code: Some("1.0".into()),
            lists: Vec::new(),
            deleting: false,
            take_offline: false,
            forced: None,
        },
        target: lifecycle::Target {
            environment,
            code: Some("1.1".into()),
            may_disrupt: true,
            released: false,
        },
    }
}
