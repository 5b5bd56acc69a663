//! The engine facade: one owner (registered and locked for the process's life), the
//! coordinator, recovery, and the operations front ends call — create a session,
//! submit a prompt, wake, cancel, wait, recover, redrive wakes, act on what recovery
//! left for the user, shut down.
//!
//! Which wakes an entry point starts is its own choice, but no entry point consumes a
//! wake and then abandons it: [`Engine::shutdown`] stops what still runs without
//! writing and hands it to recovery, so its wake stays pending for the next launch.

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
use crate::inspector;
use crate::message::PromptBlock;
use crate::owner::{Owner, Owners};
use crate::projection::{InputRow, SessionRow};
use crate::provider::Provider;
use crate::runner::{EngineEvent, RunnerStats, Services};
use crate::store::sessions::{self, Scope};
use crate::tools::{Permission, ToolRegistry};

pub use background::{Redriving, SessionFilter};

/// Refuses a prompt of whitespace alone, before anything is admitted: there is
/// nothing to ask (and the Messages API would refuse it, protocol §4.18). What
/// [`Engine::submit`], [`Engine::submit_new`] and [`Engine::admit`] check first;
/// a front end may check earlier with it.
pub fn check_prompt(prompt: &str) -> Result<()> {
    if prompt.trim().is_empty() {
        return Err(Error::Invalid("the prompt is empty".into()));
    }
    Ok(())
}

/// What [`Engine::redrive_wakes`] started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redrive {
    pub report: WakeReport,
    /// Sessions woken, in order. Those left waiting for a provider and model this
    /// process does not have are in the report (`waiting_sessions`, protocol
    /// §4.17).
    pub sessions: Vec<String>,
}

/// What [`Engine::continue_execution`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continued {
    pub session_id: String,
    /// Whether an execution of the session was started (or rung).
    pub started: bool,
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
    /// Set by the first [`Engine::shutdown`]; later calls do nothing.
    shut_down: std::sync::atomic::AtomicBool,
}

/// Runs recovery passes for one owner, one at a time in this process.
#[derive(Debug)]
pub struct Recoverer {
    services: Services,
    params: recovery::Params,
    running: tokio::sync::Mutex<()>,
}

impl Recoverer {
    /// One pass: probe owners, then batches until a short one (protocol §5.2). Each batch
    /// is its own job on the writer, so heartbeats and commits interleave, and each
    /// reads the clock inside its job.
    pub async fn pass(&self) -> Result<RecoveryReport> {
        let _one_at_a_time = self.running.lock().await;
        let db = &self.services.db;
        let (params, clock) = (self.params.clone(), self.services.clock.clone());
        let mut pass = db
            .with_conn(move |conn| recovery::Pass::begin(conn, params, &|| clock.now_ms()))
            .await?;
        while !pass.is_done() {
            let clock = self.services.clock.clone();
            pass = db
                .with_conn(move |conn| {
                    pass.next_batch(conn, &|| clock.now_ms())?;
                    Ok(pass)
                })
                .await?;
            // Committed: listeners (a client showing the session) hear of it.
            for record in pass.take_committed() {
                let _ = self.services.events.send(EngineEvent::Committed(record));
            }
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

    fn recover_if_dead(self: Arc<Self>, owner_id: String) -> BoxFuture<bool> {
        Box::pin(async move {
            let owners = self.params.owners.clone();
            let dead = self
                .services
                .db
                .read(move |conn| {
                    Ok(crate::owner::liveness(conn, &owners, &owner_id)?
                        == crate::owner::Liveness::Dead)
                })
                .await;
            match dead {
                Ok(true) => match self.pass().await {
                    Ok(_) => true,
                    Err(e) => {
                        tracing::error!(error = %e, "recovery pass failed");
                        false
                    }
                },
                Ok(false) => false,
                Err(e) => {
                    tracing::error!(error = %e, "probing a claim's owner failed");
                    false
                }
            }
        })
    }
}

impl Engine {
    /// Registers this instance as an owner and readies the coordinator.
    pub async fn start(options: EngineOptions) -> Result<Engine> {
        let (events, _) = broadcast::channel(1024);
        let mut config = options.config;
        // Commands never see the provider's key.
        config.tools.hidden_env = config.provider.api_key_env.iter().cloned().collect();
        let mcp = crate::mcp::McpHub::new(
            config.mcp.servers.clone(),
            config.tools.hidden_env.clone(),
            std::time::Duration::from_millis(config.tools.kill_grace_ms),
            options.clock.clone(),
        );
        let services = Services {
            db: options.db,
            clock: options.clock,
            config: Arc::new(config),
            provider: options.provider,
            tools: options.tools,
            mcp,
            permission: options.permission,
            always: Arc::default(),
            client_files: Arc::default(),
            events,
            stats: Arc::new(Mutex::new(RunnerStats::default())),
        };
        let owners = Owners::new(options.owners_dir);
        // Locked first, so no probe sees the row unlocked; a row that cannot be
        // committed (a full disk) takes its lock file with it.
        let owner = Owner::lock(&owners, services.clock.now_ms())?;
        // Which file this owner runs on, so that a relaunch after it is killed can
        // tell that crash from a copied file (protocol §2.3). Without it the next
        // launch after a crash only checks the whole file, as it would a copy.
        if let Some(path) = services.db.path()
            && let Err(e) = owner.record_database(path)
        {
            tracing::warn!(error = %e, "could not record the database in the owner's lock file");
        }
        let row = owner.row(services.clock.now_ms());
        let inserted = services
            .db
            .write(move |tx| crate::owner::insert(tx, &row))
            .await;
        if let Err(e) = inserted {
            owner.abandon();
            return Err(e);
        }
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
                owners,
                lease_ms: i64::try_from(services.config.lease.lease_ms).unwrap_or(i64::MAX),
                slack_ms: recovery::CLOCK_SLACK_MS,
                killed: Default::default(),
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
            shut_down: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Gives `session` MCP servers of its own besides the configured ones (ACP's
    /// `mcpServers`): they start on its next step in this process.
    pub async fn give_mcp_servers(
        &self,
        session_id: &str,
        servers: std::collections::BTreeMap<String, crate::config::McpServerConfig>,
    ) {
        self.services.mcp.give(session_id, servers).await;
    }

    /// Lets `session_id`'s file tools read and write through `files` (an ACP
    /// client's editor buffers, protocol §4.19).
    pub fn set_client_files(&self, session_id: &str, files: Arc<dyn crate::tools::ClientFiles>) {
        self.services
            .client_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session_id.to_string(), files);
    }

    /// The MCP servers running in this process.
    pub fn mcp_servers(&self) -> Vec<crate::mcp::RunningServer> {
        self.services.mcp.running()
    }

    /// One recovery pass now (protocol §5.1).
    pub async fn recover(&self) -> Result<RecoveryReport> {
        self.recoverer.pass().await
    }

    /// Starts every durable wake that is due (protocol §5.7): recovery wakes — each
    /// promoting only its continuation, and only when `[recovery] auto_continue`
    /// allows (§5.9) — and prompts admitted with a wake that no execution promoted.
    /// The caller owns what this starts: it waits for those sessions, or keeps
    /// running until they are idle (or shuts down, which leaves them for recovery).
    pub async fn redrive_wakes(&self) -> Result<Redrive> {
        background::redrive(
            &self.services.db,
            &self.coordinator,
            self.services.config.recovery.auto_continue,
            None,
        )
        .await
    }

    /// [`Engine::redrive_wakes`] for the sessions not in `ran`: what `steward
    /// recover` calls in each round, leaving out the sessions whose wakes already
    /// ran in an earlier one.
    pub async fn redrive_wakes_except(
        &self,
        ran: &std::collections::BTreeSet<String>,
    ) -> Result<Redrive> {
        let ran = ran.clone();
        let only: SessionFilter = Arc::new(move |s: &str| !ran.contains(s));
        background::redrive(
            &self.services.db,
            &self.coordinator,
            self.services.config.recovery.auto_continue,
            Some(&only),
        )
        .await
    }

    /// [`Engine::redrive_wakes`] for one session: what a front end calls when its
    /// user opens a session that has a wake waiting.
    pub async fn redrive_wakes_of(&self, session_id: &str) -> Result<Redrive> {
        let session = session_id.to_string();
        let only: SessionFilter = Arc::new(move |s: &str| s == session);
        background::redrive(
            &self.services.db,
            &self.coordinator,
            self.services.config.recovery.auto_continue,
            Some(&only),
        )
        .await
    }

    /// A recovery pass now if it has anything to take: a claim it may take has
    /// expired, or another owner is provably dead (its lock is free). What a front
    /// end calls before showing a session, so a crash elsewhere is reconciled first.
    pub async fn recover_if_due(&self) -> Result<Option<RecoveryReport>> {
        if background::Due::of(self).now().await? {
            Ok(Some(self.recoverer.pass().await?))
        } else {
            Ok(None)
        }
    }

    /// Keeps recovery running on a timer while this engine lives (protocol §5.1): a pass
    /// whenever the earliest claim recovery may take expires, at each heartbeat
    /// interval while other owners hold claims (the owner-death probe), and when the
    /// data-directory doorbell rings. With [`Redriving::DueWakes`] it also starts the
    /// wakes that are due after each pass (the terminal interface), with
    /// [`Redriving::Sessions`] those of the sessions its filter accepts (ACP: what
    /// the client opened); with [`Redriving::Nothing`] it only reconciles, leaving
    /// every wake for an entry point that runs it (`run`, `wake`, `recover`).
    pub fn start_background(&self, redriving: Redriving) {
        let mut slot = self.background.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(background::Background::spawn(self, redriving));
        }
    }

    /// Stops what [`Engine::start_background`] started, after the pass in flight.
    pub async fn stop_background(&self) {
        let background = self
            .background
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(background) = background {
            background.stop().await;
        }
    }

    /// This engine's owner id (`own_…`).
    pub fn owner_id(&self) -> &str {
        &self.owner.id
    }

    /// The writer (one connection on its own thread).
    pub fn db(&self) -> &Db {
        &self.services.db
    }

    /// The configuration the engine runs with.
    pub fn config(&self) -> &Config {
        &self.services.config
    }

    /// The per-session single flight (internal machinery).
    #[doc(hidden)]
    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    /// Whether an execution of `session_id` runs here now.
    pub fn is_running(&self, session_id: &str) -> bool {
        self.coordinator.is_running(session_id)
    }

    /// The sessions with an execution running here now.
    pub fn running(&self) -> Vec<String> {
        self.coordinator.running()
    }

    /// Whether the session exists.
    pub async fn session_exists(&self, session_id: &str) -> Result<bool> {
        let id = session_id.to_string();
        self.services
            .db
            .read(move |conn| Ok(crate::store::rows::session(conn, &id)?.is_some()))
            .await
    }

    /// The directory `session_id` works in (`None` when there is no such session).
    pub async fn session_directory(&self, session_id: &str) -> Result<Option<String>> {
        let id = session_id.to_string();
        self.services
            .db
            .read(move |conn| Ok(crate::store::rows::session(conn, &id)?.map(|s| s.directory)))
            .await
    }

    /// A session's whole transcript, and the seq of its last event then (what a
    /// front end that replays it continues from).
    pub async fn transcript(
        &self,
        session_id: &str,
    ) -> Result<(Vec<crate::projection::MessageRow>, i64)> {
        let id = session_id.to_string();
        self.services
            .db
            .read(move |conn| {
                let through = crate::store::events::next_seq(conn, &id)? - 1;
                Ok((crate::store::rows::messages(conn, &id)?, through))
            })
            .await
    }

    /// A session's messages written after its event `seq` (a turn's own, read at
    /// its end).
    pub async fn messages_after(
        &self,
        session_id: &str,
        seq: i64,
    ) -> Result<Vec<crate::projection::MessageRow>> {
        let id = session_id.to_string();
        self.services
            .db
            .read(move |conn| crate::store::rows::messages_from(conn, &id, seq + 1))
            .await
    }

    /// Whether an admitted input has been taken up and its session's turn is over:
    /// it was promoted, and no process holds the session any more. What a front end
    /// waits on when another process runs the prompt it admitted.
    pub async fn input_done(&self, session_id: &str, input_id: &str) -> Result<bool> {
        let (session, input) = (session_id.to_string(), input_id.to_string());
        self.services
            .db
            .read(move |conn| {
                let promoted =
                    crate::store::rows::input(conn, &input)?.is_some_and(|i| !i.is_pending());
                let held = crate::claim::for_session(conn, &session)?
                    .is_some_and(|c| c.recovery_error.is_none());
                Ok(promoted && !held)
            })
            .await
    }

    /// The seq of a session's last event (-1 for none).
    pub async fn last_seq(&self, session_id: &str) -> Result<i64> {
        let id = session_id.to_string();
        self.services
            .db
            .read(move |conn| Ok(crate::store::events::next_seq(conn, &id)? - 1))
            .await
    }

    /// A session's events after `seq`, in order: what another process committed,
    /// for a front end that follows the session.
    pub async fn events_after(
        &self,
        session_id: &str,
        seq: i64,
    ) -> Result<Vec<crate::events::EventRecord>> {
        let id = session_id.to_string();
        self.services
            .db
            .read(move |conn| crate::store::events::load_after(conn, &id, seq))
            .await
    }

    /// One message.
    pub async fn message(&self, message_id: &str) -> Result<Option<crate::projection::MessageRow>> {
        let id = message_id.to_string();
        self.services
            .db
            .read(move |conn| crate::store::rows::message(conn, &id))
            .await
    }

    /// The data directory's database file, when it is one (what a front end
    /// watches for other processes' writes).
    pub fn database(&self) -> Option<&std::path::Path> {
        self.services.db.path()
    }

    /// Listens to committed events and finished executions.
    pub fn subscribe(&self) -> broadcast::Receiver<EngineEvent> {
        self.services.events.subscribe()
    }

    /// The provider and model this process runs sessions on (`provider/model`).
    pub fn model(&self) -> String {
        format!(
            "{}/{}",
            self.services.provider.name(),
            self.services.provider.model()
        )
    }

    /// The provider and model `session_id` runs on (protocol §4.17), as
    /// `provider/model`; `None` before its first step.
    pub async fn session_model(&self, session_id: &str) -> Result<Option<String>> {
        let id = session_id.to_string();
        let model = self
            .services
            .db
            .read(move |conn| sessions::model_of(conn, &id))
            .await?;
        Ok(model.map(|(p, m)| format!("{p}/{m}")))
    }

    /// The user chose this process's provider and model for `session_id`: from its
    /// next step on it runs on them (`model.chosen`, a note in its transcript).
    /// Returns whether anything changed.
    pub async fn choose_model(&self, session_id: &str) -> Result<bool> {
        let (id, clock) = (session_id.to_string(), self.services.clock.clone());
        let (provider, model) = (
            self.services.provider.name().to_string(),
            self.services.provider.model().to_string(),
        );
        let record = self
            .services
            .db
            .write(move |tx| sessions::choose_model(tx, &id, &provider, &model, clock.now_ms()))
            .await?;
        let changed = record.is_some();
        if let Some(record) = record {
            let _ = self.services.events.send(EngineEvent::Committed(record));
        }
        Ok(changed)
    }

    /// Creates a session working in `directory`.
    pub async fn create_session(&self, title: &str, directory: &str) -> Result<SessionRow> {
        let (title, directory) = (title.to_string(), directory.to_string());
        let clock = self.services.clock.clone();
        let session = self
            .services
            .db
            .write(move |tx| sessions::create(tx, &title, &directory, clock.now_ms()))
            .await?;
        Ok(session)
    }

    /// Admits `prompt`; `queue` wakes the session (here, whoever holds it). A
    /// prompt of whitespace alone is refused ([`check_prompt`]).
    pub async fn admit(
        &self,
        session_id: &str,
        prompt: &str,
        delivery: Delivery,
    ) -> Result<InputRow> {
        self.admit_content(session_id, prompt, &[], delivery).await
    }

    /// [`Engine::admit`] of a prompt that carries resources: `prompt` is its text,
    /// `content` its blocks, kept as they are but for an embedded resource's hidden
    /// values and size ([`PromptBlock::kept`], protocol §4.20).
    pub async fn admit_content(
        &self,
        session_id: &str,
        prompt: &str,
        content: &[crate::message::PromptBlock],
        delivery: Delivery,
    ) -> Result<InputRow> {
        check_prompt(prompt)?;
        let blocks = PromptBlock::kept(content, &self.services.config.tools.hidden_env);
        let (session, text) = (session_id.to_string(), prompt.to_string());
        let clock = self.services.clock.clone();
        let (input, record) = self
            .services
            .db
            .write(move |tx| {
                sessions::admit_content(tx, &session, &text, &blocks, delivery, clock.now_ms())
            })
            .await?;
        let _ = self.services.events.send(EngineEvent::Committed(record));
        crate::failpoint!("input.after_admit");
        if delivery == Delivery::Queue {
            self.wake(session_id, Scope::Queued);
        }
        Ok(input)
    }

    /// Submits a user's prompt and runs the session. When no execution of the
    /// session runs here, the prompt is admitted in the same transaction that
    /// acquires the session's claim (protocol §4.3): either it is admitted and this
    /// engine runs it, or nothing is admitted and the error says why — another live
    /// owner holds the session ([`Error::SessionBusy`]), or a quarantined claim blocks
    /// it, or the prompt is whitespace alone ([`check_prompt`]). When one runs here,
    /// the prompt is queued to it.
    pub async fn submit(&self, session_id: &str, prompt: &str) -> Result<InputRow> {
        self.submit_content(session_id, prompt, &[]).await
    }

    /// [`Engine::submit`] of a prompt that carries resources: `prompt` is its text,
    /// `content` its blocks, kept as [`Engine::admit_content`] keeps them.
    pub async fn submit_content(
        &self,
        session_id: &str,
        prompt: &str,
        content: &[crate::message::PromptBlock],
    ) -> Result<InputRow> {
        check_prompt(prompt)?;
        let content = &PromptBlock::kept(content, &self.services.config.tools.hidden_env);
        match self
            .coordinator
            .start_admitting(session_id, prompt, content)
        {
            Some(answer) => answer
                .await
                .map_err(|_| Error::Invalid("the execution ended before answering".into()))?,
            None if self.coordinator.is_stopping() => {
                Err(Error::Invalid("the engine is shutting down".into()))
            }
            None => {
                self.admit_content(session_id, prompt, content, Delivery::Queue)
                    .await
            }
        }
    }

    /// Creates a session working in `directory` and submits its first prompt, in the
    /// one transaction that also acquires the session's claim: either both exist
    /// and this engine runs the session, or neither was written and the error says
    /// why (a full disk, say). What a front end calls for a prompt typed before any
    /// session was open, so that a refused prompt leaves no empty session behind.
    pub async fn submit_new(
        &self,
        title: &str,
        directory: &str,
        prompt: &str,
    ) -> Result<(SessionRow, InputRow)> {
        check_prompt(prompt)?;
        let session_id = crate::ids::new(crate::ids::SESSION, self.services.clock.now_ms());
        let answer = self
            .coordinator
            .start_admitting_new(&session_id, title, directory, prompt)
            .ok_or_else(|| Error::Invalid("the engine is shutting down".into()))?;
        let input = answer
            .await
            .map_err(|_| Error::Invalid("the execution ended before answering".into()))??;
        let id = session_id.clone();
        let session = self
            .services
            .db
            .read(move |conn| crate::store::rows::session(conn, &id))
            .await?
            .ok_or_else(|| Error::NotFound {
                kind: "session",
                id: session_id,
            })?;
        Ok((session, input))
    }

    /// Runs the session now with `scope`, or rings its running execution.
    #[doc(hidden)]
    pub fn wake(&self, session_id: &str, scope: Scope) -> Wake {
        self.coordinator.wake(session_id, scope)
    }

    /// Continues what recovery left for the user, as the inspector's "wake" and
    /// "retry" and `steward wake` do: a pending, parked or quarantined recovery wake
    /// is re-armed after the checks of protocol §5.7 and its continuation alone is
    /// promoted; a quarantined claim is handed back to recovery, and when recovery
    /// reconciles it now, its continuation is woken. Each action is recorded as an
    /// `inspector.action` event. Errors when there is nothing to act on, the checks
    /// fail, or the claim is quarantined again (with the reason).
    pub async fn continue_execution(&self, execution_id: &str) -> Result<Continued> {
        let clock = self.services.clock.clone();
        let id = execution_id.to_string();
        let target = self
            .services
            .db
            .write(move |tx| inspector::find(tx, &id))
            .await?;
        match target {
            inspector::Target::Recovery { .. } => {
                let id = execution_id.to_string();
                let (session_id, input_id) = self
                    .services
                    .db
                    .write(move |tx| inspector::rearm_wake(tx, &id, clock.now_ms()))
                    .await?;
                let wake = self.wake(&session_id, Scope::continuation(input_id));
                Ok(Continued {
                    session_id,
                    started: wake != Wake::Refused,
                })
            }
            inspector::Target::QuarantinedClaim(_) => {
                let id = execution_id.to_string();
                let now = clock.clone();
                let session_id = self
                    .services
                    .db
                    .write(move |tx| inspector::retry_claim(tx, &id, now.now_ms()))
                    .await?;
                self.recover().await?;
                // What became of it is read from the file, not from this pass's report:
                // another pass (the background timer) may have taken it first.
                let id = execution_id.to_string();
                let (recovery, claim) = self
                    .services
                    .db
                    .read(move |conn| {
                        let recovery = crate::inspect::recoveries_of(conn, &id)?;
                        Ok((recovery, crate::claim::get(conn, &id)?))
                    })
                    .await?;
                let wake = match (recovery, claim) {
                    (Some(r), _) if r.wake_pending && r.recovery_error.is_none() => {
                        self.wake(&session_id, Scope::continuation(r.continuation_message_id))
                    }
                    // Reconciled but parked (a crash loop): the user asked to go on.
                    (Some(r), _)
                        if r.recovery_error.as_deref() == Some(recovery::CRASH_LOOP_ERROR) =>
                    {
                        let id = execution_id.to_string();
                        let (session, input_id) = self
                            .services
                            .db
                            .write(move |tx| inspector::rearm_wake(tx, &id, clock.now_ms()))
                            .await?;
                        self.wake(&session, Scope::continuation(input_id))
                    }
                    (Some(r), _) => {
                        return Err(Error::Invalid(match r.recovery_error {
                            Some(reason) => format!(
                                "{execution_id} was reconciled, but its wake is quarantined: {reason}"
                            ),
                            None => {
                                format!("{execution_id} was reconciled and has already continued")
                            }
                        }));
                    }
                    (None, Some(claim)) => {
                        return Err(Error::Invalid(match claim.recovery_error {
                            Some(reason) => {
                                format!("{execution_id} is quarantined again: {reason}")
                            }
                            None => format!("{execution_id} waits for recovery"),
                        }));
                    }
                    // Nothing to continue (it was safe, superseded or empty): what the
                    // session still has queued runs.
                    (None, None) => self.wake(&session_id, Scope::Queued),
                };
                Ok(Continued {
                    session_id,
                    started: wake != Wake::Refused,
                })
            }
        }
    }

    /// Discards a recovery wake or a quarantined claim (the inspector's "discard").
    /// Returns the session.
    pub async fn discard_execution(&self, execution_id: &str) -> Result<String> {
        let clock = self.services.clock.clone();
        let id = execution_id.to_string();
        self.services
            .db
            .write(move |tx| inspector::discard(tx, &id, clock.now_ms()))
            .await
    }

    /// Renames a session (protocol §3.6); refused while anything holds it.
    pub async fn rename_session(&self, session_id: &str, title: &str) -> Result<()> {
        let now = self.services.clock.now_ms();
        let (id, title) = (session_id.to_string(), title.to_string());
        self.services
            .db
            .write(move |tx| crate::housekeeping::rename(tx, &id, &title, now))
            .await
    }

    /// Archives a session or brings it back (protocol §3.6); refused while anything
    /// holds it. Whether anything changed.
    pub async fn archive_session(&self, session_id: &str, archived: bool) -> Result<bool> {
        let now = self.services.clock.now_ms();
        let id = session_id.to_string();
        self.services
            .db
            .write(move |tx| crate::housekeeping::archive(tx, &id, archived, now))
            .await
    }

    /// Deletes a session and every row of it (protocol §3.6); refused while
    /// anything holds it.
    pub async fn delete_session(&self, session_id: &str) -> Result<usize> {
        let now = self.services.clock.now_ms();
        let id = session_id.to_string();
        self.services
            .db
            .write(move |tx| crate::housekeeping::delete(tx, &id, now))
            .await
    }

    /// Lets `tool` run without asking in every session from now on, as if it were
    /// in `tools.allow` (what the terminal interface does when the user saves it
    /// there). Never covers a guarded path.
    pub fn allow_everywhere(&self, tool: &str) {
        self.services.always.everywhere(tool);
    }

    /// Cancels the session's running execution (the user's Ctrl-C, Esc or ACP
    /// `session/cancel`; protocol §4.8); false when none runs here.
    pub fn cancel(&self, session_id: &str) -> bool {
        self.coordinator.cancel(session_id)
    }

    /// Waits until nothing runs for the session here; its last outcome.
    pub async fn wait_idle(&self, session_id: &str) -> Option<SessionOutcome> {
        self.coordinator.wait_idle(session_id).await
    }

    /// Counters of the runner (text deltas and their commits).
    #[doc(hidden)]
    pub fn runner_stats(&self) -> RunnerStats {
        self.services
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops this engine. Executions still running are stopped without a user
    /// cancellation and without writing (as if their claims were lost); their
    /// claims are then expired and reconciled by a recovery pass, as after a crash,
    /// so their wakes stay pending for the next launch. Then the owner is
    /// unregistered. Returns the sessions that were stopped.
    pub async fn shutdown(&self) -> Result<Vec<String>> {
        if self
            .shut_down
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Ok(Vec::new());
        }
        self.stop_background().await;
        let stopped = self.coordinator.stop_all();
        self.coordinator.wait_all_idle().await;
        // Nothing runs any more: the MCP servers go, each with its grace.
        self.services.mcp.shutdown().await;
        if !stopped.is_empty() {
            tracing::info!(sessions = ?stopped, "shutdown stopped running executions: handing them to recovery");
        }
        // Whatever this owner still holds ran here and stopped: reconcile it now.
        // A failure (a full disk) leaves it for the next launch's recovery, and the
        // owner is unregistered all the same.
        let reconciled = self.reconcile_own_claims().await;
        if let Err(e) = &reconciled {
            tracing::error!(error = %e, "shutdown could not reconcile this owner's claims");
        }
        let (id, lock_path) = (self.owner.id.clone(), self.owner.lock_path.clone());
        let unregistered = self
            .services
            .db
            .with_conn(move |conn| crate::owner::unregister(conn, &id, &lock_path))
            .await;
        reconciled.and(unregistered).map(|()| stopped)
    }

    /// Expires this owner's claims and reconciles them (shutdown).
    async fn reconcile_own_claims(&self) -> Result<()> {
        let (me, clock) = (self.owner.id.clone(), self.services.clock.clone());
        let expired = self
            .services
            .db
            .write(move |tx| crate::owner::expire_claims_of_dead(tx, &me, clock.now_ms()))
            .await?;
        if expired > 0 {
            self.recover().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
