//! One source of status rules, three ways to run them: the component (the
//! host's Wasm runtime), the same Rust file compiled into the host
//! (`verdict::native`), and the Lua port the benchmark measures against.
//! All three give the same verdicts over a generated cluster with every
//! state of the mix.

use verdict::plugins::World;
use verdict::wit::types;

use crate::lua_rules::{LuaRules, summary_of, summary_of_lua};
use crate::mix;
use crate::support::{Fixture, default_plugin};

fn component_verdicts(inputs: &[verdict::wit::status::AppInput]) -> Vec<types::AppVerdict> {
    let fixture = Fixture::new();
    fixture.install("status", &default_plugin("status"));
    fixture.registry.reload();
    let slot = fixture.registry.policy(World::Status).unwrap();
    inputs
        .chunks(64)
        .flat_map(|batch| {
            slot.call(|v| v.evaluate_batch(&v.context(mix::NOW), batch))
                .unwrap()
                .value
        })
        .map(Result::unwrap)
        .collect()
}

#[test]
fn native_rules_and_the_component_agree_on_every_verdict() {
    let inputs = mix::cluster(300, 10);
    let settings = verdict::native::Settings::parse("{}");
    let native: Vec<types::AppVerdict> = inputs
        .iter()
        .map(|i| verdict::native::evaluate(&settings, mix::NOW, i))
        .collect();
    let component = component_verdicts(&inputs);
    assert_eq!(native.len(), component.len());
    for (n, c) in native.iter().zip(&component) {
        assert_eq!(
            n, c,
            "the verdicts on {}/{} differ",
            n.app.namespace, n.app.name
        );
    }
    // The mix reaches every stable status but not-existed and stopped, and
    // the pod statuses the rules know.
    let stable: std::collections::BTreeSet<String> =
        native.iter().map(|v| format!("{:?}", v.stable)).collect();
    for s in ["Running", "Degraded", "Panic"] {
        let found = stable.iter().any(|x| x.ends_with(&format!("::{s}")));
        assert!(found, "no {s} app in the mix: {stable:?}");
    }
    let groups: std::collections::BTreeSet<String> = native
        .iter()
        .flat_map(|v| v.groups.iter().map(|g| format!("{:?}", g.status)))
        .collect();
    for s in [
        "RunningUnhealthy",
        "RunningHealthy",
        "RunningRestarting",
        "RunningNotReady",
        "RunningOverloaded",
        "Pending",
        "Terminating",
        "Unknown",
    ] {
        let found = groups.iter().any(|x| x.ends_with(&format!("::{s}")));
        assert!(found, "no {s} pod in the mix: {groups:?}");
    }
}

#[test]
fn the_lua_port_agrees_with_the_rules() {
    let inputs = mix::cluster(300, 10);
    let settings = verdict::native::Settings::parse("{}");
    let lua = LuaRules::new();
    for input in &inputs {
        let native = summary_of(&verdict::native::evaluate(&settings, mix::NOW, input));
        let ported = summary_of_lua(&lua.evaluate(mix::NOW, input));
        assert_eq!(
            ported, native,
            "the Lua verdict on {}/{} differs",
            input.app.id.namespace, input.app.id.name
        );
    }
    // What Lua built for the 300 apps was collected.
    assert!(lua.used_memory() < 16 << 20, "{} bytes", lua.used_memory());
}

#[test]
fn the_component_runs_call_after_call_in_bounded_memory() {
    // The plugin's arena starts over after every call: a batch of 64 apps
    // (about 1 MB of input) called 200 times stays far below the test
    // limit of 32 MiB, on one pooled instance.
    let inputs = mix::cluster(64, 10);
    let fixture = Fixture::new();
    fixture.install("status", &default_plugin("status"));
    fixture.registry.reload();
    let slot = fixture.registry.policy(World::Status).unwrap();
    let first = slot
        .call(|v| v.evaluate_batch(&v.context(mix::NOW), &inputs))
        .unwrap()
        .value;
    for _ in 0..200 {
        let again = slot
            .call(|v| v.evaluate_batch(&v.context(mix::NOW), &inputs))
            .unwrap()
            .value;
        assert_eq!(again, first, "the same input, the same answer");
    }
    let status = &fixture.registry.statuses()[0];
    assert_eq!(status.errors, 0, "{status:?}");
}

#[test]
fn encoded_batches_answer_as_typed_calls_do() {
    // The status plugin takes batches encoded (`status-encoded`); one app at
    // a time it is called with typed values. Both give the same verdicts,
    // and so does a plugin built on the rules with its own judgement.
    let inputs = mix::cluster(200, 10);
    for (name, path) in [
        ("status", default_plugin("status")),
        ("budget", crate::support::example_plugin("restart-budget")),
    ] {
        let fixture = Fixture::new();
        fixture.install(name, &path);
        fixture.registry.reload();
        let slot = fixture.registry.policy(World::Status).unwrap();
        let takes_encoded = slot.call(|v| Ok(v.info().encoded_batches)).unwrap().value;
        assert!(takes_encoded, "{name} takes its batches encoded");
        let batched = slot
            .call(|v| v.evaluate_batch(&v.context(mix::NOW), &inputs))
            .unwrap()
            .value;
        for (input, batched) in inputs.iter().zip(batched) {
            let single = slot
                .call(|v| v.evaluate(&v.context(mix::NOW), input))
                .unwrap()
                .value;
            assert_eq!(batched.unwrap(), single, "{name}: {}", input.app.id.name);
        }
    }
    // A plugin without the encoded export is called typed.
    let fixture = Fixture::new();
    fixture.install("stamp", &crate::support::test_plugin("stamp-a"));
    fixture.registry.reload();
    let slot = fixture.registry.policy(World::Status).unwrap();
    assert!(!slot.call(|v| Ok(v.info().encoded_batches)).unwrap().value);
    let answers = slot
        .call(|v| v.evaluate_batch(&v.context(mix::NOW), &inputs[..3]))
        .unwrap()
        .value;
    assert_eq!(answers.len(), 3);
}
