//! The host assembled from a [`Config`]: the plugin runtime and registry,
//! the folder watch, and the HTTP server.

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::api::{self, AppState};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::plugins::{Registry, Runtime, Watcher, watch};

/// A running host's parts.
#[derive(Debug)]
pub struct Host {
    pub registry: Arc<Registry>,
    _watcher: Option<Watcher>,
}

impl Host {
    /// Build the runtime, load every plugin of the folder and start
    /// watching it.
    pub fn start(config: &Config) -> Result<Self> {
        let runtime = Runtime::new(&config.data_dir.join("code-cache"), config.limits)
            .map_err(|e| Error::Runtime(e.to_string()))?;
        let settings = config
            .settings
            .keys()
            .map(|name| (name.clone(), config.settings_for(name)))
            .collect();
        let registry = Arc::new(Registry::new(
            Arc::new(runtime),
            config.plugins_dir.clone(),
            settings,
        ));
        let report = registry.reload();
        tracing::info!(
            loaded = report.loaded.len(),
            rejected = report.rejected.len(),
            "plugins loaded"
        );
        let watcher = match &config.plugins_dir {
            Some(dir) => Some(watch(Arc::clone(&registry), dir, config.reload_debounce)?),
            None => {
                tracing::warn!("no plugin folder: running without policies");
                None
            }
        };
        Ok(Self {
            registry,
            _watcher: watcher,
        })
    }

    /// The HTTP router over this host.
    pub fn router(&self) -> axum::Router {
        api::router(AppState {
            registry: Arc::clone(&self.registry),
        })
    }
}

/// Run the host until Ctrl-C or SIGTERM.
pub async fn serve(config: Config) -> Result<()> {
    let host = Host::start(&config)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Listen {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Listen {
        addr: config.listen,
        source,
    })?;
    // The first line on standard output says where to connect (port 0 picks
    // a free port; tests read it from here).
    println!("verdict listening on http://{addr}");
    tracing::info!(%addr, "serving");
    axum::serve(listener, host.router())
        .with_graceful_shutdown(shutdown())
        .await
        .map_err(|source| Error::Listen {
            addr: config.listen,
            source,
        })
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
