//! The background loop of a long-lived engine: a recovery pass whenever the earliest
//! claim of another owner expires (a timer computed from the table, not a poll), at
//! each heartbeat interval while other owners hold claims (the owner-death probe), and
//! whenever the data-directory doorbell rings; then the due wakes are started. A slow
//! poll covers a missed doorbell.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::coordinator::Coordinator;
use crate::db::Db;
use crate::engine::{Engine, Recoverer};
use crate::recovery;
use crate::store::sessions::{self, Scope};

/// The slow fallback poll.
const POLL: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(super) struct Background {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Background {
    pub(super) fn spawn(engine: &Engine) -> Background {
        let stop = CancellationToken::new();
        let bell = Arc::new(Notify::new());
        let watcher = engine
            .services
            .db
            .path()
            .and_then(|p| p.parent())
            .and_then(|dir| crate::doorbell::watch(dir, bell.clone()));
        let state = Loop {
            db: engine.services.db.clone(),
            clock: engine.services.clock.clone(),
            me: engine.owner.id.clone(),
            probe_every: engine.services.config.lease.heartbeat(),
            auto_continue: engine.services.config.recovery.auto_continue,
            recoverer: engine.recoverer.clone(),
            coordinator: engine.coordinator.clone(),
            bell,
        };
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            let _watcher = watcher;
            state.run(stop2).await;
        });
        Background { stop, task }
    }

    pub(super) async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

struct Loop {
    db: Db,
    clock: crate::clock::SharedClock,
    me: String,
    probe_every: Duration,
    auto_continue: bool,
    recoverer: Arc<Recoverer>,
    coordinator: Coordinator,
    bell: Arc<Notify>,
}

impl Loop {
    async fn run(self, stop: CancellationToken) {
        loop {
            if let Err(e) = self.tick().await {
                tracing::error!(error = %e, "background recovery failed");
            }
            let wait = self.next_wait().await;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.bell.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Until the earliest claim recovery may take expires — another owner's, or one of
    /// this owner's whose execution is no longer running here — or the next
    /// owner-death probe while such claims exist, or the fallback poll.
    async fn next_wait(&self) -> Duration {
        let claims = self
            .db
            .read(recovery::claim_expiries)
            .await
            .unwrap_or_default();
        let earliest = claims
            .into_iter()
            .filter(|(session, owner, _)| {
                *owner != self.me || !self.coordinator.is_running(session)
            })
            .map(|(_, _, expires_at)| expires_at)
            .min();
        match earliest {
            Some(at) => {
                let until = u64::try_from(at - self.clock.now_ms()).unwrap_or(0);
                Duration::from_millis(until).min(self.probe_every)
            }
            None => POLL,
        }
    }

    async fn tick(&self) -> crate::Result<()> {
        self.recoverer.pass().await?;
        if self.auto_continue {
            let (candidates, _) = self.db.with_conn(recovery::recovery_wakes).await?;
            for c in candidates {
                self.coordinator
                    .wake(&c.session_id, Scope::continuation(c.input_id));
            }
        }
        for session_id in self.db.read(sessions::with_pending_input_wakes).await? {
            if !self.coordinator.is_running(&session_id) {
                self.coordinator.wake(&session_id, Scope::Queued);
            }
        }
        Ok(())
    }
}
