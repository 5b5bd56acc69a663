//! Session housekeeping (protocol §3.6): renaming, archiving and deleting a session.
//!
//! Each is refused, with the reason, while the session runs or holds anything
//! recovery or the user must still act on: a claim (live, expired or quarantined), a
//! pending wake (a recovery wake or an input's), or a quarantined recovery row. The
//! refusal is decided inside the write transaction that makes the change: a run
//! takes its claim, and an input its wake, in a write transaction of their own, so
//! one that starts meanwhile is either seen here or comes after the change.

use rusqlite::{OptionalExtension, Transaction};

use crate::claim::{self, ClaimState};
use crate::error::{Error, Result};
use crate::events::Event;
use crate::store::events::append_unowned;
use crate::store::rows;

/// Why a session cannot be renamed, archived or deleted now, if it cannot.
pub fn refusal(tx: &Transaction<'_>, session_id: &str, now_ms: i64) -> Result<Option<String>> {
    if let Some(claim) = claim::for_session(tx, session_id)? {
        let id = &claim.id;
        return Ok(Some(match claim.state(now_ms) {
            ClaimState::Live => format!(
                "it is running: it holds a live claim (execution {id}, owner {}); wait until it is idle or cancel it where it runs (if that process died, `steward recover` reconciles it once its lease runs out)",
                claim.owner_id
            ),
            ClaimState::Quarantined => format!(
                "it holds a quarantined claim (execution {id}): `steward wake {id}` or `steward discard {id}` first"
            ),
            ClaimState::Expired => format!(
                "it holds a claim recovery has not reconciled yet (execution {id}): run `steward recover` first"
            ),
        }));
    }
    let recovery: Option<(String, bool)> = tx
        .query_row(
            "SELECT execution_id, recovery_error IS NOT NULL FROM session_recovery
             WHERE session_id = ?1 AND (recovery_error IS NOT NULL OR wake_pending = 1)
             ORDER BY recovery_error IS NULL, execution_id LIMIT 1",
            [session_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    if let Some((id, quarantined)) = recovery {
        return Ok(Some(if quarantined {
            format!(
                "it has a quarantined row (execution {id}): `steward wake {id}` or `steward discard {id}` first"
            )
        } else {
            format!(
                "it has a pending wake (execution {id}): let it run (`steward wake {id}`) or `steward discard {id}` first"
            )
        }));
    }
    let input: Option<String> = tx
        .query_row(
            "SELECT id FROM session_input
             WHERE session_id = ?1 AND promoted_seq IS NULL AND wake_pending = 1
             ORDER BY admitted_seq LIMIT 1",
            [session_id],
            |r| r.get(0),
        )
        .optional()?;
    Ok(input.map(|id| {
        format!(
            "it has a pending wake (input {id} waits to run): let it run first (`steward recover`)"
        )
    }))
}

/// The session, when it exists and nothing holds it; the refusal otherwise.
fn free(tx: &Transaction<'_>, session_id: &str, now_ms: i64, verb: &str) -> Result<()> {
    if rows::session(tx, session_id)?.is_none() {
        return Err(Error::NotFound {
            kind: "session",
            id: session_id.to_string(),
        });
    }
    match refusal(tx, session_id, now_ms)? {
        Some(reason) => Err(Error::Invalid(format!(
            "cannot {verb} session {session_id}: {reason}"
        ))),
        None => Ok(()),
    }
}

/// Gives the session a new title (`session.renamed`).
pub fn rename(tx: &Transaction<'_>, session_id: &str, title: &str, now_ms: i64) -> Result<()> {
    let title = crate::store::sessions::clean_title(title);
    if title.is_empty() {
        return Err(Error::Invalid("a session's title cannot be empty".into()));
    }
    free(tx, session_id, now_ms, "rename")?;
    append_unowned(tx, session_id, now_ms, Event::SessionRenamed { title })?;
    Ok(())
}

/// Archives the session, or brings it back (`session.archived`). Returns whether
/// anything changed.
pub fn archive(
    tx: &Transaction<'_>,
    session_id: &str,
    archived: bool,
    now_ms: i64,
) -> Result<bool> {
    let verb = if archived { "archive" } else { "unarchive" };
    free(tx, session_id, now_ms, verb)?;
    if rows::session(tx, session_id)?.is_some_and(|s| s.archived == archived) {
        return Ok(false);
    }
    append_unowned(tx, session_id, now_ms, Event::SessionArchived { archived })?;
    Ok(true)
}

/// Deletes the session: its log and every row of it (messages, inputs, recovery
/// history; the schema's foreign keys cascade from `session`). Returns how many
/// events were deleted.
pub fn delete(tx: &Transaction<'_>, session_id: &str, now_ms: i64) -> Result<usize> {
    free(tx, session_id, now_ms, "delete")?;
    let events = tx.execute("DELETE FROM event WHERE aggregate_id = ?1", [session_id])?;
    tx.execute("DELETE FROM session WHERE id = ?1", [session_id])?;
    Ok(events)
}

#[cfg(test)]
mod tests;
