//! End-to-end tests of verdict, in one test binary (it links once). The
//! plugins they load are real components built from `plugins/` by
//! `cargo xtask plugins`, including test plugins that misbehave on purpose.

mod access;
mod admission;
mod apps;
mod crash;
mod dashboard;
mod delivery;
mod disk;
mod events;
mod failover;
mod fleet;
mod history;
mod kubectl_plugin;
mod languages;
mod live;
mod lua_rules;
mod metrics;
mod misbehaving;
mod mix;
mod offline;
mod openapi;
mod probes;
mod projects;
mod real;
mod registries;
mod reload;
mod replicas;
mod resources;
mod rules;
mod schemathesis;
mod serve;
mod settings;
mod simulator;
mod support;
mod tasks;
mod vmdelivery;
mod vms;
