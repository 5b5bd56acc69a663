//! The engine's error type. Domain variants come first; each says who returns it and
//! whether a caller may retry.

use std::path::PathBuf;

/// Everything the engine can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Returned by every owner write (protocol §4.4) and by the heartbeat (§4.2) when the
    /// claim no longer matches exactly one row: it expired, was taken over, cancelled or
    /// cleared. Never retry: the execution stops and never writes again.
    #[error("execution {execution_id} no longer holds its claim")]
    FenceLost { execution_id: String },

    /// Returned by acquisition and by `steward run` admission when another live owner
    /// holds the session's claim (protocol §4.3). Retry after that owner finishes.
    #[error("session {session_id} is busy: held by owner {owner_id}{owner_detail}")]
    SessionBusy {
        session_id: String,
        owner_id: String,
        owner_detail: String,
    },

    /// Returned when opening a database file that must not be touched
    /// (protocol §2.3). The file is left byte-for-byte as it was. Not retryable.
    #[error("refusing to open {}: {reason}", path.display())]
    DatabaseRefused { path: PathBuf, reason: String },

    /// The database (or its directory) cannot be read or written by this user.
    /// Nothing was changed. Retry after fixing permissions.
    #[error("cannot use {}: {reason}", path.display())]
    DatabaseAccess { path: PathBuf, reason: String },

    /// Another process held the write lock for longer than `busy_timeout`.
    /// Retryable: nothing was written.
    #[error("the database stayed locked by another process past the busy timeout; try again")]
    StoreBusy,

    /// The disk is full, or the database reached the size limit set for it
    /// (`[store] max_pages`). The transaction rolled back: nothing of it was
    /// written. Retry after freeing space or raising the limit.
    #[error(
        "the disk is full: {0}; nothing was written — free some space (or raise [store] max_pages) and try again"
    )]
    StoreFull(String),

    /// The session runs on a provider and model this process does not have
    /// (protocol §4.17): nothing was admitted or run. Run Steward with them, or
    /// choose this process's for the session.
    #[error(
        "session {session_id} runs on {wanted}, which this process does not have (it runs {here}): run Steward with that provider and model, or choose {here} for the session (`steward run --session {session_id} --provider … --model …`, or M in the terminal interface)"
    )]
    ProviderUnavailable {
        session_id: String,
        wanted: String,
        here: String,
    },

    /// A session, execution or input named by the caller does not exist.
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },

    /// The caller asked for something the current state does not allow.
    #[error("{0}")]
    Invalid(String),

    /// A stored row could not be decoded or violates the projection's rules
    /// (protocol §5.4 replay identity). The transaction rolled back.
    #[error("corrupt data: {0}")]
    Corrupt(String),

    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),

    #[error("JSON error: {0}")]
    Json(#[from] serde_json::Error),

    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True when the same call may succeed if tried again later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::StoreBusy | Error::StoreFull(_) | Error::SessionBusy { .. }
        )
    }

    /// True when the store itself failed rather than one row of it: a full disk,
    /// an I/O error, no memory, a lock held too long, a file that cannot be opened
    /// or is damaged. Such a failure says nothing about the row being handled —
    /// quarantining the row would blame it for the disk — and SQLite may have rolled
    /// the whole transaction back, so per-row isolation stops and the failure is
    /// reported as it is (protocol §5.2).
    pub fn is_store_failure(&self) -> bool {
        use rusqlite::ErrorCode::*;
        match self {
            Error::StoreBusy
            | Error::StoreFull(_)
            | Error::DatabaseRefused { .. }
            | Error::DatabaseAccess { .. }
            | Error::Io(_) => true,
            Error::Sqlite(e) => matches!(
                e.sqlite_error_code(),
                Some(
                    SystemIoFailure
                        | OutOfMemory
                        | DiskFull
                        | CannotOpen
                        | DatabaseCorrupt
                        | NotADatabase
                        | ReadOnly
                        | DatabaseBusy
                        | DatabaseLocked
                        | FileLockingProtocolFailed
                        | PermissionDenied
                )
            ),
            _ => false,
        }
    }

    /// True when SQLite found the file damaged (a malformed page, not a database).
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            Error::Sqlite(e) if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
            )
        )
    }

    pub(crate) fn corrupt(message: impl Into<String>) -> Self {
        Error::Corrupt(message.into())
    }
}

/// What SQLite says when there is no room: a full disk, the `max_page_count`
/// limit, or no room to grow the shared-memory index (`-shm`), which SQLite reports
/// as an I/O error.
pub(crate) fn no_room(error: &rusqlite::Error) -> Option<String> {
    let rusqlite::Error::SqliteFailure(failure, message) = error else {
        return None;
    };
    match failure.code {
        rusqlite::ErrorCode::DiskFull => Some(
            message
                .clone()
                .unwrap_or_else(|| "database or disk is full".into()),
        ),
        _ if failure.extended_code == rusqlite::ffi::SQLITE_IOERR_SHMSIZE => {
            Some("no room to grow the shared-memory index (the -shm file)".into())
        }
        _ => None,
    }
}

impl From<rusqlite::Error> for Error {
    fn from(error: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        if let Some(reason) = no_room(&error) {
            return Error::StoreFull(reason);
        }
        match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::StoreBusy,
            _ => Error::Sqlite(error),
        }
    }
}
