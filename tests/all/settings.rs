//! A policy checks its own settings before the host serves it with them
//! (`verdict:policy/settings`): settings it refuses keep it from serving,
//! in its own words, whether they come from the host's configuration or
//! with a delivered component — and a version already serving keeps
//! serving. A component built before the check existed is served
//! unchecked, and says so.

use std::collections::BTreeMap;
use std::sync::Arc;

use verdict::plugins::{Delivered, Mode, Registry, Runtime, World};

use crate::support::{default_plugin, shared_cache, test_limits, test_plugin};

/// A registry over a folder holding `files` (name, component), with
/// `settings` by plugin name, reloaded once.
fn loaded(
    files: &[(&str, std::path::PathBuf)],
    settings: &[(&str, &str)],
) -> (
    tempfile::TempDir,
    Arc<Registry>,
    verdict::plugins::ReloadReport,
) {
    let dir = tempfile::tempdir().unwrap();
    for (name, from) in files {
        std::fs::copy(from, dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    let settings: BTreeMap<String, String> = settings
        .iter()
        .map(|(name, text)| (name.to_string(), text.to_string()))
        .collect();
    let runtime = Runtime::new(&shared_cache(), test_limits()).unwrap();
    let registry = Arc::new(Registry::new(
        Arc::new(runtime),
        Some(dir.path().to_path_buf()),
        settings,
    ));
    let report = registry.reload();
    (dir, registry, report)
}

#[test]
fn the_default_policies_refuse_settings_of_the_wrong_type_or_unknown_keys() {
    let (_dir, registry, report) = loaded(
        &[
            ("status", default_plugin("status")),
            ("failover", default_plugin("failover")),
            ("admission", default_plugin("admission")),
        ],
        &[
            ("status", r#"{"restart-window-ms":"5m"}"#),
            ("failover", r#"{"grace":1000}"#),
            ("admission", r#"{"max-replicas":20}"#),
        ],
    );
    let rejected: BTreeMap<&str, _> = report
        .rejected
        .iter()
        .map(|r| (r.plugin.as_str(), r))
        .collect();
    let status = rejected["status"];
    assert_eq!(status.kind, "settings");
    assert_eq!(
        status.error,
        r#"its settings are refused by the policy: setting `restart-window-ms` must be an integer, not "5m""#
    );
    assert!(!status.still_serving);
    let failover = rejected["failover"];
    assert_eq!(failover.kind, "settings");
    assert!(
        failover
            .error
            .contains("unknown setting `grace`: the known ones are `grace-ms`"),
        "{}",
        failover.error
    );
    // Nothing serves a world whose only policy refused its settings.
    assert!(registry.policy(World::Status).is_err());
    assert!(registry.policy(World::Failover).is_err());
    // Settings the policy takes serve, and the version says it checks them.
    assert!(!rejected.contains_key("admission"), "{rejected:?}");
    let admission = registry
        .policy(World::Admission)
        .unwrap()
        .current()
        .unwrap();
    assert!(admission.info().checks_settings);
    assert_eq!(admission.settings(), r#"{"max-replicas":20}"#);
    // The registry's status says why, as `/v1/plugins` shows it.
    let statuses = registry.statuses();
    let status = statuses.iter().find(|s| s.name == "status").unwrap();
    let error = status.last_error.as_ref().unwrap();
    assert_eq!(error.kind, "settings");
}

#[test]
fn refused_settings_with_a_delivered_version_leave_the_serving_one_serving() {
    let (_dir, registry, report) = loaded(&[], &[]);
    assert!(report.rejected.is_empty());
    let bytes = std::fs::read(test_plugin("stamp-a")).unwrap();
    let delivered = || Delivered {
        source: "oci://registry.example/stamp@sha256:0".into(),
        digest: "sha256:0".into(),
        mode: Mode::Active,
    };
    let first = registry
        .install("stamped", &bytes, r#"{"colour":"red"}"#, None, delivered())
        .unwrap();
    assert!(first.checks_settings);
    let refused = registry
        .install(
            "stamped",
            &bytes,
            r#"{"refuse":"blue is not a colour this policy knows"}"#,
            None,
            delivered(),
        )
        .unwrap_err();
    assert_eq!(refused.kind, "settings");
    assert_eq!(
        refused.error,
        "its settings are refused by the policy: blue is not a colour this policy knows"
    );
    assert!(refused.still_serving);
    let serving = registry.get("stamped").unwrap().current().unwrap();
    assert_eq!(serving.settings(), r#"{"colour":"red"}"#);
    assert_eq!(serving.info().version, "a");
}

#[test]
fn a_component_built_before_the_settings_check_is_served_unchecked() {
    let (_dir, registry, report) = loaded(
        &[("admission", test_plugin("gate"))],
        &[("admission", r#"{"anything":["goes"]}"#)],
    );
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let gate = registry
        .policy(World::Admission)
        .unwrap()
        .current()
        .unwrap();
    assert_eq!(gate.info().name, "test-gate");
    assert!(!gate.info().checks_settings);
    assert!(gate.check_settings(r#"{"anything":["goes"]}"#).is_ok());
}
