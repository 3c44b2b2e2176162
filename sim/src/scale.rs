//! The scale subresource of Deployments, StatefulSets and a custom
//! resource whose definition has one (`…/{plural}/{name}/scale`): an `autoscaling/v1` `Scale` read from the
//! object's replica paths, and a write of its `spec.replicas` to the
//! object's — what `kubectl scale` and autoscalers use.

use serde_json::{Value, json};

use crate::resources::Resource;
use crate::store::{Part, Store, StoreError};

/// The value at a JSON path of the definition (`.status.replicas`).
fn at<'a>(object: &'a Value, path: &str) -> &'a Value {
    path.trim_start_matches('.')
        .split('.')
        .fold(object, |value, key| &value[key])
}

/// A merge patch that sets the JSON path `path` to `value`.
fn setting(path: &str, value: Value) -> Value {
    path.trim_start_matches('.')
        .rsplit('.')
        .fold(value, |inner, key| json!({ key: inner }))
}

/// The `Scale` of an object.
pub fn of(resource: &Resource, object: &Value) -> Value {
    let Some(scale) = resource.scale else {
        return Value::Null;
    };
    let metadata = &object["metadata"];
    let mut status = json!({
        "replicas": at(object, scale.status_replicas).as_u64().unwrap_or(0),
    });
    if let Some(selector) = scale.label_selector.map(|path| at(object, path))
        && selector.is_string()
    {
        status["selector"] = selector.clone();
    }
    json!({
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {
            "name": metadata["name"], "namespace": metadata["namespace"],
            "uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"],
            "creationTimestamp": metadata["creationTimestamp"],
        },
        "spec": {"replicas": at(object, scale.spec_replicas).as_u64().unwrap_or(0)},
        "status": status,
    })
}

/// Write a `Scale` (whole, or a merge patch of one): its `spec.replicas`
/// becomes the object's, on the resource version it names when it names
/// one.
pub fn write(
    store: &Store,
    resource: &'static Resource,
    namespace: &str,
    name: &str,
    body: &Value,
) -> Result<Value, StoreError> {
    let Some(scale) = resource.scale else {
        return Err(StoreError::bad_request(
            "the resource has no scale subresource",
        ));
    };
    let replicas = body
        .pointer("/spec/replicas")
        .and_then(Value::as_u64)
        .ok_or_else(|| StoreError::bad_request("spec.replicas must be a count of at least 0"))?;
    let mut patch = setting(scale.spec_replicas, json!(replicas));
    if let Some(version) = body
        .pointer("/metadata/resourceVersion")
        .filter(|v| v.is_string())
    {
        patch["metadata"] = json!({ "resourceVersion": version });
    }
    let written = store.patch_part(resource, namespace, name, &patch, Part::Object)?;
    Ok(of(resource, &written))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    #[test]
    fn a_scale_reads_the_objects_replicas_and_writes_its_spec() {
        let store = Store::new(100);
        let namespaces = find("", "v1", "namespaces").unwrap();
        store
            .create(namespaces, "", json!({"metadata": {"name": "shop"}}))
            .unwrap();
        let crds = find("apiextensions.k8s.io", "v1", "customresourcedefinitions").unwrap();
        store
            .create(
                crds,
                "",
                json!({
                    "metadata": {"name": "gadgets.example.dev"},
                    "spec": {"group": "example.dev", "scope": "Namespaced",
                             "names": {"plural": "gadgets", "kind": "Gadget"},
                             "versions": [{"name": "v1", "served": true, "storage": true,
                                           "subresources": {"status": {}, "scale": {
                                               "specReplicasPath": ".spec.replicas",
                                               "statusReplicasPath": ".status.replicas",
                                               "labelSelectorPath": ".status.selector"}}}]},
                }),
            )
            .unwrap();
        let gadgets = store.find("example.dev", "v1", "gadgets").unwrap();
        store
            .create(
                gadgets,
                "shop",
                json!({"metadata": {"name": "g"}, "spec": {"replicas": 1}}),
            )
            .unwrap();
        store
            .patch_part(
                gadgets,
                "shop",
                "g",
                &json!({"status": {"replicas": 1, "selector": "app=g"}}),
                Part::Status,
            )
            .unwrap();
        let scale = of(gadgets, &store.get(gadgets, "shop", "g").unwrap());
        assert_eq!(scale["spec"]["replicas"], 1);
        assert_eq!(scale["status"], json!({"replicas": 1, "selector": "app=g"}));
        // A write on an older version is refused; on the current one, taken.
        let refused = write(
            &store,
            gadgets,
            "shop",
            "g",
            &json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 3}}),
        )
        .unwrap_err();
        assert_eq!(refused.code, 409);
        let scaled = write(
            &store,
            gadgets,
            "shop",
            "g",
            &json!({"spec": {"replicas": 3}}),
        )
        .unwrap();
        assert_eq!(scaled["spec"]["replicas"], 3);
        let object = store.get(gadgets, "shop", "g").unwrap();
        assert_eq!(object["spec"]["replicas"], 3);
        assert_eq!(
            object["status"]["replicas"], 1,
            "the status is the controller's"
        );
        assert_eq!(
            write(&store, gadgets, "shop", "g", &json!({"spec": {}}))
                .unwrap_err()
                .code,
            400
        );
        // Resources without one have none; Deployments have theirs.
        assert!(find("", "v1", "pods").unwrap().scale.is_none());
        assert!(find("apps", "v1", "deployments").unwrap().scale.is_some());
    }

    #[test]
    fn a_path_reads_and_writes_nested_fields() {
        let object = json!({"spec": {"replicas": 3}, "status": {"selector": "app=web"}});
        assert_eq!(at(&object, ".spec.replicas"), 3);
        assert!(at(&object, ".status.replicas").is_null());
        assert_eq!(
            setting(".spec.replicas", json!(5)),
            json!({"spec": {"replicas": 5}})
        );
    }
}
