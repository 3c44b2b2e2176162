//! Signatures of policy artifacts, in cosign's format for key pairs: a
//! signature of the artifact `registry/repository@sha256:<hex>` is an OCI
//! manifest tagged `sha256-<hex>.sig` in the same repository, whose layers
//! (media type `application/vnd.dev.cosign.simplesigning.v1+json`) each
//! hold a simple-signing payload naming the artifact's digest, signed with
//! ECDSA P-256 over SHA-256; the signature, base64 DER, is the layer's
//! annotation `dev.cosignproject.cosign/signature`. Public keys are PEM
//! (`-----BEGIN PUBLIC KEY-----`, as `cosign generate-key-pair` writes);
//! `verdict policy sign` takes an unencrypted PKCS#8 PEM private key.

use std::collections::BTreeMap;

use base64::Engine as _;
use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::{Client, Reference};
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{DerSignature, Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};
use serde_json::{Value, json};

use super::DeliveryError;

/// The media type of a signature layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

fn invalid(message: impl Into<String>) -> DeliveryError {
    DeliveryError::Signature(message.into())
}

/// The tag of an artifact's signatures.
fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// The payload a signature signs: the artifact's repository and digest.
fn payload(reference: &Reference, digest: &str) -> Vec<u8> {
    let identity = format!("{}/{}", reference.registry(), reference.repository());
    serde_json::to_vec(&json!({
        "critical": {
            "identity": {"docker-reference": identity},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .unwrap_or_default()
}

/// What a PEM key that is not the P-256 one expected holds, in words: its
/// algorithm and curve as its own document names them (an error that
/// printed the OID expected would not say which key was given).
fn key_kind(pem: &str) -> String {
    use p256::pkcs8::der::{Decode as _, Document};
    use p256::pkcs8::spki::{AlgorithmIdentifierRef, SubjectPublicKeyInfoRef};
    let named = |algorithm: &AlgorithmIdentifierRef<'_>| {
        let curve = algorithm.parameters_oid().ok().map(|o| o.to_string());
        match (algorithm.oid.to_string().as_str(), curve.as_deref()) {
            ("1.2.840.113549.1.1.1", _) => "an RSA key".to_string(),
            ("1.2.840.10045.2.1", Some("1.2.840.10045.3.1.7")) => "an ECDSA P-256 key".to_string(),
            ("1.2.840.10045.2.1", Some("1.3.132.0.34")) => "an ECDSA P-384 key".to_string(),
            ("1.2.840.10045.2.1", Some("1.3.132.0.35")) => "an ECDSA P-521 key".to_string(),
            ("1.2.840.10045.2.1", curve) => {
                format!(
                    "an ECDSA key on the curve {}",
                    curve.unwrap_or("(none named)")
                )
            }
            ("1.3.101.112", _) => "an Ed25519 key".to_string(),
            (oid, _) => format!("a key of the algorithm {oid}"),
        }
    };
    let Ok((label, document)) = Document::from_pem(pem) else {
        return "not a PEM document".into();
    };
    match label {
        "PUBLIC KEY" => SubjectPublicKeyInfoRef::from_der(document.as_bytes()).map_or_else(
            |_| "a PUBLIC KEY that does not read".into(),
            |k| named(&k.algorithm),
        ),
        "PRIVATE KEY" => p256::pkcs8::PrivateKeyInfo::from_der(document.as_bytes()).map_or_else(
            |_| "a PRIVATE KEY that does not read".into(),
            |k| named(&k.algorithm),
        ),
        "EC PRIVATE KEY" => {
            "a SEC1 EC key (convert it with `openssl pkcs8 -topk8 -nocrypt`)".into()
        }
        "RSA PRIVATE KEY" | "RSA PUBLIC KEY" => "an RSA key".into(),
        "ENCRYPTED PRIVATE KEY" => {
            "an encrypted key (decrypt it with `openssl pkcs8 -topk8 -nocrypt`)".into()
        }
        other => format!("a PEM `{other}`, not a key"),
    }
}

/// The decoder's own error, where the key is the kind expected (for
/// another kind, it names the curve it expected, which only misleads).
fn detail(pem: &str, error: &dyn std::fmt::Display) -> String {
    if key_kind(pem) == "an ECDSA P-256 key" {
        format!(": {error}")
    } else {
        String::new()
    }
}

/// A public key from its PEM file.
pub fn public_key(path: &std::path::Path) -> Result<VerifyingKey, DeliveryError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(format!("the public key {}: {e}", path.display())))?;
    VerifyingKey::from_public_key_pem(&text).map_err(|e| {
        invalid(format!(
            "the public key {} is {}, not an ECDSA P-256 public key (as `cosign generate-key-pair` writes){}",
            path.display(),
            key_kind(&text),
            detail(&text, &e)
        ))
    })
}

/// Sign the artifact pinned at `reference@digest` with a PKCS#8 PEM
/// private key, pushing the signature beside it.
pub async fn sign(
    client: &Client,
    auth: &oci_client::secrets::RegistryAuth,
    reference: &Reference,
    digest: &str,
    key: &std::path::Path,
) -> Result<String, DeliveryError> {
    let text = std::fs::read_to_string(key)
        .map_err(|e| invalid(format!("the private key {}: {e}", key.display())))?;
    let signing = SigningKey::from_pkcs8_pem(&text).map_err(|e| {
        invalid(format!(
            "the private key {} is {}, not an unencrypted PKCS#8 ECDSA P-256 key{}",
            key.display(),
            key_kind(&text),
            detail(&text, &e)
        ))
    })?;
    let payload = payload(reference, digest);
    let signature: DerSignature = signing.sign(&payload);
    let encoded = base64::engine::general_purpose::STANDARD.encode(signature.as_bytes());
    let layer = ImageLayer::new(
        payload,
        SIMPLE_SIGNING.to_string(),
        Some(BTreeMap::from([(
            SIGNATURE_ANNOTATION.to_string(),
            encoded,
        )])),
    );
    let config = Config::oci_v1(b"{}".to_vec(), None);
    let manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    let target = Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        signature_tag(digest),
    );
    client
        .push(&target, &[layer], config, auth, Some(manifest))
        .await
        .map_err(|e| DeliveryError::Registry {
            reference: target.whole(),
            message: e.to_string(),
        })?;
    Ok(target.whole())
}

/// Check that the artifact `reference@digest` carries a signature by
/// `key` that names that digest.
pub async fn verify(
    client: &Client,
    auth: &oci_client::secrets::RegistryAuth,
    reference: &Reference,
    digest: &str,
    key: &VerifyingKey,
) -> Result<(), DeliveryError> {
    let target = Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        signature_tag(digest),
    );
    let unsigned = |why: String| {
        invalid(format!(
            "{}@{digest} carries no valid signature: {why}",
            reference.repository()
        ))
    };
    let (manifest, _) = client
        .pull_image_manifest(&target, auth)
        .await
        .map_err(|e| unsigned(format!("{} ({e})", target.whole())))?;
    let mut reasons = Vec::new();
    for layer in manifest
        .layers
        .iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING)
    {
        let Some(encoded) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            continue;
        };
        let mut body = Vec::new();
        if let Err(e) = client.pull_blob(&target, layer, &mut body).await {
            reasons.push(e.to_string());
            continue;
        }
        let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
            reasons.push("a signature is not base64".into());
            continue;
        };
        let signature = Signature::from_der(&raw).or_else(|_| Signature::from_slice(&raw));
        let Ok(signature) = signature else {
            reasons.push("a signature is not an ECDSA signature".into());
            continue;
        };
        if key.verify(&body, &signature).is_err() {
            reasons.push("a signature is not the key's".into());
            continue;
        }
        let signed: Value = serde_json::from_slice(&body).unwrap_or_default();
        if signed["critical"]["image"]["docker-manifest-digest"] != digest {
            reasons.push(format!(
                "a signature by the key names {}",
                signed["critical"]["image"]["docker-manifest-digest"]
            ));
            continue;
        }
        return Ok(());
    }
    if reasons.is_empty() {
        reasons.push("no signature layer".into());
    }
    Err(unsigned(reasons.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_of_another_kind_is_named_as_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        for (algorithm, kind) in [
            (&rcgen::PKCS_ECDSA_P384_SHA384, "an ECDSA P-384 key"),
            (&rcgen::PKCS_ED25519, "an Ed25519 key"),
        ] {
            let pair = rcgen::KeyPair::generate_for(algorithm).unwrap();
            let public = dir.path().join("key.pub");
            std::fs::write(&public, pair.public_key_pem()).unwrap();
            let error = public_key(&public).unwrap_err().to_string();
            assert!(error.contains(kind), "{error}");
            assert!(!error.contains("1.2.840.10045.3.1.7"), "{error}");
            assert_eq!(key_kind(&pair.serialize_pem()), kind);
        }
        let p256 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let public = dir.path().join("p256.pub");
        std::fs::write(&public, p256.public_key_pem()).unwrap();
        assert!(public_key(&public).is_ok());
        assert_eq!(key_kind("not pem"), "not a PEM document");
    }
}
