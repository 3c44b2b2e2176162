//! Kinds named by configuration (`[[resources]]`): looked for through
//! discovery, listed as unserved without holding readiness back, and
//! watched as soon as the server serves them — here, once their
//! CustomResourceDefinition is created in the simulator.

use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE, start_host};
use crate::support::wait_until;

pub const WIDGET: &str = "example.com/v1/Widget";

/// A configuration that watches Widgets.
pub const WATCH_WIDGETS: &str =
    "[[resources]]\ngroup = \"example.com\"\nversion = \"v1\"\nkind = \"Widget\"\n";

fn readyz(server: &crate::serve::Server) -> Value {
    server.get("/readyz").1
}

/// The CustomResourceDefinition of `example.com/v1` Widgets.
pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// A Widget of `shop/web`, ready.
pub fn widget(name: &str) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "shop", "labels": {"app.kubernetes.io/instance": "web"}},
        "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

#[test]
fn a_configured_kind_is_watched_once_its_definition_appears() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("verdict.toml");
    std::fs::write(&config, WATCH_WIDGETS).unwrap();
    let server = start_host(
        &cluster,
        data.path(),
        &["--config", config.to_str().unwrap()],
    );

    // Not served: said, and readiness is not held back by it.
    let waited = wait_until(PATIENCE, || {
        let ready = readyz(&server);
        ready["ready"] == true && ready["unserved"][WIDGET].is_string()
    });
    assert!(waited.is_some(), "{}", readyz(&server));

    cluster.apply(widget_crd());
    let waited = wait_until(PATIENCE, || {
        let ready = readyz(&server);
        ready["unserved"].get(WIDGET).is_none() && ready["watches"][WIDGET]["synced"] == true
    });
    assert!(waited.is_some(), "never watched: {}", readyz(&server));

    cluster.apply(widget("w1"));
    cluster.apply(widget("w2"));
    let waited = wait_until(PATIENCE, || readyz(&server)["objects"][WIDGET] == 2);
    assert!(waited.is_some(), "{}", readyz(&server));
    assert_eq!(readyz(&server)["ready"], true);

    // The widgets carry the app's label: they show in its verdict, with
    // their phase and conditions.
    let app = server.get("/v1/apps/shop/web").1;
    let objects = app["objects"]
        .as_array()
        .expect("the app lists its objects");
    let names: Vec<&str> = objects
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["w1", "w2"], "{app}");
    assert_eq!(objects[0]["kind"], "Widget");
    assert_eq!(objects[0]["resource"], WIDGET);
    assert_eq!(objects[0]["phase"], "Ready");
    assert_eq!(objects[0]["conditions"][0]["type"], "Ready");
    assert_eq!(objects[0]["conditions"][0]["status"], "True");
    let listed = server.get("/v1/apps?namespace=shop").1;
    assert_eq!(
        listed["apps"][0]["objects"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );

    // Gone from the cluster, gone from the app.
    let store = cluster.sim().store();
    let widgets =
        verdict_sim::resources::find_among(&store.resources(), "example.com", "v1", "widgets")
            .expect("the CRD's kind is served");
    store.delete(widgets, "shop", "w2").unwrap();
    let waited = wait_until(PATIENCE, || {
        server.get("/v1/apps/shop/web").1["objects"]
            .as_array()
            .map(Vec::len)
            == Some(1)
    });
    assert!(waited.is_some(), "{}", server.get("/v1/apps/shop/web").1);
}

#[test]
fn kubevirts_kinds_are_looked_for_by_default() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &[]);
    let waited = wait_until(PATIENCE, || {
        let ready = readyz(&server);
        ready["ready"] == true
            && ready["unserved"]["kubevirt.io/v1/VirtualMachine"].is_string()
            && ready["unserved"]["cdi.kubevirt.io/v1beta1/DataVolume"].is_string()
    });
    assert!(waited.is_some(), "{}", readyz(&server));
}
