//! protocol §5 on real temp-file databases: reconciliation, quarantine, idempotency and
//! the scan's order and bounds.

use pretty_assertions::assert_eq;
use rusqlite::Connection;

use super::*;
use crate::clock::ManualClock;
use crate::events::Event;
use crate::message::{
    EXECUTION_INTERRUPTED_BY_RESTART, PROVIDER_OUTCOME_UNKNOWN, Part, TOOL_OUTCOME_UNKNOWN,
    ToolStatus,
};
use crate::store::Store;
use crate::store::events::{append_unowned, load};
use crate::testing::{Stage, interrupted};

const T0: i64 = 1_700_000_000_000;
const LEASE: i64 = 30_000;
const LATER: i64 = T0 + LEASE + 1;

fn params() -> Params {
    Params {
        owner_id: "own_recoverer".into(),
        owners: crate::owner::Owners::new("/nonexistent/owners"),
        lease_ms: LEASE,
        slack_ms: CLOCK_SLACK_MS,
        killed: Default::default(),
    }
}

fn store(dir: &tempfile::TempDir) -> Store {
    Store::open(&dir.path().join("steward.db"), &ManualClock::new(T0)).unwrap()
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn r5_3_a_ready_claim_is_reconciled_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Tools, T0);
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(
        report.recovered,
        vec![Recovered {
            execution_id: exe.clone(),
            session_id: "ses_1".into(),
            phase: Phase::Ready,
            assistant_message_id: Some(format!("msg_a_{exe}")),
            stopped_processes: vec![],
            parked: false,
        }]
    );
    assert_eq!((report.scanned, report.batches), (1, 1));
    let conn = store.conn();
    let log = load(conn, "ses_1").unwrap();
    let tail: Vec<&str> = log[log.len() - 2..]
        .iter()
        .map(|r| r.event.kind())
        .collect();
    assert_eq!(tail, vec!["step.recovered", "input.admitted"]);
    // Recovery writes under its own takeover, epoch 1.
    let origin = log.last().unwrap().origin.clone().unwrap();
    assert_eq!(
        (origin.owner_id.as_str(), origin.epoch),
        ("own_recoverer", 1)
    );
    let assistant = rows::message(conn, &format!("msg_a_{exe}"))
        .unwrap()
        .unwrap();
    let a = assistant.data.as_assistant().unwrap();
    assert_eq!(
        a.error.as_ref().unwrap().message,
        EXECUTION_INTERRUPTED_BY_RESTART
    );
    let states: Vec<(String, ToolStatus, Option<String>)> = a
        .tools()
        .map(|t| (t.call_id.clone(), t.state.status, t.state.error.clone()))
        .collect();
    assert_eq!(
        states,
        vec![
            ("done".into(), ToolStatus::Completed, None),
            (
                "running".into(),
                ToolStatus::Error,
                Some(TOOL_OUTCOME_UNKNOWN.into())
            ),
            (
                "pending".into(),
                ToolStatus::Error,
                Some(TOOL_OUTCOME_UNKNOWN.into())
            ),
        ]
    );
    assert!(
        matches!(a.parts.last(), Some(Part::Text { id, .. }) if *id == ids::recovery_part(&exe))
    );
    let continuation = rows::input(conn, &ids::continuation_input(&exe))
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            continuation.prompt.as_str(),
            continuation.is_pending(),
            continuation.wake_pending
        ),
        (CONTINUATION_TEXT, true, false)
    );
    let recovery = crate::inspect::recoveries(conn).unwrap();
    assert_eq!(recovery.len(), 1);
    assert_eq!(
        (
            recovery[0].wake_pending,
            recovery[0].phase.as_str(),
            recovery[0].continuation_message_id.clone()
        ),
        (true, "ready", ids::continuation_input(&exe))
    );
    assert_eq!(count(conn, "SELECT count(*) FROM session_execution"), 0);
    assert!(crate::doctor::check(conn, LATER + 1_000).unwrap().ok);
}

#[test]
fn r5_4_without_an_assistant_recovery_writes_a_synthetic_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Promoted, T0);
    pass(store.conn_mut(), &params(), LATER).unwrap();
    let message = rows::message(store.conn(), &ids::recovery_message(&exe))
        .unwrap()
        .unwrap();
    assert_eq!(message.data.text(), EXECUTION_INTERRUPTED_BY_RESTART);
}

#[test]
fn r5_4_an_unknown_phase_says_the_provider_outcome_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Streaming, T0);
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(report.recovered[0].phase, Phase::Unknown);
    let a = rows::message(store.conn(), &format!("msg_a_{exe}"))
        .unwrap()
        .unwrap();
    assert_eq!(
        a.data
            .as_assistant()
            .unwrap()
            .error
            .as_ref()
            .unwrap()
            .message,
        PROVIDER_OUTCOME_UNKNOWN
    );
}

#[test]
fn r5_3_safe_claims_are_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Promoted, T0);
    store
        .conn()
        .execute("UPDATE session_execution SET phase = 'safe'", [])
        .unwrap();
    let events_before = count(store.conn(), "SELECT count(*) FROM event");
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!((report.discarded_safe, report.recovered.len()), (1, 0));
    let conn = store.conn();
    assert_eq!(count(conn, "SELECT count(*) FROM session_execution"), 0);
    assert_eq!(count(conn, "SELECT count(*) FROM session_recovery"), 0);
    assert_eq!(count(conn, "SELECT count(*) FROM event"), events_before);
    assert!(
        rows::input(conn, &ids::continuation_input(&exe))
            .unwrap()
            .is_none()
    );
}

#[test]
fn i1_never_recover_a_live_execution_lease_of_a_live_owner() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    // A live owner: its lock is held by this process.
    let owner = store
        .write(|tx| {
            crate::owner::Owner::register(
                tx,
                &crate::owner::Owners::new(dir.path().join("owners")),
                T0,
            )
        })
        .unwrap();
    store
        .write(|tx| {
            append_unowned(
                tx,
                "ses_1",
                T0,
                Event::SessionCreated {
                    title: "t".into(),
                    directory: "/".into(),
                },
            )?;
            claim::acquire(tx, "ses_1", &owner.id, T0, LEASE)
        })
        .unwrap();
    let _ = interrupted(&mut store, "ses_2", Stage::Tools, T0 + 5_000);
    let report = pass(store.conn_mut(), &params(), T0 + 1_000).unwrap();
    assert_eq!(
        (
            report.scanned,
            report.recovered.len(),
            report.dead_owners.len()
        ),
        (0, 0, 0)
    );
    assert_eq!(
        count(store.conn(), "SELECT count(*) FROM session_execution"),
        2
    );
    assert_eq!(
        count(
            store.conn(),
            "SELECT count(*) FROM event WHERE type = 'step.recovered'"
        ),
        0
    );
}

#[test]
fn r4_11_a_dead_owners_claims_are_recovered_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    // An owner row whose lock file exists but is not held: its process is gone.
    let lock = dir.path().join("own_gone.lock");
    std::fs::write(&lock, b"").unwrap();
    store
        .conn()
        .execute(
            "INSERT INTO owner VALUES ('own_gone', 1, ?1, ?2, ?3, NULL, ?4)",
            rusqlite::params![
                crate::owner::hostname(),
                T0,
                lock.to_string_lossy(),
                crate::host::boot_id()
            ],
        )
        .unwrap();
    interrupted(&mut store, "ses_1", Stage::Tools, T0);
    // Well inside the lease.
    let p = Params {
        owners: crate::owner::Owners::new(dir.path()),
        ..params()
    };
    let report = pass(store.conn_mut(), &p, T0 + 10).unwrap();
    assert_eq!(
        (report.recovered.len(), report.dead_owners.clone()),
        (1, vec!["own_gone".to_string()])
    );
    assert_eq!(
        count(store.conn(), "SELECT count(*) FROM owner"),
        0,
        "the dead owner was not forgotten"
    );
    assert!(!lock.exists());
}

#[test]
fn i2_never_recover_an_execution_superseded_by_a_newer_assistant() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Streaming, T0);
    // A newer assistant appears in the session (written by another execution).
    store
        .write(|tx| {
            append_unowned(
                tx,
                "ses_1",
                T0 + 1,
                Event::StepStarted {
                    tools: None,
                    message_id: "msg_newer".into(),
                    execution_id: "exe_newer".into(),
                    provider: "p".into(),
                    model: "m".into(),
                },
            )
        })
        .unwrap();
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!((report.superseded, report.recovered.len()), (1, 0));
    let conn = store.conn();
    assert_eq!(count(conn, "SELECT count(*) FROM session_recovery"), 0);
    assert!(
        rows::input(conn, &ids::continuation_input(&exe))
            .unwrap()
            .is_none()
    );
    let a = rows::message(conn, &format!("msg_a_{exe}"))
        .unwrap()
        .unwrap();
    assert_eq!(
        a.data.as_assistant().unwrap().error,
        None,
        "an older assistant was recovered"
    );

    // Naming no assistant while the session's latest assistant is newer than the
    // claim's snapshot is superseded too.
    let exe2 = interrupted(&mut store, "ses_2", Stage::Promoted, T0);
    store
        .write(|tx| {
            append_unowned(
                tx,
                "ses_2",
                T0 + 1,
                Event::StepStarted {
                    tools: None,
                    message_id: "msg_other".into(),
                    execution_id: "exe_other".into(),
                    provider: "p".into(),
                    model: "m".into(),
                },
            )
        })
        .unwrap();
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(report.superseded, 1);
    assert!(
        rows::message(store.conn(), &ids::recovery_message(&exe2))
            .unwrap()
            .is_none()
    );
}

#[test]
fn r5_5_recovery_is_idempotent_across_passes_and_processes() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    for i in 0..40 {
        interrupted(
            &mut store,
            &format!("ses_{i:02}"),
            if i % 2 == 0 {
                Stage::Tools
            } else {
                Stage::Promoted
            },
            T0 + i,
        );
    }
    drop(store);
    // Two recoverers on two connections at the same instant.
    let path = dir.path().join("steward.db");
    let threads: Vec<_> = ["own_a", "own_b"]
        .into_iter()
        .map(|me| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(&path, &ManualClock::new(T0)).unwrap();
                let p = Params {
                    owner_id: me.into(),
                    ..params()
                };
                pass(store.conn_mut(), &p, LATER + 100).unwrap()
            })
        })
        .collect();
    let reports: Vec<RecoveryReport> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(reports.iter().map(|r| r.recovered.len()).sum::<usize>(), 40);
    let mut store = Store::open(&path, &ManualClock::new(T0)).unwrap();
    let again = pass(store.conn_mut(), &params(), LATER + 200).unwrap();
    assert_eq!((again.scanned, again.recovered.len()), (0, 0));
    let conn = store.conn();
    assert_eq!(count(conn, "SELECT count(*) FROM session_recovery"), 40);
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM session_input WHERE id LIKE 'inp_rec_%'"
        ),
        40
    );
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM event WHERE type = 'step.recovered'"
        ),
        40
    );
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM session_message WHERE id LIKE 'msg_rec_%'"
        ),
        20
    );
    assert_eq!(count(conn, "SELECT count(*) FROM session_execution"), 0);
    assert!(crate::doctor::check(conn, LATER + 1_000).unwrap().ok);
}

#[test]
fn r5_2_equal_creation_times_are_scanned_in_id_order_in_bounded_batches_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    store
        .write(|tx| {
            for i in 0..1_050 {
                let session = format!("ses_{:04}", (i * 7_919) % 1_050);
                append_unowned(tx, &session, T0, Event::SessionCreated { title: "t".into(), directory: "/".into() })?;
                let exe = format!("exe_{:04}", (i * 7_919) % 1_050);
                tx.execute(
                    "INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at)
                     VALUES (?1, ?2, 'own_gone', 'ready', ?3, ?3)",
                    rusqlite::params![exe, session, T0],
                )?;
                // Something the execution wrote, so that it needs reconciling.
                tx.execute(
                    "INSERT INTO event VALUES (?1, 1, 'inspector.action', '{\"action\":\"x\",\"execution_id\":\"x\"}', 'own_gone', ?2, 0, ?3)",
                    rusqlite::params![session, exe, T0],
                )?;
            }
            Ok(())
        })
        .unwrap();
    let copy = dir.path().join("copy.db");
    store
        .conn()
        .execute("VACUUM INTO ?1", [copy.to_string_lossy()])
        .unwrap();
    let first = pass(store.conn_mut(), &params(), LATER).unwrap();
    let mut again = Store::open(&copy, &ManualClock::new(T0)).unwrap();
    let second = pass(again.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(
        (first.batches, first.scanned, first.recovered.len()),
        (1_050 / BATCH + 1, 1_050, 1_050)
    );
    let order: Vec<&str> = first
        .recovered
        .iter()
        .map(|r| r.execution_id.as_str())
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    let order2: Vec<&str> = second
        .recovered
        .iter()
        .map(|r| r.execution_id.as_str())
        .collect();
    assert_eq!(order, order2);
}

#[test]
fn i14_one_malformed_row_is_quarantined_and_every_other_row_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    // An older, non-STRICT claim table without the phase check.
    store
        .conn()
        .execute_batch(
            "PRAGMA foreign_keys = OFF;
             DROP TABLE session_execution;
             CREATE TABLE session_execution (id TEXT NOT NULL, session_id TEXT NOT NULL
                 REFERENCES session(id) ON DELETE CASCADE, owner_id TEXT NOT NULL,
                 epoch INTEGER NOT NULL DEFAULT 0, assistant_message_id TEXT, phase TEXT NOT NULL,
                 assistant_seq INTEGER NOT NULL DEFAULT -1, time_created INTEGER NOT NULL,
                 expires_at INTEGER NOT NULL, recovery_error TEXT,
                 CONSTRAINT session_execution_pk PRIMARY KEY (id));
             CREATE UNIQUE INDEX session_execution_session_idx ON session_execution (session_id);
             CREATE INDEX session_execution_owner_idx ON session_execution (owner_id);
             CREATE INDEX session_execution_created_idx ON session_execution (time_created, id);
             PRAGMA foreign_keys = ON;",
        )
        .unwrap();
    for i in 0..250 {
        interrupted(&mut store, &format!("ses_{i:03}"), Stage::Tools, T0 + i);
    }
    let bogus = interrupted(&mut store, "ses_bogus", Stage::Tools, T0 + 100);
    let texty = interrupted(&mut store, "ses_text", Stage::Tools, T0 + 200);
    store
        .conn()
        .execute(
            "UPDATE session_execution SET phase = 'bogus' WHERE id = ?1",
            [&bogus],
        )
        .unwrap();
    store
        .conn()
        .execute(
            "UPDATE session_execution SET expires_at = 'soon' WHERE id = ?1",
            [&texty],
        )
        .unwrap();
    let report = pass(store.conn_mut(), &params(), LATER + 1_000).unwrap();
    assert_eq!(report.recovered.len(), 250);
    let mut quarantined: Vec<(String, String)> = report
        .quarantined
        .iter()
        .map(|q| (q.execution_id.clone(), q.reason.clone()))
        .collect();
    quarantined.sort();
    let mut expected = vec![
        (bogus.clone(), "unknown phase \"bogus\"".to_string()),
        (
            texty.clone(),
            "expires_at is not an integer (soon)".to_string(),
        ),
    ];
    expected.sort();
    assert_eq!(quarantined, expected);
    // The rows stay, marked, and are never scanned again.
    let conn = store.conn();
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM session_execution WHERE recovery_error IS NOT NULL"
        ),
        2
    );
    let phase: String = conn
        .query_row(
            "SELECT phase FROM session_execution WHERE id = ?1",
            [&bogus],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(phase, "bogus", "recovery repaired a phase by guessing");
    let again = pass(store.conn_mut(), &params(), LATER + 2_000).unwrap();
    assert_eq!(again.scanned, 0);
}

#[test]
fn i15_recovery_never_relates_rows_of_two_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe_a = interrupted(&mut store, "ses_a", Stage::Streaming, T0);
    let exe_b = interrupted(&mut store, "ses_b", Stage::Streaming, T0 + 1);
    // Claim B names A's assistant.
    store
        .conn()
        .execute(
            "UPDATE session_execution SET assistant_message_id = ?1 WHERE id = ?2",
            [format!("msg_a_{exe_a}"), exe_b.clone()],
        )
        .unwrap();
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(report.recovered.len(), 1);
    assert_eq!(report.quarantined.len(), 1);
    assert_eq!(report.quarantined[0].execution_id, exe_b);
    assert!(
        report.quarantined[0]
            .reason
            .contains("belongs to session ses_a"),
        "{:?}",
        report.quarantined
    );

    // A recovery row whose continuation belongs to another session is quarantined at
    // the wake scan.
    let conn = store.conn();
    conn.execute_batch(&format!(
        "INSERT INTO session_recovery (execution_id, session_id, continuation_message_id, phase, time_created)
         VALUES ('exe_x', 'ses_b', 'inp_rec_exe_x', 'ready', {T0});",
    ))
    .unwrap_err(); // the continuation must exist (foreign key)
    conn.execute_batch(&format!(
        "INSERT INTO session_input (id, session_id, prompt, delivery, admitted_seq, time_created)
             VALUES ('inp_rec_exe_x', 'ses_a', 'p', 'queue', 1000, {T0});
         INSERT INTO session_recovery (execution_id, session_id, continuation_message_id, phase, time_created)
             VALUES ('exe_x', 'ses_b', 'inp_rec_exe_x', 'ready', {T0});",
    ))
    .unwrap();
    let (wake, quarantined) = recovery_wakes(store.conn_mut()).unwrap();
    assert_eq!(quarantined, 1);
    assert_eq!(wake.len(), 1);
    assert_eq!(wake[0].execution_id, exe_a);
    let error: String = store
        .conn()
        .query_row(
            "SELECT recovery_error FROM session_recovery WHERE execution_id = 'exe_x'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        error,
        "continuation inp_rec_exe_x belongs to session ses_a, not ses_b"
    );
}

#[test]
fn r5_8_a_session_recovered_three_times_in_a_row_is_parked() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let mut parked = Vec::new();
    for round in 0..3 {
        let at = T0 + round * 100_000;
        interrupted(&mut store, "ses_1", Stage::Streaming, at);
        let report = pass(store.conn_mut(), &params(), at + LEASE + 1).unwrap();
        parked.push(report.recovered[0].parked);
        // The continuation was never run (the crash repeats before it).
        store
            .conn()
            .execute("UPDATE session_recovery SET wake_pending = 0", [])
            .unwrap();
    }
    assert_eq!(parked, vec![false, false, true]);
    let last = crate::inspect::recoveries(store.conn())
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(last.recovery_error.as_deref(), Some(CRASH_LOOP_ERROR));
    assert!(!last.wake_pending);
}

#[test]
fn r5_8_a_tool_that_kills_steward_every_time_is_parked() {
    // Each time, the step ends normally asking for the tool, and the tool kills the
    // process: a step that ends with `tool-calls` is no progress.
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let mut parked = Vec::new();
    for round in 0..3 {
        let at = T0 + round * 100_000;
        interrupted(&mut store, "ses_1", Stage::ToolRunning, at);
        let report = pass(store.conn_mut(), &params(), at + LEASE + 1).unwrap();
        parked.push(report.recovered[0].parked);
        store
            .conn()
            .execute("UPDATE session_recovery SET wake_pending = 0", [])
            .unwrap();
    }
    assert_eq!(parked, vec![false, false, true]);
}

#[test]
fn r5_8_one_tool_finishing_beside_the_one_that_kills_is_no_progress() {
    // `Tools`: one tool of the step finished, another was running at the crash.
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let mut parked = Vec::new();
    for round in 0..3 {
        let at = T0 + round * 100_000;
        interrupted(&mut store, "ses_1", Stage::Tools, at);
        let report = pass(store.conn_mut(), &params(), at + LEASE + 1).unwrap();
        parked.push(report.recovered[0].parked);
        store
            .conn()
            .execute("UPDATE session_recovery SET wake_pending = 0", [])
            .unwrap();
    }
    assert_eq!(parked, vec![false, false, true]);
}

#[test]
fn r5_8_an_execution_that_reached_its_next_step_made_progress() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let mut parked = Vec::new();
    for round in 0..4 {
        let at = T0 + round * 100_000;
        // Every tool of the first step finished and the second step had begun.
        interrupted(&mut store, "ses_1", Stage::SecondStep, at);
        let report = pass(store.conn_mut(), &params(), at + LEASE + 1).unwrap();
        parked.push(report.recovered[0].parked);
        store
            .conn()
            .execute("UPDATE session_recovery SET wake_pending = 0", [])
            .unwrap();
    }
    assert_eq!(parked, vec![false; 4]);
}

#[test]
fn r5_7_a_wake_whose_continuation_was_already_promoted_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Tools, T0);
    pass(store.conn_mut(), &params(), LATER).unwrap();
    // The two disagree: the continuation is promoted, the wake still pending.
    store
        .conn()
        .execute(
            "UPDATE session_input SET promoted_seq = 999 WHERE id = ?1",
            [ids::continuation_input(&exe)],
        )
        .unwrap();
    let (wake, quarantined) = recovery_wakes(store.conn_mut()).unwrap();
    assert_eq!((wake.len(), quarantined), (0, 1));
    let row = crate::inspect::recoveries(store.conn())
        .unwrap()
        .pop()
        .unwrap();
    assert!(!row.wake_pending);
    assert!(
        row.recovery_error
            .as_deref()
            .is_some_and(|e| e.contains("already promoted")),
        "{row:?}"
    );
}

#[test]
fn r5_2_a_long_pass_judges_each_batch_by_the_time_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    // A full first batch of expired claims, then one claim of a live owner on
    // another host (nothing can prove it dead).
    for i in 0..BATCH {
        interrupted(&mut store, &format!("ses_{i:03}"), Stage::Promoted, T0);
    }
    let live = interrupted(&mut store, "ses_live", Stage::Promoted, T0 + 60_000);
    let mut pass = Pass::begin(store.conn_mut(), params(), &|| T0 + 60_001).unwrap();
    pass.next_batch(store.conn_mut(), &|| T0 + 60_001).unwrap();
    // The first batch took 15 s; meanwhile the live owner renewed its lease.
    let renewed_at = T0 + 75_000;
    store
        .conn()
        .execute(
            "UPDATE session_execution SET expires_at = ?2 WHERE id = ?1",
            rusqlite::params![live, renewed_at + LEASE],
        )
        .unwrap();
    while !pass.is_done() {
        pass.next_batch(store.conn_mut(), &|| renewed_at + 1)
            .unwrap();
    }
    let report = pass.finish(store.conn_mut()).unwrap();
    assert_eq!(
        (report.recovered.len(), report.quarantined.len()),
        (BATCH, 0),
        "{:?}",
        report.quarantined
    );
    assert_eq!(
        count(
            store.conn(),
            "SELECT count(*) FROM session_execution WHERE recovery_error IS NULL"
        ),
        1
    );
}

#[test]
fn r5_10_the_leftover_processes_of_a_quarantined_claim_are_stopped() {
    let (mut leftover, identity) = crate::testing::leftover_wrapper("sleep 300");
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::ToolsWithProcess(identity), T0);
    // The clock went back: the claim is quarantined, not reconciled.
    let report = pass(store.conn_mut(), &params(), T0 - 3_600_000).unwrap();
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(report.quarantined[0].execution_id, exe);
    assert_eq!(report.quarantined[0].stopped_processes.len(), 1);
    assert!(
        !leftover.wait().unwrap().success(),
        "the leftover still runs"
    );
}

#[test]
fn r5_7_a_wake_that_keeps_failing_is_quarantined_at_five_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Promoted, T0);
    pass(store.conn_mut(), &params(), LATER).unwrap();
    let input = ids::continuation_input(&exe);
    for attempt in 1..=5 {
        let (wake, quarantined) = recovery_wakes(store.conn_mut()).unwrap();
        assert_eq!((wake.len(), quarantined), (1, 0), "attempt {attempt}");
        store.write(|tx| wakes::count_attempt(tx, &input)).unwrap();
    }
    let (wake, quarantined) = recovery_wakes(store.conn_mut()).unwrap();
    assert_eq!((wake.len(), quarantined), (0, 1));
    let row = crate::inspect::recoveries(store.conn())
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(row.wake_attempts, 5);
    assert!(row.recovery_error.unwrap().contains("attempted 5 times"));
}

#[test]
fn r5_2_a_claim_far_in_the_future_is_quarantined_unless_its_owner_is_proven_dead() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Promoted, T0);
    // The clock went back an hour after the claim was written.
    let report = pass(store.conn_mut(), &params(), T0 - 3_600_000).unwrap();
    assert_eq!(report.quarantined.len(), 1);
    assert!(
        report.quarantined[0]
            .reason
            .contains("the clock went backwards"),
        "{:?}",
        report.quarantined
    );
    assert_eq!(report.quarantined[0].execution_id, exe);
}

#[test]
fn i7_recovery_never_signals_a_process_whose_identity_does_not_match() {
    let mut unrelated = std::process::Command::new("sleep");
    std::os::unix::process::CommandExt::process_group(&mut unrelated, 0);
    let mut unrelated = unrelated.arg("300").spawn().unwrap();
    let mut identity = crate::tools::process::identify(unrelated.id() as i32).unwrap();
    identity.start_time += 1; // the recorded pid now belongs to someone else
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    interrupted(&mut store, "ses_1", Stage::ToolsWithProcess(identity), T0);
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(report.recovered[0].stopped_processes, vec![]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        unrelated.try_wait().unwrap(),
        None,
        "recovery signalled an unrelated process"
    );
    unrelated.kill().unwrap();
    unrelated.wait().unwrap();
}

#[test]
fn i7_recovery_stops_a_leftover_group_whose_identity_matches() {
    let (mut leftover, identity) = crate::testing::leftover_wrapper("sleep 300");
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(
        &mut store,
        "ses_1",
        Stage::ToolsWithProcess(identity.clone()),
        T0,
    );
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(
        report.recovered[0].stopped_processes,
        vec![StoppedProcess {
            call_id: "running".into(),
            pid: identity.pid,
            pgid: identity.pgid,
        }]
    );
    let status = leftover.wait().unwrap();
    assert!(!status.success(), "the leftover was not killed");
    let a = rows::message(store.conn(), &format!("msg_a_{exe}"))
        .unwrap()
        .unwrap();
    let running = a
        .data
        .as_assistant()
        .unwrap()
        .tools()
        .find(|t| t.call_id == "running")
        .unwrap()
        .clone();
    assert!(
        running
            .state
            .error
            .unwrap()
            .ends_with("recovery stopped them")
    );
}

#[test]
fn i14_a_row_that_fails_midway_rolls_back_alone_and_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let good: Vec<String> = (0..5)
        .map(|i| interrupted(&mut store, &format!("ses_{i}"), Stage::Tools, T0 + i))
        .collect();
    let bad = interrupted(&mut store, "ses_bad", Stage::Tools, T0 + 2);
    // Its continuation id is already taken, so its reconciliation fails halfway
    // (after the takeover and the step.recovered event).
    store
        .conn()
        .execute(
            "INSERT INTO session_input (id, session_id, prompt, delivery, admitted_seq, time_created)
             VALUES (?1, 'ses_bad', 'squatter', 'admit', 9999, 0)",
            [ids::continuation_input(&bad)],
        )
        .unwrap();
    let report = pass(store.conn_mut(), &params(), LATER + 10).unwrap();
    let mut recovered: Vec<String> = report
        .recovered
        .iter()
        .map(|r| r.execution_id.clone())
        .collect();
    recovered.sort();
    let mut expected = good.clone();
    expected.sort();
    assert_eq!(recovered, expected);
    assert_eq!(report.quarantined.len(), 1);
    assert_eq!(report.quarantined[0].execution_id, bad);
    assert!(
        report.quarantined[0]
            .reason
            .starts_with("recovery failed: "),
        "{:?}",
        report.quarantined
    );
    // Nothing of the failed reconciliation stayed.
    let conn = store.conn();
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM event WHERE aggregate_id = 'ses_bad' AND type = 'step.recovered'"
        ),
        0
    );
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM session_recovery WHERE session_id = 'ses_bad'"
        ),
        0
    );
    assert_eq!(count(conn, "SELECT count(*) FROM session_recovery"), 5);
}

#[test]
fn r5_3_an_execution_that_wrote_nothing_is_discarded_not_reconciled() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    // A wake's execution died right after acquiring its claim.
    store
        .write(|tx| {
            append_unowned(
                tx,
                "ses_1",
                T0,
                Event::SessionCreated {
                    title: "t".into(),
                    directory: "/".into(),
                },
            )?;
            claim::acquire(tx, "ses_1", "own_gone", T0, LEASE)
        })
        .unwrap();
    let events_before = count(store.conn(), "SELECT count(*) FROM event");
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!((report.discarded_empty, report.recovered.len()), (1, 0));
    let conn = store.conn();
    assert_eq!(count(conn, "SELECT count(*) FROM session_execution"), 0);
    assert_eq!(count(conn, "SELECT count(*) FROM event"), events_before);
    assert_eq!(count(conn, "SELECT count(*) FROM session_recovery"), 0);
}

#[test]
fn i1_a_claim_ahead_by_more_than_a_lease_of_a_live_owner_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let owner = store
        .write(|tx| {
            crate::owner::Owner::register(
                tx,
                &crate::owner::Owners::new(dir.path().join("owners")),
                T0,
            )
        })
        .unwrap();
    let exe = interrupted(&mut store, "ses_1", Stage::Tools, T0);
    store
        .conn()
        .execute(
            "UPDATE session_execution SET owner_id = ?1 WHERE id = ?2",
            [&owner.id, &exe],
        )
        .unwrap();
    // Our clock went back an hour: the live owner's lease now lies far ahead.
    let p = Params {
        owners: crate::owner::Owners::new(dir.path().join("owners")),
        ..params()
    };
    let report = pass(store.conn_mut(), &p, T0 - 3_600_000).unwrap();
    assert_eq!(
        (
            report.recovered.len(),
            report.quarantined.len(),
            report.skipped_live
        ),
        (0, 0, 1)
    );
    assert_eq!(
        count(
            store.conn(),
            "SELECT count(*) FROM session_execution WHERE recovery_error IS NULL"
        ),
        1
    );
    drop(owner);
}

#[test]
fn i7_processes_stopped_in_a_rolled_back_attempt_are_still_reported() {
    let (mut leftover, identity) = crate::testing::leftover_wrapper("sleep 300");
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let with_process = interrupted(
        &mut store,
        "ses_a",
        Stage::ToolsWithProcess(identity.clone()),
        T0,
    );
    // A second row of the batch fails halfway, so the first attempt rolls back after
    // the leftover group was already stopped.
    let failing = interrupted(&mut store, "ses_b", Stage::Tools, T0 + 1);
    store
        .conn()
        .execute(
            "INSERT INTO session_input (id, session_id, prompt, delivery, admitted_seq, time_created)
             VALUES (?1, 'ses_b', 'squatter', 'admit', 9999, 0)",
            [ids::continuation_input(&failing)],
        )
        .unwrap();
    let report = pass(store.conn_mut(), &params(), LATER + 10).unwrap();
    let recovered = report
        .recovered
        .iter()
        .find(|r| r.execution_id == with_process)
        .unwrap();
    assert_eq!(recovered.stopped_processes.len(), 1, "{report:?}");
    assert!(!leftover.wait().unwrap().success());
}

#[test]
fn r5_10_discarding_a_quarantined_claim_stops_its_leftover_processes() {
    let (mut leftover, identity) = crate::testing::leftover_wrapper("sleep 300");
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::ToolsWithProcess(identity), T0);
    store
        .conn()
        .execute(
            "UPDATE session_execution SET recovery_error = 'looked odd' WHERE id = ?1",
            [&exe],
        )
        .unwrap();
    store
        .write(|tx| crate::inspector::discard(tx, &exe, LATER))
        .unwrap();
    assert!(
        !leftover.wait().unwrap().success(),
        "the leftover still runs"
    );
    let a = rows::message(store.conn(), &format!("msg_a_{exe}"))
        .unwrap()
        .unwrap();
    let running = a
        .data
        .as_assistant()
        .unwrap()
        .tools()
        .find(|t| t.call_id == "running")
        .unwrap()
        .clone();
    assert!(
        running
            .state
            .error
            .unwrap()
            .ends_with("recovery stopped them")
    );
}

#[test]
fn r5_11_a_discarded_wake_promotes_nothing_even_when_already_started() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Tools, T0);
    pass(store.conn_mut(), &params(), LATER).unwrap();
    let input = ids::continuation_input(&exe);
    let scope = crate::store::sessions::Scope::continuation(input.clone());
    let promotable = |store: &Store| {
        crate::store::sessions::promotable(store.conn(), "ses_1", &scope, true)
            .unwrap()
            .len()
    };
    assert_eq!(promotable(&store), 1);
    // The wake was started; the user discards it before it promotes anything.
    store
        .write(|tx| crate::inspector::discard(tx, &exe, LATER))
        .unwrap();
    assert_eq!(promotable(&store), 0);
}

#[test]
fn r5_11_a_wake_that_already_ran_cannot_be_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Tools, T0);
    pass(store.conn_mut(), &params(), LATER).unwrap();
    store
        .conn()
        .execute(
            "UPDATE session_input SET promoted_seq = 99 WHERE id = ?1",
            [ids::continuation_input(&exe)],
        )
        .unwrap();
    let refused = store
        .write(|tx| crate::inspector::discard(tx, &exe, LATER))
        .unwrap_err();
    assert!(
        refused.to_string().contains("already promoted"),
        "{refused}"
    );
}

#[test]
fn r5_11_a_quarantined_claim_of_a_missing_session_can_be_discarded_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    store
        .conn()
        .execute_batch(
            "PRAGMA foreign_keys = OFF;
             INSERT INTO session_execution (id, session_id, owner_id, phase, time_created, expires_at, recovery_error)
                 VALUES ('exe_ghost', 'ses_ghost', 'own_x', 'ready', 0, 0, 'session ses_ghost does not exist');
             PRAGMA foreign_keys = ON;",
        )
        .unwrap();
    let retry = store
        .write(|tx| crate::inspector::retry_claim(tx, "exe_ghost", LATER))
        .unwrap_err();
    assert!(retry.to_string().contains("discard it"), "{retry}");
    store
        .write(|tx| crate::inspector::discard(tx, "exe_ghost", LATER))
        .unwrap();
    assert_eq!(
        count(store.conn(), "SELECT count(*) FROM session_execution"),
        0
    );
}

#[test]
fn i14_non_integer_columns_are_quarantined_or_reported_never_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(&mut store, "ses_1", Stage::Tools, T0);
    interrupted(&mut store, "ses_2", Stage::Tools, T0);
    pass(store.conn_mut(), &params(), LATER).unwrap();
    // A non-STRICT copy of the table would let text in; STRICT tables refuse it, so
    // the test rebuilds the column's table without STRICT.
    store
        .conn()
        .execute_batch(&format!(
            "PRAGMA foreign_keys = OFF; PRAGMA writable_schema = OFF;
             CREATE TABLE r2 AS SELECT * FROM session_recovery;
             DROP TABLE session_recovery;
             CREATE TABLE session_recovery (execution_id TEXT PRIMARY KEY NOT NULL, session_id TEXT NOT NULL,
                 assistant_message_id TEXT, continuation_message_id TEXT NOT NULL, phase TEXT NOT NULL,
                 wake_pending INTEGER NOT NULL DEFAULT 1, wake_attempts INTEGER NOT NULL DEFAULT 0,
                 recovery_error TEXT, time_created INTEGER NOT NULL);
             INSERT INTO session_recovery SELECT * FROM r2; DROP TABLE r2;
             UPDATE session_recovery SET wake_attempts = 'bad' WHERE execution_id = '{exe}';"
        ))
        .unwrap();
    let violations = crate::invariants::check(store.conn(), LATER).unwrap();
    assert!(
        violations
            .iter()
            .any(|v| v.rule == "types" && v.detail.contains("wake_attempts")),
        "{violations:?}"
    );
    let (wake, quarantined) = recovery_wakes(store.conn_mut()).unwrap();
    assert_eq!((wake.len(), quarantined), (1, 1));
}

#[test]
fn r5_7_a_wake_whose_continuation_does_not_decode_is_quarantined_and_the_others_wake() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let good: Vec<String> = (0..3)
        .map(|i| interrupted(&mut store, &format!("ses_{i}"), Stage::Tools, T0 + i))
        .collect();
    let bad = interrupted(&mut store, "ses_bad", Stage::Tools, T0 + 1);
    pass(store.conn_mut(), &params(), LATER + 10).unwrap();
    // A damaged file: the CHECK constraint did not hold the row back.
    store
        .conn()
        .execute_batch(&format!(
            "PRAGMA ignore_check_constraints = ON;
             UPDATE session_input SET delivery = 'bogus' WHERE id = '{}';
             PRAGMA ignore_check_constraints = OFF;",
            ids::continuation_input(&bad)
        ))
        .unwrap();
    let (wake, quarantined) = recovery_wakes(store.conn_mut()).unwrap();
    let mut woken: Vec<String> = wake.into_iter().map(|w| w.execution_id).collect();
    let mut good = good;
    good.sort();
    woken.sort();
    assert_eq!((woken, quarantined), (good, 1));
    let row = crate::inspect::recoveries_of(store.conn(), &bad)
        .unwrap()
        .unwrap();
    assert!(!row.wake_pending);
    assert_eq!(
        row.recovery_error,
        Some(format!(
            "the wake cannot be checked: corrupt data: input {}: unknown delivery bogus",
            ids::continuation_input(&bad)
        ))
    );
}

#[test]
fn r5_2_a_full_disk_stops_the_pass_with_its_cause_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    for i in 0..50 {
        interrupted(&mut store, &format!("ses_{i}"), Stage::Tools, T0);
    }
    let before = count(store.conn(), "SELECT count(*) FROM event");
    let pages = count(store.conn(), "PRAGMA page_count");
    store.set_max_pages(pages as u64).unwrap();
    let error = pass(store.conn_mut(), &params(), LATER).unwrap_err();
    assert!(matches!(error, Error::StoreFull(_)), "{error:?}");
    assert!(
        error.to_string().starts_with("the disk is full: "),
        "{error}"
    );
    // Nothing half-done: no claim quarantined for the disk's sake, nothing appended.
    let conn = store.conn();
    assert_eq!(count(conn, "SELECT count(*) FROM event"), before);
    assert_eq!(
        count(
            conn,
            "SELECT count(*) FROM session_execution WHERE recovery_error IS NULL"
        ),
        50
    );
    // With room again, the next pass completes everything.
    store.set_max_pages(1 << 30).unwrap();
    let report = pass(store.conn_mut(), &params(), LATER + 1).unwrap();
    assert_eq!((report.recovered.len(), report.quarantined.len()), (50, 0));
}

#[test]
fn r5_10_a_pass_that_fails_on_a_full_disk_kills_no_leftover_and_the_next_one_reports_it() {
    let (mut leftover, identity) = crate::testing::leftover_wrapper("sleep 300");
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let exe = interrupted(
        &mut store,
        "ses_a",
        Stage::ToolsWithProcess(identity.clone()),
        T0,
    );
    for i in 0..50 {
        interrupted(&mut store, &format!("ses_{i}"), Stage::Tools, T0);
    }
    let pages = count(store.conn(), "PRAGMA page_count");
    store.set_max_pages(pages as u64).unwrap();
    let error = pass(store.conn_mut(), &params(), LATER).unwrap_err();
    assert!(matches!(error, Error::StoreFull(_)), "{error:?}");
    // Nothing recorded says "recovery stopped them", so nothing was stopped.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        leftover.try_wait().unwrap(),
        None,
        "killed before the commit"
    );
    store.set_max_pages(1 << 30).unwrap();
    let report = pass(store.conn_mut(), &params(), LATER + 1).unwrap();
    let recovered = report
        .recovered
        .iter()
        .find(|r| r.execution_id == exe)
        .unwrap();
    assert_eq!(
        recovered.stopped_processes,
        vec![StoppedProcess {
            call_id: "running".into(),
            pid: identity.pid,
            pgid: identity.pgid,
        }]
    );
    assert!(!leftover.wait().unwrap().success());
}

#[test]
fn i14_a_claim_that_cannot_even_be_taken_over_is_quarantined_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let stuck = interrupted(&mut store, "ses_stuck", Stage::Tools, T0);
    let good = interrupted(&mut store, "ses_good", Stage::Tools, T0);
    // `epoch + 1` cannot be stored: the takeover itself fails on this row.
    store
        .conn()
        .execute(
            "UPDATE session_execution SET epoch = 9223372036854775807 WHERE id = ?1",
            [&stuck],
        )
        .unwrap();
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(
        report
            .recovered
            .iter()
            .map(|r| r.execution_id.clone())
            .collect::<Vec<_>>(),
        vec![good]
    );
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(report.quarantined[0].execution_id, stuck);
    // Quarantined rows are never scanned again: the next pass has nothing to do.
    let again = pass(store.conn_mut(), &params(), LATER + 1).unwrap();
    assert_eq!((again.scanned, again.skipped_live), (0, 0));
}

#[test]
fn r5_10_the_leftover_processes_of_a_claim_quarantined_after_a_failure_are_stopped() {
    let (mut leftover, identity) = crate::testing::leftover_wrapper("sleep 300");
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    let failing = interrupted(
        &mut store,
        "ses_a",
        Stage::ToolsWithProcess(identity.clone()),
        T0,
    );
    // Its continuation id is taken: its reconciliation fails halfway.
    store
        .conn()
        .execute(
            "INSERT INTO session_input (id, session_id, prompt, delivery, admitted_seq, time_created)
             VALUES (?1, 'ses_a', 'squatter', 'admit', 9999, 0)",
            [ids::continuation_input(&failing)],
        )
        .unwrap();
    let report = pass(store.conn_mut(), &params(), LATER).unwrap();
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(
        report.quarantined[0].stopped_processes,
        vec![StoppedProcess {
            call_id: "running".into(),
            pid: identity.pid,
            pgid: identity.pgid,
        }]
    );
    assert!(
        !leftover.wait().unwrap().success(),
        "the leftover still runs"
    );
}

#[test]
fn r4_11_an_owner_of_another_boot_is_recovered_by_time_only_and_then_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store(&dir);
    // A row copied here from another machine (or left by a power cut): its lock
    // file here is free, but a lock proves nothing beyond its own boot.
    std::fs::write(dir.path().join("own_away.lock"), b"").unwrap();
    store
        .conn()
        .execute(
            "INSERT INTO owner VALUES ('own_away', 1, ?1, ?2, NULL, 'another-machine', 'another-boot')",
            rusqlite::params![crate::owner::hostname(), T0],
        )
        .unwrap();
    let exe = interrupted(&mut store, "ses_1", Stage::Tools, T0);
    store
        .conn()
        .execute(
            "UPDATE session_execution SET owner_id = 'own_away' WHERE id = ?1",
            [&exe],
        )
        .unwrap();
    let p = Params {
        owners: crate::owner::Owners::new(dir.path()),
        ..params()
    };
    // Within the lease nothing is taken: the owner may be a live clone elsewhere.
    let report = pass(store.conn_mut(), &p, T0 + 10).unwrap();
    assert_eq!((report.recovered.len(), report.dead_owners.len()), (0, 0));
    // Once the lease ran out, its claim is recovered and the row forgotten.
    let report = pass(store.conn_mut(), &p, LATER).unwrap();
    assert_eq!(report.recovered.len(), 1);
    assert_eq!(count(store.conn(), "SELECT count(*) FROM owner"), 0);
    assert!(!dir.path().join("own_away.lock").exists());
}
