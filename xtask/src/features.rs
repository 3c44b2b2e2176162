//! The check that the demo's build is the test build: `cargo test
//! --workspace` resolves features over every member and its
//! dev-dependencies, `cargo run -p verdict` over the host alone, and any
//! crate built with other features there is compiled again (with all that
//! depends on it). The host's manifest turns on what the test build adds;
//! this check says when that list falls behind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Each crate of a `cargo tree` (name and version) with its features.
type Features = BTreeMap<String, BTreeSet<String>>;

fn tree(root: &Path, args: &[&str]) -> Result<Features> {
    let output = crate::cargo()
        .arg("tree")
        .args(args)
        .args(["--format", "{p}|{f}", "--prefix", "none"])
        .current_dir(root)
        .output()
        .context("could not run cargo tree")?;
    if !output.status.success() {
        bail!(
            "cargo tree {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(parse(&String::from_utf8_lossy(&output.stdout)))
}

/// `cargo tree --format '{p}|{f}' --prefix none`: `name vX.Y.Z (path)|a,b`,
/// lines repeated with ` (*)` where a crate was shown before.
fn parse(text: &str) -> Features {
    let mut crates = Features::new();
    for line in text.lines() {
        let Some((package, features)) = line.split_once('|') else {
            continue;
        };
        let mut words = package.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        let features = features.trim_end_matches(" (*)").trim();
        crates
            .entry(format!("{name} {version}"))
            .or_default()
            .extend(
                features
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(str::to_owned),
            );
    }
    crates
}

/// The crates the two builds share, built with other features by the
/// test build: `(crate, features only the test build turns on)`.
fn differences(run: &Features, test: &Features) -> Vec<(String, Vec<String>)> {
    run.iter()
        .filter_map(|(name, features)| {
            let extra: Vec<String> = test.get(name)?.difference(features).cloned().collect();
            (!extra.is_empty()).then(|| (name.clone(), extra))
        })
        .collect()
}

pub fn check(root: &Path) -> Result<()> {
    // Proc macros and build scripts are built apart from the crates that
    // use them, with features of their own: the target's crates are compared.
    let run = tree(root, &["-p", "verdict", "-e", "normal,no-proc-macro"])?;
    let test = tree(root, &["--workspace", "-e", "normal,dev,no-proc-macro"])?;
    let differ = differences(&run, &test);
    if differ.is_empty() {
        return Ok(());
    }
    for (name, extra) in &differ {
        eprintln!("{name}: the test build adds features {}", extra.join(", "));
    }
    bail!(
        "`cargo run -p verdict` would not reuse the test build: turn these features on in host/Cargo.toml's dependencies"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_only_the_test_build_has_is_named() {
        let run = parse(
            "verdict v0.1.0 (/x/host)|default,demo\nparking_lot v0.12.5|default\nlock_api v0.4.14|default (*)\n",
        );
        let test = parse(
            "verdict v0.1.0 (/x/host)|default,demo\nparking_lot v0.12.5|arc_lock,default\nmlua v0.11.6|lua54\nlock_api v0.4.14|default\n",
        );
        assert_eq!(
            differences(&run, &test),
            vec![(
                "parking_lot v0.12.5".to_string(),
                vec!["arc_lock".to_string()]
            )]
        );
        assert!(differences(&test, &test).is_empty());
    }
}
