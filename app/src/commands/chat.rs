//! `steward` with no command: the terminal interface. Recovery runs at launch (as
//! for every command that runs sessions), then every due wake is started and runs in
//! the background while the chat is open; recovery keeps running on a timer. Leaving
//! while turns run asks first; whatever still runs is stopped without writing and
//! reconciled like a crash, so it continues at the next launch.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Result, bail};
use steward_engine::engine::Redriving;
use steward_engine::store::Store;
use steward_tui::app::{Launch, Quarantined};

use crate::context::{Context, runtime};
use crate::output::say;

/// Which session the chat opens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Open {
    Nothing,
    /// `--continue`: the most recently active one (archived ones aside).
    MostRecent,
    /// `--session ID`.
    Session(String),
}

/// The session `open` names, checked before the screen is taken: an unknown id is
/// an error on the command line, not an empty screen.
fn resolve(store: &Store, open: Open) -> Result<(Option<String>, Option<String>)> {
    let conn = store.conn();
    Ok(match open {
        Open::Nothing => (None, None),
        Open::Session(id) => match steward_engine::store::rows::session(conn, &id)? {
            Some(_) => (Some(id), None),
            None => bail!("no session {id}: `steward sessions` lists them"),
        },
        Open::MostRecent => {
            let first = steward_engine::inspect::pages::PageRequest::first(1);
            let now = steward_engine::clock::SystemClock::new();
            let recent = steward_engine::inspect::pages::recent_sessions(
                conn,
                steward_engine::clock::Clock::now_ms(&now),
                &first,
                false,
            )?;
            match recent.into_iter().next() {
                Some(s) => (Some(s.id), None),
                None => (
                    None,
                    Some("no session to continue yet: write below to start one".into()),
                ),
            }
        }
    })
}

pub fn run(ctx: &Context, store: Store, mouse: bool, open: Open) -> Result<ExitCode> {
    let (open, note) = resolve(&store, open)?;
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        bail!("the terminal interface needs a terminal; see `steward --help` for the commands");
    }
    let (permission, asks) = steward_tui::permission::channel();
    let leave =
        runtime()?.block_on(
            ctx.with_engine(store, Arc::new(permission), async |engine| {
                let at_ms = ctx.clock.now_ms();
                // What was quarantined before this launch, to tell it from what the
                // launch quarantines.
                let before = quarantine(engine).await.0;
                // A launch recovery that cannot finish (a full disk, say) keeps nothing from
                // the screen: it shows what it can read and why recovery stopped, and the
                // background retries until it can.
                let (report, mut error) = match engine.recover().await {
                    Ok(report) => (Some(report), None),
                    Err(e) => (None, Some(e.to_string())),
                };
                let continued = match engine.redrive_wakes().await {
                    Ok(redrive) => redrive.sessions,
                    Err(e) => {
                        error.get_or_insert(e.to_string());
                        Vec::new()
                    }
                };
                if let Some(error) = &error {
                    tracing::error!(%error, "the launch recovery did not finish");
                }
                engine.start_background(Redriving::DueWakes);
                let auto_continue = ctx.config.recovery.auto_continue;
                let (wakes, more_wakes) = launch_wakes(engine, auto_continue).await;
                let (quarantine, quarantine_total) = quarantine(engine).await;
                let quarantined_wakes: Vec<(String, String, String)> = quarantine
                    .iter()
                    .filter(|q| {
                        q.kind == "recovery"
                            && q.reason != steward_engine::recovery::CRASH_LOOP_ERROR
                            && !before.iter().any(|b| b.execution_id == q.execution_id)
                    })
                    .map(|q| {
                        (
                            q.execution_id.clone(),
                            q.session_id.clone(),
                            q.reason.clone(),
                        )
                    })
                    .collect();
                let titles = titles(engine, report.as_ref(), &wakes, &quarantine, &continued).await;
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
                    report,
                    error,
                    at_ms,
                    wakes,
                    more_wakes,
                    quarantined_wakes,
                    quarantine,
                    quarantine_total,
                    continued,
                    auto_continue,
                    titles,
                    open,
                    note,
                };
                let leave = steward_tui::run_chat(engine.clone(), asks, launch, options).await;
                // Leaving takes a moment (running turns stop, and are reconciled); a second
                // SIGTERM, SIGHUP or Ctrl-C meanwhile leaves at once, as a crash would —
                // which recovery handles at the next launch.
                tokio::spawn(async {
                    use tokio::signal::unix::{SignalKind, signal};
                    let (Ok(mut term), Ok(mut hup), Ok(mut int)) = (
                        signal(SignalKind::terminate()),
                        signal(SignalKind::hangup()),
                        signal(SignalKind::interrupt()),
                    ) else {
                        return;
                    };
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = hup.recv() => {}
                        _ = int.recv() => {}
                    }
                    std::process::exit(130);
                });
                let running = engine.running().len();
                Ok((leave?, running))
            }),
        )?;
    let (leave, stopped) = leave;
    if stopped > 0 && leave == steward_tui::Leave::Quit {
        say!(
            "steward: {stopped} running turn{} stopped and reconciled; they continue at the next launch",
            if stopped == 1 { " was" } else { "s were" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Wakes the panel lists at most.
const PANEL_WAKES: usize = 50;

/// Recovery wakes that wait on the user after the launch redrive, as (execution,
/// session, parked): parked ones, and — when continuing on its own is off — pending
/// ones; and how many more wait beyond those listed.
async fn launch_wakes(
    engine: &steward_engine::Engine,
    auto_continue: bool,
) -> (Vec<(String, String, bool)>, usize) {
    engine
        .db()
        .read(move |conn| {
            let filter = "FROM session_recovery
                 WHERE (?2 = 0 AND wake_pending = 1 AND recovery_error IS NULL)
                    OR recovery_error = ?1";
            let params = (steward_engine::recovery::CRASH_LOOP_ERROR, auto_continue);
            let mut stmt = conn.prepare(&format!(
                "SELECT execution_id, session_id, recovery_error IS NOT NULL {filter}
                 ORDER BY execution_id LIMIT {PANEL_WAKES}"
            ))?;
            let rows = stmt
                .query_map(params, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            let all: i64 =
                conn.query_row(&format!("SELECT count(*) {filter}"), params, |r| r.get(0))?;
            let more = usize::try_from(all).unwrap_or(0).saturating_sub(rows.len());
            Ok((rows, more))
        })
        .await
        .unwrap_or_default()
}

/// Every row quarantined, claims and wakes alike, as the Quarantine tab lists them
/// (the first ones by execution), and how many there are in all.
async fn quarantine(engine: &steward_engine::Engine) -> (Vec<Quarantined>, usize) {
    engine
        .db()
        .read(move |conn| {
            let rows = steward_engine::inspect::pages::quarantine(
                conn,
                &steward_engine::inspect::pages::PageRequest {
                    limit: PANEL_WAKES,
                    ..Default::default()
                },
            )?;
            let total: i64 = conn.query_row(
                "SELECT (SELECT count(*) FROM session_execution WHERE recovery_error IS NOT NULL)
                      + (SELECT count(*) FROM session_recovery WHERE recovery_error IS NOT NULL)",
                [],
                |r| r.get(0),
            )?;
            let rows = rows
                .into_iter()
                .map(|q| Quarantined {
                    kind: q.kind.to_string(),
                    execution_id: q.execution_id,
                    session_id: q.session_id,
                    reason: q.reason,
                })
                .collect();
            Ok((rows, usize::try_from(total).unwrap_or(0)))
        })
        .await
        .unwrap_or_default()
}

/// The titles of the sessions the after-crash panel names.
async fn titles(
    engine: &steward_engine::Engine,
    report: Option<&steward_engine::RecoveryReport>,
    wakes: &[(String, String, bool)],
    quarantined: &[Quarantined],
    continued: &[String],
) -> BTreeMap<String, String> {
    let ids: Vec<String> = report
        .into_iter()
        .flat_map(|report| {
            report
                .recovered
                .iter()
                .map(|r| r.session_id.clone())
                .chain(report.quarantined.iter().map(|q| q.session_id.clone()))
        })
        .chain(wakes.iter().map(|w| w.1.clone()))
        .chain(quarantined.iter().map(|q| q.session_id.clone()))
        .chain(continued.iter().cloned())
        .collect();
    engine
        .db()
        .read(move |conn| {
            let mut titles = BTreeMap::new();
            for id in ids {
                if let Some(session) = steward_engine::store::rows::session(conn, &id)? {
                    titles.insert(id, session.title);
                }
            }
            Ok(titles)
        })
        .await
        .unwrap_or_default()
}
