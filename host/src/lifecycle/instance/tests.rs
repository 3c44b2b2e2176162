//! An instance as its Server records it, and its task lists.

use std::time::Duration;

use super::*;
use crate::lifecycle::hooks::StepOutcome;
use crate::lifecycle::lists::{Advanced, StepResult};
use crate::lifecycle::model::{Next, Task};
use crate::wit::lifecycle::Outcome;

fn task(name: &str) -> Task {
    Task {
        name: name.into(),
        params: serde_json::json!({}),
    }
}

fn jdk(version: &str) -> Vec<Package> {
    vec![Package {
        name: "jdk".into(),
        version: version.into(),
    }]
}

/// The list of a move to `stage`.
fn moving(
    previous: u64,
    stage: Stage,
    tasks: &[&str],
    environment: Option<Vec<Package>>,
    code: Option<&str>,
    needs_approval: bool,
    now: Timestamp,
) -> CurrentList {
    let next = Next::Move {
        stage,
        tasks: tasks.iter().map(|name| task(name)).collect(),
        environment,
        code: code.map(String::from),
        needs_approval,
        reason: "a test".into(),
    };
    CurrentList::entered(previous, &next, now).unwrap()
}

fn initializing(previous: u64, now: Timestamp) -> CurrentList {
    moving(
        previous,
        Stage::Initializing,
        &["detach-load-balancer", "install-environment"],
        Some(jdk("25")),
        None,
        false,
        now,
    )
}

#[test]
fn a_list_runs_step_by_step_and_its_success_is_what_the_instance_has() {
    let mut recorded = Recorded {
        stage: Some(Stage::Serving),
        environment: jdk("21"),
        code: Some("1.0".into()),
        ..Recorded::default()
    };
    recorded.enter(initializing(recorded.last_number(), 1_000), 1_000);
    let list = recorded.list.as_mut().unwrap();
    assert_eq!(list.key("shop", "web-0", "u-1"), "shop/web-0/u-1/1/1");
    assert_eq!(list.current().unwrap().name, "detach-load-balancer");
    let later = list.advance(
        StepOutcome::Running {
            message: "draining".into(),
            progress: Some(30),
            retry_after: Duration::from_secs(2),
        },
        1_500,
    );
    assert_eq!(later, Advanced::Later(3_500));
    assert_eq!(
        list.key("shop", "web-0", "u-1"),
        "shop/web-0/u-1/1/1",
        "the same step, the same key"
    );
    assert_eq!(
        list.advance(
            StepOutcome::Done {
                message: String::new()
            },
            4_000
        ),
        Advanced::Next
    );
    assert_eq!(list.key("shop", "web-0", "u-1"), "shop/web-0/u-1/1/2");
    assert_ne!(
        list.key("shop", "web-0", "u-2"),
        list.key("shop", "web-0", "u-1"),
        "another machine under the same name, another key"
    );
    assert_eq!(
        list.advance(
            StepOutcome::Done {
                message: "installed".into()
            },
            5_000
        ),
        Advanced::Finished
    );
    recorded.settle();
    assert_eq!(recorded.environment, jdk("25"));
    assert_eq!(recorded.code.as_deref(), Some("1.0"));
    assert_eq!(recorded.all_lists()[0].outcome, Outcome::Succeeded);

    // The next list is numbered on, and the last one is kept.
    recorded.enter(
        moving(
            recorded.last_number(),
            Stage::Deploying,
            &["deploy-code"],
            None,
            Some("1.1"),
            false,
            6_000,
        ),
        6_000,
    );
    assert_eq!(
        recorded.list.as_ref().unwrap().key("shop", "web-0", "u-1"),
        "shop/web-0/u-1/2/1"
    );
    assert_eq!(recorded.lists.len(), 1);
    assert_eq!(recorded.lists[0].stage, Stage::Initializing);
    // Summed up on the Server; whole for the task log.
    assert!(recorded.lists[0].steps.is_empty());
    assert_eq!(recorded.finished.len(), 1);
    assert_eq!(recorded.finished[0].steps.len(), 2);
    assert_eq!(recorded.finished[0].summed_up(), recorded.lists[0]);
    assert_eq!(recorded.since, Some(6_000));
    let list = recorded.list.as_mut().unwrap();
    list.advance(
        StepOutcome::Failed {
            message: "no such artifact".into(),
        },
        7_000,
    );
    recorded.settle();
    assert_eq!(
        recorded.code.as_deref(),
        Some("1.0"),
        "a failed list changes nothing"
    );
    let failed = &recorded.all_lists()[0];
    assert_eq!(
        (
            failed.outcome,
            failed.task.as_deref(),
            failed.message.as_str()
        ),
        (Outcome::Failed, Some("deploy-code"), "no such artifact")
    );
}

#[test]
fn a_list_without_tasks_is_done_on_entry_and_a_stuck_step_can_be_skipped() {
    let empty = moving(0, Stage::Requested, &[], None, None, false, 5);
    assert_eq!(
        (empty.outcome, empty.finished),
        (ListOutcome::Succeeded, Some(5))
    );
    let gated = moving(0, Stage::Deleting, &[], None, None, true, 5);
    assert!(gated.awaiting_approval());

    let mut clean_up = moving(
        0,
        Stage::Deleting,
        &["detach-load-balancer", "delete-machine"],
        None,
        None,
        false,
        0,
    );
    assert!(
        CurrentList::entered(
            0,
            &Next::Stay {
                why: "serving".into()
            },
            0
        )
        .is_none(),
        "staying enters no list"
    );
    assert_eq!(clean_up.skip("alice: stuck", 10), Advanced::Next);
    assert_eq!(
        clean_up.message,
        "detach-load-balancer skipped by alice: stuck"
    );
    assert_eq!(clean_up.current().unwrap().name, "delete-machine");
    assert_eq!(
        clean_up.advance(
            StepOutcome::Done {
                message: "gone".into()
            },
            20
        ),
        Advanced::Finished
    );
    // The log keeps every step: how it ended, when, after how many asks.
    let entry = clean_up.entry();
    assert_eq!(
        entry
            .steps
            .iter()
            .map(|s| (s.task.as_str(), s.result, s.at, s.message.as_str()))
            .collect::<Vec<_>>(),
        [
            (
                "detach-load-balancer",
                StepResult::Skipped,
                10,
                "detach-load-balancer skipped by alice: stuck"
            ),
            ("delete-machine", StepResult::Done, 20, "gone"),
        ]
    );
    assert_eq!((entry.outcome, entry.task), (ListOutcome::Succeeded, None));
}

#[test]
fn the_server_sums_up_its_last_lists_and_hands_the_whole_ones_to_the_log() {
    let mut recorded = Recorded::default();
    for n in 0..8 {
        let mut list = initializing(recorded.last_number(), n * 1_000);
        for _ in 0..2 {
            list.advance(
                StepOutcome::Done {
                    message: "done".into(),
                },
                n * 1_000 + 500,
            );
        }
        recorded.enter(list, n * 1_000);
    }
    assert_eq!(recorded.lists.len(), SUMMED_UP);
    assert_eq!(
        recorded.lists.iter().map(|l| l.number).collect::<Vec<_>>(),
        [7, 6, 5, 4, 3]
    );
    assert!(recorded.lists.iter().all(|l| l.steps.is_empty()));
    assert_eq!(recorded.finished.len(), 7);
    assert!(recorded.finished.iter().all(|l| l.steps.len() == 2));
    // The status carries no steps but the list in progress's.
    let status = serde_json::to_value(recorded.status(&Observed::default(), Vec::new())).unwrap();
    assert_eq!(status["lists"].as_array().unwrap().len(), SUMMED_UP);
    assert!(
        status["lists"][0]
            .get("steps")
            .is_none_or(|s| s == &serde_json::json!([]))
    );

    // A Server that kept its lists whole (30 of them) reads as lists
    // for the log and five summed up.
    let whole: Vec<LogEntry> = recorded
        .finished
        .iter()
        .rev()
        .cloned()
        .cycle()
        .take(30)
        .collect();
    let old = serde_json::json!({"status": {"lists": whole}});
    let read = Recorded::read(&old).unwrap();
    assert_eq!(read.finished.len(), 30);
    assert_eq!(read.lists.len(), SUMMED_UP);
    assert!(read.lists.iter().all(|l| l.steps.is_empty()));
    // Read again as the leader wrote it: nothing more for the log.
    let rewritten = serde_json::json!({"status": serde_json::to_value(read.status(&Observed::default(), Vec::new())).unwrap()});
    assert!(Recorded::read(&rewritten).unwrap().finished.is_empty());
}

#[test]
fn what_the_annotations_record_reads_back_whole() {
    let mut recorded = Recorded {
        stage: Some(Stage::Initializing),
        since: Some(1_767_225_600_000),
        environment: vec![
            Package {
                name: "jdk".into(),
                version: "21".into(),
            },
            Package {
                name: "agent".into(),
                version: "3.2".into(),
            },
        ],
        code: Some("1.0".into()),
        lock: Some(Lock {
            holder: "verdict-7c9f".into(),
            term: 4,
        }),
        list: Some(initializing(2, 1_767_225_600_000)),
        lists: Vec::new(),
        ..Recorded::default()
    };
    recorded
        .lists
        .push(initializing(1, 1_767_225_500_000).entry());
    let status = serde_json::to_value(recorded.status(&Observed::default(), Vec::new())).unwrap();
    assert_eq!(status["stage"], "initializing");
    assert_eq!(status["environmentText"], "jdk=21,agent=3.2");
    assert_eq!(status["lock"], "verdict-7c9f/4");
    assert_eq!(status["step"], "detach-load-balancer (attempt 1)");
    let server = serde_json::json!({ "status": status });
    assert_eq!(Recorded::read(&server).unwrap(), recorded);

    // A hook's long answer is kept cut, on a character boundary.
    let mut list = initializing(3, 0);
    list.advance(
        StepOutcome::Failed {
            message: "é".repeat(400),
        },
        1,
    );
    let entry = list.entry();
    assert_eq!(entry.message.chars().count(), 150);
    assert_eq!(entry.steps[0].message.len(), 300);

    // Lists kept before they were numbered still read.
    let old = r#"[{"stage":"ready","started":"2026-01-01T00:00:00Z","outcome":"succeeded","task":null,"message":"","finished":"2026-01-01T00:00:01Z"}]"#;
    let old: serde_json::Value = serde_json::from_str(old).unwrap();
    let read = Recorded::read(&serde_json::json!({"status": {"lists": old}})).unwrap();
    assert_eq!(
        (read.lists[0].number, read.lists[0].stage),
        (0, Stage::Ready)
    );

    // Nothing recorded: a new or adopted machine.
    assert_eq!(
        Recorded::read(&serde_json::json!({})).unwrap(),
        Recorded::default()
    );
}

#[test]
fn a_vms_legacy_annotations_become_its_servers_status() {
    let list = initializing(2, 1_767_225_600_000);
    let annotations = BTreeMap::from([
        ("verdict.dev/stage".to_string(), "initializing".to_string()),
        (
            "verdict.dev/since".to_string(),
            "2026-01-01T00:00:00Z".to_string(),
        ),
        (
            "verdict.dev/environment".to_string(),
            "jdk=21,agent=3.2".to_string(),
        ),
        ("verdict.dev/code".to_string(), "1.0".to_string()),
        ("verdict.dev/lock".to_string(), "verdict-7c9f/4".to_string()),
        (
            "verdict.dev/list".to_string(),
            serde_json::to_string(&list).unwrap(),
        ),
        ("team".to_string(), "shop".to_string()),
    ]);
    let status = legacy_status(&annotations).unwrap().unwrap();
    let read = Recorded::read(&serde_json::json!({ "status": status })).unwrap();
    assert_eq!(read.stage, Some(Stage::Initializing));
    assert_eq!(read.environment.len(), 2);
    assert_eq!(read.code.as_deref(), Some("1.0"));
    assert_eq!(
        read.list,
        Some(list),
        "the list in progress, whole: it runs on"
    );
    assert_eq!(read.lock, None, "the lock is the new leader's to take");
    // None of them: nothing to take over.
    let plain = BTreeMap::from([("team".to_string(), "shop".to_string())]);
    assert_eq!(legacy_status(&plain).unwrap(), None);
    // What does not read is named, and not taken.
    let wrong = BTreeMap::from([("verdict.dev/stage".to_string(), "redy".to_string())]);
    assert!(legacy_status(&wrong).unwrap_err().contains("redy"));
}

#[test]
fn a_status_edited_wrong_by_hand_is_named() {
    let refused = |field: &str, value: serde_json::Value| {
        Recorded::read(&serde_json::json!({ "status": { field: value } })).unwrap_err()
    };
    assert!(
        refused("stage", "redy".into())
            .starts_with("status.stage `redy` is none of requested, initializing")
    );
    let environment = refused("environment", serde_json::json!([{"name": "jdk"}]));
    assert!(
        environment.starts_with("status.environment[0] does not read: missing field `version`"),
        "{environment}"
    );
    assert!(refused("since", "yesterday".into()).starts_with("status.since: "));
    assert_eq!(
        refused("lock", "verdict".into()),
        "status.lock `verdict` is not holder/term"
    );
    assert_eq!(
        refused("lock", "verdict/x".into()),
        "status.lock `verdict/x`: the term is not a number"
    );
    assert!(refused("list", "{".into()).starts_with("status.list does not read"));
    // A stage written by hand with spaces reads.
    let read = Recorded::read(&serde_json::json!({"status": {"stage": " ready "}})).unwrap();
    assert_eq!(read.stage, Some(Stage::Ready));
    // People's requests are the Server's annotations.
    let asked = serde_json::json!({"metadata": {"annotations": {
        requests::RETRY: "{"
    }}});
    assert!(Recorded::read(&asked).is_err());
}

#[test]
fn a_list_whose_target_changed_does_not_start_its_last_step() {
    let mut list = initializing(0, 1_000);
    // Its first step (letting go of the load balancer) is not what it
    // delivers: the list goes on to it whatever the target.
    assert!(!list.superseded_by(&jdk("26"), None));
    list.advance(
        StepOutcome::Done {
            message: String::new(),
        },
        2_000,
    );
    assert!(!list.superseded_by(&jdk("25"), None), "the same target");
    assert!(list.superseded_by(&jdk("26"), None));
    list.supersede("the target is now jdk 26", 3_000);
    assert_eq!(list.outcome, ListOutcome::Superseded);
    assert_eq!(
        list.entry().view().outcome,
        Outcome::Succeeded,
        "as the policy sees it"
    );
    assert_eq!(list.message, "superseded: the target is now jdk 26");
    let mut recorded = Recorded {
        environment: jdk("21"),
        list: Some(list),
        ..Recorded::default()
    };
    recorded.settle();
    assert_eq!(recorded.environment, jdk("21"), "nothing new was installed");
}

#[test]
fn a_lock_is_taken_when_free_own_or_left_by_an_older_leader() {
    let held = Lock {
        holder: "a".into(),
        term: 3,
    };
    let elected = |holder: &str, term| crate::leader::Term::elected(holder, term);
    assert!(may_take(None, &elected("b", 1)));
    assert!(may_take(Some(&held), &elected("a", 3)));
    assert!(may_take(Some(&held), &elected("b", 4)));
    assert!(!may_take(Some(&held), &elected("b", 3)));
    assert!(!may_take(Some(&held), &elected("b", 2)));
    // A host that acts alone, started again under a new name in term
    // 0, takes over its own earlier process's lists.
    let lone = Lock {
        holder: "host-41".into(),
        term: 0,
    };
    let restarted = crate::leader::Term {
        alone: true,
        ..elected("host-97", 0)
    };
    assert!(may_take(Some(&lone), &restarted));
    assert!(!may_take(Some(&lone), &elected("host-97", 0)));
}

#[test]
fn a_machine_reads_from_its_printable_status() {
    assert_eq!(machine(Some("Running"), Some(true)), Machine::Running);
    assert_eq!(machine(Some("Running"), Some(false)), Machine::NotReady);
    assert_eq!(machine(Some("Running"), None), Machine::NotReady);
    assert_eq!(machine(Some("Provisioning"), None), Machine::Starting);
    assert_eq!(machine(None, None), Machine::Starting);
    assert_eq!(machine(Some("Stopped"), None), Machine::Stopped);
    assert_eq!(machine(Some("CrashLoopBackOff"), None), Machine::Failed);
}
