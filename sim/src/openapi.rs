//! The OpenAPI v3 documents `kubectl` reads before it writes: the list of
//! group versions (`/openapi/v3`) and, for each, the paths of its
//! resources, every write saying it takes `fieldValidation` — so that
//! `kubectl apply` and `create -f` ask the server to validate instead of
//! refusing to run without a schema. The simulator keeps any field it is
//! given (it validates what it plays, not every schema).

use serde_json::{Value, json};

use crate::resources::Resource;

/// `group/version` as the documents' paths name it: `api/v1`,
/// `apis/apps/v1`.
fn path_of(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: every served group version and where its document is.
pub fn index(served: &[&'static Resource], version: u64) -> Value {
    let mut paths = serde_json::Map::new();
    for resource in served {
        let path = path_of(resource.group, resource.version);
        paths.insert(
            path.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{path}?hash={version}") }),
        );
    }
    json!({ "paths": paths })
}

/// `/openapi/v3/{api/v1 | apis/GROUP/VERSION}`: the paths of the group
/// version's resources, or `None` when none is served there.
pub fn document(served: &[&'static Resource], group: &str, version: &str) -> Option<Value> {
    let resources: Vec<&Resource> = served
        .iter()
        .copied()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if resources.is_empty() {
        return None;
    }
    let validation = json!({
        "name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true},
        "description": "Strict, Warn or Ignore: what the server does with unknown or duplicate fields",
    });
    let mut paths = serde_json::Map::new();
    for r in resources {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let write = |what: &str| {
            json!({
                "description": format!("{what} {}", r.kind),
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [validation],
                "responses": {"200": {"description": "OK"}},
            })
        };
        let base = format!("/{}", path_of(r.group, r.version));
        let (collection, item) = if r.namespaced {
            (
                format!("{base}/namespaces/{{namespace}}/{}", r.plural),
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural),
            )
        } else {
            (
                format!("{base}/{}", r.plural),
                format!("{base}/{}/{{name}}", r.plural),
            )
        };
        paths.insert(collection, json!({ "post": write("create") }));
        paths.insert(
            item,
            json!({ "put": write("replace"), "patch": write("patch") }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (verdict-sim)", "version": crate::resources::version()["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::RESOURCES;

    #[test]
    fn every_write_takes_field_validation() {
        let served: Vec<&'static Resource> = RESOURCES.iter().collect();
        let index = index(&served, 7);
        assert_eq!(
            index["paths"]["apis/apps/v1"]["serverRelativeURL"],
            "/openapi/v3/apis/apps/v1?hash=7"
        );
        let apps = document(&served, "apps", "v1").unwrap();
        let patch =
            &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(patch["parameters"][0]["name"], "fieldValidation");
        let core = document(&served, "", "v1").unwrap();
        assert!(core["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object());
        assert!(document(&served, "nothing.example", "v1").is_none());
    }
}
