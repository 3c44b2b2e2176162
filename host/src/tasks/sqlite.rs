//! Tasks in a SQLite database file of the host's ([`crate::storage`]): one
//! row a task, its JSON beside the columns queries need.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use super::model::{Task, finished};
use super::store::StoreError;
use crate::storage::{self, StorageError};

/// The schema, one migration per version: the database at version `n` has
/// had the first `n` applied.
const MIGRATIONS: &[&str] = &[
    // 1: a task per row, its JSON form in `body`, the columns queries need
    // beside it.
    "CREATE TABLE tasks (
        id TEXT PRIMARY KEY NOT NULL,
        app TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        finished INTEGER NOT NULL,
        revision INTEGER NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX tasks_by_app ON tasks (app, created_at);",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    connection: Mutex<Connection>,
}

fn failed(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| StorageError::database(path)(e).into()
}

impl SqliteStore {
    /// Open (creating when missing) and migrate the database.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let connection = storage::open(path, "task", MIGRATIONS)?;
        Ok(Self {
            path: path.to_path_buf(),
            connection: Mutex::new(connection),
        })
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every task. A row that does not read as a task is reported and left
    /// in place.
    pub fn load(&self) -> Result<Vec<Task>, StoreError> {
        let fail = failed(&self.path);
        let connection = self.connection();
        let mut statement = connection
            .prepare("SELECT id, body FROM tasks ORDER BY created_at, id")
            .map_err(&fail)?;
        let rows = statement
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(&fail)?;
        let mut tasks = Vec::new();
        for row in rows {
            let (id, body) = row.map_err(&fail)?;
            match serde_json::from_str::<Task>(&body) {
                Ok(task) => tasks.push(task),
                Err(error) => {
                    tracing::error!(path = %self.path.display(), %id, %error, "a stored task does not read as a task; left in place");
                }
            }
        }
        Ok(tasks)
    }

    /// An app's tasks.
    pub fn of_app(&self, app: &str) -> Result<Vec<Task>, StoreError> {
        let fail = failed(&self.path);
        let connection = self.connection();
        let mut statement = connection
            .prepare("SELECT body FROM tasks WHERE app = ?1 ORDER BY created_at, id")
            .map_err(&fail)?;
        let rows = statement
            .query_map([app], |r| r.get::<_, String>(0))
            .map_err(&fail)?;
        let mut tasks = Vec::new();
        for body in rows {
            if let Ok(task) = serde_json::from_str::<Task>(&body.map_err(&fail)?) {
                tasks.push(task);
            }
        }
        Ok(tasks)
    }

    pub fn insert(&self, task: &Task) -> Result<(), StoreError> {
        let body = serde_json::to_string(task).map_err(StorageError::record(&self.path))?;
        let inserted = self
            .connection()
            .execute(
                "INSERT INTO tasks (id, app, created_at, finished, revision, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
                params![
                    task.id,
                    task.app,
                    task.created_at,
                    finished(task.phase),
                    task.revision as i64,
                    body
                ],
            )
            .map_err(failed(&self.path))?;
        if inserted == 0 {
            return Err(StoreError::Conflict(format!(
                "task {} exists already",
                task.id
            )));
        }
        Ok(())
    }

    /// Write a changed task over the revision before it.
    pub fn update(&self, task: &Task) -> Result<(), StoreError> {
        let body = serde_json::to_string(task).map_err(StorageError::record(&self.path))?;
        let fail = failed(&self.path);
        let connection = self.connection();
        let updated = connection
            .execute(
                "UPDATE tasks SET finished = ?2, revision = ?3, body = ?4
                 WHERE id = ?1 AND revision = ?5",
                params![
                    task.id,
                    finished(task.phase),
                    task.revision as i64,
                    body,
                    task.revision as i64 - 1
                ],
            )
            .map_err(&fail)?;
        if updated == 1 {
            return Ok(());
        }
        let stored: Option<i64> = connection
            .query_row(
                "SELECT revision FROM tasks WHERE id = ?1",
                [&task.id],
                |r| r.get(0),
            )
            .optional()
            .map_err(&fail)?;
        Err(match stored {
            None => StoreError::NotFound(task.id.clone()),
            Some(revision) => StoreError::Conflict(format!(
                "task {} changed meanwhile (revision {revision})",
                task.id
            )),
        })
    }

    pub fn delete(&self, ids: &[String]) -> Result<(), StoreError> {
        let fail = failed(&self.path);
        let mut connection = self.connection();
        let transaction = connection.transaction().map_err(&fail)?;
        for id in ids {
            transaction
                .execute("DELETE FROM tasks WHERE id = ?1", [id])
                .map_err(&fail)?;
        }
        transaction.commit().map_err(&fail)
    }

    /// `PRAGMA integrity_check`: `ok`, or what is wrong.
    pub fn integrity(&self) -> Result<String, StoreError> {
        self.connection()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(failed(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_database_is_migrated_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let store = SqliteStore::open(&path).unwrap();
        let version: i64 = store
            .connection()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version as usize, SCHEMA_VERSION);
        let mode: String = store
            .connection()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(store);
        assert!(SqliteStore::open(&path).unwrap().load().unwrap().is_empty());
    }

    #[test]
    fn a_database_of_a_newer_schema_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let connection = Connection::open(&path).unwrap();
        connection.pragma_update(None, "user_version", 99).unwrap();
        drop(connection);
        let error = SqliteStore::open(&path).unwrap_err().to_string();
        assert!(error.contains("schema version 99"), "{error}");
        let connection = Connection::open(&path).unwrap();
        let tables: i64 = connection
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 0, "nothing was created");
    }

    #[test]
    fn a_file_that_is_not_a_database_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        std::fs::write(&path, b"these are not the tasks you are looking for").unwrap();
        let error = SqliteStore::open(&path).unwrap_err().to_string();
        assert!(
            error.contains("tasks.db") && error.contains("not a database"),
            "{error}"
        );
    }
}
