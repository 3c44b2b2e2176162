//! Policy delivery: policies pushed to and pulled from a real OCI registry
//! (Debian's `docker-registry`, the CNCF distribution registry, started on
//! 127.0.0.1 by the test), every digest checked.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{KillOnDrop, default_plugin, wait_until};

/// A registry of the test's own, on a free port of 127.0.0.1, storing in a
/// temporary folder.
pub struct Registry {
    pub address: String,
    process: Option<KillOnDrop>,
    config: PathBuf,
    _storage: tempfile::TempDir,
}

impl Registry {
    /// A registry, or `None` (said loudly) where `docker-registry` is not
    /// installed — a failure when `VERDICT_REQUIRE_REAL_CLUSTER` is set, as
    /// in CI (`cargo xtask test` installs it).
    pub fn start(test: &str) -> Option<Self> {
        if Command::new("docker-registry")
            .arg("--version")
            .output()
            .is_err()
        {
            let message = format!(
                "REGISTRY TEST NOT RUN: {test} needs Debian's docker-registry (`cargo xtask test` installs it)"
            );
            if std::env::var_os("VERDICT_REQUIRE_REAL_CLUSTER").is_some() {
                panic!("{message}, and VERDICT_REQUIRE_REAL_CLUSTER is set");
            }
            eprintln!("{message}");
            return None;
        }
        let storage = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        let mut registry = Self {
            address,
            process: None,
            config,
            _storage: storage,
        };
        registry.resume();
        Some(registry)
    }

    /// Start (again) serving what it holds.
    pub fn resume(&mut self) {
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.process = Some(KillOnDrop(child));
        let url = format!("http://{}/v2/", self.address);
        let up = wait_until(Duration::from_secs(30), || {
            reqwest::blocking::get(&url).is_ok_and(|r| r.status().is_success())
        });
        assert!(up.is_some(), "the registry never answered on {url}");
    }

    /// Stop it, as a registry that is down.
    pub fn stop(&mut self) {
        self.process = None;
    }

    /// A reference in this registry.
    pub fn reference(&self, repository: &str) -> String {
        format!("{}/{repository}", self.address)
    }
}

/// `verdict ARGS`; its status, standard output and standard error.
pub fn verdict(args: &[&str], data: &Path) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(args)
        .env("VERDICT_DATA_DIR", data)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn policies_are_pushed_pulled_by_digest_and_inspected() {
    let Some(registry) = Registry::start("policies_are_pushed_pulled_by_digest_and_inspected")
    else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let insecure = ["--insecure-registry", registry.address.as_str()];
    let status = default_plugin("status");
    let tagged = registry.reference("policies/status:v1");

    // Push: checked to be a policy, annotated, pinned to its digest.
    let mut args = vec!["policy", "push", status.to_str().unwrap(), tagged.as_str()];
    args.extend(insecure);
    let (ok, out, err) = verdict(&args, data.path());
    assert!(ok, "{err}");
    let pinned = out.trim().rsplit(" as ").next().unwrap().to_string();
    assert!(
        pinned.starts_with(&format!("{}/policies/status@sha256:", registry.address)),
        "{out}"
    );
    assert!(
        out.starts_with("pushed status-policy default-status@"),
        "{out}"
    );

    // Inspect: the layout and annotations.
    let mut args = vec!["policy", "inspect", tagged.as_str()];
    args.extend(insecure);
    let (ok, out, err) = verdict(&args, data.path());
    assert!(ok, "{err}");
    let inspection: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(inspection["reference"], pinned.as_str());
    assert_eq!(
        inspection["config-media-type"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(inspection["layers"][0]["media-type"], "application/wasm");
    let annotations = &inspection["annotations"];
    assert_eq!(annotations["dev.verdict.policy.world"], "status-policy");
    assert_eq!(
        annotations["dev.verdict.policy.wit"],
        "verdict:policy@0.2.0"
    );
    assert_eq!(
        annotations["org.opencontainers.image.title"],
        "default-status"
    );

    // Pull by digest: the same bytes.
    let output = data.path().join("pulled.wasm");
    let mut args = vec![
        "policy",
        "pull",
        pinned.as_str(),
        "--output",
        output.to_str().unwrap(),
    ];
    args.extend(insecure);
    let (ok, out, err) = verdict(&args, data.path());
    assert!(ok, "{err}");
    assert!(out.contains(&pinned), "{out}");
    assert_eq!(
        std::fs::read(&output).unwrap(),
        std::fs::read(&status).unwrap()
    );

    // A digest that is not the artifact's is refused, and nothing is
    // written.
    let wrong = format!(
        "{}@sha256:{}",
        registry.reference("policies/status"),
        "0".repeat(64)
    );
    let refused_output = data.path().join("refused.wasm");
    let mut args = vec![
        "policy",
        "pull",
        wrong.as_str(),
        "--output",
        refused_output.to_str().unwrap(),
    ];
    args.extend(insecure);
    let (ok, _, err) = verdict(&args, data.path());
    assert!(!ok);
    assert!(err.contains("verdict: "), "{err}");
    assert!(!refused_output.exists());

    // What is not a policy is not pushed.
    let garbage = data.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not a component").unwrap();
    let mut args = vec!["policy", "push", garbage.to_str().unwrap(), tagged.as_str()];
    args.extend(insecure);
    let (ok, _, err) = verdict(&args, data.path());
    assert!(!ok);
    assert!(err.contains("is not a policy"), "{err}");
}
