//! Host bindings generated from the WIT package in `wit/`: one set per world,
//! sharing the `types` and `host` interfaces of the status world. Only what
//! the host needs is re-exported.

mod generated {
    pub mod status {
        wasmtime::component::bindgen!({
            world: "status-policy",
            path: "../wit",
            // Verdicts are compared to publish only real changes; batches
            // cross encoded to plugins that take them so (`status-encoded`).
            additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
        });
    }

    pub mod failover {
        wasmtime::component::bindgen!({
            world: "failover-policy",
            path: "../wit",
            with: {
                "verdict:policy/types": super::status::verdict::policy::types,
                "verdict:policy/host": super::status::verdict::policy::host,
            },
        });
    }

    pub mod admission {
        wasmtime::component::bindgen!({
            world: "admission-policy",
            path: "../wit",
            with: {
                "verdict:policy/types": super::status::verdict::policy::types,
                "verdict:policy/host": super::status::verdict::policy::host,
            },
        });
    }
}

pub use generated::admission::exports::verdict::policy::admission;
pub use generated::failover::exports::verdict::policy::failover;
pub use generated::status::exports::verdict::policy::status;
pub use generated::status::verdict::policy::host;
pub use generated::status::verdict::policy::types;

pub(crate) use generated::admission::{AdmissionPolicy, AdmissionPolicyPre};
pub(crate) use generated::failover::{FailoverPolicy, FailoverPolicyPre};
pub(crate) use generated::status::{StatusPolicy, StatusPolicyPre};
