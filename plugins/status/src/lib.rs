//! The default status policy: the rules of the product's source documents
//! (seed 000 for applications, seed 001 for pods and containers), written as a
//! pure function of the observation, the application's tasks and `now`.

wit_bindgen::generate!({
    world: "status-policy",
    path: "../../wit",
});

use exports::verdict::policy::status::{AppInput, Guest};
use verdict::policy::types::{
    App, AppVerdict, Condition, ConditionStatus, Container, ContainerKind, ContainerState, Context,
    Display, GroupStatus, GroupVerdict, InstanceStatus, InstanceVerdict, PluginInfo, Pod, PodPhase,
    Severity, StableStatus, Task, TaskAction, TaskPhase, Timestamp, Transition, Transitional,
};

/// Tunable numbers of the rules, read from the plugin's settings.
struct Settings {
    /// A restart or abnormal exit this recent makes a container restarting or unhealthy.
    restart_window_ms: i64,
    /// Usage above this share of the limit makes a pod overloaded.
    overload_ratio: f64,
}

impl Settings {
    fn parse(text: &str) -> Self {
        let value: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        Self {
            restart_window_ms: value
                .get("restart-window-ms")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(5 * 60 * 1000),
            overload_ratio: value
                .get("overload-ratio")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.9),
        }
    }
}

struct DefaultStatus;

impl Guest for DefaultStatus {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "default-status".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Application, pod and container status from the cluster state and in-flight tasks.".into(),
            settings_schema: Some(
                r#"{"type":"object","properties":{"restart-window-ms":{"type":"integer","minimum":0},"overload-ratio":{"type":"number","exclusiveMinimum":0}}}"#.into(),
            ),
        }
    }

    fn evaluate(ctx: Context, input: AppInput) -> Result<AppVerdict, String> {
        let settings = Settings::parse(&ctx.settings);
        Ok(evaluate_app(&settings, ctx.now, &input.app, &input.tasks))
    }

    fn evaluate_batch(ctx: Context, inputs: Vec<AppInput>) -> Vec<Result<AppVerdict, String>> {
        let settings = Settings::parse(&ctx.settings);
        inputs
            .iter()
            .map(|input| Ok(evaluate_app(&settings, ctx.now, &input.app, &input.tasks)))
            .collect()
    }
}

export!(DefaultStatus);

/// A deadline that is only ever moved earlier: the earliest time a
/// time-based rule would change its answer.
#[derive(Default)]
struct Recheck(Option<Timestamp>);

impl Recheck {
    fn at(&mut self, when: Timestamp) {
        self.0 = Some(self.0.map_or(when, |current| current.min(when)));
    }
}

fn evaluate_app(settings: &Settings, now: Timestamp, app: &App, tasks: &[Task]) -> AppVerdict {
    let mut recheck = Recheck::default();
    let groups: Vec<GroupVerdict> = app
        .pods
        .iter()
        .map(|pod| pod_verdict(settings, now, pod, &mut recheck))
        .collect();

    let expected = app
        .expected_replicas
        .unwrap_or_else(|| app.workloads.iter().map(|w| w.desired_replicas).sum());
    let ready: u32 = app.workloads.iter().map(|w| w.ready_replicas).sum();
    let (stable, stable_reason) = stable_status(app, &groups, expected, ready);
    let transitional = tasks
        .iter()
        .find(|t| in_flight(t.phase))
        .map(|t| Transitional {
            status: transition_of(t.action),
            task_id: t.id.clone(),
            phase: t.phase,
            progress: t.progress.min(100),
        });
    let display = display_of(stable, &stable_reason, transitional.as_ref(), tasks.first());

    AppVerdict {
        app: app.id.clone(),
        stable,
        stable_reason,
        transitional,
        display,
        ready_replicas: ready,
        expected_replicas: expected,
        groups,
        recheck_after: recheck.0,
    }
}

fn stable_status(
    app: &App,
    groups: &[GroupVerdict],
    expected: u32,
    ready: u32,
) -> (StableStatus, String) {
    if !app.namespace_exists {
        return (
            StableStatus::NotExisted,
            format!("namespace {} does not exist", app.id.namespace),
        );
    }
    if app.workloads.is_empty() {
        return (
            StableStatus::Stopped,
            "no Deployment or StatefulSet exists".into(),
        );
    }
    if expected == 0 {
        return (StableStatus::Stopped, "scaled to zero replicas".into());
    }
    if ready < expected {
        if let Some(failing) = groups.iter().find(|g| is_failing(g)) {
            return (
                StableStatus::Panic,
                format!(
                    "{ready}/{expected} ready; pod {} is {}",
                    failing.name, failing.reason
                ),
            );
        }
        return (
            StableStatus::Degraded,
            format!("{ready}/{expected} replicas ready"),
        );
    }
    if let Some(probe) = &app.probe {
        if probe.outcome != verdict::policy::types::ProbeOutcome::Ok {
            return (
                StableStatus::Degraded,
                format!(
                    "health check {} is {:?}{}",
                    probe.url,
                    probe.outcome,
                    probe
                        .message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                )
                .to_lowercase(),
            );
        }
    }
    (
        StableStatus::Running,
        format!("{ready}/{expected} replicas ready"),
    )
}

/// A pod that will not become ready by waiting: the application is in panic.
fn is_failing(group: &GroupVerdict) -> bool {
    const STUCK: [&str; 8] = [
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "InvalidImageName",
        "OOMKilled",
        "Init:Error",
    ];
    group.status == GroupStatus::Failed || STUCK.iter().any(|r| group.reason.ends_with(r))
}

fn in_flight(phase: TaskPhase) -> bool {
    matches!(
        phase,
        TaskPhase::Pending | TaskPhase::AwaitingApproval | TaskPhase::Running
    )
}

fn transition_of(action: TaskAction) -> Transition {
    match action {
        TaskAction::Create => Transition::Creating,
        TaskAction::Start => Transition::Starting,
        TaskAction::Stop => Transition::Stopping,
        TaskAction::Restart => Transition::Restarting,
        TaskAction::Update => Transition::Updating,
        TaskAction::Scale => Transition::Scaling,
        TaskAction::Delete => Transition::Deleting,
    }
}

fn display_of(
    stable: StableStatus,
    stable_reason: &str,
    transitional: Option<&Transitional>,
    latest: Option<&Task>,
) -> Display {
    if let Some(t) = transitional {
        let (key, word) = transition_words(t.status);
        let text = match t.phase {
            TaskPhase::AwaitingApproval => format!("{word} — awaiting approval"),
            TaskPhase::Pending => format!("{word} — pending"),
            _ => format!("{word} {}%", t.progress),
        };
        return Display {
            status: key.into(),
            text,
            severity: Severity::Progressing,
            progress: Some(t.progress),
        };
    }
    let (key, word, severity) = match stable {
        StableStatus::Running => ("running", "Running", Severity::Ok),
        StableStatus::Degraded => ("degraded", "Degraded", Severity::Warning),
        StableStatus::Stopped => ("stopped", "Stopped", Severity::Ok),
        StableStatus::Panic => ("panic", "Panic", Severity::Error),
        StableStatus::NotExisted => ("not-existed", "Not existed", Severity::Warning),
    };
    if let Some(task) = latest.filter(|t| t.phase == TaskPhase::Failed) {
        let (_, action) = transition_words(transition_of(task.action));
        return Display {
            status: key.into(),
            text: format!(
                "{word} — {} failed{}",
                action.to_lowercase(),
                task.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            severity: Severity::Error,
            progress: None,
        };
    }
    let text = if severity == Severity::Ok {
        word.to_string()
    } else {
        format!("{word} — {stable_reason}")
    };
    Display {
        status: key.into(),
        text,
        severity,
        progress: None,
    }
}

fn transition_words(status: Transition) -> (&'static str, &'static str) {
    match status {
        Transition::Creating => ("creating", "Creating"),
        Transition::Starting => ("starting", "Starting"),
        Transition::Stopping => ("stopping", "Stopping"),
        Transition::Restarting => ("restarting", "Restarting"),
        Transition::Updating => ("updating", "Updating"),
        Transition::Scaling => ("scaling", "Scaling"),
        Transition::Deleting => ("deleting", "Deleting"),
    }
}

fn condition<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.kind == kind)
}

fn pod_verdict(
    settings: &Settings,
    now: Timestamp,
    pod: &Pod,
    recheck: &mut Recheck,
) -> GroupVerdict {
    let instances: Vec<InstanceVerdict> = pod
        .containers
        .iter()
        .map(|c| instance_verdict(settings, now, c, recheck))
        .collect();
    let (status, reason, message) = group_status(settings, pod, &instances);
    GroupVerdict {
        name: pod.name.clone(),
        node: pod.node.clone(),
        status,
        reason,
        message,
        instances,
    }
}

fn group_status(
    settings: &Settings,
    pod: &Pod,
    instances: &[InstanceVerdict],
) -> (GroupStatus, String, Option<String>) {
    let mains = || {
        pod.containers
            .iter()
            .zip(instances)
            .filter(|(c, _)| c.kind == ContainerKind::Main)
    };
    if pod.deleting_since.is_some() {
        return (GroupStatus::Terminating, "Terminating".into(), None);
    }
    let ready = condition(&pod.conditions, "Ready");
    if pod.phase == PodPhase::Unknown
        || pod.reason.as_deref() == Some("NodeLost")
        || ready.is_some_and(|c| c.status == ConditionStatus::Unknown)
    {
        return (
            GroupStatus::Unknown,
            pod.reason.clone().unwrap_or_else(|| "Unknown".into()),
            Some("the pod's node is not reachable".into()),
        );
    }
    match pod.phase {
        PodPhase::Failed => {
            let worst = mains().find(|(_, i)| i.status == InstanceStatus::Failed);
            let reason = pod
                .reason
                .clone()
                .or_else(|| worst.and_then(|(_, i)| i.reason.clone()))
                .unwrap_or_else(|| "Error".into());
            let message = pod
                .message
                .clone()
                .or_else(|| worst.and_then(|(_, i)| i.message.clone()));
            return (GroupStatus::Failed, reason, message);
        }
        PodPhase::Succeeded => return (GroupStatus::Succeeded, "Completed".into(), None),
        _ => {}
    }

    // Init containers gate the pod: show their progress as kubectl does.
    let inits: Vec<(&Container, &InstanceVerdict)> = pod
        .containers
        .iter()
        .zip(instances)
        .filter(|(c, _)| c.kind == ContainerKind::Init)
        .collect();
    let done = inits
        .iter()
        .filter(|(_, i)| i.status == InstanceStatus::Succeeded)
        .count();
    if done < inits.len() {
        let (_, blocking) = inits[done];
        let reason = match (blocking.status, blocking.reason.as_deref()) {
            (InstanceStatus::Failed, _) => "Init:Error".to_string(),
            (InstanceStatus::Pending, Some(r)) if r != "PodInitializing" => format!("Init:{r}"),
            _ => format!("Init:{done}/{}", inits.len()),
        };
        return (GroupStatus::Pending, reason, blocking.message.clone());
    }

    if pod.phase == PodPhase::Pending {
        if let Some(c) = condition(&pod.conditions, "PodScheduled")
            .filter(|c| c.status == ConditionStatus::False)
        {
            return (
                GroupStatus::Pending,
                c.reason.clone().unwrap_or_else(|| "Unschedulable".into()),
                c.message.clone(),
            );
        }
        let waiting = mains().find_map(|(_, i)| i.reason.clone().map(|r| (r, i.message.clone())));
        let (reason, message) = waiting.unwrap_or_else(|| ("Pending".into(), None));
        return (GroupStatus::Pending, reason, message);
    }

    // Running: the worst application container decides.
    let by = |status: InstanceStatus| mains().find(|(_, i)| i.status == status);
    let crash_looping = mains().find(|(_, i)| i.reason.as_deref() == Some("CrashLoopBackOff"));
    if let Some((_, i)) = by(InstanceStatus::RunningUnhealthy) {
        return (
            GroupStatus::RunningUnhealthy,
            i.reason.clone().unwrap_or_else(|| "Unhealthy".into()),
            i.message.clone(),
        );
    }
    if let Some((_, i)) = crash_looping.or_else(|| by(InstanceStatus::RunningRestarting)) {
        return (
            GroupStatus::RunningRestarting,
            i.reason.clone().unwrap_or_else(|| "Restarting".into()),
            i.message.clone(),
        );
    }
    if let Some((_, i)) = by(InstanceStatus::Failed) {
        return (
            GroupStatus::RunningUnhealthy,
            i.reason.clone().unwrap_or_else(|| "Error".into()),
            i.message.clone(),
        );
    }
    if let Some(message) = overload(settings, pod) {
        return (
            GroupStatus::RunningOverloaded,
            "Overloaded".into(),
            Some(message),
        );
    }
    let not_ready = mains().find(|(_, i)| i.status != InstanceStatus::RunningHealthy);
    if let Some((_, i)) = not_ready {
        return (
            GroupStatus::RunningNotReady,
            i.reason.clone().unwrap_or_else(|| "NotReady".into()),
            i.message.clone(),
        );
    }
    if let Some(c) = ready.filter(|c| c.status == ConditionStatus::False) {
        return (
            GroupStatus::RunningNotReady,
            c.reason.clone().unwrap_or_else(|| "NotReady".into()),
            c.message.clone(),
        );
    }
    (GroupStatus::RunningHealthy, "Running".into(), None)
}

/// Why the pod is overloaded, when a container's measured use passes the
/// threshold of its limit.
fn overload(settings: &Settings, pod: &Pod) -> Option<String> {
    pod.containers.iter().find_map(|c| {
        let usage = c.usage?;
        let over = |used: Option<u64>, limit: Option<u64>| match (used, limit) {
            (Some(u), Some(l)) if l > 0 => (u as f64 / l as f64) >= settings.overload_ratio,
            _ => false,
        };
        if over(usage.cpu_millis, c.limits.cpu_millis) {
            Some(format!(
                "container {} uses {}m of {}m CPU",
                c.name, usage.cpu_millis?, c.limits.cpu_millis?
            ))
        } else if over(usage.memory_bytes, c.limits.memory_bytes) {
            Some(format!(
                "container {} uses {} of {} bytes of memory",
                c.name, usage.memory_bytes?, c.limits.memory_bytes?
            ))
        } else {
            None
        }
    })
}

fn instance_verdict(
    settings: &Settings,
    now: Timestamp,
    c: &Container,
    recheck: &mut Recheck,
) -> InstanceVerdict {
    let (status, reason, message) = match &c.state {
        ContainerState::Waiting(w) => {
            (InstanceStatus::Pending, w.reason.clone(), w.message.clone())
        }
        ContainerState::Terminated(t) if t.exit_code == 0 => (
            InstanceStatus::Succeeded,
            Some(t.reason.clone().unwrap_or_else(|| "Completed".into())),
            t.message.clone(),
        ),
        ContainerState::Terminated(t) => (
            InstanceStatus::Failed,
            Some(t.reason.clone().unwrap_or_else(|| "Error".into())),
            t.message
                .clone()
                .or_else(|| Some(format!("exited with code {}", t.exit_code))),
        ),
        ContainerState::Unknown => (InstanceStatus::Unknown, None, None),
        ContainerState::Running(running) => {
            running_status(settings, now, c, running.started_at, recheck)
        }
    };
    InstanceVerdict {
        name: c.name.clone(),
        is_app_instance: c.kind == ContainerKind::Main,
        status,
        reason,
        message,
        restart_count: c.restart_count,
    }
}

fn running_status(
    settings: &Settings,
    now: Timestamp,
    c: &Container,
    started_at: Option<Timestamp>,
    recheck: &mut Recheck,
) -> (InstanceStatus, Option<String>, Option<String>) {
    let window = settings.restart_window_ms;
    if let Some(last) = &c.last_state {
        let ended = last.finished_at.or(started_at).unwrap_or(now);
        if now - ended < window {
            recheck.at(ended + window);
            let abnormal = last.exit_code != 0 || last.reason.as_deref() == Some("OOMKilled");
            let reason = last.reason.clone();
            let message = Some(format!(
                "last run ended with code {}{}",
                last.exit_code,
                last.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
            return if abnormal {
                (InstanceStatus::RunningUnhealthy, reason, message)
            } else {
                (InstanceStatus::RunningRestarting, reason, message)
            };
        }
    }
    if c.restart_count > 0 {
        if let Some(started) = started_at.filter(|s| now - s < window) {
            recheck.at(started + window);
            return (
                InstanceStatus::RunningRestarting,
                Some("Restarted".into()),
                Some(format!("restarted {} times", c.restart_count)),
            );
        }
    }
    if !c.ready {
        return (
            InstanceStatus::RunningNotReady,
            Some("NotReady".into()),
            None,
        );
    }
    (InstanceStatus::RunningHealthy, None, None)
}
