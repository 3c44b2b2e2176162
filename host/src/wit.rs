//! The WIT contract in Rust: host bindings generated from the package in
//! `wit/` (one set per world, sharing the `types` and `host` interfaces of
//! the status world; only what the host needs is re-exported), and the WIT
//! names of its enumerations both ways ([`WitName`]).
//!
//! The host binds worlds of its own (`verdict:host`), each the package's
//! world without its `settings` export: a component built before that
//! export existed still loads, and the host looks the export up by name
//! where a component has it (as it does `status-encoded` and
//! `failover-encoded`).

mod generated {
    pub mod status {
        wasmtime::component::bindgen!({
            path: "../wit",
            inline: "
                package verdict:host;
                world status-policy {
                    import verdict:policy/host@0.4.0;
                    import verdict:policy/defaults@0.4.0;
                    export verdict:policy/status@0.4.0;
                }
            ",
            world: "verdict:host/status-policy",
            // Verdicts are compared to publish only real changes; batches
            // cross encoded to plugins that take them so (`status-encoded`).
            additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
        });
    }

    pub mod failover {
        wasmtime::component::bindgen!({
            path: "../wit",
            inline: "
                package verdict:host;
                world failover-policy {
                    import verdict:policy/host@0.4.0;
                    export verdict:policy/failover@0.4.0;
                }
            ",
            world: "verdict:host/failover-policy",
            // The input crosses encoded to plugins that take it so
            // (`failover-encoded`).
            additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
            with: {
                "verdict:policy/types": super::status::verdict::policy::types,
                "verdict:policy/host": super::status::verdict::policy::host,
            },
        });
    }

    pub mod admission {
        wasmtime::component::bindgen!({
            path: "../wit",
            inline: "
                package verdict:host;
                world admission-policy {
                    import verdict:policy/host@0.4.0;
                    export verdict:policy/admission@0.4.0;
                }
            ",
            world: "verdict:host/admission-policy",
            additional_derives: [PartialEq, serde::Serialize],
            with: {
                "verdict:policy/types": super::status::verdict::policy::types,
                "verdict:policy/host": super::status::verdict::policy::host,
            },
        });
    }

    pub mod lifecycle {
        wasmtime::component::bindgen!({
            path: "../wit",
            inline: "
                package verdict:host;
                world lifecycle-policy {
                    import verdict:policy/host@0.4.0;
                    export verdict:policy/lifecycle@0.4.0;
                }
            ",
            world: "verdict:host/lifecycle-policy",
            additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
            with: {
                "verdict:policy/types": super::status::verdict::policy::types,
                "verdict:policy/host": super::status::verdict::policy::host,
            },
        });
    }
}

pub use generated::admission::exports::verdict::policy::admission;
pub use generated::failover::exports::verdict::policy::failover;
pub use generated::lifecycle::exports::verdict::policy::lifecycle;
pub use generated::status::exports::verdict::policy::status;
pub use generated::status::verdict::policy::defaults;
pub use generated::status::verdict::policy::host;
pub use generated::status::verdict::policy::types;

pub(crate) use generated::admission::{AdmissionPolicy, AdmissionPolicyPre};
pub(crate) use generated::failover::{FailoverPolicy, FailoverPolicyPre};
pub(crate) use generated::lifecycle::{LifecyclePolicy, LifecyclePolicyPre};
pub(crate) use generated::status::{StatusPolicy, StatusPolicyPre};

/// The WIT name of an enumeration case, both ways.
pub trait WitName: Sized {
    /// Every name, in declaration order.
    const NAMES: &'static [&'static str];
    fn wit_name(&self) -> &'static str;
    fn from_wit_name(name: &str) -> Option<Self>;
}

/// Serde by WIT name (`#[serde(with = "wit_name")]`); an unknown name is an
/// error listing the known ones.
pub mod wit_name {
    use super::WitName;

    pub fn serialize<T: WitName, S: serde::Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(value.wit_name())
    }

    pub fn deserialize<'de, T: WitName, D: serde::Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        let name = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
        T::from_wit_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown value `{name}`, expected one of: {}",
                T::NAMES.join(", ")
            ))
        })
    }
}

/// Serde of an optional enumeration by WIT name, or `null`.
pub mod wit_name_opt {
    use super::WitName;

    pub fn serialize<T: WitName, S: serde::Serializer>(
        value: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => s.serialize_some(value.wit_name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: WitName, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        #[derive(serde::Deserialize)]
        struct Named<T: WitName>(#[serde(with = "super::wit_name")] T);
        let named = <Option<Named<T>> as serde::Deserialize>::deserialize(d)?;
        Ok(named.map(|Named(value)| value))
    }
}

macro_rules! wit_names {
    ($($m:ident::$ty:ident { $($variant:ident => $name:literal),* $(,)? })*) => {$(
        impl WitName for $m::$ty {
            const NAMES: &'static [&'static str] = &[$($name),*];

            fn wit_name(&self) -> &'static str {
                match self {
                    $($m::$ty::$variant => $name),*
                }
            }

            fn from_wit_name(name: &str) -> Option<Self> {
                match name {
                    $($name => Some($m::$ty::$variant),)*
                    _ => None,
                }
            }
        }
    )*};
}

wit_names! {
    types::InstanceStatus {
        Pending => "pending", RunningHealthy => "running-healthy",
        RunningNotReady => "running-not-ready", RunningRestarting => "running-restarting",
        RunningUnhealthy => "running-unhealthy", Succeeded => "succeeded", Failed => "failed",
        Unknown => "unknown",
    }
    types::GroupStatus {
        Pending => "pending", RunningHealthy => "running-healthy",
        RunningNotReady => "running-not-ready", RunningRestarting => "running-restarting",
        RunningOverloaded => "running-overloaded", RunningUnhealthy => "running-unhealthy",
        Succeeded => "succeeded", Failed => "failed", Unknown => "unknown",
        Terminating => "terminating",
    }
    types::StableStatus {
        Running => "running", Degraded => "degraded", Stopped => "stopped", Panic => "panic",
        NotExisted => "not-existed",
    }
    types::Transition {
        Creating => "creating", Starting => "starting", Stopping => "stopping",
        Restarting => "restarting", Updating => "updating", Scaling => "scaling",
        Deleting => "deleting", Migrating => "migrating",
    }
    types::TaskPhase {
        Pending => "pending", AwaitingApproval => "awaiting-approval", Running => "running",
        Succeeded => "succeeded", Failed => "failed", Cancelled => "cancelled",
    }
    types::TaskAction {
        Create => "create", Start => "start", Stop => "stop", Restart => "restart",
        Update => "update", Scale => "scale", Delete => "delete", Migrate => "migrate",
        Adopt => "adopt",
    }
    types::Severity {
        Ok => "ok", Progressing => "progressing", Warning => "warning", Error => "error",
    }
    types::ObjectStatus {
        Ready => "ready", Progressing => "progressing", Suspended => "suspended",
        Succeeded => "succeeded", Failed => "failed", Unknown => "unknown",
        Terminating => "terminating",
    }
    types::InstanceStage {
        Initializing => "initializing", Deploying => "deploying", Ready => "ready",
        GrayRelease => "gray-release", Unknown => "unknown", Offline => "offline",
        Stopped => "stopped",
    }
    lifecycle::Stage {
        Requested => "requested", Initializing => "initializing", Deploying => "deploying",
        Ready => "ready", GrayRelease => "gray-release", Serving => "serving",
        Unknown => "unknown", Offline => "offline", Deleting => "deleting", Failed => "failed",
    }
    lifecycle::Machine {
        Absent => "absent", Starting => "starting", Running => "running",
        NotReady => "not-ready", Stopped => "stopped", Failed => "failed",
    }
    lifecycle::NodeHealth {
        Healthy => "healthy", Unknown => "unknown", Offline => "offline",
    }
    lifecycle::Outcome {
        Running => "running", Succeeded => "succeeded", Failed => "failed",
    }
}

/// A condition's status as Kubernetes spells it (`True`, `False`,
/// `Unknown`), both ways.
impl types::ConditionStatus {
    pub fn kubernetes_name(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// Anything else than `True` or `False` is `Unknown`, as Kubernetes
    /// reads it.
    pub fn from_kubernetes(text: &str) -> Self {
        match text {
            "True" => Self::True,
            "False" => Self::False,
            _ => Self::Unknown,
        }
    }
}

/// Write the `status-encoded` and `failover-encoded` encoding (postcard's)
/// of `value` into `buffer`, in place of what it held.
pub(crate) fn encode_into<T: serde::Serialize + ?Sized>(
    value: &T,
    buffer: &mut Vec<u8>,
) -> Result<(), postcard::Error> {
    buffer.clear();
    *buffer = postcard::to_extend(value, std::mem::take(buffer))?;
    Ok(())
}

thread_local! {
    static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer larger than this is not kept for the next batch.
const KEPT_BUFFER: usize = 8 << 20;

/// `f` with this thread's buffer for encoded batches. A batch's encoding is
/// hundreds of kilobytes: one buffer a thread, reused batch after batch,
/// spares allocating that much for each (and the allocator handing the
/// pages back to the system and the kernel mapping them in again).
/// `f` must not ask for the buffer again.
pub(crate) fn with_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    BUFFER.with_borrow_mut(|buffer| {
        let answer = f(buffer);
        if buffer.capacity() > KEPT_BUFFER {
            *buffer = Vec::new();
        }
        answer
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_buffer_serves_batch_after_batch_and_a_huge_one_is_let_go() {
        let first = with_buffer(|buffer| {
            encode_into(&vec![1u8; 1000], buffer).unwrap();
            buffer.as_ptr()
        });
        let second = with_buffer(|buffer| {
            assert!(buffer.capacity() >= 1000, "kept from the batch before");
            encode_into(&vec![2u8; 10], buffer).unwrap();
            assert_eq!(postcard::from_bytes::<Vec<u8>>(buffer).unwrap(), [2u8; 10]);
            buffer.as_ptr()
        });
        assert_eq!(first, second, "the same allocation");
        with_buffer(|buffer| encode_into(&vec![0u8; KEPT_BUFFER + 1], buffer).unwrap());
        with_buffer(|buffer| assert_eq!(buffer.capacity(), 0));
    }
}
