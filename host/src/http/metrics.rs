//! `GET /metrics` in the Prometheus text format. Every family is registered
//! once, when the host starts: what has no other home (HTTP requests,
//! reloads) is counted here, call latency is the plugin runtime's, and what
//! lives with its subject (plugin calls in the registry, watch events in
//! the watch health, tasks in the task store) is read by a collector at
//! scrape time.

use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::events::Events;
use crate::failover::Failover;
use crate::plugins::Registry;
use crate::tasks::Tasks;
use crate::verdicts::live::Live;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: String,
    code: u16,
}

/// What the host counts itself, and the registry of every family, made
/// once when the host's parts exist ([`Metrics::register`]); a scrape only
/// encodes it.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    http: Family<HttpLabels, Counter>,
    pub reloads: Counter,
    pub rejections: Counter,
    /// Versions demoted for failing too many of their calls.
    pub demotions: Counter,
    /// Readings of the plugin folder: at start, after each change, on request.
    pub scans: Counter,
    registry: OnceLock<prometheus_client::registry::Registry>,
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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    plugin: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FieldLabels {
    plugin: String,
    field: String,
}

/// What a scrape reads from the host's parts, at the time of the scrape.
#[derive(Debug)]
pub(crate) struct Sources {
    pub plugins: Arc<Registry>,
    pub live: Option<Live>,
    pub tasks: Arc<Tasks>,
    pub failover: Option<Arc<Failover>>,
    pub events: Arc<Events>,
    pub leadership: Arc<crate::leader::Leadership>,
    pub shadows: Arc<crate::shadow::Shadows>,
    pub delivery: Option<Arc<crate::lifecycle::service::Service>>,
    pub memory: Arc<crate::memory::Budget>,
    pub history: Arc<crate::history::History>,
    /// The Kubernetes Events of apps' status changes, when written.
    pub announcer: Option<Arc<crate::history::announce::Announcer>>,
    /// Apps given series of their own (the first, by namespace and name).
    pub app_series: usize,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppLabels {
    namespace: String,
    app: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AppStatusLabels {
    namespace: String,
    app: String,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

impl Metrics {
    /// Register every family once, with what each scrape reads; called
    /// when the host's parts exist. A second call changes nothing.
    pub fn register(&self, sources: Sources) {
        self.registry.get_or_init(|| {
            let mut registry = self.with_requests();
            registry.register(
                "policy_call_seconds",
                "Time of one plugin call, by policy and version",
                sources.plugins.call_seconds().family(),
            );
            registry.register(
                "plugin_reloads",
                "Plugin versions swapped in",
                self.reloads.clone(),
            );
            registry.register(
                "plugin_folder_scans",
                "Readings of the plugin folder (at start, after a change, on request)",
                self.scans.clone(),
            );
            registry.register(
                "plugin_rejections",
                "Plugin files refused",
                self.rejections.clone(),
            );
            registry.register(
                "plugin_demotions",
                "Plugin versions demoted for failing too many of their calls",
                self.demotions.clone(),
            );
            if let Some(live) = &sources.live {
                registry.register(
                    "derivation_seconds",
                    "Time of one derivation, from the apps' inputs to their verdicts stored, by scope (every-app or changed)",
                    live.verdicts.derivation_seconds(),
                );
            }
            if let Some(failover) = &sources.failover {
                registry.register(
                    "failover_evaluation_seconds",
                    "Time of one judgement of every node: the policy's input, its call, the brakes and the saved state",
                    failover.evaluation_seconds(),
                );
            }
            registry.register_collector(Box::new(sources));
            registry
        });
    }

    /// Everything, as Prometheus text (nothing before [`Metrics::register`]).
    pub fn render(&self) -> String {
        let mut text = String::new();
        if let Some(registry) = self.registry.get()
            && let Err(error) = prometheus_client::encoding::text::encode(&mut text, registry)
        {
            tracing::error!(%error, "encoding the metrics failed");
        }
        text
    }
}

/// One family, described and encoded.
fn family(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> std::fmt::Result {
    let family = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(family)
}

impl Collector for Sources {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let encoder = &mut encoder;
        let apps: Family<StatusLabels, Gauge> = Family::default();
        let pods: Family<StatusLabels, Gauge> = Family::default();
        if let Some(live) = &self.live {
            let (by_app, by_pod) = live.verdicts.status_counts();
            for (counts, family) in [(by_app, &apps), (by_pod, &pods)] {
                for (status, n) in counts {
                    family
                        .get_or_create(&StatusLabels {
                            status: status.into(),
                        })
                        .set(n);
                }
            }
        }
        family(encoder, "apps", "Applications by stable status", &apps)?;
        let standing = self.leadership.standing();
        let leader = Gauge::<i64>::default();
        leader.set(i64::from(self.leadership.acting().is_some()));
        family(
            encoder,
            "leader",
            "1 while this replica leads and acts (always, without leader election)",
            &leader,
        )?;
        let reading = self.memory.last();
        let mib = |mib: u64| {
            let gauge = Gauge::<i64>::default();
            gauge.set(i64::try_from(mib * 1024 * 1024).unwrap_or(i64::MAX));
            gauge
        };
        family(
            encoder,
            "memory_resident_bytes",
            "The process's resident memory, read every second",
            &mib(reading.resident_mib),
        )?;
        if let Some(allocated) = reading.allocated_mib {
            family(
                encoder,
                "memory_allocated_bytes",
                "What the allocator has handed out and not had back (jemalloc's stats.allocated), read every second",
                &mib(allocated),
            )?;
        }
        if let Some(limit) = reading.limit_mib {
            family(
                encoder,
                "memory_limit_bytes",
                "The memory the process may use (its container's limit, or --host-memory-limit-mib)",
                &mib(limit),
            )?;
        }
        let term = Gauge::<i64>::default();
        term.set(standing.term as i64);
        family(
            encoder,
            "lease_term",
            "The leader Lease's term (transitions) as last seen",
            &term,
        )?;
        family(
            encoder,
            "pods",
            "Pods by status, as the status policy sees them",
            &pods,
        )?;

        let calls: Family<PluginLabels, Counter> = Family::default();
        let errors: Family<PluginLabels, Counter> = Family::default();
        let timeouts: Family<PluginLabels, Counter> = Family::default();
        let fallbacks: Family<PluginLabels, Counter> = Family::default();
        for plugin in self.plugins.statuses() {
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
        family(encoder, "plugin_calls", "Calls of each plugin", &calls)?;
        family(
            encoder,
            "plugin_errors",
            "Failed calls (traps, timeouts, limits, malformed answers)",
            &errors,
        )?;
        family(
            encoder,
            "plugin_timeouts",
            "Calls stopped at the deadline",
            &timeouts,
        )?;
        family(
            encoder,
            "plugin_fallbacks",
            "Calls the previous version answered",
            &fallbacks,
        )?;

        let compared: Family<ShadowLabels, Counter> = Family::default();
        let differing: Family<FieldLabels, Counter> = Family::default();
        let shadow_errors: Family<ShadowLabels, Counter> = Family::default();
        let skipped: Family<ShadowLabels, Counter> = Family::default();
        let failed: Family<ShadowLabels, Gauge> = Family::default();
        for report in self.shadows.reports() {
            let labels = ShadowLabels {
                plugin: report.plugin.clone(),
            };
            compared.get_or_create(&labels).inc_by(report.compared);
            shadow_errors.get_or_create(&labels).inc_by(report.errors);
            skipped.get_or_create(&labels).inc_by(report.skipped);
            failed.get_or_create(&labels).set(i64::from(report.failed));
            for (field, count) in &report.by_field {
                differing
                    .get_or_create(&FieldLabels {
                        plugin: report.plugin.clone(),
                        field: field.clone(),
                    })
                    .inc_by(*count);
            }
        }
        family(
            encoder,
            "shadow_compared",
            "Answers of each shadow compared with the active policy's",
            &compared,
        )?;
        family(
            encoder,
            "shadow_differences",
            "Answers of each shadow that differed, by field",
            &differing,
        )?;
        family(
            encoder,
            "shadow_errors",
            "Failed calls of each shadow",
            &shadow_errors,
        )?;
        family(
            encoder,
            "shadow_skipped",
            "Questions not put to each shadow, to keep within its CPU share",
            &skipped,
        )?;
        family(
            encoder,
            "shadow_failed",
            "1 when a shadow failed too often to be promoted without force",
            &failed,
        )?;

        let events: Family<KindLabels, Counter> = Family::default();
        let lists: Family<KindLabels, Counter> = Family::default();
        let failures: Family<KindLabels, Counter> = Family::default();
        let healthy: Family<KindLabels, Gauge> = Family::default();
        if let Some(live) = &self.live {
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
        family(
            encoder,
            "watch_events",
            "Watch events applied, by kind",
            &events,
        )?;
        family(encoder, "watch_lists", "Full lists taken, by kind", &lists)?;
        family(
            encoder,
            "watch_failures",
            "Watch failures (each followed by a restart), by kind",
            &failures,
        )?;
        family(
            encoder,
            "watch_healthy",
            "Whether the watch of a kind works (1) or not (0)",
            &healthy,
        )?;

        let tasks: Family<StatusLabels, Gauge> = Family::default();
        for (phase, count) in self.tasks.count_by_phase() {
            tasks
                .get_or_create(&StatusLabels {
                    status: phase.into(),
                })
                .set(count as i64);
        }
        family(encoder, "tasks", "Task records by phase", &tasks)?;

        if let Some(failover) = &self.failover {
            let counts = failover.counts();
            let nodes: Family<StatusLabels, Gauge> = Family::default();
            for (health, n) in counts.health {
                nodes
                    .get_or_create(&StatusLabels {
                        status: health.into(),
                    })
                    .set(n as i64);
            }
            family(
                encoder,
                "failover_nodes",
                "Nodes by failover health",
                &nodes,
            )?;
            let held: Family<StatusLabels, Gauge> = Family::default();
            for (brake, n) in counts.held {
                held.get_or_create(&StatusLabels { status: brake })
                    .set(n as i64);
            }
            family(
                encoder,
                "failover_held_actions",
                "Failover actions held back, by brake",
                &held,
            )?;
            family(
                encoder,
                "failover_awaiting_approval",
                "Failover actions waiting for a person's approval",
                &ConstGauge::new(counts.awaiting_approval as i64),
            )?;
            family(
                encoder,
                "failover_storm",
                "Whether more nodes are unhealthy than the cap allows (1) or not (0)",
                &ConstGauge::new(i64::from(counts.storm)),
            )?;
        }

        if let Some(counts) = self.delivery.as_ref().and_then(|d| d.counts.as_ref()) {
            let instances: Family<StageLabels, Gauge> = Family::default();
            for (stage, n) in counts.stages() {
                instances
                    .get_or_create(&StageLabels { stage })
                    .set(n as i64);
            }
            family(
                encoder,
                "vm_delivery_instances",
                "VM-hosted app instances by stage, at the leader's last reconcile",
                &instances,
            )?;
            let rollouts: Family<PhaseLabels, Gauge> = Family::default();
            for (phase, n) in counts.phases() {
                rollouts.get_or_create(&PhaseLabels { phase }).set(n as i64);
            }
            family(
                encoder,
                "vm_delivery_rollouts",
                "VMDeployment rollouts by phase, at the leader's last reconcile",
                &rollouts,
            )?;
            let calls: Family<StepLabels, Counter> = Family::default();
            let failures: Family<StepLabels, Counter> = Family::default();
            for (step, (n, failed)) in crate::lifecycle::controller::lock(&counts.hooks).clone() {
                calls
                    .get_or_create(&StepLabels { step: step.clone() })
                    .inc_by(n);
                failures.get_or_create(&StepLabels { step }).inc_by(failed);
            }
            family(
                encoder,
                "vm_delivery_hook_calls",
                "Step hook calls, by step",
                &calls,
            )?;
            family(
                encoder,
                "vm_delivery_hook_failures",
                "Step hook calls that failed their step, by step",
                &failures,
            )?;
            let held = ConstCounter::new(counts.unread.load(std::sync::atomic::Ordering::Relaxed));
            family(
                encoder,
                "vm_delivery_held",
                "Reconciles held because the resources they govern could not be read (nothing moved)",
                &held,
            )?;
        }

        let made: Family<VerbLabels, Counter> = Family::default();
        for (verb, n) in crate::calls::made() {
            made.get_or_create(&VerbLabels { verb: verb.into() })
                .inc_by(n);
        }
        family(
            encoder,
            "kube_requests",
            "Requests made of the Kubernetes API server, by verb (a watch counts once, however long it runs)",
            &made,
        )?;

        self.encode_apps(encoder)?;
        self.encode_history(encoder)?;
        family(
            encoder,
            "event_stream_clients",
            "Open event streams",
            &ConstGauge::new(self.events.subscribers() as i64),
        )?;
        family(
            encoder,
            "events",
            "Events published on the event stream",
            &ConstCounter::new(self.events.published()),
        )
    }
}

impl Sources {
    /// Each app's series, as kube-state-metrics gives each object's: the
    /// stable status in force (1), since when, its changes and the time in
    /// each status — for the first `app_series` apps, the rest counted.
    fn encode_apps(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        use crate::wit::WitName;
        let Some(live) = &self.live else {
            return Ok(());
        };
        let (apps, omitted) = live.verdicts.tallies(self.app_series);
        let status: Family<AppStatusLabels, Gauge> = Family::default();
        let since: Family<AppLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
        let transitions: Family<AppLabels, Counter> = Family::default();
        let seconds: Family<AppStatusLabels, Counter<f64, std::sync::atomic::AtomicU64>> =
            Family::default();
        let now = crate::time::now();
        for ((namespace, app), stable, tally) in apps {
            let labels = AppLabels { namespace, app };
            let with = |status: &str| AppStatusLabels {
                namespace: labels.namespace.clone(),
                app: labels.app.clone(),
                status: status.to_string(),
            };
            status.get_or_create(&with(stable.wit_name())).set(1);
            since
                .get_or_create(&labels)
                .set(tally.since as f64 / 1000.0);
            transitions
                .get_or_create(&labels)
                .inc_by(u64::from(tally.transitions));
            for (place, ms) in tally.ms_until(stable, now).into_iter().enumerate() {
                if ms > 0 {
                    let name = <crate::wit::types::StableStatus as WitName>::NAMES[place];
                    seconds
                        .get_or_create(&with(name))
                        .inc_by(ms as f64 / 1000.0);
                }
            }
        }
        family(
            encoder,
            "app_status",
            "1 for the stable status in force of each app",
            &status,
        )?;
        family(
            encoder,
            "app_status_since_seconds",
            "When each app entered its stable status in force (Unix time; since this process started at the earliest)",
            &since,
        )?;
        family(
            encoder,
            "app_transitions",
            "Changes of each app's stable status seen by this process",
            &transitions,
        )?;
        family(
            encoder,
            "app_status_seconds",
            "Time each app spent in each stable status while this process watched",
            &seconds,
        )?;
        family(
            encoder,
            "app_series_omitted",
            "Apps past --app-metrics-max, without series of their own",
            &ConstGauge::new(omitted as i64),
        )
    }

    /// The history's writes.
    fn encode_history(&self, encoder: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        if self.history.is_off() {
            return Ok(());
        }
        let health = self.history.health();
        family(
            encoder,
            "history_ok",
            "Whether the history is written (1) or not (0; /readyz says why)",
            &ConstGauge::new(i64::from(health.ok)),
        )?;
        family(
            encoder,
            "history_changes",
            "Status changes written to the history",
            &ConstCounter::new(health.changes),
        )?;
        family(
            encoder,
            "history_folded",
            "Status changes folded into the entry they returned to (flapping)",
            &ConstCounter::new(health.folded),
        )?;
        family(
            encoder,
            "history_pending",
            "Records waiting to be written to the history",
            &ConstGauge::new(health.pending as i64),
        )?;
        family(
            encoder,
            "history_lost",
            "Records the history could not keep",
            &ConstCounter::new(health.lost),
        )?;
        family(
            encoder,
            "history_task_lists",
            "Finished task lists of VM-hosted apps' instances kept in the task log",
            &ConstCounter::new(health.lists),
        )?;
        family(
            encoder,
            "history_task_lists_lost",
            "Finished task lists the task log could not keep (their Servers sum them up)",
            &ConstCounter::new(health.lists_lost),
        )?;
        let Some(announcer) = &self.announcer else {
            return Ok(());
        };
        let c = &announcer.counts;
        let events: Family<OutcomeLabels, Counter> = Family::default();
        for (outcome, n) in [
            ("written", &c.written),
            ("failed", &c.failed),
            ("limited", &c.limited),
            ("dropped", &c.dropped),
            ("unreferenced", &c.unreferenced),
        ] {
            events
                .get_or_create(&OutcomeLabels { outcome })
                .inc_by(n.load(std::sync::atomic::Ordering::Relaxed));
        }
        family(
            encoder,
            "kube_events",
            "Kubernetes Events of apps' status changes, by outcome (written by the leader; \
             limited: past an app's burst; unreferenced: an app without a workload or object)",
            &events,
        )
    }
}

/// A fleet's families: its members, and each member's apps with their
/// cluster (`verdict fleet`).
#[derive(Debug)]
pub(crate) struct FleetSources {
    pub fleet: Arc<crate::fleet::Fleet>,
    /// Apps given series of their own, across the fleet.
    pub app_series: usize,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterStatusLabels {
    cluster: String,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterAppStatusLabels {
    cluster: String,
    namespace: String,
    app: String,
    status: String,
}

impl Metrics {
    /// Register the fleet's families once, as [`Metrics::register`] does
    /// the host's.
    pub fn register_fleet(&self, sources: FleetSources) {
        self.registry.get_or_init(|| {
            let mut registry = self.with_requests();
            registry.register_collector(Box::new(sources));
            registry
        });
    }

    /// A registry of verdict's families with the answered requests.
    fn with_requests(&self) -> prometheus_client::registry::Registry {
        let mut registry = prometheus_client::registry::Registry::with_prefix("verdict");
        registry.register(
            "http_requests",
            "Answered requests by route, method and code",
            self.http.clone(),
        );
        registry
    }
}

impl Collector for FleetSources {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let encoder = &mut encoder;
        let up: Family<ClusterLabels, Gauge> = Family::default();
        let seen: Family<ClusterLabels, Gauge<f64, std::sync::atomic::AtomicU64>> =
            Family::default();
        let apps: Family<ClusterStatusLabels, Gauge> = Family::default();
        let syncs: Family<ClusterLabels, Counter> = Family::default();
        let failures: Family<ClusterLabels, Counter> = Family::default();
        let events: Family<ClusterLabels, Counter> = Family::default();
        for cluster in self.fleet.clusters() {
            let labels = ClusterLabels {
                cluster: cluster.name.clone(),
            };
            up.get_or_create(&labels)
                .set(i64::from(cluster.reach == "live"));
            if let Some(age) = cluster.last_seen_age_ms {
                let at = crate::time::now().saturating_sub(age as i64);
                seen.get_or_create(&labels).set(at as f64 / 1000.0);
            }
            for (status, n) in &cluster.statuses {
                apps.get_or_create(&ClusterStatusLabels {
                    cluster: cluster.name.clone(),
                    status: status.clone(),
                })
                .set(*n as i64);
            }
            syncs.get_or_create(&labels).inc_by(cluster.syncs);
            failures.get_or_create(&labels).inc_by(cluster.failures);
            events.get_or_create(&labels).inc_by(cluster.events);
        }
        family(
            encoder,
            "fleet_member_up",
            "1 while a member cluster is live (synced and heard from within the bound)",
            &up,
        )?;
        family(
            encoder,
            "fleet_member_last_seen_seconds",
            "When each member cluster was last heard from (Unix time)",
            &seen,
        )?;
        family(
            encoder,
            "fleet_apps",
            "Each member cluster's apps by the status shown (`unknown` while it is not live)",
            &apps,
        )?;
        family(
            encoder,
            "fleet_member_syncs",
            "Full listings of each member's apps (at the start, after a resync)",
            &syncs,
        )?;
        family(
            encoder,
            "fleet_member_failures",
            "Attempts to follow each member that failed",
            &failures,
        )?;
        family(
            encoder,
            "fleet_member_events",
            "Events taken from each member's stream",
            &events,
        )?;
        let (statuses, omitted) = self.fleet.app_statuses(self.app_series);
        let status: Family<ClusterAppStatusLabels, Gauge> = Family::default();
        for (cluster, (namespace, app), shown) in statuses {
            status
                .get_or_create(&ClusterAppStatusLabels {
                    cluster: cluster.to_string(),
                    namespace: namespace.to_string(),
                    app: app.to_string(),
                    status: shown,
                })
                .set(1);
        }
        family(
            encoder,
            "app_status",
            "1 for the stable status in force of each app, by cluster (`unknown` while its cluster is not live)",
            &status,
        )?;
        family(
            encoder,
            "app_series_omitted",
            "Apps past --app-metrics-max, without series of their own",
            &ConstGauge::new(omitted as i64),
        )
    }
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
        state.metrics.render(),
    )
        .into_response()
}
