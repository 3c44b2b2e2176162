//! Applications' own health checks (seed 000 combines them with the cluster
//! state): a workload names its app's health URL in the
//! `verdict.dev/health-url` annotation; the prober requests every such URL
//! periodically, with a timeout and a bound on requests in flight, and puts
//! the outcome into the observation. A change of outcome re-derives the app.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::AppKey;
use super::cluster::Observed;
use crate::time::millis;
use crate::wit::types;

/// The workload annotation that names an app's health URL.
pub(crate) const ANNOTATION: &str = "verdict.dev/health-url";

/// How probing is paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct ProbeConfig {
    /// How often apps' health URLs (`verdict.dev/health-url`) are probed,
    /// in milliseconds.
    #[arg(long = "probe-interval-ms", value_name = "MS", default_value = "10000", value_parser = crate::settings::positive_millis)]
    pub every: Duration,
    /// How long one health probe may take, in milliseconds.
    #[arg(long = "probe-timeout-ms", value_name = "MS", default_value = "2000", value_parser = crate::settings::positive_millis)]
    pub timeout: Duration,
    /// Probes under way at once.
    #[arg(skip = 16_usize)]
    pub in_flight: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// What one request found: the outcome, the HTTP status, and a message.
type Found = (types::ProbeOutcome, Option<u16>, Option<String>);

async fn request(client: &reqwest::Client, url: &str) -> Found {
    match client.get(url).send().await {
        Ok(response) if response.status().is_success() || response.status().is_redirection() => (
            types::ProbeOutcome::Ok,
            Some(response.status().as_u16()),
            None,
        ),
        Ok(response) => {
            let status = response.status();
            (
                types::ProbeOutcome::Failing,
                Some(status.as_u16()),
                Some(format!("answered {status}")),
            )
        }
        Err(error) => {
            let what = if error.is_timeout() {
                "timed out".to_string()
            } else {
                format!("{error}")
            };
            (types::ProbeOutcome::Unreachable, None, Some(what))
        }
    }
}

/// Record one round's results; apps whose outcome changed, or that no
/// longer name a URL, are marked for re-derivation.
fn record(observed: &Observed, results: BTreeMap<AppKey, (String, Found)>) {
    let now = millis(SystemTime::now());
    let mut changed = Vec::new();
    {
        let mut snapshot = observed.snapshot();
        let gone: Vec<AppKey> = snapshot
            .probes
            .keys()
            .filter(|k| !results.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            snapshot.probes.remove(&key);
            changed.push(key);
        }
        for (key, (url, (outcome, http_status, message))) in results {
            let previous = snapshot.probes.get(&key);
            let same = previous.is_some_and(|p| p.outcome == outcome && p.url == url);
            let since = match previous {
                Some(p) if same => p.since,
                _ => now,
            };
            if !same || previous.is_some_and(|p| p.http_status != http_status) {
                changed.push(key.clone());
            }
            snapshot.probes.insert(
                key,
                types::HealthProbe {
                    url,
                    outcome,
                    since,
                    checked_at: now,
                    http_status,
                    message,
                },
            );
        }
    }
    if !changed.is_empty() {
        observed.mark_apps(changed);
        observed.changed.notify_one();
    }
}

/// Probe every named health URL each period, until aborted.
pub(crate) async fn probe_forever(observed: Arc<Observed>, config: ProbeConfig) {
    let client = match reqwest::Client::builder().timeout(config.timeout).build() {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "cannot build the health-check client; apps are not probed");
            return;
        }
    };
    let limit = Arc::new(Semaphore::new(config.in_flight.max(1)));
    let mut tick = tokio::time::interval(config.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let targets = observed.read().health_urls();
        let mut requests = JoinSet::new();
        for (app, url) in targets {
            let Ok(permit) = Arc::clone(&limit).acquire_owned().await else {
                return;
            };
            let client = client.clone();
            requests.spawn(async move {
                let found = request(&client, &url).await;
                drop(permit);
                (app, url, found)
            });
        }
        let mut results = BTreeMap::new();
        while let Some(done) = requests.join_next().await {
            if let Ok((app, url, found)) = done {
                results.insert(app, (url, found));
            }
        }
        record(&observed, results);
    }
}
