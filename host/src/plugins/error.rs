//! What can go wrong with a plugin: loading a file ([`LoadError`]), one call
//! ([`CallError`]), and what a caller of a policy sees ([`PolicyError`]).
//! All are values: a plugin never takes the host down.

use serde::Serialize;

use super::World;

/// Why a plugin file was not swapped in. The old version keeps serving.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    #[error("setting up the engine: {0}")]
    Engine(String),

    #[error("reading the file: {0}")]
    Read(String),

    #[error(
        "a core WebAssembly module, not a component: encode it with `wasm-tools component new` or `cargo xtask plugins`"
    )]
    NotAComponent,

    #[error("does not compile: {0}")]
    Compile(String),

    #[error(
        "implements no world of verdict:policy@0.1.0 (it exports {exports}); a plugin must export \
         verdict:policy/status, verdict:policy/failover or verdict:policy/admission"
    )]
    NoWorld { exports: String },

    #[error(
        "is named for the {expected} world but implements {found}: a file named after a world must \
         implement it (name it otherwise to load it as a plugin of its own world)"
    )]
    WrongWorld { expected: World, found: World },

    #[error("cannot be instantiated: {0}")]
    Link(String),

    #[error("validation failed: {0}")]
    Validation(#[source] CallError),
}

impl LoadError {
    /// A short machine-readable kind, for the registry and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Engine(_) => "engine",
            Self::Read(_) => "read",
            Self::NotAComponent => "not-a-component",
            Self::Compile(_) => "compile",
            Self::NoWorld { .. } => "no-world",
            Self::WrongWorld { .. } => "wrong-world",
            Self::Link(_) => "link",
            Self::Validation(e) => e.kind(),
        }
    }
}

/// Why one call of a plugin failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("trapped: {0}")]
    Trap(String),

    #[error("timed out after {0} ms")]
    Timeout(u128),

    #[error("exceeded its memory limit of {0} bytes")]
    Memory(usize),

    #[error("returned {size} bytes, over the output limit of {limit} bytes")]
    OutputTooLarge { size: usize, limit: usize },

    #[error("returned a malformed answer: {0}")]
    Malformed(String),

    #[error("answered with an error: {0}")]
    Refused(String),

    #[error("could not be instantiated: {0}")]
    Instantiate(String),
}

impl CallError {
    /// A short machine-readable kind, for the registry and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Trap(_) => "trap",
            Self::Timeout(_) => "timeout",
            Self::Memory(_) => "memory",
            Self::OutputTooLarge { .. } => "output-too-large",
            Self::Malformed(_) => "malformed",
            Self::Refused(_) => "refused",
            Self::Instantiate(_) => "instantiate",
        }
    }
}

/// What a caller of a policy gets when no version could answer.
#[derive(Debug, Clone, thiserror::Error, Serialize)]
pub enum PolicyError {
    #[error("no {world} plugin is loaded")]
    NotLoaded { world: World },

    #[error("plugin {plugin} failed: {message}")]
    Failed {
        plugin: String,
        kind: &'static str,
        message: String,
    },
}
