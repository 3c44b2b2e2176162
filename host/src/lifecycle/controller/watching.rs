//! What the delivery's controllers watch and how each change reaches the
//! reconciles it concerns: the stores of one namespace (or of all), the
//! routing of a change to the objects it concerns (a machine's or its
//! instance's to its Server, a hook's answer to the instance that asked),
//! the four kube-runtime controllers (sets, deployments, Servers, machines
//! whose Server is gone) and what each does with a failed reconcile.

use super::*;

/// Which watched resource changed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Which {
    Set,
    Deployment,
    Server,
    Machine,
    Instance,
}

/// A change, as the stores tell it: the object applied or deleted, or
/// none for a new list of every object.
pub(super) type Changed = (Which, Option<Touched>);

/// What routes a change to an object: where it is, and the set it
/// concerns (a machine's or Server's by its label, a deployment's by the
/// set it targets).
pub(super) struct Touched {
    namespace: String,
    name: String,
    set: Option<String>,
    /// What its Servers read of a set: its spec's generation, and whether
    /// it is being deleted.
    spec: (Option<i64>, bool),
}

impl Touched {
    /// An object of a set by its label.
    pub(super) fn labelled<K: kube::Resource>(object: &K) -> Self {
        let meta = object.meta();
        Self {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            set: set_of(object).map(String::from),
            spec: (meta.generation, meta.deletion_timestamp.is_some()),
        }
    }

    /// A deployment, by the set it targets.
    fn targeting(deployment: &DynamicObject) -> Self {
        Self {
            set: deployment.data["spec"]["replicaSet"]
                .as_str()
                .map(String::from),
            ..Self::labelled(deployment)
        }
    }
}

/// The resources of one namespace (or of all), watched.
pub(super) struct Scope {
    /// The namespace; all for `None`.
    pub(super) namespace: Option<String>,
    pub(super) sets: Watched,
    pub(super) deployments: Watched,
    pub(super) servers: Watched<ServerResource>,
    pub(super) machines: Watched,
    pub(super) instances: Watched,
}

impl Scope {
    pub(super) fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == namespace)
    }

    /// The deployments that target the set `set` of `namespace`, the one
    /// that delivers first: of two, the older (and of two made in the
    /// same second, the one delivering already).
    pub(super) fn deployments_of(&self, namespace: &str, set: &str) -> Result<Vec<Value>, Unread> {
        let mut found: Vec<Value> = self
            .deployments
            .filtered(|d| {
                d.metadata.namespace.as_deref() == Some(namespace)
                    && d.data["spec"]["replicaSet"] == set
            })?
            .iter()
            .map(|d| serde_json::to_value(&**d).unwrap_or_default())
            .collect();
        found.sort_by_key(|d| {
            let text = |p: &str| {
                d.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let idle = matches!(text("/status/phase").as_str(), "" | "Degraded");
            (
                text("/metadata/creationTimestamp"),
                idle,
                text("/metadata/name"),
            )
        });
        Ok(found)
    }
}

/// Where a change goes: to the reconcile of each object it concerns.
pub(super) struct Route {
    pub(super) sets: Sender<ObjectRef<DynamicObject>>,
    pub(super) deployments: Sender<ObjectRef<DynamicObject>>,
    pub(super) servers: Sender<ObjectRef<ServerResource>>,
    pub(super) machines: Sender<ObjectRef<DynamicObject>>,
    /// Each set's spec as its Servers were last told of it (`namespace/name`):
    /// a set's status written wakes none of them.
    pub(super) told: std::sync::Mutex<std::collections::HashMap<String, (Option<i64>, bool)>>,
}

impl Route {
    pub(super) fn changed(&self, scope: &Scope, which: Which, object: Option<&Touched>) {
        let Some(object) = object else {
            // A new list: everything it may concern.
            fn every<K: Kept>(watched: &Watched<K>, to: &Sender<ObjectRef<K>>)
            where
                K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
            {
                for object in watched.store.state() {
                    let _ = to.send(reference_of(watched, &object));
                }
            }
            every(&scope.sets, &self.sets);
            every(&scope.deployments, &self.deployments);
            every(&scope.servers, &self.servers);
            every(&scope.machines, &self.machines);
            return;
        };
        let (namespace, name) = (object.namespace.as_str(), object.name.as_str());
        match which {
            Which::Set => {
                self.set(scope, namespace, name);
                // Its Servers, when what they read of it changed (its
                // spec, its deletion) — not when its status was written.
                let told = lock(&self.told).insert(format!("{namespace}/{name}"), object.spec);
                if told != Some(object.spec) {
                    for server in scope.servers.of_set(namespace, name).unwrap_or_default() {
                        let _ = self.servers.send(reference_of(&scope.servers, &server));
                    }
                }
            }
            // Its set, and every deployment that targets it (itself among
            // them), whose standing it may change.
            Which::Deployment => {
                self.set(scope, namespace, object.set.as_deref().unwrap_or_default());
            }
            Which::Server => {
                let _ = self.servers.send(scope.servers.reference(namespace, name));
                // Its machine, which may have lost its Server.
                let _ = self
                    .machines
                    .send(scope.machines.reference(namespace, name));
                if let Some(set) = &object.set {
                    let _ = self.sets.send(scope.sets.reference(namespace, set));
                }
            }
            Which::Machine => {
                let _ = self
                    .machines
                    .send(scope.machines.reference(namespace, name));
                // Its Server, which observes it.
                let _ = self.servers.send(scope.servers.reference(namespace, name));
                match &object.set {
                    Some(set) => {
                        let _ = self.sets.send(scope.sets.reference(namespace, set));
                    }
                    // One no set has yet: the sets that may adopt it.
                    None => {
                        for set in scope
                            .sets
                            .store
                            .state_filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
                        {
                            let _ = self.sets.send(reference_of(&scope.sets, &set));
                        }
                    }
                }
            }
            Which::Instance => {
                // Its Server, which observes it, and its machine's set.
                let _ = self.servers.send(scope.servers.reference(namespace, name));
                if let Some(machine) = scope
                    .machines
                    .store
                    .get(&scope.machines.reference(namespace, name))
                    && let Some(set) = set_of(&*machine)
                {
                    let _ = self.sets.send(scope.sets.reference(namespace, set));
                }
            }
        }
    }

    /// The reconcile of the set `name` of `namespace`, and of the
    /// deployments that target it.
    pub(super) fn set(&self, scope: &Scope, namespace: &str, name: &str) {
        let _ = self.sets.send(scope.sets.reference(namespace, name));
        for deployment in scope.deployments.store.state_filter(|d| {
            d.metadata.namespace.as_deref() == Some(namespace)
                && d.data["spec"]["replicaSet"] == name
        }) {
            let _ = self
                .deployments
                .send(reference_of(&scope.deployments, &deployment));
        }
    }
}

pub(super) type Sender<T> = tokio::sync::mpsc::UnboundedSender<T>;

/// A reference to a watched object.
pub(super) fn reference_of<K: Kept>(watched: &Watched<K>, object: &K) -> ObjectRef<K>
where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    watched.reference(
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default(),
    )
}

/// A controller over a watched store, reconciling the objects it is sent.
pub(super) fn over<K: Kept>(
    watched: &Watched<K>,
    triggers: tokio::sync::mpsc::UnboundedReceiver<ObjectRef<K>>,
) -> kube::runtime::Controller<K>
where
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync + std::fmt::Debug + Unpin,
{
    kube::runtime::Controller::for_stream_with(
        futures_util::stream::pending(),
        watched.store.clone(),
        watched.resource.clone(),
    )
    .reconcile_on(tokio_stream::wrappers::UnboundedReceiverStream::new(
        triggers,
    ))
}

/// What a reconcile works with.
pub(super) struct Context {
    pub(super) controller: Arc<Controller>,
    pub(super) scope: Arc<Scope>,
    /// Where a set's reconcile is asked for.
    pub(super) sets: Sender<ObjectRef<DynamicObject>>,
    /// Where a Server's reconcile is asked for.
    pub(super) servers: Sender<ObjectRef<ServerResource>>,
}

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failed {
    /// What it governs could not be read: held.
    #[error(transparent)]
    Unread(#[from] Unread),
    /// The API server did not take a write, or was not reached.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A deleted instance's clean-up runs still: its finalizer stays.
    #[error("its clean-up runs")]
    CleaningUp,
    /// The finalizer could not be kept or released.
    #[error("the clean-up finalizer: {0}")]
    Finalizer(String),
}

/// How long a replica that does not act waits to look again (it is woken
/// when it takes the lead).
pub(super) const NOT_ACTING: Duration = Duration::from_secs(5);

/// The longest a reconcile that keeps failing waits to try again.
pub(super) const AFTER_FAILURE: Duration = Duration::from_secs(120);

/// How long a set at rest waits to be looked at again, when nothing it
/// depends on changes before.
pub(super) const AT_REST: Duration = Duration::from_secs(30);

pub(super) async fn reconcile_set(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
) -> Result<Action, Failed> {
    let Context {
        controller, scope, ..
    } = &*context;
    if controller.leadership.acting().is_none() {
        return Ok(Action::requeue(NOT_ACTING));
    }
    let key = key_of(&object.metadata);
    let mut found = controller.reconcile_set(&object, scope).await?;
    let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
    for name in std::mem::take(&mut found.planned) {
        let _ = context
            .servers
            .send(scope.servers.reference(namespace, &name));
    }
    let again = match (found.moving, found.gone) {
        (_, true) => {
            lock(&controller.counts.by_set).remove(&key);
            return Ok(Action::await_change());
        }
        (true, false) => controller.every,
        (false, false) => AT_REST,
    };
    lock(&controller.counts.by_set).insert(key, found);
    Ok(Action::requeue(again))
}

/// A deployment that cannot be carried out says why in its status: one
/// that does not read, that names no set of its namespace, or whose set
/// another deployment targets already. The status of one that is carried
/// out is its set's reconcile's to write.
pub(super) async fn reconcile_deployment(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
) -> Result<Action, Failed> {
    let Context {
        controller, scope, ..
    } = &*context;
    if controller.leadership.acting().is_none() {
        return Ok(Action::requeue(NOT_ACTING));
    }
    let d = serde_json::to_value(&*object).unwrap_or_default();
    let text = |pointer: &str| {
        d.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (namespace, name, set) = (
        text("/metadata/namespace"),
        text("/metadata/name"),
        text("/spec/replicaSet"),
    );
    let targeting = scope.deployments_of(namespace, set)?;
    let first = targeting.first().map(|f| {
        f["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    let problem = match VmDeployment::read(&d) {
        Err(problem) => problem,
        Ok(_) if scope.sets.get(namespace, set)?.is_none() => {
            // The store may be behind the API server (a set made just
            // before its deployment): a set not in it is looked up before
            // the deployment is said to name none. Found, its own
            // reconcile writes the deployment's status.
            let api = Api::<DynamicObject>::namespaced_with(
                controller.reader.clone(),
                namespace,
                &sets(),
            );
            if api.get_opt(set).await?.is_some() {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            format!("no VMReplicaSet {set} in namespace {namespace}")
        }
        Ok(_) if first.as_deref() != Some(name) => format!(
            "VMDeployment {} targets VMReplicaSet {set} already",
            first.unwrap_or_default()
        ),
        Ok(_) => return Ok(Action::await_change()),
    };
    let status = crate::lifecycle::resources::cannot_proceed(&d, &problem, now());
    controller
        .write_status(&deployments(), namespace, name, &d, status)
        .await?;
    Ok(Action::await_change())
}

/// A machine held by the clean-up finalizer whose Server is gone (its
/// clean-up ran, or the Server was taken away by hand): being deleted, it
/// is let go — there is no clean-up left to hold it for.
pub(super) async fn reconcile_machine(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
) -> Result<Action, Failed> {
    let Context {
        controller, scope, ..
    } = &*context;
    if controller.leadership.acting().is_none() {
        return Ok(Action::requeue(NOT_ACTING));
    }
    let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    let of_a_server = object
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Server");
    // (One its set owns, made before Servers, is its set's to take over.)
    if !finalizers.iter().any(|f| f == instance::FINALIZER)
        || !of_a_server
        || object.metadata.deletion_timestamp.is_none()
        // A Server not read is not a Server gone.
        || scope.servers.get(&namespace, &name)?.is_some()
    {
        return Ok(Action::await_change());
    }
    let kept: Vec<&String> = finalizers
        .iter()
        .filter(|f| f.as_str() != instance::FINALIZER)
        .collect();
    gone_is_done(
        controller
            .patch_metadata(
                &machines(),
                &namespace,
                &name,
                json!({ "resourceVersion": object.metadata.resource_version, "finalizers": kept }),
            )
            .await,
    )?;
    tracing::info!(
        namespace,
        instance = name,
        "VM delivery: a machine whose Server is gone is let go"
    );
    Ok(Action::await_change())
}

/// A reconcile that failed is tried again in a while; a failure that
/// lasts is said once, and its end when it ends.
/// What a controller does with each reconcile's result: one that
/// succeeded clears its object's failures in a row.
pub(super) fn settled<K: kube::Resource, E>(
    which: Which,
    controller: &Arc<Controller>,
) -> impl FnMut(Result<(ObjectRef<K>, Action), E>) -> std::future::Ready<()> + use<K, E> {
    let controller = Arc::clone(controller);
    move |result| {
        if let Ok((object, _)) = result {
            let key = format!(
                "{which:?}/{}/{}",
                object.namespace.as_deref().unwrap_or_default(),
                object.name
            );
            lock(&controller.failures).remove(&key);
        }
        std::future::ready(())
    }
}

/// How long a reconcile that failed `n` times in a row waits to try
/// again: a second, doubling, to [`AFTER_FAILURE`].
pub(super) fn after_failures(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(16)).min(AFTER_FAILURE)
}

/// A reconcile of a `which` that failed is tried again after a wait that
/// grows with its failures in a row; a failure that lasts is said once,
/// and its end when it ends.
pub(super) fn on_error<K: kube::Resource>(
    which: Which,
) -> impl Fn(Arc<K>, &Failed, Arc<Context>) -> Action + Send + Sync + 'static {
    move |object, failed, context| failed_again(which, object.meta(), failed, &context)
}

pub(super) fn failed_again(
    which: Which,
    object: &ObjectMeta,
    failed: &Failed,
    context: &Context,
) -> Action {
    let controller = &context.controller;
    // A clean-up under way: looked at again soon, as a list that runs.
    if matches!(failed, Failed::CleaningUp) {
        return Action::requeue(controller.every);
    }
    // A write on a version the store showed before a change it has not
    // brought yet: looked at again once it has.
    if let Failed::Kube(kube::Error::Api(status)) = failed
        && status.code == 409
    {
        return Action::requeue(controller.every);
    }
    if matches!(failed, Failed::Unread(_)) {
        controller
            .counts
            .unread
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let key = format!("{which:?}/{}", key_of(object));
    let failures = {
        let mut all = lock(&controller.failures);
        let n = all.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let text = failed.to_string();
    let mut said = lock(&controller.said);
    if said.get(&key) != Some(&text) {
        tracing::warn!(
            object = key,
            error = text,
            "VM delivery: held; asking again in a while"
        );
        said.insert(key, text);
    }
    // What could not be read is looked at again within the time a watch
    // takes to be trusted again (a watch back with a new list wakes it at
    // once).
    let wait = match failed {
        Failed::Unread(_) => after_failures(failures).min(UNREAD_AT_MOST),
        _ => after_failures(failures),
    };
    Action::requeue(wait)
}

/// The longest a reconcile held by what could not be read waits to look
/// again.
pub(super) const UNREAD_AT_MOST: Duration = Duration::from_secs(10);

impl Controller {
    /// The controllers of one namespace (of all, for `None`): the sets',
    /// the deployments' and the machines' whose set is gone, each over the
    /// stores of what it reads, each object reconciled on its own.
    pub(super) async fn run_scope(self: Arc<Self>, namespace: Option<String>) {
        let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel::<Changed>();
        let api = |resource: &ApiResource| match &namespace {
            Some(namespace) => {
                Api::<DynamicObject>::namespaced_with(self.reader.clone(), namespace, resource)
            }
            None => Api::<DynamicObject>::all_with(self.reader.clone(), resource),
        };
        let watch = |(resource, keep): (ApiResource, Keep), what: &'static str, which: Which| {
            let changed = changed.clone();
            Watched::start(
                api(&resource),
                (&resource, keep),
                what,
                Box::new(move |object: Option<&DynamicObject>| {
                    let touched = match which {
                        Which::Deployment => object.map(Touched::targeting),
                        _ => object.map(Touched::labelled),
                    };
                    let _ = changed.send((which, touched));
                }),
            )
        };
        let scope = Arc::new(Scope {
            namespace: namespace.clone(),
            sets: watch((sets(), Keep::Whole), "VMReplicaSets", Which::Set),
            deployments: watch(
                (deployments(), Keep::Whole),
                "VMDeployments",
                Which::Deployment,
            ),
            // A Server, read into its type: what is kept of it is what it
            // has (its task lists as they read).
            servers: {
                let changed = changed.clone();
                let api = match &namespace {
                    Some(namespace) => {
                        Api::<ServerResource>::namespaced(self.reader.clone(), namespace)
                    }
                    None => Api::<ServerResource>::all(self.reader.clone()),
                };
                Watched::start(
                    api,
                    (&(), ()),
                    "Servers",
                    Box::new(move |server: Option<&ServerResource>| {
                        let _ = changed.send((Which::Server, server.map(Touched::labelled)));
                    }),
                )
            },
            // Of a machine, what its state is read from; of its instance,
            // the node it runs on.
            machines: watch(
                (machines(), Keep::Status(&["printableStatus", "conditions"])),
                "VirtualMachines",
                Which::Machine,
            ),
            instances: watch(
                (instances(), Keep::Status(&["nodeName"])),
                "VirtualMachineInstances",
                Which::Instance,
            ),
        });
        let (to_sets, for_sets) = tokio::sync::mpsc::unbounded_channel();
        let (to_deployments, for_deployments) = tokio::sync::mpsc::unbounded_channel();
        let (to_servers, for_servers) = tokio::sync::mpsc::unbounded_channel();
        let (to_machines, for_machines) = tokio::sync::mpsc::unbounded_channel();
        // What changed, to the objects whose reconcile it concerns.
        let routed = Arc::clone(&scope);
        let route = Route {
            sets: to_sets.clone(),
            deployments: to_deployments,
            servers: to_servers.clone(),
            machines: to_machines,
            told: std::sync::Mutex::default(),
        };
        // Both helpers end with this scope (they hold its watches).
        let mut helpers = tokio::task::JoinSet::new();
        helpers.spawn(async move {
            while let Some((which, object)) = changes.recv().await {
                route.changed(&routed, which, object.as_ref());
            }
        });
        // A hook's answer is taken as soon as it comes.
        let mut answered = self.calls.answered();
        let answers = Arc::clone(&scope);
        let to_answered = to_servers.clone();
        helpers.spawn(async move {
            loop {
                match answered.recv().await {
                    Ok(instance) => {
                        if answers.covers(&instance.namespace) {
                            let _ = to_answered.send(
                                answers
                                    .servers
                                    .reference(&instance.namespace, &instance.name),
                            );
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        for server in answers.servers.store.state() {
                            let _ = to_answered.send(reference_of(&answers.servers, &server));
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });

        let context = Arc::new(Context {
            controller: Arc::clone(&self),
            scope: Arc::clone(&scope),
            sets: to_sets,
            servers: to_servers,
        });
        let sets_controller = over(&scope.sets, for_sets)
            .reconcile_all_on(self.wakes())
            .run(reconcile_set, on_error(Which::Set), Arc::clone(&context))
            .for_each(settled(Which::Set, &self));
        let deployments_controller = over(&scope.deployments, for_deployments)
            .reconcile_all_on(self.wakes())
            .run(
                reconcile_deployment,
                on_error(Which::Deployment),
                Arc::clone(&context),
            )
            .for_each(settled(Which::Deployment, &self));
        let servers_controller = over(&scope.servers, for_servers)
            .with_config(kube::runtime::controller::Config::default().concurrency(SERVERS_AT_ONCE))
            .reconcile_all_on(self.wakes())
            .run(
                reconcile_server,
                on_error(Which::Server),
                Arc::clone(&context),
            )
            .for_each(settled(Which::Server, &self));
        let machines_controller = over(&scope.machines, for_machines)
            .run(reconcile_machine, on_error(Which::Machine), context)
            .for_each(settled(Which::Machine, &self));
        tokio::join!(
            sets_controller,
            deployments_controller,
            servers_controller,
            machines_controller
        );
    }

    /// What asks every object of a kind to be reconciled again: this
    /// replica taking the lead, failover's judgement of the nodes, a
    /// plugin loaded or unloaded.
    pub(super) fn wakes(&self) -> impl futures_util::Stream<Item = ()> + Send + 'static {
        let leading = tokio_stream::wrappers::WatchStream::new(self.leadership.subscribe())
            .filter_map(|standing| std::future::ready(standing.leader.then_some(())));
        let tap = self.events.tap(256);
        let told = tokio_stream::wrappers::ReceiverStream::new(tap.receiver).filter_map(|event| {
            std::future::ready(matches!(event.kind, Kind::Failover | Kind::Plugin).then_some(()))
        });
        futures_util::stream::select(leading, told)
    }
}
