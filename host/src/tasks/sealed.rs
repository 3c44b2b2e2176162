//! Secret material a task carries — a licence, a TLS private key, a
//! registry's password or `auth` — sealed in a type that never shows it.
//!
//! [`Sealed`] keeps the material only on its way from a request to the
//! cluster's Secrets; serialised, debug-printed or logged, it is its
//! redacted form `{"redacted": KIND, "bytes": N, "sha256": PREFIX}` (the
//! kind, the size and the first 12 hex digits of the SHA-256), so that no
//! answer, event, store, history, log line or Task object can carry the
//! material, whichever surface a new feature adds. A task's material goes
//! from its request to a [`Material`] kept beside the task — in memory with
//! the SQLite store, in a Secret owned by the `Task` object with the
//! Kubernetes store — and from there into the app's own Secrets.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// What a sealed value is, as its redacted form names it.
pub trait Kind {
    const NAME: &'static str;
}

/// A licence file, base64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct License;
impl Kind for License {
    const NAME: &'static str = "license";
}

/// A TLS private key, PEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsKey;
impl Kind for TlsKey {
    const NAME: &'static str = "tls-key";
}

/// A registry's password.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Password;
impl Kind for Password {
    const NAME: &'static str = "registry-password";
}

/// A registry's `auth` (`user:password`, base64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Auth;
impl Kind for Auth {
    const NAME: &'static str = "registry-auth";
}

/// The digits of the SHA-256 the redacted form shows: enough to tell two
/// values apart, too few to test guesses of a short secret against.
const SHA_PREFIX: usize = 12;

/// Secret material of kind `K`: the material itself only while it is on
/// its way to a Secret (`None` once sealed: read from a store, an
/// annotation or a redacted form), and what the redacted form shows.
pub struct Sealed<K> {
    material: Option<String>,
    bytes: usize,
    sha256: String,
    kind: PhantomData<K>,
}

impl<K> Clone for Sealed<K> {
    fn clone(&self) -> Self {
        Self {
            material: self.material.clone(),
            bytes: self.bytes,
            sha256: self.sha256.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> PartialEq for Sealed<K> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes && self.sha256 == other.sha256
    }
}

impl<K: Kind> Sealed<K> {
    /// Material as a request gives it.
    pub fn new(material: impl Into<String>) -> Self {
        let material = material.into();
        let sha256 = hex::encode(Sha256::digest(material.as_bytes()))[..SHA_PREFIX].to_string();
        Self {
            bytes: material.len(),
            sha256,
            material: Some(material),
            kind: PhantomData,
        }
    }

    /// The material, while this value still carries it.
    pub fn material(&self) -> Option<&str> {
        self.material.as_deref()
    }

    /// The same value without its material.
    pub fn sealed(&self) -> Self {
        Self {
            material: None,
            ..self.clone()
        }
    }

    /// Whether it is the one kept in its Secret already, of which nothing
    /// is known (an app's spec as its workload keeps it).
    pub fn is_kept(&self) -> bool {
        self.material.is_none() && self.bytes == 0
    }

    /// This value's material from `material` (kept under `path`), when it
    /// lacks it and `material` has it.
    fn unseal(&mut self, path: &str, material: &Material) {
        if self.material.is_none()
            && let Some(found) = material.0.get(path)
        {
            let found = Self::new(found.clone());
            if found == *self {
                *self = found;
            }
        }
    }

    /// Its material under `path` in `material`, when it has it.
    fn keep(&self, path: &str, material: &mut Material) {
        if let Some(m) = &self.material {
            material.0.insert(path.to_string(), m.clone());
        }
    }

    fn redacted(&self) -> Redacted {
        Redacted {
            redacted: K::NAME.to_string(),
            bytes: self.bytes,
            sha256: self.sha256.clone(),
        }
    }
}

/// The redacted form, as every surface shows a sealed value.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Redacted {
    redacted: String,
    bytes: usize,
    sha256: String,
}

impl<K: Kind> fmt::Debug for Sealed<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<{} {} bytes sha256:{}>",
            K::NAME,
            self.bytes,
            self.sha256
        )
    }
}

impl<K: Kind> Serialize for Sealed<K> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.redacted().serialize(s)
    }
}

impl<'de, K: Kind> Deserialize<'de> for Sealed<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Material(String),
            Redacted(Redacted),
        }
        match Given::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "is secret material as a string (or its redacted form, {redacted, bytes, sha256})",
            )
        })? {
            // The empty text of a spec kept before the redacted form: the
            // value is in its Secret.
            Given::Material(m) if m.is_empty() => Ok(Self {
                material: None,
                bytes: 0,
                sha256: String::new(),
                kind: PhantomData,
            }),
            Given::Material(m) => Ok(Self::new(m)),
            Given::Redacted(r) if r.redacted == K::NAME => Ok(Self {
                material: None,
                bytes: r.bytes,
                sha256: r.sha256,
                kind: PhantomData,
            }),
            Given::Redacted(r) => Err(serde::de::Error::custom(format!(
                "is redacted {}, not {}",
                r.redacted,
                K::NAME
            ))),
        }
    }
}

/// A task's secret material by where its request gave it (`license`,
/// `certificate.key`, `image-pull-secrets.0.password`): kept beside the
/// task, never in it.
#[derive(Clone, Default, PartialEq)]
pub struct Material(BTreeMap<String, String>);

impl fmt::Debug for Material {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Material {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// As a Secret's `data` keeps it: each value's bytes by its path.
    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
            .collect()
    }

    /// From a Secret's `data`; a value that is not text is left out.
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> Self {
        Self(
            data.iter()
                .filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.clone()).ok()?)))
                .collect(),
        )
    }
}

/// The sealed fields of a spec, visited by path: what keeps their material
/// apart and puts it back.
pub(crate) trait SealedFields {
    /// Each sealed value with its path.
    fn each_sealed(&mut self, visit: &mut dyn FnMut(&str, SealedRef<'_>));

    /// The material of every sealed value that carries it.
    fn material(&mut self) -> Material {
        let mut material = Material::default();
        self.each_sealed(&mut |path, value| value.keep(path, &mut material));
        material
    }

    /// Put each sealed value's redacted form in its place in `params`
    /// (the request's own JSON, where the value's path leads), so that the
    /// record keeps no material.
    fn redact_into(&mut self, params: &mut serde_json::Map<String, serde_json::Value>) {
        let mut json = serde_json::Value::Object(std::mem::take(params));
        self.each_sealed(&mut |path, value| {
            if let Some(at) = json.pointer_mut(&format!("/{}", path.replace('.', "/"))) {
                *at = value.redacted();
            }
        });
        if let serde_json::Value::Object(map) = json {
            *params = map;
        }
    }

    /// Every sealed value without its material.
    fn seal(&mut self) {
        self.each_sealed(&mut |_, value| value.seal());
    }

    /// Every sealed value's material from `material`, where it matches;
    /// the paths of those still without it (and not kept in a Secret).
    fn unseal(&mut self, material: &Material) -> Vec<String> {
        let mut missing = Vec::new();
        self.each_sealed(&mut |path, value| {
            if !value.unseal(path, material) {
                missing.push(path.to_string());
            }
        });
        missing
    }
}

/// One sealed value of any kind, as [`SealedFields`] visits it.
pub(crate) enum SealedRef<'a> {
    License(&'a mut Sealed<License>),
    TlsKey(&'a mut Sealed<TlsKey>),
    Password(&'a mut Sealed<Password>),
    Auth(&'a mut Sealed<Auth>),
}

macro_rules! each_kind {
    ($value:expr, $v:ident => $body:expr) => {
        match $value {
            SealedRef::License($v) => $body,
            SealedRef::TlsKey($v) => $body,
            SealedRef::Password($v) => $body,
            SealedRef::Auth($v) => $body,
        }
    };
}

impl SealedRef<'_> {
    fn keep(self, path: &str, material: &mut Material) {
        each_kind!(self, v => v.keep(path, material));
    }

    fn seal(self) {
        each_kind!(self, v => *v = v.sealed());
    }

    fn redacted(self) -> serde_json::Value {
        each_kind!(self, v => serde_json::to_value(&*v).unwrap_or_default())
    }

    /// Whether it has its material now, or needs none (kept in a Secret).
    fn unseal(self, path: &str, material: &Material) -> bool {
        each_kind!(self, v => {
            v.unseal(path, material);
            v.material().is_some() || v.is_kept()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_material_never_serialises() {
        let sealed: Sealed<License> = Sealed::new("TElDRU5TRS1jYW5hcnk=");
        let text = serde_json::to_string(&sealed).unwrap();
        assert!(!text.contains("TElDRU5TRS1jYW5hcnk"), "{text}");
        assert!(text.contains("\"redacted\":\"license\"") && text.contains("\"bytes\":20"));
        let debug = format!("{sealed:?}");
        assert!(!debug.contains("TElDRU5TRS1jYW5hcnk"), "{debug}");
        // Read back, it is the same value without its material.
        let back: Sealed<License> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, sealed);
        assert_eq!(back.material(), None);
        assert!(!back.is_kept());
    }

    #[test]
    fn material_comes_back_only_when_it_matches() {
        let sealed: Sealed<Password> = Sealed::new("hunter2");
        let mut material = Material::default();
        sealed.keep("p", &mut material);
        assert!(!format!("{material:?}").contains("hunter2"));
        let mut back = sealed.sealed();
        back.unseal("p", &Material::default());
        assert_eq!(back.material(), None);
        back.unseal("p", &material);
        assert_eq!(back.material(), Some("hunter2"));
        let mut other: Sealed<Password> = Sealed::new("other").sealed();
        other.unseal("p", &material);
        assert_eq!(
            other.material(),
            None,
            "another value's material is not taken"
        );
    }

    #[test]
    fn a_redacted_form_of_another_kind_is_refused() {
        let key = serde_json::to_value(Sealed::<TlsKey>::new("k")).unwrap();
        assert!(serde_json::from_value::<Sealed<License>>(key).is_err());
        let kept: Sealed<License> = serde_json::from_str("\"\"").unwrap();
        assert!(kept.is_kept());
    }
}
