//! `verdict bench`: a status policy run over the apps of object files many
//! times — per-app latency (p50, p99), throughput one app per call and in
//! batches, the memory of an instance, and the time to load the component
//! cold (compiled) and from the on-disk cache.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::Digest as _;

use super::eval::{InputArgs, Read, check_settings};
use crate::error::{Error, Result};
use crate::plugins::{Limits, Runtime, Version, World};

/// The arguments of `verdict bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Folder of plugin components.
    #[arg(long, value_name = "DIR", default_value = "target/plugins")]
    pub plugins: PathBuf,

    /// The plugin to measure, by file name without `.wasm`.
    #[arg(long, value_name = "NAME")]
    pub policy: String,

    /// Settings for the policy, as a JSON object.
    #[arg(long, value_name = "JSON")]
    pub settings: Option<String>,

    /// Calls per app, one app per call.
    #[arg(long, value_name = "N", default_value = "200")]
    pub iterations: usize,

    /// Calls with every app in one batch.
    #[arg(long, value_name = "N", default_value = "50")]
    pub batches: usize,

    /// Print the figures as JSON.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub limits: Limits,
}

/// Latencies of calls, summed up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Latency {
    pub calls: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let at = |q: f64| {
            let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i].as_secs_f64() * 1e6
        };
        let total: Duration = samples.iter().sum();
        Self {
            calls: samples.len(),
            p50_us: at(0.50),
            p99_us: at(0.99),
            mean_us: total.as_secs_f64() * 1e6 / samples.len().max(1) as f64,
        }
    }
}

/// What `verdict bench` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figures {
    pub policy: String,
    pub version: String,
    pub component_bytes: usize,
    /// Milliseconds to compile the component (an empty code cache), and to
    /// load it from the cache; each with its checks (describe, a smoke call).
    pub load_cold_ms: f64,
    pub compile_ms: f64,
    pub load_cached_ms: f64,
    pub cache_read_ms: f64,
    /// Linear memory of one instance after the runs, in bytes.
    pub instance_memory_bytes: usize,
    pub apps: usize,
    /// Every app, one per call.
    pub per_app: Latency,
    pub per_app_throughput: f64,
    /// Each app's own figures, by `namespace/name`.
    pub by_app: Vec<(String, Latency)>,
    /// Every app in one call.
    pub batch: Latency,
    pub batch_throughput: f64,
}

/// Measure; the figures and their report.
pub fn run(args: &BenchArgs) -> Result<(Figures, String)> {
    check_settings(args.settings.as_deref())?;
    let path = args.plugins.join(format!("{}.wasm", args.policy));
    let bytes = std::fs::read(&path).map_err(Error::io(&path))?;
    let Read { inputs, now, .. } = args.input.read()?;
    if inputs.is_empty() {
        return Err(Error::Invalid(
            "the object files hold no application to judge".into(),
        ));
    }
    let hash = hex::encode(sha2::Sha256::digest(&bytes));
    let settings = args.settings.clone().unwrap_or_else(|| "{}".into());
    // An empty code cache of its own: the first load compiles, the second
    // (a new engine, as after a restart) reads what the first wrote.
    let cache = tempfile::tempdir().map_err(Error::io("a temporary folder"))?;
    let load = |runtime: &Arc<Runtime>| {
        let started = Instant::now();
        let version = Version::load(
            runtime,
            &args.policy,
            &bytes,
            hash.clone(),
            settings.clone(),
            args.limits,
        )
        .map_err(|e| Error::Invalid(format!("{} did not load: {e}", path.display())))?;
        Ok::<_, Error>((version, started.elapsed()))
    };
    let (cold, cold_time) = load(&Arc::new(Runtime::new(cache.path(), args.limits)?))?;
    let compile_ms = cold.info().compile_ms;
    // The cold engine goes (its version holds it), as in a restart.
    drop(cold);
    let runtime = Arc::new(Runtime::new(cache.path(), args.limits)?);
    let (version, cached_time) = load(&runtime)?;
    if version.world() != World::Status {
        return Err(Error::Invalid(format!(
            "{} implements {}; verdict bench measures status policies",
            args.policy,
            version.world()
        )));
    }
    let ctx = version.context(now);
    let call_failed = |e: crate::plugins::CallError| Error::Invalid(format!("a call failed: {e}"));

    // Warm up the instance (and the allocator) before measuring.
    for input in inputs.iter().take(10) {
        version.evaluate(&ctx, input).map_err(call_failed)?;
    }
    let mut all = Vec::with_capacity(inputs.len() * args.iterations);
    let mut by_app = Vec::new();
    let started = Instant::now();
    for input in &inputs {
        let mut samples = Vec::with_capacity(args.iterations);
        for _ in 0..args.iterations.max(1) {
            let t = Instant::now();
            version.evaluate(&ctx, input).map_err(call_failed)?;
            samples.push(t.elapsed());
        }
        all.extend_from_slice(&samples);
        let id = &input.app.id;
        by_app.push((
            format!("{}/{}", id.namespace, id.name),
            Latency::of(samples),
        ));
    }
    let per_app_time = started.elapsed();
    let per_app = Latency::of(all);

    let mut batches = Vec::with_capacity(args.batches);
    let started = Instant::now();
    for _ in 0..args.batches.max(1) {
        let t = Instant::now();
        version.evaluate_batch(&ctx, &inputs).map_err(call_failed)?;
        batches.push(t.elapsed());
    }
    let batch_time = started.elapsed();
    let batch = Latency::of(batches);

    let figures = Figures {
        policy: args.policy.clone(),
        version: format!("{}@{}", version.info().name, version.info().version),
        component_bytes: bytes.len(),
        load_cold_ms: cold_time.as_secs_f64() * 1e3,
        compile_ms,
        load_cached_ms: cached_time.as_secs_f64() * 1e3,
        cache_read_ms: version.info().compile_ms,
        instance_memory_bytes: version.instance_memory(),
        apps: inputs.len(),
        per_app_throughput: per_app.calls as f64 / per_app_time.as_secs_f64(),
        per_app,
        by_app,
        batch_throughput: (batch.calls * inputs.len()) as f64 / batch_time.as_secs_f64(),
        batch,
    };
    let report = if args.json {
        serde_json::to_string_pretty(&figures).unwrap_or_default() + "\n"
    } else {
        report(&figures)
    };
    Ok((figures, report))
}

fn report(f: &Figures) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}), component {:.1} KiB",
        f.policy,
        f.version,
        f.component_bytes as f64 / 1024.0
    );
    let _ = writeln!(
        out,
        "load: cold {:.1} ms (compile {:.1} ms), from the cache {:.1} ms (read {:.1} ms)",
        f.load_cold_ms, f.compile_ms, f.load_cached_ms, f.cache_read_ms
    );
    let _ = writeln!(
        out,
        "instance memory: {:.1} MiB",
        f.instance_memory_bytes as f64 / (1 << 20) as f64
    );
    let _ = writeln!(
        out,
        "one app per call ({} apps, {} calls): p50 {:.1} µs, p99 {:.1} µs, {:.0} apps/s",
        f.apps, f.per_app.calls, f.per_app.p50_us, f.per_app.p99_us, f.per_app_throughput
    );
    let width = f
        .by_app
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(0);
    for (name, latency) in &f.by_app {
        let _ = writeln!(
            out,
            "  {name:width$}  p50 {:8.1} µs  p99 {:8.1} µs",
            latency.p50_us, latency.p99_us
        );
    }
    let _ = writeln!(
        out,
        "all apps per call ({} calls): p50 {:.1} µs, p99 {:.1} µs per batch, {:.1} µs per app, {:.0} apps/s",
        f.batch.calls,
        f.batch.p50_us,
        f.batch.p99_us,
        f.batch.p50_us / f.apps as f64,
        f.batch_throughput
    );
    out
}
