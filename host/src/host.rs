//! The host assembled from a [`Config`]: the plugin runtime and registry,
//! the folder watch, and the HTTP server.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::task::AbortOnDropHandle;

use crate::admission::Admission;
use crate::config::{ClusterSource, Config};
use crate::delivery::Cache;
use crate::delivery::policies::Policies;
use crate::demo::Demo;
use crate::error::{Error, Result};
use crate::events::{Events, Kind};
use crate::failover::Failover;
use crate::http::connections;
use crate::http::{self, AppState};
use crate::leader::{Elector, Leadership, Members};
use crate::observe::cluster::{self, Following, Observed};
use crate::overrides::Overrides;
use crate::plugins::{Registry, Runtime, watch};
use crate::shadow::Shadows;
use crate::shared::Shared;
use crate::tasks::{Store, StoreKind, Tasks};
use crate::verdicts::live::Live;
use crate::verdicts::live::{self as live, Verdicts};
use crate::watch::Watcher;

/// A running host's parts.
#[derive(Debug)]
pub(crate) struct Host {
    pub registry: Arc<Registry>,
    pub live: Option<Live>,
    pub tasks: Arc<Tasks>,
    pub events: Arc<Events>,
    pub failover: Option<Arc<Failover>>,
    pub leadership: Arc<Leadership>,
    /// The replicas' heartbeats, with leader election.
    members: Option<Arc<Members>>,
    shadows: Arc<Shadows>,
    /// The Policy objects' controller, with the Kubernetes task store.
    policies: Option<Arc<Policies>>,
    /// The VM delivery as the HTTP routes see it.
    delivery: Option<Arc<crate::lifecycle::service::Service>>,
    /// The election loop and the heartbeat, which free the Lease and
    /// take the heartbeat away on shutdown.
    elector: Vec<tokio::task::JoinHandle<()>>,
    heartbeat: std::time::Duration,
    tokens: Arc<http::access::Tokens>,
    hosts: Arc<http::access::Hosts>,
    memory: Arc<crate::memory::Budget>,
    /// The verdicts' history.
    history: Arc<crate::history::History>,
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
        for task in self.loops.iter().chain(&self.elector) {
            task.abort();
        }
    }
}

/// One plugin event per plugin a reload loaded, rejected or unloaded.
fn publish_reload(events: &Events, report: &crate::plugins::ReloadReport) {
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
            let started = Demo::start(scenario.as_deref()).await?;
            let uri = started
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
        .map(|client| Some(crate::calls::counted(client)))
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

/// The plugin runtime and registry, every plugin of the folder loaded, and
/// the folder's watch. Each reload is counted and published.
fn plugins(
    config: &Config,
    demo: bool,
    events: &Arc<Events>,
    metrics: &Arc<http::metrics::Metrics>,
) -> Result<(Arc<Registry>, Option<Watcher>)> {
    let cache = config
        .cache_dir
        .clone()
        .unwrap_or_else(|| config.data_dir.join("code-cache"));
    let runtime = Runtime::new(&cache, config.plugins.limits)?;
    let mut settings: BTreeMap<String, String> = config
        .settings
        .keys()
        .map(|name| (name.clone(), config.settings_for(name)))
        .collect();
    if demo {
        settings
            .entry("failover".into())
            .or_insert_with(|| crate::demo::FAILOVER_SETTINGS.into());
    }
    let registry = Arc::new(
        Registry::new(Arc::new(runtime), config.plugins.dir.clone(), settings)
            .with_limits(config.limits_by_plugin())
            .with_chosen(config.plugins.chosen())
            .with_demotion(config.plugins.demotion())
            .with_builtin(!config.plugins.no_builtin_policies),
    );
    let (published, counted) = (Arc::clone(events), Arc::clone(metrics));
    registry.on_reload(move |report| {
        counted.scans.inc();
        counted.reloads.inc_by(report.loaded.len() as u64);
        counted.rejections.inc_by(report.rejected.len() as u64);
        publish_reload(&published, report);
    });
    let (published, counted) = (Arc::clone(events), Arc::clone(metrics));
    registry.on_demotion(move |demoted| {
        counted.demotions.inc();
        published.publish(
            Kind::Plugin,
            None,
            serde_json::json!({"event": "demoted", "plugin": demoted}),
        );
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
        None if registry.serves_builtin() && !report.loaded.is_empty() => {
            let serving: Vec<String> = report
                .loaded
                .iter()
                .map(|l| format!("{} ({}@{})", l.plugin, l.info.name, l.info.version))
                .collect();
            tracing::info!(
                serving = %serving.join(", "),
                "no plugin folder: serving the default policies built into this binary (--plugins DIR serves a folder's)"
            );
            None
        }
        None => {
            tracing::warn!("no plugin folder: running without policies");
            None
        }
    };
    Ok((registry, watcher))
}

/// The task records, from their store; the Kubernetes store is followed
/// for other replicas' changes.
async fn tasks(
    config: &Config,
    client: Option<&kube::Client>,
    observed: &Option<Arc<Observed>>,
    events: &Arc<Events>,
    loops: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Arc<Tasks>> {
    let store = match (config.tasks.store, client) {
        (StoreKind::Sqlite, _) => Store::Sqlite(Arc::new(crate::tasks::sqlite::SqliteStore::open(
            &config.data_dir.join("tasks.db"),
        )?)),
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
            Some(Arc::clone(events)),
        )
        .await?,
    );
    if let Store::Kube(kube_store) = store {
        loops.push(tokio::spawn(kube_store.follow(Arc::clone(&tasks))));
    }
    Ok(tasks)
}

/// The cluster watched, and what follows from it: the verdicts derived,
/// apps' health probed, pod usage read.
fn observe(
    config: &Config,
    client: &kube::Client,
    observed: Arc<Observed>,
    (registry, tasks, events, shadows): (&Arc<Registry>, &Arc<Tasks>, &Arc<Events>, &Arc<Shadows>),
    loops: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<(Live, Following)> {
    let verdicts = Arc::new(Verdicts::with_threads(config.verdicts.derive_threads));
    let changed = Arc::clone(&observed);
    let overrides = Arc::new(
        Overrides::open(
            &config.data_dir.join("overrides.db"),
            Some(Arc::clone(events)),
            move |app| {
                changed.mark_apps(vec![app]);
                changed.changed.notify_one();
            },
        )
        .map_err(Error::Storage)?,
    );
    loops.push(tokio::spawn(Arc::clone(&overrides).lapse_forever()));
    let kept = Arc::clone(&overrides);
    tasks.count_kept_elsewhere(crate::tasks::KeptElsewhere(Box::new(move || {
        kept.apps(crate::time::now())
    })));
    let following = cluster::follow(
        client.clone(),
        &observed,
        &config.observe.resources,
        config.observe.lease_poll_every,
    );
    loops.push(tokio::spawn(live::derive_forever(
        Arc::clone(&observed),
        Arc::clone(registry),
        Arc::clone(&verdicts),
        live::Beside {
            tasks: Some(Arc::clone(tasks)),
            overrides: Some(Arc::clone(&overrides)),
            shadows: Some(Arc::clone(shadows)),
        },
        Some(Arc::clone(events)),
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
        overrides,
        stale_after: config.verdicts.stale_after,
    };
    Ok((live, following))
}

/// Failover, judging the nodes, and the executor that carries out tasks:
/// users' with --execute-tasks (always on the demo cluster), failover's
/// own whenever it enforces.
fn failover(
    config: &Config,
    live: &Live,
    (client, leadership): (&kube::Client, &Arc<Leadership>),
    (registry, tasks, admission, events): (&Arc<Registry>, &Arc<Tasks>, &Admission, &Arc<Events>),
    demo: bool,
    loops: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Arc<Failover>> {
    let failover = Arc::new(Failover::open(
        config.failover.clone(),
        &config.data_dir,
        (
            Arc::clone(registry),
            Arc::clone(&live.observed),
            Arc::clone(tasks),
            admission.clone(),
            Arc::clone(events),
        ),
        Arc::new(crate::executor::Nodes::new(
            leadership.fenced(client.clone()),
        )),
        Arc::clone(leadership),
    )?);
    loops.push(tokio::spawn(Arc::clone(&failover).run()));
    let users = config.executor.execute_tasks || demo;
    if users || config.failover.enforce {
        let executor = crate::executor::Executor::new(
            client.clone(),
            Arc::clone(leadership),
            Arc::clone(tasks),
            Arc::clone(&live.observed),
        )
        .failover_only(!users);
        loops.push(tokio::spawn(executor.run()));
    }
    Ok(failover)
}

impl Host {
    /// Start the host in flow order: the cluster's client, the events, the
    /// plugins and their watch, the task store, the watches of the cluster
    /// and the deriver of verdicts, admission, failover with the executor,
    /// and the demo's tasks.
    pub async fn start(config: &Config) -> Result<Self> {
        let data_lock = lock_data_dir(&config.data_dir)?;
        let mut demo = None;
        let client = client(&config.cluster, &mut demo).await?;
        let events =
            Arc::new(Events::new(config.events.buffer).bounded_to(config.events.buffer_bytes));
        // Tapped before anything publishes, so that the history sees the
        // first plugin loads.
        let history = Arc::new(crate::history::History::open(
            &config.data_dir.join("history.db"),
            config.history,
        ));
        let history_tap = (!history.is_off()).then(|| events.tap(crate::history::TAP));
        let announce_tap = (client.is_some() && !config.history.no_kube_events)
            .then(|| events.tap(crate::history::TAP));
        let metrics = Arc::new(http::metrics::Metrics::default());
        let (registry, watcher) = plugins(config, demo.is_some(), &events, &metrics)?;
        let observed = client
            .as_ref()
            .map(|_| Arc::new(Observed::new(config.observe.group_by.clone())));
        let mut loops = Vec::new();
        let memory = Arc::new(crate::memory::Budget::new(&config.memory));
        loops.push(tokio::spawn(
            Arc::clone(&memory).watch(std::time::Duration::from_secs(1)),
        ));
        let tasks = tasks(config, client.as_ref(), &observed, &events, &mut loops).await?;
        let shadows = Shadows::start(config.shadow.clone(), Some(Arc::clone(&events)));
        let (live, following) = match (&client, observed) {
            (Some(client), Some(observed)) => {
                let parts = (&registry, &tasks, &events, &shadows);
                let live = observe(config, client, observed, parts, &mut loops)?;
                (Some(live.0), Some(live.1))
            }
            _ => (None, None),
        };
        if let (Some(live), Some(tap)) = (&live, history_tap) {
            loops.push(tokio::spawn(
                Arc::clone(&history).record_forever(tap, live.clone()),
            ));
        }
        let admission = Admission {
            registry: Arc::clone(&registry),
            shadows: Some(Arc::clone(&shadows)),
            failure: config.admission.failure,
            live: live.clone(),
            gate: crate::admission::Gate::new(&config.admission),
            health_url_allow: config.admission.health_url_allow.clone().into(),
            cluster: client.as_ref().map(|client| {
                crate::admission::Cluster::new(
                    client.clone(),
                    &config.admission,
                    &config.tasks.namespace,
                )
            }),
        };
        let stopping = tokio::sync::watch::Sender::new(false);
        let (leadership, members, elector) = elect(config, client.as_ref(), &registry, &stopping);
        let failover = match (&live, &client) {
            (Some(live), Some(client)) => {
                let parts = (&registry, &tasks, &admission, &events);
                Some(failover(
                    config,
                    live,
                    (client, &leadership),
                    parts,
                    demo.is_some(),
                    &mut loops,
                )?)
            }
            _ => None,
        };
        if let Some(failover) = &failover {
            failover.shadow_with(Arc::clone(&shadows));
        }
        let mut announcer = None;
        if let (Some(client), Some(live), Some(tap)) = (&client, &live, announce_tap) {
            let made = Arc::new(crate::history::announce::Announcer::default());
            loops.push(tokio::spawn(Arc::clone(&made).run(
                tap,
                live.clone(),
                Arc::clone(&leadership),
                leadership.fenced(client.clone()),
            )));
            announcer = Some(made);
        }
        let mut delivery = None;
        if let (Some(client), Some(_)) = (&client, &live) {
            let mut counts = None;
            // The demo delivers its VM-hosted app by its own hook.
            let demo_delivers = demo.as_ref().is_some_and(|d| !d.hooks().is_empty());
            if config.lifecycle.vm_delivery || demo_delivers {
                let specs = match (&demo, config.hooks.is_empty()) {
                    (Some(demo), true) => demo.hooks(),
                    _ => config.hooks.clone(),
                };
                let hooks = crate::lifecycle::hooks::Hooks::new(specs).map_err(Error::Invalid)?;
                let controller = crate::lifecycle::controller::Controller::new(
                    client.clone(),
                    Arc::clone(&leadership),
                    Arc::clone(&registry),
                    failover.clone(),
                    Arc::clone(&events),
                    (hooks, &config.lifecycle),
                );
                // What it does as Kubernetes Events, as the history's
                // status changes are (and off with them).
                let controller = controller.with_history(Arc::clone(&history));
                let controller = Arc::new(match config.history.no_kube_events {
                    true => controller,
                    false => controller.with_events(),
                });
                counts = Some(Arc::clone(&controller.counts));
                loops.push(tokio::spawn(controller.run(stopping.subscribe())));
            }
            delivery = Some(Arc::new(crate::lifecycle::service::Service::new(
                client.clone(),
                Arc::clone(&events),
                counts,
            )));
        }
        let mut policies = None;
        if let (Some(client), Some(live), StoreKind::Kubernetes) =
            (&client, &live, config.tasks.store)
        {
            let replica = leadership.standing().replica;
            share(
                client,
                &config.tasks.namespace,
                &replica,
                (&live.overrides, failover.as_ref()),
                &mut loops,
            );
            let controller = Policies::new(
                client.clone(),
                &config.tasks.namespace,
                Arc::clone(&registry),
                (
                    config.registries.clone(),
                    Cache::new(&config.data_dir.join("delivered")),
                ),
                (Arc::clone(&leadership), members.clone()),
                Arc::clone(&events),
            );
            loops.push(tokio::spawn(Arc::clone(&controller).follow()));
            policies = Some(controller);
        }
        if let Some(demo) = &demo {
            loops.push(demo.play_tasks(Arc::clone(&tasks), admission.clone()));
        }
        metrics.register(http::metrics::Sources {
            plugins: Arc::clone(&registry),
            live: live.clone(),
            tasks: Arc::clone(&tasks),
            failover: failover.clone(),
            events: Arc::clone(&events),
            leadership: Arc::clone(&leadership),
            shadows: Arc::clone(&shadows),
            delivery: delivery.clone(),
            memory: Arc::clone(&memory),
            history: Arc::clone(&history),
            announcer,
            app_series: config.http.app_series,
        });
        Ok(Self {
            registry,
            live,
            tasks,
            events,
            failover,
            leadership,
            members,
            shadows,
            policies,
            delivery,
            elector,
            heartbeat: config.http.heartbeat,
            tokens: Arc::new(http::access::Tokens::new(
                &config.read_tokens,
                &config.write_tokens,
            )),
            hosts: Arc::new(http::access::Hosts::new(&config.http.allowed_hosts)),
            memory,
            history,
            metrics,
            body_limit: config.http.body_limit,
            request_timeout: config.http.request_timeout,
            admission,
            _watcher: watcher,
            _following: following,
            _data_lock: data_lock,
            stopping,
            loops,
            _demo: demo,
        })
    }

    /// The HTTP router over this host.
    pub(crate) fn router(&self) -> axum::Router {
        http::router(AppState {
            registry: Arc::clone(&self.registry),
            live: self.live.clone(),
            tasks: Arc::clone(&self.tasks),
            admission: self.admission.clone(),
            events: Arc::clone(&self.events),
            failover: self.failover.clone(),
            leadership: Arc::clone(&self.leadership),
            members: self.members.clone(),
            shadows: Arc::clone(&self.shadows),
            policies: self.policies.clone(),
            delivery: self.delivery.clone(),
            heartbeat: self.heartbeat,
            tokens: Arc::clone(&self.tokens),
            hosts: Arc::clone(&self.hosts),
            memory: Arc::clone(&self.memory),
            history: Arc::clone(&self.history),
            metrics: Arc::clone(&self.metrics),
            body_limit: self.body_limit,
            request_timeout: self.request_timeout,
            stopping: self.stopping.subscribe(),
        })
    }

    /// Begin shutting down: nothing acts any more, the Lease is freed,
    /// readiness fails, event streams end (each with a reconnect hint).
    pub fn stop(&self) {
        self.leadership.stop();
        self.stopping.send_replace(true);
    }

    /// Wait (a little) until the election loop has freed the Lease and
    /// the heartbeat is taken away; then end the host's loops and wait
    /// until they have ended. An aborted task ends at its next await, and
    /// one still at work when the runtime shuts down may start a task the
    /// closed runtime refuses (kube-runtime's controllers panic on that as
    /// they spawn a reconcile), so none is left running past this.
    pub async fn released(&mut self) {
        let patience = std::time::Duration::from_secs(3);
        let ending = futures_util::future::join_all(self.elector.drain(..));
        let _ = tokio::time::timeout(patience, ending).await;
        for task in &self.loops {
            task.abort();
        }
        let ended = futures_util::future::join_all(self.loops.drain(..));
        let _ = tokio::time::timeout(patience, ended).await;
    }
}

/// People's decisions — status overrides, failover's node overrides and
/// approvals — shared with the other replicas through the API server (with
/// the Kubernetes task store, which is how replicas share).
fn share(
    client: &kube::Client,
    namespace: &str,
    replica: &str,
    (overrides, failover): (&Arc<Overrides>, Option<&Arc<Failover>>),
    loops: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    let (shared, writing) = Shared::new(client.clone(), namespace, "status-override", replica);
    overrides.share(Arc::clone(&shared));
    loops.push(tokio::spawn(writing));
    let applying = Arc::clone(overrides);
    loops.push(tokio::spawn(shared.follow(move |change| {
        let applying = Arc::clone(&applying);
        async move {
            let Ok(change) = serde_json::from_value(change) else {
                return;
            };
            let applied = tokio::task::spawn_blocking(move || applying.apply_shared(change)).await;
            if let Ok(Err(error)) = applied {
                tracing::warn!(%error, "another replica's override could not be kept here");
            }
        }
    })));
    if let Some(failover) = failover {
        let (shared, writing) = Shared::new(client.clone(), namespace, "failover", replica);
        failover.share(Arc::clone(&shared));
        loops.push(tokio::spawn(writing));
        let applying = Arc::clone(failover);
        loops.push(tokio::spawn(shared.follow(move |change| {
            let applying = Arc::clone(&applying);
            async move { applying.apply_shared(change).await }
        })));
    }
}

/// Who acts: with leader election, the replica that holds the Lease (and
/// each replica's heartbeat, with the policies it serves); else this host
/// alone.
fn elect(
    config: &Config,
    client: Option<&kube::Client>,
    registry: &Arc<Registry>,
    stopping: &tokio::sync::watch::Sender<bool>,
) -> (
    Arc<Leadership>,
    Option<Arc<Members>>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let settings = &config.leader;
    let replica = settings.replica_name();
    let Some(client) = client.filter(|_| settings.enabled) else {
        return (Leadership::solo(&replica), None, Vec::new());
    };
    let namespace = &config.tasks.namespace;
    let leadership = Leadership::elected(&replica);
    let elector = Elector::new(
        client.clone(),
        namespace,
        settings.clone(),
        Arc::clone(&leadership),
    );
    let elector = tokio::spawn(elector.run(stopping.subscribe()));
    let members = Members::new(client.clone(), namespace, settings, &replica);
    let serving = Arc::clone(&members);
    let policies = move |registry: &Registry| serving.serving(registry.serving());
    policies(registry);
    let watched = Arc::downgrade(registry);
    registry.on_reload(move |_| {
        if let Some(registry) = watched.upgrade() {
            policies(&registry);
        }
    });
    let beat = tokio::spawn(Arc::clone(&members).beat(stopping.subscribe()));
    tracing::info!(%replica, lease = %settings.lease, %namespace, "leader election: this replica acts only while it holds the lease");
    (leadership, Some(members), vec![elector, beat])
}

/// Run the host until Ctrl-C or SIGTERM: HTTPS when a certificate is
/// configured, else HTTP.
pub async fn serve(mut config: Config) -> Result<()> {
    let (listener, addr) = bind(config.http.listen)?;
    // Listening on one address, a replica is reached there unless it says
    // otherwise.
    if config.leader.advertise_url.is_none() && !addr.ip().is_unspecified() {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        config.leader.advertise_url = Some(format!("{scheme}://{addr}"));
    }
    let mut host = Host::start(&config).await?;
    let router = host.router();
    serve_until_stopped(
        (listener, addr),
        router,
        &config.http,
        config.tls.as_ref(),
        || async move {
            // Stop acting and free the Lease for the next leader, end the
            // event streams.
            host.stop();
            host.released().await;
        },
    )
    .await
}

/// A listener at `addr` (port 0: a free one), and the address it took.
fn bind(addr: std::net::SocketAddr) -> Result<(std::net::TcpListener, std::net::SocketAddr)> {
    let listen_error = |source| Error::Listen { addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(listen_error)?;
    listener.set_nonblocking(true).map_err(listen_error)?;
    let bound = listener.local_addr().map_err(listen_error)?;
    Ok((listener, bound))
}

/// Serve `router` on `listener` until Ctrl-C or SIGTERM; then stop taking
/// connections, run `stop`, and let requests in flight finish — for at
/// most `DRAIN`.
async fn serve_until_stopped<F: Future<Output = ()>>(
    (listener, addr): (std::net::TcpListener, std::net::SocketAddr),
    router: axum::Router,
    http: &http::Settings,
    tls: Option<&http::tls::TlsFiles>,
    stop: impl FnOnce() -> F,
) -> Result<()> {
    let listen_error = |source| Error::Listen {
        addr: http.listen,
        source,
    };
    let handle = axum_server::Handle::new();
    let bounded = connections::Bounded::new(http.max_connections, http.header_timeout);
    let serving = async {
        let mut reloading = None;
        // The first line on standard output says where to connect (port 0
        // picks a free port; tests read it from here).
        let mut server = match tls {
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
            .header_read_timeout(http.header_timeout);
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
    handle.graceful_shutdown(Some(DRAIN));
    stop().await;
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

/// `verdict fleet`: follow the member clusters' verdicts and serve the
/// fleet's view, until Ctrl-C or SIGTERM.
pub async fn serve_fleet(config: crate::config::FleetConfig) -> Result<()> {
    let (listener, addr) = bind(config.http.listen)?;
    let events = Arc::new(Events::new(config.events.buffer).bounded_to(config.events.buffer_bytes));
    let fleet = crate::fleet::Fleet::new(config.fleet.clone(), Arc::clone(&events));
    fleet.set_members(
        crate::fleet::members::Source::Static,
        config.members.clone(),
    );
    let _silence = AbortOnDropHandle::new(fleet.watch_silence());
    let mut discovery = Vec::new();
    if config.fleet.cluster_profiles || config.fleet.argocd_namespace.is_some() {
        let mut demo = None;
        let client = client(&config.cluster, &mut demo)
            .await?
            .ok_or_else(|| Error::Config {
                key: "cluster-profiles",
                message: "finding members in a cluster needs one (--kubeconfig, in-cluster)".into(),
            })?;
        if config.fleet.cluster_profiles {
            let providers = match &config.fleet.provider_file {
                Some(path) => crate::fleet::members::Providers::read(path).map_err(|message| {
                    Error::Config {
                        key: "clusterprofile-provider-file",
                        message,
                    }
                })?,
                None => crate::fleet::members::Providers::default(),
            };
            discovery.push(AbortOnDropHandle::new(
                crate::fleet::members::follow_profiles(&fleet, client.clone(), providers),
            ));
        }
        if let Some(namespace) = &config.fleet.argocd_namespace {
            discovery.push(AbortOnDropHandle::new(
                crate::fleet::members::follow_argocd(&fleet, client.clone(), namespace),
            ));
        }
    }
    let metrics = Arc::new(http::metrics::Metrics::default());
    metrics.register_fleet(http::metrics::FleetSources {
        fleet: Arc::clone(&fleet),
        app_series: config.http.app_series,
    });
    let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
    let router = http::fleet_router(http::FleetState {
        fleet: Arc::clone(&fleet),
        tokens: Arc::new(http::access::Tokens::new(
            &config.read_tokens,
            &config.write_tokens,
        )),
        hosts: Arc::new(http::access::Hosts::new(&config.http.allowed_hosts)),
        metrics,
        body_limit: config.http.body_limit,
        request_timeout: config.http.request_timeout,
        heartbeat: config.http.heartbeat,
        stopping: stopping_rx,
    });
    serve_until_stopped(
        (listener, addr),
        router,
        &config.http,
        config.tls.as_ref(),
        || async move {
            let _ = stopping.send(true);
            drop(discovery);
        },
    )
    .await
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
