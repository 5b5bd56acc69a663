//! `steward sessions [--json] [--limit N | --all]`: sessions with their state, most
//! recently active first — the 50 most recent by default (every one with `--json`,
//! as scripts expect), `--limit N` of them, or every one with `--all`. The state of
//! each listed session is read by index, so a page costs the same on a file of any
//! size. Never recovers or runs anything.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use steward_engine::inspect::pages;
use steward_engine::projection::SessionRow;
use steward_engine::store::{Store, rows};

use crate::output::out;

pub fn run(store: &Store, now_ms: i64, json: bool, limit: Option<usize>) -> Result<ExitCode> {
    let conn = store.conn();
    let listed: Vec<SessionRow> = match limit {
        None => rows::sessions(conn)?,
        Some(n) => rows::recent_sessions(conn, n)?,
    };
    let mut sessions = Vec::with_capacity(listed.len());
    for s in listed {
        let state = pages::session_state(conn, &s.id, now_ms)?;
        sessions.push((s, state));
    }
    if json {
        let list: Vec<_> = sessions
            .iter()
            .map(|(s, state)| {
                json!({"id": s.id, "title": s.title, "directory": s.directory,
                       "state": state.as_str(), "time_updated": s.time_updated})
            })
            .collect();
        out!("{}", serde_json::Value::Array(list));
        return Ok(ExitCode::SUCCESS);
    }
    if sessions.is_empty() {
        out!("no sessions yet: start one with `steward run PROMPT`");
    }
    let clean = steward_engine::printable::clean;
    for (s, state) in &sessions {
        out!(
            "{}  {:<11}  {}  ({})",
            s.id,
            state.as_str(),
            clean(&s.title),
            clean(&s.directory)
        );
    }
    if limit.is_some() {
        let total: i64 = conn.query_row("SELECT count(*) FROM session", [], |r| r.get(0))?;
        let total = usize::try_from(total).unwrap_or(0);
        if total > sessions.len() {
            out!(
                "… and {} less recent: --limit N lists more, --all lists every one",
                total - sessions.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
