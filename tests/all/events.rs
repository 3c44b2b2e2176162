//! The event stream (`GET /v1/events`, Server-Sent Events): verdict and
//! task changes in order with increasing ids, a reconnect with
//! `Last-Event-ID` replays what was missed, a reconnect past the buffer is
//! told to resync, heartbeats keep an idle stream alive, and a client that
//! stops reading delays nobody.

use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE, start_host};
use crate::serve::Server;

/// One message of a stream: an event, or a comment (a heartbeat).
#[derive(Debug, Clone)]
pub struct Message {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
}

/// A stream read on a thread of its own into a channel.
pub struct Stream {
    messages: mpsc::Receiver<Message>,
}

impl Stream {
    pub fn open(server: &Server, query: &str, last: Option<u64>) -> Self {
        Self::open_at(&format!("{}/v1/events{query}", server.base), last)
    }

    /// A stream at a URL (a fleet's, `/v1/fleet/events`).
    pub fn open_at(url: &str, last: Option<u64>) -> Self {
        let mut request = reqwest::blocking::Client::builder()
            .timeout(None)
            .build()
            .unwrap()
            .get(url);
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last.to_string());
        }
        let response = request.send().unwrap();
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut current = Message {
                id: None,
                event: String::new(),
                data: Value::Null,
            };
            for line in BufReader::new(response).lines() {
                let Ok(line) = line else { return };
                if let Some(comment) = line.strip_prefix(':') {
                    let heartbeat = Message {
                        id: None,
                        event: format!(":{}", comment.trim()),
                        data: Value::Null,
                    };
                    if tx.send(heartbeat).is_err() {
                        return;
                    }
                } else if let Some(id) = line.strip_prefix("id:") {
                    current.id = id.trim().parse().ok();
                } else if let Some(event) = line.strip_prefix("event:") {
                    current.event = event.trim().to_string();
                } else if let Some(data) = line.strip_prefix("data:") {
                    current.data = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                } else if line.is_empty() && !current.event.is_empty() {
                    let done = std::mem::replace(
                        &mut current,
                        Message {
                            id: None,
                            event: String::new(),
                            data: Value::Null,
                        },
                    );
                    if tx.send(done).is_err() {
                        return;
                    }
                }
            }
        });
        Self { messages }
    }

    /// The next event (heartbeats skipped), within the bound.
    fn next(&self) -> Message {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self
                .messages
                .recv_timeout(left)
                .expect("no event within the bound");
            if !message.event.starts_with(':') {
                return message;
            }
        }
    }

    /// Events until one satisfies `check`; that one.
    pub fn until(&self, what: &str, check: impl Fn(&Message) -> bool) -> Message {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            let message = self.next();
            if check(&message) {
                return message;
            }
        }
        panic!("{what}: never came");
    }
}

fn create(server: &Server, app: &str, action: &str) -> Value {
    let body = json!({"app": app, "action": action}).to_string();
    let (code, task) = server.send("POST", "/v1/tasks", Some(&body));
    assert_eq!(code, 201, "{task}");
    task
}

fn id(task: &Value) -> String {
    task["id"].as_str().unwrap().to_string()
}

#[test]
fn events_come_in_order_and_a_reconnect_replays_what_was_missed() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--heartbeat-ms", "200"]);
    let stream = Stream::open(&server, "?app=shop/web", None);
    // An idle stream gets heartbeats (after the first verdicts, if the
    // host is still deriving them).
    let deadline = Instant::now() + PATIENCE;
    let mut heartbeat = None;
    while heartbeat.is_none() && Instant::now() < deadline {
        let message = stream
            .messages
            .recv_timeout(PATIENCE)
            .expect("no heartbeat");
        heartbeat = (message.event == ":heartbeat").then_some(message);
    }
    assert!(heartbeat.is_some(), "no heartbeat");

    let task = create(&server, "shop/web", "restart");
    let created = stream.until("the task event", |m| m.event == "task");
    assert_eq!(created.data["data"]["id"], task["id"]);
    assert_eq!(created.data["data"]["phase"], "pending");
    assert_eq!(created.data["app"], "shop/web");
    let verdict = stream.until("the verdict event", |m| m.event == "verdict");
    assert_eq!(verdict.data["data"]["transitional"]["status"], "restarting");
    assert!(verdict.id > created.id);

    let path = format!("/v1/tasks/{}", id(&task));
    let (code, _) = server.send(
        "PATCH",
        &path,
        Some(r#"{"phase": "running", "progress": 40}"#),
    );
    assert_eq!(code, 200);
    let progress = stream.until("progress 40", |m| {
        m.event == "verdict" && m.data["data"]["display"]["progress"] == 40
    });
    let last = progress.id.unwrap();
    drop(stream);

    // Missed while away: the task finishing and the verdict following.
    let (code, _) = server.send("PATCH", &path, Some(r#"{"phase": "succeeded"}"#));
    assert_eq!(code, 200);
    let other = create(&server, "shop/other", "restart");
    let back = Stream::open(&server, "?app=shop/web", Some(last));
    let first = back.next();
    assert_eq!(first.event, "task", "{first:?}");
    assert_eq!(first.data["data"]["phase"], "succeeded");
    assert!(first.id.unwrap() > last);
    let verdict = back.until("the verdict after the task", |m| m.event == "verdict");
    assert!(verdict.data["data"]["transitional"].is_null());
    assert!(verdict.id > first.id);

    // The namespace filter: both apps of shop, in order, nothing else.
    let all = Stream::open(&server, "?namespace=shop", Some(last));
    let mut previous = last;
    let mut apps = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while !apps.contains(&"shop/other".to_string()) && Instant::now() < deadline {
        let message = all.next();
        let this = message.id.unwrap();
        assert!(this > previous, "{this} after {previous}");
        previous = this;
        apps.push(message.data["app"].as_str().unwrap().to_string());
    }
    assert!(apps.iter().all(|a| a.starts_with("shop/")), "{apps:?}");
    assert!(apps.contains(&"shop/other".to_string()), "{other}");

    // A bad Last-Event-ID names the header.
    let response = reqwest::blocking::Client::new()
        .get(format!("{}/v1/events", server.base))
        .header("Last-Event-ID", "yesterday")
        .send()
        .unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().unwrap();
    assert_eq!(error["error"]["field"], "Last-Event-ID");
}

#[test]
fn a_reconnect_past_the_buffer_is_told_to_resync() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &["--event-buffer", "4"]);
    // Tasks are admitted on apps the host has observed.
    assert!(
        crate::support::wait_until(PATIENCE, || server.get("/v1/apps/shop/web").0 == 200).is_some(),
        "shop/web is never observed"
    );
    for _ in 0..4 {
        let task = create(&server, "shop/web", "restart");
        let (code, _) = server.send(
            "POST",
            &format!("/v1/tasks/{}/cancel", id(&task)),
            Some("{}"),
        );
        assert_eq!(code, 200);
    }
    let stream = Stream::open(&server, "", Some(1));
    let first = stream.next();
    assert_eq!(first.event, "resync", "{first:?}");
    assert!(
        first.data["reason"]
            .as_str()
            .unwrap()
            .contains("no longer held")
    );
    // Then it goes on live.
    let task = create(&server, "shop/web", "restart");
    let next = stream.until("the live task", |m| m.event == "task");
    assert_eq!(next.data["data"]["id"], task["id"]);
}

#[test]
fn a_client_that_stops_reading_delays_no_one() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &[]);
    // A client that asks for the stream and never reads it.
    let address = server.base.strip_prefix("http://").unwrap().to_string();
    let mut stalled = std::net::TcpStream::connect(&address).unwrap();
    write!(
        stalled,
        "GET /v1/events HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let reader = Stream::open(&server, "", None);
    // Enough events to fill the stalled connection's buffers many times.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut last_task = Value::Null;
    for n in 0..600 {
        let request = Instant::now();
        let task = create(&server, &format!("shop/app-{}", n % 50), "restart");
        let (code, task) = server.send(
            "PATCH",
            &format!("/v1/tasks/{}", id(&task)),
            Some(&json!({"phase": "failed", "message": "x".repeat(2000)}).to_string()),
        );
        assert_eq!(code, 200);
        slowest = slowest.max(request.elapsed());
        last_task = task;
    }
    // The reading client got everything, up to the last change.
    reader.until("the last task's failure", |m| {
        m.event == "task"
            && m.data["data"]["id"] == last_task["id"]
            && m.data["data"]["phase"] == "failed"
    });
    assert!(
        slowest < Duration::from_secs(2),
        "a request took {slowest:?} while a client stalled"
    );
    eprintln!(
        "1200 task writes in {:?} with a stalled client",
        started.elapsed()
    );
    drop(stalled);
}

#[test]
fn plugin_loads_and_rejections_are_events() {
    let plugins = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::copy(
        crate::support::default_plugin("status"),
        plugins.path().join("status.wasm"),
    )
    .unwrap();
    let server = Server::start_with(plugins.path(), data.path(), &[]);
    let stream = Stream::open(&server, "", None);
    crate::support::install_by_rename(
        &plugins.path().join("extra.wasm"),
        &std::fs::read(crate::support::test_plugin("stamp-a")).unwrap(),
    );
    let loaded = stream.until("extra loaded", |m| {
        m.event == "plugin" && m.data["data"]["event"] == "loaded"
    });
    assert_eq!(loaded.data["data"]["plugin"]["plugin"], "extra");
    assert!(loaded.data["data"]["plugin"]["hash"].is_string());
    crate::support::install_by_rename(&plugins.path().join("broken.wasm"), b"not wasm");
    let rejected = stream.until("broken rejected", |m| {
        m.event == "plugin" && m.data["data"]["event"] == "rejected"
    });
    assert_eq!(rejected.data["data"]["plugin"]["plugin"], "broken");
    assert!(rejected.data["data"]["plugin"]["error"].is_string());
}

#[test]
fn an_id_this_server_never_issued_is_told_to_resync() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let before = {
        let server = start_host(&cluster, data.path(), &[]);
        let stream = Stream::open(&server, "", None);
        create(&server, "shop/web", "restart");
        stream
            .until("a task event", |m| m.event == "task")
            .id
            .unwrap()
    };
    // The host restarts: its ids go on above the previous run's.
    let server = start_host(&cluster, data.path(), &[]);
    let live = Stream::open(&server, "", None);
    create(&server, "shop/second", "restart");
    let after = live.until("a task event", |m| m.event == "task");
    assert!(after.id.unwrap() > before, "{after:?} after {before}");

    // A client of the previous run, one from the future, and the largest
    // id there is: each is told to resync, and the stream goes on.
    for (n, last) in [before, after.id.unwrap() + 1_000, u64::MAX]
        .into_iter()
        .enumerate()
    {
        let stream = Stream::open(&server, "", Some(last));
        let first = stream.next();
        assert_eq!(first.event, "resync", "{last}: {first:?}");
        // The resync's id is the present: a reconnect from it is no resync.
        let present = first.id.expect("a resync carries an id");
        let again = Stream::open(&server, "", Some(present));
        let task = create(&server, &format!("shop/later-{n}"), "restart");
        let next = again.until("the live task", |m| {
            m.event == "task" || m.event == "resync"
        });
        assert_eq!(next.event, "task", "{next:?}");
        assert_eq!(next.data["data"]["id"], task["id"]);
    }
    assert_eq!(server.get("/healthz").0, 200);
}

#[test]
fn shutdown_ends_event_streams_with_a_reconnect_hint_and_exits_in_time() {
    let cluster = Cluster::start();
    let data = tempfile::tempdir().unwrap();
    let mut server = start_host(&cluster, data.path(), &[]);
    let streams: Vec<Stream> = (0..3).map(|_| Stream::open(&server, "", None)).collect();
    create(&server, "shop/web", "restart");
    for stream in &streams {
        stream.until("a task event", |m| m.event == "task");
    }
    let asked = Instant::now();
    server.terminate();
    for stream in &streams {
        let last = stream.until("the shutdown event", |m| m.event == "shutdown");
        assert_eq!(last.data["type"], "shutdown");
    }
    let exited = crate::support::wait_until(Duration::from_secs(20), || server.exited().is_some());
    assert!(
        exited.is_some(),
        "the host was still running 20 s after SIGTERM with streams open"
    );
    assert!(server.exited().unwrap().success());
    eprintln!(
        "shut down in {:?} with 3 event streams open",
        asked.elapsed()
    );
}
