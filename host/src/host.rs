//! The host assembled from a [`Config`]: the plugin runtime and registry,
//! the folder watch, and the HTTP server.

use std::sync::Arc;

use crate::admission::Admission;
use crate::config::{ClusterSource, Config};
use crate::error::{Error, Result};
use crate::events::Kind;
use crate::http::connections;
use crate::http::{self, AppState};
use crate::observe::cluster::{self, Following, Observed};
use crate::plugins::{Registry, Runtime, watch};
use crate::tasks::{Store, StoreKind, Tasks};
use crate::verdicts::live::Live;
use crate::verdicts::live::{self as live, Verdicts};
use crate::watch::Watcher;

/// The failover policy's settings on the demo cluster.
const DEMO_FAILOVER: &str =
    r#"{"grace-ms": 3000, "offline-after-ms": 30000, "stabilize-ms": 10000}"#;

/// A running host's parts.
#[derive(Debug)]
pub struct Host {
    pub registry: Arc<Registry>,
    pub live: Option<Live>,
    pub tasks: Arc<Tasks>,
    pub events: Arc<crate::events::Events>,
    pub failover: Option<Arc<crate::failover::Failover>>,
    heartbeat: std::time::Duration,
    tokens: Arc<http::access::Tokens>,
    metrics: Arc<http::metrics::Metrics>,
    body_limit: usize,
    request_timeout: std::time::Duration,
    admission: Admission,
    _watcher: Option<Watcher>,
    _following: Option<Following>,
    /// Held while the host runs: one host per data folder.
    _data_lock: std::fs::File,
    /// Set when the host shuts down.
    stopping: tokio::sync::watch::Sender<bool>,
    /// The deriver, the prober and the other loops.
    loops: Vec<tokio::task::JoinHandle<()>>,
    _demo: Option<Demo>,
}

impl Drop for Host {
    fn drop(&mut self) {
        for task in &self.loops {
            task.abort();
        }
    }
}

/// The demo cluster: the simulator in-process with its controller, playing
/// a scenario.
#[derive(Debug)]
struct Demo {
    simulator: verdict_sim::Simulator,
    player: tokio::task::JoinHandle<()>,
    /// The scenario's user actions, played by the host: each step's time and
    /// tasks, and the loop.
    tasks: Vec<(std::time::Duration, Vec<serde_json::Value>)>,
    loop_every: Option<std::time::Duration>,
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.player.abort();
    }
}

async fn demo(scenario: Option<&std::path::Path>) -> Result<Demo> {
    let text = match scenario {
        Some(path) => std::fs::read_to_string(path).map_err(Error::io(path))?,
        None => verdict_sim::DEMO.to_string(),
    };
    let mut scenario = verdict_sim::Scenario::parse(&text).map_err(|message| Error::Config {
        key: "scenario",
        message,
    })?;
    // A thousand changes are some twelve minutes of the demo: enough for a
    // watch to resume from, and a bound on what a host that runs for days
    // keeps (the default ten thousand took hours to fill, ~80 MB).
    let options = verdict_sim::Options {
        controller: Some(verdict_sim::CONTROLLER_TICK),
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
    Ok(Demo {
        simulator,
        player,
        tasks,
        loop_every,
    })
}

/// One plugin event per plugin a reload loaded, rejected or unloaded.
fn publish_reload(events: &crate::events::Events, report: &crate::plugins::ReloadReport) {
    for loaded in &report.loaded {
        events.publish(
            Kind::Plugin,
            None,
            serde_json::json!({"event": "loaded", "plugin": loaded}),
        );
    }
    for rejected in &report.rejected {
        events.publish(
            Kind::Plugin,
            None,
            serde_json::json!({"event": "rejected", "plugin": rejected}),
        );
    }
    for name in &report.unloaded {
        events.publish(
            Kind::Plugin,
            None,
            serde_json::json!({"event": "unloaded", "plugin": {"plugin": name}}),
        );
    }
}

/// Ask for the demo scenario's tasks at their times, as users would.
async fn play_tasks(
    timeline: Vec<(std::time::Duration, Vec<serde_json::Value>)>,
    loop_every: Option<std::time::Duration>,
    tasks: Arc<Tasks>,
    admission: Admission,
) {
    loop {
        let started = tokio::time::Instant::now();
        for (at, requests) in &timeline {
            tokio::time::sleep_until(started + *at).await;
            for request in requests {
                let request: crate::tasks::model::NewTask = match serde_json::from_value(
                    request.clone(),
                ) {
                    Ok(request) => request,
                    Err(error) => {
                        tracing::warn!(%error, %request, "demo: a scenario task is not a task request");
                        continue;
                    }
                };
                match admission.ask(&tasks, request).await {
                    Ok(task) => {
                        tracing::info!(app = %task.app, action = task.action_name(), id = %task.id, "demo: task asked for")
                    }
                    Err(error) => tracing::info!(%error, "demo: a task was not admitted"),
                }
            }
        }
        match loop_every {
            Some(every) => tokio::time::sleep_until(started + every).await,
            None => return,
        }
    }
}

/// A `kube` client for the configured cluster, or `None` without one.
/// Without any configuration and no cluster to be found, the demo cluster
/// starts.
async fn client(
    source: &ClusterSource,
    demo_cluster: &mut Option<Demo>,
) -> Result<Option<kube::Client>> {
    let config = match source {
        ClusterSource::None => return Ok(None),
        ClusterSource::Demo { scenario } => {
            let started = demo(scenario.as_deref()).await?;
            let uri = started
                .simulator
                .url()
                .parse::<axum::http::Uri>()
                .map_err(|e| Error::Demo(e.into()))?;
            *demo_cluster = Some(started);
            kube::Config::new(uri)
        }
        ClusterSource::Url(url) => {
            let uri = url
                .parse()
                .map_err(Error::setting("cluster-url", format!("`{url}`")))?;
            kube::Config::new(uri)
        }
        ClusterSource::Kubeconfig(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(Error::setting("kubeconfig", path.display().to_string()))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .map_err(Error::setting("kubeconfig", path.display().to_string()))?
        }
        ClusterSource::Infer => match kube::Config::infer().await {
            Ok(config) => config,
            Err(error) => {
                tracing::warn!(%error, "no cluster configured or found (in-cluster, KUBECONFIG, ~/.kube/config): following the built-in demo cluster");
                return Box::pin(client(
                    &ClusterSource::Demo { scenario: None },
                    demo_cluster,
                ))
                .await;
            }
        },
    };
    // No retries inside the client: a 429 is how the Eviction API says a
    // disruption budget holds, and must reach the executor as such; every
    // caller here retries on its own terms (watch backoff, the executor's
    // and failover's loops).
    let mut config = config;
    config.default_retry = false;
    kube::Client::try_from(config)
        .map(Some)
        .map_err(Error::Client)
}

/// Take the data folder for this process alone: an exclusive lock on its
/// `lock` file, which names the holder's process id. Two hosts on one
/// folder would each keep their own task list and fail each other's tasks;
/// replicas share tasks through `--task-store kubernetes` instead.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File> {
    use std::io::{Read as _, Seek as _, Write as _};
    let io = |source| Error::Io {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let path = dir.join("lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(Error::Config {
                key: "data-dir",
                message: format!(
                    "{} is in use by another verdict (process {}); give each host its own \
                     --data-dir, and share tasks between replicas with --task-store kubernetes",
                    dir.display(),
                    holder.trim()
                ),
            });
        }
        Err(std::fs::TryLockError::Error(error)) => return Err(io(error)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "{}", std::process::id()).map_err(io)?;
    Ok(file)
}

impl Host {
    /// Build the runtime, load every plugin of the folder, start watching
    /// it, and follow the cluster when one is configured.
    pub async fn start(config: &Config) -> Result<Self> {
        let data_lock = lock_data_dir(&config.data_dir)?;
        let runtime = Runtime::new(&config.data_dir.join("code-cache"), config.plugins.limits)?;
        let mut demo_cluster = None;
        let client = client(&config.cluster, &mut demo_cluster).await?;
        let mut settings: std::collections::BTreeMap<String, String> = config
            .settings
            .keys()
            .map(|name| (name.clone(), config.settings_for(name)))
            .collect();
        // The demo's node is lost for 8 s of each minute: short failover
        // clocks let a loop show the whole course (suspect, unknown with
        // evictions, recovering, healthy), unless configured otherwise.
        if demo_cluster.is_some() {
            settings
                .entry("failover".into())
                .or_insert_with(|| DEMO_FAILOVER.into());
        }
        let registry = Arc::new(Registry::new(
            Arc::new(runtime),
            config.plugins.dir.clone(),
            settings,
        ));
        let events = Arc::new(crate::events::Events::new(config.events.buffer));
        let metrics = Arc::new(http::metrics::Metrics::default());
        let (published, counted) = (Arc::clone(&events), Arc::clone(&metrics));
        registry.on_reload(move |report| {
            counted.scans.inc();
            counted.reloads.inc_by(report.loaded.len() as u64);
            counted.rejections.inc_by(report.rejected.len() as u64);
            publish_reload(&published, report);
        });
        let report = registry.reload();
        tracing::info!(
            loaded = report.loaded.len(),
            rejected = report.rejected.len(),
            "plugins loaded"
        );
        let watcher = match &config.plugins.dir {
            Some(dir) => Some(watch(
                Arc::clone(&registry),
                dir,
                config.plugins.reload_debounce,
            )?),
            None => {
                tracing::warn!("no plugin folder: running without policies");
                None
            }
        };
        let observed = client
            .as_ref()
            .map(|_| Arc::new(Observed::new(config.observe.group_by.clone())));
        let store = match (config.tasks.store, &client) {
            (StoreKind::Sqlite, _) => {
                let path = config.data_dir.join("tasks.db");
                Store::Sqlite(Arc::new(crate::tasks::sqlite::SqliteStore::open(&path)?))
            }
            (StoreKind::Kubernetes, Some(client)) => Store::Kube(Box::new(
                crate::tasks::kube::KubeStore::new(client.clone(), &config.tasks.namespace),
            )),
            (StoreKind::Kubernetes, None) => {
                return Err(Error::Config {
                    key: "task-store",
                    message: "the kubernetes task store needs a cluster".into(),
                });
            }
        };
        let tasks = Arc::new(
            Tasks::open(
                store.clone(),
                config.tasks.finished_kept,
                observed.clone(),
                Some(Arc::clone(&events)),
            )
            .await?,
        );
        let mut loops = Vec::new();
        if let Store::Kube(kube_store) = store {
            loops.push(tokio::spawn(kube_store.follow(Arc::clone(&tasks))));
        }
        let executor_client = client.clone();
        let (live, following) = match (client, observed) {
            (Some(client), Some(observed)) => {
                let verdicts = Arc::new(Verdicts::with_threads(config.verdicts.derive_threads));
                let following = cluster::follow(client.clone(), &observed);
                loops.push(tokio::spawn(live::derive_forever(
                    Arc::clone(&observed),
                    Arc::clone(&registry),
                    Arc::clone(&verdicts),
                    Some(Arc::clone(&tasks)),
                    Some(Arc::clone(&events)),
                )));
                loops.push(tokio::spawn(crate::observe::probe::probe_forever(
                    Arc::clone(&observed),
                    config.observe.probes,
                )));
                loops.push(tokio::spawn(crate::observe::metrics::poll_forever(
                    client.clone(),
                    Arc::clone(&observed),
                    config.observe.metrics_every,
                )));
                let live = Live {
                    observed,
                    verdicts,
                    stale_after: config.verdicts.stale_after,
                };
                (Some(live), Some(following))
            }
            _ => (None, None),
        };
        let admission = Admission {
            registry: Arc::clone(&registry),
            failure: config.admission.failure,
            live: live.clone(),
        };
        let mut failover = None;
        if let Some(live) = &live
            && let Some(client) = &executor_client
        {
            let opened = crate::failover::Failover::open(
                config.failover.clone(),
                &config.data_dir,
                (
                    Arc::clone(&registry),
                    Arc::clone(&live.observed),
                    Arc::clone(&tasks),
                    admission.clone(),
                    Arc::clone(&events),
                ),
                Arc::new(crate::executor::Nodes::new(client.clone())),
            )?;
            let opened = Arc::new(opened);
            loops.push(tokio::spawn(Arc::clone(&opened).run()));
            failover = Some(opened);
            // Users' tasks are carried out with --execute-tasks (always on
            // the demo cluster); failover's own whenever it enforces.
            let users = config.executor.execute_tasks || demo_cluster.is_some();
            if users || config.failover.enforce {
                let executor = crate::executor::Executor::new(
                    client.clone(),
                    Arc::clone(&tasks),
                    Arc::clone(&live.observed),
                )
                .failover_only(!users);
                loops.push(tokio::spawn(executor.run()));
            }
        }
        if let Some(demo) = &demo_cluster {
            loops.push(tokio::spawn(play_tasks(
                demo.tasks.clone(),
                demo.loop_every,
                Arc::clone(&tasks),
                admission.clone(),
            )));
        }
        Ok(Self {
            registry,
            live,
            tasks,
            events,
            failover,
            heartbeat: config.http.heartbeat,
            tokens: Arc::new(http::access::Tokens::new(
                &config.read_tokens,
                &config.write_tokens,
            )),
            metrics,
            body_limit: config.http.body_limit,
            request_timeout: config.http.request_timeout,
            admission,
            _watcher: watcher,
            _following: following,
            _data_lock: data_lock,
            stopping: tokio::sync::watch::Sender::new(false),
            loops,
            _demo: demo_cluster,
        })
    }

    /// The HTTP router over this host.
    pub fn router(&self) -> axum::Router {
        http::router(AppState {
            registry: Arc::clone(&self.registry),
            live: self.live.clone(),
            tasks: Arc::clone(&self.tasks),
            admission: self.admission.clone(),
            events: Arc::clone(&self.events),
            failover: self.failover.clone(),
            heartbeat: self.heartbeat,
            tokens: Arc::clone(&self.tokens),
            metrics: Arc::clone(&self.metrics),
            body_limit: self.body_limit,
            request_timeout: self.request_timeout,
            stopping: self.stopping.subscribe(),
        })
    }

    /// Begin shutting down: event streams end (each with a reconnect hint).
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }
}

/// Run the host until Ctrl-C or SIGTERM: HTTPS when a certificate is
/// configured, else HTTP.
pub async fn serve(config: Config) -> Result<()> {
    let host = Host::start(&config).await?;
    let listen_error = |source| Error::Listen {
        addr: config.http.listen,
        source,
    };
    let listener = std::net::TcpListener::bind(config.http.listen).map_err(listen_error)?;
    listener.set_nonblocking(true).map_err(listen_error)?;
    let addr = listener.local_addr().map_err(listen_error)?;
    let router = host.router();
    let handle = axum_server::Handle::new();
    let bounded =
        connections::Bounded::new(config.http.max_connections, config.http.header_timeout);
    let serving = async {
        let mut reloading = None;
        // The first line on standard output says where to connect (port 0
        // picks a free port; tests read it from here).
        let mut server = match &config.tls {
            None => {
                println!("verdict listening on http://{addr}");
                tracing::info!(%addr, "serving HTTP");
                axum_server::from_tcp(listener).acceptor(connections::Acceptor::Plain(bounded))
            }
            Some(files) => {
                let (tls, watcher) = http::tls::serve_config(files).await?;
                reloading = Some(watcher);
                println!("verdict listening on https://{addr}");
                tracing::info!(%addr, "serving HTTPS");
                axum_server::from_tcp(listener).acceptor(connections::Acceptor::Tls(
                    axum_server::tls_rustls::RustlsAcceptor::new(tls).acceptor(bounded),
                ))
            }
        };
        // A request head must arrive in time; this also ends idle
        // keep-alive connections.
        server
            .http_builder()
            .http1()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(config.http.header_timeout);
        let served = server
            .handle(handle.clone())
            .serve(router.into_make_service())
            .await
            .map_err(listen_error);
        drop(reloading);
        served
    };
    tokio::pin!(serving);
    tokio::select! {
        result = &mut serving => return result,
        () = shutdown() => {}
    }
    // Ctrl-C or SIGTERM: stop taking connections, end the event streams,
    // let requests in flight finish — for at most `DRAIN`.
    host.stop();
    handle.graceful_shutdown(Some(DRAIN));
    match tokio::time::timeout(DRAIN, serving).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!(
                seconds = DRAIN.as_secs(),
                "connections still open after the drain period; exiting"
            );
            Ok(())
        }
    }
}

/// How long a shutdown waits for requests in flight.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
