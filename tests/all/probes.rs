//! What an outside probe of the API found, each refused with a clear
//! answer: `.` and `..` as names (which would walk the API server's
//! paths), a name of invisible characters as who decides, a
//! bidirectional override in a reason (which reverses text where it is
//! shown), a window that would begin before 1970, and the availability of
//! an app that never existed.

use serde_json::json;

use crate::serve::Server;
use crate::support::{plugin_folder, wait_until};

/// A request written by hand, its path as given; the whole answer.
fn raw(base: &str, method: &str, path: &str, body: &str) -> String {
    use std::io::{Read as _, Write as _};
    let address = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn what_a_probe_found_is_refused_in_words() {
    let plugins = plugin_folder(&["status", "admission", "failover", "lifecycle"]);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(plugins.path(), data.path(), &["--demo"]);
    let seen = wait_until(std::time::Duration::from_secs(60), || {
        server.get("/v1/apps/shop/web").0 == 200
    });
    assert!(seen.is_some(), "the demo's shop/web never appeared");

    // Names that are no Kubernetes names never reach the API server (sent
    // as written: a URL library would resolve the dots away).
    for (method, path) in [
        ("GET", "/v1/vm-delivery/%2E%2E/portal"),
        ("GET", "/v1/vm-delivery/vms/%2E"),
        ("GET", "/v1/vm-delivery/vms/%2e%2e/instances/portal-0/log"),
        ("POST", "/v1/vm-delivery/vms/%2E%2E/retry"),
        ("POST", "/v1/vm-delivery/vms/portal/instances/%2E%2E/skip"),
    ] {
        let answer = raw(&server.base, method, path, r#"{"by": "ana"}"#);
        assert!(answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
        assert!(
            answer.contains("is not a Kubernetes name"),
            "{path}: {answer}"
        );
    }

    // Who decides must show; a reason may not reorder itself.
    let (code, body) = server.send(
        "PUT",
        "/v1/apps/shop/web/override",
        Some(&json!({"status": "running", "by": "\u{200b}\u{2060}", "reason": "x"}).to_string()),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("who decides"),
        "{body}"
    );
    let (code, body) = server.send(
        "PUT",
        "/v1/apps/shop/web/override",
        Some(
            &json!({"status": "running", "by": "ana", "reason": "fixed \u{202e}gnihton"})
                .to_string(),
        ),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("U+202E"),
        "{body}"
    );
    let (code, body) = server.send(
        "POST",
        "/v1/vm-delivery/vms/portal/retry",
        Some(&json!({"by": "\u{feff}"}).to_string()),
    );
    assert_eq!(code, 422, "{body}");
    let (code, body) = server.send(
        "POST",
        "/v1/vm-delivery/vms/portal/retry",
        Some(&json!({"by": "ana", "why": "\u{2067}abc"}).to_string()),
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("U+2067"),
        "{body}"
    );
    // A name that shows is taken.
    let (code, body) = server.send(
        "PUT",
        "/v1/apps/shop/web/override",
        Some(&json!({"status": "running", "by": "ana", "reason": "checked by hand"}).to_string()),
    );
    assert_eq!(code, 200, "{body}");

    // A window that would begin before 1970; an app that never existed.
    let (code, body) = server.get("/v1/apps/shop/web/availability?until=1970-01-01T00:00:00Z");
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["error"]["field"], "until", "{body}");
    let (code, body) = server.get("/v1/apps/shop/never-was/availability");
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["error"]["code"], "no-such-app", "{body}");
    let (code, body) = server.get("/v1/apps/shop/web/availability?window=1h");
    assert_eq!(code, 200, "{body}");
}
