//! Policies as OCI artifacts, in the layout of the CNCF Wasm OCI artifact
//! format: one layer of media type `application/wasm` holding the
//! component, a config of media type `application/vnd.wasm.config.v0+json`,
//! and annotations on the manifest naming the policy
//! (`org.opencontainers.image.title`, `…version`, `…description`,
//! `…created`), its world (`dev.verdict.policy.world`: `status-policy`,
//! `failover-policy`, `admission-policy`, `lifecycle-policy`) and the WIT
//! package it was built against (`dev.verdict.policy.wit`:
//! `verdict:policy@0.4.0`).
//!
//! A pull checks the manifest's digest against the reference's (when it
//! names one) and the layer's against the manifest's; nothing is handed on
//! before both match. Every pull is bounded: a deadline to connect, one for
//! any silence of the registry, one for the whole pull; a manifest of at
//! most 4 MiB (as Kubernetes' registries have it); a component of at most
//! its declared size and the `--max-component-mib` setting, streamed to its
//! destination as it arrives.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::DeliveryError;
use crate::plugins::VersionInfo;

/// The largest manifest read.
pub const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;
/// How long a connection to a registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a registry may be silent: for its first byte, and between any
/// two reads after it.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The component's layer.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The artifact's config.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The manifest annotation naming the policy's world.
pub const WORLD_ANNOTATION: &str = "dev.verdict.policy.world";
/// The manifest annotation naming the WIT package.
pub const WIT_ANNOTATION: &str = "dev.verdict.policy.wit";
const TITLE: &str = "org.opencontainers.image.title";
const VERSION: &str = "org.opencontainers.image.version";
const DESCRIPTION: &str = "org.opencontainers.image.description";
const CREATED: &str = "org.opencontainers.image.created";

/// How registries are reached.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
#[group(skip)]
pub struct Registries {
    /// Registries (`host:port`) reached over plain HTTP instead of HTTPS;
    /// repeat for more.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure: Vec<String>,
    /// A public key (ECDSA P-256 PEM, as `cosign generate-key-pair` writes
    /// it): every artifact pulled must carry a signature by it (cosign's
    /// format), else it is refused.
    #[arg(long = "verify-key", value_name = "FILE")]
    pub verify_key: Option<std::path::PathBuf>,
    /// The longest one pull may take, whole (manifest, signature and
    /// component), in seconds; a registry that sends slower is left.
    #[arg(long = "pull-timeout-s", value_name = "SECONDS", default_value_t = 120,
        value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub pull_timeout_s: u64,
    /// The largest policy component accepted from a registry or a URL, in
    /// MiB.
    #[arg(long = "max-component-mib", value_name = "MIB", default_value_t = 64,
        value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_component_mib: u64,
}

impl Default for Registries {
    fn default() -> Self {
        Self {
            insecure: Vec::new(),
            verify_key: None,
            pull_timeout_s: 120,
            max_component_mib: 64,
        }
    }
}

impl Registries {
    fn client(&self) -> Client {
        // reqwest is built without a crypto provider of its own: the
        // host's (ring) serves it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client::new(ClientConfig {
            protocol: self.protocol(),
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            ..ClientConfig::default()
        })
    }

    fn protocol(&self) -> ClientProtocol {
        if self.insecure.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(self.insecure.clone())
        }
    }

    /// The largest component accepted, in bytes.
    pub fn max_component_bytes(&self) -> u64 {
        self.max_component_mib * 1024 * 1024
    }

    /// A plain HTTP client with the pull's connect and silence deadlines.
    pub(super) fn http(&self) -> Result<reqwest::Client, DeliveryError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(|e| DeliveryError::Reference(format!("an HTTP client: {e}")))
    }

    /// Run one pull (or inspection) of `what` within the pull deadline.
    pub(super) async fn within<T>(
        &self,
        what: &str,
        work: impl Future<Output = Result<T, DeliveryError>>,
    ) -> Result<T, DeliveryError> {
        let deadline = Duration::from_secs(self.pull_timeout_s);
        tokio::time::timeout(deadline, work)
            .await
            .unwrap_or_else(|_| {
                Err(DeliveryError::Registry {
                    reference: what.to_string(),
                    message: format!(
                        "not done within the pull deadline of {} s (--pull-timeout-s): left",
                        self.pull_timeout_s
                    ),
                })
            })
    }
}

/// Registry credentials from `VERDICT_REGISTRY_USERNAME` and
/// `VERDICT_REGISTRY_PASSWORD`, else anonymous.
fn auth() -> RegistryAuth {
    match (
        std::env::var("VERDICT_REGISTRY_USERNAME"),
        std::env::var("VERDICT_REGISTRY_PASSWORD"),
    ) {
        (Ok(user), Ok(password)) => RegistryAuth::Basic(user, password),
        _ => RegistryAuth::Anonymous,
    }
}

fn parse(reference: &str) -> Result<Reference, DeliveryError> {
    let text = reference.strip_prefix("oci://").unwrap_or(reference);
    text.parse().map_err(|e: oci_client::ParseError| {
        DeliveryError::Reference(format!("`{reference}` is not an OCI reference: {e}"))
    })
}

fn registry(
    reference: &Reference,
    error: oci_client::errors::OciDistributionError,
) -> DeliveryError {
    DeliveryError::Registry {
        reference: reference.whole(),
        message: error.to_string(),
    }
}

/// `sha256:<hex>` of bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A policy pulled and checked (its component written to the sink the
/// pull was given).
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference pinned to the manifest's digest.
    pub pinned: String,
    /// The manifest's digest.
    pub digest: String,
    /// `sha256:<hex>` of the component.
    pub component_digest: String,
    pub annotations: BTreeMap<String, String>,
}

/// What an artifact holds, as `verdict policy inspect` prints it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Inspection {
    pub reference: String,
    pub digest: String,
    pub config_media_type: String,
    pub layers: Vec<LayerInfo>,
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LayerInfo {
    pub media_type: String,
    pub digest: String,
    pub size: i64,
}

/// Push a component, described by `info`, to `reference`; the reference
/// pinned to the digest of the manifest pushed.
pub async fn push(
    registries: &Registries,
    reference: &str,
    component: &[u8],
    info: &VersionInfo,
) -> Result<String, DeliveryError> {
    let reference = parse(reference)?;
    let client = registries.client();
    let world = serde_json::to_value(info.world)
        .ok()
        .and_then(|w| w.as_str().map(String::from))
        .unwrap_or_default();
    let created = crate::time::rfc3339(crate::time::now());
    let annotations = BTreeMap::from([
        (TITLE.to_string(), info.name.clone()),
        (VERSION.to_string(), info.version.clone()),
        (DESCRIPTION.to_string(), info.description.clone()),
        (CREATED.to_string(), created.clone()),
        (WORLD_ANNOTATION.to_string(), world.clone()),
        (
            WIT_ANNOTATION.to_string(),
            format!("verdict:policy@{}", crate::plugins::PACKAGE_VERSION),
        ),
    ]);
    let layer = ImageLayer::new(component.to_vec(), LAYER_MEDIA_TYPE.to_string(), None);
    let config = serde_json::json!({
        "created": created,
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer.sha256_digest()],
        "component": {"world": world, "name": info.name, "version": info.version},
    });
    let config = Config::new(
        serde_json::to_vec(&config).unwrap_or_default(),
        CONFIG_MEDIA_TYPE.to_string(),
        None,
    );
    let manifest =
        OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
    client
        .push(&reference, &[layer], config, &auth(), Some(manifest))
        .await
        .map_err(|e| registry(&reference, e))?;
    // The digest of the manifest as the registry holds it.
    let (_, digest) = self::manifest(registries, &client, &reference).await?;
    Ok(pinned(&reference, &digest))
}

fn pinned(reference: &Reference, digest: &str) -> String {
    Reference::with_digest(
        reference.registry().to_string(),
        reference.repository().to_string(),
        digest.to_string(),
    )
    .whole()
}

/// The manifest of `reference`, at most [`MAX_MANIFEST_BYTES`], its digest
/// checked against the reference's when it names one.
async fn manifest(
    registries: &Registries,
    client: &Client,
    reference: &Reference,
) -> Result<(OciImageManifest, String), DeliveryError> {
    let failed = |message: String| DeliveryError::Registry {
        reference: reference.whole(),
        message,
    };
    let token = client
        .auth(reference, &auth(), RegistryOperation::Pull)
        .await
        .map_err(|e| registry(reference, e))?;
    let host = reference.resolve_registry();
    let url = format!(
        "{}://{host}/v2/{}/manifests/{}",
        if registries.insecure.iter().any(|h| h == host) {
            "http"
        } else {
            "https"
        },
        reference.repository(),
        reference
            .digest()
            .unwrap_or_else(|| reference.tag().unwrap_or("latest")),
    );
    let mut request = registries.http()?.get(&url).header(
        reqwest::header::ACCEPT,
        [
            oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
            oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE,
            oci_client::manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE,
        ]
        .join(", "),
    );
    match (token, auth()) {
        (Some(token), _) => request = request.bearer_auth(token),
        (None, RegistryAuth::Basic(user, password)) => {
            request = request.basic_auth(user, Some(password));
        }
        _ => {}
    }
    let response = request
        .send()
        .await
        .map_err(|e| failed(super::described(&e)))?;
    let status = response.status();
    if !status.is_success() {
        let body = super::read_bounded(response, 4096, "the answer")
            .await
            .unwrap_or_default();
        return Err(failed(format!(
            "{url} answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        )));
    }
    let raw = super::read_bounded(response, MAX_MANIFEST_BYTES, "the manifest")
        .await
        .map_err(failed)?;
    let digest = digest_of(&raw);
    if let Some(expected) = reference.digest()
        && expected != digest
    {
        return Err(DeliveryError::Digest {
            what: format!("the manifest of {}", reference.whole()),
            expected: expected.to_string(),
            found: digest,
        });
    }
    let kind: serde_json::Value = serde_json::from_slice(&raw).map_err(|e| {
        DeliveryError::Artifact(format!(
            "the manifest of {} is not JSON: {e}",
            reference.whole()
        ))
    })?;
    if kind.get("manifests").is_some() {
        return Err(DeliveryError::Artifact(format!(
            "{} is an image index (a list of manifests, {}), not a policy artifact: push the policy with `verdict policy push`",
            reference.whole(),
            kind["mediaType"].as_str().unwrap_or("no media type")
        )));
    }
    let manifest: OciImageManifest = serde_json::from_value(kind).map_err(|e| {
        DeliveryError::Artifact(format!(
            "the manifest of {} does not read: {e}",
            reference.whole()
        ))
    })?;
    Ok((manifest, digest))
}

/// Pull the policy at `reference` (a tag is resolved to the digest it
/// names now), every digest checked, within the pull deadline; its
/// component is written to `sink` as it arrives, never more than the
/// manifest declares or the largest component accepted.
pub async fn pull(
    registries: &Registries,
    reference: &str,
    sink: &mut (dyn std::io::Write + Send),
) -> Result<Pulled, DeliveryError> {
    registries
        .within(reference, pull_within(registries, reference, sink))
        .await
}

async fn pull_within(
    registries: &Registries,
    reference: &str,
    sink: &mut (dyn std::io::Write + Send),
) -> Result<Pulled, DeliveryError> {
    use futures_util::StreamExt as _;
    let reference = parse(reference)?;
    let client = registries.client();
    let (manifest, digest) = manifest(registries, &client, &reference).await?;
    let layer = match manifest.layers.as_slice() {
        [layer] if layer.media_type == LAYER_MEDIA_TYPE => layer.clone(),
        layers => {
            return Err(DeliveryError::Artifact(format!(
                "{} is not a policy: it has {} layer(s) of {:?}, not one of {LAYER_MEDIA_TYPE}",
                reference.whole(),
                layers.len(),
                layers
                    .iter()
                    .map(|l| l.media_type.as_str())
                    .collect::<Vec<_>>()
            )));
        }
    };
    let declared = u64::try_from(layer.size).map_err(|_| {
        DeliveryError::Artifact(format!(
            "the manifest of {} declares a component of {} bytes",
            reference.whole(),
            layer.size
        ))
    })?;
    let max = registries.max_component_bytes();
    if declared > max {
        return Err(DeliveryError::Artifact(format!(
            "the component of {} is {declared} bytes, over the largest accepted ({} MiB, --max-component-mib): refused",
            reference.whole(),
            registries.max_component_mib
        )));
    }
    if let Some(key) = &registries.verify_key {
        let key = super::signature::public_key(key)?;
        super::signature::verify(&client, &auth(), &reference, &digest, &key).await?;
    }
    let pinned_reference = reference.clone_with_digest(digest.clone());
    let broke = |message: String| DeliveryError::Registry {
        reference: reference.whole(),
        message,
    };
    let mut stream = client
        .pull_blob_stream(&pinned_reference, &layer)
        .await
        .map_err(|e| registry(&reference, e))?;
    let mut hasher = Sha256::new();
    let mut received = 0u64;
    let mut head = Vec::with_capacity(8);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            broke(format!(
                "the component's transfer broke off after {received} of {declared} bytes: {e}"
            ))
        })?;
        received += chunk.len() as u64;
        if received > declared {
            return Err(DeliveryError::Artifact(format!(
                "the registry sent more of the component of {} than the {declared} bytes its manifest declares: refused",
                reference.whole()
            )));
        }
        if head.len() < 8 {
            head.extend(chunk.iter().take(8 - head.len()));
        }
        hasher.update(&chunk);
        sink.write_all(&chunk).map_err(|e| DeliveryError::Output {
            path: None,
            message: e.to_string(),
        })?;
    }
    if received != declared {
        return Err(broke(format!(
            "the component's transfer ended after {received} of the {declared} bytes its manifest declares"
        )));
    }
    let found = format!("sha256:{}", hex::encode(hasher.finalize()));
    if found != layer.digest {
        return Err(DeliveryError::Digest {
            what: format!("the component of {}", reference.whole()),
            expected: layer.digest,
            found,
        });
    }
    if !crate::plugins::is_component(&head) {
        return Err(DeliveryError::Artifact(format!(
            "{} holds {received} bytes that are not a WebAssembly component (they begin {:02x?}): not a policy",
            reference.whole(),
            head
        )));
    }
    Ok(Pulled {
        pinned: pinned(&reference, &digest),
        digest,
        component_digest: found,
        annotations: manifest.annotations.unwrap_or_default(),
    })
}

/// Sign the artifact at `reference` (a tag resolved to its digest) with a
/// PKCS#8 PEM private key; the pinned reference and the signature's.
pub async fn sign(
    registries: &Registries,
    reference: &str,
    key: &std::path::Path,
) -> Result<(String, String), DeliveryError> {
    let reference = parse(reference)?;
    let client = registries.client();
    let (_, digest) = manifest(registries, &client, &reference).await?;
    let signature = super::signature::sign(&client, &auth(), &reference, &digest, key).await?;
    Ok((pinned(&reference, &digest), signature))
}

/// What the artifact at `reference` holds, without its component.
pub async fn inspect(
    registries: &Registries,
    reference: &str,
) -> Result<Inspection, DeliveryError> {
    let what = reference.to_string();
    let reference = parse(reference)?;
    let client = registries.client();
    let (manifest, digest) = registries
        .within(&what, manifest(registries, &client, &reference))
        .await?;
    Ok(Inspection {
        reference: pinned(&reference, &digest),
        digest,
        config_media_type: manifest.config.media_type.clone(),
        layers: manifest
            .layers
            .iter()
            .map(|l| LayerInfo {
                media_type: l.media_type.clone(),
                digest: l.digest.clone(),
                size: l.size,
            })
            .collect(),
        annotations: manifest.annotations.unwrap_or_default(),
    })
}
