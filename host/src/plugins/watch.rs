//! Hot reload: the plugin folder watched ([`crate::watch`]), the registry
//! reloaded after each burst of changes. A file caught half-written fails to
//! load and is recorded as rejected; the event of the write's completion
//! triggers the next reload, which loads it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::Registry;
use crate::watch::{WatchError, Watcher, watch_folder};

/// Start watching `dir`, reloading `registry` after changes have been quiet
/// for `debounce`.
pub fn watch(
    registry: Arc<Registry>,
    dir: &Path,
    debounce: Duration,
) -> Result<Watcher, WatchError> {
    // Lost events (a rescan) are covered: a reload reads the whole folder.
    watch_folder(dir, debounce, "verdict-reload", move || {
        registry.reload();
    })
}
