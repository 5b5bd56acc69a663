//! `steward doctor [--json]`: integrity, schema version, the projection replay check
//! and every invariant. Never recovers or runs anything.

use std::process::ExitCode;

use anyhow::Result;
use steward_engine::doctor;
use steward_engine::store::Store;

use crate::output::out;

pub fn run(store: &Store, now_ms: i64, json: bool) -> Result<ExitCode> {
    let report = doctor::check(store.conn(), now_ms)?;
    if json {
        let mut value = serde_json::to_value(&report)?;
        value["path"] = store.path().map(|p| p.display().to_string()).into();
        out!("{value}");
    } else {
        let path = store
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        out!("database    {path}");
        out!(
            "schema      {} ({} migration{} applied)",
            report.schema_version.as_deref().unwrap_or("none"),
            report.migrations.len(),
            if report.migrations.len() == 1 {
                ""
            } else {
                "s"
            }
        );
        out!("integrity   {} (PRAGMA quick_check)", report.quick_check);
        out!(
            "log         {} sessions, {} events",
            report.sessions,
            report.events
        );
        if report.invariants.is_empty() {
            out!(
                "invariants  all {} hold (projections equal a replay of the log)",
                report.rules_checked
            );
        } else {
            out!("invariants  {} broken:", report.invariants.len());
            for v in &report.invariants {
                let session = v.session_id.as_deref().unwrap_or("-");
                out!("            {} {session}: {}", v.rule, v.detail);
            }
            if report.invariants.iter().any(|v| v.rule == "open_tool") {
                out!("            (open tools outside a live claim wait for `steward recover`)");
            }
        }
        out!("{}", if report.ok { "ok" } else { "problems found" });
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
