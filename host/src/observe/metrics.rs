//! Pod usage from `metrics.k8s.io`, when the cluster serves it: the pod
//! metrics are listed periodically and each pod's container usage enters its
//! observation (the default status policy calls a pod at its limit
//! overloaded). A cluster without a metrics API is asked again rarely.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::cluster::Observed;
use super::reduce::parse_quantity;
use crate::wit::types;

const PATH: &str = "/apis/metrics.k8s.io/v1beta1/pods";

type Usage = BTreeMap<(String, String), BTreeMap<String, types::Resources>>;

/// The usage in a `PodMetricsList`.
fn usage_of(list: &Value) -> Usage {
    let mut usage = Usage::new();
    for item in list
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = |p: &str| {
            item.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let mut containers = BTreeMap::new();
        for c in item
            .get("containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let quantity = |key: &str| {
                c.pointer(&format!("/usage/{key}"))
                    .and_then(Value::as_str)
                    .and_then(parse_quantity)
            };
            containers.insert(
                c.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                types::Resources {
                    cpu_millis: quantity("cpu").map(|cores| (cores * 1000.0).round() as u64),
                    memory_bytes: quantity("memory").map(|bytes| bytes.round() as u64),
                },
            );
        }
        usage.insert(
            (text("/metadata/namespace"), text("/metadata/name")),
            containers,
        );
    }
    usage
}

/// Whether two pods' usage is the same.
fn same(
    a: Option<&BTreeMap<String, types::Resources>>,
    b: Option<&BTreeMap<String, types::Resources>>,
) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
                    ka == kb && va.cpu_millis == vb.cpu_millis && va.memory_bytes == vb.memory_bytes
                })
        }
        _ => false,
    }
}

/// Poll pod metrics every `every`, until aborted.
pub(crate) async fn poll_forever(client: kube::Client, observed: Arc<Observed>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut served = true;
    let mut skip = 0u32;
    loop {
        tick.tick().await;
        if skip > 0 {
            skip -= 1;
            continue;
        }
        let request = match axum::http::Request::get(PATH).body(Vec::new()) {
            Ok(request) => request,
            Err(_) => return,
        };
        let list: Value = match client.request(request).await {
            Ok(list) => list,
            Err(error) => {
                if served {
                    tracing::info!(%error, "no pod metrics from the cluster; asking again later");
                }
                served = false;
                // Ask a cluster without metrics ten times less often.
                skip = 9;
                continue;
            }
        };
        served = true;
        let usage = usage_of(&list);
        let changed: Vec<(String, String)> = {
            let mut snapshot = observed.snapshot();
            let keys: std::collections::BTreeSet<_> =
                usage.keys().chain(snapshot.usage.keys()).cloned().collect();
            let changed: Vec<_> = keys
                .into_iter()
                .filter(|k| !same(usage.get(k), snapshot.usage.get(k)))
                .filter_map(|(namespace, name)| snapshot.app_of_pod_key((&namespace, &name)))
                .collect();
            snapshot.usage = usage;
            changed
        };
        if !changed.is_empty() {
            observed.mark_apps(changed);
            observed.changed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_metrics_list_becomes_usage_per_container() {
        let list = serde_json::json!({"kind": "PodMetricsList", "items": [
            {"metadata": {"name": "web-1", "namespace": "shop"},
             "containers": [{"name": "web", "usage": {"cpu": "250m", "memory": "64Mi"}}]}]});
        let usage = usage_of(&list);
        let web = usage[&("shop".to_string(), "web-1".to_string())]["web"];
        assert_eq!(web.cpu_millis, Some(250));
        assert_eq!(web.memory_bytes, Some(64 << 20));
    }
}
