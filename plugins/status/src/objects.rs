//! The default rules for objects of the configured kinds: KubeVirt's virtual
//! machines (seed 002's instances), their instances, migrations and disk
//! imports, replica sets and pools, and any other kind by the conventions of
//! conditions. Part of `rules.rs` (and compiled with it, by the plugin and
//! by the host).

use serde_json::Value;

use super::super::bindings::{
    App, AppInput, Condition, ConditionStatus, InstanceStage, Node, Object, ObjectStatus,
    ObjectVerdict, StatusOverride, Task, TaskPhase, Timestamp,
};
use super::{Eval, condition};

const VM: &str = "VirtualMachine";
const VMI: &str = "VirtualMachineInstance";
const MIGRATION: &str = "VirtualMachineInstanceMigration";
const DATA_VOLUME: &str = "DataVolume";

/// The label that says which version of the application an instance runs.
pub const VERSION_LABEL: &str = "app.kubernetes.io/version";

/// An app's objects judged, with what they add to its counts.
#[derive(Default)]
pub struct Judged {
    pub verdicts: Vec<ObjectVerdict>,
    /// Expected and ready replicas: each instance that is asked to run, and
    /// the counts of replica sets, pools and other kinds with replicas.
    pub expected: u32,
    pub ready: u32,
    /// Whether anything of these counts at all (instances or sets).
    pub counted: bool,
    /// An instance or set that will not get better by waiting, described.
    pub failing: Option<String>,
    /// Another object that failed (a disk import, a certificate), described.
    pub broken: Option<String>,
    /// The first object on its way (an import, a VM starting), described
    /// with its progress.
    pub waiting: Option<String>,
    /// How many instances are at each stage, in the stages' order.
    pub stages: Vec<(InstanceStage, u32)>,
}

/// The status, reason, message and progress of one object.
struct Reading {
    status: ObjectStatus,
    reason: String,
    message: Option<String>,
    progress: Option<u8>,
}

impl Reading {
    fn new(status: ObjectStatus, reason: impl Into<String>, message: Option<String>) -> Self {
        Self {
            status,
            reason: reason.into(),
            message,
            progress: None,
        }
    }
}

/// An object with its `spec` and `status` parsed once.
struct Parsed<'a> {
    object: &'a Object,
    spec: Value,
    status: Value,
}

impl Parsed<'_> {
    fn text(&self, pointer: &str) -> Option<&str> {
        self.status.pointer(pointer).and_then(Value::as_str)
    }

    fn condition(&self, kind: &str) -> Option<&Condition> {
        condition(&self.object.conditions, kind)
    }

    fn is(&self, kind: &str, status: ConditionStatus) -> bool {
        self.condition(kind).is_some_and(|c| c.status == status)
    }

    fn owned_by(&self, kind: &str, name: &str) -> bool {
        self.object
            .owner
            .as_ref()
            .is_some_and(|o| o.kind == kind && o.name == name)
    }

    /// `spec.replicas` (or CloudNativePG's `spec.instances`) and the ready
    /// count from the status, for kinds that keep a number of replicas.
    fn replicas(&self) -> Option<(u32, u32)> {
        let count = |value: &Value, keys: [&str; 2]| {
            keys.iter()
                .find_map(|k| value.get(*k).and_then(Value::as_u64))
                .map(|n| n.min(u32::MAX as u64) as u32)
        };
        let desired = count(&self.spec, ["replicas", "instances"])?;
        let ready = count(&self.status, ["readyReplicas", "readyInstances"]).unwrap_or(0);
        Some((desired, ready))
    }
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

fn has_status(status: &Value) -> bool {
    status.as_object().is_some_and(|s| !s.is_empty())
}

/// Why a node cannot be trusted to report, and since when, if it cannot.
pub fn unreachable_node<'a>(nodes: &'a [Node], name: Option<&str>) -> Option<&'a Node> {
    let node = nodes.iter().find(|n| Some(n.name.as_str()) == name)?;
    let unreachable = node
        .taints
        .iter()
        .any(|t| t.key == "node.kubernetes.io/unreachable");
    (node.ready == ConditionStatus::Unknown || unreachable).then_some(node)
}

/// Judge an app's objects.
pub fn judge(eval: &mut Eval<'_>, input: &AppInput) -> Judged {
    let app = &input.app;
    // Apps of pods alone (the usual case) have nothing to judge here.
    if app.objects.is_empty() {
        return Judged::default();
    }
    let parsed: Vec<Parsed<'_>> = app
        .objects
        .iter()
        .map(|object| Parsed {
            object,
            spec: parse(&object.spec),
            status: parse(&object.status),
        })
        .collect();
    let sets: Vec<&Parsed<'_>> = parsed
        .iter()
        .filter(|p| p.object.kind != VM && p.object.kind != VMI && p.replicas().is_some())
        .collect();
    let in_a_set = |p: &Parsed<'_>| {
        p.object.owner.as_ref().is_some_and(|o| {
            sets.iter()
                .any(|s| s.object.kind == o.kind && s.object.name == o.name)
        })
    };
    let deploy = deploy_step(&input.tasks);
    let target = target_version(&input.tasks);
    let probe_failing = probe_failing(app);
    let versions: Vec<Option<&str>> = parsed
        .iter()
        .filter(|p| is_instance(p, &parsed))
        .map(|p| version_of(p.object))
        .collect();

    let mut judged = Judged::default();
    let mut stages: Vec<InstanceStage> = Vec::new();
    for p in &parsed {
        let o = p.object;
        let vmi = (o.kind == VM)
            .then(|| {
                parsed
                    .iter()
                    .find(|c| c.object.kind == VMI && c.owned_by(VM, &o.name))
            })
            .flatten();
        let node = o
            .node
            .clone()
            .or_else(|| vmi.and_then(|v| v.object.node.clone()));
        let runs_in = vmi.map_or(o, |v| v.object);
        let pods: Vec<String> = app
            .pods
            .iter()
            .filter(|pod| {
                pod.owner
                    .as_ref()
                    .is_some_and(|w| w.kind == runs_in.kind && w.name == runs_in.name)
            })
            .map(|pod| pod.name.clone())
            .collect();
        let mut reading = read(eval, p, vmi, &parsed, &input.nodes, node.as_deref());
        let instance = is_instance(p, &parsed);
        let forced = instance
            .then(|| forced_on(&input.overrides, &o.name))
            .flatten();
        if let Some(f) = forced.and_then(|f| f.expires_at) {
            eval.recheck.at(f);
        }
        let stage = instance.then(|| {
            let context = StageContext {
                deploy: deploy.as_ref(),
                target: target.as_deref(),
                versions: &versions,
                probe_failing,
                nodes: &input.nodes,
                node: node.as_deref(),
                ready_since: vmi
                    .unwrap_or(p)
                    .condition("Ready")
                    .filter(|c| c.status == ConditionStatus::True)
                    .and_then(|c| c.last_transition),
            };
            forced
                .and_then(|f| stage_named(&f.status))
                .unwrap_or_else(|| stage_of(eval, &reading, o, &context))
        });
        if let (Some(f), Some(_)) = (forced, stage) {
            let note = format!("forced by {}: {}", f.by, f.reason);
            reading.message = Some(match reading.message.take() {
                Some(m) => format!("{note} ({m})"),
                None => note,
            });
        }

        let is_set = sets.iter().any(|s| std::ptr::eq(*s, p));
        if instance && !in_a_set(p) {
            judged.counted = true;
            let stage = stage.unwrap_or(InstanceStage::Initializing);
            let leaving = forced.is_none() && reading.status == ObjectStatus::Terminating;
            if stage != InstanceStage::Stopped && !leaving {
                judged.expected += 1;
            }
            if matches!(stage, InstanceStage::Ready | InstanceStage::GrayRelease) {
                judged.ready += 1;
            }
        }
        if let Some((desired, ready)) = p.replicas().filter(|_| is_set) {
            judged.counted = true;
            if reading.status != ObjectStatus::Suspended {
                judged.expected += desired;
                judged.ready += ready.min(desired);
            }
        }
        let described = || format!("{} {} is {}", o.kind, o.name, reading.reason);
        if reading.status == ObjectStatus::Failed {
            if instance || is_set {
                judged.failing.get_or_insert_with(described);
            } else {
                judged.broken.get_or_insert_with(described);
            }
        }
        if reading.status == ObjectStatus::Progressing {
            judged.waiting.get_or_insert_with(|| {
                let progress = reading
                    .progress
                    .map(|pc| format!(" ({pc}%)"))
                    .unwrap_or_default();
                format!("{} {} is {}{progress}", o.kind, o.name, reading.reason)
            });
        }
        if let Some(stage) = stage {
            stages.push(stage);
        }
        judged.verdicts.push(ObjectVerdict {
            kind: o.kind.clone(),
            name: o.name.clone(),
            node,
            status: reading.status,
            reason: reading.reason,
            message: reading.message,
            progress: reading.progress,
            is_app_instance: instance,
            stage,
            pods,
            forced: forced.cloned(),
        });
    }
    // Without instances, sets, workloads or pods of its own, the other
    // objects stand for the app.
    let alone = app.workloads.is_empty() && app.pods.iter().all(|p| super::hosted(app, p));
    if !judged.counted && alone {
        for v in &judged.verdicts {
            if v.status != ObjectStatus::Suspended {
                judged.expected += 1;
            }
            if matches!(v.status, ObjectStatus::Ready | ObjectStatus::Succeeded) {
                judged.ready += 1;
            }
        }
        judged.failing = judged.broken.take();
        judged.counted = !judged.verdicts.is_empty();
    }
    for stage in STAGES {
        let n = stages.iter().filter(|s| **s == stage).count() as u32;
        if n > 0 {
            judged.stages.push((stage, n));
        }
    }
    judged
}

/// The stages in the life cycle's order.
const STAGES: [InstanceStage; 7] = [
    InstanceStage::Ready,
    InstanceStage::GrayRelease,
    InstanceStage::Deploying,
    InstanceStage::Initializing,
    InstanceStage::Unknown,
    InstanceStage::Offline,
    InstanceStage::Stopped,
];

pub fn stage_word(stage: InstanceStage) -> &'static str {
    match stage {
        InstanceStage::Initializing => "initializing",
        InstanceStage::Deploying => "deploying",
        InstanceStage::Ready => "ready",
        InstanceStage::GrayRelease => "gray-release",
        InstanceStage::Unknown => "unknown",
        InstanceStage::Offline => "offline",
        InstanceStage::Stopped => "stopped",
    }
}

fn stage_named(name: &str) -> Option<InstanceStage> {
    STAGES.into_iter().find(|s| stage_word(*s) == name)
}

/// A virtual machine, or an instance no virtual machine of the app owns:
/// seed 002's instances of an application.
fn is_instance(p: &Parsed<'_>, all: &[Parsed<'_>]) -> bool {
    match p.object.kind.as_str() {
        VM => true,
        VMI => !p.object.owner.as_ref().is_some_and(|o| {
            o.kind == VM
                && all
                    .iter()
                    .any(|q| q.object.kind == VM && q.object.name == o.name)
        }),
        _ => false,
    }
}

fn forced_on<'a>(overrides: &'a [StatusOverride], instance: &str) -> Option<&'a StatusOverride> {
    overrides
        .iter()
        .find(|o| o.instance.as_deref() == Some(instance))
}

fn version_of(o: &Object) -> Option<&str> {
    o.labels
        .iter()
        .find(|l| l.key == VERSION_LABEL)
        .map(|l| l.value.as_str())
}

fn in_flight(task: &Task) -> bool {
    matches!(
        task.phase,
        TaskPhase::Pending | TaskPhase::AwaitingApproval | TaskPhase::Running
    )
}

/// The running step of an in-flight task that deploys code (its name
/// says `deploy`): its message, which may name the instance it is on.
struct DeployStep {
    message: String,
}

fn deploy_step(tasks: &[Task]) -> Option<DeployStep> {
    tasks.iter().filter(|t| in_flight(t)).find_map(|t| {
        t.steps
            .iter()
            .find(|s| s.phase == TaskPhase::Running && s.name.to_lowercase().contains("deploy"))
            .map(|s| DeployStep {
                message: s.message.clone().unwrap_or_default(),
            })
    })
}

/// The version an in-flight task rolls out (its `version` parameter).
fn target_version(tasks: &[Task]) -> Option<String> {
    tasks.iter().filter(|t| in_flight(t)).find_map(|t| {
        let params: Value = parse(&t.params);
        params
            .get("version")
            .and_then(Value::as_str)
            .map(String::from)
    })
}

/// Whether the app's own health check is not passing.
fn probe_failing(app: &App) -> bool {
    use super::super::bindings::ProbeOutcome;
    app.probe
        .as_ref()
        .is_some_and(|p| p.outcome != ProbeOutcome::Ok)
}

struct StageContext<'a> {
    deploy: Option<&'a DeployStep>,
    target: Option<&'a str>,
    versions: &'a [Option<&'a str>],
    probe_failing: bool,
    nodes: &'a [Node],
    node: Option<&'a str>,
    /// When the instance last turned ready.
    ready_since: Option<Timestamp>,
}

/// Seed 002's stage of an instance from its reading.
fn stage_of(eval: &mut Eval<'_>, r: &Reading, o: &Object, c: &StageContext<'_>) -> InstanceStage {
    let named = c.deploy.is_some_and(|d| d.message.contains(&o.name));
    match r.status {
        ObjectStatus::Terminating | ObjectStatus::Failed => InstanceStage::Offline,
        ObjectStatus::Suspended | ObjectStatus::Succeeded => InstanceStage::Stopped,
        ObjectStatus::Unknown => {
            // A node out of contact past the grace period is offline.
            let since = unreachable_node(c.nodes, c.node).and_then(|n| n.ready_since);
            let grace = eval.settings.offline_after_ms;
            match since {
                Some(since) if eval.older_than(since, grace) => InstanceStage::Offline,
                _ => InstanceStage::Unknown,
            }
        }
        _ if named => InstanceStage::Deploying,
        ObjectStatus::Progressing if c.deploy.is_some() => InstanceStage::Deploying,
        ObjectStatus::Progressing => InstanceStage::Initializing,
        ObjectStatus::Ready => {
            if c.probe_failing || node_just_back(eval, c) {
                return InstanceStage::Initializing;
            }
            let mine = version_of(o);
            let newer = c.target.is_some_and(|t| mine == Some(t));
            let mixed = c.versions.iter().any(|v| *v != mine);
            if newer && mixed {
                InstanceStage::GrayRelease
            } else {
                InstanceStage::Ready
            }
        }
    }
}

/// Whether the instance's node turned Ready again so recently that the
/// instance is still being re-checked after an outage (seed 002: back
/// within the grace period, Initializing until Ready again): the node
/// turned Ready after the instance last did, so the instance's readiness
/// dates from before the outage. An instance that turned ready on a node
/// already ready (a fresh start, a migration to a new node) is not
/// re-checked; nor is one whose readiness carries no time.
fn node_just_back(eval: &mut Eval<'_>, c: &StageContext<'_>) -> bool {
    let Some(node) = c.nodes.iter().find(|n| Some(n.name.as_str()) == c.node) else {
        return false;
    };
    match (node.ready_since, c.ready_since) {
        (Some(since), Some(instance))
            if node.ready == ConditionStatus::True && instance < since =>
        {
            !eval.older_than(since, eval.settings.recheck_after_outage_ms)
        }
        _ => false,
    }
}

/// The reading of one object: deletion and an unreachable node first, then
/// by kind.
fn read(
    eval: &mut Eval<'_>,
    p: &Parsed<'_>,
    vmi: Option<&Parsed<'_>>,
    all: &[Parsed<'_>],
    nodes: &[Node],
    node: Option<&str>,
) -> Reading {
    let o = p.object;
    if let Some(since) = o.deleting_since {
        let held = super::held_in_deletion(eval, since, &o.finalizers);
        return Reading::new(ObjectStatus::Terminating, "Terminating", Some(held));
    }
    if let Some(n) = unreachable_node(nodes, node) {
        return Reading::new(
            ObjectStatus::Unknown,
            "NodeUnreachable",
            Some(format!("node {} is not reachable", n.name)),
        );
    }
    match o.kind.as_str() {
        VM => virtual_machine(p, vmi, all),
        VMI => instance(p),
        MIGRATION => migration(p),
        DATA_VOLUME => data_volume(p),
        _ => any_kind(p),
    }
}

/// Whether a VM's run strategy (or the older `running` field) asks it to
/// run.
fn asked_to_run(spec: &Value) -> Option<bool> {
    match spec.get("runStrategy").and_then(Value::as_str) {
        Some("Always" | "RerunOnFailure" | "Once") => Some(true),
        Some("Halted" | "Manual") => Some(false),
        _ => spec.get("running").and_then(Value::as_bool),
    }
}

fn ready_message(p: &Parsed<'_>) -> Option<String> {
    p.condition("Ready")
        .filter(|c| c.status != ConditionStatus::True)
        .and_then(|c| c.message.clone().or_else(|| c.reason.clone()))
}

/// KubeVirt's virtual machine, by its printable status.
fn virtual_machine(p: &Parsed<'_>, vmi: Option<&Parsed<'_>>, all: &[Parsed<'_>]) -> Reading {
    use ObjectStatus as S;
    let printable = p.object.phase.clone();
    let failure = p
        .condition("Failure")
        .filter(|c| c.status == ConditionStatus::True)
        .and_then(|c| c.message.clone())
        .or_else(|| ready_message(p));
    let Some(printable) = printable else {
        return match asked_to_run(&p.spec) {
            Some(false) => Reading::new(S::Suspended, "Stopped", Some("not asked to run".into())),
            _ => Reading::new(
                S::Progressing,
                "Provisioning",
                Some("no status reported yet".into()),
            ),
        };
    };
    // A migration of its instance in flight, or a disk import it waits for.
    let name = &p.object.name;
    if let Some(m) = all.iter().find(|m| {
        m.object.kind == MIGRATION
            && m.spec.get("vmiName").and_then(Value::as_str) == Some(name)
            && !matches!(m.object.phase.as_deref(), Some("Succeeded" | "Failed"))
    }) {
        let phase = m.object.phase.clone().unwrap_or_else(|| "Pending".into());
        return Reading::new(
            S::Progressing,
            "Migrating",
            Some(format!("migration {} is {phase}", m.object.name)),
        );
    }
    let import = all
        .iter()
        .filter(|d| d.object.kind == DATA_VOLUME && d.owned_by(VM, name))
        .map(|d| (d.object.name.as_str(), data_volume(d)))
        .find(|(_, r)| r.status == S::Progressing || r.status == S::Failed);
    match printable.as_str() {
        "Running"
            if p.is("Ready", ConditionStatus::True)
                || vmi.is_some_and(|v| v.is("Ready", ConditionStatus::True)) =>
        {
            let mut message = Vec::new();
            if let Some(v) = vmi {
                if v.is("AgentConnected", ConditionStatus::False) {
                    message.push("the guest agent is not connected".to_string());
                }
                if let Some(c) = v
                    .condition("LiveMigratable")
                    .filter(|c| c.status == ConditionStatus::False)
                {
                    message.push(format!(
                        "not live-migratable{}",
                        c.message
                            .as_deref()
                            .or(c.reason.as_deref())
                            .map(|m| format!(": {m}"))
                            .unwrap_or_default()
                    ));
                }
            }
            let message = (!message.is_empty()).then(|| message.join("; "));
            Reading::new(S::Ready, "Running", message)
        }
        "Running" => Reading::new(
            S::Progressing,
            "Booting",
            ready_message(p).or_else(|| Some("the guest is not ready yet".into())),
        ),
        "Stopped" => match asked_to_run(&p.spec) {
            Some(true) => Reading::new(
                S::Progressing,
                "Stopped",
                Some("asked to run; not started yet".into()),
            ),
            _ => Reading::new(S::Suspended, "Stopped", Some("stopped on purpose".into())),
        },
        "Paused" => Reading::new(
            S::Suspended,
            "Paused",
            p.condition("Paused").and_then(|c| c.message.clone()),
        ),
        "Terminating" => Reading::new(S::Terminating, "Terminating", None),
        "Unknown" => Reading::new(S::Unknown, "Unknown", failure),
        "CrashLoopBackOff"
        | "ErrorUnschedulable"
        | "ErrImagePull"
        | "ImagePullBackOff"
        | "ErrorPvcNotFound"
        | "ErrorDataVolumeNotFound"
        | "DataVolumeError" => {
            let message = import
                .filter(|(_, r)| r.status == S::Failed)
                .map(|(disk, r)| {
                    format!(
                        "disk {disk}: {}",
                        r.message.unwrap_or_else(|| r.reason.clone())
                    )
                })
                .or(failure);
            Reading::new(S::Failed, printable, message)
        }
        _ => {
            // Provisioning, Starting, Stopping, Migrating,
            // WaitingForVolumeBinding …: on its way.
            let mut reading = Reading::new(S::Progressing, printable, ready_message(p));
            if let Some((disk, r)) = import {
                reading.message = Some(format!(
                    "disk {disk}: {}",
                    r.message.unwrap_or_else(|| r.reason.clone())
                ));
                reading.progress = r.progress;
            }
            reading
        }
    }
}

/// KubeVirt's virtual machine instance, by its phase.
fn instance(p: &Parsed<'_>) -> Reading {
    use ObjectStatus as S;
    let phase = p.object.phase.as_deref();
    match phase {
        None => Reading::new(
            S::Progressing,
            "Pending",
            Some("no status reported yet".into()),
        ),
        Some("Pending" | "Scheduling" | "Scheduled") => {
            Reading::new(S::Progressing, phase.unwrap_or_default(), ready_message(p))
        }
        Some("Running") if p.is("Paused", ConditionStatus::True) => Reading::new(
            S::Suspended,
            "Paused",
            p.condition("Paused").and_then(|c| c.message.clone()),
        ),
        Some("Running") if p.is("Ready", ConditionStatus::True) => {
            let agent = p
                .is("AgentConnected", ConditionStatus::False)
                .then(|| "the guest agent is not connected".to_string());
            Reading::new(S::Ready, "Running", agent)
        }
        Some("Running") => Reading::new(
            S::Progressing,
            "Booting",
            ready_message(p).or_else(|| Some("the guest is not ready yet".into())),
        ),
        Some("Succeeded") => Reading::new(
            S::Succeeded,
            "Succeeded",
            Some("the guest shut down".into()),
        ),
        Some("Failed") => Reading::new(S::Failed, "Failed", ready_message(p)),
        Some(other) => Reading::new(S::Unknown, other, ready_message(p)),
    }
}

/// KubeVirt's live migration, by its phase.
fn migration(p: &Parsed<'_>) -> Reading {
    use ObjectStatus as S;
    let vmi = p.spec.get("vmiName").and_then(Value::as_str).unwrap_or("?");
    match p.object.phase.as_deref() {
        Some("Succeeded") => Reading::new(S::Succeeded, "Succeeded", Some(format!("{vmi} moved"))),
        Some("Failed") => Reading::new(
            S::Failed,
            "Failed",
            p.text("/migrationState/failureReason")
                .map(String::from)
                .or_else(|| Some(format!("{vmi} did not move"))),
        ),
        phase => Reading::new(
            S::Progressing,
            "Migrating",
            Some(format!("{vmi}: {}", phase.unwrap_or("Pending"))),
        ),
    }
}

/// CDI's disk import, by its phase, its `Running` condition and its
/// progress (`45.0%`).
fn data_volume(p: &Parsed<'_>) -> Reading {
    use ObjectStatus as S;
    let progress = p
        .text("/progress")
        .and_then(|t| t.trim_end_matches('%').parse::<f64>().ok())
        .map(|f| f.clamp(0.0, 100.0) as u8);
    let phase = p.object.phase.clone();
    let running = p.condition("Running");
    let error = running
        .filter(|c| c.status == ConditionStatus::False)
        .filter(|c| matches!(c.reason.as_deref(), Some("Error" | "ImportFailed")))
        .map(|c| c.message.clone().or_else(|| c.reason.clone()));
    match phase.as_deref() {
        Some("Succeeded") => {
            let mut r = Reading::new(S::Succeeded, "Succeeded", None);
            r.progress = Some(100);
            r
        }
        Some("Failed") => Reading::new(S::Failed, "Failed", error.flatten()),
        _ if error.is_some() => Reading::new(S::Failed, "ImportError", error.flatten()),
        Some("Paused") => Reading::new(S::Suspended, "Paused", None),
        None if !has_status(&p.status) => Reading::new(
            S::Progressing,
            "Pending",
            Some("no status reported yet".into()),
        ),
        phase => {
            let phase = phase.unwrap_or("Pending").to_string();
            let detail = running
                .and_then(|c| c.reason.clone().or_else(|| c.message.clone()))
                .filter(|r| !r.is_empty());
            let message = match (progress, detail) {
                (Some(pc), _) => Some(format!("{phase} {pc}%")),
                (None, Some(d)) => Some(d),
                (None, None) => None,
            };
            let mut r = Reading::new(S::Progressing, phase, message);
            r.progress = progress;
            r
        }
    }
}

/// Any other kind, by the conventions of conditions: suspension, failure
/// (`Stalled`, `Failed`, `Ready=False` for an error), completion, a spec
/// its controller has not yet observed, replicas short of the desired
/// count, readiness. An object whose controller is told not to act on it
/// (a `…reconcil…` annotation `disabled`) keeps its reading, which says so.
fn any_kind(p: &Parsed<'_>) -> Reading {
    let mut reading = conventions(p);
    let unreconciled = p.object.annotations.iter().any(|a| {
        let (key, value) = (a.key.to_lowercase(), a.value.to_lowercase());
        key.contains("reconcil") && (value == "disabled" || value == "false")
    });
    if unreconciled {
        let note = "reconciliation suspended: its controller is told not to act on it";
        reading.message = Some(match reading.message.take() {
            Some(m) => format!("{m}; {note}"),
            None => note.to_string(),
        });
    }
    reading
}

fn conventions(p: &Parsed<'_>) -> Reading {
    use ObjectStatus as S;
    let o = p.object;
    let phase_reason = p.text("/phaseReason").filter(|r| *r != "None");
    let detail = |c: Option<&Condition>| {
        c.and_then(|c| c.message.clone())
            .or_else(|| phase_reason.map(String::from))
    };
    // Suspended or hibernated on purpose.
    let paused_spec = ["suspend", "paused"]
        .iter()
        .any(|k| p.spec.get(*k).and_then(Value::as_bool) == Some(true));
    let suspended_condition = o.conditions.iter().find(|c| {
        c.status == ConditionStatus::True && {
            let kind = c.kind.to_lowercase();
            kind.ends_with("suspended")
                || kind.ends_with("paused")
                || kind.ends_with("hibernation")
                || kind.ends_with("hibernated")
        }
    });
    if let Some(c) = suspended_condition {
        return Reading::new(
            S::Suspended,
            c.reason.clone().unwrap_or_else(|| c.kind.clone()),
            c.message.clone(),
        );
    }
    let annotation = |pred: &dyn Fn(&str, &str) -> bool| {
        o.annotations
            .iter()
            .any(|a| pred(&a.key.to_lowercase(), &a.value.to_lowercase()))
    };
    if annotation(&|k, v| k.ends_with("hibernation") && v == "on") {
        return Reading::new(
            S::Suspended,
            "Hibernated",
            Some("hibernated on purpose".into()),
        );
    }
    if paused_spec {
        return Reading::new(S::Suspended, "Suspended", None);
    }
    // Failed.
    for kind in ["Stalled", "Failed"] {
        if let Some(c) = p
            .condition(kind)
            .filter(|c| c.status == ConditionStatus::True)
        {
            return Reading::new(
                S::Failed,
                c.reason.clone().unwrap_or_else(|| kind.into()),
                c.message.clone(),
            );
        }
    }
    let phase = o.phase.as_deref();
    if matches!(phase, Some("Failed" | "Error")) {
        return Reading::new(S::Failed, phase.unwrap_or_default(), detail(None));
    }
    let ready = p.condition("Ready");
    if let Some(c) = ready.filter(|c| c.status == ConditionStatus::False)
        && c.reason.as_deref().is_some_and(|r| {
            ["Error", "Fail", "Invalid", "BackOff"]
                .iter()
                .any(|word| r.contains(word))
        })
    {
        return Reading::new(
            S::Failed,
            c.reason.clone().unwrap_or_default(),
            c.message.clone(),
        );
    }
    // Done.
    if p.is("Succeeded", ConditionStatus::True)
        || p.is("Complete", ConditionStatus::True)
        || matches!(phase, Some("Succeeded" | "Completed"))
    {
        return Reading::new(S::Succeeded, phase.unwrap_or("Succeeded"), detail(None));
    }
    if !has_status(&p.status) {
        return Reading::new(
            S::Progressing,
            "NoStatus",
            Some("no status reported yet".into()),
        );
    }
    // On its way.
    if let (Some(generation), Some(observed)) = (o.generation, o.observed_generation)
        && observed < generation
    {
        return Reading::new(
            S::Progressing,
            "Reconciling",
            Some(format!(
                "generation {generation} not yet acted on (its controller is at {observed})"
            )),
        );
    }
    if let Some(c) = p
        .condition("Reconciling")
        .filter(|c| c.status == ConditionStatus::True)
    {
        return Reading::new(
            S::Progressing,
            c.reason.clone().unwrap_or_else(|| "Reconciling".into()),
            c.message.clone(),
        );
    }
    if let Some((desired, ready)) = p.replicas()
        && ready < desired
    {
        let count = format!("{ready}/{desired} ready");
        let mut r = match phase {
            Some(phase) => Reading::new(
                S::Progressing,
                phase,
                Some(match phase_reason {
                    Some(why) => format!("{count}: {why}"),
                    None => count,
                }),
            ),
            None => Reading::new(S::Progressing, count, phase_reason.map(String::from)),
        };
        if ready > 0 || desired > 0 {
            r.progress = Some((ready * 100 / desired.max(1)).min(100) as u8);
        }
        return r;
    }
    for kind in ["Ready", "Available"] {
        if let Some(c) = p.condition(kind) {
            return match c.status {
                ConditionStatus::True => Reading::new(
                    S::Ready,
                    c.reason.clone().unwrap_or_else(|| kind.into()),
                    None,
                ),
                _ => Reading::new(
                    S::Progressing,
                    c.reason.clone().unwrap_or_else(|| format!("Not{kind}")),
                    detail(Some(c)),
                ),
            };
        }
    }
    // Replicas all ready, or nothing says otherwise (kstatus: current).
    if let Some((desired, ready)) = p.replicas() {
        return Reading::new(S::Ready, format!("{ready}/{desired} ready"), None);
    }
    Reading::new(S::Ready, phase.unwrap_or("Current"), None)
}
