//! A Kubernetes API simulator for verdict's tests and demo: it serves the
//! real wire protocol for the kinds verdict observes — discovery, list with
//! `resourceVersion` and selectors, `?watch=true` streams of
//! `ADDED`/`MODIFIED`/`DELETED`/`BOOKMARK`, `410 Gone` for versions it no
//! longer holds, get, create, replace, merge patch and delete (held by
//! finalizers) — so that the real `kube` client and `kubectl` talk to it as
//! to an API server. Tests drive it through [`Simulator`].

pub mod controller;
mod eviction;
pub mod kubevirt;
pub mod openapi;
pub mod resources;
pub mod scale;
pub mod scenario;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use scenario::Scenario;
pub use store::{Store, StoreError};

/// The built-in demo scenario: several apps across namespaces going through
/// a scale-up, a crash loop, an image pull failure, a node lost and back,
/// and an app stopped and started; it loops every minute.
pub const DEMO: &str = include_str!("../scenarios/demo.yaml");

/// A running simulator, stopped when dropped.
#[derive(Debug)]
pub struct Simulator {
    store: Arc<Store>,
    addr: SocketAddr,
    cut: watch::Sender<u64>,
    refused: Arc<std::sync::atomic::AtomicU64>,
    server: JoinHandle<()>,
    controller: Option<JoinHandle<()>>,
}

/// How a simulator starts.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Change events kept for watches to resume from.
    pub log_capacity: usize,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_every: Duration,
    /// Run the [`controller`] at this tick: pods of templated workloads
    /// follow their spec. Off by default, so that tests own every object.
    pub controller: Option<Duration>,
    /// Serve KubeVirt's and CDI's kinds from the start ([`kubevirt`]),
    /// played by the controller when it runs. Off by default, as in a
    /// cluster without KubeVirt.
    pub kubevirt: bool,
    /// Serve streaming lists (`sendInitialEvents`, Kubernetes' `WatchList`
    /// feature); off, such a watch is refused as invalid, as a server
    /// without the feature refuses it.
    pub streaming_lists: bool,
    /// Hold the first events of every watch of this kind (by plural) back
    /// for a while: a kind whose list comes late.
    pub slow_list: Option<(&'static str, Duration)>,
}

/// The controller's tick in the demo and the `verdict-sim` program.
pub const CONTROLLER_TICK: Duration = Duration::from_millis(500);

impl Default for Options {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            log_capacity: 10_000,
            bookmark_every: Duration::from_secs(5),
            controller: None,
            kubevirt: false,
            streaming_lists: true,
            slow_list: None,
        }
    }
}

impl Simulator {
    /// Start serving with an empty store.
    pub async fn start(options: Options) -> std::io::Result<Self> {
        let store = Arc::new(Store::new(options.log_capacity));
        Self::start_with(options, store).await
    }

    /// Start serving an existing store (a restarted simulator keeps its state).
    pub async fn start_with(options: Options, store: Arc<Store>) -> std::io::Result<Self> {
        // A real API server that starts again fills a new watch cache from
        // a list at the current version: a watch that resumes from an
        // older version gets `410 Gone` and lists again.
        if options.kubevirt {
            for crd in kubevirt::crds() {
                apply(&store, crd).map_err(|e| std::io::Error::other(e.message))?;
            }
        }
        store.compact();
        let listener = TcpListener::bind(options.listen).await?;
        let addr = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(0);
        let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let router = server::router(server::Shared {
            refused: Arc::clone(&refused),
            store: Arc::clone(&store),
            cut: cut_rx,
            server: addr.to_string(),
            bookmark_every: options.bookmark_every,
            streaming_lists: options.streaming_lists,
            slow_list: options.slow_list,
        });
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::error!(%error, "simulator stopped");
            }
        });
        let controller = options
            .controller
            .map(|every| tokio::spawn(controller::run(Arc::clone(&store), every)));
        Ok(Self {
            store,
            addr,
            cut,
            refused,
            server,
            controller,
        })
    }

    /// How many streaming lists were refused (with `streaming_lists` off).
    pub fn streaming_lists_refused(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Create the object, or replace it when it exists (like `kubectl apply`
    /// without the three-way merge). The kind comes from the object.
    pub fn apply(&self, object: Value) -> Result<Value, StoreError> {
        apply(&self.store, object)
    }

    /// End every open watch, as a dropped connection does.
    pub fn cut_watches(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    /// Stop serving: open connections are closed.
    pub fn stop(self) -> Arc<Store> {
        self.cut_watches();
        self.server.abort();
        Arc::clone(&self.store)
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.server.abort();
        if let Some(controller) = &self.controller {
            controller.abort();
        }
    }
}

/// The text at a JSON pointer of an object, empty when there is none.
pub(crate) fn text(object: &Value, pointer: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Create or replace an object in a store, by its `apiVersion` and `kind`.
pub fn apply(store: &Store, object: Value) -> Result<Value, StoreError> {
    let text = |pointer: &str| text(&object, pointer);
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    let resource = store.by_kind(&api_version, &kind).ok_or_else(|| {
        StoreError::bad_request(format!("no resource serves {api_version} {kind}"))
    })?;
    let namespace = text("/metadata/namespace");
    let namespace = if namespace.is_empty() && resource.namespaced {
        "default".to_string()
    } else {
        namespace
    };
    let name = text("/metadata/name");
    match store.get(resource, &namespace, &name) {
        Ok(_) => {
            let mut object = object;
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
            store.replace(resource, &namespace, &name, object)
        }
        Err(_) => store.create(resource, &namespace, object),
    }
}
