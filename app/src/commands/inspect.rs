//! `steward inspect [--json]`: claims, quarantined rows, pending wakes and recoveries,
//! read-only — never writes, never recovers, never creates the database. `--json`
//! prints one snapshot; on a terminal the view refreshes live as other processes
//! change the file (Ctrl-C to leave).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use steward_engine::clock::SharedClock;
use steward_engine::doctor::diagnosis::{Failed, diagnose};
use steward_engine::inspect::{self, Snapshot};
use steward_engine::store::migrate::MIGRATIONS;
use steward_engine::store::open::Preflight;
use steward_engine::store::open::{open_read_only, preflight};

use crate::paths::Paths;

use crate::output::out;

pub fn run(paths: &Paths, clock: &SharedClock, json: bool) -> Result<ExitCode> {
    let snapshot = read(paths, clock)?;
    if json {
        out!("{}", serde_json::to_string(&snapshot)?);
        return Ok(ExitCode::SUCCESS);
    }
    print(&snapshot);
    if !std::io::stdout().is_terminal() {
        return Ok(ExitCode::SUCCESS);
    }
    live(paths, clock, snapshot)
}

fn read(paths: &Paths, clock: &SharedClock) -> Result<Snapshot> {
    match preflight(&paths.database, MIGRATIONS) {
        Ok(Preflight::Absent) => return Ok(Snapshot::default()),
        Ok(_) => {}
        // A damaged Steward database is shown as far as it can be read (reading
        // only); anything else is refused as by every command.
        Err(steward_engine::Error::DatabaseRefused { reason, .. })
            if diagnose(&paths.database, &reason, MIGRATIONS).failed == Failed::Integrity =>
        {
            eprintln!("steward: warning: {reason}; showing what can still be read");
        }
        Err(e) => return Err(e.into()),
    }
    let conn = open_read_only(&paths.database)?;
    Ok(steward_engine::store::read(&conn, |c| {
        inspect::snapshot(
            c,
            &steward_engine::owner::Owners::new(&paths.owners),
            clock.now_ms(),
        )
    })?)
}

/// Redraws when the data directory's doorbell rings, or every second.
fn live(paths: &Paths, clock: &SharedClock, mut last: Snapshot) -> Result<ExitCode> {
    let runtime = crate::context::runtime()?;
    runtime.block_on(async {
        let bell = Arc::new(tokio::sync::Notify::new());
        let _watcher = steward_engine::doorbell::watch(&paths.data_dir, bell.clone());
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
                _ = bell.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            let snapshot = read(paths, clock)?;
            if snapshot != last {
                crate::output::write(format_args!("\x1b[2J\x1b[H"));
                print(&snapshot);
                last = snapshot;
            }
        }
    })
}

fn print(s: &Snapshot) {
    out!("owners ({})", s.owners.len());
    for o in &s.owners {
        let alive = match o.alive {
            Some(true) => "alive",
            Some(false) => "dead",
            None => "unknown",
        };
        out!("  {}  pid {} on {}  {alive}", o.id, o.pid, o.hostname);
    }
    out!("claims ({})", s.claims.len());
    for c in &s.claims {
        out!(
            "  {}  {}  owner {}  epoch {}  phase {}  {:?}",
            c.execution_id,
            c.session_id,
            c.owner_id,
            c.epoch,
            c.phase,
            c.state
        );
    }
    out!("quarantine ({})", s.quarantine.len());
    for q in &s.quarantine {
        out!(
            "  {} {}  {}: {}",
            q.kind,
            q.execution_id,
            q.session_id,
            q.reason
        );
    }
    out!("pending wakes ({})", s.wakes.len());
    for w in &s.wakes {
        out!(
            "  {} {}  {}  attempts {}",
            w.kind,
            w.execution_id.as_deref().unwrap_or(&w.input_id),
            w.session_id,
            w.attempts
        );
    }
    out!("recoveries ({})", s.recoveries.len());
    for r in &s.recoveries {
        out!(
            "  {}  {}  phase {}  wake {}",
            r.execution_id,
            r.session_id,
            r.phase,
            if r.wake_pending { "pending" } else { "done" }
        );
    }
}
