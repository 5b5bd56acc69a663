//! The event log (protocol §3.1): append with the next per-session `seq` and apply the
//! projection in the same transaction.
//!
//! `append` is crate-private: owner writes go through a fenced transaction
//! (`claim::Fenced`), which records the owner, execution and epoch on each event.
//! [`append_unowned`] serves what no execution owns: creating a session and
//! admitting a user's input.

use rusqlite::{Connection, Transaction, params};

use crate::error::{Error, Result};
use crate::events::{Event, EventRecord, Origin};
use crate::projection;
use crate::store::rows;

/// The next `seq` of a session's log (0 for a new session).
pub fn next_seq(conn: &Connection, session_id: &str) -> Result<i64> {
    let mut stmt = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), -1) + 1 FROM event WHERE aggregate_id = ?1")?;
    Ok(stmt.query_row([session_id], |r| r.get(0))?)
}

/// Appends `event` and applies its projection. Must run inside a write transaction.
pub(crate) fn append(
    tx: &Transaction<'_>,
    session_id: &str,
    origin: Option<&Origin>,
    now_ms: i64,
    event: Event,
) -> Result<EventRecord> {
    let mut records = append_all(tx, session_id, origin, now_ms, vec![event])?;
    Ok(records.pop().expect("one event appended"))
}

/// Appends `events` with consecutive seqs and applies their projection: the rows
/// they touch are read once and written once.
pub(crate) fn append_all(
    tx: &Transaction<'_>,
    session_id: &str,
    origin: Option<&Origin>,
    now_ms: i64,
    events: Vec<Event>,
) -> Result<Vec<EventRecord>> {
    append_all_onto(
        tx,
        session_id,
        origin,
        now_ms,
        events,
        projection::Projection::default(),
    )
}

/// [`append_all`] onto rows the caller already read in this transaction (they are
/// not read again).
pub(crate) fn append_all_onto(
    tx: &Transaction<'_>,
    session_id: &str,
    origin: Option<&Origin>,
    now_ms: i64,
    events: Vec<Event>,
    mut p: projection::Projection,
) -> Result<Vec<EventRecord>> {
    let first = next_seq(tx, session_id)?;
    let mut needs = projection::Needs::default();
    for event in &events {
        let more = projection::needs(event);
        needs.messages.extend(more.messages);
        needs.inputs.extend(more.inputs);
    }
    rows::load_into(tx, &mut p, session_id, &needs)?;
    let stored = rows::Stored::of(&p);
    let mut insert = tx.prepare_cached(
        "INSERT INTO event (aggregate_id, seq, type, data, owner_id, execution_id, epoch, time_created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut records = Vec::with_capacity(events.len());
    for (seq, event) in (first..).zip(events) {
        insert.execute(params![
            session_id,
            seq,
            event.kind(),
            event.data_json(),
            origin.map(|o| o.owner_id.as_str()),
            origin.map(|o| o.execution_id.as_str()),
            origin.map(|o| o.epoch),
            now_ms
        ])?;
        let record = EventRecord {
            session_id: session_id.to_string(),
            seq,
            time_created: now_ms,
            origin: origin.cloned(),
            event,
        };
        projection::apply(&mut p, &record).map_err(|e| Error::Corrupt(e.to_string()))?;
        records.push(record);
    }
    rows::persist(tx, &mut p, &stored)?;
    Ok(records)
}

/// Appends an event no execution owns (session creation, user admission).
pub fn append_unowned(
    tx: &Transaction<'_>,
    session_id: &str,
    now_ms: i64,
    event: Event,
) -> Result<EventRecord> {
    append(tx, session_id, None, now_ms, event)
}

/// A session's whole log in `seq` order.
pub fn load(conn: &Connection, session_id: &str) -> Result<Vec<EventRecord>> {
    load_after(conn, session_id, -1)
}

/// The events of a session after `after_seq`, in `seq` order (what a watcher that
/// has seen the log up to `after_seq` has not).
pub fn load_after(conn: &Connection, session_id: &str, after_seq: i64) -> Result<Vec<EventRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, type, data, owner_id, execution_id, epoch, time_created
         FROM event WHERE aggregate_id = ?1 AND seq > ?2 ORDER BY seq",
    )?;
    let rows = stmt.query_map(rusqlite::params![session_id, after_seq], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<String>>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, Option<i64>>(5)?,
            r.get::<_, i64>(6)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, kind, data, owner_id, execution_id, epoch, time_created) = row?;
        let origin = match (owner_id, execution_id, epoch) {
            (Some(owner_id), Some(execution_id), Some(epoch)) => Some(Origin {
                owner_id,
                execution_id,
                epoch,
            }),
            _ => None,
        };
        out.push(EventRecord {
            session_id: session_id.to_string(),
            seq,
            time_created,
            origin,
            event: Event::from_row(&kind, &data)?,
        });
    }
    Ok(out)
}

/// Folds a session's whole log into an empty projection (the replay `doctor` checks).
pub fn replay(conn: &Connection, session_id: &str) -> Result<projection::Projection> {
    let mut p = projection::Projection::default();
    for record in load(conn, session_id)? {
        projection::apply(&mut p, &record).map_err(|e| Error::Corrupt(e.to_string()))?;
    }
    p.take_touched();
    Ok(p)
}
