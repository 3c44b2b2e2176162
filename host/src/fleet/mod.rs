//! A fleet: the verdicts of many clusters in one view (`verdict fleet`).
//!
//! Each cluster keeps its own verdict — admission and failover go on
//! there when the network between clusters does not — and the fleet
//! follows each one through its HTTP API: a snapshot of its apps, then its
//! event stream, resumed where it broke off. No second copy of any
//! cluster's objects is kept, only each app's summary.
//!
//! - [`members`]: where members come from — a static list, SIG
//!   Multicluster's `ClusterProfile`s, Argo CD's cluster Secrets — and how
//!   each is reached;
//! - [`sse`]: Server-Sent Events read with a bound on every line;
//! - [`follow`]: one member followed, in a task of its own, with backoff;
//! - here: the fleet's state, each member in its own compartment, and what
//!   is shown when a member is not heard from (`unknown`, never a stale
//!   `running`).

pub mod follow;
pub mod members;
pub mod sse;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::events::{Events, Kind};
use crate::time::{Timestamp, now, rfc3339};

/// The fleet's settings.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// A member cluster's verdict, `NAME=URL`; repeat for more (in the
    /// configuration file: `[[fleet.members]]` with `name` and `url`).
    #[arg(long = "member", value_name = "NAME=URL", value_parser = static_member)]
    pub members: Vec<StaticMember>,
    /// How long a member may stay silent (no event, no heartbeat) before
    /// its apps are shown `unknown`, in milliseconds.
    #[arg(long = "unknown-after-ms", value_name = "MS", default_value = "30000", value_parser = crate::settings::positive_millis)]
    pub unknown_after: Duration,
    /// The longest wait between two attempts to reach a member, in
    /// milliseconds (attempts back off from half a second, with jitter).
    #[arg(long = "member-backoff-max-ms", value_name = "MS", default_value = "30000", value_parser = crate::settings::positive_millis)]
    pub backoff_max: Duration,
    /// The largest answer taken from a member (its list of apps), in MiB;
    /// a larger one is refused as the member's error.
    #[arg(long = "member-answer-max-mib", value_name = "MIB", default_value = "64", value_parser = crate::settings::positive)]
    pub answer_max_mib: usize,
    /// The largest event taken from a member's stream, in KiB.
    #[arg(long = "member-event-max-kib", value_name = "KIB", default_value = "1024", value_parser = crate::settings::positive)]
    pub event_max_kib: usize,
    /// The most apps kept of one member: one that sends more is cut off
    /// (shown with why) and tried again later, the others untouched.
    #[arg(long = "member-apps-max", value_name = "N", default_value = "200000", value_parser = crate::settings::positive)]
    pub apps_max: usize,
    /// The most memory one member's apps may take in the fleet, in MiB
    /// (their text, counted as kept): past it the member is cut off.
    #[arg(long = "member-apps-max-mib", value_name = "MIB", default_value = "128", value_parser = crate::settings::positive)]
    pub apps_max_mib: usize,
    /// A file holding the bearer token the fleet presents to its members'
    /// verdicts (a static member may name its own).
    #[arg(long = "member-token-file", value_name = "FILE")]
    pub member_token_file: Option<std::path::PathBuf>,
    /// Follow the `ClusterProfile`s (multicluster.x-k8s.io) of the cluster
    /// the fleet runs in: each is a member.
    #[arg(long = "cluster-profiles")]
    pub cluster_profiles: bool,
    /// Only the ClusterProfiles of this namespace (all namespaces when
    /// unset).
    #[arg(long = "cluster-profile-namespace", value_name = "NAMESPACE")]
    pub profile_namespace: Option<String>,
    /// Only the ClusterProfiles with these labels (a label selector, such
    /// as `multicluster.x-k8s.io/clusterset=prod`).
    #[arg(long = "cluster-profile-selector", value_name = "SELECTOR")]
    pub profile_selector: Option<String>,
    /// The access providers' credential plugins (KEP-5339's provider file:
    /// `{"providers": [{"name", "execConfig"}]}`), by which a profile's
    /// cluster is reached.
    #[arg(long = "clusterprofile-provider-file", value_name = "FILE")]
    pub provider_file: Option<std::path::PathBuf>,
    /// Follow Argo CD's cluster Secrets (labelled
    /// `argocd.argoproj.io/secret-type: cluster`) of this namespace: each
    /// is a member.
    #[arg(long = "argocd-namespace", value_name = "NAMESPACE")]
    pub argocd_namespace: Option<String>,
    /// The Service of verdict in each member cluster reached through its
    /// API server, `NAMESPACE/NAME` (a profile's `verdict.dev/service`
    /// property says otherwise for its cluster).
    #[arg(
        long = "member-service",
        value_name = "NAMESPACE/NAME",
        default_value = "verdict-system/verdict"
    )]
    pub member_service: String,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

impl Settings {
    /// How often a member is asked for a heartbeat: three within the bound,
    /// so that one late heartbeat does not make it unknown.
    pub fn heartbeat(&self) -> Duration {
        (self.unknown_after / 3).max(Duration::from_millis(500))
    }
}

/// A member named in the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct StaticMember {
    pub name: String,
    pub url: String,
    /// A file holding the bearer token for this member's verdict.
    #[serde(default)]
    pub token_file: Option<std::path::PathBuf>,
    /// A PEM file of the certificate authorities its HTTPS is checked
    /// against (else the system's).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// The id of the cluster its verdict should serve (its `--cluster-id`,
    /// or its `kube-system` UID): a verdict that says another is shown
    /// `mismatch` and sent nothing.
    #[serde(default)]
    pub cluster_id: Option<String>,
}

fn static_member(text: &str) -> Result<StaticMember, String> {
    let (name, url) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=URL"))?;
    check_name(name)?;
    Ok(StaticMember {
        name: name.to_string(),
        url: url.to_string(),
        token_file: None,
        ca_file: None,
        cluster_id: None,
    })
}

/// A cluster's name as the fleet shows it and tasks name it: 1 to 253
/// letters, digits, `.`, `_`, `:` or `-` (a UID, a DNS name, an Argo CD
/// cluster's name).
pub fn check_name(name: &str) -> Result<(), String> {
    let fits = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        && name != "."
        && name != "..";
    if fits {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a cluster name (1 to 253 letters, digits, `.`, `_`, `:`, `-`)",
            name.escape_debug()
        ))
    }
}

/// An app's key within its cluster.
pub type AppKey = (Box<str>, Box<str>);

/// What a person should see of an app, as its cluster said it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Display {
    pub status: Box<str>,
    pub text: Box<str>,
    pub severity: Box<str>,
    #[serde(default)]
    pub progress: Option<u8>,
}

/// An app's task in flight, as its cluster said it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transitional {
    pub status: Box<str>,
    pub task: Box<str>,
    pub phase: Box<str>,
    pub progress: u8,
}

impl Transitional {
    fn weight(&self) -> usize {
        self.status.len() + self.task.len() + self.phase.len() + 48
    }
}

/// The part of an app's verdict the fleet keeps (the whole verdict is a
/// request to its cluster away).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub namespace: Box<str>,
    pub name: Box<str>,
    pub stable: Box<str>,
    pub stable_reason: Box<str>,
    #[serde(default)]
    pub transitional: Option<Transitional>,
    pub display: Display,
    #[serde(default)]
    pub ready_replicas: u32,
    #[serde(default)]
    pub expected_replicas: u32,
    /// The cluster's own verdict is stale (its watches broke).
    #[serde(default)]
    pub stale: bool,
}

/// A kept app: its summary and when the fleet learnt it.
#[derive(Debug, Clone)]
pub struct Kept {
    pub summary: Summary,
    pub at: Timestamp,
}

impl Summary {
    /// What keeping it costs, in bytes: its texts and the record around
    /// them (and the map's entry, its key's texts again).
    pub fn weight(&self) -> usize {
        let display = &self.display;
        let texts = 2 * (self.namespace.len() + self.name.len())
            + self.stable.len()
            + self.stable_reason.len()
            + display.status.len()
            + display.text.len()
            + display.severity.len()
            + self.transitional.as_ref().map_or(0, Transitional::weight);
        texts + 192
    }
}

impl Kept {
    /// The stable status shown: its own while its cluster is live, else
    /// `unknown`.
    fn shown(&self, reach: Reach) -> &str {
        if reach == Reach::Live {
            &self.summary.stable
        } else {
            UNKNOWN
        }
    }
}

/// Where a member stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reach {
    /// Not reached yet since it became a member.
    Connecting,
    /// Its apps are current: synced, and heard from within the bound.
    Live,
    /// Not heard from within the bound: its apps are shown `unknown`.
    Lost,
    /// Its verdict serves another cluster than its source says: nothing
    /// is shown of it or sent to it.
    Mismatch,
}

/// One member's state, behind its own lock.
#[derive(Debug)]
pub struct MemberState {
    pub apps: BTreeMap<AppKey, Kept>,
    /// What `apps` weigh ([`Summary::weight`]), against the bound.
    pub apps_bytes: usize,
    pub reach: Reach,
    /// When `reach` last changed.
    pub since: Timestamp,
    /// The last time anything whole came from it (an answer, an event, a
    /// heartbeat).
    pub last_seen: Option<Timestamp>,
    /// When its apps were last listed whole.
    pub synced_at: Option<Timestamp>,
    /// Its verdict's version, from its `/healthz`.
    pub version: Option<String>,
    /// The cluster its verdict says it serves (`/v1/cluster`).
    pub cluster_id: Option<String>,
    /// Why the last attempt to follow it failed.
    pub last_error: Option<String>,
    /// The last event id of its stream, where a reconnection resumes.
    pub last_event_id: Option<u64>,
    /// Full listings taken (at the start and after each `resync`).
    pub syncs: u64,
    /// Attempts that failed.
    pub failures: u64,
    /// Events taken from its stream.
    pub events: u64,
    /// Its verdict, reached, while a session is open.
    pub(crate) conn: Option<follow::Conn>,
}

/// A member cluster.
#[derive(Debug)]
pub struct Member {
    pub name: Arc<str>,
    /// Where it came from: `static`, `ClusterProfile NS/NAME`, `Argo CD
    /// Secret NS/NAME`.
    pub origin: String,
    /// How its verdict is reached, said for people (a URL or a Service
    /// through an API server).
    pub target: String,
    /// The cluster id its source says it has (a static member's
    /// `cluster-id`, a ClusterProfile's property, an Argo CD Secret's
    /// annotation), checked against what its verdict says.
    pub expected_id: Option<String>,
    pub state: Mutex<MemberState>,
    /// Its follower; dropped with the member.
    follower: Mutex<Option<tokio::task::AbortHandle>>,
    /// How requests reach its verdict.
    pub(crate) access: members::Access,
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(task) = self.follower.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

impl Member {
    /// The cluster id a task for it is sent with, for its verdict to check:
    /// what its source says, else what its verdict said.
    pub fn task_cluster_id(&self) -> Option<String> {
        self.expected_id
            .clone()
            .or_else(|| self.lock().cluster_id.clone())
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The fleet: its members and its event stream.
#[derive(Debug)]
pub struct Fleet {
    members: RwLock<BTreeMap<Arc<str>, Arc<Member>>>,
    pub events: Arc<Events>,
    pub settings: Settings,
    /// Members by the source that named them, so that a source's new list
    /// replaces only its own.
    sources: Mutex<BTreeMap<members::Source, Vec<members::Spec>>>,
}

/// A member as `/v1/fleet/clusters` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ClusterView {
    pub name: String,
    pub origin: String,
    pub target: String,
    /// `connecting`, `live`, `lost` or `mismatch` (its verdict serves
    /// another cluster than its source says).
    pub reach: &'static str,
    /// Since when (RFC 3339).
    pub since: String,
    /// The last time anything came from it (RFC 3339).
    pub last_seen: Option<String>,
    pub last_seen_age_ms: Option<u64>,
    pub synced_at: Option<String>,
    pub version: Option<String>,
    /// The cluster its verdict says it serves, and what its source says
    /// it should.
    pub cluster_id: Option<String>,
    pub expected_cluster_id: Option<String>,
    pub last_error: Option<String>,
    pub apps: usize,
    /// Its apps by the status shown (`unknown` for all of them while it is
    /// not `live`).
    pub statuses: BTreeMap<String, usize>,
    pub syncs: u64,
    pub failures: u64,
    pub events: u64,
}

/// An app as the fleet shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct FleetApp {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    /// The stable status, or `unknown` while its cluster is not heard from.
    pub stable: String,
    pub stable_reason: String,
    #[schema(value_type = Option<Object>)]
    pub transitional: Option<Transitional>,
    #[schema(value_type = Object)]
    pub display: Display,
    pub ready_replicas: u32,
    pub expected_replicas: u32,
    /// The cluster's own verdict is stale, or its cluster is not heard
    /// from.
    pub stale: bool,
    /// When the fleet learnt this verdict (RFC 3339).
    pub at: String,
    /// While its cluster is not heard from: what was last known, and how
    /// old it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub last_known: Option<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_known_age_ms: Option<u64>,
}

/// The status shown for the apps of a cluster not heard from.
pub const UNKNOWN: &str = "unknown";

impl FleetApp {
    fn of(cluster: &str, kept: &Kept, reach: Reach, last_seen: Option<Timestamp>) -> Self {
        let summary = &kept.summary;
        let mut app = FleetApp {
            cluster: cluster.to_string(),
            namespace: summary.namespace.to_string(),
            name: summary.name.to_string(),
            stable: summary.stable.to_string(),
            stable_reason: summary.stable_reason.to_string(),
            transitional: summary.transitional.clone(),
            display: summary.display.clone(),
            ready_replicas: summary.ready_replicas,
            expected_replicas: summary.expected_replicas,
            stale: summary.stale,
            at: rfc3339(kept.at),
            last_known: None,
            last_known_age_ms: None,
        };
        if reach != Reach::Live {
            let heard = last_seen.unwrap_or(kept.at);
            let age = u64::try_from(now().saturating_sub(heard)).unwrap_or(0);
            app.stable = UNKNOWN.to_string();
            app.stable_reason = format!(
                "cluster {cluster} not heard from for {}",
                humantime::format_duration(Duration::from_secs(age / 1000))
            );
            app.transitional = None;
            app.display = Display {
                status: UNKNOWN.into(),
                text: format!(
                    "{}; last known {} ({})",
                    app.stable_reason, summary.display.status, summary.display.text
                )
                .into(),
                severity: "warning".into(),
                progress: None,
            };
            app.stale = true;
            app.last_known = Some(summary.clone());
            app.last_known_age_ms = Some(age);
        }
        app
    }
}

/// Which apps a listing wants.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub cluster: Option<String>,
    pub namespace: Option<String>,
    /// A stable or displayed status (`unknown` for those of lost clusters).
    pub status: Option<String>,
}

impl Fleet {
    pub fn new(settings: Settings, events: Arc<Events>) -> Arc<Self> {
        Arc::new(Self {
            members: RwLock::new(BTreeMap::new()),
            events,
            settings,
            sources: Mutex::new(BTreeMap::new()),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Arc<str>, Arc<Member>>> {
        self.members
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One member, by name.
    pub fn member(&self, name: &str) -> Option<Arc<Member>> {
        self.read().get(name).cloned()
    }

    /// Every member, by name.
    pub fn members(&self) -> Vec<Arc<Member>> {
        self.read().values().cloned().collect()
    }

    /// Each member as `/v1/fleet/clusters` shows it.
    pub fn clusters(&self) -> Vec<ClusterView> {
        let at = now();
        self.members()
            .iter()
            .map(|member| {
                let state = member.lock();
                let mut statuses = BTreeMap::new();
                for kept in state.apps.values() {
                    *statuses
                        .entry(kept.shown(state.reach).to_string())
                        .or_default() += 1;
                }
                ClusterView {
                    name: member.name.to_string(),
                    origin: member.origin.clone(),
                    target: member.target.clone(),
                    reach: match state.reach {
                        Reach::Connecting => "connecting",
                        Reach::Live => "live",
                        Reach::Lost => "lost",
                        Reach::Mismatch => "mismatch",
                    },
                    since: rfc3339(state.since),
                    last_seen: state.last_seen.map(rfc3339),
                    last_seen_age_ms: state
                        .last_seen
                        .map(|t| u64::try_from(at.saturating_sub(t)).unwrap_or(0)),
                    synced_at: state.synced_at.map(rfc3339),
                    version: state.version.clone(),
                    cluster_id: state.cluster_id.clone(),
                    expected_cluster_id: member.expected_id.clone(),
                    last_error: state.last_error.clone(),
                    apps: state.apps.len(),
                    statuses,
                    syncs: state.syncs,
                    failures: state.failures,
                    events: state.events,
                }
            })
            .collect()
    }

    /// The apps a filter wants, by cluster, namespace and name.
    pub fn apps(&self, filter: &Filter) -> Vec<FleetApp> {
        let mut out = Vec::new();
        for member in self.members() {
            if filter
                .cluster
                .as_deref()
                .is_some_and(|c| c != &*member.name)
            {
                continue;
            }
            let state = member.lock();
            for kept in state.apps.values() {
                if filter
                    .namespace
                    .as_deref()
                    .is_some_and(|n| n != &*kept.summary.namespace)
                {
                    continue;
                }
                let app = FleetApp::of(&member.name, kept, state.reach, state.last_seen);
                if filter
                    .status
                    .as_deref()
                    .is_some_and(|s| s != app.stable && s != &*app.display.status)
                {
                    continue;
                }
                out.push(app);
            }
        }
        out
    }

    /// Each app's shown stable status, by cluster, for the metrics; at most
    /// `limit` apps, and how many more there are.
    pub fn app_statuses(&self, limit: usize) -> (Vec<(Arc<str>, AppKey, String)>, usize) {
        let mut out = Vec::new();
        let mut omitted = 0;
        for member in self.members() {
            let state = member.lock();
            for (key, kept) in &state.apps {
                if out.len() >= limit {
                    omitted += 1;
                    continue;
                }
                out.push((
                    Arc::clone(&member.name),
                    key.clone(),
                    kept.shown(state.reach).to_string(),
                ));
            }
        }
        (out, omitted)
    }

    /// Publish a member's event on the fleet's stream.
    fn announce(&self, cluster: &str, kind: Kind, app: Option<String>, data: &serde_json::Value) {
        self.events.publish_in(Some(cluster), kind, app, data);
    }

    /// Say that a member's reach changed, on the stream.
    fn announce_reach(&self, member: &Member, state: &MemberState) {
        let data = serde_json::json!({
            "cluster": &*member.name,
            "reach": state.reach,
            "since": rfc3339(state.since),
            "last_seen": state.last_seen.map(rfc3339),
            "apps": state.apps.len(),
            "last_error": state.last_error,
        });
        self.announce(&member.name, Kind::Cluster, None, &data);
    }

    /// Mark the members not heard from within the bound as lost, once
    /// each; returns how many turned lost.
    pub fn mark_silent(&self) -> usize {
        let at = now();
        let bound = i64::try_from(self.settings.unknown_after.as_millis()).unwrap_or(i64::MAX);
        let mut turned = 0;
        for member in self.members() {
            let mut state = member.lock();
            let silent = state
                .last_seen
                .is_none_or(|seen| at.saturating_sub(seen) > bound);
            let connecting_too_long =
                state.reach == Reach::Connecting && at.saturating_sub(state.since) > bound;
            if (state.reach == Reach::Live && silent) || connecting_too_long {
                state.reach = Reach::Lost;
                state.since = at;
                turned += 1;
                tracing::warn!(cluster = %member.name, last_seen = ?state.last_seen.map(rfc3339), "member cluster not heard from: its apps are unknown");
                self.announce_reach(&member, &state);
            }
        }
        turned
    }

    /// Watch for silent members until the fleet is dropped.
    pub fn watch_silence(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let fleet = Arc::downgrade(self);
        let every = (self.settings.unknown_after / 10)
            .clamp(Duration::from_millis(100), Duration::from_secs(1));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(fleet) = fleet.upgrade() else {
                    return;
                };
                fleet.mark_silent();
            }
        })
    }

    /// A source's members, in full: those it no longer names leave the
    /// fleet (and their apps with them), new ones are followed, changed
    /// ones followed anew. A name another source already has is kept by
    /// the source first in [`members::Source`]'s order.
    pub fn set_members(self: &Arc<Self>, source: members::Source, specs: Vec<members::Spec>) {
        let mut sources = self
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sources.insert(source, specs);
        let mut wanted: BTreeMap<Arc<str>, &members::Spec> = BTreeMap::new();
        for (source, specs) in sources.iter() {
            for spec in specs {
                match wanted.get(spec.name.as_str()) {
                    Some(kept) => tracing::warn!(
                        cluster = %spec.name, kept = %kept.origin, ignored = %spec.origin, ?source,
                        "two members have one name; the first is kept"
                    ),
                    None => {
                        wanted.insert(Arc::from(spec.name.as_str()), spec);
                    }
                }
            }
        }
        let mut members = self
            .members
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let gone: Vec<Arc<str>> = members
            .keys()
            .filter(|name| !wanted.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(member) = members.remove(&name) {
                tracing::info!(cluster = %name, origin = %member.origin, "member cluster removed from the fleet");
                let data = serde_json::json!({"cluster": &*name, "reach": "removed"});
                self.announce(&name, Kind::Cluster, None, &data);
            }
        }
        for (name, spec) in wanted {
            let unchanged = members.get(&name).is_some_and(|m| {
                m.access.same_as(&spec.access)
                    && m.origin == spec.origin
                    && m.expected_id == spec.expected_id
            });
            if unchanged {
                continue;
            }
            let at = now();
            let member = Arc::new(Member {
                name: Arc::clone(&name),
                origin: spec.origin.clone(),
                target: spec.access.describe(),
                expected_id: spec.expected_id.clone(),
                state: Mutex::new(MemberState {
                    apps: BTreeMap::new(),
                    apps_bytes: 0,
                    reach: Reach::Connecting,
                    since: at,
                    last_seen: None,
                    synced_at: None,
                    version: None,
                    cluster_id: None,
                    last_error: None,
                    last_event_id: None,
                    syncs: 0,
                    failures: 0,
                    events: 0,
                    conn: None,
                }),
                follower: Mutex::new(None),
                access: spec.access.clone(),
            });
            let task = tokio::spawn(follow::follow(Arc::downgrade(self), Arc::clone(&member)));
            *member
                .follower
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task.abort_handle());
            tracing::info!(cluster = %name, origin = %member.origin, target = %member.target, "following a member cluster");
            members.insert(name, member);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names_are_path_safe() {
        for good in [
            "east",
            "c1",
            "5b1a-4f0e",
            "prod.eu-west-1",
            "arn:aws:x",
            "in_cluster",
        ] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "e\u{202e}ast",
            &"x".repeat(254),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(static_member("east=http://127.0.0.1:1").is_ok());
        assert!(static_member("east").is_err());
        assert!(static_member("a/b=http://x").is_err());
    }

    fn kept(stable: &str) -> Kept {
        Kept {
            summary: Summary {
                namespace: "shop".into(),
                name: "web".into(),
                stable: stable.into(),
                stable_reason: "every replica is ready".into(),
                transitional: None,
                display: Display {
                    status: stable.into(),
                    text: "ok".into(),
                    severity: "info".into(),
                    progress: None,
                },
                ready_replicas: 2,
                expected_replicas: 2,
                stale: false,
            },
            at: now() - 5_000,
        }
    }

    #[test]
    fn a_lost_cluster_shows_unknown_never_its_last_status() {
        let live = FleetApp::of("east", &kept("running"), Reach::Live, Some(now()));
        assert_eq!(live.stable, "running");
        assert!(live.last_known.is_none());
        for reach in [Reach::Lost, Reach::Connecting] {
            let app = FleetApp::of("east", &kept("running"), reach, Some(now() - 42_000));
            assert_eq!(app.stable, UNKNOWN);
            assert_eq!(&*app.display.status, UNKNOWN);
            assert!(app.stale);
            assert_eq!(app.last_known.as_ref().unwrap().stable.as_ref(), "running");
            assert!(app.last_known_age_ms.unwrap() >= 42_000);
            assert!(
                app.display.text.contains("last known running"),
                "{}",
                app.display.text
            );
        }
    }
}
