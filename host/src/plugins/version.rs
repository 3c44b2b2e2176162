//! One loaded version of a plugin: its pre-linked component, a small pool of
//! ready instances, and typed calls that enforce the limits on every call.
//!
//! Policies are pure functions, so an instance is reused across calls; an
//! instance whose call failed is dropped (a trap poisons its store) and a
//! fresh one is made from the pre-linked component on the next call.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use wasmtime::Store;
use wasmtime::component::Component;

use super::World;
use super::error::{CallError, LoadError};
use super::runtime::{CodeSource, Limits, Runtime, StoreState};
use super::validate::{self, OutputSize};
use crate::wit::{
    AdmissionPolicy, AdmissionPolicyPre, FailoverPolicy, FailoverPolicyPre, LifecyclePolicy,
    LifecyclePolicyPre, StatusPolicy, StatusPolicyPre, admission, failover, lifecycle, status,
    types,
};

/// Instances kept ready per version; more concurrent callers make more, and
/// the surplus is dropped when they return.
const POOL_SIZE: usize = 8;

/// What the registry shows of a version.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct VersionInfo {
    /// The plugin's own name and version, from `describe`.
    pub name: String,
    pub version: String,
    pub description: String,
    pub world: World,
    /// SHA-256 of the component file, hex.
    pub hash: String,
    /// When this version was swapped in.
    #[serde(serialize_with = "crate::time::serialize_time")]
    #[schema(value_type = String, format = DateTime)]
    pub loaded_at: SystemTime,
    /// Whether the code was compiled or read from the cache.
    pub code: CodeSource,
    /// Milliseconds to compile (or to read from the cache).
    pub compile_ms: f64,
    /// Whether the policy's input goes in encoded: a status plugin's
    /// batches (it exports `status-encoded`), a failover plugin's input (it
    /// exports `failover-encoded`).
    pub encoded_batches: bool,
    /// Whether the plugin checks its settings before it is served with
    /// them (it exports `settings`); one built before that export is
    /// served unchecked.
    pub checks_settings: bool,
    /// The deadline of one call, in milliseconds (the host's, or this
    /// plugin's own).
    pub call_timeout_ms: u64,
    /// The memory one instance may grow to, in MiB.
    pub memory_limit_mib: u64,
}

enum Pre {
    Status(StatusPolicyPre<StoreState>),
    Failover(FailoverPolicyPre<StoreState>),
    Admission(AdmissionPolicyPre<StoreState>),
    Lifecycle(LifecyclePolicyPre<StoreState>),
}

/// An encoded call (`status-encoded.evaluate-batch-encoded`,
/// `failover-encoded.decide-encoded`), for the plugins that export one:
/// typed at each call, so that its input is lent ([`EncodedTyped`]) rather
/// than moved, and the buffer it was encoded into serves the next batch.
#[derive(Clone, Copy)]
struct EncodedCall(wasmtime::component::Func);

/// The type of an encoded call.
type EncodedTyped<'a> =
    wasmtime::component::TypedFunc<(&'a types::Context, &'a [u8]), (Result<Vec<u8>, String>,)>;

impl EncodedCall {
    fn call(
        self,
        store: &mut Store<StoreState>,
        ctx: &types::Context,
        encoded: &[u8],
    ) -> wasmtime::Result<Encoded> {
        let typed: EncodedTyped<'_> = self.0.typed(&*store)?;
        typed.call(store, (ctx, encoded)).map(|(r,)| Encoded(r))
    }
}

/// `f` with `value` encoded into this thread's batch buffer
/// ([`crate::wit::with_buffer`]); `what` names the encoding in its error.
fn with_encoded<T: Serialize + ?Sized, R>(
    value: &T,
    what: &'static str,
    f: impl FnOnce(&[u8]) -> Result<R, CallError>,
) -> Result<R, CallError> {
    crate::wit::with_buffer(|buffer| {
        crate::wit::encode_into(value, buffer)
            .map_err(|e| CallError::undecodable(what)(e.into()))?;
        f(buffer)
    })
}

/// The interface of the encoded status batches.
const STATUS_ENCODED: &str = "verdict:policy/status-encoded@0.4.0";

/// The interface of the encoded failover input.
const FAILOVER_ENCODED: &str = "verdict:policy/failover-encoded@0.4.0";

/// `settings.validate`, for the plugins that export it.
type ValidateSettings = wasmtime::component::TypedFunc<(String,), (Result<(), String>,)>;

/// The interface of the settings check.
const SETTINGS: &str = "verdict:policy/settings@0.4.0";

enum Bound {
    Status(StatusPolicy, Option<EncodedCall>),
    Failover(FailoverPolicy, Option<EncodedCall>),
    Admission(AdmissionPolicy),
    Lifecycle(LifecyclePolicy),
}

struct Instance {
    store: Store<StoreState>,
    bound: Bound,
    /// The settings check, when the plugin exports one.
    validate: Option<ValidateSettings>,
}

/// A loaded, validated version of a plugin.
pub struct Version {
    info: VersionInfo,
    plugin: Arc<str>,
    settings: String,
    /// The limits of this plugin's calls: the host's, or its own.
    limits: Limits,
    pre: Pre,
    pool: Mutex<Vec<Instance>>,
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Version")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// The function `name` of the exported `interface` of an instance, typed
/// (the exports the host's worlds leave out: `status-encoded`, `settings`).
fn exported_func<Params, Results>(
    store: &mut Store<StoreState>,
    instance: &wasmtime::component::Instance,
    interface: &str,
    name: &str,
) -> wasmtime::Result<wasmtime::component::TypedFunc<Params, Results>>
where
    Params: wasmtime::component::ComponentNamedList + wasmtime::component::Lower,
    Results: wasmtime::component::ComponentNamedList + wasmtime::component::Lift,
{
    exported(store, instance, interface, name)?.typed(&*store)
}

/// The function `name` of the exported `interface` of an instance.
fn exported(
    store: &mut Store<StoreState>,
    instance: &wasmtime::component::Instance,
    interface: &str,
    name: &str,
) -> wasmtime::Result<wasmtime::component::Func> {
    let missing = || wasmtime::Error::msg(format!("{interface}.{name} is not exported"));
    let exported = instance
        .get_export_index(&mut *store, None, interface)
        .ok_or_else(missing)?;
    let func = instance
        .get_export_index(&mut *store, Some(&exported), name)
        .ok_or_else(missing)?;
    instance.get_func(&mut *store, func).ok_or_else(missing)
}

/// Whether a component exports the interface named.
fn exports(runtime: &Runtime, component: &Component, interface: &str) -> bool {
    component
        .component_type()
        .exports(runtime.engine())
        .any(|(name, _)| name == interface)
}

/// One answer per app asked about, each about that app.
fn check_answers<'a>(
    answers: Vec<Result<types::AppVerdict, String>>,
    asked: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<Result<types::AppVerdict, String>>, CallError> {
    if answers.len() != asked.len() {
        return Err(CallError::Malformed(format!(
            "{} verdicts for {} applications",
            answers.len(),
            asked.len()
        )));
    }
    for (answer, (namespace, name)) in answers.iter().zip(asked) {
        if let Ok(verdict) = answer {
            validate::app_verdict(verdict, namespace, name)?;
        }
    }
    Ok(answers)
}

/// A status plugin's encoded answer (`status-encoded`): one result per
/// application, or an error that says it does not decode. The bytes come
/// from the plugin, so they may be anything: a length that claims more than
/// the buffer holds fails without allocating what it claims.
pub fn decode_answers(bytes: &[u8]) -> Result<Vec<Result<types::AppVerdict, String>>, CallError> {
    postcard::from_bytes(bytes)
        .map_err(|e| CallError::undecodable("the encoded answer does not decode")(e.into()))
}

/// The answers of a batch checked against the applications asked, in order.
pub fn checked_answers(
    answers: Vec<Result<types::AppVerdict, String>>,
    asked: &[(String, String)],
) -> Result<Vec<Result<types::AppVerdict, String>>, CallError> {
    check_answers(
        answers,
        asked.iter().map(|(ns, name)| (ns.as_str(), name.as_str())),
    )
}

/// An encoded answer: its size is the buffer's.
struct Encoded(Result<Vec<u8>, String>);

impl OutputSize for Encoded {
    fn output_size(&self) -> usize {
        match &self.0 {
            Ok(bytes) => bytes.len(),
            Err(text) => text.len(),
        }
    }
}

/// A settings check's answer: its size is its refusal's.
struct Checked(Result<(), String>);

impl OutputSize for Checked {
    fn output_size(&self) -> usize {
        self.0.as_ref().err().map_or(0, String::len)
    }
}

/// Whether a JSON text is `{}` (the settings of a plugin given none).
fn is_empty_object(text: &str) -> bool {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
        .is_ok_and(|map| map.is_empty())
}

/// Which world a component implements, from the names of its exports.
fn world_of(runtime: &Runtime, component: &Component) -> Result<World, LoadError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(runtime.engine())
        .map(|(name, _)| name.to_string())
        .collect();
    world_of_exports(&exports)
}

/// The world a component's exports implement; one built against another
/// version of the package is told which version the host speaks.
fn world_of_exports(exports: &[String]) -> Result<World, LoadError> {
    if let Some(world) = World::ALL
        .into_iter()
        .find(|world| exports.iter().any(|e| e == world.export_name()))
    {
        return Ok(world);
    }
    let other = exports.iter().find_map(|e| {
        let (interface, version) = e.strip_prefix("verdict:policy/")?.split_once('@')?;
        let world = World::ALL.into_iter().find(|w| {
            w.export_name()
                .starts_with(&format!("verdict:policy/{interface}@"))
        })?;
        Some((world, version.to_string()))
    });
    Err(match other {
        Some((world, found)) => LoadError::OtherVersion {
            world,
            found,
            speaks: PACKAGE_VERSION,
        },
        None => LoadError::NoWorld {
            exports: if exports.is_empty() {
                "nothing".into()
            } else {
                exports.join(", ")
            },
        },
    })
}

/// The version of the WIT package `verdict:policy` this host speaks.
pub const PACKAGE_VERSION: &str = "0.4.0";

impl Version {
    /// The settings this version was loaded with (JSON text).
    /// The most linear memory any pooled instance of this version was
    /// granted, in bytes (an instance's memory only grows).
    pub fn instance_memory(&self) -> usize {
        self.pool
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|i| i.store.data().limiter.peak)
            .max()
            .unwrap_or(0)
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn settings(&self) -> &str {
        &self.settings
    }

    /// What a component is, checked as a reload checks it (compiled,
    /// linked, described, smoke-tested), without serving it.
    pub fn examine(runtime: &Arc<Runtime>, bytes: &[u8]) -> Result<VersionInfo, LoadError> {
        use sha2::Digest as _;
        let hash = hex::encode(sha2::Sha256::digest(bytes));
        Self::load(
            runtime,
            "examined",
            bytes,
            hash,
            "{}".into(),
            runtime.limits,
        )
        .map(|v| v.info)
    }

    /// Compile (or load from cache), recognise the world, link, and validate:
    /// `describe` must answer and a smoke evaluation must succeed within the
    /// limits. Nothing is swapped in here.
    pub(crate) fn load(
        runtime: &Arc<Runtime>,
        plugin: &str,
        bytes: &[u8],
        hash: String,
        settings: String,
        limits: Limits,
    ) -> Result<Self, LoadError> {
        let (component, code, compile_time) = runtime.compile(plugin, bytes, &hash)?;
        let world = world_of(runtime, &component)?;
        let encoded = match world {
            World::Status => exports(runtime, &component, STATUS_ENCODED),
            World::Failover => exports(runtime, &component, FAILOVER_ENCODED),
            World::Admission | World::Lifecycle => false,
        };
        let checks_settings = exports(runtime, &component, SETTINGS);
        let linked = runtime
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Link(e.into()))?;
        let link = |e: wasmtime::Error| LoadError::Link(e.into());
        let pre = match world {
            World::Status => Pre::Status(StatusPolicyPre::new(linked).map_err(link)?),
            World::Failover => Pre::Failover(FailoverPolicyPre::new(linked).map_err(link)?),
            World::Admission => Pre::Admission(AdmissionPolicyPre::new(linked).map_err(link)?),
            World::Lifecycle => Pre::Lifecycle(LifecyclePolicyPre::new(linked).map_err(link)?),
        };
        let mut version = Self {
            info: VersionInfo {
                name: String::new(),
                version: String::new(),
                description: String::new(),
                world,
                hash,
                loaded_at: SystemTime::now(),
                code,
                compile_ms: duration_ms(compile_time),
                encoded_batches: encoded,
                checks_settings,
                call_timeout_ms: limits.call_timeout.as_millis() as u64,
                memory_limit_mib: (limits.memory_bytes >> 20) as u64,
            },
            plugin: Arc::from(plugin),
            settings,
            limits,
            pre,
            pool: Mutex::new(Vec::new()),
            runtime: Arc::clone(runtime),
        };
        let described = version.describe().map_err(LoadError::Validation)?;
        version.info.name = described.name;
        version.info.version = described.version;
        version.info.description = described.description;
        // The policy's own check of the settings it is to serve with comes
        // before anything is evaluated with them.
        version
            .check_settings(&version.settings)
            .map_err(|e| match e {
                CallError::Refused(words) => LoadError::Settings(words),
                other => LoadError::Validation(other),
            })?;
        if !checks_settings && !is_empty_object(&version.settings) {
            tracing::warn!(
                plugin,
                "plugin {} {} does not check its settings (it was built before \
                 verdict:policy/settings existed): serving it with settings unchecked",
                version.info.name,
                version.info.version
            );
        }
        version.smoke().map_err(LoadError::Validation)?;
        Ok(version)
    }

    pub fn info(&self) -> &VersionInfo {
        &self.info
    }

    pub fn world(&self) -> World {
        self.info.world
    }

    /// The context of a call at `now`, with this plugin's settings.
    pub fn context(&self, now: types::Timestamp) -> types::Context {
        self.context_with(now, None)
    }

    /// The context of a call at `now`, with `settings` in place of this
    /// plugin's when given.
    pub fn context_with(&self, now: types::Timestamp, settings: Option<&str>) -> types::Context {
        types::Context {
            now,
            settings: settings.unwrap_or(&self.settings).to_string(),
        }
    }

    /// The encoded call `name` of `interface`, when this version takes its
    /// input encoded.
    fn encoded_call(
        &self,
        store: &mut Store<StoreState>,
        instance: &wasmtime::component::Instance,
        interface: &str,
        name: &str,
    ) -> wasmtime::Result<Option<EncodedCall>> {
        if !self.info.encoded_batches {
            return Ok(None);
        }
        let func = exported(store, instance, interface, name)?;
        // Typed once here, so that a plugin whose export has another type
        // fails to instantiate rather than on every call.
        let _: EncodedTyped<'_> = func.typed(&*store)?;
        Ok(Some(EncodedCall(func)))
    }

    fn instantiate(&self) -> Result<Instance, CallError> {
        let mut store = self.runtime.store(Arc::clone(&self.plugin), &self.limits);
        store.set_epoch_deadline(self.limits.deadline_ticks());
        let failed = |e: wasmtime::Error| CallError::Instantiate(e.into());
        let bound = match &self.pre {
            Pre::Status(pre) => {
                let instance = pre.instance_pre().instantiate(&mut store).map_err(failed)?;
                let policy = StatusPolicy::new(&mut store, &instance).map_err(failed)?;
                let encoded = self
                    .encoded_call(
                        &mut store,
                        &instance,
                        STATUS_ENCODED,
                        "evaluate-batch-encoded",
                    )
                    .map_err(failed)?;
                (Bound::Status(policy, encoded), instance)
            }
            Pre::Failover(pre) => {
                let instance = pre.instance_pre().instantiate(&mut store).map_err(failed)?;
                let policy = FailoverPolicy::new(&mut store, &instance).map_err(failed)?;
                let encoded = self
                    .encoded_call(&mut store, &instance, FAILOVER_ENCODED, "decide-encoded")
                    .map_err(failed)?;
                (Bound::Failover(policy, encoded), instance)
            }
            Pre::Admission(pre) => {
                let instance = pre.instance_pre().instantiate(&mut store).map_err(failed)?;
                let policy = AdmissionPolicy::new(&mut store, &instance).map_err(failed)?;
                (Bound::Admission(policy), instance)
            }
            Pre::Lifecycle(pre) => {
                let instance = pre.instance_pre().instantiate(&mut store).map_err(failed)?;
                let policy = LifecyclePolicy::new(&mut store, &instance).map_err(failed)?;
                (Bound::Lifecycle(policy), instance)
            }
        };
        let (bound, instance) = bound;
        let validate = match self.info.checks_settings {
            true => {
                Some(exported_func(&mut store, &instance, SETTINGS, "validate").map_err(failed)?)
            }
            false => None,
        };
        Ok(Instance {
            store,
            bound,
            validate,
        })
    }

    /// Run `f` on a pooled instance under the deadline and memory cap, then
    /// check the size of what it returned.
    /// `f` answers `None` when the instance is not of the `wanted` world.
    fn call<R: OutputSize>(
        &self,
        wanted: World,
        f: impl FnOnce(
            &mut Store<StoreState>,
            &Bound,
            Option<&ValidateSettings>,
        ) -> Option<wasmtime::Result<R>>,
    ) -> Result<R, CallError> {
        // The epoch advances while guest code may run: instantiation and
        // the call.
        let _running = self.runtime.running();
        let pooled = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut instance = match pooled {
            Some(instance) => instance,
            None => self.instantiate()?,
        };
        instance.store.data_mut().limiter.exceeded = false;
        instance
            .store
            .set_epoch_deadline(self.limits.deadline_ticks());
        let started = std::time::Instant::now();
        let result = f(
            &mut instance.store,
            &instance.bound,
            instance.validate.as_ref(),
        );
        self.runtime
            .call_seconds
            .observe(&self.info.name, &self.info.version, started.elapsed());
        let answer = match result {
            None => {
                return Err(CallError::Malformed(format!(
                    "called as a {wanted} plugin but it implements {}",
                    self.info.world
                )));
            }
            Some(Ok(answer)) => answer,
            // The instance is dropped: a trap leaves its store unusable.
            Some(Err(error)) => return Err(self.classify(error, &instance.store)),
        };
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < POOL_SIZE {
            pool.push(instance);
        }
        drop(pool);
        let size = answer.output_size();
        let limit = self.limits.output_bytes;
        if size > limit {
            return Err(CallError::OutputTooLarge { size, limit });
        }
        Ok(answer)
    }

    fn classify(&self, error: wasmtime::Error, store: &Store<StoreState>) -> CallError {
        if store.data().limiter.exceeded {
            return CallError::Memory(self.limits.memory_bytes);
        }
        if let Some(wasmtime::Trap::Interrupt) = error.downcast_ref::<wasmtime::Trap>() {
            return CallError::Timeout(self.limits.call_timeout.as_millis());
        }
        CallError::trap(error)
    }

    fn describe(&self) -> Result<types::PluginInfo, CallError> {
        let info = self.call(self.info.world, |store, bound, _| match bound {
            Bound::Status(b, _) => Some(b.verdict_policy_status().call_describe(store)),
            Bound::Failover(b, _) => Some(b.verdict_policy_failover().call_describe(store)),
            Bound::Admission(b) => Some(b.verdict_policy_admission().call_describe(store)),
            Bound::Lifecycle(b) => Some(b.verdict_policy_lifecycle().call_describe(store)),
        })?;
        validate::plugin_info(&info)?;
        Ok(info)
    }

    /// The policy's own check of `settings` (a JSON object text): its words
    /// as [`CallError::Refused`] when it refuses them. A plugin that does
    /// not export the check accepts every object.
    pub fn check_settings(&self, settings: &str) -> Result<(), CallError> {
        if !self.info.checks_settings {
            return Ok(());
        }
        let answer = self.call(self.info.world, |store, _, validate| {
            validate.map(|f| {
                f.call(store, (settings.to_string(),))
                    .map(|(r,)| Checked(r))
            })
        })?;
        answer.0.map_err(CallError::Refused)
    }

    /// Evaluate once on made-up input for this world, as a check before a
    /// version is swapped in.
    fn smoke(&self) -> Result<(), CallError> {
        let ctx = self.context(validate::SMOKE_NOW);
        match self.info.world {
            World::Status => {
                let inputs = validate::smoke_status_inputs();
                self.evaluate(&ctx, &inputs[0])?;
                let batch = self.evaluate_batch(&ctx, &inputs)?;
                batch
                    .into_iter()
                    .find_map(Result::err)
                    .map_or(Ok(()), |e| Err(CallError::Refused(e)))
            }
            World::Failover => self
                .decide(&ctx, &validate::smoke_failover_input())
                .map(drop),
            World::Admission => {
                self.admit_task(&ctx, &validate::smoke_admission_input())?;
                self.review(
                    &ctx,
                    &admission::ReviewInput {
                        request: validate::SMOKE_REVIEW.into(),
                        namespace_labels: None,
                    },
                )
                .map(drop)
            }
            World::Lifecycle => self
                .next(&ctx, &validate::smoke_lifecycle_input())
                .map(drop),
        }
    }

    /// The status verdict of one application.
    pub fn evaluate(
        &self,
        ctx: &types::Context,
        input: &status::AppInput,
    ) -> Result<types::AppVerdict, CallError> {
        let answer = self.call(World::Status, |store, bound, _| match bound {
            Bound::Status(b, _) => Some(b.verdict_policy_status().call_evaluate(store, ctx, input)),
            _ => None,
        })?;
        let verdict = answer.map_err(CallError::Refused)?;
        validate::app_verdict(&verdict, &input.app.id.namespace, &input.app.id.name)?;
        Ok(verdict)
    }

    /// The status verdicts of many applications, one result per input.
    pub fn evaluate_batch(
        &self,
        ctx: &types::Context,
        inputs: &[status::AppInput],
    ) -> Result<Vec<Result<types::AppVerdict, String>>, CallError> {
        // One buffer each way (the encoding of the typed values) when the
        // plugin takes it, else the typed call.
        let answers = if self.info.encoded_batches {
            with_encoded(inputs, "encoding the inputs", |encoded| {
                self.call_encoded(ctx, encoded)
            })?
        } else {
            self.call(World::Status, |store, bound, _| match bound {
                Bound::Status(b, _) => Some(
                    b.verdict_policy_status()
                        .call_evaluate_batch(store, ctx, inputs),
                ),
                _ => None,
            })?
        };
        let asked = inputs
            .iter()
            .map(|i| (i.app.id.namespace.as_str(), i.app.id.name.as_str()));
        check_answers(answers, asked)
    }

    /// The status verdicts of a batch already encoded (a `list<app-input>`
    /// in the `status-encoded` encoding) on the apps `asked` (namespace and
    /// name), in order; for
    /// plugins whose [`VersionInfo::encoded_batches`] is true.
    pub(crate) fn evaluate_encoded(
        &self,
        ctx: &types::Context,
        encoded: &[u8],
        asked: &[(String, String)],
    ) -> Result<Vec<Result<types::AppVerdict, String>>, CallError> {
        checked_answers(self.call_encoded(ctx, encoded)?, asked)
    }

    fn call_encoded(
        &self,
        ctx: &types::Context,
        encoded: &[u8],
    ) -> Result<Vec<Result<types::AppVerdict, String>>, CallError> {
        let answer = self.call(World::Status, |store, bound, _| match bound {
            Bound::Status(_, Some(f)) => Some(f.call(store, ctx, encoded)),
            _ => None,
        })?;
        let bytes = answer.0.map_err(CallError::Refused)?;
        decode_answers(&bytes)
    }

    /// The failover decisions over the given nodes: the input in one
    /// buffer to a plugin that takes it encoded, else the typed call.
    pub fn decide(
        &self,
        ctx: &types::Context,
        input: &failover::FailoverInput,
    ) -> Result<Vec<failover::NodeDecision>, CallError> {
        if !self.info.encoded_batches {
            return self.decide_typed(ctx, input);
        }
        let answer = with_encoded(input, "encoding the input", |encoded| {
            self.call(World::Failover, |store, bound, _| match bound {
                Bound::Failover(_, Some(f)) => Some(f.call(store, ctx, encoded)),
                _ => None,
            })
        })?;
        let bytes = answer.0.map_err(CallError::Refused)?;
        let decisions: Vec<failover::NodeDecision> = postcard::from_bytes(&bytes)
            .map_err(|e| CallError::undecodable("the encoded decisions do not decode")(e.into()))?;
        validate::node_decisions(&decisions, input)?;
        Ok(decisions)
    }

    /// The failover decisions through the typed call (`failover.decide`),
    /// what a plugin without `failover-encoded` is asked.
    pub fn decide_typed(
        &self,
        ctx: &types::Context,
        input: &failover::FailoverInput,
    ) -> Result<Vec<failover::NodeDecision>, CallError> {
        let answer = self.call(World::Failover, |store, bound, _| match bound {
            Bound::Failover(b, _) => {
                Some(b.verdict_policy_failover().call_decide(store, ctx, input))
            }
            _ => None,
        })?;
        let decisions = answer.map_err(CallError::Refused)?;
        validate::node_decisions(&decisions, input)?;
        Ok(decisions)
    }

    /// The admission answer to a task request.
    pub fn admit_task(
        &self,
        ctx: &types::Context,
        input: &admission::AdmissionInput,
    ) -> Result<admission::TaskAdmission, CallError> {
        let answer = self.call(World::Admission, |store, bound, _| match bound {
            Bound::Admission(b) => Some(
                b.verdict_policy_admission()
                    .call_admit_task(store, ctx, input),
            ),
            _ => None,
        })?;
        let admitted = answer.map_err(CallError::Refused)?;
        validate::task_admission(&admitted)?;
        Ok(admitted)
    }

    /// The answer to a Kubernetes admission request.
    pub fn review(
        &self,
        ctx: &types::Context,
        input: &admission::ReviewInput,
    ) -> Result<admission::ReviewResponse, CallError> {
        let answer = self.call(World::Admission, |store, bound, _| match bound {
            Bound::Admission(b) => {
                Some(b.verdict_policy_admission().call_review(store, ctx, input))
            }
            _ => None,
        })?;
        let response = answer.map_err(CallError::Refused)?;
        validate::review_response(&response)?;
        Ok(response)
    }
}

impl Version {
    /// The lifecycle decision on one instance: stay, or the next stage with
    /// its task list.
    pub fn next(
        &self,
        ctx: &types::Context,
        input: &lifecycle::LifecycleInput,
    ) -> Result<lifecycle::Decision, CallError> {
        let answer = self.call(World::Lifecycle, |store, bound, _| match bound {
            Bound::Lifecycle(b) => Some(b.verdict_policy_lifecycle().call_next(store, ctx, input)),
            _ => None,
        })?;
        let decision = answer.map_err(CallError::Refused)?;
        validate::lifecycle_decision(&decision)?;
        Ok(decision)
    }
}

fn duration_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exports(names: &[&str]) -> Vec<String> {
        names.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_plugin_of_another_package_version_is_told_which_one_the_host_speaks() {
        let current = exports(&[World::Status.export_name()]);
        assert!(matches!(world_of_exports(&current), Ok(World::Status)));
        let old = exports(&["verdict:policy/failover@0.1.0"]);
        let error = world_of_exports(&old).unwrap_err();
        assert_eq!(error.kind(), "other-version");
        let text = error.to_string();
        assert!(
            text.contains("failover-policy") && text.contains("@0.1.0") && text.contains("@0.4.0"),
            "{text}"
        );
        let alien = exports(&["example:alien/greeter@1.0.0"]);
        assert_eq!(world_of_exports(&alien).unwrap_err().kind(), "no-world");
    }

    #[test]
    fn the_host_speaks_the_package_version_of_wit() {
        let wit = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit/types.wit"),
        )
        .unwrap();
        assert!(
            wit.starts_with(&format!("package verdict:policy@{PACKAGE_VERSION};")),
            "{}",
            wit.lines().next().unwrap_or_default()
        );
        for world in World::ALL {
            assert!(
                world
                    .export_name()
                    .ends_with(&format!("@{PACKAGE_VERSION}"))
            );
        }
        assert!(STATUS_ENCODED.ends_with(&format!("@{PACKAGE_VERSION}")));
        assert!(SETTINGS.ends_with(&format!("@{PACKAGE_VERSION}")));
    }
}
