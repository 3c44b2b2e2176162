//! The history's database, `data-dir/history.db` (SQLite, WAL, every
//! write synced): one row a period in which an app or one of its instances
//! held a status, the marks of what happened around them, and the periods
//! in which this host observed the cluster at all.
//!
//! A subject's current row is found through `current`, so that recording a
//! verdict reads one row a subject and never scans its past. A change that
//! reverts within the flap window (not a task's transition) folds into
//! the row it left: its `flaps`
//! counts the round trips and `away` how long was spent in each other
//! status, so that a crash loop is one row, and the time in each status
//! still adds up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use crate::storage::StorageError;
use crate::time::Timestamp;

const MIGRATIONS: &[&str] = &[
    // 1: periods, the current one of each subject, marks, coverage.
    "CREATE TABLE changes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        namespace TEXT NOT NULL,
        app TEXT NOT NULL,
        kind TEXT NOT NULL,
        instance TEXT NOT NULL,
        status TEXT NOT NULL,
        transitional TEXT,
        display TEXT,
        reason TEXT NOT NULL,
        node TEXT,
        cause TEXT,
        policy TEXT,
        flaps INTEGER NOT NULL DEFAULT 0,
        away TEXT,
        last_at INTEGER NOT NULL
    );
    CREATE INDEX changes_by_subject ON changes (namespace, app, kind, instance, id);
    CREATE INDEX changes_by_time ON changes (at);
    CREATE TABLE current (
        namespace TEXT NOT NULL,
        app TEXT NOT NULL,
        kind TEXT NOT NULL,
        instance TEXT NOT NULL,
        row INTEGER NOT NULL,
        PRIMARY KEY (namespace, app, kind, instance)
    ) WITHOUT ROWID;
    CREATE TABLE marks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        namespace TEXT,
        app TEXT,
        kind TEXT NOT NULL,
        reference TEXT,
        node TEXT,
        text TEXT NOT NULL
    );
    CREATE INDEX marks_by_app ON marks (namespace, app, at);
    CREATE INDEX marks_by_time ON marks (at);
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started INTEGER NOT NULL,
        until INTEGER NOT NULL
    );",
    // 2: the task log of seed 002's instances, one row a finished list.
    "CREATE TABLE task_lists (
        namespace TEXT NOT NULL,
        server TEXT NOT NULL,
        uid TEXT NOT NULL,
        number INTEGER NOT NULL,
        finished INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (namespace, server, uid, number)
    ) WITHOUT ROWID;
    CREATE INDEX task_lists_by_time ON task_lists (finished);",
];

/// What an app or instance is: the app itself (`kind` and `instance`
/// empty), a pod (`pod`), or an object of a configured kind
/// (`VirtualMachine`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Subject {
    pub namespace: String,
    pub app: String,
    pub kind: String,
    pub instance: String,
}

impl Subject {
    pub fn app(namespace: &str, app: &str) -> Self {
        Self {
            namespace: namespace.into(),
            app: app.into(),
            kind: String::new(),
            instance: String::new(),
        }
    }

    pub fn is_app(&self) -> bool {
        self.kind.is_empty()
    }
}

/// What caused a change, when something did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Cause {
    /// `task`, `override`, `failover`, `rollout` or `policy`.
    pub kind: String,
    /// Its id: the task's, the node's, the policy's `name@version`.
    pub id: String,
}

/// A status as a subject held it: what is compared to tell a change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Held {
    pub status: String,
    pub transitional: Option<String>,
    pub display: Option<String>,
}

/// One verdict on one subject, to be recorded when it differs from the
/// subject's current status.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub at: Timestamp,
    pub subject: Subject,
    pub held: Held,
    pub reason: String,
    pub node: Option<String>,
    pub cause: Option<Cause>,
    pub policy: Option<String>,
}

/// Time spent in another status while flapping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Away {
    /// Milliseconds, all round trips together.
    pub ms: i64,
    /// How many times it was entered.
    pub entries: u32,
}

/// One period of a subject's history: from `at`, until the next row of
/// the same subject.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: i64,
    /// The verdict that began it.
    pub seen: Seen,
    /// Round trips to other statuses folded into this row.
    pub flaps: u32,
    pub away: BTreeMap<String, Away>,
    /// When it was last entered (its start, or its last return).
    pub last_at: Timestamp,
}

/// Something that happened around the statuses: a task's step, an
/// override, a failover action, a rollout step, a policy swap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Mark {
    #[serde(skip)]
    pub id: i64,
    #[serde(with = "crate::time::text")]
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// The app it concerns; none for the cluster's (a policy swap, a node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// `task`, `override`, `failover`, `rollout` or `policy`.
    pub kind: String,
    /// Its id: a task's, an override's instance, a policy's
    /// `name@version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The node, for failover.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub text: String,
}

/// Which rows a page holds.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    /// Rows older than this id (the `continue` of the page before).
    pub before: Option<i64>,
    pub limit: usize,
}

pub(crate) struct Store {
    path: PathBuf,
    connection: Mutex<Connection>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

const COLUMNS: &str = "id, at, namespace, app, kind, instance, status, transitional, display, \
                       reason, node, cause, policy, flaps, away, last_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    fn json<T: serde::de::DeserializeOwned>(text: Option<String>) -> Option<T> {
        text.and_then(|t| serde_json::from_str(&t).ok())
    }
    Ok(Row {
        id: r.get(0)?,
        seen: Seen {
            at: r.get(1)?,
            subject: Subject {
                namespace: r.get(2)?,
                app: r.get(3)?,
                kind: r.get(4)?,
                instance: r.get(5)?,
            },
            held: Held {
                status: r.get(6)?,
                transitional: r.get(7)?,
                display: r.get(8)?,
            },
            reason: r.get(9)?,
            node: r.get(10)?,
            cause: json(r.get(11)?),
            policy: r.get(12)?,
        },
        flaps: r.get(13)?,
        away: json(r.get(14)?).unwrap_or_default(),
        last_at: r.get(15)?,
    })
}

fn mark(r: &rusqlite::Row<'_>) -> rusqlite::Result<Mark> {
    Ok(Mark {
        id: r.get(0)?,
        at: r.get(1)?,
        namespace: r.get(2)?,
        app: r.get(3)?,
        kind: r.get(4)?,
        reference: r.get(5)?,
        node: r.get(6)?,
        text: r.get(7)?,
    })
}

/// What a batch of records did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    /// New rows.
    pub changes: usize,
    /// Changes folded into the row they returned to.
    pub folded: usize,
}

impl Store {
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        let connection = crate::storage::open(path, "history", MIGRATIONS)?;
        Ok(Self {
            path: path.to_path_buf(),
            connection: Mutex::new(connection),
        })
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn fail(&self) -> impl Fn(rusqlite::Error) -> StorageError + '_ {
        StorageError::database(&self.path)
    }

    /// Every row of a query, each made by `map`.
    fn all<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, StorageError> {
        let connection = self.lock();
        let mut statement = connection.prepare_cached(sql).map_err(self.fail())?;
        let rows = statement.query_map(params, map).map_err(self.fail())?;
        rows.map(|r| r.map_err(self.fail())).collect()
    }

    /// The instances of an app that have a current row, with what they
    /// hold (to tell which are gone).
    pub fn instances(
        &self,
        namespace: &str,
        app: &str,
    ) -> Result<Vec<(Subject, Held)>, StorageError> {
        self.all(
            &format!(
                "SELECT {COLUMNS} FROM changes WHERE id IN
                 (SELECT row FROM current WHERE namespace = ?1 AND app = ?2 AND kind != '')"
            ),
            params![namespace, app],
            |r| row(r).map(|r| (r.seen.subject, r.seen.held)),
        )
    }

    /// Record verdicts and marks in one transaction (synced). A verdict
    /// that holds what its subject holds is no change; one that returns
    /// within `flap_window` ms to what its subject held before folds into
    /// that row; a subject whose status is `gone` has no current row after.
    pub fn record(
        &self,
        seen: &[Seen],
        marks: &[Mark],
        flap_window: i64,
    ) -> Result<Recorded, StorageError> {
        let mut connection = self.lock();
        let tx = connection.transaction().map_err(self.fail())?;
        let mut recorded = Recorded::default();
        for one in seen {
            match record_one(&tx, one, flap_window).map_err(self.fail())? {
                Some(true) => recorded.folded += 1,
                Some(false) => recorded.changes += 1,
                None => {}
            }
        }
        for m in marks {
            tx.prepare_cached(
                "INSERT INTO marks (at, namespace, app, kind, reference, node, text)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    m.at,
                    m.namespace,
                    m.app,
                    m.kind,
                    m.reference,
                    m.node,
                    m.text
                ])
            })
            .map_err(self.fail())?;
        }
        tx.commit().map_err(self.fail())?;
        Ok(recorded)
    }

    /// Extend the run of observation that began at `started` to `until`
    /// (a new run when `started` is none); returns the run's id.
    pub fn observed(
        &self,
        run: Option<i64>,
        started: Timestamp,
        until: Timestamp,
    ) -> Result<i64, StorageError> {
        let connection = self.lock();
        match run {
            Some(id) => {
                connection
                    .execute(
                        "UPDATE runs SET until = ?2 WHERE id = ?1",
                        params![id, until],
                    )
                    .map_err(self.fail())?;
                Ok(id)
            }
            None => {
                connection
                    .execute(
                        "INSERT INTO runs (started, until) VALUES (?1, ?2)",
                        params![started, until],
                    )
                    .map_err(self.fail())?;
                Ok(connection.last_insert_rowid())
            }
        }
    }

    /// When the first run of observation kept began.
    pub fn first_observed(&self) -> Result<Option<Timestamp>, StorageError> {
        Ok(self
            .all("SELECT MIN(started) FROM runs", params![], |r| {
                r.get::<_, Option<Timestamp>>(0)
            })?
            .into_iter()
            .next()
            .flatten())
    }

    /// The runs of observation that overlap `[from, to)`, in order.
    pub fn runs(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<(Timestamp, Timestamp)>, StorageError> {
        self.all(
            "SELECT started, until FROM runs WHERE until > ?1 AND started < ?2 ORDER BY started",
            params![from, to],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// A subject's rows, newest first, within a page. With no `kind`, an
    /// instance's rows of every kind (`instance` names it); with no
    /// `instance`, the app's own.
    pub fn page(
        &self,
        namespace: &str,
        app: &str,
        instance: Option<&str>,
        page: &Page,
    ) -> Result<Vec<Row>, StorageError> {
        self.all(
            &format!(
                "SELECT {COLUMNS} FROM changes
                 WHERE namespace = ?1 AND app = ?2
                   AND ((?3 IS NULL AND kind = '') OR (?3 IS NOT NULL AND kind != '' AND instance = ?3))
                   AND (?4 IS NULL OR at >= ?4) AND (?5 IS NULL OR at < ?5)
                   AND (?6 IS NULL OR id < ?6)
                 ORDER BY id DESC LIMIT ?7"
            ),
            params![
                namespace,
                app,
                instance,
                page.since,
                page.until,
                page.before,
                page.limit as i64
            ],
            row,
        )
    }

    /// An app's own rows that held during `[from, to)`, oldest first: the
    /// last one before `from` and every one after.
    pub fn window(
        &self,
        namespace: &str,
        app: &str,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Vec<Row>, StorageError> {
        self.all(
            &format!(
                "SELECT {COLUMNS} FROM changes WHERE id IN (
                    SELECT id FROM (SELECT id FROM changes
                        WHERE namespace = ?1 AND app = ?2 AND kind = '' AND at < ?3
                        ORDER BY id DESC LIMIT 1)
                    UNION
                    SELECT id FROM changes
                        WHERE namespace = ?1 AND app = ?2 AND kind = '' AND at >= ?3 AND at < ?4)
                 ORDER BY id"
            ),
            params![namespace, app, from, to],
            row,
        )
    }

    /// The apps with any history, of one namespace or all.
    pub fn apps(&self, namespace: Option<&str>) -> Result<Vec<(String, String)>, StorageError> {
        self.all(
            "SELECT DISTINCT namespace, app FROM changes
             WHERE kind = '' AND (?1 IS NULL OR namespace = ?1) ORDER BY namespace, app",
            params![namespace],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// Whether any status of the app was ever recorded.
    pub fn knows(&self, namespace: &str, app: &str) -> Result<bool, StorageError> {
        let found = self.all(
            "SELECT 1 FROM changes WHERE kind = '' AND namespace = ?1 AND app = ?2 LIMIT 1",
            params![namespace, app],
            |r| r.get::<_, i64>(0),
        )?;
        Ok(!found.is_empty())
    }

    /// Marks of an app and of the cluster within `[from, to)`, oldest
    /// first, at most `limit`.
    pub fn marks(
        &self,
        namespace: &str,
        app: &str,
        from: Timestamp,
        to: Timestamp,
        limit: usize,
    ) -> Result<Vec<Mark>, StorageError> {
        let mut marks = self.all(
            "SELECT id, at, namespace, app, kind, reference, node, text FROM marks
             WHERE at >= ?3 AND at < ?4
               AND ((namespace = ?1 AND app = ?2) OR namespace IS NULL)
             ORDER BY at DESC, id DESC LIMIT ?5",
            params![namespace, app, from, to, limit as i64],
            mark,
        )?;
        marks.reverse();
        Ok(marks)
    }

    /// Forget what is older than `oldest` (a subject's current row stays,
    /// however old: it says what holds now), then the oldest rest while the
    /// data takes more than `max_bytes`. Returns the rows forgotten.
    pub fn prune(&self, oldest: Timestamp, max_bytes: u64) -> Result<usize, StorageError> {
        let connection = self.lock();
        let mut forgotten = connection
            .execute(
                "DELETE FROM changes WHERE at < ?1 AND id NOT IN (SELECT row FROM current)",
                params![oldest],
            )
            .map_err(self.fail())?;
        connection
            .execute("DELETE FROM marks WHERE at < ?1", params![oldest])
            .map_err(self.fail())?;
        connection
            .execute("DELETE FROM runs WHERE until < ?1", params![oldest])
            .map_err(self.fail())?;
        forgotten += connection
            .execute(
                "DELETE FROM task_lists WHERE finished < ?1",
                params![oldest],
            )
            .map_err(self.fail())?;
        // Pages freed are used again, so the file stays near the bound.
        let used = |c: &Connection| -> rusqlite::Result<u64> {
            c.query_row(
                "SELECT (page_count - freelist_count) * page_size
                 FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n.max(0) as u64)
        };
        while used(&connection).map_err(self.fail())? > max_bytes {
            // The oldest tenth of what may go, at least one row.
            let gone = connection
                .execute(
                    "DELETE FROM changes WHERE id IN (
                        SELECT id FROM changes WHERE id NOT IN (SELECT row FROM current)
                        ORDER BY id LIMIT MAX(1, (SELECT COUNT(*) FROM changes) / 10))",
                    [],
                )
                .map_err(self.fail())?;
            let marks = connection
                .execute(
                    "DELETE FROM marks WHERE id IN (
                        SELECT id FROM marks ORDER BY id LIMIT MAX(1, (SELECT COUNT(*) FROM marks) / 10))",
                    [],
                )
                .map_err(self.fail())?;
            let lists = connection
                .execute(
                    "DELETE FROM task_lists WHERE (namespace, server, uid, number) IN (
                        SELECT namespace, server, uid, number FROM task_lists
                        ORDER BY finished LIMIT MAX(1, (SELECT COUNT(*) FROM task_lists) / 10))",
                    [],
                )
                .map_err(self.fail())?;
            forgotten += gone + lists;
            if gone == 0 && marks == 0 && lists == 0 {
                break;
            }
        }
        Ok(forgotten)
    }
}

/// Record one verdict: `None` when it changed nothing, `Some(true)` when
/// it folded into an earlier row, `Some(false)` for a new row.
fn record_one(
    tx: &Transaction<'_>,
    seen: &Seen,
    flap_window: i64,
) -> rusqlite::Result<Option<bool>> {
    let s = &seen.subject;
    let current: Option<Row> = tx
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM changes WHERE id =
             (SELECT row FROM current WHERE namespace = ?1 AND app = ?2 AND kind = ?3 AND instance = ?4)"
        ))?
        .query_row(params![s.namespace, s.app, s.kind, s.instance], row)
        .optional()?;
    let gone = seen.held.status == GONE;
    if let Some(current) = &current {
        if current.seen.held == seen.held {
            return Ok(None);
        }
        // Back to what it held before, soon after it left: a flap.
        let before: Option<Row> = tx
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM changes
                 WHERE namespace = ?1 AND app = ?2 AND kind = ?3 AND instance = ?4 AND id < ?5
                 ORDER BY id DESC LIMIT 1"
            ))?
            .query_row(
                params![s.namespace, s.app, s.kind, s.instance, current.id],
                row,
            )
            .optional()?;
        // A task's transition is no flap: it stays an entry of its own.
        let flapped = |b: &Row| {
            b.seen.held == seen.held
                && !gone
                && current.seen.held.transitional.is_none()
                && seen.at - current.seen.at <= flap_window
        };
        if let Some(mut before) = before.filter(flapped) {
            fold(&mut before, current, seen.at);
            tx.prepare_cached(
                "UPDATE changes SET flaps = ?2, away = ?3, last_at = ?4 WHERE id = ?1",
            )?
            .execute(params![
                before.id,
                before.flaps,
                serde_json::to_string(&before.away).ok(),
                before.last_at
            ])?;
            tx.prepare_cached("DELETE FROM changes WHERE id = ?1")?
                .execute(params![current.id])?;
            tx.prepare_cached(
                "UPDATE current SET row = ?5 WHERE namespace = ?1 AND app = ?2 AND kind = ?3 AND instance = ?4",
            )?
            .execute(params![s.namespace, s.app, s.kind, s.instance, before.id])?;
            return Ok(Some(true));
        }
    } else if gone {
        return Ok(None);
    }
    tx.prepare_cached(
        "INSERT INTO changes (at, namespace, app, kind, instance, status, transitional, display,
                              reason, node, cause, policy, flaps, away, last_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, NULL, ?1)",
    )?
    .execute(params![
        seen.at,
        s.namespace,
        s.app,
        s.kind,
        s.instance,
        seen.held.status,
        seen.held.transitional,
        seen.held.display,
        seen.reason,
        seen.node,
        seen.cause
            .as_ref()
            .and_then(|c| serde_json::to_string(c).ok()),
        seen.policy
    ])?;
    let id = tx.last_insert_rowid();
    if gone {
        tx.prepare_cached(
            "DELETE FROM current WHERE namespace = ?1 AND app = ?2 AND kind = ?3 AND instance = ?4",
        )?
        .execute(params![s.namespace, s.app, s.kind, s.instance])?;
    } else {
        tx.prepare_cached(
            "INSERT INTO current (namespace, app, kind, instance, row) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (namespace, app, kind, instance) DO UPDATE SET row = excluded.row",
        )?
        .execute(params![s.namespace, s.app, s.kind, s.instance, id])?;
    }
    Ok(Some(false))
}

/// The status an instance has once it is no longer in its app.
pub const GONE: &str = "gone";

/// Fold `left` (the period away, from its start until `back`) into
/// `into`, the period it returned to.
fn fold(into: &mut Row, left: &Row, back: Timestamp) {
    into.flaps += 1 + left.flaps;
    let spent = (back - left.seen.at).max(0);
    let elsewhere: i64 = left.away.values().map(|a| a.ms).sum();
    let away = into.away.entry(left.seen.held.status.clone()).or_default();
    away.ms += (spent - elsewhere).max(0);
    away.entries += 1;
    for (status, a) in &left.away {
        let mine = into.away.entry(status.clone()).or_default();
        mine.ms += a.ms;
        mine.entries += a.entries;
    }
    into.last_at = back;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(at: Timestamp, status: &str) -> Seen {
        Seen {
            at,
            subject: Subject::app("shop", "web"),
            held: Held {
                status: status.into(),
                ..Held::default()
            },
            reason: format!("{status} reason"),
            node: None,
            cause: None,
            policy: Some("status@1.0.0".into()),
        }
    }

    fn page(store: &Store) -> Vec<Row> {
        store
            .page(
                "shop",
                "web",
                None,
                &Page {
                    limit: 100,
                    ..Page::default()
                },
            )
            .unwrap()
    }

    #[test]
    fn only_a_change_is_a_row_and_a_quick_return_folds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("history.db")).unwrap();
        let window = 60_000;
        let r = store
            .record(
                &[seen(1_000, "running"), seen(2_000, "running")],
                &[],
                window,
            )
            .unwrap();
        assert_eq!(
            r,
            Recorded {
                changes: 1,
                folded: 0
            }
        );
        // A crash loop: panic for 5 s, back, panic for 3 s, back.
        for (at, status) in [
            (10_000, "panic"),
            (15_000, "running"),
            (20_000, "panic"),
            (23_000, "running"),
        ] {
            store.record(&[seen(at, status)], &[], window).unwrap();
        }
        let rows = page(&store);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].flaps, 2);
        assert_eq!(
            rows[0].away["panic"],
            Away {
                ms: 8_000,
                entries: 2
            }
        );
        assert_eq!(rows[0].last_at, 23_000);
        // A stay longer than the window is a row of its own.
        store
            .record(&[seen(30_000, "degraded")], &[], window)
            .unwrap();
        store
            .record(&[seen(200_000, "running")], &[], window)
            .unwrap();
        let rows = page(&store);
        let statuses: Vec<&str> = rows.iter().map(|r| r.seen.held.status.as_str()).collect();
        assert_eq!(statuses, ["running", "degraded", "running"], "newest first");
    }

    #[test]
    fn a_gone_instance_has_no_current_row_and_pages_go_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("history.db")).unwrap();
        let pod = |at, status: &str| Seen {
            subject: Subject {
                kind: "pod".into(),
                instance: "web-1".into(),
                ..Subject::app("shop", "web")
            },
            ..seen(at, status)
        };
        store
            .record(&[pod(1, "running"), pod(2, GONE)], &[], 0)
            .unwrap();
        assert!(store.instances("shop", "web").unwrap().is_empty());
        for at in 3..10 {
            store
                .record(
                    &[seen(at, if at % 2 == 0 { "running" } else { "degraded" })],
                    &[],
                    0,
                )
                .unwrap();
        }
        let first = store
            .page(
                "shop",
                "web",
                None,
                &Page {
                    limit: 3,
                    ..Page::default()
                },
            )
            .unwrap();
        let rest = store
            .page(
                "shop",
                "web",
                None,
                &Page {
                    limit: 100,
                    before: Some(first[2].id),
                    ..Page::default()
                },
            )
            .unwrap();
        assert_eq!(first.len() + rest.len(), 7);
        assert!(rest.iter().all(|r| r.seen.at < first[2].seen.at));
        let pod_rows = store
            .page(
                "shop",
                "web",
                Some("web-1"),
                &Page {
                    limit: 10,
                    ..Page::default()
                },
            )
            .unwrap();
        assert_eq!(pod_rows.len(), 2);
        assert_eq!(pod_rows[0].seen.held.status, GONE);
    }

    #[test]
    fn pruning_keeps_what_holds_now_and_bounds_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("history.db")).unwrap();
        for at in 0..2_000 {
            let status = if at % 2 == 0 { "running" } else { "degraded" };
            store.record(&[seen(at * 1_000, status)], &[], 0).unwrap();
        }
        store.prune(1_000_000_000, u64::MAX).unwrap();
        let rows = page(&store);
        assert_eq!(rows.len(), 1, "only the row in force is older than kept");
        for at in 0..2_000 {
            let status = if at % 2 == 0 { "running" } else { "degraded" };
            store
                .record(&[seen(2_000_000 + at * 1_000, status)], &[], 0)
                .unwrap();
        }
        store.prune(0, 64 * 1024).unwrap();
        let kept = store
            .page(
                "shop",
                "web",
                None,
                &Page {
                    limit: 10_000,
                    ..Page::default()
                },
            )
            .unwrap();
        assert!(kept.len() < 2_000 && !kept.is_empty(), "{}", kept.len());
        assert_eq!(
            kept[0].seen.at,
            2_000_000 + 1_999 * 1_000,
            "the newest stay"
        );
    }
}
