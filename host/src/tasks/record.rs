//! Task records: the actions users trigger, with phase and progress, in the
//! JSON/YAML form files and the API use.

use serde::{Deserialize, Serialize};

use crate::time::parse_time;
use crate::wit::WitName;
use crate::wit::types;

/// A task as written in a file or request: times as RFC 3339 text (or
/// `@now-5m` placeholders, substituted before this is read), the
/// application as `namespace/name`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TaskRecord {
    pub id: String,
    pub app: String,
    pub action: String,
    pub phase: String,
    #[serde(default)]
    pub progress: u8,
    #[serde(default)]
    pub message: Option<String>,
    pub created_at: String,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub requested_by: Option<String>,
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// The steps of its plan, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
}

/// One step of a task's plan, as written in a file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct StepRecord {
    pub name: String,
    pub phase: String,
    #[serde(default)]
    pub message: Option<String>,
}

/// Split `namespace/name`.
pub fn parse_app(text: &str) -> Result<types::AppId, String> {
    match text.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok(types::AppId {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
        }
        _ => Err(format!("app `{text}` is not of the form namespace/name")),
    }
}

impl TaskRecord {
    /// The task as policies see it; the error names the field.
    pub(crate) fn to_task(&self) -> Result<types::Task, String> {
        let field = |name: &str, e: String| format!("task {}: {name}: {e}", self.id);
        let action = types::TaskAction::from_wit_name(&self.action)
            .ok_or_else(|| field("action", format!("unknown action `{}`", self.action)))?;
        let phase = types::TaskPhase::from_wit_name(&self.phase)
            .ok_or_else(|| field("phase", format!("unknown phase `{}`", self.phase)))?;
        if self.progress > 100 {
            return Err(field("progress", format!("{} is over 100", self.progress)));
        }
        let created_at = parse_time(&self.created_at).map_err(|e| field("created-at", e))?;
        let updated_at = match &self.updated_at {
            Some(t) => parse_time(t).map_err(|e| field("updated-at", e))?,
            None => created_at,
        };
        Ok(types::Task {
            id: self.id.clone(),
            app: parse_app(&self.app).map_err(|e| field("app", e))?,
            action,
            phase,
            progress: self.progress,
            message: self.message.clone(),
            created_at,
            updated_at,
            requested_by: self.requested_by.clone(),
            params: serde_json::Value::Object(self.params.clone()).to_string(),
            steps: self
                .steps
                .iter()
                .map(|s| {
                    let phase = types::TaskPhase::from_wit_name(&s.phase).ok_or_else(|| {
                        field(
                            "steps",
                            format!("unknown phase `{}` of {}", s.phase, s.name),
                        )
                    })?;
                    Ok(types::TaskStep {
                        name: s.name.clone(),
                        phase,
                        message: s.message.clone(),
                    })
                })
                .collect::<Result<_, String>>()?,
        })
    }
}
