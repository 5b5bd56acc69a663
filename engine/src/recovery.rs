//! Crash recovery (protocol §5): reconcile every interrupted execution into the
//! transcript, never replay a provider or tool call, and leave a durable wake that
//! continues the agent exactly once.
//!
//! A pass probes owners first (a dead owner's claims expire at once, §4.11), then
//! scans claims in `(time_created, id)` order with keyset pagination, in batches of
//! [`BATCH`]. Each batch is one write transaction and each row its own savepoint, so a
//! failing row rolls back alone (and is quarantined) and a batch costs one sync.
//! Per row: takeover (epoch + 1), decode (or quarantine), then `safe` → discard,
//! superseded → discard, `ready`/`unknown` → one reconciliation: `step.recovered`,
//! the continuation input, the `session_recovery` row, and the claim deleted. Tool
//! processes the execution left running — only those whose identity still matches —
//! are killed just before the batch that reports them commits (`Stops`).

pub mod wakes;

pub use wakes::{WAKE_ATTEMPTS_MAX, WaitingSession, WakeCandidate, WakeReport, recovery_wakes};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;

use crate::claim::{self, CLAIM_COLUMNS, Claim, ClaimRow, Fenced, claim_row};
use crate::error::{Error, Result};
use crate::events::{Delivery, Event, EventRecord};
use crate::ids;
use crate::message::{CONTINUATION_TEXT, MessageData, MessageKind, ToolStatus};
use crate::owner::{self, Liveness, OwnerRow, Owners};
use crate::phase::Phase;
use crate::store::rows;
use crate::tools::process::{self, Leftover};

/// Claims per batch (and per write transaction).
pub const BATCH: usize = 1000;

/// The claims one batch takes: [`BATCH`]. A build with failpoints (the fault
/// campaign's) reads `STEWARD_RECOVERY_BATCH` too, so that a small fixture crosses
/// batch boundaries (`recovery.between_batches`).
fn batch() -> usize {
    #[cfg(feature = "failpoints")]
    if let Some(n) = std::env::var("STEWARD_RECOVERY_BATCH")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    BATCH
}
/// How far beyond a lease an `expires_at` may lie before the clock is deemed to have
/// gone backwards.
pub const CLOCK_SLACK_MS: i64 = 10_000;
/// Consecutive recoveries of a session, without a step ending normally in between,
/// after which its wake is parked for the user (protocol §5.8).
pub const CRASH_LOOP_LIMIT: i64 = 3;
pub const CRASH_LOOP_ERROR: &str =
    "Execution was interrupted repeatedly and will not be resumed automatically.";

/// The time, read when asked: a pass asks right after its write lock is taken, so a
/// wait for the lock can never make it judge expiry (or write a lease) by an earlier
/// time.
pub type Now<'a> = &'a dyn Fn() -> i64;

/// Who recovers, and how.
#[derive(Debug, Clone)]
pub struct Params {
    /// The recovering owner.
    pub owner_id: String,
    /// Where owner lock files live (the death probe, protocol §4.11).
    pub owners: Owners,
    pub lease_ms: i64,
    pub slack_ms: i64,
    /// Leftover process groups this process killed whose report has not committed
    /// yet; shared by the passes of one recoverer.
    pub killed: Killed,
}

/// Leftover tool process groups this process killed, by execution, whose report
/// ("recovery stopped them") has not committed: the commit failed after the kill (a
/// full disk). The next attempt finds them gone and reports them from here, so the
/// fact is not lost while this process lives.
#[derive(Debug, Clone, Default)]
pub struct Killed(Arc<Mutex<HashMap<String, Vec<StoppedProcess>>>>);

impl Killed {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<StoppedProcess>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The leftover process groups one transaction reports as stopped. They are found
/// while its rows are written and killed only just before it commits, once its pages
/// are written out ([`Stops::kill_before_commit`]): a full disk then fails the
/// transaction before anything is killed, and recovery never records "recovery
/// stopped them" for processes it did not stop, nor stops processes without
/// recording it — but for a commit that fails after the kill, which [`Killed`]
/// remembers.
pub(crate) struct Stops {
    killed: Killed,
    /// Found running: (execution, what the report says, the group to kill).
    found: Vec<(String, StoppedProcess, process::LeftoverGroup)>,
    /// Executions whose report this transaction carries.
    reported: Vec<String>,
}

impl Stops {
    pub(crate) fn new(killed: Killed) -> Stops {
        Stops {
            killed,
            found: Vec::new(),
            reported: Vec::new(),
        }
    }

    /// A point to go back to when a row rolls back ([`Stops::rollback_to`]).
    fn mark(&self) -> (usize, usize) {
        (self.found.len(), self.reported.len())
    }

    /// Forgets what rows after `mark` found: they rolled back, nothing of theirs
    /// is killed or reported.
    fn rollback_to(&mut self, mark: (usize, usize)) {
        self.found.truncate(mark.0);
        self.reported.truncate(mark.1);
    }

    /// The assistant's running tools whose process groups provably still run (to
    /// be killed before the commit) or were killed by an earlier attempt of this
    /// process: what the report of `execution_id` says recovery stopped.
    pub(crate) fn find(
        &mut self,
        execution_id: &str,
        assistant: Option<&crate::projection::MessageRow>,
    ) -> Vec<StoppedProcess> {
        let Some(MessageData::Assistant(a)) = assistant.map(|m| &m.data) else {
            return Vec::new();
        };
        let earlier = self
            .killed
            .lock()
            .get(execution_id)
            .cloned()
            .unwrap_or_default();
        let mut stopped = Vec::new();
        for tool in a.tools() {
            if tool.state.status != ToolStatus::Running {
                continue;
            }
            let Some(identity) = &tool.state.process else {
                continue;
            };
            let report = StoppedProcess {
                call_id: tool.call_id.clone(),
                pid: identity.pid,
                pgid: identity.pgid,
            };
            match process::find_leftover(identity) {
                Ok(group) => {
                    self.found
                        .push((execution_id.to_string(), report.clone(), group));
                    stopped.push(report);
                }
                Err(Leftover::Gone) if earlier.contains(&report) => stopped.push(report),
                Err(Leftover::Reused) => {
                    tracing::info!(call = %tool.call_id, pid = identity.pid, "tool pid was reused: not signalled");
                }
                Err(_) => {}
            }
        }
        self.reported.push(execution_id.to_string());
        stopped
    }

    /// Writes the transaction's pages out, then kills what it found: called right
    /// before the commit. A write that fails (a full disk) fails here, before any
    /// process is signalled.
    pub(crate) fn kill_before_commit(&mut self, conn: &Connection) -> Result<()> {
        if self.found.is_empty() {
            return Ok(());
        }
        conn.cache_flush()?;
        let mut killed = self.killed.lock();
        for (execution, report, group) in self.found.drain(..) {
            if group.kill() == Leftover::Stopped {
                tracing::warn!(call = %report.call_id, pgid = report.pgid, "stopped a leftover tool process group");
            }
            let entry = killed.entry(execution).or_default();
            if !entry.contains(&report) {
                entry.push(report);
            }
        }
        Ok(())
    }

    /// The transaction committed: what it reported needs no remembering.
    pub(crate) fn committed(self) {
        let mut killed = self.killed.lock();
        for execution in &self.reported {
            killed.remove(execution);
        }
    }
}
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recovered {
    pub execution_id: String,
    pub session_id: String,
    pub phase: Phase,
    pub assistant_message_id: Option<String>,
    /// Tool process groups that were still running and were stopped.
    pub stopped_processes: Vec<StoppedProcess>,
    /// The wake was parked (crash loop) instead of left pending.
    pub parked: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoppedProcess {
    pub call_id: String,
    pub pid: i32,
    pub pgid: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuarantinedRow {
    pub execution_id: String,
    pub session_id: String,
    pub reason: String,
    /// Tool process groups the claim's dead owner left running, stopped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stopped_processes: Vec<StoppedProcess>,
}

/// What a pass did (`recover --json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    pub scanned: usize,
    pub recovered: Vec<Recovered>,
    pub discarded_safe: usize,
    /// Claims whose execution wrote nothing at all (it died between acquiring the
    /// claim and promoting an input): nothing to reconcile, discarded.
    pub discarded_empty: usize,
    pub superseded: usize,
    pub skipped_live: usize,
    pub quarantined: Vec<QuarantinedRow>,
    pub wakes: WakeReport,
    pub batches: usize,
    /// Owners proven dead by their lock (their claims were expired at once).
    pub dead_owners: Vec<String>,
    pub duration_ms: u64,
}

impl RecoveryReport {
    /// The claims this pass took one way or another (recovered, quarantined,
    /// discarded, superseded).
    pub fn moved(&self) -> usize {
        self.recovered.len()
            + self.quarantined.len()
            + self.discarded_safe
            + self.discarded_empty
            + self.superseded
    }

    /// Adds what a later pass of the same process did: its rows join these, and
    /// what it still left to a live owner replaces what the earlier pass left. The
    /// claims the earlier pass skipped as live are scanned again by the later one:
    /// they count once in `scanned`.
    pub fn absorb(&mut self, later: RecoveryReport) {
        self.scanned = self.scanned.saturating_sub(self.skipped_live) + later.scanned;
        self.recovered.extend(later.recovered);
        self.discarded_safe += later.discarded_safe;
        self.discarded_empty += later.discarded_empty;
        self.superseded += later.superseded;
        self.skipped_live = later.skipped_live;
        self.quarantined.extend(later.quarantined);
        self.batches += later.batches;
        for owner in later.dead_owners {
            if !self.dead_owners.contains(&owner) {
                self.dead_owners.push(owner);
            }
        }
        self.duration_ms += later.duration_ms;
    }
}

/// Where a pass stands between batches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cursor {
    last: Option<(Value, String)>,
    pub done: bool,
}

/// Probes every other owner; a provably dead one has its live claims expired now.
/// Returns the dead owners.
pub fn expire_dead_owners(
    tx: &Transaction<'_>,
    me: &str,
    owners: &Owners,
    now_ms: i64,
) -> Result<Vec<OwnerRow>> {
    let mut dead = Vec::new();
    for owner in owner::all(tx)? {
        if owner.id != me && owner::probe(owners, &owner) == Liveness::Dead {
            owner::expire_claims_of_dead(tx, &owner.id, now_ms)?;
            dead.push(owner);
        }
    }
    Ok(dead)
}

/// Removes the owners that hold no claim any more and are gone — proven dead, or
/// of another machine or boot — with their lock files; never `me`.
pub fn forget_dead_owners(
    tx: &Transaction<'_>,
    owners: &Owners,
    dead: &[OwnerRow],
    me: &str,
) -> Result<()> {
    for owner in dead {
        owner::forget_dead(tx, owners, owner)?;
    }
    for owner in owner::all(tx)? {
        owner::forget_elsewhere(tx, owners, &owner, me)?;
    }
    Ok(())
}

/// The next batch of claims recovery looks at: expired, or with an `expires_at` that
/// is not an integer or lies beyond a lease plus slack; never quarantined ones.
fn scan(tx: &Transaction<'_>, p: &Params, now_ms: i64, cursor: &Cursor) -> Result<Vec<ClaimRow>> {
    let filter = "recovery_error IS NULL
        AND (typeof(expires_at) != 'integer' OR expires_at <= ?1 OR expires_at > ?1 + ?2 + ?3)";
    let rows = match &cursor.last {
        None => {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {CLAIM_COLUMNS} FROM session_execution WHERE {filter}
                 ORDER BY time_created, id LIMIT {}",
                batch()
            ))?;
            stmt.query_map(params![now_ms, p.lease_ms, p.slack_ms], claim_row)?
                .collect::<Result<Vec<_>, _>>()?
        }
        Some((time, id)) => {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {CLAIM_COLUMNS} FROM session_execution WHERE {filter}
                 AND (time_created, id) > (?4, ?5)
                 ORDER BY time_created, id LIMIT {}",
                batch()
            ))?;
            stmt.query_map(params![now_ms, p.lease_ms, p.slack_ms, time, id], claim_row)?
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    Ok(rows)
}

/// Recovers the next batch in one write transaction. Call until `cursor.done`.
///
/// The batch first runs without savepoints; a row failing unexpectedly (rather than
/// being quarantined by decision) rolls the attempt back, and the batch runs again
/// with a savepoint per row, so that the failing row rolls back alone and is
/// quarantined while every other row is recovered. Savepoints copy each page a row
/// touches, so paying for them only when a row fails keeps a pass fast.
fn recover_batch(
    conn: &mut Connection,
    p: &Params,
    now: Now<'_>,
    cursor: &mut Cursor,
    report: &mut RecoveryReport,
    committed: &mut Vec<EventRecord>,
) -> Result<()> {
    let (batch, outcomes) = match attempt(conn, p, now, cursor, Isolation::Batch)? {
        Some(done) => done,
        None => attempt(conn, p, now, cursor, Isolation::PerRow)?
            .expect("a per-row attempt always completes"),
    };
    report.scanned += batch.len();
    report.batches += 1;
    for (row, outcome) in batch.iter().zip(outcomes) {
        outcome.record(row, report, committed);
    }
    cursor.done = batch.len() < self::batch();
    if let Some(last) = batch.last() {
        cursor.last = Some((last.time_created.clone(), last.id.clone()));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isolation {
    /// One transaction, no savepoints: gives up (rolls back) on the first failing row.
    Batch,
    /// A savepoint per row: a failing row rolls back alone and is quarantined.
    PerRow,
}

/// One attempt at a batch; `None` when a row failed under [`Isolation::Batch`] and
/// everything was rolled back. A failing store (a full disk, I/O) is no row's fault:
/// the attempt stops with it, nothing of the batch is written, nothing is
/// quarantined for it, and no process is killed ([`crate::store::row_failure`]).
fn attempt(
    conn: &mut Connection,
    p: &Params,
    now: Now<'_>,
    cursor: &Cursor,
    isolation: Isolation,
) -> Result<Option<(Vec<ClaimRow>, Vec<RowOutcome>)>> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let now_ms = now();
    let batch = scan(&tx, p, now_ms, cursor)?;
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut stops = Stops::new(p.killed.clone());
    for row in &batch {
        if isolation == Isolation::PerRow {
            tx.prepare_cached("SAVEPOINT recovery_row")?.execute([])?;
        }
        let mark = stops.mark();
        match recover_row(&tx, row, p, now_ms, &mut stops) {
            Ok(outcome) => {
                if isolation == Isolation::PerRow {
                    tx.prepare_cached("RELEASE recovery_row")?.execute([])?;
                }
                outcomes.push(outcome);
            }
            Err(error) => {
                let reason = crate::store::row_failure(&tx, error)?;
                stops.rollback_to(mark);
                if isolation == Isolation::Batch {
                    tracing::warn!(execution = %row.id, %reason, "a claim failed to recover; isolating its batch");
                    return Ok(None);
                }
                tx.prepare_cached("ROLLBACK TO recovery_row")?.execute([])?;
                tx.prepare_cached("RELEASE recovery_row")?.execute([])?;
                let reason = format!("recovery failed: {reason}");
                tracing::warn!(execution = %row.id, %reason, "quarantining a claim");
                outcomes.push(match quarantine_row(&tx, row, p, now_ms, &reason)? {
                    // Its dead owner's tool processes must not outlive it either
                    // (protocol §5.10).
                    true => {
                        let assistant = readable_assistant(&tx, row);
                        let stopped = stops.find(&row.id, assistant.as_ref());
                        RowOutcome::Quarantined(reason, stopped)
                    }
                    false => RowOutcome::Skipped,
                });
            }
        }
    }
    stops.kill_before_commit(&tx)?;
    tx.commit()?;
    stops.committed();
    Ok(Some((batch, outcomes)))
}

/// One recovery pass, step by step: [`Pass::begin`] (the owner-death probe), then
/// [`Pass::next_batch`] until [`Pass::is_done`], then [`Pass::finish`]. The engine runs
/// each step as its own job on the writer, so heartbeats and commits interleave with
/// a long pass, and reads the clock inside each job: a batch judges expiry by the
/// time it runs, so a claim renewed while an earlier batch ran is neither taken for
/// expired nor for "far ahead" (the clock went back). [`pass`] runs every step on one
/// connection at one time.
#[derive(Debug)]
pub struct Pass {
    params: Params,
    started: Instant,
    dead: Vec<OwnerRow>,
    cursor: Cursor,
    report: RecoveryReport,
    /// Events the committed batches appended, not yet taken.
    committed: Vec<EventRecord>,
}

impl Pass {
    /// Probes the other owners; a provably dead one's claims expire now.
    pub fn begin(conn: &mut Connection, params: Params, now: Now<'_>) -> Result<Pass> {
        let started = Instant::now();
        let dead = crate::store::write(conn, |tx| {
            expire_dead_owners(tx, &params.owner_id, &params.owners, now())
        })?;
        let report = RecoveryReport {
            dead_owners: dead.iter().map(|o| o.id.clone()).collect(),
            ..RecoveryReport::default()
        };
        Ok(Pass {
            params,
            started,
            dead,
            cursor: Cursor::default(),
            report,
            committed: Vec::new(),
        })
    }

    pub fn is_done(&self) -> bool {
        self.cursor.done
    }

    /// Recovers the next batch (one write transaction) as of `now()`, read once the
    /// transaction holds the write lock.
    pub fn next_batch(&mut self, conn: &mut Connection, now: Now<'_>) -> Result<()> {
        recover_batch(
            conn,
            &self.params,
            now,
            &mut self.cursor,
            &mut self.report,
            &mut self.committed,
        )?;
        if !self.cursor.done {
            crate::failpoint!("recovery.between_batches");
        }
        Ok(())
    }

    /// The events the batches committed so far appended (for listeners), once.
    pub fn take_committed(&mut self) -> Vec<EventRecord> {
        std::mem::take(&mut self.committed)
    }

    /// Forgets the dead owners that hold nothing any more; returns the report.
    pub fn finish(mut self, conn: &mut Connection) -> Result<RecoveryReport> {
        if !self.report.recovered.is_empty() {
            crate::failpoint!("recovery.after_commit");
        }
        crate::store::write(conn, |tx| {
            forget_dead_owners(tx, &self.params.owners, &self.dead, &self.params.owner_id)
        })?;
        self.report.duration_ms = self.started.elapsed().as_millis() as u64;
        Ok(self.report)
    }
}

/// A whole pass on one connection (tests, benchmarks, helpers).
pub fn pass(conn: &mut Connection, p: &Params, now_ms: i64) -> Result<RecoveryReport> {
    let mut pass = Pass::begin(conn, p.clone(), &|| now_ms)?;
    while !pass.is_done() {
        pass.next_batch(conn, &|| now_ms)?;
    }
    pass.finish(conn)
}

#[derive(Debug)]
enum RowOutcome {
    Skipped,
    Quarantined(String, Vec<StoppedProcess>),
    DiscardedSafe,
    DiscardedEmpty,
    Superseded,
    Recovered(Recovered, Vec<EventRecord>),
}

impl RowOutcome {
    fn record(self, row: &ClaimRow, report: &mut RecoveryReport, committed: &mut Vec<EventRecord>) {
        match self {
            RowOutcome::Skipped => report.skipped_live += 1,
            RowOutcome::Quarantined(reason, stopped) => report.quarantined.push(QuarantinedRow {
                execution_id: row.id.clone(),
                session_id: row.session_id.clone(),
                reason,
                stopped_processes: stopped,
            }),
            RowOutcome::DiscardedSafe => report.discarded_safe += 1,
            RowOutcome::DiscardedEmpty => report.discarded_empty += 1,
            RowOutcome::Superseded => report.superseded += 1,
            RowOutcome::Recovered(r, events) => {
                report.recovered.push(r);
                committed.extend(events);
            }
        }
    }
}

/// What decoding a taken-over claim found.
enum Decoded {
    Safe,
    /// The execution wrote no event: it left nothing half done.
    Empty,
    Superseded,
    Reconcile {
        phase: Phase,
        session: Box<crate::projection::SessionRow>,
        assistant: Option<Box<crate::projection::MessageRow>>,
    },
}

fn recover_row(
    tx: &Transaction<'_>,
    row: &ClaimRow,
    p: &Params,
    now_ms: i64,
    stops: &mut Stops,
) -> Result<RowOutcome> {
    // A claim beyond a lease ahead (the clock went back) of an owner that provably
    // lives is a live lease: its next heartbeat brings it back in line.
    let far_ahead = row
        .expires_at()
        .is_some_and(|at| at > now_ms + p.lease_ms + p.slack_ms);
    if far_ahead && owner_lives(tx, &p.owners, &row.owner_id)? {
        return Ok(RowOutcome::Skipped);
    }
    let Some(claim) = claim::takeover(tx, row, &p.owner_id, now_ms, p.lease_ms, p.slack_ms)? else {
        return Ok(RowOutcome::Skipped);
    };
    crate::failpoint!("recovery.after_takeover");
    match decode(tx, row, p, now_ms)? {
        Err(reason) => {
            claim::quarantine(tx, &claim, &reason, now_ms)?;
            let assistant = readable_assistant(tx, row);
            let stopped = stops.find(&claim.execution_id, assistant.as_ref());
            Ok(RowOutcome::Quarantined(reason, stopped))
        }
        Ok(Decoded::Safe) => {
            claim::delete_exact(tx, &claim)?;
            Ok(RowOutcome::DiscardedSafe)
        }
        Ok(Decoded::Empty) => {
            claim::delete_exact(tx, &claim)?;
            Ok(RowOutcome::DiscardedEmpty)
        }
        Ok(Decoded::Superseded) => {
            claim::delete_exact(tx, &claim)?;
            Ok(RowOutcome::Superseded)
        }
        Ok(Decoded::Reconcile {
            phase,
            session,
            assistant,
        }) => {
            let stopped = stops.find(&claim.execution_id, assistant.as_deref());
            // Its processes outlived an owner that is stopped or paused, not dead:
            // what the tool error says (protocol §5.4).
            let owner_alive = !stopped.is_empty() && owner_lives(tx, &p.owners, &row.owner_id)?;
            let mut read = crate::projection::Projection::default();
            read.session = Some(*session);
            let leftovers = Leftovers {
                stopped,
                owner_alive,
            };
            reconcile(tx, &claim, phase, assistant, read, leftovers, now_ms)
                .map(|(recovered, events)| RowOutcome::Recovered(recovered, events))
        }
    }
}

/// The claim's assistant when it can be read and belongs to the claim's session
/// (used only to find processes to stop; never written on a quarantined row's
/// behalf).
pub(crate) fn readable_assistant(
    conn: &Connection,
    row: &ClaimRow,
) -> Option<crate::projection::MessageRow> {
    let id = row.assistant_message_id.as_deref()?;
    let message = rows::message(conn, id).ok()??;
    (message.session_id == row.session_id && message.data.kind() == MessageKind::Assistant)
        .then_some(message)
}

/// Decodes what was read before anything is written on its behalf. `Ok(Err(reason))`
/// means quarantine; `Err` is a store failure.
fn decode(
    tx: &Transaction<'_>,
    row: &ClaimRow,
    p: &Params,
    now_ms: i64,
) -> Result<Result<Decoded, String>> {
    let Some(phase) = row.phase() else {
        return Ok(Err(format!("unknown phase {:?}", row.phase_text())));
    };
    let Some(expires_at) = row.expires_at() else {
        return Ok(Err(format!(
            "expires_at is not an integer ({})",
            claim::text(row.expires_at.clone())
        )));
    };
    if expires_at > now_ms + p.lease_ms + p.slack_ms {
        return Ok(Err(format!(
            "expires_at lies {} ms ahead, beyond a lease: the clock went backwards and the owner is not proven dead",
            expires_at - now_ms
        )));
    }
    if row.epoch().is_none() || claim::integer(&row.assistant_seq).is_none() {
        return Ok(Err("epoch or assistant_seq is not an integer".into()));
    }
    let Some(session) = rows::session(tx, &row.session_id)? else {
        return Ok(Err(format!("session {} does not exist", row.session_id)));
    };
    if phase == Phase::Safe {
        return Ok(Ok(Decoded::Safe));
    }
    let assistant = match &row.assistant_message_id {
        None => None,
        Some(id) => match rows::message(tx, id) {
            Err(Error::Corrupt(reason)) => return Ok(Err(reason)),
            Err(e) => return Err(e),
            Ok(None) => return Ok(Err(format!("assistant {id} does not exist"))),
            Ok(Some(m)) if m.session_id != row.session_id => {
                return Ok(Err(format!(
                    "assistant {id} belongs to session {}, not {}",
                    m.session_id, row.session_id
                )));
            }
            Ok(Some(m)) if m.data.kind() != MessageKind::Assistant => {
                return Ok(Err(format!("message {id} is not an assistant")));
            }
            Ok(Some(m)) => Some(Box::new(m)),
        },
    };
    let latest: Option<(String, i64)> = tx
        .prepare_cached(
            "SELECT id, seq FROM session_message WHERE session_id = ?1 AND type = 'assistant'
             ORDER BY seq DESC LIMIT 1",
        )?
        .query_row([&row.session_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let snapshot = claim::integer(&row.assistant_seq).unwrap_or(-1);
    let superseded = match (&assistant, &latest) {
        (Some(a), Some((latest_id, _))) => &a.id != latest_id,
        (None, Some((_, latest_seq))) => *latest_seq > snapshot,
        (_, None) => false,
    };
    if superseded {
        return Ok(Ok(Decoded::Superseded));
    }
    // Without an assistant the execution may not have written anything: it died
    // between acquiring the claim and promoting an input. There is nothing to
    // reconcile, and the inputs and wakes it would have taken keep theirs.
    if assistant.is_none() && !wrote_events(tx, &row.session_id, &row.id)? {
        return Ok(Ok(Decoded::Empty));
    }
    Ok(Ok(Decoded::Reconcile {
        phase,
        session: Box::new(session),
        assistant,
    }))
}

/// The tool processes recovery stops for an execution, and whether their owner was
/// provably alive (stopped or paused past its lease) rather than dead.
struct Leftovers {
    stopped: Vec<StoppedProcess>,
    owner_alive: bool,
}

/// The one-transaction reconciliation of protocol §5.3 step 5.
fn reconcile(
    tx: &Transaction<'_>,
    claim: &Claim,
    phase: Phase,
    assistant: Option<Box<crate::projection::MessageRow>>,
    mut preloaded: crate::projection::Projection,
    leftovers: Leftovers,
    now_ms: i64,
) -> Result<(Recovered, Vec<EventRecord>)> {
    let Leftovers {
        stopped,
        owner_alive,
    } = leftovers;
    let execution_id = claim.execution_id.clone();
    let continuation = ids::continuation_input(&execution_id);
    let parked =
        consecutive_recoveries(tx, &claim.session_id, &claim.execution_id)? + 1 >= CRASH_LOOP_LIMIT;
    let assistant_id = assistant.as_ref().map(|a| a.id.clone());
    if let Some(a) = assistant {
        preloaded.messages.insert(a.id.clone(), *a);
    }
    let mut f = Fenced::after_takeover(tx, claim, now_ms, phase);
    let events = f.append_all_onto(
        vec![
            Event::StepRecovered {
                execution_id: execution_id.clone(),
                assistant_message_id: assistant_id.clone(),
                phase,
                stopped_tools: stopped.iter().map(|s| s.call_id.clone()).collect(),
                owner_alive,
            },
            Event::InputAdmitted {
                content: Vec::new(),
                input_id: continuation.clone(),
                prompt: CONTINUATION_TEXT.into(),
                delivery: Delivery::Queue,
                wake_pending: false,
                continuation_of: Some(execution_id.clone()),
            },
        ],
        preloaded,
    )?;
    tx.prepare_cached(
        "INSERT INTO session_recovery (execution_id, session_id, assistant_message_id,
             continuation_message_id, phase, wake_pending, wake_attempts, recovery_error, time_created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8)",
    )?
    .execute(params![
        execution_id,
        claim.session_id,
        assistant_id.as_deref(),
        continuation,
        phase.as_str(),
        !parked as i64,
        parked.then_some(CRASH_LOOP_ERROR),
        now_ms
    ])?;
    claim::delete_exact(tx, claim)?;
    let recovered = Recovered {
        execution_id,
        session_id: claim.session_id.clone(),
        phase,
        assistant_message_id: assistant_id,
        stopped_processes: stopped,
        parked,
    };
    Ok((recovered, events))
}

/// Whether `owner_id` is provably alive: of this boot, holding its lock.
fn owner_lives(tx: &Transaction<'_>, owners: &Owners, owner_id: &str) -> Result<bool> {
    Ok(owner::liveness(tx, owners, owner_id)? == Liveness::Alive)
}

/// Whether any event of the session was written by this execution.
fn wrote_events(tx: &Transaction<'_>, session_id: &str, execution_id: &str) -> Result<bool> {
    Ok(tx
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM event WHERE aggregate_id = ?1 AND execution_id = ?2)",
        )?
        .query_row(params![session_id, execution_id], |r| r.get(0))?)
}

/// Recoveries of a session since its last progress (protocol §5.8). Progress is a
/// step that ended with a finish other than `tool-calls` (the turn completed), or an
/// execution that started a second step — which it only does once every tool of its
/// previous step has finished. A step that ends asking for tools proves nothing about
/// them, and neither does one tool finishing beside another that kills Steward, so a
/// tool that kills Steward every time is parked. The log is read from the newest
/// event back to the last progress.
fn consecutive_recoveries(
    tx: &Transaction<'_>,
    session_id: &str,
    execution_id: &str,
) -> Result<i64> {
    // When the oldest event any execution wrote is this execution's, no earlier
    // execution exists, so none was recovered: nothing to walk.
    let first_owned: Option<String> = tx
        .prepare_cached(
            "SELECT execution_id FROM event
             WHERE aggregate_id = ?1 AND execution_id IS NOT NULL ORDER BY seq LIMIT 1",
        )?
        .query_row([session_id], |r| r.get(0))
        .optional()?;
    if first_owned.is_none_or(|first| first == execution_id) {
        return Ok(0);
    }
    let mut stmt = tx.prepare_cached(
        "SELECT type, execution_id,
                CASE WHEN type = 'step.ended' THEN json_extract(data, '$.finish') END
         FROM event WHERE aggregate_id = ?1 ORDER BY seq DESC",
    )?;
    let mut rows = stmt.query([session_id])?;
    let mut recoveries = 0;
    let mut steps: HashMap<String, u32> = HashMap::new();
    while let Some(row) = rows.next()? {
        let kind: String = row.get(0)?;
        match kind.as_str() {
            "step.recovered" => recoveries += 1,
            "step.ended" => {
                let finish: Option<String> = row.get(2)?;
                if finish.as_deref() != Some("tool-calls") {
                    break;
                }
            }
            "step.started" => {
                let Some(execution) = row.get::<_, Option<String>>(1)? else {
                    continue;
                };
                let n = steps.entry(execution).or_default();
                *n += 1;
                if *n >= 2 {
                    break;
                }
            }
            _ => {}
        }
    }
    Ok(recoveries)
}

/// Quarantines a row whose recovery failed, in its own savepoint. False when the row
/// could not even be taken over (someone else holds it).
fn quarantine_row(
    tx: &Transaction<'_>,
    row: &ClaimRow,
    p: &Params,
    now_ms: i64,
    reason: &str,
) -> Result<bool> {
    tx.execute_batch("SAVEPOINT recovery_quarantine")?;
    let result = (|| -> Result<bool> {
        let Some(claim) = claim::takeover(tx, row, &p.owner_id, now_ms, p.lease_ms, p.slack_ms)?
        else {
            return Ok(false);
        };
        claim::quarantine(tx, &claim, reason, now_ms)?;
        Ok(true)
    })();
    match result {
        Ok(done) => {
            tx.execute_batch("RELEASE recovery_quarantine")?;
            Ok(done)
        }
        Err(e) => {
            // The takeover itself fails on this row: quarantine it as it is.
            let why = crate::store::row_failure(tx, e)?;
            tx.execute_batch("ROLLBACK TO recovery_quarantine; RELEASE recovery_quarantine")?;
            tracing::warn!(execution = %row.id, error = %why, "a claim cannot be taken over; quarantining it as it is");
            claim::quarantine_as_read(tx, row, reason, now_ms, p.lease_ms, p.slack_ms)
        }
    }
}

/// Every claim recovery may one day take: (session, owner, expires_at), for the
/// recovery timer. Quarantined rows and non-integer expiries are left out.
pub fn claim_expiries(conn: &Connection) -> Result<Vec<(String, String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT session_id, owner_id, expires_at FROM session_execution
         WHERE recovery_error IS NULL AND typeof(expires_at) = 'integer'",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests;
