//! `steward wake EXECUTION_ID`: the inspector's "continue" on a pending, parked or
//! quarantined recovery wake (the session then runs until idle), or "retry" on a
//! quarantined claim (recovery looks at it again and, if it reconciles it now, its
//! continuation runs). Only that session runs: other sessions' wakes stay pending.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use steward_engine::coordinator::SessionOutcome;
use steward_engine::engine::Redriving;
use steward_engine::runner::Outcome;
use steward_engine::store::Store;
use steward_engine::tools::Headless;

use crate::commands::recover::describe;
use crate::context::{Context, runtime};
use crate::output::say;

pub fn run(ctx: &Context, store: Store, execution_id: String) -> Result<ExitCode> {
    runtime()?.block_on(async move {
        ctx.with_engine(
            store,
            Arc::new(Headless { allow_all: false }),
            async |engine| act(engine, &execution_id).await,
        )
        .await
    })
}

async fn act(engine: &steward_engine::Engine, execution_id: &str) -> Result<ExitCode> {
    engine.recover().await?;
    engine.start_background(Redriving::Nothing);
    let continued = engine.continue_execution(execution_id).await?;
    let session = continued.session_id;
    say!("continuing {session}…");
    let outcome = engine.wait_idle(&session).await;
    say!("{session}: {}", describe(outcome.as_ref()));
    Ok(match outcome {
        Some(SessionOutcome::Ran(Outcome::Idle)) | None => ExitCode::SUCCESS,
        Some(SessionOutcome::Busy { .. }) => ExitCode::from(crate::exit::BUSY),
        _ => ExitCode::FAILURE,
    })
}
