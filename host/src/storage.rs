//! The host's SQLite databases (the task store, failover's state and
//! journal): opened with a WAL journal and every acknowledged write synced,
//! their schema versioned with `PRAGMA user_version` and migrated on open.
//! A database newer than this build is refused untouched.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

/// What went wrong with a database; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{}: {source}", path.display())]
    Database {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error("{}: {source}", path.display())]
    Folder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{}: a record does not encode or decode: {source}", path.display())]
    Record {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("{}: the database cannot use a WAL journal (it is in `{mode}` mode)", path.display())]
    NotWal { path: PathBuf, mode: String },

    #[error(
        "{}: the {what} database has schema version {found}, newer than this build's {newest}; \
         run a newer verdict or another data directory",
        path.display()
    )]
    Newer {
        path: PathBuf,
        what: &'static str,
        found: usize,
        newest: usize,
    },

    #[error("the database's worker stopped")]
    Worker(#[source] tokio::task::JoinError),
}

impl StorageError {
    /// A database error of the file at `path`, for `map_err`.
    pub fn database(path: &Path) -> impl Fn(rusqlite::Error) -> Self + '_ {
        move |source| Self::Database {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A record of the file at `path` that does not encode or decode.
    pub fn record(path: &Path) -> impl Fn(serde_json::Error) -> Self + '_ {
        move |source| Self::Record {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Write a file whole or not at all: a temporary file beside it, synced,
/// renamed over it ([`persist`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut file = tempfile::NamedTempFile::new_in(folder_of(path))?;
    file.write_all(bytes)?;
    persist(file, path)
}

/// The folder a file is in (`.` for a bare name).
pub fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Put a temporary file written beside `path` in its place: synced,
/// renamed over it, and the folder synced, so that a crash leaves the old
/// file or the new one. A file replaced keeps its permissions; a new one
/// gets what the process's umask leaves of `0666` (`0644` usually; `0600`
/// for a serving host, which keeps its files to itself).
pub fn persist(mut file: tempfile::NamedTempFile, path: &Path) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path)
        .map_or_else(|_| 0o666 & !umask(), |m| m.permissions().mode() & 0o7777);
    file.flush()?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(folder_of(path))?.sync_all()
}

/// The process's file mode creation mask, as Linux reports it (`0022`
/// where it cannot be read).
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// Open (creating when missing) a database of the host's and migrate it:
/// `migrations[n]` takes it from schema version `n` to `n + 1`. `what` names
/// it in messages.
/// A database and its journals readable by the host's user alone (0600),
/// also when an earlier version made them readable by others.
fn private(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mut files = vec![path.to_path_buf()];
    for suffix in ["-wal", "-shm"] {
        let mut name = path.as_os_str().to_os_string();
        name.push(suffix);
        files.push(name.into());
    }
    for file in files.iter().filter(|f| f.exists()) {
        if let Err(error) = std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)) {
            tracing::warn!(file = %file.display(), %error, "a database file could not be made private");
        }
    }
}

pub fn open(
    path: &Path,
    what: &'static str,
    migrations: &[&str],
) -> Result<Connection, StorageError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| StorageError::Folder {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let fail = StorageError::database(path);
    let mut connection = Connection::open(path).map_err(&fail)?;
    connection
        .busy_timeout(std::time::Duration::from_secs(5))
        .map_err(&fail)?;
    let mode: String = connection
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(&fail)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StorageError::NotWal {
            path: path.to_path_buf(),
            mode,
        });
    }
    private(path);
    connection
        .execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")
        .map_err(&fail)?;
    migrate(&mut connection, path, what, migrations)?;
    Ok(connection)
}

/// Bring the schema up to the newest migration, one transaction a step.
fn migrate(
    connection: &mut Connection,
    path: &Path,
    what: &'static str,
    migrations: &[&str],
) -> Result<(), StorageError> {
    let newest = migrations.len();
    let fail = StorageError::database(path);
    let version: usize = connection
        .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .map_err(&fail)?
        .try_into()
        .unwrap_or(usize::MAX);
    if version > newest {
        return Err(StorageError::Newer {
            path: path.to_path_buf(),
            what,
            found: version,
            newest,
        });
    }
    for (done, migration) in migrations.iter().enumerate().skip(version) {
        let transaction = connection.transaction().map_err(&fail)?;
        transaction.execute_batch(migration).map_err(&fail)?;
        transaction
            .pragma_update(None, "user_version", (done + 1) as i64)
            .map_err(&fail)?;
        transaction.commit().map_err(&fail)?;
        tracing::info!(version = done + 1, database = what, "database migrated");
    }
    Ok(())
}
