//! `steward acp`: an Agent Client Protocol (v1) agent on stdin/stdout for editors
//! and desktop shells. Recovery runs at start, then every due wake runs in the
//! background, as in the terminal interface. Requests are handled concurrently, so
//! `session/cancel` is served while a prompt runs. Stdout carries protocol messages
//! only; logs go to the log file. On stdin EOF it shuts down: running turns stop,
//! and are reconciled so that no claim is left behind.

mod agent;
mod transport;
mod updates;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use steward_engine::engine::Redriving;
use steward_engine::store::Store;
use tokio::sync::mpsc;

use crate::context::{Context, runtime};
use agent::{Agent, ClientPermission};
use transport::{Incoming, Outbox};

pub fn run(ctx: &Context, store: Store) -> Result<ExitCode> {
    runtime()?.block_on(async move {
        let (out, outgoing) = mpsc::unbounded_channel();
        let writer = tokio::spawn(transport::write_messages(tokio::io::stdout(), outgoing));
        let outbox = Outbox::new(out);
        let engine = ctx
            .start_engine(store, Arc::new(ClientPermission::new(outbox.clone())))
            .await?;
        let report = engine.recover().await?;
        if !report.recovered.is_empty() {
            tracing::info!(recovered = report.recovered.len(), "reconciled at start");
        }
        engine.redrive_wakes().await?;
        engine.start_background(Redriving::DueWakes);
        let agent = Arc::new(Agent {
            engine,
            outbox: outbox.clone(),
            database: ctx.paths.database.clone(),
            owners: ctx.paths.owners.clone(),
        });
        let (incoming, mut messages) = mpsc::unbounded_channel();
        let reader = tokio::spawn(transport::read_messages(
            tokio::io::BufReader::new(tokio::io::stdin()),
            incoming,
        ));
        let mut requests = tokio::task::JoinSet::new();
        while let Some(message) = messages.recv().await {
            match message {
                Incoming::Request { id, method, params } => {
                    let agent = agent.clone();
                    requests.spawn(async move {
                        let result = agent.handle(&method, params).await;
                        agent::answer(&agent.outbox, id, result);
                    });
                }
                Incoming::Notification { method, params } => agent.notify(&method, params),
                Incoming::Response { id, outcome } => {
                    if !outbox.answer(&id, outcome) {
                        agent::stray(&id);
                    }
                }
                Incoming::Invalid { reply } => outbox.send(reply),
            }
        }
        if let Ok(Err(e)) = reader.await {
            tracing::warn!(error = %e, "reading stdin failed");
        }
        // The client is gone: questions it will never answer deny, running turns
        // stop and are reconciled, and the requests waiting on them finish.
        outbox.close_pending();
        let stopped = agent.engine.shutdown().await?;
        if !stopped.is_empty() {
            tracing::info!(sessions = ?stopped, "stdin closed while turns ran: reconciled for the next launch");
        }
        while requests.join_next().await.is_some() {}
        drop(agent);
        drop(outbox);
        let _ = writer.await;
        Ok(ExitCode::SUCCESS)
    })
}
