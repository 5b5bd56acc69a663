//! `steward sessions [--json] [--limit N | --all]`: sessions with their state,
//! newest first — a page of them (read by index, so it costs the same on a file of
//! any size), or every one with `--all`. Never recovers or runs anything.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use steward_engine::inspect::pages::{self, PageRequest};
use steward_engine::store::Store;

use crate::output::out;

/// Sessions read per query with `--all`.
const PAGE: usize = 500;

pub fn run(store: &Store, now_ms: i64, json: bool, limit: Option<usize>) -> Result<ExitCode> {
    let conn = store.conn();
    let mut sessions = Vec::new();
    let mut request = PageRequest::first(limit.unwrap_or(PAGE));
    loop {
        let page = pages::sessions(conn, now_ms, &request)?;
        let full = page.len() == request.limit;
        request.after = page.last().map(|s| s.id.clone());
        sessions.extend(page);
        if limit.is_some() || !full {
            break;
        }
    }
    if json {
        let list: Vec<_> = sessions
            .iter()
            .map(|s| {
                json!({"id": s.id, "title": s.title, "directory": s.directory,
                       "state": s.state.as_str(), "time_updated": s.time_updated})
            })
            .collect();
        out!("{}", serde_json::Value::Array(list));
        return Ok(ExitCode::SUCCESS);
    }
    if sessions.is_empty() {
        out!("no sessions yet: start one with `steward run PROMPT`");
    }
    for s in &sessions {
        out!(
            "{}  {:<11}  {}  ({})",
            s.id,
            s.state.as_str(),
            s.title,
            s.directory
        );
    }
    if limit.is_some() {
        let total: i64 = conn.query_row("SELECT count(*) FROM session", [], |r| r.get(0))?;
        let total = usize::try_from(total).unwrap_or(0);
        if total > sessions.len() {
            out!(
                "… and {} older: --limit N lists more, --all lists every one",
                total - sessions.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
