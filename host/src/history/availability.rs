//! Availability over a window, from an app's periods and the runs in which
//! the host observed the cluster: the time in each status, which adds up to
//! the window with the time before the app existed and the time nobody
//! observed counted apart; the incidents (entries into `degraded` or
//! `panic`) and how long each took to recover.

use std::collections::BTreeMap;

use serde::Serialize;

use super::store::Row;
use crate::time::Timestamp;

/// The statuses an incident is an entry into.
const DOWN: [&str; 2] = ["degraded", "panic"];

/// What a window held.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Availability {
    /// The window's length, in milliseconds: `statuses`, `before_ms` and
    /// `unobserved_ms` add up to it (times the number of apps, for a
    /// namespace or the cluster).
    pub window_ms: i64,
    /// How many apps it covers.
    pub apps: usize,
    /// Milliseconds in each stable status.
    pub statuses: BTreeMap<String, i64>,
    /// Before the app was first seen.
    pub before_ms: i64,
    /// While no replica observed the cluster, or its observations were
    /// stale.
    pub unobserved_ms: i64,
    /// The share of the observed time spent `running` (0 to 1; none when
    /// nothing was observed).
    pub running_share: Option<f64>,
    /// Entries into `degraded` or `panic`.
    pub incidents: u32,
    /// Incidents that ended within the window, and how long they took.
    pub recovered: u32,
    pub mean_recovery_ms: Option<i64>,
    pub longest_recovery_ms: Option<i64>,
    /// When the incident under way began, if one is (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down_since: Option<String>,
}

/// Milliseconds of `[a, b)` within the sorted, disjoint `runs`.
fn covered(runs: &[(Timestamp, Timestamp)], a: Timestamp, b: Timestamp) -> i64 {
    runs.iter()
        .map(|&(s, e)| (e.min(b) - s.max(a)).max(0))
        .sum()
}

/// Sort runs and merge those that overlap.
fn merged(mut runs: Vec<(Timestamp, Timestamp)>) -> Vec<(Timestamp, Timestamp)> {
    runs.sort_unstable();
    let mut out: Vec<(Timestamp, Timestamp)> = Vec::with_capacity(runs.len());
    for (s, e) in runs {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// One app's availability over `[from, to)`, from its rows oldest first
/// (the last one before `from` among them) and the observation runs.
pub fn of_app(
    rows: &[Row],
    runs: Vec<(Timestamp, Timestamp)>,
    from: Timestamp,
    to: Timestamp,
) -> Availability {
    let runs = merged(runs);
    let mut out = Availability {
        window_ms: to - from,
        apps: 1,
        ..Availability::default()
    };
    let first = rows.first().map_or(to, |r| r.seen.at.max(from)).min(to);
    out.before_ms = first - from;
    let mut recoveries = Vec::new();
    let mut down_since: Option<Timestamp> = None;
    for (i, row) in rows.iter().enumerate() {
        let start = row.seen.at.max(from);
        let end = rows.get(i + 1).map_or(to, |next| next.seen.at).min(to);
        let down = DOWN.contains(&row.seen.held.status.as_str());
        // Entered within the window, from an up status (or from nothing).
        let was_down = i > 0 && DOWN.contains(&rows[i - 1].seen.held.status.as_str());
        if down && !was_down {
            if row.seen.at >= from {
                out.incidents += 1;
            }
            down_since = Some(row.seen.at);
        } else if !down
            && let Some(since) = down_since.take()
            && row.seen.at >= from
            && since >= from
        {
            recoveries.push(row.seen.at - since);
        }
        if end <= start {
            continue;
        }
        let length = end - start;
        let seen = covered(&runs, start, end);
        out.unobserved_ms += length - seen;
        // The time away while flapping, shared out as the row's whole
        // length was, and each return from a down status a recovery.
        let whole = (rows.get(i + 1).map_or(to, |n| n.seen.at) - row.seen.at).max(1);
        let mut given = 0;
        for (status, away) in &row.away {
            let part = (away.ms as i128 * seen as i128 / whole as i128) as i64;
            let part = part.min(seen - given);
            *out.statuses.entry(status.clone()).or_default() += part;
            given += part;
            if DOWN.contains(&status.as_str()) && !down && away.entries > 0 {
                out.incidents += away.entries;
                let each = away.ms / i64::from(away.entries);
                recoveries.extend(std::iter::repeat_n(each, away.entries as usize));
            }
        }
        *out.statuses
            .entry(row.seen.held.status.clone())
            .or_default() += seen - given;
    }
    out.recovered = recoveries.len() as u32;
    if !recoveries.is_empty() {
        out.mean_recovery_ms = Some(recoveries.iter().sum::<i64>() / recoveries.len() as i64);
        out.longest_recovery_ms = recoveries.iter().copied().max();
    }
    out.down_since = down_since.map(crate::time::rfc3339);
    out.statuses.retain(|_, ms| *ms > 0);
    out.running_share = share(&out);
    out
}

fn share(a: &Availability) -> Option<f64> {
    let observed: i64 = a.statuses.values().sum();
    (observed > 0).then(|| *a.statuses.get("running").unwrap_or(&0) as f64 / observed as f64)
}

/// Several apps' availability together: times summed (app-milliseconds),
/// incidents counted, recoveries averaged over all.
pub fn sum(all: &[Availability], window_ms: i64) -> Availability {
    let mut out = Availability {
        window_ms,
        ..Availability::default()
    };
    let mut recovery_total = 0i64;
    for a in all {
        out.apps += a.apps;
        for (status, ms) in &a.statuses {
            *out.statuses.entry(status.clone()).or_default() += ms;
        }
        out.before_ms += a.before_ms;
        out.unobserved_ms += a.unobserved_ms;
        out.incidents += a.incidents;
        out.recovered += a.recovered;
        recovery_total += a.mean_recovery_ms.unwrap_or(0) * i64::from(a.recovered);
        out.longest_recovery_ms = out.longest_recovery_ms.max(a.longest_recovery_ms);
    }
    if out.recovered > 0 {
        out.mean_recovery_ms = Some(recovery_total / i64::from(out.recovered));
    }
    out.running_share = share(&out);
    out
}

/// How many apps held each status at evenly spaced moments of a window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Timeline {
    /// The window, RFC 3339, and the time between two points.
    pub since: String,
    pub until: String,
    pub step_ms: i64,
    /// Oldest first; the last is at `until`.
    pub points: Vec<Point>,
}

/// The apps in each stable status at one moment; `unobserved` when no
/// replica observed the cluster then (an app not seen yet is counted in
/// none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Point {
    /// RFC 3339.
    pub at: String,
    pub counts: BTreeMap<String, u32>,
}

/// The moments of `[from, to]` a timeline of `points` samples: `to` and
/// the `points - 1` before it, a step apart.
fn moments(from: Timestamp, to: Timestamp, points: usize) -> (i64, Vec<Timestamp>) {
    let points = points.max(2);
    let step = ((to - from) / (points as i64 - 1)).max(1);
    let mut at: Vec<Timestamp> = (0..points as i64).map(|i| to - i * step).collect();
    at.retain(|t| *t >= from);
    at.reverse();
    (step, at)
}

/// The apps by status at `points` moments of `[from, to]`, from each
/// app's rows oldest first (the last one before `from` among them) and the
/// observation runs.
pub fn timeline<'r>(
    apps: impl IntoIterator<Item = &'r [Row]>,
    runs: Vec<(Timestamp, Timestamp)>,
    (from, to): (Timestamp, Timestamp),
    points: usize,
) -> Timeline {
    let runs = merged(runs);
    let (step, at) = moments(from, to, points);
    let mut counts: Vec<BTreeMap<String, u32>> = vec![BTreeMap::new(); at.len()];
    let observed: Vec<bool> = at
        .iter()
        .map(|t| runs.iter().any(|&(s, e)| s <= *t && *t <= e))
        .collect();
    for rows in apps {
        // Moments and rows both ascend: one pass over each.
        let mut next = 0;
        for (i, t) in at.iter().enumerate() {
            while next < rows.len() && rows[next].seen.at <= *t {
                next += 1;
            }
            let Some(row) = next.checked_sub(1).map(|n| &rows[n]) else {
                continue;
            };
            let status = if observed[i] {
                row.seen.held.status.as_str()
            } else {
                "unobserved"
            };
            *counts[i].entry(status.to_string()).or_default() += 1;
        }
    }
    Timeline {
        since: crate::time::rfc3339(from),
        until: crate::time::rfc3339(to),
        step_ms: step,
        points: at
            .into_iter()
            .zip(counts)
            .map(|(at, counts)| Point {
                at: crate::time::rfc3339(at),
                counts,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::store::{Away, Held, Seen, Subject};

    fn row(at: Timestamp, status: &str) -> Row {
        Row {
            id: at,
            seen: Seen {
                at,
                subject: Subject::app("shop", "web"),
                held: Held {
                    status: status.into(),
                    ..Held::default()
                },
                reason: String::new(),
                node: None,
                cause: None,
                policy: None,
            },
            flaps: 0,
            away: BTreeMap::new(),
            last_at: at,
        }
    }

    fn total(a: &Availability) -> i64 {
        a.statuses.values().sum::<i64>() + a.before_ms + a.unobserved_ms
    }

    #[test]
    fn the_parts_add_up_to_the_window() {
        // Seen from 100; panic 400..600; a gap in observation 700..800.
        let rows = [row(100, "running"), row(400, "panic"), row(600, "running")];
        let a = of_app(&rows, vec![(0, 700), (800, 2_000)], 0, 1_000);
        assert_eq!(total(&a), 1_000);
        assert_eq!(a.before_ms, 100);
        assert_eq!(a.unobserved_ms, 100);
        assert_eq!(a.statuses["running"], 300 + 300);
        assert_eq!(a.statuses["panic"], 200);
        assert_eq!(a.incidents, 1);
        assert_eq!((a.recovered, a.mean_recovery_ms), (1, Some(200)));
        assert_eq!(a.running_share, Some(0.75));
    }

    #[test]
    fn a_window_starts_inside_a_period_and_an_incident_may_be_under_way() {
        let rows = [row(0, "running"), row(500, "degraded")];
        let a = of_app(&rows, vec![(0, 10_000)], 200, 1_200);
        assert_eq!(total(&a), 1_000);
        assert_eq!(a.statuses["running"], 300);
        assert_eq!(a.statuses["degraded"], 700);
        assert_eq!(a.incidents, 1);
        assert_eq!(a.recovered, 0);
        assert!(a.down_since.is_some());
    }

    #[test]
    fn flapping_counts_each_trip_and_its_time() {
        let mut flapping = row(0, "running");
        flapping.flaps = 3;
        flapping.away.insert(
            "panic".into(),
            Away {
                ms: 300,
                entries: 3,
            },
        );
        let a = of_app(&[flapping], vec![(0, 1_000)], 0, 1_000);
        assert_eq!(total(&a), 1_000);
        assert_eq!(a.statuses["panic"], 300);
        assert_eq!(a.statuses["running"], 700);
        assert_eq!(a.incidents, 3);
        assert_eq!(a.mean_recovery_ms, Some(100));
        let both = sum(&[a.clone(), a], 1_000);
        assert_eq!(both.apps, 2);
        assert_eq!(total(&both), 2_000);
        assert_eq!(both.incidents, 6);
    }

    #[test]
    fn an_app_never_seen_is_all_before() {
        let a = of_app(&[], vec![(0, 1_000)], 0, 1_000);
        assert_eq!(a.before_ms, 1_000);
        assert_eq!(total(&a), 1_000);
        assert_eq!(a.running_share, None);
    }

    #[test]
    fn a_timeline_counts_each_app_in_the_status_it_held_at_each_moment() {
        let web = [
            row(1_000, "running"),
            row(5_000, "panic"),
            row(7_000, "running"),
        ];
        let api = [row(4_000, "degraded")];
        let runs = vec![(0, 8_000), (9_500, 20_000)];
        let t = timeline([&web[..], &api[..]], runs, (0, 10_000), 11);
        assert_eq!(t.step_ms, 1_000);
        let at = |ms: usize| -> Vec<(&str, u32)> {
            t.points[ms / 1_000]
                .counts
                .iter()
                .map(|(s, n)| (s.as_str(), *n))
                .collect()
        };
        assert_eq!(t.points.len(), 11);
        assert_eq!(at(0), [], "nothing seen yet");
        assert_eq!(at(1_000), [("running", 1)]);
        assert_eq!(at(4_000), [("degraded", 1), ("running", 1)]);
        assert_eq!(at(5_000), [("degraded", 1), ("panic", 1)]);
        assert_eq!(at(7_000), [("degraded", 1), ("running", 1)]);
        assert_eq!(at(9_000), [("unobserved", 2)], "between runs");
        assert_eq!(at(10_000), [("degraded", 1), ("running", 1)]);
        assert_eq!(t.points[10].at, crate::time::rfc3339(10_000));
    }
}
