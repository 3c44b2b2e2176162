//! The failover side's memory across restarts, in `data-dir/failover.db`
//! (SQLite, WAL, every write synced): the audit records, and the state that
//! makes decisions continue where they were — the policy's previous
//! decisions (its clocks), overrides, approvals, the ledger of actions
//! taken, flap times and action start times.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::model::{Approval, Attempt, Decided, Override, Record};
use crate::storage::StorageError;
use crate::wit::types::Timestamp;

const MIGRATIONS: &[&str] = &[
    // 1: audit records by sequence; the state as one JSON document.
    "CREATE TABLE history (
        seq INTEGER PRIMARY KEY NOT NULL,
        at INTEGER NOT NULL,
        node TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX history_by_node ON history (node, seq);
    CREATE TABLE state (
        id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
        body TEXT NOT NULL
    );",
];

/// What a restart must not forget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Memory {
    /// The policy's decisions of the last evaluation, by node.
    pub previous: BTreeMap<String, Decided>,
    pub overrides: BTreeMap<String, Override>,
    /// Approvals by node, then action key.
    pub approvals: BTreeMap<String, BTreeMap<String, Approval>>,
    /// What was done, by node, then action key.
    pub ledger: BTreeMap<String, BTreeMap<String, Attempt>>,
    /// When each node turned unhealthy, within the flap window.
    pub flaps: BTreeMap<String, Vec<Timestamp>>,
    /// When actions were started, within the rate window.
    pub started: Vec<Timestamp>,
}

impl Memory {
    /// Whether `other` holds the same, but perhaps for the wording of the
    /// previous decisions' reasons: nothing worth writing again.
    pub(crate) fn same_but_reasons(&self, other: &Self) -> bool {
        // Every field named, so that a new one is not left out.
        let Self {
            previous,
            overrides,
            approvals,
            ledger,
            flaps,
            started,
        } = self;
        *overrides == other.overrides
            && *approvals == other.approvals
            && *ledger == other.ledger
            && *flaps == other.flaps
            && *started == other.started
            && previous.len() == other.previous.len()
            && previous
                .iter()
                .zip(&other.previous)
                .all(|((a, x), (b, y))| a == b && x.decides_as(y))
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Journal {
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
    keep: usize,
}

impl Journal {
    /// Open (creating when missing) the database, keeping the last `keep`
    /// audit records.
    pub fn open(path: &Path, keep: usize) -> Result<Self, StorageError> {
        let connection = crate::storage::open(path, "failover", MIGRATIONS)?;
        Ok(Self {
            path: path.to_path_buf(),
            connection: Arc::new(Mutex::new(connection)),
            keep: keep.max(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The state as last saved (empty for a new database).
    pub fn memory(&self) -> Result<Memory, StorageError> {
        let body: Option<String> = self
            .lock()
            .query_row("SELECT body FROM state WHERE id = 1", [], |r| r.get(0))
            .optional()
            .map_err(StorageError::database(&self.path))?;
        body.map_or(Ok(Memory::default()), |b| {
            serde_json::from_str(&b).map_err(StorageError::record(&self.path))
        })
    }

    /// The next sequence number of an audit record.
    pub(crate) fn next_seq(&self) -> Result<u64, StorageError> {
        let last: Option<i64> = self
            .lock()
            .query_row("SELECT MAX(seq) FROM history", [], |r| r.get(0))
            .map_err(StorageError::database(&self.path))?;
        Ok(last.map_or(1, |s| s as u64 + 1))
    }

    /// Save the state and append records, in one transaction; the oldest
    /// records beyond the limit go.
    pub fn save(&self, memory: &Memory, records: &[Record]) -> Result<(), StorageError> {
        let body = serde_json::to_string(memory).map_err(StorageError::record(&self.path))?;
        let mut connection = self.lock();
        let tx = connection
            .transaction()
            .map_err(StorageError::database(&self.path))?;
        tx.execute(
            "INSERT INTO state (id, body) VALUES (1, ?1)
             ON CONFLICT (id) DO UPDATE SET body = excluded.body",
            params![body],
        )
        .map_err(StorageError::database(&self.path))?;
        for record in records {
            tx.execute(
                "INSERT INTO history (seq, at, node, body) VALUES (?1, ?2, ?3, ?4)",
                params![
                    record.seq as i64,
                    record.at,
                    record.node,
                    serde_json::to_string(record).map_err(StorageError::record(&self.path))?
                ],
            )
            .map_err(StorageError::database(&self.path))?;
        }
        if !records.is_empty() {
            tx.execute(
                "DELETE FROM history WHERE seq <= (SELECT MAX(seq) FROM history) - ?1",
                params![self.keep as i64],
            )
            .map_err(StorageError::database(&self.path))?;
        }
        tx.commit().map_err(StorageError::database(&self.path))
    }

    /// Audit records, newest first: of one node or all, before a sequence
    /// number (for paging), at most `limit`.
    pub fn history(
        &self,
        node: Option<&str>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Record>, StorageError> {
        let connection = self.lock();
        let mut statement = connection
            .prepare_cached(
                "SELECT body FROM history
                 WHERE (?1 IS NULL OR node = ?1) AND (?2 IS NULL OR seq < ?2)
                 ORDER BY seq DESC LIMIT ?3",
            )
            .map_err(StorageError::database(&self.path))?;
        let rows = statement
            .query_map(
                params![
                    node,
                    // Past every sequence number: all of them.
                    before.map(|b| i64::try_from(b).unwrap_or(i64::MAX)),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |r| r.get::<_, String>(0),
            )
            .map_err(StorageError::database(&self.path))?;
        rows.map(|body| {
            let body = body.map_err(StorageError::database(&self.path))?;
            serde_json::from_str(&body).map_err(StorageError::record(&self.path))
        })
        .collect()
    }
}

impl super::Failover {
    /// Save what changed; a failed write is logged and tried again next
    /// time, the state kept in memory meanwhile (what the evaluation loop
    /// decides on its own).
    pub(super) async fn save(&self, inner: &mut super::Inner) {
        if let Err(error) = self.commit(inner).await {
            tracing::error!(%error, "could not save the failover state; retrying");
        }
    }

    /// Save what changed, or say why not: the records not saved stay
    /// pending.
    pub(super) async fn commit(&self, inner: &mut super::Inner) -> Result<(), StorageError> {
        if inner.pending.is_empty() && inner.memory.same_but_reasons(&inner.saved) {
            return Ok(());
        }
        let journal = self.journal.clone();
        let memory = inner.memory.clone();
        let records = std::mem::take(&mut inner.pending);
        let saving = (memory.clone(), records.clone());
        let result = tokio::task::spawn_blocking(move || journal.save(&saving.0, &saving.1))
            .await
            .unwrap_or_else(|e| Err(StorageError::Worker(e)));
        match result {
            Ok(()) => {
                inner.saved = memory;
                Ok(())
            }
            Err(error) => {
                inner.pending = records;
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::model::OverrideKind;

    fn record(seq: u64, node: &str) -> Record {
        Record {
            seq,
            at: seq as i64 * 1000,
            node: node.into(),
            kind: "decision".into(),
            health: None,
            previous_health: None,
            rule: Some("ready".into()),
            reason: "ready".into(),
            inputs: serde_json::Value::Null,
            actions: Vec::new(),
            brakes: Vec::new(),
            by: None,
        }
    }

    #[test]
    fn state_and_records_survive_reopening_and_old_records_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("failover.db");
        let journal = Journal::open(&path, 3).unwrap();
        assert_eq!(journal.memory().unwrap(), Memory::default());
        assert_eq!(journal.next_seq().unwrap(), 1);
        let mut memory = Memory::default();
        memory.overrides.insert(
            "n2".into(),
            Override {
                node: "n2".into(),
                kind: OverrideKind::Pause,
                by: "ana".into(),
                reason: "disk swap".into(),
                at: 1000,
                expires_at: Some(61_000),
            },
        );
        memory.started.push(5000);
        let records: Vec<Record> = (1..=5)
            .map(|s| record(s, if s % 2 == 0 { "n2" } else { "n1" }))
            .collect();
        journal.save(&memory, &records).unwrap();
        drop(journal);

        let journal = Journal::open(&path, 3).unwrap();
        assert_eq!(journal.memory().unwrap(), memory);
        assert_eq!(journal.next_seq().unwrap(), 6);
        let all: Vec<u64> = journal
            .history(None, None, 10)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(all, [5, 4, 3], "the oldest beyond the limit went");
        let n1: Vec<u64> = journal
            .history(Some("n1"), None, 10)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(n1, [5, 3]);
        let page: Vec<u64> = journal
            .history(None, Some(5), 1)
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(page, [4]);
    }
}
