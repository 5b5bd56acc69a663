//! The invariant checker: what must hold of any Steward database at rest, whatever
//! crashed when. `doctor` runs it; the fault campaign runs it after every fault.
//!
//! - `integrity`: `PRAGMA integrity_check` is clean;
//! - `seq`: each session's events count from 0 without gaps;
//! - `replay`: the projection tables equal a replay of the log;
//! - `one_claim`: at most one claim per session;
//! - `open_tool`: no tool is `pending`/`running` outside a live claim naming its
//!   assistant (an interrupted execution waits for recovery until then);
//! - `input_once`: every admitted input is promoted at most once, by the event its row
//!   names, or is still pending (protocol §6 invariant 16);
//! - `recovery_rows`: every `session_recovery` row points at its own session's rows
//!   through IDs derived from its execution (invariant 15);
//! - `epoch`: along a session's events, an execution's epoch never decreases;
//! - `types`: every integer column holds integers — a file whose tables are not
//!   STRICT (an older or altered schema) can hold anything — except in claims already
//!   quarantined for it.
//!
//! A rule that cannot even run on a damaged file is reported as broken, and the
//! others still run.

use std::collections::BTreeMap;

use rusqlite::Connection;
use serde::Serialize;

use crate::claim::ClaimState;
use crate::error::Result;
use crate::ids;

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: &'static str,
    pub session_id: Option<String>,
    pub detail: String,
}

fn violation(rule: &'static str, session: Option<&str>, detail: String) -> Violation {
    Violation {
        rule,
        session_id: session.map(str::to_string),
        detail,
    }
}

/// The names of every rule checked, in order.
pub const RULES: &[&str] = &[
    "integrity",
    "types",
    "seq",
    "replay",
    "one_claim",
    "open_tool",
    "input_once",
    "recovery_rows",
    "epoch",
];

type Rule<'a> = &'a dyn Fn(&Connection, &mut Vec<Violation>) -> Result<()>;

/// Checks every invariant at `now_ms` (read-only).
pub fn check(conn: &Connection, now_ms: i64) -> Result<Vec<Violation>> {
    let open_tools_now = |c: &Connection, out: &mut Vec<Violation>| open_tools(c, now_ms, out);
    let rules: [(&'static str, Rule<'_>); 9] = [
        ("integrity", &integrity),
        ("types", &types),
        ("seq", &seq),
        ("replay", &replay),
        ("one_claim", &one_claim),
        ("open_tool", &open_tools_now),
        ("input_once", &inputs),
        ("recovery_rows", &recovery_rows),
        ("epoch", &epochs),
    ];
    let mut out = Vec::new();
    for (name, rule) in rules {
        if let Err(e) = rule(conn, &mut out) {
            out.push(violation(name, None, format!("could not be checked: {e}")));
        }
    }
    Ok(out)
}

/// Every integer column of every table, as (table, column).
const INTEGER_COLUMNS: &[(&str, &str)] = &[
    ("session", "time_created"),
    ("session", "time_updated"),
    ("event", "seq"),
    ("event", "epoch"),
    ("event", "time_created"),
    ("session_message", "seq"),
    ("session_message", "time_created"),
    ("session_message", "time_updated"),
    ("session_input", "admitted_seq"),
    ("session_input", "promoted_seq"),
    ("session_input", "wake_pending"),
    ("session_input", "time_created"),
    ("session_execution", "epoch"),
    ("session_execution", "assistant_seq"),
    ("session_execution", "time_created"),
    ("session_execution", "expires_at"),
    ("session_recovery", "wake_pending"),
    ("session_recovery", "wake_attempts"),
    ("session_recovery", "time_created"),
    ("owner", "pid"),
    ("owner", "time_started"),
];

fn types(conn: &Connection, out: &mut Vec<Violation>) -> Result<()> {
    for (table, column) in INTEGER_COLUMNS {
        let quarantined = if *table == "session_execution" {
            " AND recovery_error IS NULL"
        } else {
            ""
        };
        let n: i64 = conn.query_row(
            &format!(
                "SELECT count(*) FROM {table}
                 WHERE typeof({column}) NOT IN ('integer', 'null'){quarantined}"
            ),
            [],
            |r| r.get(0),
        )?;
        if n > 0 {
            out.push(violation(
                "types",
                None,
                format!(
                    "{n} row{} of {table} hold{} a non-integer {column}",
                    if n == 1 { "" } else { "s" },
                    if n == 1 { "s" } else { "" }
                ),
            ));
        }
    }
    Ok(())
}

fn integrity(conn: &Connection, out: &mut Vec<Violation>) -> Result<()> {
    let mut stmt = conn.prepare("PRAGMA integrity_check")?;
    let rows: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if rows != ["ok"] {
        out.push(violation("integrity", None, rows.join("; ")));
    }
    Ok(())
}

fn seq(conn: &Connection, out: &mut Vec<Violation>) -> Result<()> {
    let mut stmt = conn.prepare(
        "SELECT aggregate_id, count(*), min(seq), max(seq) FROM event GROUP BY aggregate_id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    for row in rows {
        let (session, count, min, max) = row?;
        if min != 0 || max != count - 1 {
            out.push(violation(
                "seq",
                Some(&session),
                format!("{count} events with seqs {min}..={max}"),
            ));
        }
    }
    Ok(())
}

fn session_ids(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT id FROM session UNION SELECT DISTINCT aggregate_id FROM event ORDER BY 1",
    )?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn replay(conn: &Connection, out: &mut Vec<Violation>) -> Result<()> {
    for session in session_ids(conn)? {
        if let Some(detail) = crate::doctor::replay_difference(conn, &session) {
            out.push(violation("replay", Some(&session), detail));
        }
    }
    Ok(())
}

fn one_claim(conn: &Connection, out: &mut Vec<Violation>) -> Result<()> {
    let mut stmt = conn.prepare(
        "SELECT session_id, count(*) FROM session_execution GROUP BY session_id HAVING count(*) > 1",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
    for row in rows {
        let (session, n) = row?;
        out.push(violation(
            "one_claim",
            Some(&session),
            format!("{n} claims"),
        ));
    }
    Ok(())
}

fn open_tools(conn: &Connection, now_ms: i64, out: &mut Vec<Violation>) -> Result<()> {
    let live: BTreeMap<String, Option<String>> = crate::inspect::claims(conn)?
        .into_iter()
        .filter(|c| c.state(now_ms) == ClaimState::Live)
        .map(|c| (c.session_id, c.assistant_message_id))
        .collect();
    // Only assistants whose JSON mentions an open status need decoding.
    let mut stmt = conn.prepare(
        "SELECT id, session_id FROM session_message WHERE type = 'assistant'
         AND (data LIKE '%\"status\":\"pending\"%' OR data LIKE '%\"status\":\"running\"%')",
    )?;
    let candidates: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (id, session) in candidates {
        let Ok(Some(message)) = crate::store::rows::message(conn, &id) else {
            continue; // undecodable: the replay check reports it
        };
        let Some(assistant) = message.data.as_assistant() else {
            continue;
        };
        let open: Vec<&str> = assistant
            .tools()
            .filter(|t| t.state.status.is_open())
            .map(|t| t.call_id.as_str())
            .collect();
        if open.is_empty() {
            continue;
        }
        let covered = live
            .get(&session)
            .is_some_and(|a| a.as_deref() == Some(id.as_str()));
        if !covered {
            out.push(violation(
                "open_tool",
                Some(&session),
                format!("assistant {id} has open tool calls {open:?} and no live claim"),
            ));
        }
    }
    Ok(())
}

fn inputs(conn: &Connection, out: &mut Vec<Violation>) -> Result<()> {
    // input id -> seqs of the input.promoted events naming it
    let mut promoted: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    let mut stmt = conn.prepare(
        "SELECT aggregate_id, seq, json_extract(data, '$.input_id') FROM event WHERE type = 'input.promoted'",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, Option<String>>(2)?,
        ))
    })?;
    for row in rows {
        let (session, seq, input) = row?;
        promoted
            .entry(input.unwrap_or_default())
            .or_default()
            .push((session, seq));
    }
    let mut stmt = conn.prepare("SELECT id, session_id, promoted_seq FROM session_input")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<i64>>(2)?,
        ))
    })?;
    for row in rows {
        let (id, session, promoted_seq) = row?;
        let events = promoted.remove(&id).unwrap_or_default();
        let ok = match (promoted_seq, events.as_slice()) {
            (None, []) => true,
            (Some(seq), [(s, e)]) => *e == seq && *s == session,
            _ => false,
        };
        if !ok {
            out.push(violation(
                "input_once",
                Some(&session),
                format!("input {id}: promoted_seq {promoted_seq:?}, promotion events {events:?}"),
            ));
        }
    }
    for (id, events) in promoted {
        out.push(violation(
            "input_once",
            events.first().map(|(s, _)| s.as_str()),
            format!("promotion of input {id} that was never admitted: {events:?}"),
        ));
    }
    Ok(())
}

fn recovery_rows(conn: &Connection, out: &mut Vec<Violation>) -> Result<()> {
    for r in crate::inspect::recoveries(conn)? {
        let session = Some(r.session_id.as_str());
        if r.continuation_message_id != ids::continuation_input(&r.execution_id) {
            out.push(violation(
                "recovery_rows",
                session,
                format!(
                    "recovery {} names continuation {}",
                    r.execution_id, r.continuation_message_id
                ),
            ));
        }
        match crate::store::rows::input(conn, &r.continuation_message_id) {
            Ok(Some(input)) if input.session_id == r.session_id => {}
            Ok(Some(input)) => out.push(violation(
                "recovery_rows",
                session,
                format!(
                    "continuation {} belongs to session {}",
                    input.id, input.session_id
                ),
            )),
            Ok(None) => out.push(violation(
                "recovery_rows",
                session,
                format!("continuation {} is missing", r.continuation_message_id),
            )),
            Err(e) => out.push(violation("recovery_rows", session, e.to_string())),
        }
        if let Some(id) = &r.assistant_message_id {
            let owner: Option<String> = conn
                .query_row(
                    "SELECT session_id FROM session_message WHERE id = ?1",
                    [id],
                    |row| row.get(0),
                )
                .ok();
            if owner.as_deref() != Some(r.session_id.as_str()) {
                out.push(violation(
                    "recovery_rows",
                    session,
                    format!(
                        "recovery {} names assistant {id} of session {owner:?}",
                        r.execution_id
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn epochs(conn: &Connection, out: &mut Vec<Violation>) -> Result<()> {
    let mut stmt = conn.prepare(
        "SELECT aggregate_id, seq, execution_id, epoch FROM event
         WHERE execution_id IS NOT NULL ORDER BY aggregate_id, seq",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<i64>>(3)?,
        ))
    })?;
    let mut last: BTreeMap<(String, String), i64> = BTreeMap::new();
    for row in rows {
        let (session, seq, execution, epoch) = row?;
        let epoch = epoch.unwrap_or(-1);
        let key = (session.clone(), execution.clone());
        if let Some(previous) = last.get(&key)
            && epoch < *previous
        {
            out.push(violation(
                "epoch",
                Some(&session),
                format!("execution {execution}: epoch {epoch} at seq {seq} after epoch {previous}"),
            ));
        }
        last.insert(key, epoch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::Store;
    use crate::testing::{Stage, interrupted};
    use pretty_assertions::assert_eq;

    const T0: i64 = 1_700_000_000_000;

    fn rules(v: &[Violation]) -> Vec<&'static str> {
        let mut r: Vec<&str> = v.iter().map(|v| v.rule).collect();
        r.dedup();
        r
    }

    #[test]
    fn a_recovered_database_keeps_every_invariant() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("steward.db"), &ManualClock::new(T0)).unwrap();
        for (i, stage) in [Stage::Promoted, Stage::Streaming, Stage::Tools]
            .into_iter()
            .enumerate()
        {
            interrupted(&mut store, &format!("ses_{i}"), stage, T0);
        }
        // Live claims: open tools are covered.
        assert_eq!(check(store.conn(), T0 + 1).unwrap(), vec![]);
        // Expired, not yet recovered: the open tools are reported.
        let waiting = check(store.conn(), T0 + 60_000).unwrap();
        assert_eq!(rules(&waiting), vec!["open_tool"]);
        let params = crate::recovery::Params {
            owner_id: "own_r".into(),
            owners: crate::owner::Owners::new("/nonexistent/owners"),
            lease_ms: 30_000,
            slack_ms: crate::recovery::CLOCK_SLACK_MS,
            killed: Default::default(),
        };
        crate::recovery::pass(store.conn_mut(), &params, T0 + 60_000).unwrap();
        assert_eq!(check(store.conn(), T0 + 60_000).unwrap(), vec![]);
    }

    #[test]
    fn each_rule_reports_what_breaks_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("steward.db"), &ManualClock::new(T0)).unwrap();
        interrupted(&mut store, "ses_a", Stage::Tools, T0);
        interrupted(&mut store, "ses_b", Stage::Tools, T0);
        let conn = store.conn();
        conn.execute_batch(
            "DELETE FROM event WHERE aggregate_id = 'ses_a' AND seq = 2;
             UPDATE event SET epoch = 5 WHERE aggregate_id = 'ses_b' AND seq = 3;",
        )
        .unwrap();
        let found = check(conn, T0 + 1).unwrap();
        let mut got = rules(&found);
        got.sort();
        got.dedup();
        assert_eq!(
            got,
            vec!["epoch", "input_once", "replay", "seq"],
            "{found:#?}"
        );
    }
}
