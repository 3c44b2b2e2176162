//! The build cache of JavaScript and Python policies. Their tools snapshot
//! an interpreter's heap, which differs on every run: the same sources
//! never gave the same bytes twice — a new digest to push for an unchanged
//! policy, every replica loading it again, every cache of compiled code
//! missed. A build is kept under the key of all that made it (the
//! project's files, its WIT, the tool and its version, the world) and given
//! again, byte for byte, for the same.
//!
//! The cache never fails a build: an entry that cannot be read or written
//! is built anew and said so. Entries are written whole and renamed into
//! place; the least recently used go beyond the cache's size.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// What the key of a build is made of beside the project's files.
const FORMAT: &str = "verdict-policy-build cache 1";

/// The magic number and layer of a component: an entry that does not
/// start with them is not given.
const COMPONENT_HEADER: [u8; 8] = [0, b'a', b's', b'm', 0x0d, 0, 0x01, 0];

/// A folder of built components, each named by the key of its inputs.
#[derive(Debug, Clone)]
pub struct BuildCache {
    dir: PathBuf,
    /// The most the entries take together; the newest is kept whatever
    /// its size.
    limit: u64,
}

impl BuildCache {
    /// `builds` in the user's cache folder.
    pub fn default_dir() -> PathBuf {
        crate::cache_home().join("builds")
    }

    pub fn new(dir: impl Into<PathBuf>, limit: u64) -> Self {
        Self {
            dir: dir.into(),
            limit,
        }
    }

    /// The default cache: [`BuildCache::default_dir`], 2 GiB.
    pub fn user() -> Self {
        Self::new(Self::default_dir(), 2 << 30)
    }

    fn entry(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.wasm"))
    }

    /// The build of `key` written to `out`, if the cache holds a whole one.
    pub fn give(&self, key: &str, out: &Path) -> Result<bool> {
        let entry = self.entry(key);
        let Ok(bytes) = std::fs::read(&entry) else {
            return Ok(false);
        };
        if !bytes.starts_with(&COMPONENT_HEADER) {
            // Not what was put: built again, and the entry replaced then.
            return Ok(false);
        }
        crate::process::write_atomically(out, &bytes)?;
        // Used now: the last to go.
        if let Ok(file) = std::fs::File::options().append(true).open(&entry) {
            let _ = file.set_modified(SystemTime::now());
        }
        Ok(true)
    }

    /// Keep the component at `built` under `key`, then trim the cache to
    /// its size.
    pub fn keep(&self, key: &str, built: &Path) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let partial = tempfile::NamedTempFile::new_in(&self.dir)?;
        std::fs::copy(built, partial.path())?;
        partial
            .persist(self.entry(key))
            .map_err(|e| e.error)
            .with_context(|| format!("writing to {}", self.dir.display()))?;
        self.trim()
    }

    /// Remove the least recently used entries beyond the size.
    fn trim(&self) -> Result<()> {
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = std::fs::read_dir(&self.dir)?
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "wasm"))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.0));
        let mut total = 0;
        for (index, (_, len, path)) in entries.iter().enumerate() {
            total += len;
            if index > 0 && total > self.limit {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(())
    }
}

/// The key of a build: the tool (`tool`, its version and what installed
/// it), the world, and every file of the project (but `dist/`, `target/`,
/// hidden ones and Python's `__pycache__`) and of its WIT folder, by path
/// and content.
pub fn key(project: &Path, wit: &Path, world: &str, tool: &str) -> Result<String> {
    let mut hash = Sha256::new();
    for part in [FORMAT, tool, world] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    for root in [project, wit] {
        let mut files = Vec::new();
        collect(root, root, &mut files)?;
        files.sort();
        hash.update((files.len() as u64).to_le_bytes());
        for relative in files {
            let bytes = std::fs::read(root.join(&relative))
                .with_context(|| format!("reading {}", root.join(&relative).display()))?;
            let name = relative.to_string_lossy();
            hash.update((name.len() as u64).to_le_bytes());
            hash.update(name.as_bytes());
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(&bytes);
        }
    }
    Ok(hex::encode(hash.finalize()))
}

/// The files under `dir` a build reads, relative to `root`.
fn collect(root: &Path, dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if crate::skipped(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(root, &path, files)?;
        } else {
            files.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.js"), "export const x = 1;").unwrap();
        std::fs::create_dir_all(dir.path().join("wit")).unwrap();
        std::fs::write(dir.path().join("wit/world.wit"), "package a:b;").unwrap();
        dir
    }

    #[test]
    fn the_key_follows_sources_wit_world_and_tool_not_outputs() {
        let dir = project();
        let (p, wit) = (dir.path(), dir.path().join("wit"));
        let first = key(p, &wit, "status-policy", "js 0.23.0").unwrap();
        assert_eq!(first, key(p, &wit, "status-policy", "js 0.23.0").unwrap());
        // What a build writes and hidden files are not inputs.
        std::fs::create_dir_all(p.join("dist")).unwrap();
        std::fs::write(p.join("dist/x.wasm"), "built").unwrap();
        std::fs::write(p.join(".editor"), "state").unwrap();
        std::fs::create_dir_all(p.join("__pycache__")).unwrap();
        std::fs::write(p.join("__pycache__/x.pyc"), "bytecode").unwrap();
        assert_eq!(first, key(p, &wit, "status-policy", "js 0.23.0").unwrap());
        // Each input is.
        assert_ne!(first, key(p, &wit, "failover-policy", "js 0.23.0").unwrap());
        assert_ne!(first, key(p, &wit, "status-policy", "js 0.24.0").unwrap());
        std::fs::write(p.join("wit/world.wit"), "package a:c;").unwrap();
        let wit_changed = key(p, &wit, "status-policy", "js 0.23.0").unwrap();
        assert_ne!(first, wit_changed);
        std::fs::write(p.join("policy.js"), "export const x = 2;").unwrap();
        assert_ne!(
            wit_changed,
            key(p, &wit, "status-policy", "js 0.23.0").unwrap()
        );
        // A file moved is another project, though its bytes are the same.
        std::fs::create_dir_all(p.join("lib")).unwrap();
        std::fs::rename(p.join("policy.js"), p.join("lib/policy.js")).unwrap();
        let moved = key(p, &wit, "status-policy", "js 0.23.0").unwrap();
        std::fs::rename(p.join("lib/policy.js"), p.join("policy.js")).unwrap();
        assert_ne!(moved, key(p, &wit, "status-policy", "js 0.23.0").unwrap());
    }

    #[test]
    fn an_entry_is_given_back_whole_and_a_damaged_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BuildCache::new(dir.path().join("builds"), 1 << 20);
        let built = dir.path().join("built.wasm");
        let mut component = COMPONENT_HEADER.to_vec();
        component.extend_from_slice(b"the rest");
        std::fs::write(&built, &component).unwrap();
        let out = dir.path().join("out.wasm");
        assert!(!cache.give("k", &out).unwrap(), "nothing kept yet");
        cache.keep("k", &built).unwrap();
        assert!(cache.give("k", &out).unwrap());
        assert_eq!(std::fs::read(&out).unwrap(), component);
        // A torn or foreign entry is not given: the caller builds again.
        std::fs::write(cache.entry("k"), b"\0as").unwrap();
        std::fs::remove_file(&out).unwrap();
        assert!(!cache.give("k", &out).unwrap());
        assert!(!out.exists());
    }

    #[test]
    fn the_least_recently_used_go_beyond_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BuildCache::new(dir.path().join("builds"), 250);
        let built = dir.path().join("built.wasm");
        let mut component = COMPONENT_HEADER.to_vec();
        component.resize(100, 7);
        std::fs::write(&built, &component).unwrap();
        let day = std::time::Duration::from_secs(86_400);
        for (n, key) in ["a", "b"].into_iter().enumerate() {
            cache.keep(key, &built).unwrap();
            // Older than what follows, `a` the oldest.
            let file = std::fs::File::options()
                .append(true)
                .open(cache.entry(key))
                .unwrap();
            file.set_modified(SystemTime::now() - day * (3 - n as u32))
                .unwrap();
        }
        // `a` used again: `b` is now the least recently used.
        assert!(cache.give("a", &dir.path().join("out.wasm")).unwrap());
        cache.keep("c", &built).unwrap();
        let kept = |key: &str| cache.entry(key).exists();
        assert!(kept("a") && kept("c"), "the two most recently used stay");
        assert!(!kept("b"), "a third would pass the size");
        // The newest stays whatever its size.
        let small = BuildCache::new(dir.path().join("small"), 10);
        small.keep("big", &built).unwrap();
        assert!(small.entry("big").exists());
    }
}
