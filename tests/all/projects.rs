//! `verdict new` and `verdict build` over the real binary: a project of
//! every world in every language builds, and its cases pass straight away;
//! a Rust project's unit tests pass natively; a broken project says why.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn verdict(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_verdict"))
        .args(args)
        .current_dir(dir)
        // The tools and the code cache where `cargo xtask` and `verdict
        // build` keep them (the user's cache folder, or $VERDICT_TOOLS):
        // nothing is written into the project.
        // The Rust projects build where `cargo xtask plugins` builds the
        // plugins (its `wasm_target_dir`): the crates they have in common,
        // the SDK's macros among them, are built once.
        .env(
            "CARGO_TARGET_DIR",
            crate::support::target_dir().join("wasm32"),
        )
        .output()
        .unwrap()
}

fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Make, build and test one project; the project's folder.
fn made_built_tested(root: &Path, world: &str, lang: &str) -> PathBuf {
    let name = format!("{world}-{lang}");
    let output = verdict(root, &["new", world, &name, "--lang", lang]);
    assert!(output.status.success(), "new {name}: {}", said(&output));
    let dir = root.join(&name);
    for file in ["policy.toml", "README.md", "tests/cases.yaml"] {
        assert!(dir.join(file).is_file(), "{name} has no {file}");
    }
    let output = verdict(&dir, &["build"]);
    assert!(output.status.success(), "build {name}: {}", said(&output));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let imports = stdout
        .lines()
        .find_map(|l| l.strip_prefix("imports: "))
        .unwrap_or_else(|| panic!("build {name} does not say what it imports: {stdout}"));
    // JavaScript and Rust policies import nothing of WASI; Python's
    // interpreter does (the host grants it nothing).
    assert_eq!(
        imports.contains("wasi:"),
        lang == "python",
        "{name}: {imports}"
    );
    let component = dir.join("dist").join(format!("{name}.wasm"));
    assert!(component.is_file(), "{name}: no {}", component.display());
    if lang != "rust" && world == "status" {
        built_again(&dir, &name, lang);
    }
    let output = verdict(
        &dir,
        &["test", "--plugins", "dist", "--policy", &name, "tests"],
    );
    let text = said(&output);
    assert!(output.status.success(), "test {name}: {text}");
    let last = text
        .lines()
        .rev()
        .find(|l| l.contains("passed"))
        .unwrap_or_default();
    assert!(
        last.ends_with(" 0 failed") && !last.starts_with("0 passed"),
        "{name}: {last}"
    );
    println!("{name}: {last}");
    // A status project carries a sample cluster to try its rule on.
    if world == "status" {
        let output = verdict(
            &dir,
            &[
                "eval",
                "--plugins",
                "dist",
                "--policy",
                &name,
                "--objects",
                "objects.yaml",
            ],
        );
        let text = said(&output);
        assert!(output.status.success(), "eval {name}: {text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("payments/api") && l.contains("degraded")),
            "eval {name}: {text}"
        );
    }
    // Building and testing wrote nothing into the project but `dist/` (and
    // a Rust crate's own `Cargo.lock`): no cache, no data folder.
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !["dist", "Cargo.lock", "target"].contains(&n.as_str()))
        .collect();
    written.sort();
    let made = verdict(
        root,
        &["new", world, &format!("{name}-fresh"), "--lang", lang],
    );
    assert!(made.status.success());
    let mut fresh: Vec<String> = std::fs::read_dir(root.join(format!("{name}-fresh")))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    fresh.sort();
    assert_eq!(
        written, fresh,
        "{name}: building and testing wrote into the project"
    );
    dir
}

/// Built again unchanged, a JavaScript or Python project is the build
/// cache's component, byte for byte (its tool's output differs on every
/// run); an edit is built anew.
fn built_again(dir: &Path, name: &str, lang: &str) {
    let component = dir.join("dist").join(format!("{name}.wasm"));
    let first = std::fs::read(&component).unwrap();
    let output = verdict(dir, &["build"]);
    let text = said(&output);
    assert!(output.status.success(), "build {name} again: {text}");
    assert!(
        text.contains("the build cache's"),
        "build {name} again: {text}"
    );
    assert_eq!(
        std::fs::read(&component).unwrap(),
        first,
        "{name}: built again, not the same bytes"
    );
    // An edit no run made before (the cache outlives the test).
    let (source, comment) = match lang {
        "js" => ("policy.js", "//"),
        _ => ("policy.py", "#"),
    };
    let path = dir.join(source);
    let original = std::fs::read_to_string(&path).unwrap();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::fs::write(&path, format!("{original}\n{comment} edited {stamp}\n")).unwrap();
    let output = verdict(dir, &["build"]);
    let text = said(&output);
    assert!(output.status.success(), "build {name} edited: {text}");
    assert!(
        !text.contains("the build cache's"),
        "build {name} edited: {text}"
    );
    std::fs::write(&path, original).unwrap();
    let output = verdict(dir, &["build"]);
    assert!(
        said(&output).contains("the build cache's"),
        "{}",
        said(&output)
    );
    assert_eq!(std::fs::read(&component).unwrap(), first);
}

fn every_world(lang: &str) {
    let root = tempfile::tempdir().unwrap();
    for world in ["status", "failover", "admission", "lifecycle"] {
        made_built_tested(root.path(), world, lang);
    }
}

#[test]
fn javascript_projects_build_and_pass_their_cases() {
    every_world("js");
}

#[test]
fn python_projects_build_and_pass_their_cases() {
    every_world("python");
}

#[test]
fn rust_projects_build_pass_their_cases_and_their_unit_tests() {
    every_world("rust");
    // The status project's unit tests, natively, with the SDK's builders.
    let root = tempfile::tempdir().unwrap();
    let output = verdict(root.path(), &["new", "status", "native", "--lang", "rust"]);
    assert!(output.status.success(), "{}", said(&output));
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["test", "--quiet"])
        .current_dir(root.path().join("native"))
        .env(
            "CARGO_TARGET_DIR",
            crate::support::target_dir().join("projects-native"),
        )
        .env_remove("RUSTC_WRAPPER")
        .output()
        .unwrap();
    let text = said(&output);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

#[test]
fn what_cannot_be_made_or_built_says_why() {
    let root = tempfile::tempdir().unwrap();
    let output = verdict(root.path(), &["new", "status", "Bad_Name", "--lang", "js"]);
    assert_eq!(output.status.code(), Some(2), "{}", said(&output));
    assert!(said(&output).contains("lower-case"), "{}", said(&output));

    let output = verdict(root.path(), &["new", "status", "twice", "--lang", "js"]);
    assert!(output.status.success(), "{}", said(&output));
    let output = verdict(root.path(), &["new", "status", "twice", "--lang", "js"]);
    assert!(said(&output).contains("not empty"), "{}", said(&output));

    // A syntax error in the rule fails the build, said as
    // file:line:column: message, not as the tool's stack trace.
    let dir = root.path().join("twice");
    std::fs::write(
        dir.join("policy.js"),
        "export const status = {\n  evaluate(ctx, input) { return ; ]\n};\n",
    )
    .unwrap();
    let output = verdict(&dir, &["build"]);
    assert!(!output.status.success());
    let text = said(&output);
    assert!(text.contains("policy.js:2:"), "{text}");
    assert!(text.contains("SyntaxError"), "{text}");
    assert!(!text.contains("    at "), "a stack trace: {text}");
    assert!(
        !dir.join("dist/twice.wasm").exists(),
        "nothing half-built is left"
    );

    let output = verdict(root.path(), &["build"]);
    assert!(
        said(&output).contains("no policy.toml"),
        "{}",
        said(&output)
    );
}
