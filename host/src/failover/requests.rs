//! What people ask of failover: overrides of a node's state, and approvals
//! of actions that need one, each recorded with who and why.

use super::evaluate::blank;
use super::{
    Approval, Failover, FailoverError, Inner, Override, OverrideKind, Record, Value, json, now,
    rfc3339,
};
use crate::events::Kind;

pub use crate::overrides::MAX_OVERRIDE_S;

/// A request to override a node.
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OverrideRequest {
    pub kind: OverrideKind,
    /// Who decides: not blank.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub by: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub reason: Option<String>,
    /// When it stops applying, RFC 3339.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// Or: for how long, in seconds.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315_360_000)]
    pub expires_in_s: Option<u64>,
}

/// A person's approval of an action on a node.
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ApprovalRequest {
    /// The action's key, as `/v1/failover` shows it (`release:StatefulSet/shop/db`).
    pub action: String,
    /// Who decides: not blank.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub by: String,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub reason: Option<String>,
}

/// Who decides and why (the rule of [`crate::overrides::decider`]).
pub(super) fn decider(by: &str, reason: Option<&str>) -> Result<(), FailoverError> {
    crate::overrides::decider(by, reason).map_err(FailoverError::Invalid)
}

impl Failover {
    /// Force a node's state, or pause it.
    ///
    /// An expiry further than ten years away is refused: it is a mistake,
    /// and an unbounded one would overflow the time arithmetic.
    pub(crate) async fn set_override(
        &self,
        node: &str,
        request: OverrideRequest,
    ) -> Result<Override, FailoverError> {
        decider(&request.by, request.reason.as_deref())?;
        let at = now();
        let expires_at =
            crate::overrides::expiry(request.expires_at.as_deref(), request.expires_in_s, at)
                .map_err(FailoverError::Invalid)?;
        if !self.observed.read().nodes.contains_key(node) {
            return Err(FailoverError::NotFound(
                "no-such-node",
                format!("no node {node} is observed"),
            ));
        }
        let o = Override {
            node: node.to_string(),
            kind: request.kind,
            by: request.by.trim().to_string(),
            reason: request.reason.unwrap_or_default(),
            at,
            expires_at,
        };
        let change = json!({"event": "override", "override": o});
        self.overridden(&o).await?;
        self.publish(&format!("override/{node}"), at, &change);
        Ok(o)
    }

    /// Keep a node's override, with its record: on disk, or not at all.
    async fn overridden(&self, o: &Override) -> Result<(), FailoverError> {
        let mut inner = self.inner.lock().await;
        let before = inner.memory.clone();
        inner.memory.overrides.insert(o.node.clone(), o.clone());
        let record = Record {
            kind: "override".into(),
            reason: format!(
                "{} forced {}{}: {}",
                o.by,
                serde_json::to_value(o.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                o.expires_at
                    .map(|e| format!(" until {}", rfc3339(e)))
                    .unwrap_or_default(),
                o.reason
            ),
            by: Some(o.by.clone()),
            ..blank(&o.node, o.at)
        };
        self.recorded(
            inner,
            before,
            record,
            json!({"event": "override", "override": o}),
        )
        .await
    }

    /// Share a decision made here with the other replicas.
    fn publish(&self, key: &str, at: crate::time::Timestamp, change: &Value) {
        if let Some(shared) = self.shared.get() {
            shared.publish(key, at, change);
        }
    }

    /// Share this replica's decisions with the others from now on.
    pub fn share(&self, shared: std::sync::Arc<crate::shared::Shared>) {
        let _ = self.shared.set(shared);
    }

    /// Apply a decision another replica took (overrides set or lifted,
    /// approvals): kept and recorded here too, and judged on at once.
    pub async fn apply_shared(&self, change: Value) {
        let field = |name: &str| change[name].as_str().unwrap_or_default().to_string();
        match change["event"].as_str() {
            Some("override") => {
                if let Ok(o) = serde_json::from_value::<Override>(change["override"].clone())
                    && let Err(error) = self.overridden(&o).await
                {
                    tracing::error!(%error, node = %o.node, "an override shared by another replica could not be kept here");
                }
            }
            Some("override-cleared") => {
                let at = change["at"].as_i64().unwrap_or_else(now);
                if let Err(error @ FailoverError::Storage(_)) =
                    self.lifted(&field("node"), &field("by"), at).await
                {
                    tracing::error!(%error, "an override lifted by another replica could not be lifted here");
                }
            }
            Some("approval") => {
                if let Ok(approval) = serde_json::from_value::<Approval>(change["approval"].clone())
                {
                    let inner = self.inner.lock().await;
                    if let Err(error) = self
                        .approved(inner, &field("node"), &field("action"), approval)
                        .await
                    {
                        tracing::error!(%error, "an approval given on another replica could not be kept here");
                    }
                }
            }
            _ => tracing::warn!(%change, "a shared failover decision of an unknown kind"),
        }
    }

    /// Lift a node's override.
    pub(crate) async fn clear_override(
        &self,
        node: &str,
        by: &str,
    ) -> Result<Override, FailoverError> {
        decider(by, None)?;
        let at = now();
        let o = self.lifted(node, by, at).await?;
        let change = json!({"event": "override-cleared", "node": node, "by": by, "at": at});
        self.publish(&format!("override/{node}"), at, &change);
        Ok(o)
    }

    /// Take a node's override away, with its record.
    async fn lifted(
        &self,
        node: &str,
        by: &str,
        at: crate::time::Timestamp,
    ) -> Result<Override, FailoverError> {
        let mut inner = self.inner.lock().await;
        let before = inner.memory.clone();
        let o = inner.memory.overrides.remove(node).ok_or_else(|| {
            FailoverError::NotFound("no-override", format!("node {node} has no override"))
        })?;
        let record = Record {
            kind: "override-cleared".into(),
            reason: format!("{by} lifted the override set by {}", o.by),
            by: Some(by.to_string()),
            ..blank(node, at)
        };
        self.recorded(
            inner,
            before,
            record,
            json!({"event": "override-cleared", "node": node, "by": by}),
        )
        .await?;
        Ok(o)
    }

    /// Keep a person's decision with its record, on disk before anyone is
    /// told; tell the event stream, and judge again now. When the write
    /// fails, the state is as it was `before` and the error says why.
    pub(super) async fn recorded(
        &self,
        mut inner: tokio::sync::MutexGuard<'_, Inner>,
        before: super::journal::Memory,
        record: Record,
        event: Value,
    ) -> Result<(), FailoverError> {
        let (seq, pending) = (inner.next_seq, inner.pending.len());
        Self::record(&mut inner, record);
        if let Err(error) = self.commit(&mut inner).await {
            inner.memory = before;
            inner.pending.truncate(pending);
            inner.next_seq = seq;
            return Err(error.into());
        }
        drop(inner);
        self.events.publish(Kind::Failover, None, event);
        self.wake.notify_one();
        Ok(())
    }

    /// Approve an action the latest decision on a node proposes.
    pub async fn approve(
        &self,
        node: &str,
        request: ApprovalRequest,
    ) -> Result<Approval, FailoverError> {
        decider(&request.by, request.reason.as_deref())?;
        let at = now();
        let inner = self.inner.lock().await;
        let report = inner.latest.reports.get(node).ok_or_else(|| {
            FailoverError::NotFound("no-such-node", format!("no decision on node {node}"))
        })?;
        let action = report
            .actions
            .iter()
            .find(|a| a.key == request.action)
            .ok_or_else(|| {
                let keys: Vec<&str> = report.actions.iter().map(|a| a.key.as_str()).collect();
                FailoverError::NotFound(
                    "no-such-action",
                    format!(
                        "the decision on node {node} proposes no `{}` (it proposes: {})",
                        request.action,
                        keys.join(", ")
                    ),
                )
            })?;
        if !action.needs_approval {
            return Err(FailoverError::Conflict(format!(
                "`{}` on node {node} needs no approval",
                request.action
            )));
        }
        let given = inner
            .memory
            .approvals
            .get(node)
            .and_then(|a| a.get(&request.action));
        if let Some(given) = given {
            return Err(FailoverError::Conflict(format!(
                "`{}` on node {node} was approved by {} already",
                request.action, given.by
            )));
        }
        let approval = Approval {
            by: request.by.trim().to_string(),
            reason: request.reason,
            at,
        };
        self.approved(inner, node, &request.action, approval.clone())
            .await?;
        let change = json!({"event": "approval", "node": node, "action": request.action, "approval": approval});
        self.publish(&format!("approval/{node}/{}", request.action), at, &change);
        Ok(approval)
    }

    /// Keep an approval, with its record: on disk, or not at all.
    async fn approved(
        &self,
        mut inner: tokio::sync::MutexGuard<'_, Inner>,
        node: &str,
        action: &str,
        approval: Approval,
    ) -> Result<(), FailoverError> {
        let before = inner.memory.clone();
        inner
            .memory
            .approvals
            .entry(node.to_string())
            .or_default()
            .insert(action.to_string(), approval.clone());
        let record = Record {
            kind: "approval".into(),
            reason: format!(
                "{} approved `{action}`{}",
                approval.by,
                approval
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            by: Some(approval.by.clone()),
            ..blank(node, approval.at)
        };
        self.recorded(
            inner,
            before,
            record,
            json!({"event": "approval", "node": node, "action": action, "approval": approval}),
        )
        .await
    }
}
