//! `tool_list`: the tool specs steps offered the model, once per hash (protocol
//! §4.16).

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Result;

/// Keeps `tools` (the specs as JSON) under `hash`, unless it is kept already.
pub fn keep(conn: &Connection, hash: &str, tools: &str, now_ms: i64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO tool_list (hash, tools, time_created) VALUES (?1, ?2, ?3)
         ON CONFLICT (hash) DO NOTHING",
    )?
    .execute(params![hash, tools, now_ms])?;
    Ok(())
}

/// The specs kept under `hash`, as JSON.
pub fn get(conn: &Connection, hash: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT tools FROM tool_list WHERE hash = ?1")?
        .query_row([hash], |r| r.get(0))
        .optional()?)
}
