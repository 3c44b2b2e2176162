//! States a person forced on an application or one of its instances (seed
//! 002: human decisions rank above everything): who, why, the forced status
//! and an expiry. The status policy is handed the ones in force; the
//! verdict then says "forced by … : why" until the override is cleared or
//! lapses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use crate::events::{Events, Kind};
use crate::observe::AppKey;
use crate::storage::StorageError;
use crate::time::Timestamp;
use crate::wit::{WitName, types};

/// One override, as stored, served and written in case files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OverrideRecord {
    pub namespace: String,
    /// The application's name.
    pub app: String,
    /// The instance (a virtual machine of the app) it is forced on; none
    /// for the whole application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// For an application a stable status (`running`, `degraded`,
    /// `stopped`, `panic`); for an instance a stage (`initializing`,
    /// `deploying`, `ready`, `gray-release`, `unknown`, `offline`,
    /// `stopped`).
    pub status: String,
    pub by: String,
    #[serde(default)]
    pub reason: String,
    /// When it was set, RFC 3339.
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// When it lapses by itself, RFC 3339; none for until cleared.
    #[serde(default, with = "crate::time::text_opt")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
}

impl OverrideRecord {
    /// Whether it still applies at `now`.
    pub fn in_force(&self, now: Timestamp) -> bool {
        self.expires_at.is_none_or(|e| e > now)
    }

    /// The override as policies see it.
    pub fn to_wit(&self) -> types::StatusOverride {
        types::StatusOverride {
            instance: self.instance.clone(),
            status: self.status.clone(),
            by: self.by.clone(),
            reason: self.reason.clone(),
            at: self.at,
            expires_at: self.expires_at,
        }
    }

    /// Its key: namespace, app, instance.
    pub fn key(&self) -> OverrideKey {
        (
            self.namespace.clone(),
            self.app.clone(),
            self.instance.clone(),
        )
    }
}

/// An override's namespace, app and instance.
pub type OverrideKey = (String, String, Option<String>);

/// The statuses an override may force: an application's stable statuses
/// (all but `not-existed`, which only the cluster can say) or an
/// instance's stages.
pub fn allowed_statuses(instance: bool) -> Vec<&'static str> {
    if instance {
        types::InstanceStage::NAMES.to_vec()
    } else {
        types::StableStatus::NAMES
            .iter()
            .copied()
            .filter(|n| *n != "not-existed")
            .collect()
    }
}

/// Whether `status` may be forced on an app (`instance` false) or an
/// instance; the error names the ones that may.
pub fn check_status(status: &str, instance: bool) -> Result<(), String> {
    let allowed = allowed_statuses(instance);
    if allowed.contains(&status) {
        Ok(())
    } else {
        Err(format!(
            "`{status}` cannot be forced on {}: use one of {}",
            if instance {
                "an instance"
            } else {
                "an application"
            },
            allowed.join(", ")
        ))
    }
}

/// What went wrong with an override.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    /// A field a person gave is wrong; the text says which and why.
    #[error("{0}")]
    Invalid(String),
    /// No override there to clear.
    #[error("{0}")]
    NotFound(String),
    #[error("overrides: {0}")]
    Storage(#[from] StorageError),
}

const MIGRATIONS: &[&str] = &[
    // 1: the overrides in force, and every change to them.
    "CREATE TABLE overrides (
        namespace TEXT NOT NULL,
        app TEXT NOT NULL,
        instance TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (namespace, app, instance)
    );
    CREATE TABLE history (
        seq INTEGER PRIMARY KEY NOT NULL,
        at INTEGER NOT NULL,
        namespace TEXT NOT NULL,
        app TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX history_by_app ON history (namespace, app, seq);",
];

/// One change to the overrides, as the audit keeps it and the event stream
/// tells it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct OverrideChange {
    /// `set`, `cleared` or `expired`.
    pub event: String,
    pub namespace: String,
    pub app: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// When, RFC 3339.
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// Who changed it (for `expired`, who had set it).
    pub by: String,
    #[serde(default)]
    pub reason: String,
    /// The override set, cleared or lapsed.
    #[serde(rename = "override")]
    pub record: OverrideRecord,
    /// The one a `set` replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<OverrideRecord>,
}

impl OverrideChange {
    /// A change of `event` to `record`, made `at` by `by` for `reason`.
    fn new(event: &str, record: OverrideRecord, at: Timestamp, by: String, reason: String) -> Self {
        Self {
            event: event.into(),
            namespace: record.namespace.clone(),
            app: record.app.clone(),
            instance: record.instance.clone(),
            at,
            by,
            reason,
            record,
            replaced: None,
        }
    }
}

/// The overrides in force, kept in `data-dir/overrides.db` (SQLite, WAL,
/// every write synced) with the audit of every change; each change marks
/// its app to be derived again and goes on the event stream.
pub struct Overrides {
    path: PathBuf,
    connection: Mutex<Connection>,
    current: RwLock<BTreeMap<OverrideKey, OverrideRecord>>,
    events: Option<Arc<Events>>,
    /// Called with each app whose overrides changed.
    changed: Box<dyn Fn(AppKey) + Send + Sync>,
    /// Told when an override is set, so that its expiry is waited for.
    set_one: tokio::sync::Notify,
    /// Where changes are shared with the other replicas, when there are.
    shared: std::sync::OnceLock<Arc<crate::shared::Shared>>,
}

/// An override's key as shared decisions name it.
fn shared_key(key: &OverrideKey) -> String {
    format!(
        "{}/{}/{}",
        key.0,
        key.1,
        key.2.as_deref().unwrap_or_default()
    )
}

impl Overrides {
    /// Open (creating when missing) the database and read what is in force.
    pub fn open(
        path: &Path,
        events: Option<Arc<Events>>,
        changed: impl Fn(AppKey) + Send + Sync + 'static,
    ) -> Result<Self, StorageError> {
        let connection = crate::storage::open(path, "overrides", MIGRATIONS)?;
        let mut current = BTreeMap::new();
        {
            let fail = StorageError::database(path);
            let mut statement = connection
                .prepare("SELECT body FROM overrides")
                .map_err(&fail)?;
            let bodies = statement
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(&fail)?;
            for body in bodies {
                let record: OverrideRecord = serde_json::from_str(&body.map_err(&fail)?)
                    .map_err(StorageError::record(path))?;
                current.insert(record.key(), record);
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            connection: Mutex::new(connection),
            current: RwLock::new(current),
            events,
            changed: Box::new(changed),
            set_one: tokio::sync::Notify::new(),
            shared: std::sync::OnceLock::new(),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<OverrideKey, OverrideRecord>> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every override stored, expired or not, by app and instance.
    pub fn list(&self) -> Vec<OverrideRecord> {
        self.read().values().cloned().collect()
    }

    /// The applications with an override in force at `now`.
    pub fn apps(&self, now: Timestamp) -> std::collections::BTreeSet<AppKey> {
        self.read()
            .iter()
            .filter(|(_, o)| o.in_force(now))
            .map(|((ns, name, _), _)| (ns.clone(), name.clone()))
            .collect()
    }

    /// The overrides in force on an app and its instances at `now`, as
    /// policies take them.
    pub fn in_force(&self, app: &AppKey, now: Timestamp) -> Vec<types::StatusOverride> {
        self.read()
            .range((app.0.clone(), app.1.clone(), None)..)
            .take_while(|((ns, name, _), _)| ns == &app.0 && name == &app.1)
            .filter(|(_, o)| o.in_force(now))
            .map(|(_, o)| o.to_wit())
            .collect()
    }

    /// Write a change: the override's row (`Some` to store, `None` to
    /// delete) and its audit record, in one transaction; then memory, the
    /// event stream and the app's derivation.
    fn commit(
        &self,
        key: &OverrideKey,
        row: Option<&OverrideRecord>,
        change: OverrideChange,
    ) -> Result<(), StorageError> {
        let fail = StorageError::database(&self.path);
        let body = serde_json::to_string(&change).map_err(StorageError::record(&self.path))?;
        {
            let mut connection = self
                .connection
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let transaction = connection.transaction().map_err(&fail)?;
            let instance = key.2.clone().unwrap_or_default();
            match row {
                Some(record) => {
                    let text =
                        serde_json::to_string(record).map_err(StorageError::record(&self.path))?;
                    transaction
                        .execute(
                            "INSERT INTO overrides (namespace, app, instance, body)
                             VALUES (?1, ?2, ?3, ?4)
                             ON CONFLICT (namespace, app, instance) DO UPDATE SET body = ?4",
                            params![key.0, key.1, instance, text],
                        )
                        .map_err(&fail)?;
                }
                None => {
                    transaction
                        .execute(
                            "DELETE FROM overrides WHERE namespace = ?1 AND app = ?2 AND instance = ?3",
                            params![key.0, key.1, instance],
                        )
                        .map_err(&fail)?;
                }
            }
            transaction
                .execute(
                    "INSERT INTO history (at, namespace, app, body) VALUES (?1, ?2, ?3, ?4)",
                    params![change.at, key.0, key.1, body],
                )
                .map_err(&fail)?;
            transaction.commit().map_err(&fail)?;
        }
        {
            let mut current = self
                .current
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match row {
                Some(record) => current.insert(key.clone(), record.clone()),
                None => current.remove(key),
            };
        }
        tracing::info!(
            event = %change.event,
            app = %format!("{}/{}", key.0, key.1),
            instance = key.2.as_deref().unwrap_or(""),
            by = %change.by,
            "status override"
        );
        if let Some(events) = &self.events {
            let app = format!("{}/{}", key.0, key.1);
            events.publish(
                Kind::Override,
                Some(app),
                serde_json::to_value(&change).unwrap_or_default(),
            );
        }
        (self.changed)((key.0.clone(), key.1.clone()));
        Ok(())
    }

    /// Force a status on an app or instance, replacing what was forced
    /// there; the record is checked first.
    pub fn set(&self, record: OverrideRecord) -> Result<OverrideChange, OverrideError> {
        check_status(&record.status, record.instance.is_some()).map_err(OverrideError::Invalid)?;
        decider(&record.by, Some(&record.reason)).map_err(OverrideError::Invalid)?;
        if record.expires_at.is_some_and(|e| e <= record.at) {
            return Err(OverrideError::Invalid("expires-at is in the past".into()));
        }
        let key = record.key();
        let (by, reason) = (record.by.clone(), record.reason.clone());
        let mut change = OverrideChange::new("set", record.clone(), record.at, by, reason);
        change.replaced = self.read().get(&key).cloned();
        self.commit(&key, Some(&record), change.clone())?;
        self.set_one.notify_one();
        self.publish(&key, &change);
        Ok(change)
    }

    /// Share this replica's changes with the others from now on.
    pub fn share(&self, shared: Arc<crate::shared::Shared>) {
        let _ = self.shared.set(shared);
    }

    fn publish(&self, key: &OverrideKey, change: &OverrideChange) {
        if let Some(shared) = self.shared.get() {
            shared.publish(&shared_key(key), change.at, change);
        }
    }

    /// Apply a change another replica made (and audited there): set or
    /// lifted here too, audited, told and derived. Expiries are not shared:
    /// every replica takes an override back when it expires.
    pub fn apply_shared(&self, change: OverrideChange) -> Result<(), StorageError> {
        let key = change.record.key();
        match change.event.as_str() {
            "set" if self.read().get(&key) != Some(&change.record) => {
                self.commit(&key, Some(&change.record.clone()), change)?;
                self.set_one.notify_one();
            }
            "cleared" if self.read().contains_key(&key) => self.commit(&key, None, change)?,
            _ => {}
        }
        Ok(())
    }

    /// Lift an override: automation's verdict is back.
    pub fn clear(
        &self,
        key: &OverrideKey,
        by: &str,
        reason: &str,
        at: Timestamp,
    ) -> Result<OverrideChange, OverrideError> {
        decider(by, Some(reason)).map_err(OverrideError::Invalid)?;
        let record = self.read().get(key).cloned().ok_or_else(|| {
            OverrideError::NotFound(format!(
                "{}/{}{} has no override",
                key.0,
                key.1,
                key.2
                    .as_deref()
                    .map(|i| format!(" instance {i}"))
                    .unwrap_or_default()
            ))
        })?;
        let change = OverrideChange::new("cleared", record, at, by.trim().into(), reason.into());
        self.commit(key, None, change.clone())?;
        self.publish(key, &change);
        Ok(change)
    }

    /// Take back the overrides that expired by `now`, each audited and told.
    pub fn lapse(&self, now: Timestamp) -> Result<Vec<OverrideChange>, StorageError> {
        let expired: Vec<OverrideRecord> = self
            .read()
            .values()
            .filter(|o| !o.in_force(now))
            .cloned()
            .collect();
        let mut changes = Vec::new();
        for record in expired {
            let (at, by) = (record.expires_at.unwrap_or(now), record.by.clone());
            let change =
                OverrideChange::new("expired", record.clone(), at, by, "it expired".into());
            self.commit(&record.key(), None, change.clone())?;
            changes.push(change);
        }
        Ok(changes)
    }

    /// The changes to an app's overrides, newest first, at most `limit`.
    pub fn history(&self, app: &AppKey, limit: usize) -> Result<Vec<OverrideChange>, StorageError> {
        let fail = StorageError::database(&self.path);
        let connection = self
            .connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut statement = connection
            .prepare(
                "SELECT body FROM history WHERE namespace = ?1 AND app = ?2
                 ORDER BY seq DESC LIMIT ?3",
            )
            .map_err(&fail)?;
        let bodies = statement
            .query_map(params![app.0, app.1, limit as i64], |r| {
                r.get::<_, String>(0)
            })
            .map_err(&fail)?;
        let mut changes = Vec::new();
        for body in bodies {
            changes.push(
                serde_json::from_str(&body.map_err(&fail)?)
                    .map_err(StorageError::record(&self.path))?,
            );
        }
        Ok(changes)
    }

    /// The earliest expiry among the overrides in force.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.read().values().filter_map(|o| o.expires_at).min()
    }

    /// Take back expired overrides as they expire, until aborted.
    pub async fn lapse_forever(self: Arc<Self>) {
        loop {
            let now = crate::time::now();
            // Wake at the next expiry, and at least every minute (an
            // override set meanwhile may expire sooner).
            let wait = self
                .next_expiry()
                .map_or(60_000, |at| (at - now).clamp(0, 60_000));
            let due = tokio::time::sleep(std::time::Duration::from_millis(wait as u64));
            tokio::select! {
                () = due => {}
                () = self.set_one.notified() => continue,
            }
            let overrides = Arc::clone(&self);
            let lapsed =
                tokio::task::spawn_blocking(move || overrides.lapse(crate::time::now())).await;
            if let Ok(Err(error)) = lapsed {
                tracing::warn!(%error, "expired overrides could not be taken back");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
    }
}

impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overrides")
            .field("path", &self.path)
            .field("in_force", &self.read().len())
            .finish()
    }
}

/// The longest an override may be asked to last.
pub const MAX_OVERRIDE_S: u64 = 10 * 365 * 24 * 3600;

/// When an override asked for now expires: at `expires-at` (RFC 3339) or
/// after `expires-in-s` seconds, not both, not in the past, and not more
/// than ten years away (a mistake, which would overflow the arithmetic).
pub fn expiry(
    expires_at: Option<&str>,
    expires_in_s: Option<u64>,
    now: Timestamp,
) -> Result<Option<Timestamp>, String> {
    let at = match (expires_at, expires_in_s) {
        (Some(_), Some(_)) => return Err("give expires-at or expires-in-s, not both".into()),
        (Some(text), None) => {
            Some(crate::time::parse_time(text).map_err(|e| format!("expires-at: {e}"))?)
        }
        (None, Some(s)) if (1..=MAX_OVERRIDE_S).contains(&s) => Some(now + (s as Timestamp) * 1000),
        (None, Some(_)) => {
            return Err(format!(
                "expires-in-s must be from 1 to {MAX_OVERRIDE_S} (ten years)"
            ));
        }
        (None, None) => None,
    };
    if at.is_some_and(|e| e <= now) {
        return Err("expires-at is in the past".into());
    }
    if at.is_some_and(|e| e.saturating_sub(now) > (MAX_OVERRIDE_S as Timestamp) * 1000) {
        return Err("expires-at is more than ten years away".into());
    }
    Ok(at)
}

/// Who decides and why: a name that is not blank, and text of bounded
/// length (the task records' bounds).
pub fn decider(by: &str, reason: Option<&str>) -> Result<(), String> {
    use crate::tasks::model::{MAX_NAME, MAX_TEXT};
    if !crate::tasks::model::names_someone(by) {
        return Err("by must say who decides".into());
    }
    for (field, text) in [("by", Some(by)), ("reason", reason)] {
        if let Some(c) = text.and_then(crate::tasks::model::reordering) {
            return Err(format!(
                "{field} {}",
                crate::tasks::model::reordering_message(c)
            ));
        }
    }
    for (field, text, max) in [("by", Some(by), MAX_NAME), ("reason", reason, MAX_TEXT)] {
        let length = text.map_or(0, |t| t.chars().count());
        if length > max {
            return Err(format!(
                "{field} is {length} characters long; at most {max}"
            ));
        }
    }
    Ok(())
}
