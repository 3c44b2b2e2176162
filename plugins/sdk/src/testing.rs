//! Builders of inputs for testing a rule with an ordinary `cargo test`
//! (natively, no host needed). Everything not set is what a healthy
//! application looks like: a Deployment whose pods run, ready, on `node-1`.
//!
//! ```ignore
//! use verdict_policy::testing::{app, container, ctx, pod};
//!
//! let input = app("shop", "web")
//!     .pod(pod("web-1").container(container("web").restarts(7).last_exit(1, NOW - 60_000)))
//!     .build();
//! let verdict = MyPolicy::evaluate(&ctx(NOW), &input).unwrap();
//! ```

use crate::types::*;

/// A context at `now` (milliseconds since the epoch) with no settings.
pub fn ctx(now: Timestamp) -> Context {
    with_settings(now, "{}")
}

/// A context at `now` with `settings` (a JSON object text).
pub fn with_settings(now: Timestamp, settings: &str) -> Context {
    Context {
        now,
        settings: settings.into(),
    }
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
    }
}

/// An application to build: `app(namespace, name)`.
#[derive(Debug, Clone)]
pub struct AppBuilder {
    namespace: String,
    name: String,
    replicas: Option<u32>,
    namespace_labels: Vec<KeyValue>,
    workload_labels: Vec<KeyValue>,
    pods: Vec<Pod>,
    tasks: Vec<Task>,
    observed_at: Timestamp,
}

/// An application backed by a Deployment of the same name; its replicas
/// are its pods unless [`AppBuilder::replicas`] says otherwise.
pub fn app(namespace: &str, name: &str) -> AppBuilder {
    AppBuilder {
        namespace: namespace.into(),
        name: name.into(),
        replicas: None,
        namespace_labels: Vec::new(),
        workload_labels: Vec::new(),
        pods: Vec::new(),
        tasks: Vec::new(),
        observed_at: 0,
    }
}

impl AppBuilder {
    /// The Deployment's desired replicas.
    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// A label on the application's namespace.
    pub fn namespace_label(mut self, key: &str, value: &str) -> Self {
        self.namespace_labels.push(kv(key, value));
        self
    }

    /// A label on the application's Deployment.
    pub fn workload_label(mut self, key: &str, value: &str) -> Self {
        self.workload_labels.push(kv(key, value));
        self
    }

    pub fn pod(mut self, pod: PodBuilder) -> Self {
        let mut pod = pod.0;
        pod.namespace = self.namespace.clone();
        self.pods.push(pod);
        self
    }

    /// A task of the application, in `phase`.
    pub fn task(mut self, id: &str, action: TaskAction, phase: TaskPhase, at: Timestamp) -> Self {
        self.tasks.push(Task {
            id: id.into(),
            app: AppId {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            },
            action,
            phase,
            progress: 0,
            message: None,
            created_at: at,
            updated_at: at,
            requested_by: None,
            params: "{}".into(),
            steps: Vec::new(),
        });
        self
    }

    /// When the state was observed (the default: 0).
    pub fn observed_at(mut self, at: Timestamp) -> Self {
        self.observed_at = at;
        self
    }

    pub fn build(self) -> AppInput {
        let ready = self
            .pods
            .iter()
            .filter(|p| p.containers.iter().all(|c| c.ready))
            .count() as u32;
        let replicas = self.replicas.unwrap_or(self.pods.len() as u32);
        let workload = Workload {
            kind: WorkloadKind::Deployment,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            desired_replicas: replicas,
            current_replicas: self.pods.len() as u32,
            ready_replicas: ready,
            available_replicas: ready,
            updated_replicas: self.pods.len() as u32,
            generation: 1,
            observed_generation: 1,
            paused: false,
            conditions: Vec::new(),
            labels: self.workload_labels,
            annotations: Vec::new(),
            created_at: None,
        };
        let owner = Owner {
            kind: "Deployment".into(),
            name: self.name.clone(),
        };
        let pods = self
            .pods
            .into_iter()
            .map(|mut p| {
                p.owner.get_or_insert_with(|| owner.clone());
                p
            })
            .collect();
        AppInput {
            app: App {
                id: AppId {
                    namespace: self.namespace,
                    name: self.name,
                },
                namespace_exists: true,
                namespace_labels: self.namespace_labels,
                expected_replicas: Some(replicas),
                workloads: vec![workload],
                pods,
                objects: Vec::new(),
                probe: None,
                observed_at: self.observed_at,
            },
            tasks: self.tasks,
            nodes: Vec::new(),
            overrides: Vec::new(),
        }
    }
}

/// A pod to build: running on `node-1`, with the containers given.
#[derive(Debug, Clone)]
pub struct PodBuilder(Pod);

pub fn pod(name: &str) -> PodBuilder {
    PodBuilder(Pod {
        namespace: String::new(),
        name: name.into(),
        node: Some("node-1".into()),
        phase: PodPhase::Running,
        reason: None,
        message: None,
        conditions: Vec::new(),
        restart_policy: RestartPolicy::Always,
        created_at: None,
        started_at: None,
        deleting_since: None,
        finalizers: Vec::new(),
        containers: Vec::new(),
        owner: None,
        labels: Vec::new(),
        ip: None,
        usage: None,
    })
}

impl PodBuilder {
    pub fn container(mut self, container: ContainerBuilder) -> Self {
        self.0.containers.push(container.0);
        self
    }

    pub fn phase(mut self, phase: PodPhase) -> Self {
        self.0.phase = phase;
        self
    }

    pub fn node(mut self, node: &str) -> Self {
        self.0.node = Some(node.into());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0.labels.push(kv(key, value));
        self
    }

    pub fn build(self) -> Pod {
        self.0
    }
}

/// A main container to build: running and ready, never restarted.
#[derive(Debug, Clone)]
pub struct ContainerBuilder(Container);

pub fn container(name: &str) -> ContainerBuilder {
    let none = Resources {
        cpu_millis: None,
        memory_bytes: None,
    };
    ContainerBuilder(Container {
        name: name.into(),
        image: format!("{name}:1"),
        kind: ContainerKind::Main,
        ready: true,
        started: Some(true),
        restart_count: 0,
        state: ContainerState::Running(RunningState { started_at: None }),
        last_state: None,
        limits: none,
        requests: none,
        usage: None,
    })
}

impl ContainerBuilder {
    pub fn restarts(mut self, count: u32) -> Self {
        self.0.restart_count = count;
        self
    }

    /// The last run ended with `exit_code` at `finished_at`.
    pub fn last_exit(mut self, exit_code: i32, finished_at: Timestamp) -> Self {
        self.0.last_state = Some(TerminatedState {
            exit_code,
            signal: None,
            reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.into()),
            message: None,
            started_at: None,
            finished_at: Some(finished_at),
        });
        self
    }

    /// Waiting, not ready (`CrashLoopBackOff`, `ImagePullBackOff`, …).
    pub fn waiting(mut self, reason: &str) -> Self {
        self.0.ready = false;
        self.0.started = Some(false);
        self.0.state = ContainerState::Waiting(WaitingState {
            reason: Some(reason.into()),
            message: None,
        });
        self
    }

    pub fn not_ready(mut self) -> Self {
        self.0.ready = false;
        self
    }

    pub fn kind(mut self, kind: ContainerKind) -> Self {
        self.0.kind = kind;
        self
    }

    pub fn build(self) -> Container {
        self.0
    }
}
