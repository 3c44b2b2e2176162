//! The built-in demo cluster: the simulator in-process with its
//! controller, playing a scenario of cluster changes and of the tasks users
//! ask for. It is what runs when no cluster is configured or found. It is
//! the cargo feature `demo` (on by default); a build without it leaves the
//! simulator out of the binary and refuses `--demo` with a clear error.

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
    }

    impl Drop for Demo {
        fn drop(&mut self) {
            self.player.abort();
        }
    }

    impl Demo {
        /// Start the simulator and play a scenario file, or the built-in
        /// demo.
        pub async fn start(scenario: Option<&Path>) -> Result<Self> {
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
            Ok(Self {
                simulator,
                player,
                tasks,
                loop_every,
            })
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

        pub(crate) fn play_tasks(
            &self,
            _tasks: Arc<Tasks>,
            _admission: Admission,
        ) -> tokio::task::JoinHandle<()> {
            match *self {}
        }
    }
}
