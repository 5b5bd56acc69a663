//! The SQLite store (protocol §2): opening any file safely, migrations, and the
//! transaction helpers every write goes through.
//!
//! Opening looks before it writes ([`open::preflight`]): a file Steward must not touch
//! is refused with the file byte-for-byte as it was. A new database is built under a
//! temporary name and linked into place only once migrated, so a crash never leaves
//! a half-created `steward.db` behind.

pub mod events;
pub mod migrate;
pub mod open;
pub(crate) mod pinned;
pub mod rows;
pub mod sessions;
pub mod tool_lists;

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::clock::Clock;
use crate::error::{Error, Result};
use migrate::{MIGRATIONS, Migration};
use open::{Preflight, access, classify};

/// `PRAGMA synchronous` for every read-write connection. `FULL` syncs the WAL on
/// every commit, so a committed event survives power loss, not only a crash of the
/// process; `engine/benches/store.rs` measures its cost against `NORMAL`.
pub const SYNCHRONOUS: &str = "FULL";

/// The writer's page cache, in KiB (SQLite's default is 2,000).
const CACHE_KIB: u32 = 8_192;

/// `PRAGMA busy_timeout` (protocol §2.1).
pub const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

/// One read-write connection to the database.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: Option<PathBuf>,
}

impl Store {
    /// Opens (creating and migrating when needed) the database at `path`.
    pub fn open(path: &Path, clock: &dyn Clock) -> Result<Store> {
        Store::open_with(path, MIGRATIONS, clock)
    }

    /// [`Store::open`] with an explicit migration list (tests of upgrades).
    pub fn open_with(path: &Path, known: &[Migration], clock: &dyn Clock) -> Result<Store> {
        Store::open_checked(path, known, clock, open::WholeFile::IfDue)
    }

    /// [`Store::open_with`], the look before opening running its whole-file check as
    /// `whole` says: `steward doctor` runs it first, with
    /// [`open::preflight_with`] and [`open::WholeFile::Always`], then opens with
    /// [`open::WholeFile::Done`].
    pub fn open_checked(
        path: &Path,
        known: &[Migration],
        clock: &dyn Clock,
        whole: open::WholeFile,
    ) -> Result<Store> {
        match open::preflight_with(path, known, whole)? {
            Preflight::Absent => create(path, known, clock)?,
            Preflight::EmptyDatabase | Preflight::Steward { .. } => {
                // A build a power cut interrupted after its link was synced, or a
                // process that died mid-creation while another linked first.
                if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
                    remove_stale_temporaries(dir, &name.to_string_lossy(), STALE_TEMPORARY);
                }
            }
        }
        let mut conn = open_read_write(path)?;
        migrate_or_refuse(&mut conn, path, known, clock)?;
        make_private(path);
        pinned::pin(path);
        Ok(Store {
            conn,
            path: Some(path.to_path_buf()),
        })
    }

    /// A migrated in-memory database, for tests.
    pub fn open_in_memory(clock: &dyn Clock) -> Result<Store> {
        let mut conn = Connection::open_in_memory()?;
        configure(&conn)?;
        migrate::run(&mut conn, MIGRATIONS, clock.now_ms(), |_| {})?;
        Ok(Store { conn, path: None })
    }

    /// Caps the database at `pages` pages for this connection.
    pub fn set_max_pages(&self, pages: u64) -> Result<()> {
        let pages = i64::try_from(pages).unwrap_or(i64::MAX);
        let _: i64 = self
            .conn
            .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                r.get(0)
            })?;
        Ok(())
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    pub fn conn_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// Runs `f` in one write transaction (`BEGIN IMMEDIATE`): committed when `f`
    /// returns `Ok`, rolled back otherwise.
    pub fn write<R>(&mut self, f: impl FnOnce(&Transaction<'_>) -> Result<R>) -> Result<R> {
        write(&mut self.conn, f)
    }
}

/// Runs `f` in one `BEGIN IMMEDIATE` transaction on `conn`.
pub fn write<R>(conn: &mut Connection, f: impl FnOnce(&Transaction<'_>) -> Result<R>) -> Result<R> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let out = f(&tx)?;
    tx.commit()?;
    Ok(out)
}

/// Sorts the failure of one row of a per-row loop (recovery's claims and wakes,
/// protocol §5.2 and §5.7): `Ok(reason)` when the row alone failed and the
/// transaction lives on — the caller quarantines the row with that one-line reason
/// and goes on with the others — and `Err` when the store itself failed (a full
/// disk, I/O, memory, a lock; [`Error::is_store_failure`]) or SQLite rolled the
/// transaction back: then no row can be isolated, and the loop stops with the
/// failure as it is.
pub(crate) fn row_failure(conn: &Connection, error: Error) -> Result<String> {
    if error.is_store_failure() || conn.is_autocommit() {
        return Err(error);
    }
    Ok(error
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" "))
}

/// Runs `f` in one read transaction: a consistent snapshot.
pub fn read<R>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
    // A read cannot write: nothing outside the fenced paths changes the file.
    conn.execute_batch("PRAGMA query_only = ON")?;
    let out = match conn.execute_batch("BEGIN DEFERRED") {
        Ok(()) => {
            let out = f(conn);
            conn.execute_batch("COMMIT").map_err(Error::from).and(out)
        }
        Err(e) => Err(e.into()),
    };
    conn.execute_batch("PRAGMA query_only = OFF")?;
    out
}

fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // A stable plan per statement: without it SQLite re-prepares parameterized
    // MAX / ORDER BY ... LIMIT queries on every new binding (measured: 14% of a
    // recovery pass).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") && !mode.eq_ignore_ascii_case("memory") {
        return Err(Error::Invalid(format!(
            "the database would not switch to WAL mode (it is in {mode} mode)"
        )));
    }
    // A page cache that holds a recovery batch's dirty pages: a smaller one spills
    // them to the log mid-transaction, and writes some twice.
    conn.execute_batch(&format!(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = {SYNCHRONOUS};
         PRAGMA temp_store = MEMORY; PRAGMA cache_size = -{CACHE_KIB};"
    ))?;
    Ok(())
}

fn open_read_write(path: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| classify(path, e))?;
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(true) {
        return Err(access(
            path,
            "the database file is read-only; Steward needs to write it",
        ));
    }
    configure(&conn).map_err(|e| match e {
        Error::Sqlite(e) => classify(path, e),
        other => other,
    })?;
    Ok(conn)
}

fn migrate_or_refuse(
    conn: &mut Connection,
    path: &Path,
    known: &[Migration],
    clock: &dyn Clock,
) -> Result<()> {
    let after_apply = |_: &Migration| crate::failpoint!("migrate.after_apply");
    match migrate::run(conn, known, clock.now_ms(), after_apply) {
        Ok(_) => Ok(()),
        Err(Error::Invalid(reason)) => Err(Error::DatabaseRefused {
            path: path.to_path_buf(),
            reason,
        }),
        Err(Error::Sqlite(e)) => Err(classify(path, e)),
        Err(other) => Err(other),
    }
}

/// Builds a new database under a temporary name in the same directory, then links it
/// into place. If another process linked one first, that one is kept.
fn create(path: &Path, known: &[Migration], clock: &dyn Clock) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| access(path, "the path has no file name"))?
        .to_string_lossy()
        .into_owned();
    remove_stale_temporaries(dir, &name, std::time::Duration::ZERO);
    let temp = dir.join(format!(".{name}.creating-{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    // Created `0600` before SQLite opens it: its `-wal`/`-shm` take the same mode.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| access(&temp, e.to_string()))?;
    let built = (|| {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&temp, flags).map_err(|e| classify(&temp, e))?;
        configure(&conn).map_err(|e| match e {
            Error::Sqlite(e) => classify(path, e),
            other => other,
        })?;
        migrate_or_refuse(&mut conn, path, known, clock)?;
        // Closing the last connection checkpoints and removes the temporary WAL.
        conn.close().map_err(|(_, e)| classify(&temp, e))
    })();
    if let Err(e) = built {
        // A build that failed leaves nothing behind (its connection is closed).
        for leftover in [
            temp.clone(),
            open::sidecar(&temp, "-wal"),
            open::sidecar(&temp, "-shm"),
            open::sidecar(&temp, "-journal"),
        ] {
            let _ = std::fs::remove_file(leftover);
        }
        return Err(e);
    }
    // The data directory's own name (its real parent, through symlinks): the
    // process that created it may have died before its sync (`create_dir_synced`),
    // and this one found it already there. Before the link, so a failure leaves no
    // database behind. Only this one level: the parents above it were synced by
    // whoever created them, unless that process died in the same instant.
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if let Some(parent) = real.parent() {
        use std::io::ErrorKind::*;
        match sync_dir(parent) {
            Ok(()) => {}
            // A parent this user may not open, or whose file system does not sync
            // directories (a read-only or squashed one under a mount point).
            Err(e)
                if matches!(
                    e.kind(),
                    PermissionDenied | InvalidInput | Unsupported | ReadOnlyFilesystem
                ) => {}
            Err(e) => {
                let _ = std::fs::remove_file(&temp);
                return Err(access(parent, e.to_string()));
            }
        }
    }
    // SQLite synced the temporary file when it closed; the link is only a name
    // until its directory is synced (protocol §2.9).
    let linked = std::fs::hard_link(&temp, path);
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => {}
        // Another process linked its own first: it may have died before syncing
        // the name, and this one is about to commit into that file.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(access(path, e.to_string())),
    }
    sync_dir(dir).map_err(|e| access(dir, e.to_string()))
}

/// Makes the names in `dir` durable: the entries created, linked, renamed or
/// removed in it survive a power cut once this returns (`fsync` of the directory,
/// protocol §2.9).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Creates the directory `dir` — the data directory, the config file's — (mode
/// `0700`, with any missing parents) so that it survives a power cut: the parent of every directory created is synced,
/// deepest last (protocol §2.9). An existing directory is left as it is.
pub fn create_dir_synced(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    for created in missing.iter().rev() {
        let parent = created
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sync_dir(parent)?;
    }
    Ok(())
}

/// Transcripts hold file contents and command output: the database and its
/// `-wal`/`-shm` are readable by their owner only. Tightens a file an older build
/// left readable by others; a file this user does not own is left alone.
fn make_private(path: &Path) {
    for file in [
        path.to_path_buf(),
        open::sidecar(path, "-wal"),
        open::sidecar(path, "-shm"),
    ] {
        if let Ok(meta) = std::fs::metadata(&file)
            && meta.permissions().mode() & 0o077 != 0
            && meta.uid() == current_uid()
        {
            let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
        }
    }
}

/// This process's user id.
fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::getuid()
    }
}

/// How old a build's temporary must be before an open (not a creation, which would
/// build beside it) counts it as left behind: a builder in another pid namespace
/// (or hidden by `/proc`'s `hidepid`) looks dead while it works.
const STALE_TEMPORARY: std::time::Duration = std::time::Duration::from_secs(600);

/// Removes `.<name>.creating-<pid>` files (and their sidecars) left by a process
/// that died mid-creation: its pid no longer runs and the file is at least
/// `min_age` old.
fn remove_stale_temporaries(dir: &Path, name: &str, min_age: std::time::Duration) {
    // Only where `/proc` answers "is this pid alive?"; elsewhere leftovers stay.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = format!(".{name}.creating-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        // `<pid>`, or `<pid>-wal` / `<pid>-shm` for its sidecars.
        let Some(pid) = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= min_age));
        if old && pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests;
