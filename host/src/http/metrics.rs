//! `GET /metrics` in the Prometheus text format. Counters that live with
//! their subjects (plugin calls in the registry, watch events in the watch
//! health, tasks in the task store) are read at scrape time; what has no
//! other home (call latency, HTTP requests, reloads) is kept here.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use prometheus_client::registry::Registry;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::wit::WitName;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: String,
    code: u16,
}

/// What the host counts itself.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    http: Family<HttpLabels, Counter>,
    pub reloads: Counter,
    pub rejections: Counter,
    /// Readings of the plugin folder: at start, after each change, on request.
    pub scans: Counter,
}

impl Metrics {
    /// Count one answered request by its route pattern (not its path, so
    /// that ids do not make new series).
    pub fn request(&self, route: &str, method: &str, code: u16) {
        self.http
            .get_or_create(&HttpLabels {
                route: route.to_string(),
                method: method.to_string(),
                code,
            })
            .inc();
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
    version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

fn counter(value: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(value);
    c
}

/// Everything, as Prometheus text.
pub(crate) fn render(state: &AppState) -> String {
    let mut registry = Registry::with_prefix("verdict");

    let apps: Family<StatusLabels, Gauge> = Family::default();
    let pods: Family<StatusLabels, Gauge> = Family::default();
    if let Some(live) = &state.live {
        for v in live.verdicts.all() {
            apps.get_or_create(&StatusLabels {
                status: v.verdict.stable.wit_name().into(),
            })
            .inc();
            for group in &v.verdict.groups {
                pods.get_or_create(&StatusLabels {
                    status: group.status.wit_name().into(),
                })
                .inc();
            }
        }
    }
    registry.register("apps", "Applications by stable status", apps);
    registry.register(
        "pods",
        "Pods by status, as the status policy sees them",
        pods,
    );

    let calls: Family<PluginLabels, Counter> = Family::default();
    let errors: Family<PluginLabels, Counter> = Family::default();
    let timeouts: Family<PluginLabels, Counter> = Family::default();
    let fallbacks: Family<PluginLabels, Counter> = Family::default();
    for plugin in state.registry.statuses() {
        let labels = PluginLabels {
            plugin: plugin.name.clone(),
            version: plugin
                .current
                .as_ref()
                .map(|v| v.version.clone())
                .unwrap_or_default(),
        };
        calls.get_or_create(&labels).inc_by(plugin.calls);
        errors.get_or_create(&labels).inc_by(plugin.errors);
        timeouts.get_or_create(&labels).inc_by(plugin.timeouts);
        fallbacks.get_or_create(&labels).inc_by(plugin.fallbacks);
    }
    registry.register("plugin_calls", "Calls of each plugin", calls);
    registry.register(
        "plugin_errors",
        "Failed calls (traps, timeouts, limits, malformed answers)",
        errors,
    );
    registry.register("plugin_timeouts", "Calls stopped at the deadline", timeouts);
    registry.register(
        "plugin_fallbacks",
        "Calls the previous version answered",
        fallbacks,
    );
    registry.register(
        "policy_call_seconds",
        "Time of one plugin call, by policy and version",
        state.registry.call_seconds().family(),
    );
    registry.register(
        "plugin_reloads",
        "Plugin versions swapped in",
        state.metrics.reloads.clone(),
    );
    registry.register(
        "plugin_folder_scans",
        "Readings of the plugin folder (at start, after a change, on request)",
        state.metrics.scans.clone(),
    );
    registry.register(
        "plugin_rejections",
        "Plugin files refused",
        state.metrics.rejections.clone(),
    );

    let events: Family<KindLabels, Counter> = Family::default();
    let lists: Family<KindLabels, Counter> = Family::default();
    let failures: Family<KindLabels, Counter> = Family::default();
    let healthy: Family<KindLabels, Gauge> = Family::default();
    if let Some(live) = &state.live {
        for (kind, health) in live.observed.health.kinds() {
            let labels = KindLabels {
                kind: kind.to_string(),
            };
            events.get_or_create(&labels).inc_by(health.events);
            lists.get_or_create(&labels).inc_by(health.lists);
            failures.get_or_create(&labels).inc_by(health.failures);
            healthy
                .get_or_create(&labels)
                .set(i64::from(health.healthy));
        }
    }
    registry.register("watch_events", "Watch events applied, by kind", events);
    registry.register("watch_lists", "Full lists taken, by kind", lists);
    registry.register(
        "watch_failures",
        "Watch failures (each followed by a restart), by kind",
        failures,
    );
    registry.register(
        "watch_healthy",
        "Whether the watch of a kind works (1) or not (0)",
        healthy,
    );

    let tasks: Family<StatusLabels, Gauge> = Family::default();
    for (phase, count) in state.tasks.count_by_phase() {
        tasks
            .get_or_create(&StatusLabels {
                status: phase.into(),
            })
            .set(count as i64);
    }
    registry.register("tasks", "Task records by phase", tasks);

    if let Some(failover) = &state.failover {
        let counts = failover.counts();
        let nodes: Family<StatusLabels, Gauge> = Family::default();
        for (health, n) in counts.health {
            nodes
                .get_or_create(&StatusLabels {
                    status: health.into(),
                })
                .set(n as i64);
        }
        registry.register("failover_nodes", "Nodes by failover health", nodes);
        let held: Family<StatusLabels, Gauge> = Family::default();
        for (brake, n) in counts.held {
            held.get_or_create(&StatusLabels { status: brake })
                .set(n as i64);
        }
        registry.register(
            "failover_held_actions",
            "Failover actions held back, by brake",
            held,
        );
        let awaiting: Gauge = Gauge::default();
        awaiting.set(counts.awaiting_approval as i64);
        registry.register(
            "failover_awaiting_approval",
            "Failover actions waiting for a person's approval",
            awaiting,
        );
        let storm: Gauge = Gauge::default();
        storm.set(i64::from(counts.storm));
        registry.register(
            "failover_storm",
            "Whether more nodes are unhealthy than the cap allows (1) or not (0)",
            storm,
        );
    }

    registry.register(
        "http_requests",
        "Answered requests by route, method and code",
        state.metrics.http.clone(),
    );
    let clients: Gauge = Gauge::default();
    clients.set(state.events.subscribers() as i64);
    registry.register("event_stream_clients", "Open event streams", clients);
    registry.register(
        "events",
        "Events published on the event stream",
        counter(state.events.published()),
    );

    let mut text = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::error!(%error, "encoding the metrics failed");
    }
    text
}
/// The route of this file.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(metrics))
}

#[utoipa::path(get, path = "/metrics", tag = "metrics", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&state),
    )
        .into_response()
}
