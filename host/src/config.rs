//! Configuration flows one way: command-line flags over `VERDICT_*`
//! environment variables over an optional TOML (or YAML) file over the
//! defaults, into one plain [`Config`] that the host is built from. Tests
//! build a `Config` directly.
//!
//! Each module owns its settings ([`crate::settings`] says how one is
//! declared); `verdict serve` is their composition ([`ServeArgs`]). The file
//! takes the same names: its values become the command's defaults, beneath
//! the flags and the environment, so that one parser reads all three. The
//! printout of `--print-config` and the README's table are made from the
//! same declarations.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};

use crate::error::{Error, Result};
use crate::failover::FailoverConfig;
use crate::failover::brakes::Maintenance;
use crate::http::access::Secret;
use crate::http::tls::TlsFiles;
use crate::lifecycle::hooks::HookSpec;
use crate::observe::resources::ResourceRef;
use crate::{
    admission, delivery, events, executor, history, http, leader, lifecycle, memory, observe,
    plugins, shadow, tasks, verdicts,
};

/// Everything the host is built from.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the host keeps its state (the compiled-code cache among it).
    pub data_dir: PathBuf,
    /// Where compiled code is cached when not in the data folder.
    pub cache_dir: Option<PathBuf>,
    /// Which cluster to follow.
    pub cluster: ClusterSource,
    /// The plugin folder (`None` runs without plugins), its watch and the
    /// limits of each call.
    pub plugins: plugins::Settings,
    /// Settings handed to each plugin as JSON text, by plugin name.
    pub settings: BTreeMap<String, serde_json::Value>,
    /// Plugins' own limits over `plugins.limits`, by plugin name.
    pub plugin_limits: BTreeMap<String, plugins::Override>,
    /// The step hooks that carry out lifecycle tasks, by step name.
    pub hooks: BTreeMap<String, HookSpec>,
    pub observe: observe::Settings,
    pub tasks: tasks::Settings,
    pub verdicts: verdicts::Settings,
    pub events: events::Settings,
    pub history: history::Settings,
    pub memory: memory::Settings,
    pub admission: admission::Settings,
    pub failover: FailoverConfig,
    pub executor: executor::Settings,
    pub leader: leader::Settings,
    /// How OCI registries are reached (policies of `Policy` objects).
    pub registries: delivery::oci::Registries,
    pub shadow: shadow::Settings,
    pub lifecycle: lifecycle::Settings,
    pub http: http::Settings,
    /// Serve HTTPS with this certificate and key (PEM files, reloaded when
    /// they change).
    pub tls: Option<TlsFiles>,
    /// Bearer tokens that may read; with any, reads need one.
    pub read_tokens: Vec<Secret>,
    /// Bearer tokens that may read and write; with any token configured,
    /// changes need one of these.
    pub write_tokens: Vec<Secret>,
}

/// Where the cluster comes from.
/// The certificate and key to serve HTTPS with, both or neither.
fn tls_files(http: &http::Settings) -> Result<Option<TlsFiles>> {
    match (&http.tls_cert, &http.tls_key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::Config {
            key: "tls-key",
            message: "tls-cert is set but tls-key is not".into(),
        }),
        (None, Some(_)) => Err(Error::Config {
            key: "tls-cert",
            message: "tls-key is set but tls-cert is not".into(),
        }),
    }
}

/// The read and write tokens: those a file lists, and those of the token
/// files (one a line, `#` comments).
fn tokens(
    http: &http::Settings,
    read: Vec<String>,
    write: Vec<String>,
) -> Result<(Vec<Secret>, Vec<Secret>)> {
    let mut read_tokens: Vec<Secret> = read.into_iter().map(Secret).collect();
    let mut write_tokens: Vec<Secret> = write.into_iter().map(Secret).collect();
    for (key, path, tokens) in [
        ("read-tokens-file", &http.read_tokens_file, &mut read_tokens),
        (
            "write-tokens-file",
            &http.write_tokens_file,
            &mut write_tokens,
        ),
    ] {
        if let Some(path) = path {
            let text = std::fs::read_to_string(path)
                .map_err(Error::setting(key, path.display().to_string()))?;
            tokens.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(|l| Secret(l.to_string())),
            );
        }
    }
    Ok((read_tokens, write_tokens))
}

/// `verdict fleet`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    /// A configuration file (TOML): `[[fleet.members]]` tables (`name`,
    /// `url`, `token-file`, `ca-file`), `read-tokens`, `write-tokens`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The kubeconfig of the cluster the fleet finds members in (its
    /// ClusterProfiles, Argo CD's Secrets); in-cluster or `KUBECONFIG`
    /// when unset.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub fleet: crate::fleet::Settings,
    #[command(flatten)]
    pub events: events::Settings,
    #[command(flatten)]
    pub http: http::Settings,
}

/// `verdict fleet`'s configuration.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub fleet: crate::fleet::Settings,
    /// The members the configuration names.
    pub members: Vec<crate::fleet::members::Spec>,
    /// Where members are found (ClusterProfiles, Argo CD's Secrets).
    pub cluster: ClusterSource,
    pub events: events::Settings,
    pub http: http::Settings,
    pub tls: Option<TlsFiles>,
    pub read_tokens: Vec<Secret>,
    pub write_tokens: Vec<Secret>,
}

/// What `verdict fleet`'s file may hold.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FleetFile {
    #[serde(default)]
    fleet: FleetTable,
    #[serde(default)]
    read_tokens: Vec<String>,
    #[serde(default)]
    write_tokens: Vec<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetTable {
    #[serde(default)]
    members: Vec<crate::fleet::StaticMember>,
}

impl FleetArgs {
    /// The flags and the file into one [`FleetConfig`].
    pub fn into_config(self) -> Result<FleetConfig> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
                let mut file: FleetFile = toml::from_str(&text).map_err(|e| Error::ConfigFile {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                let folder = path.parent().unwrap_or(Path::new(""));
                for member in &mut file.fleet.members {
                    for path in [&mut member.token_file, &mut member.ca_file]
                        .into_iter()
                        .flatten()
                    {
                        *path = folder.join(&*path);
                    }
                }
                file
            }
            None => FleetFile::default(),
        };
        let members = crate::fleet::members::configured(&file.fleet.members, &self.fleet).map_err(
            |message| Error::Config {
                key: "member",
                message,
            },
        )?;
        let tls = tls_files(&self.http)?;
        let (read_tokens, write_tokens) = tokens(&self.http, file.read_tokens, file.write_tokens)?;
        Ok(FleetConfig {
            members,
            cluster: self
                .kubeconfig
                .map_or(ClusterSource::Infer, ClusterSource::Kubeconfig),
            fleet: self.fleet,
            events: self.events,
            http: self.http,
            tls,
            read_tokens,
            write_tokens,
        })
    }
}

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
            data_dir,
            cache_dir: None,
            cluster: ClusterSource::None,
            plugins: plugins::Settings {
                dir: plugins_dir,
                ..plugins::Settings::default()
            },
            settings: BTreeMap::new(),
            plugin_limits: BTreeMap::new(),
            hooks: BTreeMap::new(),
            observe: observe::Settings::default(),
            tasks: tasks::Settings::default(),
            verdicts: verdicts::Settings::default(),
            events: events::Settings::default(),
            history: history::Settings::default(),
            memory: memory::Settings::default(),
            admission: admission::Settings::default(),
            failover: FailoverConfig::default(),
            executor: executor::Settings::default(),
            leader: leader::Settings::default(),
            registries: delivery::oci::Registries::default(),
            shadow: shadow::Settings::default(),
            lifecycle: lifecycle::Settings::default(),
            http: http::Settings::default(),
            tls: None,
            read_tokens: Vec::new(),
            write_tokens: Vec::new(),
        }
    }

    /// Each plugin's own limits, in full, by name.
    pub(crate) fn limits_by_plugin(&self) -> BTreeMap<String, plugins::Limits> {
        self.plugin_limits
            .iter()
            .map(|(name, own)| (name.clone(), own.over(self.plugins.limits)))
            .collect()
    }

    /// The settings text for one plugin (`{}` when none are configured).
    pub(crate) fn settings_for(&self, plugin: &str) -> String {
        self.settings
            .get(plugin)
            .map_or_else(|| "{}".to_string(), serde_json::Value::to_string)
    }
}

/// Which cluster to follow.
#[derive(Debug, Clone, Default, clap::Args)]
#[group(skip)]
pub struct ClusterArgs {
    /// Follow the cluster of this kubeconfig file. Without it or
    /// --cluster-url the cluster is found as kubectl finds it (in-cluster,
    /// `KUBECONFIG`, `~/.kube/config`); none found, the demo cluster.
    #[arg(
        long = "kubeconfig",
        value_name = "FILE",
        conflicts_with = "cluster_url"
    )]
    pub kubeconfig: Option<PathBuf>,
    /// Follow the API server at this URL, without authentication (the
    /// simulator, `kubectl proxy`).
    #[arg(long = "cluster-url", value_name = "URL")]
    pub cluster_url: Option<String>,
    /// Follow the built-in demo cluster: the simulator in-process, playing
    /// a looping scenario (also what runs when no cluster is found).
    #[arg(long = "demo", conflicts_with_all = ["kubeconfig", "cluster_url"])]
    pub demo: bool,
    /// Play this scenario file in the demo cluster (implies --demo; without
    /// it, the built-in `sim/scenarios/demo.yaml`).
    #[arg(long = "scenario", value_name = "FILE", conflicts_with_all = ["kubeconfig", "cluster_url"])]
    pub scenario: Option<PathBuf>,
}

/// The flags of `verdict serve`: every module's settings. Each also reads
/// the environment variable `VERDICT_<KEY>` and the file key `<KEY>`; a flag
/// wins over the variable, which wins over the file, which wins over the
/// default.
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct ServeArgs {
    /// The configuration file: TOML, or YAML when named `*.yaml`/`*.yml`,
    /// with the flags' names as keys; paths in it are relative to it.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (flags over environment over file
    /// over defaults) as a configuration file, with secrets masked, and
    /// exit.
    #[arg(long = "print-config")]
    pub print_config: bool,
    /// The folder of the host's state: the task database, failover's
    /// journal, the compiled-code cache (one host per folder: a second host
    /// on it stops, naming the first's process).
    #[arg(long = "data-dir", value_name = "DIR", default_value = "verdict-data")]
    pub data_dir: PathBuf,
    /// Folder for the compiled-code cache [default: `code-cache` in the
    /// data folder]. Hosts on one machine may share it, as the offline
    /// commands do theirs: each entry is written whole or not at all.
    #[arg(long = "cache-dir", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub plugins: plugins::Settings,
    #[command(flatten)]
    pub observe: observe::Settings,
    #[command(flatten)]
    pub verdicts: verdicts::Settings,
    #[command(flatten)]
    pub tasks: tasks::Settings,
    #[command(flatten)]
    pub events: events::Settings,
    #[command(flatten)]
    pub history: history::Settings,
    #[command(flatten)]
    pub memory: memory::Settings,
    #[command(flatten)]
    pub admission: admission::Settings,
    #[command(flatten)]
    pub executor: executor::Settings,
    #[command(flatten)]
    pub failover: FailoverConfig,
    #[command(flatten)]
    pub leader: leader::Settings,
    #[command(flatten)]
    pub registries: delivery::oci::Registries,
    #[command(flatten)]
    pub shadow: shadow::Settings,
    #[command(flatten)]
    pub lifecycle: lifecycle::Settings,
    #[command(flatten)]
    pub http: http::Settings,
}

/// The flags that are not settings: no variable, no file key.
const NOT_SETTINGS: [&str; 3] = ["print-config", "help", "version"];

/// The environment variable of a setting.
fn variable(key: &str) -> String {
    format!("VERDICT_{}", key.to_uppercase().replace('-', "_"))
}

/// Settings with a path as their value: relative paths in the file are
/// relative to the file, and printed paths absolute.
fn is_path(arg: &Arg) -> bool {
    arg.get_value_names()
        .is_some_and(|names| names.iter().any(|n| n == "FILE" || n == "DIR"))
}

/// The file key of a setting: `failover-max-retries` is `max-retries` of
/// the `[failover]` table.
fn file_key(key: &str) -> (Option<&'static str>, &str) {
    match key.strip_prefix("failover-") {
        Some(rest) => (Some("failover"), rest),
        None => (None, key),
    }
}

/// A configuration file, read: its settings as text by flag name, and what
/// only a file can say.
#[derive(Debug, Default, Clone)]
pub struct FileConfig {
    path: PathBuf,
    values: BTreeMap<String, String>,
    /// `[settings.<plugin>]` tables.
    settings: BTreeMap<String, serde_json::Value>,
    /// `[limits.<plugin>]` tables.
    limits: BTreeMap<String, plugins::Override>,
    /// `[hooks.<step>]` tables.
    hooks: BTreeMap<String, HookSpec>,
    read_tokens: Vec<String>,
    write_tokens: Vec<String>,
    maintenance: Vec<Maintenance>,
    /// `[[resources]]`, when the file names them.
    resources: Option<Vec<ResourceRef>>,
}

impl FileConfig {
    /// Read a TOML file, or YAML when its name ends in `.yaml` or `.yml`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        let yaml = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
        let fail = |message: String| Error::ConfigFile {
            path: path.to_path_buf(),
            message,
        };
        let table: toml::Table = if yaml {
            serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(&text))
                .map_err(|e| fail(format!("{}: {}", e.path(), e.inner())))?
        } else {
            toml::from_str(&text).map_err(|e| fail(e.to_string()))?
        };
        let mut file = FileConfig {
            path: path.to_path_buf(),
            ..FileConfig::default()
        };
        for (key, value) in table {
            match (key.as_str(), value) {
                ("settings", toml::Value::Table(plugins)) => {
                    for (plugin, settings) in plugins {
                        let json = serde_json::to_value(&settings)
                            .map_err(|e| fail(format!("settings.{plugin}: {e}")))?;
                        if !json.is_object() {
                            return Err(fail(format!("settings.{plugin}: must be a table")));
                        }
                        file.settings.insert(plugin, json);
                    }
                }
                ("limits", toml::Value::Table(plugins)) => {
                    for (plugin, limits) in plugins {
                        let own: plugins::Override = limits
                            .try_into()
                            .map_err(|e| fail(format!("limits.{plugin}: {e}")))?;
                        if own.call_timeout_ms == Some(0) || own.memory_limit_mib == Some(0) {
                            return Err(fail(format!(
                                "limits.{plugin}: limits must be at least 1"
                            )));
                        }
                        file.limits.insert(plugin, own);
                    }
                }
                ("hooks", toml::Value::Table(hooks)) => {
                    for (step, spec) in hooks {
                        let mut spec: HookSpec = spec
                            .try_into()
                            .map_err(|e| fail(format!("hooks.{step}: {e}")))?;
                        if let Some(job) = spec.job.take() {
                            spec.job = Some(file.folder().join(job));
                        }
                        spec.check(&step).map_err(fail)?;
                        file.hooks.insert(step, spec);
                    }
                }
                (tokens @ ("read-tokens" | "write-tokens"), value) => {
                    let list: Vec<String> = value
                        .try_into()
                        .map_err(|e| fail(format!("{tokens}: {e}")))?;
                    if tokens == "read-tokens" {
                        file.read_tokens = list;
                    } else {
                        file.write_tokens = list;
                    }
                }
                ("resources", value) => {
                    file.resources = Some(
                        value
                            .try_into()
                            .map_err(|e| fail(format!("resources: {e}")))?,
                    );
                }
                ("failover", toml::Value::Table(failover)) => {
                    for (key, value) in failover {
                        if key == "maintenance" {
                            file.maintenance = value
                                .try_into()
                                .map_err(|e| fail(format!("failover.maintenance: {e}")))?;
                        } else {
                            let text = scalar(&value)
                                .ok_or_else(|| fail(format!("failover.{key}: takes one value")))?;
                            file.values.insert(format!("failover-{key}"), text);
                        }
                    }
                }
                (key, value) => {
                    let text =
                        scalar(&value).ok_or_else(|| fail(format!("{key}: takes one value")))?;
                    file.values.insert(key.to_string(), text);
                }
            }
        }
        Ok(file)
    }

    /// The file named by `--config FILE` (or `--config=FILE`) among a
    /// command line's arguments, else by `VERDICT_CONFIG`.
    pub fn named_by<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Result<Option<Self>> {
        let mut path = None;
        for (i, arg) in args.iter().enumerate() {
            let arg = arg.as_ref().to_string_lossy();
            if arg == "--config" {
                path = args.get(i + 1).map(|p| PathBuf::from(p.as_ref()));
            } else if let Some(value) = arg.strip_prefix("--config=") {
                path = Some(PathBuf::from(value));
            }
        }
        let path = path.or_else(|| std::env::var_os("VERDICT_CONFIG").map(PathBuf::from));
        path.map(|p| Self::read(&p)).transpose()
    }

    /// The folder paths in the file are relative to.
    fn folder(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new(""))
    }
}

/// A file value as the text a flag would take.
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Datetime(d) => Some(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => None,
    }
}

/// `verdict serve`'s command: every setting with its variable, and the
/// file's values (checked, and named when wrong) as the defaults.
pub fn serve_command(command: Command, file: Option<&FileConfig>) -> Result<Command> {
    let (mut command, keys) = with_variables(command);
    let Some(file) = file else {
        return Ok(command);
    };
    let fail = |message: String| Error::ConfigFile {
        path: file.path.clone(),
        message,
    };
    for (key, text) in &file.values {
        let Some((id, _)) = keys
            .iter()
            .find(|(_, long)| long == key && long != "config")
        else {
            let (table, name) = file_key(key);
            let named = table.map_or_else(|| name.to_string(), |t| format!("{t}.{name}"));
            return Err(fail(format!("unknown key `{named}`")));
        };
        let arg = command
            .get_arguments()
            .find(|a| a.get_id() == id)
            .expect("the key's argument");
        let text = if is_path(arg) {
            file.folder().join(text).display().to_string()
        } else {
            text.clone()
        };
        // The value is read as the flag would read it.
        Command::new("check")
            .no_binary_name(true)
            .arg(
                Arg::new("value")
                    .long("value")
                    .action(ArgAction::Set)
                    .value_parser(arg.get_value_parser().clone()),
            )
            .try_get_matches_from([format!("--value={text}")])
            .map_err(|e| fail(format!("{key}: {}", first_line(&e))))?;
        command = command.mut_arg(id, |arg| arg.default_value(text));
    }
    Ok(command)
}

/// Every setting of a command with its environment variable; the
/// settings' ids and flags.
fn with_variables(command: Command) -> (Command, Vec<(clap::Id, String)>) {
    let mut command = command;
    let keys: Vec<(clap::Id, String)> = command
        .get_arguments()
        .filter_map(|arg| Some((arg.get_id().clone(), arg.get_long()?.to_string())))
        .filter(|(_, long)| !NOT_SETTINGS.contains(&long.as_str()))
        .collect();
    for (id, key) in &keys {
        command = command.mut_arg(id, |arg| arg.env(variable(key)));
    }
    (command, keys)
}

/// `verdict fleet`'s command: every setting with its variable.
pub fn fleet_command(command: Command) -> Command {
    with_variables(command).0
}

/// A clap error's message, without its `error:` prefix and usage.
fn first_line(error: &clap::Error) -> String {
    let text = error.to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

impl ServeArgs {
    /// Merge the parsed flags and the file's own parts into a [`Config`].
    pub(crate) fn into_config(self, file: Option<&FileConfig>) -> Result<Config> {
        let plugins_dir = match self.plugins.dir {
            Some(dir) if !dir.is_dir() => {
                return Err(Error::Config {
                    key: "plugins",
                    message: format!("{} is not a folder", dir.display()),
                });
            }
            Some(dir) => Some(dir),
            None => plugins::builtin::default_folder(),
        };
        let ClusterArgs {
            kubeconfig,
            cluster_url,
            demo,
            scenario,
        } = self.cluster;
        let cluster = if demo || scenario.is_some() {
            ClusterSource::Demo { scenario }
        } else {
            match (kubeconfig, cluster_url) {
                (Some(path), _) => ClusterSource::Kubeconfig(path),
                (None, Some(url)) => ClusterSource::Url(url),
                (None, None) => ClusterSource::Infer,
            }
        };
        let mut failover = self.failover;
        let mut observe = self.observe;
        if let Some(file) = file {
            failover.maintenance = file.maintenance.clone();
            if let Some(resources) = &file.resources {
                observe.resources = resources.clone();
            }
        }
        for (i, window) in failover.maintenance.iter().enumerate() {
            for time in [&window.from, &window.until] {
                crate::time::parse_time(time).map_err(|e| Error::Config {
                    key: "failover.maintenance",
                    message: format!("window {}: `{time}`: {e}", i + 1),
                })?;
            }
        }
        if self.leader.enabled {
            self.leader.check().map_err(|message| Error::Config {
                key: "lease-renew-deadline-ms",
                message,
            })?;
            if self.tasks.store != tasks::StoreKind::Kubernetes {
                return Err(Error::Config {
                    key: "leader-election",
                    message: "replicas share their tasks through --task-store kubernetes; \
                              leader election needs it"
                        .into(),
                });
            }
        }
        let http = self.http;
        let tls = tls_files(&http)?;
        let inline = |tokens: fn(&FileConfig) -> &Vec<String>| {
            file.map(tokens)
                .into_iter()
                .flatten()
                .cloned()
                .collect::<Vec<_>>()
        };
        let (read_tokens, write_tokens) = tokens(
            &http,
            inline(|f| &f.read_tokens),
            inline(|f| &f.write_tokens),
        )?;
        Ok(Config {
            data_dir: self.data_dir,
            cache_dir: self.cache_dir,
            cluster,
            plugins: plugins::Settings {
                dir: plugins_dir,
                ..self.plugins
            },
            settings: file.map(|f| f.settings.clone()).unwrap_or_default(),
            plugin_limits: file.map(|f| f.limits.clone()).unwrap_or_default(),
            hooks: file.map(|f| f.hooks.clone()).unwrap_or_default(),
            observe,
            tasks: self.tasks,
            verdicts: self.verdicts,
            events: self.events,
            history: self.history,
            memory: self.memory,
            admission: self.admission,
            failover,
            executor: self.executor,
            leader: self.leader,
            registries: self.registries,
            shadow: self.shadow,
            lifecycle: self.lifecycle,
            http,
            tls,
            read_tokens,
            write_tokens,
        })
    }
}

/// `verdict serve`, parsed: the configuration, and what `--print-config`
/// prints.
#[derive(Debug)]
pub struct Serve {
    pub config: Config,
    pub print_config: bool,
    /// The effective configuration in the file's form.
    pub effective: String,
}

impl Serve {
    /// Build from the serve command's matches (the command from
    /// [`serve_command`], the file it was given).
    pub fn from_matches(
        command: &Command,
        matches: &ArgMatches,
        file: Option<&FileConfig>,
    ) -> Result<Self> {
        let args = ServeArgs::from_arg_matches(matches).map_err(|e| Error::Config {
            key: "serve",
            message: first_line(&e),
        })?;
        let print_config = args.print_config;
        let config = args.into_config(file)?;
        let effective = effective(command, matches, &config);
        Ok(Self {
            config,
            print_config,
            effective,
        })
    }

    /// Parse `verdict serve` from its arguments (without the program and
    /// subcommand names).
    pub fn parse<S: Into<OsString> + Clone>(args: &[S]) -> Result<Self> {
        let args: Vec<OsString> = args.iter().cloned().map(Into::into).collect();
        let file = FileConfig::named_by(&args)?;
        let command = serve_command(
            ServeArgs::augment_args(Command::new("serve").no_binary_name(true)),
            file.as_ref(),
        )?;
        let matches = command
            .clone()
            .try_get_matches_from(&args)
            .map_err(|e| Error::Config {
                key: "serve",
                message: first_line(&e),
            })?;
        Self::from_matches(&command, &matches, file.as_ref())
    }
}

/// The effective configuration in the configuration file's form (TOML,
/// paths absolute); tokens are counted, not shown.
fn effective(command: &Command, matches: &ArgMatches, config: &Config) -> String {
    use toml::Value as V;
    let absolute = |text: &str| {
        let path = Path::new(text);
        std::path::absolute(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .display()
            .to_string()
    };
    let mut top = toml::Table::new();
    let mut failover = toml::Table::new();
    for arg in command.get_arguments() {
        let Some(key) = arg.get_long() else { continue };
        if NOT_SETTINGS.contains(&key) || key == "config" {
            continue;
        }
        let Some(text) = matches
            .get_raw(arg.get_id().as_str())
            .and_then(|mut values| values.next())
            .map(|v| v.to_string_lossy().into_owned())
        else {
            continue;
        };
        let value = if is_path(arg) {
            V::String(absolute(&text))
        } else if matches!(arg.get_action(), ArgAction::SetTrue) {
            V::Boolean(text == "true")
        } else if let Ok(n) = text.parse::<i64>() {
            V::Integer(n)
        } else {
            V::String(text)
        };
        match file_key(key) {
            (Some(_), name) => failover.insert(name.to_string(), value),
            (None, name) => top.insert(name.to_string(), value),
        };
    }
    // The folder found without being named.
    if let Some(dir) = &config.plugins.dir {
        top.insert(
            "plugins".into(),
            V::String(absolute(&dir.display().to_string())),
        );
    }
    if !config.failover.maintenance.is_empty()
        && let Ok(windows) = V::try_from(&config.failover.maintenance)
    {
        failover.insert("maintenance".into(), windows);
    }
    top.insert("failover".into(), V::Table(failover));
    if let Ok(resources) = V::try_from(&config.observe.resources) {
        top.insert("resources".into(), resources);
    }
    let settings: toml::Table = config
        .settings
        .iter()
        .filter_map(|(name, value)| V::try_from(value).ok().map(|v| (name.clone(), v)))
        .collect();
    top.insert("settings".into(), V::Table(settings));
    let limits: toml::Table = config
        .plugin_limits
        .iter()
        .map(|(name, own)| {
            let mut table = toml::Table::new();
            if let Some(ms) = own.call_timeout_ms {
                table.insert("call-timeout-ms".into(), V::Integer(ms as i64));
            }
            if let Some(mib) = own.memory_limit_mib {
                table.insert("memory-limit-mib".into(), V::Integer(mib as i64));
            }
            (name.clone(), V::Table(table))
        })
        .collect();
    if !limits.is_empty() {
        top.insert("limits".into(), V::Table(limits));
    }
    let hooks: toml::Table = config
        .hooks
        .iter()
        .filter_map(|(step, spec)| V::try_from(spec).ok().map(|v| (step.clone(), v)))
        .collect();
    if !hooks.is_empty() {
        top.insert("hooks".into(), V::Table(hooks));
    }
    let cluster = match &config.cluster {
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
        config.read_tokens.len(),
        config.write_tokens.len()
    );
    format!(
        "{cluster}{tokens}{}",
        toml::to_string(&top).unwrap_or_default()
    )
}

/// The settings as a Markdown table: flag, variable, file key, default and
/// what each does, from their declarations (the README holds it).
pub fn settings_table() -> String {
    let command = ServeArgs::augment_args(Command::new("serve"));
    let mut table = String::from(
        "| flag | environment | file key | default | what it does |\n|---|---|---|---|---|\n",
    );
    let cell = |text: &str| text.replace('|', "\\|").replace('\n', " ");
    for arg in command.get_arguments() {
        let Some(key) = arg.get_long() else { continue };
        if NOT_SETTINGS.contains(&key) {
            continue;
        }
        let flag = match arg.get_value_names() {
            Some(names) if !matches!(arg.get_action(), ArgAction::SetTrue) => {
                format!("`--{key} {}`", names.join(" "))
            }
            _ => format!("`--{key}`"),
        };
        let in_file = match (key, file_key(key)) {
            ("config", _) => "—".to_string(),
            (_, (Some(table), name)) => format!("`[{table}] {name}`"),
            (_, (None, name)) => format!("`{name}`"),
        };
        let switch = matches!(arg.get_action(), ArgAction::SetTrue);
        let default = match arg.get_default_values() {
            [] if switch => "off".to_string(),
            [] => "—".to_string(),
            [value] if switch => if value == "true" { "on" } else { "off" }.to_string(),
            values => values
                .iter()
                .map(|v| format!("`{}`", v.to_string_lossy()))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        table.push_str(&format!(
            "| {} | `{}` | {} | {} | {} |\n",
            cell(&flag),
            variable(key),
            in_file,
            cell(&default),
            cell(&help)
        ));
    }
    table.push_str(
        "| — | — | `read-tokens = [...]`, `write-tokens = [...]` | — | tokens written in the file itself, beside those of the token files |\n\
         | — | — | `[[failover.maintenance]]` | — | times when nodes are expected to go down: `nodes` (names or `key=value` selectors), `from`, `until` (RFC 3339), `reason`; disruptive actions on them wait |\n\
         | — | — | `[[resources]]` | KubeVirt's `VirtualMachine`, `VirtualMachineInstance`, `VirtualMachineInstanceReplicaSet`, `VirtualMachineInstanceMigration`, `VirtualMachinePool`, CDI's `DataVolume` and verdict's `VMReplicaSet` | further kinds to watch: `group`, `version`, `kind` each; a kind the server does not serve is looked for again every 2 s and watched once served (`/readyz` lists it meanwhile); `resources = []` watches none |\n\
         | — | — | `[settings.<plugin>]` | — | settings handed to that plugin as JSON |\n\
         | — | — | `[limits.<plugin>]` | — | that plugin's own `call-timeout-ms` and `memory-limit-mib` |\n\
         | — | — | `[hooks.<step>]` | — | the step hook that carries out the lifecycle tasks of that name: `url` (called with each step) or `job` (a `batch/v1` Job template file, relative to this file, made into a Job for each step), `timeout-seconds` (1 to 300, default 10: one call), `failure-policy` (`fail`, the default, or `ignore`: what a call that cannot be made does) |\n",
    );
    table
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::observe::Grouping;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("verdict.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn fleet_args(args: &[&str]) -> FleetArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            fleet: FleetArgs,
        }
        <Cli as clap::Parser>::try_parse_from(std::iter::once("fleet").chain(args.iter().copied()))
            .unwrap()
            .fleet
    }

    #[test]
    fn a_fleets_file_names_its_members_with_paths_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("east.token"), "secret\n").unwrap();
        let file = write(
            dir.path(),
            "read-tokens = [\"r\"]\n\n[[fleet.members]]\nname = \"east\"\nurl = \"https://east.example/verdict\"\ntoken-file = \"east.token\"\n",
        );
        let config = fleet_args(&[
            "--config",
            file.to_str().unwrap(),
            "--member",
            "west=http://127.0.0.1:9",
        ])
        .into_config()
        .unwrap();
        let names: Vec<&str> = config.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["east", "west"]);
        assert_eq!(
            config.members[0].access.describe(),
            "https://east.example/verdict"
        );
        assert_eq!(config.read_tokens.len(), 1);
        // A key the fleet does not know, a token file that is not there, a
        // name twice: each refused, named.
        for (text, says) in [
            ("[fleet]\nmembrs = []\n", "membrs"),
            (
                "[[fleet.members]]\nname = \"e\"\nurl = \"http://x\"\ntoken-file = \"nope\"\n",
                "nope",
            ),
            (
                "[[fleet.members]]\nname = \"west\"\nurl = \"http://x\"\n",
                "named twice",
            ),
        ] {
            let file = write(dir.path(), text);
            let error = fleet_args(&[
                "--config",
                file.to_str().unwrap(),
                "--member",
                "west=http://127.0.0.1:9",
            ])
            .into_config()
            .unwrap_err();
            assert!(error.to_string().contains(says), "{text}: {error}");
        }
    }

    fn parse(args: &[&str]) -> Result<Config> {
        Serve::parse(args).map(|s| s.config)
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "listen = \"127.0.0.1:9000\"\ncall-timeout-ms = 250\nderive-threads = 1\n[settings.status]\nrestart-window-ms = 1000\n",
        );
        let config = parse(&[
            "--config",
            path.to_str().unwrap(),
            "--call-timeout-ms",
            "40",
        ])
        .unwrap();
        assert_eq!(config.http.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(
            config.plugins.limits.call_timeout,
            Duration::from_millis(40)
        );
        assert_eq!(config.verdicts.derive_threads, 1);
        assert_eq!(config.plugins.limits.memory_bytes, 64 << 20);
        assert_eq!(config.data_dir, PathBuf::from("verdict-data"));
        assert_eq!(
            config.settings_for("status"),
            r#"{"restart-window-ms":1000}"#
        );
        assert_eq!(config.settings_for("other"), "{}");
    }

    #[test]
    fn a_plugin_s_own_limits_read_over_the_host_s_and_mistakes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "memory-limit-mib = 32\n[limits.py]\nmemory-limit-mib = 128\n[limits.slow]\ncall-timeout-ms = 900\n",
        );
        let served = Serve::parse(&["--config", path.to_str().unwrap()]).unwrap();
        assert!(
            served.effective.contains("[limits.py]"),
            "{}",
            served.effective
        );
        let config = served.config;
        let limits = config.limits_by_plugin();
        assert_eq!(limits["py"].memory_bytes, 128 << 20);
        assert_eq!(limits["py"].call_timeout, Duration::from_millis(100));
        assert_eq!(limits["slow"].memory_bytes, 32 << 20);
        assert_eq!(limits["slow"].call_timeout, Duration::from_millis(900));

        for (text, says) in [
            ("[limits.py]\nmemory-mib = 128\n", "unknown field"),
            ("[limits.py]\ncall-timeout-ms = 0\n", "at least 1"),
            ("[limits.py]\ncall-timeout-ms = \"fast\"\n", "limits.py"),
        ] {
            let path = write(dir.path(), text);
            let error = parse(&["--config", path.to_str().unwrap()]).unwrap_err();
            assert!(error.to_string().contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn step_hooks_read_from_the_file_and_mistakes_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "[hooks.deploy-code]\nurl = \"http://hooks.example/deploy\"\ntimeout-seconds = 30\n\
             [hooks.health-check]\nurl = \"https://hooks.example/check\"\nfailure-policy = \"ignore\"\n",
        );
        let served = Serve::parse(&["--config", path.to_str().unwrap()]).unwrap();
        assert!(
            served.effective.contains("[hooks.deploy-code]"),
            "{}",
            served.effective
        );
        let hooks = &served.config.hooks;
        assert_eq!(hooks["deploy-code"].timeout_seconds, 30);
        assert_eq!(hooks["health-check"].timeout_seconds, 10);
        assert_eq!(
            hooks["health-check"].failure_policy,
            lifecycle::hooks::FailurePolicy::Ignore
        );
        for (text, says) in [
            (
                "[hooks.deploy-code]\nurl = \"ftp://x/y\"\n",
                "hooks.deploy-code: url `ftp://x/y` is not http or https",
            ),
            (
                "[hooks.deploy-code]\nurl = \"http://x/y\"\ntimeout-seconds = 0\n",
                "hooks.deploy-code: timeout-seconds is 0",
            ),
            (
                "[hooks.deploy-code]\nurl = \"http://x/y\"\nfailure-policy = \"retry\"\n",
                "hooks.deploy-code",
            ),
            (
                "[hooks.deploy-code]\nendpoint = \"http://x/y\"\n",
                "unknown field `endpoint`",
            ),
        ] {
            let path = write(dir.path(), text);
            let error = parse(&["--config", path.to_str().unwrap()]).unwrap_err();
            assert!(error.to_string().contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn the_example_configuration_parses() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/verdict.toml");
        let file = FileConfig::read(&example).unwrap();
        assert_eq!(
            file.values.get("call-timeout-ms").map(String::as_str),
            Some("100")
        );
        assert!(file.settings.contains_key("status"));
        // Every key of it is a setting, and every value reads.
        serve_command(ServeArgs::augment_args(Command::new("serve")), Some(&file)).unwrap();
        // It runs the demo and writes nowhere inside the repository.
        let config = parse(&["--config", example.to_str().unwrap()]).unwrap();
        assert!(
            matches!(config.cluster, ClusterSource::Demo { .. }),
            "the example runs the demo cluster"
        );
        let repository =
            std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap();
        assert!(
            !std::path::absolute(&config.data_dir)
                .unwrap()
                .starts_with(&repository),
            "{}",
            config.data_dir.display()
        );
    }

    #[test]
    fn the_failover_table_reads_and_the_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "[failover]\nmax-unhealthy = 3\nmax-retries = 5\n[[failover.maintenance]]\nnodes = [\"n1\"]\nfrom = \"2026-12-01T02:00:00Z\"\nuntil = \"2026-12-01T04:00:00Z\"\n",
        );
        let file = path.to_str().unwrap();
        let config = parse(&["--config", file, "--failover-enforce"]).unwrap();
        assert!(config.failover.enforce);
        assert_eq!(config.failover.max_retries, 5);
        assert_eq!(
            config.failover.max_unhealthy,
            crate::failover::brakes::Cap::Nodes(3)
        );
        assert_eq!(config.failover.maintenance.len(), 1);
        let flagged = parse(&["--config", file, "--failover-max-unhealthy", "25%"]).unwrap();
        assert!(!flagged.failover.enforce, "a dry run by default");
        assert_eq!(
            flagged.failover.max_unhealthy,
            crate::failover::brakes::Cap::Percent(25)
        );

        let bad = write(
            dir.path(),
            "[[failover.maintenance]]\nfrom = \"tomorrow\"\nuntil = \"2026-12-01T04:00:00Z\"\n",
        );
        let error = parse(&["--config", bad.to_str().unwrap()]).unwrap_err();
        assert!(
            error.to_string().contains("failover.maintenance"),
            "{error}"
        );
        assert!(error.to_string().contains("tomorrow"), "{error}");
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_names_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "listn = \"127.0.0.1:9000\"\n");
        let error = parse(&["--config", path.to_str().unwrap()]).unwrap_err();
        assert!(error.to_string().contains("listn"), "{error}");
        let path = write(dir.path(), "[failover]\nmax-retrys = 3\n");
        let error = parse(&["--config", path.to_str().unwrap()]).unwrap_err();
        assert!(error.to_string().contains("failover.max-retrys"), "{error}");
        let path = write(dir.path(), "call-timeout-ms = \"soon\"\n");
        let error = parse(&["--config", path.to_str().unwrap()])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("verdict.toml")
                && error.contains("call-timeout-ms")
                && error.contains("soon"),
            "{error}"
        );
        let path = write(dir.path(), "event-buffer = 0\n");
        let error = parse(&["--config", path.to_str().unwrap()])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("event-buffer") && error.contains("at least 1"),
            "{error}"
        );
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
        let file = path.to_str().unwrap();
        let config = parse(&["--config", file]).unwrap();
        assert_eq!(config.http.listen, "127.0.0.1:9100".parse().unwrap());
        assert_eq!(
            config.plugins.limits.call_timeout,
            Duration::from_millis(250)
        );
        assert_eq!(config.write_tokens, [Secret("sesame".into())]);
        assert_eq!(
            config.settings_for("status"),
            r#"{"restart-window-ms":1000}"#
        );
        std::fs::write(&path, "listen: 127.0.0.1:9100\ntask-histroy: 5\n").unwrap();
        let error = parse(&["--config", file]).unwrap_err();
        assert!(error.to_string().contains("task-histroy"), "{error}");
    }

    #[test]
    fn the_printed_configuration_reads_back_with_secrets_masked() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, "open-sesame\n").unwrap();
        let served = Serve::parse(&[
            "--listen",
            "127.0.0.1:9200",
            "--write-tokens-file",
            tokens.to_str().unwrap(),
            "--task-history",
            "7",
            "--heartbeat-ms",
            "2500",
            "--group-by",
            "owner",
            "--failover-max-retries",
            "9",
        ])
        .unwrap();
        let printed = served.effective;
        assert!(!printed.contains("open-sesame"), "{printed}");
        assert!(
            printed.contains("# write-tokens: 1 configured (not shown)"),
            "{printed}"
        );
        // The token file is a setting like the others; its secrets are not
        // in the printout, and reading it back reads the same file.
        let path = write(dir.path(), &printed);
        let again = Serve::parse(&["--config", path.to_str().unwrap()]).unwrap();
        let config = served.config;
        assert_eq!(again.config.http.listen, config.http.listen);
        assert_eq!(again.config.tasks.finished_kept, 7);
        assert_eq!(again.config.http.heartbeat, Duration::from_millis(2500));
        assert_eq!(again.config.observe.group_by, Grouping::Owner);
        assert_eq!(again.config.failover.max_retries, 9);
        assert_eq!(again.config.plugins.limits, config.plugins.limits);
        assert_eq!(again.effective, printed);
    }

    #[test]
    fn the_watched_kinds_are_kubevirts_unless_the_file_names_others() {
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.observe.resources, observe::resources::defaults());
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "[[resources]]\ngroup = \"postgresql.cnpg.io\"\nversion = \"v1\"\nkind = \"Cluster\"\n",
        );
        let named = Serve::parse(&["--config", path.to_str().unwrap()]).unwrap();
        let kinds: Vec<String> = named
            .config
            .observe
            .resources
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(kinds, ["postgresql.cnpg.io/v1/Cluster"]);
        assert!(
            named.effective.contains("[[resources]]"),
            "{}",
            named.effective
        );
        let none = write(dir.path(), "resources = []\n");
        assert!(
            parse(&["--config", none.to_str().unwrap()])
                .unwrap()
                .observe
                .resources
                .is_empty()
        );
        let bad = write(dir.path(), "[[resources]]\nversion = \"v1\"\n");
        let error = parse(&["--config", bad.to_str().unwrap()]).unwrap_err();
        assert!(error.to_string().contains("resources"), "{error}");
    }

    #[test]
    fn a_missing_plugin_folder_is_an_error() {
        let error = parse(&["--plugins", "/nonexistent/plugins"]).unwrap_err();
        assert!(error.to_string().contains("plugins"), "{error}");
    }

    #[test]
    fn defaults_come_from_the_declarations() {
        let config = Config::new(None, PathBuf::from("data"));
        assert_eq!(
            config.plugins.limits.call_timeout,
            Duration::from_millis(100)
        );
        assert_eq!(config.plugins.limits.output_bytes, 1 << 20);
        assert_eq!(config.http.max_connections, 4096);
        assert_eq!(config.failover.max_unhealthy.to_string(), "40%");
        assert_eq!(config.observe.group_by, Grouping::default());
        assert_eq!(config.events.buffer, 10_000);
    }

    /// The table of settings in docs/running.md (which the README links)
    /// is the one the declarations make; `VERDICT_BLESS=1` writes it there.
    #[test]
    fn the_readme_lists_every_setting_as_declared() {
        let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/running.md");
        let text = std::fs::read_to_string(&readme).unwrap();
        let (begin, end) = ("<!-- settings:begin -->\n", "<!-- settings:end -->");
        let start = text
            .find(begin)
            .expect("docs/running.md marks its settings table")
            + begin.len();
        let stop = start + text[start..].find(end).expect("the table's end mark");
        let table = settings_table();
        if text[start..stop] != table {
            if std::env::var_os("VERDICT_BLESS").is_some() {
                let updated = format!("{}{table}{}", &text[..start], &text[stop..]);
                std::fs::write(&readme, updated).unwrap();
            } else {
                panic!(
                    "docs/running.md's settings table differs from the declarations; \
                     run `VERDICT_BLESS=1 cargo test -p verdict --lib readme` to write it"
                );
            }
        }
    }
}
