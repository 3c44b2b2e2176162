//! verdict: a host for hot-swappable WebAssembly policies over a Kubernetes
//! cluster.
//!
//! - [`time`]: the present, and times as milliseconds and RFC 3339 text;
//! - [`plugins`]: the Wasm runtime, registry and hot reload;
//! - [`tasks`]: task records, their life cycle and storage;
//! - [`admission`]: task admission and the Kubernetes admission webhook;
//! - [`failover`]: node health decisions, brakes, overrides and actions;
//! - [`api`]: the HTTP surface;
//! - [`connections`]: bounds on the connections the server keeps;
//! - [`observe`]: Kubernetes objects reduced to observations and grouped into apps;
//! - [`verdicts`]: status evaluation and the JSON form of verdicts;
//! - [`native`]: the default status rules compiled natively, for comparison;
//! - [`offline`]: `verdict eval` and `verdict test` for policy authors;
//! - [`config`]: flags, environment and file into one [`config::Config`];
//! - [`host`]: the parts assembled and served.

pub mod access;
pub mod admission;
pub mod api;
pub mod config;
pub mod connections;
pub mod error;
pub mod events;
pub mod executor;
pub mod failover;
pub mod host;
pub mod metrics;
pub mod native;
pub mod observe;
pub mod offline;
pub mod plugins;
pub mod tasks;
pub mod time;
pub mod tls;
pub mod verdicts;

pub use error::{Error, Result};
