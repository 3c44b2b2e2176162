//! Admission through the admission policy: of the tasks users ask for, and
//! of Kubernetes `AdmissionReview` requests (the webhook). A policy that
//! fails (a trap, a timeout, none loaded) answers by the configured failure
//! mode, is counted by the registry and logged; it never hangs a request,
//! since every call has the plugin deadline.

use std::sync::Arc;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::{Map, Value};

use crate::plugins::{CallError, PolicyError, Registry, World};
use crate::tasks::model::NewTask;
use crate::tasks::{Admitted, Denial, Task, TaskError, Tasks};
use crate::verdicts::live::Live;
use crate::wit::{admission, types};

/// What admission answers when its policy fails (a trap, a timeout, no
/// policy loaded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailureMode {
    /// Allow, with a warning saying the policy failed.
    Open,
    /// Refuse.
    Closed,
}

/// What admission is told.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Settings {
    /// What admission answers when its policy fails (a trap, a timeout,
    /// none loaded): `closed` refuses, `open` allows with a warning.
    #[arg(
        long = "admission-failure",
        value_name = "MODE",
        default_value = "closed"
    )]
    pub failure: FailureMode,
    /// Admission policy calls run at once (0: one per core); more wait.
    #[arg(long = "admission-concurrency", value_name = "N", default_value = "0")]
    pub concurrency: usize,
    /// How long a review or task request waits for room among the calls
    /// running, in milliseconds; then it is answered by the failure mode
    /// (shed), so that a flood of slow reviews cannot push the others past
    /// the API server's webhook timeout.
    #[arg(long = "admission-queue-ms", value_name = "MS", default_value = "2000", value_parser = crate::settings::positive_millis)]
    pub queue: std::time::Duration,
    /// The cluster this host serves, as tasks name it (seed 000's
    /// `cluster_id`); a task for another cluster is refused. Unset: the
    /// UID of the cluster's `kube-system` namespace.
    #[arg(long = "cluster-id", value_name = "ID")]
    pub cluster_id: Option<String>,
    /// Namespaces no task makes an app in, besides verdict's own
    /// (`--tasks-namespace`); day-2 actions on apps there are still taken.
    #[arg(
        long = "protected-namespaces",
        value_name = "NS,…",
        value_delimiter = ',',
        default_value = "kube-system,kube-public,kube-node-lease"
    )]
    pub protected_namespaces: Vec<String>,
    /// Hosts an app's `health-url` may name besides the app's own Service
    /// and pods (a stand-in for the app, in tests): loopback, link-local
    /// and other namespaces' names are refused unless named here.
    #[arg(
        long = "health-url-allow",
        value_name = "HOST,…",
        value_delimiter = ','
    )]
    pub health_url_allow: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        crate::settings::defaults()
    }
}

/// The fields a day-2 update of any watched app may give: its image and
/// replicas (and which cluster and namespace it is of).
pub(crate) const DAY_TWO: [&str; 4] = ["image", "replicas", "namespace", "cluster-id"];

/// The admission side of the host.
#[derive(Debug, Clone)]
pub struct Admission {
    pub registry: Arc<Registry>,
    pub failure: FailureMode,
    pub live: Option<Live>,
    /// The admission world's shadows, asked the same task requests.
    pub shadows: Option<Arc<crate::shadow::Shadows>>,
    /// Room for the policy calls running at once.
    pub gate: Arc<Gate>,
    /// The cluster a task's fields are checked against (its id, its
    /// storage classes), when there is one.
    pub cluster: Option<Arc<Cluster>>,
    /// `--health-url-allow`.
    pub health_url_allow: Arc<[String]>,
}

/// Which cluster a host serves, and how it knows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Identity {
    /// The cluster's id, as tasks name it (seed 000's `cluster_id`).
    pub id: String,
    /// `flag` (`--cluster-id`), `kube-system-uid` or `cluster-property`
    /// (SIG Multicluster's `cluster.clusterset.k8s.io`).
    pub source: &'static str,
}

/// The `ClusterProperty` that names a cluster within its clusterset
/// (KEP-2149).
const CLUSTER_PROPERTY: &str = "cluster.clusterset.k8s.io";

/// What a task's fields are checked against in the cluster before it is
/// stored: which cluster this is, the storage classes, what the app's
/// workload was made from.
pub struct Cluster {
    client: kube::Client,
    /// `--cluster-id`, else the `kube-system` namespace's UID, else SIG
    /// Multicluster's `ClusterProperty` `cluster.clusterset.k8s.io`, read
    /// once.
    id: tokio::sync::OnceCell<Identity>,
    /// Where no app is made: `--protected-namespaces` and verdict's own.
    protected: std::collections::BTreeSet<String>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("id", &self.id.get())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// The cluster `client` reaches, as `settings` describe it; `own` is
    /// verdict's own namespace, protected with the configured ones.
    pub fn new(client: kube::Client, settings: &Settings, own: &str) -> Arc<Self> {
        let mut protected: std::collections::BTreeSet<String> = settings
            .protected_namespaces
            .iter()
            .map(|ns| ns.trim().to_string())
            .filter(|ns| !ns.is_empty())
            .collect();
        protected.insert(own.to_string());
        Arc::new(Self {
            client,
            id: match settings.cluster_id.clone() {
                Some(id) => tokio::sync::OnceCell::new_with(Some(Identity { id, source: "flag" })),
                None => tokio::sync::OnceCell::new(),
            },
            protected,
        })
    }

    /// This cluster's id.
    pub async fn id(&self) -> Result<String, String> {
        self.identity().await.map(|i| i.id)
    }

    /// This cluster's id and where it comes from: `--cluster-id`, else the
    /// `kube-system` namespace's UID, else the `ClusterProperty`
    /// `cluster.clusterset.k8s.io` where that kind is served.
    pub async fn identity(&self) -> Result<Identity, String> {
        self.id
            .get_or_try_init(|| async {
                let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                    kube::Api::all(self.client.clone());
                let uid_error = match namespaces.get("kube-system").await {
                    Ok(system) => match system.metadata.uid {
                        Some(id) => {
                            return Ok(Identity {
                                id,
                                source: "kube-system-uid",
                            });
                        }
                        None => "the kube-system namespace has no UID".to_string(),
                    },
                    Err(e) => e.to_string(),
                };
                let gvk = kube::core::GroupVersionKind::gvk("about.k8s.io", "v1alpha1", "ClusterProperty");
                let resource = kube::core::ApiResource::from_gvk(&gvk);
                let properties: kube::Api<DynamicObject> =
                    kube::Api::all_with(self.client.clone(), &resource);
                match properties.get_opt(CLUSTER_PROPERTY).await {
                    Ok(Some(property)) => property.data["spec"]["value"]
                        .as_str()
                        .filter(|v| !v.is_empty())
                        .map(|id| Identity {
                            id: id.to_string(),
                            source: "cluster-property",
                        })
                        .ok_or_else(|| format!("the ClusterProperty {CLUSTER_PROPERTY} has no value")),
                    _ => Err(format!(
                        "which cluster this is could not be read (the kube-system namespace's UID: {uid_error}; no ClusterProperty {CLUSTER_PROPERTY}); set --cluster-id"
                    )),
                }
            })
            .await
            .cloned()
    }

    /// Check what a task asks against the cluster: its cluster, its storage
    /// class (which must exist, and allow expansion when an update grows
    /// the claims), cert-manager when it asks for issuance. `kept` is what
    /// the app's workload was made from, when verdict made it.
    async fn check(
        &self,
        request: &NewTask,
        spec: &crate::tasks::spec::AppSpec,
        kept: Option<crate::tasks::spec::AppSpec>,
    ) -> Result<(), TaskError> {
        use crate::tasks::Refusal;
        use crate::wit::types::TaskAction as Action;
        let invalid = |field: &str, message: String| {
            TaskError::Refused(Refusal::Invalid {
                field: field.into(),
                message,
            })
        };
        if let Some(asked) = &spec.cluster_id {
            let own = self.id().await.map_err(TaskError::Unverified)?;
            if *asked != own {
                return Err(invalid(
                    "params.cluster-id",
                    format!(
                        "this verdict serves cluster `{own}`, not `{asked}`; send the task to that cluster's verdict"
                    ),
                ));
            }
        }
        if !matches!(request.action, Action::Create | Action::Update) {
            return Ok(());
        }
        let namespace = request.app.split_once('/').map_or("", |(ns, _)| ns);
        if request.action == Action::Create && self.protected.contains(namespace) {
            return Err(TaskError::Refused(Refusal::Protected(format!(
                "namespace {namespace} is protected: verdict makes no app there (--protected-namespaces: {})",
                self.protected
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))));
        }
        if spec
            .certificate
            .as_ref()
            .is_some_and(|c| c.issuer.is_some())
        {
            let gvk = kube::core::GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate");
            match kube::discovery::oneshot::pinned_kind(&self.client, &gvk).await {
                Ok(_) => {}
                // Not in discovery, or its group not there at all.
                Err(e)
                    if matches!(&e, kube::Error::Discovery(_))
                        || matches!(&e, kube::Error::Api(status) if status.code == 404) =>
                {
                    return Err(invalid(
                        "params.certificate.issuer",
                        "cert-manager's Certificate (cert-manager.io/v1) is not served by this cluster; give `cert` and `key` instead".into(),
                    ));
                }
                Err(e) => {
                    return Err(TaskError::Unverified(format!(
                        "whether cert-manager is served could not be read: {e}"
                    )));
                }
            }
        }
        let class_name = spec
            .storage_class_name
            .clone()
            .or_else(|| kept.as_ref().and_then(|k| k.storage_class_name.clone()));
        if request.action == Action::Update
            && let Some(kept) = &kept
        {
            if spec.storage_class_size.is_some() && kept.storage_class_size.is_none() {
                return Err(invalid(
                    "params.storage-class-size",
                    "the app was made without storage (a Deployment); storage cannot be added to it".into(),
                ));
            }
            if let (Some(asked), Some(was)) = (&spec.storage_class_name, &kept.storage_class_name)
                && asked != was
            {
                return Err(invalid(
                    "params.storage-class-name",
                    format!("the app's claims are of class `{was}`; a claim's class cannot change"),
                ));
            }
        }
        let Some(class_name) = class_name.filter(|_| spec.storage_class_size.is_some()) else {
            return Ok(());
        };
        let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> =
            kube::Api::all(self.client.clone());
        let class = match classes.get_opt(&class_name).await {
            Ok(Some(class)) => class,
            Ok(None) => {
                return Err(invalid(
                    "params.storage-class-name",
                    format!("no StorageClass `{class_name}` in this cluster"),
                ));
            }
            Err(e) => {
                return Err(TaskError::Unverified(format!(
                    "StorageClass `{class_name}` could not be read: {e}"
                )));
            }
        };
        let (Some(asked), Some(was)) = (
            &spec.storage_class_size,
            kept.as_ref().and_then(|k| k.storage_class_size.as_ref()),
        ) else {
            return Ok(());
        };
        let quantity = |text: &str| kube_quantity::ParsedQuantity::try_from(text).ok();
        match (quantity(asked), quantity(was)) {
            (Some(asked_q), Some(was_q)) if asked_q < was_q => Err(invalid(
                "params.storage-class-size",
                format!("the app's claims are {was}; a claim cannot shrink to {asked}"),
            )),
            (Some(asked_q), Some(was_q))
                if asked_q > was_q && class.allow_volume_expansion != Some(true) =>
            {
                Err(invalid(
                    "params.storage-class-size",
                    format!(
                        "StorageClass `{class_name}` does not allow volume expansion (allowVolumeExpansion); the app's claims stay {was}"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}

/// A bound on the admission policy's calls at once, and on how long a call
/// waits for room (the status world's calls are bounded by the derivation's
/// threads, the failover world's by its one evaluation at a time).
#[derive(Debug)]
pub struct Gate {
    room: tokio::sync::Semaphore,
    calls: usize,
    wait: std::time::Duration,
}

impl Gate {
    pub fn new(settings: &Settings) -> Arc<Self> {
        let calls = match settings.concurrency {
            0 => std::thread::available_parallelism().map_or(2, usize::from),
            n => n,
        };
        Arc::new(Self {
            room: tokio::sync::Semaphore::new(calls),
            calls,
            wait: settings.queue,
        })
    }
}

/// A review the webhook cannot read.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("the body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("not an AdmissionReview: {path}: {source}")]
    Shape {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("kind is `{0}`, not AdmissionReview")]
    Kind(String),
    #[error("apiVersion is `{0}`, not admission.k8s.io/v1")]
    Version(String),
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// Call the admission policy off the async threads, once there is room
/// for the call (or shed when there is none in time).
async fn call<R: Send + 'static>(
    (registry, gate): (&Arc<Registry>, &Gate),
    f: impl Fn(&crate::plugins::Version, &types::Context) -> Result<R, CallError> + Send + 'static,
) -> Result<(R, String), PolicyError> {
    let busy = || PolicyError::Busy {
        world: World::Admission,
        calls: gate.calls,
        waited_ms: gate.wait.as_millis() as u64,
    };
    let _room = tokio::time::timeout(gate.wait, gate.room.acquire())
        .await
        .map_err(|_| busy())?
        .map_err(|_| busy())?;
    let registry = Arc::clone(registry);
    tokio::task::spawn_blocking(move || {
        let slot = registry.policy(World::Admission)?;
        let answer = slot.call(|version| {
            let ctx = version.context(crate::time::now());
            f(version, &ctx)
        })?;
        let info = answer.version.info();
        Ok((answer.value, format!("{}@{}", info.name, info.version)))
    })
    .await
    .unwrap_or_else(|e| {
        Err(PolicyError::Panicked {
            plugin: "admission".into(),
            source: Arc::new(e),
        })
    })
}

impl Admission {
    /// Ask the admission world's shadows the task request the active
    /// policy answered, off this path.
    fn shadow(
        &self,
        input: admission::AdmissionInput,
        answer: &admission::TaskAdmission,
        policy: &str,
    ) {
        let Some(shadows) = &self.shadows else { return };
        let slots = self.registry.shadows(World::Admission);
        if slots.is_empty() {
            return;
        }
        let subject = format!(
            "{}/{} {}",
            input.request.app.namespace,
            input.request.app.name,
            crate::wit::WitName::wit_name(&input.request.action)
        );
        let active = [(
            subject.clone(),
            serde_json::to_value(answer).unwrap_or_default(),
        )]
        .into();
        let job = crate::shadow::job(
            slots.clone(),
            policy.to_string(),
            crate::time::now(),
            active,
            move |version, ctx| {
                let answer = version.admit_task(ctx, &input)?;
                Ok(vec![(
                    subject.clone(),
                    serde_json::to_value(answer).unwrap_or_default(),
                )])
            },
        );
        shadows.offer(&slots, job);
    }

    /// What the host knows of an app: its observation and verdict. An app
    /// never seen before (no object, no task yet) has no verdict served:
    /// the status policy is asked for one now, from the same observation,
    /// so that a first request is judged on the facts a second one would
    /// be.
    async fn app(&self, id: &types::AppId) -> (Option<types::App>, Option<types::AppVerdict>) {
        let Some(live) = &self.live else {
            return (None, None);
        };
        let key = (id.namespace.clone(), id.name.clone());
        let now = crate::time::now();
        let input = live.observed.read().inputs_for([&key], now).pop();
        let served = live
            .verdicts
            .get(&id.namespace, &id.name)
            .map(|v| v.verdict);
        let verdict = match (served, &input) {
            (Some(verdict), _) => Some(verdict),
            (None, None) => None,
            (None, Some(input)) => {
                let (registry, input) = (Arc::clone(&self.registry), input.clone());
                tokio::task::spawn_blocking(move || {
                    let slot = registry.policy(World::Status).ok()?;
                    let mut verdicts =
                        crate::verdicts::evaluate(&slot, std::slice::from_ref(&input), now, None)
                            .ok()?;
                    verdicts.pop()?.ok()
                })
                .await
                .ok()
                .flatten()
            }
        };
        (input.map(|i| i.app), verdict)
    }

    /// The one way a task is asked for: admitted by the admission policy
    /// (given the app's tasks) and, when it is, stored in `tasks`. Users'
    /// requests, the demo's scripted ones and failover's all come here.
    pub(crate) async fn ask(&self, tasks: &Tasks, mut request: NewTask) -> Result<Task, TaskError> {
        let spec = request.read_spec()?;
        if let Ok(app) = crate::tasks::parse_app(&request.app) {
            spec.check_health_url(&app.namespace, &app.name, &self.health_url_allow)?;
        }
        if let Some(cluster) = &self.cluster {
            let kept = self.kept_spec(&request.app);
            cluster.check(&request, &spec, kept).await?;
        }
        let asked = &request.clone();
        // The policy's word first (who may do what), then whether verdict
        // may touch what the task names.
        tasks
            .create(request, |app_tasks| async move {
                let admitted = self.admit_task(asked, app_tasks).await?;
                self.check_ownership(asked).map_err(Denial::NotVerdicts)?;
                Ok(admitted)
            })
            .await
    }

    /// Refuse a delete, or an update beyond image and replicas, of an app
    /// whose objects verdict neither made nor was handed, naming each and
    /// how to hand it over (the executor checks again, on the objects as
    /// they are then, before it changes anything).
    fn check_ownership(&self, request: &NewTask) -> Result<(), String> {
        use crate::observe::resources::kubevirt::{SETS, VM};
        use crate::tasks::ownership::{Owner, not_verdicts};
        use crate::wit::types::TaskAction as Action;
        let beyond_day_two = match request.action {
            Action::Delete => true,
            Action::Update => {
                !request.params.contains_key("failover")
                    && request.params.keys().any(|k| {
                        crate::tasks::spec::FIELDS.contains(&k.as_str())
                            && !DAY_TWO.contains(&k.as_str())
                    })
            }
            _ => false,
        };
        let (Some(live), true) = (&self.live, beyond_day_two) else {
            return Ok(());
        };
        let Some((namespace, name)) = request.app.split_once('/') else {
            return Ok(());
        };
        let key = (namespace.to_string(), name.to_string());
        let snapshot = live.observed.read();
        let mut refused = Vec::new();
        if let Some(input) = snapshot.inputs_for([&key], crate::time::now()).pop() {
            for w in &input.app.workloads {
                let owner = Owner::of_observed(name, &w.labels, &w.annotations);
                let what = format!(
                    "{} {namespace}/{}",
                    crate::observe::workload_kind(w.kind),
                    w.name
                );
                if owner == Owner::Made {
                    continue;
                }
                if !owner.is_verdicts() {
                    refused.push(not_verdicts(&what, &owner, &request.app));
                } else if request.action == Action::Update {
                    // An update beyond image and replicas re-renders the app
                    // from what it was made from: only what verdict made
                    // has it.
                    refused.push(format!(
                        "{what} was handed to verdict, not made by it: an update of it sets its image and replicas only"
                    ));
                }
            }
        }
        if request.action == Action::Delete {
            for object in snapshot.objects_of(&key) {
                let deleted = SETS.contains(&object.kind.as_str())
                    || (object.kind == VM
                        && object
                            .owner
                            .as_ref()
                            .is_none_or(|(kind, _)| !SETS.contains(&kind.as_str())));
                let owner = Owner::of_observed(name, &object.labels, &object.annotations);
                if deleted && !owner.is_verdicts() {
                    let what = format!("{} {namespace}/{}", object.kind, object.name);
                    refused.push(not_verdicts(&what, &owner, &request.app));
                }
            }
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(refused.join("; "))
        }
    }

    /// What the app's workload was made from, when verdict made it.
    fn kept_spec(&self, app: &str) -> Option<crate::tasks::spec::AppSpec> {
        let live = self.live.as_ref()?;
        let (namespace, name) = app.split_once('/')?;
        let key = (namespace.to_string(), name.to_string());
        let input = live
            .observed
            .read()
            .inputs_for([&key], crate::time::now())
            .pop()?;
        input.app.workloads.iter().find_map(|w| {
            crate::tasks::spec::AppSpec::kept(&w.annotations)
                .ok()
                .flatten()
        })
    }

    /// Decide on a task request, given the app's tasks (newest first).
    pub async fn admit_task(
        &self,
        request: &NewTask,
        tasks: Vec<types::Task>,
    ) -> Result<Admitted, Denial> {
        let id = crate::tasks::parse_app(&request.app).map_err(|e| Denial::Denied {
            reason: e,
            warnings: Vec::new(),
            policy: None,
        })?;
        let (app, verdict) = self.app(&id).await;
        let mut spec =
            crate::tasks::spec::AppSpec::of(&request.params).map_err(|e| Denial::Denied {
                reason: e.to_string(),
                warnings: Vec::new(),
                policy: None,
            })?;
        // The policy sees the material's size, from the material itself.
        crate::tasks::sealed::SealedFields::unseal(&mut spec, &request.material);
        let input = admission::AdmissionInput {
            request: admission::TaskRequest {
                app: id,
                action: request.action,
                params: Value::Object(request.params.clone()).to_string(),
                spec: spec.to_wit(),
                requested_by: request.requested_by.clone(),
            },
            app,
            verdict,
            tasks,
        };
        let asked = input.clone();
        let answer = call((&self.registry, &self.gate), move |version, ctx| {
            version.admit_task(ctx, &input)
        })
        .await;
        let (answer, policy) = match answer {
            Ok(answer) => answer,
            Err(error) => return self.task_failure(&request.app, &error),
        };
        self.shadow(asked, &answer, &policy);
        let defaults = match serde_json::from_str::<Value>(&answer.defaults) {
            Ok(Value::Object(map)) => map,
            _ => {
                let error = PolicyError::Failed {
                    plugin: policy,
                    error: CallError::Malformed(format!(
                        "defaults `{}` are not a JSON object",
                        answer.defaults
                    )),
                };
                return self.task_failure(&request.app, &error);
            }
        };
        let approval = match answer.decision {
            admission::Decision::Allow => None,
            admission::Decision::RequireApproval(reason) => Some(reason),
            admission::Decision::Deny(reason) => {
                return Err(Denial::Denied {
                    reason,
                    warnings: answer.warnings,
                    policy: Some(policy),
                });
            }
        };
        Ok(Admitted {
            approval,
            defaults,
            warnings: answer.warnings,
            plan: answer
                .plan
                .into_iter()
                .map(|s| (s.name, s.description))
                .collect(),
            policy: Some(policy),
            failure: None,
        })
    }

    fn task_failure(&self, app: &str, error: &PolicyError) -> Result<Admitted, Denial> {
        tracing::warn!(%app, error = error.detail(), mode = ?self.failure, "the admission policy failed on a task");
        match self.failure {
            FailureMode::Closed => Err(Denial::Unavailable(Arc::new(error.clone()))),
            FailureMode::Open => Ok(Admitted {
                approval: None,
                defaults: Map::new(),
                warnings: vec![format!(
                    "admitted without policy: the admission policy could not decide ({error})"
                )],
                plan: Vec::new(),
                policy: None,
                failure: Some(error.to_string()),
            }),
        }
    }

    /// Answer an `AdmissionReview` body. Only a body that is not a review
    /// is an error; a policy failure answers by the failure mode.
    pub async fn review(&self, body: &[u8]) -> Result<Value, BadReview> {
        let (value, request) = read_review(body)?;
        let namespace_labels = request.namespace.as_ref().and_then(|ns| {
            let live = self.live.as_ref()?;
            live.observed.read().namespaces.get(ns).cloned()
        });
        let input = admission::ReviewInput {
            request: value["request"].to_string(),
            namespace_labels,
        };
        let answer = call((&self.registry, &self.gate), move |version, ctx| {
            version.review(ctx, &input)
        })
        .await;
        let response = AdmissionResponse::from(&request);
        let what = format!(
            "{} {}/{}",
            request.kind.kind,
            request.namespace.as_deref().unwrap_or(""),
            request.name
        );
        let response = match answer
            .and_then(|(answer, policy)| respond(response.clone(), answer, &policy))
        {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(object = %what, error = error.detail(), mode = ?self.failure, "the admission policy failed on a review");
                let message = format!("the admission policy could not decide ({error})");
                match self.failure {
                    FailureMode::Open => {
                        let mut response = response;
                        response.warnings =
                            Some(vec![format!("admitted without policy: {message}")]);
                        response
                    }
                    FailureMode::Closed => {
                        let mut response = response.deny(message);
                        response.result.code = 503;
                        response
                    }
                }
            }
        };
        Ok(wire_form(&response.into_review()))
    }
}

/// An `AdmissionReview` body read: the whole of it as JSON and its request;
/// an error that says what is wrong for anything else (not JSON, another
/// kind or version, no request).
pub fn read_review(body: &[u8]) -> Result<(Value, AdmissionRequest<DynamicObject>), BadReview> {
    let value: Value = serde_json::from_slice(body).map_err(BadReview::NotJson)?;
    let review: AdmissionReview<DynamicObject> =
        serde_path_to_error::deserialize(&value).map_err(|e| BadReview::Shape {
            path: e.path().to_string(),
            source: e.into_inner(),
        })?;
    if review.types.kind != "AdmissionReview" {
        return Err(BadReview::Kind(review.types.kind));
    }
    // The versions an API server sends (the webhook configurations ask
    // for v1); the answer mirrors the request's.
    if !["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
        .contains(&review.types.api_version.as_str())
    {
        return Err(BadReview::Version(review.types.api_version));
    }
    let request: AdmissionRequest<DynamicObject> =
        review.try_into().map_err(|_| BadReview::NoRequest)?;
    Ok((value, request))
}

/// A review as the API server reads it: the patch as base64 text (the
/// `[]byte` encoding of Go's JSON), where serde writes an array of numbers.
fn wire_form(review: &AdmissionReview<DynamicObject>) -> Value {
    use base64::Engine;
    let mut value = serde_json::to_value(review).unwrap_or_default();
    if let Some(patch) = review.response.as_ref().and_then(|r| r.patch.as_ref()) {
        value["response"]["patch"] = base64::engine::general_purpose::STANDARD
            .encode(patch)
            .into();
    }
    value
}

/// The webhook's response from the policy's answer; a patch that is not a
/// JSON Patch is a malformed answer.
fn respond(
    mut response: AdmissionResponse,
    answer: admission::ReviewResponse,
    policy: &str,
) -> Result<AdmissionResponse, PolicyError> {
    if !answer.warnings.is_empty() {
        response.warnings = Some(answer.warnings);
    }
    if !answer.allowed {
        let message = answer
            .message
            .unwrap_or_else(|| "denied by the admission policy".into());
        response = response.deny(message);
        response.result.code = answer.code.unwrap_or(403);
        return Ok(response);
    }
    if let Some(patch) = answer.patch {
        let malformed = |error: CallError| PolicyError::Failed {
            plugin: policy.to_string(),
            error,
        };
        let patch: json_patch::Patch = serde_json::from_str(&patch).map_err(|e| {
            malformed(CallError::undecodable("the patch is not a JSON Patch")(
                e.into(),
            ))
        })?;
        response = response.with_patch(patch).map_err(|e| {
            malformed(CallError::undecodable("the patch does not encode")(
                e.into(),
            ))
        })?;
    }
    Ok(response)
}
