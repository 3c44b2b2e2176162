//! The Lua port of the status rules (`host/benches/status.lua`) run with
//! mlua: the input handed over as Lua tables, as a Lua health-check host
//! does, and the answer read back. Shared by the rules test and the policy
//! benchmark.

use mlua::{Function, Lua, Table};
use verdict::wit::WitName;
use verdict::wit::{status, types};

/// A Lua state with the rules loaded.
pub struct LuaRules {
    lua: Lua,
    evaluate: Function,
}

fn condition_status(s: types::ConditionStatus) -> &'static str {
    match s {
        types::ConditionStatus::True => "true",
        types::ConditionStatus::False => "false",
        types::ConditionStatus::Unknown => "unknown",
    }
}

impl LuaRules {
    pub fn new() -> Self {
        let lua = Lua::new();
        lua.load(include_str!("../../host/benches/status.lua"))
            .set_name("status.lua")
            .exec()
            .unwrap();
        let evaluate = lua.globals().get("evaluate").unwrap();
        Self { lua, evaluate }
    }

    fn list<T>(&self, items: &[T], f: impl Fn(&T) -> mlua::Result<Table>) -> mlua::Result<Table> {
        let t = self.lua.create_table_with_capacity(items.len(), 0)?;
        for item in items {
            t.raw_push(f(item)?)?;
        }
        Ok(t)
    }

    fn conditions(&self, conditions: &[types::Condition]) -> mlua::Result<Table> {
        self.list(conditions, |c| {
            let t = self.lua.create_table()?;
            t.set("kind", c.kind.as_str())?;
            t.set("status", condition_status(c.status))?;
            t.set("reason", c.reason.as_deref())?;
            t.set("message", c.message.as_deref())?;
            t.set("last_transition", c.last_transition)?;
            Ok(t)
        })
    }

    fn resources(&self, r: &types::Resources) -> mlua::Result<Table> {
        let t = self.lua.create_table()?;
        t.set("cpu_millis", r.cpu_millis)?;
        t.set("memory_bytes", r.memory_bytes)?;
        Ok(t)
    }

    fn terminated(&self, s: &types::TerminatedState) -> mlua::Result<Table> {
        let t = self.lua.create_table()?;
        t.set("kind", "terminated")?;
        t.set("exit_code", s.exit_code)?;
        t.set("reason", s.reason.as_deref())?;
        t.set("message", s.message.as_deref())?;
        t.set("started_at", s.started_at)?;
        t.set("finished_at", s.finished_at)?;
        Ok(t)
    }

    fn container(&self, c: &types::Container) -> mlua::Result<Table> {
        let t = self.lua.create_table()?;
        t.set("name", c.name.as_str())?;
        t.set(
            "kind",
            match c.kind {
                types::ContainerKind::Main => "main",
                types::ContainerKind::Init => "init",
                types::ContainerKind::Sidecar => "sidecar",
                types::ContainerKind::Ephemeral => "ephemeral",
            },
        )?;
        t.set("ready", c.ready)?;
        t.set("restart_count", c.restart_count)?;
        let state = match &c.state {
            types::ContainerState::Waiting(w) => {
                let s = self.lua.create_table()?;
                s.set("kind", "waiting")?;
                s.set("reason", w.reason.as_deref())?;
                s.set("message", w.message.as_deref())?;
                s
            }
            types::ContainerState::Running(r) => {
                let s = self.lua.create_table()?;
                s.set("kind", "running")?;
                s.set("started_at", r.started_at)?;
                s
            }
            types::ContainerState::Terminated(term) => self.terminated(term)?,
            types::ContainerState::Unknown => {
                let s = self.lua.create_table()?;
                s.set("kind", "unknown")?;
                s
            }
        };
        t.set("state", state)?;
        if let Some(last) = &c.last_state {
            t.set("last_state", self.terminated(last)?)?;
        }
        t.set("limits", self.resources(&c.limits)?)?;
        if let Some(usage) = &c.usage {
            t.set("usage", self.resources(usage)?)?;
        }
        Ok(t)
    }

    fn pod(&self, p: &types::Pod) -> mlua::Result<Table> {
        let t = self.lua.create_table()?;
        t.set("name", p.name.as_str())?;
        t.set("node", p.node.as_deref())?;
        t.set(
            "phase",
            match p.phase {
                types::PodPhase::Pending => "pending",
                types::PodPhase::Running => "running",
                types::PodPhase::Succeeded => "succeeded",
                types::PodPhase::Failed => "failed",
                types::PodPhase::Unknown => "unknown",
            },
        )?;
        t.set("reason", p.reason.as_deref())?;
        t.set("message", p.message.as_deref())?;
        t.set("conditions", self.conditions(&p.conditions)?)?;
        t.set(
            "restart_policy",
            match p.restart_policy {
                types::RestartPolicy::Always => "always",
                types::RestartPolicy::OnFailure => "on-failure",
                types::RestartPolicy::Never => "never",
            },
        )?;
        t.set("created_at", p.created_at)?;
        t.set("started_at", p.started_at)?;
        t.set("deleting_since", p.deleting_since)?;
        t.set(
            "containers",
            self.list(&p.containers, |c| self.container(c))?,
        )?;
        if let Some(owner) = &p.owner {
            let o = self.lua.create_table()?;
            o.set("kind", owner.kind.as_str())?;
            o.set("name", owner.name.as_str())?;
            t.set("owner", o)?;
        }
        Ok(t)
    }

    /// The input as Lua tables.
    pub fn input(&self, input: &status::AppInput) -> mlua::Result<Table> {
        let app = &input.app;
        let a = self.lua.create_table()?;
        let id = self.lua.create_table()?;
        id.set("namespace", app.id.namespace.as_str())?;
        id.set("name", app.id.name.as_str())?;
        a.set("id", id)?;
        a.set("namespace_exists", app.namespace_exists)?;
        a.set("expected_replicas", app.expected_replicas)?;
        a.set(
            "workloads",
            self.list(&app.workloads, |w| {
                let t = self.lua.create_table()?;
                t.set(
                    "kind",
                    match w.kind {
                        types::WorkloadKind::Deployment => "Deployment",
                        types::WorkloadKind::StatefulSet => "StatefulSet",
                        types::WorkloadKind::DaemonSet => "DaemonSet",
                    },
                )?;
                t.set("name", w.name.as_str())?;
                t.set("desired_replicas", w.desired_replicas)?;
                t.set("ready_replicas", w.ready_replicas)?;
                t.set("conditions", self.conditions(&w.conditions)?)?;
                Ok(t)
            })?,
        )?;
        a.set("pods", self.list(&app.pods, |p| self.pod(p))?)?;
        if let Some(probe) = &app.probe {
            let p = self.lua.create_table()?;
            p.set("url", probe.url.as_str())?;
            p.set(
                "outcome",
                match probe.outcome {
                    types::ProbeOutcome::Ok => "ok",
                    types::ProbeOutcome::Failing => "failing",
                    types::ProbeOutcome::Unreachable => "unreachable",
                },
            )?;
            p.set("message", probe.message.as_deref())?;
            a.set("probe", p)?;
        }
        let t = self.lua.create_table()?;
        t.set("app", a)?;
        t.set(
            "tasks",
            self.list(&input.tasks, |task| {
                let t = self.lua.create_table()?;
                t.set("id", task.id.as_str())?;
                t.set("action", task.action.wit_name())?;
                t.set("phase", task.phase.wit_name())?;
                t.set("progress", task.progress)?;
                t.set("message", task.message.as_deref())?;
                t.set("updated_at", task.updated_at)?;
                Ok(t)
            })?,
        )?;
        t.set(
            "nodes",
            self.list(&input.nodes, |n| {
                let t = self.lua.create_table()?;
                t.set("name", n.name.as_str())?;
                t.set("ready", condition_status(n.ready))?;
                t.set(
                    "taints",
                    self.list(&n.taints, |taint| {
                        let t = self.lua.create_table()?;
                        t.set("key", taint.key.as_str())?;
                        Ok(t)
                    })?,
                )?;
                Ok(t)
            })?,
        )?;
        Ok(t)
    }

    /// Memory the Lua state uses, in bytes.
    pub fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }

    /// The Lua rules' verdict on one application.
    pub fn evaluate(&self, now: types::Timestamp, input: &status::AppInput) -> Table {
        let input = self.input(input).unwrap();
        self.evaluate.call((now, input)).unwrap()
    }
}

fn text(t: &Table, key: &str) -> String {
    t.get::<Option<String>>(key)
        .unwrap()
        .unwrap_or_else(|| "-".into())
}

/// A verdict from Lua in one comparable line per app, pod and container.
pub fn summary_of_lua(v: &Table) -> Vec<String> {
    let display: Table = v.get("display").unwrap();
    let progress = display
        .get::<Option<u8>>("progress")
        .unwrap()
        .map_or("-".into(), |p| p.to_string());
    let transitional = v
        .get::<Option<Table>>("transitional")
        .unwrap()
        .map_or("-".into(), |t| text(&t, "status"));
    let mut lines = vec![format!(
        "{} | {} | {} | {} | {} | {progress} | {}/{} | {} | {transitional}",
        text(v, "stable"),
        text(v, "stable_reason"),
        text(&display, "status"),
        text(&display, "text"),
        text(&display, "severity"),
        v.get::<u32>("ready_replicas").unwrap(),
        v.get::<u32>("expected_replicas").unwrap(),
        v.get::<Option<i64>>("recheck_after")
            .unwrap()
            .map_or("-".into(), |r| r.to_string()),
    )];
    let groups: Table = v.get("groups").unwrap();
    for g in groups.sequence_values::<Table>() {
        let g = g.unwrap();
        lines.push(format!(
            "  {} | {} | {} | {}",
            text(&g, "name"),
            text(&g, "status"),
            text(&g, "reason"),
            text(&g, "message")
        ));
        let instances: Table = g.get("instances").unwrap();
        for i in instances.sequence_values::<Table>() {
            let i = i.unwrap();
            lines.push(format!(
                "    {} | {} | {} | {} | {} | {}",
                text(&i, "name"),
                text(&i, "status"),
                text(&i, "reason"),
                text(&i, "message"),
                i.get::<bool>("is_app_instance").unwrap(),
                i.get::<u32>("restart_count").unwrap()
            ));
        }
    }
    lines
}

/// A native verdict in the same lines.
pub fn summary_of(v: &types::AppVerdict) -> Vec<String> {
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".into());
    let mut lines = vec![format!(
        "{} | {} | {} | {} | {} | {} | {}/{} | {} | {}",
        v.stable.wit_name(),
        v.stable_reason,
        v.display.status,
        v.display.text,
        v.display.severity.wit_name(),
        v.display.progress.map_or("-".into(), |p| p.to_string()),
        v.ready_replicas,
        v.expected_replicas,
        v.recheck_after.map_or("-".into(), |r| r.to_string()),
        v.transitional.as_ref().map_or("-", |t| t.status.wit_name()),
    )];
    for g in &v.groups {
        lines.push(format!(
            "  {} | {} | {} | {}",
            g.name,
            g.status.wit_name(),
            g.reason,
            opt(&g.message)
        ));
        for i in &g.instances {
            lines.push(format!(
                "    {} | {} | {} | {} | {} | {}",
                i.name,
                i.status.wit_name(),
                opt(&i.reason),
                opt(&i.message),
                i.is_app_instance,
                i.restart_count
            ));
        }
    }
    lines
}
