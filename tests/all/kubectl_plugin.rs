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

    // A stage forced on an instance, written in its Server's spec, and
    // lifted; a stage the machine does not have is refused in words.
    let force = [
        "force",
        "vms/portal",
        "--instance",
        "portal-0",
        "--by",
        "ana",
        "--why",
        "disk check",
    ];
    let (ok, said, err) = run(&[&force[..], &["--stage", "offline"]].concat());
    assert!(ok, "{err}");
    assert_eq!(
        said,
        "force of vms/portal instance portal-0 asked by ana, written on Server/vms/portal-0\n"
    );
    let (ok, _, err) = run(&[&force[..], &["--stage", "sideways"]].concat());
    assert!(!ok);
    assert!(err.contains("422") && err.contains("sideways"), "{err}");
    let lift = [
        "lift",
        "vms/portal",
        "--instance",
        "portal-0",
        "--by",
        "ana",
    ];
    let (ok, said, err) = run(&lift);
    assert!(ok, "{err}");
    assert!(
        said.starts_with("lift of vms/portal instance portal-0"),
        "{said}"
    );
    let (ok, _, err) = run(&lift);
    assert!(!ok);
    assert!(err.contains("nothing to lift"), "{err}");

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
    // With --server and no --by, no kubeconfig and no USER or LOGNAME, who
    // asks is the login name of the process's user: the action is asked
    // (and refused by verdict), not refused for want of a name.
    let output = Command::new(dir.path().join("kubectl-verdict"))
        .args(["--server", &server.base, "promote", "vms/nothing"])
        .env_remove("KUBECONFIG")
        .env_remove("USER")
        .env_remove("LOGNAME")
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        !err.contains("--by") && err.contains("vms/nothing"),
        "{err}"
    );
}

/// A server that answers every request with `answer` (status line, headers
/// and as much of the body as it writes), on 127.0.0.1.
fn hostile(answer: impl Fn(&mut std::net::TcpStream) + Send + 'static) -> String {
    use std::io::Read as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 8192];
            let _ = stream.read(&mut request);
            answer(&mut stream);
        }
    });
    format!("http://{address}")
}

#[test]
fn the_kubectl_plugin_prints_a_hostile_servers_words_escaped_and_bounds_its_answers() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    // Names, reasons and statuses with a window title, a screen clear, a
    // cursor move back over the rows printed and a bell.
    let escapes = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[1A\rforged";
    let apps = serde_json::json!({"apps": [{
        "namespace": "shop", "name": format!("web{escapes}"),
        "display": {"status": format!("running{escapes}")},
        "stable": "running", "stable_reason": format!("fine{escapes}\nNAMESPACE forged row"),
        "pods": [],
    }]})
    .to_string();
    let url = hostile(move |stream| {
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{apps}",
            apps.len()
        );
    });
    let (ok, out, err) = plugin(dir.path(), &url, &["apps", "-A"]);
    assert!(ok, "{err}");
    assert!(
        !out.contains('\u{1b}') && !out.contains('\u{7}') && !out.contains('\r'),
        "{out:?}"
    );
    assert!(
        out.contains("\\u{1b}]0;owned"),
        "the escape is shown, not obeyed: {out}"
    );
    assert!(
        out.lines()
            .filter(|l| l.contains("forged row"))
            .all(|l| !l.starts_with("NAMESPACE")),
        "no line is forged: {out}"
    );
    // An error text with escapes and a newline is one escaped line.
    let url = hostile(|stream| {
        let body = "{\"error\": {\"message\": \"no\\u001b[2J\\nkubectl verdict: all good\"}}";
        let _ = write!(
            stream,
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    let (ok, _, err) = plugin(dir.path(), &url, &["apps", "-A"]);
    assert!(!ok);
    assert!(
        !err.contains('\u{1b}') && err.trim_end().lines().count() == 1,
        "{err:?}"
    );
    // An endless answer is cut off at the bound, with a clear error.
    let url = hostile(|stream| {
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{{\"apps\": [\""
        );
        let chunk = vec![b'a'; 1 << 20];
        while stream.write_all(&chunk).is_ok() {}
    });
    let (ok, _, err) = plugin(dir.path(), &url, &["apps", "-A"]);
    assert!(!ok);
    assert!(err.contains("larger than 64 MiB"), "{err}");
}
