//! Keyset-paged read models for screens that show one page at a time: sessions,
//! claims, quarantined rows, wakes, recoveries and owners, and the counts of each.
//! A page is found by an index and the key of the last row shown, never by reading
//! the whole table, so a screen costs the same on a file of any size.
//!
//! Every function reads only. Ids are UUIDv7 after their prefix, so ordering by id is
//! ordering by creation.

use std::collections::BTreeMap;

use rusqlite::types::Value;
use rusqlite::{Connection, params};
use serde::Serialize;

use crate::claim::{CLAIM_COLUMNS, ClaimRow, ClaimState, claim_row};
use crate::error::Result;
use crate::inspect::{
    ClaimView, QuarantineView, RecoveryView, SessionState, SessionSummary, WakeView,
};
use crate::owner::{self, Liveness, OwnerRow, Owners};
use crate::projection::SessionRow;

/// Which rows a page holds: the `limit` rows after `after` (the first page when
/// both keys are `None`), or — paging back — the `limit` rows just before `before`,
/// or the last `limit` rows (`last`). Rows always come in the table's order, which
/// `reverse` turns around (newest first for a table that lists oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageRequest {
    /// The key of the last row of the previous page (its id).
    pub after: Option<String>,
    /// The key of the first row of the next page, when paging back.
    pub before: Option<String>,
    /// The last page (`after` and `before` are ignored).
    pub last: bool,
    /// The table's order turned around.
    pub reverse: bool,
    pub limit: usize,
    /// Rows whose ids (execution, session, owner, input) or title contain this text.
    pub filter: Option<String>,
}

/// Above every key (ids are ASCII).
const TOP: &str = "\u{10FFFF}";

impl PageRequest {
    /// The first `limit` rows.
    pub fn first(limit: usize) -> PageRequest {
        PageRequest {
            limit,
            ..PageRequest::default()
        }
    }

    /// The last `limit` rows.
    pub fn last(limit: usize) -> PageRequest {
        PageRequest {
            limit,
            last: true,
            ..PageRequest::default()
        }
    }

    /// Whether this is the first page of its order.
    pub fn is_first(&self) -> bool {
        self.after.is_none() && self.before.is_none() && !self.last
    }

    /// The bound, comparison and order of a query whose rows ascend by key (unless
    /// reversed): the rows after `after`, or (backwards, to be turned around) those
    /// before `before`, or the last ones.
    fn ascending(&self) -> (String, &'static str, &'static str) {
        if self.reverse {
            return self.directed(true);
        }
        self.directed(false)
    }

    /// The same for a query whose rows descend by key (newest first).
    fn descending(&self) -> (String, &'static str, &'static str) {
        self.directed(!self.reverse)
    }

    fn directed(&self, descending: bool) -> (String, &'static str, &'static str) {
        let (low, high) = (String::new(), TOP.to_string());
        match (descending, self.last, &self.before) {
            (false, true, _) => (high, "<", "DESC"),
            (false, false, Some(before)) => (before.clone(), "<", "DESC"),
            (false, false, None) => (self.after.clone().unwrap_or(low), ">", "ASC"),
            (true, true, _) => (low, ">", "ASC"),
            (true, false, Some(before)) => (before.clone(), ">", "ASC"),
            (true, false, None) => (self.after.clone().unwrap_or(high), "<", "DESC"),
        }
    }

    /// Puts rows read backwards into the table's order.
    fn arrange<T>(&self, mut rows: Vec<T>) -> Vec<T> {
        if self.before.is_some() || self.last {
            rows.reverse();
        }
        rows
    }

    /// The filter as a `LIKE … ESCAPE '\'` pattern: its own `%`, `_` and `\` match
    /// themselves.
    fn like(&self) -> Option<String> {
        self.filter.as_deref().filter(|f| !f.is_empty()).map(|f| {
            let mut pattern = String::from("%");
            for c in f.chars() {
                if matches!(c, '%' | '_' | '\\') {
                    pattern.push('\\');
                }
                pattern.push(c);
            }
            pattern.push('%');
            pattern
        })
    }

    fn limit(&self) -> i64 {
        i64::try_from(self.limit).unwrap_or(i64::MAX)
    }
}

/// How many rows each inspector table and the session list hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub sessions: i64,
    pub claims: i64,
    pub quarantine: i64,
    pub wakes: i64,
    pub recoveries: i64,
    pub owners: i64,
}

/// `count(*)` of every table the screens page through.
pub fn counts(conn: &Connection) -> Result<Counts> {
    let one =
        |sql: &str| -> Result<i64> { Ok(conn.prepare_cached(sql)?.query_row([], |r| r.get(0))?) };
    Ok(Counts {
        sessions: one("SELECT count(*) FROM session")?,
        claims: one("SELECT count(*) FROM session_execution")?,
        quarantine: one(
            "SELECT (SELECT count(*) FROM session_execution WHERE recovery_error IS NOT NULL)
                  + (SELECT count(*) FROM session_recovery WHERE recovery_error IS NOT NULL)",
        )?,
        wakes: one("SELECT (SELECT count(*) FROM session_recovery
                     WHERE wake_pending = 1 AND recovery_error IS NULL)
                  + (SELECT count(*) FROM session_input
                     WHERE wake_pending = 1 AND promoted_seq IS NULL)")?,
        recoveries: one("SELECT count(*) FROM session_recovery")?,
        owners: one("SELECT count(*) FROM owner")?,
    })
}

/// Sessions, newest first.
pub fn sessions(conn: &Connection, now_ms: i64, page: &PageRequest) -> Result<Vec<SessionSummary>> {
    let (bound, cmp, dir) = page.descending();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id, title, directory, time_created, time_updated FROM session
         WHERE id {cmp} ?1 AND (?2 IS NULL OR id LIKE ?2 ESCAPE '\\' OR title LIKE ?2 ESCAPE '\\'
                                OR directory LIKE ?2 ESCAPE '\\')
         ORDER BY id {dir} LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![bound, page.like(), page.limit()], |r| {
        Ok(SessionRow {
            id: r.get(0)?,
            title: r.get(1)?,
            directory: r.get(2)?,
            time_created: r.get(3)?,
            time_updated: r.get(4)?,
        })
    })?;
    let sessions = page.arrange(rows.collect::<Result<Vec<_>, _>>()?);
    sessions
        .into_iter()
        .map(|s| {
            Ok(SessionSummary {
                state: session_state(conn, &s.id, now_ms)?,
                id: s.id,
                title: s.title,
                directory: s.directory,
                time_updated: s.time_updated,
            })
        })
        .collect()
}

/// One session's state, from its claim, its recovery rows and its input wakes (each
/// found by an index on the session).
pub fn session_state(conn: &Connection, session_id: &str, now_ms: i64) -> Result<SessionState> {
    let claim = crate::claim::for_session(conn, session_id)?.map(|c| c.state(now_ms));
    let (pending, failed): (i64, i64) = conn
        .prepare_cached(
            "SELECT coalesce(sum(wake_pending = 1 AND recovery_error IS NULL), 0),
                    coalesce(sum(recovery_error IS NOT NULL), 0)
             FROM session_recovery WHERE session_id = ?1",
        )?
        .query_row([session_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let waiting: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM session_input
             WHERE session_id = ?1 AND promoted_seq IS NULL AND wake_pending = 1)",
        )?
        .query_row([session_id], |r| r.get(0))?;
    Ok(if claim == Some(ClaimState::Quarantined) || failed > 0 {
        SessionState::Quarantined
    } else if claim == Some(ClaimState::Live) {
        SessionState::Running
    } else if pending > 0 {
        SessionState::Recovered
    } else if claim == Some(ClaimState::Expired) || waiting {
        SessionState::Waiting
    } else {
        SessionState::Idle
    })
}

/// How the claims table is ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClaimOrder {
    /// By execution id: oldest first.
    #[default]
    Created,
    /// By session id.
    Session,
}

/// Claims, decoded without trusting them.
pub fn claims(conn: &Connection, order: ClaimOrder, page: &PageRequest) -> Result<Vec<ClaimRow>> {
    let key = match order {
        ClaimOrder::Created => "id",
        ClaimOrder::Session => "session_id",
    };
    let (bound, cmp, dir) = page.ascending();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {CLAIM_COLUMNS} FROM session_execution
         WHERE {key} {cmp} ?1 AND (?2 IS NULL OR id LIKE ?2 ESCAPE '\\'
                                   OR session_id LIKE ?2 ESCAPE '\\' OR owner_id LIKE ?2 ESCAPE '\\')
         ORDER BY {key} {dir} LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![bound, page.like(), page.limit()], claim_row)?;
    Ok(page.arrange(rows.collect::<Result<_, _>>()?))
}

/// The key a claims page continues after, for `order`.
pub fn claim_key(row: &ClaimRow, order: ClaimOrder) -> String {
    match order {
        ClaimOrder::Created => row.id.clone(),
        ClaimOrder::Session => row.session_id.clone(),
    }
}

/// What a claim looks like on screen: the row, its state, and what the lock probe
/// proves about its owner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimLine {
    #[serde(flatten)]
    pub claim: ClaimView,
    /// What the lock probe proves about the claim's owner.
    #[serde(rename = "owner_liveness")]
    pub owner: Liveness,
}

/// Claims with their owners' liveness (each owner probed once).
pub fn claim_lines(
    conn: &Connection,
    lock_files: &Owners,
    rows: &[ClaimRow],
    now_ms: i64,
) -> Result<Vec<ClaimLine>> {
    let mut probed: BTreeMap<String, Liveness> = BTreeMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let liveness = match probed.get(&row.owner_id) {
            Some(l) => *l,
            None => {
                let l = owner::liveness(conn, lock_files, &row.owner_id)?;
                probed.insert(row.owner_id.clone(), l);
                l
            }
        };
        out.push(ClaimLine {
            claim: crate::inspect::claim_view(row, now_ms),
            owner: liveness,
        });
    }
    Ok(out)
}

/// Quarantined claims and recovery rows (parked wakes included), by execution id.
pub fn quarantine(conn: &Connection, page: &PageRequest) -> Result<Vec<QuarantineView>> {
    let (bound, cmp, dir) = page.ascending();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT kind, execution_id, session_id, reason, time_created FROM (
             SELECT 'claim' AS kind, id AS execution_id, session_id, recovery_error AS reason,
                    time_created FROM session_execution WHERE recovery_error IS NOT NULL
             UNION ALL
             SELECT 'recovery', execution_id, session_id, recovery_error, time_created
             FROM session_recovery WHERE recovery_error IS NOT NULL)
         WHERE execution_id {cmp} ?1
           AND (?2 IS NULL OR execution_id LIKE ?2 ESCAPE '\\' OR session_id LIKE ?2 ESCAPE '\\'
                OR reason LIKE ?2 ESCAPE '\\')
         ORDER BY execution_id {dir} LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![bound, page.like(), page.limit()], |r| {
        let kind: String = r.get(0)?;
        Ok(QuarantineView {
            kind: if kind == "claim" { "claim" } else { "recovery" },
            execution_id: crate::claim::text(r.get(1)?),
            session_id: crate::claim::text(r.get(2)?),
            reason: crate::claim::text(r.get(3)?),
            time_created: crate::claim::integer(&r.get::<_, Value>(4)?),
        })
    })?;
    Ok(page.arrange(rows.collect::<Result<_, _>>()?))
}

/// Pending wakes — recovery wakes and admitted inputs whose wake never ran — by the
/// id of what they would promote.
pub fn wakes(conn: &Connection, page: &PageRequest) -> Result<Vec<WakeView>> {
    let (bound, cmp, dir) = page.ascending();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT kind, execution_id, input_id, session_id, attempts, time_created FROM (
             SELECT 'recovery' AS kind, execution_id, continuation_message_id AS input_id,
                    session_id, wake_attempts AS attempts, time_created
             FROM session_recovery WHERE wake_pending = 1 AND recovery_error IS NULL
             UNION ALL
             SELECT 'input', NULL, id, session_id, 0, time_created
             FROM session_input WHERE wake_pending = 1 AND promoted_seq IS NULL)
         WHERE input_id {cmp} ?1
           AND (?2 IS NULL OR input_id LIKE ?2 ESCAPE '\\' OR session_id LIKE ?2 ESCAPE '\\'
                OR execution_id LIKE ?2 ESCAPE '\\')
         ORDER BY input_id {dir} LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![bound, page.like(), page.limit()], |r| {
        let kind: String = r.get(0)?;
        Ok(WakeView {
            kind: if kind == "recovery" {
                "recovery"
            } else {
                "input"
            },
            execution_id: r.get(1)?,
            input_id: r.get(2)?,
            session_id: r.get(3)?,
            attempts: r.get(4)?,
            time_created: r.get(5)?,
        })
    })?;
    Ok(page.arrange(rows.collect::<Result<_, _>>()?))
}

/// Recovery rows, oldest execution first.
pub fn recoveries(conn: &Connection, page: &PageRequest) -> Result<Vec<RecoveryView>> {
    let (bound, cmp, dir) = page.ascending();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT execution_id, session_id, phase, assistant_message_id, continuation_message_id,
                wake_pending, wake_attempts, recovery_error, time_created
         FROM session_recovery
         WHERE execution_id {cmp} ?1
           AND (?2 IS NULL OR execution_id LIKE ?2 ESCAPE '\\' OR session_id LIKE ?2 ESCAPE '\\')
         ORDER BY execution_id {dir} LIMIT ?3"
    ))?;
    let rows = stmt.query_map(
        params![bound, page.like(), page.limit()],
        crate::inspect::recovery_view,
    )?;
    Ok(page.arrange(rows.collect::<Result<_, _>>()?))
}

/// Owners with what the lock probe proves, by id.
pub fn owners(
    conn: &Connection,
    lock_files: &Owners,
    page: &PageRequest,
) -> Result<Vec<(OwnerRow, Liveness)>> {
    let (bound, cmp, dir) = page.ascending();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM owner
         WHERE id {cmp} ?1 AND (?2 IS NULL OR id LIKE ?2 ESCAPE '\\' OR hostname LIKE ?2 ESCAPE '\\')
         ORDER BY id {dir} LIMIT ?3",
        owner::owner_columns(conn)
    ))?;
    let rows = stmt.query_map(params![bound, page.like(), page.limit()], owner::owner_row)?;
    let rows = page.arrange(rows.collect::<Result<Vec<_>, _>>()?);
    Ok(rows
        .into_iter()
        .map(|o| {
            let l = owner::probe(lock_files, &o);
            (o, l)
        })
        .collect())
}

/// Where a page of sessions by recent activity ([`recent_sessions`]) ends: the last
/// session's `time_updated` and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityKey {
    pub time_updated: i64,
    pub id: String,
}

/// Up to `limit` sessions, most recently active first (`time_updated`, then id,
/// both descending, as `steward sessions` lists them), after `after`; with
/// `filter`, only those whose id, title or directory contain it. A session just
/// prompted or woken has a new event, which moves its `time_updated` (protocol
/// §3.1), so it comes first. `time_updated` is not indexed (every event rewrites
/// it): a page sorts the sessions it matches.
pub fn recent_sessions(
    conn: &Connection,
    now_ms: i64,
    after: Option<&ActivityKey>,
    filter: Option<&str>,
    limit: usize,
) -> Result<Vec<SessionSummary>> {
    let like = PageRequest {
        filter: filter.map(str::to_string),
        ..PageRequest::default()
    }
    .like();
    let mut stmt = conn.prepare_cached(
        "SELECT id, title, directory, time_updated FROM session
         WHERE (?1 IS NULL OR time_updated < ?1 OR (time_updated = ?1 AND id < ?2))
           AND (?3 IS NULL OR id LIKE ?3 ESCAPE '\\' OR title LIKE ?3 ESCAPE '\\'
                OR directory LIKE ?3 ESCAPE '\\')
         ORDER BY time_updated DESC, id DESC LIMIT ?4",
    )?;
    let rows = stmt.query_map(
        params![
            after.map(|a| a.time_updated),
            after.map(|a| a.id.as_str()),
            like,
            i64::try_from(limit).unwrap_or(i64::MAX)
        ],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    let rows: Vec<(String, String, String, i64)> = rows.collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(id, title, directory, time_updated)| {
            Ok(SessionSummary {
                state: session_state(conn, &id, now_ms)?,
                id,
                title,
                directory,
                time_updated,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
