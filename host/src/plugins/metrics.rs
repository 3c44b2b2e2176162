//! The plugin runtime's own metrics: how long each call of each policy
//! version took.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    policy: String,
    version: String,
}

fn call_histogram() -> Histogram {
    // 10 µs to about 160 ms.
    Histogram::new(exponential_buckets(0.000_01, 2.0, 15))
}

/// Plugin call latency by policy and version.
#[derive(Debug, Clone)]
pub struct CallSeconds(Family<CallLabels, Histogram, fn() -> Histogram>);

/// The histograms of [`CallSeconds`], as Prometheus registers them.
pub type CallHistograms = Family<CallLabels, Histogram, fn() -> Histogram>;

impl Default for CallSeconds {
    fn default() -> Self {
        Self(Family::new_with_constructor(call_histogram))
    }
}

impl CallSeconds {
    /// The histograms, shared, for a metrics registry.
    pub fn family(&self) -> CallHistograms {
        self.0.clone()
    }

    pub fn observe(&self, policy: &str, version: &str, took: Duration) {
        self.0
            .get_or_create(&CallLabels {
                policy: policy.to_string(),
                version: version.to_string(),
            })
            .observe(took.as_secs_f64());
    }
}
