//! `verdict diff`: two status policies over the same objects from files,
//! and where their verdicts differ — what a shadow shows on a live
//! cluster, offline.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use super::eval::{InputArgs, Read};
use crate::error::{Error, Result};
use crate::plugins::{Delivered, Limits, Mode, Registry, Runtime, Slot, World};
use crate::shadow::differing_fields;

/// The arguments of `verdict diff`.
#[derive(Debug, Clone, clap::Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// The two status policies to compare (component files): the first as
    /// the one serving, the second as its candidate.
    #[arg(long, num_args = 2, required = true, value_names = ["A", "B"])]
    pub plugins: Vec<PathBuf>,

    /// Print the differences as JSON.
    #[arg(long)]
    pub json: bool,

    /// Folder for the compiled-code cache [default: `code-cache` in the
    /// user's cache folder, `~/.cache/verdict`].
    #[arg(long = "cache-dir", env = "VERDICT_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// What `verdict diff` found: the text to print, and whether the policies
/// differ.
#[derive(Debug)]
pub struct Diff {
    pub report: String,
    pub differ: bool,
}

/// A component file loaded as a status policy.
fn load(registry: &Registry, path: &PathBuf, name: &str) -> Result<Arc<Slot>> {
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    let delivered = Delivered {
        source: path.display().to_string(),
        digest: crate::delivery::oci::digest_of(&bytes),
        mode: Mode::Active,
    };
    registry
        .install(name, &bytes, "{}", None, delivered)
        .map_err(|r| Error::Invalid(format!("{}: {}", path.display(), r.error)))?;
    let slot = registry.get(name).expect("installed");
    match slot.current().map(|v| v.world()) {
        Some(World::Status) => Ok(slot),
        other => Err(Error::Invalid(format!(
            "{} is not a status policy (it implements {})",
            path.display(),
            other.map_or("nothing".into(), |w| w.to_string())
        ))),
    }
}

/// Run `verdict diff`.
pub fn run(args: &DiffArgs) -> Result<Diff> {
    let Read { inputs, now, .. } = args.input.read()?;
    let runtime = Arc::new(Runtime::new(
        &super::code_cache(args.cache_dir.as_deref()),
        Limits::default(),
    )?);
    let registry = Registry::new(runtime, None, Default::default());
    let a = load(&registry, &args.plugins[0], "a")?;
    let b = load(&registry, &args.plugins[1], "b")?;
    let answers = |slot: &Slot| -> Result<Vec<Value>> {
        Ok(crate::verdicts::evaluate(slot, &inputs, now, None)?
            .into_iter()
            .map(|r| match r {
                Ok(verdict) => serde_json::to_value(verdict).unwrap_or_default(),
                Err(refusal) => json!({"refused": refusal}),
            })
            .collect())
    };
    let (from_a, from_b) = (answers(&a)?, answers(&b)?);
    let mut differences = Vec::new();
    for ((input, va), vb) in inputs.iter().zip(&from_a).zip(&from_b) {
        let fields = differing_fields(va, vb);
        if fields.is_empty() {
            continue;
        }
        let app = format!("{}/{}", input.app.id.namespace, input.app.id.name);
        let by_field: serde_json::Map<String, Value> = fields
            .iter()
            .map(|f| (f.clone(), json!({"a": va.get(f), "b": vb.get(f)})))
            .collect();
        differences.push((app, by_field));
    }
    let differ = !differences.is_empty();
    let report = if args.json {
        let apps: Vec<Value> = differences
            .iter()
            .map(|(app, fields)| json!({"app": app, "fields": fields}))
            .collect();
        serde_json::to_string_pretty(&json!({"compared": inputs.len(), "differing": apps}))
            .unwrap_or_default()
            + "\n"
    } else {
        let mut out = String::new();
        for (app, fields) in &differences {
            for (field, values) in fields {
                let _ = writeln!(out, "{app}  {field}");
                let _ = writeln!(out, "  - {}", values["a"]);
                let _ = writeln!(out, "  + {}", values["b"]);
            }
        }
        let _ = writeln!(out, "{} of {} apps differ", differences.len(), inputs.len());
        out
    };
    Ok(Diff { report, differ })
}
