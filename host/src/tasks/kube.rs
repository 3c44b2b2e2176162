//! Tasks as `Task` custom resources (`tasks.verdict.dev`, see
//! `deploy/chart/verdict/crds/task-crd.yaml`) in one namespace, so that several
//! replicas of the host share them through the API server. The task's JSON
//! form is the object's `spec`; a write is a replace at the
//! `resourceVersion` read with the revision before it.
//!
//! The object's name is the app's and the task's place in the app's
//! sequence (`task-<app hash>-<sequence>`), so that creating it is a
//! compare-and-swap: two replicas that admit a task after the same one
//! name it alike, and the API server takes only the first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
    /// The object name of each task id, where it is not the id.
    names: Arc<Mutex<HashMap<String, String>>>,
}

/// The Secret that keeps the secret material of the task stored as `name`.
fn material_name(task_object: &str) -> String {
    format!("{task_object}-material")
}

/// The object name of a task: by its app and sequence, or (a task stored
/// before sequences) its id.
pub fn object_name(task: &Task) -> String {
    if task.sequence == 0 {
        return task.id.clone();
    }
    use sha2::Digest as _;
    let app = sha2::Sha256::digest(task.app.as_bytes());
    format!("task-{}-{:08}", hex::encode(&app[..8]), task.sequence)
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
            names: Arc::default(),
        }
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Note where a task is stored.
    fn named(&self, task: &Task, object: &DynamicObject) {
        if let Some(name) = &object.metadata.name
            && *name != task.id
        {
            self.names().insert(task.id.clone(), name.clone());
        }
    }

    fn name_of(&self, id: &str) -> String {
        self.names()
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }

    fn object(&self, task: &Task, resource_version: Option<String>) -> DynamicObject {
        let (app_namespace, app_name) = task.app.split_once('/').unwrap_or(("", &task.app));
        let mut object = DynamicObject::new(&object_name(task), &resource())
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
        self.list(ListParams::default()).await
    }

    /// An app's tasks, from the API server.
    pub async fn of_app(&self, app: &str) -> Result<Vec<Task>, StoreError> {
        let (namespace, name) = app.split_once('/').unwrap_or(("", app));
        let selector = format!("{APP_NAMESPACE}={namespace},{APP_NAME}={name}");
        self.list(ListParams::default().labels(&selector)).await
    }

    async fn list(&self, params: ListParams) -> Result<Vec<Task>, StoreError> {
        let mut tasks = Vec::new();
        let mut params = params.limit(500);
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
                    Ok(task) => {
                        self.named(&task, object);
                        tasks.push(task);
                    }
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
        let object = self.object(task, None);
        match self.api.create(&PostParams::default(), &object).await {
            Ok(_) => {
                self.named(task, &object);
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 && task.sequence > 0 => {
                Err(StoreError::Taken(format!(
                    "task {} of {} was admitted meanwhile",
                    task.sequence, task.app
                )))
            }
            Err(error) => Err(failed(error)),
        }
    }

    /// The Secrets of the tasks' namespace.
    fn secrets(&self) -> Api<k8s_openapi::api::core::v1::Secret> {
        Api::namespaced(self.api.clone().into_client(), &self.namespace)
    }

    /// Keep a task's secret material in a Secret beside its `Task` object,
    /// owned by it (the garbage collector deletes it with the task), so
    /// that whichever replica leads can carry the task out.
    pub async fn keep_material(
        &self,
        task: &Task,
        material: &super::sealed::Material,
    ) -> Result<(), StoreError> {
        use k8s_openapi::api::core::v1::Secret;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let name = self.name_of(&task.id);
        let owner = self
            .api
            .get_opt(&name)
            .await
            .map_err(failed)?
            .ok_or_else(|| StoreError::NotFound(task.id.clone()))?;
        let resource = resource();
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(material_name(&name)),
                namespace: Some(self.namespace.clone()),
                labels: Some(
                    [(
                        crate::tasks::spec::MANAGED_BY.to_string(),
                        "verdict".to_string(),
                    )]
                    .into(),
                ),
                owner_references: Some(vec![OwnerReference {
                    api_version: resource.api_version.clone(),
                    kind: resource.kind.clone(),
                    name: name.clone(),
                    uid: owner.metadata.uid.unwrap_or_default(),
                    ..OwnerReference::default()
                }]),
                ..Default::default()
            },
            data: Some(
                material
                    .to_data()
                    .into_iter()
                    .map(|(k, v)| (k, k8s_openapi::ByteString(v)))
                    .collect(),
            ),
            type_: Some("Opaque".into()),
            ..Secret::default()
        };
        self.secrets()
            .create(&PostParams::default(), &secret)
            .await
            .map(drop)
            .map_err(failed)
    }

    /// A task's secret material, when it has some kept.
    pub async fn material(&self, id: &str) -> Result<Option<super::sealed::Material>, StoreError> {
        let found = self
            .secrets()
            .get_opt(&material_name(&self.name_of(id)))
            .await
            .map_err(failed)?;
        Ok(found.map(|s| {
            let data = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            super::sealed::Material::from_data(&data)
        }))
    }

    /// Forget a task's secret material (it is done with).
    pub async fn drop_material(&self, id: &str) -> Result<(), StoreError> {
        match self
            .secrets()
            .delete(&material_name(&self.name_of(id)), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(failed(error)),
        }
    }

    pub async fn update(&self, task: &Task) -> Result<(), StoreError> {
        let name = self.name_of(&task.id);
        let stored = self
            .api
            .get_opt(&name)
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
            .replace(&name, &PostParams::default(), &object)
            .await
            .map(drop)
            .map_err(failed)
    }

    pub async fn delete(&self, ids: &[String]) -> Result<(), StoreError> {
        for id in ids {
            match self
                .api
                .delete(&self.name_of(id), &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    self.names().remove(id);
                }
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
                            self.named(&task, &object);
                            tasks.remember(task);
                        }
                        Err(error) => {
                            tracing::warn!(name = ?object.metadata.name, %error, "a Task object does not read as a task");
                        }
                    }
                }
                Ok(watcher::Event::Delete(object)) => {
                    let id = task_of(&object).map(|t| t.id).ok();
                    if let Some(id) = id.or(object.metadata.name) {
                        self.names().remove(&id);
                        tasks.forget(&id);
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
