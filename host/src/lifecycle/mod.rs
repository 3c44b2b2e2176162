//! Seed 002's delivery of environment and code to VM-hosted applications:
//! each instance's stage and task list, decided by the lifecycle policy
//! from what is observed of it and what it should have ([`model`]); what it
//! should have, and when it may leave service, planned at the rollout's
//! safe rate ([`rollout`]); each task carried out by the step hook the
//! configuration names for it ([`hooks`]); the instance's stage, what it
//! has, its lock and its lists carried on its `VirtualMachine`
//! ([`instance`]); the `VMReplicaSet` and `VMDeployment` read, a new
//! instance's `VirtualMachine` made, their statuses written
//! ([`resources`]).

pub mod hooks;
pub mod instance;
pub mod model;
pub mod resources;
pub mod rollout;
