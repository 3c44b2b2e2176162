//! `Policy` objects (`policies.verdict.dev/v1alpha1`, see
//! `deploy/chart/verdict/crds/policy-crd.yaml`): every replica watches
//! them in its namespace, fetches each one's component (from the cache when
//! its source is pinned and kept), checks it and swaps it in as the plugin
//! named after the object, in the object's mode, with its settings; and
//! writes what it serves, or why it cannot, under
//! `status.replicas.<replica>` (a merge patch of its own key, so replicas
//! never overwrite each other). The leader sums the replicas up in
//! `status.digest` and `status.ready`. A source that cannot be reached
//! leaves the last good version serving, and is tried again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::oci::Registries;
use super::{Cache, DeliveryError, Fetched, Source, fetch};
use crate::events::{Events, Kind};
use crate::leader::{Leadership, Members};
use crate::plugins::{Delivered, Mode, Override, Registry, World};

fn resource() -> ApiResource {
    ApiResource {
        group: "verdict.dev".into(),
        version: "v1alpha1".into(),
        api_version: "verdict.dev/v1alpha1".into(),
        kind: "Policy".into(),
        plural: "policies".into(),
    }
}

/// How often a Policy this replica could not serve is tried again.
const RETRY: Duration = Duration::from_secs(3);

/// A Policy's spec, read.
#[derive(Debug, Clone, PartialEq)]
struct Spec {
    world: World,
    source: Source,
    settings: String,
    mode: Mode,
    /// `spec.limits`: the plugin's own deadline and memory, when set.
    limits: Override,
}

/// A Policy's spec read through its type ([`super::crd::PolicySpec`]), then
/// what the schema cannot say.
fn spec_of(object: &DynamicObject) -> Result<Spec, String> {
    use super::crd::{ModeName, PolicySpec, WorldName};
    let spec: PolicySpec = serde_path_to_error::deserialize(&object.data["spec"])
        .map_err(|e| format!("spec.{}: {}", e.path(), e.inner()))?;
    let world = match spec.world {
        WorldName::Status => World::Status,
        WorldName::Failover => World::Failover,
        WorldName::Admission => World::Admission,
        WorldName::Lifecycle => World::Lifecycle,
    };
    let source = Source::parse(&spec.source, spec.sha256.as_deref())
        .map_err(|e| format!("spec.source: {e}"))?;
    let mode = match spec.mode {
        ModeName::Active => Mode::Active,
        ModeName::Shadow => Mode::Shadow,
    };
    let settings = match &spec.settings {
        None | Some(Value::Null) => "{}".to_string(),
        Some(settings) => settings.to_string(),
    };
    let limits = spec.limits.unwrap_or_default();
    let positive = |key: &str, value: Option<u64>| match value {
        Some(0) => Err(format!("spec.limits.{key} must be a positive integer")),
        value => Ok(value),
    };
    let limits = Override {
        call_timeout_ms: positive("callTimeoutMs", limits.call_timeout_ms)?,
        memory_limit_mib: positive("memoryLimitMiB", limits.memory_limit_mib)?,
    };
    Ok(Spec {
        world,
        source,
        settings,
        mode,
        limits,
    })
}

/// Why a promotion or roll-back was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("no Policy {0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("the Kubernetes API: {0}")]
    Kube(#[source] kube::Error),
}

/// Who decides and why: neither blank.
fn decided(by: &str, reason: &str) -> Result<(), ChangeError> {
    crate::overrides::decider(by, Some(reason)).map_err(ChangeError::Invalid)?;
    if reason.trim().is_empty() {
        return Err(ChangeError::Invalid("reason: say why".into()));
    }
    Ok(())
}

/// Annotations of a promotion and a roll-back.
const PROMOTED_BY: &str = "verdict.dev/promoted-by";
const PROMOTED_REASON: &str = "verdict.dev/promoted-reason";
const PROMOTED_AT: &str = "verdict.dev/promoted-at";
const REPLACED: &str = "verdict.dev/replaced";
const ROLLED_BACK_BY: &str = "verdict.dev/rolled-back-by";
const ROLLED_BACK_REASON: &str = "verdict.dev/rolled-back-reason";

/// The reference a Policy's tag was pinned to for its generation, when a
/// replica resolved it.
fn pinned_tag(object: &DynamicObject) -> Option<String> {
    let resolved = &object.data["status"]["resolved"];
    (resolved["generation"].as_i64() == object.metadata.generation)
        .then(|| resolved["reference"].as_str().map(String::from))
        .flatten()
}

/// The Policy controller of one replica.
#[derive(Debug)]
pub struct Policies {
    api: Api<DynamicObject>,
    registry: Arc<Registry>,
    registries: Registries,
    cache: Cache,
    leadership: Arc<Leadership>,
    members: Option<Arc<Members>>,
    events: Arc<Events>,
    /// The Policies as last seen, by name.
    seen: Mutex<BTreeMap<String, DynamicObject>>,
    /// The generation each Policy was served at here.
    served: Mutex<BTreeMap<String, i64>>,
    /// Why each Policy could not be served, last (said once, not on every
    /// try).
    failing: Mutex<BTreeMap<String, String>>,
    /// The generation each Policy was last tried at: a status write (its
    /// own or another replica's) is no reason to try again; the retry
    /// period is.
    tried: Mutex<BTreeMap<String, i64>>,
    /// The reconciliation under way for each Policy, with the generation
    /// it serves: each runs on its own, so that a slow registry holds up
    /// only its own Policies, and a deleted or edited Policy's is
    /// cancelled.
    running: Mutex<BTreeMap<String, (i64, tokio::task::AbortHandle)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Policies {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        registry: Arc<Registry>,
        (registries, cache): (Registries, Cache),
        (leadership, members): (Arc<Leadership>, Option<Arc<Members>>),
        events: Arc<Events>,
    ) -> Arc<Self> {
        Arc::new(Self {
            api: Api::namespaced_with(client, namespace, &resource()),
            registry,
            registries,
            cache,
            leadership,
            members,
            events,
            seen: Mutex::default(),
            served: Mutex::default(),
            failing: Mutex::default(),
            tried: Mutex::default(),
            running: Mutex::default(),
        })
    }

    /// Follow the Policy objects until aborted; those not served yet are
    /// tried again every few seconds.
    pub async fn follow(self: Arc<Self>) {
        let mut events = std::pin::pin!(watcher(self.api.clone(), watcher::Config::default()));
        let mut retry = tokio::time::interval(RETRY);
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object))) => {
                        self.start(object, false);
                    }
                    Some(Ok(watcher::Event::Delete(object))) => {
                        let name = object.metadata.name.unwrap_or_default();
                        if let Some((_, running)) = lock(&self.running).remove(&name) {
                            running.abort();
                        }
                        lock(&self.seen).remove(&name);
                        lock(&self.served).remove(&name);
                        lock(&self.tried).remove(&name);
                        lock(&self.failing).remove(&name);
                        if self.registry.uninstall(&name) {
                            self.tell(&name, json!({"event": "removed"}));
                        }
                    }
                    Some(Ok(_)) => {}
                    // Without the Policy CRD (not installed: no Policies) the
                    // watch fails on every try: slowly then.
                    Some(Err(error)) => {
                        tracing::debug!(%error, "watching Policy objects failed; retrying");
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                    None => return,
                },
                _ = retry.tick() => {
                    let behind: Vec<DynamicObject> = {
                        let served = lock(&self.served);
                        lock(&self.seen)
                            .values()
                            .filter(|o| served.get(o.metadata.name.as_deref().unwrap_or_default()) != o.metadata.generation.as_ref())
                            .cloned()
                            .collect()
                    };
                    for object in behind {
                        self.start(object, true);
                    }
                }
            }
        }
    }

    /// Reconcile a Policy on a task of its own, unless one is under way
    /// for the same generation; one for an older generation is cancelled.
    fn start(self: &Arc<Self>, object: DynamicObject, retry: bool) {
        let name = object.metadata.name.clone().unwrap_or_default();
        let generation = object.metadata.generation.unwrap_or(0);
        let mut running = lock(&self.running);
        match running.get(&name) {
            Some((at, task)) if *at == generation && !task.is_finished() => {
                // Still at it: what it learns is what this event asks; the
                // leader sums up the replicas' statuses as they come.
                lock(&self.seen).insert(name.clone(), object.clone());
                if self.leadership.acting().is_some() {
                    let this = Arc::clone(self);
                    tokio::spawn(async move { this.sum_up(&name, &object).await });
                }
                return;
            }
            Some((_, task)) => task.abort(),
            None => {}
        }
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            this.reconcile(object, retry).await;
        });
        running.insert(name, (generation, task.abort_handle()));
    }

    fn tell(&self, name: &str, mut data: Value) {
        data["policy"] = json!(name);
        self.events.publish(Kind::Plugin, None, data);
    }

    /// Serve a Policy as it is now (once per generation, and again on
    /// `retry` while it fails), and say so in its status.
    async fn reconcile(&self, object: DynamicObject, retry: bool) {
        let name = object.metadata.name.clone().unwrap_or_default();
        let generation = object.metadata.generation.unwrap_or(0);
        lock(&self.seen).insert(name.clone(), object.clone());
        // A tag another replica resolved for this generation, that this one
        // serves another digest of: serve the one it was pinned to.
        let pinned = pinned_tag(&object);
        let serving = self.registry.get(&name).and_then(|s| s.delivered());
        if pinned
            .as_ref()
            .is_some_and(|p| serving.as_ref().is_some_and(|d| d.source != *p))
        {
            lock(&self.served).remove(&name);
            lock(&self.tried).remove(&name);
        }
        let due = retry || lock(&self.tried).get(&name) != Some(&generation);
        if due && lock(&self.served).get(&name) != Some(&generation) {
            lock(&self.tried).insert(name.clone(), generation);
            let outcome = self.serve(&name, &object).await;
            let (digest, error) = match &outcome {
                Ok(digest) => {
                    lock(&self.served).insert(name.clone(), generation);
                    lock(&self.failing).remove(&name);
                    (Some(digest.clone()), None)
                }
                Err(error) => {
                    let again = lock(&self.failing).insert(name.clone(), error.clone());
                    if again.as_ref() == Some(error) {
                        tracing::debug!(policy = %name, %error, "a Policy still cannot be served");
                    } else {
                        tracing::warn!(policy = %name, %error, "a Policy could not be served; what served before still serves");
                    }
                    let serving = self
                        .registry
                        .get(&name)
                        .and_then(|s| s.delivered())
                        .map(|d| d.digest);
                    (serving, Some(error.clone()))
                }
            };
            let replica = self.leadership.standing().replica;
            let status = json!({"status": {"replicas": {replica: {
                "digest": digest,
                "error": error,
                "observedGeneration": generation,
                "at": crate::time::rfc3339(crate::time::now()),
            }}}});
            if let Err(error) = self
                .api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                .await
            {
                tracing::warn!(policy = %name, %error, "a Policy's status could not be written");
            }
        }
        if self.leadership.acting().is_some() {
            self.sum_up(&name, &object).await;
        }
    }

    /// Fetch, check and swap in a Policy's component; the digest served
    /// (the OCI manifest's, or the component's for a URL). A tag is
    /// resolved once for a generation: the first replica to resolve it
    /// writes the pinned reference in the status, and the others use that.
    async fn serve(&self, name: &str, object: &DynamicObject) -> Result<String, String> {
        let mut spec = spec_of(object)?;
        let tagged = spec.source.pinned().is_none();
        if let Some(pinned) = pinned_tag(object) {
            spec.source = Source::Oci(pinned);
        }
        let fetched = self
            .fetched(&spec.source)
            .await
            .map_err(|e| e.to_string())?;
        if tagged && pinned_tag(object).is_none() {
            let generation = object.metadata.generation.unwrap_or(0);
            let resolved = json!({"status": {"resolved": {"generation": generation, "reference": fetched.pinned}}});
            if let Err(error) = self
                .api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&resolved))
                .await
            {
                tracing::debug!(policy = %name, %error, "the tag's digest could not be written");
            }
        }
        let digest = fetched
            .manifest
            .clone()
            .unwrap_or_else(|| fetched.sha256.clone());
        let delivered = Delivered {
            source: fetched.pinned.clone(),
            digest: digest.clone(),
            mode: spec.mode,
        };
        let info = self
            .registry
            .install(
                name,
                &fetched.component,
                &spec.settings,
                Some(spec.limits.over(self.registry.limits_for(name))),
                delivered,
            )
            .map_err(|rejected| rejected.error)?;
        if info.world != spec.world {
            self.registry.uninstall(name);
            return Err(format!(
                "{} implements {}, not the {} world the Policy names",
                fetched.pinned, info.world, spec.world
            ));
        }
        self.tell(
            name,
            json!({"event": "delivered", "source": fetched.pinned, "mode": spec.mode, "version": info.version}),
        );
        Ok(digest)
    }

    /// A source's component: kept already when the source is pinned, else
    /// fetched (a tag resolved to its digest), checked and kept.
    async fn fetched(&self, source: &Source) -> Result<Fetched, DeliveryError> {
        if let Some(kept) = source.pinned().and_then(|p| self.cache.get(&p)) {
            return Ok(kept);
        }
        let fetched = fetch(&self.registries, source).await?;
        self.cache.keep(&fetched)?;
        Ok(fetched)
    }

    async fn get(&self, name: &str) -> Result<DynamicObject, ChangeError> {
        match self.api.get_opt(name).await {
            Ok(Some(object)) => Ok(object),
            Ok(None) => Err(ChangeError::NotFound(name.to_string())),
            Err(error) => Err(ChangeError::Kube(error)),
        }
    }

    async fn patch(&self, name: &str, patch: &Value) -> Result<(), ChangeError> {
        self.api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(ChangeError::Kube)
    }

    /// Make a shadow Policy the active one of its world, the active ones
    /// of that world shadows: recorded on the Policy (who, why, when, what
    /// it replaced) and told. A shadow that `failed` is promoted only when
    /// `force`d. Every replica follows the edit.
    pub async fn promote(
        &self,
        name: &str,
        (by, reason): (&str, &str),
        failed: Option<String>,
        force: bool,
    ) -> Result<Vec<String>, ChangeError> {
        decided(by, reason)?;
        let object = self.get(name).await?;
        let spec = spec_of(&object).map_err(ChangeError::Invalid)?;
        if spec.mode == Mode::Active {
            return Err(ChangeError::Conflict(format!(
                "Policy {name} is active already"
            )));
        }
        if let Some(why) = failed.filter(|_| !force) {
            return Err(ChangeError::Conflict(format!(
                "the shadow {name} failed ({why}); promote it with \"force\": true to do it anyway"
            )));
        }
        let all = self
            .api
            .list(&kube::api::ListParams::default())
            .await
            .map_err(ChangeError::Kube)?;
        let replaced: Vec<String> = all
            .items
            .iter()
            .filter(|o| o.metadata.name.as_deref() != Some(name))
            .filter(|o| spec_of(o).is_ok_and(|s| s.world == spec.world && s.mode == Mode::Active))
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        for other in &replaced {
            self.patch(other, &json!({"spec": {"mode": "shadow"}}))
                .await?;
        }
        let at = crate::time::rfc3339(crate::time::now());
        self.patch(
            name,
            &json!({
                "metadata": {"annotations": {
                    PROMOTED_BY: by.trim(), PROMOTED_REASON: reason, PROMOTED_AT: at,
                    REPLACED: replaced.join(","),
                }},
                "spec": {"mode": "active"},
            }),
        )
        .await?;
        tracing::info!(policy = %name, %by, %reason, ?replaced, "Policy promoted");
        self.tell(
            name,
            json!({"event": "promoted", "by": by.trim(), "reason": reason, "replaced": replaced}),
        );
        Ok(replaced)
    }

    /// Undo a promotion: the Policies it replaced active again, this one a
    /// shadow; recorded and told.
    pub async fn roll_back(
        &self,
        name: &str,
        (by, reason): (&str, &str),
    ) -> Result<Vec<String>, ChangeError> {
        decided(by, reason)?;
        let object = self.get(name).await?;
        let annotations = object.metadata.annotations.clone().unwrap_or_default();
        let restored: Vec<String> = annotations
            .get(REPLACED)
            .map(|r| {
                r.split(',')
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        if !annotations.contains_key(PROMOTED_BY) {
            return Err(ChangeError::Conflict(format!(
                "Policy {name} was not promoted; nothing to roll back"
            )));
        }
        for other in &restored {
            self.patch(other, &json!({"spec": {"mode": "active"}}))
                .await?;
        }
        self.patch(
            name,
            &json!({
                "metadata": {"annotations": {
                    ROLLED_BACK_BY: by.trim(), ROLLED_BACK_REASON: reason,
                    PROMOTED_BY: null, PROMOTED_REASON: null, PROMOTED_AT: null, REPLACED: null,
                }},
                "spec": {"mode": "shadow"},
            }),
        )
        .await?;
        tracing::info!(policy = %name, %by, %reason, ?restored, "Policy rolled back");
        self.tell(name, json!({"event": "rolled-back", "by": by.trim(), "reason": reason, "restored": restored}));
        Ok(restored)
    }

    /// The leader's summary: the digest most replicas serve at this
    /// generation, and how many of all replicas serve it.
    async fn sum_up(&self, name: &str, object: &DynamicObject) {
        let generation = object.metadata.generation.unwrap_or(0);
        let status = &object.data["status"];
        let replicas = status["replicas"].as_object().cloned().unwrap_or_default();
        let total = match &self.members {
            Some(members) => members
                .list()
                .await
                .map(|r| r.len())
                .unwrap_or(replicas.len()),
            None => 1,
        };
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for entry in replicas.values() {
            if entry["observedGeneration"].as_i64() == Some(generation)
                && entry["error"].is_null()
                && let Some(digest) = entry["digest"].as_str()
            {
                *counts.entry(digest.to_string()).or_default() += 1;
            }
        }
        let (digest, ready) = counts
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .unwrap_or_default();
        let ready = format!("{ready}/{}", total.max(replicas.len()));
        if status["digest"].as_str().unwrap_or_default() == digest
            && status["ready"].as_str() == Some(ready.as_str())
            && status["observedGeneration"].as_i64() == Some(generation)
        {
            return;
        }
        let summary =
            json!({"status": {"digest": digest, "ready": ready, "observedGeneration": generation}});
        if let Err(error) = self
            .api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&summary))
            .await
        {
            tracing::debug!(policy = %name, %error, "a Policy's summary could not be written");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: Value) -> DynamicObject {
        DynamicObject::new("p", &resource()).data(json!({ "spec": spec }))
    }

    #[test]
    fn a_policy_spec_reads_with_defaults_and_says_what_is_wrong() {
        let spec = spec_of(&policy(
            json!({"world": "status", "source": "r/p@sha256:ab"}),
        ))
        .unwrap();
        assert_eq!(spec.world, World::Status);
        assert_eq!(spec.mode, Mode::Active);
        assert_eq!(spec.settings, "{}");
        let spec = spec_of(&policy(json!({
            "world": "admission", "source": "r/p:v2", "mode": "shadow", "settings": {"max": 2}
        })))
        .unwrap();
        assert_eq!((spec.world, spec.mode), (World::Admission, Mode::Shadow));
        assert_eq!(spec.settings, r#"{"max":2}"#);
        assert_eq!(spec.limits, Override::default());
        let spec = spec_of(&policy(json!({
            "world": "status", "source": "r/p:v2",
            "limits": {"memoryLimitMiB": 128, "callTimeoutMs": 250}
        })))
        .unwrap();
        assert_eq!(
            spec.limits,
            Override {
                call_timeout_ms: Some(250),
                memory_limit_mib: Some(128)
            }
        );
        let wrong = spec_of(&policy(json!({
            "world": "status", "source": "r/p:v2", "limits": {"memoryLimitMiB": 0}
        })))
        .unwrap_err();
        assert!(wrong.contains("spec.limits.memoryLimitMiB"), "{wrong}");
        let wrong = spec_of(&policy(json!({"world": "weather", "source": "r/p:v1"}))).unwrap_err();
        assert!(wrong.contains("spec.world"), "{wrong}");
        let wrong = spec_of(&policy(
            json!({"world": "status", "source": "https://e/x.wasm"}),
        ))
        .unwrap_err();
        assert!(wrong.contains("sha256"), "{wrong}");
    }
}
