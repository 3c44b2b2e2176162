//! The default status rules: the rules of the product's source documents
//! (seed 000 for applications, seed 001 for pods and containers), written as
//! a pure function of the observation, the application's tasks and `now`.
//!
//! This file is the one source of the rules. The plugin compiles it against
//! its WIT bindings (`lib.rs` is the thin wrapper that exports it); the host
//! compiles the same file against its own bindings of the same WIT types to
//! run the rules natively (`verdict::native`), which the benchmarks compare
//! with the component. It names its types through `super::bindings`.

use super::bindings::{
    App, AppInput, AppVerdict, Condition, ConditionStatus, Container, ContainerKind,
    ContainerState, Display, GroupStatus, GroupVerdict, InstanceStatus, InstanceVerdict, Node, Pod,
    PodPhase, ProbeOutcome, RestartPolicy, Severity, StableStatus, StatusOverride, Task,
    TaskAction, TaskPhase, Timestamp, Transition, Transitional, Workload, WorkloadKind,
};

#[path = "objects.rs"]
mod objects;

/// The numbers of the rules, read from the plugin's settings.
pub struct Settings {
    /// A restart or abnormal exit this recent makes a container restarting
    /// or unhealthy.
    restart_window_ms: i64,
    /// Usage at or above this share of the limit makes a pod overloaded.
    overload_ratio: f64,
    /// A running pod not ready for longer than this is unhealthy.
    unready_grace_ms: i64,
    /// A pod pending (unschedulable, creating) for longer than this is stuck.
    pending_grace_ms: i64,
    /// An instance whose node has been out of contact for longer than this
    /// is offline (before, unknown).
    offline_after_ms: i64,
    /// An instance whose node came back from an outage less than this ago
    /// is re-checked: initializing, not yet ready.
    recheck_after_outage_ms: i64,
}

impl Settings {
    pub fn parse(text: &str) -> Self {
        let value: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        let int = |key: &str, default: i64| {
            value
                .get(key)
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(default)
        };
        Self {
            restart_window_ms: int("restart-window-ms", 5 * 60_000),
            overload_ratio: value
                .get("overload-ratio")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.9),
            unready_grace_ms: int("unready-grace-ms", 2 * 60_000),
            pending_grace_ms: int("pending-grace-ms", 10 * 60_000),
            offline_after_ms: int("offline-after-ms", 5 * 60_000),
            recheck_after_outage_ms: int("recheck-after-outage-ms", 60_000),
        }
    }
}

pub const SETTINGS_SCHEMA: &str = r#"{"type":"object","additionalProperties":false,"properties":{
"restart-window-ms":{"type":"integer","minimum":0,"default":300000},
"overload-ratio":{"type":"number","exclusiveMinimum":0,"default":0.9},
"unready-grace-ms":{"type":"integer","minimum":0,"default":120000},
"pending-grace-ms":{"type":"integer","minimum":0,"default":600000},
"offline-after-ms":{"type":"integer","minimum":0,"default":300000},
"recheck-after-outage-ms":{"type":"integer","minimum":0,"default":60000}}}"#;

/// The earliest time a time-based rule would change its answer.
#[derive(Default)]
struct Recheck(Option<Timestamp>);

impl Recheck {
    fn at(&mut self, when: Timestamp) {
        self.0 = Some(self.0.map_or(when, |current| current.min(when)));
    }
}

/// What the rules need besides the input: settings, `now`, and the
/// recheck deadline they move.
struct Eval<'a> {
    settings: &'a Settings,
    now: Timestamp,
    recheck: Recheck,
}

impl Eval<'_> {
    /// Whether `since` lies further back than `span`; when not, the answer
    /// changes at `since + span`, so that becomes a recheck time.
    fn older_than(&mut self, since: Timestamp, span: i64) -> bool {
        if self.now - since >= span {
            true
        } else {
            self.recheck.at(since + span);
            false
        }
    }
}

/// The verdict on one application.
pub fn evaluate_app(settings: &Settings, now: Timestamp, input: &AppInput) -> AppVerdict {
    let app = &input.app;
    let mut eval = Eval {
        settings,
        now,
        recheck: Recheck::default(),
    };
    let groups: Vec<GroupVerdict> = app
        .pods
        .iter()
        .map(|pod| pod_verdict(&mut eval, pod, &input.nodes))
        .collect();

    let judged = objects::judge(&mut eval, input);

    // Pods without a workload this host observes (bare pods, Jobs) count as
    // one expected replica each; a pod an object runs in (a VM's
    // `virt-launcher` pod) is counted as that object.
    let bare: Vec<(&Pod, &GroupVerdict)> = app
        .pods
        .iter()
        .zip(&groups)
        .filter(|(p, _)| !owned_by_workload(app, p) && !hosted(app, p))
        .collect();
    let expected = app.expected_replicas.unwrap_or_else(|| {
        app.workloads
            .iter()
            .map(|w| w.desired_replicas)
            .sum::<u32>()
            + bare.len() as u32
            + judged.expected
    });
    let ready = app.workloads.iter().map(|w| w.ready_replicas).sum::<u32>()
        + bare.iter().filter(|(p, _)| pod_ready(p)).count() as u32
        + judged.ready;

    let (mut stable, mut stable_reason) =
        stable_status(&mut eval, app, &groups, &judged, expected, ready);
    if !judged.stages.is_empty() {
        let stages: Vec<String> = judged
            .stages
            .iter()
            .map(|(stage, n)| format!("{n} {}", objects::stage_word(*stage)))
            .collect();
        stable_reason = format!("{stable_reason}; instances: {}", stages.join(", "));
    }
    let forced = app_override(&input.overrides);
    if let Some(f) = forced {
        if let Some(at) = f.expires_at {
            eval.recheck.at(at);
        }
        stable = forced_stable(&f.status).unwrap_or(stable);
        stable_reason = format!("forced by {}: {}", f.by, f.reason);
        if app.workloads.is_empty() && app.pods.is_empty() && app.objects.is_empty() {
            // Forced on an app deleted since: say so, rather than show a
            // forced status of nothing.
            stable_reason = format!(
                "{stable_reason}; the app no longer exists (no workload, pod or object of it is observed): lift the override"
            );
        }
    }
    let transitional = input
        .tasks
        .iter()
        .find(|t| in_flight(t.phase))
        .map(|t| Transitional {
            status: transition_of(t.action),
            task_id: t.id.clone(),
            phase: t.phase,
            progress: t.progress.min(100),
        });
    let failed_task = input
        .tasks
        .first()
        .filter(|t| t.phase == TaskPhase::Failed && last_change(app) <= t.updated_at);
    let mut display = display_of(stable, &stable_reason, transitional.as_ref(), failed_task);
    if forced.is_some() {
        // A person's decision ranks above everything, tasks included.
        display = display_of(stable, &stable_reason, None, None);
        display.text = format!("{} — {stable_reason}", stable_word(stable));
        if app.workloads.is_empty() && app.pods.is_empty() && app.objects.is_empty() {
            display.severity = Severity::Warning;
        }
    }

    AppVerdict {
        app: app.id.clone(),
        stable,
        stable_reason,
        transitional,
        display,
        ready_replicas: ready,
        expected_replicas: expected,
        groups,
        objects: judged.verdicts,
        forced: forced.cloned(),
        recheck_after: eval.recheck.0,
    }
}

/// The override in force on the whole app.
fn app_override(overrides: &[StatusOverride]) -> Option<&StatusOverride> {
    overrides.iter().find(|o| o.instance.is_none())
}

fn forced_stable(name: &str) -> Option<StableStatus> {
    match name {
        "running" => Some(StableStatus::Running),
        "degraded" => Some(StableStatus::Degraded),
        "stopped" => Some(StableStatus::Stopped),
        "panic" => Some(StableStatus::Panic),
        _ => None,
    }
}

fn stable_word(stable: StableStatus) -> &'static str {
    match stable {
        StableStatus::Running => "Running",
        StableStatus::Degraded => "Degraded",
        StableStatus::Stopped => "Stopped",
        StableStatus::Panic => "Panic",
        StableStatus::NotExisted => "Not existed",
    }
}

/// A pod an object of the app runs in (a VM's `virt-launcher` pod, owned
/// by its VMI).
fn hosted(app: &App, pod: &Pod) -> bool {
    pod.owner.as_ref().is_some_and(|o| {
        o.kind == "VirtualMachineInstance"
            || app
                .objects
                .iter()
                .any(|object| object.kind == o.kind && object.name == o.name)
    })
}

fn owned_by_workload(app: &App, pod: &Pod) -> bool {
    pod.owner
        .as_ref()
        .is_some_and(|o| app.workloads.iter().any(|w| w.name == o.name))
}

fn condition<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.kind == kind)
}

fn pod_ready(pod: &Pod) -> bool {
    pod.deleting_since.is_none()
        && condition(&pod.conditions, "Ready").is_some_and(|c| c.status == ConditionStatus::True)
}

/// The latest moment anything observed of the app changed.
fn last_change(app: &App) -> Timestamp {
    let workloads = app
        .workloads
        .iter()
        .flat_map(|w| w.conditions.iter().filter_map(|c| c.last_transition));
    let pods = app.pods.iter().flat_map(|p| {
        p.conditions
            .iter()
            .filter_map(|c| c.last_transition)
            .chain(p.created_at)
            .chain(p.deleting_since)
    });
    workloads.chain(pods).max().unwrap_or(i64::MIN)
}

fn stable_status(
    eval: &mut Eval<'_>,
    app: &App,
    groups: &[GroupVerdict],
    judged: &objects::Judged,
    expected: u32,
    ready: u32,
) -> (StableStatus, String) {
    if !app.namespace_exists {
        return (
            StableStatus::NotExisted,
            format!("namespace {} does not exist", app.id.namespace),
        );
    }
    if app.workloads.is_empty() && app.pods.is_empty() && app.objects.is_empty() {
        return (
            StableStatus::Stopped,
            "no Deployment or StatefulSet exists".into(),
        );
    }
    if expected == 0 {
        let why = if judged.counted && app.workloads.is_empty() {
            "nothing of it is asked to run"
        } else {
            "scaled to zero replicas"
        };
        return (StableStatus::Stopped, why.into());
    }
    let rollout = stuck_rollout(app);
    if ready < expected {
        // Seed 000: fewer ready replicas than expected is degraded; panic is
        // for an app that as a whole cannot serve — no replica ready while
        // some are expected and something failing, or every replica failing.
        let failing: Vec<&GroupVerdict> = groups
            .iter()
            .zip(&app.pods)
            .filter(|(g, p)| is_failing(eval, g, p))
            .map(|(g, _)| g)
            .collect();
        let whole = ready == 0 || (!app.pods.is_empty() && failing.len() == app.pods.len());
        if let Some(named) = pods_named(&failing) {
            let status = if whole {
                StableStatus::Panic
            } else {
                StableStatus::Degraded
            };
            return (status, format!("{ready}/{expected} ready; {named}"));
        }
        if let Some(rollout) = &rollout {
            let status = if ready == 0 {
                StableStatus::Panic
            } else {
                StableStatus::Degraded
            };
            return (
                status,
                format!("{ready}/{expected} ready; the rollout of {rollout} is stuck"),
            );
        }
        if let Some(failing) = &judged.failing {
            let status = if ready == 0 {
                StableStatus::Panic
            } else {
                StableStatus::Degraded
            };
            return (status, format!("{ready}/{expected} ready; {failing}"));
        }
        let waiting = judged
            .waiting
            .as_ref()
            .map(|w| format!("; {w}"))
            .unwrap_or_default();
        return (
            StableStatus::Degraded,
            format!("{ready}/{expected} replicas ready{waiting}"),
        );
    }
    if let Some(rollout) = rollout {
        return (
            StableStatus::Degraded,
            format!("{ready}/{expected} ready, but the rollout of {rollout} is stuck"),
        );
    }
    if let Some(broken) = judged.failing.as_ref().or(judged.broken.as_ref()) {
        return (
            StableStatus::Degraded,
            format!("{ready}/{expected} ready, but {broken}"),
        );
    }
    if let Some(probe) = &app.probe {
        let detail = probe
            .message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        match probe.outcome {
            ProbeOutcome::Ok => {}
            ProbeOutcome::Failing => {
                return (
                    StableStatus::Degraded,
                    format!("health check {} failing{detail}", probe.url),
                );
            }
            ProbeOutcome::Unreachable => {
                return (
                    StableStatus::Panic,
                    format!("health check {} unreachable{detail}", probe.url),
                );
            }
        }
    }
    (
        StableStatus::Running,
        format!("{ready}/{expected} replicas ready"),
    )
}

/// The failing pods named with their reasons (`pod web-1 is
/// CrashLoopBackOff`, `pods web-1 (CrashLoopBackOff), web-2 (Error)`), the
/// first few of many; `None` for none.
fn pods_named(failing: &[&GroupVerdict]) -> Option<String> {
    const SHOWN: usize = 3;
    match failing {
        [] => None,
        [one] => Some(format!("pod {} is {}", one.name, one.reason)),
        many => {
            let mut names: Vec<String> = many
                .iter()
                .take(SHOWN)
                .map(|g| format!("{} ({})", g.name, g.reason))
                .collect();
            if many.len() > SHOWN {
                names.push(format!("{} more", many.len() - SHOWN));
            }
            Some(format!("pods {} are failing", names.join(", ")))
        }
    }
}

/// The workload whose controller gave up on its rollout, described.
fn stuck_rollout(app: &App) -> Option<String> {
    app.workloads.iter().find_map(|w| {
        condition(&w.conditions, "Progressing")
            .filter(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
            .map(|c| {
                let detail = c
                    .message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default();
                format!("{} {}{detail}", kind_word(w), w.name)
            })
    })
}

fn kind_word(w: &Workload) -> &'static str {
    match w.kind {
        WorkloadKind::Deployment => "Deployment",
        WorkloadKind::StatefulSet => "StatefulSet",
        WorkloadKind::DaemonSet => "DaemonSet",
    }
}

/// A pod that will not become ready by waiting.
fn is_failing(eval: &mut Eval<'_>, group: &GroupVerdict, pod: &Pod) -> bool {
    const STUCK: [&str; 9] = [
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "InvalidImageName",
        "RunContainerError",
        "OOMKilled",
        "Error",
    ];
    let reason = group.reason.trim_start_matches("Init:");
    match group.status {
        GroupStatus::Failed | GroupStatus::RunningUnhealthy | GroupStatus::RunningRestarting => {
            true
        }
        _ if STUCK.contains(&reason) => true,
        GroupStatus::Pending => {
            // Unschedulable, creating or pulling for too long.
            let since = condition(&pod.conditions, "PodScheduled")
                .filter(|c| c.status == ConditionStatus::False)
                .and_then(|c| c.last_transition)
                .or(pod.created_at);
            let grace = eval.settings.pending_grace_ms;
            since.is_some_and(|s| eval.older_than(s, grace))
        }
        _ => false,
    }
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
        TaskAction::Migrate => Transition::Migrating,
        // The app's objects are only marked as handed over.
        TaskAction::Adopt => Transition::Updating,
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
        Transition::Migrating => ("migrating", "Migrating"),
    }
}

fn action_word(action: TaskAction) -> &'static str {
    match action {
        TaskAction::Create => "create",
        TaskAction::Start => "start",
        TaskAction::Stop => "stop",
        TaskAction::Restart => "restart",
        TaskAction::Update => "update",
        TaskAction::Scale => "scale",
        TaskAction::Delete => "delete",
        TaskAction::Migrate => "migrate",
        TaskAction::Adopt => "adopt",
    }
}

fn display_of(
    stable: StableStatus,
    stable_reason: &str,
    transitional: Option<&Transitional>,
    failed_task: Option<&Task>,
) -> Display {
    if let Some(t) = transitional {
        let (key, word) = transition_words(t.status);
        let (text, severity) = match t.phase {
            TaskPhase::AwaitingApproval => {
                (format!("{word} — awaiting approval"), Severity::Warning)
            }
            TaskPhase::Pending => (format!("{word} — pending"), Severity::Progressing),
            _ => (format!("{word} {}%", t.progress), Severity::Progressing),
        };
        return Display {
            status: key.into(),
            text,
            severity,
            progress: Some(t.progress),
        };
    }
    let (key, word, severity) = match stable {
        StableStatus::Running => ("running", "Running", Severity::Ok),
        StableStatus::Degraded => ("degraded", "Degraded", Severity::Warning),
        StableStatus::Stopped => ("stopped", "Stopped", Severity::Ok),
        StableStatus::Panic => ("panic", "Panic", Severity::Error),
        StableStatus::NotExisted => ("not-existed", "Not existed", Severity::Ok),
    };
    if let Some(task) = failed_task {
        return Display {
            status: key.into(),
            text: format!(
                "{word} — {} failed{}",
                action_word(task.action),
                task.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
            severity: Severity::Error,
            progress: None,
        };
    }
    let text = match stable {
        StableStatus::Degraded | StableStatus::Panic => format!("{word} — {stable_reason}"),
        _ => word.to_string(),
    };
    Display {
        status: key.into(),
        text,
        severity,
        progress: None,
    }
}

/// What holds an object in deletion, and for how long (seed 002's
/// asynchronous clean-up: load balancer, monitoring, machine).
fn held_in_deletion(eval: &Eval<'_>, since: Timestamp, finalizers: &[String]) -> String {
    let span = span(eval.now - since);
    if finalizers.is_empty() {
        format!("deletion requested {span} ago")
    } else {
        format!("held in deletion by {} for {span}", finalizers.join(", "))
    }
}

/// A span of time for a person: `40 s`, `5 min`, `3 h`, `12 d`.
fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

// ---- pods ------------------------------------------------------------------

/// Why a pod's node cannot be trusted to report on it, if it cannot.
fn node_unreachable(pod: &Pod, nodes: &[Node]) -> Option<String> {
    let node = nodes.iter().find(|n| Some(&n.name) == pod.node.as_ref())?;
    let unreachable = node
        .taints
        .iter()
        .any(|t| t.key == "node.kubernetes.io/unreachable");
    (node.ready == ConditionStatus::Unknown || unreachable)
        .then(|| format!("node {} is not reachable", node.name))
}

fn pod_verdict(eval: &mut Eval<'_>, pod: &Pod, nodes: &[Node]) -> GroupVerdict {
    let instances: Vec<InstanceVerdict> = pod
        .containers
        .iter()
        .map(|c| instance_verdict(eval, c))
        .collect();
    let (status, reason, message) = group_status(eval, pod, nodes, &instances);
    GroupVerdict {
        name: pod.name.clone(),
        node: pod.node.clone(),
        status,
        reason,
        message,
        instances,
    }
}

type Judgement = (GroupStatus, String, Option<String>);

fn group_status(
    eval: &mut Eval<'_>,
    pod: &Pod,
    nodes: &[Node],
    instances: &[InstanceVerdict],
) -> Judgement {
    let pairs: Vec<(&Container, &InstanceVerdict)> = pod.containers.iter().zip(instances).collect();
    let mains: Vec<&(&Container, &InstanceVerdict)> = pairs
        .iter()
        .filter(|(c, _)| c.kind == ContainerKind::Main)
        .collect();

    if let Some(since) = pod.deleting_since {
        return (
            GroupStatus::Terminating,
            "Terminating".into(),
            Some(held_in_deletion(eval, since, &pod.finalizers)),
        );
    }
    if let Some(why) = node_unreachable(pod, nodes) {
        return (GroupStatus::Unknown, "NodeUnreachable".into(), Some(why));
    }
    if pod.phase == PodPhase::Unknown || pod.reason.as_deref() == Some("NodeLost") {
        return (
            GroupStatus::Unknown,
            pod.reason.clone().unwrap_or_else(|| "Unknown".into()),
            Some(
                pod.message
                    .clone()
                    .unwrap_or_else(|| "the pod's node stopped reporting on it".into()),
            ),
        );
    }
    match pod.phase {
        PodPhase::Failed => {
            let failed = mains
                .iter()
                .map(|(_, i)| *i)
                .chain(pairs.iter().map(|(_, i)| *i))
                .find(|i| i.status == InstanceStatus::Failed);
            let reason = pod
                .reason
                .clone()
                .or_else(|| failed.and_then(|i| i.reason.clone()))
                .unwrap_or_else(|| "Error".into());
            let message = pod
                .message
                .clone()
                .or_else(|| failed.and_then(|i| i.message.clone()));
            return (GroupStatus::Failed, reason, message);
        }
        PodPhase::Succeeded => return (GroupStatus::Succeeded, "Completed".into(), None),
        _ => {}
    }

    if let Some(judgement) = init_progress(&pairs) {
        return judgement;
    }
    if pod.phase == PodPhase::Pending {
        return pending(pod, &mains);
    }
    running(eval, pod, &mains)
}

/// Init containers gate the pod: their progress in kubectl's words.
/// Sidecars only need to have started.
fn init_progress(pairs: &[(&Container, &InstanceVerdict)]) -> Option<Judgement> {
    let inits: Vec<&(&Container, &InstanceVerdict)> = pairs
        .iter()
        .filter(|(c, _)| c.kind == ContainerKind::Init)
        .collect();
    let done = inits
        .iter()
        .take_while(|(_, i)| i.status == InstanceStatus::Succeeded)
        .count();
    let (container, blocking) = inits.get(done)?;
    let reason = match (blocking.status, blocking.reason.as_deref()) {
        (InstanceStatus::Failed, Some("OOMKilled")) => "Init:OOMKilled".to_string(),
        (InstanceStatus::Failed, _) => "Init:Error".to_string(),
        (InstanceStatus::Pending, Some(r))
            if r != "PodInitializing" && r != "ContainerCreating" =>
        {
            format!("Init:{r}")
        }
        // Waiting to run again after a failure.
        (_, _)
            if container
                .last_state
                .as_ref()
                .is_some_and(|t| t.exit_code != 0) =>
        {
            "Init:Error".to_string()
        }
        _ => format!("Init:{done}/{}", inits.len()),
    };
    let message = blocking.message.clone().or_else(|| {
        Some(format!(
            "init container {} has not completed",
            container.name
        ))
    });
    Some((GroupStatus::Pending, reason, message))
}

fn pending(pod: &Pod, mains: &[&(&Container, &InstanceVerdict)]) -> Judgement {
    if let Some(c) =
        condition(&pod.conditions, "PodScheduled").filter(|c| c.status == ConditionStatus::False)
    {
        return (
            GroupStatus::Pending,
            c.reason.clone().unwrap_or_else(|| "Unschedulable".into()),
            c.message.clone(),
        );
    }
    let waiting = mains
        .iter()
        .find_map(|(_, i)| i.reason.clone().map(|r| (r, i.message.clone())));
    let (reason, message) = waiting.unwrap_or_else(|| ("Pending".into(), pod.message.clone()));
    (GroupStatus::Pending, reason, message)
}

fn running(eval: &mut Eval<'_>, pod: &Pod, mains: &[&(&Container, &InstanceVerdict)]) -> Judgement {
    let with = |status: InstanceStatus| {
        mains
            .iter()
            .find(|(_, i)| i.status == status)
            .map(|(c, i)| (*c, *i))
    };
    let reason_or =
        |i: &InstanceVerdict, default: &str| i.reason.clone().unwrap_or_else(|| default.into());

    // Crash loops and recent restarts.
    if let Some((_, i)) = mains
        .iter()
        .find(|(_, i)| i.reason.as_deref() == Some("CrashLoopBackOff"))
    {
        return (
            GroupStatus::RunningRestarting,
            "CrashLoopBackOff".into(),
            i.message.clone(),
        );
    }
    if let Some((c, i)) = with(InstanceStatus::Failed) {
        let status = if pod.restart_policy == RestartPolicy::Never {
            GroupStatus::RunningUnhealthy
        } else {
            GroupStatus::RunningRestarting
        };
        let message = i
            .message
            .clone()
            .or_else(|| Some(format!("container {} exited", c.name)));
        return (status, reason_or(i, "Error"), message);
    }
    if let Some((_, i)) =
        with(InstanceStatus::RunningUnhealthy).or_else(|| with(InstanceStatus::RunningRestarting))
    {
        return (
            GroupStatus::RunningRestarting,
            reason_or(i, "Restarted"),
            i.message.clone(),
        );
    }
    // A container that waits for another reason (pulling a new image …).
    if let Some((_, i)) = with(InstanceStatus::Pending) {
        return (
            GroupStatus::RunningNotReady,
            reason_or(i, "ContainerCreating"),
            i.message.clone(),
        );
    }
    if let Some(message) = overload(eval.settings, pod) {
        return (
            GroupStatus::RunningOverloaded,
            "Overloaded".into(),
            Some(message),
        );
    }
    let ready = condition(&pod.conditions, "Ready");
    let unready: Vec<&str> = mains
        .iter()
        .filter(|(_, i)| i.status == InstanceStatus::RunningNotReady)
        .map(|(c, _)| c.name.as_str())
        .collect();
    let gate_closed = ready.is_some_and(|c| c.status == ConditionStatus::False);
    if unready.is_empty() && !gate_closed {
        return (GroupStatus::RunningHealthy, "Running".into(), None);
    }
    let message = if unready.is_empty() {
        ready
            .and_then(|c| c.message.clone())
            .or_else(|| Some("readiness gates are not passing".into()))
    } else {
        Some(format!("containers not ready: {}", unready.join(", ")))
    };
    // Not ready since the Ready condition turned, or since the unready
    // containers last started, whichever is later.
    let restarted = mains
        .iter()
        .filter(|(c, _)| unready.contains(&c.name.as_str()))
        .filter_map(|(c, _)| match &c.state {
            ContainerState::Running(r) => r.started_at,
            _ => None,
        })
        .max();
    let turned = ready
        .filter(|c| c.status != ConditionStatus::True)
        .and_then(|c| c.last_transition);
    let since = turned.max(restarted).or(pod.started_at);
    // An earlier abnormal end (OOMKilled) says more than `NotReady`.
    let reason = mains
        .iter()
        .filter(|(c, _)| unready.contains(&c.name.as_str()))
        .find_map(|(c, _)| {
            c.last_state
                .as_ref()
                .filter(|t| t.exit_code != 0 || t.reason.as_deref() == Some("OOMKilled"))
        })
        .and_then(|t| t.reason.clone())
        .unwrap_or_else(|| "NotReady".into());
    let grace = eval.settings.unready_grace_ms;
    match since {
        Some(since) if eval.older_than(since, grace) => {
            let message = message.map(|m| format!("{m}, for {}", span(eval.now - since)));
            (GroupStatus::RunningUnhealthy, reason, message)
        }
        _ => (GroupStatus::RunningNotReady, reason, message),
    }
}

/// Why the pod is overloaded, when a container's measured use reaches the
/// threshold of its limit.
fn overload(settings: &Settings, pod: &Pod) -> Option<String> {
    pod.containers.iter().find_map(|c| {
        let usage = c.usage?;
        let share = |used: Option<u64>, limit: Option<u64>| match (used, limit) {
            (Some(u), Some(l)) if l > 0 => Some((u, l, u as f64 / l as f64)),
            _ => None,
        };
        if let Some((u, l, r)) = share(usage.cpu_millis, c.limits.cpu_millis)
            && r >= settings.overload_ratio
        {
            return Some(format!("container {} uses {u}m of {l}m CPU", c.name));
        }
        if let Some((u, l, r)) = share(usage.memory_bytes, c.limits.memory_bytes)
            && r >= settings.overload_ratio
        {
            return Some(format!(
                "container {} uses {} MiB of {} MiB memory",
                c.name,
                u >> 20,
                l >> 20
            ));
        }
        None
    })
}

// ---- containers ------------------------------------------------------------

fn instance_verdict(eval: &mut Eval<'_>, c: &Container) -> InstanceVerdict {
    let (status, reason, message) = match &c.state {
        ContainerState::Unknown => (InstanceStatus::Unknown, None, None),
        ContainerState::Waiting(w) => {
            let message = w.message.clone().or_else(|| {
                c.last_state.as_ref().map(|t| {
                    format!(
                        "last run ended with code {}{}",
                        t.exit_code,
                        t.reason
                            .as_deref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    )
                })
            });
            // Waiting to run again after crashing is a restart, not a
            // start that has yet to happen.
            let status = if w.reason.as_deref() == Some("CrashLoopBackOff") {
                InstanceStatus::RunningRestarting
            } else {
                InstanceStatus::Pending
            };
            (status, w.reason.clone(), message)
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
        ContainerState::Running(running) => running_status(eval, c, running.started_at),
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
    eval: &mut Eval<'_>,
    c: &Container,
    started_at: Option<Timestamp>,
) -> (InstanceStatus, Option<String>, Option<String>) {
    let window = eval.settings.restart_window_ms;
    if let Some(last) = &c.last_state {
        let ended = last.finished_at.or(started_at).unwrap_or(eval.now);
        if !eval.older_than(ended, window) {
            let abnormal = last.exit_code != 0 || last.reason.as_deref() == Some("OOMKilled");
            let message = Some(format!(
                "restarted {} times; last run ended with code {}{}",
                c.restart_count,
                last.exit_code,
                last.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ));
            let status = if abnormal {
                InstanceStatus::RunningUnhealthy
            } else {
                InstanceStatus::RunningRestarting
            };
            return (
                status,
                last.reason.clone().or(Some("Restarted".into())),
                message,
            );
        }
    }
    if c.restart_count > 0
        && let Some(started) = started_at
        && !eval.older_than(started, window)
    {
        return (
            InstanceStatus::RunningRestarting,
            Some("Restarted".into()),
            Some(format!("restarted {} times", c.restart_count)),
        );
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
