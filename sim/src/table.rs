//! Server-side printing: the `Table` kubectl asks for (`Accept:
//! application/json;as=Table;g=meta.k8s.io;v=v1`), with the columns
//! `kubectl get` shows for pods, deployments and nodes, a custom resource's
//! printer columns as its definition declares them, and name and age for
//! the rest.

use std::time::SystemTime;

use serde_json::{Value, json};

use crate::resources::Resource;
use crate::store::Store;

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

/// The `additionalPrinterColumns` of a custom resource's version, as its
/// definition in the store declares them (none for built-in kinds).
pub fn printer_columns(store: &Store, resource: &Resource) -> Vec<Value> {
    let Some(crds) =
        crate::resources::find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    else {
        return Vec::new();
    };
    if crate::resources::RESOURCES
        .iter()
        .any(|r| std::ptr::eq(r, resource))
    {
        return Vec::new();
    }
    let name = format!("{}.{}", resource.plural, resource.group);
    let Ok(crd) = store.get(crds, "", &name) else {
        return Vec::new();
    };
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v["name"] == resource.version)
        .and_then(|v| v["additionalPrinterColumns"].as_array().cloned())
        .unwrap_or_default()
}

/// The values a JSON path of a printer column names in `object` — the
/// forms definitions use: `.a.b`, `.a[0].b`, `.a[*].b` and
/// `.a[?(@.type=='Ready')].status`.
fn at_path<'a>(object: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![object];
    let mut rest = path.trim().trim_start_matches('.');
    while !rest.is_empty() {
        let (step, after) = match (rest.find('.'), rest.find('[')) {
            (_, Some(0)) => {
                let close = rest.find(']').map_or(rest.len(), |c| c + 1);
                rest.split_at(close)
            }
            (Some(dot), Some(bracket)) if bracket < dot => rest.split_at(bracket),
            (Some(dot), _) => rest.split_at(dot),
            (None, Some(bracket)) => rest.split_at(bracket),
            (None, None) => (rest, ""),
        };
        rest = after.trim_start_matches('.');
        current = if let Some(inner) = step.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            let items = current.into_iter().filter_map(Value::as_array).flatten();
            if inner == "*" {
                items.collect()
            } else if let Ok(index) = inner.parse::<usize>() {
                items.skip(index).take(1).collect()
            } else if let Some(filter) =
                inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
            {
                let (field, wanted) = filter.split_once("==").unwrap_or((filter, ""));
                let wanted = wanted.trim().trim_matches(|c| c == '\'' || c == '"');
                items
                    .filter(|item| item[field.trim()].as_str() == Some(wanted))
                    .collect()
            } else {
                Vec::new()
            }
        } else {
            current
                .into_iter()
                .map(|value| &value[step])
                .filter(|value| !value.is_null())
                .collect()
        };
    }
    current
}

/// A cell of a printer column: the path's values (joined when several),
/// a `date` as an age.
fn cell(object: &Value, column: &Value) -> Value {
    let values = at_path(object, column["jsonPath"].as_str().unwrap_or_default());
    match values.as_slice() {
        [] => Value::Null,
        [one] if column["type"] == "date" => json!(age(&json!({
            "metadata": {"creationTimestamp": one}
        }))),
        [one] => (*one).clone(),
        many => json!(
            many.iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// A `Table` of objects of one resource: the columns `kubectl get` shows
/// for pods, deployments and nodes; for a custom resource its name and its
/// definition's printer columns (`printer`, from [`printer_columns`]) or
/// its age; name and age for the rest.
pub fn table(
    resource: &Resource,
    printer: &[Value],
    objects: &[Value],
    resource_version: u64,
) -> Value {
    if !printer.is_empty() {
        let mut columns = vec![column("Name", "string", 0)];
        columns.extend(printer.iter().map(|c| {
            let kind = match c["type"].as_str() {
                Some("date") | None => "string",
                Some(other) => other,
            };
            column(
                c["name"].as_str().unwrap_or_default(),
                kind,
                c["priority"].as_u64().unwrap_or(0) as u8,
            )
        }));
        let rows = objects
            .iter()
            .map(|o| {
                let mut cells = vec![json!(text(o, "/metadata/name"))];
                cells.extend(printer.iter().map(|c| cell(o, c)));
                row_of(o, cells)
            })
            .collect();
        return table_of(columns, rows, resource_version);
    }
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
    let rows: Vec<Value> = objects.iter().map(|o| row_of(o, row(o))).collect();
    table_of(columns, rows, resource_version)
}

fn row_of(object: &Value, cells: Vec<Value>) -> Value {
    json!({
        "cells": cells,
        "object": { "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"] },
    })
}

fn table_of(columns: Vec<Value>, rows: Vec<Value>, resource_version: u64) -> Value {
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": resource_version.to_string() },
        "columnDefinitions": columns, "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_column_paths_read_what_definitions_name() {
        let vm = json!({
            "metadata": {"name": "db-0"},
            "status": {
                "printableStatus": "Running",
                "conditions": [{"type": "Paused", "status": "False"}, {"type": "Ready", "status": "True"}],
                "interfaces": [{"ipAddress": "10.0.0.9"}, {"ipAddress": "10.0.0.10"}],
            },
        });
        let one = |path: &str| at_path(&vm, path).into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(one(".status.printableStatus"), vec![json!("Running")]);
        assert_eq!(
            one(".status.conditions[?(@.type=='Ready')].status"),
            vec![json!("True")]
        );
        assert_eq!(
            one(".status.interfaces[1].ipAddress"),
            vec![json!("10.0.0.10")]
        );
        assert_eq!(one(".status.interfaces[*].ipAddress").len(), 2);
        assert!(one(".status.missing").is_empty());
        assert!(one(".status.conditions[?(@.type=='Gone')].status").is_empty());
        let column =
            json!({"name": "IPs", "type": "string", "jsonPath": ".status.interfaces[*].ipAddress"});
        assert_eq!(cell(&vm, &column), json!("10.0.0.9,10.0.0.10"));
        assert_eq!(
            cell(
                &vm,
                &json!({"name": "X", "type": "string", "jsonPath": ".spec.x"})
            ),
            Value::Null
        );
    }
}
