//! Tasks as `Task` custom resources (`tasks.verdict.dev`, see
//! `deploy/chart/verdict/crds/task-crd.yaml`) in one namespace, so that several
//! replicas of the host share them through the API server. The task's JSON
//! form is the object's `spec`; the name is the task id; a write is a
//! replace at the `resourceVersion` read with the revision before it.

use std::sync::Arc;

use futures_util::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::json;

use super::Tasks;
use super::model::Task;
use super::store::StoreError;

/// Labels that let `kubectl` select an app's tasks.
const APP_NAMESPACE: &str = "verdict.dev/app-namespace";
const APP_NAME: &str = "verdict.dev/app-name";

fn resource() -> ApiResource {
    ApiResource {
        group: "verdict.dev".into(),
        version: "v1".into(),
        api_version: "verdict.dev/v1".into(),
        kind: "Task".into(),
        plural: "tasks".into(),
    }
}

#[derive(Debug, Clone)]
pub struct KubeStore {
    api: Api<DynamicObject>,
    namespace: String,
}

fn failed(error: kube::Error) -> StoreError {
    match error {
        kube::Error::Api(status) if status.code == 409 => StoreError::Conflict(status.message),
        other => StoreError::Kube(other),
    }
}

fn task_of(object: &DynamicObject) -> Result<Task, String> {
    serde_json::from_value(object.data["spec"].clone()).map_err(|e| e.to_string())
}

impl KubeStore {
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced_with(client, namespace, &resource()),
            namespace: namespace.to_string(),
        }
    }

    fn object(&self, task: &Task, resource_version: Option<String>) -> DynamicObject {
        let (app_namespace, app_name) = task.app.split_once('/').unwrap_or(("", &task.app));
        let mut object = DynamicObject::new(&task.id, &resource())
            .within(&self.namespace)
            .data(json!({ "spec": task }));
        object.metadata.labels = Some(
            [
                (APP_NAMESPACE.to_string(), app_namespace.to_string()),
                (APP_NAME.to_string(), app_name.to_string()),
            ]
            .into(),
        );
        object.metadata.resource_version = resource_version;
        object
    }

    pub async fn load(&self) -> Result<Vec<Task>, StoreError> {
        let mut tasks = Vec::new();
        let mut params = ListParams::default().limit(500);
        loop {
            let page = self.api.list(&params).await.map_err(|e| match e {
                kube::Error::Api(status) if status.code == 404 => StoreError::NoTaskKind {
                    namespace: self.namespace.clone(),
                    source: kube::Error::Api(status),
                },
                other => failed(other),
            })?;
            for object in &page.items {
                match task_of(object) {
                    Ok(task) => tasks.push(task),
                    Err(error) => {
                        tracing::error!(name = ?object.metadata.name, %error, "a Task object does not read as a task; left in place");
                    }
                }
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(tasks),
            }
        }
    }

    pub async fn insert(&self, task: &Task) -> Result<(), StoreError> {
        self.api
            .create(&PostParams::default(), &self.object(task, None))
            .await
            .map(drop)
            .map_err(failed)
    }

    pub async fn update(&self, task: &Task) -> Result<(), StoreError> {
        let stored = self
            .api
            .get_opt(&task.id)
            .await
            .map_err(failed)?
            .ok_or_else(|| StoreError::NotFound(task.id.clone()))?;
        let revision = task_of(&stored).map(|t| t.revision).unwrap_or_default();
        if revision + 1 != task.revision {
            return Err(StoreError::Conflict(format!(
                "task {} changed meanwhile (revision {revision})",
                task.id
            )));
        }
        let object = self.object(task, stored.metadata.resource_version);
        self.api
            .replace(&task.id, &PostParams::default(), &object)
            .await
            .map(drop)
            .map_err(failed)
    }

    pub async fn delete(&self, ids: &[String]) -> Result<(), StoreError> {
        for id in ids {
            match self.api.delete(id, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(failed(error)),
            }
        }
        Ok(())
    }

    /// Follow the tasks other replicas write, into `tasks`, until aborted.
    pub async fn follow(self, tasks: Arc<Tasks>) {
        let mut events = std::pin::pin!(watcher(self.api.clone(), watcher::Config::default()));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    match task_of(&object) {
                        Ok(task) => {
                            tasks.remember(task);
                        }
                        Err(error) => {
                            tracing::warn!(name = ?object.metadata.name, %error, "a Task object does not read as a task");
                        }
                    }
                }
                Ok(watcher::Event::Delete(object)) => {
                    if let Some(name) = &object.metadata.name {
                        tasks.forget(name);
                    }
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(error) => {
                    tracing::warn!(%error, "watching Task objects failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }
}
