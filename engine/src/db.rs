//! The writer: one read-write connection on its own thread, taking jobs through a
//! channel and answering through oneshot channels. Async code never holds a write
//! transaction across an await: a job is a closure that runs to completion on the
//! writer thread, inside `BEGIN IMMEDIATE`, and only its result comes back.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use rusqlite::{Connection, Transaction};
use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::store::{self, Store};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A cloneable handle to the writer thread.
#[derive(Debug, Clone)]
pub struct Db {
    jobs: mpsc::Sender<Job>,
    path: Option<PathBuf>,
    /// Jobs that failed because the store itself did ([`Error::is_store_failure`]):
    /// what the background loop backs off on.
    store_failures: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Db {
    /// Opens (creating and migrating when needed) the database and starts its writer.
    pub fn open(path: &Path, clock: &dyn Clock) -> Result<Db> {
        Ok(Db::start(Store::open(path, clock)?))
    }

    /// Starts the writer thread over an open store.
    #[doc(hidden)]
    pub fn start(store: Store) -> Db {
        let path = store.path().map(Path::to_path_buf);
        let (jobs, receiver) = mpsc::channel::<Job>();
        let mut store = store;
        thread::Builder::new()
            .name("steward-db-writer".into())
            .spawn(move || {
                while let Ok(job) = receiver.recv() {
                    // A job that panics (a bug in a closure) fails alone: its caller
                    // gets an error, and the connection is put back as it was — no
                    // transaction left open, writes allowed — for the next job.
                    let conn = store.conn_mut();
                    let panicked =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(conn)))
                            .is_err();
                    if panicked {
                        tracing::error!("a database job panicked; its transaction was rolled back");
                        if !conn.is_autocommit() {
                            let _ = conn.execute_batch("ROLLBACK");
                        }
                        let _ = conn.execute_batch("PRAGMA query_only = OFF");
                    }
                }
            })
            .expect("spawn the database writer thread");
        Db {
            jobs,
            path,
            store_failures: Default::default(),
        }
    }

    /// How many jobs so far failed because the store itself did (a full disk, I/O):
    /// a counter that only grows.
    pub fn store_failures(&self) -> u64 {
        self.store_failures
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The database file, when it is one (not in memory).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Runs `f` on the writer's connection and returns its result (internal: writes
    /// made here are not fenced).
    #[doc(hidden)]
    pub async fn with_conn<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        self.jobs
            .send(job)
            .map_err(|_| Error::Invalid("the database writer has stopped".into()))?;
        let result = rx
            .await
            .map_err(|_| Error::Invalid("the database writer dropped a job".into()))?;
        if result.as_ref().is_err_and(Error::is_store_failure) {
            self.store_failures
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        result
    }

    /// Runs `f` in one write transaction (`BEGIN IMMEDIATE`) on the writer thread
    /// (internal: writes made here are not fenced; the engine's methods are).
    #[doc(hidden)]
    pub async fn write<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.with_conn(move |conn| store::write(conn, f)).await
    }

    /// Runs `f` in one read transaction on the writer thread: a consistent snapshot,
    /// between two writes. The connection is set read-only for its duration
    /// (`PRAGMA query_only`), so the statements `f` is meant to run cannot change
    /// the file; a panic in `f` fails this call only.
    pub async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.with_conn(move |conn| store::read(conn, f)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_job_that_panics_fails_alone_and_the_writer_carries_on() {
        let clock = crate::clock::ManualClock::new(1_000);
        let db = Db::start(Store::open_in_memory(&clock).unwrap());
        let panicked = db
            .read(|_conn| -> Result<()> { panic!("a bug in a closure") })
            .await;
        assert!(panicked.is_err());
        // The read transaction was rolled back and writes are allowed again.
        db.write(|tx| {
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
        .await
        .unwrap();
        let n: i64 = db
            .read(|c| Ok(c.query_row("SELECT count(*) FROM session", [], |r| r.get(0))?))
            .await
            .unwrap();
        assert_eq!(n, 1);
        // A read cannot write.
        let refused = db.read(|c| Ok(c.execute("DELETE FROM session", [])?)).await;
        assert!(refused.is_err());
    }
}
