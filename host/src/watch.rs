//! Folder watching: a debounced watch on a folder that calls back after each
//! burst of changes (the plugin folder, the TLS certificate's folder).
//!
//! The folder is watched, not the files, because editors and build tools
//! save by writing a temporary file and renaming it over the old one.
//!
//! Reading the folder is not a change: the watch reports opens and reads
//! too (inotify's `IN_OPEN`), and a reload reads every file, so a reload
//! that followed them would set off the next one, forever.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

/// Why a folder cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("watching {}: {source}", path.display())]
    Folder {
        path: std::path::PathBuf,
        #[source]
        source: notify::Error,
    },

    #[error("starting the {name} thread: {source}")]
    Thread {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// Watches a folder while it lives; dropping it stops the watch.
pub struct Watcher {
    _debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

/// Call `on_change` on a thread of its own after each burst of changes in
/// `dir` has been quiet for `debounce`.
pub fn watch_folder(
    dir: &Path,
    debounce: Duration,
    thread: &str,
    on_change: impl Fn() + Send + 'static,
) -> Result<Watcher, WatchError> {
    let (tx, rx) = mpsc::channel::<DebounceEventResult>();
    let mut debouncer = new_debouncer(debounce, None, tx).map_err(|source| WatchError::Folder {
        path: dir.to_path_buf(),
        source,
    })?;
    debouncer
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(|source| WatchError::Folder {
            path: dir.to_path_buf(),
            source,
        })?;
    let folder = dir.display().to_string();
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            // Ends when the debouncer, and so the sender, is dropped.
            while let Ok(first) = rx.recv() {
                // Fold a burst of batches into one call, made when any of
                // them is a change (an error may hide one: it counts).
                let changed = std::iter::once(first).chain(rx.try_iter()).fold(
                    false,
                    |changed, batch| match batch {
                        Ok(events) => changed || events.iter().any(|e| !e.kind.is_access()),
                        Err(errors) => {
                            for error in &errors {
                                tracing::warn!(%error, %folder, "folder watch reported an error");
                            }
                            true
                        }
                    },
                );
                if changed {
                    on_change();
                }
            }
        })
        .map_err(|source| WatchError::Thread {
            name: thread.to_string(),
            source,
        })?;
    Ok(Watcher {
        _debouncer: debouncer,
    })
}
