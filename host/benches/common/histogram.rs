//! Histograms read from a Prometheus text scrape, and their quantiles
//! between two scrapes: the benchmarks read the host's own timings from
//! its `/metrics`.

use std::collections::BTreeMap;

/// One histogram of a scrape: its sum, its count and its cumulative
/// buckets by upper bound (seconds).
#[derive(Debug, Default, Clone)]
pub struct Histogram {
    pub sum: f64,
    pub count: f64,
    pub buckets: BTreeMap<String, f64>,
}

/// The histogram `name` of a scrape, summed over the series whose labels
/// contain `labels`.
pub fn histogram(text: &str, name: &str, labels: &str) -> Histogram {
    let mut h = Histogram::default();
    for line in text.lines().filter(|l| l.starts_with(name)) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if !series.contains(labels) {
            continue;
        }
        let rest = &series[name.len()..];
        if rest.starts_with("_sum") {
            h.sum += value;
        } else if rest.starts_with("_count") {
            h.count += value;
        } else if let Some(le) = rest.split("le=\"").nth(1).and_then(|s| s.split('"').next()) {
            *h.buckets.entry(le.to_string()).or_default() += value;
        }
    }
    h
}

/// The smallest bucket bound holding at least 99 % of the observations
/// between two scrapes.
pub fn p99_bound(before: &Histogram, after: &Histogram) -> String {
    let total = after.count - before.count;
    let mut bounds: Vec<(f64, f64)> = after
        .buckets
        .iter()
        .map(|(le, n)| {
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            (bound, n - before.buckets.get(le).copied().unwrap_or(0.0))
        })
        .collect();
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    bounds
        .iter()
        .find(|(_, n)| *n >= 0.99 * total)
        .map_or("—".into(), |(b, _)| {
            if b.is_finite() {
                format!("≤ {:.1} ms", b * 1e3)
            } else {
                "above the largest bucket".into()
            }
        })
}

/// The mean of the observations between two scrapes, in milliseconds.
pub fn mean_ms(before: &Histogram, after: &Histogram) -> f64 {
    let n = after.count - before.count;
    if n > 0.0 {
        (after.sum - before.sum) / n * 1e3
    } else {
        0.0
    }
}
