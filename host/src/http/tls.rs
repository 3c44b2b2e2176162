//! HTTPS: the certificate and key from PEM files, reloaded when their folder
//! changes (a renewed certificate, a Kubernetes secret's atomic update)
//! without dropping the listener. A file that does not load keeps the
//! previous certificate serving.

use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;

use crate::error::{Error, Result};
use crate::watch::{Watcher, watch_folder};

/// A certificate chain and its private key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// The TLS configuration of the files, and the watch that reloads it.
pub(crate) async fn serve_config(files: &TlsFiles) -> Result<(RustlsConfig, Watcher)> {
    // One process-wide crypto provider; kube's client brings the same one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = RustlsConfig::from_pem_file(&files.cert, &files.key)
        .await
        .map_err(Error::setting(
            "tls-cert",
            format!("{} / {}", files.cert.display(), files.key.display()),
        ))?;
    let folder = files
        .cert
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let runtime = tokio::runtime::Handle::current();
    let (reloaded, cert, key) = (config.clone(), files.cert.clone(), files.key.clone());
    let watcher = watch_folder(
        &folder,
        Duration::from_millis(200),
        "verdict-tls",
        move || match runtime.block_on(reloaded.reload_from_pem_file(&cert, &key)) {
            Ok(()) => tracing::info!(cert = %cert.display(), "TLS certificate reloaded"),
            Err(error) => {
                tracing::warn!(cert = %cert.display(), %error, "the new TLS certificate does not load; the previous one serves")
            }
        },
    )?;
    Ok((config, watcher))
}
