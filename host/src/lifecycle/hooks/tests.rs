//! The step hooks: their answers read, their calls made once per key.

use std::sync::{Arc, Mutex};

use axum::{Json, Router, routing::post};

use super::*;

/// A hook server on 127.0.0.1 whose answer to a request is `answer`'s;
/// the requests it got, and its URL.
async fn server(
    answer: impl Fn(&Value) -> (u16, String) + Clone + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let app = Router::new().route(
        "/step",
        post(move |Json(body): Json<Value>| {
            let answer = answer.clone();
            let kept = Arc::clone(&kept);
            async move {
                let (code, text) = answer(&body);
                kept.lock().unwrap().push(body);
                if code == 0 {
                    // Never answers.
                    std::future::pending::<()>().await;
                }
                (axum::http::StatusCode::from_u16(code).unwrap(), text)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/step", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn hooks_at(step: &str, url: &str, timeout_seconds: u64, policy: FailurePolicy) -> Hooks {
    let spec = HookSpec {
        timeout_seconds,
        failure_policy: policy,
        ..HookSpec::at(url)
    };
    Hooks::new([(step.to_string(), spec)].into()).unwrap()
}

fn instance() -> InstanceRef {
    InstanceRef {
        namespace: "shop".into(),
        name: "web-0".into(),
        set: "web".into(),
        uid: String::new(),
    }
}

async fn call(hooks: &Hooks, step: &str) -> StepOutcome {
    let params = serde_json::json!({"version": "1.1"});
    // An endpoint's hook needs no API server.
    let nowhere = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let kube = kube::Client::try_from(nowhere).unwrap();
    hooks
        .call(
            &StepCall {
                key: "shop/web-0/u-1/3/1",
                attempt: 2,
                leader: &crate::leader::Term::elected("verdict-a", 4),
                instance: &instance(),
                stage: "deploying",
                step,
                params: &params,
            },
            &kube,
        )
        .await
}

#[tokio::test]
async fn a_hook_is_told_the_step_and_its_answer_is_the_outcome() {
    let (url, seen) = server(|body| {
        let answer = match body["params"]["version"].as_str() {
            Some("1.1") => {
                r#"{"status":"running","message":"copying","progress":40,"retryAfterSeconds":2}"#
            }
            _ => r#"{"status":"failed","message":"which version?"}"#,
        };
        (200, answer.into())
    })
    .await;
    let hooks = hooks_at("deploy-code", &url, 5, FailurePolicy::Fail);
    assert_eq!(
        call(&hooks, "deploy-code").await,
        StepOutcome::Running {
            message: "copying".into(),
            progress: Some(40),
            retry_after: Duration::from_secs(2),
        }
    );
    let body = seen.lock().unwrap()[0].clone();
    assert_eq!(body["kind"], "StepHookRequest");
    assert_eq!(body["key"], "shop/web-0/u-1/3/1");
    assert_eq!(body["attempt"], 2);
    assert_eq!(
        body["leader"],
        serde_json::json!({"holder": "verdict-a", "term": 4})
    );
    assert_eq!(body["instance"]["set"], "web");
    assert_eq!(body["stage"], "deploying");
    assert_eq!(body["step"], "deploy-code");

    let (url, _) = server(|_| {
        (
            200,
            r#"{"status":"done","message":"1.1 is in place"}"#.into(),
        )
    })
    .await;
    let done = hooks_at("deploy-code", &url, 5, FailurePolicy::Fail);
    assert_eq!(
        call(&done, "deploy-code").await,
        StepOutcome::Done {
            message: "1.1 is in place".into()
        }
    );
    let (url, _) = server(|_| (200, r#"{"status":"failed","message":"disk full"}"#.into())).await;
    let failed = hooks_at("deploy-code", &url, 5, FailurePolicy::Fail);
    assert_eq!(
        call(&failed, "deploy-code").await,
        StepOutcome::Failed {
            message: "disk full".into()
        }
    );
}

fn failed_saying(outcome: StepOutcome, words: &str) {
    match outcome {
        StepOutcome::Failed { message } => {
            assert!(message.contains(words), "{message}");
            assert!(
                message.starts_with("hook deploy-code at http://127.0.0.1:"),
                "{message}"
            );
        }
        other => panic!("not failed: {other:?}"),
    }
}

#[tokio::test]
async fn a_hook_that_hangs_answers_garbage_errs_or_is_down_fails_its_step() {
    let (url, _) = server(|_| (0, String::new())).await;
    let started = std::time::Instant::now();
    failed_saying(
        call(
            &hooks_at("deploy-code", &url, 1, FailurePolicy::Fail),
            "deploy-code",
        )
        .await,
        "no answer within its timeout of 1s",
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let (url, _) = server(|_| (200, "<html>hello</html>".into())).await;
    failed_saying(
        call(
            &hooks_at("deploy-code", &url, 5, FailurePolicy::Fail),
            "deploy-code",
        )
        .await,
        "the answer is not a step hook answer",
    );
    let (url, _) = server(|_| (200, r#"{"status":"maybe"}"#.into())).await;
    failed_saying(
        call(
            &hooks_at("deploy-code", &url, 5, FailurePolicy::Fail),
            "deploy-code",
        )
        .await,
        "the answer's status is `maybe`, not done, failed or running",
    );
    let (url, _) = server(|_| (500, "boom".into())).await;
    failed_saying(
        call(
            &hooks_at("deploy-code", &url, 5, FailurePolicy::Fail),
            "deploy-code",
        )
        .await,
        "answered HTTP 500 Internal Server Error: boom",
    );
    let (url, _) = server(|_| {
        (
            200,
            format!(r#"{{"status":"done","message":"{}"}}"#, "x".repeat(70_000)),
        )
    })
    .await;
    failed_saying(
        call(
            &hooks_at("deploy-code", &url, 5, FailurePolicy::Fail),
            "deploy-code",
        )
        .await,
        "the answer is over 64 KiB",
    );
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/step", closed.local_addr().unwrap());
    drop(closed);
    failed_saying(
        call(
            &hooks_at("deploy-code", &url, 5, FailurePolicy::Fail),
            "deploy-code",
        )
        .await,
        "cannot be reached",
    );
    // The same, let pass by its failure policy.
    match call(
        &hooks_at("deploy-code", &url, 5, FailurePolicy::Ignore),
        "deploy-code",
    )
    .await
    {
        StepOutcome::Done { message } => {
            assert!(message.contains("cannot be reached"), "{message}");
            assert!(
                message.ends_with("passed by its failure policy (ignore)"),
                "{message}"
            );
        }
        other => panic!("not passed: {other:?}"),
    }
}

#[tokio::test]
async fn a_step_without_a_hook_fails_naming_the_hooks_there_are() {
    let hooks = hooks_at(
        "deploy-code",
        "http://127.0.0.1:9/step",
        5,
        FailurePolicy::Fail,
    );
    assert_eq!(
        call(&hooks, "install-environment").await,
        StepOutcome::Failed {
            message:
                "no step hook is named install-environment (the configuration names: deploy-code)"
                    .into()
        }
    );
}

#[test]
fn a_hook_that_cannot_be_called_is_refused_with_its_name() {
    let spec = |url: &str, timeout_seconds| HookSpec {
        timeout_seconds,
        ..HookSpec::at(url)
    };
    let refused =
        |spec: HookSpec| Hooks::new([("deploy-code".to_string(), spec)].into()).unwrap_err();
    assert!(
        refused(spec("not a url", 5))
            .starts_with("hooks.deploy-code: url `not a url` does not read")
    );
    assert_eq!(
        refused(spec("ftp://hooks.example/step", 5)),
        "hooks.deploy-code: url `ftp://hooks.example/step` is not http or https"
    );
    assert_eq!(
        refused(spec("http://hooks.example/step", 0)),
        "hooks.deploy-code: timeout-seconds is 0; from 1 to 300"
    );
    let read: HookSpec = toml::from_str("url = \"http://hooks.example/step\"").unwrap();
    assert_eq!(read, spec("http://hooks.example/step", 10));
    let unknown = toml::from_str::<HookSpec>("url = \"http://h/s\"\ntimeout = 3").unwrap_err();
    assert!(
        unknown.to_string().contains("unknown field `timeout`"),
        "{unknown}"
    );
}
