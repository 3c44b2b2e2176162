//! `verdict new` and `verdict build`: a policy project in Rust, JavaScript
//! or Python made ready to edit, and built into a component a host loads.

use std::path::PathBuf;

use verdict_policy_build::scaffold::{self, Kind};
use verdict_policy_build::{BuildCache, Language, Tools};

use crate::error::{Error, Result};

/// The language of `verdict new --lang`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    #[value(alias = "javascript")]
    Js,
    #[value(alias = "py")]
    Python,
}

/// The world of `verdict new`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorldArg {
    Status,
    Failover,
    Admission,
    Lifecycle,
}

/// The arguments of `verdict new`.
#[derive(Debug, Clone, clap::Args)]
pub struct NewArgs {
    /// Which kind of policy.
    #[arg(value_name = "WORLD")]
    pub world: WorldArg,
    /// The policy's name (its component is `NAME.wasm`).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The language to write it in.
    #[arg(long, value_name = "LANG", default_value = "rust")]
    pub lang: Lang,
    /// The project's folder [default: ./NAME].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The `verdict-policy` crate a Rust project depends on [default: the
    /// one of the source tree verdict was built from].
    #[arg(long, value_name = "DIR", env = "VERDICT_SDK")]
    pub sdk: Option<PathBuf>,
}

/// The arguments of `verdict build`.
#[derive(Debug, Clone, clap::Args)]
pub struct BuildArgs {
    /// The policy project (the folder of its `policy.toml`).
    #[arg(value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Where the component goes [default: DIR/dist].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where the pinned JavaScript and Python tools are installed
    /// [default: ~/.cache/verdict/tools].
    #[arg(long, value_name = "DIR", env = "VERDICT_TOOLS")]
    pub tools: Option<PathBuf>,
    /// Build with the tool even when the build cache holds a build of the
    /// same sources (JavaScript and Python; the cache is `builds` in the
    /// user's cache folder).
    #[arg(long)]
    pub no_cache: bool,
}

/// The SDK beside this build of verdict.
fn sdk_of_source_tree() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("plugins")
        .join("sdk")
}

/// Make the project; what to do next.
pub fn new(args: &NewArgs) -> Result<String> {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let sdk = args.sdk.clone().unwrap_or_else(sdk_of_source_tree);
    let kind = match args.world {
        WorldArg::Status => Kind::Status,
        WorldArg::Failover => Kind::Failover,
        WorldArg::Admission => Kind::Admission,
        WorldArg::Lifecycle => Kind::Lifecycle,
    };
    let language = match args.lang {
        Lang::Rust => Language::Rust,
        Lang::Js => Language::Javascript,
        Lang::Python => Language::Python,
    };
    let written = scaffold::create(&scaffold::Request {
        kind,
        name: &args.name,
        language,
        dir: &dir,
        sdk: &sdk,
    })
    .map_err(|e| Error::Invalid(format!("{e:#}")))?;
    let shown = dir.display();
    Ok(format!(
        "created {shown} ({} files)\nnext:\n  cd {shown}\n  verdict build\n  verdict test --plugins dist --policy {} tests\n",
        written.len(),
        args.name
    ))
}

/// Build the project; what to print: the component, its size and what it
/// imports.
pub fn build(args: &BuildArgs) -> Result<String> {
    let out = args.out.clone().unwrap_or_else(|| args.dir.join("dist"));
    let tools = Tools::new(args.tools.clone().unwrap_or_else(Tools::default_dir));
    let failed = |e: anyhow::Error| Error::Invalid(format!("{e:#}"));
    let cache = (!args.no_cache).then(BuildCache::user);
    let built =
        verdict_policy_build::build(&args.dir, &out, &tools, cache.as_ref()).map_err(failed)?;
    let component = &built.path;
    let bytes = std::fs::read(component).map_err(Error::io(component))?;
    let imports = verdict_policy_build::imports(&bytes).map_err(failed)?;
    Ok(format!(
        "{} ({} KiB{})\nimports: {}\n",
        component.display(),
        bytes.len() / 1024,
        if built.cached {
            "; the build cache's, for the same sources"
        } else {
            ""
        },
        imports.join(", ")
    ))
}
