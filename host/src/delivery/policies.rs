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
use crate::plugins::{Delivered, Mode, Registry, World};

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
}

fn spec_of(object: &DynamicObject) -> Result<Spec, String> {
    let spec = &object.data["spec"];
    let world = match spec["world"].as_str() {
        Some("status") => World::Status,
        Some("failover") => World::Failover,
        Some("admission") => World::Admission,
        other => {
            return Err(format!(
                "spec.world {other:?} is not status, failover or admission"
            ));
        }
    };
    let source = Source::parse(
        spec["source"].as_str().unwrap_or_default(),
        spec["sha256"].as_str(),
    )
    .map_err(|e| format!("spec.source: {e}"))?;
    let mode = match spec["mode"].as_str().unwrap_or("active") {
        "active" => Mode::Active,
        "shadow" => Mode::Shadow,
        other => return Err(format!("spec.mode {other} is not active or shadow")),
    };
    let settings = match &spec["settings"] {
        Value::Null => "{}".to_string(),
        settings => settings.to_string(),
    };
    Ok(Spec {
        world,
        source,
        settings,
        mode,
    })
}

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
                        self.reconcile(object).await;
                    }
                    Some(Ok(watcher::Event::Delete(object))) => {
                        let name = object.metadata.name.unwrap_or_default();
                        lock(&self.seen).remove(&name);
                        lock(&self.served).remove(&name);
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
                        self.reconcile(object).await;
                    }
                }
            }
        }
    }

    fn tell(&self, name: &str, mut data: Value) {
        data["policy"] = json!(name);
        self.events.publish(Kind::Plugin, None, data);
    }

    /// Serve a Policy as it is now, and say so in its status.
    async fn reconcile(&self, object: DynamicObject) {
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
        }
        if lock(&self.served).get(&name) != Some(&generation) {
            let outcome = self.serve(&name, &object).await;
            let (digest, error) = match &outcome {
                Ok(digest) => {
                    lock(&self.served).insert(name.clone(), generation);
                    (Some(digest.clone()), None)
                }
                Err(error) => {
                    tracing::warn!(policy = %name, %error, "a Policy could not be served; what served before still serves");
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
        let tagged = matches!(&spec.source, Source::Oci(r) if !r.contains("@sha256:"));
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
            .install(name, &fetched.component, &spec.settings, delivered)
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
        let pinned = match source {
            Source::Oci(reference) if reference.contains("@sha256:") => {
                Some(reference.trim_start_matches("oci://").to_string())
            }
            Source::Url { url, .. } => Some(url.clone()),
            Source::Oci(_) => None,
        };
        if let Some(kept) = pinned.and_then(|p| self.cache.get(&p)) {
            return Ok(kept);
        }
        let fetched = fetch(&self.registries, source).await?;
        self.cache.keep(&fetched)?;
        Ok(fetched)
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
        let wrong = spec_of(&policy(json!({"world": "weather", "source": "r/p:v1"}))).unwrap_err();
        assert!(wrong.contains("spec.world"), "{wrong}");
        let wrong = spec_of(&policy(
            json!({"world": "status", "source": "https://e/x.wasm"}),
        ))
        .unwrap_err();
        assert!(wrong.contains("sha256"), "{wrong}");
    }
}
