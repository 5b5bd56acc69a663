//! `steward recover [--json] [--no-wake]`: a recovery pass now; then, unless
//! `--no-wake`, rounds: the durable wakes it finds are redriven and their sessions
//! run until idle (progress on stderr), then another pass takes what expired or
//! lost its owner meanwhile, and the next round runs its wakes — until a round runs
//! nothing and takes nothing. A session whose wake ran here is woken again only when
//! a later pass recovered it again; one another process holds is tried in each
//! round but does not keep the rounds going (its wake is the holder's, or the next
//! launch's). Then the report, with every pass this command ran in it. Exit 1 when a
//! woken session did not finish; a round that fails (a full disk) prints the report
//! so far and exits as its error says.

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
        let mut round_failed: Option<anyhow::Error> = None;
        if !json {
            print_pass(&report);
        }
        if !no_wake {
            if !ctx.config.recovery.auto_continue {
                say!(
                    "recovery.auto_continue is off: recovered sessions wait for `steward wake EXECUTION_ID`"
                );
            }
            // Rounds (see the top of the file). Each round that goes on has run a
            // session not run before, or taken a claim from another process: the
            // rounds end.
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
                        Some(late) => {
                            let took = late.moved() > 0;
                            if took && !json {
                                print_pass(&late);
                            }
                            // A session recovered again has a new wake: it runs
                            // in the next round, even if it ran here before.
                            for r in &late.recovered {
                                ran.remove(&r.session_id);
                            }
                            report.absorb(late);
                            took
                        }
                        None => false,
                    };
                    anyhow::Ok(progressed || took)
                };
                match round.await {
                    Ok(true) => {}
                    Ok(false) => break,
                    // A round failed (a full disk): the report so far is still
                    // printed, then the error, with its exit code.
                    Err(e) => {
                        round_failed = Some(e);
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
        // A wake that did not run to its end (a full disk, a lost claim) stays
        // pending: say so in the exit code too. A session another process holds is
        // not such a failure.
        if report.wakes.failed > 0 {
            say!(
                "steward: {} woken session{} did not finish (see above)",
                report.wakes.failed,
                if report.wakes.failed == 1 { "" } else { "s" },
            );
        }
        if let Some(e) = round_failed {
            return Err(e);
        }
        if report.wakes.failed > 0 {
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
