//! Loading and calling plugins that are broken or misbehave: every failure is
//! contained, reported with its reason, and the last good version serves.

use verdict::plugins::{PolicyError, World};
use verdict::wit::types::StableStatus;

use crate::support::{Fixture, NOW, app_input, default_plugin, test_plugin};

fn stamp_of(fixture: &Fixture, app: &str) -> String {
    let slot = fixture.registry.policy(World::Status).unwrap();
    let answer = slot
        .call(|v| v.evaluate(&v.context(NOW), &app_input(app)))
        .unwrap();
    answer.value.display.text
}

#[test]
fn default_plugins_load_and_answer_their_worlds() {
    let fixture = Fixture::new();
    for name in ["status", "failover", "admission", "lifecycle"] {
        fixture.install(name, &default_plugin(name));
    }
    let report = fixture.registry.reload();
    assert_eq!(report.loaded.len(), 4, "{report:?}");
    assert!(report.rejected.is_empty(), "{report:?}");

    let status = fixture.registry.policy(World::Status).unwrap();
    let answer = status
        .call(|v| v.evaluate(&v.context(NOW), &app_input("web")))
        .unwrap();
    assert_eq!(answer.value.stable, StableStatus::Stopped);
    assert_eq!(answer.version.info().name, "default-status");

    for world in [World::Failover, World::Admission, World::Lifecycle] {
        let slot = fixture.registry.policy(world).unwrap();
        assert_eq!(slot.current().unwrap().world(), world);
    }
    let statuses = fixture.registry.statuses();
    assert!(
        statuses.iter().all(|s| s.active && s.last_error.is_none()),
        "{statuses:?}"
    );
}

#[test]
fn a_component_of_no_known_world_is_rejected_with_the_reason() {
    let fixture = Fixture::new();
    fixture.install("alien", &test_plugin("alien"));
    let report = fixture.registry.reload();
    assert!(report.loaded.is_empty());
    let rejected = &report.rejected[0];
    assert_eq!(rejected.kind, "no-world");
    assert!(
        rejected.error.contains("example:alien/greeter@1.0.0"),
        "{}",
        rejected.error
    );
    assert!(!rejected.still_serving);
    let status = &fixture.registry.statuses()[0];
    assert!(status.current.is_none());
    assert_eq!(status.last_error.as_ref().unwrap().kind, "no-world");
    assert!(matches!(
        fixture.registry.policy(World::Status),
        Err(PolicyError::NotLoaded { .. })
    ));
}

#[test]
fn garbage_and_truncated_files_are_rejected_without_effect() {
    let fixture = Fixture::new();
    fixture.install("status", &test_plugin("stamp-a"));
    fixture.registry.reload();
    let serving = fixture.registry.get("status").unwrap().current().unwrap();

    let component = std::fs::read(test_plugin("stamp-b")).unwrap();
    let bad_files: [(&str, Vec<u8>, &str); 3] = [
        ("garbage", b"this is not wasm at all".to_vec(), "compile"),
        (
            "truncated",
            component[..component.len() / 2].to_vec(),
            "compile",
        ),
        ("empty", Vec::new(), "compile"),
    ];
    for (what, bytes, kind) in bad_files {
        std::fs::write(fixture.path("status"), &bytes).unwrap();
        let report = fixture.registry.reload();
        assert_eq!(report.rejected.len(), 1, "{what}: {report:?}");
        assert_eq!(report.rejected[0].kind, kind, "{what}");
        assert!(report.rejected[0].still_serving, "{what}");
        let now_serving = fixture.registry.get("status").unwrap().current().unwrap();
        assert_eq!(now_serving.info().hash, serving.info().hash, "{what}");
        assert_eq!(stamp_of(&fixture, "web"), "a", "{what}");
    }

    // A core module is not a component, and the reason says so.
    let core_module = b"\0asm\x01\0\0\0";
    std::fs::write(fixture.path("status"), core_module).unwrap();
    let report = fixture.registry.reload();
    assert_eq!(report.rejected[0].kind, "not-a-component");
    assert_eq!(stamp_of(&fixture, "web"), "a");

    // A bad file of a new name does not disturb the serving plugin either.
    std::fs::write(fixture.path("extra"), b"\0asm\x0d\0\x01\0garbage").unwrap();
    let report = fixture.registry.reload();
    assert!(
        report
            .rejected
            .iter()
            .any(|r| r.plugin == "extra" && !r.still_serving)
    );
    assert_eq!(
        fixture.registry.policy(World::Status).unwrap().name(),
        "status"
    );
}

#[test]
fn plugins_that_misbehave_on_every_call_are_rejected_before_serving() {
    let fixture = Fixture::new();
    fixture.install("status", &test_plugin("stamp-a"));
    fixture.registry.reload();
    for (plugin, kind) in [
        ("trap", "trap"),
        ("spin", "timeout"),
        ("hog", "memory"),
        ("oversize", "output-too-large"),
    ] {
        fixture.install("status", &test_plugin(plugin));
        let report = fixture.registry.reload();
        assert!(report.loaded.is_empty(), "{plugin}: {report:?}");
        assert_eq!(report.rejected[0].kind, kind, "{plugin}: {report:?}");
        assert!(report.rejected[0].still_serving, "{plugin}");
        assert!(
            report.rejected[0].error.starts_with("validation failed"),
            "{plugin}: {}",
            report.rejected[0].error
        );
        assert_eq!(stamp_of(&fixture, "web"), "a", "{plugin}");
    }
    // The same rejected bytes are not compiled again, but still reported.
    let again = fixture.registry.reload();
    assert_eq!(again.rejected[0].kind, "output-too-large");
}

#[test]
fn a_failing_call_falls_back_to_the_last_good_version() {
    let fixture = Fixture::new();
    fixture.install("status", &default_plugin("status"));
    fixture.registry.reload();
    fixture.install("status", &test_plugin("stamp-b"));
    let report = fixture.registry.reload();
    assert_eq!(report.loaded.len(), 1, "{report:?}");

    let slot = fixture.registry.policy(World::Status).unwrap();
    // Each of these app names makes stamp-b misbehave in its own way.
    let ways = [
        ("trap", "trap"),
        ("spin", "timeout"),
        ("hog", "memory"),
        ("oversize", "output-too-large"),
        ("garbage", "malformed"),
    ];
    for (way, kind) in ways {
        let answer = slot
            .call(|v| v.evaluate(&v.context(NOW), &app_input(way)))
            .unwrap_or_else(|e| panic!("{way}: {e}"));
        assert!(answer.fell_back, "{way}");
        assert_eq!(answer.version.info().name, "default-status", "{way}");
        assert_eq!(answer.value.app.name, way);
        let status = fixture
            .registry
            .statuses()
            .into_iter()
            .find(|s| s.name == "status")
            .unwrap();
        assert_eq!(status.last_error.unwrap().kind, kind, "{way}");
    }
    let status = fixture.registry.statuses().remove(0);
    assert_eq!(status.errors, 5);
    assert_eq!(status.timeouts, 1);
    assert_eq!(status.fallbacks, 5);

    // The serving version still answers well-formed requests itself: the
    // instances its failures poisoned were replaced.
    let answer = slot
        .call(|v| v.evaluate(&v.context(NOW), &app_input("web")))
        .unwrap();
    assert!(!answer.fell_back);
    assert_eq!(answer.value.display.text, "b");
}

#[test]
fn without_a_good_version_a_failing_call_is_an_error_value() {
    let fixture = Fixture::new();
    fixture.install("status", &test_plugin("stamp-a"));
    fixture.registry.reload();
    let slot = fixture.registry.policy(World::Status).unwrap();
    for (way, kind) in [("trap", "trap"), ("spin", "timeout"), ("hog", "memory")] {
        match slot.call(|v| v.evaluate(&v.context(NOW), &app_input(way))) {
            Err(error @ PolicyError::Failed { .. }) => assert_eq!(error.kind(), kind, "{way}"),
            other => panic!("{way}: expected a failure, got {other:?}"),
        }
        assert_eq!(stamp_of(&fixture, "web"), "a", "after {way}");
    }
}

#[test]
fn deleting_a_plugin_file_unloads_it() {
    let fixture = Fixture::new();
    fixture.install("status", &default_plugin("status"));
    fixture.registry.reload();
    assert!(fixture.registry.policy(World::Status).is_ok());
    std::fs::remove_file(fixture.path("status")).unwrap();
    let report = fixture.registry.reload();
    assert_eq!(report.unloaded, vec!["status".to_string()]);
    assert!(matches!(
        fixture.registry.policy(World::Status),
        Err(PolicyError::NotLoaded {
            world: World::Status
        })
    ));
    assert!(fixture.registry.statuses().is_empty());
}

#[test]
fn a_version_that_fails_too_many_calls_is_demoted_to_the_one_before() {
    use std::sync::Arc;
    use verdict::plugins::{Demotion, Registry, Runtime};
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(
        &crate::support::shared_cache(),
        crate::support::test_limits(),
    )
    .unwrap();
    let registry = Registry::new(
        Arc::new(runtime),
        Some(dir.path().to_path_buf()),
        Default::default(),
    )
    .with_demotion(Demotion {
        max_error_rate: 0.5,
        min_calls: 4,
    });
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let heard = Arc::clone(&told);
    registry.on_demotion(move |d| heard.lock().unwrap().push(d.clone()));
    std::fs::copy(default_plugin("status"), dir.path().join("status.wasm")).unwrap();
    registry.reload();
    std::fs::copy(test_plugin("stamp-b"), dir.path().join("status.wasm")).unwrap();
    registry.reload();
    let call = |app: &str| {
        let slot = registry.policy(World::Status).unwrap();
        slot.call(|v| v.evaluate(&v.context(NOW), &app_input(app)))
            .unwrap()
    };
    // Some apps it answers, some it fails on: under the share, it serves.
    assert!(!call("web").fell_back);
    let fell = call("trap");
    assert!(fell.fell_back);
    assert!(
        fell.failure
            .as_deref()
            .is_some_and(|f| f.contains("unruly-b") && f.contains("trapped")),
        "{:?}",
        fell.failure
    );
    assert!(!call("web").fell_back);
    // Past it, the version before it serves again, said so.
    call("trap");
    call("trap");
    let answer = call("web");
    assert_eq!(answer.version.info().name, "default-status");
    assert!(!answer.fell_back);
    let status = registry
        .statuses()
        .into_iter()
        .find(|s| s.name == "status")
        .unwrap();
    let error = status.last_error.unwrap();
    assert_eq!(error.kind, "demoted", "{error:?}");
    // Told once, naming both versions (the host publishes it as an event).
    let told = told.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].plugin, "status");
    assert!(told[0].demoted.starts_with("unruly-b@"), "{told:?}");
    assert!(told[0].serving.starts_with("default-status@"), "{told:?}");
    assert!(
        error.message.contains("failed 3 of its 5 calls"),
        "{}",
        error.message
    );
    // The demoted file is not loaded again until it changes.
    let report = registry.reload();
    assert!(report.loaded.is_empty(), "{report:?}");
    assert_eq!(
        registry
            .policy(World::Status)
            .unwrap()
            .current()
            .unwrap()
            .info()
            .name,
        "default-status"
    );
}
