//! The host's error type: what can go wrong starting the host and loading its
//! configuration. Plugin failures are values of their own
//! ([`crate::plugins::PolicyError`]), never panics.

use std::path::PathBuf;

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

    #[error("configuration: {key}: {message}")]
    Config { key: &'static str, message: String },

    #[error("{0}")]
    Input(String),

    #[error("plugin runtime: {0}")]
    Runtime(String),

    #[error("listening on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("watching {path}: {source}")]
    Watch {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
}

/// The host's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
