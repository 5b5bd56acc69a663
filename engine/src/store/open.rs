//! Looking at a database file before writing to it (protocol §2.3).
//!
//! Everything here reads only: the file's header straight from disk (through the
//! descriptor this process never closes, protocol §2.8), then a
//! read-only SQLite connection that creates no `-wal` that was not there before
//! (`immutable=1` when the database has no WAL, which also means no process has it
//! open for writing; a log without its `-shm` index gets the index rebuilt). A
//! refusal leaves the database and its log byte-for-byte untouched.

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};
use crate::store::migrate::{self, AppliedMigration, Migration};
use crate::store::pinned;

/// What a preflight found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preflight {
    /// No file at the path: a new database will be created.
    Absent,
    /// A valid SQLite file with no tables: it will be migrated in place.
    EmptyDatabase,
    /// A Steward database whose recorded migrations this build knows.
    Steward { applied: Vec<AppliedMigration> },
}

fn refuse(path: &Path, reason: impl Into<String>) -> Error {
    Error::DatabaseRefused {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub(crate) fn access(path: &Path, reason: impl Into<String>) -> Error {
    Error::DatabaseAccess {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub(crate) fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Inspects `path` without changing anything on disk.
///
/// A refusal is only reported when it is stable: when the database or its log
/// changed while they were looked at, the look is repeated. Without a log the file
/// is read with `immutable=1`, which assumes no writer; a process that starts
/// writing meanwhile can make pages read in between disagree and a healthy file
/// look corrupt. The second look sees its log and reads consistently.
pub fn preflight(path: &Path, known: &[Migration]) -> Result<Preflight> {
    preflight_with(path, known, WholeFile::IfDue)
}

/// When the look before opening runs the whole-file check (`PRAGMA quick_check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WholeFile {
    /// Where pages may have been torn (`whole_file_check_due`).
    IfDue,
    /// Always: `steward doctor`, which must find damage without opening the file
    /// for writing (a read-write connection's close would copy the log into a
    /// damaged file and remove it).
    Always,
    /// Never: it just ran, in this process.
    Done,
}

/// [`preflight`], with the whole-file check as `whole` says.
pub fn preflight_with(path: &Path, known: &[Migration], whole: WholeFile) -> Result<Preflight> {
    const LOOKS: usize = 3;
    let mut looks = 1;
    loop {
        let before = Fingerprint::of(path);
        let verdict = preflight_once(path, known, whole);
        match verdict {
            Err(Error::DatabaseRefused { .. })
                if looks < LOOKS && Fingerprint::of(path) != before =>
            {
                looks += 1;
            }
            verdict => return verdict,
        }
    }
}

/// What changes when anyone writes the database or its log. Not the `-shm` index,
/// which readers write too (the look itself among them).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint(Vec<Option<(u64, u64, i64, i64)>>);

impl Fingerprint {
    pub(crate) fn of(path: &Path) -> Fingerprint {
        use std::os::unix::fs::MetadataExt;
        Fingerprint(
            [path.to_path_buf(), sidecar(path, "-wal")]
                .iter()
                .map(|p| {
                    std::fs::metadata(p)
                        .ok()
                        .map(|m| (m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
                })
                .collect(),
        )
    }
}

fn preflight_once(path: &Path, known: &[Migration], whole: WholeFile) -> Result<Preflight> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Preflight::Absent),
        Err(e) => return Err(access(path, e.to_string())),
    };
    if meta.is_dir() {
        return Err(refuse(path, "it is a directory, not a database file"));
    }
    if meta.len() == 0 {
        return Err(refuse(
            path,
            "the file is empty (0 bytes), so it is not a Steward database",
        ));
    }
    check_header(path, meta.len())?;
    let conn = open_read_only(path).map_err(|e| classify(path, e))?;
    let check = match whole {
        WholeFile::IfDue => whole_file_check_due(&conn, path),
        WholeFile::Always => true,
        WholeFile::Done => false,
    };
    if check {
        read_ahead(path);
        let quick: String = conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
            .map_err(|e| classify(path, e))?;
        if quick != "ok" {
            // One line: SQLite puts a line break between the database and the page.
            let quick = quick.split_whitespace().collect::<Vec<_>>().join(" ");
            return Err(refuse(
                path,
                format!("the file fails PRAGMA quick_check: {quick}"),
            ));
        }
    }
    let tables = user_tables(&conn).map_err(|e| classify(path, e))?;
    if tables.is_empty() {
        return Ok(Preflight::EmptyDatabase);
    }
    if !tables.iter().any(|t| t == "session") {
        return Err(refuse(
            path,
            "Database is not empty and has no session table",
        ));
    }
    if !tables.iter().any(|t| t == "schema_migration") {
        return Err(refuse(
            path,
            "the database has a session table but no schema_migration table, so Steward did not create it",
        ));
    }
    let applied = migrate::applied(&conn).map_err(|e| match e {
        Error::Sqlite(e) => classify(path, e),
        other => other,
    })?;
    if let Some(reason) = migrate::check_applied(&applied, known) {
        return Err(refuse(path, reason));
    }
    Ok(Preflight::Steward { applied })
}

/// Whether the whole file must be checked before anything writes to it (protocol
/// §2.3), because its pages may have been torn:
/// - an owner row of another machine or an earlier boot: a power cut (a disk may
///   hold pages it only said it had written), or a data directory brought from
///   elsewhere;
/// - a dead owner of this boot whose lock file does not name this very file (device
///   and inode, [`crate::owner::ran_on`]): the file was copied or restored since,
///   maybe mid-write — or an older build wrote the lock file, or this machine has
///   no boot id to tell a power cut from a killed process;
/// - no owner table to tell.
///
/// Recovery removes dead owners' rows once their claims are handled, so the check
/// runs at each launch until then, and never at the launches of a healthy file.
///
/// A process of this boot killed while it ran on this file (`kill -9`, a panic,
/// an abort) is no such reason: with the log, SQLite's commit is atomic against a
/// crash of the process — a log write the kill cut short leaves a frame whose
/// checksum fails, which the next opener ignores, and a checkpoint cut short is
/// redone from the log — so the file is as sound as at the launch before, and the
/// relaunch that reconciles the crash does not read a large history through first.
pub(crate) fn whole_file_check_due(conn: &Connection, path: &Path) -> bool {
    use crate::owner::{self, Liveness, Owners};
    let owners = Owners::of_database(path);
    let boot_known = !crate::host::boot_id().is_empty();
    match owner::all(conn) {
        Ok(rows) => rows.iter().any(|row| {
            !row.is_of_this_boot()
                || (owner::probe(&owners, row) == Liveness::Dead
                    && !(boot_known && owner::ran_on(&owners, row, path)))
        }),
        Err(_) => true,
    }
}

/// Reads the file (and its log) front to back before a whole-file check: a cold
/// `quick_check` reads pages in b-tree order, which is far slower than one pass. The
/// database is read through its pinned descriptor (protocol §2.8); the log through a
/// descriptor of its own, which SQLite holds no lock on.
fn read_ahead(path: &Path) {
    let _ = pinned::read_through(path);
    if let Ok(mut log) = File::open(sidecar(path, "-wal")) {
        let _ = std::io::copy(&mut log, &mut std::io::sink());
    }
}

/// Opens `path` read-only, creating no `-wal`: with `immutable=1` when no log with
/// frames exists (no writer has it open), otherwise as a normal read-only connection
/// that reads the existing log. A log without its `-shm` index — a power cut, or a
/// copy that left the index behind — is still read: `immutable=1` would ignore it and
/// see the database file alone, which a checkpoint may have left half-copied (page 1
/// counting pages the log still holds), a healthy file taken for a corrupt one. SQLite
/// then rebuilds the index into a new `-shm`; the database and its log stay
/// byte-for-byte as they were (protocol §2.9).
pub fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let wal = std::fs::metadata(sidecar(path, "-wal"));
    let has_wal =
        wal.as_ref().is_ok_and(|m| m.len() > 0) || (wal.is_ok() && sidecar(path, "-shm").exists());
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let uri = file_uri(path, !has_wal);
    let conn = Connection::open_with_flags(uri, flags)?;
    conn.busy_timeout(std::time::Duration::from_millis(5000))?;
    Ok(conn)
}

fn file_uri(path: &Path, immutable: bool) -> String {
    let mut uri = String::from("file:");
    for byte in path.to_string_lossy().bytes() {
        match byte {
            b'?' | b'#' | b'%' => uri.push_str(&format!("%{byte:02X}")),
            _ => uri.push(byte as char),
        }
    }
    if immutable {
        uri.push_str("?immutable=1");
    }
    uri
}

/// The header check: magic string, page size, and a file at least as long as the
/// header says (a truncated copy or a half-written download fails here). With a
/// write-ahead log beside it, a shorter file is normal — a checkpoint may have copied
/// page 1 before the pages that grow the file — so the length is only held to the
/// header when there is no log.
fn check_header(path: &Path, len: u64) -> Result<()> {
    let mut header = [0u8; 100];
    let read = pinned::read_at(path, &mut header, 0).map_err(|e| access(path, e.to_string()))?;
    if read < 100 || &header[..16] != b"SQLite format 3\0" {
        return Err(refuse(path, "the file is not a SQLite database"));
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n if n >= 512 && n.is_power_of_two() => u64::from(n),
        _ => {
            return Err(refuse(
                path,
                "the file is not a SQLite database (bad page size)",
            ));
        }
    };
    let pages = u64::from(u32::from_be_bytes([
        header[28], header[29], header[30], header[31],
    ]));
    let counter_valid = header[24..28] == header[92..96];
    let has_log = std::fs::metadata(sidecar(path, "-wal")).is_ok_and(|m| m.len() > 0);
    let short = counter_valid && pages > 0 && len < pages * page_size;
    if !len.is_multiple_of(page_size) || (short && !has_log) {
        return Err(refuse(
            path,
            format!(
                "the file is truncated: the header describes {pages} pages of {page_size} bytes, the file has {len} bytes"
            ),
        ));
    }
    Ok(())
}

fn user_tables(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    rows.collect()
}

/// Sorts an SQLite failure while reading into "not ours to touch" or "cannot access".
pub(crate) fn classify(path: &Path, error: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::*;
    if let Some(reason) = crate::error::no_room(&error) {
        return Error::StoreFull(reason);
    }
    match error.sqlite_error_code() {
        Some(NotADatabase) => refuse(path, "the file is not a SQLite database"),
        Some(DatabaseCorrupt) => refuse(path, format!("the database is corrupt: {error}")),
        Some(CannotOpen | PermissionDenied | ReadOnly | AuthorizationForStatementDenied) => {
            access(path, error.to_string())
        }
        Some(DatabaseBusy | DatabaseLocked) => Error::StoreBusy,
        _ => Error::Sqlite(error),
    }
}
