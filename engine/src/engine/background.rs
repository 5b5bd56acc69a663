//! The background loop of an engine: a recovery pass whenever the earliest claim
//! recovery may take expires (a timer computed from the table, not a poll), at each
//! heartbeat interval while other owners hold claims (the owner-death probe), and
//! whenever the data-directory doorbell rings; then, for the long-lived entry points,
//! the wakes that are due are started. A slow poll covers a missed doorbell.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::coordinator::{Coordinator, Wake};
use crate::db::Db;
use crate::engine::{Engine, Recoverer, Redrive};
use crate::recovery::{self, WaitingSession, WakeReport};
use crate::store::sessions::{self, Scope};

/// The slow fallback poll.
const POLL: Duration = Duration::from_secs(5);
/// The first pause after a failed pass; it doubles with each failure, up to [`POLL`].
const RETRY: Duration = Duration::from_millis(250);

/// Which sessions a front end lets the engine run on its own: true for a session
/// whose output someone is watching.
pub type SessionFilter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What the background loop starts after each recovery pass.
#[derive(Clone)]
pub enum Redriving {
    /// Nothing: it only reconciles (entry points that run one session).
    Nothing,
    /// Every due wake, as [`Engine::redrive_wakes`] does (the terminal interface,
    /// which shows every session).
    DueWakes,
    /// The due wakes of the sessions the filter accepts (ACP: the sessions its
    /// client opened). The others keep their wakes for whoever opens them.
    Sessions(SessionFilter),
}

impl std::fmt::Debug for Redriving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Redriving::Nothing => "Nothing",
            Redriving::DueWakes => "DueWakes",
            Redriving::Sessions(_) => "Sessions(..)",
        })
    }
}

#[derive(Debug)]
pub(super) struct Background {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Background {
    pub(super) fn spawn(engine: &Engine, redriving: Redriving) -> Background {
        let stop = CancellationToken::new();
        let bell = Arc::new(Notify::new());
        let watcher = engine
            .services
            .db
            .path()
            .and_then(|p| p.parent())
            .and_then(|dir| crate::doorbell::watch(dir, bell.clone()));
        let state = Loop {
            due: Due::of(engine),
            probe_every: engine.services.config.lease.heartbeat(),
            auto_continue: engine.services.config.recovery.auto_continue,
            redriving,
            recoverer: engine.recoverer.clone(),
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
    due: Due,
    probe_every: Duration,
    auto_continue: bool,
    redriving: Redriving,
    recoverer: Arc<Recoverer>,
    bell: Arc<Notify>,
}

/// Decides whether a recovery pass has anything to take.
pub(super) struct Due {
    db: Db,
    clock: crate::clock::SharedClock,
    me: String,
    owners: crate::owner::Owners,
    coordinator: Coordinator,
}

impl Due {
    pub(super) fn of(engine: &Engine) -> Due {
        Due {
            db: engine.services.db.clone(),
            clock: engine.services.clock.clone(),
            me: engine.owner.id.clone(),
            owners: engine.recoverer.params.owners.clone(),
            coordinator: engine.coordinator.clone(),
        }
    }

    /// Whether a claim recovery may take has expired, or its owner is provably
    /// dead (the lock probe, which only reads). This owner's claims of executions
    /// still running here are never due.
    pub(super) async fn now(&self) -> crate::Result<bool> {
        let claims = self.db.read(recovery::claim_expiries).await?;
        let now = self.clock.now_ms();
        let mut due = false;
        let mut others: Vec<String> = Vec::new();
        for (session, owner, expires_at) in &claims {
            if *owner == self.me && self.coordinator.is_running(session) {
                continue;
            }
            due |= *expires_at <= now;
            if *owner != self.me && !others.contains(owner) {
                others.push(owner.clone());
            }
        }
        if due || others.is_empty() {
            return Ok(due);
        }
        let lock_files = self.owners.clone();
        self.db
            .read(move |conn| {
                for id in &others {
                    if crate::owner::liveness(conn, &lock_files, id)?
                        == crate::owner::Liveness::Dead
                    {
                        return Ok(true);
                    }
                }
                Ok(false)
            })
            .await
    }
}

impl Loop {
    async fn run(self, stop: CancellationToken) {
        let mut failed: u32 = 0;
        let mut last_failure: Option<std::time::Instant> = None;
        let mut seen = self.due.db.store_failures();
        loop {
            let ticked = self.tick().await;
            if let Err(e) = &ticked {
                tracing::error!(error = %e, attempt = failed + 1, "background recovery failed");
            }
            if ticked.is_ok() {
                let wait = self.next_wait().await;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = self.bell.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            // A pass that failed, or a store that failed since the last look (the
            // wakes a pass started met a full disk), is retried after a pause that
            // doubles up to the fallback poll, whatever rings meanwhile: failed
            // writes ring the doorbell too, and a due claim or wake would otherwise
            // make it retry at once, for ever. The pause shrinks back only after a
            // quiet fallback poll's worth of time.
            let failures = self.due.db.store_failures();
            if ticked.is_err() || failures != seen {
                failed = failed.saturating_add(1);
                last_failure = Some(std::time::Instant::now());
                let pause = RETRY.saturating_mul(1 << (failed - 1).min(8)).min(POLL);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(pause) => {}
                }
            } else if last_failure.is_none_or(|at| at.elapsed() >= POLL) {
                failed = 0;
            }
            seen = failures;
        }
    }

    /// Until the earliest claim recovery may take expires — another owner's, or one of
    /// this owner's whose execution is no longer running here — or the next
    /// owner-death probe while such claims exist, or the fallback poll.
    async fn next_wait(&self) -> Duration {
        let due = &self.due;
        let claims = due
            .db
            .read(recovery::claim_expiries)
            .await
            .unwrap_or_default();
        let earliest = claims
            .into_iter()
            .filter(|(session, owner, _)| *owner != due.me || !due.coordinator.is_running(session))
            .map(|(_, _, expires_at)| expires_at)
            .min();
        match earliest {
            Some(at) => {
                let until = u64::try_from(at - due.clock.now_ms()).unwrap_or(0);
                Duration::from_millis(until).min(self.probe_every)
            }
            None => POLL,
        }
    }

    /// Recovers when something may be taken — a claim recovery may take has expired,
    /// or its owner is provably dead (the lock probe, which only reads) — and, for
    /// the long-lived entry points, starts the wakes that are due. The doorbell rings
    /// for this process's own commits too: then there is usually nothing to do, and
    /// nothing is written.
    async fn tick(&self) -> crate::Result<()> {
        if self.due.now().await? {
            let report = self.recoverer.pass().await?;
            // Due, yet nothing could be taken (every row raced or was held): not a
            // reason to look again at once.
            if report.scanned > 0 && report.moved() == 0 {
                return Err(crate::Error::Invalid(format!(
                    "a recovery pass found {} claims due and could take none",
                    report.scanned
                )));
            }
        }
        let only = match &self.redriving {
            Redriving::Nothing => return Ok(()),
            Redriving::DueWakes => None,
            Redriving::Sessions(filter) => Some(filter),
        };
        if self.due.db.read(wakes_waiting).await? {
            redrive(
                &self.due.db,
                &self.due.coordinator,
                self.auto_continue,
                only,
            )
            .await?;
        }
        Ok(())
    }
}

/// Whether any wake waits: a pending recovery wake or an admitted input whose wake
/// never ran (a read; the redrive itself writes).
fn wakes_waiting(conn: &rusqlite::Connection) -> crate::Result<bool> {
    Ok(conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM session_recovery WHERE wake_pending = 1 AND recovery_error IS NULL)
             OR EXISTS (SELECT 1 FROM session_input WHERE wake_pending = 1 AND promoted_seq IS NULL)",
        [],
        |r| r.get(0),
    )?)
}

/// Starts every due wake (protocol §5.7): the recovery wakes that passed their checks,
/// each promoting only its continuation — unless `auto_continue` is off (§5.9) — and
/// the sessions with an admitted input whose wake never ran. With `only`, just the
/// sessions it accepts.
pub(super) async fn redrive(
    db: &Db,
    coordinator: &Coordinator,
    auto_continue: bool,
    only: Option<&SessionFilter>,
) -> crate::Result<Redrive> {
    let wanted = |session: &str| only.is_none_or(|accept| accept(session));
    let (candidates, quarantined) = db.with_conn(recovery::recovery_wakes).await?;
    let mut started: Vec<String> = Vec::new();
    let mut redriven = 0;
    // A session whose provider this process does not have keeps its wakes for one
    // that has it (protocol §4.17): nothing is started, nothing counted.
    let mut waiting: Vec<WaitingSession> = Vec::new();
    let waits =
        |waiting: &[WaitingSession], session: &str| waiting.iter().any(|w| w.session_id == session);
    let left = |session_id: &str, (provider, model): (String, String)| WaitingSession {
        session_id: session_id.to_string(),
        provider,
        model,
    };
    if auto_continue {
        for candidate in candidates.iter().filter(|c| wanted(&c.session_id)) {
            if waits(&waiting, &candidate.session_id) {
                continue;
            }
            if let Some(model) = coordinator.waits_for(&candidate.session_id).await? {
                waiting.push(left(&candidate.session_id, model));
                continue;
            }
            let wake = coordinator.wake(
                &candidate.session_id,
                Scope::continuation(candidate.input_id.clone()),
            );
            if wake == Wake::Refused {
                continue;
            }
            redriven += 1;
            if !started.contains(&candidate.session_id) {
                started.push(candidate.session_id.clone());
            }
        }
    }
    for session_id in db.read(sessions::with_pending_input_wakes).await? {
        if !wanted(&session_id)
            || started.contains(&session_id)
            || waits(&waiting, &session_id)
            || coordinator.is_running(&session_id)
        {
            continue;
        }
        if let Some(model) = coordinator.waits_for(&session_id).await? {
            waiting.push(left(&session_id, model));
            continue;
        }
        if coordinator.wake(&session_id, Scope::Queued) != Wake::Refused {
            started.push(session_id);
        }
    }
    Ok(Redrive {
        report: WakeReport {
            redriven,
            failed: 0,
            quarantined,
            waiting: waiting.len(),
            waiting_sessions: waiting,
        },
        sessions: started,
    })
}
