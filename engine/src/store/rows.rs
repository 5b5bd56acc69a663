//! Reading and writing the projection tables (`session`, `session_message`,
//! `session_input`). Only the event append writes them (protocol §3.1).

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{Error, Result};
use crate::events::Delivery;
use crate::ids;
use crate::message::{MessageData, MessageKind};
use crate::projection::{InputRow, MessageRow, Needs, Projection, SessionRow};

macro_rules! session_columns {
    () => {
        "id, title, directory, time_created, time_updated, archived"
    };
}
macro_rules! message_columns {
    () => {
        "id, session_id, type, seq, time_created, time_updated, data"
    };
}
macro_rules! input_columns {
    () => {
        "id, session_id, prompt, delivery, admitted_seq, promoted_seq, wake_pending, time_created"
    };
}

fn session_row(r: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        id: r.get(0)?,
        title: r.get(1)?,
        directory: r.get(2)?,
        time_created: r.get(3)?,
        time_updated: r.get(4)?,
        archived: r.get(5)?,
    })
}

/// A message row whose `data` is still text: decoding can fail, and the caller
/// decides what a bad row means.
struct RawMessage {
    id: String,
    session_id: String,
    kind: String,
    seq: i64,
    time_created: i64,
    time_updated: i64,
    data: String,
}

fn raw_message(r: &Row<'_>) -> rusqlite::Result<RawMessage> {
    Ok(RawMessage {
        id: r.get(0)?,
        session_id: r.get(1)?,
        kind: r.get(2)?,
        seq: r.get(3)?,
        time_created: r.get(4)?,
        time_updated: r.get(5)?,
        data: r.get(6)?,
    })
}

impl RawMessage {
    fn decode(self) -> Result<MessageRow> {
        let kind = MessageKind::parse(&self.kind).ok_or_else(|| {
            Error::corrupt(format!("message {}: unknown type {}", self.id, self.kind))
        })?;
        let data = MessageData::from_json(kind, &self.data)
            .map_err(|e| Error::corrupt(format!("message {}: undecodable data: {e}", self.id)))?;
        Ok(MessageRow {
            id: self.id,
            session_id: self.session_id,
            seq: self.seq,
            time_created: self.time_created,
            time_updated: self.time_updated,
            data,
        })
    }
}

fn input_row(r: &Row<'_>) -> rusqlite::Result<(InputRow, String)> {
    let delivery: String = r.get(3)?;
    Ok((
        InputRow {
            id: r.get(0)?,
            session_id: r.get(1)?,
            prompt: r.get(2)?,
            content: Vec::new(),
            delivery: Delivery::Queue,
            admitted_seq: r.get(4)?,
            promoted_seq: r.get(5)?,
            wake_pending: r.get::<_, i64>(6)? != 0,
            time_created: r.get(7)?,
        },
        delivery,
    ))
}

fn decode_input((mut row, delivery): (InputRow, String)) -> Result<InputRow> {
    row.delivery = Delivery::parse(&delivery)
        .ok_or_else(|| Error::corrupt(format!("input {}: unknown delivery {delivery}", row.id)))?;
    Ok(row)
}

/// An input with the blocks of its prompt, when it carries resources (protocol
/// §4.20). They are kept in its `input.admitted` event (found by its key, the
/// session and `admitted_seq`), not in `session_input`: a prompt's text is all
/// that every other reader needs.
fn with_content(conn: &Connection, mut row: InputRow) -> Result<InputRow> {
    if ids::continuation_execution(&row.id).is_some() {
        return Ok(row);
    }
    let data: Option<String> = conn
        .prepare_cached("SELECT data FROM event WHERE aggregate_id = ?1 AND seq = ?2")?
        .query_row(params![row.session_id, row.admitted_seq], |r| r.get(0))
        .optional()?;
    #[derive(serde::Deserialize)]
    struct Admitted {
        #[serde(default)]
        content: Vec<crate::message::PromptBlock>,
    }
    if let Some(data) = data {
        row.content = serde_json::from_str::<Admitted>(&data)
            .map_err(|e| Error::corrupt(format!("input {}: its admission: {e}", row.id)))?
            .content;
    }
    Ok(row)
}

pub fn session(conn: &Connection, id: &str) -> Result<Option<SessionRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        session_columns!(),
        " FROM session WHERE id = ?1"
    ))?;
    Ok(stmt.query_row([id], session_row).optional()?)
}

pub fn sessions(conn: &Connection) -> Result<Vec<SessionRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        session_columns!(),
        " FROM session ORDER BY time_updated DESC, id DESC"
    ))?;
    let rows = stmt.query_map([], session_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The `limit` most recently active sessions, most recent first.
pub fn recent_sessions(conn: &Connection, limit: usize) -> Result<Vec<SessionRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        session_columns!(),
        " FROM session ORDER BY time_updated DESC, id DESC LIMIT ?1"
    ))?;
    let rows = stmt.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], session_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn message(conn: &Connection, id: &str) -> Result<Option<MessageRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        message_columns!(),
        " FROM session_message WHERE id = ?1"
    ))?;
    stmt.query_row([id], raw_message)
        .optional()?
        .map(RawMessage::decode)
        .transpose()
}

/// The messages of a session in transcript order.
pub fn messages(conn: &Connection, session_id: &str) -> Result<Vec<MessageRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        message_columns!(),
        " FROM session_message WHERE session_id = ?1 ORDER BY seq"
    ))?;
    let rows = stmt.query_map([session_id], raw_message)?;
    rows.map(|r| r.map_err(Error::from).and_then(RawMessage::decode))
        .collect()
}

/// The messages of a session from `from_seq` on, in transcript order.
pub fn messages_from(
    conn: &Connection,
    session_id: &str,
    from_seq: i64,
) -> Result<Vec<MessageRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        message_columns!(),
        " FROM session_message WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq"
    ))?;
    let rows = stmt.query_map(params![session_id, from_seq], raw_message)?;
    rows.map(|r| r.map_err(Error::from).and_then(RawMessage::decode))
        .collect()
}

/// Up to `limit` messages of a session ending just before `before_seq` (the newest
/// when `None`), in transcript order: one keyset page of a long transcript.
pub fn messages_before(
    conn: &Connection,
    session_id: &str,
    before_seq: Option<i64>,
    limit: usize,
) -> Result<Vec<MessageRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        message_columns!(),
        " FROM session_message WHERE session_id = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3"
    ))?;
    let before = before_seq.unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![session_id, before, limit], raw_message)?;
    let mut out = rows
        .map(|r| r.map_err(Error::from).and_then(RawMessage::decode))
        .collect::<Result<Vec<_>>>()?;
    out.reverse();
    Ok(out)
}

/// A message row that cannot be decoded: its id, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub id: String,
    pub seq: i64,
    pub error: String,
}

/// [`messages_before`], but a row that cannot be decoded is set aside with the
/// reason instead of failing the page (a screen shows the rest).
pub fn messages_before_lenient(
    conn: &Connection,
    session_id: &str,
    before_seq: Option<i64>,
    limit: usize,
) -> Result<(Vec<MessageRow>, Vec<Unreadable>)> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        message_columns!(),
        " FROM session_message WHERE session_id = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3"
    ))?;
    let before = before_seq.unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![session_id, before, limit], raw_message)?;
    set_aside(rows)
}

/// The messages of a session from `from_seq` on (newest first in the query, in
/// transcript order returned), undecodable rows set aside.
pub fn messages_from_lenient(
    conn: &Connection,
    session_id: &str,
    from_seq: i64,
) -> Result<(Vec<MessageRow>, Vec<Unreadable>)> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        message_columns!(),
        " FROM session_message WHERE session_id = ?1 AND seq >= ?2 ORDER BY seq DESC"
    ))?;
    let rows = stmt.query_map(params![session_id, from_seq], raw_message)?;
    set_aside(rows)
}

/// Rows newest first, decoded or set aside, returned in transcript order.
fn set_aside(
    rows: impl Iterator<Item = rusqlite::Result<RawMessage>>,
) -> Result<(Vec<MessageRow>, Vec<Unreadable>)> {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for row in rows {
        let raw = row?;
        let (id, seq) = (raw.id.clone(), raw.seq);
        match raw.decode() {
            Ok(message) => good.push(message),
            Err(e) => bad.push(Unreadable {
                id,
                seq,
                error: e.to_string(),
            }),
        }
    }
    good.reverse();
    bad.reverse();
    Ok((good, bad))
}

pub fn input(conn: &Connection, id: &str) -> Result<Option<InputRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        input_columns!(),
        " FROM session_input WHERE id = ?1"
    ))?;
    stmt.query_row([id], input_row)
        .optional()?
        .map(|r| decode_input(r).and_then(|r| with_content(conn, r)))
        .transpose()
}

/// The inputs of a session in admitted order.
pub fn inputs(conn: &Connection, session_id: &str) -> Result<Vec<InputRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        input_columns!(),
        " FROM session_input WHERE session_id = ?1 ORDER BY admitted_seq"
    ))?;
    let rows = stmt.query_map([session_id], input_row)?;
    rows.map(|r| {
        r.map_err(Error::from)
            .and_then(decode_input)
            .and_then(|r| with_content(conn, r))
    })
    .collect()
}

/// The pending inputs of a session in admitted order.
pub fn pending_inputs(conn: &Connection, session_id: &str) -> Result<Vec<InputRow>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT ",
        input_columns!(),
        " FROM session_input WHERE session_id = ?1 AND promoted_seq IS NULL ORDER BY admitted_seq"
    ))?;
    let rows = stmt.query_map([session_id], input_row)?;
    rows.map(|r| {
        r.map_err(Error::from)
            .and_then(decode_input)
            .and_then(|r| with_content(conn, r))
    })
    .collect()
}

/// Loads the rows `needs` names (and the session row) into a partial projection.
pub fn load(conn: &Connection, session_id: &str, needs: &Needs) -> Result<Projection> {
    let mut p = Projection::default();
    load_into(conn, &mut p, session_id, needs)?;
    Ok(p)
}

/// Loads into `p` what it does not hold yet of the rows `needs` names.
pub fn load_into(
    conn: &Connection,
    p: &mut Projection,
    session_id: &str,
    needs: &Needs,
) -> Result<()> {
    if p.session.is_none() {
        p.session = session(conn, session_id)?;
    }
    for id in &needs.messages {
        if !p.messages.contains_key(id)
            && let Some(m) = message(conn, id)?
        {
            p.messages.insert(id.clone(), m);
        }
    }
    for id in &needs.inputs {
        if !p.inputs.contains_key(id)
            && let Some(i) = input(conn, id)?
        {
            p.inputs.insert(id.clone(), i);
        }
    }
    Ok(())
}

/// Every projection row of a session, as stored.
pub fn load_all(conn: &Connection, session_id: &str) -> Result<Projection> {
    let mut p = Projection::default();
    p.session = session(conn, session_id)?;
    for m in messages(conn, session_id)? {
        p.messages.insert(m.id.clone(), m);
    }
    for i in inputs(conn, session_id)? {
        p.inputs.insert(i.id.clone(), i);
    }
    Ok(p)
}

/// Which rows of a partial projection are already stored (read from the database).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stored {
    pub session: bool,
    pub messages: BTreeSet<String>,
    pub inputs: BTreeSet<String>,
}

impl Stored {
    /// What `p` holds now: everything in it was read from the database.
    pub fn of(p: &Projection) -> Stored {
        Stored {
            session: p.session.is_some(),
            messages: p.messages.keys().cloned().collect(),
            inputs: p.inputs.keys().cloned().collect(),
        }
    }
}

/// Writes the rows the fold touched: an `UPDATE` of the mutable columns for rows
/// already `stored`, an `INSERT` for new ones.
pub fn persist(conn: &Connection, p: &mut Projection, stored: &Stored) -> Result<()> {
    let touched = p.take_touched();
    if touched.session
        && let Some(s) = &p.session
    {
        if stored.session {
            conn.prepare_cached(
                "UPDATE session SET time_updated = ?2, title = ?3, archived = ?4 WHERE id = ?1",
            )?
            .execute(params![s.id, s.time_updated, s.title, s.archived])?;
        } else {
            conn.prepare_cached(
                "INSERT INTO session (id, title, directory, time_created, time_updated)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                s.id,
                s.title,
                s.directory,
                s.time_created,
                s.time_updated
            ])?;
        }
    }
    for id in &touched.messages {
        let m = &p.messages[id];
        if stored.messages.contains(id) {
            conn.prepare_cached(
                "UPDATE session_message SET time_updated = ?2, data = ?3 WHERE id = ?1",
            )?
            .execute(params![m.id, m.time_updated, m.data.to_json()])?;
        } else {
            conn.prepare_cached(
                "INSERT INTO session_message (id, session_id, type, seq, time_created, time_updated, data)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                m.id,
                m.session_id,
                m.data.kind().as_str(),
                m.seq,
                m.time_created,
                m.time_updated,
                m.data.to_json()
            ])?;
        }
    }
    for id in &touched.inputs {
        let i = &p.inputs[id];
        if stored.inputs.contains(id) {
            conn.prepare_cached(
                "UPDATE session_input SET promoted_seq = ?2, wake_pending = ?3 WHERE id = ?1",
            )?
            .execute(params![i.id, i.promoted_seq, i.wake_pending as i64])?;
        } else {
            conn.prepare_cached(
                "INSERT INTO session_input (id, session_id, prompt, delivery, admitted_seq,
                     promoted_seq, wake_pending, time_created)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                i.id,
                i.session_id,
                i.prompt,
                i.delivery.as_str(),
                i.admitted_seq,
                i.promoted_seq,
                i.wake_pending as i64,
                i.time_created
            ])?;
        }
    }
    Ok(())
}
