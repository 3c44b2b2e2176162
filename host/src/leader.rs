//! One leader among replicas: every replica watches, derives and serves;
//! only the leader writes to the cluster (the executor, failover's
//! actions). Leadership is a `coordination.k8s.io/v1` Lease, taken and
//! renewed by compare-and-swap on its `resourceVersion` as Kubernetes' own
//! controllers do:
//!
//! - a replica takes the Lease when it is free or its holder has not
//!   renewed it for its duration (counted on this replica's clock from when
//!   it saw the last renewal, so clocks need not agree); each taking counts
//!   one more `leaseTransitions`, the **term**;
//! - the leader renews every retry period and acts only while its last
//!   renewal the API server confirmed is younger than the renew deadline
//!   ([`Leadership::acting`]), which is shorter than the duration: a leader
//!   cut off from the API server stops acting before another may take the
//!   Lease;
//! - every write the leader makes to the cluster goes through a client
//!   that checks [`Leadership::acting`] first ([`Leadership::fenced`]), and
//!   every task it reports on carries its [`Term`], so that a deposed
//!   leader's late write to a task is refused;
//! - on shutdown the leader stops acting and frees the Lease at once;
//!   the others watch it and take it within moments, not a duration.
//!
//! Each replica also keeps a Lease of its own, renewed as a heartbeat with
//! what it serves ([`Members`]): `GET /v1/replicas` lists them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use crate::time::{Timestamp, now};

/// How replicas elect their leader.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// Elect one leader among several replicas on a Lease in
    /// --tasks-namespace: only the leader carries out tasks and failover's
    /// actions; every replica watches, derives and serves. Needs
    /// --task-store kubernetes. Without it the host acts alone.
    #[arg(long = "leader-election")]
    pub enabled: bool,
    /// The Lease the leader holds.
    #[arg(
        long = "lease-name",
        value_name = "NAME",
        default_value = "verdict-leader"
    )]
    pub lease: String,
    /// This replica's name, unique among replicas (the chart passes the
    /// pod's name); default: the host's name and the process id.
    #[arg(long = "replica-name", value_name = "NAME")]
    pub replica: Option<String>,
    /// The URL other replicas and people reach this replica at, listed by
    /// `GET /v1/replicas` (followers send history reads to the leader's);
    /// by default the address it listens on, when that is one address.
    #[arg(long = "advertise-url", value_name = "URL")]
    pub advertise_url: Option<String>,
    /// How long the Lease holds without a renewal, in milliseconds (whole
    /// seconds in the Lease); then another replica may take it.
    #[arg(long = "lease-duration-ms", value_name = "MS", default_value = "15000", value_parser = crate::settings::positive_millis)]
    pub duration: Duration,
    /// How long the leader goes on acting without a confirmed renewal, in
    /// milliseconds; shorter than the duration, so that a leader cut off
    /// from the API server stops before another may take over.
    #[arg(long = "lease-renew-deadline-ms", value_name = "MS", default_value = "10000", value_parser = crate::settings::positive_millis)]
    pub renew_deadline: Duration,
    /// How often the leader renews and the others look, in milliseconds
    /// (the others also watch the Lease, and try at once when it is freed).
    #[arg(long = "lease-retry-ms", value_name = "MS", default_value = "2000", value_parser = crate::settings::positive_millis)]
    pub retry: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

impl Settings {
    /// The replica's name: as set, else the host's name and process id.
    pub fn replica_name(&self) -> String {
        self.replica.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "verdict".into());
            format!("{host}-{}", std::process::id())
        })
    }

    /// The timings must nest: retry < renew deadline < duration.
    pub fn check(&self) -> Result<(), String> {
        if self.renew_deadline >= self.duration {
            return Err(format!(
                "the renew deadline ({} ms) must be shorter than the lease duration ({} ms)",
                self.renew_deadline.as_millis(),
                self.duration.as_millis()
            ));
        }
        if self.retry >= self.renew_deadline {
            return Err(format!(
                "the retry period ({} ms) must be shorter than the renew deadline ({} ms)",
                self.retry.as_millis(),
                self.renew_deadline.as_millis()
            ));
        }
        Ok(())
    }

    /// The Lease's duration in whole seconds, at least one.
    fn duration_seconds(&self) -> i32 {
        self.duration
            .as_millis()
            .div_ceil(1000)
            .clamp(1, i32::MAX as u128) as i32
    }
}

/// Who acted: the replica that held the Lease and its term (the Lease's
/// transitions when it took it). A record written under a later term is
/// not written again under an earlier one.
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub struct Term {
    pub holder: String,
    pub term: u64,
    /// A host that acts alone (no leader election): the only one that acts,
    /// by its configuration, so it follows whatever was written before it
    /// — its own earlier process's work among them, under another name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub alone: bool,
}

impl Term {
    /// A term of an elected leader.
    pub fn elected(holder: &str, term: u64) -> Self {
        Self {
            holder: holder.into(),
            term,
            alone: false,
        }
    }

    /// Whether a record last written under `written` may be written under
    /// this term: not when a later term, or another holder of the same
    /// term, wrote it — except by a host that acts alone.
    pub fn may_follow(&self, written: Option<&Term>) -> Result<(), String> {
        if self.alone {
            return Ok(());
        }
        match written {
            Some(w) if w.term > self.term || (w.term == self.term && w.holder != self.holder) => {
                Err(format!(
                    "written by {} in term {}; {} of term {} no longer leads",
                    w.holder, w.term, self.holder, self.term
                ))
            }
            _ => Ok(()),
        }
    }
}

/// Where this replica stands.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Standing {
    /// This replica's name.
    pub replica: String,
    /// Whether replicas elect a leader; without election the host acts
    /// alone and is always the leader.
    pub elected: bool,
    /// Whether this replica leads (acts) now.
    pub leader: bool,
    /// Since when it leads.
    #[serde(with = "crate::time::text_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub since: Option<Timestamp>,
    /// Who holds the Lease, as last seen.
    pub holder: Option<String>,
    /// The Lease's term, as last seen.
    pub term: u64,
}

/// This replica's leadership, shared by what acts and what reports it.
#[derive(Debug)]
pub struct Leadership {
    standing: watch::Sender<Standing>,
    /// Until when this replica may act: the start of its last renewal
    /// the API server confirmed, plus the renew deadline.
    acting_until: Mutex<Option<Instant>>,
    /// Set when the host shuts down: nothing acts any more.
    stopped: std::sync::atomic::AtomicBool,
}

impl Leadership {
    /// A host that acts alone: always the leader, term 0.
    pub fn solo(replica: &str) -> Arc<Self> {
        Arc::new(Self {
            standing: watch::Sender::new(Standing {
                replica: replica.to_string(),
                elected: false,
                leader: true,
                since: Some(now()),
                holder: Some(replica.to_string()),
                term: 0,
            }),
            acting_until: Mutex::new(None),
            stopped: false.into(),
        })
    }

    /// A replica that acts only once elected.
    pub fn elected(replica: &str) -> Arc<Self> {
        Arc::new(Self {
            standing: watch::Sender::new(Standing {
                replica: replica.to_string(),
                elected: true,
                ..Standing::default()
            }),
            acting_until: Mutex::new(None),
            stopped: false.into(),
        })
    }

    pub fn standing(&self) -> Standing {
        self.standing.borrow().clone()
    }

    /// Changes of where this replica stands.
    pub fn subscribe(&self) -> watch::Receiver<Standing> {
        self.standing.subscribe()
    }

    /// The term to act under, when this replica may act now: it leads, and
    /// (elected) its last confirmed renewal is within the renew deadline.
    /// Checked before every write to the cluster.
    pub fn acting(&self) -> Option<Term> {
        if self.stopped.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let standing = self.standing.borrow();
        if !standing.leader {
            return None;
        }
        if standing.elected {
            let until = *self
                .acting_until
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if until.is_none_or(|until| Instant::now() >= until) {
                return None;
            }
        }
        Some(Term {
            holder: standing.replica.clone(),
            term: standing.term,
            alone: !standing.elected,
        })
    }

    /// Stop acting for good (shutdown).
    pub fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::Release);
        self.standing.send_if_modified(|s| {
            let was = s.leader;
            s.leader = false;
            was
        });
    }

    /// A renewal (or the taking) the API server confirmed, begun at
    /// `started`.
    fn renewed(&self, started: Instant, deadline: Duration, held: &Held) {
        *self
            .acting_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(started + deadline);
        if self.stopped.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        self.standing.send_if_modified(|s| {
            let next = Standing {
                leader: true,
                since: Some(held.since),
                holder: Some(s.replica.clone()),
                term: held.term,
                ..s.clone()
            };
            let changed = *s != next;
            *s = next;
            changed
        });
    }

    /// Another holds the Lease (or nobody does).
    fn follows(&self, holder: Option<String>, term: u64) {
        *self
            .acting_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        self.standing.send_if_modified(|s| {
            let next = Standing {
                leader: false,
                since: None,
                holder: holder.clone(),
                term,
                ..s.clone()
            };
            let changed = *s != next;
            *s = next;
            changed
        });
    }

    /// A client for writes to the cluster: each request other than a read
    /// is refused unless this replica may act at that moment.
    pub fn fenced(self: &Arc<Self>, client: kube::Client) -> kube::Client {
        let namespace = client.default_namespace().to_string();
        let leadership = Arc::clone(self);
        let service = tower::service_fn(move |request: axum::http::Request<kube::client::Body>| {
            let (client, leadership) = (client.clone(), Arc::clone(&leadership));
            async move {
                let reads = [axum::http::Method::GET, axum::http::Method::HEAD];
                if !reads.contains(request.method()) && leadership.acting().is_none() {
                    return Err(kube::Error::Service(Box::new(NotLeading(
                        leadership.standing().replica,
                    ))));
                }
                client.send(request).await
            }
        });
        kube::Client::new(service, namespace)
    }
}

/// A write refused because this replica does not lead.
#[derive(Debug, thiserror::Error)]
#[error("replica {0} does not lead, so it does not write to the cluster")]
pub struct NotLeading(pub String);

/// The Lease as this replica holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    term: u64,
    since: Timestamp,
}

/// What a Lease says, to notice renewals.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    holder: Option<String>,
    renewed: Option<Timestamp>,
    term: u64,
}

impl Seen {
    fn of(spec: &LeaseSpec) -> Self {
        Self {
            holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            renewed: spec.renew_time.as_ref().map(|t| t.0.as_millisecond()),
            term: spec.lease_transitions.unwrap_or(0).max(0) as u64,
        }
    }
}

fn micro_now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

fn millis_of(time: Option<&MicroTime>) -> Option<Timestamp> {
    time.map(|t| t.0.as_millisecond())
}

/// Takes and keeps the Lease for a [`Leadership`].
#[derive(Debug)]
pub struct Elector {
    api: Api<Lease>,
    settings: Settings,
    replica: String,
    leadership: Arc<Leadership>,
}

impl Elector {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        settings: Settings,
        leadership: Arc<Leadership>,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            replica: leadership.standing().replica,
            settings,
            leadership,
        }
    }

    /// Take, keep and follow the Lease until `stopping`; then free it if
    /// held.
    pub async fn run(self, mut stopping: watch::Receiver<bool>) {
        let freed = Arc::new(Notify::new());
        let watching = tokio::spawn(watch_for_free(
            self.api.clone(),
            self.settings.lease.clone(),
            Arc::clone(&freed),
        ));
        let mut seen: Option<(Seen, Instant)> = None;
        let mut last_renewal: Option<Instant> = None;
        while !*stopping.borrow() {
            let started = Instant::now();
            let attempt =
                tokio::time::timeout(self.settings.renew_deadline, self.try_once(&mut seen)).await;
            match attempt {
                Ok(Ok(Some(held))) => {
                    if last_renewal.is_none() {
                        tracing::info!(replica = %self.replica, term = held.term, "leading: this replica acts");
                    }
                    last_renewal = Some(started);
                    self.leadership
                        .renewed(started, self.settings.renew_deadline, &held);
                }
                Ok(Ok(None)) => {
                    if last_renewal.take().is_some() {
                        tracing::warn!(replica = %self.replica, "another replica took the lease; this one no longer acts");
                    }
                    let (holder, term) = seen
                        .as_ref()
                        .map(|(s, _)| (s.holder.clone(), s.term))
                        .unwrap_or_default();
                    self.leadership.follows(holder, term);
                }
                Ok(Err(error)) => {
                    tracing::warn!(replica = %self.replica, %error, "the lease could not be read or written");
                    self.lost_touch(&mut last_renewal, &seen);
                }
                Err(_) => {
                    tracing::warn!(replica = %self.replica, "the lease's API call took longer than the renew deadline");
                    self.lost_touch(&mut last_renewal, &seen);
                }
            }
            let leading = last_renewal.is_some();
            tokio::select! {
                () = tokio::time::sleep(self.settings.retry) => {}
                () = freed.notified(), if !leading => {}
                _ = stopping.changed() => {}
            }
        }
        watching.abort();
        self.leadership.stop();
        if last_renewal.is_some() {
            self.release().await;
        }
    }

    /// No word from the API server: past the renew deadline since the last
    /// confirmed renewal, the leader steps down.
    fn lost_touch(&self, last_renewal: &mut Option<Instant>, seen: &Option<(Seen, Instant)>) {
        if last_renewal.is_some_and(|at| at.elapsed() >= self.settings.renew_deadline) {
            tracing::error!(replica = %self.replica, "no renewal within the renew deadline: this replica stops acting");
            *last_renewal = None;
            let term = seen.as_ref().map_or(0, |(s, _)| s.term);
            self.leadership.follows(None, term);
        }
    }

    /// One look at the Lease: renew it when held, take it when free or
    /// expired. `Some` when this replica holds it after.
    async fn try_once(
        &self,
        seen: &mut Option<(Seen, Instant)>,
    ) -> Result<Option<Held>, kube::Error> {
        let name = &self.settings.lease;
        let Some(mut lease) = self.api.get_opt(name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec_taken(&LeaseSpec::default())),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => Ok(Some(self.held(&created))),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
                Err(error) => Err(error),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let current = Seen::of(&spec);
        if seen.as_ref().is_none_or(|(s, _)| *s != current) {
            *seen = Some((current.clone(), Instant::now()));
        }
        let mine = current.holder.as_deref() == Some(self.replica.as_str());
        if current.holder.is_some() && !mine {
            let duration =
                Duration::from_secs(spec.lease_duration_seconds.unwrap_or(1).max(1) as u64);
            let unrenewed_for = seen.as_ref().map_or(Duration::ZERO, |(_, at)| at.elapsed());
            if unrenewed_for < duration {
                return Ok(None);
            }
            tracing::info!(replica = %self.replica, holder = ?current.holder, "the leader did not renew the lease in time; taking it");
        }
        lease.spec = Some(if mine {
            LeaseSpec {
                renew_time: Some(micro_now()),
                lease_duration_seconds: Some(self.settings.duration_seconds()),
                ..spec
            }
        } else {
            self.spec_taken(&spec)
        });
        // The resourceVersion read is kept: the write is a compare-and-swap.
        match self.api.replace(name, &PostParams::default(), &lease).await {
            Ok(written) => Ok(Some(self.held(&written))),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The Lease taken by this replica: a new term.
    fn spec_taken(&self, before: &LeaseSpec) -> LeaseSpec {
        let now = micro_now();
        LeaseSpec {
            holder_identity: Some(self.replica.clone()),
            lease_duration_seconds: Some(self.settings.duration_seconds()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(before.lease_transitions.map_or(0, |t| t + 1)),
            ..before.clone()
        }
    }

    fn held(&self, lease: &Lease) -> Held {
        let spec = lease.spec.clone().unwrap_or_default();
        Held {
            term: spec.lease_transitions.unwrap_or(0).max(0) as u64,
            since: millis_of(spec.acquire_time.as_ref()).unwrap_or_else(now),
        }
    }

    /// Free the Lease, when still held, for the next leader to take at
    /// once; bounded, as shutdown waits for it.
    async fn release(&self) {
        let release = async {
            let mut lease = self.api.get(&self.settings.lease).await?;
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.replica.as_str()) {
                return Ok(false);
            }
            lease.spec = Some(LeaseSpec {
                holder_identity: None,
                acquire_time: None,
                renew_time: None,
                lease_duration_seconds: Some(1),
                ..spec
            });
            self.api
                .replace(&self.settings.lease, &PostParams::default(), &lease)
                .await
                .map(|_| true)
        };
        match tokio::time::timeout(Duration::from_secs(2), release).await {
            Ok(Ok(true)) => {
                tracing::info!(replica = %self.replica, "the lease is freed for the next leader")
            }
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                tracing::warn!(replica = %self.replica, %error, "the lease could not be freed; the next leader takes it when it expires")
            }
            Err(_) => {
                tracing::warn!(replica = %self.replica, "freeing the lease took too long; the next leader takes it when it expires")
            }
        }
    }
}

/// Watch the Lease, and say when it is freed (or deleted).
async fn watch_for_free(api: Api<Lease>, name: String, freed: Arc<Notify>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(api, config));
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                let free = lease
                    .spec
                    .as_ref()
                    .is_none_or(|s| s.holder_identity.as_deref().is_none_or(str::is_empty));
                if free {
                    freed.notify_one();
                }
            }
            Ok(watcher::Event::Delete(_)) => freed.notify_one(),
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%error, "watching the lease failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// The label of replicas' own Leases.
const REPLICA_LABEL: &str = "verdict.dev/replica";
/// Annotations of a replica's Lease.
const POLICIES: &str = "verdict.dev/policies";
const URL: &str = "verdict.dev/url";
const STARTED: &str = "verdict.dev/started-at";

/// A replica, as `GET /v1/replicas` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Replica {
    pub name: String,
    /// Whether it holds the leader's Lease.
    pub leader: bool,
    /// Since when it leads.
    #[serde(with = "crate::time::text_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub leader_since: Option<Timestamp>,
    #[serde(with = "crate::time::text_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<Timestamp>,
    /// Its last heartbeat.
    #[serde(with = "crate::time::text_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub seen_at: Option<Timestamp>,
    /// The policies it serves: `plugin: name@version (sha256 prefix)`.
    pub policies: Vec<String>,
    pub url: Option<String>,
    /// Whether this is the replica that answered.
    pub this: bool,
}

/// The replicas' own Leases: each replica's heartbeat with what it serves.
#[derive(Debug)]
pub struct Members {
    api: Api<Lease>,
    leader_lease: String,
    replica: String,
    url: Option<String>,
    started: Timestamp,
    duration: Duration,
    /// What this replica serves, published with its next heartbeat.
    policies: watch::Sender<Vec<String>>,
}

/// A Lease name for a replica name (a DNS subdomain).
fn lease_name(replica: &str) -> String {
    let slug: String = replica
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let slug = slug.trim_matches('-');
    let slug = &slug[..slug.len().min(200)];
    format!("verdict-replica-{}", slug.trim_end_matches('-'))
}

impl Members {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        settings: &Settings,
        replica: &str,
    ) -> Arc<Self> {
        Arc::new(Self {
            api: Api::namespaced(client, namespace),
            leader_lease: settings.lease.clone(),
            replica: replica.to_string(),
            url: settings.advertise_url.clone(),
            started: now(),
            duration: settings.duration,
            policies: watch::Sender::new(Vec::new()),
        })
    }

    /// Say what this replica serves (on its next heartbeat, at once).
    pub fn serving(&self, policies: Vec<String>) {
        self.policies.send_replace(policies);
    }

    /// Beat until `stopping`, then take this replica's Lease away.
    pub async fn beat(self: Arc<Self>, mut stopping: watch::Receiver<bool>) {
        let every = (self.duration / 3).max(Duration::from_millis(200));
        let mut policies = self.policies.subscribe();
        while !*stopping.borrow() {
            if let Err(error) = self.publish().await {
                tracing::debug!(%error, "this replica's heartbeat could not be written");
            }
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = policies.changed() => {}
                _ = stopping.changed() => {}
            }
        }
        let name = lease_name(&self.replica);
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            self.api.delete(&name, &DeleteParams::default()),
        )
        .await;
    }

    async fn publish(&self) -> Result<(), kube::Error> {
        let name = lease_name(&self.replica);
        let policies = serde_json::to_string(&*self.policies.borrow()).unwrap_or_default();
        let mut annotations = BTreeMap::from([
            (POLICIES.to_string(), policies),
            (STARTED.to_string(), crate::time::rfc3339(self.started)),
        ]);
        if let Some(url) = &self.url {
            annotations.insert(URL.to_string(), url.clone());
        }
        let spec = LeaseSpec {
            holder_identity: Some(self.replica.clone()),
            lease_duration_seconds: Some(self.duration.as_secs().max(1) as i32),
            renew_time: Some(micro_now()),
            ..LeaseSpec::default()
        };
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    REPLICA_LABEL.to_string(),
                    "true".to_string(),
                )])),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        };
        match self.api.get_opt(&name).await? {
            Some(stored) => {
                lease.metadata.resource_version = stored.metadata.resource_version;
                self.api
                    .replace(&name, &PostParams::default(), &lease)
                    .await?;
            }
            None => {
                self.api.create(&PostParams::default(), &lease).await?;
            }
        }
        Ok(())
    }

    /// The replicas with a heartbeat younger than three lease durations,
    /// the leader marked.
    pub async fn list(&self) -> Result<Vec<Replica>, kube::Error> {
        let leases = self
            .api
            .list(&ListParams::default().labels(&format!("{REPLICA_LABEL}=true")))
            .await?;
        let leader = self.api.get_opt(&self.leader_lease).await?;
        let leader = leader.and_then(|l| l.spec).filter(|s| {
            let renewed = millis_of(s.renew_time.as_ref()).unwrap_or(0);
            let duration = i64::from(s.lease_duration_seconds.unwrap_or(0)) * 1000;
            renewed + duration >= now()
        });
        let holder = leader.as_ref().and_then(|s| s.holder_identity.clone());
        let since = leader
            .as_ref()
            .and_then(|s| millis_of(s.acquire_time.as_ref()));
        let recent = now() - 3 * self.duration.as_millis() as Timestamp;
        let mut replicas: Vec<Replica> = leases
            .items
            .into_iter()
            .filter_map(|lease| {
                let spec = lease.spec?;
                let name = spec.holder_identity?;
                let seen_at = millis_of(spec.renew_time.as_ref());
                if seen_at.is_none_or(|at| at < recent) {
                    return None;
                }
                let annotations = lease.metadata.annotations.unwrap_or_default();
                let leader = holder.as_deref() == Some(name.as_str());
                Some(Replica {
                    leader,
                    leader_since: since.filter(|_| leader),
                    started_at: annotations
                        .get(STARTED)
                        .and_then(|t| crate::time::parse_time(t).ok()),
                    seen_at,
                    policies: annotations
                        .get(POLICIES)
                        .and_then(|p| serde_json::from_str(p).ok())
                        .unwrap_or_default(),
                    url: annotations.get(URL).cloned(),
                    this: name == self.replica,
                    name,
                })
            })
            .collect();
        replicas.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(replicas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(holder: &str, term: u64) -> Term {
        Term::elected(holder, term)
    }

    #[test]
    fn a_later_term_fences_an_earlier_one() {
        let old = term("a", 3);
        let new = term("b", 4);
        assert!(new.may_follow(Some(&old)).is_ok());
        assert!(new.may_follow(None).is_ok());
        assert!(old.may_follow(Some(&old)).is_ok());
        let refused = old.may_follow(Some(&new)).unwrap_err();
        assert!(refused.contains("written by b in term 4"), "{refused}");
        // Two holders of one term cannot both be right: the second is refused.
        assert!(term("c", 4).may_follow(Some(&new)).is_err());
    }

    #[test]
    fn the_timings_must_nest() {
        let mut settings = Settings::default();
        assert!(settings.check().is_ok());
        settings.renew_deadline = settings.duration;
        assert!(settings.check().unwrap_err().contains("renew deadline"));
        settings.renew_deadline = Duration::from_millis(500);
        settings.retry = Duration::from_millis(500);
        assert!(settings.check().unwrap_err().contains("retry period"));
        assert_eq!(
            Settings {
                duration: Duration::from_millis(1500),
                ..Settings::default()
            }
            .duration_seconds(),
            2
        );
    }

    #[test]
    fn a_solo_host_acts_until_stopped_and_an_elected_one_only_while_renewed() {
        let solo = Leadership::solo("one");
        assert_eq!(
            solo.acting(),
            Some(Term {
                alone: true,
                ..term("one", 0)
            })
        );
        solo.stop();
        assert_eq!(solo.acting(), None);

        let elected = Leadership::elected("two");
        assert_eq!(elected.acting(), None);
        let held = Held { term: 7, since: 1 };
        elected.renewed(Instant::now(), Duration::from_secs(60), &held);
        assert_eq!(elected.acting(), Some(term("two", 7)));
        assert!(elected.standing().leader);
        // A renewal confirmed longer ago than the deadline: no more acting,
        // whatever the election loop has noticed.
        elected.renewed(
            Instant::now() - Duration::from_secs(2),
            Duration::from_secs(1),
            &held,
        );
        assert_eq!(elected.acting(), None);
        elected.follows(Some("three".into()), 8);
        let standing = elected.standing();
        assert!(!standing.leader);
        assert_eq!(standing.holder.as_deref(), Some("three"));
    }

    #[test]
    fn replica_lease_names_are_kubernetes_names() {
        assert_eq!(lease_name("verdict-0"), "verdict-replica-verdict-0");
        assert_eq!(lease_name("Host_1.local"), "verdict-replica-host-1-local");
        assert!(lease_name(&"x".repeat(400)).len() <= 253);
    }
}
