//! `verdict new`: a policy project that builds and passes its cases at
//! once — the WIT (JavaScript and Python read it to build), a starting rule
//! of the world, a case file, `policy.toml` and a README of five steps.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::Language;

/// The WIT package, as the projects get it.
pub const WIT: [(&str, &str); 8] = [
    ("types.wit", include_str!("../../wit/types.wit")),
    ("worlds.wit", include_str!("../../wit/worlds.wit")),
    ("status.wit", include_str!("../../wit/status.wit")),
    ("failover.wit", include_str!("../../wit/failover.wit")),
    ("admission.wit", include_str!("../../wit/admission.wit")),
    ("lifecycle.wit", include_str!("../../wit/lifecycle.wit")),
    ("defaults.wit", include_str!("../../wit/defaults.wit")),
    ("settings.wit", include_str!("../../wit/settings.wit")),
];

/// The four worlds a policy implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Status,
    Failover,
    Admission,
    Lifecycle,
}

impl Kind {
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "status" => Ok(Kind::Status),
            "failover" => Ok(Kind::Failover),
            "admission" => Ok(Kind::Admission),
            "lifecycle" => Ok(Kind::Lifecycle),
            other => bail!("`{other}` is none of status, failover, admission, lifecycle"),
        }
    }

    fn word(self) -> &'static str {
        match self {
            Kind::Status => "status",
            Kind::Failover => "failover",
            Kind::Admission => "admission",
            Kind::Lifecycle => "lifecycle",
        }
    }

    fn rule(self) -> &'static str {
        match self {
            Kind::Status => {
                "the default status rules, with the team of the label `team` after the status"
            }
            Kind::Failover => {
                "a node not ready is suspect for a minute, then unknown and a person is told"
            }
            Kind::Admission => {
                "no deletes in a production namespace; scaling above 10 replicas needs approval"
            }
            Kind::Lifecycle => {
                "environment, then code, then serving after a health check; a failed task waits for a person"
            }
        }
    }
}

/// The source of a world's starting rule in a language: in JavaScript and
/// Python, followed by the settings check every world exports, which reads
/// the rule's `SETTINGS` (one file a project, as the tools build it).
fn source(kind: Kind, language: Language) -> String {
    let rule = rule_source(kind, language);
    match language {
        Language::Rust => rule.to_string(),
        Language::Javascript => {
            format!(
                "{rule}\n{}",
                include_str!("../templates/javascript/settings.js")
            )
        }
        Language::Python => format!(
            "{rule}\n\n{}",
            include_str!("../templates/python/settings.py")
        ),
    }
}

fn rule_source(kind: Kind, language: Language) -> &'static str {
    match (language, kind) {
        (Language::Rust, Kind::Status) => include_str!("../templates/rust/status.rs"),
        (Language::Rust, Kind::Failover) => include_str!("../templates/rust/failover.rs"),
        (Language::Rust, Kind::Admission) => include_str!("../templates/rust/admission.rs"),
        (Language::Rust, Kind::Lifecycle) => include_str!("../templates/rust/lifecycle.rs"),
        (Language::Javascript, Kind::Status) => include_str!("../templates/javascript/status.js"),
        (Language::Javascript, Kind::Failover) => {
            include_str!("../templates/javascript/failover.js")
        }
        (Language::Javascript, Kind::Admission) => {
            include_str!("../templates/javascript/admission.js")
        }
        (Language::Javascript, Kind::Lifecycle) => {
            include_str!("../templates/javascript/lifecycle.js")
        }
        (Language::Python, Kind::Status) => include_str!("../templates/python/status.py"),
        (Language::Python, Kind::Failover) => include_str!("../templates/python/failover.py"),
        (Language::Python, Kind::Admission) => include_str!("../templates/python/admission.py"),
        (Language::Python, Kind::Lifecycle) => include_str!("../templates/python/lifecycle.py"),
    }
}

fn cases(kind: Kind) -> &'static str {
    match kind {
        Kind::Status => include_str!("../templates/cases/status.yaml"),
        Kind::Failover => include_str!("../templates/cases/failover.yaml"),
        Kind::Admission => include_str!("../templates/cases/admission.yaml"),
        Kind::Lifecycle => include_str!("../templates/cases/lifecycle.yaml"),
    }
}

/// What `verdict new` is asked for.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub kind: Kind,
    pub name: &'a str,
    pub language: Language,
    /// The project's folder (made; must not exist or be empty).
    pub dir: &'a Path,
    /// The `verdict-policy` crate a Rust project depends on.
    pub sdk: &'a Path,
}

/// Write the project; the files written.
pub fn create(request: &Request) -> Result<Vec<PathBuf>> {
    let Request {
        kind,
        name,
        language,
        dir,
        sdk,
    } = *request;
    let valid = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        bail!(
            "`{name}`: a policy's name is lower-case letters, digits and -, starting with a letter"
        );
    }
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!("{} exists and is not empty", dir.display());
    }
    let world = format!("{}-policy", kind.word());
    let (language_name, lang, key, file) = match language {
        Language::Rust => ("Rust", "rust", "rust", "src/lib.rs"),
        Language::Javascript => ("JavaScript", "js", "javascript", "policy.js"),
        Language::Python => ("Python", "python", "python", "policy.py"),
    };
    let sdk = match language {
        Language::Rust => std::fs::canonicalize(sdk)
            .with_context(|| {
                format!(
                    "the verdict-policy crate is not at {} (say where with --sdk)",
                    sdk.display()
                )
            })?
            .display()
            .to_string(),
        _ => String::new(),
    };
    let (build_note, test_note, limits_note) = match language {
        Language::Rust => (
            " (a wasm32 build of the crate; `cargo test` runs its unit tests natively)",
            "",
            "",
        ),
        Language::Javascript => (
            " with componentize-js (installed, pinned, on the first build)",
            "",
            "\n   A JavaScript policy carries its engine: give it room with\n   `[limits.NAME] memory-limit-mib = 128` in the host's configuration\n   (or `spec.limits` of its `Policy`).",
        ),
        Language::Python => (
            " with componentize-py (installed, pinned, on the first build)",
            "",
            "\n   A Python policy carries its interpreter: give it room with\n   `[limits.NAME] memory-limit-mib = 128` and `call-timeout-ms` in the\n   host's configuration (or `spec.limits` of its `Policy`).",
        ),
    };
    let measure = match kind {
        Kind::Status => {
            "`verdict eval --plugins dist --policy {{name}} --objects objects.yaml`\n   shows its verdicts on the sample cluster of `objects.yaml` (or on yours:\n   `kubectl get namespaces,deployments,statefulsets,pods,nodes -A -o yaml`);\n   `verdict bench --plugins dist --policy {{name}} --objects objects.yaml`\n   prints its latency, throughput, memory and load times."
        }
        Kind::Failover | Kind::Admission | Kind::Lifecycle => {
            "the cases of `verdict test` are its measure: `verdict bench` times\n   status policies."
        }
    };
    let source_line = match language {
        Language::Rust => String::new(),
        _ => format!("source = \"{file}\"\n"),
    };
    let fill = |text: &str| {
        text.replace("{{measure}}", measure)
            .replace("{{name}}", name)
            .replace("{{world}}", &world)
            .replace("{{world_word}}", kind.word())
            .replace("{{language}}", language_name)
            .replace("{{language_key}}", key)
            .replace("{{lang}}", lang)
            .replace("{{source}}", file)
            .replace("{{rule}}", kind.rule())
            .replace("{{build_note}}", build_note)
            .replace("{{test_note}}", test_note)
            .replace("{{limits_note}}", limits_note)
            .replace("{{sdk}}", &sdk)
            .replace("{{source_line}}\n", &source_line)
    };
    let mut files: Vec<(PathBuf, String)> = vec![
        (
            "policy.toml".into(),
            fill(include_str!("../templates/policy.toml")),
        ),
        (
            "README.md".into(),
            fill(include_str!("../templates/README.md")),
        ),
        (
            ".gitignore".into(),
            include_str!("../templates/gitignore").into(),
        ),
        ("tests/cases.yaml".into(), fill(cases(kind))),
        (file.into(), fill(&source(kind, language))),
    ];
    if kind == Kind::Status {
        // A sample cluster to evaluate and measure the rule on.
        files.push((
            "objects.yaml".into(),
            include_str!("../../examples/objects/cluster.yaml").into(),
        ));
    }
    match language {
        Language::Rust => files.push((
            "Cargo.toml".into(),
            fill(include_str!("../templates/rust/Cargo.toml")),
        )),
        _ => {
            for (wit, text) in WIT {
                files.push((Path::new("wit").join(wit), text.to_string()));
            }
        }
    }
    let mut written = Vec::new();
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
