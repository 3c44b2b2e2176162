//! A set read and written, and the statuses and conditions of the
//! delivery's resources.

use super::*;
use crate::lifecycle::deployment::duration;
use std::time::Duration;

pub(crate) fn set_object(spec: Value) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "VMReplicaSet",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "generation": 3},
        "spec": spec,
    })
}

pub(crate) fn template() -> Value {
    json!({
        "metadata": {"labels": {"app": "web"}, "annotations": {"team": "shop"}},
        "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
    })
}

#[test]
fn a_set_reads_whole_and_makes_its_machines() {
    let set = VmReplicaSet::read(&set_object(json!({
        "replicas": 3,
        "template": template(),
        "environment": [{"name": "jdk", "version": "21"}],
        "rollout": {"maxUnavailable": "50%", "order": "newest-first"},
        "lostInstance": "scale-down",
        "offline": ["web-1"],
        "paused": true,
    })))
    .unwrap();
    assert_eq!(
        (set.replicas, set.generation, set.lost),
        (3, 3, Lost::ScaleDown)
    );
    assert_eq!(set.spec.max_unavailable, Share::Percent(50));
    assert_eq!(set.spec.order, Order::NewestFirst);
    assert_eq!(set.offline, ["web-1"]);
    assert!(set.spec.paused);
    assert_eq!(set.spec.environment[0].version, "21");

    let server = set.server("web-0", &set.spec.environment, Some("1.0"));
    assert_eq!(server["kind"], "Server");
    assert_eq!(
        server["metadata"]["labels"],
        json!({"verdict.dev/vmreplicaset": "web"})
    );
    assert_eq!(
        server["metadata"]["finalizers"],
        json!(["verdict.dev/cleanup"])
    );
    assert_eq!(server["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(
        server["spec"],
        json!({"replicaSet": "web", "environment": [{"name": "jdk", "version": "21"}], "code": "1.0"})
    );
    let vm = set.machine("web-0", "s-1");
    assert_eq!(
        vm["metadata"]["labels"],
        json!({"app": "web", "verdict.dev/vmreplicaset": "web"})
    );
    assert_eq!(vm["metadata"]["annotations"]["verdict.dev/server"], "web-0");
    assert_eq!(vm["metadata"]["annotations"]["team"], "shop");
    assert_eq!(vm["metadata"]["finalizers"], json!(["verdict.dev/cleanup"]));
    assert_eq!(
        vm["metadata"]["ownerReferences"],
        json!([{"apiVersion": "verdict.dev/v1alpha1", "kind": "Server", "name": "web-0",
            "uid": "s-1", "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(vm["spec"], template()["spec"]);

    // Defaults: one instance, one out of service at a time.
    let plain = VmReplicaSet::read(&set_object(json!({"template": template()}))).unwrap();
    assert_eq!((plain.replicas, plain.lost), (1, Lost::Repair));
    assert_eq!(plain.spec.max_unavailable, Share::Count(1));
}

#[test]
fn a_set_adopts_a_vm_no_controller_owns_and_no_other() {
    let set = VmReplicaSet::read(&set_object(json!({"replicas": 2, "template": template(),
        "selector": {"matchLabels": {"tier": "legacy"}}})))
    .unwrap();
    let free = json!({"metadata": {"name": "old", "resourceVersion": "7",
        "ownerReferences": [{"kind": "ConfigMap", "name": "notes", "uid": "u-2"}],
        "finalizers": ["example.com/keep"]}});
    assert_eq!(
        set.adoption(&free, None),
        None,
        "not before its Server is made"
    );
    let adoption = set.adoption(&free, Some("s-9")).unwrap();
    assert_eq!(adoption["resourceVersion"], "7", "on the version read");
    assert_eq!(adoption["labels"][SET_LABEL], "web");
    assert_eq!(adoption["annotations"][SERVER], "old");
    assert_eq!(adoption["ownerReferences"][1], server_owner("old", "s-9"));
    assert_eq!(
        adoption["finalizers"],
        json!(["example.com/keep", FINALIZER])
    );
    let owned = json!({"metadata": {"name": "pooled",
        "ownerReferences": [{"kind": "VirtualMachinePool", "name": "db", "uid": "u-3", "controller": true}]}});
    assert_eq!(set.adoption(&owned, Some("s-9")), None);
    let going = json!({"metadata": {"name": "going", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
    assert_eq!(set.adoption(&going, Some("s-9")), None);
}

#[test]
fn a_servers_conditions_say_whether_it_serves_moves_or_failed() {
    use crate::lifecycle::instance::Recorded;
    use crate::lifecycle::lists::CurrentList;
    use crate::lifecycle::model::{Next, Task};
    use crate::wit::lifecycle::Stage;
    let of = |conditions: &Value, kind: &str| -> (String, String) {
        let c = conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .unwrap();
        (
            c["status"].as_str().unwrap().to_string(),
            c["reason"].as_str().unwrap().to_string(),
        )
    };
    let serving = Recorded {
        stage: Some(Stage::Serving),
        ..Recorded::default()
    };
    // As the status writes them.
    let server_conditions = |recorded: &Recorded, observed, generation, now| {
        serde_json::to_value(server_conditions(recorded, observed, generation, now)).unwrap()
    };
    let at_rest = server_conditions(&serving, (true, true), 2, 0);
    assert_eq!(of(&at_rest, "Ready"), ("True".into(), "InService".into()));
    assert_eq!(
        of(&at_rest, "Progressing"),
        ("False".into(), "AtRest".into())
    );
    assert_eq!(
        of(&at_rest, "Degraded"),
        ("False".into(), "AsExpected".into())
    );
    assert_eq!(at_rest[0]["observedGeneration"], 2);
    let lost_node = server_conditions(&serving, (true, false), 2, 0);
    assert_eq!(
        of(&lost_node, "Ready"),
        ("False".into(), "NodeNotHealthy".into())
    );

    let next = Next::Move {
        stage: Stage::Deploying,
        tasks: vec![Task {
            name: "deploy-code".into(),
            params: json!({}),
        }],
        environment: None,
        code: Some("2.0".into()),
        needs_approval: false,
        reason: "a test".into(),
    };
    let mut moving = serving.clone();
    moving.enter(CurrentList::entered(0, &next, 0).unwrap(), 0);
    let running = server_conditions(&moving, (true, true), 2, 0);
    assert_eq!(
        of(&running, "Ready"),
        ("False".into(), "NotInService".into())
    );
    assert_eq!(
        of(&running, "Progressing"),
        ("True".into(), "ListRunning".into())
    );
    assert_eq!(running[1]["message"], "deploying: deploy-code (attempt 1)");
    let list = moving.list.as_mut().unwrap();
    list.advance(
        crate::lifecycle::hooks::StepOutcome::Failed {
            message: "disk full".into(),
        },
        1,
    );
    let failed = server_conditions(&moving, (true, true), 2, 0);
    assert_eq!(
        of(&failed, "Degraded"),
        ("True".into(), "ListFailed".into())
    );
    assert_eq!(
        failed[2]["message"],
        "deploying failed at deploy-code: disk full"
    );
}

#[test]
fn a_set_that_cannot_be_carried_out_says_why() {
    let refused = |spec: Value| VmReplicaSet::read(&set_object(spec)).unwrap_err();
    assert!(refused(json!({})).contains("spec.template.spec is missing"));
    assert!(
        refused(json!({"template": template(), "rollout": {"maxUnavailable": 0}}))
            .contains("maxUnavailable and maxSurge are both 0")
    );
    assert!(
        refused(json!({"template": template(), "rollout": {"maxSurge": "x"}}))
            .starts_with("spec.rollout.maxSurge: `x` is not a share")
    );
    let surging = VmReplicaSet::read(&set_object(
        json!({"template": template(), "rollout": {"maxUnavailable": 0, "maxSurge": "25%"}}),
    ))
    .unwrap();
    assert_eq!(
        (surging.spec.max_unavailable, surging.spec.max_surge),
        (Share::Count(0), Share::Percent(25))
    );
    assert!(
        refused(json!({"template": template(), "lostInstance": "ignore"}))
            .contains("spec.lostInstance: unknown variant `ignore`")
    );
    assert!(
        refused(json!({"template": template(), "environment": [{"name": "jdk"}]}))
            .starts_with("spec.environment[0]: missing field `version`")
    );
}

#[test]
fn new_instances_take_the_lowest_free_number_and_durations_read() {
    assert_eq!(instance_name("web", ["web-0", "web-2"]), "web-1");
    assert_eq!(instance_name("web", []), "web-0");
    assert_eq!(duration("10m"), Ok(Duration::from_secs(600)));
    assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(duration("2h"), Ok(Duration::from_secs(7200)));
    assert!(duration("10").is_err());
    assert!(duration("m").is_err());
    assert!(duration("1d").is_err());
    // Many digits (the CRD's pattern allows them) are refused in words,
    // never multiplied past u64.
    for long in [
        "99999999999999999999h",
        "5124095576030432h",
        "8784h1",
        "8785h",
    ] {
        assert!(duration(long).is_err(), "{long}");
    }
    assert!(
        duration("5124095576030432h")
            .unwrap_err()
            .contains("longer than a year")
    );
    assert_eq!(duration("8784h"), Ok(Duration::from_secs(8784 * 3600)));
}
