//! Policies as OCI artifacts, in the layout of the CNCF Wasm OCI artifact
//! format: one layer of media type `application/wasm` holding the
//! component, a config of media type `application/vnd.wasm.config.v0+json`,
//! and annotations on the manifest naming the policy
//! (`org.opencontainers.image.title`, `…version`, `…description`,
//! `…created`), its world (`dev.verdict.policy.world`: `status-policy`,
//! `failover-policy`, `admission-policy`) and the WIT package it was built
//! against (`dev.verdict.policy.wit`: `verdict:policy@0.2.0`).
//!
//! A pull checks the manifest's digest against the reference's (when it
//! names one) and the layer's against the manifest's; nothing is handed on
//! before both match.

use std::collections::BTreeMap;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::DeliveryError;
use crate::plugins::VersionInfo;

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
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
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
}

impl Registries {
    fn client(&self) -> Client {
        // reqwest is built without a crypto provider of its own: the
        // host's (ring) serves it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Client::new(ClientConfig {
            protocol: if self.insecure.is_empty() {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(self.insecure.clone())
            },
            ..ClientConfig::default()
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

/// A policy pulled and checked.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference pinned to the manifest's digest.
    pub pinned: String,
    /// The manifest's digest.
    pub digest: String,
    pub component: Vec<u8>,
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
    let (_, digest) = self::manifest(&client, &reference).await?;
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

/// The manifest of `reference`, its digest checked against the
/// reference's when it names one.
async fn manifest(
    client: &Client,
    reference: &Reference,
) -> Result<(OciImageManifest, String), DeliveryError> {
    let (raw, _) = client
        .pull_manifest_raw(
            reference,
            &auth(),
            &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE],
        )
        .await
        .map_err(|e| registry(reference, e))?;
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
    let manifest: OciImageManifest = serde_json::from_slice(&raw).map_err(|e| {
        DeliveryError::Artifact(format!(
            "the manifest of {} does not read: {e}",
            reference.whole()
        ))
    })?;
    Ok((manifest, digest))
}

/// Pull the policy at `reference` (a tag is resolved to the digest it
/// names now), every digest checked.
pub async fn pull(registries: &Registries, reference: &str) -> Result<Pulled, DeliveryError> {
    let reference = parse(reference)?;
    let client = registries.client();
    let (manifest, digest) = manifest(&client, &reference).await?;
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
    if let Some(key) = &registries.verify_key {
        let key = super::signature::public_key(key)?;
        super::signature::verify(&client, &auth(), &reference, &digest, &key).await?;
    }
    let pinned_reference = reference.clone_with_digest(digest.clone());
    let mut component = Vec::new();
    client
        .pull_blob(&pinned_reference, &layer, &mut component)
        .await
        .map_err(|e| registry(&reference, e))?;
    let found = digest_of(&component);
    if found != layer.digest {
        return Err(DeliveryError::Digest {
            what: format!("the component of {}", reference.whole()),
            expected: layer.digest,
            found,
        });
    }
    Ok(Pulled {
        pinned: pinned(&reference, &digest),
        digest,
        component,
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
    let (_, digest) = manifest(&client, &reference).await?;
    let signature = super::signature::sign(&client, &auth(), &reference, &digest, key).await?;
    Ok((pinned(&reference, &digest), signature))
}

/// What the artifact at `reference` holds, without its component.
pub async fn inspect(
    registries: &Registries,
    reference: &str,
) -> Result<Inspection, DeliveryError> {
    let reference = parse(reference)?;
    let client = registries.client();
    let (manifest, digest) = manifest(&client, &reference).await?;
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
