//! `steward recover [--json] [--no-wake]`: a recovery pass now; then, unless
//! `--no-wake`, the durable wakes it finds are redriven and their sessions run until
//! idle (progress on stderr), another pass takes what expired or lost its owner
//! meanwhile, and its wakes run too — each session woken once — until a round
//! starts nothing and takes nothing; then the report, every pass's rows in it. Exit
//! 1 when a pass failed (a full disk) or a woken session did not finish.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use steward_engine::coordinator::SessionOutcome;
use steward_engine::message::{EXECUTION_INTERRUPTED_BY_RESTART, PROVIDER_OUTCOME_UNKNOWN};
use steward_engine::phase::Phase;
use steward_engine::recovery::RecoveryReport;
use steward_engine::runner::Outcome;
use steward_engine::store::Store;
use steward_engine::tools::Headless;

use crate::context::{Context, runtime};

use crate::output::{out, say};

pub fn run(ctx: &Context, store: Store, json: bool, no_wake: bool) -> Result<ExitCode> {
    let permission = Arc::new(Headless { allow_all: false });
    runtime()?.block_on(ctx.with_engine(store, permission, async |engine| {
        let mut report = engine.recover().await?;
        let mut round_failed = false;
        if !json {
            print_pass(&report);
        }
        if !no_wake {
            if !ctx.config.recovery.auto_continue {
                say!(
                    "recovery.auto_continue is off: recovered sessions wait for `steward wake EXECUTION_ID`"
                );
            }
            // Rounds: wake what is due, wait for it, then take what expired or lost
            // its owner meanwhile, until a round runs nothing and takes nothing. A
            // session whose wake ran here is not woken again; one another process
            // held is tried again in a later round (its holder may have died), but
            // never keeps the rounds going by itself.
            let mut ran = std::collections::BTreeSet::new();
            loop {
                let round = async {
                    let redrive = engine.redrive_wakes_except(&ran).await?;
                    report.wakes.redriven += redrive.report.redriven;
                    report.wakes.quarantined += redrive.report.quarantined;
                    report.wakes.waiting = redrive.report.waiting;
                    report.wakes.waiting_sessions = redrive.report.waiting_sessions;
                    let (failed, here) = wait_for(engine, &redrive.sessions).await;
                    report.wakes.failed += failed;
                    let progressed = !here.is_empty();
                    ran.extend(here);
                    let took = match engine.recover_if_due().await? {
                        Some(late) if late.moved() > 0 => {
                            if !json {
                                print_pass(&late);
                            }
                            report.absorb(late);
                            true
                        }
                        Some(late) => {
                            report.skipped_live = late.skipped_live;
                            false
                        }
                        None => false,
                    };
                    anyhow::Ok(progressed || took)
                };
                match round.await {
                    Ok(true) => {}
                    Ok(false) => break,
                    // A later round failed (a full disk): the report so far is
                    // still printed, and the exit code says so.
                    Err(e) => {
                        say!("steward: {e:#}");
                        round_failed = true;
                        break;
                    }
                }
            }
        }
        if json {
            out!("{}", serde_json::to_string(&report)?);
        } else if !no_wake {
            out!(
                "wakes: {} redriven, {} failed, {} quarantined",
                report.wakes.redriven,
                report.wakes.failed,
                report.wakes.quarantined
            );
            let waiting = &report.wakes.waiting_sessions;
            if !waiting.is_empty() {
                let (n, one) = (waiting.len(), waiting.len() == 1);
                out!(
                    "wakes: {n} session{} wait{} for a provider and model this process does not have (it runs {}): relaunch with {}, or choose this one for {} (`steward run --session ID --provider … --model …`)",
                    if one { "" } else { "s" },
                    if one { "s" } else { "" },
                    engine.model(),
                    if one { "its own" } else { "theirs" },
                    if one { "it" } else { "them" },
                );
                for w in waiting {
                    out!("  {} waits for {}/{}", w.session_id, w.provider, w.model);
                }
            }
        }
        if round_failed {
            return Ok(ExitCode::FAILURE);
        }
        // A wake that did not run to its end (a full disk, a session held
        // elsewhere) stays pending: say so in the exit code too.
        if report.wakes.failed > 0 {
            say!(
                "steward: {} woken session{} did not finish (see above)",
                report.wakes.failed,
                if report.wakes.failed == 1 { "" } else { "s" },
            );
            return Ok(ExitCode::FAILURE);
        }
        Ok(ExitCode::SUCCESS)
    }))
}

/// Waits for each of `sessions` (just woken) to go idle, saying how each ended;
/// returns how many did not finish, and those that ran here (not held by another
/// process).
async fn wait_for(
    engine: &steward_engine::engine::Engine,
    sessions: &[String],
) -> (usize, Vec<String>) {
    for session in sessions {
        say!("continuing {session}…");
    }
    let mut failed = 0;
    let mut here = Vec::new();
    for session in sessions {
        let outcome = engine.wait_idle(session).await;
        if !matches!(outcome, Some(SessionOutcome::Busy { .. })) {
            here.push(session.clone());
        }
        // Another process running the session (it took the wake first) is not a
        // failure of the wake.
        let ok = matches!(
            outcome,
            Some(
                SessionOutcome::Ran(Outcome::Idle | Outcome::Failed(_))
                    | SessionOutcome::Busy { .. }
            )
        );
        if !ok {
            failed += 1;
        }
        say!("{session}: {}", describe(outcome.as_ref()));
    }
    (failed, here)
}

fn print_pass(report: &RecoveryReport) {
    out!(
        "recovered {} (scanned {}, superseded {}, safe discarded {}, quarantined {}) in {} ms",
        report.recovered.len(),
        report.scanned,
        report.superseded,
        report.discarded_safe,
        report.quarantined.len(),
        report.duration_ms
    );
    for r in &report.recovered {
        let text = match r.phase {
            Phase::Unknown => PROVIDER_OUTCOME_UNKNOWN,
            Phase::Ready | Phase::Safe => EXECUTION_INTERRUPTED_BY_RESTART,
        };
        out!("  {} in {}: {text}", r.execution_id, r.session_id);
        for p in &r.stopped_processes {
            out!(
                "    stopped the leftover process group {} of tool call {}",
                p.pgid,
                p.call_id
            );
        }
        if r.parked {
            out!(
                "    interrupted repeatedly: left for you (`steward wake {}`)",
                r.execution_id
            );
        }
    }
    for q in &report.quarantined {
        out!(
            "  quarantined {} in {}: {}",
            q.execution_id,
            q.session_id,
            q.reason
        );
        for p in &q.stopped_processes {
            out!(
                "    stopped the leftover process group {} of tool call {}",
                p.pgid,
                p.call_id
            );
        }
    }
}

pub fn describe(outcome: Option<&SessionOutcome>) -> String {
    outcome.map_or_else(|| "idle".into(), ToString::to_string)
}
