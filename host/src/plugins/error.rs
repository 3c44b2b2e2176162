//! What can go wrong with a plugin: loading a file ([`LoadError`]), one call
//! ([`CallError`]), and what a caller of a policy sees ([`PolicyError`]).
//! All are values: a plugin never takes the host down. Each keeps the error
//! it comes from as its source (the runtime's whole chain, a trap's
//! backtrace), shared, so that records and logs hold all of it while
//! callers match on the kind.

use std::sync::Arc;

use super::World;

/// An error of the WebAssembly runtime, whole: printed with its chain of
/// causes (a trap's backtrace among them).
#[derive(Debug, Clone)]
pub struct RuntimeError(Arc<wasmtime::Error>);

impl From<wasmtime::Error> for RuntimeError {
    fn from(error: wasmtime::Error) -> Self {
        Self(Arc::new(error))
    }
}

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for RuntimeError {}

/// Any other error, shared.
pub type Shared = Arc<dyn std::error::Error + Send + Sync>;

/// Why a plugin file was not swapped in. The old version keeps serving.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    #[error("setting up the engine: {0}")]
    Engine(#[source] RuntimeError),

    #[error("creating the code cache {}: {source}", path.display())]
    CacheFolder {
        path: std::path::PathBuf,
        #[source]
        source: Shared,
    },

    #[error("starting the epoch ticker: {0}")]
    Ticker(#[source] Shared),

    #[error("reading the file: {0}")]
    Read(#[source] Shared),

    #[error(
        "a core WebAssembly module, not a component: encode it with `wasm-tools component new` or `cargo xtask plugins`"
    )]
    NotAComponent,

    #[error("does not compile: not a WebAssembly file (no `\\0asm` header)")]
    NotWasm,

    #[error("does not compile: {0}")]
    Compile(#[source] RuntimeError),

    #[error(
        "implements no world of verdict:policy@{} (it exports {exports}); a plugin must export \
         verdict:policy/status, verdict:policy/failover or verdict:policy/admission",
        super::version::PACKAGE_VERSION
    )]
    NoWorld { exports: String },

    #[error(
        "is a {world} plugin built against verdict:policy@{found}; this host speaks \
         verdict:policy@{speaks}: rebuild it against the host's wit/ (`cargo xtask plugins`)"
    )]
    OtherVersion {
        world: World,
        found: String,
        speaks: &'static str,
    },

    #[error(
        "is named for the {expected} world but implements {found}: a file named after a world must \
         implement it (name it otherwise to load it as a plugin of its own world)"
    )]
    WrongWorld { expected: World, found: World },

    #[error("cannot be instantiated: {0}")]
    Link(#[source] RuntimeError),

    #[error("validation failed: {0}")]
    Validation(#[source] CallError),

    /// The policy's own check (`settings.validate`) refused the settings it
    /// was to be served with, in its words.
    #[error("its settings are refused by the policy: {0}")]
    Settings(String),
}

impl LoadError {
    /// A short machine-readable kind, for the registry and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Engine(_) | Self::CacheFolder { .. } | Self::Ticker(_) => "engine",
            Self::Read(_) => "read",
            Self::NotAComponent => "not-a-component",
            Self::NotWasm | Self::Compile(_) => "compile",
            Self::NoWorld { .. } => "no-world",
            Self::OtherVersion { .. } => "other-version",
            Self::WrongWorld { .. } => "wrong-world",
            Self::Link(_) => "link",
            Self::Validation(e) => e.kind(),
            Self::Settings(_) => "settings",
        }
    }
}

/// Why one call of a plugin failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The guest trapped: `reason` says how (the trap's code, or the
    /// runtime's message), the source has the whole chain and backtrace.
    #[error("trapped: {reason}")]
    Trap {
        reason: String,
        #[source]
        cause: RuntimeError,
    },

    #[error("timed out after {0} ms")]
    Timeout(u128),

    #[error("exceeded its memory limit of {0} bytes")]
    Memory(usize),

    #[error("returned {size} bytes, over the output limit of {limit} bytes")]
    OutputTooLarge { size: usize, limit: usize },

    /// An answer that breaks the contract, in the host's words.
    #[error("returned a malformed answer: {0}")]
    Malformed(String),

    /// Bytes that do not decode (or inputs that do not encode).
    #[error("returned a malformed answer: {what}: {source}")]
    Undecodable {
        what: &'static str,
        #[source]
        source: Shared,
    },

    /// The plugin's own error, in its words.
    #[error("answered with an error: {0}")]
    Refused(String),

    #[error("could not be instantiated: {0}")]
    Instantiate(#[source] RuntimeError),
}

impl CallError {
    /// A short machine-readable kind, for the registry and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Trap { .. } => "trap",
            Self::Timeout(_) => "timeout",
            Self::Memory(_) => "memory",
            Self::OutputTooLarge { .. } => "output-too-large",
            Self::Malformed(_) | Self::Undecodable { .. } => "malformed",
            Self::Refused(_) => "refused",
            Self::Instantiate(_) => "instantiate",
        }
    }

    /// A trap, from the runtime's error: its code when it is one, else the
    /// runtime's message (without the backtrace).
    pub(crate) fn trap(error: wasmtime::Error) -> Self {
        let reason = match error.downcast_ref::<wasmtime::Trap>() {
            // Its code's words, without the runtime's `wasm trap: `.
            Some(trap) => {
                let text = trap.to_string();
                text.strip_prefix("wasm trap: ")
                    .unwrap_or(&text)
                    .to_string()
            }
            None => error.to_string(),
        };
        Self::Trap {
            reason,
            cause: error.into(),
        }
    }

    /// Bytes or values that do not decode or encode.
    pub(crate) fn undecodable(
        what: &'static str,
    ) -> impl FnOnce(Box<dyn std::error::Error + Send + Sync>) -> Self {
        move |source| Self::Undecodable {
            what,
            source: Arc::from(source),
        }
    }
}

/// What a caller of a policy gets when no version could answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PolicyError {
    #[error("no {world} plugin is loaded")]
    NotLoaded { world: World },

    #[error("plugin {plugin} failed: {error}")]
    Failed {
        plugin: String,
        #[source]
        error: CallError,
    },

    #[error("plugin {0} was unloaded")]
    Unloaded(String),

    #[error(
        "the {world} policy is busy ({calls} calls at once, the most allowed) and had no room for this one within {waited_ms} ms: shed"
    )]
    Busy {
        world: World,
        calls: usize,
        waited_ms: u64,
    },

    #[error("the call of plugin {plugin} did not finish: {source}")]
    Panicked {
        plugin: String,
        #[source]
        source: Shared,
    },
}

impl PolicyError {
    /// The error with every source after it, for the log (a trap's
    /// backtrace among them).
    pub fn detail(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            text.push_str(": ");
            text.push_str(&error.to_string());
            source = error.source();
        }
        text
    }

    /// A short machine-readable kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotLoaded { .. } => "not-loaded",
            Self::Failed { error, .. } => error.kind(),
            Self::Unloaded(_) => "unloaded",
            Self::Busy { .. } => "busy",
            Self::Panicked { .. } => "panic",
        }
    }
}
