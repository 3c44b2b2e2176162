//! `verdict test`: policy test cases. A case file (YAML) lists cases, each
//! with its input (objects inline or from files, tasks, `now`, settings)
//! and the verdict fields it expects; only the fields named are compared.
//!
//! ```yaml
//! cases:
//!   - name: a crash-looping pod puts its app in panic
//!     rationale: the only replica cannot become ready by waiting
//!     now: 2026-01-01T00:00:00Z
//!     files: [fixtures/pod-crashloop.yaml]
//!     expect:
//!       shop/web:
//!         stable: panic
//!         groups:
//!           web-1: { status: running-restarting, reason: CrashLoopBackOff }
//! ```
//!
//! Pods are matched by name under `groups`, containers by name under
//! `instances`, objects by `Kind/name` under `objects`. A case may name
//! further kinds to read as objects (`resources: [cert-manager.io/v1/Certificate]`)
//! and overrides in force (`overrides:`, as `/v1/overrides` shows them).
//!
//! The cases of a failover policy expect decisions by node name, as
//! `/v1/failover` shows them (the policy is asked about every node and
//! every pod and VM instance placed on one):
//!
//! ```yaml
//!   - name: a node gone for ten minutes is offline
//!     objects: [...nodes and pods...]
//!     expect:
//!       n1: { health: offline, rule: offline }
//! ```
//!
//! The cases of an admission policy carry a task `request` (the body of
//! `POST /v1/tasks`) or an AdmissionReview's `review` (its `request`), and
//! expect the answer — `decision` (`allow`, `deny`, `require-approval`),
//! `reason`, `defaults`, `warnings`, `plan`; or `allowed`, `code`,
//! `message`, `patch`, `warnings`. The task's application and its verdict
//! (by the default status rules) come from the case's objects.
//!
//! The cases of a lifecycle policy carry an `instance` and its `target` (as
//! the instance routes show them) and expect the decision's fields —
//! `decision` (`stay`, `move`), `why`, `stage`, `tasks` (each a `name` and
//! `params`), `task-names`, `environment`, `code`, `needs-approval`,
//! `reason`:
//!
//! ```yaml
//!   - name: a running machine installs the environment
//!     instance: { namespace: shop, name: web-0, set: web, stage: requested,
//!                 since: 2026-01-01T00:00:00Z, machine: running }
//!     target: { environment: [{ name: jdk, version: "21" }] }
//!     expect:
//!       stage: initializing
//!       task-names: [install-environment]
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::PolicyArgs;
use crate::error::{Error, Result};
use crate::failover::model::Decided;
use crate::observe::objects::{Objects, documents, substitute_now};
use crate::observe::{Grouping, resources};
use crate::overrides::OverrideRecord;
use crate::plugins::{Slot, Version, World};
use crate::tasks::TaskRecord;
use crate::time::parse_time;
use crate::verdicts::{self, view::AppView};
use crate::wit::{admission, failover, status, types};

/// The default evaluation time of a case.
const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// The arguments of `verdict test`.
#[derive(Debug, Clone, clap::Args)]
pub struct TestArgs {
    /// Case files, or folders searched for `*.yaml` case files.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    #[command(flatten)]
    pub policy: PolicyArgs,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    /// The world whose policy runs the cases (`status`, `failover`,
    /// `admission`, `lifecycle`); else told by the cases (see
    /// [`world_of`]).
    #[serde(default)]
    world: Option<String>,
    cases: Vec<Case>,
}

/// The world a case file's cases are for: its `world:`, else an admission
/// policy's where a case carries a `request` or `review`, a lifecycle
/// policy's where one carries an `instance` or `target`, a failover
/// policy's where every expectation names a node (no `/`), else the status
/// policy's (apps are `namespace/name`).
fn world_of(file: &CaseFile) -> std::result::Result<World, String> {
    if let Some(world) = &file.world {
        return World::ALL
            .into_iter()
            .find(|w| w.file_stem() == world || w.name() == world)
            .ok_or_else(|| {
                format!("world: {world} is none of status, failover, admission, lifecycle")
            });
    }
    let cases = &file.cases;
    let world = if cases
        .iter()
        .any(|c| c.request.is_some() || c.review.is_some())
    {
        World::Admission
    } else if cases
        .iter()
        .any(|c| c.instance.is_some() || c.target.is_some())
    {
        World::Lifecycle
    } else if cases.iter().any(|c| !c.expect.is_empty())
        && cases
            .iter()
            .all(|c| c.expect.keys().all(|k| !k.contains('/')))
    {
        World::Failover
    } else {
        World::Status
    };
    Ok(world)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Case {
    name: String,
    /// Why the expectation is right, in one line.
    #[serde(default)]
    rationale: Option<String>,
    #[serde(default)]
    now: Option<String>,
    #[serde(default)]
    settings: Option<Value>,
    #[serde(default)]
    group_by: Option<String>,
    /// Further kinds read as objects (`group/version/Kind`), besides
    /// KubeVirt's and CDI's.
    #[serde(default)]
    resources: Vec<String>,
    /// Overrides in force (`instance`, `status`, `by`, `reason`, `at`,
    /// `expires_at`).
    #[serde(default)]
    overrides: Vec<Value>,
    /// Object files, relative to the case file.
    #[serde(default)]
    files: Vec<PathBuf>,
    #[serde(default)]
    objects: Vec<Value>,
    #[serde(default)]
    tasks: Vec<Value>,
    /// An admission policy's task request: `app`, `action`, `params`,
    /// `requested_by`.
    #[serde(default)]
    request: Option<Value>,
    /// An admission policy's AdmissionReview `request`, with the labels of
    /// its namespace when the case's objects have it.
    #[serde(default)]
    review: Option<Value>,
    /// A lifecycle policy's instance, as observed.
    #[serde(default)]
    instance: Option<crate::lifecycle::model::InstanceState>,
    /// A lifecycle policy's target for the instance.
    #[serde(default)]
    target: Option<crate::lifecycle::model::TargetState>,
    /// Expected fields: of each app's verdict (`namespace/name`), each
    /// node's decision (failover), or the answer (admission).
    expect: BTreeMap<String, Value>,
}

/// The outcome of a test run.
#[derive(Debug, Default)]
pub struct Outcome {
    pub passed: usize,
    pub failed: usize,
    pub report: String,
}

fn case_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found = Vec::new();
            collect_yaml(path, &mut found)?;
            found.sort();
            files.extend(found);
        } else if path.is_file() {
            files.push(path.clone());
        } else {
            return Err(Error::Invalid(format!(
                "{}: no such file or folder",
                path.display()
            )));
        }
    }
    Ok(files)
}

fn collect_yaml(dir: &Path, into: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
        let path = entry.map_err(Error::io(dir))?.path();
        if path.is_dir() {
            collect_yaml(&path, into)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            // Object files sit beside case files; case files say `cases:`.
            let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
            if text.lines().any(|l| l.starts_with("cases:")) {
                into.push(path);
            }
        }
    }
    Ok(())
}

/// Run every case of every file against the plugin named by `--policy`,
/// else each file against the policy of its world.
pub fn run(args: &TestArgs) -> Result<Outcome> {
    let files = case_files(&args.paths)?;
    let folder = args.policy.load()?;
    let named = match args.policy.policy.as_deref() {
        Some(name) => Some(folder.pick(Some(name), None)?),
        None => None,
    };
    let mut outcome = Outcome::default();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(Error::io(&file))?;
        let document = documents(&file, &text)
            .map_err(Error::input(file.display().to_string()))?
            .into_iter()
            .next()
            .unwrap_or(Value::Null);
        let cases: CaseFile = serde_path_to_error::deserialize(document).map_err(|e| {
            let what = format!("{}: {}", file.display(), e.path());
            Error::input(what)(e.into_inner())
        })?;
        let slot = match &named {
            Some(slot) => Ok(Arc::clone(slot)),
            None => world_of(&cases)
                .and_then(|world| folder.pick(None, Some(world)).map_err(|e| e.to_string())),
        };
        if let Ok(slot) = &slot {
            let version = slot
                .current()
                .map(|v| format!(" ({}@{})", v.info().name, v.info().version));
            let _ = writeln!(
                outcome.report,
                "--    {}: {}{}",
                file.display(),
                slot.name(),
                version.unwrap_or_default()
            );
        }
        for case in &cases.cases {
            let run = match &slot {
                Ok(slot) => run_case(slot, &file, case),
                Err(error) => Err(error.clone()),
            };
            let mismatches = match run {
                Ok(mismatches) => mismatches,
                Err(error) => vec![format!("could not run: {error}")],
            };
            if mismatches.is_empty() {
                outcome.passed += 1;
                let _ = writeln!(outcome.report, "ok    {}", case.name);
            } else {
                outcome.failed += 1;
                let _ = writeln!(outcome.report, "FAIL  {}  ({})", case.name, file.display());
                if let Some(rationale) = &case.rationale {
                    let _ = writeln!(outcome.report, "      why: {rationale}");
                }
                for m in mismatches {
                    let _ = writeln!(outcome.report, "      {m}");
                }
            }
        }
    }
    let _ = writeln!(
        outcome.report,
        "\n{} passed, {} failed",
        outcome.passed, outcome.failed
    );
    Ok(outcome)
}

/// What a case sets up: its time, objects, tasks and overrides.
struct Setup {
    now: types::Timestamp,
    objects: Objects,
    tasks: Vec<types::Task>,
    overrides: Vec<OverrideRecord>,
    settings: Option<String>,
}

fn run_case(slot: &Slot, file: &Path, case: &Case) -> std::result::Result<Vec<String>, String> {
    let setup = set_up(file, case)?;
    let version = slot
        .current()
        .ok_or_else(|| format!("plugin {} is not loaded", slot.name()))?;
    if let Some(settings) = &setup.settings {
        super::checked_settings(&version, settings)?;
    }
    let (actual, missing) = match version.world() {
        World::Status => (status_answers(slot, &setup)?, "no such app (evaluated"),
        World::Failover => (failover_answers(&version, &setup)?, "no such node (decided"),
        World::Admission => (
            admission_answer(&version, &setup, case)?,
            "no such field (answered",
        ),
        World::Lifecycle => (
            lifecycle_answer(&version, &setup, case)?,
            "no such field (answered",
        ),
    };
    let mut mismatches = Vec::new();
    for (key, expected) in &case.expect {
        match actual.get(key) {
            Some(got) => compare(key, expected, got, &mut mismatches),
            None => mismatches.push(format!(
                "{key}: {missing}: {})",
                actual.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
    }
    Ok(mismatches)
}

fn set_up(file: &Path, case: &Case) -> std::result::Result<Setup, String> {
    let now = parse_time(case.now.as_deref().unwrap_or(DEFAULT_NOW))?;
    let base = file.parent().unwrap_or(Path::new("."));
    let paths: Vec<PathBuf> = case.files.iter().map(|f| base.join(f)).collect();
    let grouping: Grouping = match &case.group_by {
        Some(rule) => rule.parse()?,
        None => Grouping::default(),
    };
    let mut kinds = resources::defaults();
    for text in &case.resources {
        kinds.push(text.parse()?);
    }
    let mut objects = Objects::new(grouping, kinds);
    objects.read(&paths, now).map_err(|e| e.to_string())?;
    for (i, object) in case.objects.iter().enumerate() {
        let mut object = object.clone();
        substitute_now(&mut object, now);
        objects
            .add(file, &format!("case {:?}, objects[{i}]", case.name), object)
            .map_err(|e| e.to_string())?;
    }
    let mut tasks = Vec::new();
    for (i, task) in case.tasks.iter().enumerate() {
        let mut task = task.clone();
        substitute_now(&mut task, now);
        let record: TaskRecord = serde_path_to_error::deserialize(task)
            .map_err(|e| format!("tasks[{i}]: {}: {}", e.path(), e.inner()))?;
        tasks.push(record.to_task()?);
    }
    let mut overrides = Vec::new();
    for (i, entry) in case.overrides.iter().enumerate() {
        let mut entry = entry.clone();
        substitute_now(&mut entry, now);
        let record: OverrideRecord = serde_path_to_error::deserialize(entry)
            .map_err(|e| format!("overrides[{i}]: {}: {}", e.path(), e.inner()))?;
        overrides.push(record);
    }
    Ok(Setup {
        now,
        objects,
        tasks,
        overrides,
        settings: case.settings.as_ref().map(Value::to_string),
    })
}

/// The applications of a case, with their overrides in force.
fn apps(setup: &Setup) -> Vec<status::AppInput> {
    let mut inputs = setup.objects.snapshot.apps(&setup.tasks, &[], setup.now);
    for input in &mut inputs {
        input.overrides = setup
            .overrides
            .iter()
            .filter(|o| o.namespace == input.app.id.namespace && o.app == input.app.id.name)
            .filter(|o| o.in_force(setup.now))
            .map(OverrideRecord::to_wit)
            .collect();
    }
    inputs
}

/// Each app's verdict, by `namespace/name`.
fn status_answers(
    slot: &Slot,
    setup: &Setup,
) -> std::result::Result<BTreeMap<String, Value>, String> {
    let inputs = apps(setup);
    let verdicts = verdicts::evaluate(slot, &inputs, setup.now, setup.settings.as_deref())
        .map_err(|e| e.to_string())?;
    let mut actual = BTreeMap::new();
    for (input, verdict) in inputs.iter().zip(verdicts) {
        let key = format!("{}/{}", input.app.id.namespace, input.app.id.name);
        let value = match verdict {
            Ok(v) => keyed(serde_json::to_value(AppView::from(&v)).unwrap_or_default()),
            Err(e) => serde_json::json!({ "refused": e }),
        };
        actual.insert(key, value);
    }
    Ok(actual)
}

/// Each node's decision, by node name.
fn failover_answers(
    version: &Version,
    setup: &Setup,
) -> std::result::Result<BTreeMap<String, Value>, String> {
    let snapshot = &setup.objects.snapshot;
    let nodes: Vec<&str> = snapshot.nodes.keys().map(String::as_str).collect();
    let (placements, instances) = crate::failover::placed(snapshot, &nodes);
    let input = failover::FailoverInput {
        nodes: snapshot.nodes.values().cloned().collect(),
        placements,
        instances,
        previous: Vec::new(),
        overrides: Vec::new(),
    };
    let decisions = version
        .decide(
            &version.context_with(setup.now, setup.settings.as_deref()),
            &input,
        )
        .map_err(|e| e.to_string())?;
    Ok(decisions
        .iter()
        .map(|d| {
            let view = serde_json::to_value(Decided::from_wit(d)).unwrap_or_default();
            (d.node.clone(), view)
        })
        .collect())
}

/// The answer to the case's task request or AdmissionReview, by field.
fn admission_answer(
    version: &Version,
    setup: &Setup,
    case: &Case,
) -> std::result::Result<BTreeMap<String, Value>, String> {
    let ctx = version.context_with(setup.now, setup.settings.as_deref());
    let answer = match (&case.request, &case.review) {
        (Some(request), None) => {
            let request: crate::tasks::model::NewTask =
                serde_json::from_value(request.clone()).map_err(|e| format!("request: {e}"))?;
            let id = crate::tasks::parse_app(&request.app)?;
            // An app not in the cluster yet is asked about as the host
            // asks: with nothing of it, in its namespace as observed.
            let key = (id.namespace.clone(), id.name.clone());
            let input = apps(setup)
                .into_iter()
                .find(|input| input.app.id == id)
                .or_else(|| setup.objects.snapshot.inputs_for([&key], setup.now).pop());
            let verdict = input.as_ref().map(|input| {
                let defaults = crate::native::Settings::parse("{}");
                crate::native::evaluate(&defaults, setup.now, input)
            });
            let tasks = setup
                .tasks
                .iter()
                .filter(|t| t.app == id)
                .cloned()
                .collect();
            let mut request = request;
            let spec = request.read_spec().map_err(|e| format!("request: {e}"))?;
            let input = admission::AdmissionInput {
                request: admission::TaskRequest {
                    app: id,
                    action: request.action,
                    params: Value::Object(request.params).to_string(),
                    spec: spec.to_wit(),
                    requested_by: request.requested_by,
                },
                app: input.map(|input| input.app),
                verdict,
                tasks,
            };
            let answer = version
                .admit_task(&ctx, &input)
                .map_err(|e| e.to_string())?;
            let (decision, reason) = match answer.decision {
                admission::Decision::Allow => ("allow", None),
                admission::Decision::Deny(reason) => ("deny", Some(reason)),
                admission::Decision::RequireApproval(reason) => ("require-approval", Some(reason)),
            };
            serde_json::json!({
                "decision": decision,
                "reason": reason,
                "defaults": serde_json::from_str::<Value>(&answer.defaults).unwrap_or(Value::String(answer.defaults)),
                "warnings": answer.warnings,
                "plan": answer.plan.iter().map(|s| serde_json::json!({"name": s.name, "description": s.description})).collect::<Vec<_>>(),
            })
        }
        (None, Some(review)) => {
            let namespace_labels = review["namespace"]
                .as_str()
                .and_then(|ns| setup.objects.snapshot.namespaces.get(ns).cloned());
            let input = admission::ReviewInput {
                request: review.to_string(),
                namespace_labels,
            };
            let answer = version.review(&ctx, &input).map_err(|e| e.to_string())?;
            serde_json::json!({
                "allowed": answer.allowed,
                "code": answer.code,
                "message": answer.message,
                "patch": answer.patch,
                "warnings": answer.warnings,
            })
        }
        _ => return Err("an admission case has a `request` or a `review`, one of them".into()),
    };
    let Value::Object(fields) = answer else {
        unreachable!("the answer is an object")
    };
    Ok(fields.into_iter().collect())
}

/// Turn the `groups` and `instances` lists into maps by name, so that
/// expectations can name the pod or container they are about.
fn keyed(mut view: Value) -> Value {
    fn by_name(list: &mut Value, inner: Option<&str>) {
        let Value::Array(items) = list.take() else {
            return;
        };
        let mut map = serde_json::Map::new();
        for mut item in items {
            if let Some(inner) = inner
                && let Some(nested) = item.get_mut(inner)
            {
                by_name(nested, None);
            }
            let name = item
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            map.insert(name, item);
        }
        *list = Value::Object(map);
    }
    if let Some(groups) = view.get_mut("groups") {
        by_name(groups, Some("instances"));
    }
    // Objects by `Kind/name` (a VM and its instance share a name).
    if let Some(Value::Array(items)) = view.get_mut("objects").map(Value::take) {
        let map = items
            .into_iter()
            .map(|item| {
                let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default();
                (format!("{}/{}", text("kind"), text("name")), item)
            })
            .collect();
        view["objects"] = Value::Object(map);
    }
    view
}

/// Compare only what `expected` names; report each difference with its path.
/// The decision on the case's instance, by field.
fn lifecycle_answer(
    version: &Version,
    setup: &Setup,
    case: &Case,
) -> std::result::Result<BTreeMap<String, Value>, String> {
    use crate::lifecycle::model::{self, Next, TargetState};
    let instance = case
        .instance
        .as_ref()
        .ok_or("a lifecycle case needs an `instance`")?;
    let target = case.target.clone().unwrap_or(TargetState {
        environment: Vec::new(),
        code: None,
        may_disrupt: false,
        released: false,
    });
    let ctx = version.context_with(setup.now, setup.settings.as_deref());
    let decision = version
        .next(&ctx, &model::input(instance, &target))
        .map_err(|e| e.to_string())?;
    let next = Next::from_wit(&decision);
    let mut answer = serde_json::to_value(&next).map_err(|e| e.to_string())?;
    if let Next::Move { tasks, .. } = &next {
        answer["task-names"] = tasks.iter().map(|t| t.name.as_str()).collect();
    }
    Ok(match answer {
        Value::Object(fields) => fields.into_iter().collect(),
        _ => BTreeMap::new(),
    })
}

fn compare(path: &str, expected: &Value, got: &Value, out: &mut Vec<String>) {
    match (expected, got) {
        (Value::Object(want), Value::Object(have)) => {
            for (key, want) in want {
                let here = format!("{path}.{key}");
                match have.get(key) {
                    Some(have) => compare(&here, want, have, out),
                    None => out.push(format!(
                        "{here}: expected {want}, but there is no such field or item"
                    )),
                }
            }
        }
        _ if expected == got => {}
        _ => out.push(format!("{path}: expected {expected}, got {got}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_fields_are_compared_and_each_difference_is_reported() {
        let expected = serde_json::json!({"stable": "panic", "groups": {"web-1": {"reason": "CrashLoopBackOff"}, "web-2": {}}});
        let got = keyed(serde_json::json!({
            "stable": "degraded", "display": {"text": "x"},
            "groups": [{"name": "web-1", "reason": "Error", "instances": [{"name": "c"}]}]
        }));
        let mut out = Vec::new();
        compare("shop/web", &expected, &got, &mut out);
        assert_eq!(
            out,
            [
                "shop/web.groups.web-1.reason: expected \"CrashLoopBackOff\", got \"Error\"",
                "shop/web.groups.web-2: expected {}, but there is no such field or item",
                "shop/web.stable: expected \"panic\", got \"degraded\"",
            ]
        );
        assert!(got["groups"]["web-1"]["instances"]["c"].is_object());
    }
}
