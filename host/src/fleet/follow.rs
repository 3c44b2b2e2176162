//! One member followed: in a task of its own, its event stream opened
//! first, then its apps listed whole (so that nothing published between
//! the two is missed), then each event applied as it comes; a `resync`
//! lists again, a broken stream resumes from its last event id. Every
//! answer and event is bounded; a member silent past the bound is cut off
//! and tried again, backing off with jitter. Nothing a member sends can
//! cost another member anything: each has its own task, lock and bounds.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::http::{Method, Request, StatusCode, header};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::{Value, json};

use super::members::{Way, service_proxy_prefix};
use super::sse::{Item, Parser};
use super::{Fleet, Kept, Member, Reach, Summary};
use crate::events::Kind;
use crate::time::now;

/// A verdict, reached: a client and the path verdict is under. The one
/// way anything of verdict's reaches another verdict — the fleet its
/// members, the kubectl plugin and `verdict history` the host they ask —
/// with the same bounds, timeouts and reading of errors.
#[derive(Clone)]
pub struct Conn {
    client: kube::Client,
    /// `""` for a verdict at the server's root; else the service proxy's
    /// path, or the URL's path.
    prefix: String,
    /// The namespace of the kubeconfig's context (`default` without one).
    namespace: String,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Conn({})", self.prefix)
    }
}

/// How long a member may take to answer a request (not a stream).
const ANSWER_WITHIN: Duration = Duration::from_secs(20);
/// The largest error answer read, to say what it was.
const ERROR_MAX: usize = 64 * 1024;

/// An answer of a member's verdict.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

/// Why a member could not be asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// Not reached since it became a member, or not heard from within the
    /// bound.
    #[error("cluster {cluster} is unreachable: {why}")]
    Unreachable { cluster: String, why: String },
    /// It was asked and did not answer as it should.
    #[error("cluster {cluster}'s verdict did not answer: {why}")]
    Failed { cluster: String, why: String },
}

/// The member's client, made from its access.
async fn connect(member: &Member) -> Result<Conn, String> {
    connect_to(&member.access, &kube::config::KubeConfigOptions::default()).await
}

/// A client to the verdict `access` says, with the kubeconfig's `options`
/// (its context): its Service looked up when it is behind one.
pub(crate) async fn connect_to(
    access: &super::members::Access,
    options: &kube::config::KubeConfigOptions,
) -> Result<Conn, String> {
    let (config, service, path) = match &access.way {
        Way::Unreachable(why) => return Err(why.clone()),
        Way::InCluster { service } => (
            kube::Config::incluster().map_err(|e| format!("in-cluster configuration: {e}"))?,
            Some(service.clone()),
            String::new(),
        ),
        Way::Kubeconfig {
            kubeconfig,
            service,
            path,
            ..
        } => (
            kube::Config::from_custom_kubeconfig((**kubeconfig).clone(), options)
                .await
                .map_err(|e| format!("its kubeconfig: {e}"))?,
            service.clone(),
            path.clone(),
        ),
    };
    let mut config = config;
    // Streams stay open; every request here has a bound of its own.
    config.read_timeout = None;
    config.write_timeout = Some(ANSWER_WITHIN);
    config.connect_timeout = Some(Duration::from_secs(10));
    config.default_retry = false;
    let namespace = config.default_namespace.clone();
    let client = kube::Client::try_from(config).map_err(|e| format!("its client: {e}"))?;
    let mut conn = Conn {
        client,
        prefix: path,
        namespace,
    };
    if let Some((namespace, name)) = service {
        let path = format!(
            "/api/v1/namespaces/{}/services/{}",
            super::members::segment(&namespace),
            super::members::segment(&name)
        );
        let answer = conn
            .send(Method::GET, &path, None, ERROR_MAX, &[])
            .await
            .map_err(|e| format!("verdict's Service {namespace}/{name}: {e}"))?;
        if !answer.status.is_success() {
            return Err(format!(
                "verdict's Service {namespace}/{name}: {}",
                said(&answer)
            ));
        }
        let service: Value = serde_json::from_slice(&answer.body)
            .map_err(|e| format!("verdict's Service {namespace}/{name} is not JSON: {e}"))?;
        conn.prefix = service_proxy_prefix(&namespace, &name, &service);
    }
    Ok(conn)
}

/// What an error answer says: verdict's message, the API server's, or
/// the start of the text.
fn said(answer: &Answer) -> String {
    format!(
        "answered {}: {}",
        answer.status,
        crate::text::error_text(&answer.body)
    )
}

impl Conn {
    /// Open a request; the answer's head, its body still to read.
    async fn open(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(header::HeaderName, String)],
    ) -> Result<axum::http::Response<kube::client::Body>, String> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(kube::client::Body::from(body.unwrap_or_default()))
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(ANSWER_WITHIN, self.client.send(request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("no answer within {} s", ANSWER_WITHIN.as_secs())),
        }
    }

    /// The Kubernetes client it reaches verdict with.
    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The namespace of the kubeconfig's context.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A whole answer of at most `max` bytes.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        max: usize,
        headers: &[(header::HeaderName, String)],
    ) -> Result<Answer, String> {
        let response = self.open(method, path, body, headers).await?;
        let status = response.status();
        let max = if status.is_success() { max } else { ERROR_MAX };
        let body = tokio::time::timeout(ANSWER_WITHIN, read_bounded(response.into_body(), max))
            .await
            .map_err(|_| format!("its answer took longer than {} s", ANSWER_WITHIN.as_secs()))??;
        Ok(Answer { status, body })
    }
}

/// A body read whole, refused past `max` bytes without reading on.
async fn read_bounded(mut body: kube::client::Body, max: usize) -> Result<Bytes, String> {
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if let Some(data) = frame.data_ref() {
            if out.len() + data.len() > max {
                return Err(if max.is_multiple_of(1 << 20) {
                    format!("its answer is larger than {} MiB: not read", max >> 20)
                } else {
                    format!("its answer is larger than {} KiB: not read", max / 1024)
                });
            }
            out.extend_from_slice(data);
        }
    }
    Ok(out.freeze())
}

impl Member {
    /// The client to its verdict, while it is live.
    fn conn(&self) -> Result<Conn, CallError> {
        let unreachable = |why: String| CallError::Unreachable {
            cluster: self.name.to_string(),
            why,
        };
        let state = self.lock();
        match (&state.conn, state.reach) {
            (Some(conn), Reach::Live) => Ok(conn.clone()),
            (_, Reach::Mismatch) => {
                Err(unreachable(state.last_error.clone().unwrap_or_else(|| {
                    "its verdict serves another cluster".into()
                })))
            }
            (_, Reach::Connecting) => Err(unreachable(
                state
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "not reached yet".into()),
            )),
            (_, _) => Err(unreachable(format!(
                "not heard from since {}",
                state
                    .last_seen
                    .map_or_else(|| "it became a member".into(), crate::time::rfc3339)
            ))),
        }
    }

    /// Ask its verdict: `path` (with its query) under verdict's root. Only
    /// while it is live: a member not heard from is not asked, and the
    /// asker is told so.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        max: usize,
    ) -> Result<Answer, CallError> {
        let conn = self.conn()?;
        conn.send(method, path, body, max, &[])
            .await
            .map_err(|why| CallError::Failed {
                cluster: self.name.to_string(),
                why,
            })
    }
}

/// Waits between attempts: from half a second, doubling to the most, each
/// drawn between half and all of it, so that members lost together are not
/// tried again together.
#[derive(Debug)]
struct Backoff {
    next: Duration,
    max: Duration,
    draws: u64,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(500);

    fn new(max: Duration) -> Self {
        Self {
            next: Self::FIRST.min(max),
            max,
            draws: 0,
        }
    }

    fn reset(&mut self) {
        self.next = Self::FIRST.min(self.max);
    }

    fn wait(&mut self) -> Duration {
        use std::hash::BuildHasher as _;
        self.draws += 1;
        let random = std::collections::hash_map::RandomState::new().hash_one(self.draws);
        let span = self.next.as_millis() as u64;
        let wait = Duration::from_millis(span / 2 + random % (span / 2 + 1));
        self.next = (self.next * 2).min(self.max);
        wait
    }
}

/// Follow a member until it leaves the fleet (its task is aborted then) or
/// the fleet is gone.
pub async fn follow(fleet: Weak<Fleet>, member: Arc<Member>) {
    let Some(settings) = fleet.upgrade().map(|f| f.settings.clone()) else {
        return;
    };
    let mut backoff = Backoff::new(settings.backoff_max);
    loop {
        let started = Instant::now();
        let outcome = session(&fleet, &member).await;
        let lasted = started.elapsed();
        let Some(fleet) = fleet.upgrade() else {
            return;
        };
        {
            let mut state = member.lock();
            state.conn = None;
            match &outcome {
                Ok(ended) => {
                    let ended = crate::text::printable(ended);
                    tracing::info!(cluster = %member.name, %ended, "member's stream ended; reconnecting");
                }
                Err(error) => {
                    state.failures += 1;
                    // What a member said, escaped: it may not forge a log
                    // line or move a terminal's cursor.
                    let error = &crate::text::printable(error);
                    tracing::warn!(cluster = %member.name, %error, "member cluster could not be followed");
                    let changed = state.last_error.as_deref() != Some(error.as_str());
                    state.last_error = Some(error.clone());
                    if changed && state.reach != Reach::Live {
                        fleet.announce_reach(&member, &state);
                    }
                }
            }
        }
        drop(fleet);
        // A session that stayed up a while was a success: start over.
        if lasted > settings.unknown_after {
            backoff.reset();
        }
        let wait = if outcome.as_ref().is_ok_and(|e| e == SHUTDOWN) {
            Duration::from_secs(1)
        } else {
            backoff.wait()
        };
        tokio::time::sleep(wait).await;
    }
}

/// How a session ends when the member shuts down (it says when to come
/// back: a second).
const SHUTDOWN: &str = "the member is shutting down";

/// The member's stream event as verdict writes it.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    app: Option<String>,
    #[serde(default)]
    data: Value,
}

/// One connection to a member: its stream, a listing when needed, then
/// each event. Ends with why, `Ok` when the member ended it.
async fn session(fleet: &Weak<Fleet>, member: &Arc<Member>) -> Result<String, String> {
    let settings = fleet
        .upgrade()
        .map(|f| f.settings.clone())
        .ok_or("the fleet is gone")?;
    let conn = connect(member).await?;
    let resume = {
        let state = member.lock();
        state.synced_at.and(state.last_event_id)
    };
    let mut headers = vec![(header::ACCEPT, "text/event-stream".to_string())];
    if let Some(id) = resume {
        headers.push((
            header::HeaderName::from_static("last-event-id"),
            id.to_string(),
        ));
    }
    let path = format!(
        "/v1/events?heartbeat-ms={}",
        settings.heartbeat().as_millis()
    );
    let response = conn.open(Method::GET, &path, None, &headers).await?;
    let status = response.status();
    if !status.is_success() {
        let body = read_bounded(response.into_body(), ERROR_MAX)
            .await
            .unwrap_or_default();
        return Err(format!(
            "its event stream: {}",
            said(&Answer { status, body })
        ));
    }
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        return Err("its event stream is not text/event-stream".into());
    }
    let mut body = response.into_body();
    member.lock().conn = Some(conn.clone());
    if resume.is_none() {
        let fleet = fleet.upgrade().ok_or("the fleet is gone")?;
        sync(&fleet, member, &conn, &settings).await?;
    }
    let bound = settings.unknown_after;
    let mut parser = Parser::new(settings.event_max_kib * 1024);
    let mut items = Vec::new();
    let mut heard = Instant::now();
    loop {
        let frame = match tokio::time::timeout_at((heard + bound).into(), body.frame()).await {
            Err(_) => {
                return Err(format!(
                    "its stream said nothing whole for {}",
                    humantime::format_duration(bound)
                ));
            }
            Ok(None) => return Ok("the stream ended".into()),
            Ok(Some(Err(error))) => return Err(format!("its stream broke: {error}")),
            Ok(Some(Ok(frame))) => frame,
        };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        parser
            .feed(data, &mut items)
            .map_err(|e| format!("its stream: {e}"))?;
        for item in items.drain(..) {
            heard = Instant::now();
            let Some(fleet) = fleet.upgrade() else {
                return Ok("the fleet is gone".into());
            };
            let (kind, id, data) = match item {
                Item::Comment => {
                    seen(&fleet, member);
                    continue;
                }
                Item::Event { kind, id, data } => (kind, id, data),
            };
            match kind.as_str() {
                "resync" => {
                    sync(&fleet, member, &conn, &settings)
                        .await
                        .map_err(|e| format!("listing its apps again: {e}"))?;
                    continue;
                }
                "shutdown" => return Ok(SHUTDOWN.into()),
                "verdict" | "task" | "override" | "failover" | "delivery" | "plugin" => {
                    apply(&fleet, member, &kind, &data)?;
                }
                _ => {}
            }
            seen(&fleet, member);
            if let Some(id) = id.and_then(|id| id.parse::<u64>().ok()) {
                member.lock().last_event_id = Some(id);
            }
        }
    }
}

/// Something whole came from the member: it is there. A member that was
/// lost and resumed its stream is live again.
fn seen(fleet: &Fleet, member: &Member) {
    let mut state = member.lock();
    state.last_seen = Some(now());
    if state.reach != Reach::Live && state.synced_at.is_some() {
        state.reach = Reach::Live;
        state.since = now();
        state.last_error = None;
        tracing::info!(cluster = %member.name, "member cluster heard from again");
        fleet.announce_reach(member, &state);
    }
}

/// One event of the member's: a verdict is kept; every event is passed on
/// to the fleet's stream with its cluster.
fn apply(fleet: &Fleet, member: &Member, kind: &str, data: &str) -> Result<(), String> {
    let mut wire: Wire = serde_json::from_str(data)
        .map_err(|e| format!("its {kind} event is not verdict's: {e}"))?;
    // Which cluster an event is of is the fleet's to say: a member's own
    // word would put its events in another member's row.
    if let Value::Object(data) = &mut wire.data {
        data.remove("cluster");
    }
    let kind = match kind {
        "verdict" => {
            let summary = Summary::deserialize(&wire.data)
                .map_err(|e| format!("its verdict event is not an app's verdict: {e}"))?;
            let key = (summary.namespace.clone(), summary.name.clone());
            let weight = summary.weight();
            let mut state = member.lock();
            state.events += 1;
            let was = state.apps.get(&key).map_or(0, |k| k.summary.weight());
            let apps = state.apps.len() + usize::from(was == 0);
            let bytes = state.apps_bytes - was + weight;
            let settings = &fleet.settings;
            if apps > settings.apps_max || bytes > settings.apps_max_mib << 20 {
                // Cut off: what it sent is let go, and it is tried again
                // later from a fresh listing (bounded too).
                state.apps.clear();
                state.apps_bytes = 0;
                state.synced_at = None;
                state.last_event_id = None;
                return Err(over_bounds(apps, bytes, settings));
            }
            state.apps_bytes = bytes;
            state.apps.insert(key, Kept { summary, at: now() });
            Kind::Verdict
        }
        "task" => Kind::Task,
        "override" => Kind::Override,
        "failover" => Kind::Failover,
        "delivery" => Kind::Delivery,
        _ => Kind::Plugin,
    };
    if kind != Kind::Verdict {
        member.lock().events += 1;
    }
    fleet.announce(&member.name, kind, wire.app, &wire.data);
    Ok(())
}

/// Why a member is cut off: more apps, or more of them, than the bounds.
fn over_bounds(apps: usize, bytes: usize, settings: &super::Settings) -> String {
    format!(
        "cut off: it sent {apps} apps ({} MiB kept), over the bounds of {} apps and {} MiB (--member-apps-max, --member-apps-max-mib)",
        bytes >> 20,
        settings.apps_max,
        settings.apps_max_mib
    )
}

/// verdict's list of apps.
#[derive(Deserialize)]
struct Listing {
    apps: Vec<Summary>,
}

/// List the member's apps whole, replacing what was kept of it; its
/// version too.
async fn sync(
    fleet: &Fleet,
    member: &Arc<Member>,
    conn: &Conn,
    settings: &super::Settings,
) -> Result<(), String> {
    let max = settings.answer_max_mib.saturating_mul(1024 * 1024);
    let answer = conn.send(Method::GET, "/v1/apps", None, max, &[]).await?;
    if !answer.status.is_success() {
        return Err(format!("its apps: {}", said(&answer)));
    }
    // Parsing thousands of apps is work for a thread that may wait.
    let listing =
        tokio::task::spawn_blocking(move || serde_json::from_slice::<Listing>(&answer.body))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("its apps are not verdict's list: {e}"))?;
    let health = match conn
        .send(Method::GET, "/healthz", None, ERROR_MAX, &[])
        .await
    {
        Ok(answer) if answer.status.is_success() => {
            serde_json::from_slice::<Value>(&answer.body).unwrap_or_default()
        }
        _ => Value::Null,
    };
    let version = health["version"].as_str().map(str::to_string);
    // Which cluster its verdict serves: its own word, checked against its
    // source's. A member that serves another is shown `mismatch`, and
    // nothing of it is shown or sent to it.
    let cluster_id = match conn
        .send(Method::GET, "/v1/cluster", None, ERROR_MAX, &[])
        .await
    {
        Ok(answer) if answer.status.is_success() => serde_json::from_slice::<Value>(&answer.body)
            .ok()
            .and_then(|v| v["id"].as_str().map(str::to_string)),
        _ => health["cluster_id"].as_str().map(str::to_string),
    };
    if let (Some(expected), Some(said)) = (&member.expected_id, &cluster_id)
        && expected != said
    {
        let why = format!(
            "identity mismatch: its verdict serves cluster `{}`, not `{}` as its source ({}) says; nothing is shown of it or sent to it",
            crate::text::printable(said),
            expected,
            member.origin
        );
        let mut state = member.lock();
        state.apps.clear();
        state.apps_bytes = 0;
        state.cluster_id = cluster_id;
        if state.reach != Reach::Mismatch {
            state.reach = Reach::Mismatch;
            state.since = now();
            state.last_error = Some(why.clone());
            fleet.announce_reach(member, &state);
        }
        return Err(why);
    }
    let at = now();
    let bytes: usize = listing.apps.iter().map(Summary::weight).sum();
    if listing.apps.len() > settings.apps_max || bytes > settings.apps_max_mib << 20 {
        return Err(over_bounds(listing.apps.len(), bytes, settings));
    }
    let apps = listing
        .apps
        .into_iter()
        .map(|summary| {
            (
                (summary.namespace.clone(), summary.name.clone()),
                Kept { summary, at },
            )
        })
        .collect();
    let mut state = member.lock();
    state.apps = apps;
    state.apps_bytes = bytes;
    state.synced_at = Some(at);
    state.last_seen = Some(at);
    state.syncs += 1;
    state.version = version.or(state.version.take());
    state.cluster_id = cluster_id.or(state.cluster_id.take());
    state.last_error = None;
    if state.reach != Reach::Live {
        state.reach = Reach::Live;
        state.since = at;
        tracing::info!(cluster = %member.name, apps = state.apps.len(), "member cluster synced");
    }
    let data = json!({
        "cluster": &*member.name,
        "reach": state.reach,
        "synced": true,
        "apps": state.apps.len(),
    });
    drop(state);
    fleet.announce(&member.name, Kind::Cluster, None, &data);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_bound_with_jitter() {
        let mut backoff = Backoff::new(Duration::from_secs(4));
        let waits: Vec<Duration> = (0..6).map(|_| backoff.wait()).collect();
        for (wait, span) in waits.iter().zip([500u64, 1000, 2000, 4000, 4000, 4000]) {
            let span = Duration::from_millis(span);
            assert!(*wait >= span / 2 && *wait <= span, "{wait:?} for {span:?}");
        }
        backoff.reset();
        assert!(backoff.wait() <= Duration::from_millis(500));
    }
}
