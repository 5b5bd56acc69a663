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
                    job(store.conn_mut());
                }
            })
            .expect("spawn the database writer thread");
        Db { jobs, path }
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
        rx.await
            .map_err(|_| Error::Invalid("the database writer dropped a job".into()))?
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
    /// between two writes. The connection is read-only for its duration
    /// (`PRAGMA query_only`), so a statement that would write fails.
    pub async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.with_conn(move |conn| store::read(conn, f)).await
    }
}
