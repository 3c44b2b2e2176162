//! The workspace's own crates compiled through clippy's driver, so that one
//! build both compiles and lints them.
//!
//! `cargo clippy` is `cargo check` with clippy's driver as the workspace's
//! rustc: it checks every dependency again in check mode (metadata only),
//! which the test build then compiles in full. On a cold machine that check
//! is four to five minutes of CPU spent twice. clippy's driver, given as the
//! workspace wrapper of an ordinary build, compiles each crate as rustc does
//! and runs its lints beside; the dependencies are compiled by rustc alone,
//! once, for the tests, the demo and the benchmarks alike.
//!
//! Cargo keeps the wrapper in the workspace crates' hashes: a build with it
//! and one without keep two copies of those crates (and only those). So
//! every build of the workspace that shares the test build's tree — the
//! tests, the demo, `cargo xtask run`, the dev-profile benchmarks — goes
//! through [`cargo`] here. The lints run at clippy's default levels and
//! the test command fails on any warning they or rustc give (cargo replays
//! a fresh crate's warnings, so a second run still sees them): a newer
//! toolchain's new lint shows as a warning in the demo, not as a build
//! that stops.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// clippy's driver: beside the cargo running this (where `cargo clippy`
/// finds it), else on the `PATH`; `None` where clippy is not installed.
pub fn clippy_driver() -> Option<PathBuf> {
    let beside = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .map(|cargo| cargo.with_file_name("clippy-driver"))
        .filter(|driver| driver.is_file());
    beside.or_else(|| {
        verdict_policy_build::process::probe("clippy-driver", &["--version"])
            .map(|_| PathBuf::from("clippy-driver"))
    })
}

/// `cargo --config build.rustc-workspace-wrapper=<clippy's driver>`, for a
/// command on the workspace; plain cargo where clippy is missing (the test
/// command adds clippy first, or fails). The wrapper is given as cargo
/// configuration, not as `RUSTC_WORKSPACE_WRAPPER`, so that the programs
/// cargo runs (the tests, the host) and the builds they start (policies
/// for wasm32, by another compiler) do not inherit it.
pub fn cargo() -> Command {
    let mut command = crate::cargo();
    if let Some(driver) = clippy_driver() {
        command.arg("--config").arg(format!(
            "build.rustc-workspace-wrapper={}",
            toml_string(&driver)
        ));
    }
    command
}

/// A TOML basic string of `path`.
fn toml_string(path: &std::path::Path) -> String {
    serde_json::to_string(&path.to_string_lossy()).expect("a string serialises")
}

/// The targets a build made that are programs: each target's name and its
/// program.
pub type Programs = Vec<(String, PathBuf)>;

/// Run the cargo build `command` with its messages as JSON (kept in
/// `messages`): every diagnostic is printed as the compiler rendered it,
/// and the build fails when there was any warning. The programs it made.
pub fn build(
    command: &mut Command,
    messages: &std::path::Path,
    limit: Duration,
) -> Result<Programs> {
    command
        .arg("--message-format=json")
        .stdout(std::fs::File::create(messages)?);
    let outcome = verdict_policy_build::process::run(command, limit);
    let text = std::fs::read_to_string(messages)
        .with_context(|| format!("reading cargo's messages in {}", messages.display()))?;
    let said = read_messages(&text);
    for rendered in &said.rendered {
        eprint!("{rendered}");
    }
    outcome?;
    if said.warnings > 0 {
        bail!(
            "the build gave {} warning{} (rustc's and clippy's lints; the test command denies them): see above",
            said.warnings,
            if said.warnings == 1 { "" } else { "s" }
        );
    }
    Ok(said.programs)
}

/// What a build's JSON messages say.
#[derive(Debug, Default, PartialEq)]
struct Said {
    /// Each diagnostic as the compiler rendered it.
    rendered: Vec<String>,
    /// The warnings among them, but rustc's count of them ("2 warnings
    /// emitted").
    warnings: usize,
    programs: Programs,
}

fn read_messages(text: &str) -> Said {
    let mut said = Said::default();
    for line in text.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        match message["reason"].as_str() {
            Some("compiler-message") => {
                let diagnostic = &message["message"];
                if let Some(rendered) = diagnostic["rendered"].as_str() {
                    said.rendered.push(rendered.to_string());
                }
                let summary = diagnostic["spans"].as_array().is_none_or(Vec::is_empty)
                    && diagnostic["code"].is_null()
                    && diagnostic["message"]
                        .as_str()
                        .is_some_and(|m| m.ends_with(" emitted"));
                if diagnostic["level"] == "warning" && !summary {
                    said.warnings += 1;
                }
            }
            Some("compiler-artifact") => {
                if let (Some(name), Some(program)) = (
                    message["target"]["name"].as_str(),
                    message["executable"].as_str(),
                ) {
                    said.programs
                        .push((name.to_string(), PathBuf::from(program)));
                }
            }
            _ => {}
        }
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_counted_without_the_compilers_summary_and_programs_are_named() {
        let text = [
            r#"{"reason":"compiler-message","message":{"level":"warning","code":{"code":"clippy::needless_return"},"message":"unneeded `return` statement","spans":[{"file_name":"src/lib.rs"}],"rendered":"warning: unneeded `return` statement\n"}}"#,
            r#"{"reason":"compiler-message","message":{"level":"warning","code":null,"message":"1 warning emitted","spans":[],"rendered":"warning: 1 warning emitted\n\n"}}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"fuzz-objects"},"executable":"/t/debug/fuzz-objects"}"#,
            r#"{"reason":"compiler-artifact","target":{"name":"verdict"},"executable":null}"#,
            r#"{"reason":"build-finished","success":true}"#,
            "not json",
        ]
        .join("\n");
        let said = read_messages(&text);
        assert_eq!(said.warnings, 1);
        assert_eq!(said.rendered.len(), 2);
        assert_eq!(
            said.programs,
            vec![(
                "fuzz-objects".to_string(),
                PathBuf::from("/t/debug/fuzz-objects")
            )]
        );
    }

    #[test]
    fn an_error_is_no_warning() {
        let said = read_messages(
            r#"{"reason":"compiler-message","message":{"level":"error","code":null,"message":"cannot find value `x`","spans":[{"file_name":"src/lib.rs"}],"rendered":"error: cannot find value `x`\n"}}"#,
        );
        assert_eq!(said.warnings, 0);
        assert_eq!(
            said.rendered,
            vec!["error: cannot find value `x`\n".to_string()]
        );
    }

    #[test]
    fn a_path_becomes_a_toml_string() {
        assert_eq!(
            toml_string(std::path::Path::new("/a \"b\"/clippy-driver")),
            r#""/a \"b\"/clippy-driver""#
        );
    }
}
