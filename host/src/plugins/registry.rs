//! The registry of loaded plugins: one slot per file of the plugin folder,
//! each holding the version that serves and the last good one before it.
//!
//! A reload reads the folder, loads every new or changed file (in parallel),
//! validates it, and only then swaps it in atomically; a call in flight keeps
//! the version it started with. A file that fails is recorded with its reason
//! and the old version keeps serving; a deleted file unloads its plugin.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::World;
use super::error::{CallError, LoadError, PolicyError};
use super::runtime::{Limits, Runtime};
use super::version::{Version, VersionInfo};

/// A failure recorded against a plugin: of loading a file, or of a call.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ErrorRecord {
    #[serde(serialize_with = "crate::time::serialize_time")]
    #[schema(value_type = String, format = DateTime)]
    pub at: SystemTime,
    /// `load` or `call`.
    pub during: &'static str,
    pub kind: &'static str,
    pub message: String,
    /// The hash of the file that failed to load, or of the version whose
    /// call failed.
    pub hash: Option<String>,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    fallbacks: AtomicU64,
    /// Calls of the version serving now, and how many of them failed:
    /// what its demotion is judged on.
    current_calls: AtomicU64,
    current_failures: AtomicU64,
}

/// When a version that fails too many of its calls is demoted to the one
/// before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Demotion {
    /// The share of failed calls (traps, timeouts, limits, malformed
    /// answers) past which it is demoted.
    pub max_error_rate: f64,
    /// The calls it makes before its share counts.
    pub min_calls: u64,
}

impl Default for Demotion {
    fn default() -> Self {
        Self {
            max_error_rate: 0.5,
            min_calls: 20,
        }
    }
}

/// One plugin: the file it comes from and the versions loaded from it.
#[derive(Debug)]
pub struct Slot {
    name: String,
    file: PathBuf,
    current: ArcSwapOption<Version>,
    /// The version `current` replaced: it answers when `current` fails.
    previous: ArcSwapOption<Version>,
    last_error: Mutex<Option<ErrorRecord>>,
    /// The hash of a file content that was rejected, so that the same bytes
    /// are not compiled again on every event.
    rejected_hash: Mutex<Option<String>>,
    counters: Counters,
    /// Where a delivered plugin came from and how it serves; `None` for a
    /// file of the plugin folder.
    delivered: Mutex<Option<Delivered>>,
    demotion: Demotion,
    /// Told of each demotion (the registry's hooks).
    on_demotion: DemotionHooks,
}

/// A version demoted for failing too many of its calls, and the one serving
/// again in its place.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Demoted {
    /// The plugin (its file's name, or its Policy's).
    pub plugin: String,
    /// The version demoted, as `name@version`.
    pub demoted: String,
    /// Its component's hash: the same bytes are not loaded again.
    pub hash: String,
    /// The version serving again, as `name@version`.
    pub serving: String,
    /// Its failures, and the last of them.
    pub reason: String,
}

type DemotionHook = Box<dyn Fn(&Demoted) + Send + Sync>;

/// The hooks told of demotions, shared by the registry and its slots.
#[derive(Clone, Default)]
struct DemotionHooks(Arc<RwLock<Vec<DemotionHook>>>);

impl std::fmt::Debug for DemotionHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DemotionHooks")
    }
}

impl DemotionHooks {
    fn tell(&self, demoted: &Demoted) {
        for hook in self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            hook(demoted);
        }
    }
}

/// A plugin delivered other than by the plugin folder (a `Policy` object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Delivered {
    /// The source, pinned (an OCI reference by digest, a URL).
    pub source: String,
    /// The digest served: the OCI manifest's, or the component's.
    pub digest: String,
    pub mode: Mode,
}

/// How a delivered plugin serves its world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
#[schema(as = PolicyMode)]
pub enum Mode {
    /// It answers for its world (before any plugin file of the folder).
    Active,
    /// It is asked the same questions as the active plugin of its world,
    /// and its answers are only compared, never used.
    Shadow,
}

/// An answer of a policy, with the version that gave it.
#[derive(Debug)]
pub struct Answer<R> {
    pub value: R,
    pub version: Arc<Version>,
    /// Whether the serving version failed and the previous one answered.
    pub fell_back: bool,
    /// Why the serving version did not answer, when the previous one did.
    pub failure: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Slot {
    fn new(name: &str, file: &Path, demotion: Demotion, on_demotion: DemotionHooks) -> Self {
        Self {
            demotion,
            on_demotion,
            name: name.to_string(),
            file: file.to_path_buf(),
            current: ArcSwapOption::empty(),
            previous: ArcSwapOption::empty(),
            last_error: Mutex::new(None),
            rejected_hash: Mutex::new(None),
            counters: Counters::default(),
            delivered: Mutex::new(None),
        }
    }

    /// Where a delivered plugin came from and how it serves.
    pub fn delivered(&self) -> Option<Delivered> {
        lock(&self.delivered).clone()
    }

    fn shadow(&self) -> bool {
        self.delivered().is_some_and(|d| d.mode == Mode::Shadow)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version serving now, if any.
    pub fn current(&self) -> Option<Arc<Version>> {
        self.current.load_full()
    }

    fn record(
        &self,
        during: &'static str,
        kind: &'static str,
        message: String,
        hash: Option<String>,
    ) {
        *lock(&self.last_error) = Some(ErrorRecord {
            at: SystemTime::now(),
            during,
            kind,
            message,
            hash,
        });
    }

    fn count_failure(&self, version: &Version, error: &CallError) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        if matches!(error, CallError::Timeout(_)) {
            self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(plugin = %self.name, version = %version.info().version, %error, "plugin call failed");
        self.record(
            "call",
            error.kind(),
            error.to_string(),
            Some(version.info().hash.clone()),
        );
    }

    /// Call the serving version; when it fails (a trap, a timeout, too much
    /// memory or output, a malformed answer), record the failure and let the
    /// previous version answer. A deliberate refusal is an answer, not a
    /// failure of the version, so it is not retried.
    pub fn call<R>(
        &self,
        f: impl Fn(&Version) -> Result<R, CallError>,
    ) -> Result<Answer<R>, PolicyError> {
        let Some(current) = self.current.load_full() else {
            return Err(PolicyError::Unloaded(self.name.clone()));
        };
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let error = match f(&current) {
            Ok(value) => {
                self.counters.current_calls.fetch_add(1, Ordering::Relaxed);
                return Ok(Answer {
                    value,
                    version: current,
                    fell_back: false,
                    failure: None,
                });
            }
            Err(error) => error,
        };
        self.count_failure(&current, &error);
        let failed = |error: CallError| PolicyError::Failed {
            plugin: self.name.clone(),
            error,
        };
        if matches!(error, CallError::Refused(_)) {
            self.counters.current_calls.fetch_add(1, Ordering::Relaxed);
            return Err(failed(error));
        }
        let Some(previous) = self.previous.load_full() else {
            return Err(failed(error));
        };
        self.judge(&current, &previous, &error);
        match f(&previous) {
            Ok(value) => {
                self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                Ok(Answer {
                    value,
                    version: previous,
                    fell_back: true,
                    failure: Some(format!(
                        "{}@{} failed: {error}",
                        current.info().name,
                        current.info().version
                    )),
                })
            }
            Err(second) => {
                self.count_failure(&previous, &second);
                Err(failed(error))
            }
        }
    }

    /// Count a failed call of the serving version; past the share of
    /// failures allowed, put the version before it back in its place —
    /// recorded, logged, and its file not loaded again until it changes.
    fn judge(&self, current: &Arc<Version>, previous: &Arc<Version>, error: &CallError) {
        let calls = self.counters.current_calls.fetch_add(1, Ordering::Relaxed) + 1;
        let failures = self
            .counters
            .current_failures
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        let Demotion {
            max_error_rate,
            min_calls,
        } = self.demotion;
        if calls < min_calls || (failures as f64) <= max_error_rate * calls as f64 {
            return;
        }
        let swapped = self
            .current
            .compare_and_swap(&Some(Arc::clone(current)), Some(Arc::clone(previous)));
        if !swapped.as_ref().is_some_and(|v| Arc::ptr_eq(v, current)) {
            // Another call demoted it, or a new version came meanwhile.
            return;
        }
        self.previous.store(None);
        self.counters.current_calls.store(0, Ordering::Relaxed);
        self.counters.current_failures.store(0, Ordering::Relaxed);
        let (bad, good) = (current.info(), previous.info());
        let message = format!(
            "{}@{} failed {failures} of its {calls} calls (more than {:.0} %; the last: {error}): demoted, {}@{} serves again",
            bad.name,
            bad.version,
            max_error_rate * 100.0,
            good.name,
            good.version
        );
        tracing::error!(plugin = %self.name, "{message}");
        *lock(&self.rejected_hash) = Some(bad.hash.clone());
        self.record("call", "demoted", message.clone(), Some(bad.hash.clone()));
        let demoted = Demoted {
            plugin: self.name.clone(),
            demoted: format!("{}@{}", bad.name, bad.version),
            hash: bad.hash.clone(),
            serving: format!("{}@{}", good.name, good.version),
            reason: message,
        };
        self.on_demotion.tell(&demoted);
    }

    fn status(&self, active: bool) -> PluginStatus {
        let info = |v: Option<Arc<Version>>| v.map(|v| v.info().clone());
        PluginStatus {
            name: self.name.clone(),
            file: self.file.clone(),
            active,
            current: info(self.current.load_full()),
            previous: info(self.previous.load_full()),
            last_error: lock(&self.last_error).clone(),
            not_serving: None,
            calls: self.counters.calls.load(Ordering::Relaxed),
            errors: self.counters.errors.load(Ordering::Relaxed),
            timeouts: self.counters.timeouts.load(Ordering::Relaxed),
            fallbacks: self.counters.fallbacks.load(Ordering::Relaxed),
            delivered: self.delivered(),
        }
    }
}

/// What `/v1/plugins` shows of one plugin.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PluginStatus {
    /// The file's name without `.wasm`.
    pub name: String,
    #[schema(value_type = String)]
    pub file: PathBuf,
    /// Whether this plugin serves its world.
    pub active: bool,
    /// The version serving now; `None` when its file never loaded.
    pub current: Option<VersionInfo>,
    /// The last good version before it, which answers when it fails.
    pub previous: Option<VersionInfo>,
    pub last_error: Option<ErrorRecord>,
    /// Why a plugin that loaded does not serve its world, and how to make
    /// it serve.
    pub not_serving: Option<String>,
    /// Where a delivered plugin came from and how it serves (`None`: a
    /// file of the plugin folder).
    pub delivered: Option<Delivered>,
    pub calls: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub fallbacks: u64,
}

/// A plugin swapped in by a reload.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Loaded {
    pub plugin: String,
    #[serde(flatten)]
    pub info: VersionInfo,
}

/// A file a reload did not swap in.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Rejected {
    pub plugin: String,
    pub kind: &'static str,
    pub error: String,
    /// Whether an older version of the plugin keeps serving.
    pub still_serving: bool,
}

/// What one reload did.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct ReloadReport {
    pub loaded: Vec<Loaded>,
    pub rejected: Vec<Rejected>,
    pub unloaded: Vec<String>,
    pub unchanged: Vec<String>,
    /// Why the plugin folder could not be read (nothing was changed then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folder_error: Option<String>,
}

/// The largest plugin file read: a component this large is a mistake (the
/// largest policies, JavaScript and Python ones, are tens of MiB), and its
/// size is checked before a byte of it is read.
pub const MAX_PLUGIN_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// A file to load in this reload.
struct Candidate {
    name: String,
    path: PathBuf,
    bytes: Vec<u8>,
    hash: String,
}

/// What is told of every reload.
type ReloadHook = Box<dyn Fn(&ReloadReport) + Send + Sync>;

/// All plugins of the host.
pub struct Registry {
    runtime: Arc<Runtime>,
    dir: Option<PathBuf>,
    settings: BTreeMap<String, String>,
    /// Plugins' own limits, by name; the others have the runtime's.
    limits: BTreeMap<String, Limits>,
    /// The plugin of the folder chosen to serve each world.
    chosen: BTreeMap<World, String>,
    /// When a failing version is demoted.
    demotion: Demotion,
    /// Whether, without a folder, the built-in policies serve.
    builtin: bool,
    slots: RwLock<BTreeMap<String, Arc<Slot>>>,
    /// Reloads run one at a time (the watcher and `POST /v1/plugins/reload`).
    reloading: Mutex<()>,
    /// Woken when a reload swapped a version in or unloaded a plugin.
    swapped: tokio::sync::Notify,
    /// Told what every reload did.
    on_reload: RwLock<Vec<ReloadHook>>,
    /// Told of every demotion.
    on_demotion: DemotionHooks,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A registry over the plugin folder `dir` (none: no plugins). Nothing
    /// is loaded until [`Registry::reload`].
    pub fn new(
        runtime: Arc<Runtime>,
        dir: Option<PathBuf>,
        settings: BTreeMap<String, String>,
    ) -> Self {
        Self {
            runtime,
            dir,
            settings,
            limits: BTreeMap::new(),
            chosen: BTreeMap::new(),
            demotion: Demotion::default(),
            builtin: false,
            slots: RwLock::new(BTreeMap::new()),
            reloading: Mutex::new(()),
            swapped: tokio::sync::Notify::new(),
            on_reload: RwLock::default(),
            on_demotion: DemotionHooks::default(),
        }
    }

    /// Without a plugin folder, serve the default policies the binary
    /// carries ([`super::builtin`]).
    pub fn with_builtin(mut self, builtin: bool) -> Self {
        self.builtin = builtin;
        self
    }

    /// Whether the built-in policies are what the registry reads.
    pub fn serves_builtin(&self) -> bool {
        self.dir.is_none() && self.builtin
    }

    /// When a version that fails too many of its calls is demoted.
    pub fn with_demotion(mut self, demotion: Demotion) -> Self {
        self.demotion = demotion;
        self
    }

    /// Name the plugin of the folder that serves a world (where none is
    /// named, the file named after the world does).
    pub fn with_chosen(mut self, chosen: BTreeMap<World, String>) -> Self {
        self.chosen = chosen;
        self
    }

    /// Give the plugins named here limits of their own (a Python policy
    /// needs more memory than a Rust one).
    pub fn with_limits(mut self, limits: BTreeMap<String, Limits>) -> Self {
        self.limits = limits;
        self
    }

    /// The limits of plugin `name`.
    pub fn limits_for(&self, name: &str) -> Limits {
        self.limits
            .get(name)
            .copied()
            .unwrap_or(self.runtime.limits)
    }

    /// Call latency by policy and version.
    pub(crate) fn call_seconds(&self) -> &super::CallSeconds {
        &self.runtime.call_seconds
    }

    /// The versions serving, one line each: `plugin: name@version (sha256
    /// prefix)`.
    pub fn serving(&self) -> Vec<String> {
        self.statuses()
            .into_iter()
            .filter_map(|s| {
                let v = s.current?;
                let hash = &v.hash[..v.hash.len().min(12)];
                Some(format!("{}: {}@{} ({hash})", s.name, v.name, v.version))
            })
            .collect()
    }

    /// Be told of every version demoted for failing its calls.
    pub fn on_demotion(&self, f: impl Fn(&Demoted) + Send + Sync + 'static) {
        self.on_demotion
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Box::new(f));
    }

    /// Have `f` told what every reload from now on did.
    pub(crate) fn on_reload(&self, f: impl Fn(&ReloadReport) + Send + Sync + 'static) {
        self.on_reload
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Box::new(f));
    }

    /// Notified after a reload that changed what serves.
    pub fn swapped(&self) -> &tokio::sync::Notify {
        &self.swapped
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn slots(&self) -> Vec<Arc<Slot>> {
        self.slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The plugin named `name` (its file name without `.wasm`).
    pub fn get(&self, name: &str) -> Option<Arc<Slot>> {
        self.slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// The plugin serving `world`: a delivered one in active mode that
    /// implements it (the first by name), else the file chosen for the
    /// world (`--status-policy NAME`), else the file named after the world
    /// (`status.wasm` for the status world) when it implements it, else the
    /// first file by name that does. Shadows never serve.
    pub fn policy(&self, world: World) -> Result<Arc<Slot>, PolicyError> {
        let serves = |slot: &Slot| slot.current().is_some_and(|v| v.world() == world);
        let slots = self.slots();
        let delivered = |s: &Arc<Slot>| s.delivered().is_some();
        let chosen = self.chosen.get(&world).map(String::as_str);
        let named = |name: &str| {
            slots
                .iter()
                .find(|s| !delivered(s) && s.name == name && serves(s))
        };
        slots
            .iter()
            .find(|s| delivered(s) && !s.shadow() && serves(s))
            .or_else(|| chosen.and_then(named))
            .or_else(|| named(world.file_stem()))
            .or_else(|| slots.iter().find(|s| !delivered(s) && serves(s)))
            .cloned()
            .ok_or(PolicyError::NotLoaded { world })
    }

    /// The delivered plugins in shadow mode for `world`.
    pub fn shadows(&self, world: World) -> Vec<Arc<Slot>> {
        self.slots()
            .into_iter()
            .filter(|s| s.shadow() && s.current().is_some_and(|v| v.world() == world))
            .collect()
    }

    /// Load a delivered component as plugin `name`, checked as a file is
    /// (a component that fails leaves what served serving); its settings
    /// and where it came from kept with it.
    pub fn install(
        &self,
        name: &str,
        bytes: &[u8],
        settings: &str,
        limits: Option<Limits>,
        delivered: Delivered,
    ) -> Result<VersionInfo, Rejected> {
        let hash = hex::encode(Sha256::digest(bytes));
        let path = PathBuf::from(&delivered.source);
        let limits = limits.unwrap_or_else(|| self.limits_for(name));
        let slot = self.get(name);
        if let Some(slot) = &slot
            && slot.current().is_some_and(|v| {
                v.info().hash == hash && v.settings() == settings && *v.limits() == limits
            })
        {
            *lock(&slot.delivered) = Some(delivered);
            self.swapped.notify_one();
            return Ok(slot.current().map(|v| v.info().clone()).expect("checked"));
        }
        let mut report = ReloadReport::default();
        let candidate = Candidate {
            name: name.to_string(),
            path: path.clone(),
            bytes: bytes.to_vec(),
            hash: hash.clone(),
        };
        match Version::load(
            &self.runtime,
            name,
            bytes,
            hash.clone(),
            settings.to_string(),
            limits,
        ) {
            Ok(version) => {
                let info = version.info().clone();
                self.swap_in(&candidate, version, &mut report);
                *lock(&self.slot_for(name, &path).delivered) = Some(delivered);
                self.swapped.notify_one();
                self.tell(&report);
                Ok(info)
            }
            Err(error) => {
                self.reject(name, &path, Some(hash), &error, &mut report);
                if let Some(slot) = self.get(name)
                    && slot.delivered().is_none()
                {
                    *lock(&slot.delivered) = Some(delivered);
                }
                self.tell(&report);
                Err(report.rejected.pop().expect("a rejection was reported"))
            }
        }
    }

    /// Change how a delivered plugin serves (promotion, roll-back).
    pub fn set_mode(&self, name: &str, mode: Mode) -> bool {
        let Some(slot) = self.get(name) else {
            return false;
        };
        let mut delivered = lock(&slot.delivered);
        let Some(d) = delivered.as_mut() else {
            return false;
        };
        d.mode = mode;
        drop(delivered);
        self.swapped.notify_one();
        true
    }

    /// Unload a delivered plugin.
    pub fn uninstall(&self, name: &str) -> bool {
        let removed = {
            let mut slots = self
                .slots
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match slots.get(name) {
                Some(slot) if slot.delivered().is_some() => slots.remove(name),
                _ => None,
            }
        };
        if removed.is_some() {
            tracing::info!(plugin = %name, "delivered plugin removed: unloaded");
            let report = ReloadReport {
                unloaded: vec![name.to_string()],
                ..ReloadReport::default()
            };
            self.swapped.notify_one();
            self.tell(&report);
        }
        removed.is_some()
    }

    /// Tell the reload hooks.
    fn tell(&self, report: &ReloadReport) {
        for f in self
            .on_reload
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            f(report);
        }
    }

    /// Every plugin with its versions, errors and counters, and why one
    /// that loaded does not serve.
    pub fn statuses(&self) -> Vec<PluginStatus> {
        let active: BTreeSet<String> = World::ALL
            .into_iter()
            .filter_map(|w| self.policy(w).ok())
            .map(|s| s.name.clone())
            .collect();
        self.slots()
            .iter()
            .map(|s| {
                let mut status = s.status(active.contains(&s.name));
                status.not_serving = self.why_not_serving(s);
                status
            })
            .collect()
    }

    /// Why a plugin that loaded does not serve its world (`None` when it
    /// does, or never loaded: its error says why then).
    pub fn why_not_serving(&self, slot: &Slot) -> Option<String> {
        let world = slot.current()?.world();
        let serving = self.policy(world).ok()?;
        if serving.name == slot.name {
            return None;
        }
        if slot.shadow() {
            return Some(format!(
                "a shadow: asked the questions {} answers, never serving",
                serving.name
            ));
        }
        let short = world.file_stem();
        let by = if serving.delivered().is_some() {
            format!("the delivered Policy {}", serving.name)
        } else {
            format!("{}.wasm", serving.name)
        };
        Some(format!(
            "loaded, not serving: {by} serves the {short} world; to serve this one, set `{short}-policy = \"{name}\"` (--{short}-policy {name}) or name its file {short}.wasm",
            name = slot.name
        ))
    }

    /// Bring the registry in line with the plugin folder.
    pub fn reload(&self) -> ReloadReport {
        let _one_at_a_time = lock(&self.reloading);
        let mut report = ReloadReport::default();
        let listed = match &self.dir {
            Some(dir) => plugin_files(dir),
            None if self.builtin => Ok(super::builtin::files()),
            None => return report,
        };
        let files = match listed {
            Ok(files) => files,
            Err(error) => {
                let dir = self
                    .dir
                    .as_deref()
                    .unwrap_or(Path::new(super::builtin::FOLDER));
                tracing::error!(dir = %dir.display(), %error, "cannot read the plugin folder; what served before still serves");
                report.folder_error = Some(format!(
                    "the plugin folder {} cannot be read: {error}",
                    dir.display()
                ));
                return report;
            }
        };

        let mut candidates = Vec::new();
        for (name, path) in &files {
            let slot = self.get(name);
            // A delivered plugin of the same name takes its place.
            if slot.as_ref().is_some_and(|s| s.delivered().is_some()) {
                continue;
            }
            let read = match super::builtin::bytes(name).filter(|_| self.dir.is_none()) {
                Some(bytes) => Ok(bytes.to_vec()),
                None => read_bounded(path),
            };
            let bytes = match read {
                Ok(bytes) => bytes,
                // Gone between listing and reading: the next event tells.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => {
                    let error = LoadError::Read(Arc::new(error));
                    self.reject(name, path, None, &error, &mut report);
                    continue;
                }
            };
            let hash = hex::encode(Sha256::digest(&bytes));
            if let Some(slot) = &slot {
                if slot.current().is_some_and(|v| v.info().hash == hash) {
                    // The file serving is back (a bad one was replaced by
                    // the good one): the bad one's error is over.
                    *lock(&slot.rejected_hash) = None;
                    let mut last = lock(&slot.last_error);
                    if last.as_ref().is_some_and(|e| e.during == "load") {
                        *last = None;
                    }
                    report.unchanged.push(name.clone());
                    continue;
                }
                if lock(&slot.rejected_hash).as_deref() == Some(hash.as_str()) {
                    let last = lock(&slot.last_error).clone();
                    report.rejected.push(Rejected {
                        plugin: name.clone(),
                        kind: last.as_ref().map_or("load", |e| e.kind),
                        error: last.map(|e| e.message).unwrap_or_default(),
                        still_serving: slot.current().is_some(),
                    });
                    continue;
                }
            }
            candidates.push(Candidate {
                name: name.clone(),
                path: path.clone(),
                bytes,
                hash,
            });
        }

        // Compile new files side by side: compilation dominates a reload.
        let outcomes: Vec<(Candidate, Result<Version, LoadError>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = candidates
                .into_iter()
                .map(|c| {
                    scope.spawn(move || {
                        let settings = self
                            .settings
                            .get(&c.name)
                            .cloned()
                            .unwrap_or_else(|| "{}".into());
                        let loaded = Version::load(
                            &self.runtime,
                            &c.name,
                            &c.bytes,
                            c.hash.clone(),
                            settings,
                            self.limits_for(&c.name),
                        );
                        (c, loaded)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("loading a plugin does not panic"))
                .collect()
        });

        for (candidate, outcome) in outcomes {
            // A file named after a world (`status.wasm`) must implement it:
            // another world's component would take the world's place.
            let named_for = World::ALL
                .into_iter()
                .find(|w| w.file_stem() == candidate.name);
            let outcome = outcome.and_then(|version| match named_for {
                Some(expected) if version.world() != expected => Err(LoadError::WrongWorld {
                    expected,
                    found: version.world(),
                }),
                _ => Ok(version),
            });
            match outcome {
                Ok(version) => self.swap_in(&candidate, version, &mut report),
                Err(error) => self.reject(
                    &candidate.name,
                    &candidate.path,
                    Some(candidate.hash),
                    &error,
                    &mut report,
                ),
            }
        }

        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.retain(|name, slot| {
            let keep = files.contains_key(name) || slot.delivered().is_some();
            if !keep {
                tracing::info!(plugin = %name, "plugin file removed: unloaded");
                report.unloaded.push(name.clone());
            }
            keep
        });
        drop(slots);
        if !report.loaded.is_empty() || !report.unloaded.is_empty() {
            self.swapped.notify_one();
        }
        for loaded in &report.loaded {
            if let Some(why) = self
                .get(&loaded.plugin)
                .and_then(|s| self.why_not_serving(&s))
            {
                tracing::warn!(plugin = %loaded.plugin, name = %loaded.info.name, "{why}");
            }
        }
        self.tell(&report);
        report
    }

    fn slot_for(&self, name: &str, path: &Path) -> Arc<Slot> {
        let mut slots = self
            .slots
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(slots.entry(name.to_string()).or_insert_with(|| {
            Arc::new(Slot::new(
                name,
                path,
                self.demotion,
                self.on_demotion.clone(),
            ))
        }))
    }

    fn swap_in(&self, candidate: &Candidate, version: Version, report: &mut ReloadReport) {
        let slot = self.slot_for(&candidate.name, &candidate.path);
        let info = version.info().clone();
        let replaced = slot.current.swap(Some(Arc::new(version)));
        if replaced.is_some() {
            slot.previous.store(replaced);
        }
        slot.counters.current_calls.store(0, Ordering::Relaxed);
        slot.counters.current_failures.store(0, Ordering::Relaxed);
        *lock(&slot.rejected_hash) = None;
        *lock(&slot.last_error) = None;
        tracing::info!(
            plugin = %candidate.name,
            name = %info.name,
            version = %info.version,
            world = %info.world,
            hash = %info.hash,
            code = ?info.code,
            compile_ms = info.compile_ms,
            "plugin loaded"
        );
        report.loaded.push(Loaded {
            plugin: candidate.name.clone(),
            info,
        });
    }

    fn reject(
        &self,
        name: &str,
        path: &Path,
        hash: Option<String>,
        error: &LoadError,
        report: &mut ReloadReport,
    ) {
        let slot = self.slot_for(name, path);
        let still_serving = slot.current().is_some();
        tracing::warn!(plugin = %name, %error, still_serving, "plugin file rejected");
        slot.record("load", error.kind(), error.to_string(), hash.clone());
        *lock(&slot.rejected_hash) = hash;
        report.rejected.push(Rejected {
            plugin: name.to_string(),
            kind: error.kind(),
            error: error.to_string(),
            still_serving,
        });
    }
}

/// A plugin file, its size checked before it is read.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let size = std::fs::metadata(path)?.len();
    if size > MAX_PLUGIN_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{size} bytes, over the largest plugin file read ({} MiB): not read",
                MAX_PLUGIN_FILE_BYTES / (1024 * 1024)
            ),
        ));
    }
    std::fs::read(path)
}

/// The `*.wasm` files of the plugin folder by plugin name. Hidden files
/// (editors' and build tools' temporaries) are not plugins.
fn plugin_files(dir: &Path) -> std::io::Result<BTreeMap<String, PathBuf>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = file_name.strip_suffix(".wasm") else {
            continue;
        };
        if stem.is_empty() || stem.starts_with('.') || !path.is_file() {
            continue;
        }
        files.insert(stem.to_string(), path);
    }
    Ok(files)
}
