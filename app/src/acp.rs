//! `steward acp`: an Agent Client Protocol (v1) agent on stdin/stdout for editors
//! and desktop shells. Recovery runs at start and in the background; the due wakes
//! of the sessions the client opened run as they come due (a session it has not
//! opened keeps its wake for whoever opens it, and is never run behind its back).
//! Requests are handled concurrently, so `session/cancel` is served while a prompt
//! runs. Stdout carries protocol messages only; logs go to the log file. On stdin
//! EOF it shuts down: running turns stop, and are reconciled so that no claim is
//! left behind.

mod agent;
mod transport;
mod updates;
mod views;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use steward_engine::engine::Redriving;
use steward_engine::store::Store;
use tokio::sync::mpsc;

use crate::context::{Context, runtime};
use agent::{Agent, ClientPermission};
use transport::{Incoming, Outbox};
use views::Views;

/// Requests handled at once; one past this is answered with an error at once.
const REQUESTS_IN_FLIGHT: usize = 64;

pub fn run(ctx: &Context, store: Store) -> Result<ExitCode> {
    runtime()?.block_on(async move {
        let (out, outgoing) = mpsc::unbounded_channel();
        let backlog = Arc::new(transport::Backlog::default());
        let writer = tokio::spawn(transport::write_messages(
            tokio::io::stdout(),
            outgoing,
            backlog.clone(),
        ));
        let outbox = Outbox::new(out, backlog);
        let (views, forwarding) = Views::new(outbox.clone());
        let permission = ClientPermission {
            outbox: outbox.clone(),
            views: views.clone(),
        };
        let served = ctx
            .with_engine(store, Arc::new(permission), async |engine| {
                serve(ctx, engine, &outbox, views, forwarding).await
            })
            .await;
        outbox.close_pending();
        drop(outbox);
        let _ = writer.await;
        served
    })
}

/// Serves the client until stdin closes. The engine is shut down by the caller
/// however this ends.
async fn serve(
    ctx: &Context,
    engine: &Arc<steward_engine::Engine>,
    outbox: &Outbox,
    views: Arc<Views>,
    forwarding: views::Forwarding,
) -> Result<ExitCode> {
    let forwarder = tokio::spawn(views::forward(
        views.clone(),
        engine.clone(),
        engine.subscribe(),
        forwarding,
    ));
    // A recovery that cannot finish (a full disk, say) keeps nothing from the
    // client: it is logged, and the background retries until it can.
    match engine.recover().await {
        Ok(report) if !report.recovered.is_empty() => {
            tracing::info!(recovered = report.recovered.len(), "reconciled at start");
        }
        Ok(_) => {}
        Err(error) => tracing::error!(%error, "the recovery at start did not finish"),
    }
    let opened = views.clone();
    engine.start_background(Redriving::Sessions(Arc::new(move |session: &str| {
        opened.is_open(session)
    })));
    let (shut_down, shut_down_seen) = tokio::sync::watch::channel(false);
    let agent = Arc::new(Agent {
        engine: engine.clone(),
        outbox: outbox.clone(),
        views,
        shut_down: shut_down_seen,
        database: ctx.paths.database.clone(),
        owners: ctx.paths.owners.clone(),
        reader: Arc::default(),
        fs: Default::default(),
    });
    let (incoming, mut messages) = mpsc::channel(transport::INCOMING);
    let reader = tokio::spawn(transport::read_messages(
        tokio::io::BufReader::new(tokio::io::stdin()),
        incoming,
    ));
    let mut requests = tokio::task::JoinSet::new();
    // Requests run concurrently (a cancel is served while a prompt runs), up to a
    // bound: one past it is answered at once, never queued without end.
    let in_flight = Arc::new(tokio::sync::Semaphore::new(REQUESTS_IN_FLIGHT));
    while let Some(message) = messages.recv().await {
        // Finished requests are reaped as they go, not kept until the end.
        while requests.try_join_next().is_some() {}
        match message {
            Incoming::Request { id, method, params } => {
                let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                    agent::answer(
                        outbox,
                        id,
                        Err((
                            transport::INTERNAL_ERROR,
                            format!(
                                "{REQUESTS_IN_FLIGHT} requests are already in progress: send this one again once one is answered"
                            ),
                        )),
                    );
                    continue;
                };
                match agent.accept(&method, params) {
                    Ok(accepted) => {
                        let agent = agent.clone();
                        requests.spawn(async move {
                            let (result, then) = agent.handle(accepted).await;
                            agent::answer(&agent.outbox, id, result);
                            drop(permit);
                            agent.follow_up(then).await;
                        });
                    }
                    Err(failure) => agent::answer(outbox, id, Err(failure)),
                }
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
    // The client is gone: running turns stop without writing (a question it will
    // never answer is dropped with them, not denied) and are reconciled; then the
    // requests waiting on them finish.
    // However the shutdown ends (a full disk may keep it from reconciling), the
    // requests and the forwarder are wound up, so the process exits.
    let stopped = agent.engine.shutdown().await;
    let _ = shut_down.send(true);
    match &stopped {
        Ok(stopped) if !stopped.is_empty() => {
            tracing::info!(sessions = ?stopped, "stdin closed while turns ran: reconciled for the next launch");
        }
        Ok(_) => {}
        Err(error) => tracing::error!(%error, "shutting down failed"),
    }
    outbox.close_pending();
    while requests.join_next().await.is_some() {}
    forwarder.abort();
    stopped?;
    Ok(ExitCode::SUCCESS)
}
