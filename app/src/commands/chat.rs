//! `steward` with no command: the terminal interface. Recovery runs at launch (as
//! for every command that runs sessions), then every due wake is started and runs in
//! the background while the chat is open; recovery keeps running on a timer. Leaving
//! while turns run asks first; whatever still runs is stopped without writing and
//! reconciled like a crash, so it continues at the next launch.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, bail};
use steward_engine::engine::Redriving;
use steward_engine::store::Store;
use steward_tui::app::Launch;

use crate::context::{Context, runtime};

pub fn run(ctx: &Context, store: Store, mouse: bool) -> Result<ExitCode> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        bail!("the terminal interface needs a terminal; see `steward --help` for the commands");
    }
    runtime()?.block_on(async move {
        let (permission, asks) = steward_tui::permission::channel();
        let engine = ctx.start_engine(store, Arc::new(permission)).await?;
        let at_ms = ctx.clock.now_ms();
        let report = engine.recover().await?;
        engine.redrive_wakes().await?;
        engine.start_background(Redriving::DueWakes);
        let auto_continue = ctx.config.recovery.auto_continue;
        let wakes = launch_wakes(&engine, auto_continue).await;
        let options = steward_tui::Options {
            data_dir: ctx.paths.data_dir.clone(),
            database: ctx.paths.database.clone(),
            owners_dir: ctx.paths.owners.clone(),
            cwd: std::env::current_dir()?.canonicalize()?,
            config_path: ctx.paths.config.clone(),
            mouse,
            clock: ctx.clock.clone(),
        };
        let launch = Launch {
            report: Some(report),
            at_ms,
            wakes,
            auto_continue,
        };
        let result = steward_tui::run_chat(&engine, asks, launch, options).await;
        let stopped = engine.shutdown().await?;
        let leave = result?;
        if !stopped.is_empty() && leave == steward_tui::Leave::Quit {
            eprintln!(
                "steward: {} running turn{} stopped and reconciled; they continue at the next launch",
                stopped.len(),
                if stopped.len() == 1 { " was" } else { "s were" }
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Recovery wakes that wait on the user after the launch redrive, as (execution,
/// session, parked): parked ones, and — when continuing on its own is off — pending
/// ones.
async fn launch_wakes(
    engine: &steward_engine::Engine,
    auto_continue: bool,
) -> Vec<(String, String, bool)> {
    engine
        .db()
        .read(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT execution_id, session_id, recovery_error IS NOT NULL FROM session_recovery
                 WHERE (?2 = 0 AND wake_pending = 1 AND recovery_error IS NULL)
                    OR recovery_error = ?1
                 ORDER BY execution_id LIMIT 50",
            )?;
            let rows = stmt.query_map(
                (steward_engine::recovery::CRASH_LOOP_ERROR, auto_continue),
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
        .unwrap_or_default()
}
