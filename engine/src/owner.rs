//! Owners (protocol §4.11): each engine instance registers an `owner` row and holds an
//! exclusive OS lock on its own file under `<data dir>/owners/` for its whole life.
//! The kernel releases that lock when the process dies, however it dies, so "the lock
//! can be taken" proves the owner dead — but only on this host, and only with the
//! lock file in hand. Without that proof only time expires a claim.
//!
//! A lock file's path is always derived from the owner id ([`Owners::lock_path`]),
//! never read from the `owner.lock_path` column: a damaged, copied or hostile
//! database must never make Steward create, lock or delete a file outside its data
//! directory. An id that is not `own_` followed by letters, digits, `-` or `_` has
//! no lock file, so its owner is never proven dead.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, Row, Transaction, params};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::ids;

/// The directory of owner lock files, `<data dir>/owners`. Lock paths come only from
/// here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owners {
    dir: PathBuf,
}

impl Owners {
    pub fn new(dir: impl Into<PathBuf>) -> Owners {
        Owners { dir: dir.into() }
    }

    /// The lock files of the data directory that holds `database`:
    /// `<data dir>/owners`, the one place the directory is derived from a database.
    pub fn of_database(database: &Path) -> Owners {
        Owners::new(
            database
                .parent()
                .map(|dir| dir.join("owners"))
                .unwrap_or_else(|| PathBuf::from("owners")),
        )
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/<owner id>.lock`, or `None` when the id is not a well-formed owner id
    /// (it could name a path elsewhere).
    pub fn lock_path(&self, owner_id: &str) -> Option<PathBuf> {
        is_owner_id(owner_id).then(|| self.dir.join(format!("{owner_id}.lock")))
    }
}

/// `own_` followed by at least one letter, digit, `-` or `_`.
fn is_owner_id(id: &str) -> bool {
    id.strip_prefix(ids::OWNER).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// A registered, locked owner: this engine instance.
#[derive(Debug)]
pub struct Owner {
    pub id: String,
    pub pid: u32,
    pub hostname: String,
    pub lock_path: PathBuf,
    /// Held open and locked for the owner's life; the lock dies with the process.
    lock_file: File,
}

/// An `owner` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnerRow {
    pub id: String,
    pub pid: i64,
    pub hostname: String,
    pub time_started: i64,
    pub lock_path: Option<String>,
    /// The machine it ran on (`/etc/machine-id`), when it was recorded.
    pub machine_id: Option<String>,
    /// The boot it ran in, when it was recorded: its lock proves something only
    /// within that boot.
    pub boot_id: Option<String>,
}

impl OwnerRow {
    /// Whether it ran in this boot of this machine: only then can its lock prove
    /// it dead or alive. A row of another machine or an earlier boot — a data
    /// directory copied here, restored from a backup, or left by a power cut — or
    /// one written by a build that did not record its boot, cannot be proven
    /// anything; its claims are recovered once their leases run out.
    ///
    /// Where this process cannot read its own boot id (no `/proc`), a row that
    /// records none either is taken to be of this boot when its host name is this
    /// one's: the best that can be proven there.
    pub fn is_of_this_boot(&self) -> bool {
        self.is_of_boot(&crate::host::boot_id(), &hostname())
    }

    /// [`OwnerRow::is_of_this_boot`] for a given boot id (empty: unknown) and host.
    fn is_of_boot(&self, boot: &str, host: &str) -> bool {
        if boot.is_empty() {
            return self.boot_id.as_deref().is_none_or(str::is_empty) && self.hostname == host;
        }
        self.boot_id.as_deref() == Some(boot)
    }
}

/// What the lock probe can prove about an owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    /// Its lock is held: the process lives (or its lock file is held by a probe).
    Alive,
    /// Same host, lock file present and lockable: the process is gone.
    Dead,
    /// Another host, or no lock file: nothing is proven.
    Unknown,
}

impl Owner {
    /// Creates and locks a lock file under `owners_dir`, then records the owner.
    /// The lock is taken before the row exists, so no probe can see the row unlocked.
    pub fn register(tx: &Transaction<'_>, owners: &Owners, now_ms: i64) -> Result<Owner> {
        let owner = Owner::lock(owners, now_ms)?;
        match insert(tx, &owner.row(now_ms)) {
            Ok(()) => Ok(owner),
            Err(e) => {
                owner.abandon();
                Err(e)
            }
        }
    }

    /// The row that records this owner, started at `now_ms`.
    pub fn row(&self, now_ms: i64) -> OwnerRow {
        let known = |id: String| (!id.is_empty()).then_some(id);
        OwnerRow {
            id: self.id.clone(),
            pid: i64::from(self.pid),
            hostname: self.hostname.clone(),
            time_started: now_ms,
            lock_path: Some(self.lock_path.to_string_lossy().into_owned()),
            machine_id: known(crate::host::machine_id()),
            boot_id: known(crate::host::boot_id()),
        }
    }

    /// Gives up an owner whose row was never committed: its lock file goes, so a
    /// failed start leaves nothing behind.
    pub fn abandon(self) {
        let _ = std::fs::remove_file(&self.lock_path);
    }

    /// Creates and locks this instance's lock file (no database write). The
    /// directory is made `0700` and the file `0600`.
    pub fn lock(owners: &Owners, now_ms: i64) -> Result<Owner> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(owners.dir())
            .map_err(|e| Error::DatabaseAccess {
                path: owners.dir().to_path_buf(),
                reason: e.to_string(),
            })?;
        // Steward's own directory: an older build may have left it readable.
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(owners.dir(), std::fs::Permissions::from_mode(0o700));
        }
        let id = ids::new(ids::OWNER, now_ms);
        let lock_path = owners
            .lock_path(&id)
            .ok_or_else(|| Error::Invalid(format!("generated a malformed owner id {id}")))?;
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&lock_path)?;
        file.try_lock().map_err(|e| match e {
            TryLockError::Error(e) => Error::Io(e),
            TryLockError::WouldBlock => Error::Invalid(format!(
                "the new owner lock {} is already locked",
                lock_path.display()
            )),
        })?;
        Ok(Owner {
            id,
            pid: std::process::id(),
            hostname: hostname(),
            lock_path,
            lock_file: file,
        })
    }

    /// Writes into the lock file which database file this owner runs on, as
    /// `database <st_dev> <st_ino>`, before its row exists. A process killed here
    /// leaves a lock file naming the very file it wrote; a data directory copied or
    /// restored since holds a file of another identity, which tells a launch that the
    /// file may have been copied mid-write and must be checked whole (protocol §2.3,
    /// [`ran_on`]).
    pub fn record_database(&self, database: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(database)?;
        (&self.lock_file).write_all(format!("database {} {}\n", meta.dev(), meta.ino()).as_bytes())
    }

    /// Unregisters on a clean shutdown: the row goes if no claim names it, and the
    /// lock file goes with it (the lock itself is held until the owner is dropped).
    /// Claims still held stay for recovery.
    pub fn release(&self, conn: &mut Connection) -> Result<()> {
        unregister(conn, &self.id, &self.lock_path)
    }
}

/// Records an owner's row (the second half of [`Owner::register`]).
pub fn insert(tx: &Transaction<'_>, row: &OwnerRow) -> Result<()> {
    tx.execute(
        "INSERT INTO owner (id, pid, hostname, time_started, lock_path, machine_id, boot_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            row.id,
            row.pid,
            row.hostname,
            row.time_started,
            row.lock_path,
            row.machine_id,
            row.boot_id
        ],
    )?;
    Ok(())
}

/// [`Owner::release`] by id and lock path, for callers that keep the [`Owner`].
pub fn unregister(conn: &mut Connection, owner_id: &str, lock_path: &Path) -> Result<()> {
    let removed = crate::store::write(conn, |tx| remove_if_idle(tx, owner_id))?;
    if removed {
        let _ = std::fs::remove_file(lock_path);
    }
    Ok(())
}

/// An owner row, read without trusting its types (a damaged file may hold text in
/// an integer column): what is not an integer reads as 0, what is not text as empty.
pub(crate) fn owner_row(r: &Row<'_>) -> rusqlite::Result<OwnerRow> {
    use crate::claim::{integer, text};
    use rusqlite::types::Value;
    let optional = |v: Value| match v {
        Value::Null => None,
        other => Some(text(other)),
    };
    Ok(OwnerRow {
        id: text(r.get(0)?),
        pid: integer(&r.get::<_, Value>(1)?).unwrap_or(0),
        hostname: text(r.get(2)?),
        time_started: integer(&r.get::<_, Value>(3)?).unwrap_or(0),
        lock_path: optional(r.get(4)?),
        machine_id: optional(r.get(5)?),
        boot_id: optional(r.get(6)?),
    })
}

/// The columns [`owner_row`] reads, in order, for `conn`'s schema: a file written
/// before migration `0004_owner_host` (which `steward inspect` reads as it is, never
/// migrating it) has no machine or boot id.
pub(crate) fn owner_columns(conn: &Connection) -> &'static str {
    let recorded: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info('owner') WHERE name = 'boot_id')",
        )
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .unwrap_or(true);
    if recorded {
        "id, pid, hostname, time_started, lock_path, machine_id, boot_id"
    } else {
        "id, pid, hostname, time_started, lock_path, NULL, NULL"
    }
}

/// Every owner row.
pub fn all(conn: &Connection) -> Result<Vec<OwnerRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM owner ORDER BY time_started, id",
        owner_columns(conn)
    ))?;
    let rows = stmt.query_map([], owner_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn get(conn: &Connection, id: &str) -> Result<Option<OwnerRow>> {
    use rusqlite::OptionalExtension;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM owner WHERE id = ?1",
        owner_columns(conn)
    ))?;
    Ok(stmt.query_row([id], owner_row).optional()?)
}

/// What the lock probe proves about the owner `owner_id` (protocol §4.11):
/// [`Liveness::Unknown`] when there is no such row.
pub fn liveness(conn: &Connection, owners: &Owners, owner_id: &str) -> Result<Liveness> {
    Ok(get(conn, owner_id)?.map_or(Liveness::Unknown, |row| probe(owners, &row)))
}

/// Deletes the owner row if it holds no claim that could still run or be
/// recovered. A quarantined claim names the owner that quarantined it, but waits for
/// the user, not for that owner: it does not keep the row. Returns whether it did.
pub fn remove_if_idle(tx: &Transaction<'_>, owner_id: &str) -> Result<bool> {
    let n = tx.execute(
        "DELETE FROM owner WHERE id = ?1
         AND NOT EXISTS (SELECT 1 FROM session_execution
                         WHERE owner_id = ?1 AND recovery_error IS NULL)",
        [owner_id],
    )?;
    Ok(n == 1)
}

/// Is `owner` provably dead? Only an owner of this boot of this machine
/// ([`OwnerRow::is_of_this_boot`] — a host name proves nothing: clones share one)
/// whose lock file (derived from its id, under `owners`) exists and can be locked
/// is. Never says `Dead` for a live process. Opens the lock file read-only, never
/// creates it, and follows no symbolic link.
pub fn probe(owners: &Owners, owner: &OwnerRow) -> Liveness {
    if !owner.is_of_this_boot() {
        return Liveness::Unknown;
    }
    let Some(path) = owners.lock_path(&owner.id) else {
        return Liveness::Unknown;
    };
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(_) => return Liveness::Unknown,
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Liveness::Unknown;
    }
    match file.try_lock() {
        Ok(()) => Liveness::Dead,
        Err(TryLockError::WouldBlock) => Liveness::Alive,
        Err(TryLockError::Error(_)) => Liveness::Unknown,
    }
}

/// Whether `owner`'s lock file says it ran on `database` as that file is now: the
/// same file (device and inode) it recorded when it started
/// ([`Owner::record_database`]). False when the lock file is missing, names another
/// file, or records none (an older build wrote it).
pub fn ran_on(owners: &Owners, owner: &OwnerRow, database: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let Some(path) = owners.lock_path(&owner.id) else {
        return false;
    };
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    else {
        return false;
    };
    let mut text = String::new();
    if file.take(128).read_to_string(&mut text).is_err() {
        return false;
    }
    let Ok(meta) = std::fs::metadata(database) else {
        return false;
    };
    text.trim_end() == format!("database {} {}", meta.dev(), meta.ino())
}

/// Expires at once (`expires_at = now`) the live claims of an owner proven dead, so
/// recovery can take them without waiting out the lease (protocol §4.11). Claims whose
/// `expires_at` is not an integer are left for recovery to quarantine.
pub fn expire_claims_of_dead(tx: &Transaction<'_>, owner_id: &str, now_ms: i64) -> Result<usize> {
    Ok(tx.execute(
        "UPDATE session_execution SET expires_at = ?2
         WHERE owner_id = ?1 AND recovery_error IS NULL
           AND typeof(expires_at) = 'integer' AND expires_at > ?2",
        params![owner_id, now_ms],
    )?)
}

/// Removes a dead owner: its row when it holds no claim, and then its lock file —
/// the one derived from its id under `owners`, never the path the row names.
pub fn forget_dead(tx: &Transaction<'_>, owners: &Owners, owner: &OwnerRow) -> Result<bool> {
    let removed = remove_if_idle(tx, &owner.id)?;
    if removed && let Some(path) = owners.lock_path(&owner.id) {
        let _ = std::fs::remove_file(path);
    }
    Ok(removed)
}

/// Removes an owner of another machine or boot once it holds no claim (its claims
/// were recovered when their leases ran out): its row, and its lock file here when
/// nothing of this boot holds it. Never `me`.
pub fn forget_elsewhere(
    tx: &Transaction<'_>,
    owners: &Owners,
    owner: &OwnerRow,
    me: &str,
) -> Result<bool> {
    if owner.id == me || owner.is_of_this_boot() {
        return Ok(false);
    }
    let removed = remove_if_idle(tx, &owner.id)?;
    if removed && let Some(path) = owners.lock_path(&owner.id) {
        let free = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .is_ok_and(|f| f.try_lock().is_ok());
        if free {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(removed)
}

pub use crate::host::hostname;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::Store;
    use pretty_assertions::assert_eq;

    fn store() -> Store {
        Store::open_in_memory(&ManualClock::new(0)).unwrap()
    }

    /// A row of this boot of this machine.
    fn row(id: &str, hostname: String, lock_path: Option<&Path>) -> OwnerRow {
        OwnerRow {
            id: id.into(),
            pid: 1,
            hostname,
            time_started: 0,
            lock_path: lock_path.map(|p| p.to_string_lossy().into_owned()),
            machine_id: Some(crate::host::machine_id()),
            boot_id: Some(crate::host::boot_id()),
        }
    }

    #[test]
    fn r4_11_a_registered_owner_is_alive_while_it_holds_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let owners = Owners::new(dir.path().join("owners"));
        let mut store = store();
        let owner = store.write(|tx| Owner::register(tx, &owners, 5)).unwrap();
        let rows = all(store.conn()).unwrap();
        assert_eq!(
            rows,
            vec![OwnerRow {
                id: owner.id.clone(),
                pid: i64::from(std::process::id()),
                hostname: hostname(),
                time_started: 5,
                lock_path: Some(owner.lock_path.to_string_lossy().into_owned()),
                machine_id: Some(crate::host::machine_id()).filter(|m| !m.is_empty()),
                boot_id: Some(crate::host::boot_id()),
            }]
        );
        assert_eq!(Some(owner.lock_path.clone()), owners.lock_path(&owner.id));
        assert_eq!(probe(&owners, &rows[0]), Liveness::Alive);
        owner.release(store.conn_mut()).unwrap();
        assert_eq!(all(store.conn()).unwrap(), vec![]);
        assert!(!rows[0].lock_path.as_ref().map(Path::new).unwrap().exists());
    }

    #[test]
    fn owner_directories_and_lock_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let owners = Owners::new(dir.path().join("owners"));
        let owner = Owner::lock(&owners, 5).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(owners.dir()), mode(&owner.lock_path)), (0o700, 0o600));
    }

    #[test]
    fn r4_11_only_a_lockable_lock_file_of_this_boot_proves_death() {
        let dir = tempfile::tempdir().unwrap();
        let owners = Owners::new(dir.path());
        std::fs::write(dir.path().join("own_dead.lock"), b"").unwrap();
        assert_eq!(
            probe(&owners, &row("own_dead", hostname(), None)),
            Liveness::Dead
        );
        // The same host name on another machine (a clone, a container of another
        // kernel), or an earlier boot: its lock proves nothing here.
        let elsewhere = OwnerRow {
            boot_id: Some("another-boot".into()),
            ..row("own_dead", hostname(), None)
        };
        assert_eq!(probe(&owners, &elsewhere), Liveness::Unknown);
        assert!(!elsewhere.is_of_this_boot());
        // A row an older build wrote records no boot at all.
        let unrecorded = OwnerRow {
            boot_id: None,
            machine_id: None,
            ..row("own_dead", hostname(), None)
        };
        assert_eq!(probe(&owners, &unrecorded), Liveness::Unknown);
        assert_eq!(
            probe(&owners, &row("own_gone", hostname(), None)),
            Liveness::Unknown
        );
    }

    #[test]
    fn r4_11_where_the_boot_cannot_be_read_a_row_recording_none_of_this_host_is_of_this_boot() {
        let mut own = row("own_me", "laptop".into(), None);
        own.boot_id = None;
        assert!(own.is_of_boot("", "laptop"), "its own row, without /proc");
        assert!(!own.is_of_boot("", "another"));
        own.boot_id = Some("b1".into());
        assert!(!own.is_of_boot("", "laptop"), "a row that knew its boot");
        assert!(own.is_of_boot("b1", "whatever"));
        assert!(!own.is_of_boot("b2", "laptop"));
    }

    #[test]
    fn r4_11_a_stored_lock_path_is_never_trusted() {
        // The row names a user's file outside the data directory: the probe looks
        // only at the path derived from the id, so the user's file proves nothing.
        let home = tempfile::tempdir().unwrap();
        let users_file = home.path().join("notes.txt");
        std::fs::write(&users_file, b"keep me").unwrap();
        let data = tempfile::tempdir().unwrap();
        let owners = Owners::new(data.path().join("owners"));
        let hostile = row("own_x", hostname(), Some(&users_file));
        assert_eq!(probe(&owners, &hostile), Liveness::Unknown);

        let mut store = store();
        store
            .conn()
            .execute(
                "INSERT INTO owner VALUES ('own_x', 1, ?1, 0, ?2, NULL, ?3)",
                rusqlite::params![
                    hostname(),
                    users_file.to_string_lossy(),
                    crate::host::boot_id()
                ],
            )
            .unwrap();
        assert!(
            store
                .write(|tx| forget_dead(tx, &owners, &hostile))
                .unwrap()
        );
        assert_eq!(std::fs::read(&users_file).unwrap(), b"keep me");
    }

    #[test]
    fn r4_11_a_malformed_owner_id_has_no_lock_file() {
        let data = tempfile::tempdir().unwrap();
        let owners = Owners::new(data.path().join("owners"));
        std::fs::create_dir_all(owners.dir()).unwrap();
        // A lockable file that a traversal in the id would reach.
        std::fs::write(data.path().join("victim.lock"), b"").unwrap();
        for id in [
            "own_../victim",
            "own_",
            "exe_1",
            "own_a/b",
            "own_a b",
            "../own_a",
        ] {
            assert_eq!(owners.lock_path(id), None, "{id}");
            assert_eq!(
                probe(&owners, &row(id, hostname(), None)),
                Liveness::Unknown,
                "{id}"
            );
        }
        assert!(data.path().join("victim.lock").exists());
        assert_eq!(
            owners.lock_path("own_01JX-a_b"),
            Some(owners.dir().join("own_01JX-a_b.lock"))
        );
    }

    #[test]
    fn r4_11_a_symlinked_lock_file_proves_nothing() {
        let data = tempfile::tempdir().unwrap();
        let owners = Owners::new(data.path());
        let elsewhere = tempfile::NamedTempFile::new().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), data.path().join("own_link.lock")).unwrap();
        assert_eq!(
            probe(&owners, &row("own_link", hostname(), None)),
            Liveness::Unknown
        );
    }

    #[test]
    fn r4_11_a_dead_owners_live_claims_expire_at_once_and_it_is_forgotten_when_idle() {
        let owners = Owners::new("/nonexistent/owners");
        let mut store = store();
        store
            .conn()
            .execute_batch(
                "INSERT INTO session (id, title, directory, time_created, time_updated) VALUES ('ses_1', 't', '/', 0, 0), ('ses_2', 't', '/', 0, 0);
                 INSERT INTO owner VALUES ('own_dead', 1, 'h', 0, NULL, NULL, NULL);
                 INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at)
                     VALUES ('exe_1', 'ses_1', 'own_dead', 'ready', 0, 50000),
                            ('exe_2', 'ses_2', 'own_live', 'ready', 0, 50000);",
            )
            .unwrap();
        let n = store
            .write(|tx| expire_claims_of_dead(tx, "own_dead", 1_000))
            .unwrap();
        assert_eq!(n, 1);
        let expiries: Vec<(String, i64)> = store
            .conn()
            .prepare("SELECT id, expires_at FROM session_execution ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            expiries,
            vec![("exe_1".into(), 1_000), ("exe_2".into(), 50_000)]
        );
        let dead = get(store.conn(), "own_dead").unwrap().unwrap();
        assert!(
            !store.write(|tx| forget_dead(tx, &owners, &dead)).unwrap(),
            "forgot an owner with a claim"
        );
        store
            .conn()
            .execute("DELETE FROM session_execution WHERE id = 'exe_1'", [])
            .unwrap();
        assert!(store.write(|tx| forget_dead(tx, &owners, &dead)).unwrap());
    }
}

#[cfg(test)]
mod release_tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::Store;

    #[test]
    fn r4_11_a_quarantined_claim_does_not_keep_its_owner_forever() {
        let mut store = Store::open_in_memory(&ManualClock::new(0)).unwrap();
        store
            .conn()
            .execute_batch(
                "INSERT INTO session (id, title, directory, time_created, time_updated) VALUES ('ses_1', 't', '/', 0, 0);
                 INSERT INTO owner VALUES ('own_me', 1, 'h', 0, NULL, NULL, NULL);
                 INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at, recovery_error)
                     VALUES ('exe_1', 'ses_1', 'own_me', 'ready', 0, 0, 'expires_at lies ahead');",
            )
            .unwrap();
        assert!(store.write(|tx| remove_if_idle(tx, "own_me")).unwrap());
        store
            .conn()
            .execute_batch(
                "INSERT INTO owner VALUES ('own_me', 1, 'h', 0, NULL, NULL, NULL);
                 UPDATE session_execution SET recovery_error = NULL;",
            )
            .unwrap();
        assert!(!store.write(|tx| remove_if_idle(tx, "own_me")).unwrap());
    }
}
