//! Decisions people make on one replica, shared with the others through the
//! API server: status overrides, failover's node overrides and approvals.
//! Each is kept where it is made (its own store, with its audit) and also
//! written, as the change that made it, to a ConfigMap of its own in the
//! replicas' namespace (labelled `verdict.dev/shared: <kind>`); every
//! replica watches them and applies what the others made, so that a
//! request answered by any replica behind a Service counts on all of them.
//!
//! Two replicas changing one thing at once converge on the later change
//! (by its time, then by the replica's name): a change older than the last
//! one applied for the same thing is not applied.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::time::Timestamp;

const LABEL: &str = "verdict.dev/shared";
const REPLICA: &str = "verdict.dev/replica-name";
const AT: &str = "verdict.dev/at";

/// One kind of shared decisions.
#[derive(Debug)]
pub struct Shared {
    api: Api<ConfigMap>,
    kind: &'static str,
    replica: String,
    /// The latest change applied or made, by key: when, and by which
    /// replica.
    latest: Mutex<HashMap<String, (Timestamp, String)>>,
    outbox: mpsc::UnboundedSender<(String, Timestamp, Value)>,
}

/// The ConfigMap of a decision.
fn object_name(kind: &str, key: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{kind}\n{key}").as_bytes());
    format!("verdict-{kind}-{}", hex::encode(&digest[..8]))
}

impl Shared {
    /// Decisions of `kind` in `namespace`, made by `replica`; the loop that
    /// writes them out, to spawn.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        kind: &'static str,
        replica: &str,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let (outbox, mut pending) = mpsc::unbounded_channel();
        let shared = Arc::new(Self {
            api: Api::namespaced(client, namespace),
            kind,
            replica: replica.to_string(),
            latest: Mutex::default(),
            outbox,
        });
        let writer = Arc::clone(&shared);
        let writing = async move {
            while let Some((key, at, change)) = pending.recv().await {
                let mut delay = Duration::from_millis(200);
                loop {
                    match writer.write(&key, at, &change).await {
                        Ok(()) => break,
                        Err(error) => {
                            tracing::warn!(kind = writer.kind, %key, %error, "a decision could not be shared with the other replicas; retrying");
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(10));
                        }
                    }
                }
            }
        };
        (shared, writing)
    }

    fn latest(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Timestamp, String)>> {
        self.latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a change of `key` made `at` by `replica` is newer than the
    /// last one seen; if so it becomes the last one.
    fn newer(&self, key: &str, at: Timestamp, replica: &str) -> bool {
        let mut latest = self.latest();
        let candidate = (at, replica.to_string());
        if latest.get(key).is_some_and(|seen| *seen >= candidate) {
            return false;
        }
        latest.insert(key.to_string(), candidate);
        true
    }

    /// Share a change this replica made (written out in the background,
    /// retried until the API server takes it).
    pub fn publish(&self, key: &str, at: Timestamp, change: &impl serde::Serialize) {
        self.newer(key, at, &self.replica.clone());
        let change = serde_json::to_value(change).unwrap_or_default();
        let _ = self.outbox.send((key.to_string(), at, change));
    }

    async fn write(&self, key: &str, at: Timestamp, change: &Value) -> Result<(), kube::Error> {
        let name = object_name(self.kind, key);
        let mut object = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(LABEL.to_string(), self.kind.to_string())])),
                annotations: Some(BTreeMap::from([
                    (REPLICA.to_string(), self.replica.clone()),
                    (AT.to_string(), at.to_string()),
                ])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([
                ("key".to_string(), key.to_string()),
                ("change".to_string(), change.to_string()),
            ])),
            ..ConfigMap::default()
        };
        match self.api.get_opt(&name).await? {
            Some(stored) => {
                // A later change from another replica stays.
                let stored_at = stored
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| Some((a.get(AT)?.parse().ok()?, a.get(REPLICA)?.clone())));
                if stored_at.is_some_and(|s: (Timestamp, String)| s > (at, self.replica.clone())) {
                    return Ok(());
                }
                object.metadata.resource_version = stored.metadata.resource_version;
                self.api
                    .replace(&name, &PostParams::default(), &object)
                    .await?;
            }
            None => {
                self.api.create(&PostParams::default(), &object).await?;
            }
        }
        Ok(())
    }

    /// Apply the other replicas' changes, as they are made and those made
    /// before this one started, until aborted.
    pub async fn follow<F>(self: Arc<Self>, apply: impl Fn(Value) -> F + Send + Sync + 'static)
    where
        F: Future<Output = ()> + Send,
    {
        let config = watcher::Config::default().labels(&format!("{LABEL}={}", self.kind));
        let mut events = std::pin::pin!(watcher(self.api.clone(), config));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    let annotations = object.metadata.annotations.unwrap_or_default();
                    let data = object.data.unwrap_or_default();
                    let (Some(replica), Some(at), Some(key), Some(change)) = (
                        annotations.get(REPLICA),
                        annotations
                            .get(AT)
                            .and_then(|a| a.parse::<Timestamp>().ok()),
                        data.get("key"),
                        data.get("change")
                            .and_then(|c| serde_json::from_str(c).ok()),
                    ) else {
                        continue;
                    };
                    if *replica != self.replica && self.newer(key, at, replica) {
                        apply(change).await;
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(kind = self.kind, %error, "watching shared decisions failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kubernetes_names_of_kind_and_key() {
        let name = object_name("status-override", "shop/web/");
        assert!(
            name.starts_with("verdict-status-override-") && name.len() < 64,
            "{name}"
        );
        assert_ne!(name, object_name("status-override", "shop/api/"));
        assert_ne!(name, object_name("failover", "shop/web/"));
    }
}
