//! The inspector's actions on what recovery left for the user (protocol §5.11):
//! wake a pending or parked recovery wake, retry a quarantined claim, discard either.
//! Each action is recorded as an `inspector.action` event in the session's log.

use rusqlite::{OptionalExtension, Transaction, params};

use crate::claim::{self, ClaimRow};
use crate::error::{Error, Result};
use crate::events::Event;
use crate::ids;
use crate::message::MessageKind;
use crate::phase::Phase;
use crate::store::events::append_unowned;
use crate::store::rows;

/// What an execution id names for the inspector.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A `session_recovery` row (pending, parked or quarantined wake).
    Recovery {
        session_id: String,
        input_id: String,
        recovery_error: Option<String>,
    },
    /// A quarantined claim.
    QuarantinedClaim(Box<ClaimRow>),
}

pub fn find(tx: &Transaction<'_>, execution_id: &str) -> Result<Target> {
    let recovery: Option<(String, String, Option<String>)> = tx
        .query_row(
            "SELECT session_id, continuation_message_id, recovery_error FROM session_recovery
             WHERE execution_id = ?1",
            [execution_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    if let Some((session_id, input_id, recovery_error)) = recovery {
        return Ok(Target::Recovery {
            session_id,
            input_id,
            recovery_error,
        });
    }
    match claim::get(tx, execution_id)? {
        Some(row) if row.recovery_error.is_some() => Ok(Target::QuarantinedClaim(Box::new(row))),
        Some(_) => Err(Error::Invalid(format!(
            "execution {execution_id} is running or waits for recovery; there is nothing to act on"
        ))),
        None => Err(Error::NotFound {
            kind: "pending wake or quarantined row for execution",
            id: execution_id.to_string(),
        }),
    }
}

fn record(
    tx: &Transaction<'_>,
    session_id: &str,
    action: &str,
    execution_id: &str,
    now_ms: i64,
) -> Result<()> {
    // A row whose session is gone (a damaged file) is acted on all the same; there
    // is no log to record it in.
    if rows::session(tx, session_id)?.is_none() {
        tracing::warn!(
            execution = execution_id,
            session = session_id,
            action,
            "acted on a row of a missing session"
        );
        return Ok(());
    }
    append_unowned(
        tx,
        session_id,
        now_ms,
        Event::InspectorAction {
            action: action.into(),
            execution_id: execution_id.into(),
            detail: None,
        },
    )?;
    Ok(())
}

/// Makes a recovery wake pending again (clearing a crash-loop park or a quarantine,
/// and its attempts). Returns the session and the continuation to promote.
pub fn rearm_wake(
    tx: &Transaction<'_>,
    execution_id: &str,
    now_ms: i64,
) -> Result<(String, String)> {
    let Target::Recovery {
        session_id,
        input_id,
        ..
    } = find(tx, execution_id)?
    else {
        return Err(Error::Invalid(format!(
            "execution {execution_id} is a quarantined claim, not a wake: retry it instead"
        )));
    };
    // The same checks as the redrive (protocol §5.7): a wake is re-armed only when its
    // continuation is its own, in its session, and still pending — never to promote
    // whatever input a damaged row names.
    if let Err(reason) = crate::recovery::wakes::verify(tx, execution_id, &session_id, &input_id)? {
        return Err(Error::Invalid(format!(
            "cannot wake {execution_id}: {reason}"
        )));
    }
    tx.execute(
        "UPDATE session_recovery SET wake_pending = 1, wake_attempts = 0, recovery_error = NULL
         WHERE execution_id = ?1",
        [execution_id],
    )?;
    record(tx, &session_id, "wake", execution_id, now_ms)?;
    Ok((session_id, input_id))
}

/// Hands a quarantined claim back to recovery: the reason is cleared and the claim
/// expires now, so the next pass looks at it again.
pub fn retry_claim(tx: &Transaction<'_>, execution_id: &str, now_ms: i64) -> Result<String> {
    let Target::QuarantinedClaim(row) = find(tx, execution_id)? else {
        return Err(Error::Invalid(format!(
            "execution {execution_id} is not a quarantined claim"
        )));
    };
    if rows::session(tx, &row.session_id)?.is_none() {
        return Err(Error::Invalid(format!(
            "the session of {execution_id} ({}) does not exist: recovery cannot help; discard it",
            row.session_id
        )));
    }
    tx.execute(
        "UPDATE session_execution SET recovery_error = NULL, expires_at = ?2 WHERE id = ?1",
        params![execution_id, now_ms],
    )?;
    record(tx, &row.session_id, "retry", execution_id, now_ms)?;
    Ok(row.session_id)
}

/// Discards a recovery wake (the continuation is never promoted) or a quarantined
/// claim (deleted; its assistant's open tools are closed so the transcript stays
/// valid). Returns the session.
pub fn discard(tx: &Transaction<'_>, execution_id: &str, now_ms: i64) -> Result<String> {
    match find(tx, execution_id)? {
        Target::Recovery {
            session_id,
            input_id,
            ..
        } => {
            if rows::input(tx, &input_id)?.is_some_and(|i| !i.is_pending()) {
                return Err(Error::Invalid(format!(
                    "the continuation of {execution_id} was already promoted: it has run, there is nothing to discard"
                )));
            }
            tx.execute(
                "DELETE FROM session_recovery WHERE execution_id = ?1",
                [execution_id],
            )?;
            record(tx, &session_id, "discard", execution_id, now_ms)?;
            Ok(session_id)
        }
        Target::QuarantinedClaim(row) => {
            tx.execute(
                "DELETE FROM session_execution WHERE id = ?1",
                [execution_id],
            )?;
            record(tx, &row.session_id, "discard", execution_id, now_ms)?;
            close_open_tools(tx, &row, now_ms)?;
            Ok(row.session_id)
        }
    }
}

/// Closes the open tools of a discarded claim's assistant, when it is a sound
/// assistant of the same session.
fn close_open_tools(tx: &Transaction<'_>, row: &ClaimRow, now_ms: i64) -> Result<()> {
    let Some(id) = &row.assistant_message_id else {
        return Ok(());
    };
    let Ok(Some(message)) = rows::message(tx, id) else {
        return Ok(());
    };
    if message.session_id != row.session_id || message.data.kind() != MessageKind::Assistant {
        return Ok(());
    }
    let open = message
        .data
        .as_assistant()
        .is_some_and(|a| a.tools().any(|t| t.state.status.is_open()));
    let already = message.data.as_assistant().is_some_and(|a| {
        a.parts
            .iter()
            .any(|p| matches!(p, crate::message::Part::Text { id, .. } if *id == ids::recovery_part(&row.id)))
    });
    if open && !already {
        // Its dead owner's tool processes must not outlive the claim: killed once the
        // event that says so is written out, right before the commit.
        let mut stops = crate::recovery::Stops::new(crate::recovery::Killed::default());
        let stopped = stops.find(&row.id, Some(&message));
        append_unowned(
            tx,
            &row.session_id,
            now_ms,
            Event::StepRecovered {
                execution_id: row.id.clone(),
                assistant_message_id: Some(id.clone()),
                phase: Phase::Ready,
                stopped_tools: stopped.into_iter().map(|s| s.call_id).collect(),
                owner_alive: false,
            },
        )?;
        stops.kill_before_commit(tx)?;
        stops.committed();
    }
    Ok(())
}
