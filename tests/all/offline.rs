//! The offline tools over the real binary: `verdict test` runs the default
//! and example plugins' cases and reports differences; `verdict eval` reads
//! real objects and names the place of bad input. And the status rules hold
//! when the policy is swapped for the example plugin and back.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use verdict::observe::objects::Objects;
use verdict::plugins::World;
use verdict::verdicts::{self, view::AppView};
use verdict::wit::types;

use crate::support::{self, Fixture, default_plugin, example_plugin};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn verdict(args: &[&str]) -> Output {
    verdict_in(&workspace(), args)
}

/// `verdict ARGS` run in `dir` (no plugin folder named by the environment).
fn verdict_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(args)
        .env(support::CACHE_VARIABLE, support::shared_cache())
        .env_remove("VERDICT_PLUGINS")
        .current_dir(dir)
        .output()
        .unwrap()
}

/// `verdict test` of an example plugin over a case file or folder.
fn test_example(policy: &str, cases: &str) -> Output {
    verdict(&[
        "test",
        "--plugins",
        "target/example-plugins",
        "--policy",
        policy,
        cases,
    ])
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The closing `N passed, M failed` line of `verdict test`.
fn tally(output: &Output) -> (usize, usize) {
    let text = stdout(output);
    let line = text.lines().last().unwrap_or_default().to_string();
    let numbers: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    match numbers[..] {
        [passed, failed] => (passed, failed),
        _ => panic!("no tally in {text}"),
    }
}

#[test]
fn the_default_status_cases_pass() {
    let output = verdict(&[
        "test",
        "--plugins",
        "target/plugins",
        "plugins/status/tests",
    ]);
    let (passed, failed) = tally(&output);
    assert!(output.status.success(), "{}", stdout(&output));
    assert_eq!(failed, 0);
    assert!(passed >= 60, "only {passed} cases ran");
}

/// Away from the repository, with no plugin folder named, `verdict eval`
/// and `verdict test` use the default policies the binary carries, as
/// `verdict serve` does: an installed binary judges alone. A folder named
/// that does not exist is still an error naming it.
#[test]
fn away_from_a_plugin_folder_the_offline_commands_use_the_built_in_policies() {
    let elsewhere = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| verdict_in(elsewhere.path(), args);
    let objects = workspace().join("examples/objects/cluster.yaml");
    let objects = objects.to_str().unwrap();
    let eval = run(&["eval", "--objects", objects, "-o", "json"]);
    assert!(
        eval.status.success(),
        "{}",
        String::from_utf8_lossy(&eval.stderr)
    );
    let judged: serde_json::Value = serde_json::from_slice(&eval.stdout).unwrap();
    let apps = judged["apps"].as_array().expect("apps judged");
    assert!(!apps.is_empty(), "{judged}");

    let cases = workspace().join("plugins/status/tests");
    let test = run(&["test", cases.to_str().unwrap()]);
    let (passed, failed) = tally(&test);
    assert!(test.status.success(), "{}", stdout(&test));
    assert_eq!(failed, 0);
    assert!(passed >= 60, "only {passed} cases ran");

    let missing = elsewhere.path().join("no-such-folder");
    let refused = run(&[
        "eval",
        "--plugins",
        missing.to_str().unwrap(),
        "--objects",
        objects,
    ]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("no-such-folder") && said.contains("does not exist"),
        "{said}"
    );
}

/// Without `--policy`, each case file is run by the policy of its world —
/// told by its `world:` or by its cases — so that the repository's own
/// cases pass together; a world no plugin serves fails that file's cases,
/// saying so.
#[test]
fn each_case_file_is_run_by_the_policy_of_its_world() {
    let output = verdict(&["test", "--plugins", "target/plugins", "plugins"]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}");
    let (passed, failed) = tally(&output);
    assert_eq!(failed, 0, "{text}");
    assert!(passed >= 150, "only {passed} cases ran: {text}");
    for (file, policy) in [
        (
            "plugins/admission/tests/cases.yaml",
            "admission (default-admission@",
        ),
        (
            "plugins/lifecycle/tests/machine.yaml",
            "lifecycle (default-lifecycle@",
        ),
        ("plugins/status/tests/rules.yaml", "status (default-status@"),
    ] {
        assert!(text.contains(&format!("{file}: {policy}")), "{text}");
    }

    let dir = tempfile::tempdir().unwrap();
    let told = dir.path().join("told.yaml");
    std::fs::write(
        &told,
        "world: failover\ncases:\n  - name: nothing to judge\n    expect: {}\n",
    )
    .unwrap();
    let output = verdict(&[
        "test",
        "--plugins",
        "target/plugins",
        told.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("failover (default-failover@"),
        "{}",
        stdout(&output)
    );

    let unknown = dir.path().join("unknown.yaml");
    std::fs::write(
        &unknown,
        "world: weather\ncases:\n  - name: sunny\n    expect: {}\n",
    )
    .unwrap();
    let output = verdict(&[
        "test",
        "--plugins",
        "target/plugins",
        unknown.to_str().unwrap(),
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL  sunny") && text.contains("world: weather is none of"),
        "{text}"
    );
}

#[test]
fn the_default_admission_cases_pass() {
    let output = verdict(&[
        "test",
        "--plugins",
        "target/plugins",
        "--policy",
        "admission",
        "plugins/admission/tests",
    ]);
    let (passed, failed) = tally(&output);
    assert!(output.status.success(), "{}", stdout(&output));
    assert_eq!(failed, 0);
    assert!(passed >= 9, "only {passed} cases ran");
}

#[test]
fn the_default_lifecycle_cases_pass() {
    let output = verdict(&[
        "test",
        "--plugins",
        "target/plugins",
        "--policy",
        "lifecycle",
        "plugins/lifecycle/tests",
    ]);
    let (passed, failed) = tally(&output);
    assert!(output.status.success(), "{}", stdout(&output));
    assert_eq!(failed, 0);
    assert!(passed >= 27, "only {passed} cases ran");
}

#[test]
fn the_example_lifecycle_policy_adds_its_step_to_the_default_machine() {
    let output = verdict(&[
        "test",
        "--plugins",
        "target/example-plugins",
        "--policy",
        "smoke-test",
        "examples/smoke-test/tests",
    ]);
    assert!(output.status.success(), "{}", stdout(&output));
    assert_eq!(tally(&output), (4, 0));
    // The default machine's own cases of a deploy fail against it: the
    // smoke test is the difference.
    let output = verdict(&[
        "test",
        "--plugins",
        "target/example-plugins",
        "--policy",
        "smoke-test",
        "plugins/lifecycle/tests",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("smoke-test"), "{text}");
}

#[test]
fn the_example_plugin_cases_pass_in_every_language() {
    for policy in ["restart-budget", "restart-budget-js", "restart-budget-py"] {
        let output = test_example(policy, "examples/restart-budget/tests");
        assert!(output.status.success(), "{policy}: {}", stdout(&output));
        assert_eq!(tally(&output), (5, 0), "{policy}");
    }
}

#[test]
fn a_failing_case_shows_the_difference_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = workspace().join("plugins/status/tests/fixtures/argocd__pod-crashloop.yaml");
    let cases = dir.path().join("wrong.yaml");
    std::fs::write(
        &cases,
        format!(
            "cases:\n  - name: a wrong expectation\n    files: [{}]\n    expect:\n      argocd/my-pod:\n        stable: running\n        groups: {{my-pod: {{reason: Completed}}}}\n      argocd/other: {{stable: running}}\n",
            fixture.display()
        ),
    )
    .unwrap();
    let output = verdict(&[
        "test",
        "--plugins",
        "target/plugins",
        cases.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(text.contains("FAIL  a wrong expectation"), "{text}");
    assert!(
        text.contains(r#"argocd/my-pod.stable: expected "running", got "panic""#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"argocd/my-pod.groups.my-pod.reason: expected "Completed", got "CrashLoopBackOff""#
        ),
        "{text}"
    );
    assert!(text.contains("argocd/other: no such app"), "{text}");
    assert_eq!(tally(&output), (0, 1));
}

#[test]
fn settings_a_policy_refuses_are_refused_with_its_words_in_every_language() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = workspace().join("plugins/status/tests/fixtures/argocd__pod-crashloop.yaml");
    let cases = dir.path().join("settings.yaml");
    let case = |name: &str, settings: &str| {
        format!(
            "  - name: {name}\n    settings: {settings}\n    files: [{}]\n    expect: {{argocd/my-pod: {{stable: panic}}}}\n",
            fixture.display()
        )
    };
    std::fs::write(
        &cases,
        format!(
            "cases:\n{}{}{}",
            case("settings it takes", "{max-restarts: 5}"),
            case("a word for a number", "{max-restarts: ten}"),
            case("a key it does not know", "{max-restart: 5}"),
        ),
    )
    .unwrap();
    for policy in ["restart-budget", "restart-budget-js", "restart-budget-py"] {
        let output = test_example(policy, cases.to_str().unwrap());
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(1), "{policy}: {text}");
        assert_eq!(tally(&output), (1, 2), "{policy}: {text}");
        assert!(text.contains("ok    settings it takes"), "{policy}: {text}");
        let refused = format!(
            "could not run: settings refused by the policy {policy}: setting `max-restarts` must be"
        );
        assert!(text.contains(&refused), "{policy}: {text}");
        assert!(text.contains(r#"not "ten""#), "{policy}: {text}");
        let unknown = format!(
            "could not run: settings refused by the policy {policy}: unknown setting `max-restart`"
        );
        assert!(text.contains(&unknown), "{policy}: {text}");
    }

    // `verdict eval` refuses `--settings` the policy refuses, before judging.
    let output = verdict(&[
        "eval",
        "--plugins",
        "target/example-plugins",
        "--policy",
        "restart-budget-js",
        "--settings",
        r#"{"budget-window-ms":-1}"#,
        "--objects",
        fixture.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "settings refused by the policy restart-budget-js: setting `budget-window-ms` must be a whole number, not -1"
        ),
        "{stderr}"
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn eval_prints_the_verdicts_of_real_objects() {
    let fixtures = workspace().join("plugins/status/tests/fixtures");
    let crashloop = fixtures.join("argocd__pod-crashloop.yaml");
    let missing_cm = fixtures.join("backstage__pod-missing-cm.json");
    let args = [
        "eval",
        "--plugins",
        "target/plugins",
        "--now",
        "2026-01-01T00:00:00Z",
        "--objects",
        crashloop.to_str().unwrap(),
        missing_cm.to_str().unwrap(),
    ];
    let output = verdict(&args);
    assert!(output.status.success());
    let table = stdout(&output);
    assert!(table.starts_with("APP"), "{table}");
    assert!(table.contains("argocd/my-pod"), "{table}");
    assert!(table.contains("CrashLoopBackOff"), "{table}");
    assert!(table.contains("CreateContainerConfigError"), "{table}");

    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    let output = verdict(&json_args);
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let apps = body["apps"].as_array().unwrap();
    assert_eq!(apps.len(), 2);
    assert!(apps.iter().all(|a| a["stable"] == "panic"), "{body}");

    // With a task in flight, its progress is what the display shows.
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks.yaml");
    std::fs::write(
        &tasks,
        "- {id: t1, app: argocd/my-pod, action: restart, phase: running, progress: 50, created-at: \"@now-1m\"}\n",
    )
    .unwrap();
    json_args.extend(["--tasks", tasks.to_str().unwrap()]);
    let output = verdict(&json_args);
    let body: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let my_pod = body["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "my-pod")
        .unwrap();
    assert_eq!(my_pod["display"]["text"], "Restarting 50%", "{body}");
    assert_eq!(my_pod["stable"], "panic");

    // A task file with a bad field is refused with the field named.
    std::fs::write(
        &tasks,
        "- {id: t2, app: argocd/my-pod, action: reboot, phase: running, created-at: \"@now\"}\n",
    )
    .unwrap();
    let output = verdict(&json_args);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("task t2: action: unknown action `reboot`"),
        "{stderr}"
    );
}

#[test]
fn eval_names_the_file_and_place_of_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, "kind: Pod\nmetadata: {name: a\n").unwrap();
    let output = verdict(&[
        "eval",
        "--plugins",
        "target/plugins",
        "--objects",
        broken.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("broken.yaml: document 1: not valid YAML"),
        "{stderr}"
    );
    assert!(stderr.contains("line"), "{stderr}");

    let wrong = dir.path().join("wrong.json");
    std::fs::write(
        &wrong,
        r#"{"kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":5}]}}"#,
    )
    .unwrap();
    let output = verdict(&[
        "eval",
        "--plugins",
        "target/plugins",
        "--objects",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("wrong.json: document 1 (Pod p): spec.containers[0].image: invalid type"),
        "{stderr}"
    );

    let output = verdict(&[
        "eval",
        "--plugins",
        "target/plugins",
        "--objects",
        "/nonexistent.yaml",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent.yaml"));

    // Files that hold no Kubernetes object are errors, not empty tables.
    for (name, text, message) in [
        (
            "foo.json",
            r#"{"foo": 1}"#,
            "foo.json: document 1: not a Kubernetes object: it has no `kind`",
        ),
        (
            "word.yaml",
            "hello\n",
            "word.yaml: document 1: not a Kubernetes object but a string",
        ),
        (
            "list.json",
            r#"{"kind": "List", "items": [7]}"#,
            "list.json: document 1, items[0]: not a Kubernetes object but a number",
        ),
    ] {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let output = verdict(&[
            "eval",
            "--plugins",
            "target/plugins",
            "--objects",
            file.to_str().unwrap(),
        ]);
        assert_eq!(output.status.code(), Some(2), "{name}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{name}: {stderr}");
    }
}

fn views_of_fixtures(
    fixture: &Fixture,
    inputs: &[verdict::wit::status::AppInput],
    now: types::Timestamp,
) -> Vec<serde_json::Value> {
    let slot = fixture.registry.policy(World::Status).unwrap();
    verdicts::evaluate(&slot, inputs, now, None)
        .unwrap()
        .into_iter()
        .map(|v| serde_json::to_value(AppView::from(&v.unwrap())).unwrap())
        .collect()
}

#[test]
fn the_rules_hold_across_a_swap_to_the_example_and_back() {
    let now = 1_767_225_600_000; // 2026-01-01
    let paths: Vec<PathBuf> = std::fs::read_dir(workspace().join("plugins/status/tests/fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"))
        .collect();
    let mut objects = Objects::default();
    objects.read(&paths, now).unwrap();
    objects.snapshot.namespaces.insert(
        "quiet".into(),
        vec![types::KeyValue {
            key: "example.dev/maintenance".into(),
            value: "true".into(),
        }],
    );
    // An app in the maintenance namespace, known from a task only.
    let task = types::Task {
        id: "t1".into(),
        app: types::AppId {
            namespace: "quiet".into(),
            name: "web".into(),
        },
        action: types::TaskAction::Start,
        phase: types::TaskPhase::Succeeded,
        progress: 100,
        message: None,
        created_at: now - 60_000,
        updated_at: now - 30_000,
        requested_by: None,
        params: "{}".into(),
        steps: Vec::new(),
    };
    let inputs = objects.snapshot.apps(&[task], &[], now);
    assert!(inputs.len() > 20);

    let fixture = Fixture::new();
    fixture.install("status", &default_plugin("status"));
    fixture.registry.reload();
    let before = views_of_fixtures(&fixture, &inputs, now);

    fixture.install("status", &example_plugin("restart-budget"));
    let report = fixture.registry.reload();
    assert_eq!(report.loaded[0].info.name, "restart-budget", "{report:?}");
    let example = views_of_fixtures(&fixture, &inputs, now);
    for (default, custom) in before.iter().zip(&example) {
        if default["namespace"] == "quiet" {
            assert_eq!(custom["display"]["status"], "maintenance", "{custom}");
            assert_ne!(default["display"]["status"], "maintenance");
        } else {
            // No fixture is over the restart budget within the hour of `now`:
            // the example gives the default rules' verdict.
            assert_eq!(default, custom);
        }
    }

    fixture.install("status", &default_plugin("status"));
    fixture.registry.reload();
    let after = views_of_fixtures(&fixture, &inputs, now);
    assert_eq!(before, after);
}

#[test]
fn diff_shows_where_two_status_policies_differ() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects.yaml");
    // Two running apps; one labelled as in maintenance, which only the
    // restart-budget example displays.
    let app = |name: &str, maintenance: bool| {
        format!(
            r#"---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: shop, labels: {{app.kubernetes.io/instance: {name}{label}}}}}
spec: {{replicas: 1}}
status: {{replicas: 1, readyReplicas: 1, availableReplicas: 1, updatedReplicas: 1}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}-1, namespace: shop, labels: {{app.kubernetes.io/instance: {name}}}}}
spec: {{nodeName: n1, containers: [{{name: main, image: img}}]}}
status:
  phase: Running
  conditions: [{{type: Ready, status: "True"}}]
  containerStatuses: [{{name: main, image: img, imageID: "", ready: true, restartCount: 0, state: {{running: {{startedAt: "2026-01-01T00:00:00Z"}}}}}}]
"#,
            label = if maintenance {
                ", example.dev/maintenance: \"true\""
            } else {
                ""
            }
        )
    };
    std::fs::write(&objects, app("calm", false) + &app("quiet", true)).unwrap();
    let default = workspace().join("target/plugins/status.wasm");
    let example = workspace().join("target/example-plugins/restart-budget.wasm");
    let args = |b: &Path| {
        vec![
            "diff".to_string(),
            "--now".into(),
            "2026-01-01T00:10:00Z".into(),
            "--objects".into(),
            objects.display().to_string(),
            "--plugins".into(),
            default.display().to_string(),
            b.display().to_string(),
        ]
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        verdict(&args)
    };

    let output = run(args(&example));
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(text.contains("shop/quiet  display"), "{text}");
    assert!(!text.contains("shop/calm"), "{text}");
    assert!(text.ends_with("1 of 2 apps differ\n"), "{text}");

    let mut json = args(&example);
    json.push("--json".into());
    let body: serde_json::Value = serde_json::from_slice(&run(json).stdout).unwrap();
    assert_eq!(body["compared"], 2);
    assert_eq!(body["differing"][0]["app"], "shop/quiet");
    assert_eq!(
        body["differing"][0]["fields"]["display"]["b"]["text"],
        "Maintenance"
    );

    // A policy compared with itself: no difference, exit 0.
    let same = run(args(&default));
    assert!(same.status.success(), "{}", stdout(&same));
    assert!(stdout(&same).ends_with("0 of 2 apps differ\n"));

    // What is not a status policy is refused, saying so.
    let admission = workspace().join("target/plugins/admission.wasm");
    let refused = run(args(&admission));
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is not a status policy"));
}
