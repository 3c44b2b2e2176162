//! `/v1/apps/{namespace}/{name}/history` (and an instance's), and
//! availability over a window of an app, a namespace and the cluster.
//!
//! With elected replicas, every replica records what it observes (so that
//! one that takes over has the history), and the history read on any
//! replica is the leader's: a follower sends the request on to the
//! leader's advertised URL, and answers from its own only when the leader
//! cannot be reached (`x-verdict-history` names the replica whose history
//! answered).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{ApiError, AppState, MAX_PAGE, page_limit};
use crate::history::store::Away;
use crate::history::{Availability, Cause, Mark, Page, Row, Timeline};
use crate::time::{Timestamp, parse_time, rfc3339};

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(app_history))
        .routes(routes!(instance_history))
        .routes(routes!(app_availability))
        .routes(routes!(namespace_availability))
        .routes(routes!(cluster_availability))
        .routes(routes!(timeline))
}

#[derive(Debug, Deserialize)]
struct HistoryQuery {
    since: Option<String>,
    until: Option<String>,
    limit: Option<usize>,
    #[serde(rename = "continue")]
    after: Option<String>,
}

/// One period in which an app or instance held a status.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct Entry {
    /// When it began (RFC 3339).
    at: String,
    /// When it ended (the next entry's start); none while it holds.
    until: Option<String>,
    /// The instance's kind (`pod`, `VirtualMachine`); none for the app.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<String>,
    /// The stable status (an app's), or the instance's status; `gone`
    /// when the instance left the app.
    status: String,
    /// The transition of a task under way.
    #[serde(skip_serializing_if = "Option::is_none")]
    transitional: Option<String>,
    /// The status a person saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    display: Option<String>,
    reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    /// What caused it, when something did.
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<Cause>,
    /// The status policy's version that judged it.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    /// Round trips to another status and back within the flap window,
    /// kept in this one entry, and the time spent in each.
    flaps: u32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    away: BTreeMap<String, Away>,
    /// When it was last entered (its last return, while flapping).
    last_at: String,
}

/// A page of history, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct HistoryPage {
    entries: Vec<Entry>,
    /// What happened meanwhile: tasks, overrides, failover, rollout steps,
    /// policy swaps (for an app: its own and the cluster's), oldest first.
    marks: Vec<Mark>,
    /// Give as `continue` for the next (older) page; none on the last.
    #[serde(rename = "continue")]
    next: Option<String>,
}

fn entry(row: Row, until: Option<Timestamp>) -> Entry {
    let instance = !row.seen.subject.is_app();
    Entry {
        at: rfc3339(row.seen.at),
        until: until.map(rfc3339),
        kind: instance.then(|| row.seen.subject.kind.clone()),
        instance: instance.then(|| row.seen.subject.instance.clone()),
        status: row.seen.held.status,
        transitional: row.seen.held.transitional,
        display: row.seen.held.display,
        reason: row.seen.reason,
        node: row.seen.node,
        cause: row.seen.cause,
        policy: row.seen.policy,
        flaps: row.flaps,
        away: row.away,
        last_at: rfc3339(row.last_at),
    }
}

/// A time of the query, RFC 3339.
fn time_param(name: &str, text: Option<&str>) -> Result<Option<Timestamp>, ApiError> {
    text.map(|t| parse_time(t).map_err(|e| ApiError::invalid(name, format!("{name}: {e}"))))
        .transpose()
}

/// A page of a subject's history, with the marks of its span.
async fn history(
    state: AppState,
    (namespace, name, instance): (String, String, Option<String>),
    query: HistoryQuery,
) -> Result<Json<HistoryPage>, ApiError> {
    let limit = page_limit(query.limit, 100)?;
    let before = query
        .after
        .as_deref()
        .filter(|a| !a.is_empty())
        .map(|a| {
            // Marks are the digits of a position (`-1` is none of them).
            a.parse::<u64>()
                .ok()
                .and_then(|a| i64::try_from(a).ok())
                .ok_or_else(|| {
                    ApiError::invalid("continue", "continue: not a mark this server gave")
                })
        })
        .transpose()?;
    let page = Page {
        since: time_param("since", query.since.as_deref())?,
        until: time_param("until", query.until.as_deref())?,
        before,
        // One more, to know whether there is a next page.
        limit: limit + 1,
    };
    let history = std::sync::Arc::clone(&state.history);
    let page = tokio::task::spawn_blocking(move || {
        let mut rows = history.page(&namespace, &name, instance.as_deref(), &page)?;
        let more = rows.len() > limit;
        rows.truncate(limit);
        // The entry newer than the first (the previous page's last) ends it.
        let newer = match before {
            Some(id) => history
                .page(
                    &namespace,
                    &name,
                    instance.as_deref(),
                    &Page {
                        before: Some(id + 1),
                        limit: 1,
                        ..Page::default()
                    },
                )?
                .first()
                .map(|r| r.seen.at),
            None => None,
        };
        let span = (
            rows.last().map_or(0, |r| r.seen.at),
            newer.unwrap_or(Timestamp::MAX),
        );
        let marks = match instance {
            None if !rows.is_empty() => history.marks(&namespace, &name, span, MAX_PAGE)?,
            _ => Vec::new(),
        };
        let next = more
            .then(|| rows.last().map(|r| r.id.to_string()))
            .flatten();
        let mut until = newer;
        let entries = rows
            .into_iter()
            .map(|row| {
                let at = row.seen.at;
                let e = entry(row, until);
                until = Some(at);
                e
            })
            .collect();
        Ok::<_, ApiError>(HistoryPage {
            entries,
            marks,
            next,
        })
    })
    .await
    .map_err(|e| ApiError::internal("the history", &e))??;
    Ok(Json(page))
}

#[utoipa::path(get, path = "/v1/apps/{namespace}/{name}/history", tag = "history", params(("namespace" = String, Path), ("name" = String, Path), ("since" = Option<String>, Query, format = DateTime, description = "Entries that began at or after this time (RFC 3339, after 1970)"), ("until" = Option<String>, Query, format = DateTime, description = "Entries that began before this time (RFC 3339, after 1970)"), ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "At most this many, 100 by default"), ("continue" = Option<String>, Query, pattern = "^[0-9]{0,18}$", description = "The `continue` of the page before")), responses((status = 200, description = "The app's status changes, newest first, with the marks of what happened meanwhile", body = HistoryPage), (status = 404, description = "The history is off"), (status = 422, description = "A bad parameter, named"), (status = 503, description = "The history cannot be read")))]
async fn app_history(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<HistoryPage>, ApiError> {
    history(state, (namespace, name, None), query).await
}

#[utoipa::path(get, path = "/v1/apps/{namespace}/{name}/instances/{instance}/history", tag = "history", params(("namespace" = String, Path), ("name" = String, Path), ("instance" = String, Path, description = "A pod's or an object's name"), ("since" = Option<String>, Query, format = DateTime), ("until" = Option<String>, Query, format = DateTime), ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000), ("continue" = Option<String>, Query, pattern = "^[0-9]{0,18}$")), responses((status = 200, description = "The instance's status changes, newest first", body = HistoryPage), (status = 404, description = "The history is off"), (status = 422, description = "A bad parameter, named"), (status = 503, description = "The history cannot be read")))]
async fn instance_history(
    State(state): State<AppState>,
    Path((namespace, name, instance)): Path<(String, String, String)>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<HistoryPage>, ApiError> {
    history(state, (namespace, name, Some(instance)), query).await
}

#[derive(Debug, Deserialize)]
struct WindowQuery {
    /// `7d`, `24h`, `90m`.
    window: Option<String>,
    /// The window's end, RFC 3339 (now by default).
    until: Option<String>,
}

/// Availability over a window, and which.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct AvailabilityView {
    /// The window, RFC 3339.
    from: String,
    to: String,
    #[serde(flatten)]
    availability: Availability,
}

/// The window a query names: `[to - window, to)`.
fn window(query: &WindowQuery) -> Result<(Timestamp, Timestamp), ApiError> {
    let length = match query.window.as_deref().filter(|w| !w.is_empty()) {
        None => std::time::Duration::from_secs(7 * 86_400),
        Some(text) => humantime::parse_duration(text).map_err(|e| {
            ApiError::invalid(
                "window",
                format!("window: `{text}` is not a length of time (7d, 24h, 90m): {e}"),
            )
        })?,
    };
    if length.is_zero() || length > std::time::Duration::from_secs(366 * 86_400) {
        return Err(ApiError::invalid(
            "window",
            "window: must be longer than nothing and at most 366 days",
        ));
    }
    let to = time_param("until", query.until.as_deref())?.unwrap_or_else(crate::time::now);
    let from = to - length.as_millis() as Timestamp;
    if from < 0 {
        return Err(ApiError::invalid(
            "until",
            format!(
                "until: a window of {} ending then would begin before 1970",
                humantime::format_duration(length)
            ),
        ));
    }
    Ok((from, to))
}

async fn availability(
    state: AppState,
    scope: (Option<String>, Option<String>),
    query: WindowQuery,
) -> Result<Json<AvailabilityView>, ApiError> {
    let (from, to) = window(&query)?;
    let history = std::sync::Arc::clone(&state.history);
    // An app neither observed now nor ever recorded is not found (its
    // window would read as time before it existed).
    let live = match &scope {
        (Some(ns), Some(app)) => state
            .live()
            .ok()
            .is_some_and(|live| live.verdicts.get(ns, app).is_some()),
        _ => true,
    };
    let availability = tokio::task::spawn_blocking(move || match scope {
        (Some(ns), Some(app)) => {
            if !live && !history.knows(&ns, &app)? {
                return Ok(None);
            }
            history.availability(&ns, &app, (from, to)).map(Some)
        }
        (namespace, _) => history
            .availability_of_all(namespace.as_deref(), (from, to))
            .map(Some),
    })
    .await
    .map_err(|e| ApiError::internal("the history", &e))??
    .ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no-such-app",
            "no such app: it is not observed now, and the history holds nothing of it",
        )
    })?;
    Ok(Json(AvailabilityView {
        from: rfc3339(from),
        to: rfc3339(to),
        availability,
    }))
}

#[utoipa::path(get, path = "/v1/apps/{namespace}/{name}/availability", tag = "history", params(("namespace" = String, Path), ("name" = String, Path), ("window" = Option<String>, Query, pattern = "^([0-9]{1,6}(ms|s|m|h|d))?$", description = "How far back, at most 366 days: `7d` by default, `24h`, `90m`"), ("until" = Option<String>, Query, format = DateTime, description = "The window's end, RFC 3339 (after 1970); now by default")), responses((status = 200, description = "Time in each status over the window (with the time before the app existed and unobserved time apart, adding up to the window), incidents and times to recover", body = AvailabilityView), (status = 404, description = "The history is off, or no such app: not observed now, and nothing of it in the history"), (status = 422, description = "A bad window, named"), (status = 503, description = "The history cannot be read")))]
async fn app_availability(
    State(state): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
    Query(query): Query<WindowQuery>,
) -> Result<Json<AvailabilityView>, ApiError> {
    availability(state, (Some(namespace), Some(name)), query).await
}

#[utoipa::path(get, path = "/v1/namespaces/{namespace}/availability", tag = "history", params(("namespace" = String, Path), ("window" = Option<String>, Query, pattern = "^([0-9]{1,6}(ms|s|m|h|d))?$"), ("until" = Option<String>, Query, format = DateTime)), responses((status = 200, description = "Every app of the namespace over the window, together (app-milliseconds)", body = AvailabilityView), (status = 404, description = "The history is off"), (status = 422, description = "A bad window, named"), (status = 503, description = "The history cannot be read")))]
async fn namespace_availability(
    State(state): State<AppState>,
    Path(namespace): Path<String>,
    Query(query): Query<WindowQuery>,
) -> Result<Json<AvailabilityView>, ApiError> {
    availability(state, (Some(namespace), None), query).await
}

#[utoipa::path(get, path = "/v1/availability", tag = "history", params(("window" = Option<String>, Query, pattern = "^([0-9]{1,6}(ms|s|m|h|d))?$"), ("until" = Option<String>, Query, format = DateTime)), responses((status = 200, description = "Every app of the cluster over the window, together (app-milliseconds)", body = AvailabilityView), (status = 404, description = "The history is off"), (status = 422, description = "A bad window, named"), (status = 503, description = "The history cannot be read")))]
async fn cluster_availability(
    State(state): State<AppState>,
    Query(query): Query<WindowQuery>,
) -> Result<Json<AvailabilityView>, ApiError> {
    availability(state, (None, None), query).await
}

#[derive(Debug, Deserialize)]
struct TimelineQuery {
    window: Option<String>,
    until: Option<String>,
    points: Option<usize>,
    namespace: Option<String>,
}

/// Points of a timeline when none are asked for, and the most.
const POINTS: usize = 120;
const MAX_POINTS: usize = 1_000;

#[utoipa::path(get, path = "/v1/availability/timeline", tag = "history", params(("window" = Option<String>, Query, pattern = "^([0-9]{1,6}(ms|s|m|h|d))?$", description = "How far back, at most 366 days: `7d` by default"), ("until" = Option<String>, Query, format = DateTime, description = "The window's end, RFC 3339 (after 1970); now by default"), ("points" = Option<usize>, Query, minimum = 2, maximum = 1000, description = "Moments sampled, evenly spaced, the last at `until` (120 by default)"), ("namespace" = Option<String>, Query, description = "Only this namespace's apps")), responses((status = 200, description = "How many apps held each stable status at each moment (`unobserved` while no replica observed the cluster)", body = Timeline), (status = 404, description = "The history is off"), (status = 422, description = "A bad window or number of points, named"), (status = 503, description = "The history cannot be read")))]
async fn timeline(
    State(state): State<AppState>,
    Query(query): Query<TimelineQuery>,
) -> Result<Json<Timeline>, ApiError> {
    let points = query.points.unwrap_or(POINTS);
    if !(2..=MAX_POINTS).contains(&points) {
        return Err(ApiError::invalid(
            "points",
            format!("points: {points} is not from 2 to {MAX_POINTS}"),
        ));
    }
    let (from, to) = window(&WindowQuery {
        window: query.window,
        until: query.until,
    })?;
    let history = std::sync::Arc::clone(&state.history);
    let namespace = query.namespace.filter(|n| !n.is_empty());
    let timeline = tokio::task::spawn_blocking(move || {
        history.timeline(namespace.as_deref(), (from, to), points)
    })
    .await
    .map_err(|e| ApiError::internal("the history", &e))??;
    Ok(Json(timeline))
}

/// Names the replica whose history answered.
const ANSWERED_BY: &str = "x-verdict-history";
/// Marks a request a follower sent on: its answer is the receiver's own.
const FORWARDED: &str = "x-verdict-forwarded-by";

/// The history routes' layer: on a follower, the leader's answer.
pub(super) async fn from_leader(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let standing = state.leadership.standing();
    let mut fallback = None;
    if standing.elected && !standing.leader && !request.headers().contains_key(FORWARDED) {
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", axum::http::uri::PathAndQuery::as_str)
            .to_string();
        let token = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .cloned();
        match forward(&state, &standing.replica, &path, token).await {
            Ok(answer) => return answer,
            Err(why) => {
                tracing::debug!(%why, "the history answered here, not by the leader");
                fallback = Some(why);
            }
        }
    }
    let mut answer = next.run(request).await;
    let headers = answer.headers_mut();
    if let Ok(name) = axum::http::HeaderValue::from_str(&standing.replica) {
        headers.insert(ANSWERED_BY, name);
    }
    if let Some(why) = fallback.and_then(|w| axum::http::HeaderValue::from_str(&w).ok()) {
        headers.insert("x-verdict-history-fallback", why);
    }
    answer
}

/// The same request, answered by the leader's replica.
async fn forward(
    state: &AppState,
    replica: &str,
    path: &str,
    token: Option<axum::http::HeaderValue>,
) -> Result<axum::response::Response, String> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let members = state.members.as_ref().ok_or("no replicas' heartbeats")?;
    let replicas = members
        .list()
        .await
        .map_err(|e| format!("the replicas: {e}"))?;
    let leader = replicas
        .into_iter()
        .find(|r| r.leader && !r.this)
        .ok_or("no other replica leads")?;
    let base = leader
        .url
        .ok_or_else(|| format!("{} advertises no URL", leader.name))?;
    let client = CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default()
    });
    let mut sent = client
        .get(format!("{}{path}", base.trim_end_matches('/')))
        .header(FORWARDED, replica);
    if let Some(token) = token {
        sent = sent.header(axum::http::header::AUTHORIZATION, token);
    }
    let answer = sent
        .send()
        .await
        .map_err(|e| format!("{} at {base}: {e}", leader.name))?;
    let status = answer.status();
    if status.is_server_error() {
        return Err(format!("{} answered {status}", leader.name));
    }
    let mut response = axum::response::Response::builder().status(status.as_u16());
    for name in [
        axum::http::header::CONTENT_TYPE,
        ANSWERED_BY.parse().expect("a header name"),
    ] {
        if let Some(value) = answer.headers().get(&name) {
            response = response.header(name, value.as_bytes());
        }
    }
    let body = answer
        .bytes()
        .await
        .map_err(|e| format!("{} at {base}: {e}", leader.name))?;
    response
        .body(axum::body::Body::from(body))
        .map_err(|e| e.to_string())
}
