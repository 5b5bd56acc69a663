//! `steward inspect [--json]`: owners, claims, quarantined rows, pending wakes and
//! recoveries, read-only — it never writes, never recovers, never creates the
//! database, and works on a crashed file before any recovery. On a terminal it opens
//! the inspector alone (live as other processes change the file; its actions shown
//! disabled); otherwise, or with `--json`, it prints one snapshot.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;
use steward_engine::clock::SharedClock;
use steward_engine::inspect::{Reader, Snapshot};

use crate::output::{out, say};
use crate::paths::Paths;

pub fn run(paths: &Paths, clock: &SharedClock, json: bool, mouse: bool) -> Result<ExitCode> {
    // Opened once (the file is checked once), so that a refused file exits as every
    // command does (exit 3).
    let mut reader = Reader::open_even_if_damaged(&paths.database, &paths.owners)?;
    if let Some(reason) = reader.damaged() {
        say!("steward: warning: {reason}; showing what can still be read");
    }
    let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    if !json && terminal {
        let options = steward_tui::Options {
            data_dir: paths.data_dir.clone(),
            database: paths.database.clone(),
            owners_dir: paths.owners.clone(),
            cwd: std::env::current_dir()?,
            config_path: paths.config.clone(),
            mouse,
            clock: clock.clone(),
        };
        crate::context::runtime()?.block_on(steward_tui::run_inspector(reader, options))?;
        return Ok(ExitCode::SUCCESS);
    }
    let snapshot = reader.snapshot(clock.now_ms())?;
    if json {
        out!("{}", serde_json::to_string(&snapshot)?);
    } else {
        print(&snapshot);
    }
    Ok(ExitCode::SUCCESS)
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
