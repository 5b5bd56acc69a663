//! Reading a database file's raw bytes without ever closing a descriptor to it
//! (protocol §2.8).
//!
//! SQLite's locks on a database file are POSIX advisory locks, and POSIX drops every
//! lock a process holds on a file when the process closes *any* descriptor of that
//! file. A process that holds a SQLite connection and then opens and closes the
//! database with `std::fs::File` has silently given up its locks; the next process
//! that closes its last connection then believes it is alone, checkpoints, and
//! deletes the `-wal` and `-shm` that this process still writes. SQLite avoids the
//! trap for its own connections (it defers such closes while locks are held); code
//! beside it must too.
//!
//! So the header check and the read-ahead of protocol §2.3 read through one
//! descriptor per database file (per inode) that this process opens once and never
//! closes. Reading through it is harmless whatever connections exist, and it costs
//! one descriptor per database file a process ever looks at.
//!
//! The write-ahead log needs no pinning: SQLite takes no POSIX lock on the `-wal`
//! (its WAL locks live on the `-shm` and the database file), and pinning it would keep
//! every deleted log alive.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// One database file this process has looked at.
#[derive(Debug)]
struct Pinned {
    /// `(device, inode)` of the file when it was opened.
    key: (u64, u64),
    /// The path it was opened by (its `-wal`/`-shm` lie beside it).
    path: PathBuf,
    file: Arc<File>,
}

/// Every database file this process has read raw bytes of or connected to, and every
/// descriptor that turned out to name one of them or their sidecars. Nothing is
/// ever removed: removing an entry would close its descriptor.
#[derive(Debug, Default)]
struct Registry {
    pinned: Vec<Pinned>,
    kept: Vec<File>,
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The pinned descriptor of the file at `path`, opened (read-only) the first time.
///
/// The file is looked up by `stat` first, so a file already pinned is never opened a
/// second time. When the path changes between that `stat` and the `open` (a file
/// replaced meanwhile), the new descriptor is pinned under its own inode too.
fn descriptor(path: &Path) -> io::Result<Arc<File>> {
    let meta = std::fs::metadata(path)?;
    let key = (meta.dev(), meta.ino());
    let mut registry = registry();
    if let Some(p) = registry.pinned.iter().find(|p| p.key == key) {
        return Ok(p.file.clone());
    }
    let file = Arc::new(File::open(path)?);
    let opened = file.metadata()?;
    registry.pinned.push(Pinned {
        key: (opened.dev(), opened.ino()),
        path: path.to_path_buf(),
        file: file.clone(),
    });
    Ok(file)
}

/// Pins the database file at `path`: what [`Store::open`](crate::store::Store::open)
/// calls once its connection is open, so that this process knows the file (and its
/// sidecars) as its own ([`is_open_here`]).
pub(crate) fn pin(path: &Path) {
    if let Err(e) = descriptor(path) {
        tracing::debug!(path = %path.display(), error = %e, "could not pin the database file");
    }
}

/// Whether `meta` describes a database file this process has pinned, or the `-wal`
/// or `-shm` beside one: a file that code beside SQLite must not open and close.
pub(crate) fn is_open_here(meta: &std::fs::Metadata) -> bool {
    let key = (meta.dev(), meta.ino());
    let same = |path: &Path| std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == key);
    registry().pinned.iter().any(|p| {
        p.key == key
            || same(&crate::store::open::sidecar(&p.path, "-wal"))
            || same(&crate::store::open::sidecar(&p.path, "-shm"))
    })
}

/// Keeps `file` open for the life of the process: a descriptor that turned out to
/// name a file [`is_open_here`] must never be closed.
pub(crate) fn keep(file: File) {
    registry().kept.push(file);
}

/// Reads up to `buf.len()` bytes from `offset` of the database file at `path`;
/// returns how many were read (fewer only at the end of the file).
pub(crate) fn read_at(path: &Path, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let file = descriptor(path)?;
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Reads the whole database file at `path` once, front to back, into the page cache
/// (the read-ahead before a whole-file check), discarding what it reads.
pub(crate) fn read_through(path: &Path) -> io::Result<()> {
    let file = descriptor(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    loop {
        match file.read_at(&mut buf, offset) {
            Ok(0) => return Ok(()),
            Ok(n) => offset += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The POSIX locks this process holds on the inode of `path`, from `/proc/locks`.
    pub(crate) fn own_posix_locks(path: &Path) -> usize {
        let ino = std::fs::metadata(path).unwrap().ino();
        let pid = std::process::id().to_string();
        std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // "1: POSIX  ADVISORY  READ 1234 fe:00:5678 128 128"
                fields.get(1) == Some(&"POSIX")
                    && fields.get(4) == Some(&pid.as_str())
                    && fields
                        .get(5)
                        .and_then(|dev_ino| dev_ino.rsplit(':').next())
                        .is_some_and(|i| i == ino.to_string())
            })
            .count()
    }

    #[test]
    fn r2_8_reading_the_header_keeps_this_process_s_sqlite_locks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steward.db");
        let clock = crate::clock::ManualClock::new(1_000);
        let store = crate::store::Store::open(&path, &clock).unwrap();
        // A WAL-mode connection holds a shared lock on the database for its life.
        store
            .conn()
            .query_row("SELECT count(*) FROM session", [], |r| r.get::<_, i64>(0))
            .unwrap();
        let held = own_posix_locks(&path);
        assert!(held > 0, "an open WAL connection holds a lock on the file");

        let mut header = [0u8; 100];
        assert_eq!(read_at(&path, &mut header, 0).unwrap(), 100);
        assert_eq!(&header[..16], b"SQLite format 3\0");
        read_through(&path).unwrap();
        // What the checks of protocol §2.3 do while a connection is open.
        crate::store::open::preflight(&path, crate::store::migrate::MIGRATIONS).unwrap();

        assert_eq!(own_posix_locks(&path), held);
        // A plain open and close of the file would have dropped them: the trap this
        // module exists for, shown on the same file.
        drop(File::open(&path).unwrap());
        assert_eq!(own_posix_locks(&path), 0);
    }

    #[test]
    fn a_file_is_pinned_once_however_often_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let first = descriptor(&path).unwrap();
        let second = descriptor(&path).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        let mut buf = [0u8; 4];
        assert_eq!(read_at(&path, &mut buf, 8).unwrap(), 2);
        assert_eq!(&buf[..2], b"89");
    }
}
