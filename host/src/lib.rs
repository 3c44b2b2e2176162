//! verdict: a host for hot-swappable WebAssembly policies over a Kubernetes
//! cluster.
//!
//! Its modules in flow order — cluster + tasks → observations → policy calls
//! → verdicts → actions → HTTP. Each uses only those above it in this list
//! (`cargo xtask lint` checks it, reading this list); HTTP and start-up are
//! the outer edge, and nothing inside imports them.
//!
//! Small helpers:
//! - [`time`]: the present, and times as milliseconds and RFC 3339 text;
//! - [`text`]: text from elsewhere made safe to print (controls escaped);
//! - [`wit`]: the WIT contract's bindings, and its enumerations' names;
//! - [`schema`]: JSON schemas of custom resources' fields their types
//!   cannot say (any object, an enumeration by WIT name);
//! - [`settings`]: how a module declares its settings, once;
//! - [`memory`]: the process's memory beside its limit;
//! - [`calls`]: the requests made of the Kubernetes API server, counted;
//!
//! Storage, folders, events (each with its own error type):
//! - [`native`]: the default status rules compiled natively, for comparison
//!   and for the policies that build on them (`defaults` of the WIT);
//! - [`storage`]: the host's SQLite databases, opened and migrated;
//! - [`watch`]: a debounced folder watch;
//! - [`events`]: typed events with ids, a replay buffer and subscribers;
//! - [`leader`]: the Lease election among replicas — who acts, in which
//!   term — and the replicas' heartbeats;
//! - [`shared`]: people's decisions made on one replica, shared with the
//!   others through the API server;
//!
//! The domain:
//! - [`observe`]: Kubernetes objects watched, reduced to observations and
//!   grouped into apps;
//! - [`tasks`]: task records, their life cycle and stores;
//! - [`overrides`]: states people forced on apps and instances;
//! - [`plugins`]: the Wasm runtime, its limits and call metrics, the
//!   registry and hot reload;
//! - [`shadow`]: plugins in shadow mode asked the active plugin's
//!   questions, their answers compared;
//! - [`delivery`]: policies fetched from OCI registries and URLs, checked
//!   against their digests and kept by digest;
//! - [`verdicts`]: status evaluation, the live verdicts and their JSON form;
//! - [`history`]: every verdict change kept, with its cause, and
//!   availability over a window;
//! - [`admission`]: the one way a task is admitted and stored, and the
//!   Kubernetes admission webhook;
//! - [`failover`]: node health decisions, brakes, overrides and approvals;
//! - [`executor`]: the one actuator that writes to the cluster;
//! - [`lifecycle`]: seed 002's machine of a VM-hosted app's instances —
//!   the lifecycle policy's questions and answers, the step hooks that
//!   carry out their tasks, the sets' and deployments' controller and
//!   people's requests;
//! - [`fleet`]: the verdicts of many clusters followed through their HTTP
//!   APIs — members from the configuration, ClusterProfiles and Argo CD's
//!   cluster Secrets — and shown `unknown` when not heard from;
//!
//! The edge:
//! - [`error`]: the host's error type — start-up, configuration and users'
//!   files — wrapping the domain's errors as its sources;
//! - [`http`]: the route table, its state and errors, one file of handlers
//!   per resource;
//! - [`config`]: flags, environment and file into one [`config::Config`];
//! - [`offline`]: `verdict eval` and `verdict test` for policy authors;
//! - [`remote`]: `verdict history`, against a running host;
//! - [`demo`]: the built-in demo cluster (the cargo feature `demo`);
//! - [`host`]: the parts assembled, in flow order, and served.

pub mod admission;
pub mod calls;
pub mod config;
pub mod delivery;
pub mod demo;
pub mod error;
pub mod events;
pub mod executor;
pub mod failover;
pub mod fleet;
pub mod history;
pub mod host;
pub mod http;
pub mod leader;
pub mod lifecycle;
pub mod memory;
pub mod native;
pub mod observe;
pub mod offline;
pub mod overrides;
pub mod plugins;
pub mod remote;
pub mod schema;
pub mod settings;
pub mod shadow;
pub mod shared;
pub mod storage;
pub mod tasks;
pub mod text;
pub mod time;
pub mod verdicts;
pub mod watch;
pub mod wit;

pub use error::{Error, Result};
