//! Generated clusters with a realistic mix of states, as status inputs:
//! apps of a Deployment and its pods, most pods running and healthy, the
//! rest restarting, crash-looping, pulling images, unschedulable, not ready,
//! OOM-killed, terminating, on an unreachable node, initialising or
//! overloaded; one app in 50 down (every pod crash-looping); some apps with
//! tasks in flight or failed, some with failing health checks. Deterministic: the same arguments give the same cluster.

use verdict::wit::{status, types};

/// The evaluation time the generated observations are relative to.
pub const NOW: types::Timestamp = 1_780_000_000_000;

const MINUTE: i64 = 60_000;

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number from 0 to 99.
    fn percent(&mut self) -> u64 {
        self.next() % 100
    }
}

fn condition(kind: &str, status: types::ConditionStatus, at: i64) -> types::Condition {
    types::Condition {
        kind: kind.into(),
        status,
        reason: None,
        message: None,
        last_transition: Some(at),
    }
}

fn resources(cpu: u64, memory: u64) -> types::Resources {
    types::Resources {
        cpu_millis: Some(cpu),
        memory_bytes: Some(memory),
    }
}

fn container(name: &str, kind: types::ContainerKind) -> types::Container {
    types::Container {
        name: name.into(),
        image: format!("registry.example/{name}:1.4.2"),
        kind,
        ready: true,
        started: Some(true),
        restart_count: 0,
        state: types::ContainerState::Running(types::RunningState {
            started_at: Some(NOW - 3 * 24 * 60 * MINUTE),
        }),
        last_state: None,
        limits: resources(500, 256 << 20),
        requests: resources(100, 128 << 20),
        usage: Some(resources(40, 90 << 20)),
    }
}

fn terminated(code: i32, reason: &str, finished: i64) -> types::TerminatedState {
    types::TerminatedState {
        exit_code: code,
        signal: None,
        reason: Some(reason.into()),
        message: None,
        started_at: Some(finished - 10 * MINUTE),
        finished_at: Some(finished),
    }
}

/// One pod in the state the draw picks.
fn pod(rng: &mut Rng, namespace: &str, app: &str, index: usize, down: bool) -> types::Pod {
    let mut main = container(app, types::ContainerKind::Main);
    let mut containers = Vec::new();
    if rng.percent() < 30 {
        let mut sidecar = container("proxy", types::ContainerKind::Sidecar);
        sidecar.usage = None;
        containers.push(sidecar);
    }
    let mut phase = types::PodPhase::Running;
    let mut conditions = vec![
        condition(
            "PodScheduled",
            types::ConditionStatus::True,
            NOW - 3 * 1440 * MINUTE,
        ),
        condition(
            "Ready",
            types::ConditionStatus::True,
            NOW - 3 * 1440 * MINUTE,
        ),
    ];
    let mut node = format!("n{}", 1 + index % 2);
    let mut deleting_since = None;
    let draw = rng.percent();
    // An app that is down has every pod crash-looping.
    let draw = if down { 85 } else { draw };
    match draw {
        0..80 => {}
        80..84 => {
            main.restart_count = 2;
            main.last_state = Some(terminated(0, "Completed", NOW - 2 * MINUTE));
        }
        84..87 => {
            main.ready = false;
            main.restart_count = 7;
            main.state = types::ContainerState::Waiting(types::WaitingState {
                reason: Some("CrashLoopBackOff".into()),
                message: Some("back-off 5m0s restarting failed container".into()),
            });
            main.last_state = Some(terminated(1, "Error", NOW - MINUTE));
            conditions[1] = condition("Ready", types::ConditionStatus::False, NOW - 20 * MINUTE);
        }
        87..89 => {
            phase = types::PodPhase::Pending;
            main.ready = false;
            main.started = Some(false);
            main.state = types::ContainerState::Waiting(types::WaitingState {
                reason: Some("ImagePullBackOff".into()),
                message: Some("Back-off pulling image".into()),
            });
            main.usage = None;
            conditions[1] = condition("Ready", types::ConditionStatus::False, NOW - 5 * MINUTE);
        }
        89..91 => {
            // Not ready for a moment, or for longer than the grace period.
            main.ready = false;
            let since = if index.is_multiple_of(2) {
                MINUTE
            } else {
                7 * MINUTE
            };
            conditions[1] = condition("Ready", types::ConditionStatus::False, NOW - since);
        }
        91..93 => {
            main.restart_count = 1;
            main.last_state = Some(terminated(137, "OOMKilled", NOW - 3 * MINUTE));
        }
        93..95 => {
            phase = types::PodPhase::Pending;
            main.ready = false;
            main.state = types::ContainerState::Waiting(types::WaitingState {
                reason: Some("ContainerCreating".into()),
                message: None,
            });
            main.usage = None;
            conditions = vec![types::Condition {
                reason: Some("Unschedulable".into()),
                message: Some("0/4 nodes are available: 4 Insufficient cpu.".into()),
                ..condition(
                    "PodScheduled",
                    types::ConditionStatus::False,
                    NOW - 15 * MINUTE,
                )
            }];
            node = String::new();
        }
        95..96 => deleting_since = Some(NOW - 20_000),
        96..98 => node = "n3".into(),
        98..99 => {
            phase = types::PodPhase::Pending;
            main.ready = false;
            main.state = types::ContainerState::Waiting(types::WaitingState {
                reason: Some("PodInitializing".into()),
                message: None,
            });
            let mut init = container("migrate", types::ContainerKind::Init);
            init.ready = false;
            containers.insert(0, init);
            conditions[1] = condition("Ready", types::ConditionStatus::False, NOW - MINUTE);
        }
        _ => main.usage = Some(resources(490, 100 << 20)),
    }
    containers.push(main);
    let hash = "7f9c4d";
    types::Pod {
        namespace: namespace.into(),
        name: format!("{app}-{hash}-{index:02}"),
        node: (!node.is_empty()).then_some(node),
        phase,
        reason: None,
        message: None,
        conditions,
        restart_policy: types::RestartPolicy::Always,
        created_at: Some(NOW - 3 * 1440 * MINUTE),
        started_at: Some(NOW - 3 * 1440 * MINUTE),
        deleting_since,
        finalizers: Vec::new(),
        containers,
        owner: Some(types::Owner {
            kind: "Deployment".into(),
            name: app.into(),
        }),
        labels: vec![
            types::KeyValue {
                key: "app.kubernetes.io/instance".into(),
                value: app.into(),
            },
            types::KeyValue {
                key: "pod-template-hash".into(),
                value: hash.into(),
            },
        ],
        ip: Some(format!("10.1.{}.{}", index / 250, index % 250)),
        usage: None,
    }
}

fn task(app: &types::AppId, action: types::TaskAction, phase: types::TaskPhase) -> types::Task {
    types::Task {
        id: format!("01a2-{}-{}", app.namespace, app.name),
        app: app.clone(),
        action,
        phase,
        progress: 40,
        message: (phase == types::TaskPhase::Failed).then(|| "image pull failed".into()),
        created_at: NOW - 2 * MINUTE,
        updated_at: NOW - MINUTE,
        requested_by: Some("ana".into()),
        params: "{}".into(),
        steps: Vec::new(),
    }
}

/// The nodes the pods run on: n1, n2 ready; n3 unreachable.
pub fn nodes() -> Vec<types::Node> {
    ["n1", "n2", "n3"]
        .iter()
        .map(|name| {
            let lost = *name == "n3";
            types::Node {
                name: (*name).into(),
                ready: if lost {
                    types::ConditionStatus::Unknown
                } else {
                    types::ConditionStatus::True
                },
                ready_since: Some(NOW - 30 * MINUTE),
                last_heartbeat: Some(NOW - if lost { 10 * MINUTE } else { 10_000 }),
                unschedulable: false,
                taints: if lost {
                    vec![types::Taint {
                        key: "node.kubernetes.io/unreachable".into(),
                        value: None,
                        effect: "NoExecute".into(),
                        added_at: Some(NOW - 9 * MINUTE),
                    }]
                } else {
                    Vec::new()
                },
                conditions: Vec::new(),
                labels: Vec::new(),
                address: None,
                allocatable: resources(4000, 16 << 30),
            }
        })
        .collect()
}

/// `apps` apps of `pods_per_app` pods each, in namespaces of 100 apps.
pub fn cluster(apps: usize, pods_per_app: usize) -> Vec<status::AppInput> {
    let mut rng = Rng(42);
    let nodes = nodes();
    (0..apps)
        .map(|a| {
            let namespace = format!("ns-{:03}", a / 100);
            let name = format!("app-{a:05}");
            let id = types::AppId {
                namespace: namespace.clone(),
                name: name.clone(),
            };
            // One app in 50 is down: every replica failing.
            let down = a % 50 == 49;
            let pods: Vec<types::Pod> = (0..pods_per_app)
                .map(|i| pod(&mut rng, &namespace, &name, i, down))
                .collect();
            let ready = pods
                .iter()
                .filter(|p| {
                    p.deleting_since.is_none()
                        && p.conditions
                            .iter()
                            .any(|c| c.kind == "Ready" && c.status == types::ConditionStatus::True)
                })
                .count() as u32;
            let workload = types::Workload {
                kind: types::WorkloadKind::Deployment,
                namespace: namespace.clone(),
                name: name.clone(),
                desired_replicas: pods_per_app as u32,
                current_replicas: pods_per_app as u32,
                ready_replicas: ready,
                available_replicas: ready,
                updated_replicas: pods_per_app as u32,
                generation: 3,
                observed_generation: 3,
                paused: false,
                conditions: vec![condition(
                    "Available",
                    types::ConditionStatus::True,
                    NOW - 3 * 1440 * MINUTE,
                )],
                labels: Vec::new(),
                annotations: Vec::new(),
                created_at: Some(NOW - 30 * 1440 * MINUTE),
            };
            let tasks = match rng.percent() {
                0..10 => vec![task(
                    &id,
                    types::TaskAction::Restart,
                    types::TaskPhase::Running,
                )],
                10..13 => vec![task(
                    &id,
                    types::TaskAction::Update,
                    types::TaskPhase::Failed,
                )],
                13..15 => vec![task(
                    &id,
                    types::TaskAction::Stop,
                    types::TaskPhase::AwaitingApproval,
                )],
                _ => Vec::new(),
            };
            let probe = (rng.percent() < 5).then(|| types::HealthProbe {
                url: format!("http://{name}.{namespace}/healthz"),
                outcome: types::ProbeOutcome::Failing,
                since: NOW - 2 * MINUTE,
                checked_at: NOW - 5_000,
                http_status: Some(503),
                message: Some("database unavailable".into()),
            });
            status::AppInput {
                app: types::App {
                    id,
                    namespace_exists: true,
                    namespace_labels: Vec::new(),
                    expected_replicas: None,
                    workloads: vec![workload],
                    pods,
                    objects: Vec::new(),
                    probe,
                    observed_at: NOW,
                },
                tasks,
                nodes: nodes.clone(),
                overrides: Vec::new(),
            }
        })
        .collect()
}
