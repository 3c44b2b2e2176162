//! The real `verdict` binary over HTTP: it serves the registry, reloads on
//! request, answers errors as JSON, refuses bad configuration clearly, and
//! a restart uses the compiled-code cache instead of compiling again.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::{KillOnDrop, default_plugin, test_plugin};

/// A running `verdict serve`, stopped when dropped.
pub struct Server {
    process: KillOnDrop,
    pub base: String,
}

impl Server {
    fn start(plugins: &Path, data: &Path) -> Self {
        Self::start_with(plugins, data, &[])
    }

    /// Start with the data folder's own code cache, not the tests' shared
    /// one: for the tests of compilation and its cache.
    fn start_compiling(plugins: &Path, data: &Path) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_verdict"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--plugins"])
            .arg(plugins)
            .arg("--data-dir")
            .arg(data)
            .env_remove(crate::support::CACHE_VARIABLE);
        Self::start_command(command)
    }

    /// Start as `command` says (its arguments after `serve`, its folder).
    pub fn start_command(command: Command) -> Self {
        let (child, base) = crate::support::spawn_serving(command, "warn");
        Self {
            process: KillOnDrop(child),
            base,
        }
    }

    /// Start as `command` says, logging at `log` into the file `to`.
    pub fn start_logging(command: Command, log: &str, to: &Path) -> Self {
        let file = std::fs::File::create(to).unwrap();
        let (child, base) = crate::support::spawn_serving_to(command, log, file.into());
        Self {
            process: KillOnDrop(child),
            base,
        }
    }

    /// Start with more flags.
    pub fn start_with(plugins: &Path, data: &Path, extra: &[&str]) -> Self {
        let (child, base) = crate::support::spawn_verdict(
            plugins,
            data,
            extra,
            &std::env::var("VERDICT_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        );
        Self {
            process: KillOnDrop(child),
            base,
        }
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let response = reqwest::blocking::get(format!("{}{path}", self.base)).unwrap();
        (response.status().as_u16(), response.json().unwrap())
    }

    /// A request with a raw body; the answer's status and JSON body.
    pub fn send(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request =
            reqwest::blocking::Client::new().request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// Wait, for at most `limit`, until the verdict of `app`
    /// (`namespace/name`) satisfies `check`; panics with the last verdict
    /// seen when it never does.
    pub fn app_until(
        &self,
        app: &str,
        what: &str,
        limit: std::time::Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut last = Value::Null;
        let took = crate::support::wait_until(limit, || {
            last = self.get(&format!("/v1/apps/{app}")).1;
            check(&last)
        });
        assert!(
            took.is_some(),
            "{what}: never happened; last verdict {last}"
        );
        last
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// Ask the process to stop (SIGTERM), as Kubernetes does.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Whether the process has exited, and how.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.process.0.try_wait().unwrap()
    }

    /// Kill the process at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.process.0.kill();
        let _ = self.process.0.wait();
    }

    fn post(&self, path: &str) -> (u16, Value) {
        let response = reqwest::blocking::Client::new()
            .post(format!("{}{path}", self.base))
            .send()
            .unwrap();
        (response.status().as_u16(), response.json().unwrap())
    }
}

fn install_defaults(dir: &Path) {
    for name in DEFAULTS {
        std::fs::copy(default_plugin(name), dir.join(format!("{name}.wasm"))).unwrap();
    }
}

const DEFAULTS: [&str; 4] = ["status", "failover", "admission", "lifecycle"];

fn code_sources(server: &Server) -> Vec<String> {
    let (status, body) = server.get("/v1/plugins");
    assert_eq!(status, 200);
    body["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["current"]["code"].as_str().unwrap_or("none").to_string())
        .collect()
}

#[test]
fn a_restart_uses_the_code_cache() {
    let plugins = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    install_defaults(plugins.path());

    let first = Server::start_compiling(plugins.path(), data.path());
    assert_eq!(code_sources(&first), ["compiled"; DEFAULTS.len()]);
    drop(first);

    let second = Server::start_compiling(plugins.path(), data.path());
    assert_eq!(code_sources(&second), ["cache"; DEFAULTS.len()]);
    let (_, body) = second.get("/v1/plugins");
    for plugin in body["plugins"].as_array().unwrap() {
        assert_eq!(plugin["active"], true, "{plugin}");
        assert!(plugin["last_error"].is_null(), "{plugin}");
    }
}

/// The compiled-code cache's entries (`*.cwasm`) under a data folder.
fn cache_entries(data: &Path) -> Vec<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(data.join("code-cache"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    entries.sort();
    entries
}

#[test]
fn a_damaged_cache_entry_is_compiled_again_not_loaded() {
    use std::io::{Seek as _, SeekFrom, Write as _};
    let plugins = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    install_defaults(plugins.path());
    drop(Server::start_compiling(plugins.path(), data.path()));
    let entries = cache_entries(data.path());
    assert_eq!(entries.len(), DEFAULTS.len(), "{entries:?}");
    // Damage each entry as a bad disk page would: the same size, a page of
    // its code overwritten (loaded as it is, this crashes the host).
    for entry in &entries {
        let length = std::fs::metadata(entry).unwrap().len();
        let mut file = std::fs::OpenOptions::new().write(true).open(entry).unwrap();
        file.seek(SeekFrom::Start(length / 2)).unwrap();
        file.write_all(&[0xcc; 4096]).unwrap();
    }
    // And one entry without the digest kept beside it.
    std::fs::remove_file(entries[0].with_extension("cwasm.sha256")).unwrap();
    let damaged: Vec<Vec<u8>> = entries.iter().map(|e| std::fs::read(e).unwrap()).collect();

    let second = Server::start_compiling(plugins.path(), data.path());
    assert_eq!(code_sources(&second), ["compiled"; DEFAULTS.len()]);
    assert_eq!(second.get("/healthz").0, 200);
    drop(second);
    // Compiled again and written whole with its digest: the next start
    // uses the cache.
    for (entry, damaged) in entries.iter().zip(&damaged) {
        assert_ne!(&std::fs::read(entry).unwrap(), damaged);
        assert!(entry.with_extension("cwasm.sha256").is_file());
    }
    let third = Server::start_compiling(plugins.path(), data.path());
    assert_eq!(code_sources(&third), ["cache"; DEFAULTS.len()]);
}

/// `/v1/plugins`' entry of a plugin.
fn plugin_entry(server: &Server, name: &str) -> Value {
    let (_, body) = server.get("/v1/plugins");
    body["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no plugin {name}: {body}"))
}

#[test]
fn a_folder_says_which_policy_serves_each_world() {
    let plugins = tempfile::tempdir().unwrap();
    install_defaults(plugins.path());
    std::fs::copy(
        crate::support::example_plugin("restart-budget"),
        plugins.path().join("restart-budget.wasm"),
    )
    .unwrap();
    // By default the file named after the world serves it; the other one
    // says why it does not, and how to make it serve.
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(plugins.path(), data.path());
    let budget = plugin_entry(&server, "restart-budget");
    assert_eq!(budget["active"], false, "{budget}");
    let why = budget["not_serving"].as_str().unwrap_or_default();
    assert!(why.contains("status.wasm serves the status world"), "{why}");
    assert!(why.contains("status-policy = \"restart-budget\""), "{why}");
    assert!(plugin_entry(&server, "status")["not_serving"].is_null());
    drop(server);
    // Named in the configuration, it serves, and the default says so.
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        plugins.path(),
        data.path(),
        &["--status-policy", "restart-budget"],
    );
    assert_eq!(plugin_entry(&server, "restart-budget")["active"], true);
    let default = plugin_entry(&server, "status");
    assert_eq!(default["active"], false, "{default}");
    assert!(
        default["not_serving"]
            .as_str()
            .is_some_and(|w| w.contains("restart-budget.wasm serves")),
        "{default}"
    );
}

#[test]
fn plugins_and_reload_over_http() {
    let plugins = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    install_defaults(plugins.path());
    let server = Server::start(plugins.path(), data.path());

    let (status, body) = server.get("/healthz");
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));

    let (status, body) = server.get("/v1/plugins");
    assert_eq!(status, 200);
    let names: Vec<&str> = body["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["current"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "default-admission",
            "default-failover",
            "default-lifecycle",
            "default-status"
        ]
    );

    // A component of no known world: rejected, with the reason, over HTTP.
    std::fs::copy(test_plugin("alien"), plugins.path().join("alien.wasm")).unwrap();
    let (status, report) = server.post("/v1/plugins/reload");
    assert_eq!(status, 200);
    let rejected = report["rejected"].as_array().unwrap();
    assert!(
        rejected
            .iter()
            .any(|r| r["plugin"] == "alien" && r["kind"] == "no-world"),
        "{report}"
    );
    let (_, body) = server.get("/v1/plugins");
    let alien = body["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "alien")
        .unwrap()
        .clone();
    assert!(alien["current"].is_null());
    assert!(
        alien["last_error"]["message"]
            .as_str()
            .unwrap()
            .contains("no world")
    );

    // A 2 GB sparse file is refused on its size, before a byte is read.
    let huge = plugins.path().join("status.wasm");
    let good = std::fs::read(&huge).unwrap();
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let (status, report) = server.post("/v1/plugins/reload");
    assert_eq!(status, 200, "{report}");
    let refused = report["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["plugin"] == "status")
        .unwrap_or_else(|| panic!("{report}"))
        .clone();
    assert!(
        refused["error"].as_str().unwrap().contains("not read"),
        "{refused}"
    );
    assert_eq!(refused["still_serving"], true);
    assert!(plugin_entry(&server, "status")["last_error"].is_object());
    // The good file back: served as before, and its error is over.
    std::fs::write(&huge, &good).unwrap();
    let (status, report) = server.post("/v1/plugins/reload");
    assert_eq!(status, 200, "{report}");
    let status_plugin = plugin_entry(&server, "status");
    assert!(status_plugin["last_error"].is_null(), "{status_plugin}");

    let (status, body) = server.get("/v1/nothing-here");
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not-found");
    let (status, body) = server.get("/v1/plugins/reload");
    assert_eq!(status, 405);
    assert_eq!(body["error"]["code"], "method-not-allowed");
}

#[test]
fn a_plugin_folder_that_cannot_be_read_is_an_error_of_the_reload() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    install_defaults(&plugins);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&plugins, data.path());
    // The folder becomes a symlink loop.
    std::fs::rename(&plugins, dir.path().join("gone")).unwrap();
    std::os::unix::fs::symlink(&plugins, &plugins).unwrap();
    let (status, body) = server.post("/v1/plugins/reload");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "plugin-folder-unreadable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot be read") && m.contains("still serves")),
        "{body}"
    );
    // What served still serves.
    assert_eq!(code_sources(&server).len(), DEFAULTS.len());
}

#[test]
fn bad_configuration_exits_with_a_message_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("verdict.toml");
    std::fs::write(&config, "call-timeout-ms = \"soon\"\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("call-timeout-ms"), "{stderr}");

    let output = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["serve", "--plugins", "/nonexistent/plugins"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("plugins"));
}

#[test]
fn two_hosts_on_one_data_folder_do_not_both_start() {
    let plugins = crate::support::plugin_folder(&DEFAULTS);
    let data = tempfile::tempdir().unwrap();
    let first = Server::start_with(plugins.path(), data.path(), &["--demo"]);
    let output = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(["serve", "--demo", "--listen", "127.0.0.1:0", "--plugins"])
        .arg(plugins.path())
        .arg("--data-dir")
        .arg(data.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let holder = format!("process {}", first.pid());
    assert!(
        stderr.contains("is in use by another verdict") && stderr.contains(&holder),
        "{stderr}"
    );
    // The first goes on serving; once it is gone the folder is free.
    assert_eq!(first.get("/healthz").0, 200);
    drop(first);
    let second = Server::start_with(plugins.path(), data.path(), &["--demo"]);
    assert_eq!(second.get("/healthz").0, 200);
}

#[test]
fn not_ready_is_an_answer_not_an_error_in_the_log() {
    use std::io::{BufRead, BufReader};
    let plugins = crate::support::plugin_folder(&DEFAULTS);
    let data = tempfile::tempdir().unwrap();
    // A cluster that is not there: the host serves, and is not ready.
    let child = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--cluster-url",
            "http://127.0.0.1:9",
        ])
        .arg("--plugins")
        .arg(plugins.path())
        .arg("--data-dir")
        .arg(data.path())
        .env("VERDICT_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Stopped even when an assertion fails.
    let mut child = KillOnDrop(child);
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("verdict listening on ")
        .unwrap()
        .to_string();
    for _ in 0..5 {
        let response = reqwest::blocking::get(format!("{base}/readyz")).unwrap();
        assert_eq!(response.status(), 503);
    }
    let _ = child.0.kill();
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut log).unwrap();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("/readyz"))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_error_is_the_apis_json_error() {
    let plugins = crate::support::plugin_folder(&DEFAULTS);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(plugins.path(), data.path(), &["--demo"]);
    let client = reqwest::blocking::Client::new();
    let long_uri = format!("/v1/apps?namespace={}", "a".repeat(9 * 1024));
    let big_header = "b".repeat(70 * 1024);
    for (method, path, status, code) in [
        (
            "GET",
            "/v1/failover/history?limit=abc",
            400,
            "invalid-request",
        ),
        ("GET", long_uri.as_str(), 414, "uri-too-long"),
        ("GET", "/v1/apps?big-header", 431, "headers-too-large"),
        (
            "GET",
            "/v1/failover/history?before=-1",
            400,
            "invalid-request",
        ),
        ("GET", "/v1/apps/%ff/x", 400, "invalid-request"),
        ("GET", "/v1/nothing-here", 404, "not-found"),
        ("DELETE", "/v1/apps", 405, "method-not-allowed"),
    ] {
        let mut request = client.request(method.parse().unwrap(), format!("{}{path}", server.base));
        if path.ends_with("big-header") {
            request = request.header("x-big", big_header.as_str());
        }
        let response = request.send().unwrap();
        assert_eq!(
            response.status().as_u16(),
            status,
            "{method} {}",
            &path[..path.len().min(80)]
        );
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            content_type.starts_with("application/json"),
            "{method} {path}: {content_type}"
        );
        let body: Value = response.json().unwrap();
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    }
}

/// Whether the server closed the connection within `limit` (a read that
/// ends, or fails, rather than waiting).
fn closed_within(stream: &mut std::net::TcpStream, limit: std::time::Duration) -> bool {
    use std::io::Read;
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn slow_silent_and_idle_connections_are_closed_and_connections_are_capped() {
    use std::io::Write;
    use std::time::Duration;
    let plugins = crate::support::plugin_folder(&DEFAULTS);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        plugins.path(),
        data.path(),
        &["--demo", "--header-timeout-ms", "300"],
    );
    let address = server.base.trim_start_matches("http://").to_string();
    let connect = || std::net::TcpStream::connect(&address).unwrap();
    let bound = Duration::from_secs(5);

    // Nothing sent; half a request line; one byte.
    let mut silent = connect();
    assert!(
        closed_within(&mut silent, bound),
        "a silent connection stayed open"
    );
    let mut half = connect();
    half.write_all(b"GET /heal").unwrap();
    assert!(
        closed_within(&mut half, bound),
        "half a request line stayed open"
    );
    let mut one = connect();
    one.write_all(b"G").unwrap();
    assert!(closed_within(&mut one, bound), "one byte stayed open");
    // A kept-alive connection that goes idle after its answer.
    let mut idle = connect();
    idle.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
        .unwrap();
    assert!(
        closed_within(&mut idle, bound),
        "an idle keep-alive connection stayed open"
    );
    // An event stream outlives the bound: it is answering, not waiting
    // (the time passing is what is tested here).
    let stream = crate::events::Stream::open(&server, "", None);
    std::thread::sleep(Duration::from_millis(900));
    let body = serde_json::json!({"app": "shop/cart", "action": "restart"}).to_string();
    server.send("POST", "/v1/tasks", Some(&body));
    stream.until("an event after the bound", |m| m.event == "task");
    drop(server);

    // At most two connections: a third is closed at once.
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        plugins.path(),
        data.path(),
        &["--demo", "--max-connections", "2"],
    );
    let address = server.base.trim_start_matches("http://").to_string();
    // Two kept-alive connections, each answered once: both are served.
    let held: Vec<_> = (0..2)
        .map(|_| {
            use std::io::Read;
            let mut c = std::net::TcpStream::connect(&address).unwrap();
            c.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
                .unwrap();
            let mut answer = Vec::new();
            let mut byte = [0u8; 1];
            while !answer.ends_with(b"\r\n\r\n") {
                assert_eq!(c.read(&mut byte).unwrap(), 1, "the answer ended early");
                answer.push(byte[0]);
            }
            assert!(answer.starts_with(b"HTTP/1.1 200"));
            c
        })
        .collect();
    let mut third = std::net::TcpStream::connect(&address).unwrap();
    third.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
    assert!(
        closed_within(&mut third, bound),
        "a third connection was served"
    );
    drop(held);
    let back = crate::support::wait_until(bound, || {
        reqwest::blocking::get(format!("{}/healthz", server.base)).is_ok_and(|r| r.status() == 200)
    });
    assert!(back.is_some(), "connections freed, the server serves again");
}
