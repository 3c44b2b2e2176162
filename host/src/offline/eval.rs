//! `verdict eval`: the status policy over objects read from files, printed
//! as a table or as JSON.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::Value;

use super::PolicyArgs;
use crate::error::{Error, Result};
use crate::observe::Grouping;
use crate::observe::objects::{Objects, documents, substitute_now};
use crate::tasks::TaskRecord;
use crate::time::parse_time;
use crate::verdicts::{self, view::AppView};
use crate::wit::types;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// The apps to judge: objects and task records from files, at a time.
#[derive(Debug, Clone, clap::Args)]
pub struct InputArgs {
    /// Files of Kubernetes objects: what `kubectl get namespaces,deployments,
    /// statefulsets,daemonsets,pods,nodes -A -o json` (or `-o yaml`) prints,
    /// with KubeVirt's and CDI's objects and those of `--resource` kinds.
    #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
    pub objects: Vec<PathBuf>,

    /// A file of task records (a YAML or JSON list).
    #[arg(long, value_name = "FILE")]
    pub tasks: Option<PathBuf>,

    /// The evaluation time, RFC 3339 [default: now]. `@now` placeholders in
    /// the files are replaced relative to it.
    #[arg(long, value_name = "TIME")]
    pub now: Option<String>,

    /// How pods are grouped into apps: `label=KEY`, `owner` or `namespace`.
    #[arg(
        long,
        value_name = "RULE",
        default_value = "label=app.kubernetes.io/instance"
    )]
    pub group_by: Grouping,

    /// A further kind read as objects of their own, `group/version/Kind`
    /// (repeatable; KubeVirt's and CDI's kinds always are).
    #[arg(long = "resource", value_name = "KIND")]
    pub resources: Vec<crate::observe::resources::ResourceRef>,
}

/// The apps read: their inputs, the evaluation time, and the kinds of
/// object that were not observed (by count).
pub(crate) struct Read {
    pub inputs: Vec<crate::wit::status::AppInput>,
    pub now: types::Timestamp,
    pub skipped: std::collections::BTreeMap<String, usize>,
}

impl InputArgs {
    /// Read the files into the apps' inputs.
    pub(crate) fn read(&self) -> Result<Read> {
        let now = match &self.now {
            Some(text) => parse_time(text).map_err(Error::input("--now"))?,
            None => crate::time::now(),
        };
        let mut kinds = crate::observe::resources::defaults();
        kinds.extend(self.resources.iter().cloned());
        let mut objects = Objects::new(self.group_by.clone(), kinds);
        objects
            .read(&self.objects, now)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let tasks = match &self.tasks {
            Some(path) => read_tasks(path, now)?,
            None => Vec::new(),
        };
        Ok(Read {
            inputs: objects.snapshot.apps(&tasks, &[], now),
            now,
            skipped: objects.skipped,
        })
    }
}

/// The arguments of `verdict eval`.
#[derive(Debug, Clone, clap::Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub input: InputArgs,

    /// Settings for the policy, as a JSON object.
    #[arg(long, value_name = "JSON")]
    pub settings: Option<String>,

    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,

    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// Read a file of task records, substituting `@now` placeholders.
pub(crate) fn read_tasks(path: &PathBuf, now: types::Timestamp) -> Result<Vec<types::Task>> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let mut tasks = Vec::new();
    for mut document in documents(path, &text).map_err(Error::input(path.display().to_string()))? {
        substitute_now(&mut document, now);
        let items = match document {
            Value::Array(items) => items,
            other => vec![other],
        };
        for (i, item) in items.into_iter().enumerate() {
            let record: TaskRecord = serde_path_to_error::deserialize(item).map_err(|e| {
                let what = format!("{}: task {i}: {}", path.display(), e.path());
                Error::input(what)(e.into_inner())
            })?;
            tasks.push(
                record
                    .to_task()
                    .map_err(Error::input(path.display().to_string()))?,
            );
        }
    }
    Ok(tasks)
}

/// `--settings`, when given, must be a JSON object.
pub(crate) fn check_settings(settings: Option<&str>) -> Result<()> {
    if let Some(settings) = settings {
        let parsed: Value =
            serde_json::from_str(settings).map_err(Error::input("--settings is not JSON"))?;
        if !parsed.is_object() {
            return Err(Error::Invalid("--settings must be a JSON object".into()));
        }
    }
    Ok(())
}

/// Run `verdict eval`, returning what to print.
pub fn run(args: &EvalArgs) -> Result<String> {
    check_settings(args.settings.as_deref())?;
    let Read {
        inputs,
        now,
        skipped,
    } = args.input.read()?;
    let slot = args.policy.status_policy()?;
    if let (Some(settings), Some(version)) = (&args.settings, slot.current()) {
        super::checked_settings(&version, settings).map_err(Error::Invalid)?;
    }
    let verdicts = verdicts::evaluate(&slot, &inputs, now, args.settings.as_deref())?;

    let mut views = Vec::new();
    let mut refused = Vec::new();
    for (input, verdict) in inputs.iter().zip(&verdicts) {
        match verdict {
            Ok(v) => views.push(AppView::from(v)),
            Err(e) => refused.push(format!(
                "{}/{}: {e}",
                input.app.id.namespace, input.app.id.name
            )),
        }
    }
    Ok(match args.output {
        Format::Json => {
            let body = serde_json::json!({ "apps": views, "refused": refused, "skipped": skipped });
            serde_json::to_string_pretty(&body).unwrap_or_default() + "\n"
        }
        Format::Table => table(&views, &refused, &skipped),
    })
}

fn table(
    views: &[AppView],
    refused: &[String],
    skipped: &std::collections::BTreeMap<String, usize>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<32} {:<12} {:<7} DISPLAY", "APP", "STABLE", "READY");
    for app in views {
        let _ = writeln!(
            out,
            "{:<32} {:<12} {:<7} {}",
            format!("{}/{}", app.namespace, app.name),
            app.stable,
            format!("{}/{}", app.ready_replicas, app.expected_replicas),
            app.display.text
        );
        for pod in &app.groups {
            let _ = writeln!(
                out,
                "  pod {:<40} {:<19} {:<26} {}",
                pod.name,
                pod.status,
                pod.reason,
                pod.message.as_deref().unwrap_or("")
            );
            for c in &pod.instances {
                let role = if c.app_instance { "" } else { " (tool)" };
                let _ = writeln!(
                    out,
                    "    container {:<27} {:<19} {:<26} restarts={}{}",
                    format!("{}{role}", c.name),
                    c.status,
                    c.reason.as_deref().unwrap_or(""),
                    c.restart_count,
                    c.message
                        .as_deref()
                        .map(|m| format!("  {m}"))
                        .unwrap_or_default()
                );
            }
        }
        for object in &app.objects {
            let what = format!("{} {}", object.kind, object.name);
            let stage = object.stage.map(|s| format!(" [{s}]")).unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<44} {:<19} {:<26} {}",
                format!("{what}{stage}"),
                object.status.unwrap_or("-"),
                object.reason.as_deref().unwrap_or(""),
                object.message.as_deref().unwrap_or("")
            );
        }
    }
    for line in refused {
        let _ = writeln!(out, "refused: {line}");
    }
    if !skipped.is_empty() {
        let kinds: Vec<String> = skipped.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let _ = writeln!(out, "not observed: {}", kinds.join(", "));
    }
    out
}
