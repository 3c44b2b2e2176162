//! The task log of seed 002's instances: every finished list of an
//! instance with each of its steps, kept in the history's database beside
//! the verdicts (a Server's status keeps the list in progress and a short
//! summary of the last few). The leader writes a list here before the
//! status that drops its steps; the lists that many reconciles finish
//! meanwhile go in one transaction (a group commit), on a thread of its
//! own. A list is kept as the lifecycle writes it (JSON text): the history
//! keys and orders it, the lifecycle reads it.

use std::sync::{Arc, Weak, mpsc};

use rusqlite::params;

use super::store::Store;
use super::{History, HistoryError};
use crate::storage::StorageError;
use crate::time::Timestamp;

/// One finished list of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRow {
    pub namespace: String,
    /// The instance's Server, and its UID (a Server made again under the
    /// same name numbers its lists from one again).
    pub server: String,
    pub uid: String,
    pub number: u64,
    pub finished: Timestamp,
    /// The list, as the lifecycle writes it.
    pub entry: String,
}

/// Lists waiting to be written, and who waits for them.
type Batch = (
    Vec<ListRow>,
    tokio::sync::oneshot::Sender<Result<(), String>>,
);

/// The task log's writer: the lists sent, written in group commits.
#[derive(Debug)]
pub(super) struct Writer {
    queue: mpsc::Sender<Batch>,
}

impl Writer {
    /// Start the writer of `history`'s task log; it ends with the history.
    fn start(history: Weak<History>) -> std::io::Result<Self> {
        let (queue, waiting) = mpsc::channel::<Batch>();
        std::thread::Builder::new()
            .name("verdict-task-log".into())
            .spawn(move || {
                while let Ok(first) = waiting.recv() {
                    // Everything sent meanwhile, in one transaction.
                    let mut batches = vec![first];
                    batches.extend(waiting.try_iter());
                    let Some(history) = history.upgrade() else {
                        return;
                    };
                    let rows: Vec<&ListRow> = batches.iter().flat_map(|(r, _)| r).collect();
                    let written = match &history.store {
                        Ok(store) => store.record_lists(&rows).map_err(|e| e.to_string()),
                        Err(error) => Err(error.clone()),
                    };
                    match written {
                        Ok(()) => history.health_mut().lists += rows.len() as u64,
                        Err(_) => history.health_mut().lists_lost += rows.len() as u64,
                    }
                    for (_, done) in batches {
                        let _ = done.send(written.clone());
                    }
                }
            })?;
        Ok(Self { queue })
    }
}

impl History {
    /// Keep finished lists in the task log, durably once this returns.
    pub async fn log_lists(self: &Arc<Self>, rows: Vec<ListRow>) -> Result<(), HistoryError> {
        if rows.is_empty() {
            return Ok(());
        }
        if self.settings.off {
            return Err(HistoryError::Off);
        }
        if let Err(error) = &self.store {
            self.health_mut().lists_lost += rows.len() as u64;
            return Err(HistoryError::Unavailable(error.clone()));
        }
        let writer = self
            .task_log
            .get_or_init(|| Writer::start(Arc::downgrade(self)).map_err(|e| e.to_string()));
        let writer = writer
            .as_ref()
            .map_err(|e| HistoryError::Unavailable(format!("the task log's writer: {e}")))?;
        let (done, written) = tokio::sync::oneshot::channel();
        writer
            .queue
            .send((rows, done))
            .map_err(|_| HistoryError::Unavailable("the task log's writer is gone".into()))?;
        written
            .await
            .map_err(|_| HistoryError::Unavailable("the task log's writer is gone".into()))?
            .map_err(HistoryError::Unavailable)
    }

    /// A page of an instance's task log, newest first: the lists numbered
    /// below `before`, at most `limit`, as the lifecycle wrote them.
    pub fn task_log(
        &self,
        (namespace, server, uid): (&str, &str, &str),
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<String>, HistoryError> {
        match &self.store {
            Ok(store) => Ok(store.lists((namespace, server, uid), before, limit)?),
            Err(_) if self.settings.off => Err(HistoryError::Off),
            Err(error) => Err(HistoryError::Unavailable(error.clone())),
        }
    }
}

impl Store {
    /// Keep `rows` in one transaction (synced); a list kept before under
    /// the same key is replaced.
    fn record_lists(&self, rows: &[&ListRow]) -> Result<(), StorageError> {
        let mut connection = self.lock();
        let tx = connection.transaction().map_err(self.fail())?;
        for row in rows {
            tx.prepare_cached(
                "INSERT INTO task_lists (namespace, server, uid, number, finished, entry)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT DO UPDATE SET finished = excluded.finished, entry = excluded.entry",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.namespace,
                    row.server,
                    row.uid,
                    row.number as i64,
                    row.finished,
                    row.entry
                ])
            })
            .map_err(self.fail())?;
        }
        tx.commit().map_err(self.fail())
    }

    /// An instance's lists numbered below `before`, newest first.
    fn lists(
        &self,
        (namespace, server, uid): (&str, &str, &str),
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<String>, StorageError> {
        let connection = self.lock();
        let mut statement = connection
            .prepare_cached(
                "SELECT entry FROM task_lists
                 WHERE namespace = ?1 AND server = ?2 AND uid = ?3 AND (?4 IS NULL OR number < ?4)
                 ORDER BY number DESC LIMIT ?5",
            )
            .map_err(self.fail())?;
        let rows = statement
            .query_map(
                params![
                    namespace,
                    server,
                    uid,
                    before.map(|b| b as i64),
                    limit as i64
                ],
                |r| r.get::<_, String>(0),
            )
            .map_err(self.fail())?;
        rows.map(|r| r.map_err(self.fail())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(server: &str, uid: &str, number: u64, entry: &str) -> ListRow {
        ListRow {
            namespace: "shop".into(),
            server: server.into(),
            uid: uid.into(),
            number,
            finished: 1_000 + number as i64,
            entry: entry.into(),
        }
    }

    #[tokio::test]
    async fn lists_are_kept_by_instance_and_read_newest_first_in_pages() {
        let dir = tempfile::tempdir().unwrap();
        let history = Arc::new(History::open(
            &dir.path().join("history.db"),
            super::super::Settings::default(),
        ));
        let many: Vec<ListRow> = (1..=5)
            .map(|n| row("web-0", "u1", n, &format!("{{\"n\":{n}}}")))
            .collect();
        // Sent from two places at once: both are written.
        let (a, b) = tokio::join!(
            history.log_lists(many[..3].to_vec()),
            history.log_lists(many[3..].to_vec())
        );
        a.unwrap();
        b.unwrap();
        history
            .log_lists(vec![row("web-0", "u2", 1, "{\"other\":true}")])
            .await
            .unwrap();
        // Written again under its key: replaced, not doubled.
        history
            .log_lists(vec![row("web-0", "u1", 5, "{\"n\":55}")])
            .await
            .unwrap();
        let first = history.task_log(("shop", "web-0", "u1"), None, 2).unwrap();
        assert_eq!(first, ["{\"n\":55}", "{\"n\":4}"]);
        let next = history
            .task_log(("shop", "web-0", "u1"), Some(4), 10)
            .unwrap();
        assert_eq!(next, ["{\"n\":3}", "{\"n\":2}", "{\"n\":1}"]);
        assert_eq!(
            history.task_log(("shop", "web-0", "u2"), None, 10).unwrap(),
            ["{\"other\":true}"]
        );
        assert!(
            history
                .task_log(("shop", "web-1", "u1"), None, 10)
                .unwrap()
                .is_empty()
        );
        assert_eq!(history.health().lists, 7);
        // Kept across a restart.
        drop(history);
        let again = History::open(
            &dir.path().join("history.db"),
            super::super::Settings::default(),
        );
        assert_eq!(
            again
                .task_log(("shop", "web-0", "u1"), None, 10)
                .unwrap()
                .len(),
            5
        );
    }

    #[tokio::test]
    async fn without_a_history_lists_are_refused_in_words() {
        let dir = tempfile::tempdir().unwrap();
        let off = Arc::new(History::open(
            &dir.path().join("history.db"),
            super::super::Settings {
                off: true,
                ..Default::default()
            },
        ));
        let refused = off.log_lists(vec![row("web-0", "u1", 1, "{}")]).await;
        assert!(matches!(refused, Err(HistoryError::Off)), "{refused:?}");
        // A file that cannot be opened: said, never a panic.
        let blocked = dir.path().join("not-a-dir");
        std::fs::write(&blocked, b"x").unwrap();
        let broken = Arc::new(History::open(
            &blocked.join("history.db"),
            super::super::Settings::default(),
        ));
        let refused = broken.log_lists(vec![row("web-0", "u1", 1, "{}")]).await;
        assert!(
            matches!(refused, Err(HistoryError::Unavailable(_))),
            "{refused:?}"
        );
        assert_eq!(broken.health().lists_lost, 1);
        assert!(broken.task_log(("shop", "web-0", "u1"), None, 1).is_err());
    }

    #[test]
    fn lists_older_than_the_retention_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("history.db")).unwrap();
        let rows: Vec<ListRow> = (1..=4).map(|n| row("web-0", "u1", n, "{}")).collect();
        store
            .record_lists(&rows.iter().collect::<Vec<_>>())
            .unwrap();
        store.prune(1_003, u64::MAX).unwrap();
        let left = store.lists(("shop", "web-0", "u1"), None, 10).unwrap();
        assert_eq!(left.len(), 2);
    }
}
