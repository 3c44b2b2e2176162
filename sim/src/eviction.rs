//! The Eviction API (`POST …/pods/{name}/eviction`): a pod is deleted
//! unless a `PodDisruptionBudget` that selects it would be broken, in which
//! case the answer is `429 Too Many Requests`, as the API server gives.
//!
//! A budget's `minAvailable` or `maxUnavailable` (a count or a percentage
//! of the pods it selects) sets how many of its pods must stay ready.
//! Evicting a ready pod needs one ready pod to spare; a pod that is not
//! ready may go while the budget is met (`IfHealthyBudget`, the default).

use serde_json::{Value, json};

use crate::controller::ready;
use crate::resources;
use crate::store::{Store, StoreError};
use crate::text;

/// Whether a budget's `spec.selector.matchLabels` selects a pod (a budget
/// without a selector selects nothing).
fn selects(budget: &Value, pod: &Value) -> bool {
    let Some(wanted) = budget
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
    else {
        return false;
    };
    !wanted.is_empty()
        && wanted
            .iter()
            .all(|(k, v)| pod.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
}

/// A count or percentage of `of`, percentages rounded up as Kubernetes does.
fn amount(value: &Value, of: usize) -> Option<usize> {
    match value {
        Value::Number(n) => n.as_u64().map(|n| n as usize),
        Value::String(s) => {
            let percent: usize = s.strip_suffix('%')?.trim().parse().ok()?;
            Some((percent * of).div_ceil(100))
        }
        _ => None,
    }
}

/// How many selected pods must stay ready under a budget.
fn desired_healthy(budget: &Value, selected: usize) -> usize {
    let spec = &budget["spec"];
    if let Some(min) = spec.get("minAvailable").and_then(|v| amount(v, selected)) {
        return min;
    }
    if let Some(max) = spec.get("maxUnavailable").and_then(|v| amount(v, selected)) {
        return selected.saturating_sub(max);
    }
    0
}

/// Evict a pod: delete it, or refuse with the budget it would break.
pub fn evict(store: &Store, namespace: &str, name: &str) -> Result<Value, StoreError> {
    let pods = resources::find("", "v1", "pods").expect("pods are built in");
    let budgets =
        resources::find("policy", "v1", "poddisruptionbudgets").expect("budgets are built in");
    let pod = store.get(pods, namespace, name)?;
    let (budgets, _) = store.list(budgets, Some(namespace));
    let (all, _) = store.list(pods, Some(namespace));
    for budget in budgets.iter().filter(|b| selects(b, &pod)) {
        let selected: Vec<&Value> = all.iter().filter(|p| selects(budget, p)).collect();
        let healthy = selected.iter().filter(|p| ready(p)).count();
        let desired = desired_healthy(budget, selected.len());
        let after = if ready(&pod) {
            healthy.saturating_sub(1)
        } else {
            healthy
        };
        if after < desired {
            return Err(StoreError {
                code: 429,
                reason: "TooManyRequests",
                message: format!(
                    "Cannot evict pod as it would violate the pod's disruption budget. \
                     The disruption budget {} needs {desired} healthy pods and has {healthy} currently",
                    text(budget, "/metadata/name")
                ),
            });
        }
    }
    store.delete(pods, namespace, name)?;
    Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    #[test]
    fn a_budget_holds_back_an_eviction_that_would_break_it() {
        let store = Store::new(100);
        for object in [
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
            pod("web-0", true),
            pod("web-1", true),
            pod("web-2", false),
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "web", "namespace": "shop"},
                   "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
        ] {
            crate::apply(&store, object).unwrap();
        }
        let refused = evict(&store, "shop", "web-0").unwrap_err();
        assert_eq!(refused.code, 429);
        assert!(
            refused.message.contains("disruption budget web"),
            "{refused}"
        );
        // The pod that is not ready may go: two ready pods remain.
        evict(&store, "shop", "web-2").unwrap();
        let pods = resources::find("", "v1", "pods").unwrap();
        assert_eq!(store.get(pods, "shop", "web-2").unwrap_err().code, 404);
        assert!(store.get(pods, "shop", "web-0").is_ok());
        assert_eq!(evict(&store, "shop", "nope").unwrap_err().code, 404);

        // A percentage: 50% of two pods available lets one go, not both.
        crate::apply(
            &store,
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "web", "namespace": "shop"},
                   "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .unwrap();
        evict(&store, "shop", "web-0").unwrap();
        assert_eq!(evict(&store, "shop", "web-1").unwrap_err().code, 429);
    }
}
