//! Per-session single flight: `wake(session)` starts an execution when the session is
//! idle here, or rings a doorbell when one is running (rings coalesce into one
//! re-run). Different sessions run concurrently. A cancellation is delivered to the
//! running execution; a wake that arrives meanwhile starts a fresh execution only
//! after the cancellation has committed.
//!
//! [`Coordinator::stop_all`] (engine shutdown) is not a cancellation: it stops every
//! execution the way a lost claim does — no further dispatch, no further write — and
//! starts nothing new, so what was running stays for recovery to reconcile and its
//! wake stays durable. Only a user's cancellation writes `step.interrupted`.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;

use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::claim::heartbeat::{Heartbeat, HeartbeatParams};
use crate::claim::{self, Acquire, ClaimRow, SelfFence};
use crate::config::LeaseConfig;
use crate::error::Error;
use crate::events::{Delivery, EventRecord};
use crate::projection::InputRow;
use crate::runner::{EngineEvent, Execution, Outcome, Services};
use crate::store::sessions::Scope;
use crate::store::{rows, sessions};

/// What became of a wake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOutcome {
    /// An execution ran and ended so.
    Ran(Outcome),
    /// Another live owner holds the session (protocol §4.3).
    Busy { owner_id: String },
    /// The session's claim expired and waits for recovery.
    AwaitingRecovery { execution_id: String },
    /// The session's claim is quarantined and waits for the user.
    Quarantined {
        execution_id: String,
        reason: String,
    },
    /// The session runs on a provider and model this process does not have: it
    /// waits for one that has them (protocol §4.17). Nothing was acquired.
    WaitsForProvider { wanted: String, here: String },
    /// The store failed before an execution could start.
    Error(String),
    /// The engine shut down: the execution (if one had started) was stopped without
    /// writing and is left for recovery; nothing new started.
    Stopped,
}

impl SessionOutcome {
    /// Whether the user should hear of it: the run did not end as asked (a store
    /// failure, a failed step, a lost claim, a session held or blocked elsewhere).
    pub fn is_failure(&self) -> bool {
        !matches!(
            self,
            SessionOutcome::Ran(Outcome::Idle | Outcome::Cancelled) | SessionOutcome::Stopped
        )
    }
}

impl std::fmt::Display for SessionOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionOutcome::Ran(Outcome::Idle) => f.write_str("idle"),
            SessionOutcome::Ran(Outcome::Failed(m)) => write!(f, "failed: {m}"),
            SessionOutcome::Ran(Outcome::Cancelled) => f.write_str("cancelled"),
            SessionOutcome::Ran(Outcome::Lost) => f.write_str(
                "lost its claim to another owner (this process was paused or its lease ran out); nothing more was written here",
            ),
            SessionOutcome::Ran(Outcome::Error(m)) | SessionOutcome::Error(m) => {
                write!(f, "error: {m}")
            }
            SessionOutcome::Busy { owner_id } => write!(f, "busy (held by {owner_id})"),
            SessionOutcome::AwaitingRecovery { execution_id } => {
                write!(f, "waits for recovery of {execution_id}")
            }
            SessionOutcome::Quarantined {
                execution_id,
                reason,
            } => write!(f, "quarantined ({execution_id}: {reason})"),
            SessionOutcome::Stopped => f.write_str("stopped by shutdown; left for recovery"),
            SessionOutcome::WaitsForProvider { wanted, here } => write!(
                f,
                "waits for its model {wanted}, which this process does not have (it runs {here}): choose {here} for the session to run it here"
            ),
        }
    }
}

/// Reconciles an expired claim that blocks an acquisition (recovery, protocol §5).
pub trait ExpiredClaims: Send + Sync + std::fmt::Debug {
    /// Recovers `claim` now if it can; returns when it is done (or cannot be).
    fn recover(self: Arc<Self>, claim: ClaimRow) -> crate::tools::BoxFuture<()>;
    /// Recovers the claims of `owner_id` now when its lock proves it dead (a live
    /// claim of a dead process, protocol §5.2); true when it did.
    fn recover_if_dead(self: Arc<Self>, owner_id: String) -> crate::tools::BoxFuture<bool>;
}

#[derive(Debug)]
struct Slot {
    cancel: CancellationToken,
    /// Wakes that rang while the execution ran, coalesced into one scope.
    rerun: Option<Scope>,
    done: watch::Sender<Option<SessionOutcome>>,
}

#[derive(Debug)]
struct Inner {
    services: Services,
    owner_id: String,
    lease: LeaseConfig,
    slots: Mutex<HashMap<String, Slot>>,
    last: Mutex<HashMap<String, SessionOutcome>>,
    expired: Mutex<Option<Arc<dyn ExpiredClaims>>>,
    /// Cancelled by [`Coordinator::stop_all`]: every execution's `lost` token is a
    /// child of it.
    stopping: CancellationToken,
}

/// A prompt admitted in the same transaction that acquires the session's claim, so
/// that "admitted" and "this process holds the session" are one fact (protocol §4.3).
#[derive(Debug)]
struct Admission {
    prompt: String,
    /// The prompt's blocks, when it carries resources (protocol §4.20).
    content: Vec<crate::message::PromptBlock>,
    /// A session to create first, in the same transaction: (title, directory).
    create: Option<(String, String)>,
    reply: oneshot::Sender<crate::Result<InputRow>>,
}

/// The single-flight table of one engine instance.
#[derive(Debug, Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

/// Whether a wake started an execution or rang an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    Started,
    Rang,
    /// The engine is shutting down: nothing new starts (the wake stays durable).
    Refused,
}

impl Coordinator {
    pub fn new(services: Services, owner_id: String, lease: LeaseConfig) -> Coordinator {
        Coordinator {
            inner: Arc::new(Inner {
                services,
                owner_id,
                lease,
                slots: Mutex::new(HashMap::new()),
                last: Mutex::new(HashMap::new()),
                expired: Mutex::new(None),
                stopping: CancellationToken::new(),
            }),
        }
    }

    /// Where acquisitions that meet an expired claim send it.
    pub fn set_expired_handler(&self, handler: Arc<dyn ExpiredClaims>) {
        *self.inner.expired.lock().unwrap_or_else(|e| e.into_inner()) = Some(handler);
    }

    /// The provider and model `session_id` runs on when this process does not have
    /// them (protocol §4.17); `None` when it runs here.
    pub async fn waits_for(&self, session_id: &str) -> crate::Result<Option<(String, String)>> {
        let id = session_id.to_string();
        let model = self
            .inner
            .services
            .db
            .read(move |conn| sessions::model_of(conn, &id))
            .await?;
        Ok(
            match crate::runner::provider_for(
                &self.inner.services.provider,
                session_id,
                model.clone(),
            ) {
                Err(Error::ProviderUnavailable { .. }) => model,
                _ => None,
            },
        )
    }

    /// Runs `session` now, or rings its running execution.
    pub fn wake(&self, session_id: &str, scope: Scope) -> Wake {
        let mut slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        if self.inner.stopping.is_cancelled() {
            return Wake::Refused;
        }
        if let Some(slot) = slots.get_mut(session_id) {
            slot.rerun = Some(match slot.rerun.take() {
                Some(earlier) => earlier.merge(scope),
                None => scope,
            });
            return Wake::Rang;
        }
        let cancel = self.occupy(&mut slots, session_id);
        drop(slots);
        tokio::spawn(run_session(
            self.inner.clone(),
            session_id.to_string(),
            scope,
            cancel,
            None,
        ));
        Wake::Started
    }

    /// Admits `prompt` (queued) into an idle `session_id` in the same transaction
    /// that acquires its claim, then runs the session. The receiver answers with the
    /// admitted input, or with why nothing was admitted: another live owner holds
    /// the session ([`Error::SessionBusy`]), its claim is quarantined or waits for
    /// recovery, or the store failed. `None` when an execution of the session
    /// already runs here (or the engine is stopping): admit and wake instead.
    pub fn start_admitting(
        &self,
        session_id: &str,
        prompt: &str,
        content: &[crate::message::PromptBlock],
    ) -> Option<oneshot::Receiver<crate::Result<InputRow>>> {
        self.start_admission(session_id, prompt, content, None)
    }

    /// [`Coordinator::start_admitting`] into a session created in the same
    /// transaction (id `session_id`, with `title` and `directory`): a refusal leaves
    /// neither the session nor the prompt behind.
    pub fn start_admitting_new(
        &self,
        session_id: &str,
        title: &str,
        directory: &str,
        prompt: &str,
    ) -> Option<oneshot::Receiver<crate::Result<InputRow>>> {
        let create = Some((title.to_string(), directory.to_string()));
        self.start_admission(session_id, prompt, &[], create)
    }

    fn start_admission(
        &self,
        session_id: &str,
        prompt: &str,
        content: &[crate::message::PromptBlock],
        create: Option<(String, String)>,
    ) -> Option<oneshot::Receiver<crate::Result<InputRow>>> {
        let mut slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        if self.inner.stopping.is_cancelled() || slots.contains_key(session_id) {
            return None;
        }
        let cancel = self.occupy(&mut slots, session_id);
        drop(slots);
        let (reply, answer) = oneshot::channel();
        tokio::spawn(run_session(
            self.inner.clone(),
            session_id.to_string(),
            Scope::Queued,
            cancel,
            Some(Admission {
                prompt: prompt.to_string(),
                content: content.to_vec(),
                create,
                reply,
            }),
        ));
        Some(answer)
    }

    /// Inserts the slot of a session about to run (and tells listeners); returns its
    /// cancellation token.
    fn occupy(&self, slots: &mut HashMap<String, Slot>, session_id: &str) -> CancellationToken {
        let cancel = CancellationToken::new();
        let (done, _) = watch::channel(None);
        slots.insert(
            session_id.to_string(),
            Slot {
                cancel: cancel.clone(),
                rerun: None,
                done,
            },
        );
        let _ = self.inner.services.events.send(EngineEvent::Running {
            session_id: session_id.to_string(),
        });
        cancel
    }

    /// Stops every execution without cancelling it (engine shutdown): each stops
    /// dispatching and writing at once, as if it had lost its claim, and no new one
    /// starts. Returns the sessions that were running.
    pub fn stop_all(&self) -> Vec<String> {
        let slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.stopping.cancel();
        slots.keys().cloned().collect()
    }

    /// Whether [`Coordinator::stop_all`] was called.
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.is_cancelled()
    }

    /// Asks the running execution of `session_id` to stop. False when none runs here.
    pub fn cancel(&self, session_id: &str) -> bool {
        let slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        match slots.get(session_id) {
            Some(slot) => {
                slot.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether an execution of `session_id` runs here.
    pub fn is_running(&self, session_id: &str) -> bool {
        self.inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(session_id)
    }

    /// The sessions running here.
    pub fn running(&self) -> Vec<String> {
        self.inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Waits until `session_id` is idle here; returns its last outcome.
    pub async fn wait_idle(&self, session_id: &str) -> Option<SessionOutcome> {
        let receiver = {
            let slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.get(session_id).map(|s| s.done.subscribe())
        };
        if let Some(mut receiver) = receiver {
            let _ = receiver.wait_for(Option::is_some).await;
        }
        self.inner
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session_id)
            .cloned()
    }

    /// Waits until nothing runs here.
    pub async fn wait_all_idle(&self) {
        loop {
            let Some(session) = self.running().into_iter().next() else {
                return;
            };
            self.wait_idle(&session).await;
        }
    }
}

async fn run_session(
    inner: Arc<Inner>,
    session_id: String,
    first: Scope,
    first_cancel: CancellationToken,
    admission: Option<Admission>,
) {
    let mut scope = first;
    let mut cancel = first_cancel;
    let mut admission = admission;
    loop {
        let outcome = run_once(&inner, &session_id, scope, cancel, admission.take()).await;
        inner
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session_id.clone(), outcome.clone());
        let mut slots = inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = slots.get_mut(&session_id) else {
            return;
        };
        // A stopping engine runs nothing again: what rang stays durable (an input's
        // or a recovery row's wake flag) for the next launch.
        let rerun = slot
            .rerun
            .take()
            .filter(|_| matches!(outcome, SessionOutcome::Ran(_)))
            .filter(|_| !inner.stopping.is_cancelled());
        if let Some(next) = rerun {
            // A wake arrived while this execution ran or was cancelled: run again,
            // with what those wakes asked for.
            slot.cancel = CancellationToken::new();
            cancel = slot.cancel.clone();
            scope = next;
            continue;
        }
        let slot = slots.remove(&session_id).expect("slot present");
        let _ = inner.services.events.send(EngineEvent::Idle {
            session_id: session_id.clone(),
            outcome: outcome.clone(),
        });
        let _ = slot.done.send(Some(outcome));
        return;
    }
}

async fn run_once(
    inner: &Inner,
    session_id: &str,
    scope: Scope,
    cancel: CancellationToken,
    mut admission: Option<Admission>,
) -> SessionOutcome {
    let services = &inner.services;
    if inner.stopping.is_cancelled() {
        return refuse(admission, SessionOutcome::Stopped, || {
            Error::Invalid("the engine is shutting down".into())
        });
    }
    // The session runs on its own provider and model, or waits for a process that
    // has them (protocol §4.17): nothing is acquired, admitted or counted here.
    let provider = {
        let id = session_id.to_string();
        let model = services
            .db
            .read(move |conn| sessions::model_of(conn, &id))
            .await;
        match model.and_then(|m| crate::runner::provider_for(&services.provider, session_id, m)) {
            Ok(provider) => provider,
            Err(Error::ProviderUnavailable {
                session_id,
                wanted,
                here,
            }) => {
                tracing::info!(session = %session_id, %wanted, %here, "the session waits for its provider");
                let outcome = SessionOutcome::WaitsForProvider {
                    wanted: wanted.clone(),
                    here: here.clone(),
                };
                return refuse(admission, outcome, || Error::ProviderUnavailable {
                    session_id,
                    wanted,
                    here,
                });
            }
            Err(e) => {
                let outcome = SessionOutcome::Error(e.to_string());
                return refuse(admission, outcome, || e);
            }
        }
    };
    let lease_ms = i64::try_from(inner.lease.lease_ms).unwrap_or(i64::MAX);
    let mut recovered_once = false;
    let (claim, acquired_at) = loop {
        let (session, owner) = (session_id.to_string(), inner.owner_id.clone());
        let continuations = match &scope {
            Scope::Continuations(ids) => ids.clone(),
            Scope::Queued => Vec::new(),
        };
        let prompt = admission
            .as_ref()
            .map(|a| (a.prompt.clone(), a.content.clone()));
        let create = admission.as_ref().and_then(|a| a.create.clone());
        let clock = services.clock.clone();
        let result = services
            .db
            .write(move |tx| {
                // Read inside the job: the writer may have been busy, and a claim
                // that expired meanwhile must be seen as expired (protocol §4.3).
                let acquired_at = clock.monotonic();
                let now = clock.now_ms();
                if let Some((title, directory)) = &create
                    && rows::session(tx, &session)?.is_none()
                {
                    sessions::create_with_id(tx, &session, title, directory, now)?;
                }
                if rows::session(tx, &session)?.is_none() {
                    return Err(Error::NotFound {
                        kind: "session",
                        id: session,
                    });
                }
                let acquired = claim::acquire(tx, &session, &owner, now, lease_ms)?;
                let mut admitted = None;
                if let Acquire::Acquired(_) = &acquired {
                    for input_id in &continuations {
                        crate::recovery::wakes::count_attempt(tx, input_id)?;
                    }
                    if let Some((prompt, content)) = &prompt {
                        admitted = Some(sessions::admit_content(
                            tx,
                            &session,
                            prompt,
                            content,
                            Delivery::Queue,
                            now,
                        )?);
                    }
                }
                Ok((acquired, acquired_at, admitted))
            })
            .await;
        match result {
            Ok((Acquire::Acquired(claim), acquired_at, admitted)) => {
                if let (Some(admission), Some((input, record))) = (admission.take(), admitted) {
                    publish_admission(services, record);
                    let _ = admission.reply.send(Ok(input));
                }
                break (claim, acquired_at);
            }
            Ok((Acquire::Busy(row), ..)) => {
                // Busy until the lease runs out, unless its owner is provably dead:
                // then its claims are reconciled now and the acquisition tried again.
                // The same holds for a claim of this owner: nothing runs the session
                // here (this acquisition holds its slot), so its execution ended
                // without clearing it — a panic — and no one can write with it.
                if !recovered_once && let Some(handler) = expired_handler(inner) {
                    recovered_once = true;
                    if row.owner_id == inner.owner_id {
                        let (abandoned, owner, clock) =
                            (row.clone(), inner.owner_id.clone(), services.clock.clone());
                        let expired = services
                            .db
                            .write(move |tx| {
                                claim::expire_abandoned(tx, &abandoned, &owner, clock.now_ms())
                            })
                            .await;
                        if matches!(expired, Ok(true)) {
                            handler.recover(row).await;
                            continue;
                        }
                    } else if handler.recover_if_dead(row.owner_id.clone()).await {
                        continue;
                    }
                }
                let owner_id = row.owner_id.clone();
                return refuse(admission, SessionOutcome::Busy { owner_id }, || {
                    busy_error(services, session_id, &row)
                });
            }
            Ok((Acquire::Quarantined(row), ..)) => {
                let reason = row.recovery_error.clone().unwrap_or_default();
                let error = Error::Invalid(format!(
                    "session {session_id} is blocked by quarantined execution {}: {reason} \
                     (`steward wake {}` retries it, `steward discard {}` removes it)",
                    row.id, row.id, row.id
                ));
                let outcome = SessionOutcome::Quarantined {
                    execution_id: row.id,
                    reason,
                };
                return refuse(admission, outcome, || error);
            }
            Ok((Acquire::Expired(row), ..)) => match expired_handler(inner) {
                Some(handler) if !recovered_once => {
                    recovered_once = true;
                    handler.recover(row).await;
                }
                _ => {
                    let error = Error::Invalid(format!(
                        "session {session_id}: execution {} waits for recovery",
                        row.id
                    ));
                    let outcome = SessionOutcome::AwaitingRecovery {
                        execution_id: row.id,
                    };
                    return refuse(admission, outcome, || error);
                }
            },
            Err(e) => {
                let outcome = SessionOutcome::Error(e.to_string());
                return refuse(admission, outcome, || e);
            }
        }
    };
    crate::failpoint!("claim.after_acquire");
    let session = {
        let id = session_id.to_string();
        match services.db.read(move |conn| rows::session(conn, &id)).await {
            Ok(Some(session)) => session,
            Ok(None) => return SessionOutcome::Error(format!("session {session_id} not found")),
            Err(e) => return SessionOutcome::Error(e.to_string()),
        }
    };
    let lease = inner.lease.lease();
    let fence = Arc::new(SelfFence::new(services.clock.clone(), lease, acquired_at));
    // A shutdown stops the execution exactly as a lost claim does.
    let lost = inner.stopping.child_token();
    let heartbeat = Heartbeat::spawn(HeartbeatParams {
        db: services.db.clone(),
        claim: claim.clone(),
        clock: services.clock.clone(),
        lease,
        interval: inner.lease.heartbeat(),
        self_fence: fence.clone(),
        lost: lost.clone(),
    });
    tracing::info!(session = session_id, execution = %claim.execution_id, "execution started");
    let execution = Execution::new(
        services.clone(),
        provider,
        claim,
        session,
        fence,
        cancel,
        lost,
    );
    // A panic in provider or tool code must not leave the claim renewed forever or
    // the session's slot occupied: it ends the execution like a store failure, and
    // recovery reconciles the claim once it expires.
    let outcome = match AssertUnwindSafe(execution.run(scope)).catch_unwind().await {
        Ok(outcome) => outcome,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(session = session_id, panic = %what, "the execution panicked");
            Outcome::Error(format!("the execution panicked: {what}"))
        }
    };
    heartbeat.stop().await;
    tracing::info!(session = session_id, ?outcome, "execution ended");
    if outcome == Outcome::Lost && inner.stopping.is_cancelled() {
        return SessionOutcome::Stopped;
    }
    SessionOutcome::Ran(outcome)
}

fn expired_handler(inner: &Inner) -> Option<Arc<dyn ExpiredClaims>> {
    inner
        .expired
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// Answers an admission that did not happen (nothing was written), and returns the
/// session's outcome.
fn refuse(
    admission: Option<Admission>,
    outcome: SessionOutcome,
    error: impl FnOnce() -> Error,
) -> SessionOutcome {
    if let Some(admission) = admission {
        let _ = admission.reply.send(Err(error()));
    }
    outcome
}

/// Tells listeners about a committed admission.
fn publish_admission(services: &Services, record: EventRecord) {
    let _ = services.events.send(EngineEvent::Committed(record));
    crate::failpoint!("input.after_admit");
}

/// "Held by another live owner", naming the owner (exit code 4 in the binary).
fn busy_error(services: &Services, session_id: &str, row: &ClaimRow) -> Error {
    let detail = services
        .db
        .path()
        .and_then(|path| crate::store::open::open_read_only(path).ok())
        .and_then(|conn| crate::owner::get(&conn, &row.owner_id).ok().flatten())
        .map(|o| format!(" (pid {} on {})", o.pid, o.hostname))
        .unwrap_or_default();
    Error::SessionBusy {
        session_id: session_id.to_string(),
        owner_id: row.owner_id.clone(),
        owner_detail: detail,
    }
}
