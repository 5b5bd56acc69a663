//! [`Reader`]: a read-only view of a data directory for screens and embedders —
//! the session list, a transcript a page at a time, and the inspector's tables —
//! on its own read-only connection, so that reading never waits for (or delays) the
//! writer. It never writes, never creates a database and never recovers: it can look
//! at a crashed file as it is.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::inspect::pages::{self, ClaimLine, ClaimOrder, Counts, PageRequest};
use crate::inspect::{QuarantineView, RecoveryView, SessionSummary, Snapshot, WakeView};
use crate::owner::{Liveness, OwnerRow, Owners};
use crate::projection::{InputRow, MessageRow, SessionRow};
use crate::store::migrate::MIGRATIONS;
use crate::store::open::{self, Preflight};
use crate::store::{self, rows};

/// A read-only view of one data directory.
#[derive(Debug)]
pub struct Reader {
    path: PathBuf,
    owners: Owners,
    conn: Option<Connection>,
    /// The last counts read, and the connection's `PRAGMA data_version` then: while
    /// no other connection commits, the counts cannot change, and a screen that
    /// redraws does not count every table again.
    counts: Option<(i64, Counts)>,
    /// The connection was opened with `immutable=1` (no log existed): it cannot see
    /// later writes, so it is reopened (and the file checked again) before a read
    /// once the file has changed — only then.
    immutable: Option<open::Fingerprint>,
    /// Read a Steward database that fails its integrity check as far as it can be.
    damaged_ok: bool,
    /// Why the file is read although it is damaged, when it is.
    damaged: Option<String>,
}

impl Reader {
    /// A reader of the database at `database`, probing owner locks under
    /// `owners_dir`. Checks the file as every command does (protocol §2.3) but
    /// opens nothing for writing; an absent file reads as empty.
    pub fn open(database: &Path, owners_dir: &Path) -> Result<Reader> {
        Reader::open_with(database, owners_dir, false)
    }

    /// [`Reader::open`], but a Steward database that fails `PRAGMA quick_check` is
    /// read as far as it can be instead of refused (every other refusal stands).
    pub fn open_even_if_damaged(database: &Path, owners_dir: &Path) -> Result<Reader> {
        Reader::open_with(database, owners_dir, true)
    }

    fn open_with(database: &Path, owners_dir: &Path, damaged_ok: bool) -> Result<Reader> {
        let mut reader = Reader {
            path: database.to_path_buf(),
            owners: Owners::new(owners_dir),
            conn: None,
            counts: None,
            immutable: None,
            damaged_ok,
            damaged: None,
        };
        reader.reconnect()?;
        Ok(reader)
    }

    /// Opens the connection again when the last one cannot see new writes, or when
    /// the file appeared since.
    fn reconnect(&mut self) -> Result<()> {
        if self.conn.is_some()
            && self
                .immutable
                .as_ref()
                .is_none_or(|seen| *seen == open::Fingerprint::of(&self.path))
        {
            return Ok(());
        }
        self.conn = None;
        self.counts = None;
        match open::preflight(&self.path, MIGRATIONS) {
            Ok(Preflight::Absent) => return Ok(()),
            Ok(_) => {}
            Err(Error::DatabaseRefused { reason, .. })
                if self.damaged_ok
                    && crate::doctor::diagnosis::diagnose(&self.path, &reason, MIGRATIONS)
                        .failed
                        == crate::doctor::diagnosis::Failed::Integrity =>
            {
                self.damaged = Some(reason);
            }
            Err(e) => return Err(e),
        }
        let fingerprint = open::Fingerprint::of(&self.path);
        let logged = open::sidecar(&self.path, "-wal").exists()
            && open::sidecar(&self.path, "-shm").exists();
        self.immutable = (!logged).then_some(fingerprint);
        let conn = open::open_read_only(&self.path).map_err(|e| open::classify(&self.path, e))?;
        self.conn = Some(conn);
        Ok(())
    }

    /// Runs `f` in one read transaction; `None` when there is no database yet.
    fn read<R>(&mut self, f: impl FnOnce(&Connection, &Owners) -> Result<R>) -> Result<Option<R>> {
        self.reconnect()?;
        let Some(conn) = &self.conn else {
            return Ok(None);
        };
        let owners = &self.owners;
        store::read(conn, |c| f(c, owners)).map(Some)
    }

    /// Why the file is read although it fails its integrity check, when it does
    /// ([`Reader::open_even_if_damaged`]).
    pub fn damaged(&self) -> Option<&str> {
        self.damaged.as_deref()
    }

    /// The database file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many rows each table holds (all zero without a database).
    pub fn counts(&mut self) -> Result<Counts> {
        let cached = self.counts;
        let read = self.read(move |c, _| {
            let version: i64 = c.query_row("PRAGMA data_version", [], |r| r.get(0))?;
            match cached {
                Some((seen, counts)) if seen == version => Ok((version, counts)),
                _ => Ok((version, pages::counts(c)?)),
            }
        })?;
        self.counts = read;
        Ok(read.map(|(_, counts)| counts).unwrap_or_default())
    }

    /// Sessions, newest first.
    pub fn sessions(&mut self, now_ms: i64, page: &PageRequest) -> Result<Vec<SessionSummary>> {
        Ok(self
            .read(|c, _| pages::sessions(c, now_ms, page))?
            .unwrap_or_default())
    }

    /// Sessions, most recently active first ([`pages::recent_sessions`]).
    pub fn recent_sessions(
        &mut self,
        now_ms: i64,
        after: Option<&pages::ActivityKey>,
        filter: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionSummary>> {
        Ok(self
            .read(|c, _| pages::recent_sessions(c, now_ms, after, filter, limit))?
            .unwrap_or_default())
    }

    /// One session, if it exists.
    pub fn session(&mut self, session_id: &str) -> Result<Option<SessionRow>> {
        Ok(self.read(|c, _| rows::session(c, session_id))?.flatten())
    }

    /// Up to `limit` messages ending before `before_seq` (the newest when `None`).
    pub fn transcript(
        &mut self,
        session_id: &str,
        before_seq: Option<i64>,
        limit: usize,
    ) -> Result<Vec<MessageRow>> {
        Ok(self
            .read(|c, _| rows::messages_before(c, session_id, before_seq, limit))?
            .unwrap_or_default())
    }

    /// [`Reader::transcript`], with the rows that cannot be decoded set aside (and
    /// counted in the page's length) instead of failing the read.
    pub fn transcript_lenient(
        &mut self,
        session_id: &str,
        before_seq: Option<i64>,
        limit: usize,
    ) -> Result<(Vec<MessageRow>, Vec<rows::Unreadable>)> {
        Ok(self
            .read(|c, _| rows::messages_before_lenient(c, session_id, before_seq, limit))?
            .unwrap_or_default())
    }

    /// The messages of a session from `from_seq` on, with the rows that cannot be
    /// decoded set aside.
    pub fn transcript_from_lenient(
        &mut self,
        session_id: &str,
        from_seq: i64,
    ) -> Result<(Vec<MessageRow>, Vec<rows::Unreadable>)> {
        Ok(self
            .read(|c, _| rows::messages_from_lenient(c, session_id, from_seq))?
            .unwrap_or_default())
    }

    /// One session's state (its badge).
    pub fn session_state(
        &mut self,
        session_id: &str,
        now_ms: i64,
    ) -> Result<Option<crate::inspect::SessionState>> {
        self.read(|c, _| pages::session_state(c, session_id, now_ms))
    }

    /// A session's inputs that wait to be promoted, in admitted order.
    pub fn pending_inputs(&mut self, session_id: &str) -> Result<Vec<InputRow>> {
        Ok(self
            .read(|c, _| rows::pending_inputs(c, session_id))?
            .unwrap_or_default())
    }

    /// Claims with what the lock probe proves about their owners.
    pub fn claims(
        &mut self,
        order: ClaimOrder,
        page: &PageRequest,
        now_ms: i64,
    ) -> Result<Vec<ClaimLine>> {
        Ok(self
            .read(|c, owners| {
                let rows = pages::claims(c, order, page)?;
                pages::claim_lines(c, owners, &rows, now_ms)
            })?
            .unwrap_or_default())
    }

    /// Quarantined claims and recovery rows.
    pub fn quarantine(&mut self, page: &PageRequest) -> Result<Vec<QuarantineView>> {
        Ok(self
            .read(|c, _| pages::quarantine(c, page))?
            .unwrap_or_default())
    }

    /// Pending wakes.
    pub fn wakes(&mut self, page: &PageRequest) -> Result<Vec<WakeView>> {
        Ok(self.read(|c, _| pages::wakes(c, page))?.unwrap_or_default())
    }

    /// Recovery rows.
    pub fn recoveries(&mut self, page: &PageRequest) -> Result<Vec<RecoveryView>> {
        Ok(self
            .read(|c, _| pages::recoveries(c, page))?
            .unwrap_or_default())
    }

    /// Owners with what the lock probe proves about each.
    pub fn owners(&mut self, page: &PageRequest) -> Result<Vec<(OwnerRow, Liveness)>> {
        Ok(self
            .read(|c, owners| pages::owners(c, owners, page))?
            .unwrap_or_default())
    }

    /// Everything at once (`inspect --json`).
    pub fn snapshot(&mut self, now_ms: i64) -> Result<Snapshot> {
        Ok(self
            .read(|c, owners| crate::inspect::snapshot(c, owners, now_ms))?
            .unwrap_or_default())
    }

    /// Runs `f` on the connection in one read transaction (tests and benchmarks).
    pub fn with_connection<R>(&mut self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        self.read(|c, _| f(c))?
            .ok_or_else(|| Error::Invalid("there is no database yet".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r4_11_a_file_written_before_owner_hosts_were_recorded_is_read_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steward.db");
        let clock = crate::clock::ManualClock::new(1_000);
        let store = crate::store::Store::open_with(&path, &MIGRATIONS[..3], &clock).unwrap();
        store
            .conn()
            .execute("INSERT INTO owner VALUES ('own_old', 1, 'h', 0, NULL)", [])
            .unwrap();
        // `inspect` never migrates: it reads the older schema as it is.
        let mut reader = Reader::open(&path, &dir.path().join("owners")).unwrap();
        let snapshot = reader.snapshot(1_000).unwrap();
        assert_eq!(snapshot.owners.len(), 1);
        assert_eq!(
            reader.owners(&PageRequest::first(10)).unwrap()[0].0.boot_id,
            None
        );
    }

    #[test]
    fn counts_follow_commits_made_by_other_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steward.db");
        let clock = crate::clock::ManualClock::new(1_000);
        let mut store = crate::store::Store::open(&path, &clock).unwrap();
        let mut reader = Reader::open(&path, &dir.path().join("owners")).unwrap();
        assert_eq!(reader.counts().unwrap().sessions, 0);
        // Read twice with nothing new: the same counts (from the cache).
        assert_eq!(reader.counts().unwrap().sessions, 0);
        store
            .write(|tx| {
                crate::store::events::append_unowned(
                    tx,
                    "ses_a",
                    1_000,
                    crate::events::Event::SessionCreated {
                        title: "t".into(),
                        directory: "/".into(),
                    },
                )
                .map(drop)
            })
            .unwrap();
        assert_eq!(reader.counts().unwrap().sessions, 1);
    }
}
