//! `steward doctor [--json]`: integrity, schema version, the projection replay check
//! and every invariant; then each configured MCP server, started (in the current
//! directory), listed and stopped. Never recovers or runs a session. On a file Steward refuses
//! to open it explains which check failed, what it found and what the user can do,
//! reading the file only.

use std::process::ExitCode;

use anyhow::Result;
use steward_engine::doctor;
use steward_engine::doctor::diagnosis::{self, Diagnosis};
use steward_engine::store::Store;
use steward_engine::store::migrate::MIGRATIONS;

use crate::paths::Paths;

use crate::output::out;

/// What `doctor` found of one configured MCP server.
#[derive(Debug, serde::Serialize)]
struct ServerCheck {
    name: String,
    ok: bool,
    tools: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Starts each configured MCP server in the current directory, lists its tools and
/// stops it.
fn check_servers(config: &steward_engine::config::Config) -> Result<Vec<ServerCheck>> {
    if config.mcp.servers.is_empty() {
        return Ok(Vec::new());
    }
    let cwd = std::env::current_dir()?;
    let hidden: Vec<String> = config.provider.api_key_env.iter().cloned().collect();
    let grace = std::time::Duration::from_millis(config.tools.kill_grace_ms);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(async {
        let mut checks = Vec::new();
        for (name, server) in &config.mcp.servers {
            let probed =
                steward_engine::mcp::McpHub::probe(name, server, &cwd, &hidden, grace).await;
            checks.push(match probed {
                Ok(tools) => ServerCheck {
                    name: name.clone(),
                    ok: true,
                    tools,
                    error: None,
                },
                Err(error) => ServerCheck {
                    name: name.clone(),
                    ok: false,
                    tools: Vec::new(),
                    error: Some(error),
                },
            });
        }
        checks
    }))
}

/// The report of a file the look before opening found sound with its whole-file
/// check (`WholeFile::Always` in main.rs: a damaged file was explained as a refusal
/// without ever being opened for writing).
pub fn run(
    store: &Store,
    now_ms: i64,
    json: bool,
    config: &steward_engine::config::Config,
) -> Result<ExitCode> {
    let report = match doctor::check_after(store.conn(), now_ms, "ok".into()) {
        Ok(report) => report,
        Err(e) if e.is_damage() => {
            let Some(path) = store.path() else {
                anyhow::bail!("the database is damaged: {e}");
            };
            return explain_damage(path, &e.to_string(), json);
        }
        Err(e) => return Err(e.into()),
    };
    let servers = check_servers(config)?;
    let servers_ok = servers.iter().all(|s| s.ok);
    if json {
        let mut value = serde_json::to_value(&report)?;
        value["path"] = store.path().map(|p| p.display().to_string()).into();
        value["mcp_servers"] = serde_json::to_value(&servers)?;
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
        for server in &servers {
            let clean = steward_engine::printable::clean;
            match &server.error {
                None => out!(
                    "mcp         {}: starts, {} tool{}: {}",
                    clean(&server.name),
                    server.tools.len(),
                    if server.tools.len() == 1 { "" } else { "s" },
                    clean(&server.tools.join(", "))
                ),
                Some(error) => out!(
                    "mcp         {}: does not start: {}",
                    clean(&server.name),
                    clean(error)
                ),
            }
        }
        out!(
            "{}",
            if report.ok && servers_ok {
                "ok"
            } else {
                "problems found"
            }
        );
    }
    Ok(if report.ok && servers_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// There is no database to check (exit 1): the doctor says so and creates nothing,
/// neither the data directory nor the file.
pub fn no_database(paths: &Paths, json: bool) -> Result<ExitCode> {
    let why = "nothing to check (Steward creates it when a command that runs sessions first uses this data directory)";
    let error = format!("no database at {}: {why}", paths.database.display());
    if json {
        let value = serde_json::json!({
            "ok": false,
            "path": paths.database.display().to_string(),
            "error": error,
        });
        out!("{value}");
    } else {
        out!("database    {}", paths.database.display());
        out!("missing     {why}");
        out!("problems found");
    }
    Ok(ExitCode::FAILURE)
}

/// Explains why the database was refused (exit 3); any other error passes through.
pub fn explain_refusal(paths: &Paths, error: anyhow::Error, json: bool) -> Result<ExitCode> {
    let Some(steward_engine::Error::DatabaseRefused { reason, .. }) =
        error.downcast_ref::<steward_engine::Error>()
    else {
        return Err(error);
    };
    let d = diagnosis::diagnose(&paths.database, reason, MIGRATIONS);
    if json {
        out!("{}", serde_json::to_string(&d)?);
    } else {
        print_diagnosis(&d);
    }
    Ok(ExitCode::from(crate::exit::REFUSED))
}

/// Explains a damaged file that opened (exit 3, as a refusal).
fn explain_damage(path: &std::path::Path, found: &str, json: bool) -> Result<ExitCode> {
    let found = found.split_whitespace().collect::<Vec<_>>().join(" ");
    let reason = format!("the file fails PRAGMA quick_check: {found}");
    let d = diagnosis::diagnose(path, &reason, MIGRATIONS);
    if json {
        out!("{}", serde_json::to_string(&d)?);
    } else {
        print_diagnosis(&d);
    }
    Ok(ExitCode::from(crate::exit::REFUSED))
}

fn print_diagnosis(d: &Diagnosis) {
    out!("database    {}", d.path.display());
    out!("refused     {}", d.refusal);
    out!("failed      {}", failed_check(d.failed));
    if let Some(bytes) = d.bytes {
        out!("size        {bytes} bytes");
    }
    if let Some(h) = &d.header {
        if h.is_sqlite {
            out!(
                "header      SQLite, page size {}, {} pages{}",
                h.page_size
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "invalid".into()),
                h.page_count,
                h.expected_bytes
                    .map(|b| format!(" ({b} bytes when complete)"))
                    .unwrap_or_default()
            );
        } else {
            out!("header      not a SQLite file");
        }
    }
    if let Some(wal) = d.wal_bytes {
        out!("log         {wal} bytes in -wal");
    }
    if !d.tables.is_empty() {
        out!("tables      {}", d.tables.join(", "));
    }
    for m in &d.migrations {
        out!("migration   {} ({})", m.id, m.status.replace('_', " "));
    }
    for e in &d.integrity_errors {
        out!("integrity   {e}");
    }
    out!("");
    for a in &d.advice {
        out!("- {a}");
    }
}

fn failed_check(failed: diagnosis::Failed) -> &'static str {
    use diagnosis::Failed::*;
    match failed {
        NotAFile => "it is not a regular file",
        Header => "the file header (not SQLite, empty, or truncated)",
        Open => "SQLite cannot open it",
        Integrity => "PRAGMA quick_check (the file is damaged)",
        Foreign => "it is not a Steward database",
        Migrations => "its migrations do not fit this build",
        Nothing => "nothing, on a second look",
    }
}
