//! Pods as the snapshot holds them: compact by design. A pod of a large
//! cluster repeats most of what its neighbours say — its namespace, node,
//! labels, owner, image and limits, five conditions that differ only in
//! their times — so a record shares those parts with every record that
//! holds an equal one, keeps times as plain numbers, and is turned into
//! the WIT record (`types::Pod`) only when a policy is called: written
//! straight into an encoded batch ([`PodRecord::wire`]), or copied for a
//! typed call ([`PodRecord::to_wit`]).

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use crate::wit::types;

/// Values shared by every holder of an equal one. A value nobody else
/// holds any more is dropped when the pool has doubled since it last
/// looked, so that what the cluster stopped saying is not kept forever.
struct Pool<T: ?Sized> {
    values: HashSet<Arc<T>>,
    look_at: usize,
}

/// The size below which a pool does not look for values nobody holds.
const POOL_FLOOR: usize = 1024;

impl<T: ?Sized + Hash + Eq> Pool<T> {
    fn new() -> Self {
        Self {
            values: HashSet::new(),
            look_at: 2 * POOL_FLOOR,
        }
    }

    /// The shared value equal to `value`, made by `make` the first time.
    fn share(&mut self, value: &T, make: impl FnOnce(&T) -> Arc<T>) -> Arc<T> {
        if let Some(shared) = self.values.get(value) {
            return shared.clone();
        }
        if self.values.len() >= self.look_at {
            self.values.retain(|v| Arc::strong_count(v) > 1);
            self.look_at = 2 * self.values.len().max(POOL_FLOOR);
        }
        let shared = make(value);
        self.values.insert(shared.clone());
        shared
    }
}

/// Every pool, behind one lock: a record is made under it once.
struct Pools {
    strings: Pool<str>,
    labels: Pool<[Label]>,
    conditions: Pool<ConditionShape>,
    containers: Pool<ContainerSpec>,
    owners: Pool<Owner>,
}

static POOLS: LazyLock<Mutex<Pools>> = LazyLock::new(|| {
    Mutex::new(Pools {
        strings: Pool::new(),
        labels: Pool::new(),
        conditions: Pool::new(),
        containers: Pool::new(),
        owners: Pool::new(),
    })
});

impl Pools {
    fn string(&mut self, s: &str) -> Arc<str> {
        self.strings.share(s, |s| Arc::from(s))
    }

    fn optional(&mut self, s: Option<&str>) -> Option<Arc<str>> {
        s.map(|s| self.string(s))
    }
}

/// A timestamp that may be absent, in the room of the number alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Time(i64);

impl Time {
    const NONE: Time = Time(i64::MIN);

    fn of(t: Option<types::Timestamp>) -> Self {
        // The one timestamp the room cannot tell from none is the
        // earliest possible: taken as the one after it.
        t.map_or(Self::NONE, |t| Time(t.max(i64::MIN + 1)))
    }

    fn get(self) -> Option<types::Timestamp> {
        (self != Self::NONE).then_some(self.0)
    }
}

/// A label (key and value), shared.
type Label = (Arc<str>, Arc<str>);

/// A condition's type, status, reason and message: what the same
/// condition of many pods shares.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConditionShape {
    kind: Arc<str>,
    status: types::ConditionStatus,
    reason: Option<Arc<str>>,
    message: Option<Arc<str>>,
}

impl Hash for ConditionShape {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.kind.hash(state);
        (self.status as u8).hash(state);
        self.reason.hash(state);
        self.message.hash(state);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Condition {
    shape: Arc<ConditionShape>,
    last_transition: Time,
}

/// What a container's spec says, shared by the same container of every
/// pod of a workload.
#[derive(Debug, Clone, PartialEq)]
struct ContainerSpec {
    name: Arc<str>,
    image: Arc<str>,
    kind: types::ContainerKind,
    limits: types::Resources,
    requests: types::Resources,
}

impl Eq for ContainerSpec {}

impl Hash for ContainerSpec {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.image.hash(state);
        (self.kind as u8).hash(state);
        for r in [&self.limits, &self.requests] {
            r.cpu_millis.hash(state);
            r.memory_bytes.hash(state);
        }
    }
}

/// A container's state, its strings shared where they repeat.
#[derive(Debug, Clone, PartialEq)]
enum State {
    Waiting {
        reason: Option<Arc<str>>,
        message: Option<Box<str>>,
    },
    Running(Time),
    Terminated(Box<types::TerminatedState>),
    Unknown,
}

#[derive(Debug, Clone, PartialEq)]
struct Container {
    spec: Arc<ContainerSpec>,
    state: State,
    last_state: Option<Box<types::TerminatedState>>,
    restart_count: u32,
    ready: bool,
    started: Option<bool>,
}

/// A pod's controlling owner, shared by the pods of a workload.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Owner {
    kind: Arc<str>,
    name: Arc<str>,
}

/// One pod, as the snapshot holds it: everything `types::Pod` says, with
/// what repeats across pods shared, and without the measured usage (the
/// snapshot keeps that apart, as metrics come).
#[derive(Debug, Clone, PartialEq)]
pub struct PodRecord {
    namespace: Arc<str>,
    name: Arc<str>,
    node: Option<Arc<str>>,
    reason: Option<Arc<str>>,
    message: Option<Box<str>>,
    conditions: Box<[Condition]>,
    containers: Box<[Container]>,
    finalizers: Box<[Arc<str>]>,
    owner: Option<Arc<Owner>>,
    labels: Arc<[Label]>,
    ip: Option<Box<str>>,
    created_at: Time,
    started_at: Time,
    deleting_since: Time,
    phase: types::PodPhase,
    restart_policy: types::RestartPolicy,
}

impl PodRecord {
    /// The record of a reduced pod (its usage, if any, is not kept).
    pub fn new(pod: types::Pod) -> Self {
        let mut pools = POOLS.lock();
        let pools = &mut *pools;
        let labels: Vec<Label> = pod
            .labels
            .iter()
            .map(|kv| (pools.string(&kv.key), pools.string(&kv.value)))
            .collect();
        let conditions = pod
            .conditions
            .iter()
            .map(|c| {
                let shape = ConditionShape {
                    kind: pools.string(&c.kind),
                    status: c.status,
                    reason: pools.optional(c.reason.as_deref()),
                    message: pools.optional(c.message.as_deref()),
                };
                Condition {
                    shape: pools.conditions.share(&shape, |s| Arc::new(s.clone())),
                    last_transition: Time::of(c.last_transition),
                }
            })
            .collect();
        let containers = pod
            .containers
            .into_iter()
            .map(|c| {
                let spec = ContainerSpec {
                    name: pools.string(&c.name),
                    image: pools.string(&c.image),
                    kind: c.kind,
                    limits: c.limits,
                    requests: c.requests,
                };
                Container {
                    spec: pools.containers.share(&spec, |s| Arc::new(s.clone())),
                    state: match c.state {
                        types::ContainerState::Waiting(w) => State::Waiting {
                            reason: pools.optional(w.reason.as_deref()),
                            message: w.message.map(Box::from),
                        },
                        types::ContainerState::Running(r) => State::Running(Time::of(r.started_at)),
                        types::ContainerState::Terminated(t) => State::Terminated(Box::new(t)),
                        types::ContainerState::Unknown => State::Unknown,
                    },
                    last_state: c.last_state.map(Box::new),
                    restart_count: c.restart_count,
                    ready: c.ready,
                    started: c.started,
                }
            })
            .collect();
        let owner = pod.owner.map(|o| {
            let owner = Owner {
                kind: pools.string(&o.kind),
                name: pools.string(&o.name),
            };
            pools.owners.share(&owner, |o| Arc::new(o.clone()))
        });
        Self {
            namespace: pools.string(&pod.namespace),
            name: pod.name.into(),
            node: pools.optional(pod.node.as_deref()),
            reason: pools.optional(pod.reason.as_deref()),
            message: pod.message.map(Box::from),
            conditions,
            containers,
            finalizers: pod.finalizers.iter().map(|f| pools.string(f)).collect(),
            owner,
            labels: pools.labels.share(&labels, |l| Arc::from(l)),
            ip: pod.ip.map(Box::from),
            created_at: Time::of(pod.created_at),
            started_at: Time::of(pod.started_at),
            deleting_since: Time::of(pod.deleting_since),
            phase: pod.phase,
            restart_policy: pod.restart_policy,
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its namespace and name, shared: how the snapshot keys it.
    pub(crate) fn key(&self) -> (Arc<str>, Arc<str>) {
        (self.namespace.clone(), self.name.clone())
    }

    /// The node it is bound to.
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    pub fn deleting_since(&self) -> Option<types::Timestamp> {
        self.deleting_since.get()
    }

    /// Its controlling owner's kind and name.
    pub fn owner(&self) -> Option<(&str, &str)> {
        self.owner.as_deref().map(|o| (&*o.kind, &*o.name))
    }

    /// The value of one of its labels.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    /// The pod as policies see it, with `usage` by container name when
    /// metrics were read.
    pub fn to_wit(&self, usage: Option<&BTreeMap<String, types::Resources>>) -> types::Pod {
        let string = |s: &Arc<str>| s.to_string();
        types::Pod {
            namespace: string(&self.namespace),
            name: self.name.to_string(),
            node: self.node.as_ref().map(string),
            phase: self.phase,
            reason: self.reason.as_ref().map(string),
            message: self.message.as_ref().map(|m| m.to_string()),
            conditions: self
                .conditions
                .iter()
                .map(|c| types::Condition {
                    kind: string(&c.shape.kind),
                    status: c.shape.status,
                    reason: c.shape.reason.as_ref().map(string),
                    message: c.shape.message.as_ref().map(string),
                    last_transition: c.last_transition.get(),
                })
                .collect(),
            restart_policy: self.restart_policy,
            created_at: self.created_at.get(),
            started_at: self.started_at.get(),
            deleting_since: self.deleting_since.get(),
            finalizers: self.finalizers.iter().map(string).collect(),
            containers: self
                .containers
                .iter()
                .map(|c| types::Container {
                    name: string(&c.spec.name),
                    image: string(&c.spec.image),
                    kind: c.spec.kind,
                    ready: c.ready,
                    started: c.started,
                    restart_count: c.restart_count,
                    state: match &c.state {
                        State::Waiting { reason, message } => {
                            types::ContainerState::Waiting(types::WaitingState {
                                reason: reason.as_ref().map(string),
                                message: message.as_ref().map(|m| m.to_string()),
                            })
                        }
                        State::Running(at) => types::ContainerState::Running(types::RunningState {
                            started_at: at.get(),
                        }),
                        State::Terminated(t) => types::ContainerState::Terminated((**t).clone()),
                        State::Unknown => types::ContainerState::Unknown,
                    },
                    last_state: c.last_state.as_deref().cloned(),
                    limits: c.spec.limits,
                    requests: c.spec.requests,
                    usage: usage.and_then(|u| u.get(&*c.spec.name)).copied(),
                })
                .collect(),
            owner: self.owner.as_ref().map(|o| types::Owner {
                kind: string(&o.kind),
                name: string(&o.name),
            }),
            labels: self
                .labels
                .iter()
                .map(|(k, v)| types::KeyValue {
                    key: string(k),
                    value: string(v),
                })
                .collect(),
            ip: self.ip.as_ref().map(|ip| ip.to_string()),
            usage: usage.map(pod_usage),
        }
    }

    /// The pod as `types::Pod` serializes, written from the record without
    /// a copy: what an encoded batch carries.
    pub fn wire<'a>(&'a self, usage: Option<&'a BTreeMap<String, types::Resources>>) -> Wire<'a> {
        Wire { pod: self, usage }
    }
}

/// A pod's usage: its containers' added up.
fn pod_usage(usage: &BTreeMap<String, types::Resources>) -> types::Resources {
    types::Resources {
        cpu_millis: usage.values().map(|u| u.cpu_millis).sum(),
        memory_bytes: usage.values().map(|u| u.memory_bytes).sum(),
    }
}

/// A slice serialized as a sequence of what `make` makes of its items.
struct Each<'a, T, F>(&'a [T], F);

fn each<'a, T, W: Serialize, F: Fn(&'a T) -> W>(items: &'a [T], make: F) -> Each<'a, T, F> {
    Each(items, make)
}

impl<'a, T, W: Serialize, F: Fn(&'a T) -> W> Serialize for Each<'a, T, F> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(&self.1))
    }
}

/// `types::Pod`'s serialization of a record: the same fields in the same
/// order, with the same types, so that a policy decodes it as that record.
pub struct Wire<'a> {
    pod: &'a PodRecord,
    usage: Option<&'a BTreeMap<String, types::Resources>>,
}

#[derive(Serialize)]
#[serde(rename = "Condition")]
struct ConditionWire<'a> {
    kind: &'a str,
    status: types::ConditionStatus,
    reason: Option<&'a str>,
    message: Option<&'a str>,
    last_transition: Option<types::Timestamp>,
}

#[derive(Serialize)]
#[serde(rename = "WaitingState")]
struct WaitingWire<'a> {
    reason: Option<&'a str>,
    message: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename = "ContainerState")]
enum StateWire<'a> {
    Waiting(WaitingWire<'a>),
    Running(types::RunningState),
    Terminated(&'a types::TerminatedState),
    Unknown,
}

#[derive(Serialize)]
#[serde(rename = "Container")]
struct ContainerWire<'a> {
    name: &'a str,
    image: &'a str,
    kind: types::ContainerKind,
    ready: bool,
    started: Option<bool>,
    restart_count: u32,
    state: StateWire<'a>,
    last_state: Option<&'a types::TerminatedState>,
    limits: types::Resources,
    requests: types::Resources,
    usage: Option<types::Resources>,
}

#[derive(Serialize)]
#[serde(rename = "KeyValue")]
struct LabelWire<'a> {
    key: &'a str,
    value: &'a str,
}

#[derive(Serialize)]
#[serde(rename = "Owner")]
struct OwnerWire<'a> {
    kind: &'a str,
    name: &'a str,
}

impl Serialize for Wire<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.pod;
        let usage = self.usage;
        let mut out = s.serialize_struct("Pod", 19)?;
        out.serialize_field("namespace", &*p.namespace)?;
        out.serialize_field("name", &*p.name)?;
        out.serialize_field("node", &p.node.as_deref())?;
        out.serialize_field("phase", &p.phase)?;
        out.serialize_field("reason", &p.reason.as_deref())?;
        out.serialize_field("message", &p.message.as_deref())?;
        out.serialize_field(
            "conditions",
            &each(&p.conditions, |c| ConditionWire {
                kind: &c.shape.kind,
                status: c.shape.status,
                reason: c.shape.reason.as_deref(),
                message: c.shape.message.as_deref(),
                last_transition: c.last_transition.get(),
            }),
        )?;
        out.serialize_field("restart_policy", &p.restart_policy)?;
        out.serialize_field("created_at", &p.created_at.get())?;
        out.serialize_field("started_at", &p.started_at.get())?;
        out.serialize_field("deleting_since", &p.deleting_since.get())?;
        out.serialize_field("finalizers", &each(&p.finalizers, |f| &**f))?;
        out.serialize_field(
            "containers",
            &each(&p.containers, |c| ContainerWire {
                name: &c.spec.name,
                image: &c.spec.image,
                kind: c.spec.kind,
                ready: c.ready,
                started: c.started,
                restart_count: c.restart_count,
                state: match &c.state {
                    State::Waiting { reason, message } => StateWire::Waiting(WaitingWire {
                        reason: reason.as_deref(),
                        message: message.as_deref(),
                    }),
                    State::Running(at) => StateWire::Running(types::RunningState {
                        started_at: at.get(),
                    }),
                    State::Terminated(t) => StateWire::Terminated(t),
                    State::Unknown => StateWire::Unknown,
                },
                last_state: c.last_state.as_deref(),
                limits: c.spec.limits,
                requests: c.spec.requests,
                usage: usage.and_then(|u| u.get(&*c.spec.name)).copied(),
            }),
        )?;
        out.serialize_field(
            "owner",
            &p.owner.as_deref().map(|o| OwnerWire {
                kind: &o.kind,
                name: &o.name,
            }),
        )?;
        out.serialize_field(
            "labels",
            &each(&p.labels, |(key, value)| LabelWire { key, value }),
        )?;
        out.serialize_field("ip", &p.ip.as_deref())?;
        out.serialize_field("usage", &usage.map(pod_usage))?;
        out.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::reduce;

    /// Every pod among the fixtures (real objects in unusual states).
    fn fixture_pods() -> Vec<types::Pod> {
        // (A few are trimmed past what the API's types accept.)
        let pods: Vec<types::Pod> = crate::observe::fixture_objects("Pod")
            .into_iter()
            .filter_map(|(_, value)| {
                serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(value).ok()
            })
            .map(|pod| reduce::pod(&pod))
            .collect();
        assert!(pods.len() >= 15, "the fixtures hold pods: {}", pods.len());
        pods
    }

    fn usage() -> BTreeMap<String, types::Resources> {
        let r = |cpu, mem| types::Resources {
            cpu_millis: Some(cpu),
            memory_bytes: Some(mem),
        };
        BTreeMap::from([
            ("main".to_string(), r(250, 1 << 20)),
            ("other".to_string(), r(5, 3)),
        ])
    }

    #[test]
    fn a_record_gives_back_the_pod_it_was_made_of() {
        for pod in fixture_pods() {
            let record = PodRecord::new(pod.clone());
            assert_eq!(record.to_wit(None), pod, "{}", pod.name);
        }
    }

    #[test]
    fn a_record_encodes_exactly_as_its_wit_record_does() {
        let usage = usage();
        for pod in fixture_pods() {
            let record = PodRecord::new(pod.clone());
            for usage in [None, Some(&usage)] {
                let wit = record.to_wit(usage);
                assert_eq!(
                    postcard::to_allocvec(&record.wire(usage)).unwrap(),
                    postcard::to_allocvec(&wit).unwrap(),
                    "{}",
                    pod.name
                );
                assert_eq!(
                    serde_json::to_value(record.wire(usage)).unwrap(),
                    serde_json::to_value(&wit).unwrap()
                );
            }
            // And what a policy decodes is the pod.
            let bytes = postcard::to_allocvec(&record.wire(None)).unwrap();
            assert_eq!(postcard::from_bytes::<types::Pod>(&bytes).unwrap(), pod);
        }
    }

    #[test]
    fn pods_of_one_workload_share_what_they_say_alike() {
        let mut pods = fixture_pods()
            .into_iter()
            .filter(|p| !p.conditions.is_empty() && !p.containers.is_empty());
        let mut one = pods.next().unwrap();
        one.labels.push(types::KeyValue {
            key: "app".into(),
            value: "web".into(),
        });
        let mut two = one.clone();
        two.name = format!("{}-2", one.name);
        two.ip = Some("10.0.0.2".into());
        two.conditions[0].last_transition = Some(7);
        let (a, b) = (PodRecord::new(one.clone()), PodRecord::new(two.clone()));
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert!(Arc::ptr_eq(&a.labels, &b.labels));
        assert!(Arc::ptr_eq(&a.conditions[0].shape, &b.conditions[0].shape));
        assert!(Arc::ptr_eq(&a.containers[0].spec, &b.containers[0].spec));
        // What differs stays apart.
        assert_eq!(a.to_wit(None), one);
        assert_eq!(b.to_wit(None), two);
        assert_ne!(
            a.conditions[0].last_transition,
            b.conditions[0].last_transition
        );
    }

    #[test]
    fn what_no_record_holds_any_more_leaves_the_pool() {
        let mut pool: Pool<str> = Pool::new();
        let held: Vec<Arc<str>> = (0..10)
            .map(|i| pool.share(&format!("held-{i}"), |s| Arc::from(s)))
            .collect();
        for i in 0..10 * POOL_FLOOR {
            pool.share(&format!("gone-{i}"), |s| Arc::from(s));
        }
        // The pool looked each time it doubled: what is gone went, what is
        // held stayed, and it is the same value when asked for again.
        assert!(pool.values.len() < 4 * POOL_FLOOR, "{}", pool.values.len());
        for (i, h) in held.iter().enumerate() {
            assert!(Arc::ptr_eq(
                h,
                &pool.share(&format!("held-{i}"), |s| Arc::from(s))
            ));
        }
    }

    #[test]
    fn the_earliest_time_is_not_taken_for_none() {
        assert_eq!(Time::of(None).get(), None);
        assert_eq!(Time::of(Some(0)).get(), Some(0));
        assert_eq!(Time::of(Some(-5)).get(), Some(-5));
        assert_eq!(Time::of(Some(i64::MIN)).get(), Some(i64::MIN + 1));
    }
}
