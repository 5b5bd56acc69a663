//! Per-session single flight: `wake(session)` starts an execution when the session is
//! idle here, or rings a doorbell when one is running (rings coalesce into one
//! re-run). Different sessions run concurrently. A cancellation is delivered to the
//! running execution; a wake that arrives meanwhile starts a fresh execution only
//! after the cancellation has committed.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::claim::heartbeat::{Heartbeat, HeartbeatParams};
use crate::claim::{self, Acquire, ClaimRow, SelfFence};
use crate::config::LeaseConfig;
use crate::runner::{Execution, Outcome, Services};
use crate::store::rows;
use crate::store::sessions::Scope;

/// What became of a wake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOutcome {
    /// An execution ran and ended so.
    Ran(Outcome),
    /// Another live owner holds the session (SPEC §4.3).
    Busy { owner_id: String },
    /// The session's claim expired and waits for recovery.
    AwaitingRecovery { execution_id: String },
    /// The session's claim is quarantined and waits for the user.
    Quarantined {
        execution_id: String,
        reason: String,
    },
    /// The store failed before an execution could start.
    Error(String),
}

/// Reconciles an expired claim that blocks an acquisition (recovery, SPEC §5).
pub trait ExpiredClaims: Send + Sync + std::fmt::Debug {
    /// Recovers `claim` now if it can; returns when it is done (or cannot be).
    fn recover(self: Arc<Self>, claim: ClaimRow) -> crate::tools::BoxFuture<()>;
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
            }),
        }
    }

    /// Where acquisitions that meet an expired claim send it.
    pub fn set_expired_handler(&self, handler: Arc<dyn ExpiredClaims>) {
        *self.inner.expired.lock().unwrap_or_else(|e| e.into_inner()) = Some(handler);
    }

    /// Runs `session` now, or rings its running execution.
    pub fn wake(&self, session_id: &str, scope: Scope) -> Wake {
        let mut slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.get_mut(session_id) {
            slot.rerun = Some(match slot.rerun.take() {
                Some(earlier) => earlier.merge(scope),
                None => scope,
            });
            return Wake::Rang;
        }
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
        drop(slots);
        tokio::spawn(run_session(
            self.inner.clone(),
            session_id.to_string(),
            scope,
            cancel,
        ));
        Wake::Started
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
) {
    let mut scope = first;
    let mut cancel = first_cancel;
    loop {
        let outcome = run_once(&inner, &session_id, scope, cancel).await;
        inner
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session_id.clone(), outcome.clone());
        let mut slots = inner.slots.lock().unwrap_or_else(|e| e.into_inner());
        let Some(slot) = slots.get_mut(&session_id) else {
            return;
        };
        let rerun = slot
            .rerun
            .take()
            .filter(|_| matches!(outcome, SessionOutcome::Ran(_)));
        if let Some(next) = rerun {
            // A wake arrived while this execution ran or was cancelled: run again,
            // with what those wakes asked for.
            slot.cancel = CancellationToken::new();
            cancel = slot.cancel.clone();
            scope = next;
            continue;
        }
        let slot = slots.remove(&session_id).expect("slot present");
        let _ = slot.done.send(Some(outcome));
        return;
    }
}

async fn run_once(
    inner: &Inner,
    session_id: &str,
    scope: Scope,
    cancel: CancellationToken,
) -> SessionOutcome {
    let services = &inner.services;
    let lease_ms = i64::try_from(inner.lease.lease_ms).unwrap_or(i64::MAX);
    let mut recovered_once = false;
    let (claim, acquired_at) = loop {
        let acquired_at = services.clock.monotonic();
        let now = services.clock.now_ms();
        let (session, owner) = (session_id.to_string(), inner.owner_id.clone());
        let continuations = match &scope {
            Scope::Continuations(ids) => ids.clone(),
            Scope::Queued => Vec::new(),
        };
        let result = services
            .db
            .write(move |tx| {
                let acquired = claim::acquire(tx, &session, &owner, now, lease_ms)?;
                if let Acquire::Acquired(_) = &acquired {
                    for input_id in &continuations {
                        crate::recovery::wakes::count_attempt(tx, input_id)?;
                    }
                }
                Ok(acquired)
            })
            .await;
        match result {
            Ok(Acquire::Acquired(claim)) => break (claim, acquired_at),
            Ok(Acquire::Busy(row)) => {
                return SessionOutcome::Busy {
                    owner_id: row.owner_id,
                };
            }
            Ok(Acquire::Quarantined(row)) => {
                return SessionOutcome::Quarantined {
                    execution_id: row.id,
                    reason: row.recovery_error.unwrap_or_default(),
                };
            }
            Ok(Acquire::Expired(row)) => {
                let handler = inner
                    .expired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                match handler {
                    Some(handler) if !recovered_once => {
                        recovered_once = true;
                        handler.recover(row).await;
                    }
                    _ => {
                        return SessionOutcome::AwaitingRecovery {
                            execution_id: row.id,
                        };
                    }
                }
            }
            Err(e) => return SessionOutcome::Error(e.to_string()),
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
    let lost = CancellationToken::new();
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
    let execution = Execution::new(services.clone(), claim, session, fence, cancel, lost);
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
    SessionOutcome::Ran(outcome)
}
