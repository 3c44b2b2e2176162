//! Configuration flows one way: command-line flags (each with an environment
//! variable) over an optional TOML file over defaults, into one plain
//! [`Config`] that the host is built from. Tests build a `Config` directly.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::admission::FailureMode;
use crate::error::{Error, Result};
use crate::http::access::Secret;
use crate::http::tls::TlsFiles;
use crate::observe::Grouping;
use crate::observe::probe::ProbeConfig;
use crate::plugins::Limits;

/// Everything the host is built from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address of the HTTP server.
    pub listen: SocketAddr,
    /// The folder of plugin components, watched for changes; `None` runs
    /// without plugins.
    pub plugins_dir: Option<PathBuf>,
    /// Where the host keeps its state (the compiled-code cache among it).
    pub data_dir: PathBuf,
    pub limits: Limits,
    /// How long the plugin folder must be quiet before a change is loaded.
    pub reload_debounce: Duration,
    /// Settings handed to each plugin as JSON text, by plugin name.
    pub settings: BTreeMap<String, serde_json::Value>,
    /// Which cluster to follow.
    pub cluster: ClusterSource,
    /// How pods and workloads are grouped into applications.
    pub group_by: Grouping,
    /// Verdicts whose observations are older than this are stale.
    pub stale_after: Duration,
    /// How apps' own health checks are probed.
    pub probes: ProbeConfig,
    /// How often pod metrics are read, where the cluster serves them.
    pub metrics_every: Duration,
    /// Where task records are kept.
    pub task_store: TaskStoreKind,
    /// The namespace of `Task` objects, with the Kubernetes task store.
    pub tasks_namespace: String,
    /// Finished tasks kept per app.
    pub task_history: usize,
    /// What admission answers when the admission policy fails.
    pub admission_failure: FailureMode,
    /// Serve HTTPS with this certificate and key (PEM files, reloaded when
    /// they change).
    pub tls: Option<TlsFiles>,
    /// Carry out admitted tasks on the cluster (the demo cluster always
    /// does).
    pub execute_tasks: bool,
    /// Failover: enforcement and the brakes (the `[failover]` table).
    pub failover: crate::failover::FailoverConfig,
    /// Threads a derivation evaluates on; 0 for one per core.
    pub derive_threads: usize,
    /// Events kept for clients that reconnect to the event stream.
    pub event_buffer: usize,
    /// How often an idle event stream gets a heartbeat comment.
    pub heartbeat: Duration,
    /// Bearer tokens that may read; with any, reads need one.
    pub read_tokens: Vec<Secret>,
    /// Bearer tokens that may read and write; with any token configured,
    /// mutations need one of these.
    pub write_tokens: Vec<Secret>,
    /// The largest request body taken.
    pub body_limit: usize,
    /// How long a request may take to be answered.
    pub request_timeout: Duration,
    /// How long a connection may take to send a request head (and may stay
    /// idle between requests, or silent at first).
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

/// Where task records are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskStoreKind {
    /// A SQLite file in the data directory.
    Sqlite,
    /// `Task` custom resources through the Kubernetes API.
    Kubernetes,
}

/// Where the cluster comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterSource {
    /// No cluster: plugins only.
    None,
    /// In-cluster configuration or `KUBECONFIG`/`~/.kube/config`, as kubectl finds them.
    Infer,
    /// A kubeconfig file.
    Kubeconfig(PathBuf),
    /// An API server URL without authentication (the simulator, `kubectl proxy`).
    Url(String),
    /// The simulator in-process, playing a scenario (the built-in demo
    /// without a file).
    Demo { scenario: Option<PathBuf> },
}

impl Config {
    /// A configuration with defaults, for a plugin folder and data folder.
    pub fn new(plugins_dir: Option<PathBuf>, data_dir: PathBuf) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            plugins_dir,
            data_dir,
            limits: Limits::default(),
            reload_debounce: Duration::from_millis(150),
            settings: BTreeMap::new(),
            cluster: ClusterSource::None,
            group_by: Grouping::default(),
            stale_after: Duration::from_secs(30),
            probes: ProbeConfig::default(),
            metrics_every: Duration::from_secs(15),
            task_store: TaskStoreKind::Sqlite,
            tasks_namespace: "verdict-system".into(),
            task_history: 100,
            admission_failure: FailureMode::Closed,
            tls: None,
            execute_tasks: false,
            failover: crate::failover::FailoverConfig::default(),
            derive_threads: 0,
            event_buffer: 10_000,
            heartbeat: Duration::from_secs(15),
            read_tokens: Vec::new(),
            write_tokens: Vec::new(),
            body_limit: 1 << 20,
            request_timeout: Duration::from_secs(30),
            header_timeout: crate::http::connections::HEADER_READ,
            max_connections: crate::http::connections::MAX_CONNECTIONS,
        }
    }

    /// The effective configuration in the configuration file's form (TOML,
    /// durations in milliseconds, paths absolute); tokens are counted, not
    /// shown.
    pub fn effective(&self) -> String {
        use toml::Value as V;
        let ms = |d: Duration| V::Integer(d.as_millis() as i64);
        // Absolute, so that the printout reads back the same from anywhere.
        let path = |p: &Path| {
            V::String(
                std::path::absolute(p)
                    .unwrap_or_else(|_| p.to_path_buf())
                    .display()
                    .to_string(),
            )
        };
        let mut t = toml::Table::new();
        t.insert("listen".into(), V::String(self.listen.to_string()));
        if let Some(dir) = &self.plugins_dir {
            t.insert("plugins".into(), path(dir));
        }
        t.insert("data-dir".into(), path(&self.data_dir));
        t.insert("call-timeout-ms".into(), ms(self.limits.call_timeout));
        t.insert(
            "memory-limit-mib".into(),
            V::Integer((self.limits.memory_bytes >> 20) as i64),
        );
        t.insert(
            "output-limit-kib".into(),
            V::Integer((self.limits.output_bytes >> 10) as i64),
        );
        t.insert("reload-debounce-ms".into(), ms(self.reload_debounce));
        match &self.cluster {
            ClusterSource::Kubeconfig(p) => {
                t.insert("kubeconfig".into(), path(p));
            }
            ClusterSource::Url(url) => {
                t.insert("cluster-url".into(), V::String(url.clone()));
            }
            // Not file keys: said as a comment-like marker.
            ClusterSource::Demo { .. } | ClusterSource::Infer | ClusterSource::None => {}
        }
        t.insert("group-by".into(), V::String(self.group_by.to_string()));
        t.insert("stale-after-ms".into(), ms(self.stale_after));
        t.insert("probe-interval-ms".into(), ms(self.probes.every));
        t.insert("probe-timeout-ms".into(), ms(self.probes.timeout));
        t.insert("metrics-interval-ms".into(), ms(self.metrics_every));
        let store = match self.task_store {
            TaskStoreKind::Sqlite => "sqlite",
            TaskStoreKind::Kubernetes => "kubernetes",
        };
        t.insert("task-store".into(), V::String(store.into()));
        t.insert(
            "tasks-namespace".into(),
            V::String(self.tasks_namespace.clone()),
        );
        t.insert("task-history".into(), V::Integer(self.task_history as i64));
        let mode = match self.admission_failure {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
        };
        t.insert("admission-failure".into(), V::String(mode.into()));
        if let Some(tls) = &self.tls {
            t.insert("tls-cert".into(), path(&tls.cert));
            t.insert("tls-key".into(), path(&tls.key));
        }
        t.insert("execute-tasks".into(), V::Boolean(self.execute_tasks));
        if let Ok(failover) = V::try_from(&self.failover) {
            t.insert("failover".into(), failover);
        }
        t.insert(
            "derive-threads".into(),
            V::Integer(self.derive_threads as i64),
        );
        t.insert("event-buffer".into(), V::Integer(self.event_buffer as i64));
        t.insert("heartbeat-ms".into(), ms(self.heartbeat));
        t.insert(
            "body-limit-kib".into(),
            V::Integer((self.body_limit >> 10) as i64),
        );
        t.insert("request-timeout-ms".into(), ms(self.request_timeout));
        t.insert("header-timeout-ms".into(), ms(self.header_timeout));
        t.insert(
            "max-connections".into(),
            V::Integer(i64::try_from(self.max_connections).unwrap_or(i64::MAX)),
        );
        let settings: toml::Table = self
            .settings
            .iter()
            .filter_map(|(name, value)| {
                toml::Value::try_from(value).ok().map(|v| (name.clone(), v))
            })
            .collect();
        t.insert("settings".into(), V::Table(settings));
        let cluster = match &self.cluster {
            ClusterSource::Demo { .. } => "# cluster: the built-in demo (--demo)\n",
            ClusterSource::Infer => {
                "# cluster: as kubectl finds it (in-cluster, KUBECONFIG, ~/.kube/config), else the demo\n"
            }
            ClusterSource::None => "# cluster: none\n",
            _ => "",
        };
        // Tokens are secrets: only how many there are is shown.
        let tokens = format!(
            "# read-tokens: {} configured (not shown)\n# write-tokens: {} configured (not shown)\n",
            self.read_tokens.len(),
            self.write_tokens.len()
        );
        format!(
            "{cluster}{tokens}{}",
            toml::to_string(&t).unwrap_or_default()
        )
    }

    /// The settings text for one plugin (`{}` when none are configured).
    pub fn settings_for(&self, plugin: &str) -> String {
        self.settings
            .get(plugin)
            .map_or_else(|| "{}".to_string(), serde_json::Value::to_string)
    }
}

/// The flags of `verdict serve`. Each also reads an environment variable and
/// a key of the configuration file; a flag wins over the variable, which wins
/// over the file, which wins over the default.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "VERDICT_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Folder of plugin components [default: target/plugins when it exists].
    #[arg(long, env = "VERDICT_PLUGINS", value_name = "DIR")]
    pub plugins: Option<PathBuf>,

    /// Folder for the host's state [default: verdict-data].
    #[arg(long, env = "VERDICT_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Configuration file: TOML, or YAML when named `*.yaml`/`*.yml`.
    #[arg(long, env = "VERDICT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the effective configuration (flags over environment over file
    /// over defaults) as a configuration file, with secrets masked, and
    /// exit.
    #[arg(long)]
    pub print_config: bool,

    /// Time one plugin call may take, in milliseconds [default: 100].
    #[arg(long, env = "VERDICT_CALL_TIMEOUT_MS", value_name = "MS")]
    pub call_timeout_ms: Option<u64>,

    /// Memory one plugin instance may use, in MiB [default: 64].
    #[arg(long, env = "VERDICT_MEMORY_LIMIT_MIB", value_name = "MIB")]
    pub memory_limit_mib: Option<usize>,

    /// How long the plugin folder must be quiet before a change is loaded,
    /// in milliseconds [default: 150].
    #[arg(long, env = "VERDICT_RELOAD_DEBOUNCE_MS", value_name = "MS")]
    pub reload_debounce_ms: Option<u64>,

    /// Size of one plugin call's output, in KiB [default: 1024].
    #[arg(long, env = "VERDICT_OUTPUT_LIMIT_KIB", value_name = "KIB")]
    pub output_limit_kib: Option<usize>,

    /// Follow the cluster of this kubeconfig file.
    #[arg(
        long,
        env = "VERDICT_KUBECONFIG",
        value_name = "FILE",
        conflicts_with = "cluster_url"
    )]
    pub kubeconfig: Option<PathBuf>,

    /// Follow the API server at this URL, without authentication (the
    /// simulator, `kubectl proxy`). Without this or --kubeconfig the cluster
    /// is found as kubectl finds it (in-cluster, KUBECONFIG, ~/.kube/config).
    #[arg(long, env = "VERDICT_CLUSTER_URL", value_name = "URL")]
    pub cluster_url: Option<String>,

    /// Follow the built-in demo cluster: the simulator in-process, playing
    /// a looping scenario. Also what runs when no cluster is found.
    #[arg(long, env = "VERDICT_DEMO", conflicts_with_all = ["kubeconfig", "cluster_url"])]
    pub demo: bool,

    /// Play this scenario file in the demo cluster (implies --demo).
    #[arg(long, env = "VERDICT_SCENARIO", value_name = "FILE", conflicts_with_all = ["kubeconfig", "cluster_url"])]
    pub scenario: Option<PathBuf>,

    /// Group pods into apps by `label=KEY`, `owner` or `namespace`
    /// [default: label=app.kubernetes.io/instance].
    #[arg(long, env = "VERDICT_GROUP_BY", value_name = "RULE")]
    pub group_by: Option<Grouping>,

    /// Verdicts are stale when the cluster could not be watched for this
    /// long, in milliseconds [default: 30000].
    #[arg(long, env = "VERDICT_STALE_AFTER_MS", value_name = "MS")]
    pub stale_after_ms: Option<u64>,

    /// How often apps' health URLs (`verdict.dev/health-url`) are probed,
    /// in milliseconds [default: 10000].
    #[arg(long, env = "VERDICT_PROBE_INTERVAL_MS", value_name = "MS")]
    pub probe_interval_ms: Option<u64>,

    /// How long one health probe may take, in milliseconds [default: 2000].
    #[arg(long, env = "VERDICT_PROBE_TIMEOUT_MS", value_name = "MS")]
    pub probe_timeout_ms: Option<u64>,

    /// How often pod metrics (`metrics.k8s.io`) are read, in milliseconds
    /// [default: 15000].
    #[arg(long, env = "VERDICT_METRICS_INTERVAL_MS", value_name = "MS")]
    pub metrics_interval_ms: Option<u64>,

    /// Where task records are kept: a SQLite file in the data directory, or
    /// `Task` custom resources in the cluster [default: sqlite].
    #[arg(long, env = "VERDICT_TASK_STORE", value_name = "STORE")]
    pub task_store: Option<TaskStoreKind>,

    /// The namespace of `Task` objects with `--task-store kubernetes`
    /// [default: verdict-system].
    #[arg(long, env = "VERDICT_TASKS_NAMESPACE", value_name = "NAMESPACE")]
    pub tasks_namespace: Option<String>,

    /// Finished tasks kept per app [default: 100].
    #[arg(long, env = "VERDICT_TASK_HISTORY", value_name = "N")]
    pub task_history: Option<usize>,

    /// When the admission policy fails: `open` allows with a warning,
    /// `closed` refuses [default: closed].
    #[arg(long, env = "VERDICT_ADMISSION_FAILURE", value_name = "MODE")]
    pub admission_failure: Option<FailureMode>,

    /// Serve HTTPS with this PEM certificate chain (reloaded when it
    /// changes); needs --tls-key.
    #[arg(
        long,
        env = "VERDICT_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// Carry out admitted tasks on the cluster: scale, restart, update,
    /// create and delete the apps' workloads, reporting progress [default:
    /// on with the demo cluster, else off].
    #[arg(long, env = "VERDICT_EXECUTE_TASKS")]
    pub execute_tasks: bool,

    /// Carry out the failover actions that pass the brakes and approval
    /// (cordon, evict, release, scale) instead of only showing them (dry
    /// run) [default: off].
    #[arg(long, env = "VERDICT_FAILOVER_ENFORCE")]
    pub failover_enforce: bool,

    /// Above this many unhealthy nodes, or share of nodes (`40%`), failover
    /// only waits and notifies [default: 40%].
    #[arg(long, env = "VERDICT_FAILOVER_MAX_UNHEALTHY", value_name = "N|PERCENT")]
    pub failover_max_unhealthy: Option<crate::failover::brakes::Cap>,

    /// Threads that evaluate verdicts when many apps are derived at once
    /// (0: one per core) [default: 0].
    #[arg(long, env = "VERDICT_DERIVE_THREADS", value_name = "N")]
    pub derive_threads: Option<usize>,

    /// Events kept for event-stream clients that reconnect with
    /// `Last-Event-ID` [default: 10000].
    #[arg(long, env = "VERDICT_EVENT_BUFFER", value_name = "N")]
    pub event_buffer: Option<usize>,

    /// How often an idle event stream gets a heartbeat, in milliseconds
    /// [default: 15000].
    #[arg(long, env = "VERDICT_HEARTBEAT_MS", value_name = "MS")]
    pub heartbeat_ms: Option<u64>,

    /// A file of bearer tokens that may read, one a line (`#` comments);
    /// with any, reads need a token.
    #[arg(long, env = "VERDICT_READ_TOKENS_FILE", value_name = "FILE")]
    pub read_tokens_file: Option<PathBuf>,

    /// A file of bearer tokens that may read and write, one a line; with any
    /// token configured, mutations need one of these.
    #[arg(long, env = "VERDICT_WRITE_TOKENS_FILE", value_name = "FILE")]
    pub write_tokens_file: Option<PathBuf>,

    /// The largest request body taken, in KiB [default: 1024].
    #[arg(long, env = "VERDICT_BODY_LIMIT_KIB", value_name = "KIB")]
    pub body_limit_kib: Option<usize>,

    /// How long a request may take to be answered, in milliseconds
    /// [default: 30000].
    #[arg(long, env = "VERDICT_REQUEST_TIMEOUT_MS", value_name = "MS")]
    pub request_timeout_ms: Option<u64>,

    /// How long a connection may take to send a request head, stay silent
    /// when new or idle between requests, in milliseconds [default: 10000].
    #[arg(long, env = "VERDICT_HEADER_TIMEOUT_MS", value_name = "MS")]
    pub header_timeout_ms: Option<u64>,

    /// Connections served at once; one more is closed at once
    /// [default: 4096].
    #[arg(long, env = "VERDICT_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,

    /// The PEM private key of --tls-cert.
    #[arg(
        long,
        env = "VERDICT_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
}

/// The configuration file's keys (all optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    listen: Option<SocketAddr>,
    plugins: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    call_timeout_ms: Option<u64>,
    memory_limit_mib: Option<usize>,
    output_limit_kib: Option<usize>,
    reload_debounce_ms: Option<u64>,
    kubeconfig: Option<PathBuf>,
    cluster_url: Option<String>,
    group_by: Option<String>,
    stale_after_ms: Option<u64>,
    probe_interval_ms: Option<u64>,
    probe_timeout_ms: Option<u64>,
    metrics_interval_ms: Option<u64>,
    task_store: Option<TaskStoreKind>,
    tasks_namespace: Option<String>,
    task_history: Option<usize>,
    admission_failure: Option<FailureMode>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    execute_tasks: Option<bool>,
    failover: Option<crate::failover::FailoverConfig>,
    derive_threads: Option<usize>,
    event_buffer: Option<usize>,
    heartbeat_ms: Option<u64>,
    #[serde(default)]
    read_tokens: Vec<String>,
    #[serde(default)]
    write_tokens: Vec<String>,
    read_tokens_file: Option<PathBuf>,
    write_tokens_file: Option<PathBuf>,
    body_limit_kib: Option<usize>,
    request_timeout_ms: Option<u64>,
    header_timeout_ms: Option<u64>,
    max_connections: Option<usize>,
    /// `[settings.<plugin>]` tables.
    #[serde(default)]
    settings: BTreeMap<String, toml::Table>,
}

impl FileConfig {
    /// Read a TOML file, or YAML when its name ends in `.yaml` or `.yml`.
    fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        let yaml = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
        let parsed = if yaml {
            serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(&text))
                .map_err(|e| format!("{}: {}", e.path(), e.inner()))
        } else {
            toml::from_str(&text).map_err(|e| e.to_string())
        };
        parsed.map_err(|message| Error::ConfigFile {
            path: path.to_path_buf(),
            message,
        })
    }
}

impl ServeArgs {
    /// Merge flags, environment, file and defaults into a [`Config`].
    pub fn into_config(self) -> Result<Config> {
        let file = match &self.config {
            Some(path) => FileConfig::read(path)?,
            None => FileConfig::default(),
        };
        // Paths in the file are relative to the file's folder.
        let base = self
            .config
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let from_file = |p: Option<PathBuf>| p.map(|p| base.join(p));

        let plugins_dir = match self.plugins.or_else(|| from_file(file.plugins)) {
            Some(dir) if !dir.is_dir() => {
                return Err(Error::Config {
                    key: "plugins",
                    message: format!("{} is not a folder", dir.display()),
                });
            }
            Some(dir) => Some(dir),
            None => Some(PathBuf::from("target/plugins")).filter(|d| d.is_dir()),
        };
        let data_dir = self
            .data_dir
            .or_else(|| from_file(file.data_dir))
            .unwrap_or_else(|| PathBuf::from("verdict-data"));

        let mut config = Config::new(plugins_dir, data_dir);
        if let Some(listen) = self.listen.or(file.listen) {
            config.listen = listen;
        }
        if let Some(ms) = self.call_timeout_ms.or(file.call_timeout_ms) {
            if ms == 0 {
                return Err(Error::Config {
                    key: "call-timeout-ms",
                    message: "must be at least 1".into(),
                });
            }
            config.limits.call_timeout = Duration::from_millis(ms);
        }
        if let Some(mib) = self.memory_limit_mib.or(file.memory_limit_mib) {
            config.limits.memory_bytes =
                mib.checked_mul(1 << 20)
                    .filter(|b| *b > 0)
                    .ok_or(Error::Config {
                        key: "memory-limit-mib",
                        message: format!("{mib} is out of range"),
                    })?;
        }
        if let Some(kib) = self.output_limit_kib.or(file.output_limit_kib) {
            config.limits.output_bytes =
                kib.checked_mul(1 << 10)
                    .filter(|b| *b > 0)
                    .ok_or(Error::Config {
                        key: "output-limit-kib",
                        message: format!("{kib} is out of range"),
                    })?;
        }
        if let Some(ms) = self.reload_debounce_ms.or(file.reload_debounce_ms) {
            config.reload_debounce = Duration::from_millis(ms);
        }
        let kubeconfig = self.kubeconfig.or_else(|| from_file(file.kubeconfig));
        let url = self.cluster_url.or(file.cluster_url);
        config.cluster = if self.demo || self.scenario.is_some() {
            ClusterSource::Demo {
                scenario: self.scenario,
            }
        } else {
            match (kubeconfig, url) {
                (Some(path), _) => ClusterSource::Kubeconfig(path),
                (None, Some(url)) => ClusterSource::Url(url),
                (None, None) => ClusterSource::Infer,
            }
        };
        let group_by = match file.group_by {
            Some(text) => Some(text.parse().map_err(|message| Error::Config {
                key: "group-by",
                message,
            })?),
            None => None,
        };
        if let Some(grouping) = self.group_by.or(group_by) {
            config.group_by = grouping;
        }
        if let Some(ms) = self.stale_after_ms.or(file.stale_after_ms) {
            config.stale_after = Duration::from_millis(ms);
        }
        for (key, value, field) in [
            (
                "probe-interval-ms",
                self.probe_interval_ms.or(file.probe_interval_ms),
                &mut config.probes.every,
            ),
            (
                "probe-timeout-ms",
                self.probe_timeout_ms.or(file.probe_timeout_ms),
                &mut config.probes.timeout,
            ),
            (
                "metrics-interval-ms",
                self.metrics_interval_ms.or(file.metrics_interval_ms),
                &mut config.metrics_every,
            ),
        ] {
            match value {
                Some(0) => {
                    return Err(Error::Config {
                        key,
                        message: "must be at least 1".into(),
                    });
                }
                Some(ms) => *field = Duration::from_millis(ms),
                None => {}
            }
        }
        if let Some(store) = self.task_store.or(file.task_store) {
            config.task_store = store;
        }
        if let Some(namespace) = self.tasks_namespace.or(file.tasks_namespace) {
            config.tasks_namespace = namespace;
        }
        if let Some(n) = self.task_history.or(file.task_history) {
            config.task_history = n;
        }
        config.execute_tasks = self.execute_tasks || file.execute_tasks.unwrap_or(false);
        config.failover = file.failover.unwrap_or_default();
        config.failover.enforce |= self.failover_enforce;
        if let Some(cap) = self.failover_max_unhealthy {
            config.failover.max_unhealthy = cap;
        }
        for (i, window) in config.failover.maintenance.iter().enumerate() {
            for time in [&window.from, &window.until] {
                crate::time::parse_time(time).map_err(|e| Error::Config {
                    key: "failover.maintenance",
                    message: format!("window {}: `{time}`: {e}", i + 1),
                })?;
            }
        }
        if let Some(n) = self.derive_threads.or(file.derive_threads) {
            config.derive_threads = n;
        }
        match self.event_buffer.or(file.event_buffer) {
            Some(0) => {
                return Err(Error::Config {
                    key: "event-buffer",
                    message: "must be at least 1".into(),
                });
            }
            Some(n) => config.event_buffer = n,
            None => {}
        }
        for (key, inline, path, tokens) in [
            (
                "read-tokens-file",
                &file.read_tokens,
                self.read_tokens_file
                    .or_else(|| from_file(file.read_tokens_file)),
                &mut config.read_tokens,
            ),
            (
                "write-tokens-file",
                &file.write_tokens,
                self.write_tokens_file
                    .or_else(|| from_file(file.write_tokens_file)),
                &mut config.write_tokens,
            ),
        ] {
            tokens.extend(inline.iter().cloned().map(Secret));
            if let Some(path) = path {
                let text = std::fs::read_to_string(&path).map_err(|e| Error::Config {
                    key,
                    message: format!("{}: {e}", path.display()),
                })?;
                tokens.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && !l.starts_with('#'))
                        .map(|l| Secret(l.to_string())),
                );
            }
        }
        if let Some(kib) = self.body_limit_kib.or(file.body_limit_kib) {
            config.body_limit =
                kib.checked_mul(1 << 10)
                    .filter(|b| *b > 0)
                    .ok_or(Error::Config {
                        key: "body-limit-kib",
                        message: format!("{kib} is out of range"),
                    })?;
        }
        if let Some(ms) = at_least_one(
            "request-timeout-ms",
            self.request_timeout_ms.or(file.request_timeout_ms),
        )? {
            config.request_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = at_least_one(
            "header-timeout-ms",
            self.header_timeout_ms.or(file.header_timeout_ms),
        )? {
            config.header_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = at_least_one(
            "max-connections",
            self.max_connections.or(file.max_connections),
        )? {
            config.max_connections = n;
        }
        if let Some(ms) = at_least_one("heartbeat-ms", self.heartbeat_ms.or(file.heartbeat_ms))? {
            config.heartbeat = Duration::from_millis(ms);
        }
        if let Some(mode) = self.admission_failure.or(file.admission_failure) {
            config.admission_failure = mode;
        }
        config.tls = match (
            self.tls_cert.or_else(|| from_file(file.tls_cert)),
            self.tls_key.or_else(|| from_file(file.tls_key)),
        ) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(Error::Config {
                    key: "tls-key",
                    message: "tls-cert is set but tls-key is not".into(),
                });
            }
            (None, Some(_)) => {
                return Err(Error::Config {
                    key: "tls-cert",
                    message: "tls-key is set but tls-cert is not".into(),
                });
            }
        };
        config.settings = file
            .settings
            .into_iter()
            .map(|(name, table)| {
                let json = serde_json::to_value(table).unwrap_or_default();
                (name, json)
            })
            .collect();
        Ok(config)
    }
}

/// A setting that must be at least 1, when it is given.
fn at_least_one<T: Copy + PartialEq + From<u8>>(
    key: &'static str,
    value: Option<T>,
) -> Result<Option<T>> {
    match value {
        Some(v) if v == T::from(0) => Err(Error::Config {
            key,
            message: "must be at least 1".into(),
        }),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("verdict.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "listen = \"127.0.0.1:9000\"\ncall-timeout-ms = 250\nderive-threads = 1\n[settings.status]\nrestart-window-ms = 1000\n",
        );
        let args = ServeArgs {
            config: Some(path),
            call_timeout_ms: Some(40),
            ..ServeArgs::default()
        };
        let config = args.into_config().unwrap();
        assert_eq!(config.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(config.limits.call_timeout, Duration::from_millis(40));
        assert_eq!(config.derive_threads, 1);
        assert_eq!(config.limits.memory_bytes, 64 << 20);
        assert_eq!(config.data_dir, PathBuf::from("verdict-data"));
        assert_eq!(
            config.settings_for("status"),
            r#"{"restart-window-ms":1000}"#
        );
        assert_eq!(config.settings_for("other"), "{}");
    }

    #[test]
    fn the_example_configuration_parses() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/verdict.toml");
        let file = FileConfig::read(&example).unwrap();
        assert_eq!(file.call_timeout_ms, Some(100));
        assert!(file.settings.contains_key("status"));
    }

    #[test]
    fn the_failover_table_reads_and_the_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "[failover]\nmax-unhealthy = 3\nmax-retries = 5\n[[failover.maintenance]]\nnodes = [\"n1\"]\nfrom = \"2026-12-01T02:00:00Z\"\nuntil = \"2026-12-01T04:00:00Z\"\n",
        );
        let config = ServeArgs {
            config: Some(path.clone()),
            failover_enforce: true,
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap();
        assert!(config.failover.enforce);
        assert_eq!(config.failover.max_retries, 5);
        assert_eq!(
            config.failover.max_unhealthy,
            crate::failover::brakes::Cap::Nodes(3)
        );
        assert_eq!(config.failover.maintenance.len(), 1);
        let flagged = ServeArgs {
            config: Some(path),
            failover_max_unhealthy: Some("25%".parse().unwrap()),
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap();
        assert!(!flagged.failover.enforce, "a dry run by default");
        assert_eq!(
            flagged.failover.max_unhealthy,
            crate::failover::brakes::Cap::Percent(25)
        );

        let bad = write(
            dir.path(),
            "[[failover.maintenance]]\nfrom = \"tomorrow\"\nuntil = \"2026-12-01T04:00:00Z\"\n",
        );
        let error = ServeArgs {
            config: Some(bad),
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap_err();
        assert!(
            error.to_string().contains("failover.maintenance"),
            "{error}"
        );
        assert!(error.to_string().contains("tomorrow"), "{error}");
    }

    #[test]
    fn an_unknown_key_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "listn = \"127.0.0.1:9000\"\n");
        let error = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap_err();
        assert!(error.to_string().contains("listn"), "{error}");
    }

    #[test]
    fn a_yaml_file_reads_like_toml_and_a_bad_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("verdict.yaml");
        std::fs::write(
            &path,
            "listen: 127.0.0.1:9100\ncall-timeout-ms: 250\nwrite-tokens: [sesame]\nsettings:\n  status: {restart-window-ms: 1000}\n",
        )
        .unwrap();
        let config = ServeArgs {
            config: Some(path.clone()),
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap();
        assert_eq!(config.listen, "127.0.0.1:9100".parse().unwrap());
        assert_eq!(config.limits.call_timeout, Duration::from_millis(250));
        assert_eq!(config.write_tokens, [Secret("sesame".into())]);
        assert_eq!(
            config.settings_for("status"),
            r#"{"restart-window-ms":1000}"#
        );
        std::fs::write(&path, "listen: 127.0.0.1:9100\ntask-histroy: 5\n").unwrap();
        let error = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap_err();
        assert!(error.to_string().contains("task-histroy"), "{error}");
    }

    #[test]
    fn the_printed_configuration_reads_back_with_secrets_masked() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, "open-sesame\n").unwrap();
        let config = ServeArgs {
            listen: Some("127.0.0.1:9200".parse().unwrap()),
            write_tokens_file: Some(tokens),
            task_history: Some(7),
            heartbeat_ms: Some(2500),
            group_by: Some(Grouping::Owner),
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap();
        let printed = config.effective();
        assert!(!printed.contains("open-sesame"), "{printed}");
        assert!(
            printed.contains("# write-tokens: 1 configured (not shown)"),
            "{printed}"
        );
        let path = write(dir.path(), &printed);
        let again = ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap();
        assert_eq!(again.listen, config.listen);
        assert_eq!(again.task_history, 7);
        assert_eq!(again.heartbeat, Duration::from_millis(2500));
        assert_eq!(again.group_by.to_string(), "owner");
        assert_eq!(again.limits, config.limits);
        assert!(
            again.write_tokens.is_empty(),
            "a printout configures no token"
        );
        let without_tokens = |text: &str| {
            text.lines()
                .filter(|l| !l.contains("-tokens:"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(without_tokens(&again.effective()), without_tokens(&printed));
    }

    #[test]
    fn a_missing_plugin_folder_is_an_error() {
        let error = ServeArgs {
            plugins: Some(PathBuf::from("/nonexistent/plugins")),
            ..ServeArgs::default()
        }
        .into_config()
        .unwrap_err();
        assert!(error.to_string().contains("plugins"), "{error}");
    }
}
