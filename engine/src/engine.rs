//! The engine facade: one owner (registered and locked for the process's life), the
//! coordinator, and the operations front ends call — create a session, admit an
//! input, wake, cancel, wait.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

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
        Ok(Engine {
            services,
            owner,
            coordinator,
        })
    }

    pub fn owner_id(&self) -> &str {
        &self.owner.id
    }

    pub fn services(&self) -> &Services {
        &self.services
    }

    pub fn db(&self) -> &Db {
        &self.services.db
    }

    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    pub fn config(&self) -> &Config {
        &self.services.config
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
        let _ = self.services.events.send(EngineEvent::Committed(record));
        crate::failpoint!("input.after_admit");
        if delivery == Delivery::Queue {
            self.wake(session_id, Scope::Queued);
        }
        Ok(input)
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
        let _ = self.services.events.send(EngineEvent::Committed(record));
        crate::failpoint!("input.after_admit");
        self.wake(session_id, Scope::Queued);
        Ok(input)
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
