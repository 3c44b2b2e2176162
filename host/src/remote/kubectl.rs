//! `kubectl verdict`: the kubectl plugin — this binary, named
//! `kubectl-verdict` on the `PATH` (or `verdict kubectl …`). It reaches
//! verdict through the API server's service proxy with the user's
//! kubeconfig (no port-forward), so that RBAC on `services/proxy` says who
//! may; `--server URL` talks to a host directly instead.
//!
//! `apps` lists apps by status, `app` shows one (why, instances, recent
//! history), `rollout` draws a VM-hosted app's delivery as a tree — set,
//! deployment step and gate, instances grouped by stage with the step each
//! is on — in the manner of `kubectl argo rollouts get rollout` and
//! `clusterctl describe`, and `approve`, `promote`, `abort`, `retry`,
//! `skip` are people's actions on a rollout or an instance. `-w` asks
//! again every `--interval` and prints what changed (a tree is drawn
//! again).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::client::Client;
use super::{cause, columns, lasted, segment};
use crate::error::{Error, Result};
use crate::text::printable;

/// `kubectl verdict`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "kubectl verdict",
    bin_name = "kubectl verdict",
    version,
    about = "verdict's statuses and VM deliveries, through the API server"
)]
pub struct PluginCli {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// Where verdict is.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// verdict's Service, `NAMESPACE/NAME`, reached through the API
    /// server's service proxy.
    #[arg(
        long,
        env = "VERDICT_SERVICE",
        value_name = "NAMESPACE/NAME",
        default_value = "verdict-system/verdict",
        global = true
    )]
    pub service: String,
    /// Talk to verdict at this URL instead (a port-forward, a host outside
    /// the cluster).
    #[arg(long, env = "VERDICT_URL", value_name = "URL", global = true)]
    pub server: Option<String>,
    /// A bearer token verdict asks for, with `--server`.
    #[arg(
        long,
        env = "VERDICT_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub token: Option<String>,
    /// The kubeconfig file (default: as kubectl finds it).
    #[arg(long, value_name = "FILE", global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long, value_name = "NAME", global = true)]
    pub context: Option<String>,
    /// With `-w`, how often to ask again.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration, global = true)]
    pub interval: Duration,
}

/// Who asks for an action, and why.
#[derive(Debug, Clone, clap::Args)]
pub struct Asking {
    /// Who asks (default: the kubeconfig's user, else `$USER`).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Why, in words kept with the action.
    #[arg(long, value_name = "TEXT")]
    pub why: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Apps by status.
    Apps {
        /// Only this namespace (default: the context's).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Keep watching, printing each app whose status changes.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// One app: its status and why, its instances, its recent history.
    App {
        /// `NAMESPACE/NAME`.
        app: String,
    },
    /// A VM-hosted app's delivery as a tree: set, deployment step and
    /// gate, instances by stage with the step each is on.
    Rollout {
        /// The VMReplicaSet, `NAMESPACE/NAME`.
        set: String,
        /// Keep watching, drawing the tree again when it changes.
        #[arg(short = 'w', long)]
        watch: bool,
        /// Below the tree, this instance's task log: its last lists with
        /// every step.
        #[arg(long)]
        instance: Option<String>,
    },
    /// Approve the gate the rollout waits at, or (with --instance) an
    /// instance's list that waits for a person.
    Approve {
        set: String,
        #[arg(long)]
        instance: Option<String>,
        #[command(flatten)]
        asking: Asking,
    },
    /// Skip the rollout's remaining steps: the new code goes to every
    /// instance at the safe rate.
    Promote {
        set: String,
        #[command(flatten)]
        asking: Asking,
    },
    /// The instances that got the new code go back to the code released
    /// before.
    Abort {
        set: String,
        #[command(flatten)]
        asking: Asking,
    },
    /// Every failed instance (or the one named) runs its failed list again.
    Retry {
        set: String,
        #[arg(long)]
        instance: Option<String>,
        #[command(flatten)]
        asking: Asking,
    },
    /// The step an instance is on counts as done (a stuck step).
    Skip {
        set: String,
        #[arg(long)]
        instance: String,
        /// The step you saw in progress; refused if it has moved on.
        #[arg(long)]
        task: Option<String>,
        #[command(flatten)]
        asking: Asking,
    },
    /// An instance goes on from the stage you force (a request in its
    /// Server's spec: the lifecycle policy's list for it runs from where
    /// it is); a forced offline holds until lifted.
    Force {
        set: String,
        #[arg(long)]
        instance: String,
        /// The stage: requested, initializing, deploying, ready,
        /// gray-release, serving, unknown, offline, deleting or failed.
        #[arg(long)]
        stage: String,
        #[command(flatten)]
        asking: Asking,
    },
    /// The stage forced on an instance is lifted.
    Lift {
        set: String,
        #[arg(long)]
        instance: String,
        #[command(flatten)]
        asking: Asking,
    },
}

/// `NAMESPACE/NAME`, split.
fn namespaced<'a>(what: &'static str, text: &'a str) -> Result<(&'a str, &'a str)> {
    text.split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| Error::Config {
            key: what,
            message: format!("`{text}` is not `namespace/name`"),
        })
}

/// A value from a server as it is printed ([`printable`]).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => printable(s),
        Value::Null => String::new(),
        other => printable(&other.to_string()),
    }
}

/// Apps as rows: namespace, name, what a person should see, the stable
/// status, ready of expected, and why.
fn app_rows(apps: &[Value], with_namespace: bool) -> Vec<Vec<String>> {
    let mut rows = vec![if with_namespace {
        ["NAMESPACE", "NAME", "STATUS", "STABLE", "READY", "REASON"]
            .map(String::from)
            .to_vec()
    } else {
        ["NAME", "STATUS", "STABLE", "READY", "REASON"]
            .map(String::from)
            .to_vec()
    }];
    for app in apps {
        let mut row = Vec::new();
        if with_namespace {
            row.push(text(&app["namespace"]));
        }
        let mut shown = text(&app["display"]["status"]);
        if let Some(progress) = app["display"]["progress"].as_u64() {
            let _ = write!(shown, " {progress}%");
        }
        row.extend([
            text(&app["name"]),
            shown,
            text(&app["stable"]),
            format!("{}/{}", app["ready_replicas"], app["expected_replicas"]),
            text(&app["stable_reason"]),
        ]);
        rows.push(row);
    }
    rows
}

/// `kubectl verdict app`: the app, its instances and recent history.
fn app_page(app: &Value, history: Option<&Value>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}/{}: {}",
        text(&app["namespace"]),
        text(&app["name"]),
        text(&app["display"]["status"])
    );
    let mut stable = text(&app["stable"]);
    if let Some(t) = app["transitional"]["status"].as_str() {
        let _ = write!(stable, ", {t} in progress");
        if let Some(p) = app["transitional"]["progress"].as_u64() {
            let _ = write!(stable, " ({p}%)");
        }
    }
    let _ = writeln!(out, "  stable:  {stable}");
    let _ = writeln!(out, "  why:     {}", text(&app["stable_reason"]));
    if let Some(shown) = app["display"]["text"].as_str().filter(|t| !t.is_empty()) {
        let _ = writeln!(out, "  shown:   {shown}");
    }
    if !app["forced"].is_null() {
        let _ = writeln!(
            out,
            "  forced:  {} by {}: {}",
            text(&app["forced"]["status"]),
            text(&app["forced"]["by"]),
            text(&app["forced"]["reason"])
        );
    }
    let _ = writeln!(
        out,
        "  ready:   {}/{}",
        app["ready_replicas"], app["expected_replicas"]
    );
    let mut rows = vec![
        ["INSTANCE", "STATUS", "NODE", "REASON"]
            .map(String::from)
            .to_vec(),
    ];
    for group in app["groups"].as_array().into_iter().flatten() {
        rows.push(vec![
            format!("pod/{}", text(&group["name"])),
            text(&group["status"]),
            text(&group["node"]),
            text(&group["reason"]),
        ]);
        for container in group["instances"].as_array().into_iter().flatten() {
            rows.push(vec![
                format!("  {}", text(&container["name"])),
                text(&container["status"]),
                String::new(),
                text(&container["reason"]),
            ]);
        }
    }
    for object in app["objects"].as_array().into_iter().flatten() {
        let mut status = text(&object["status"]);
        if let Some(stage) = object["stage"].as_str() {
            let _ = write!(status, " ({stage})");
        }
        rows.push(vec![
            format!("{}/{}", text(&object["kind"]), text(&object["name"])),
            status,
            text(&object["node"]),
            text(&object["reason"]),
        ]);
    }
    if rows.len() > 1 {
        let _ = write!(out, "\n{}", columns(&rows));
    }
    if let Some(history) = history {
        let mut rows = vec![
            ["SINCE", "FOR", "STATUS", "CAUSE", "REASON"]
                .map(String::from)
                .to_vec(),
        ];
        for e in history["entries"].as_array().into_iter().flatten() {
            rows.push(vec![
                text(&e["at"]),
                lasted(e["at"].as_str().unwrap_or(""), e["until"].as_str()),
                text(&e["status"]),
                cause(e),
                text(&e["reason"]),
            ]);
        }
        if rows.len() > 1 {
            let _ = write!(out, "\nrecent history:\n{}", columns(&rows));
        }
    }
    out
}

/// The stages in the order a delivery goes through them.
const STAGES: [&str; 11] = [
    "serving",
    "gray-release",
    "ready",
    "deploying",
    "initializing",
    "requested",
    "unknown",
    "offline",
    "failed",
    "deleting",
    "stopped",
];

/// `kubectl verdict rollout --instance`: an instance's last lists, newest
/// first, each with its steps.
fn log_tree(instance: &str, page: &Value) -> String {
    let mut out = format!("\n{} — its task log, newest first\n", printable(instance));
    let entries = page["entries"].as_array().cloned().unwrap_or_default();
    for (n, entry) in entries.iter().enumerate() {
        let last = n + 1 == entries.len();
        let mut line = format!(
            "{}#{} {}  {}",
            if last { "└── " } else { "├── " },
            entry["number"],
            text(&entry["stage"]),
            text(&entry["outcome"])
        );
        if let Some(started) = entry["started"].as_str() {
            let _ = write!(line, "  {}", lasted(started, entry["finished"].as_str()));
        }
        if let Some(task) = entry["task"].as_str() {
            let _ = write!(line, "  at {}", printable(task));
        }
        let _ = writeln!(out, "{line}");
        let inner = if last { "    " } else { "│   " };
        for what in [&entry["reason"], &entry["message"]] {
            if let Some(said) = what.as_str().filter(|m| !m.is_empty()) {
                let _ = writeln!(out, "{inner}│ {}", printable(said));
            }
        }
        let steps = entry["steps"].as_array().cloned().unwrap_or_default();
        for (s, step) in steps.iter().enumerate() {
            let _ = write!(
                out,
                "{inner}{}{}  {}",
                if s + 1 == steps.len() {
                    "└── "
                } else {
                    "├── "
                },
                text(&step["task"]),
                text(&step["result"])
            );
            if step["attempts"].as_u64().is_some_and(|a| a > 1) {
                let _ = write!(out, " after {} attempts", step["attempts"]);
            }
            if let Some(message) = step["message"].as_str().filter(|m| !m.is_empty()) {
                let _ = write!(out, "  {}", printable(message));
            }
            out.push('\n');
        }
    }
    if let Some(why) = page["summed-up"].as_str() {
        let _ = writeln!(out, "({})", printable(why));
    }
    out
}

/// `kubectl verdict rollout`: the set, its deployment's step and gate, and
/// its instances by stage, as a tree.
fn rollout_tree(set: &Value) -> String {
    let mut out = String::new();
    let environment: Vec<String> = set["environment"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| format!("{}={}", text(&p["name"]), text(&p["version"])))
        .collect();
    let _ = write!(
        out,
        "VMReplicaSet {}/{}  ready {}",
        text(&set["namespace"]),
        text(&set["name"]),
        set["ready"]
            .as_str()
            .map_or_else(|| format!("?/{}", set["replicas"]), str::to_string)
    );
    if !environment.is_empty() {
        let _ = write!(out, "  environment {}", environment.join(" "));
    }
    out.push('\n');
    if let Some(waiting) = set["waiting"].as_str() {
        let _ = writeln!(out, "│ waiting: {waiting}");
    }
    let rollout = &set["rollout"];
    let (instances_prefix, branch) = if rollout.is_object() {
        let mut line = format!(
            "└── VMDeployment {}  code {}",
            text(&rollout["name"]),
            text(&rollout["code"])
        );
        if let Some(stable) = rollout["stable-code"].as_str() {
            let _ = write!(line, " (stable {stable})");
        }
        if let Some(phase) = rollout["phase"].as_str() {
            let _ = write!(line, "  {phase}");
        }
        if let Some(step) = rollout["step"].as_str() {
            let _ = write!(line, "  step {step}");
        }
        let _ = writeln!(out, "{line}");
        if rollout["at-gate"] == true {
            let _ = writeln!(
                out,
                "    │ ⏸ at a gate: `kubectl verdict approve {}/{}` goes on",
                text(&set["namespace"]),
                text(&set["name"])
            );
        }
        if let Some(waiting) = rollout["waiting"].as_str() {
            let _ = writeln!(out, "    │ waiting: {waiting}");
        }
        for action in rollout["actions"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "    │ {} by {}{}",
                text(&action["action"]),
                text(&action["by"]),
                action["why"]
                    .as_str()
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default()
            );
        }
        ("    ", "└── ")
    } else {
        ("", "└── ")
    };
    // Instances grouped by stage, in the order of the delivery.
    let instances = set["instances"].as_array().cloned().unwrap_or_default();
    let stage_of = |i: &Value| i["stage"].as_str().unwrap_or("unknown").to_string();
    let mut stages: Vec<String> = STAGES
        .iter()
        .map(|s| s.to_string())
        .filter(|s| instances.iter().any(|i| &stage_of(i) == s))
        .collect();
    for instance in &instances {
        let stage = stage_of(instance);
        if !stages.contains(&stage) {
            stages.push(stage);
        }
    }
    if instances.is_empty() {
        let _ = writeln!(out, "{instances_prefix}{branch}no instances");
    }
    for (s, stage) in stages.iter().enumerate() {
        let last_stage = s + 1 == stages.len();
        let members: Vec<&Value> = instances.iter().filter(|i| &stage_of(i) == stage).collect();
        let _ = writeln!(
            out,
            "{instances_prefix}{}{stage} ({})",
            if last_stage {
                "└── "
            } else {
                "├── "
            },
            members.len()
        );
        let inner = format!(
            "{instances_prefix}{}",
            if last_stage { "    " } else { "│   " }
        );
        for (m, instance) in members.iter().enumerate() {
            let last = m + 1 == members.len();
            let mut line = format!(
                "{inner}{}{}",
                if last { "└── " } else { "├── " },
                text(&instance["name"])
            );
            if let Some(code) = instance["code"].as_str() {
                let _ = write!(line, "  code {code}");
            }
            if let Some(since) = instance["since"].as_str() {
                let _ = write!(line, "  for {}", lasted(since, None));
            }
            let list = &instance["list"];
            if let Some(task) = list["task"].as_str() {
                let _ = write!(line, "  step {task}");
                if let Some(p) = instance["progress"].as_u64() {
                    let _ = write!(line, " {p}%");
                }
                if let Some(outcome) = list["outcome"].as_str() {
                    let _ = write!(line, " ({outcome})");
                }
            }
            if instance["awaiting-approval"] == true {
                line.push_str("  ⏸ awaits approval");
            }
            if instance["deleting"] == true {
                line.push_str("  deleting");
            }
            if let Some(machine) = instance["machine"].as_str() {
                let _ = write!(line, "  machine {machine}");
            }
            if let Some(problem) = instance["problem"].as_str() {
                let _ = write!(line, "  ⚠ {problem}");
            }
            let _ = writeln!(out, "{line}");
            if let Some(message) = list["message"].as_str().filter(|m| !m.is_empty()) {
                let _ = writeln!(
                    out,
                    "{inner}{}  {message}",
                    if last { "    " } else { "│   " }
                );
            }
        }
    }
    out
}

/// Print `text` now (a watch prints as it goes). Its own line breaks
/// stay; any other control character that reached it from a server is
/// escaped here too, whichever path it took.
fn write(out: &mut dyn std::io::Write, text: &str) -> Result<()> {
    let text: String = text
        .split('\n')
        .map(printable)
        .collect::<Vec<_>>()
        .join("\n");
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::Remote {
            url: "stdout".into(),
            message: e.to_string(),
        })
}

/// Run `kubectl verdict`; what it prints goes to `out` as it comes (a
/// watch prints until it is stopped).
pub fn run(cli: &PluginCli, out: &mut dyn std::io::Write) -> Result<()> {
    let transport = Client::new(&cli.target)?;
    let by = |asking: &Asking| -> Result<String> {
        asking
            .by
            .clone()
            .or_else(|| transport.user())
            .or_else(super::client::login_name)
            .filter(|b| !b.trim().is_empty())
            .ok_or_else(|| Error::Config {
                key: "by",
                message: "say who asks with --by".into(),
            })
    };
    match &cli.command {
        PluginCommand::Apps {
            namespace,
            all_namespaces,
            watch,
        } => {
            let namespace = if *all_namespaces {
                None
            } else {
                Some(
                    namespace
                        .clone()
                        .unwrap_or_else(|| transport.namespace().to_string()),
                )
            };
            let path = match &namespace {
                Some(ns) => format!("/v1/apps?namespace={}", segment(ns)),
                None => "/v1/apps".to_string(),
            };
            let list = |transport: &Client| -> Result<Vec<Value>> {
                let answer = transport.get(&path)?;
                Ok(answer["apps"]
                    .as_array()
                    .or_else(|| answer.as_array())
                    .cloned()
                    .unwrap_or_default())
            };
            let mut seen = std::collections::BTreeMap::new();
            let apps = list(&transport)?;
            let rows = app_rows(&apps, namespace.is_none());
            if apps.is_empty() && !watch {
                write(out, "no apps\n")?;
            } else {
                write(out, &columns(&rows))?;
            }
            if !watch {
                return Ok(());
            }
            let key = |app: &Value| format!("{}/{}", text(&app["namespace"]), text(&app["name"]));
            for app in &apps {
                seen.insert(
                    key(app),
                    app_rows(std::slice::from_ref(app), true)[1].clone(),
                );
            }
            loop {
                std::thread::sleep(cli.target.interval);
                let apps = list(&transport)?;
                let mut changed = Vec::new();
                for app in &apps {
                    let row = app_rows(std::slice::from_ref(app), true)[1].clone();
                    if seen.get(&key(app)) != Some(&row) {
                        seen.insert(key(app), row);
                        changed.push(app.clone());
                    }
                }
                let present: Vec<String> = apps.iter().map(key).collect();
                let gone: Vec<String> = seen
                    .keys()
                    .filter(|k| !present.contains(k))
                    .cloned()
                    .collect();
                for key in gone {
                    seen.remove(&key);
                    write(out, &format!("{key}  gone\n"))?;
                }
                if !changed.is_empty() {
                    let rows = app_rows(&changed, namespace.is_none());
                    let text = columns(&rows);
                    // The header once, at the start; changes as rows.
                    write(
                        out,
                        &text
                            .lines()
                            .skip(1)
                            .map(|l| format!("{l}\n"))
                            .collect::<String>(),
                    )?;
                }
            }
        }
        PluginCommand::App { app } => {
            let (namespace, name) = namespaced("app", app)?;
            let base = format!("/v1/apps/{}/{}", segment(namespace), segment(name));
            let view = transport.get(&base)?;
            // The history is kept where a database is: its absence is said,
            // not an error.
            let history = transport.get(&format!("{base}/history?limit=10")).ok();
            write(out, &app_page(&view, history.as_ref()))
        }
        PluginCommand::Rollout {
            set,
            watch,
            instance,
        } => {
            let (namespace, name) = namespaced("set", set)?;
            let path = format!("/v1/vm-delivery/{}/{}", segment(namespace), segment(name));
            let mut last = String::new();
            loop {
                let mut tree = rollout_tree(&transport.get(&path)?);
                if let Some(instance) = instance {
                    let log = transport.get(&format!(
                        "{path}/instances/{}/log?limit=10",
                        segment(instance)
                    ))?;
                    tree.push_str(&log_tree(instance, &log));
                }
                if tree != last {
                    if *watch && !last.is_empty() {
                        write(out, &format!("\n{}\n", "─".repeat(40)))?;
                    }
                    write(out, &tree)?;
                    last = tree;
                }
                if !watch {
                    return Ok(());
                }
                std::thread::sleep(cli.target.interval);
            }
        }
        PluginCommand::Approve {
            set,
            instance,
            asking,
        } => act(
            &transport,
            set,
            "approve",
            instance.as_deref(),
            asking,
            None,
            &by,
            out,
        ),
        PluginCommand::Promote { set, asking } => {
            act(&transport, set, "promote", None, asking, None, &by, out)
        }
        PluginCommand::Abort { set, asking } => {
            act(&transport, set, "abort", None, asking, None, &by, out)
        }
        PluginCommand::Retry {
            set,
            instance,
            asking,
        } => act(
            &transport,
            set,
            "retry",
            instance.as_deref(),
            asking,
            None,
            &by,
            out,
        ),
        PluginCommand::Skip {
            set,
            instance,
            task,
            asking,
        } => act(
            &transport,
            set,
            "skip",
            Some(instance),
            asking,
            task.as_deref().map(|t| ("task", t)),
            &by,
            out,
        ),
        PluginCommand::Force {
            set,
            instance,
            stage,
            asking,
        } => act(
            &transport,
            set,
            "force",
            Some(instance),
            asking,
            Some(("stage", stage)),
            &by,
            out,
        ),
        PluginCommand::Lift {
            set,
            instance,
            asking,
        } => act(
            &transport,
            set,
            "lift",
            Some(instance),
            asking,
            None,
            &by,
            out,
        ),
    }
}

/// A person's action on a rollout, or on one of its instances (with one
/// more field of the request, as `task` of a skip).
#[allow(clippy::too_many_arguments)]
fn act(
    transport: &Client,
    set: &str,
    action: &str,
    instance: Option<&str>,
    asking: &Asking,
    field: Option<(&str, &str)>,
    by: &dyn Fn(&Asking) -> Result<String>,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let (namespace, name) = namespaced("set", set)?;
    let mut path = format!("/v1/vm-delivery/{}/{}", segment(namespace), segment(name));
    if let Some(instance) = instance {
        let _ = write!(path, "/instances/{}", segment(instance));
    }
    let _ = write!(path, "/{action}");
    let mut body = json!({"by": by(asking)?});
    if let Some(why) = &asking.why {
        body["why"] = json!(why);
    }
    if let Some((key, value)) = field {
        body[key] = json!(value);
    }
    let answer = transport.call("POST", &path, Some(&body))?;
    let what = instance.map_or_else(|| set.to_string(), |i| format!("{set} instance {i}"));
    let on: Vec<String> = answer["on"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    let line = format!(
        "{action} of {what} asked by {}{}\n",
        text(&body["by"]),
        if on.is_empty() {
            String::new()
        } else {
            format!(", written on {}", on.join(", "))
        }
    );
    write(out, &line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instances_task_log_is_a_tree_of_its_lists_and_steps() {
        let page = json!({"entries": [
            {"number": 4, "stage": "deploying", "outcome": "failed", "task": "deploy-code",
             "reason": "code 2.0", "message": "no such artifact", "started": "2026-01-01T00:00:00Z",
             "finished": "2026-01-01T00:01:00Z", "steps": [
                {"task": "detach-load-balancer", "result": "done", "attempts": 1, "at": "2026-01-01T00:00:10Z"},
                {"task": "deploy-code", "result": "failed", "attempts": 3, "message": "no such artifact", "at": "2026-01-01T00:01:00Z"}]},
            {"number": 3, "stage": "serving", "outcome": "succeeded", "started": "2025-12-31T00:00:00Z",
             "finished": "2025-12-31T00:00:05Z"}],
            "summed-up": "lists without steps are summed up by the Server"});
        let tree = log_tree("web-0", &page);
        let lines: Vec<&str> = tree.lines().collect();
        assert_eq!(lines[1], "web-0 — its task log, newest first", "{tree}");
        assert!(
            lines[2].starts_with("├── #4 deploying  failed  1m"),
            "{tree}"
        );
        assert!(lines[2].ends_with("at deploy-code"), "{tree}");
        assert_eq!(lines[3], "│   │ code 2.0", "{tree}");
        assert_eq!(lines[5], "│   ├── detach-load-balancer  done", "{tree}");
        assert_eq!(
            lines[6], "│   └── deploy-code  failed after 3 attempts  no such artifact",
            "{tree}"
        );
        assert!(lines[7].starts_with("└── #3 serving  succeeded"), "{tree}");
        assert!(
            tree.ends_with("(lists without steps are summed up by the Server)\n"),
            "{tree}"
        );
    }

    #[test]
    fn a_rollout_is_a_tree_of_its_instances_by_stage() {
        let set = json!({
            "namespace": "shop", "name": "web", "replicas": 3, "ready": "2/3",
            "environment": [{"name": "jdk", "version": "21"}],
            "rollout": {"name": "web", "code": "v2", "stable-code": "v1", "phase": "Paused",
                "step": "2/4", "at-gate": true, "actions": [{"action": "approve", "by": "ana", "why": "looks fine"}]},
            "instances": [
                {"name": "web-0", "stage": "serving", "code": "v2", "since": "2026-01-01T00:00:00Z"},
                {"name": "web-1", "stage": "deploying", "code": "v1", "progress": 40,
                 "list": {"task": "deploy-code", "outcome": "running", "message": "copying"}},
                {"name": "web-2", "stage": "serving", "code": "v1", "awaiting-approval": true},
            ],
        });
        let tree = rollout_tree(&set);
        let lines: Vec<&str> = tree.lines().collect();
        assert!(
            lines[0].starts_with("VMReplicaSet shop/web  ready 2/3  environment jdk=21"),
            "{tree}"
        );
        assert!(
            lines[1].contains("VMDeployment web  code v2 (stable v1)  Paused  step 2/4"),
            "{tree}"
        );
        assert!(
            tree.contains("at a gate: `kubectl verdict approve shop/web`"),
            "{tree}"
        );
        assert!(tree.contains("approve by ana: looks fine"), "{tree}");
        let serving = tree.find("serving (2)").expect("serving first");
        let deploying = tree.find("deploying (1)").expect("then deploying");
        assert!(serving < deploying, "{tree}");
        assert!(
            tree.contains("web-1  code v1  step deploy-code 40% (running)"),
            "{tree}"
        );
        assert!(tree.contains("copying"), "{tree}");
        assert!(tree.contains("web-2  code v1  ⏸ awaits approval"), "{tree}");
    }

    #[test]
    fn a_page_is_printed_with_its_own_line_breaks_only() {
        let mut out = Vec::new();
        // Whatever reached a page unescaped is escaped as it is printed;
        // the page's own line breaks stay.
        write(&mut out, "row one \u{1b}[2J\u{7}\nrow two\n").unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out.lines().count(), 2, "{out:?}");
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'));
    }
}
