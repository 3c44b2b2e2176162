//! The rollout's plan: the safe rate, its order, its steps and gates.

use super::*;
use crate::wit::lifecycle::Machine;

fn package(name: &str, version: &str) -> Package {
    Package {
        name: name.into(),
        version: version.into(),
    }
}

/// `n` instances serving `environment` and `code`.
fn instances(n: usize, environment: &[Package], code: &str) -> Vec<InstanceState> {
    (0..n)
        .map(|i| InstanceState {
            namespace: "shop".into(),
            name: format!("web-{i}"),
            set: "web".into(),
            stage: Some(Stage::Serving),
            since: 0,
            machine: Machine::Running,
            node: Some("n1".into()),
            node_health: NodeHealth::Healthy,
            environment: environment.to_vec(),
            code: Some(code.into()),
            lists: Vec::new(),
            deleting: false,
            take_offline: false,
            forced: None,
        })
        .collect()
}

fn set(environment: &[Package], max_unavailable: Share) -> SetSpec {
    SetSpec {
        environment: environment.to_vec(),
        max_unavailable,
        max_surge: Share::Count(0),
        order: Order::Name,
        paused: false,
        desired: None,
    }
}

/// One move of each instance towards its target, as the default
/// machine makes it (a list per stage, each succeeding at once).
fn step(state: &mut InstanceState, target: &TargetState) {
    let changes = state.environment != target.environment
        || (target.code.is_some() && state.code != target.code);
    state.stage = Some(match state.stage {
        Some(Stage::Serving | Stage::GrayRelease | Stage::Ready)
            if changes && target.may_disrupt =>
        {
            match state.environment != target.environment {
                true => Stage::Initializing,
                false => Stage::Deploying,
            }
        }
        Some(Stage::Initializing) => {
            state.environment = target.environment.clone();
            Stage::Deploying
        }
        Some(Stage::Deploying) => {
            state.code = target.code.clone();
            Stage::Ready
        }
        Some(Stage::Ready) if !target.released => Stage::GrayRelease,
        Some(Stage::Ready | Stage::GrayRelease) if target.released => Stage::Serving,
        other => other.unwrap(),
    });
}

/// Plan and move until nothing changes (at most `ticks` times); the
/// most instances out of service seen, and the last plan.
fn run(
    set: &SetSpec,
    deployment: Option<(&DeploymentSpec, &mut Progress)>,
    states: &mut [InstanceState],
    now: Timestamp,
) -> (usize, Plan) {
    let mut most_out = 0;
    let mut deployment = deployment;
    for _ in 0..100 {
        let members: Vec<Member<'_>> = states
            .iter()
            .map(|state| Member {
                state,
                created: 0,
                node_ready: true,
            })
            .collect();
        let plan = plan(
            set,
            deployment
                .as_ref()
                .map(|(spec, progress)| (*spec, &**progress)),
            &members,
            now,
        );
        let before: Vec<InstanceState> = states.to_vec();
        for state in states.iter_mut() {
            step(state, &plan.targets[&state.name]);
        }
        let out = states.iter().filter(|s| !in_service(s.stage)).count();
        most_out = most_out.max(out);
        if let Some((_, progress)) = deployment.as_mut() {
            **progress = plan.progress.clone();
        }
        if before == states {
            return (most_out, plan);
        }
    }
    panic!("no rest after 100 moves");
}

#[test]
fn an_environment_change_moves_at_most_max_unavailable_at_a_time() {
    let old = [package("jdk", "21")];
    let new = [package("jdk", "25"), package("agent", "3")];
    let mut states = instances(5, &old, "1.0");
    let (most_out, plan) = run(&set(&new, Share::Count(2)), None, &mut states, 0);
    assert_eq!(most_out, 2);
    assert!(
        states
            .iter()
            .all(|s| s.environment == new && s.stage == Some(Stage::Serving))
    );
    assert_eq!(
        (plan.phase, plan.up_to_date, plan.ready),
        (Phase::Completed, 5, 5)
    );

    // A share rounds down, but never to none.
    let mut states = instances(5, &old, "1.0");
    let (most_out, _) = run(&set(&new, Share::Percent(30)), None, &mut states, 0);
    assert_eq!(most_out, 1);
    let mut states = instances(5, &old, "1.0");
    let (most_out, _) = run(&set(&new, Share::Percent(60)), None, &mut states, 0);
    assert_eq!(most_out, 3);

    // Paused, nothing leaves service.
    let mut states = instances(5, &old, "1.0");
    let paused = SetSpec {
        paused: true,
        ..set(&new, Share::Count(2))
    };
    let (most_out, plan) = run(&paused, None, &mut states, 0);
    assert_eq!((most_out, plan.phase), (0, Phase::Paused));
    assert!(states.iter().all(|s| s.environment == old));
}

#[test]
fn instances_already_out_of_service_count_against_the_budget() {
    let old = [package("jdk", "21")];
    let new = [package("jdk", "25")];
    let mut states = instances(5, &old, "1.0");
    states[4].stage = Some(Stage::Unknown);
    let members: Vec<Member<'_>> = states
        .iter()
        .map(|state| Member {
            state,
            created: 0,
            node_ready: true,
        })
        .collect();
    let plan = plan(&set(&new, Share::Count(2)), None, &members, 0);
    let disrupted: Vec<&str> = plan
        .targets
        .iter()
        .filter(|(name, t)| t.may_disrupt && name.as_str() != "web-4")
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(disrupted, ["web-0"]);
}

/// Unavailable is what is observed: an instance in service whose node
/// is not healthy or whose machine is not ready is out, and so is one
/// the set wants but does not have; none of these leaves room for
/// taking an available one out.
#[test]
fn the_budget_is_of_what_is_observed_unavailable() {
    let old = [package("jdk", "21")];
    let new = [package("jdk", "25")];
    let disrupted = |states: &[InstanceState], spec: &SetSpec| -> Vec<String> {
        let members: Vec<Member<'_>> = states
            .iter()
            .map(|state| Member {
                state,
                created: 0,
                node_ready: true,
            })
            .collect();
        plan(spec, None, &members, 0)
            .targets
            .into_iter()
            .filter(|(_, t)| t.may_disrupt)
            .map(|(name, _)| name)
            .collect()
    };
    let budget_of_one = set(&new, Share::Count(1));
    // Serving, on a node out of contact: it is the one out, and may
    // move; no available instance does.
    let mut states = instances(3, &old, "1.0");
    states[2].node_health = NodeHealth::Unknown;
    assert_eq!(disrupted(&states, &budget_of_one), ["web-2"]);
    // Serving, its machine not ready: the same.
    let mut states = instances(3, &old, "1.0");
    states[1].machine = Machine::NotReady;
    assert_eq!(disrupted(&states, &budget_of_one), ["web-1"]);
    // Two out of contact with a budget of one: neither moves, nor any
    // other.
    let mut states = instances(3, &old, "1.0");
    states[1].node_health = NodeHealth::Unknown;
    states[2].machine = Machine::NotReady;
    assert!(disrupted(&states, &budget_of_one).is_empty());
    // A set that wants three and has two is one out already.
    let states = instances(2, &old, "1.0");
    let short = SetSpec {
        desired: Some(3),
        ..budget_of_one.clone()
    };
    assert!(disrupted(&states, &short).is_empty());
    // All available and all there: one at a time.
    let states = instances(3, &old, "1.0");
    assert_eq!(disrupted(&states, &budget_of_one), ["web-0"]);
    // Its node NotReady but within failover's grace (the policy sees
    // it healthy and waits): unavailable at once, so that no second
    // instance is taken out beside it, and itself not changed while its
    // machine may not be reached.
    let states = instances(3, &old, "1.0");
    let members: Vec<Member<'_>> = states
        .iter()
        .map(|state| Member {
            state,
            created: 0,
            node_ready: state.name != "web-0",
        })
        .collect();
    let moved: Vec<String> = plan(&budget_of_one, None, &members, 0)
        .targets
        .into_iter()
        .filter(|(_, t)| t.may_disrupt)
        .map(|(name, _)| name)
        .collect();
    assert!(moved.is_empty(), "{moved:?}");
}

fn gray() -> DeploymentSpec {
    DeploymentSpec {
        code: "1.1".into(),
        previous: Some("1.0".into()),
        steps: vec![
            Step::Instances(Share::Count(1)),
            Step::Pause(None),
            Step::Instances(Share::Percent(50)),
            Step::Pause(Some(Duration::from_secs(600))),
        ],
        paused: false,
        progress_deadline: Duration::from_secs(600),
    }
}

fn with_code<'a>(states: &'a [InstanceState], code: &str) -> Vec<&'a str> {
    states
        .iter()
        .filter(|s| s.code.as_deref() == Some(code))
        .map(|s| s.name.as_str())
        .collect()
}

#[test]
fn a_gray_release_stops_at_its_gate_until_approved_and_then_at_its_timed_pause() {
    let environment = [package("jdk", "21")];
    let set = set(&environment, Share::Count(1));
    let spec = gray();
    let mut states = instances(5, &environment, "1.0");
    let mut progress = Progress::default();
    let (most_out, plan) = run(&set, Some((&spec, &mut progress)), &mut states, 1_000);
    assert_eq!(most_out, 1);
    assert_eq!(with_code(&states, "1.1"), ["web-0"]);
    assert_eq!(
        states[0].stage,
        Some(Stage::GrayRelease),
        "not released yet"
    );
    assert_eq!(plan.waiting, "step 2: waiting for a person to approve");
    assert_eq!((plan.phase, progress.step), (Phase::Progressing, 1));
    assert!(
        !plan.past_deadline,
        "a gate waits for a person without a deadline"
    );

    // Approved: 50% of 5 is 3 instances, then the timed pause.
    progress.approved = true;
    let (_, plan) = run(&set, Some((&spec, &mut progress)), &mut states, 2_000);
    assert_eq!(with_code(&states, "1.1"), ["web-0", "web-1", "web-2"]);
    assert_eq!(progress.step, 3);
    assert!(
        plan.waiting.starts_with("step 4: paused until "),
        "{}",
        plan.waiting
    );

    // Ten minutes on, every instance gets it, and it is released.
    let (most_out, plan) = run(
        &set,
        Some((&spec, &mut progress)),
        &mut states,
        2_000 + 600_001,
    );
    assert_eq!(most_out, 1);
    assert_eq!(with_code(&states, "1.1").len(), 5);
    assert!(states.iter().all(|s| s.stage == Some(Stage::Serving)));
    assert_eq!((plan.phase, plan.waiting.as_str()), (Phase::Completed, ""));
}

#[test]
fn a_first_rollout_gives_its_code_step_by_step_and_the_rest_no_code_and_no_traffic() {
    let environment = [package("jdk", "21")];
    let set = set(&environment, Share::Count(3));
    let spec = DeploymentSpec {
        previous: None,
        ..gray()
    };
    // A set with no instances yet has not done a step of instances.
    let plan_of = |states: &[InstanceState]| {
        let members: Vec<Member<'_>> = states
            .iter()
            .map(|state| Member {
                state,
                created: 0,
                node_ready: true,
            })
            .collect();
        plan(&set, Some((&spec, &Progress::default())), &members, 1_000)
    };
    let empty = plan_of(&[]);
    assert_eq!(empty.progress.step, 0);
    assert_eq!(empty.waiting, "step 1: the set has no instances yet");

    // Three ready instances with no code: the first step reaches one.
    let mut states = instances(3, &environment, "");
    for state in &mut states {
        state.stage = Some(Stage::Ready);
        state.code = None;
    }
    let plan = plan_of(&states);
    let target = |name: &str| plan.targets[name].clone();
    assert_eq!(target("web-0").code.as_deref(), Some("1.1"));
    assert!(!target("web-0").released);
    for name in ["web-1", "web-2"] {
        assert_eq!(target(name).code, None, "{name}: no code reached it");
        assert!(!target(name).released, "{name}: takes no traffic");
    }
}

#[test]
fn promote_skips_the_remaining_steps_and_abort_goes_back() {
    let environment = [package("jdk", "21")];
    let set = set(&environment, Share::Count(2));
    let spec = gray();
    let mut states = instances(5, &environment, "1.0");
    let mut progress = Progress::default();
    run(&set, Some((&spec, &mut progress)), &mut states, 0);
    assert_eq!(with_code(&states, "1.1"), ["web-0"]);

    let mut aborted = Progress {
        aborted: true,
        ..progress.clone()
    };
    let mut back = states.clone();
    let (_, plan) = run(&set, Some((&spec, &mut aborted)), &mut back, 0);
    assert_eq!(with_code(&back, "1.0").len(), 5);
    assert_eq!(plan.phase, Phase::Aborted);
    assert_eq!(plan.waiting, "aborted: every instance is back on 1.0");

    progress.promoted = true;
    let (_, plan) = run(&set, Some((&spec, &mut progress)), &mut states, 0);
    assert_eq!(with_code(&states, "1.1").len(), 5);
    assert_eq!(plan.phase, Phase::Completed);
}

#[test]
fn a_failed_instance_stops_the_rollout_and_a_stalled_one_passes_its_deadline() {
    let environment = [package("jdk", "21")];
    let set = set(&environment, Share::Count(2));
    let spec = DeploymentSpec {
        steps: vec![Step::Instances(Share::Count(2)), Step::Pause(None)],
        ..gray()
    };
    let mut states = instances(5, &environment, "1.0");
    states[0].stage = Some(Stage::Failed);
    states[0].code = Some("1.1".into());
    let members: Vec<Member<'_>> = states
        .iter()
        .map(|state| Member {
            state,
            created: 0,
            node_ready: true,
        })
        .collect();
    let plan = plan(&set, Some((&spec, &Progress::default())), &members, 0);
    assert_eq!(plan.phase, Phase::Degraded);
    assert_eq!(
        plan.waiting,
        "stopped: web-0 failed (retry, abort, or set its stage)"
    );
    assert!(
        !plan.targets["web-1"].may_disrupt,
        "the code waits while degraded"
    );

    // An instance that never comes back passes the deadline.
    states[0].stage = Some(Stage::Deploying);
    let members: Vec<Member<'_>> = states
        .iter()
        .map(|state| Member {
            state,
            created: 0,
            node_ready: true,
        })
        .collect();
    let stalled = super::plan(&set, Some((&spec, &Progress::default())), &members, 600_001);
    assert_eq!(stalled.phase, Phase::Progressing);
    assert!(stalled.past_deadline);
}

#[test]
fn shares_read_as_the_resources_write_them() {
    use serde_json::json;
    assert_eq!(Share::parse(&json!(2)), Ok(Share::Count(2)));
    assert_eq!(Share::parse(&json!("25%")), Ok(Share::Percent(25)));
    assert!(Share::parse(&json!(0)).unwrap_err().contains("at least 1"));
    assert!(
        Share::parse(&json!("0%"))
            .unwrap_err()
            .contains("from 1% to 100%")
    );
    assert!(Share::parse(&json!("101%")).is_err());
    assert!(Share::parse(&json!(true)).is_err());
    assert_eq!(Share::Percent(50).at_least(5), 3);
    assert_eq!(Share::Percent(50).at_most(5), 2);
    assert_eq!(Share::Percent(1).at_most(5), 1);
    let order = |text: &str| serde_json::from_value::<Order>(json!(text));
    assert_eq!(order("newest-first").ok(), Some(Order::NewestFirst));
    assert!(order("random").is_err());
}
