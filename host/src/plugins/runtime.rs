//! The one wasmtime [`Engine`] of the host, its epoch ticker, the on-disk
//! cache of compiled code, and the per-instance store state that enforces the
//! memory cap and carries plugin logs.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, ResourceLimiter, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::error::LoadError;
use super::sandbox;
use super::ticker::{Running, TICK, Ticker};
use crate::native;
use crate::settings;
use crate::wit::{defaults, host, status, types};

/// Limits applied to every plugin call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Limits {
    /// Wall-clock time one plugin call may take before it is interrupted,
    /// in milliseconds.
    #[arg(long = "call-timeout-ms", value_name = "MS", default_value = "100", value_parser = settings::positive_millis)]
    pub call_timeout: Duration,
    /// Linear memory one plugin instance may grow to, in MiB.
    #[arg(long = "memory-limit-mib", value_name = "MIB", default_value = "64", value_parser = settings::mib)]
    pub memory_bytes: usize,
    /// Size of what one plugin call may return (strings and list items), in
    /// KiB.
    #[arg(long = "output-limit-kib", value_name = "KIB", default_value = "1024", value_parser = settings::kib)]
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        settings::defaults()
    }
}

/// Longest log message a plugin may write; longer ones are cut.
pub(crate) const MAX_LOG_MESSAGE: usize = 4096;

/// Where compiled code came from, for the registry and for tests that check
/// a restart does not recompile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CodeSource {
    Compiled,
    Cache,
}

/// The engine, its ticker, the code cache and the linker shared by every
/// plugin.
pub struct Runtime {
    engine: Engine,
    linker: Linker<StoreState>,
    cache_dir: PathBuf,
    /// `precompile_compatibility_hash` of the engine, in cache file names.
    compat: String,
    pub(crate) limits: Limits,
    ticker: Arc<Ticker>,
    /// How long calls take, by plugin and version (`/metrics`).
    pub call_seconds: super::CallSeconds,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("cache_dir", &self.cache_dir)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Build the engine and start its epoch ticker. Compiled code is cached
    /// under `cache_dir`.
    pub fn new(cache_dir: &Path, limits: Limits) -> Result<Self, LoadError> {
        let mut config = wasmtime::Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            // Component-model async is unused; with it on, plain calls cost
            // about three times as much.
            .concurrency_support(false)
            .max_wasm_stack(512 << 10);
        let engine = Engine::new(&config).map_err(|e| LoadError::Engine(e.into()))?;

        let mut linker = Linker::new(&engine);
        let linking = |e: wasmtime::Error| LoadError::Engine(e.into());
        host::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut linker, |state| state)
            .map_err(linking)?;
        defaults::add_to_linker::<StoreState, HasSelf<StoreState>>(&mut linker, |state| state)
            .map_err(linking)?;
        // Components that import WASI get it, granting nothing (`sandbox`).
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(linking)?;

        std::fs::create_dir_all(cache_dir).map_err(|e| LoadError::CacheFolder {
            path: cache_dir.to_path_buf(),
            source: Arc::new(e),
        })?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let compat = format!("{:016x}", hasher.finish());

        let ticking = engine.clone();
        let ticker = Ticker::start(move || ticking.increment_epoch())
            .map_err(|e| LoadError::Ticker(Arc::new(e)))?;

        Ok(Self {
            engine,
            linker,
            cache_dir: cache_dir.to_path_buf(),
            compat,
            limits,
            ticker,
            call_seconds: super::CallSeconds::default(),
        })
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn linker(&self) -> &Linker<StoreState> {
        &self.linker
    }

    /// Compile a component, or load its compiled code from the cache.
    /// `hash` is the hex SHA-256 of `bytes`.
    pub(crate) fn compile(
        &self,
        plugin: &str,
        bytes: &[u8],
        hash: &str,
    ) -> Result<(Component, CodeSource, Duration), LoadError> {
        let started = Instant::now();
        let cached = self.cache_dir.join(format!("{hash}-{}.cwasm", self.compat));
        if cached.is_file() {
            if let Some(component) = self.deserialize(&cached) {
                return Ok((component, CodeSource::Cache, started.elapsed()));
            }
            // An unreadable entry (a crash mid-write, another version, a
            // damaged file) is compiled again and overwritten.
            let _ = std::fs::remove_file(&cached);
            let _ = std::fs::remove_file(digest_beside(&cached));
        }
        match wasm_kind(bytes) {
            WasmKind::Component => {}
            WasmKind::CoreModule => return Err(LoadError::NotAComponent),
            WasmKind::Neither => {
                return Err(LoadError::NotWasm);
            }
        }
        // A large component (JavaScript's, Python's) takes tens of seconds
        // on a small machine: said when it starts, not only when it ends.
        tracing::info!(
            plugin,
            "compiling {plugin} ({:.1} MiB)…",
            bytes.len() as f64 / (1024.0 * 1024.0)
        );
        let code = self
            .engine
            .precompile_component(bytes)
            .map_err(|e| LoadError::Compile(e.into()))?;
        // SAFETY: `code` was produced by this engine just now.
        let component =
            unsafe_deserialize(&self.engine, &code).map_err(|e| LoadError::Compile(e.into()))?;
        let elapsed = started.elapsed();
        self.store_in_cache(&cached, &code);
        Ok((component, CodeSource::Compiled, elapsed))
    }

    /// A cache entry, given to wasmtime only when its bytes have the
    /// digest kept beside it: compiled code is trusted, so a damaged entry
    /// (a bad sector, a crash mid-write, a hand) must never be loaded.
    fn deserialize(&self, path: &Path) -> Option<Component> {
        let code = std::fs::read(path).ok()?;
        let kept = std::fs::read_to_string(digest_beside(path)).unwrap_or_default();
        if kept.trim() != hex::encode(Sha256::digest(&code)) {
            tracing::warn!(path = %path.display(), "a cached compilation fails its integrity check (its digest is missing or differs); compiling again");
            return None;
        }
        match unsafe_deserialize(&self.engine, &code) {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring a cached compilation");
                None
            }
        }
    }

    /// Write a cache entry and its digest, each through a synced temporary
    /// file and a rename, the digest last: a crash leaves no entry under
    /// its final name that its digest vouches for but that is not whole.
    fn store_in_cache(&self, path: &Path, code: &[u8]) {
        let digest = hex::encode(Sha256::digest(code));
        let written = crate::storage::write_atomically(path, code).and_then(|()| {
            crate::storage::write_atomically(&digest_beside(path), digest.as_bytes())
        });
        if let Err(error) = written {
            tracing::warn!(path = %path.display(), %error, "could not cache compiled code");
        }
    }

    /// A new store for one plugin instance, with the memory cap of
    /// `limits` installed and a WASI that grants nothing.
    pub(crate) fn store(&self, plugin: Arc<str>, limits: &Limits) -> Store<StoreState> {
        let mut store = Store::new(
            &self.engine,
            StoreState {
                wasi: sandbox::deny_all(&plugin),
                table: ResourceTable::new(),
                plugin,
                limiter: MemoryCap {
                    max_bytes: limits.memory_bytes,
                    exceeded: false,
                    peak: 0,
                },
                defaults: None,
            },
        );
        store.limiter(|state| &mut state.limiter);
        store.epoch_deadline_trap();
        store
    }
}

/// A plugin's own deadline and memory, each over the host's when set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Override {
    pub call_timeout_ms: Option<u64>,
    pub memory_limit_mib: Option<u64>,
}

impl Override {
    /// `base` with what this sets in its place.
    pub fn over(&self, base: Limits) -> Limits {
        Limits {
            call_timeout: self
                .call_timeout_ms
                .map_or(base.call_timeout, Duration::from_millis),
            memory_bytes: self
                .memory_limit_mib
                .map_or(base.memory_bytes, |mib| (mib as usize) << 20),
            ..base
        }
    }
}

impl Limits {
    /// How many epoch ticks make one call's deadline.
    pub(crate) fn deadline_ticks(&self) -> u64 {
        (self.call_timeout.as_millis() / TICK.as_millis()).max(1) as u64 + 1
    }
}

impl Runtime {
    /// A plugin call begins: the epoch advances (and the call's deadline
    /// nears) until the returned guard is dropped.
    pub(crate) fn running(&self) -> Running {
        self.ticker.running()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker.stop();
    }
}

/// Where the digest of a cache entry is kept.
fn digest_beside(entry: &Path) -> PathBuf {
    entry.with_extension("cwasm.sha256")
}

enum WasmKind {
    Component,
    CoreModule,
    Neither,
}

/// Whether bytes begin as a WebAssembly component does.
pub fn is_component(bytes: &[u8]) -> bool {
    matches!(wasm_kind(bytes), WasmKind::Component)
}

/// Tell a component from a core module by the binary header: both start with
/// `\0asm`; a core module's version is 1, a component's layer is 1.
fn wasm_kind(bytes: &[u8]) -> WasmKind {
    match bytes.get(..8) {
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => WasmKind::CoreModule,
        Some([0, b'a', b's', b'm', _, _, 1, 0]) => WasmKind::Component,
        _ => WasmKind::Neither,
    }
}

/// Component code is trusted only from this engine's own precompilation: the
/// host writes every cache entry itself, keyed by content hash and by the
/// engine's compatibility hash.
#[allow(unsafe_code)]
fn unsafe_deserialize(engine: &Engine, code: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `code` is output of `Engine::precompile_component` of an engine
    // with the same compatibility hash (it is part of the cache key), and the
    // cache folder belongs to the host.
    unsafe { Component::deserialize(engine, code) }
}

/// State of one plugin instance's store.
pub(crate) struct StoreState {
    pub(crate) plugin: Arc<str>,
    pub(crate) limiter: MemoryCap,
    wasi: WasiCtx,
    table: ResourceTable,
    /// The default status rules' settings as last parsed, with their text.
    defaults: Option<(String, native::Settings)>,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Caps the linear memory of an instance and remembers whether the cap was
/// hit, so that the resulting trap is reported as a memory excess.
pub(crate) struct MemoryCap {
    max_bytes: usize,
    pub(crate) exceeded: bool,
    /// The most linear memory the instance was granted, in bytes.
    pub(crate) peak: usize,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.exceeded = true;
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

impl types::Host for StoreState {}

impl defaults::Host for StoreState {
    fn status(&mut self, ctx: types::Context, input: status::AppInput) -> types::AppVerdict {
        let settings = match &self.defaults {
            Some((text, settings)) if *text == ctx.settings => settings,
            _ => {
                let parsed = native::Settings::parse(&ctx.settings);
                &self.defaults.insert((ctx.settings, parsed)).1
            }
        };
        native::evaluate(settings, ctx.now, &input)
    }
}

impl host::Host for StoreState {
    fn log(&mut self, level: types::LogLevel, mut message: String) {
        if message.len() > MAX_LOG_MESSAGE {
            let mut cut = MAX_LOG_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let plugin = &*self.plugin;
        match level {
            types::LogLevel::Trace => tracing::trace!(plugin, "{message}"),
            types::LogLevel::Debug => tracing::debug!(plugin, "{message}"),
            types::LogLevel::Info => tracing::info!(plugin, "{message}"),
            types::LogLevel::Warn => tracing::warn!(plugin, "{message}"),
            types::LogLevel::Error => tracing::error!(plugin, "{message}"),
        }
    }
}
