//! Access control and request limits over HTTP: with tokens configured,
//! every mutating route refuses a request without a write token (401
//! without a valid token, 403 with a read token) and takes it with one;
//! reads need a read or write token; health and the admission webhook stay
//! open. Bodies over the limit are refused with a JSON error, and every
//! answer carries a request id.

use std::path::Path;

use serde_json::Value;

use crate::serve::Server;

fn request(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::blocking::Client::new()
        .request(method, format!("{}{path}", server.base))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().unwrap_or(Value::Null))
}

fn host(dir: &Path, extra: &[&str]) -> Server {
    std::fs::write(dir.join("read"), "# readers\nread-token\n").unwrap();
    std::fs::write(dir.join("write"), "write-token\n").unwrap();
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let read = dir.join("read");
    let write = dir.join("write");
    let mut flags = vec![
        "--demo",
        "--read-tokens-file",
        read.to_str().unwrap(),
        "--write-tokens-file",
        write.to_str().unwrap(),
    ];
    flags.extend_from_slice(extra);
    Server::start_with(&plugins, &dir.join("data"), &flags)
}

#[test]
fn mutations_need_a_write_token_and_reads_a_read_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = host(dir.path(), &[]);
    // The task's app is one the host has seen: a task for an app not yet
    // observed is the admission policy's refusal, not the tokens'.
    let seen = crate::support::wait_until(std::time::Duration::from_secs(60), || {
        request(&server, "GET", "/v1/apps/shop/web", Some("read-token"), "").0 == 200
    });
    assert!(seen.is_some(), "shop/web never observed");
    let task = r#"{"app": "shop/web", "action": "restart"}"#;
    let mutations = [
        ("POST", "/v1/tasks", task),
        ("PATCH", "/v1/tasks/some-task", r#"{"progress": 5}"#),
        ("POST", "/v1/tasks/some-task/approve", r#"{"by": "ann"}"#),
        ("POST", "/v1/tasks/some-task/reject", r#"{"by": "ann"}"#),
        ("POST", "/v1/tasks/some-task/cancel", "{}"),
        ("POST", "/v1/plugins/reload", ""),
    ];
    for (method, path, body) in mutations {
        let (code, headers, error) = request(&server, method, path, None, body);
        assert_eq!(code, 401, "{method} {path} without a token: {error}");
        assert_eq!(error["error"]["code"], "unauthenticated");
        assert!(headers.contains_key("www-authenticate"));
        let (code, _, _) = request(&server, method, path, Some("guess"), body);
        assert_eq!(code, 401, "{method} {path} with a wrong token");
        let (code, _, error) = request(&server, method, path, Some("read-token"), body);
        assert_eq!(code, 403, "{method} {path} with a read token: {error}");
        let (code, _, answer) = request(&server, method, path, Some("write-token"), body);
        assert!(
            code != 401 && code != 403,
            "{method} {path} with a write token: {code} {answer}"
        );
    }
    for path in ["/v1/plugins", "/v1/tasks", "/v1/apps"] {
        let (code, _, _) = request(&server, "GET", path, None, "");
        assert_eq!(code, 401, "GET {path} without a token");
        for token in ["read-token", "write-token"] {
            let (code, _, body) = request(&server, "GET", path, Some(token), "");
            assert_eq!(code, 200, "GET {path} with {token}: {body}");
        }
    }
    let (code, _, _) = request(&server, "GET", "/healthz", None, "");
    assert_eq!(code, 200);
    // The dashboard page is open (it holds no data); the event stream it
    // opens takes its token in the query, where EventSource can put it.
    let page = reqwest::blocking::get(format!("{}/", server.base)).unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = page.text().unwrap();
    assert!(
        html.contains("new EventSource(") && html.contains("/v1/tasks"),
        "{html}"
    );
    let stream = |query: &str| {
        reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(5))
            .build()
            .unwrap()
            .get(format!("{}/v1/events{query}", server.base))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(stream(""), 401);
    assert_eq!(stream("?access_token=guess"), 401);
    assert_eq!(stream("?access_token=read-token"), 200);
    // A token in the query does not make a mutation.
    let (code, _, _) = request(
        &server,
        "POST",
        "/v1/plugins/reload?access_token=write-token",
        None,
        "",
    );
    assert_eq!(code, 401);
    // The webhook is open: a bad review is a 400, not a 401.
    let (code, _, _) = request(&server, "POST", "/v1/admission/review", None, "{}");
    assert_eq!(code, 400);
}

#[test]
fn bodies_over_the_limit_are_refused_and_answers_carry_a_request_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = host(dir.path(), &["--body-limit-kib", "1"]);
    let big = format!(
        r#"{{"app": "shop/web", "action": "restart", "params": {{"note": "{}"}}}}"#,
        "x".repeat(4096)
    );
    let (code, _, error) = request(&server, "POST", "/v1/tasks", Some("write-token"), &big);
    assert_eq!(code, 413, "{error}");
    assert_eq!(error["error"]["code"], "body-too-large");
    let (_, headers, _) = request(&server, "GET", "/healthz", None, "");
    let id = headers["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let response = reqwest::blocking::Client::new()
        .get(format!("{}/healthz", server.base))
        .header("x-request-id", "trace-me-42")
        .send()
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-me-42");
}

#[test]
fn another_origin_cannot_write_even_without_tokens() {
    let cluster = crate::live::Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = crate::live::start_host(&cluster, data.path(), &[]);
    let client = reqwest::blocking::Client::new();
    let url = format!("{}/v1/tasks", server.base);
    let body = r#"{"app": "shop/web", "action": "restart"}"#;
    let host = server.base.trim_start_matches("http://").to_string();

    // What a page elsewhere can send without asking: a text/plain body…
    let plain = client
        .post(&url)
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(plain.status(), 415);
    let error: Value = plain.json().unwrap();
    assert_eq!(error["error"]["code"], "unsupported-media-type");
    // …or JSON from another origin, which browsers mark as such.
    for (name, value) in [
        ("origin", "https://evil.example".to_string()),
        ("sec-fetch-site", "cross-site".to_string()),
    ] {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .header(name, value)
            .body(body)
            .send()
            .unwrap();
        assert_eq!(response.status(), 403, "{name}");
        let error: Value = response.json().unwrap();
        assert_eq!(error["error"]["code"], "cross-origin");
    }
    assert!(
        server.get("/v1/tasks").1["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // The dashboard's own requests (same origin) and tools (no Origin) write.
    let same = client
        .post(&url)
        .header("content-type", "application/json")
        .header("origin", format!("http://{host}"))
        .header("sec-fetch-site", "same-origin")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(same.status(), 201);
    // Reads from anywhere stay open.
    let read = client
        .get(&url)
        .header("origin", "https://evil.example")
        .send()
        .unwrap();
    assert_eq!(read.status(), 200);
}

/// One request over a raw connection, its `Host` as given; the status.
fn raw(base: &str, method: &str, path: &str, host: &str, body: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let address = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let origin = format!("http://{host}");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\norigin: {origin}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

#[test]
fn a_name_rebound_to_this_server_is_refused_for_reads_and_writes() {
    let cluster = crate::live::Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = crate::live::start_host(
        &cluster,
        data.path(),
        &["--allowed-host", "verdict.example.com"],
    );
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let body = r#"{"app": "shop/web", "action": "delete"}"#;
    // A page on rebind.attacker.example whose name now resolves to
    // 127.0.0.1: its Origin matches its Host, and the Host is refused.
    let rebound = format!("rebind.attacker.example:{port}");
    for (method, path, body) in [
        ("POST", "/v1/tasks", body),
        ("GET", "/v1/apps", ""),
        ("GET", "/", ""),
    ] {
        let (status, answer) = raw(&server.base, method, path, &rebound, body);
        assert_eq!(status, 421, "{method} {path}: {answer}");
        assert!(answer.contains("unknown-host"), "{answer}");
    }
    assert!(
        server.get("/v1/tasks").1["tasks"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no task was made"
    );
    // The probes answer whatever the name.
    assert_eq!(raw(&server.base, "GET", "/healthz", &rebound, "").0, 200);
    // Its addresses, localhost and the names given are served.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("verdict.example.com:{port}"),
    ] {
        let (status, answer) = raw(&server.base, "GET", "/v1/apps", &host, "");
        assert_eq!(status, 200, "{host}: {answer}");
    }
    let (status, answer) = raw(
        &server.base,
        "POST",
        "/v1/tasks",
        &format!("verdict.example.com:{port}"),
        r#"{"app": "shop/web", "action": "restart"}"#,
    );
    assert_ne!(status, 421, "{answer}");
    assert_ne!(status, 403, "{answer}");
}
