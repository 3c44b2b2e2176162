//! Where tasks are kept: a SQLite file (the embedded default) or `Task`
//! custom resources through the Kubernetes API (shared by replicas). Both
//! answer the same operations with the same errors.

use crate::storage::StorageError;
use std::sync::Arc;

use super::kube::KubeStore;
use super::model::Task;
use super::sqlite::SqliteStore;

/// A store operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Someone else wrote the task first.
    #[error("{0}")]
    Conflict(String),
    /// Another task took the new task's place in its app's sequence
    /// (admitted meanwhile, on another replica).
    #[error("{0}")]
    Taken(String),
    #[error("task {0} is not stored")]
    NotFound(String),
    #[error("task store: {0}")]
    Storage(#[from] StorageError),
    #[error("task store: the Kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    #[error(
        "task store: the cluster does not serve tasks.verdict.dev in namespace {namespace}: \
         install deploy/chart/verdict/crds/task-crd.yaml ({source})"
    )]
    NoTaskKind {
        namespace: String,
        #[source]
        source: kube::Error,
    },
}

/// The task store in use.
#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(Arc<SqliteStore>),
    Kube(Box<KubeStore>),
}

/// Run a blocking SQLite operation off the async threads.
async fn blocking<T: Send + 'static>(
    store: &Arc<SqliteStore>,
    f: impl FnOnce(&SqliteStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| StoreError::Storage(StorageError::Worker(e)))?
}

impl Store {
    /// Every stored task.
    pub async fn load(&self) -> Result<Vec<Task>, StoreError> {
        match self {
            Store::Sqlite(s) => blocking(s, SqliteStore::load).await,
            Store::Kube(k) => k.load().await,
        }
    }

    /// Store a new task; a task of the same id is a conflict.
    pub async fn insert(&self, task: &Task) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => {
                let task = task.clone();
                blocking(s, move |s| s.insert(&task)).await
            }
            Store::Kube(k) => k.insert(task).await,
        }
    }

    /// Store a changed task over the revision before it: a stored task of
    /// any other revision is a conflict.
    pub async fn update(&self, task: &Task) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => {
                let task = task.clone();
                blocking(s, move |s| s.update(&task)).await
            }
            Store::Kube(k) => k.update(task).await,
        }
    }

    /// An app's stored tasks, read afresh (the Kubernetes store asks the
    /// API server, not its watch).
    pub async fn of_app(&self, app: &str) -> Result<Vec<Task>, StoreError> {
        match self {
            Store::Sqlite(s) => {
                let app = app.to_string();
                blocking(s, move |s| s.of_app(&app)).await
            }
            Store::Kube(k) => k.of_app(app).await,
        }
    }

    /// Forget tasks (history past retention).
    pub async fn delete(&self, ids: Vec<String>) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => blocking(s, move |s| s.delete(&ids)).await,
            Store::Kube(k) => k.delete(&ids).await,
        }
    }

    /// The store's kind, for `/readyz` and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Kube(_) => "kubernetes",
        }
    }
}
