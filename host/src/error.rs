//! The host's error type: what can go wrong starting the host, loading its
//! configuration and reading a user's files. Each wraps the error it comes
//! from as its source, so the whole chain reaches the log. Plugin failures
//! are values of their own ([`crate::plugins::PolicyError`]), never panics.

use std::path::PathBuf;

/// Any error, as a source.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the host library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("configuration file {path}: {message}")]
    ConfigFile { path: PathBuf, message: String },

    /// A setting that is wrong, in the host's words.
    #[error("configuration: {key}: {message}")]
    Config { key: &'static str, message: String },

    /// A setting whose value does not work, and why.
    #[error("configuration: {key}: {value}: {source}")]
    Setting {
        key: &'static str,
        value: String,
        #[source]
        source: BoxError,
    },

    /// A user's input (a file, a flag) that does not read; `what` says
    /// where.
    #[error("{what}: {source}")]
    Input {
        what: String,
        #[source]
        source: BoxError,
    },

    /// A user's input that reads but is wrong, in the host's words.
    #[error("{0}")]
    Invalid(String),

    #[error("the plugin runtime: {0}")]
    Plugins(#[from] crate::plugins::LoadError),

    #[error("the status policy: {0}")]
    Policy(#[from] crate::plugins::PolicyError),

    #[error("{0}")]
    Tasks(#[from] crate::tasks::StoreError),

    #[error("{0}")]
    Storage(#[from] crate::storage::StorageError),

    #[error("the Kubernetes client: {0}")]
    Client(#[source] kube::Error),

    #[error("starting the demo cluster: {0}")]
    Demo(#[source] BoxError),

    #[error("starting the async runtime: {0}")]
    AsyncRuntime(#[source] std::io::Error),

    #[error("listening on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("{0}")]
    Watch(#[from] crate::watch::WatchError),

    #[error("{0}")]
    Delivery(#[from] crate::delivery::DeliveryError),

    #[error("the host at {url}: {message}")]
    Remote { url: String, message: String },
}

/// The host's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }

    /// A user's input that does not read, for `map_err`.
    pub(crate) fn input<E: Into<BoxError>>(what: impl Into<String>) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |source| Self::Input {
            what,
            source: source.into(),
        }
    }

    /// A setting's value that does not work, for `map_err`.
    pub(crate) fn setting<E: Into<BoxError>>(
        key: &'static str,
        value: impl Into<String>,
    ) -> impl FnOnce(E) -> Self {
        let value = value.into();
        move |source| Self::Setting {
            key,
            value,
            source: source.into(),
        }
    }

    /// Whether the error is the user's to fix (exit code 2).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Self::Config { .. }
                | Self::ConfigFile { .. }
                | Self::Setting { .. }
                | Self::Input { .. }
                | Self::Invalid(_)
        )
    }
}
