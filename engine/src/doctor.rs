//! `steward doctor`: is the file sound, which schema is it on, do the projection
//! tables equal a replay of the event log (protocol §3.1), and does every invariant
//! (protocol §6) hold?

pub mod diagnosis;

use rusqlite::Connection;
use serde::Serialize;

use crate::error::Result;
use crate::invariants::Violation;
use crate::projection::Projection;
use crate::store::{events, migrate, rows};

/// What `doctor` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoctorReport {
    pub quick_check: String,
    /// The newest applied migration.
    pub schema_version: Option<String>,
    pub migrations: Vec<String>,
    pub sessions: usize,
    pub events: i64,
    /// Sessions whose tables differ from a replay of their log.
    pub replay_mismatches: Vec<ReplayMismatch>,
    /// Every broken invariant (replay mismatches included).
    pub invariants: Vec<Violation>,
    /// How many invariant rules were checked.
    pub rules_checked: usize,
    pub ok: bool,
}

/// A session whose stored rows differ from a replay of its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayMismatch {
    pub session_id: String,
    pub detail: String,
}

/// The first finding of `PRAGMA quick_check` on `conn`: `"ok"` for a sound file.
pub fn quick_check(conn: &Connection) -> Result<String> {
    Ok(conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?)
}

/// Runs every check on `conn` (read-only) at `now_ms`.
pub fn check(conn: &Connection, now_ms: i64) -> Result<DoctorReport> {
    check_after(conn, now_ms, quick_check(conn)?)
}

/// [`check`] of a file whose `PRAGMA quick_check` already found `quick_check`.
pub fn check_after(conn: &Connection, now_ms: i64, quick_check: String) -> Result<DoctorReport> {
    if quick_check != "ok" {
        // A damaged file is explained by its diagnosis (`diagnosis::diagnose`):
        // counting and replaying it would stop at the first bad page.
        return Ok(DoctorReport {
            quick_check,
            schema_version: None,
            migrations: Vec::new(),
            sessions: 0,
            events: 0,
            replay_mismatches: Vec::new(),
            invariants: Vec::new(),
            rules_checked: 0,
            ok: false,
        });
    }
    let migrations: Vec<String> = migrate::applied(conn)?.into_iter().map(|m| m.id).collect();
    let events: i64 = conn.query_row("SELECT count(*) FROM event", [], |r| r.get(0))?;
    let sessions: i64 = conn.query_row(
        "SELECT count(*) FROM (SELECT id FROM session UNION SELECT aggregate_id FROM event)",
        [],
        |r| r.get(0),
    )?;
    let invariants = crate::invariants::check(conn, now_ms)?;
    let replay_mismatches = invariants
        .iter()
        .filter(|v| v.rule == "replay")
        .map(|v| ReplayMismatch {
            session_id: v.session_id.clone().unwrap_or_default(),
            detail: v.detail.clone(),
        })
        .collect();
    let ok = quick_check == "ok" && invariants.is_empty();
    Ok(DoctorReport {
        quick_check,
        schema_version: migrations.last().cloned(),
        migrations,
        sessions: usize::try_from(sessions).unwrap_or(0),
        events,
        replay_mismatches,
        invariants,
        rules_checked: crate::invariants::RULES.len(),
        ok,
    })
}

/// How the stored rows of `session_id` differ from a replay of its events, if they do.
pub fn replay_difference(conn: &Connection, session_id: &str) -> Option<String> {
    let replayed = match events::replay(conn, session_id) {
        Ok(p) => p,
        Err(e) => return Some(format!("the event log does not replay: {e}")),
    };
    let stored = match rows::load_all(conn, session_id) {
        Ok(p) => p,
        Err(e) => return Some(format!("the stored rows do not decode: {e}")),
    };
    describe_difference(&stored, &replayed)
}

fn describe_difference(stored: &Projection, replayed: &Projection) -> Option<String> {
    if stored.session != replayed.session {
        return Some(format!(
            "session row differs: stored {:?}, replayed {:?}",
            stored.session, replayed.session
        ));
    }
    for (id, m) in &replayed.messages {
        match stored.messages.get(id) {
            None => return Some(format!("message {id} is missing")),
            Some(s) if s != m => return Some(format!("message {id} differs from the replay")),
            Some(_) => {}
        }
    }
    if let Some(id) = stored
        .messages
        .keys()
        .find(|id| !replayed.messages.contains_key(*id))
    {
        return Some(format!("message {id} has no event that created it"));
    }
    for (id, i) in &replayed.inputs {
        match stored.inputs.get(id) {
            None => return Some(format!("input {id} is missing")),
            Some(s) if s != i => return Some(format!("input {id} differs from the replay")),
            Some(_) => {}
        }
    }
    if let Some(id) = stored
        .inputs
        .keys()
        .find(|id| !replayed.inputs.contains_key(*id))
    {
        return Some(format!("input {id} has no event that admitted it"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::events::{Delivery, Event};
    use crate::store::Store;
    use crate::store::events::append_unowned;

    fn populated() -> Store {
        let mut store = Store::open_in_memory(&ManualClock::new(0)).unwrap();
        store
            .write(|tx| {
                append_unowned(
                    tx,
                    "ses_1",
                    1,
                    Event::SessionCreated {
                        title: "t".into(),
                        directory: "/".into(),
                    },
                )?;
                append_unowned(
                    tx,
                    "ses_1",
                    2,
                    Event::InputAdmitted {
                        content: Vec::new(),
                        input_id: "inp_1".into(),
                        prompt: "hi".into(),
                        delivery: Delivery::Queue,
                        wake_pending: true,
                        continuation_of: None,
                    },
                )?;
                append_unowned(
                    tx,
                    "ses_1",
                    3,
                    Event::InputPromoted {
                        input_id: "inp_1".into(),
                        message_id: "msg_1".into(),
                    },
                )
            })
            .unwrap();
        store
    }

    #[test]
    fn r3_1_a_consistent_database_passes() {
        let store = populated();
        let report = check(store.conn(), 10).unwrap();
        assert!(report.ok, "{report:?}");
        assert_eq!(
            report.schema_version.as_deref(),
            crate::store::migrate::MIGRATIONS.last().map(|m| m.id)
        );
        assert_eq!((report.sessions, report.events), (1, 3));
    }

    #[test]
    fn r3_1_a_projection_that_differs_from_the_replay_is_reported() {
        let store = populated();
        store
            .conn()
            .execute(
                "UPDATE session_message SET data = '{\"input_id\":\"inp_1\",\"text\":\"edited\"}'",
                [],
            )
            .unwrap();
        let report = check(store.conn(), 10).unwrap();
        assert!(!report.ok);
        assert_eq!(
            report.replay_mismatches,
            vec![ReplayMismatch {
                session_id: "ses_1".into(),
                detail: "message msg_1 differs from the replay".into()
            }]
        );
        store
            .conn()
            .execute("DELETE FROM session_message", [])
            .unwrap();
        let report = check(store.conn(), 10).unwrap();
        assert_eq!(
            report.replay_mismatches[0].detail,
            "message msg_1 is missing"
        );
    }
}
