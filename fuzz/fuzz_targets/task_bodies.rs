//! Task bodies as `POST /v1/tasks`, `PATCH /v1/tasks/{id}` and the approve,
//! reject and cancel requests take them, applied in any order to a task
//! with a plan: a refusal for what is wrong, never a panic, and a task that
//! stays within its bounds and stores and reads back as it was.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use verdict::tasks::model::{Admission, Decision, NewTask, Task, TaskPatch, parse_app};

const NOW: i64 = 1_780_000_000_000;

#[derive(Debug)]
enum Step<'a> {
    Patch(&'a [u8]),
    Approve(&'a [u8]),
    Reject(&'a [u8]),
    Cancel(&'a [u8]),
}

#[derive(Debug)]
struct Input<'a> {
    new: &'a [u8],
    needs_approval: bool,
    steps: Vec<Step<'a>>,
}

// By hand rather than derived: `arbitrary`'s derive feature would build it,
// and what depends on it in the host (wasmtime's compiler), apart from the
// test build.
impl<'a> Arbitrary<'a> for Step<'a> {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let bytes = <&[u8]>::arbitrary(u)?;
        Ok(match u8::arbitrary(u)? % 4 {
            0 => Step::Patch(bytes),
            1 => Step::Approve(bytes),
            2 => Step::Reject(bytes),
            _ => Step::Cancel(bytes),
        })
    }
}

impl<'a> Arbitrary<'a> for Input<'a> {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Input {
            new: Arbitrary::arbitrary(u)?,
            needs_approval: Arbitrary::arbitrary(u)?,
            steps: Arbitrary::arbitrary(u)?,
        })
    }
}

fuzz_target!(|input: Input<'_>| {
    let Ok(new) = serde_json::from_slice::<NewTask>(input.new) else {
        return;
    };
    if new.check_sizes().is_err() || parse_app(&new.app).is_err() {
        return;
    }
    let admission = Admission {
        decision: if input.needs_approval {
            "require-approval"
        } else {
            "allow"
        }
        .into(),
        reason: None,
        warnings: Vec::new(),
        policy: None,
        failure: None,
    };
    let plan = vec![
        ("deploy".to_string(), "roll out".to_string()),
        ("verify".to_string(), "check health".to_string()),
    ];
    let mut task = Task::new(new, admission, plan, NOW);
    let mut now = NOW;
    for step in input.steps {
        now += 1_000;
        let decision = |bytes: &[u8]| serde_json::from_slice::<Decision>(bytes).ok();
        let _ = match step {
            Step::Patch(bytes) => match serde_json::from_slice::<TaskPatch>(bytes) {
                Ok(patch) => task.apply(&patch, now),
                Err(_) => Ok(()),
            },
            Step::Approve(bytes) => decision(bytes).map_or(Ok(()), |d| task.review(true, &d, now)),
            Step::Reject(bytes) => decision(bytes).map_or(Ok(()), |d| task.review(false, &d, now)),
            Step::Cancel(bytes) => decision(bytes).map_or(Ok(()), |d| task.cancel(&d, now)),
        };
        assert!(task.progress <= 100, "progress {}", task.progress);
    }
    let _ = task.to_wit();
    let stored = serde_json::to_string(&task).expect("a task serializes");
    let read: Task = serde_json::from_str(&stored).expect("a stored task reads back");
    assert_eq!(read, task);
});
