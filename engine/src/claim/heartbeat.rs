//! The heartbeat actor (protocol §4.2): every `heartbeat` interval it reads the clock
//! anew — inside its write transaction, once the lock is held, never before — and
//! renews the claim. One row: still the owner, and the self-fence moves on.
//! Zero rows: ownership is lost, and the execution is cancelled at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::claim::{Claim, SelfFence, renew};
use crate::clock::SharedClock;
use crate::db::Db;
use crate::error::Error;

/// A running heartbeat. [`Heartbeat::stop`] stops it and waits; dropping the handle
/// (say, while unwinding from a panic) stops it too, so a claim whose execution is
/// gone is never kept alive.
#[derive(Debug)]
pub struct Heartbeat {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What a heartbeat needs.
#[derive(Debug, Clone)]
pub struct HeartbeatParams {
    pub db: Db,
    pub claim: Claim,
    pub clock: SharedClock,
    pub lease: Duration,
    pub interval: Duration,
    pub self_fence: Arc<SelfFence>,
    /// Cancelled when ownership is lost.
    pub lost: CancellationToken,
}

impl Heartbeat {
    pub fn spawn(p: HeartbeatParams) -> Heartbeat {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(p, stop.clone()));
        Heartbeat {
            stop,
            task: Some(task),
        }
    }

    /// Stops renewing and waits for an in-flight renewal to finish.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

async fn run(p: HeartbeatParams, stop: CancellationToken) {
    let lease_ms = i64::try_from(p.lease.as_millis()).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = p.lost.cancelled() => return,
            _ = tokio::time::sleep(p.interval) => {}
        }
        let (claim, clock) = (p.claim.clone(), p.clock.clone());
        // The clock is read once the write lock is held, right before the statement:
        // a renewal that waited — behind this process's writer, or for another
        // process's lock — must be judged by the time it runs, or it could revive a
        // claim that expired while it waited (invariant 6).
        let result =
            p.db.write(move |tx| {
                let at = clock.monotonic();
                renew(tx, &claim, clock.now_ms(), lease_ms).map(|()| at)
            })
            .await;
        match result {
            Ok(at) => p.self_fence.renewed(at),
            Err(Error::FenceLost { .. }) => {
                tracing::warn!(execution = %p.claim.execution_id, "claim lost: stopping the execution");
                p.lost.cancel();
                return;
            }
            Err(e) => {
                // Busy or transient: the next tick tries again; the self-fence stops
                // dispatch if renewals keep failing.
                tracing::warn!(execution = %p.claim.execution_id, error = %e, "heartbeat failed");
            }
        }
    }
}
