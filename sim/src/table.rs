//! Server-side printing: the `Table` kubectl asks for (`Accept:
//! application/json;as=Table;g=meta.k8s.io;v=v1`), with the columns
//! `kubectl get` shows for pods, deployments and nodes, and name and age for
//! the rest.

use std::time::SystemTime;

use serde_json::{Value, json};

use crate::resources::Resource;

/// Whether a request asks for a table.
pub fn wanted(accept: &str) -> bool {
    accept.contains("as=Table")
}

/// kubectl's short age: `42s`, `5m`, `3h`, `2d`.
fn age(object: &Value) -> String {
    let created = object
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok());
    let Some(created) = created else {
        return "<unknown>".into();
    };
    let s = SystemTime::now()
        .duration_since(created)
        .map_or(0, |d| d.as_secs());
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn column(name: &str, kind: &str, priority: u8) -> Value {
    json!({ "name": name, "type": kind, "format": if name == "Name" { "name" } else { "" }, "description": "", "priority": priority })
}

/// The STATUS column of a pod, as kubectl computes it.
fn pod_status(pod: &Value) -> String {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    for s in statuses.into_iter().flatten() {
        if let Some(reason) = s.pointer("/state/waiting/reason").and_then(Value::as_str) {
            return reason.into();
        }
        if let Some(reason) = s
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
        {
            return reason.into();
        }
    }
    let reason = text(pod, "/status/reason");
    if !reason.is_empty() {
        return reason.into();
    }
    let phase = text(pod, "/status/phase");
    if phase.is_empty() {
        "Pending".into()
    } else {
        phase.into()
    }
}

fn pod_row(pod: &Value) -> Vec<Value> {
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses
        .into_iter()
        .flatten()
        .filter(|s| s["ready"] == true)
        .count();
    let restarts: i64 = statuses
        .into_iter()
        .flatten()
        .filter_map(|s| s["restartCount"].as_i64())
        .sum();
    let or_none = |v: &str| {
        if v.is_empty() {
            "<none>".to_string()
        } else {
            v.to_string()
        }
    };
    vec![
        json!(text(pod, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(pod_status(pod)),
        json!(restarts),
        json!(age(pod)),
        json!(or_none(text(pod, "/status/podIP"))),
        json!(or_none(text(pod, "/spec/nodeName"))),
    ]
}

fn deployment_row(d: &Value) -> Vec<Value> {
    let n = |p: &str| d.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    vec![
        json!(text(d, "/metadata/name")),
        json!(format!(
            "{}/{}",
            n("/status/readyReplicas"),
            d.pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1)
        )),
        json!(n("/status/updatedReplicas")),
        json!(n("/status/availableReplicas")),
        json!(age(d)),
    ]
}

fn node_row(node: &Value) -> Vec<Value> {
    let ready = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .map(|c| text(c, "/status").to_string());
    let mut status = match ready.as_deref() {
        Some("True") => "Ready".to_string(),
        _ => "NotReady".to_string(),
    };
    if node.pointer("/spec/unschedulable") == Some(&json!(true)) {
        status.push_str(",SchedulingDisabled");
    }
    vec![
        json!(text(node, "/metadata/name")),
        json!(status),
        json!(age(node)),
    ]
}

/// The cells of one object's row.
type Row = fn(&Value) -> Vec<Value>;

/// A `Table` of objects of one resource.
pub fn table(resource: &Resource, objects: &[Value], resource_version: u64) -> Value {
    let (columns, row): (Vec<Value>, Row) = match resource.kind {
        "Pod" => (
            vec![
                column("Name", "string", 0),
                column("Ready", "string", 0),
                column("Status", "string", 0),
                column("Restarts", "integer", 0),
                column("Age", "string", 0),
                column("IP", "string", 1),
                column("Node", "string", 1),
            ],
            pod_row,
        ),
        "Deployment" => (
            vec![
                column("Name", "string", 0),
                column("Ready", "string", 0),
                column("Up-to-date", "integer", 0),
                column("Available", "integer", 0),
                column("Age", "string", 0),
            ],
            deployment_row,
        ),
        "Node" => (
            vec![
                column("Name", "string", 0),
                column("Status", "string", 0),
                column("Age", "string", 0),
            ],
            node_row,
        ),
        _ => (
            vec![column("Name", "string", 0), column("Age", "string", 0)],
            |o: &Value| vec![json!(text(o, "/metadata/name")), json!(age(o))],
        ),
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            json!({
                "cells": row(o),
                "object": { "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"] },
            })
        })
        .collect();
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": resource_version.to_string() },
        "columnDefinitions": columns, "rows": rows,
    })
}
