//! Claims, leases and fences (protocol §4).
//!
//! A claim is the `session_execution` row that says "owner O runs session S as
//! execution E until `expires_at`". Every function here is a compare-and-set: a
//! guarded statement whose row count is the answer, never read-decide-write across
//! two transactions. Every durable write of an owner goes through [`Fenced`], which
//! first matches `id + session + owner + epoch + unexpired` to exactly one row inside
//! the write transaction (§4.4) and records that identity on every event.

pub mod heartbeat;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde::Serialize;

use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::events::{Event, EventRecord, Origin};
use crate::ids;
use crate::phase::{Phase, PhaseChange};
use crate::store::events::{append, append_all_onto};

/// The identity an execution writes under: the fence of protocol §4.4.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    pub execution_id: String,
    pub session_id: String,
    pub owner_id: String,
    pub epoch: i64,
}

impl Claim {
    pub fn origin(&self) -> Origin {
        Origin {
            owner_id: self.owner_id.clone(),
            execution_id: self.execution_id.clone(),
            epoch: self.epoch,
        }
    }

    fn lost(&self) -> Error {
        Error::FenceLost {
            execution_id: self.execution_id.clone(),
        }
    }
}

/// A claim row as stored, decoded without trusting it: a legacy or damaged row may
/// hold anything in any column, so values that must be checked stay raw.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRow {
    pub id: String,
    pub session_id: String,
    pub owner_id: String,
    pub epoch: Value,
    pub assistant_message_id: Option<String>,
    pub phase: Value,
    pub assistant_seq: Value,
    pub time_created: Value,
    pub expires_at: Value,
    pub recovery_error: Option<String>,
}

/// Expires one claim of `owner_id` whose execution no longer runs anywhere — its
/// owner knows, because the owner is this process and nothing runs the session
/// here (an execution that panicked) — so that recovery reconciles it now instead
/// of after its lease (protocol §4.9). Guarded by id, owner and epoch.
pub fn expire_abandoned(
    tx: &Transaction<'_>,
    row: &ClaimRow,
    owner_id: &str,
    now_ms: i64,
) -> Result<bool> {
    Ok(tx.execute(
        "UPDATE session_execution SET expires_at = ?4
         WHERE id = ?1 AND owner_id = ?2 AND epoch = ?3 AND recovery_error IS NULL
           AND typeof(expires_at) = 'integer' AND expires_at > ?4",
        params![row.id, owner_id, row.epoch, now_ms],
    )? == 1)
}

/// How a claim looks to a reader at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimState {
    Live,
    Expired,
    Quarantined,
}

pub(crate) const CLAIM_COLUMNS: &str = "id, session_id, owner_id, epoch, assistant_message_id, phase, \
     assistant_seq, time_created, expires_at, recovery_error";

pub(crate) fn claim_row(r: &Row<'_>) -> rusqlite::Result<ClaimRow> {
    Ok(ClaimRow {
        id: text(r.get(0)?),
        session_id: text(r.get(1)?),
        owner_id: text(r.get(2)?),
        epoch: r.get(3)?,
        assistant_message_id: r.get::<_, Value>(4).map(|v| match v {
            Value::Null => None,
            other => Some(text(other)),
        })?,
        phase: r.get(5)?,
        assistant_seq: r.get(6)?,
        time_created: r.get(7)?,
        expires_at: r.get(8)?,
        recovery_error: r.get::<_, Value>(9).map(|v| match v {
            Value::Null => None,
            other => Some(text(other)),
        })?,
    })
}

/// Any stored value as text, for columns that should hold text.
pub(crate) fn text(v: Value) -> String {
    match v {
        Value::Text(s) => s,
        Value::Integer(i) => i.to_string(),
        Value::Real(f) => f.to_string(),
        Value::Blob(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::Null => String::new(),
    }
}

/// A value as an integer, only when it is stored as one.
pub(crate) fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(i) => Some(*i),
        _ => None,
    }
}

impl ClaimRow {
    /// The phase, when it is one of the three protocol §4.6 names.
    pub fn phase(&self) -> Option<Phase> {
        match &self.phase {
            Value::Text(s) => Phase::parse(s),
            _ => None,
        }
    }

    pub fn phase_text(&self) -> String {
        text(self.phase.clone())
    }

    pub fn expires_at(&self) -> Option<i64> {
        integer(&self.expires_at)
    }

    pub fn epoch(&self) -> Option<i64> {
        integer(&self.epoch)
    }

    pub fn state(&self, now_ms: i64) -> ClaimState {
        if self.recovery_error.is_some() {
            ClaimState::Quarantined
        } else if self.expires_at().is_some_and(|at| at > now_ms) {
            ClaimState::Live
        } else {
            ClaimState::Expired
        }
    }
}

/// The claim of a session, if any.
pub fn for_session(conn: &Connection, session_id: &str) -> Result<Option<ClaimRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CLAIM_COLUMNS} FROM session_execution WHERE session_id = ?1"
    ))?;
    Ok(stmt.query_row([session_id], claim_row).optional()?)
}

/// A claim by execution id, if it still exists.
pub fn get(conn: &Connection, execution_id: &str) -> Result<Option<ClaimRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CLAIM_COLUMNS} FROM session_execution WHERE id = ?1"
    ))?;
    Ok(stmt.query_row([execution_id], claim_row).optional()?)
}

/// What acquisition found (protocol §4.3).
#[derive(Debug, Clone, PartialEq)]
pub enum Acquire {
    /// A new claim in phase `ready`.
    Acquired(Claim),
    /// Another live claim holds the session (possibly this owner's own, which it
    /// never re-enters: invariant 5).
    Busy(ClaimRow),
    /// The existing claim expired: recovery must reconcile it first (invariant 4).
    Expired(ClaimRow),
    /// The existing claim is quarantined; it waits for the user.
    Quarantined(ClaimRow),
}

/// Tries to claim `session_id` for `owner_id`: `INSERT ... ON CONFLICT DO NOTHING`,
/// snapshotting the session's latest assistant seq. Never overwrites or deletes an
/// existing claim, live or expired.
pub fn acquire(
    tx: &Transaction<'_>,
    session_id: &str,
    owner_id: &str,
    now_ms: i64,
    lease_ms: i64,
) -> Result<Acquire> {
    let execution_id = ids::new(ids::EXECUTION, now_ms);
    let inserted = tx
        .prepare_cached(
            "INSERT INTO session_execution
                 (id, session_id, owner_id, epoch, phase, assistant_seq, time_created, expires_at)
             VALUES (?1, ?2, ?3, 0, 'ready',
                 (SELECT COALESCE(MAX(seq), -1) FROM session_message
                  WHERE session_id = ?2 AND type = 'assistant'),
                 ?4, ?5)
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            execution_id,
            session_id,
            owner_id,
            now_ms,
            now_ms + lease_ms
        ])?;
    if inserted == 1 {
        return Ok(Acquire::Acquired(Claim {
            execution_id,
            session_id: session_id.to_string(),
            owner_id: owner_id.to_string(),
            epoch: 0,
        }));
    }
    let existing = for_session(tx, session_id)?.ok_or_else(|| {
        Error::Invalid(format!(
            "claim conflict on session {session_id} with no claim"
        ))
    })?;
    Ok(match existing.state(now_ms) {
        ClaimState::Live => Acquire::Busy(existing),
        ClaimState::Expired => Acquire::Expired(existing),
        ClaimState::Quarantined => Acquire::Quarantined(existing),
    })
}

/// Heartbeat renewal (protocol §4.2). Zero rows means ownership is lost: `FenceLost`.
/// Never revives an expired claim (invariant 6).
pub fn renew(conn: &Connection, claim: &Claim, now_ms: i64, lease_ms: i64) -> Result<()> {
    let n = conn
        .prepare_cached(
            "UPDATE session_execution SET expires_at = ?5 + ?6
             WHERE id = ?1 AND session_id = ?2 AND owner_id = ?3 AND epoch = ?4 AND expires_at > ?5",
        )?
        .execute(params![
            claim.execution_id,
            claim.session_id,
            claim.owner_id,
            claim.epoch,
            now_ms,
            lease_ms
        ])?;
    if n == 1 { Ok(()) } else { Err(claim.lost()) }
}

/// Whether a claim was cleared (protocol §4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleared {
    /// The claim is gone; the execution is over.
    Done,
    /// An input is waiting for a wake: the execution must go on and promote it.
    WakePending,
}

/// A write transaction that has passed the fence (protocol §4.4). The only way an owner
/// writes: the check runs first inside `BEGIN IMMEDIATE`, so it holds for the whole
/// transaction; every statement after it still names the exact claim, and events
/// carry the claim's owner, execution and epoch.
#[derive(Debug)]
pub struct Fenced<'a, 'c> {
    tx: &'a Transaction<'c>,
    claim: &'a Claim,
    now_ms: i64,
    phase: Phase,
    appended: Vec<EventRecord>,
}

impl<'a, 'c> Fenced<'a, 'c> {
    /// The fence: exactly one row must match, or `FenceLost`.
    pub fn check(tx: &'a Transaction<'c>, claim: &'a Claim, now_ms: i64) -> Result<Self> {
        let phase: Option<String> = tx
            .prepare_cached(
                "SELECT phase FROM session_execution
                 WHERE id = ?1 AND session_id = ?2 AND owner_id = ?3 AND epoch = ?4 AND expires_at > ?5",
            )?
            .query_row(
                params![
                    claim.execution_id,
                    claim.session_id,
                    claim.owner_id,
                    claim.epoch,
                    now_ms
                ],
                |r| r.get(0),
            )
            .optional()?;
        let phase = phase.ok_or_else(|| claim.lost())?;
        let phase = Phase::parse(&phase).ok_or_else(|| {
            Error::corrupt(format!("claim {} has phase {phase}", claim.execution_id))
        })?;
        Ok(Fenced {
            tx,
            claim,
            now_ms,
            phase,
            appended: Vec::new(),
        })
    }

    /// For recovery: the takeover that produced `claim` ran in this very transaction
    /// and is the compare-and-set that fences it, so no second check is needed.
    pub(crate) fn after_takeover(
        tx: &'a Transaction<'c>,
        claim: &'a Claim,
        now_ms: i64,
        phase: Phase,
    ) -> Self {
        Fenced {
            tx,
            claim,
            now_ms,
            phase,
            appended: Vec::new(),
        }
    }

    pub fn tx(&self) -> &'a Transaction<'c> {
        self.tx
    }

    /// The claim this write is fenced by.
    pub fn claim(&self) -> &'a Claim {
        self.claim
    }

    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Appends an event under this claim (owner, execution, epoch recorded).
    pub fn append(&mut self, event: Event) -> Result<EventRecord> {
        let record = append(
            self.tx,
            &self.claim.session_id,
            Some(&self.claim.origin()),
            self.now_ms,
            event,
        )?;
        self.appended.push(record.clone());
        Ok(record)
    }

    /// Appends several events under this claim; the rows they touch are read and
    /// written once.
    pub fn append_all(&mut self, events: Vec<Event>) -> Result<Vec<EventRecord>> {
        self.append_all_onto(events, crate::projection::Projection::default())
    }

    /// [`Fenced::append_all`] onto rows already read in this transaction.
    pub fn append_all_onto(
        &mut self,
        events: Vec<Event>,
        preloaded: crate::projection::Projection,
    ) -> Result<Vec<EventRecord>> {
        let records = append_all_onto(
            self.tx,
            &self.claim.session_id,
            Some(&self.claim.origin()),
            self.now_ms,
            events,
            preloaded,
        )?;
        self.appended.extend(records.iter().cloned());
        Ok(records)
    }

    /// The events appended so far in this transaction.
    pub fn take_appended(&mut self) -> Vec<EventRecord> {
        std::mem::take(&mut self.appended)
    }

    fn update_claim(&self, set: &str, value: &dyn rusqlite::ToSql) -> Result<()> {
        let c = self.claim;
        let n = self
            .tx
            .prepare_cached(&format!(
                "UPDATE session_execution SET {set} = ?5
                 WHERE id = ?1 AND session_id = ?2 AND owner_id = ?3 AND epoch = ?4"
            ))?
            .execute(params![
                c.execution_id,
                c.session_id,
                c.owner_id,
                c.epoch,
                value
            ])?;
        if n == 1 { Ok(()) } else { Err(c.lost()) }
    }

    /// Moves the phase by the one transition function (protocol §4.6).
    pub fn change_phase(&mut self, change: PhaseChange) -> Result<Phase> {
        let next = self
            .phase
            .next(change)
            .map_err(|e| Error::Invalid(format!("execution {}: {e}", self.claim.execution_id)))?;
        if next != self.phase {
            self.update_claim("phase", &next.as_str())?;
            self.phase = next;
        }
        Ok(next)
    }

    /// Names the assistant the execution is working on (recovery reconciles it).
    pub fn set_assistant(&self, message_id: &str) -> Result<()> {
        self.update_claim("assistant_message_id", &message_id)
    }

    /// Forgets the assistant (e.g. while compacting) and snapshots the latest
    /// assistant seq, so recovery neither touches a finished assistant nor mistakes
    /// the execution for a superseded one.
    pub fn unset_assistant(&self) -> Result<()> {
        self.update_claim("assistant_message_id", &Option::<String>::None)?;
        let latest: i64 = self.tx.query_row(
            "SELECT COALESCE(MAX(seq), -1) FROM session_message WHERE session_id = ?1 AND type = 'assistant'",
            [&self.claim.session_id],
            |r| r.get(0),
        )?;
        self.update_claim("assistant_seq", &latest)
    }

    /// Deletes the exact claim, unless an input of the session waits for a wake
    /// (protocol §4.7). Must be in the same transaction as the execution's last event.
    pub fn clear(&mut self) -> Result<Cleared> {
        let c = self.claim;
        let n = self
            .tx
            .prepare_cached(
                "DELETE FROM session_execution
                 WHERE id = ?1 AND session_id = ?2 AND owner_id = ?3 AND epoch = ?4
                   AND NOT EXISTS (SELECT 1 FROM session_input
                       WHERE session_id = ?2 AND wake_pending = 1 AND promoted_seq IS NULL)",
            )?
            .execute(params![c.execution_id, c.session_id, c.owner_id, c.epoch])?;
        Ok(if n == 1 {
            Cleared::Done
        } else {
            Cleared::WakePending
        })
    }

    /// User cancellation in one transaction (protocol §4.8): `step.interrupted` (which
    /// errors the assistant and its open tools) and the exact claim deleted.
    pub fn cancel(&mut self, message_id: Option<&str>) -> Result<EventRecord> {
        let record = self.append(Event::StepInterrupted {
            execution_id: self.claim.execution_id.clone(),
            message_id: message_id.map(str::to_string),
        })?;
        delete_exact(self.tx, self.claim)?;
        Ok(record)
    }
}

/// Deletes exactly this claim (id, session, owner, epoch): never by owner or
/// session alone, so it can never delete a successor's claim (invariant 12).
pub fn delete_exact(tx: &Transaction<'_>, claim: &Claim) -> Result<()> {
    let n = tx
        .prepare_cached(
            "DELETE FROM session_execution
             WHERE id = ?1 AND session_id = ?2 AND owner_id = ?3 AND epoch = ?4",
        )?
        .execute(params![
            claim.execution_id,
            claim.session_id,
            claim.owner_id,
            claim.epoch
        ])?;
    if n == 1 { Ok(()) } else { Err(claim.lost()) }
}

/// Quarantines a claim recovery could not even take over (its takeover fails on the
/// row itself — an epoch at its largest value cannot grow): `recovery_error` and
/// `expires_at = now` are set under the takeover's own guard — the row exactly as
/// read, and expired — without touching its owner or epoch. False when the row
/// changed since it was read (someone else took it).
pub fn quarantine_as_read(
    tx: &Transaction<'_>,
    row: &ClaimRow,
    reason: &str,
    now_ms: i64,
    lease_ms: i64,
    slack_ms: i64,
) -> Result<bool> {
    let changed = tx
        .prepare_cached(
            "UPDATE session_execution SET recovery_error = ?5, expires_at = ?6
             WHERE id = ?1 AND session_id = ?2 AND owner_id = ?3 AND epoch = ?4
               AND recovery_error IS NULL
               AND (typeof(expires_at) != 'integer' OR expires_at <= ?6 OR expires_at > ?6 + ?7 + ?8)",
        )?
        .execute(params![
            row.id,
            row.session_id,
            row.owner_id,
            row.epoch,
            reason,
            now_ms,
            lease_ms,
            slack_ms
        ])?;
    Ok(changed == 1)
}

/// Takeover for recovery (protocol §5.3 step 1): the claim passes to `me` with
/// `epoch + 1`, but only if it is still exactly as read and expired (or its expiry is
/// not an integer, or lies further ahead than `lease + slack`: the clock went back).
/// `None`: someone else took it, or it was renewed.
pub fn takeover(
    tx: &Transaction<'_>,
    row: &ClaimRow,
    me: &str,
    now_ms: i64,
    lease_ms: i64,
    slack_ms: i64,
) -> Result<Option<Claim>> {
    const GUARD: &str = "WHERE id = ?1 AND session_id = ?2 AND owner_id = ?3 AND epoch = ?4
           AND recovery_error IS NULL
           AND (typeof(expires_at) != 'integer' OR expires_at <= ?6 OR expires_at > ?6 + ?7 + ?8)";
    let params = params![
        row.id,
        row.session_id,
        row.owner_id,
        row.epoch,
        me,
        now_ms,
        lease_ms,
        slack_ms
    ];
    let epoch = match row.epoch() {
        // The usual case: the new epoch is known, so no RETURNING is needed.
        Some(prior) => {
            let changed = tx
                .prepare_cached(&format!(
                    "UPDATE session_execution SET owner_id = ?5, epoch = epoch + 1, expires_at = ?6 + ?7 {GUARD}"
                ))?
                .execute(params)?;
            (changed == 1).then_some(prior + 1)
        }
        // A damaged row (non-integer epoch): ask SQLite what `epoch + 1` became.
        None => tx
            .prepare_cached(&format!(
                "UPDATE session_execution SET owner_id = ?5, epoch = epoch + 1, expires_at = ?6 + ?7 {GUARD}
                 RETURNING epoch"
            ))?
            .query_row(params, |r| r.get::<_, Value>(0))
            .optional()?
            .map(|v| integer(&v).unwrap_or_default()),
    };
    Ok(epoch.map(|epoch| Claim {
        execution_id: row.id.clone(),
        session_id: row.session_id.clone(),
        owner_id: me.to_string(),
        epoch,
    }))
}

/// Marks a taken-over claim quarantined (protocol §5.3 step 2): the row stays, blocking
/// its session, with a one-line reason and `expires_at = now`. Leaves `phase` alone,
/// so a row with an invalid phase can still be marked.
pub fn quarantine(tx: &Transaction<'_>, claim: &Claim, reason: &str, now_ms: i64) -> Result<()> {
    let n = tx
        .prepare_cached(
            "UPDATE session_execution SET recovery_error = ?5, expires_at = ?6
             WHERE id = ?1 AND session_id = ?2 AND owner_id = ?3 AND epoch = ?4",
        )?
        .execute(params![
            claim.execution_id,
            claim.session_id,
            claim.owner_id,
            claim.epoch,
            reason,
            now_ms
        ])?;
    if n == 1 { Ok(()) } else { Err(claim.lost()) }
}

/// The owner's own deadline (protocol §4.4a): the monotonic instant of the last
/// successful renewal (read before the renewing statement) plus the lease minus a
/// margin. Past it the owner dispatches nothing, even before the database says no.
#[derive(Debug)]
pub struct SelfFence {
    clock: SharedClock,
    lease: Duration,
    margin: Duration,
    deadline_ns: AtomicU64,
}

impl SelfFence {
    /// `renewed_at` is the monotonic reading taken before the claim was written.
    pub fn new(clock: SharedClock, lease: Duration, renewed_at: Duration) -> SelfFence {
        let fence = SelfFence {
            clock,
            lease,
            margin: lease / 5,
            deadline_ns: AtomicU64::new(0),
        };
        fence.renewed(renewed_at);
        fence
    }

    /// Records a successful renewal whose clock was read at `at`.
    pub fn renewed(&self, at: Duration) {
        let deadline = at + self.lease - self.margin;
        let ns = u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX);
        self.deadline_ns.fetch_max(ns, Ordering::SeqCst);
    }

    /// Whether the owner may still dispatch.
    pub fn holds(&self) -> bool {
        let now = u64::try_from(self.clock.monotonic().as_nanos()).unwrap_or(u64::MAX);
        now < self.deadline_ns.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests;
