//! The engine facade: one owner (registered and locked for the process's life), the
//! coordinator, recovery, and the operations front ends call — create a session,
//! admit an input, wake, cancel, wait, recover, redrive wakes.

mod background;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use crate::claim::ClaimRow;
use crate::coordinator::ExpiredClaims;
use crate::recovery::{self, RecoveryReport, WakeReport};
use crate::tools::BoxFuture;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::coordinator::{Coordinator, SessionOutcome, Wake};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::events::Delivery;
use crate::owner::{self, Owner};
use crate::projection::{InputRow, SessionRow};
use crate::provider::Provider;
use crate::runner::{EngineEvent, RunnerStats, Services};
use crate::store::sessions::{self, Scope};
use crate::tools::{Permission, ToolRegistry};

/// What [`Engine::redrive_wakes`] started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redrive {
    pub report: WakeReport,
    /// Sessions woken, in order.
    pub sessions: Vec<String>,
}

/// Everything an engine is made of.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub db: Db,
    /// `<data dir>/owners`: where this instance's lock file lives.
    pub owners_dir: PathBuf,
    pub clock: SharedClock,
    pub config: Config,
    pub provider: Arc<dyn Provider>,
    pub tools: ToolRegistry,
    pub permission: Arc<dyn Permission>,
}

/// One running engine instance (one owner).
#[derive(Debug)]
pub struct Engine {
    services: Services,
    owner: Owner,
    coordinator: Coordinator,
    recoverer: Arc<Recoverer>,
    background: Mutex<Option<background::Background>>,
}

/// Runs recovery passes for one owner, one at a time in this process.
#[derive(Debug)]
pub struct Recoverer {
    services: Services,
    params: recovery::Params,
    running: tokio::sync::Mutex<()>,
}

impl Recoverer {
    /// One pass: probe owners, then batches until a short one (SPEC §5.2). Each batch
    /// is its own job on the writer, so heartbeats and commits interleave.
    pub async fn pass(&self) -> Result<RecoveryReport> {
        let _one_at_a_time = self.running.lock().await;
        let now = self.services.clock.now_ms();
        let db = &self.services.db;
        let params = self.params.clone();
        let mut pass = db
            .with_conn(move |conn| recovery::Pass::begin(conn, params, now))
            .await?;
        while !pass.is_done() {
            pass = db
                .with_conn(move |conn| {
                    pass.next_batch(conn)?;
                    Ok(pass)
                })
                .await?;
        }
        let report = db.with_conn(move |conn| pass.finish(conn)).await?;
        if report.scanned > 0 {
            tracing::info!(
                recovered = report.recovered.len(),
                quarantined = report.quarantined.len(),
                superseded = report.superseded,
                safe = report.discarded_safe,
                ms = report.duration_ms,
                "recovery pass"
            );
        }
        Ok(report)
    }
}

impl ExpiredClaims for Recoverer {
    fn recover(self: Arc<Self>, _claim: ClaimRow) -> BoxFuture<()> {
        // The pass finds the claim itself (it is expired); a failure leaves it for
        // the next pass.
        Box::pin(async move {
            if let Err(e) = self.pass().await {
                tracing::error!(error = %e, "recovery pass failed");
            }
        })
    }
}

impl Engine {
    /// Registers this instance as an owner and readies the coordinator.
    pub async fn start(options: EngineOptions) -> Result<Engine> {
        let (events, _) = broadcast::channel(1024);
        let services = Services {
            db: options.db,
            clock: options.clock,
            config: Arc::new(options.config),
            provider: options.provider,
            tools: options.tools,
            permission: options.permission,
            events,
            stats: Arc::new(Mutex::new(RunnerStats::default())),
        };
        let now = services.clock.now_ms();
        let owners_dir = options.owners_dir;
        let owner = services
            .db
            .write(move |tx| Owner::register(tx, &owners_dir, now))
            .await?;
        tracing::info!(owner = %owner.id, pid = owner.pid, "owner registered");
        let coordinator = Coordinator::new(
            services.clone(),
            owner.id.clone(),
            services.config.lease.clone(),
        );
        let recoverer = Arc::new(Recoverer {
            services: services.clone(),
            params: recovery::Params {
                owner_id: owner.id.clone(),
                lease_ms: i64::try_from(services.config.lease.lease_ms).unwrap_or(i64::MAX),
                slack_ms: recovery::CLOCK_SLACK_MS,
            },
            running: tokio::sync::Mutex::new(()),
        });
        coordinator.set_expired_handler(recoverer.clone());
        Ok(Engine {
            services,
            owner,
            coordinator,
            recoverer,
            background: Mutex::new(None),
        })
    }

    /// One recovery pass now (SPEC §5.1).
    pub async fn recover(&self) -> Result<RecoveryReport> {
        self.recoverer.pass().await
    }

    /// Starts the durable wakes that are due (SPEC §5.7): recovery wakes — each
    /// promoting only its continuation — and inputs admitted with a wake that no
    /// execution promoted. Returns what was started.
    pub async fn redrive_wakes(&self) -> Result<Redrive> {
        let (candidates, quarantined) =
            self.services.db.with_conn(recovery::recovery_wakes).await?;
        let mut sessions: Vec<String> = Vec::new();
        for candidate in &candidates {
            self.wake(
                &candidate.session_id,
                Scope::continuation(candidate.input_id.clone()),
            );
            if !sessions.contains(&candidate.session_id) {
                sessions.push(candidate.session_id.clone());
            }
        }
        let waiting = self
            .services
            .db
            .read(sessions::with_pending_input_wakes)
            .await?;
        for session_id in waiting {
            if !sessions.contains(&session_id) && !self.coordinator.is_running(&session_id) {
                self.wake(&session_id, Scope::Queued);
                sessions.push(session_id);
            }
        }
        Ok(Redrive {
            report: WakeReport {
                redriven: candidates.len(),
                failed: 0,
                quarantined,
            },
            sessions,
        })
    }

    /// For long-lived front ends (TUI, ACP): recovers whenever another owner's claim
    /// expires or an owner is proven dead, and picks up wakes other processes left —
    /// on a timer, on the data-directory doorbell, and on a slow poll.
    pub fn start_background(&self) {
        let mut slot = self.background.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(background::Background::spawn(self));
        }
    }

    pub fn owner_id(&self) -> &str {
        &self.owner.id
    }

    pub fn db(&self) -> &Db {
        &self.services.db
    }

    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    /// Listens to committed events and finished executions.
    pub fn subscribe(&self) -> broadcast::Receiver<EngineEvent> {
        self.services.events.subscribe()
    }

    /// Creates a session working in `directory`.
    pub async fn create_session(&self, title: &str, directory: &str) -> Result<SessionRow> {
        let (title, directory) = (title.to_string(), directory.to_string());
        let now = self.services.clock.now_ms();
        self.services
            .db
            .write(move |tx| sessions::create(tx, &title, &directory, now))
            .await
    }

    /// Admits `prompt`; `queue` wakes the session.
    pub async fn admit(
        &self,
        session_id: &str,
        prompt: &str,
        delivery: Delivery,
    ) -> Result<InputRow> {
        let (session, text) = (session_id.to_string(), prompt.to_string());
        let now = self.services.clock.now_ms();
        let (input, record) = self
            .services
            .db
            .write(move |tx| sessions::admit(tx, &session, &text, delivery, now))
            .await?;
        Ok(self.admitted(session_id, delivery, input, record))
    }

    /// After an admission commits: tell listeners, and wake the session if asked to.
    fn admitted(
        &self,
        session_id: &str,
        delivery: Delivery,
        input: InputRow,
        record: crate::events::EventRecord,
    ) -> InputRow {
        let _ = self.services.events.send(EngineEvent::Committed(record));
        crate::failpoint!("input.after_admit");
        if delivery == Delivery::Queue {
            self.wake(session_id, Scope::Queued);
        }
        input
    }

    /// Admits `prompt` with `queue` delivery unless another live owner holds the
    /// session: then nothing is admitted and the error names the owner.
    pub async fn admit_unless_busy(&self, session_id: &str, prompt: &str) -> Result<InputRow> {
        let (session, text, me) = (
            session_id.to_string(),
            prompt.to_string(),
            self.owner.id.clone(),
        );
        let now = self.services.clock.now_ms();
        let (input, record) = self
            .services
            .db
            .write(move |tx| {
                if let Some(claim) = sessions::held_by_other(tx, &session, &me, now)? {
                    let owner = owner::get(tx, &claim.owner_id)?;
                    return Err(Error::SessionBusy {
                        session_id: session.clone(),
                        owner_detail: owner
                            .map(|o| format!(" (pid {} on {})", o.pid, o.hostname))
                            .unwrap_or_default(),
                        owner_id: claim.owner_id,
                    });
                }
                sessions::admit(tx, &session, &text, Delivery::Queue, now)
            })
            .await?;
        Ok(self.admitted(session_id, Delivery::Queue, input, record))
    }

    pub fn wake(&self, session_id: &str, scope: Scope) -> Wake {
        self.coordinator.wake(session_id, scope)
    }

    /// Cancels the session's running execution; false when none runs here.
    pub fn cancel(&self, session_id: &str) -> bool {
        self.coordinator.cancel(session_id)
    }

    pub async fn wait_idle(&self, session_id: &str) -> Option<SessionOutcome> {
        self.coordinator.wait_idle(session_id).await
    }

    /// Counters of the runner (text deltas and their commits).
    pub fn runner_stats(&self) -> RunnerStats {
        self.services
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Cancels everything running here, waits for it, and unregisters the owner.
    pub async fn shutdown(self) -> Result<()> {
        let background = self
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(background) = background {
            background.stop().await;
        }
        for session in self.coordinator.running() {
            self.coordinator.cancel(&session);
        }
        self.coordinator.wait_all_idle().await;
        let owner = self.owner;
        self.services
            .db
            .with_conn(move |conn| owner.release(conn))
            .await
    }
}

#[cfg(test)]
mod tests;
