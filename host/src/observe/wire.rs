//! The shapes watched objects are parsed in: each is its Kubernetes type
//! with only the fields the reductions read. What else an object carries
//! — managed fields above all, a pod's volumes, tolerations, environment
//! and probes, a container status's image id and mounts, a Lease's holder
//! — is skipped by the parser and never allocated: at 150 000 pods that is
//! most of what the API server sends.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
    ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

use crate::wit::types;

/// `kube::Resource` for a shape `$ty` read from the API as the kind
/// `$kind`, its metadata at `self.$field`.
macro_rules! read_as {
    ($ty:ty, $kind:ty, $($field:tt)+) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$kind as kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$kind as kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$kind as kube::Resource>::version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$kind as kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.$($field)+
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.$($field)+
            }
        }
    };
}

/// The identity and the metadata a reduction reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    /// What a watch resumes from.
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
}

impl From<Meta> for ObjectMeta {
    fn from(meta: Meta) -> Self {
        ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            labels: meta.labels,
            owner_references: meta.owner_references,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            finalizers: meta.finalizers,
            ..ObjectMeta::default()
        }
    }
}

/// A pod with only what [`super::reduce::pod`] reads: its identity,
/// labels, owners, times and finalizers; its node, restart policy and its
/// containers' names, images, resources and restart policies; its status
/// but for its IPs, QoS class and the containers' ids and mounts.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PodFields(pub(crate) Pod);

read_as!(PodFields, Pod, 0.metadata);

impl<'de> Deserialize<'de> for PodFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: Meta,
            spec: Option<Spec>,
            status: Option<Status>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Spec {
            node_name: Option<String>,
            restart_policy: Option<String>,
            containers: Option<Vec<SpecContainer>>,
            init_containers: Option<Vec<SpecContainer>>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct SpecContainer {
            name: String,
            image: Option<String>,
            resources: Option<ResourceRequirements>,
            restart_policy: Option<String>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Status {
            phase: Option<String>,
            reason: Option<String>,
            message: Option<String>,
            conditions: Option<Vec<PodCondition>>,
            start_time: Option<Time>,
            #[serde(rename = "podIP")]
            pod_ip: Option<String>,
            container_statuses: Option<Vec<StatusContainer>>,
            init_container_statuses: Option<Vec<StatusContainer>>,
            ephemeral_container_statuses: Option<Vec<StatusContainer>>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct StatusContainer {
            name: String,
            image: Option<String>,
            ready: Option<bool>,
            started: Option<bool>,
            restart_count: Option<i32>,
            state: Option<ContainerState>,
            last_state: Option<ContainerState>,
        }
        let containers = |list: Option<Vec<SpecContainer>>| {
            list.unwrap_or_default()
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    image: c.image,
                    resources: c.resources,
                    restart_policy: c.restart_policy,
                    ..Container::default()
                })
                .collect::<Vec<_>>()
        };
        let statuses = |list: Option<Vec<StatusContainer>>| {
            list.map(|list| {
                list.into_iter()
                    .map(|s| ContainerStatus {
                        name: s.name,
                        image: s.image.unwrap_or_default(),
                        ready: s.ready.unwrap_or_default(),
                        started: s.started,
                        restart_count: s.restart_count.unwrap_or_default(),
                        state: s.state,
                        last_state: s.last_state,
                        ..ContainerStatus::default()
                    })
                    .collect()
            })
        };
        let raw = Raw::deserialize(deserializer)?;
        Ok(PodFields(Pod {
            metadata: raw.metadata.into(),
            spec: raw.spec.map(|spec| PodSpec {
                node_name: spec.node_name,
                restart_policy: spec.restart_policy,
                containers: containers(spec.containers),
                init_containers: spec.init_containers.map(|list| containers(Some(list))),
                ..PodSpec::default()
            }),
            status: raw.status.map(|status| PodStatus {
                phase: status.phase,
                reason: status.reason,
                message: status.message,
                conditions: status.conditions,
                start_time: status.start_time,
                pod_ip: status.pod_ip,
                container_statuses: statuses(status.container_statuses),
                init_container_statuses: statuses(status.init_container_statuses),
                ephemeral_container_statuses: statuses(status.ephemeral_container_statuses),
                ..PodStatus::default()
            }),
        }))
    }
}

/// A `kube-node-lease` Lease as far as a heartbeat needs it: its identity
/// and when its kubelet last renewed it. Every node renews its Lease every
/// 10 s, and a renewal in time changes nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeLease {
    metadata: ObjectMeta,
    renewed: Option<types::Timestamp>,
}

impl NodeLease {
    /// The node it belongs to (named after it) and when its kubelet last
    /// renewed it.
    pub(crate) fn heartbeat(&self) -> Option<(String, types::Timestamp)> {
        Some((self.metadata.name.clone()?, self.renewed?))
    }
}

read_as!(NodeLease, Lease, metadata);

impl<'de> Deserialize<'de> for NodeLease {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: Identity,
            spec: Option<Spec>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Identity {
            name: Option<String>,
            namespace: Option<String>,
            uid: Option<String>,
            resource_version: Option<String>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Spec {
            renew_time: Option<MicroTime>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let Identity {
            name,
            namespace,
            uid,
            resource_version,
        } = raw.metadata;
        Ok(NodeLease {
            metadata: ObjectMeta {
                name,
                namespace,
                uid,
                resource_version,
                ..ObjectMeta::default()
            },
            renewed: raw
                .spec
                .and_then(|spec| spec.renew_time)
                .map(|time| time.0.as_millisecond()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::reduce;

    #[test]
    fn a_pod_parsed_in_its_fields_reduces_as_the_whole_pod_does() {
        let mut compared = 0;
        for (path, value) in crate::observe::fixture_objects("Pod") {
            // (A few are trimmed past what the API's types accept.)
            let Ok(whole) = serde_json::from_value::<Pod>(value.clone()) else {
                continue;
            };
            let text = serde_json::to_string(&value).unwrap();
            let fields: PodFields = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{path} does not parse in its fields: {e}"));
            assert_eq!(reduce::pod(&fields.0), reduce::pod(&whole), "{path}");
            let meta = kube::Resource::meta(&fields);
            assert_eq!(meta.resource_version, whole.metadata.resource_version);
            assert_eq!(meta.uid, whole.metadata.uid);
            // What no reduction reads is not kept.
            assert!(meta.managed_fields.is_none() && meta.annotations.is_none());
            compared += 1;
        }
        assert!(compared >= 20, "the fixtures' pods compared: {compared}");
    }

    #[test]
    fn a_pod_with_its_managed_fields_and_everything_else_keeps_only_what_is_read() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-7d4b9c-x2x", "namespace": "shop", "uid": "u-1",
                "resourceVersion": "912", "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]
            },
            "spec": {
                "nodeName": "n1",
                "volumes": [{"name": "token", "projected": {"sources": []}}],
                "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}],
                "containers": [{"name": "web", "image": "web:1",
                    "env": [{"name": "MODE", "value": "prod"}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "resources": {"limits": {"cpu": "500m"}}}]
            },
            "status": {
                "phase": "Running", "podIP": "10.0.0.7", "qosClass": "Burstable",
                "hostIPs": [{"ip": "192.168.0.3"}],
                "containerStatuses": [{"name": "web", "image": "web:1", "ready": true,
                    "restartCount": 2, "imageID": "sha256:abc", "containerID": "c://1",
                    "volumeMounts": [{"name": "token", "mountPath": "/var/run"}],
                    "state": {"running": {"startedAt": "2026-12-04T10:00:00Z"}}}]
            }
        });
        let fields: PodFields = serde_json::from_value(pod.clone()).unwrap();
        let whole: Pod = serde_json::from_value(pod).unwrap();
        assert_eq!(reduce::pod(&fields.0), reduce::pod(&whole));
        let spec = fields.0.spec.as_ref().unwrap();
        assert!(spec.volumes.is_none() && spec.tolerations.is_none());
        assert!(spec.containers[0].env.is_none() && spec.containers[0].readiness_probe.is_none());
        let status = fields.0.status.as_ref().unwrap();
        assert!(status.qos_class.is_none() && status.host_ips.is_none());
        let container = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(container.restart_count, 2);
        assert!(container.image_id.is_empty() && container.volume_mounts.is_none());

        // A pod without metadata, or with a field of the wrong type, is
        // refused.
        assert!(serde_json::from_str::<PodFields>(r#"{"spec": {}}"#).is_err());
        assert!(serde_json::from_str::<PodFields>(r#"{"metadata": {"name": 3}}"#).is_err());
    }

    /// A node's Lease as a kubelet writes it, with its managed fields.
    const KUBELET_LEASE: &str = r#"{
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": "worker-7", "namespace": "kube-node-lease",
            "uid": "5d0b1c1e-2f7a-4f43-9d0e-1d0f8f1a2b3c", "resourceVersion": "48213",
            "creationTimestamp": "2026-12-04T10:00:00Z",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "worker-7",
                "uid": "0b6f6c8e-1111-2222-3333-444455556666"}],
            "managedFields": [{"manager": "kubelet", "operation": "Update",
                "apiVersion": "coordination.k8s.io/v1", "time": "2026-12-04T10:00:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:ownerReferences": {
                    ".": {}, "k:{\"uid\":\"0b6f6c8e\"}": {}}},
                    "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {},
                    "f:renewTime": {}}}}]
        },
        "spec": {"holderIdentity": "worker-7", "leaseDurationSeconds": 40,
            "renewTime": "2026-12-04T10:05:30.250000Z"}
    }"#;

    #[test]
    fn a_node_lease_keeps_its_identity_and_renewal_and_nothing_else() {
        let lease: NodeLease = serde_json::from_str(KUBELET_LEASE).unwrap();
        let renewed = "2026-12-04T10:05:30.25Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_millisecond();
        assert_eq!(lease.heartbeat(), Some(("worker-7".to_string(), renewed)));
        let meta = kube::Resource::meta(&lease);
        assert_eq!(meta.resource_version.as_deref(), Some("48213"));
        assert_eq!(meta.namespace.as_deref(), Some("kube-node-lease"));
        assert!(meta.uid.is_some());
        assert!(meta.managed_fields.is_none() && meta.owner_references.is_none());
        // It reads the same path as the full type.
        assert_eq!(
            <NodeLease as kube::Resource>::url_path(&(), Some("kube-node-lease")),
            <Lease as kube::Resource>::url_path(&(), Some("kube-node-lease"))
        );

        // A Lease not yet renewed is no heartbeat; one without metadata is
        // refused.
        let unrenewed: NodeLease =
            serde_json::from_str(r#"{"metadata": {"name": "n1"}, "spec": {}}"#).unwrap();
        assert_eq!(unrenewed.heartbeat(), None);
        let bare: NodeLease = serde_json::from_str(r#"{"metadata": {"name": "n1"}}"#).unwrap();
        assert_eq!(bare.heartbeat(), None);
        assert!(serde_json::from_str::<NodeLease>(r#"{"spec": {}}"#).is_err());
    }
}
