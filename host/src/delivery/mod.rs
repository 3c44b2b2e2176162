//! Policies delivered from elsewhere than the plugin folder: OCI artifacts
//! pulled by digest ([`oci`]) and HTTPS URLs with their sha256. What is
//! fetched is bounded (a deadline, a largest size) and checked against its
//! digest, then kept in the data folder's cache by digest (written to a
//! temporary file, synced and renamed), so that nothing half-downloaded is
//! ever loaded and a source that is away later does not take the policy
//! with it.

pub mod crd;
pub mod oci;
pub mod policies;
pub mod signature;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Why a policy could not be delivered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeliveryError {
    #[error("{0}")]
    Reference(String),
    #[error("the registry of {reference}: {message}")]
    Registry { reference: String, message: String },
    #[error("{0}")]
    Artifact(String),
    #[error("{what} has digest {found}, not {expected}: refused")]
    Digest {
        what: String,
        expected: String,
        found: String,
    },
    #[error("{url}: {message}")]
    Fetch { url: String, message: String },
    #[error("the policy cache {}: {message}", path.display())]
    Cache { path: PathBuf, message: String },
    /// The file a pull writes (`verdict policy pull -o`).
    #[error("{}: {message}", path.as_ref().map_or_else(|| "the output".to_string(), |p| p.display().to_string()))]
    Output {
        path: Option<PathBuf>,
        message: String,
    },
    #[error("signature: {0}")]
    Signature(String),
}

/// Where a policy comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An OCI artifact: `registry/repository@sha256:…` (or `:tag`, resolved
    /// once to the digest it names), optionally written `oci://…`.
    Oci(String),
    /// A component at an HTTPS URL, with the sha256 it must have.
    Url { url: String, sha256: String },
}

impl Source {
    /// The source as it names its bytes for good: an OCI reference by
    /// digest, or a URL (with its sha256); `None` for an OCI tag, which
    /// must be resolved.
    pub fn pinned(&self) -> Option<String> {
        match self {
            Source::Oci(reference) if reference.contains("@sha256:") => {
                Some(reference.trim_start_matches("oci://").to_string())
            }
            Source::Oci(_) => None,
            Source::Url { url, .. } => Some(url.clone()),
        }
    }

    /// A source as written: an HTTP(S) URL with `sha256` beside it, else an
    /// OCI reference.
    pub fn parse(text: &str, sha256: Option<&str>) -> Result<Self, DeliveryError> {
        let text = text.trim();
        if text.starts_with("https://") || text.starts_with("http://") {
            let sha256 = sha256
                .map(|s| s.trim().trim_start_matches("sha256:").to_lowercase())
                .filter(|s| s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit()))
                .ok_or_else(|| {
                    DeliveryError::Reference(format!(
                        "{text}: a URL needs the sha256 of what it serves (64 hex digits)"
                    ))
                })?;
            return Ok(Self::Url {
                url: text.to_string(),
                sha256,
            });
        }
        if text.is_empty() {
            return Err(DeliveryError::Reference("the source is empty".into()));
        }
        Ok(Self::Oci(text.to_string()))
    }
}

/// A component fetched and checked.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// `sha256:<hex>` of the component itself.
    pub sha256: String,
    /// The OCI manifest's digest, for an OCI source.
    pub manifest: Option<String>,
    /// The source pinned: an OCI reference by digest, or the URL.
    pub pinned: String,
    pub component: Vec<u8>,
}

/// An error of an HTTP client with its causes: "error decoding response
/// body" alone does not say that the connection was dropped.
pub(crate) fn described(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// The body of an answer, at most `limit` bytes (`what` names it when it
/// is longer), read as it arrives.
pub(crate) async fn read_bounded(
    mut response: reqwest::Response,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>, String> {
    let over = || format!("{what} is over {limit} bytes: refused");
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(over());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        format!(
            "{what} broke off after {} bytes: {}",
            body.len(),
            described(&e)
        )
    })? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(over());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Fetch a source's component, checked against its digest, within the
/// pull deadline and the largest component accepted.
pub async fn fetch(
    registries: &oci::Registries,
    source: &Source,
) -> Result<Fetched, DeliveryError> {
    match source {
        Source::Oci(reference) => {
            let mut component = Vec::new();
            let pulled = oci::pull(registries, reference, &mut component).await?;
            Ok(Fetched {
                sha256: pulled.component_digest,
                manifest: Some(pulled.digest),
                pinned: pulled.pinned,
                component,
            })
        }
        Source::Url { url, sha256 } => {
            let failed = |message: String| DeliveryError::Fetch {
                url: url.clone(),
                message,
            };
            let download = async {
                let response = registries
                    .http()?
                    .get(url)
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .map_err(|e| failed(described(&e)))?;
                read_bounded(
                    response,
                    registries.max_component_bytes(),
                    &format!(
                        "the component (the largest accepted is {} MiB, --max-component-mib)",
                        registries.max_component_mib
                    ),
                )
                .await
                .map_err(failed)
            };
            let component = registries.within(url, download).await?;
            let found = hex::encode(Sha256::digest(&component));
            if found != *sha256 {
                return Err(DeliveryError::Digest {
                    what: url.clone(),
                    expected: format!("sha256:{sha256}"),
                    found: format!("sha256:{found}"),
                });
            }
            Ok(Fetched {
                sha256: format!("sha256:{found}"),
                manifest: None,
                pinned: url.clone(),
                component,
            })
        }
    }
}

/// Components kept by the pinned source they came from (an OCI reference
/// by digest, a URL with its sha256), in a folder of the data folder: a
/// pinned source names its bytes for good, so a kept one needs no network.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    fn paths(&self, pinned: &str) -> (PathBuf, PathBuf) {
        let key = hex::encode(Sha256::digest(pinned.as_bytes()));
        (
            self.dir.join(format!("{key}.wasm")),
            self.dir.join(format!("{key}.sha256")),
        )
    }

    /// Keep a component (checked already) for its pinned source: the bytes
    /// and their digest each written to a temporary file, synced and
    /// renamed into place, the digest last.
    pub fn keep(&self, fetched: &Fetched) -> Result<(), DeliveryError> {
        let (component, digest) = self.paths(&fetched.pinned);
        std::fs::create_dir_all(&self.dir).map_err(|e| DeliveryError::Cache {
            path: self.dir.clone(),
            message: e.to_string(),
        })?;
        write_atomically(&component, &fetched.component)?;
        write_atomically(&digest, fetched.sha256.as_bytes())
    }

    /// The component kept for a pinned source, read and checked against
    /// the digest kept with it.
    pub fn get(&self, pinned: &str) -> Option<Fetched> {
        let (component, digest) = self.paths(pinned);
        let sha256 = std::fs::read_to_string(digest).ok()?;
        let bytes = std::fs::read(component).ok()?;
        (oci::digest_of(&bytes) == sha256).then(|| Fetched {
            sha256,
            manifest: pinned.split_once('@').map(|(_, d)| d.to_string()),
            pinned: pinned.to_string(),
            component: bytes,
        })
    }
}

/// Write a cache file whole or not at all ([`crate::storage::write_atomically`]).
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), DeliveryError> {
    crate::storage::write_atomically(path, bytes).map_err(|e| DeliveryError::Cache {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_oci_references_or_urls_with_their_sha256() {
        assert_eq!(
            Source::parse("oci://r.example:5000/p/status@sha256:ab", None).unwrap(),
            Source::Oci("oci://r.example:5000/p/status@sha256:ab".into())
        );
        let sha = "a".repeat(64);
        assert_eq!(
            Source::parse(
                "https://example.com/status.wasm",
                Some(&format!("sha256:{sha}"))
            )
            .unwrap(),
            Source::Url {
                url: "https://example.com/status.wasm".into(),
                sha256: sha
            }
        );
        let refused = Source::parse("https://example.com/status.wasm", None).unwrap_err();
        assert!(
            refused.to_string().contains("needs the sha256"),
            "{refused}"
        );
        assert!(Source::parse("https://e/x.wasm", Some("abc")).is_err());
        assert!(Source::parse("  ", None).is_err());
    }

    #[test]
    fn the_cache_keeps_by_pinned_source_and_refuses_what_no_longer_matches() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let component = b"not really a component".to_vec();
        let pinned = "r:5000/p/status@sha256:0123";
        let fetched = Fetched {
            sha256: oci::digest_of(&component),
            manifest: None,
            pinned: pinned.into(),
            component: component.clone(),
        };
        cache.keep(&fetched).unwrap();
        assert_eq!(cache.get(pinned).map(|f| f.component), Some(component));
        assert!(cache.get("r:5000/p/status@sha256:4567").is_none());
        // Bytes changed on disk are not handed out.
        let (path, _) = cache.paths(pinned);
        std::fs::write(&path, b"changed on disk").unwrap();
        assert!(cache.get(pinned).is_none());
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
