//! Builds verdict policies into components a host can load, in the three
//! languages verdict supports: a Rust crate (built for wasm32, encoded with
//! `wit-component`), a JavaScript module (`componentize-js`, npm) or a
//! Python module (`componentize-py`, PyPI). The JavaScript and Python tools
//! are installed at pinned versions into a tools folder the first time they
//! are needed, as on a fresh machine.
//!
//! A policy project says what it is in `policy.toml`:
//!
//! ```toml
//! name = "restart-budget"   # the component's file name: <name>.wasm
//! world = "status-policy"   # status-policy | failover-policy | admission-policy | lifecycle-policy
//! language = "python"       # rust | javascript | python
//! source = "policy.py"      # the module (JavaScript, Python); not for Rust
//! wit = "wit"               # the WIT folder it is written against
//! ```

pub mod cache;
pub mod process;
pub mod rust;
pub mod scaffold;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

pub use cache::BuildCache;
use process::{BUILD, INSTALL, apt_install, probe, run};

/// componentize-js, pinned with its whole dependency tree (package-lock).
pub const COMPONENTIZE_JS: &str = "0.23.0";
/// componentize-py, pinned.
pub const COMPONENTIZE_PY: &str = "0.25.1";

const JS_PACKAGE: &str = include_str!("../tools/componentize-js/package.json");
const JS_LOCK: &str = include_str!("../tools/componentize-js/package-lock.json");
const JS_BUILD: &str = include_str!("../tools/componentize-js/build.mjs");

/// The language a policy is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Rust,
    #[serde(alias = "js")]
    Javascript,
    #[serde(alias = "py")]
    Python,
}

/// A policy project's `policy.toml`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub name: String,
    pub world: String,
    pub language: Language,
    /// The module to build (JavaScript: a file; Python: a module file).
    pub source: Option<String>,
    /// The WIT folder, relative to the project.
    #[serde(default = "default_wit")]
    pub wit: String,
}

fn default_wit() -> String {
    "wit".into()
}

impl Manifest {
    /// Read `dir/policy.toml`.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("policy.toml");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("{} is not a policy project (no policy.toml)", dir.display())
        })?;
        let manifest: Manifest =
            toml::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        let worlds = [
            "status-policy",
            "failover-policy",
            "admission-policy",
            "lifecycle-policy",
        ];
        if !worlds.contains(&manifest.world.as_str()) {
            bail!(
                "{}: world `{}` is none of {}",
                path.display(),
                manifest.world,
                worlds.join(", ")
            );
        }
        let valid_name = !manifest.name.is_empty()
            && manifest
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !valid_name {
            bail!(
                "{}: name `{}` must be lower-case letters, digits, - and _",
                path.display(),
                manifest.name
            );
        }
        if manifest.language != Language::Rust && manifest.source.is_none() {
            bail!("{}: `source` names the module to build", path.display());
        }
        Ok(manifest)
    }
}

/// The user's cache folder of verdict — the policy tools and the compiled
/// code of the offline commands, never a project's folder:
/// `$XDG_CACHE_HOME/verdict`, else `~/.cache/verdict`.
pub fn cache_home() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("verdict")
}

/// Where the pinned JavaScript and Python tools are installed.
#[derive(Debug, Clone)]
pub struct Tools {
    pub dir: PathBuf,
}

impl Tools {
    /// `$VERDICT_TOOLS`, else `tools` in [`cache_home`].
    pub fn default_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("VERDICT_TOOLS") {
            return PathBuf::from(dir);
        }
        cache_home().join("tools")
    }

    /// Tools under `dir` (made absolute: the builds run in the project's
    /// folder).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        Self {
            dir: std::path::absolute(&dir).unwrap_or(dir),
        }
    }

    /// What makes the tool of `language` what it is, for the build
    /// cache's key: its version and what installed it (JavaScript: its
    /// package lock and build script; Python: the interpreter that runs
    /// it). Installs the tool when missing.
    pub fn identity(&self, language: Language) -> Result<String> {
        let (dir, name) = match language {
            Language::Javascript => (
                self.componentize_js()?
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
                format!("componentize-js {COMPONENTIZE_JS}"),
            ),
            Language::Python => (
                self.componentize_py()?,
                format!("componentize-py {COMPONENTIZE_PY}"),
            ),
            Language::Rust => bail!("a Rust policy is built by cargo, which keeps its own"),
        };
        let stamp = std::fs::read_to_string(dir.join("installed"))
            .with_context(|| format!("reading {}", dir.join("installed").display()))?;
        Ok(format!("{name}\n{stamp}"))
    }

    /// componentize-js installed (`npm ci` from the pinned lock); its build
    /// script.
    pub fn componentize_js(&self) -> Result<PathBuf> {
        let dir = self.dir.join(format!("componentize-js-{COMPONENTIZE_JS}"));
        process::npm_install(
            &dir,
            &[
                ("package.json", JS_PACKAGE),
                ("package-lock.json", JS_LOCK),
                ("build.mjs", JS_BUILD),
            ],
            &format!("componentize-js {COMPONENTIZE_JS}"),
        )?;
        Ok(dir.join("build.mjs"))
    }

    /// componentize-py installed with pip into a folder of its own; that
    /// folder (for `PYTHONPATH`).
    pub fn componentize_py(&self) -> Result<PathBuf> {
        let dir = self.dir.join(format!("componentize-py-{COMPONENTIZE_PY}"));
        let stamp = dir.join("installed");
        let python = probe("python3", &["--version"])
            .context("building a Python policy needs python3 on the PATH")?;
        if std::fs::read_to_string(&stamp).ok().as_deref() == Some(python.as_str()) {
            return Ok(dir);
        }
        eprintln!(
            "installing componentize-py {COMPONENTIZE_PY} into {}",
            dir.display()
        );
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        let pip = |dir: &Path| {
            run(
                Command::new("python3")
                    .args([
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                    ])
                    .args(["--no-deps", "--only-binary", ":all:", "--target"])
                    .arg(dir)
                    .arg(format!("componentize-py=={COMPONENTIZE_PY}")),
                INSTALL,
            )
        };
        if pip(&dir).is_err() {
            // Debian's Python keeps pip in a package of its own.
            apt_install(&["python3-pip"])?;
            pip(&dir).context("installing componentize-py from PyPI")?;
        }
        std::fs::write(&stamp, python)?;
        Ok(dir)
    }
}

/// The interfaces a component imports, by name (`verdict:policy/host@0.4.0`,
/// `wasi:filesystem/preopens@0.2.9`, …).
pub fn imports(component: &[u8]) -> Result<Vec<String>> {
    match wit_component::decode(component).context("reading the component's world")? {
        wit_component::DecodedWasm::Component(resolve, world) => Ok(resolve.worlds[world]
            .imports
            .keys()
            .map(|key| resolve.name_world_key(key))
            .collect()),
        wit_component::DecodedWasm::WitPackage(..) => bail!("a WIT package, not a component"),
    }
}

/// A component built.
#[derive(Debug, Clone)]
pub struct Built {
    pub path: PathBuf,
    /// Given by the build cache: the same bytes as the last build of the
    /// same sources.
    pub cached: bool,
}

/// Build the policy project in `dir` into `out_dir/<name>.wasm`. A
/// JavaScript or Python policy whose sources, WIT, world and tool are
/// those of a build `cache` holds is that build again.
pub fn build(
    dir: &Path,
    out_dir: &Path,
    tools: &Tools,
    cache: Option<&BuildCache>,
) -> Result<Built> {
    let manifest = Manifest::read(dir)?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let out = std::fs::canonicalize(out_dir)?.join(format!("{}.wasm", manifest.name));
    let dir = std::fs::canonicalize(dir)?;
    let cache = match (manifest.language, cache) {
        (Language::Rust, _) | (_, None) => None,
        (language, Some(cache)) => {
            let tool = tools.identity(language)?;
            let wit = dir.join(&manifest.wit);
            match cache::key(&dir, &wit, &manifest.world, &tool) {
                Ok(key) => Some((cache, key)),
                Err(error) => {
                    eprintln!("not using the build cache: {error:#}");
                    None
                }
            }
        }
    };
    if let Some((cache, key)) = &cache {
        match cache.give(key, &out) {
            Ok(true) => {
                return Ok(Built {
                    path: out,
                    cached: true,
                });
            }
            Ok(false) => {}
            Err(error) => eprintln!("the build cache could not give its build: {error:#}"),
        }
    }
    build_anew(&manifest, &dir, &out, tools)?;
    if let Some((cache, key)) = &cache
        && let Err(error) = cache.keep(key, &out)
    {
        eprintln!("the build cache could not keep this build: {error:#}");
    }
    Ok(Built {
        path: out,
        cached: false,
    })
}

/// Build with the language's tool, whatever the cache holds.
fn build_anew(manifest: &Manifest, dir: &Path, out: &Path, tools: &Tools) -> Result<()> {
    match manifest.language {
        Language::Rust => {
            let toolchain = rust::Toolchain::choose()?;
            // `CARGO_TARGET_DIR` when set (several policies share one
            // build of the wasm32 standard library), else the project's.
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| dir.join("target"));
            let modules = toolchain.build(dir, &target)?;
            let krate = rust::cdylibs(dir)?
                .into_iter()
                .find(|c| c.dir == dir)
                .context("the project's Cargo.toml builds no cdylib")?;
            rust::encode(&modules, &krate.lib, out)?;
        }
        Language::Javascript => {
            let script = tools.componentize_js()?;
            let source = manifest.source.as_deref().unwrap_or_default();
            check_syntax(Language::Javascript, dir, source)?;
            run(
                Command::new("node")
                    .arg(&script)
                    .arg(dir.join(source))
                    .arg(dir.join(&manifest.wit))
                    .arg(&manifest.world)
                    .arg(out)
                    .current_dir(dir),
                BUILD,
            )
            .with_context(|| format!("building {source} with componentize-js"))?;
        }
        Language::Python => {
            let site = tools.componentize_py()?;
            let source = manifest.source.as_deref().unwrap_or_default();
            check_syntax(Language::Python, dir, source)?;
            let module = source.strip_suffix(".py").unwrap_or(source);
            // componentize-py writes its output in place: written beside
            // and renamed, a host watching the folder never reads half. It
            // runs in a copy of the project, since it leaves `__pycache__`
            // where the module is: nothing is written into the project.
            let partial = out.with_file_name(format!(".{}.wasm.partial", manifest.name));
            let work = tempfile::tempdir()?;
            copy_sources(dir, work.path())?;
            run(
                Command::new("python3")
                    .args(["-c", "import sys; from componentize_py import script; sys.argv[0] = 'componentize-py'; script()"])
                    .args(["-d"])
                    .arg(dir.join(&manifest.wit))
                    .args(["-w", &manifest.world, "componentize", module, "-o"])
                    .arg(&partial)
                    .env("PYTHONPATH", &site)
                    .env("PYTHONDONTWRITEBYTECODE", "1")
                    .current_dir(work.path()),
                BUILD,
            )
            .with_context(|| format!("building {source} with componentize-py"))?;
            std::fs::rename(&partial, out)?;
        }
    }
    Ok(())
}

/// What a build does not read: hidden files, what builds write (`dist/`,
/// `target/`) and Python's `__pycache__`.
fn skipped(name: &str) -> bool {
    name.starts_with('.') || name == "dist" || name == "target" || name == "__pycache__"
}

/// A project's sources copied into `to` (not its `dist/`, `target/`, or
/// hidden folders): where a tool that writes beside its inputs runs.
fn copy_sources(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if skipped(&name.to_string_lossy()) {
            continue;
        }
        let (source, target) = (entry.path(), to.join(&name));
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_sources(&source, &target)?;
        } else {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

/// A JavaScript or Python source's syntax checked before its tool sees it,
/// so that a mistake is told as `file:line:column: message` rather than
/// buried in the tool's stack trace.
fn check_syntax(language: Language, dir: &Path, source: &str) -> Result<()> {
    let path = dir.join(source);
    let output = match language {
        Language::Javascript => {
            // `node --check` reads a `.mjs` file as the module it is.
            let copy = tempfile::Builder::new().suffix(".mjs").tempfile()?;
            std::fs::copy(&path, copy.path())?;
            Command::new("node")
                .arg("--check")
                .arg(copy.path())
                .stdin(Stdio::null())
                .output()
        }
        Language::Python => Command::new("python3")
            .args([
                "-c",
                "import ast, sys\n\
                 try:\n    ast.parse(open(sys.argv[1]).read(), sys.argv[1])\n\
                 except SyntaxError as e:\n    print(f'{e.lineno}:{e.offset or 1}:{e.msg}', file=sys.stderr); sys.exit(1)",
            ])
            .arg(&path)
            .stdin(Stdio::null())
            .output(),
        Language::Rust => return Ok(()),
    };
    // Without the interpreter the tool's own run says what is missing.
    let Ok(output) = output else { return Ok(()) };
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    bail!("{source}:{}", syntax_error(language, &said))
}

/// `line:column: message` from what `node --check` or the Python check
/// printed.
fn syntax_error(language: Language, said: &str) -> String {
    let lines: Vec<&str> = said.lines().collect();
    match language {
        Language::Python => {
            let first = lines.first().copied().unwrap_or_default();
            let mut parts = first.splitn(3, ':');
            let line = parts.next().filter(|p| !p.is_empty()).unwrap_or("1");
            let column = parts.next().unwrap_or("1");
            let message = parts.next().unwrap_or("invalid syntax");
            format!("{line}:{column}: SyntaxError: {message}")
        }
        _ => {
            // `/tmp/x.mjs:LINE`, the line, a caret under the column, then
            // `SyntaxError: …`.
            let line = lines
                .first()
                .and_then(|l| l.rsplit(':').next())
                .and_then(|n| n.trim().parse::<u32>().ok())
                .unwrap_or(1);
            let column = lines
                .iter()
                .skip(1)
                .find_map(|l| l.find('^'))
                .map_or(1, |c| c + 1);
            let message = lines
                .iter()
                .find(|l| l.contains("Error: ") && !l.trim_start().starts_with("at "))
                .map_or_else(|| said.trim().to_string(), |l| l.trim().to_string());
            format!("{line}:{column}: {message}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_are_told_as_line_column_message() {
        let node = "/tmp/.tmpA1.mjs:3\n  let x = ;\n          ^\n\nSyntaxError: Unexpected token ';'\n    at internalCompileFunction (node:internal/vm:76:18)\n";
        assert_eq!(
            syntax_error(Language::Javascript, node),
            "3:11: SyntaxError: Unexpected token ';'"
        );
        assert_eq!(
            syntax_error(Language::Python, "4:9:invalid syntax\n"),
            "4:9: SyntaxError: invalid syntax"
        );
    }

    #[test]
    fn a_source_that_does_not_parse_is_refused_naming_its_line() {
        let dir = tempfile::tempdir().unwrap();
        for (language, tool, file, source, said) in [
            (
                Language::Python,
                "python3",
                "policy.py",
                "def status(:\n    pass\n",
                "policy.py:1:",
            ),
            (
                Language::Javascript,
                "node",
                "policy.js",
                "export const a = 1;\nconst x = ;\n",
                "policy.js:2:11: ",
            ),
        ] {
            if probe(tool, &["--version"]).is_none() {
                continue;
            }
            std::fs::write(dir.path().join(file), source).unwrap();
            let error = check_syntax(language, dir.path(), file)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(said), "{error}");
            assert!(error.contains("SyntaxError"), "{error}");
        }
    }
}
