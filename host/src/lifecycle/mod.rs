//! Seed 002's delivery of environment and code to VM-hosted applications:
//! each instance's stage and task list, decided by the lifecycle policy
//! from what is observed of it and what it should have ([`model`]); what it
//! should have, and when it may leave service, planned at the rollout's
//! safe rate ([`rollout`]); each task carried out by the step hook the
//! configuration names for it ([`hooks`], a Job's hook [`jobs`]); the
//! instance's stage, what it has, its lock, its list in progress and its
//! last lists summed up, carried on its `Server` ([`instance`], the whole
//! task log in the history's database), each list step by step
//! ([`lists`]); the resources' types, from which
//! their CRDs are generated ([`crd`]); the `VMReplicaSet` read, a new
//! instance's `VirtualMachine` made, the statuses and conditions written
//! ([`resources`]); the `VMDeployment` read, people's actions on its
//! rollout and its status ([`deployment`]); people's requests carried as
//! annotations on the resource they are about ([`requests`]); the
//! resources watched into stores ([`watched`]); the leader's controllers,
//! reconciling each set, deployment, Server and orphaned machine as it
//! changes ([`controller`]), and their Kubernetes Events ([`announce`]);
//! and what the HTTP routes ask of it, on any replica ([`service`]).

pub mod announce;
pub mod controller;
pub mod crd;
pub mod deployment;
pub mod hooks;
pub mod instance;
pub mod jobs;
pub mod lists;
pub mod model;
pub mod requests;
pub mod resources;
pub mod rollout;
pub mod service;
pub mod watched;

use std::time::Duration;

/// Whether and how often the delivery controller runs.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// Carry out VMReplicaSets and VMDeployments (seed 002's delivery of
    /// environment and code to VM-hosted apps), on the leader: their
    /// machines made, each instance moved through the lifecycle policy's
    /// stages, every task done by its step hook (`[hooks.<step>]`).
    #[arg(long = "vm-delivery")]
    pub vm_delivery: bool,
    /// How soon the delivery controller looks again at a set whose list
    /// runs or whose rollout moves, in milliseconds (it is woken at once
    /// by what it watches and by each hook's answer).
    #[arg(long = "vm-delivery-every-ms", value_name = "MS", default_value = "500", value_parser = crate::settings::positive_millis)]
    pub delivery_every: Duration,
    /// Carry out only the VMReplicaSets and VMDeployments of these
    /// namespaces (repeat, or separate with commas); all without any.
    #[arg(
        long = "vm-delivery-namespace",
        value_name = "NS",
        value_delimiter = ','
    )]
    pub delivery_namespaces: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}
