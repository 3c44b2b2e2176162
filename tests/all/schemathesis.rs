//! schemathesis, a fuzzer driven by the OpenAPI document, against a host
//! serving the demo cluster with tokens: every operation of its own
//! `/openapi.json`, valid and invalid requests, and sequences of them (a task
//! created, then patched, approved, cancelled). Any server error, request
//! that hangs, answer that breaks the document, valid request refused or
//! invalid one accepted fails the test, with schemathesis' report of it.
//!
//! `cargo xtask test` installs the pinned schemathesis
//! (`tests/schemathesis/requirements.txt`) and names it in
//! `VERDICT_SCHEMATHESIS`; the run is bounded by
//! `VERDICT_SCHEMATHESIS_EXAMPLES` cases per operation (100 by default) and
//! is reproducible by its seed (`VERDICT_SCHEMATHESIS_SEED`, 1 by default;
//! `random` for a new one each run, as `cargo xtask fuzz` does).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::serve::Server;
use crate::support::{KillOnDrop, wait_until};

/// The longest a whole run may take.
const RUN_LIMIT: Duration = Duration::from_secs(20 * 60);

#[test]
fn schemathesis_finds_nothing_wrong_with_the_http_api() {
    let Some(st) = std::env::var_os("VERDICT_SCHEMATHESIS") else {
        crate::support::skipped(
            "SCHEMATHESIS IS NOT INSTALLED (VERDICT_SCHEMATHESIS is unset): the OpenAPI fuzzing \
             test is skipped; `cargo xtask test` installs it and runs it",
            None,
        );
        return;
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let plugins = workspace.join("target/plugins");
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let (read, write) = ("schemathesis-read-token", "schemathesis-write-token");
    let tokens = |name: &str, token: &str| {
        let path = work.path().join(name);
        std::fs::write(&path, format!("{token}\n")).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (reads, writes) = (tokens("read", read), tokens("write", write));
    let server = Server::start_with(
        &plugins,
        data.path(),
        &[
            "--demo",
            "--read-tokens-file",
            &reads,
            "--write-tokens-file",
            &writes,
            "--heartbeat-ms",
            "200",
        ],
    );
    let examples =
        std::env::var("VERDICT_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "100".to_string());
    let seed = std::env::var("VERDICT_SCHEMATHESIS_SEED").unwrap_or_else(|_| "1".to_string());
    let mut command = Command::new(&st);
    command
        .arg("--config-file")
        .arg(workspace.join("tests/schemathesis/schemathesis.toml"))
        .arg("run")
        .arg(format!("{}/openapi.json", server.base))
        .args(["--header", &format!("Authorization: Bearer {write}")])
        .args(["--max-examples", &examples])
        .args(["--request-timeout", "10", "--workers", "2"])
        .args(["--report", "junit", "--report-dir"])
        .arg(work.path().join("report"))
        // Hypothesis keeps its example database in the working folder.
        .current_dir(work.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if seed != "random" {
        command.args(["--seed", &seed]);
    }
    let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut child = command.spawn().unwrap_or_else(|e| {
        panic!(
            "schemathesis ({}) does not start: {e}",
            st.to_string_lossy()
        )
    });
    let readers: Vec<_> = [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ]
    .into_iter()
    .map(|mut pipe| {
        let output = std::sync::Arc::clone(&output);
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            output.lock().unwrap().extend(text);
        })
    })
    .collect();
    let mut child = KillOnDrop(child);
    let mut status = None;
    let finished = wait_until(RUN_LIMIT, || {
        status = child.0.try_wait().unwrap();
        status.is_some()
    });
    for reader in readers {
        if finished.is_some() {
            reader.join().unwrap();
        }
    }
    let report = String::from_utf8_lossy(&output.lock().unwrap()).into_owned();
    assert!(
        finished.is_some(),
        "schemathesis did not finish in {RUN_LIMIT:?}:\n{report}"
    );
    assert!(
        status.unwrap().success(),
        "schemathesis found something:\n{report}"
    );
    // It ran for real: thousands of cases over every operation.
    let generated = report
        .lines()
        .find_map(|line| {
            line.trim()
                .split_once(" generated, ")?
                .0
                .parse::<u64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no count of cases in the report:\n{report}"));
    assert!(generated >= 500, "only {generated} cases:\n{report}");
    eprintln!("schemathesis: {generated} cases, nothing found");
    // The host is still up and well after all of it.
    assert_eq!(server.get("/healthz").0, 200);
}
