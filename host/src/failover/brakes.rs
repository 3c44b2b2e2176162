//! The brakes the host puts on whatever a failover policy proposes, and
//! their settings. Each brake that holds an action back says so, by name,
//! in the action's state and the audit record.
//!
//! In order: a paused node, a maintenance window, a storm (too many nodes
//! unhealthy at once: only waiting and notifying), stale observations (the
//! node watch is broken), a flapping node, a retry limit and its backoff,
//! the cap on actions in flight, and the cap on actions per time window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{Attempt, Outcome};
use crate::wit::types::{KeyValue, Timestamp};

/// A cap on unhealthy nodes: a count, or a share of all nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    Nodes(u32),
    Percent(u32),
}

impl Cap {
    /// The most unhealthy nodes allowed out of `total`. A share never
    /// allows fewer than one: a single lost node of a small cluster is an
    /// outage to act on, not a storm.
    pub fn allowed(self, total: usize) -> usize {
        match self {
            Cap::Nodes(n) => n as usize,
            Cap::Percent(p) => (total * p as usize / 100).max(1),
        }
    }
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cap::Nodes(n) => write!(f, "{n}"),
            Cap::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl std::str::FromStr for Cap {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("`{text}` is not a node count or a percentage such as 40%");
        match text.trim().strip_suffix('%') {
            Some(p) => p
                .trim()
                .parse()
                .ok()
                .filter(|p| *p <= 100)
                .map(Cap::Percent)
                .ok_or_else(bad),
            None => text.trim().parse().map(Cap::Nodes).map_err(|_| bad()),
        }
    }
}

impl Serialize for Cap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Cap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Count(u32),
            Text(String),
        }
        match Form::deserialize(d)? {
            Form::Count(n) => Ok(Cap::Nodes(n)),
            Form::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A time when a set of nodes is expected to go down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Maintenance {
    /// Node names, or `key=value` label selectors; empty for every node.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// RFC 3339 start and end.
    pub from: String,
    pub until: String,
    #[serde(default)]
    pub reason: Option<String>,
}

impl Maintenance {
    fn covers(&self, node: &str, labels: &[KeyValue], now: Timestamp) -> Option<Timestamp> {
        let parse = |t: &str| crate::time::parse_time(t).ok();
        let (from, until) = (parse(&self.from)?, parse(&self.until)?);
        let selected = self.nodes.is_empty()
            || self.nodes.iter().any(|n| match n.split_once('=') {
                Some((k, v)) => labels.iter().any(|l| l.key == k && l.value == v),
                None => n == node,
            });
        (selected && from <= now && now < until).then_some(until)
    }
}

/// The `[failover]` settings: enforcement and the brakes. Each is also a
/// flag, `--failover-KEY`.
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[group(skip)]
pub struct FailoverConfig {
    /// Carry out the failover actions that pass the brakes and approval
    /// (cordon, evict, release, scale) instead of only showing them: off,
    /// a dry run shows what failover would do and does nothing.
    #[arg(long = "failover-enforce")]
    pub enforce: bool,
    /// How often nodes are judged, in milliseconds.
    #[arg(long = "failover-every-ms", value_name = "MS", default_value = "1000")]
    pub every_ms: u64,
    /// Above this many unhealthy nodes, or share of nodes (`40%`), it is a
    /// storm: failover only waits and notifies.
    #[arg(
        long = "failover-max-unhealthy",
        value_name = "N|PERCENT",
        default_value = "40%"
    )]
    pub max_unhealthy: Cap,
    /// Actions whose task is under way at once.
    #[arg(long = "failover-max-in-flight", value_name = "N", default_value = "3")]
    pub max_in_flight: usize,
    /// Actions started per window.
    #[arg(long = "failover-max-actions", value_name = "N", default_value = "20")]
    pub max_actions: usize,
    /// The window of `max-actions`, in milliseconds.
    #[arg(
        long = "failover-window-ms",
        value_name = "MS",
        default_value = "600000"
    )]
    pub window_ms: u64,
    /// Attempts of one action on one node before it is given up on.
    #[arg(long = "failover-max-retries", value_name = "N", default_value = "3")]
    pub max_retries: u32,
    /// The wait after a failed attempt, doubled after each, in
    /// milliseconds.
    #[arg(
        long = "failover-backoff-ms",
        value_name = "MS",
        default_value = "10000"
    )]
    pub backoff_ms: u64,
    /// A node that turns unhealthy this many times within the flap window
    /// is flapping: nothing new is done about it.
    #[arg(long = "failover-flap-count", value_name = "N", default_value = "2")]
    pub flap_count: usize,
    /// The flap window, in milliseconds.
    #[arg(
        long = "failover-flap-window-ms",
        value_name = "MS",
        default_value = "1800000"
    )]
    pub flap_window_ms: u64,
    /// How long a node must be healthy before what was done about it is
    /// forgotten, so that a new outage is acted on afresh, in milliseconds.
    #[arg(
        long = "failover-trust-after-ms",
        value_name = "MS",
        default_value = "300000"
    )]
    pub trust_after_ms: u64,
    /// Audit records kept.
    #[arg(long = "failover-history", value_name = "N", default_value = "10000")]
    pub history: usize,
    /// Times when sets of nodes are expected to go down (in the file only:
    /// `[[failover.maintenance]]` with `nodes`, `from`, `until`, `reason`).
    #[arg(skip)]
    pub maintenance: Vec<Maintenance>,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// A brake that held an action back: its name and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub brake: &'static str,
    pub why: String,
}

fn held(brake: &'static str, why: String) -> Option<Held> {
    Some(Held { brake, why })
}

/// What one evaluation knows while it applies the brakes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    pub now: Timestamp,
    pub nodes: usize,
    pub unhealthy: usize,
    /// Actions whose tasks are under way.
    pub in_flight: usize,
    /// Actions started within the window.
    pub started: usize,
    /// Whether the node watch works.
    pub observing: bool,
}

impl Gauges {
    /// Whether more nodes are unhealthy than the cap allows.
    pub fn storm(&self, config: &FailoverConfig) -> bool {
        self.unhealthy > config.max_unhealthy.allowed(self.nodes)
    }
}

/// One action on one node, as the brakes see it.
#[derive(Debug)]
pub(crate) struct Candidate<'a> {
    pub node: &'a str,
    pub labels: &'a [KeyValue],
    pub disruptive: bool,
    pub paused: bool,
    /// Times the node turned unhealthy within the flap window.
    pub flaps: usize,
    pub attempt: Option<&'a Attempt>,
}

/// The first brake that holds a candidate back, if any.
pub(crate) fn check(config: &FailoverConfig, gauges: &Gauges, c: &Candidate<'_>) -> Option<Held> {
    if c.paused {
        return held("paused", "the node is paused by an override".into());
    }
    if !c.disruptive {
        return None;
    }
    if let Some((m, until)) = config
        .maintenance
        .iter()
        .find_map(|m| m.covers(c.node, c.labels, gauges.now).map(|u| (m, u)))
    {
        return held(
            "maintenance",
            format!(
                "in a maintenance window until {}{}",
                crate::time::rfc3339(until),
                m.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
        );
    }
    if gauges.storm(config) {
        return held(
            "storm",
            format!(
                "{} of {} nodes are unhealthy, above the cap of {}: only waiting and notifying",
                gauges.unhealthy, gauges.nodes, config.max_unhealthy
            ),
        );
    }
    if !gauges.observing {
        return held(
            "stale-observations",
            "the node watch is not working: nothing is done on what may be old news".into(),
        );
    }
    if c.flaps >= config.flap_count && config.flap_count > 0 {
        return held(
            "flapping",
            format!(
                "the node turned unhealthy {} times within {} s",
                c.flaps,
                config.flap_window_ms / 1000
            ),
        );
    }
    if let Some(a) = c.attempt.filter(|a| a.outcome == Outcome::Failed) {
        let error = a.error.as_deref().unwrap_or("no reason given");
        if a.attempts >= config.max_retries {
            return held(
                "retry-limit",
                format!("failed {} times, the limit: {error}", a.attempts),
            );
        }
        if let Some(at) = a.retry_at.filter(|at| *at > gauges.now) {
            return held(
                "backoff",
                format!(
                    "failed {} times ({error}); retried at {}",
                    a.attempts,
                    crate::time::rfc3339(at)
                ),
            );
        }
    }
    if gauges.in_flight >= config.max_in_flight {
        return held(
            "in-flight-cap",
            format!("{} actions are under way, the cap", config.max_in_flight),
        );
    }
    if gauges.started >= config.max_actions {
        return held(
            "rate-limit",
            format!(
                "{} actions were started within {} s, the cap",
                config.max_actions,
                config.window_ms / 1000
            ),
        );
    }
    None
}

/// When a failed attempt may be retried: the backoff doubled per attempt,
/// at most an hour.
pub(crate) fn retry_at(config: &FailoverConfig, now: Timestamp, attempts: u32) -> Timestamp {
    let factor = 1u64 << attempts.saturating_sub(1).min(16);
    now + config.backoff_ms.saturating_mul(factor).min(3_600_000) as Timestamp
}

/// Forget flap times older than the window.
pub(crate) fn recent_flaps(
    flaps: &mut BTreeMap<String, Vec<Timestamp>>,
    config: &FailoverConfig,
    now: Timestamp,
) {
    let oldest = now - config.flap_window_ms as Timestamp;
    for times in flaps.values_mut() {
        times.retain(|t| *t >= oldest);
    }
    flaps.retain(|_, times| !times.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauges() -> Gauges {
        Gauges {
            now: 1_000_000,
            nodes: 5,
            unhealthy: 1,
            in_flight: 0,
            started: 0,
            observing: true,
        }
    }

    fn candidate() -> Candidate<'static> {
        Candidate {
            node: "n2",
            labels: &[],
            disruptive: true,
            paused: false,
            flaps: 1,
            attempt: None,
        }
    }

    fn brake(config: &FailoverConfig, g: &Gauges, c: &Candidate<'_>) -> Option<&'static str> {
        check(config, g, c).map(|h| h.brake)
    }

    #[test]
    fn caps_parse_as_counts_or_percentages() {
        assert_eq!("3".parse(), Ok(Cap::Nodes(3)));
        assert_eq!(" 40% ".parse(), Ok(Cap::Percent(40)));
        assert!("140%".parse::<Cap>().is_err());
        assert!("many".parse::<Cap>().is_err());
        assert_eq!(Cap::Percent(40).allowed(5), 2);
        assert_eq!(Cap::Nodes(1).allowed(100), 1);
        assert_eq!(
            Cap::Percent(40).allowed(2),
            1,
            "one node of two is no storm"
        );
        assert_eq!(Cap::Nodes(0).allowed(2), 0);
        let c = FailoverConfig {
            max_unhealthy: "2".parse().unwrap(),
            ..FailoverConfig::default()
        };
        assert_eq!(c.max_unhealthy, Cap::Nodes(2));
        let c = FailoverConfig {
            max_unhealthy: "25%".parse().unwrap(),
            ..FailoverConfig::default()
        };
        assert_eq!(c.max_unhealthy, Cap::Percent(25));
    }

    #[test]
    fn each_brake_holds_what_it_should() {
        let config = FailoverConfig::default();
        assert_eq!(brake(&config, &gauges(), &candidate()), None);

        // A storm: 3 of 5 is above 40%; 2 of 5 is not.
        let storm = Gauges {
            unhealthy: 3,
            ..gauges()
        };
        assert_eq!(brake(&config, &storm, &candidate()), Some("storm"));
        let two = Gauges {
            unhealthy: 2,
            ..gauges()
        };
        assert_eq!(brake(&config, &two, &candidate()), None);
        // Waiting and notifying pass a storm; a pause holds everything.
        let quiet = Candidate {
            disruptive: false,
            ..candidate()
        };
        assert_eq!(brake(&config, &storm, &quiet), None);
        let paused = Candidate {
            paused: true,
            ..quiet
        };
        assert_eq!(brake(&config, &gauges(), &paused), Some("paused"));

        let flapping = Candidate {
            flaps: 2,
            ..candidate()
        };
        assert_eq!(brake(&config, &gauges(), &flapping), Some("flapping"));

        let failed = |attempts, retry_at| Attempt {
            outcome: Outcome::Failed,
            attempts,
            at: 0,
            retry_at: Some(retry_at),
            task: None,
            error: Some("budget".into()),
            actor: None,
        };
        let once = failed(1, 1_000_500);
        let c = Candidate {
            attempt: Some(&once),
            ..candidate()
        };
        assert_eq!(brake(&config, &gauges(), &c), Some("backoff"));
        let due = failed(1, 999_000);
        let c = Candidate {
            attempt: Some(&due),
            ..candidate()
        };
        assert_eq!(brake(&config, &gauges(), &c), None);
        let spent = failed(3, 0);
        let c = Candidate {
            attempt: Some(&spent),
            ..candidate()
        };
        let h = check(&config, &gauges(), &c).unwrap();
        assert_eq!(h.brake, "retry-limit");
        assert!(h.why.contains("budget"), "{}", h.why);

        let busy = Gauges {
            in_flight: 3,
            ..gauges()
        };
        assert_eq!(brake(&config, &busy, &candidate()), Some("in-flight-cap"));
        let many = Gauges {
            started: 20,
            ..gauges()
        };
        assert_eq!(brake(&config, &many, &candidate()), Some("rate-limit"));
        let blind = Gauges {
            observing: false,
            ..gauges()
        };
        assert_eq!(
            brake(&config, &blind, &candidate()),
            Some("stale-observations")
        );
    }

    #[test]
    fn maintenance_windows_cover_their_nodes_and_times() {
        let config = FailoverConfig {
            maintenance: vec![Maintenance {
                nodes: vec!["zone=a".into(), "n9".into()],
                from: "1970-01-01T00:00:00Z".into(),
                until: "1970-01-01T00:20:00Z".into(),
                reason: Some("kernel upgrades".into()),
            }],
            ..FailoverConfig::default()
        };
        let zone_a = [KeyValue {
            key: "zone".into(),
            value: "a".into(),
        }];
        let in_zone = Candidate {
            labels: &zone_a,
            ..candidate()
        };
        let h = check(&config, &gauges(), &in_zone).unwrap();
        assert_eq!(h.brake, "maintenance");
        assert!(h.why.contains("kernel upgrades"));
        assert_eq!(brake(&config, &gauges(), &candidate()), None);
        let by_name = Candidate {
            node: "n9",
            ..candidate()
        };
        assert_eq!(brake(&config, &gauges(), &by_name), Some("maintenance"));
        let later = Gauges {
            now: 20 * 60_000,
            ..gauges()
        };
        assert_eq!(brake(&config, &later, &in_zone), None);
    }

    #[test]
    fn backoff_doubles_per_attempt() {
        let config = FailoverConfig::default();
        assert_eq!(retry_at(&config, 0, 1), 10_000);
        assert_eq!(retry_at(&config, 0, 2), 20_000);
        assert_eq!(retry_at(&config, 0, 3), 40_000);
        assert_eq!(retry_at(&config, 0, 40), 3_600_000);
    }
}
