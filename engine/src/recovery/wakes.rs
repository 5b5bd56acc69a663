//! Durable wake redrive (protocol §5.7): the `session_recovery` rows whose wake is
//! pending, checked before anything is woken. A row whose continuation is not
//! `inp_rec_<its execution>`, is missing, belongs to another session, or was already
//! promoted is quarantined (invariant 15); one whose wake already failed [`WAKE_ATTEMPTS_MAX`]
//! times is quarantined too, and so is one that cannot even be checked (a continuation
//! that does not decode): one bad row never keeps the others from waking. The rest
//! are woken with a scope that promotes only their continuation (invariant 10).

use rusqlite::{Connection, Transaction, params};
use serde::Serialize;

use crate::error::Result;
use crate::ids;
use crate::recovery::BATCH;
use crate::store::rows;

/// A failed wake increments `wake_attempts`; at this many the row is quarantined.
pub const WAKE_ATTEMPTS_MAX: i64 = 5;

/// What the redrive did (part of `recover --json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WakeReport {
    pub redriven: usize,
    pub failed: usize,
    pub quarantined: usize,
    /// Sessions left for a process that has their provider and model (protocol
    /// §4.17).
    #[serde(default)]
    pub waiting: usize,
    /// Those sessions, each with the provider and model it waits for.
    #[serde(default)]
    pub waiting_sessions: Vec<WaitingSession>,
}

/// A session whose wake waits for a process with its provider and model
/// (protocol §4.17).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WaitingSession {
    pub session_id: String,
    pub provider: String,
    pub model: String,
}

/// A recovery wake to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeCandidate {
    pub execution_id: String,
    pub session_id: String,
    pub input_id: String,
}

/// A pending wake as stored, read without trusting its types.
struct PendingWake {
    execution_id: String,
    session_id: String,
    continuation: String,
    /// `None` when the column holds something other than an integer.
    attempts: Option<i64>,
    time_created: rusqlite::types::Value,
}

/// Checks every pending recovery wake, quarantining the bad ones; returns the rest
/// and how many were quarantined.
pub fn recovery_wakes(conn: &mut Connection) -> Result<(Vec<WakeCandidate>, usize)> {
    let mut wake = Vec::new();
    let mut quarantined = 0;
    let mut last: Option<(rusqlite::types::Value, String)> = None;
    loop {
        let (batch, done) = crate::store::write(conn, |tx| {
            let pending = scan(tx, &last)?;
            let mut out = Vec::new();
            for row in &pending {
                // A row that cannot even be checked (its continuation does not
                // decode) is quarantined like one that fails the checks: it never
                // stops the others (protocol §5.7). A failing store stops them all.
                let verdict = match check(tx, row) {
                    Ok(verdict) => verdict,
                    Err(error) => Err(format!(
                        "the wake cannot be checked: {}",
                        crate::store::row_failure(tx, error)?
                    )),
                };
                match verdict {
                    Ok(Some(candidate)) => out.push(candidate),
                    Ok(None) => {}
                    Err(reason) => {
                        quarantine(tx, &row.execution_id, &reason)?;
                        quarantined += 1;
                    }
                }
            }
            let done = pending.len() < BATCH;
            if let Some(row) = pending.last() {
                last = Some((row.time_created.clone(), row.execution_id.clone()));
            }
            Ok((out, done))
        })?;
        wake.extend(batch);
        if done {
            return Ok((wake, quarantined));
        }
    }
}

fn scan(
    tx: &Transaction<'_>,
    last: &Option<(rusqlite::types::Value, String)>,
) -> Result<Vec<PendingWake>> {
    let base =
        "SELECT execution_id, session_id, continuation_message_id, wake_attempts, time_created
                FROM session_recovery WHERE wake_pending = 1 AND recovery_error IS NULL";
    let map = |r: &rusqlite::Row<'_>| {
        use crate::claim::{integer, text};
        Ok(PendingWake {
            execution_id: text(r.get(0)?),
            session_id: text(r.get(1)?),
            continuation: text(r.get(2)?),
            attempts: integer(&r.get(3)?),
            time_created: r.get(4)?,
        })
    };
    let rows = match last {
        None => tx
            .prepare_cached(&format!(
                "{base} ORDER BY time_created, execution_id LIMIT {BATCH}"
            ))?
            .query_map([], map)?
            .collect::<Result<Vec<_>, _>>()?,
        Some((time, id)) => tx
            .prepare_cached(&format!(
                "{base} AND (time_created, execution_id) > (?1, ?2)
                 ORDER BY time_created, execution_id LIMIT {BATCH}"
            ))?
            .query_map(params![time, id], map)?
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(rows)
}

/// `Ok(Some)`: wake it; `Err(reason)`: quarantine.
fn check(tx: &Transaction<'_>, row: &PendingWake) -> Result<Result<Option<WakeCandidate>, String>> {
    if let Err(reason) = verify(tx, &row.execution_id, &row.session_id, &row.continuation)? {
        return Ok(Err(reason));
    }
    let Some(attempts) = row.attempts else {
        return Ok(Err("wake_attempts is not an integer".into()));
    };
    if attempts >= WAKE_ATTEMPTS_MAX {
        return Ok(Err(format!(
            "the wake was attempted {attempts} times without promoting the continuation"
        )));
    }
    Ok(Ok(Some(WakeCandidate {
        execution_id: row.execution_id.clone(),
        session_id: row.session_id.clone(),
        input_id: row.continuation.clone(),
    })))
}

/// The checks of protocol §5.7 before a recovery wake may promote its continuation: the
/// continuation is `inp_rec_<execution>`, exists, lies in the row's session, and is
/// still pending (a wake that is pending while its continuation was promoted means
/// the two disagree; the promotion clears the wake in the same transaction).
/// `Ok(Err(reason))` means the row must not be woken.
pub fn verify(
    conn: &Connection,
    execution_id: &str,
    session_id: &str,
    continuation: &str,
) -> Result<Result<(), String>> {
    let expected = ids::continuation_input(execution_id);
    if continuation != expected {
        return Ok(Err(format!(
            "continuation {continuation} is not derived from execution {execution_id}"
        )));
    }
    let Some(input) = rows::input(conn, continuation)? else {
        return Ok(Err(format!("continuation {continuation} does not exist")));
    };
    if input.session_id != session_id {
        return Ok(Err(format!(
            "continuation {continuation} belongs to session {}, not {session_id}",
            input.session_id
        )));
    }
    if !input.is_pending() {
        return Ok(Err(format!(
            "continuation {continuation} was already promoted while its wake was still pending"
        )));
    }
    Ok(Ok(()))
}

/// Whether the recovery wake of `execution_id` may promote `input_id` now: its row
/// names that continuation, its wake is pending, and it is neither quarantined nor
/// parked. Checked again in the promoting transaction, so a wake discarded (or
/// quarantined) since it was started promotes nothing. With [`verify`] — what the
/// redrive and the inspector check before waking — the one home of the rules of a
/// recovery wake (protocol §5.7).
pub(crate) fn is_due(conn: &Connection, execution_id: &str, input_id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM session_recovery WHERE execution_id = ?1
             AND continuation_message_id = ?2 AND wake_pending = 1 AND recovery_error IS NULL)",
        )?
        .query_row(params![execution_id, input_id], |r| r.get(0))?)
}

fn quarantine(tx: &Transaction<'_>, execution_id: &str, reason: &str) -> Result<()> {
    tracing::warn!(
        execution = execution_id,
        reason,
        "quarantining a recovery wake"
    );
    tx.execute(
        "UPDATE session_recovery SET recovery_error = ?2, wake_pending = 0 WHERE execution_id = ?1",
        params![execution_id, reason],
    )?;
    Ok(())
}

/// Takes back the attempts counted for the wakes of `input_ids` that did not
/// promote their continuation because the store failed (a full disk): the store's
/// failure is not the wake's, and must not quarantine it.
pub(crate) fn uncount_attempts(tx: &Transaction<'_>, input_ids: &[String]) -> Result<()> {
    for input_id in input_ids {
        tx.prepare_cached(
            "UPDATE session_recovery SET wake_attempts = wake_attempts - 1
             WHERE continuation_message_id = ?1 AND wake_pending = 1 AND wake_attempts > 0",
        )?
        .execute([input_id])?;
    }
    Ok(())
}

/// Counts a wake attempt, in the transaction that acquires the session for it.
pub(crate) fn count_attempt(tx: &Transaction<'_>, input_id: &str) -> Result<()> {
    tx.prepare_cached(
        "UPDATE session_recovery SET wake_attempts = wake_attempts + 1
         WHERE continuation_message_id = ?1 AND wake_pending = 1",
    )?
    .execute([input_id])?;
    Ok(())
}
