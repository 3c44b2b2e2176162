//! `/v1/events`: verdict, task and plugin changes as Server-Sent Events,
//! with replay after `Last-Event-ID`, `resync` when that is no longer
//! possible, heartbeats, and a last event at shutdown.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{ApiError, AppState};
use crate::tasks::TaskError;

/// The routes of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(event_stream))
}

#[derive(Debug, serde::Deserialize)]
struct EventFilter {
    namespace: Option<String>,
    /// `namespace/name`.
    app: Option<String>,
    /// For clients that cannot set the `Last-Event-ID` header.
    #[serde(rename = "last-event-id")]
    last_event_id: Option<u64>,
    /// A heartbeat this often instead of the server's (a fleet asks for
    /// one within the time it calls a silent cluster lost).
    #[serde(rename = "heartbeat-ms")]
    heartbeat_ms: Option<u64>,
}

/// The shortest and longest heartbeat a client may ask for.
const HEARTBEAT_MS: std::ops::RangeInclusive<u64> = 500..=600_000;

/// The heartbeat a client asked for, or the server's.
pub(super) fn heartbeat(
    asked: Option<u64>,
    default: std::time::Duration,
) -> Result<std::time::Duration, ApiError> {
    match asked {
        None => Ok(default),
        Some(ms) if HEARTBEAT_MS.contains(&ms) => Ok(std::time::Duration::from_millis(ms)),
        Some(ms) => Err(ApiError::invalid(
            "heartbeat-ms",
            format!(
                "heartbeat-ms: {ms} is not from {} to {}",
                HEARTBEAT_MS.start(),
                HEARTBEAT_MS.end()
            ),
        )),
    }
}

/// Where a client resumes: the `Last-Event-ID` header, else the query's.
pub(super) fn last_event_id(
    headers: &axum::http::HeaderMap,
    query: Option<u64>,
) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    let mut error = ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid-header",
                        "Last-Event-ID must be an event id (a whole number)",
                    );
                    error.field = Some("Last-Event-ID".into());
                    error
                }),
        )
        .transpose(),
        None => Ok(query),
    }
}

/// One event in Server-Sent Events form: its id, type, and JSON data.
fn sse(event: &crate::events::Event) -> axum::response::sse::Event {
    axum::response::sse::Event::default()
        .id(event.id.to_string())
        .event(event.kind.name())
        .data(&*event.json)
}

/// How long a client whose stream ended at shutdown waits to reconnect.
const RECONNECT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Tell a client to re-list: what it missed is no longer held. The
/// `resync` event's id is the last one issued, so that a client that
/// reconnects after it resumes from the present.
fn resync(reason: String, next: u64) -> axum::response::sse::Event {
    axum::response::sse::Event::default()
        .event("resync")
        .id(next.saturating_sub(1).to_string())
        .data(json!({"type": "resync", "reason": reason, "next-id": next}).to_string())
}

#[utoipa::path(get, path = "/v1/events", tag = "events", params(("namespace" = Option<String>, Query), ("app" = Option<String>, Query, pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", min_length = 3, max_length = 127, description = "namespace/name"), ("last-event-id" = Option<u64>, Query, description = "Replay after this id (or the Last-Event-ID header)"), ("heartbeat-ms" = Option<u64>, Query, minimum = 500, maximum = 600000, description = "A heartbeat comment this often while idle, instead of the server's")), responses((status = 200, description = "Server-Sent Events: verdict, task, plugin and resync events", content_type = "text/event-stream")))]
/// `GET /v1/events`: every verdict, task and plugin change as Server-Sent
/// Events, from after `Last-Event-ID` when the buffer still holds it (else
/// a `resync` first), filtered by namespace or app, with heartbeats. A
/// client that cannot keep up is sent `resync` and goes on from the present.
async fn event_stream(
    State(state): State<AppState>,
    Query(filter): Query<EventFilter>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let last = last_event_id(&headers, filter.last_event_id)?;
    let heartbeat = heartbeat(filter.heartbeat_ms, state.heartbeat)?;
    if let Some(app) = &filter.app {
        crate::tasks::model::parse_app(app).map_err(TaskError::from)?;
    }
    let wanted = move |event: &crate::events::Event| match (&filter.app, &filter.namespace) {
        (Some(app), _) => event.app.as_deref() == Some(app.as_str()),
        (None, Some(namespace)) => event.namespace() == Some(namespace.as_str()),
        (None, None) => true,
    };
    Ok(stream(
        Arc::clone(&state.events),
        last,
        wanted,
        heartbeat,
        state.stopping.clone(),
    ))
}

/// The events after `last` that a client wants, then the live ones, as
/// Server-Sent Events with heartbeats, ending with a `shutdown` event when
/// `stopping` turns true.
pub(super) fn stream(
    events: Arc<crate::events::Events>,
    last: Option<u64>,
    wanted: impl Fn(&crate::events::Event) -> bool + Send + Sync + 'static,
    heartbeat: std::time::Duration,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Response {
    use axum::response::sse::{KeepAlive, Sse};
    use futures_util::StreamExt;
    use tokio_stream::wrappers::BroadcastStream;
    use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

    let (live, replay) = events.subscribe(last);
    let (first, mut after) = match replay {
        Ok(missed) => {
            let after = missed.last().map_or(last.unwrap_or(0), |e| e.id);
            let first: Vec<_> = missed
                .iter()
                .filter(|e| wanted(e))
                .map(|e| sse(e))
                .collect();
            (first, after)
        }
        Err(gone) => (
            vec![resync(
                match last {
                    Some(last) if last >= gone.oldest => {
                        format!("event {last} was not issued by this server")
                    }
                    _ => format!("events before {} are no longer held", gone.oldest),
                },
                events.next_id(),
            )],
            0,
        ),
    };
    let live = BroadcastStream::new(live).filter_map(move |received| {
        let item = match received {
            Ok(event) if event.id > after && wanted(&event) => {
                after = event.id;
                Some(sse(&event))
            }
            Ok(_) => None,
            Err(BroadcastStreamRecvError::Lagged(missed)) => Some(resync(
                format!("the stream fell {missed} events behind"),
                events.next_id(),
            )),
        };
        std::future::ready(item.map(Ok::<_, std::convert::Infallible>))
    });
    // On shutdown the stream ends with a last event that tells the client
    // when to reconnect (to another replica, or this one restarted).
    let mut stopping = stopping;
    let stopped = async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    let farewell = futures_util::stream::once(async {
        Ok(axum::response::sse::Event::default()
            .event("shutdown")
            .retry(RECONNECT_AFTER)
            .data(json!({"type": "shutdown", "reason": "the server is shutting down"}).to_string()))
    });
    let stream = futures_util::stream::iter(first.into_iter().map(Ok))
        .chain(live)
        .take_until(stopped)
        .chain(farewell);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat"))
        .into_response()
}
