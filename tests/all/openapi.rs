//! `GET /openapi.json`: the OpenAPI document generated from the handlers
//! describes every route the host serves, and every route it describes is
//! served.

use serde_json::Value;

use crate::serve::Server;

/// Every operation of the HTTP API.
const OPERATIONS: [(&str, &str); 46] = [
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/v1/cluster"),
    ("get", "/metrics"),
    ("get", "/v1/apps"),
    ("get", "/v1/apps/{namespace}/{name}"),
    ("get", "/v1/nodes"),
    ("get", "/v1/plugins"),
    ("post", "/v1/plugins/reload"),
    ("get", "/v1/tasks"),
    ("post", "/v1/tasks"),
    ("get", "/v1/tasks/{id}"),
    ("patch", "/v1/tasks/{id}"),
    ("post", "/v1/tasks/{id}/approve"),
    ("post", "/v1/tasks/{id}/reject"),
    ("post", "/v1/tasks/{id}/cancel"),
    ("post", "/v1/admission/review"),
    ("get", "/v1/failover"),
    ("get", "/v1/failover/history"),
    ("put", "/v1/failover/overrides/{node}"),
    ("delete", "/v1/failover/overrides/{node}"),
    ("post", "/v1/failover/nodes/{node}/approve"),
    ("get", "/v1/overrides"),
    ("put", "/v1/apps/{namespace}/{name}/override"),
    ("delete", "/v1/apps/{namespace}/{name}/override"),
    (
        "put",
        "/v1/apps/{namespace}/{name}/instances/{instance}/override",
    ),
    (
        "delete",
        "/v1/apps/{namespace}/{name}/instances/{instance}/override",
    ),
    ("get", "/v1/apps/{namespace}/{name}/overrides/history"),
    ("get", "/v1/apps/{namespace}/{name}/history"),
    (
        "get",
        "/v1/apps/{namespace}/{name}/instances/{instance}/history",
    ),
    ("get", "/v1/apps/{namespace}/{name}/availability"),
    ("get", "/v1/namespaces/{namespace}/availability"),
    ("get", "/v1/availability"),
    ("get", "/v1/availability/timeline"),
    ("get", "/v1/events"),
    ("get", "/v1/replicas"),
    ("get", "/v1/policies"),
    ("get", "/v1/policies/{name}/shadow"),
    ("post", "/v1/policies/{name}/promote"),
    ("post", "/v1/policies/{name}/rollback"),
    ("get", "/v1/vm-delivery"),
    ("get", "/v1/vm-delivery/{namespace}/{set}"),
    (
        "get",
        "/v1/vm-delivery/{namespace}/{set}/instances/{instance}/log",
    ),
    ("post", "/v1/vm-delivery/{namespace}/{set}/{action}"),
    (
        "post",
        "/v1/vm-delivery/{namespace}/{set}/instances/{instance}/{action}",
    ),
    ("get", "/openapi.json"),
];

#[test]
fn the_openapi_document_covers_every_route() {
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(&plugins, data.path(), &["--demo"]);
    let (code, document) = server.get("/openapi.json");
    assert_eq!(code, 200);
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    let paths = document["paths"].as_object().unwrap();
    let mut described: Vec<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "post", "patch", "put", "delete"].contains(&k.as_str()))
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    described.sort();
    let mut expected: Vec<(String, String)> = OPERATIONS
        .iter()
        .filter(|(_, path)| *path != "/openapi.json")
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    expected.sort();
    assert_eq!(described, expected, "the document and the API differ");

    // Every operation is served: none falls to the not-found answer.
    for (method, path) in OPERATIONS {
        let concrete = path
            .replace("{namespace}", "shop")
            .replace("{name}", "web")
            .replace("{id}", "no-such-task")
            .replace("{node}", "no-such-node")
            .replace("{instance}", "no-such-instance")
            .replace("{set}", "portal")
            .replace("{action}", "approve");
        if path == "/v1/events" {
            continue; // a stream; served, as the event tests show
        }
        let (code, body) = server.send(&method.to_uppercase(), &concrete, Some("{}"));
        assert!(
            !(code == 404 && body["error"]["code"] == "not-found"),
            "{method} {path} is described but not served"
        );
        assert_ne!(code, 405, "{method} {path}");
    }
    // The task bodies are described by their schemas.
    let schemas = &document["components"]["schemas"];
    for name in [
        "Task",
        "NewTask",
        "TaskPatch",
        "StepReport",
        "Decision",
        "AppStatus",
        "AppView",
        "GroupView",
        "AppList",
        "TaskList",
    ] {
        assert!(schemas[name].is_object(), "no schema {name}");
    }
    let required: Vec<&Value> = schemas["NewTask"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert!(required.contains(&&Value::from("app")) && required.contains(&&Value::from("action")));
    // The app answer's schema names what a client reads.
    let app = serde_json::to_string(&schemas["AppStatus"]).unwrap();
    for field in ["observation_age_ms", "stale", "AppView"] {
        assert!(app.contains(field), "AppStatus lacks {field}: {app}");
    }
    for field in ["stable", "transitional", "display", "groups"] {
        assert!(
            schemas["AppView"]["properties"][field].is_object(),
            "AppView lacks {field}"
        );
    }
    // An undescribed path is not served.
    let (code, _) = server.get("/v1/undescribed");
    assert_eq!(code, 404);
}

#[test]
fn the_document_is_verdicts_own_and_documents_errors_and_tokens() {
    let plugins = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(&plugins, data.path(), &["--demo"]);
    let (_, document) = server.get("/openapi.json");
    let info = &document["info"];
    assert_eq!(info["title"], "verdict");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(info["license"]["name"], "Apache-2.0");
    assert!(info["contact"].is_null(), "{info}");
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    for (method, path) in OPERATIONS.iter().filter(|(_, p)| *p != "/openapi.json") {
        let responses = &document["paths"][path][method]["responses"];
        for code in ["400", "401", "403"] {
            assert!(
                responses[code].is_object(),
                "{method} {path} documents no {code}"
            );
        }
    }
    // The task request's constraints are in the schema, as the server
    // checks them: an empty or malformed app is refused.
    let app = &document["components"]["schemas"]["NewTask"]["properties"]["app"];
    assert_eq!(app["minLength"], 3, "{app}");
    assert!(app["pattern"].is_string(), "{app}");
    for bad in ["", "Shop/Web"] {
        let body = serde_json::json!({"app": bad, "action": "restart"}).to_string();
        let (code, error) = server.send("POST", "/v1/tasks", Some(&body));
        assert_eq!(code, 422, "{bad}: {error}");
    }
    // The actions and phases the schema lists are exactly those the host
    // knows.
    use verdict::wit::WitName;
    use verdict::wit::types::{TaskAction, TaskPhase};
    for (schema, names) in [
        ("ActionName", <TaskAction as WitName>::NAMES),
        ("PhaseName", <TaskPhase as WitName>::NAMES),
    ] {
        let listed: Vec<&str> = document["components"]["schemas"][schema]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{schema} lists no values"))
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(listed, names, "{schema}");
    }
    // An error answer has the documented shape.
    let (code, error) = server.get("/v1/failover/history?limit=abc");
    assert_eq!(code, 400);
    let schema = &document["components"]["schemas"]["ApiErrorBody"];
    for key in schema["properties"]["error"]["required"]
        .as_array()
        .unwrap()
    {
        assert!(error["error"][key.as_str().unwrap()].is_string(), "{error}");
    }
    // An AdmissionReview of a version no API server sends is refused.
    let review =
        crate::support::review("pod-create.json", "shop").replace("admission.k8s.io/v1", "foo/bar");
    let (code, refused) = server.send("POST", "/v1/admission/review", Some(&review));
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("foo/bar"),
        "{refused}"
    );
}
