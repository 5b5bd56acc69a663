//! Read models for the CLI, the TUI and `--json`: sessions with their state, and the
//! inspector's snapshot of owners, claims, quarantine, wakes and recoveries. Reading
//! only: nothing here writes or recovers.

pub mod pages;
mod reader;

pub use reader::Reader;

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::Connection;
use serde::Serialize;

use crate::claim::{CLAIM_COLUMNS, ClaimRow, ClaimState, claim_row, integer, text};
use crate::error::Result;
use crate::owner::{self, Liveness, Owners};
use crate::store::rows;

/// A session's state in listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    Idle,
    Running,
    Waiting,
    Recovered,
    Quarantined,
}

impl SessionState {
    /// The word listings show: `idle`, `running`, `waiting`, `recovered`, `quarantined`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Idle => "idle",
            SessionState::Running => "running",
            SessionState::Waiting => "waiting",
            SessionState::Recovered => "recovered",
            SessionState::Quarantined => "quarantined",
        }
    }
}

/// One line of `steward sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    pub id: String,
    pub title: String,
    pub directory: String,
    pub state: SessionState,
    pub time_updated: i64,
    /// Archived (protocol §3.6): listed only when asked for.
    pub archived: bool,
}

/// Every claim, decoded without trusting it.
#[doc(hidden)]
pub fn claims(conn: &Connection) -> Result<Vec<ClaimRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CLAIM_COLUMNS} FROM session_execution ORDER BY time_created, id"
    ))?;
    let rows = stmt.query_map([], claim_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Every session, most recently updated first, with its state at `now_ms`.
pub fn sessions(conn: &Connection, now_ms: i64) -> Result<Vec<SessionSummary>> {
    let claims: BTreeMap<String, ClaimRow> = claims(conn)?
        .into_iter()
        .map(|c| (c.session_id.clone(), c))
        .collect();
    let recovered = ids(
        conn,
        "SELECT session_id FROM session_recovery WHERE wake_pending = 1 AND recovery_error IS NULL",
    )?;
    let quarantined = ids(
        conn,
        "SELECT session_id FROM session_recovery WHERE recovery_error IS NOT NULL",
    )?;
    let waiting = ids(
        conn,
        "SELECT session_id FROM session_input WHERE wake_pending = 1 AND promoted_seq IS NULL",
    )?;
    let out = rows::sessions(conn)?
        .into_iter()
        .map(|s| {
            let claim = claims.get(&s.id).map(|c| c.state(now_ms));
            let state = if claim == Some(ClaimState::Quarantined) || quarantined.contains(&s.id) {
                SessionState::Quarantined
            } else if claim == Some(ClaimState::Live) {
                SessionState::Running
            } else if recovered.contains(&s.id) {
                SessionState::Recovered
            } else if claim == Some(ClaimState::Expired) || waiting.contains(&s.id) {
                SessionState::Waiting
            } else {
                SessionState::Idle
            };
            SessionSummary {
                id: s.id,
                title: s.title,
                directory: s.directory,
                state,
                time_updated: s.time_updated,
                archived: s.archived,
            }
        })
        .collect();
    Ok(out)
}

fn ids(conn: &Connection, sql: &str) -> Result<BTreeSet<String>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// `inspect --json`: one snapshot of the inspector (README, "Run").
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    pub owners: Vec<OwnerView>,
    pub claims: Vec<ClaimView>,
    pub quarantine: Vec<QuarantineView>,
    pub wakes: Vec<WakeView>,
    pub recoveries: Vec<RecoveryView>,
}

/// An owner, and whether its lock proves it alive (`None`: nothing is proven).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnerView {
    pub id: String,
    pub pid: i64,
    pub hostname: String,
    pub alive: Option<bool>,
    pub time_started: i64,
}

/// A claim as the inspector shows it; values a damaged row may hold in any type stay JSON values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimView {
    pub execution_id: String,
    pub session_id: String,
    pub owner_id: String,
    pub epoch: serde_json::Value,
    pub phase: String,
    pub assistant_message_id: Option<String>,
    pub assistant_seq: serde_json::Value,
    pub time_created: serde_json::Value,
    pub expires_at: serde_json::Value,
    pub state: ClaimState,
    pub recovery_error: Option<String>,
}

/// A quarantined claim or recovery row, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuarantineView {
    pub kind: &'static str,
    pub execution_id: String,
    pub session_id: String,
    pub reason: String,
    pub time_created: Option<i64>,
}

/// A wake that waits: a recovery's continuation, or an admitted input whose wake never ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WakeView {
    pub kind: &'static str,
    pub execution_id: Option<String>,
    pub input_id: String,
    pub session_id: String,
    pub attempts: i64,
    pub time_created: i64,
}

/// A `session_recovery` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecoveryView {
    pub execution_id: String,
    pub session_id: String,
    pub phase: String,
    pub assistant_message_id: Option<String>,
    pub continuation_message_id: String,
    pub wake_pending: bool,
    pub wake_attempts: i64,
    pub recovery_error: Option<String>,
    pub time_created: i64,
}

fn json_value(v: &rusqlite::types::Value) -> serde_json::Value {
    match integer(v) {
        Some(i) => i.into(),
        None => match v {
            rusqlite::types::Value::Null => serde_json::Value::Null,
            other => text(other.clone()).into(),
        },
    }
}

/// The inspector's snapshot at `now_ms`; owner liveness is probed through the lock
/// files under `lock_files`.
#[doc(hidden)]
pub fn snapshot(conn: &Connection, lock_files: &Owners, now_ms: i64) -> Result<Snapshot> {
    let owners = owner::all(conn)?
        .into_iter()
        .map(|o| {
            let alive = match owner::probe(lock_files, &o) {
                Liveness::Alive => Some(true),
                Liveness::Dead => Some(false),
                Liveness::Unknown => None,
            };
            OwnerView {
                id: o.id,
                pid: o.pid,
                hostname: o.hostname,
                alive,
                time_started: o.time_started,
            }
        })
        .collect();
    let claim_rows = claims(conn)?;
    let mut quarantine = Vec::new();
    let claims = claim_rows
        .iter()
        .map(|c| {
            if let Some(reason) = &c.recovery_error {
                quarantine.push(QuarantineView {
                    kind: "claim",
                    execution_id: c.id.clone(),
                    session_id: c.session_id.clone(),
                    reason: reason.clone(),
                    time_created: integer(&c.time_created),
                });
            }
            claim_view(c, now_ms)
        })
        .collect();
    let recoveries = recoveries(conn)?;
    let mut wakes = Vec::new();
    for r in &recoveries {
        if let Some(reason) = &r.recovery_error {
            quarantine.push(QuarantineView {
                kind: "recovery",
                execution_id: r.execution_id.clone(),
                session_id: r.session_id.clone(),
                reason: reason.clone(),
                time_created: Some(r.time_created),
            });
        } else if r.wake_pending {
            wakes.push(WakeView {
                kind: "recovery",
                execution_id: Some(r.execution_id.clone()),
                input_id: r.continuation_message_id.clone(),
                session_id: r.session_id.clone(),
                attempts: r.wake_attempts,
                time_created: r.time_created,
            });
        }
    }
    let mut stmt = conn.prepare_cached(
        "SELECT id, session_id, time_created FROM session_input
         WHERE wake_pending = 1 AND promoted_seq IS NULL ORDER BY time_created, id",
    )?;
    let inputs = stmt.query_map([], |r| {
        Ok(WakeView {
            kind: "input",
            execution_id: None,
            input_id: r.get(0)?,
            session_id: r.get(1)?,
            attempts: 0,
            time_created: r.get(2)?,
        })
    })?;
    for input in inputs {
        wakes.push(input?);
    }
    Ok(Snapshot {
        owners,
        claims,
        quarantine,
        wakes,
        recoveries,
    })
}

/// A claim as the inspector shows it at `now_ms`.
#[doc(hidden)]
pub fn claim_view(c: &ClaimRow, now_ms: i64) -> ClaimView {
    ClaimView {
        execution_id: c.id.clone(),
        session_id: c.session_id.clone(),
        owner_id: c.owner_id.clone(),
        epoch: json_value(&c.epoch),
        phase: c.phase_text(),
        assistant_message_id: c.assistant_message_id.clone(),
        assistant_seq: json_value(&c.assistant_seq),
        time_created: json_value(&c.time_created),
        expires_at: json_value(&c.expires_at),
        state: c.state(now_ms),
        recovery_error: c.recovery_error.clone(),
    }
}

/// Every `session_recovery` row, oldest first.
pub fn recoveries(conn: &Connection) -> Result<Vec<RecoveryView>> {
    let mut stmt = conn.prepare_cached(
        "SELECT execution_id, session_id, phase, assistant_message_id, continuation_message_id,
                wake_pending, wake_attempts, recovery_error, time_created
         FROM session_recovery ORDER BY time_created, execution_id",
    )?;
    let rows = stmt.query_map([], recovery_view)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The `session_recovery` row of one execution, if any.
pub fn recoveries_of(conn: &Connection, execution_id: &str) -> Result<Option<RecoveryView>> {
    use rusqlite::OptionalExtension;
    let mut stmt = conn.prepare_cached(
        "SELECT execution_id, session_id, phase, assistant_message_id, continuation_message_id,
                wake_pending, wake_attempts, recovery_error, time_created
         FROM session_recovery WHERE execution_id = ?1",
    )?;
    Ok(stmt.query_row([execution_id], recovery_view).optional()?)
}

/// A `session_recovery` row in the column order the queries here select.
pub(crate) fn recovery_view(r: &rusqlite::Row<'_>) -> rusqlite::Result<RecoveryView> {
    Ok(RecoveryView {
        execution_id: r.get(0)?,
        session_id: r.get(1)?,
        phase: r.get(2)?,
        assistant_message_id: r.get(3)?,
        continuation_message_id: r.get(4)?,
        wake_pending: r.get::<_, i64>(5)? != 0,
        wake_attempts: r.get(6)?,
        recovery_error: r.get(7)?,
        time_created: r.get(8)?,
    })
}
