//! `verdict crds`: the CustomResourceDefinitions of verdict's resources,
//! generated from their Rust types — printed as YAML documents, or written
//! one file a resource into a folder (the chart's `crds/`, which
//! `cargo xtask crds` keeps in step with the types).

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::error::{Error, Result};

/// Where to put the definitions.
#[derive(Debug, Clone, clap::Args)]
pub struct CrdsArgs {
    /// Write each definition to `<plural>-crd.yaml`-style files in this
    /// folder (`task-crd.yaml`, …) instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Every resource verdict defines, each with the file the chart keeps it in.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("task-crd.yaml", crate::tasks::model::TaskResource::crd()),
        (
            "policy-crd.yaml",
            without_nulls(crate::delivery::crd::PolicyResource::crd()),
        ),
        (
            "vmreplicaset-crd.yaml",
            without_nulls(crate::lifecycle::crd::VmReplicaSetResource::crd()),
        ),
        (
            "vmdeployment-crd.yaml",
            without_nulls(crate::lifecycle::crd::VmDeploymentResource::crd()),
        ),
        (
            "server-crd.yaml",
            without_nulls(crate::lifecycle::crd::ServerResource::crd()),
        ),
    ]
}

/// A definition whose fields take no `null`: an absent value is left out,
/// never written as null, and the server prunes a null it is sent — so
/// a status written with a null reads back as the one compared with it.
fn without_nulls(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(fields) => {
                fields.remove("nullable");
                fields.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).unwrap_or_default();
    for version in value["spec"]["versions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        strip(&mut version["schema"]);
    }
    serde_json::from_value(value).unwrap_or(crd)
}

/// A definition as the chart's file holds it: a header that says where it
/// comes from, then the YAML.
pub fn file_text(crd: &CustomResourceDefinition) -> String {
    let yaml = serde_yaml_ng::to_string(crd).unwrap_or_default();
    format!(
        "# The `{}` resource of verdict, generated from its Rust type by\n\
         # `cargo xtask crds` (`verdict crds`): change the type, not this file.\n{yaml}",
        crd.spec.names.kind
    )
}

/// Print every definition, or write each to its file.
pub fn run(args: &CrdsArgs) -> Result<String> {
    let all = all();
    match &args.out {
        None => Ok(all
            .iter()
            .map(|(_, crd)| format!("---\n{}", file_text(crd)))
            .collect()),
        Some(folder) => {
            let mut written = String::new();
            for (file, crd) in &all {
                let path = folder.join(file);
                std::fs::write(&path, file_text(crd)).map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
                written.push_str(&format!("wrote {}\n", path.display()));
            }
            Ok(written)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chart installs exactly what the types define.
    #[test]
    fn the_charts_definitions_are_the_types() {
        let folder =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/chart/verdict/crds");
        for (file, crd) in all() {
            let kept = std::fs::read_to_string(folder.join(file)).unwrap();
            assert!(
                kept == file_text(&crd),
                "deploy/chart/verdict/crds/{file} differs from its Rust type: run `cargo xtask crds`"
            );
        }
    }

    /// A status is the controller's to fill as it learns: the API server
    /// refuses none for a field it does not know yet (a status that
    /// requires one makes every early write a 422).
    #[test]
    fn no_status_requires_a_field() {
        for (file, crd) in all() {
            let crd = serde_json::to_value(&crd).unwrap();
            for version in crd["spec"]["versions"].as_array().unwrap() {
                let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"];
                assert!(
                    status["required"].is_null(),
                    "{file}: the status requires {}",
                    status["required"]
                );
            }
        }
    }
}
