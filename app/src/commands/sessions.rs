//! `steward sessions [--json]`: every session with its state. Never recovers or runs
//! anything.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use steward_engine::inspect;
use steward_engine::store::Store;

use crate::output::out;

pub fn run(store: &Store, now_ms: i64, json: bool) -> Result<ExitCode> {
    let sessions = inspect::sessions(store.conn(), now_ms)?;
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
    for s in sessions {
        out!(
            "{}  {:<11}  {}  ({})",
            s.id,
            s.state.as_str(),
            s.title,
            s.directory
        );
    }
    Ok(ExitCode::SUCCESS)
}
