//! `steward discard EXECUTION_ID`: the inspector's "discard" on a recovery wake (it
//! will never be continued) or a quarantined claim (it stops blocking its session).
//! Never recovers or runs anything.

use std::process::ExitCode;

use anyhow::Result;
use steward_engine::inspector;
use steward_engine::store::Store;

use crate::output::out;

pub fn run(mut store: Store, now_ms: i64, execution_id: &str) -> Result<ExitCode> {
    let session = store.write(|tx| inspector::discard(tx, execution_id, now_ms))?;
    out!("discarded {execution_id} (session {session})");
    Ok(ExitCode::SUCCESS)
}
