//! verdict: a host for hot-swappable WebAssembly policies over a Kubernetes
//! cluster.
//!
//! - [`plugins`]: the Wasm runtime, registry and hot reload;
//! - [`api`]: the HTTP surface;
//! - [`config`]: flags, environment and file into one [`config::Config`];
//! - [`host`]: the parts assembled and served.

pub mod api;
pub mod config;
pub mod error;
pub mod host;
pub mod plugins;

pub use error::{Error, Result};
