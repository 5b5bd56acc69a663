//! `steward wake EXECUTION_ID`: the inspector's "continue" on a pending, parked or
//! quarantined recovery wake (the session then runs until idle), or "retry" on a
//! quarantined claim (recovery looks at it again).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use steward_engine::coordinator::SessionOutcome;
use steward_engine::inspector;
use steward_engine::runner::Outcome;
use steward_engine::store::Store;
use steward_engine::store::sessions::Scope;
use steward_engine::tools::Headless;

use crate::commands::recover::describe;
use crate::context::{Context, runtime};

pub fn run(ctx: &Context, store: Store, execution_id: String) -> Result<ExitCode> {
    runtime()?.block_on(async move {
        let engine = ctx
            .start_engine(store, Arc::new(Headless { allow_all: false }))
            .await?;
        let result = act(ctx, &engine, &execution_id).await;
        engine.shutdown().await?;
        result
    })
}

async fn act(
    ctx: &Context,
    engine: &steward_engine::Engine,
    execution_id: &str,
) -> Result<ExitCode> {
    engine.recover().await?;
    let now = ctx.clock.now_ms();
    let id = execution_id.to_string();
    let target = engine
        .db()
        .write(move |tx| inspector::find(tx, &id))
        .await?;
    let session = match target {
        inspector::Target::Recovery { .. } => {
            let id = execution_id.to_string();
            let (session, input_id) = engine
                .db()
                .write(move |tx| inspector::rearm_wake(tx, &id, now))
                .await?;
            engine.wake(&session, Scope::continuation(input_id));
            session
        }
        inspector::Target::QuarantinedClaim(_) => {
            let id = execution_id.to_string();
            let session = engine
                .db()
                .write(move |tx| inspector::retry_claim(tx, &id, now))
                .await?;
            let report = engine.recover().await?;
            if let Some(q) = report
                .quarantined
                .iter()
                .find(|q| q.execution_id == execution_id)
            {
                eprintln!("steward: {execution_id} is quarantined again: {}", q.reason);
                return Ok(ExitCode::FAILURE);
            }
            engine.redrive_wakes().await?;
            session
        }
    };
    eprintln!("continuing {session}…");
    let outcome = engine.wait_idle(&session).await;
    eprintln!("{session}: {}", describe(outcome.as_ref()));
    Ok(match outcome {
        Some(SessionOutcome::Ran(Outcome::Idle)) | None => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}
