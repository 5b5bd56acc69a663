//! `steward doctor [--json]`: integrity, schema version, projection replay check.

use std::process::ExitCode;

use anyhow::Result;
use steward_engine::doctor;
use steward_engine::store::Store;

pub fn run(store: &Store, json: bool) -> Result<ExitCode> {
    let report = doctor::check(store.conn())?;
    if json {
        let mut value = serde_json::to_value(&report)?;
        value["path"] = store.path().map(|p| p.display().to_string()).into();
        println!("{value}");
    } else {
        let path = store
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        println!("database   {path}");
        println!(
            "schema     {} ({} migration{} applied)",
            report.schema_version.as_deref().unwrap_or("none"),
            report.migrations.len(),
            if report.migrations.len() == 1 {
                ""
            } else {
                "s"
            }
        );
        println!("integrity  {} (PRAGMA quick_check)", report.quick_check);
        if report.replay_mismatches.is_empty() {
            println!(
                "replay     {} sessions, {} events: every projection equals a replay of its events",
                report.sessions, report.events
            );
        } else {
            println!(
                "replay     {} of {} sessions differ from a replay of their events:",
                report.replay_mismatches.len(),
                report.sessions
            );
            for m in &report.replay_mismatches {
                println!("           {}: {}", m.session_id, m.detail);
            }
        }
        println!("{}", if report.ok { "ok" } else { "problems found" });
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
