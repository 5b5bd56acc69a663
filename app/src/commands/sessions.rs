//! `steward sessions [--json] [--limit N | --all]`: sessions with their state, most
//! recently active first — the 50 most recent by default (every one with `--json`,
//! as scripts expect), `--limit N` of them, or every one with `--all`. The state of
//! each listed session is read by index, so a page costs the same on a file of any
//! size. Archived sessions are left out unless `--archived` asks for them
//! (protocol §3.6). Never recovers or runs anything.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use steward_engine::inspect::pages::{self, PageRequest};
use steward_engine::store::Store;

use crate::output::out;

pub fn run(
    store: &Store,
    now_ms: i64,
    json: bool,
    limit: Option<usize>,
    archived: bool,
) -> Result<ExitCode> {
    let conn = store.conn();
    let page = PageRequest::first(limit.unwrap_or(usize::MAX));
    let sessions = pages::recent_sessions(conn, now_ms, &page, archived)?;
    if json {
        let list: Vec<_> = sessions
            .iter()
            .map(|s| {
                json!({"id": s.id, "title": s.title, "directory": s.directory,
                       "state": s.state.as_str(), "time_updated": s.time_updated,
                       "archived": s.archived})
            })
            .collect();
        out!("{}", serde_json::Value::Array(list));
        return Ok(ExitCode::SUCCESS);
    }
    if sessions.is_empty() {
        if !archived && pages::count_sessions(conn, &PageRequest::default(), true)? > 0 {
            out!("no sessions but archived ones: `steward sessions --archived` lists them");
        } else {
            out!("no sessions yet: start one with `steward run PROMPT`");
        }
    }
    let clean = steward_engine::printable::clean;
    for s in &sessions {
        out!(
            "{}  {:<11}  {}  ({}){}",
            s.id,
            s.state.as_str(),
            clean(&s.title),
            clean(&s.directory),
            if s.archived { "  archived" } else { "" }
        );
    }
    if limit.is_some() {
        let total = pages::count_sessions(conn, &PageRequest::default(), archived)?;
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
