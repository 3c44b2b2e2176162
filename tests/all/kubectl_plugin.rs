//! The kubectl plugin (`kubectl verdict`, the binary named
//! `kubectl-verdict`) against the demo: apps by status, one app with its
//! pods and history, a VM-hosted app's rollout as a tree, and a person's
//! action refused with verdict's own words.

use std::process::Command;

use crate::serve::Server;
use crate::support::{plugin_folder, wait_until};

/// `kubectl-verdict ARGS` (the binary under the plugin's name), talking to
/// `server`: success, standard output, standard error.
pub fn plugin(dir: &std::path::Path, server: &str, args: &[&str]) -> (bool, String, String) {
    let named = dir.join("kubectl-verdict");
    if !named.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_verdict"), &named).unwrap();
    }
    let output = Command::new(&named)
        .args(["--server", server])
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_kubectl_plugin_shows_apps_an_app_and_a_rollout_tree() {
    let plugins = plugin_folder(&["status", "admission", "failover", "lifecycle"]);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with(plugins.path(), data.path(), &["--demo"]);
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| plugin(dir.path(), &server.base, args);

    // Every app, by status, once the demo's apps are there.
    let mut listed = String::new();
    let all = wait_until(std::time::Duration::from_secs(60), || {
        listed = run(&["apps", "-A"]).1;
        listed.contains("shop") && listed.contains("vms") && listed.contains("portal")
    });
    assert!(all.is_some(), "{listed}");
    let header: Vec<&str> = listed.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "STATUS", "STABLE", "READY", "REASON"]
    );
    // One namespace: no namespace column, only its apps.
    let (ok, shop, _) = run(&["apps", "-n", "shop"]);
    assert!(ok, "{shop}");
    assert!(shop.lines().next().unwrap().starts_with("NAME "), "{shop}");
    assert!(
        shop.lines().skip(1).all(|l| !l.starts_with("vms")) && shop.contains("web"),
        "{shop}"
    );

    // One app: status, why, its pods and containers.
    let (ok, page, err) = run(&["app", "shop/web"]);
    assert!(ok, "{err}");
    assert!(page.starts_with("shop/web: "), "{page}");
    assert!(
        page.contains("  why: ") && page.contains("pod/web-"),
        "{page}"
    );

    // The VM-hosted app's delivery, as a tree.
    let mut tree = String::new();
    let drawn = wait_until(std::time::Duration::from_secs(60), || {
        tree = run(&["rollout", "vms/portal"]).1;
        tree.contains("VMDeployment portal") && tree.contains("portal-0")
    });
    assert!(drawn.is_some(), "{tree}");
    assert!(
        tree.starts_with("VMReplicaSet vms/portal  ready "),
        "{tree}"
    );
    assert!(tree.contains("├── ") && tree.contains("└── "), "{tree}");

    // Bad input and verdict's refusals, in words, with a failing exit.
    let (ok, _, err) = run(&["rollout", "vms/nothing"]);
    assert!(!ok);
    assert!(err.contains("404") && err.contains("vms/nothing"), "{err}");
    let (ok, _, err) = run(&["app", "web"]);
    assert!(!ok);
    assert!(err.contains("is not `namespace/name`"), "{err}");
    let (ok, _, err) = run(&["promote", "vms/nothing", "--by", "ana"]);
    assert!(!ok);
    assert!(err.contains("vms/nothing"), "{err}");
}
