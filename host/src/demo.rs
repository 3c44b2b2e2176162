//! The built-in demo cluster: the simulator in-process with its
//! controller, playing a scenario of cluster changes and of the tasks users
//! ask for. It is what runs when no cluster is configured or found. It is
//! the cargo feature `demo` (on by default); a build without it leaves the
//! simulator out of the binary and refuses `--demo` with a clear error.
//!
//! The demo also delivers a VM-hosted app (seed 002): `vms/portal`, a
//! `VMReplicaSet` of three instances whose `VMDeployment` releases 1.0 and
//! then 2.0 through a gray release that waits at a gate for a person, every
//! step carried out by the demo's own step hook on 127.0.0.1 — a few
//! seconds a step, and now and then a failure to retry.

use std::path::Path;
use std::sync::Arc;

use crate::admission::Admission;
use crate::error::Result;
use crate::tasks::Tasks;

/// The failover policy's settings on the demo cluster: its node is lost for
/// 8 s of each minute, and short clocks let a loop show the whole course
/// (suspect, unknown with evictions, recovering, healthy), unless
/// configured otherwise.
pub(crate) const FAILOVER_SETTINGS: &str =
    r#"{"grace-ms": 3000, "offline-after-ms": 30000, "stabilize-ms": 10000}"#;

#[cfg(feature = "demo")]
pub use running::Demo;

#[cfg(not(feature = "demo"))]
pub use absent::Demo;

#[cfg(feature = "demo")]
mod running {
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::error::Error;
    use crate::lifecycle::hooks::HookSpec;
    use crate::tasks::model::NewTask;

    /// The simulator serving, its scenario playing.
    #[derive(Debug)]
    pub struct Demo {
        simulator: verdict_sim::Simulator,
        player: tokio::task::JoinHandle<()>,
        /// The scenario's user actions, played by the host: each step's
        /// time and tasks, and the loop.
        tasks: Vec<(Duration, Vec<Value>)>,
        loop_every: Option<Duration>,
        /// The built-in demo's delivery.
        delivery: Option<delivery::Running>,
    }

    impl Drop for Demo {
        fn drop(&mut self) {
            self.player.abort();
            if let Some(delivery) = &self.delivery {
                delivery.hook.abort();
                delivery.release.abort();
            }
        }
    }

    impl Demo {
        /// Start the simulator and play a scenario file, or the built-in
        /// demo.
        pub async fn start(scenario: Option<&Path>) -> Result<Self> {
            let scenario_path = scenario;
            let text = match scenario {
                Some(path) => std::fs::read_to_string(path).map_err(Error::io(path))?,
                None => verdict_sim::DEMO.to_string(),
            };
            let mut scenario =
                verdict_sim::Scenario::parse(&text).map_err(|message| Error::Config {
                    key: "scenario",
                    message,
                })?;
            // A thousand changes are some twelve minutes of the demo: enough
            // for a watch to resume from, and a bound on what a host that
            // runs for days keeps (the default ten thousand took hours to
            // fill, ~80 MB).
            let options = verdict_sim::Options {
                controller: Some(verdict_sim::CONTROLLER_TICK),
                kubevirt: true,
                log_capacity: 1_000,
                ..verdict_sim::Options::default()
            };
            let simulator = verdict_sim::Simulator::start(options)
                .await
                .map_err(|e| Error::Demo(e.into()))?;
            scenario.bind(&simulator.url());
            let tasks = scenario
                .steps
                .iter()
                .filter(|s| !s.tasks.is_empty())
                .map(|s| (s.at, s.tasks.clone()))
                .collect();
            let loop_every = scenario.loop_every;
            let player = tokio::spawn(scenario.run(Arc::clone(simulator.store())));
            tracing::info!(url = %simulator.url(), "demo cluster serving");
            // The built-in demo's VM-hosted app lives in its `vms`
            // namespace; a scenario of one's own has none.
            let delivery = match scenario_path {
                None => Some(
                    delivery::start(Arc::clone(simulator.store()))
                        .await
                        .map_err(|e| Error::Demo(e.into()))?,
                ),
                Some(_) => None,
            };
            Ok(Self {
                simulator,
                player,
                tasks,
                loop_every,
                delivery,
            })
        }

        /// The step hooks of the demo's delivery: every step of the default
        /// lifecycle policy, by the demo's own hook.
        pub fn hooks(&self) -> std::collections::BTreeMap<String, HookSpec> {
            let Some(running) = &self.delivery else {
                return Default::default();
            };
            delivery::STEPS
                .iter()
                .map(|step| {
                    let spec = HookSpec {
                        timeout_seconds: 5,
                        ..HookSpec::at(running.url.clone())
                    };
                    (step.to_string(), spec)
                })
                .collect()
        }

        /// The simulator's API server URL.
        pub fn url(&self) -> String {
            self.simulator.url()
        }

        /// Ask for the scenario's tasks at their times, as users would,
        /// until aborted.
        pub(crate) fn play_tasks(
            &self,
            tasks: Arc<Tasks>,
            admission: Admission,
        ) -> tokio::task::JoinHandle<()> {
            let timeline = self.tasks.clone();
            let loop_every = self.loop_every;
            tokio::spawn(async move {
                loop {
                    let started = tokio::time::Instant::now();
                    for (at, requests) in &timeline {
                        tokio::time::sleep_until(started + *at).await;
                        for request in requests {
                            ask(&tasks, &admission, request).await;
                        }
                    }
                    match loop_every {
                        Some(every) => tokio::time::sleep_until(started + every).await,
                        None => return,
                    }
                }
            })
        }
    }

    async fn ask(tasks: &Tasks, admission: &Admission, request: &Value) {
        let request: NewTask = match serde_json::from_value(request.clone()) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(%error, %request, "demo: a scenario task is not a task request");
                return;
            }
        };
        match admission.ask(tasks, request).await {
            Ok(task) => {
                tracing::info!(app = %task.app, action = task.action_name(), id = %task.id, "demo: task asked for")
            }
            Err(error) => tracing::info!(%error, "demo: a task was not admitted"),
        }
    }
}

#[cfg(feature = "demo")]
mod delivery {
    //! The demo's VM-hosted app and its step hook.

    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use axum::Json;
    use axum::extract::State;
    use serde_json::{Value, json};
    use verdict_sim::store::Store;

    /// The steps of the default lifecycle policy.
    pub use crate::lifecycle::hooks::DEFAULT_STEPS as STEPS;

    /// How long the demo's hook takes over a step.
    const STEP_TAKES: Duration = Duration::from_millis(2_500);

    /// One step in this many fails (by its key, so that the same steps fail
    /// in every run).
    const FAILS_ONE_IN: u64 = 12;

    /// The delivery's resources and the hook, running.
    pub struct Running {
        pub url: String,
        pub hook: tokio::task::JoinHandle<()>,
        pub release: tokio::task::JoinHandle<()>,
    }

    impl std::fmt::Debug for Running {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Running").field("url", &self.url).finish()
        }
    }

    fn crd(text: &str) -> Value {
        serde_yaml_ng::from_str(text).expect("the chart's CRDs read")
    }

    /// The set and its deployment, at 1.0 without steps.
    fn objects() -> [Value; 2] {
        [
            json!({
                "apiVersion": "verdict.dev/v1alpha1", "kind": "VMReplicaSet",
                "metadata": {"name": "portal", "namespace": "vms",
                             "labels": {"app.kubernetes.io/instance": "portal"}},
                "spec": {
                    "replicas": 3,
                    "template": {
                        "metadata": {"labels": {"app.kubernetes.io/instance": "portal"}},
                        "spec": {"runStrategy": "Always",
                                 "template": {"spec": {"domain": {"cpu": {"cores": 2}, "memory": {"guest": "2Gi"}}}}},
                    },
                    "environment": [{"name": "jdk", "version": "21"}, {"name": "agent", "version": "3.2"}],
                    "rollout": {"maxUnavailable": 1},
                }
            }),
            json!({
                "apiVersion": "verdict.dev/v1alpha1", "kind": "VMDeployment",
                "metadata": {"name": "portal", "namespace": "vms"},
                "spec": {"replicaSet": "portal",
                         "code": {"artifact": "registry.example/vms/portal", "version": "1.0"}},
            }),
        ]
    }

    /// Serve the delivery's CRDs and objects on the demo cluster, start the
    /// hook, and release 2.0 through a gate once 1.0 is out.
    pub async fn start(store: Arc<Store>) -> std::io::Result<Running> {
        let other = |e: verdict_sim::store::StoreError| std::io::Error::other(format!("{e:?}"));
        for text in [
            include_str!("../../deploy/chart/verdict/crds/vmreplicaset-crd.yaml"),
            include_str!("../../deploy/chart/verdict/crds/vmdeployment-crd.yaml"),
            include_str!("../../deploy/chart/verdict/crds/server-crd.yaml"),
        ] {
            verdict_sim::apply(&store, crd(text)).map_err(other)?;
        }
        // Its namespace is the scenario's, which the scenario may not have
        // made yet.
        let namespace =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vms"}});
        verdict_sim::apply(&store, namespace).map_err(other)?;
        for object in objects() {
            verdict_sim::apply(&store, object).map_err(other)?;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/step", listener.local_addr()?);
        let seen: Seen = Arc::default();
        let app = axum::Router::new()
            .route("/step", axum::routing::post(step))
            .with_state(seen);
        let hook = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let release = tokio::spawn(release_two(store));
        Ok(Running { url, hook, release })
    }

    /// Once every instance serves 1.0, release 2.0: one instance, a gate,
    /// then the rest.
    async fn release_two(store: Arc<Store>) {
        let Some(deployments) = store.find("verdict.dev", "v1alpha1", "vmdeployments") else {
            return;
        };
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let Ok(deployment) = store.get(deployments, "vms", "portal") else {
                return;
            };
            if deployment["status"]["code"] == "1.0" && deployment["status"]["phase"] == "Completed"
            {
                let spec = json!({"spec": {
                    "code": {"artifact": "registry.example/vms/portal", "version": "2.0"},
                    "steps": [{"instances": 1}, {"pause": {}}, {"instances": "100%"}],
                }});
                let _ = store.patch(deployments, "vms", "portal", &spec);
                tracing::info!(
                    "demo: vms/portal releases 2.0 through a gray release that waits for a person"
                );
                return;
            }
        }
    }

    /// When the hook first saw each step, by key.
    type Seen = Arc<Mutex<HashMap<String, Instant>>>;

    /// The demo's step hook: a step runs for a few seconds, reporting its
    /// progress, then is done — or, for one step in twelve, fails.
    async fn step(State(seen): State<Seen>, Json(request): Json<Value>) -> Json<Value> {
        let key = request["key"].as_str().unwrap_or_default().to_string();
        let step = request["step"].as_str().unwrap_or("the step");
        let instance = request["instance"]["name"]
            .as_str()
            .unwrap_or("the instance");
        let elapsed = {
            let mut seen = seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if seen.len() > 10_000 {
                seen.clear();
            }
            seen.entry(key.clone())
                .or_insert_with(Instant::now)
                .elapsed()
        };
        if elapsed < STEP_TAKES {
            let progress = (elapsed.as_millis() * 100 / STEP_TAKES.as_millis()) as u64;
            return Json(
                json!({"status": "running", "message": format!("{step} on {instance}"),
                               "progress": progress, "retryAfterSeconds": 1}),
            );
        }
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        if step != "delete-machine" && hasher.finish().is_multiple_of(FAILS_ONE_IN) {
            return Json(json!({"status": "failed",
                "message": format!("{step} on {instance}: the package mirror timed out (the demo fails a step now and then: retry it)")}));
        }
        Json(json!({"status": "done", "message": format!("{step} on {instance}: done")}))
    }
}

#[cfg(not(feature = "demo"))]
mod absent {
    use super::*;
    use crate::error::Error;

    /// No demo cluster in this build.
    #[derive(Debug)]
    pub enum Demo {}

    impl Demo {
        pub async fn start(_scenario: Option<&Path>) -> Result<Self> {
            Err(Error::Config {
                key: "demo",
                message: "this verdict was built without the demo cluster (cargo feature `demo`); \
                          configure a cluster with --kubeconfig or --cluster-url"
                    .into(),
            })
        }

        pub fn url(&self) -> String {
            match *self {}
        }

        pub fn hooks(
            &self,
        ) -> std::collections::BTreeMap<String, crate::lifecycle::hooks::HookSpec> {
            match *self {}
        }

        pub(crate) fn play_tasks(
            &self,
            _tasks: Arc<Tasks>,
            _admission: Admission,
        ) -> tokio::task::JoinHandle<()> {
            match *self {}
        }
    }
}
